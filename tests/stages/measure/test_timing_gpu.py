"""The timer on a GPU (skipped without one): host time spent issuing a call's launches is covered up to COVER_US
and counted beyond it. Margins are wide (these check what is timed, not how fast anything is)."""

import time

import pytest
import torch

from kernelflow.stages.measure.timing import COVER_US, Timer, median_ci

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lead runs it on the H200)")


def _late_launch(host_us: float):
    x = torch.zeros(1024, device="cuda") if torch.cuda.is_available() else None

    def call() -> torch.Tensor:
        until = time.perf_counter_ns() + host_us * 1e3
        while time.perf_counter_ns() < until:  # the host's own work before the launch (Python, dispatch)
            pass
        return x.add_(1)
    return call


@needs_gpu
def test_host_latency_under_the_cover_is_not_timed():
    timer, call = Timer("cuda"), _late_launch(0.6 * COVER_US)
    med = median_ci([timer.time_us(call, [])[0] for _ in range(50)])[0]
    assert med < 0.2 * COVER_US, f"{med:.1f} us for a one-microsecond kernel launched {0.6 * COVER_US:.0f} us late"


@needs_gpu
def test_the_host_time_of_calls_issued_back_to_back_is_measured():
    """A call that spends 0.6 COVER_US on the host before a one-microsecond kernel: back to back it runs at the host's
    speed, and the timer says so (its device time alone is well under it)."""
    timer, call = Timer("cuda"), _late_launch(0.6 * COVER_US)
    host = timer.back_to_back_us(call, [])
    assert host is not None and 0.6 * COVER_US <= host < 0.6 * COVER_US + 100, host
    assert Timer("cpu").back_to_back_us(call, []) is None


@needs_gpu
def test_host_latency_beyond_the_cover_is_timed():
    timer, call = Timer("cuda"), _late_launch(4 * COVER_US)
    med = median_ci([timer.time_us(call, [])[0] for _ in range(20)])[0]
    assert med > 2 * COVER_US, f"{med:.1f} us for a call whose launch waited {4 * COVER_US:.0f} us on the host"
