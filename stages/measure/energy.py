"""Energy per call of a candidate on CUDA, from NVML (used by the profile stage, stages/profile.py).

NVML's total-energy counter (millijoules since driver load) is read after a synchronize before and after a loop
of `block` (the request's `energy_calls`) calls, repeated in blocks of `block` until the loop spans ENERGY_MIN_S
(the counter is updated a few times per second, so a shorter window reads noise); J/call = delta / calls. No L2
flush in this loop (flushing would cost energy of its own). It is board energy: idle power during the loop is
included. NVML's device index is taken to be CUDA's (as stages/measure/provenance.py does). No NVML: None, and why.
Readings on the target GPU: docs/LOG.md.
"""

from __future__ import annotations

import time
from typing import Any

import torch

ENERGY_MIN_S = 1.0  # the energy loop runs blocks of energy_calls calls until it spans at least this long


def j_per_call(new: torch.nn.Module, inputs: list[Any], block: int) -> tuple[float | None, str]:
    """(J per call or None, a note saying how it was measured or why not); see module doc."""
    try:
        import pynvml  # nvidia-ml-py; present on GPU workers

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        torch.cuda.synchronize()
        before = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # millijoules
    except Exception as e:  # NVML missing or the counter unsupported: not measured
        return None, f"energy not measured: NVML total-energy counter unavailable ({type(e).__name__}: {e})"
    calls, started = 0, time.perf_counter()
    while calls == 0 or time.perf_counter() - started < ENERGY_MIN_S:
        for _ in range(block):
            new(*inputs)
        calls += block
        torch.cuda.synchronize()
    spent_s = time.perf_counter() - started
    delta_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - before
    if delta_mj <= 0:
        return None, f"energy not measured: the NVML counter did not advance over {calls} calls ({spent_s:.2f} s)"
    return delta_mj / 1e3 / calls, f"energy over {calls} calls in {spent_s:.2f} s ({delta_mj / 1e3 / spent_s:.0f} W)"
