"""Family `pooling`: one max, average or adaptive pooling over 1-3 spatial dims (torch's 1-D pools arrive as 2-D
ones) with the pointwise ops before it (on the pooled input) and after it (on the pooled output, operands
broadcasting along any dims), in one kernel.

Each program takes BLOCK output elements, walks each one's window (a loop per spatial dim, kernel size, stride,
padding and dilation constexpr; adaptive windows run from floor(o * I / O) to ceil((o + 1) * I / O) in loops of
runtime length), computes the input's pointwise lines at each window position from the input tensors themselves
(the prologue is never written out), reduces in fp32 (max with NaN propagating, as torch; average over torch's
divisor: count_include_pad, ceil_mode's clipped windows, divisor_override), then the output's lines, and stores.
Global pooling (an adaptive pool to size 1) is a reduction over the spatial dims: the rowwise family's, not this.
Declined: the max's indices, a reduction before or after the pool, a second pool.
The window's geometry is the traced one (constexpr), as the model's constructor set it.
Parameters: BLOCK, num_warps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import index, launch
from kernelflow.stages.templates.decomposed import Decomposed, _bind, _name, output_node, render_size
from kernelflow.stages.templates.lowering import Traced
from kernelflow.stages.templates.program import Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import jit_source, module_source, store_source

_POOLS = {"max_pool2d_with_indices": ("max", 2), "max_pool3d_with_indices": ("max", 3), "avg_pool2d": ("avg", 2),
          "avg_pool3d": ("avg", 3), "_adaptive_avg_pool2d": ("adaptive_avg", 2),
          "_adaptive_avg_pool3d": ("adaptive_avg", 3), "adaptive_max_pool2d": ("adaptive_max", 2),
          "adaptive_max_pool3d": ("adaptive_max", 3)}
VARIANTS = ({"BLOCK": 512, "num_warps": 4}, {"BLOCK": 1024, "num_warps": 4}, {"BLOCK": 256, "num_warps": 4},
            {"BLOCK": 1024, "num_warps": 8})


@dataclass(frozen=True)
class PoolPlan(Plan):
    """`program` is the output's lines, the pooled value read as `pooled`; `pre` computes the pooled input."""

    pre: Program | None = None
    how: str = "max"  # max | avg | adaptive_avg | adaptive_max
    dims: int = 2  # spatial dims pooled (the last ones)
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    count_include_pad: bool = True
    divisor: int | None = None
    ceil_mode: bool = False
    in_dims: tuple[str, ...] = ()  # the pooled input's shape, as forward expressions


def _ints(value: Any, n: int, default: tuple[int, ...]) -> tuple[int, ...]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return default
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, int) for v in values):
        raise TemplateMismatch(f"a pooling parameter {value!r} computed in forward")
    return tuple(values * n if len(values) == 1 else values)


def _pool_node(traced: Traced) -> tuple[torch.fx.Node, torch.fx.Node, str, int]:
    """The pooling node, the node of its pooled values, how it pools and over how many dims."""
    if isinstance(traced.aten, str):
        raise TemplateMismatch(traced.aten)
    nodes = [n for n in traced.aten.graph.graph.nodes if n.op == "call_function" and hasattr(n.target, "_schema")
             and _name(n) in _POOLS]
    if not nodes:
        raise TemplateMismatch("no max, average or adaptive pooling in forward")
    if len(nodes) > 1:
        raise TemplateMismatch(f"{len(nodes)} pooling ops; the template renders one")
    node = nodes[0]
    how, dims = _POOLS[_name(node)]
    value = node
    if how in ("max", "adaptive_max"):
        needed = Decomposed(traced.aten, traced.model)._needed(output_node(traced.aten))
        if any(u.args[1] != 0 and u in needed for u in node.users):
            raise TemplateMismatch("the pooling's indices are used (only its values are rendered)")
        value = next((u for u in node.users if u.args[1] == 0), node)
    return node, value, how, dims


