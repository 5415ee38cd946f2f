"""What a run checks and times unless told otherwise: one rule for the optimize flow, the CLI and the scripts."""

from __future__ import annotations

import math
import os

from kernelflow.stages.contracts import Baseline, Device, Problem, SizeSet
from kernelflow.stages.errors import KernelflowError

TIMING_BUDGET_ENV = "KERNELFLOW_TIMING_BUDGET_S"


def timed_sizes(problem: Problem, device: Device) -> SizeSet:
    """The workloads timed: the GPU shapes on a GPU, or where the problem declares no CPU shapes."""
    return "gpu" if device == "cuda" or not problem.cpu_workloads else "cpu"


def verified_sizes(problem: Problem, device: Device, timed: SizeSet) -> list[SizeSet]:
    """The workloads verified: on a GPU the awkward CPU shapes too (run on the GPU), then the timed ones."""
    return ["cpu", "gpu"] if device == "cuda" and problem.cpu_workloads else [timed]


def baselines(device: Device) -> list[Baseline]:
    """Eager always; torch.compile on a GPU (on a CPU its inductor C++ build costs more than it tells)."""
    return ["eager", "compile"] if device == "cuda" else ["eager"]


def timing_budget_s(device: Device) -> float:
    """Seconds of timing per workload in one benchmark call, at most (the timing stops sooner once its interval is
    tight, and never before its minimum repetitions): KERNELFLOW_TIMING_BUDGET_S where it is set (a test suite, a
    quick first look), else 30 on a GPU and 5 on a CPU, whose interpreted Triton calls are slow and whose times say
    nothing of GPU speed."""
    if (text := os.environ.get(TIMING_BUDGET_ENV)) is None:
        return 30.0 if device == "cuda" else 5.0
    try:
        budget = float(text)
    except ValueError:
        budget = math.nan
    if not budget > 0 or math.isinf(budget):
        raise KernelflowError(f"{TIMING_BUDGET_ENV}={text!r}: give a positive number of seconds")
    return budget
