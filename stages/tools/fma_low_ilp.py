"""FMA-bound with poor instruction-level parallelism.

Trigger: the FMA pipe does most of the work (sm__pipe_fma_cycles_active at least FMA_BUSY_PCT of peak) but is not
saturated (below FMA_SATURATED_PCT) while instruction issue is idle (smsp__issue_active below ISSUE_LOW_PCT):
warps wait on the results of their own previous FMAs (dependent accumulation chains). Short-scoreboard stalls
are reported alongside (waits on MUFU or shared-memory results).
Severity: (1 - fma% / FMA_SATURATED_PCT) x share, at most MAX_SEVERITY: the time saved if the FMA pipe ran
at the saturated rate.
"""

from __future__ import annotations

from stages.contracts import Action, Finding
from stages.tools import Evidence, kernels, metric, severity, share

NAME = "fma_low_ilp"
CLASSES = frozenset({"compute"})
FMA_BUSY_PCT = 30.0  # FMA pipe at least this busy (% of peak): FMA carries the kernel
FMA_SATURATED_PCT = 80.0  # a well-fed FMA pipe reaches about this
ISSUE_LOW_PCT = 60.0  # issue slots used below this (% of peak): warps are stalled
MAX_SEVERITY = 0.6


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        fma = metric(k, "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active")
        issue = metric(k, "smsp__issue_active.avg.pct_of_peak_sustained_active")
        short = metric(k, "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio")
        if fma is None or issue is None or not FMA_BUSY_PCT <= fma < FMA_SATURATED_PCT or issue >= ISSUE_LOW_PCT:
            continue
        out.append(Finding(
            tool=NAME, kernel=k.kernel,
            severity=severity(min(MAX_SEVERITY, 1 - fma / FMA_SATURATED_PCT) * share(ev, k)),
            diagnosis=f"FMA pipe {fma:.0f}% busy while only {issue:.0f}% of issue slots are used "
                      f"(short-scoreboard stalls {short or 0:.1f} per issue): dependent FMA chains leave the pipe idle",
            recommendation="Give each thread several independent accumulators (e.g. 4-8 partial sums, or a larger "
                           "register tile per thread), unroll the inner loop, and combine the partials at the end.",
            action=Action(kind="increase_ilp", params={"accumulators": 4}),
            evidence={"fma_pipe_pct": fma, "issue_active_pct": issue, "short_scoreboard_stalls": short}))
    return out
