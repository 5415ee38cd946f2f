"""What a run checks and times unless told otherwise: one rule for the optimize flow, the CLI and the scripts."""

from __future__ import annotations

from kernelflow.stages.contracts import Baseline, Device, Problem, SizeSet


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
    tight): 30 on a GPU; 5 on a CPU, whose interpreted Triton calls are slow and whose times say nothing of GPU
    speed."""
    return 30.0 if device == "cuda" else 5.0
