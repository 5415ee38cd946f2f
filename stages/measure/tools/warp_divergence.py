"""Warp divergence.

Trigger: average active threads per executed instruction (smsp__thread_inst_executed_per_inst_executed.ratio,
32 = no divergence) below MIN_THREADS. Masked tails of small problems show up here too.
Severity: DIVERGENCE_WEIGHT x (1 - threads / 32) x share: the idle lanes' share of issued work, discounted
because only the issue-bound part of the time shrinks when lanes are filled.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity, share

NAME = "warp_divergence"
CLASSES = frozenset({"compute", "latency"})
MIN_THREADS = 24.0  # of 32
DIVERGENCE_WEIGHT = 0.5


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        t = metric(k, "smsp__thread_inst_executed_per_inst_executed.ratio")
        if t is None or t >= MIN_THREADS:
            continue
        out.append(Finding(
            tool=NAME, kernel=k.kernel, severity=severity(DIVERGENCE_WEIGHT * (1 - t / 32) * share(ev, k)),
            diagnosis=f"only {t:.1f} of 32 threads are active per executed instruction on average: "
                      f"{1 - t / 32:.0%} of the lanes idle (divergent branches or masked-off tails)",
            recommendation="Make control flow uniform per warp: map work so a warp's threads take the same branch "
                           "(sort or bucket by case, give whole warps to a row), replace branches by selects, and "
                           "keep masked tails to one final block.",
            action=Action(kind="reduce_divergence"),
            evidence={"threads_per_instruction": t}))
    return out
