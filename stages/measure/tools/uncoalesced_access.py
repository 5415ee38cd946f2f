"""Uncoalesced or narrow global memory access.

Trigger (counters): global load or store sectors per request above EXCESS x the ideal for the access width. A
warp of 32 threads reading consecutive w-bit words touches w/8 sectors of 32 B per request: 4 for 32-bit, 16
for 128-bit. The width is the kernel's mean SASS load (store) width when its binary is known, else WIDE_BITS,
so a kernel we hold no binary of (a baseline's: PyTorch's and inductor's kernels load 128 bits where they can)
is never blamed for sectors its unknown width may explain (a 32-bit assumption would flag every eager and
torch.compile kernel of 03_layernorm and 05_gelu_tanh).
Severity: the wasted share of the sectors (1 - ideal / measured) x the kernel's share of the time.
Trigger (static, for a kernel without those counters): a memory-bound call whose kernel's mean global load width
is below WIDE_BITS. Severity: NARROW_SEVERITY x (1 - width / WIDE_BITS) x share: narrow but coalesced loads waste
no bandwidth, only instructions and bytes in flight (worth a few to ~20% on bandwidth-bound kernels).
"""

from __future__ import annotations

from kernelflow.stages.backends.sass import SassStats
from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import (
    Evidence,
    binary,
    binary_share,
    kernels,
    metric,
    sass_of,
    severity,
    share,
    static_only,
)

NAME = "uncoalesced_access"
CLASSES = frozenset({"memory", "latency"})
EXPLAINS = frozenset({"long_scoreboard"})  # wasted sectors lengthen every load
EXCESS = 2.0  # sectors per request above this multiple of the ideal: uncoalesced
WIDE_BITS = 128  # the widest per-thread global access (LDG.128)
NARROW_SEVERITY = 0.2  # severity of 8-bit loads on a memory-bound kernel (scaled down toward 128 bits)
_WIDEN = ("move 128 bits per thread (float4 / 8 x bf16; in Triton, contiguous tl.arange blocks on 16-byte "
          "aligned pointers with strides divisible by 16)")
_FIX = ("Make consecutive threads touch consecutive addresses (swap the thread-to-element mapping, or stage a "
        f"tile through shared memory and write it out transposed), align rows to 16 bytes, and {_WIDEN}.")


def _width(s: SassStats | None, kind: str) -> float:
    """Mean access width in bits from SASS; WIDE_BITS when unknown (see the module doc)."""
    counts = {w: getattr(s, f"global_{kind}_{w}bit") for w in (8, 16, 32, 64, 128)} if s else {}
    n = sum(counts.values())
    return sum(w * c for w, c in counts.items()) / n if n else float(WIDE_BITS)


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        s = sass_of(binary(ev, k))
        for kind, tag in (("loads", "ld"), ("stores", "st")):
            sectors = metric(k, f"l1tex__t_sectors_pipe_lsu_mem_global_op_{tag}.sum")
            requests = metric(k, f"l1tex__t_requests_pipe_lsu_mem_global_op_{tag}.sum")
            ideal = _width(s, kind) / 8
            if not sectors or not requests or sectors / requests <= EXCESS * ideal:
                continue
            spr = sectors / requests
            out.append(Finding(
                tool=NAME, kernel=k.kernel, severity=severity((1 - ideal / spr) * share(ev, k)),
                diagnosis=f"global {kind} touch {spr:.1f} sectors of 32 B per request where {ideal:g} would do "
                          f"({ideal * 8:g}-bit accesses): {1 - ideal / spr:.0%} of the traffic is wasted "
                          "(strided, scattered or misaligned addresses)",
                recommendation=_FIX, action=Action(kind="vectorize_access", params={"vector_bits": WIDE_BITS}),
                evidence={"sectors_per_request": spr, "ideal_sectors_per_request": ideal, "op": tag}))
    for b in static_only(ev, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"):
        s = sass_of(b)
        width = s.global_load_width_bits_mean if s else None
        if ev.bound != "memory" or width is None or width >= WIDE_BITS:
            continue
        out.append(Finding(
            tool=NAME, kernel=b.name,
            severity=severity(NARROW_SEVERITY * (1 - width / WIDE_BITS) * binary_share(ev, b)),
            diagnosis=f"memory-bound, yet its global loads are {width:g} bits wide on average (SASS); "
                      f"{WIDE_BITS}-bit loads move the same bytes with a fraction of the instructions",
            recommendation=f"Vectorize: {_WIDEN}.",
            action=Action(kind="vectorize_access", params={"vector_bits": WIDE_BITS}),
            evidence={"global_load_width_bits_mean": width, "global_loads_total": s.global_loads_total if s else None}))
    return out
