"""Timing one call honestly: device sync, L2 flush, CUDA events; medians with order-statistic intervals.

The primitives the timer uses (the clock, CUDA events, device sync) are bound when this module is imported, before
any candidate is: a candidate that replaces time.perf_counter_ns or torch.cuda.Event afterwards changes nothing
here (and stages/harness/integrity.py fails it for trying). On CUDA each call also records an event after a device-wide
sync: the gap from the call's end event to it is work the call left running on other streams, which the events
around the call do not see (`left_running`). Between the flush and the start event the device spins for COVER_US
(torch.cuda._sleep), so that the host has queued the call's launches before the start event is reached: without it
the device idles while the host issues the launch, and that idle time, which grows when the harness's own work
just before the call has cooled the CPU's caches, would be timed (docs/METHOD.md, "Timed"). Host time per call
beyond the cover still counts. The host's time per call issued back to back, as a model's next layers would issue
it, is measured apart (`back_to_back_us`): a call whose host time there exceeds its device time runs at the host's
speed, whatever its kernels take. (A call issued right after the timer's sync, flush and spin takes the host 2-4x
longer; that cold time is not what a model pays.) Persisting L2 (a set-aside that survives the flush) is reset
before timing and checked after the candidate's calls (`persisting_l2_bytes`).

Before each timed call the benchmark queues the same call untimed for SUSTAIN_US of device time (`lead_calls`,
`sustain`), so that the call meets the clocks of sustained load: under a board power limit a compute-bound kernel's
SM clock falls within ~100-150 ms of back-to-back calls, and how far it falls depends on how busy the device was just
before; a memory-bound kernel times the same with or without the lead-in. At most MAX_LEAD calls: a call of a few
microseconds heats nothing. Where the power cap is on, SUSTAIN_US is too short: the power controller's state
outlasts it, and the benchmark interleaves its contenders, so a timed call would meet the state its neighbour left
and the contenders would be timed at one shared clock. So where NVML reports the cap (or cannot be read), each
lead-in is SETTLE_US instead (`settle`), longer than the controller takes to settle after a change of load, and each
contender is timed at its own sustained state. A procedure that idles the device between calls (KernelBench's flush
and host time) lets a capped clock rise, so it reads such kernels faster, eager as much as the candidate, and the
speedups still agree (docs/METHOD.md; measured: docs/LOG.md). Right after each timed call the timer reads NVML's SM
clock and whether the software power cap is lowering it (`last_clock`): the benchmark records their median and share
per contender, and a reading of the cap is what turns `settle` on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch

_now_ns = time.perf_counter_ns
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_current_stream = torch.cuda.current_stream
_sleep = torch.cuda._sleep

COVER_US = 300.0  # device time queued ahead of the start event: above the harness's launch path (docs/LOG.md)
BACK_TO_BACK = 20  # calls per host-time measurement (back_to_back_us)
SUSTAIN_US = 20_000.0  # device time of the untimed calls queued before each timed call (module doc)
MAX_LEAD = 256  # ... at most this many calls (module doc)
SETTLE_US = 150_000.0  # ... where the power cap is on: past the ~100-150 ms the clock takes to settle (module doc)
MAX_SETTLE_LEAD = 1024  # ... at most this many calls: a call the cap holds is no short call
TAIL_SLACK_US = 50.0  # a device sync's own latency is well below this
CUDA_LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize
SW_POWER_CAP = 0x4  # NVML clock-event reason: the SM clock lowered to hold the board's power limit


class Timer:
    """Times single calls on one device. On CUDA: all streams synchronized, L2 flushed, events around the call."""

    def __init__(self, device: str):
        self.device = device
        self.flush_buffer: torch.Tensor | None = None
        self.l2_bytes = 0
        self.last_tail_us: float | None = None  # CUDA: work the last call left on other streams, microseconds
        self.cover_cycles = 0
        self.last_clock: tuple[int, bool] | None = None  # CUDA: (SM MHz, power-capped) read after the last call
        self._clock = nvml_clock() if device == "cuda" else None
        if device == "cuda":
            self.l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            self.flush_buffer = torch.empty(max(2 * self.l2_bytes, 64 << 20) // 4, dtype=torch.float32, device="cuda")
            self.cover_cycles = int(COVER_US * _cycles_per_us())

    @property
    def flushes_l2(self) -> bool:
        return self.flush_buffer is not None

    def time_us(self, fn: Callable[..., Any], args: list[Any]) -> tuple[float, Any]:
        if self.device != "cuda":
            t0 = _now_ns()
            out = fn(*args)
            return (_now_ns() - t0) / 1e3, out
        assert self.flush_buffer is not None
        _synchronize()
        self.flush_buffer.zero_()  # evicts inputs and outputs of the previous call from L2
        start, end, after = (_Event(enable_timing=True) for _ in range(3))
        stream = _current_stream()
        _sleep(self.cover_cycles)  # the host queues the call's launches while the device spins: see COVER_US
        _record(start, stream)
        out = fn(*args)
        _record(end, stream)
        _synchronize()  # device-wide: work the call left on other streams is waited for too
        _record(after, stream)
        _synchronize()
        self.last_tail_us = _elapsed(end, after) * 1e3
        self.last_clock = self._read_clock()
        return _elapsed(start, end) * 1e3, out

    def _read_clock(self) -> tuple[int, bool] | None:
        try:
            return self._clock() if self._clock else None
        except Exception:  # NVML failing mid-run: not read, as without NVML
            return None

    @property
    def reads_clock(self) -> bool:
        """Whether NVML's clock and power-cap reading works here (`last_clock` is read after each timed call)."""
        return self._clock is not None

    def lead_calls(self, device_us: float, settle: bool = False) -> int:
        """How many untimed calls of a call taking `device_us` make SUSTAIN_US of device time before each timed one
        (SETTLE_US where the power cap is on, `settle`): at least 1, at most MAX_LEAD (MAX_SETTLE_LEAD); 0 on a CPU,
        which has no power state to reach."""
        if self.device != "cuda":
            return 0
        total, most = (SETTLE_US, MAX_SETTLE_LEAD) if settle else (SUSTAIN_US, MAX_LEAD)
        return max(1, min(most, math.ceil(total / max(device_us, 1.0))))

    def sustain(self, fn: Callable[..., Any], args: list[Any], calls: int) -> None:
        """`calls` untimed calls issued back to back, then a device-wide sync (module doc). The sync comes before the
        harness touches memory again: work a call left on a side stream can still be writing into memory its outputs
        gave back to the allocator."""
        for _ in range(calls):
            fn(*args)
        if self.device == "cuda":
            _synchronize()

    def back_to_back_us(self, fn: Callable[..., Any], args: list[Any], calls: int = BACK_TO_BACK) -> float | None:
        """The host's time per call over `calls` calls issued back to back after one sync, as a model issues its
        layers: the host path alone while the device keeps up, plus any wait the call itself makes for the device
        (a sync inside it). None on a CPU, where every time is host time."""
        if self.device != "cuda":
            return None
        _synchronize()
        t0 = _now_ns()
        for _ in range(calls):
            fn(*args)
        t1 = _now_ns()
        _synchronize()
        return (t1 - t0) / 1e3 / calls


