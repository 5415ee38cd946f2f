"""Register spills and other local-memory traffic.

Trigger (counters): local-memory bytes loaded + stored (l1tex__t_bytes_pipe_lsu_mem_local_op_ld/st) above
MIN_LOCAL_BYTES. Severity: local bytes / (local + DRAM bytes) x share, at least FLOOR_SEVERITY: local traffic
competes with the kernel's real traffic in L1/L2 and adds load latency.
Trigger (static, for a kernel without those counters): ptxas spill bytes, or LDL/STL in the SASS (spills or
stack arrays). Severity: STATIC_SEVERITY x share (the volume is unknown without counters).
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

NAME = "spills"
CLASSES = frozenset({"compute", "memory", "latency"})
EXPLAINS = frozenset({"long_scoreboard"})  # local-memory loads are long-scoreboard waits
MIN_LOCAL_BYTES = 0.0  # any local-memory traffic counts
FLOOR_SEVERITY, STATIC_SEVERITY = 0.05, 0.15
_LD, _ST = "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"
_FIX = ("Cut register pressure so nothing spills: smaller tiles or fewer accumulators per thread, fewer values live "
        "across loops, no dynamically indexed per-thread arrays; do not cap registers below what the tile needs.")


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        ld, st = metric(k, _LD), metric(k, _ST)
        local = (ld or 0) + (st or 0)
        if (ld is None and st is None) or local <= MIN_LOCAL_BYTES:
            continue
        dram = (metric(k, "dram__bytes_read.sum") or 0) + (metric(k, "dram__bytes_write.sum") or 0)
        out.append(Finding(
            tool=NAME, kernel=k.kernel, severity=severity(max(FLOOR_SEVERITY, local / (local + dram)) * share(ev, k)),
            diagnosis=f"{local / 1e6:.1f} MB of local-memory traffic per launch ({(ld or 0) / 1e6:.1f} MB loads, "
                      f"{(st or 0) / 1e6:.1f} MB stores) against {dram / 1e6:.1f} MB of DRAM traffic: registers spill",
            recommendation=_FIX, action=Action(kind="remove_spills"),
            evidence={"local_bytes": local, "dram_bytes": dram}))
    for b in static_only(ev, _LD, _ST):
        s = sass_of(b)
        spilled = (b.spill_stores_bytes or 0) + (b.spill_loads_bytes or 0)
        ldl_stl = s.local_loads + s.local_stores if s else 0
        if not spilled and not ldl_stl:
            continue
        out.append(Finding(
            tool=NAME, kernel=b.name, severity=severity(STATIC_SEVERITY * binary_share(ev, b)),
            diagnosis=f"ptxas reports {spilled} bytes of spill stores+loads and the SASS has {ldl_stl} local-memory "
                      "instructions (LDL/STL: spills or per-thread arrays in local memory)",
            recommendation=_FIX, action=Action(kind="remove_spills", params={"registers": b.registers}),
            evidence={"spill_bytes": spilled, "local_instructions": ldl_stl, "registers": b.registers}))
    return out
