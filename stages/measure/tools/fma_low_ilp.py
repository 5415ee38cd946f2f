"""FMA-bound with poor instruction-level parallelism: dependent FMA chains and too few warps to interleave them.

Trigger: the FMA pipe carries most of what the kernel issues (sm__pipe_fma_cycles_active at least FMA_SHARE_MIN
of smsp__issue_active; on Hopper one FP32 warp instruction occupies the pipe for one cycle), issue slots idle
(issue below ISSUE_LOW_PCT), the FMA pipe is not saturated (below FMA_SATURATED_PCT), and DRAM does not bind
(below DRAM_BOUND_PCT): warps wait on their own previous results instead of issuing. Fixed-latency ("wait") and
short-scoreboard stalls per issue are quoted when measured.
Calibrated on the H200 (tests/fixtures/ncu/h200/): a 128-long fmaf chain per element at 2 warps per scheduler
reads FMA 19% of peak at 22% issue (share 0.89); a Triton FMA matmul 20% at 65% issue (share 0.30), memory-bound
elementwise kernels 0.3-0.7 with DRAM above 85%.
Severity: (1 - fma% / FMA_SATURATED_PCT) x share, at most MAX_SEVERITY: the time saved if the FMA pipe ran
at the saturated rate.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity, share

NAME = "fma_low_ilp"
CLASSES = frozenset({"compute", "latency"})
FMA_SHARE_MIN = 0.6  # FMA pipe cycles / issue-active cycles at least this: FMA carries the kernel
FMA_SATURATED_PCT = 80.0  # a well-fed FMA pipe reaches about this
ISSUE_LOW_PCT = 60.0  # issue slots used below this (% of peak): warps are stalled
DRAM_BOUND_PCT = 60.0  # DRAM busier than this: bandwidth binds, not the FMA chains
MAX_SEVERITY = 0.6
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        fma = metric(k, "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active")
        issue = metric(k, "smsp__issue_active.avg.pct_of_peak_sustained_active")
        dram = metric(k, "dram__throughput.avg.pct_of_peak_sustained_elapsed") or 0.0
        if fma is None or not issue or issue >= ISSUE_LOW_PCT or fma >= FMA_SATURATED_PCT or dram >= DRAM_BOUND_PCT:
            continue
        if fma / issue < FMA_SHARE_MIN:
            continue
        wait, short = metric(k, _STALL.format("wait")), metric(k, _STALL.format("short_scoreboard"))
        stalls = ", ".join(f"{v:.1f} {name}" for name, v in (("fixed-latency (wait)", wait),
                                                             ("short-scoreboard", short)) if v is not None)
        out.append(Finding(
            tool=NAME, kernel=k.kernel,
            severity=severity(min(MAX_SEVERITY, 1 - fma / FMA_SATURATED_PCT) * share(ev, k)),
            diagnosis=f"the FMA pipe carries {fma / issue:.0%} of the issued instructions yet is only {fma:.0f}% "
                      f"busy, with {issue:.0f}% of issue slots used" + (f" (stalls per issue: {stalls})" if stalls
                                                                         else "")
                      + ": dependent FMA chains leave the pipe idle",
            recommendation="Give each thread several independent accumulators or elements (e.g. 4-8 partial sums, "
                           "or a larger register tile per thread), unroll the inner loop, and run more warps per SM "
                           "so their chains interleave.",
            action=Action(kind="increase_ilp", params={"accumulators": 4}),
            evidence={"fma_pipe_pct": fma, "issue_active_pct": issue, "fma_share_of_issue": fma / issue,
                      "wait_stalls": wait, "short_scoreboard_stalls": short}))
    return out
