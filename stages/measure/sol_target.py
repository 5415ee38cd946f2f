"""Stop early at a target SOL fraction: the best candidate's share of speed of light, from its own timings.

The fraction of a candidate is the geomean over the run's timed workloads of floor / median, where the floor is the
SOL floor of the workload's counted work (stages/measure/roofline.py) on this GPU's ceilings (stages/measure/ceilings.py `peaks_for`: measured if
cached, else the table's). It needs a GPU with known ceilings: on a CPU, or on a GPU without them, a target cannot
be judged, and the run refuses the option rather than ignore it.
"""

from __future__ import annotations

import math

from kernelflow.stages.contracts import BenchmarkResult, Problem, SizeSet
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.measure.ceilings import peaks_for
from kernelflow.stages.measure.roofline import count_work, sol_floor_us


def floors(problem: Problem, sizes: SizeSet, device_name: str | None) -> dict[str, float]:
    """Workload -> SOL floor in microseconds on the GPU named `device_name`; raises when it cannot be known."""
    peaks = peaks_for(device_name) if device_name else None
    if peaks is None:
        raise KernelflowError(f"--target-sol needs a GPU with known ceilings (stages/measure/peaks.py); this run has "
                              f"{device_name or 'no GPU'}")
    return {w.name: sol_floor_us(count_work(problem, w), peaks, problem.policy) for w in problem.workloads(sizes)}


def fraction(floor_us: dict[str, float], timed: BenchmarkResult) -> float | None:
    """Geomean of floor / median over the candidate's timed workloads that have a floor; None when none has."""
    shares = [floor_us[t.workload] / t.median_us for t in timed.timings
              if t.contender == "candidate" and t.workload in floor_us and t.median_us > 0]
    return math.exp(sum(map(math.log, shares)) / len(shares)) if shares else None
