"""Mutations of the builtin proposer: a micro-profiling tool's structured action, applied to a parent's
template parameters, gives the parameter sets to try next; `explore` gives plain neighbours when no action applies.

Rules are keyed on parameter names, not on families, so a family gets every move its parameters allow:
- num_warps, num_stages: Triton's warps per program and software-pipelining depth;
- BLOCK, BLOCK_M/N/K: tile sizes; max_block_d: the widest row kept in registers (rowwise); loop_block_d and
  loop_warps: the chunk and warps of wider rows' looped kernel (rowwise); min_tile and tile_warps: elements per
  program for narrow rows and its warps, strided_block_d: the chunk of wide strided rows (rowwise); GROUP_M:
  tile-order grouping for L2 reuse (matmul); split_p: the probabilities as two half-precision operands
  (attention), the one precision move (raise_precision, after a verify mismatch);
- a key `KERNEL.NAME` is parameter NAME of one kernel of a multi-kernel candidate (inductor: XBLOCK, YBLOCK, R0_BLOCK,
  num_warps, num_stages per generated kernel): a move on NAME moves each kernel's own in turn, one at a time.
Each move returns the changed parameter sets, nearest first; an action no parameter can express returns none and
`why_not` says so (shared-memory padding, divergence and instruction choice are not template parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelflow.stages.contracts import Action
from kernelflow.stages.templates.rows import KERNEL_PARAMS

Params = dict[str, Any]

# Bounds of each parameter (powers of two between them); a move past a bound is not proposed.
BOUNDS: dict[str, tuple[int, int]] = {
    "num_warps": (1, 32), "num_stages": (1, 6), "BLOCK": (128, 16384), "BLOCK_M": (16, 256), "BLOCK_N": (16, 256),
    "BLOCK_K": (16, 128), "max_block_d": (1024, 32768), "min_tile": (1024, 16384), "GROUP_M": (1, 32),
    "loop_block_d": (1024, 32768), "loop_warps": (1, 32), "tile_warps": (1, 32), "strided_block_d": (16, 1024),
    "XBLOCK": (1, 4096), "YBLOCK": (1, 1024), "ZBLOCK": (1, 64), "R0_BLOCK": (1, 4096),
}


def _base(key: str) -> str:
    """The parameter's name without its kernel (`triton_red_fused_sum_0.XBLOCK` -> XBLOCK)."""
    return key.rsplit(".", 1)[-1]


def _scaled(params: Params, key: str, factor: float) -> Params | None:
    """params with params[key] multiplied by factor, or None if absent, unchanged or out of bounds."""
    if not isinstance(params.get(key), int):
        return None
    name = _base(key)
    value = int(params[key] * factor) if name != "num_stages" else params[key] + (1 if factor > 1 else -1)
    low, high = BOUNDS.get(name, (1, 1 << 20))
    if value == params[key] or not low <= value <= high:
        return None
    return {**params, key: value}


def _moves(params: Params, *steps: tuple[str, float]) -> list[Params]:
    """One parameter set per (key, factor) step that stays within bounds; a key also moves each kernel's own."""
    out = []
    for name, factor in steps:
        for key in [k for k in params if k == name or k.endswith("." + name)]:
            moved = _scaled(params, key, factor)
            if moved is not None and moved not in out:
                out.append(moved)
    return out


def _raise_occupancy(params: Params, action: Action) -> list[Params]:
    """The limiter named by stages/measure/tools/low_occupancy.py decides the move."""
    limiter = action.params.get("limiter")
    if limiter == "shared memory":
        return _moves(params, ("num_stages", 0.5), ("BLOCK_K", 0.5), ("BLOCK_N", 0.5))
    if limiter == "warps per block":
        return _moves(params, ("num_warps", 0.5))
    if limiter == "blocks per SM":
        return _moves(params, ("num_warps", 2), ("BLOCK", 2), ("XBLOCK", 2))
    # registers (or unknown): the same tile over more warps holds fewer registers per thread, or a smaller tile
    return _moves(params, ("num_warps", 2), ("BLOCK_N", 0.5), ("BLOCK", 0.5), ("max_block_d", 0.5),
                  ("loop_block_d", 0.5), ("loop_warps", 2), ("tile_warps", 2), ("strided_block_d", 0.5),
                  ("R0_BLOCK", 0.5), ("XBLOCK", 0.5))


