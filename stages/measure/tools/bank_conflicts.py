"""Shared-memory bank conflicts.

Trigger: shared load+store bank conflicts (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld/st) per
shared-load wavefront above CONFLICT_RATIO. Store wavefronts are not collected, so store conflicts are counted
against load wavefronts (an approximation; kernels that store to shared memory also load from it). ncu's
conflict counter is known to include some non-conflict replays; the ratio is evidence, not proof.
Severity: SHARED_WEIGHT x extra / (wavefronts + extra) x share: the conflicts' share of shared-memory cycles,
discounted because shared memory is one of several units the kernel waits on.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity, share

NAME = "bank_conflicts"
CLASSES = frozenset({"compute", "latency"})
CONFLICT_RATIO = 0.2  # conflicts per shared-load wavefront above this: conflicted
SHARED_WEIGHT = 0.5


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        ld = metric(k, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum")
        st = metric(k, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
        wavefronts = metric(k, "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum")
        conflicts = (ld or 0) + (st or 0)
        if not wavefronts or (ld is None and st is None) or conflicts / wavefronts <= CONFLICT_RATIO:
            continue
        ratio = conflicts / wavefronts
        out.append(Finding(
            tool=NAME, kernel=k.kernel,
            severity=severity(SHARED_WEIGHT * conflicts / (wavefronts + conflicts) * share(ev, k)),
            diagnosis=f"shared-memory bank conflicts: {conflicts:.3g} conflicts ({ld or 0:.3g} on loads, {st or 0:.3g} on "
                      f"stores) for {wavefronts:.3g} shared-load wavefronts ({ratio:.0%}): accesses are serialized",
            recommendation="Pad shared-memory rows by one element (e.g. [32][33]) or swizzle the layout (XOR the column "
                           "with the row) so a warp's 32 accesses fall in 32 different banks; for ldmatrix, use a "
                           "swizzled CuTe layout.",
            action=Action(kind="pad_shared_memory", params={"pad_elements": 1}),
            evidence={"bank_conflicts": conflicts, "shared_ld_wavefronts": wavefronts, "conflict_ratio": ratio}))
    return out
