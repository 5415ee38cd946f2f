"""Which of two measured candidates is better: speed first; within the speed noise band, lower energy wins.

KernelPro's lexicographic objective. "Within the noise band" means the two medians' 95% intervals overlap
or the medians differ by less than `min_rel_gap` (a floor for intervals that are tighter than the run-to-run
spread of the machine). Energy decides only then, and only when it too differs by more than its own band.
"""

from __future__ import annotations

from typing import Literal

from kernelflow.stages.contracts import Contract

MIN_REL_GAP = 0.02  # medians closer than 2% are a tie on speed, whatever their intervals say
ENERGY_REL_GAP = 0.03  # energies closer than 3% are a tie on energy


class Measured(Contract):
    """What the objective needs of a candidate: its median time, the median's 95% interval, its energy."""

    median_us: float
    ci_low_us: float
    ci_high_us: float
    energy_j_per_call: float | None = None


Verdict = Literal["better", "worse", "tie"]


def speed_tie(a: Measured, b: Measured, min_rel_gap: float = MIN_REL_GAP) -> bool:
    overlap = a.ci_low_us <= b.ci_high_us and b.ci_low_us <= a.ci_high_us
    close = abs(a.median_us - b.median_us) <= min_rel_gap * min(a.median_us, b.median_us)
    return overlap or close


def compare(a: Measured, b: Measured, min_rel_gap: float = MIN_REL_GAP) -> Verdict:
    """Is `a` better than, worse than, or tied with `b`?"""
    if not speed_tie(a, b, min_rel_gap):
        return "better" if a.median_us < b.median_us else "worse"
    ea, eb = a.energy_j_per_call, b.energy_j_per_call
    if ea is None or eb is None or abs(ea - eb) <= ENERGY_REL_GAP * min(ea, eb):
        return "tie"
    return "better" if ea < eb else "worse"


def weakest(medians: dict[str, dict[str, float]]) -> tuple[str, float] | None:
    """The workload where the candidate is furthest behind its fastest baseline, with that ratio: the largest
    medians[w]["candidate"] / min(the other contenders' medians of w) (above 1: a baseline is faster there). A
    workload without the candidate or without a baseline is left out; None when none is left. Ties: the first."""
    ratios = {w: m["candidate"] / min(v for k, v in m.items() if k != "candidate")
              for w, m in medians.items() if "candidate" in m and len(m) > 1}
    return max(ratios.items(), key=lambda item: item[1]) if ratios else None
