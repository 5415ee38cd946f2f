"""Energy- and time-costly instruction choice: special functions (MUFU: exp, log, rcp, rsqrt, sin, ...).

Trigger (counters): the special-function (XU) pipe at least XU_BUSY_PCT busy (sm__inst_executed_pipe_xu): it runs
at 1/8 of the FMA rate, so precise math, divisions and conversions there throttle issue.
Trigger (static, for a kernel without that counter): MUFU instructions at least MUFU_RATIO of the fp32 arithmetic
instructions in the SASS.
Severity: XU_WEIGHT x xu% / 100 x share (static: STATIC_SEVERITY x share): cheaper forms remove part of the
special-function work, not all of it. The same change lowers energy per call (fewer, cheaper instructions).
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import (
    Evidence,
    binary_share,
    kernels,
    metric,
    sass_of,
    severity,
    share,
    static_only,
)

NAME = "costly_instructions"
CLASSES = frozenset({"compute"})
XU_BUSY_PCT = 30.0  # XU pipe at least this busy (% of peak)
MUFU_RATIO = 0.25  # MUFU per fp32 arithmetic instruction (static)
XU_WEIGHT, STATIC_SEVERITY = 0.5, 0.1
_XU = "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"
_FIX = ("Use cheaper forms where the tolerance allows: exp2 with a folded log2(e) scale, __expf/__fdividef/rsqrtf "
        "fast intrinsics (or tl.math fast variants), multiply by a reciprocal computed once instead of dividing, "
        "and hoist conversions out of loops. Fewer special-function ops also lower the energy per call.")


def check(ev: Evidence) -> list[Finding]:
    energy = ev.profile.energy_j_per_call if ev.profile else None
    out = []
    for k in kernels(ev):
        xu = metric(k, _XU)
        if xu is None or xu < XU_BUSY_PCT:
            continue
        out.append(Finding(
            tool=NAME, kernel=k.kernel, severity=severity(XU_WEIGHT * xu / 100 * share(ev, k)),
            diagnosis=f"the special-function pipe is {xu:.0f}% busy (transcendentals, precise division, conversions"
                      f"{f'; {energy:.3g} J per call' if energy else ''}): it runs at 1/8 of the FMA rate",
            recommendation=_FIX, action=Action(kind="cheaper_instructions", params={"fast_math": True}),
            evidence={"xu_pipe_pct": xu, "energy_j_per_call": energy}))
    for b in static_only(ev, _XU):
        s = sass_of(b)
        if s is None or s.mufu_instructions < MUFU_RATIO * max(s.fp32_arith_instructions, 1):
            continue
        out.append(Finding(
            tool=NAME, kernel=b.name, severity=severity(STATIC_SEVERITY * binary_share(ev, b)),
            diagnosis=f"{s.mufu_instructions} special-function (MUFU) instructions for {s.fp32_arith_instructions} "
                      "fp32 add/mul/fma in the SASS: costly math dominates the instruction mix",
            recommendation=_FIX, action=Action(kind="cheaper_instructions", params={"fast_math": True}),
            evidence={"mufu_instructions": s.mufu_instructions, "fp32_arith_instructions": s.fp32_arith_instructions}))
    return out
