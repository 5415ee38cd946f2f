"""Stage one: the bottleneck class of a profiled call, from hardware counters, else from counted work.

From counters (Nsight Compute; each metric averaged over the call's kernels, weighted by their GPU time):
- "latency" when the call is short (profile.time_us at most roofline.LATENCY_LAUNCHES launch overheads: launches
  dominate), or when neither DRAM nor SM throughput reaches BUSY_PCT of peak (warps stall on latency; this is how
  ncu's speed-of-light section reads "latency issues", whatever the kernel's length);
- "mixed" when both reach BUSY_PCT and lie within MIXED_GAP_PCT points of each other;
- else the busier unit: "memory" (dram__throughput) or "compute" (sm__throughput). sm__throughput is the max over
  the SM's sub-units, the L1/shared pipes included, so a kernel heavy on L1 traffic can read as compute.
Without counters: kernelflow.stages.measure.roofline.analytic_bound on the counted work (and the measured time, when known).
"""

from __future__ import annotations

from typing import Literal

from kernelflow.stages.contracts import Bound, ProfileResult
from kernelflow.stages.measure.peaks import Peaks
from kernelflow.stages.measure.roofline import LATENCY_LAUNCHES, Work, analytic_bound
from kernelflow.stages.measure.tools import kernel_time_us, metric

BUSY_PCT = 40.0  # a unit at least this busy (% of peak sustained) is doing the kernel's work
MIXED_GAP_PCT = 15.0  # both busy and this close (percentage points): mixed
_DRAM, _SM = "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def counters_bound(profile: ProfileResult, peaks: Peaks | None) -> Bound | None:
    """The class from measured throughputs; None when no kernel has both counters."""
    rows = [(kernel_time_us(k) or 1.0, d, s) for k in profile.kernels
            if (d := metric(k, _DRAM)) is not None and (s := metric(k, _SM)) is not None]
    if profile.counters != "ncu" or not rows:
        return None
    total = sum(w for w, _, _ in rows)
    dram, sm = sum(w * d for w, d, _ in rows) / total, sum(w * s for w, _, s in rows) / total
    short = peaks is not None and profile.time_us is not None and (
        profile.time_us <= LATENCY_LAUNCHES * peaks.launch_overhead_us)
    if short or max(dram, sm) < BUSY_PCT:
        return "latency"
    if min(dram, sm) >= BUSY_PCT and abs(dram - sm) < MIXED_GAP_PCT:
        return "mixed"
    return "memory" if dram > sm else "compute"


def bound_of(profile: ProfileResult | None, work: Work | None, peaks: Peaks | None,
             time_us: float | None = None) -> tuple[Bound | None, Literal["counters", "analytic"] | None]:
    """The class and what decided it: counters when measured, else the analytic roofline, else (None, None)."""
    if profile is not None and (bound := counters_bound(profile, peaks)) is not None:
        return bound, "counters"
    if work is not None and peaks is not None:
        return analytic_bound(work, peaks, time_us), "analytic"
    return None, None
