"""Family `loss`: a whole tensor reduced to one scalar in two deterministic stages (no atomics), and what reads it.

Two shapes of problem:
- `whole`: sums and means of whole tensors (torch.sum(x), x.mean(), no dim) of a pointwise DAG, as the ATen
  lowering gives them: torch.sum and mean, and every loss torch decomposes so (mse, l1, smooth_l1, huber, ...
  with reduction 'mean' or 'sum'); operands may broadcast. Stage 1 (`_kf_loss_partial`): `programs` programs stride over the
  flattened tensor in BLOCK chunks (whole chunks unmasked, so an odd n keeps vector loads; the ragged last chunk
  masked), each summing its chunks per lane in fp32 and storing one partial per
  reduction into a float32 buffer. Stage 2 (`_kf_loss_combine`): one program sums the partials in a fixed
  order, applies what follows the sums (/ D for a mean) and stores the 0-dim output. An elementwise output that
  reads those values (x / torch.norm(x), x - x.mean()) takes a third stage: the combine stores the values it reads
  (float32), and `_kf_loss_apply` computes the output over the flattened tensor, as the elementwise family does.
  A sum of values that read another whole-tensor sum ((x - x.mean()) ** 2 summed) would need two passes: declined.
- `cross_entropy`: F.cross_entropy / nn.CrossEntropyLoss of forward's logits [N, C] and int64 class targets [N]
  (reduction 'mean' or 'sum'; ignore_index honoured: an ignored row adds nothing and is not counted; no weight,
  no label smoothing). Stage 1 (`_kf_ce_partial`): each program takes ROWS rows at a time (a [ROWS, BLOCK_C]
  tile; ROWS = max(1, max_block_c // BLOCK_C), so narrow rows share a program), walks the classes in BLOCK_C
  chunks with an online logsumexp in fp32 (running row max, per-lane sums rescaled when it grows: one pass over
  the logits, one exp per logit), subtracts the target's logit, and stores its rows' loss sum and count.
  Stage 2 (`_kf_ce_combine`): sum of losses / sum of counts (the mean over non-ignored rows; NaN when every row
  is ignored, as torch), or the sum.

The partition into programs depends only on the sizes, so a second call gives bit-identical results.
Parameters: whole: BLOCK, num_warps, programs; cross_entropy: max_block_c, num_warps, programs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch import nn

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import index, launch
from kernelflow.stages.templates.lowering import Traced, lower, node_op
from kernelflow.stages.templates.program import Operand, Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import (
    jit_source,
    line_source,
    module_source,
    operand_prologue,
    output_alloc,
    store_source,
)

WHOLE_VARIANTS = ({"BLOCK": 4096, "num_warps": 8, "programs": 1024}, {"BLOCK": 2048, "num_warps": 4, "programs": 2048},
                  {"BLOCK": 8192, "num_warps": 8, "programs": 1024}, {"BLOCK": 4096, "num_warps": 8, "programs": 2048},
                  {"BLOCK": 4096, "num_warps": 4, "programs": 512})
CE_VARIANTS = ({"max_block_c": 4096, "num_warps": 8, "programs": 1024},
               {"max_block_c": 8192, "num_warps": 8, "programs": 1024},
               {"max_block_c": 2048, "num_warps": 4, "programs": 2048},
               {"max_block_c": 4096, "num_warps": 4, "programs": 2048},
               {"max_block_c": 8192, "num_warps": 16, "programs": 512})

_CE_PARAMS = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")


@dataclass(frozen=True)
class CrossEntropyPlan(Plan):
    """Cross-entropy of logits p0 [N, C] and class targets p1 [N] (program.operands)."""

    ignore_index: int = -100
    mean: bool = True  # reduction 'mean' (over non-ignored rows), else 'sum'


def _reduction_of(name: str, bound: dict[str, Any]) -> bool:
    """True for a mean, False for a sum; declines legacy arguments, weights and unreduced outputs."""
    for legacy in ("size_average", "reduce"):
        if bound.get(legacy) is not None:
            raise TemplateMismatch(f"{name} with the legacy {legacy}= argument")
    if bound.get("weight") is not None:
        raise TemplateMismatch(f"{name} with a weight")
    reduction = bound.get("reduction", "mean")
    if reduction not in ("mean", "sum"):
        raise TemplateMismatch(f"{name} with reduction={reduction!r}: the output is not a scalar")
    return bool(reduction == "mean")


# cross-entropy recognition


def _cross_entropy_args(traced: Traced, node: torch.fx.Node) -> dict[str, Any] | None:
    """The bound arguments of a cross-entropy node, None if node is something else."""
    if node.op == "call_module":
        module = traced.graph.get_submodule(str(node.target))
        if type(module) is not nn.CrossEntropyLoss:
            return None
        return {"input": node.args[0], "target": node.args[1], "weight": module.weight,
                "ignore_index": module.ignore_index, "reduction": module.reduction,
                "label_smoothing": module.label_smoothing}
    if node.op in ("call_function", "call_method") and node_op(node) == "cross_entropy":
        bound = {**dict(zip(_CE_PARAMS, node.args, strict=False)), **node.kwargs}
        if set(bound) - set(_CE_PARAMS):
            raise TemplateMismatch(f"cross_entropy with arguments this template does not know: {node.kwargs}")
        return bound
    return None


def _match_cross_entropy(traced: Traced, node: torch.fx.Node, bound: dict[str, Any]) -> CrossEntropyPlan:
    mean = _reduction_of("cross_entropy", bound)
    if bound.get("label_smoothing", 0.0) != 0.0:
        raise TemplateMismatch(f"cross_entropy with label_smoothing={bound['label_smoothing']!r}")
    ignore = bound.get("ignore_index", -100)
    if isinstance(ignore, bool) or not isinstance(ignore, int):
        raise TemplateMismatch(f"cross_entropy with a non-constant ignore_index {ignore!r}")
    logits, target = bound["input"], bound["target"]
    placeholders = [n for n in traced.graph.graph.nodes if n.op == "placeholder"]
    if not all(isinstance(x, torch.fx.Node) and x in placeholders for x in (logits, target)):
        raise TemplateMismatch("cross_entropy of computed tensors: only of forward's own inputs")
    rest = [n for n in traced.graph.graph.nodes if n.op not in ("placeholder", "output") and n is not node]
    if rest:
        raise TemplateMismatch(f"cross_entropy with other ops around it ({', '.join(n.name for n in rest)})")
    out = next(n for n in traced.graph.graph.nodes if n.op == "output")
    if out.args[0] is not node:
        raise TemplateMismatch("forward does not return the cross_entropy itself")
    lmeta, tmeta = logits.meta["tensor_meta"], target.meta["tensor_meta"]
    if len(lmeta.shape) != 2 or not lmeta.dtype.is_floating_point:
        raise TemplateMismatch(f"cross_entropy of logits of shape {list(lmeta.shape)} ({lmeta.dtype}): only [N, C] float")
    if tmeta.dtype != torch.int64 or tuple(tmeta.shape) != tuple(lmeta.shape[:1]):
        raise TemplateMismatch(f"cross_entropy with targets of shape {list(tmeta.shape)} ({tmeta.dtype}): "
                               "only int64 class indices [N] (no class probabilities)")
    args = tuple(str(n.target) for n in placeholders)
    program = Program(args=args, operands=(Operand(str(logits.target), False), Operand(str(target.target), False)),
                      full=0, scalars=(), helpers=(), lines=(), output="loss", out_kind="row", out_keepdim=False,
                      out_dtype=str(lmeta.dtype))
    return CrossEntropyPlan(program=program, reference=traced.reference, ignore_index=ignore, mean=mean)


def match(problem: Problem, traced: Traced) -> Plan:
    for node in traced.graph.graph.nodes:
        if (bound := _cross_entropy_args(traced, node)) is not None:
            return _match_cross_entropy(traced, node, bound)
    program = lower(traced)
    if not program.reduces:
        raise TemplateMismatch("no reduction: not a whole-tensor reduction")
    if index.kept(program):
        raise TemplateMismatch("reduces over some dims, not the whole tensor (the rowwise family's job)")
    if program.out_kind == "elem":
        if program.out_axes != tuple(range(len(program.sizes))):
            raise TemplateMismatch("an elementwise output over fewer dims than the tensor reduced")
    elif program.out_shape != "()":
        raise TemplateMismatch(f"a whole-tensor reduction with its dims kept ({program.out_shape}): only a 0-dim "
                               "or an elementwise output")
    if any(ln.reduce != "sum" for ln in program.lines if ln.reduce):
        raise TemplateMismatch("a maximum or minimum of a whole tensor: this family sums (sum, mean, losses)")
    summed = program.closure([ln.deps[0] for ln in program.lines if ln.reduce])
    if any(program.line(d).kind == "row" for ln in summed for d in ln.deps):
        raise TemplateMismatch("a whole-tensor sum of values computed from another whole-tensor sum: two passes "
                               "(x - x.mean())")
    return Plan(program=program, reference=traced.reference)


def _row_inputs(program: Program) -> list[str]:
    """The whole-tensor values (sums and what is computed from them) that an elementwise output reads."""
    read = {d for ln in program.closure([program.output]) for d in ln.deps if program.line(d).kind == "row"}
    return [ln.name for ln in program.lines if ln.name in read]


def variants(plan: Plan) -> list[dict[str, Any]]:
    return [dict(p) for p in (CE_VARIANTS if isinstance(plan, CrossEntropyPlan) else WHOLE_VARIANTS)]


# whole-tensor sums


def _whole_partial(program: Program) -> str:
    reduces = [ln for ln in program.lines if ln.reduce]
    body = ["pid = tl.program_id(0)", "start = pid.to(tl.int64) * BLOCK", "step = tl.num_programs(0) * BLOCK"]
    body += [f"acc{j} = tl.zeros([BLOCK], dtype=tl.float32)" for j in range(len(reduces))]
    inner = [line_source(ln, index.flat(program, program.operands[ln.load].axes) if ln.load is not None else "")
             for ln in program.closure([ln.deps[0] for ln in reduces])]
    inner += [f"acc{j} += tl.where(mask, {ln.deps[0]}, 0.0)" for j, ln in enumerate(reduces)]
    full = ["offs = start + tl.arange(0, BLOCK)", "mask = tl.full([BLOCK], 1, tl.int1)", *inner, "start += step"]
    ragged = ["offs = start + tl.arange(0, BLOCK)", "mask = offs < n", *inner]
    body += ["while start + BLOCK <= n:  # whole blocks: a constant mask, so loads vectorize whatever n is",
             *("    " + line for line in full), "if start < n:  # the ragged last block, in one program",
             *("    " + line for line in ragged)]
    body += [f"tl.store(part + {j} * tl.num_programs(0) + pid, tl.sum(acc{j}, axis=0))" for j in range(len(reduces))]
    args = [f"p{i}" for i in range(len(program.operands))] + ["part", "n", *index.size_args(program)]
    args += [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK: tl.constexpr"]
    return jit_source("_kf_loss_partial", args, body)


def _whole_combine(program: Program) -> str:
    """The sums of the partials and what follows them: stored as the 0-dim output, or (an elementwise output) the
    values the third stage reads, as float32 into `out`."""
    body = ["i = tl.arange(0, P2)", "live = i < P"]
    for j, ln in enumerate(line for line in program.lines if line.reduce):
        body.append(f"{ln.name} = tl.sum(tl.load(part + {j} * P + i, mask=live, other=0.0), axis=0)")
    body += [line_source(ln) for ln in program.lines if ln.kind == "row" and not ln.reduce]
    if program.out_kind == "elem":
        body += [f"tl.store(out + {j}, {name}.to(tl.float32))" for j, name in enumerate(_row_inputs(program))]
    else:
        body.append(f"tl.store(out, {program.output}.to(out.dtype.element_ty))")
    args = ["part", "out", "D", "P", *(f"s{i}" for i in range(len(program.scalars))), "P2: tl.constexpr"]
    return jit_source("_kf_loss_combine", args, body)


def _whole_apply(program: Program) -> str:
    """The elementwise output over the flattened tensor, reading the combined values from `whole`."""
    args = [f"p{i}" for i in range(len(program.operands))] + ["whole", "out", "n", "D", *index.size_args(program)]
    args += [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK: tl.constexpr"]
    body = ["offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n"]
    body += [f"{name} = tl.load(whole + {j})" for j, name in enumerate(_row_inputs(program))]
    body += [line_source(ln, index.flat(program, program.operands[ln.load].axes) if ln.load is not None else "")
             for ln in program.closure([program.output])]
    body.append(store_source(program, index.flat(program, program.out_axes)))
    return jit_source("_kf_loss_apply", args, body)


def _whole_forward(program: Program, params: dict[str, Any]) -> list[str]:
    full = f"p{program.full}"
    scalars = "".join(f", {s}" for s in program.scalars)
    sizes = "".join(f", {z}" for z in index.size_args(program))
    operands = "".join(f"p{i}, " for i in range(len(program.operands)))
    n_reduce = sum(1 for ln in program.lines if ln.reduce)
    block = params["BLOCK"]
    elementwise = program.out_kind == "elem"
    combined = f"{full}.new_empty(({len(_row_inputs(program))},), dtype=torch.float32)" if elementwise else \
        f"{full}.new_empty((), dtype={program.out_dtype})"
    lines = [
        *operand_prologue(program),
        *index.size_lines(program),
        f"{'whole' if elementwise else 'out'} = {combined}",
        f"n = {' * '.join(index.size_args(program))}",
        f"programs = max(1, min(_kf_cdiv(n, {block}), {params['programs']}))",
        f"part = {full}.new_empty(({n_reduce}, programs), dtype=torch.float32)",
        launch.call("_kf_loss_partial", "(programs,)",
                    f"{operands}part, n{sizes}{scalars}, BLOCK={block}, num_warps={params['num_warps']}"),
        launch.call("_kf_loss_combine", "(1,)", f"part, {'whole' if elementwise else 'out'}, n, programs{scalars}, "
                    "P2=_kf_pow2(programs), num_warps=4"),
    ]
    if elementwise:
        lines += [output_alloc(program),
                  launch.call("_kf_loss_apply", f"(_kf_cdiv(n, {block}),)",
                              f"{operands}whole, out, n, n{sizes}{scalars}, BLOCK={block}, "
                              f"num_warps={params['num_warps']}")]
    return [*lines, "return out"]


# cross-entropy

_CE_PARTIAL = jit_source("_kf_ce_partial", ["p0", "p1", "part", "count", "N", "C", "IGNORE", "ROWS: tl.constexpr",
                                            "BLOCK_C: tl.constexpr"], [
    "pid = tl.program_id(0)",
    "acc = tl.zeros([ROWS], dtype=tl.float32)",
    "valid_rows = tl.zeros([ROWS], dtype=tl.int32)",
    "group = pid",
    "while group < tl.cdiv(N, ROWS):",
    "    rows = group * ROWS + tl.arange(0, ROWS)",
    "    row_mask = rows < N",
    "    base = rows.to(tl.int64) * C",
    "    m = tl.full([ROWS], float('-inf'), tl.float32)",
    "    s = tl.zeros([ROWS, BLOCK_C], dtype=tl.float32)",
    "    start = 0",
    "    while start < C:",
    "        cols = start + tl.arange(0, BLOCK_C)",
    "        mask = row_mask[:, None] & (cols < C)[None, :]",
    "        x = tl.load(p0 + base[:, None] + cols[None, :], mask=mask, other=float('-inf')).to(tl.float32)",
    "        m_new = tl.maximum(m, tl.max(x, axis=1))",
    "        m_use = tl.where(m_new == float('-inf'), 0.0, m_new)  # nothing seen yet: no -inf - -inf",
    "        s = s * tl.exp(m - m_use)[:, None] + tl.exp(x - m_use[:, None])",
    "        m = m_new",
    "        start += BLOCK_C",
    "    lse = m + tl.log(tl.maximum(tl.sum(s, axis=1), 1.0))  # >= 1 (the max's own term) but in masked rows",
    "    t = tl.load(p1 + rows, mask=row_mask, other=IGNORE)",
    "    valid = row_mask & (t != IGNORE)",
    "    inside = valid & (t >= 0) & (t < C)  # never read outside the row",
    "    xt = tl.load(p0 + base + t, mask=inside, other=0.0).to(tl.float32)",
    "    acc += tl.where(valid, lse - xt, 0.0)",
    "    valid_rows += valid.to(tl.int32)",
    "    group += tl.num_programs(0)",
    "tl.store(part + pid, tl.sum(acc, axis=0))",
    "tl.store(count + pid, tl.sum(valid_rows, axis=0))",
])

_CE_COMBINE = jit_source("_kf_ce_combine", ["part", "count", "out", "P", "P2: tl.constexpr", "MEAN: tl.constexpr"], [
    "i = tl.arange(0, P2)",
    "live = i < P",
    "loss = tl.sum(tl.load(part + i, mask=live, other=0.0), axis=0)",
    "if MEAN:",
    "    loss = loss / tl.sum(tl.load(count + i, mask=live, other=0), axis=0).to(tl.float32)",
    "tl.store(out, loss.to(out.dtype.element_ty))",
])


def _ce_forward(plan: CrossEntropyPlan, params: dict[str, Any]) -> list[str]:
    cap = params["max_block_c"]
    return [
        *operand_prologue(plan.program),
        "N, C = p0.shape",
        f"out = p0.new_empty((), dtype={plan.program.out_dtype})",
        f"block_c = min({cap}, _kf_pow2(C))",
        f"rows = max(1, {cap} // block_c)",
        f"programs = max(1, min(_kf_cdiv(N, rows), {params['programs']}))",
        "part = p0.new_empty(programs, dtype=torch.float32)",
        "count = p0.new_empty(programs, dtype=torch.int32)",
        launch.call("_kf_ce_partial", "(programs,)", f"p0, p1, part, count, N, C, {plan.ignore_index}, ROWS=rows, "
                    f"BLOCK_C=block_c, num_warps={params['num_warps']}"),
        launch.call("_kf_ce_combine", "(1,)", f"part, count, out, programs, P2=_kf_pow2(programs), "
                    f"MEAN={plan.mean}, num_warps=4"),
        "return out",
    ]


def render(plan: Plan, params: dict[str, Any]) -> str:
    if isinstance(plan, CrossEntropyPlan):
        return module_source(plan.program, plan.reference, [_CE_PARTIAL, _CE_COMBINE], _ce_forward(plan, params))
    kernels = [_whole_partial(plan.program), _whole_combine(plan.program)]
    if plan.program.out_kind == "elem":
        kernels.append(_whole_apply(plan.program))
    return module_source(plan.program, plan.reference, kernels, _whole_forward(plan.program, params))
