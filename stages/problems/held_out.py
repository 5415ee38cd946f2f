"""Held-out shapes: workloads the candidate was never shown, derived from a declared one (docs/INTEGRITY.md).

Every moved size of the smallest declared workload goes to a nearby value that keeps at least its power-of-two
alignment: v minus its lowest set bit when something is left (96 -> 64, 600 -> 592, 7 -> 6), half of v for a power
of two of 64 or more (8192 -> 4096: never larger than declared, so a GPU shape still fits), else twice v (1 -> 2,
32 -> 64). A shape is never larger than the largest declared workload (the product of its sizes): where the doubled
ones would make it so, they are halved instead (32 -> 16), so that no held-out shape needs more memory, or wider
indices (past 2^31 elements, where int32 offsets stop), than a declared one. A constant counts as a size when
some declared workload, of any size set, gives it a value above MAX_SETTING; smaller ones (mask_mode=1 or 2, a
group count) may be settings, and are kept. A workload that sets no constant (a plain KernelBench file's one workload, gpu0) runs at the module's own sizes: the constants its
get_inputs/get_init_inputs read (stages/problems/kernelbench.py `size_constants`) stand for its params here.

Which sizes move. A size that get_init_inputs reads is the architecture's: it fixes the module's parameters' shapes
(a conv's channels, a Linear's features, a group count), which ModelNew is built with, so a kernel may be
specialized to it, as torch.compile's code is by default (Dynamo holds parameters' shapes static). A size only
get_inputs reads is an input's (a batch, an image's height, a sequence length), which a kernel must read at run
time. So the first held-out shape moves the input sizes only; where the reference is unusable there (an input size
tied to an architecture constant, a LayerNorm's width), the next ones move one input size each; the last moves every
size, where that is another shape (no input size to move, or none of those shapes usable): then a kernel
specialized to its weights fails there too, the only check left. A kernel that reads its shapes at run time works
at any of them unchanged; one that looked its answer up by shape, or assumed the declared input sizes, does not.

Whether a shape is valid is the problem's to say (an import-time tuple such as `bias_shape = (out_channels, 1, 1)`
is not rebuilt when a size moves): the caller checks at the first held-out shape on which the reference is usable
and notes each one skipped (verify: the reference runs there, finite and not all zeros; the inductor family: it
builds and runs on meta tensors there). Where none is usable there is no held-out check, as for a problem that
names no size.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from types import ModuleType

from kernelflow.stages.contracts import Workload

MAX_SETTING = 8


def perturb(v: int) -> int:
    low = v & -v
    if v > low:
        return v - low
    return v // 2 if v >= 64 else 2 * v


def held_out(workloads: list[Workload], declared: list[Workload], constants: dict[str, int] | None = None,
             architecture: Collection[str] = ()) -> list[tuple[Workload, Workload]]:
    """The held-out shapes to try, in order, each as (the smallest of `workloads`, its held-out neighbour): the input
    sizes moved, then each input size alone, then every size (each where it is another shape than those before),
    the sizes told apart from settings by every `declared` workload and the architecture's sizes named by
    `architecture`; a workload that sets no constant has `constants`, the module's sizes. Empty when no workload
    names a size."""
    def named(ws: list[Workload]) -> list[Workload]:
        return [w if w.params or not constants else Workload(name=w.name, params=dict(constants)) for w in ws]

    workloads, declared = named(workloads), named(declared)
    sizes = {k for w in declared for k, v in w.params.items() if v > MAX_SETTING}
    sized = [w for w in workloads if sizes & set(w.params)]
    if not sized:
        return []
    w = min(sized, key=lambda w: math.prod(w.params.values()))
    inputs = [k for k in w.params if k in sizes and k not in architecture]
    moves = [set(inputs), *({k} for k in inputs), sizes]
    shapes: list[dict[str, int]] = []
    largest = max(math.prod(x.params.values()) for x in declared if sizes & set(x.params))
    for moved in moves:
        params = {k: perturb(v) if k in moved else v for k, v in w.params.items()}
        if math.prod(params.values()) > largest:
            params = {k: max(v // 2, 1) if params[k] > v else params[k] for k, v in w.params.items()}
        if params != w.params and params not in shapes:
            shapes.append(params)
    names = [f"{w.name}-held-out"] + [f"{w.name}-held-out-{i}" for i in range(2, len(shapes) + 1)]
    return [(w, Workload(name=name, params=params)) for name, params in zip(names, shapes, strict=True)]


def held_out_of(module: ModuleType, workloads: list[Workload], declared: list[Workload]) -> list[tuple[Workload,
                                                                                                      Workload]]:
    """held_out with the problem module's own sizes and architecture (the ints its input functions read)."""
    from kernelflow.stages.problems.kernelbench import size_constants

    return held_out(workloads, declared, size_constants(module), size_constants(module, ("get_init_inputs",)))