def _cycles_per_us() -> float:
    """The spin kernel's clock rate, measured (the second of two runs: the first may find the clocks idle)."""
    stream, cycles = _current_stream(), 1 << 21
    for _ in range(2):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _synchronize()
        _record(start, stream)
        _sleep(cycles)
        _record(end, stream)
        _synchronize()
    return cycles / (_elapsed(start, end) * 1e3)


def nvml_clock(nvml: Any = None) -> Callable[[], tuple[int, bool]] | None:
    """A reader of (SM clock in MHz, software power cap active) for the current device through NVML (`nvml`: the
    pynvml module, for tests), or None where NVML is missing or cannot read them. Informational: the guard does not
    watch pynvml, so no verdict and no time rests on what it reads."""
    try:
        nvml = nvml or importlib.import_module("pynvml")  # nvidia-ml-py, on GPU workers
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        clock, sm = nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons

        def read() -> tuple[int, bool]:
            return int(clock(handle, sm)), bool(reasons(handle) & SW_POWER_CAP)
        read()
        return read
    except Exception:  # no NVML, or a device it cannot read: None (not measured)
        return None


def clock_summary(readings: list[tuple[int, bool]]) -> tuple[float | None, float | None]:
    """(median SM MHz, share of readings with the power cap on) over a contender's timed calls; Nones for none."""
    if not readings:
        return None, None
    return median_ci([float(mhz) for mhz, _ in readings])[0], sum(capped for _, capped in readings) / len(readings)


def left_running(times_us: list[float], tails_us: list[float], baseline_tails_us: list[float]) -> float | None:
    """The median time a contender's calls left work running after their end event, when it exceeds what a device
    sync costs (the larger of TAIL_SLACK_US and 3x a baseline's median tail, plus a tenth of the call); else None."""
    if not tails_us:
        return None
    slack = max(TAIL_SLACK_US, 3 * median_ci(baseline_tails_us)[0] if baseline_tails_us else 0.0)
    tail = median_ci(tails_us)[0]
    return tail if tail > slack + 0.1 * median_ci(times_us)[0] else None


_runtime: list[Any] = []


def cuda_runtime() -> Any:
    """The CUDA runtime library torch loaded (from /proc/self/maps), else the one the loader finds, else None (no
    GPU in use)."""
    if _runtime or not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return _runtime[0] if _runtime else None
    try:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps if "libcudart" in line), None)
    except OSError:
        path = None
    path = path or ctypes.util.find_library("cudart")
    if path:
        _runtime.append(ctypes.CDLL(path))
    return _runtime[0] if _runtime else None


def persisting_l2_bytes(runtime: Any = None) -> int | None:
    """The device's persisting-L2 set-aside in bytes (0 unless someone set it); None when it cannot be read."""
    runtime = runtime or cuda_runtime()
    if runtime is None:
        return None
    value = ctypes.c_size_t(0)
    if runtime.cudaDeviceGetLimit(ctypes.byref(value), CUDA_LIMIT_PERSISTING_L2) != 0:
        return None
    return value.value


def reset_persisting_l2(runtime: Any = None) -> None:
    """No set-aside for persisting L2, and no lines left marked persisting (a no-op without a CUDA runtime)."""
    runtime = runtime or cuda_runtime()
    if runtime is not None:
        runtime.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        runtime.cudaCtxResetPersistingL2Cache()


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
