"""Low occupancy, and which resource limits it.

Trigger (counters): achieved occupancy (sm__warps_active, % of the SM's warp slots) below LOW_PCT while the
theoretical occupancy is below THEORETICAL_PCT, i.e. a per-block resource binds (when theoretical occupancy is
high and achieved low, the grid is the problem: see tail_wave). The limiter is the resource allowing the fewest
blocks per SM (launch__occupancy_limit_registers / _shared_mem / _warps / _blocks).
Trigger (static, for a kernel without counters): ptxas registers per thread >= HEAVY_REGISTERS, which alone caps
an SM at 65536 / (32 x registers) warps (<= 25% at 128).
Severity: MAX_SEVERITY x (1 - achieved / THEORETICAL_PCT) x share (static: STATIC_SEVERITY x share): more warps
hide memory latency, with diminishing returns; a rough guess, not a model.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import (
    Evidence,
    binary_share,
    kernels,
    metric,
    severity,
    share,
    static_only,
)

NAME = "low_occupancy"
CLASSES = frozenset({"memory", "latency"})
EXPLAINS = frozenset({"long_scoreboard"})  # too few warps per SM leave loads uncovered
LOW_PCT = 25.0  # achieved occupancy below this (% of max warps per SM): low
THEORETICAL_PCT = 50.0  # theoretical occupancy below this: a resource limit binds
HEAVY_REGISTERS = 128  # registers per thread that alone cap occupancy at 25%
MAX_SEVERITY, STATIC_SEVERITY = 0.4, 0.1
_LIMITS = {"registers": "launch__occupancy_limit_registers", "shared memory": "launch__occupancy_limit_shared_mem",
           "warps per block": "launch__occupancy_limit_warps", "blocks per SM": "launch__occupancy_limit_blocks"}
_FIX = {"registers": "cap registers per thread (__launch_bounds__ / maxrregcount, smaller tiles, fewer live values)",
        "shared memory": "use less shared memory per block (fewer pipeline stages, smaller tiles)",
        "warps per block": "use smaller blocks so more of them fit on an SM",
        "blocks per SM": "use larger blocks (at least 128 threads): the SM's block slots run out before its warps do"}


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        achieved, theoretical = metric(k, "sm__warps_active.avg.pct_of_peak_sustained_active"), metric(
            k, "sm__maximum_warps_per_active_cycle_pct")
        limits = {name: v for name, m in _LIMITS.items() if (v := metric(k, m)) is not None}
        if achieved is None or theoretical is None or achieved >= LOW_PCT or theoretical >= THEORETICAL_PCT:
            continue
        limiter = min(limits, key=lambda n: limits[n]) if limits else "unknown"
        out.append(Finding(
            tool=NAME, kernel=k.kernel,
            severity=severity(MAX_SEVERITY * (1 - achieved / THEORETICAL_PCT) * share(ev, k)),
            diagnosis=f"achieved occupancy {achieved:.1f}% (theoretical {theoretical:.1f}%), limited by {limiter} "
                      f"({limits.get(limiter, 0):g} blocks per SM; {metric(k, 'launch__registers_per_thread') or 0:g} "
                      f"registers/thread, {metric(k, 'launch__block_size') or 0:g} threads/block): too few warps "
                      "to hide latency",
            recommendation=f"Raise occupancy: {_FIX.get(limiter, 'find the binding resource')}.",
            action=Action(kind="raise_occupancy", params={"limiter": limiter}),
            evidence={"achieved_occupancy_pct": achieved, "theoretical_occupancy_pct": theoretical,
                      "limiter": limiter}))
    for b in static_only(ev, "sm__warps_active.avg.pct_of_peak_sustained_active"):
        if b.registers is None or b.registers < HEAVY_REGISTERS:
            continue
        cap = min(100.0, 65536 / (32 * b.registers) / 64 * 100)
        out.append(Finding(
            tool=NAME, kernel=b.name, severity=severity(STATIC_SEVERITY * binary_share(ev, b)),
            diagnosis=f"{b.registers} registers per thread (ptxas) cap occupancy at about {cap:.0f}% of the SM's warps",
            recommendation=f"Raise occupancy: {_FIX['registers']}.",
            action=Action(kind="raise_occupancy", params={"limiter": "registers", "registers": b.registers}),
            evidence={"registers": b.registers, "occupancy_cap_pct": cap}))
    return out