RULES: dict[str, Callable[[Params, Action], list[Params]]] = {
    "raise_occupancy": _raise_occupancy,
    "remove_spills": lambda p, a: _moves(p, ("num_warps", 2), ("BLOCK_N", 0.5), ("BLOCK_K", 0.5), ("BLOCK", 0.5),
                                         ("max_block_d", 0.5), ("loop_block_d", 0.5), ("loop_warps", 2),
                                         ("tile_warps", 2), ("strided_block_d", 0.5), ("R0_BLOCK", 0.5),
                                         ("XBLOCK", 0.5)),
    "hide_memory_latency": lambda p, a: _moves(p, ("num_stages", 2), ("num_warps", 2), ("min_tile", 2)),
    "more_parallelism": lambda p, a: _moves(p, ("BLOCK_M", 0.5), ("BLOCK_N", 0.5), ("BLOCK", 0.5), ("min_tile", 0.5),
                                            ("XBLOCK", 0.5), ("YBLOCK", 0.5)),
    "increase_ilp": lambda p, a: _moves(p, ("BLOCK", 2), ("XBLOCK", 2), ("num_warps", 0.5), ("BLOCK_N", 2),
                                        ("min_tile", 2), ("tile_warps", 0.5), ("strided_block_d", 2),
                                        ("R0_BLOCK", 2)),
    "vectorize_access": lambda p, a: _moves(p, ("BLOCK", 2), ("XBLOCK", 2), ("num_warps", 0.5)),
    "reduce_dram_traffic": lambda p, a: _moves(p, ("max_block_d", 2), ("loop_block_d", 2), ("GROUP_M", 2),
                                               ("BLOCK_M", 2), ("BLOCK_N", 2), ("R0_BLOCK", 2)),
    "feed_tensor_cores": lambda p, a: _moves(p, ("num_stages", 2), ("BLOCK_N", 2), ("BLOCK_M", 2), ("GROUP_M", 2)),
    "raise_precision": lambda p, a: [{**p, "split_p": True}] if p.get("split_p") is False else [],
}

_NOT_PARAMETERS = {
    "pad_shared_memory": "the templates' shared-memory layout is Triton's, not a template parameter",
    "reduce_divergence": "the templates' control flow is uniform per row or tile; no parameter changes it",
    "cheaper_instructions": "instruction choice follows the reference's math; fast-math is not a template parameter",
    "fuse_kernels": "a template is already one kernel (or one kernel after a library call)",
}


def apply(action: Action, params: Params) -> list[Params]:
    """The parameter sets `action` suggests for a parent with `params`, nearest first; when the action names a
    kernel (refine's params["kernel"]) with parameters of its own, the sets that move those come first (low
    occupancy in a rowwise looped kernel is not changed by num_warps x2 or max_block_d /2)."""
    rule = RULES.get(action.kind)
    moves = rule(params, action) if rule else []
    kernel = str(action.params.get("kernel", ""))
    own = next((keys for end, keys in KERNEL_PARAMS.items() if kernel.endswith(end)), ())
    own = (*own, *(k for k in params if kernel and k.startswith(kernel + ".")))
    return sorted(moves, key=lambda p: not any(p.get(k) != params.get(k) for k in own))


def why_not(action: Action, params: Params) -> str:
    """Why `action` gave no parameter set for these params."""
    if action.kind in _NOT_PARAMETERS:
        return f"{action.kind}: {_NOT_PARAMETERS[action.kind]}"
    if action.kind == "raise_precision":
        return (f"{action.kind}: no parameter of {sorted(params)} rounds less (the templates accumulate in fp32; "
                "only attention's split_p adds precision)")
    if action.kind == "use_tensor_cores":  # tl.dot already uses them for bf16/fp16 (and TF32 where allowed)
        return (f"{action.kind}: no template parameter moves a product onto the tensor cores; fp32 products use "
                "them only where the policy allows TF32")
    return f"{action.kind}: no parameter of {sorted(params)} expresses it within bounds"


def explore(params: Params) -> list[Params]:
    """Plain neighbours: every parameter doubled and halved within bounds (local search when no tool speaks)."""
    return _moves(params, *((key, f) for key in sorted(params) if _base(key) in BOUNDS for f in (2, 0.5)))
