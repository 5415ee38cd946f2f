"""Static SASS statistics per kernel, read from `cuobjdump -sass` or `nvdisasm` text (Hopper, sm_90a).

Counts are static: each instruction as it appears in the listing, once, however often it runs (a load in a loop
counts one). Left out of every count: NOPs, instructions predicated on `@!PT` (never executed; ptxas emits a few
as scheduling filler) and the `BRA <own address>` trap that ptxas puts after the last EXIT.
Opcode families: HMMA/IMMA/DMMA/BMMA are warp-level mma.sync; HGMMA/IGMMA/QGMMA/BGMMA are warpgroup wgmma
(cuobjdump prints wgmma as HGMMA on sm_90); LDGSTS is cp.async; UTMA*/UBLK* are TMA and bulk copies.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

_FUNCTION = re.compile(r"^\s*Function : (\S+)")  # cuobjdump
_SECTION = re.compile(r"^\s*\.section\s+([^,\s]+)")  # nvdisasm: .section .text.<name>,"ax",@progbits
_LABEL = re.compile(r"^\s*(\.L_\w+):")  # nvdisasm branch targets
_HEX = re.compile(r"\s*(?:0x([0-9a-f]+)|`\((\.L_\w+)\))\s*")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)([^;]*);")
_WIDTH = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}
_WARP_MMA = ("HMMA", "IMMA", "DMMA", "BMMA")
_WGMMA = ("HGMMA", "IGMMA", "QGMMA", "BGMMA")


class SassStats(BaseModel):
    """Static instruction counts of one kernel's SASS (each listed instruction once; see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    instructions_total: int = Field(default=0, description="instructions listed (without NOP, @!PT and the end trap)")
    mma_sync_instructions: int = Field(default=0, description="warp-level tensor-core ops: HMMA, IMMA, DMMA, BMMA")
    wgmma_instructions: int = Field(default=0, description="warpgroup tensor-core ops: HGMMA, IGMMA, QGMMA, BGMMA")
    tensor_core_instructions: int = Field(default=0, description="mma_sync_instructions + wgmma_instructions")
    global_loads_8bit: int = Field(default=0, description="LDG/LDGSTS of 8 bits per thread (.U8/.S8)")
    global_loads_16bit: int = Field(default=0, description="LDG/LDGSTS of 16 bits per thread (.U16/.S16)")
    global_loads_32bit: int = Field(default=0, description="LDG/LDGSTS of 32 bits per thread (no width suffix)")
    global_loads_64bit: int = Field(default=0, description="LDG/LDGSTS of 64 bits per thread (.64)")
    global_loads_128bit: int = Field(default=0, description="LDG/LDGSTS of 128 bits per thread (.128)")
    global_loads_total: int = Field(default=0, description="LDG and LDGSTS instructions, all widths")
    global_stores_8bit: int = Field(default=0, description="STG of 8 bits per thread (.U8/.S8)")
    global_stores_16bit: int = Field(default=0, description="STG of 16 bits per thread (.U16/.S16)")
    global_stores_32bit: int = Field(default=0, description="STG of 32 bits per thread (no width suffix)")
    global_stores_64bit: int = Field(default=0, description="STG of 64 bits per thread (.64)")
    global_stores_128bit: int = Field(default=0, description="STG of 128 bits per thread (.128)")
    global_stores_total: int = Field(default=0, description="STG instructions, all widths")
    global_load_width_bits_mean: float | None = Field(
        default=None, description="mean width of LDG/LDGSTS in bits per thread; None when there are none")
    global_atomic_instructions: int = Field(default=0, description="global atomics and reductions: ATOMG, RED, ATOM")
    ldgsts_instructions: int = Field(default=0, description="cp.async global->shared copies (LDGSTS)")
    tma_instructions: int = Field(default=0, description="TMA and bulk-copy ops: UTMALDG, UTMASTG, UBLKCP, ...")
    local_loads: int = Field(default=0, description="LDL: loads from local memory (spills, stack arrays)")
    local_stores: int = Field(default=0, description="STL: stores to local memory (spills, stack arrays)")
    shared_loads: int = Field(default=0, description="LDS: loads from shared memory (without LDSM)")
    ldsm_instructions: int = Field(default=0, description="LDSM: ldmatrix loads from shared memory")
    shared_stores: int = Field(default=0, description="STS and STSM: stores to shared memory")
    bar_sync_instructions: int = Field(default=0, description="BAR.SYNC: __syncthreads and named barrier waits")
    barrier_instructions: int = Field(default=0, description="all BAR.* (SYNC, ARV, RED, ...)")
    syncs_instructions: int = Field(default=0, description="SYNCS.*: mbarrier init, arrive, try-wait (sm_90)")
    ffma_instructions: int = Field(default=0, description="FFMA: fp32 fused multiply-add")
    fadd_instructions: int = Field(default=0, description="FADD: fp32 add")
    fmul_instructions: int = Field(default=0, description="FMUL: fp32 multiply")
    fp32_arith_instructions: int = Field(default=0, description="FFMA + FADD + FMUL")
    mufu_instructions: int = Field(default=0, description="MUFU: special function unit (exp2, rcp, rsqrt, sin, ...)")
    branch_instructions: int = Field(default=0, description="BRA of any kind (without the end trap)")
    predicated_branch_instructions: int = Field(default=0, description="BRA under a predicate, e.g. `@P0 BRA`")

    @property
    def uses_tensor_cores(self) -> bool:
        return self.tensor_core_instructions > 0

    @property
    def uses_local_memory(self) -> bool:
        return self.local_loads + self.local_stores > 0


