"""Timing one call honestly: device sync, L2 flush, CUDA events; medians with order-statistic intervals."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch


class Timer:
    """Times single calls on one device. On CUDA: all streams synchronized, L2 flushed, events around the call."""

    def __init__(self, device: str):
        self.device = device
        self.flush_buffer: torch.Tensor | None = None
        self.l2_bytes = 0
        if device == "cuda":
            self.l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            self.flush_buffer = torch.empty(max(2 * self.l2_bytes, 64 << 20) // 4, dtype=torch.float32, device="cuda")

    @property
    def flushes_l2(self) -> bool:
        return self.flush_buffer is not None

    def time_us(self, fn: Callable[..., Any], args: list[Any]) -> tuple[float, Any]:
        if self.device != "cuda":
            t0 = time.perf_counter_ns()
            out = fn(*args)
            return (time.perf_counter_ns() - t0) / 1e3, out
        assert self.flush_buffer is not None
        torch.cuda.synchronize()
        self.flush_buffer.zero_()  # evicts inputs and outputs of the previous call from L2
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn(*args)
        end.record()
        torch.cuda.synchronize()  # device-wide: work the call left on other streams is waited for too
        return start.elapsed_time(end) * 1e3, out


def median_ci(samples: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """Median and a distribution-free 95% interval from order statistics (binomial approximation)."""
    xs = sorted(samples)
    n = len(xs)
    med = xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return med, xs[lo], xs[hi]


def rel_width(samples: list[float]) -> float:
    med, lo, hi = median_ci(samples)
    return (hi - lo) / med if med > 0 else math.inf
