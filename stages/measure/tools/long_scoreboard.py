"""Memory-latency (long-scoreboard) stalls while DRAM is not saturated.

Trigger: warps stalled on long scoreboard per issue-active cycle at least LONG_SB_MIN, more than the short-
scoreboard and barrier stalls, while DRAM throughput is below DRAM_SATURATED_PCT: the kernel waits on loads it
issued too late or too few of, not on bandwidth.
Severity: (1 - dram% / DRAM_SATURATED_PCT) x share, at most MAX_SEVERITY: the time that would go if the same
bytes streamed at a saturated rate.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity, share

NAME = "long_scoreboard"
CLASSES = frozenset({"memory", "latency"})
LONG_SB_MIN = 1.0  # warps stalled on long scoreboard per issue-active cycle
DRAM_SATURATED_PCT = 60.0  # DRAM throughput above this (% of peak): bandwidth, not latency, binds
MAX_SEVERITY = 0.6
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        long = metric(k, _STALL.format("long_scoreboard"))
        dram = metric(k, "dram__throughput.avg.pct_of_peak_sustained_elapsed")
        others = max(metric(k, _STALL.format("short_scoreboard")) or 0, metric(k, _STALL.format("barrier")) or 0)
        if long is None or dram is None or long < LONG_SB_MIN or long <= others or dram >= DRAM_SATURATED_PCT:
            continue
        out.append(Finding(
            tool=NAME, kernel=k.kernel,
            severity=severity(min(MAX_SEVERITY, 1 - dram / DRAM_SATURATED_PCT) * share(ev, k)),
            diagnosis=f"warps wait on global/local memory: {long:.1f} warps stalled on long scoreboard per issued "
                      f"instruction (short scoreboard/barrier at most {others:.1f}), yet DRAM is only {dram:.0f}% busy",
            recommendation="Keep more loads in flight: issue the next tile's loads before using the current one "
                           "(software pipelining: more num_stages, cp.async/TMA double buffering), unroll so each "
                           "thread has several independent loads, or run more warps per SM.",
            action=Action(kind="hide_memory_latency", params={"num_stages": "+1"}),
            evidence={"long_scoreboard_stalls": long, "other_stalls_max": others, "dram_pct": dram}))
    return out