def match(problem: Problem, traced: Traced) -> PoolPlan:
    node, value, how, dims = _pool_node(traced)
    assert not isinstance(traced.aten, str)
    bound = _bind(node)
    if how.startswith("adaptive") and all(size == 1 for size in bound["output_size"]):
        raise TemplateMismatch("a global pooling: a reduction over the spatial dims (the rowwise family's job)")
    pre_lowering = Decomposed(traced.aten, traced.model, computed=traced.computed)
    source = bound["self"]
    pre = pre_lowering.run(source)
    if pre.reduces or pre.out_axes != tuple(range(len(pre.sizes))):
        raise TemplateMismatch("the pooled input is not an elementwise function of forward's inputs")
    space, layout = pre_lowering.space, pre_lowering.values[source][1]
    sizes = [(sympy.Mul(*(space.size[space.find(a)] for a in space.flat((dim,)))), space.numel(space.flat((dim,))))
             for dim in layout]
    hints = [h for _, h in pre_lowering.shape(value)]
    shape = sizes[:-dims] + [(sympy.Symbol(f"kf_o{d}", positive=True, integer=True), h)
                             for d, h in enumerate(hints[-dims:])]  # the forward computes them (_sizes)
    post = Decomposed(traced.aten, traced.model, virtual={value: "pooled"}, shapes={value: shape},
                      computed=traced.computed)
    program = post.run()
    if program.reduces:
        raise TemplateMismatch("a reduction after the pooling (the template renders pointwise ops after it)")
    if program.virtual[0] != tuple(range(len(program.sizes))):
        raise TemplateMismatch("the output does not follow the pooled values' order (a broadcast or permute after "
                               "the pooling)")
    kernel = _ints(bound.get("kernel_size"), dims, ())
    common = dict(program=program, reference=traced.reference, pre=pre, how=how, dims=dims,
                  in_dims=tuple(render_size(e) for e, _ in sizes), ceil_mode=bool(bound.get("ceil_mode", False)))
    if how.startswith("adaptive"):
        return PoolPlan(**common, kernel=_ints(bound["output_size"], dims, ()))  # type: ignore[arg-type]
    return PoolPlan(**common, kernel=kernel, stride=_ints(bound.get("stride"), dims, kernel),  # type: ignore[arg-type]
                    padding=_ints(bound.get("padding"), dims, (0,) * dims),
                    dilation=_ints(bound.get("dilation"), dims, (1,) * dims),
                    count_include_pad=bool(bound.get("count_include_pad", True)),
                    divisor=bound.get("divisor_override"))


def variants(plan: Plan) -> list[dict[str, Any]]:
    return [dict(v) for v in VARIANTS]


def _renamed(text: str) -> str:
    """The input program's names apart from the output program's: lines u<k>, scalars t<k>."""
    return re.sub(r"\b([vs])(\d+)\b", lambda m: {"v": "u", "s": "t"}[m[1]] + m[2], text)


def _lines(program: Program, ptr: str, size: str, var: str, mask: str, rename: bool) -> list[str]:
    out = []
    for line in program.lines:
        name = _renamed(line.name) if rename else line.name
        if line.load is not None:
            address = index.flat(program, program.operands[line.load].axes, var, size)
            out.append(f"{name} = tl.load({ptr}{line.load} + {address}, mask={mask}, other=0.0).to(tl.float32)")
        else:
            out.append(f"{name} = {_renamed(line.expr) if rename else line.expr}")
    return out


def _window(plan: PoolPlan) -> list[str]:
    """The loops over the window; inside, `valid` and the input's flat index `iflat`."""
    assert plan.pre is not None
    dims = plan.dims
    body: list[str] = []
    lead = "    "
    depth = 0
    conds = ["mask"]
    for d in range(dims):
        pad = lead * depth
        if plan.how.startswith("adaptive"):
            body += [f"{pad}lo{d} = (o{d} * I{d}) // O{d}", f"{pad}hi{d} = ((o{d} + 1) * I{d} + O{d} - 1) // O{d}",
                     f"{pad}k{d} = 0", f"{pad}while k{d} < W{d}:", f"{pad}    i{d} = lo{d} + k{d}"]
            conds += [f"(i{d} < hi{d})"]
        else:
            body += [f"{pad}k{d} = 0", f"{pad}while k{d} < {plan.kernel[d]}:",
                     f"{pad}    i{d} = o{d} * {plan.stride[d]} - {plan.padding[d]} + k{d} * {plan.dilation[d]}"]
            conds += [f"(i{d} >= 0)", f"(i{d} < I{d})"]
        depth += 1
    pad = lead * depth
    flat = "plane"
    for d in range(dims):
        flat = f"({flat} * I{d} + i{d})"
    inner = [f"valid = {' & '.join(conds)}", f"iflat = {flat}.to(tl.int64)"]
    inner += _lines(plan.pre, "a", "y", "iflat", "valid", rename=True)
    x = _renamed(plan.pre.output)
    if plan.how in ("max", "adaptive_max"):
        inner.append(f"acc = tl.maximum(acc, tl.where(valid, {x}, float('-inf')), propagate_nan=tl.PropagateNan.ALL)")
    else:
        inner += [f"acc += tl.where(valid, {x}, 0.0)", "count += tl.where(valid, 1.0, 0.0)"]
    body += [pad + s for s in inner]
    for d in reversed(range(dims)):
        body.append(lead * (d + 1) + f"k{d} += 1")
    return body


def _divisor(plan: PoolPlan) -> list[str]:
    """torch's average divisor: the padded window clipped to the padded input (count_include_pad), else the
    elements inside the input; divisor_override if given."""
    if plan.how == "adaptive_avg":
        return ["pooled = acc / count"]
    if plan.divisor is not None:
        return [f"pooled = acc / {plan.divisor}"]
    if not plan.count_include_pad:
        return ["pooled = acc / count"]
    size = []
    lines = []
    for d, (k, s, p) in enumerate(zip(plan.kernel, plan.stride, plan.padding, strict=True)):
        lines += [f"start{d} = o{d} * {s} - {p}", f"end{d} = tl.minimum(start{d} + {k}, I{d} + {p})"]
        size.append(f"(end{d} - start{d})")
    return lines + [f"pooled = acc / ({' * '.join(size)}).to(tl.float32)"]