def _width(modifiers: list[str]) -> int:
    return next((_WIDTH[m] for m in modifiers if m in _WIDTH), 32)


def _count(c: dict[str, int], op: str, mods: list[str], predicated: bool) -> None:
    def add(field: str) -> None:
        c[field] = c.get(field, 0) + 1

    add("instructions_total")
    if op in _WARP_MMA:
        add("mma_sync_instructions")
    elif op in _WGMMA:
        add("wgmma_instructions")
    elif op in ("LDG", "LDGSTS"):
        add(f"global_loads_{_width(mods)}bit")
        add("global_loads_total")
        if op == "LDGSTS":
            add("ldgsts_instructions")
    elif op == "STG":
        add(f"global_stores_{_width(mods)}bit")
        add("global_stores_total")
    elif op in ("ATOMG", "RED", "ATOM"):
        add("global_atomic_instructions")
    elif op.startswith(("UTMA", "UBLK")):
        add("tma_instructions")
    elif op in ("LDL", "STL", "LDS", "LDSM"):
        add({"LDL": "local_loads", "STL": "local_stores", "LDS": "shared_loads", "LDSM": "ldsm_instructions"}[op])
    elif op in ("STS", "STSM"):
        add("shared_stores")
    elif op == "BAR":
        add("barrier_instructions")
        if mods[:1] == ["SYNC"]:
            add("bar_sync_instructions")
    elif op in ("SYNCS", "MUFU", "FFMA", "FADD", "FMUL"):
        add(f"{op.lower()}_instructions")
    elif op == "BRA":
        add("branch_instructions")
        if predicated:
            add("predicated_branch_instructions")


def _stats(c: dict[str, int]) -> SassStats:
    s = SassStats(**c)
    loads = {w: getattr(s, f"global_loads_{w}bit") for w in (8, 16, 32, 64, 128)}
    return s.model_copy(update={
        "tensor_core_instructions": s.mma_sync_instructions + s.wgmma_instructions,
        "fp32_arith_instructions": s.ffma_instructions + s.fadd_instructions + s.fmul_instructions,
        "global_load_width_bits_mean": sum(w * n for w, n in loads.items()) / sum(loads.values())
        if sum(loads.values()) else None,
    })


def sass_stats(sass_text: str) -> dict[str, SassStats]:
    """Static SASS statistics by kernel (function) name, mangled as the listing prints it."""
    counts: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    label = None  # the label right before this instruction (nvdisasm)
    for line in sass_text.splitlines():
        if m := _FUNCTION.match(line):
            current = counts.setdefault(m[1], {})
        elif m := _SECTION.match(line):
            name = m[1].removeprefix(".text.")
            current = counts.setdefault(name, {}) if name != m[1] else None
        elif m := _LABEL.match(line):
            label = m[1]
        elif current is not None and (m := _INSTR.match(line)):
            address, pred, op, mods, operands = m.groups()
            here, label = label, None
            if op == "NOP" or (pred or "").strip() in ("@!PT", "@!UPT"):
                continue
            target = _HEX.fullmatch(operands) if op == "BRA" and not pred else None
            if target and (target[2] == here if target[2] else int(target[1], 16) == int(address, 16)):
                continue  # the trap after the last EXIT
            _count(current, op, mods.split(".")[1:], pred is not None)
    return {name: _stats(c) for name, c in counts.items()}
