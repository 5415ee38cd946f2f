"""Held-out shapes: a workload the candidate was never shown, derived from a declared one (docs/INTEGRITY.md).

Every size of the smallest declared workload moves to a nearby value that keeps at least its power-of-two
alignment: v minus its lowest set bit when something is left (96 -> 64, 600 -> 592, 7 -> 6), half of v for a power
of two of 64 or more (8192 -> 4096: never larger than declared, so a GPU shape still fits), else twice v (1 -> 2,
32 -> 64). A constant counts as a size when some declared workload, of any size set, gives it a value above
MAX_SETTING; smaller ones (mask_mode=1 or 2, a group count) may be settings, and are kept. A workload that sets no
constant (a plain KernelBench file's one workload, gpu0) runs at the module's own sizes: the constants its
get_inputs/get_init_inputs read (stages/problems/kernelbench.py `size_constants`) stand for its params here. A
kernel that reads its shapes at run time works at the held-out shape unchanged; one that looked its answer up by
shape, or assumed the declared sizes, does not. Whether the shape is valid is the problem's to say: verify skips a
held-out shape on which the reference fails, is not finite or is all zeros, with a note.
"""

from __future__ import annotations

import math

from kernelflow.stages.contracts import Workload

MAX_SETTING = 8


def perturb(v: int) -> int:
    low = v & -v
    if v > low:
        return v - low
    return v // 2 if v >= 64 else 2 * v


def held_out(workloads: list[Workload], declared: list[Workload],
             constants: dict[str, int] | None = None) -> tuple[Workload, Workload] | None:
    """(the smallest of `workloads`, its held-out neighbour), the sizes told apart from settings by every `declared`
    workload; a workload that sets no constant has `constants`, the module's sizes. None when no workload names a
    size."""
    def named(ws: list[Workload]) -> list[Workload]:
        return [w if w.params or not constants else Workload(name=w.name, params=dict(constants)) for w in ws]

    workloads, declared = named(workloads), named(declared)
    sizes = {k for w in declared for k, v in w.params.items() if v > MAX_SETTING}
    sized = [w for w in workloads if sizes & set(w.params)]
    if not sized:
        return None
    w = min(sized, key=lambda w: math.prod(w.params.values()))
    return w, Workload(name=f"{w.name}-held-out",
                       params={k: perturb(v) if k in sizes else v for k, v in w.params.items()})