def _kernel(plan: PoolPlan) -> str:
    assert plan.pre is not None
    program, pre = plan.program, plan.pre
    dims = plan.dims
    args = [f"a{i}" for i in range(len(pre.operands))] + [f"p{i}" for i in range(len(program.operands))]
    args += ["out", "n", *(f"I{d}" for d in range(dims)), *(f"O{d}" for d in range(dims))]
    if plan.how.startswith("adaptive"):
        args += [f"W{d}" for d in range(dims)]
    args += index.size_args(pre, "y") + index.size_args(program)
    args += [f"t{i}" for i in range(len(pre.scalars))] + [f"s{i}" for i in range(len(program.scalars))]
    args.append("BLOCK: tl.constexpr")
    body = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n", "rest = offs"]
    for d in reversed(range(dims)):
        body += [f"o{d} = rest % O{d}", f"rest = rest // O{d}"]
    body.append("plane = rest")
    start = "float('-inf')" if plan.how in ("max", "adaptive_max") else "0.0"
    body += [f"acc = tl.full([BLOCK], {start}, tl.float32)", "count = tl.zeros([BLOCK], dtype=tl.float32)"]
    body += _window(plan)
    body += ["pooled = acc"] if plan.how in ("max", "adaptive_max") else _divisor(plan)
    body += _lines(program, "p", "z", "offs", "mask", rename=False)
    body.append(store_source(program, index.flat(program, program.out_axes)))
    return jit_source("_kf_pool", args, body)


def _sizes(plan: PoolPlan) -> list[str]:
    """The forward's lines computing each output size O<d> (as torch's pooling_output_shape; an adaptive pool's is
    its output_size) and binding it for the output program's sizes."""
    lines = []
    for d in range(plan.dims):
        if plan.how.startswith("adaptive"):
            lines.append(f"O{d} = {plan.kernel[d]}")
        else:
            k, s, p, dil = plan.kernel[d], plan.stride[d], plan.padding[d], plan.dilation[d]
            lines.append(f"O{d} = (I{d} + {2 * p - dil * (k - 1) - 1 + (s - 1 if plan.ceil_mode else 0)}) // {s} + 1")
            if plan.ceil_mode:
                lines.append(f"O{d} -= 1 if (O{d} - 1) * {s} >= I{d} + {p} else 0")
        lines.append(f"n_kf_o{d} = O{d}")
    return lines


def _forward(plan: PoolPlan, params: dict[str, Any]) -> list[str]:
    assert plan.pre is not None
    program, pre, dims = plan.program, plan.pre, plan.dims
    lines = [f"a{i} = {op.expr}.contiguous()" for i, op in enumerate(pre.operands)]
    lines += [f"p{i} = {op.expr}.contiguous()" for i, op in enumerate(program.operands)]
    lines += list(dict.fromkeys([*pre.binds, *program.binds]))
    lines += [f"I{d} = {e}" for d, e in enumerate(plan.in_dims[-dims:])] + _sizes(plan)
    lines += [f"y{k} = {e}" for k, e in enumerate(pre.sizes)] + [f"z{k} = {e}" for k, e in enumerate(program.sizes)]
    if plan.how.startswith("adaptive"):
        lines += [f"W{d} = _kf_cdiv(I{d}, O{d}) + 1" for d in range(dims)]
    first = "a0" if pre.operands else "p0"
    lines += [f"out = {first}.new_empty({program.out_shape}, dtype={program.out_dtype})", "n = out.numel()"]
    call = [f"a{i}" for i in range(len(pre.operands))] + [f"p{i}" for i in range(len(program.operands))]
    call += ["out", "n", *(f"I{d}" for d in range(dims)), *(f"O{d}" for d in range(dims))]
    if plan.how.startswith("adaptive"):
        call += [f"W{d}" for d in range(dims)]
    call += index.size_args(pre, "y") + index.size_args(program) + list(pre.scalars) + list(program.scalars)
    call += [f"BLOCK={params['BLOCK']}", f"num_warps={params['num_warps']}"]
    lines += [launch.call("_kf_pool", f"(_kf_cdiv(n, {params['BLOCK']}),)", ", ".join(call)), "return out"]
    return lines


def render(plan: Plan, params: dict[str, Any]) -> str:
    assert isinstance(plan, PoolPlan) and plan.pre is not None
    merged = Program(**{**plan.program.__dict__, "helpers": tuple(sorted({*plan.program.helpers, *plan.pre.helpers}))})
    return module_source(merged, plan.reference, [_kernel(plan)], _forward(plan, params))

