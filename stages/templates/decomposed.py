"""Lower the reference's ATen graph (aten.py) to a Program over an index space (space.py), or say why not.

Pointwise primitives become lines (aten_ops.py); views, permutes, squeezes and broadcasts only move values between
layouts; sum/mean/amax/amin/max/min/argmax/var_mean/var over any set of dims become reductions over that set of axes
(every reduction of a program runs over the same axes: the row); with `scans`, cumsum/cumprod/cummax/cummin along a
dim become scan lines. Only the nodes the output depends on are lowered: a batch norm's update of its running
statistics (a copy into a buffer) is not part of the candidate's result and is dropped.
What is not lowered is named: the ATen op and why.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import sympy
import torch
import torch.fx
from torch import nn
from torch.utils._sympy.functions import FloorDiv

from kernelflow.stages.templates import aten_ops, identities
from kernelflow.stages.templates.aten import AtenGraph
from kernelflow.stages.templates.program import (
    Kind,
    Line,
    Operand,
    Program,
    Reduction,
    Scan,
    TemplateMismatch,
    Value,
)
from kernelflow.stages.templates.space import Layout, Space

_VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "permute", "expand", "alias", "clone",
          "contiguous", "lift_fresh_copy", "_to_copy", "convert_element_type", "slice", "repeat"}
_REDUCTIONS: dict[str, Reduction] = {"sum": "sum", "mean": "sum", "amax": "max", "amin": "min", "max": "max",
                                     "min": "min", "argmax": "argmax"}
_SCANS: dict[str, Scan] = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}
_WHY = {  # ops no family lowers, by what they are
    "convolution": "no family lowers a convolution here (library_epilogue calls it through torch)",
    "mm": "a matrix product (the matmul and library_epilogue families take 2-D products of forward's inputs)",
    "addmm": "a matrix product (the matmul and library_epilogue families take 2-D products of forward's inputs)",
    "bmm": "a batched matrix product: no family lowers it",
    "gather": "an indexed read: no family lowers it", "index": "an indexed read: no family lowers it",
    "scatter": "an indexed write: no family lowers it", "rev": "a flip: no family reverses an axis",
    "slice": "a slice: no family reads part of a tensor", "cat": "a concatenation: no family lowers it",
    "constant_pad_nd": "a pad: no family lowers it", "prod": "a product reduction: no family lowers it",
    "sort": "a sort: no family lowers it", "topk": "a top-k: no family lowers it",
}
_POOLS = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "_adaptive_avg_pool")


def output_node(aten: AtenGraph) -> torch.fx.Node:
    """The one tensor forward returns."""
    output = next(n for n in aten.graph.graph.nodes if n.op == "output")
    results = [r for r in torch.utils._pytree.tree_leaves(output.args[0]) if r is not None]
    if len(results) != 1 or not isinstance(results[0], torch.fx.Node):
        raise TemplateMismatch("forward returns more than one tensor")
    return results[0]


def _name(node: torch.fx.Node) -> str:
    target = node.target
    if target is operator.getitem:
        return "getitem"
    schema = getattr(target, "_schema", None)
    if schema is None:
        raise TemplateMismatch(f"{node.name}: arithmetic on sizes ({target}) used as a value")
    return str(schema.name).split("::")[-1]


def _bind(node: torch.fx.Node) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    for i, arg in enumerate(node.target._schema.arguments):  # type: ignore[union-attr]
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    text = repr(float(value)) if isinstance(value, float) else str(int(value))
    return f"({text})" if value < 0 else text


def render_size(expr: sympy.Expr) -> str:
    """A size expression as forward computes it from the n_<symbol> names (integer arithmetic)."""
    num, den = sympy.fraction(sympy.together(sympy.sympify(expr)))
    if den != 1:
        return f"({render_size(num)} // {render_size(den)})"
    if num.is_Integer:
        return str(int(num))
    if num.is_Symbol:
        return f"n_{num.name}"
    if num.is_Mul:
        return "(" + " * ".join(render_size(a) for a in num.args) + ")"
    if num.is_Add:
        return "(" + " + ".join(render_size(a) for a in num.args) + ")"
    if num.is_Pow and num.exp.is_Integer and num.exp > 0:
        return "(" + " * ".join([render_size(num.base)] * int(num.exp)) + ")"
    if isinstance(num, FloorDiv):
        return f"({render_size(num.args[0])} // {render_size(num.args[1])})"
    raise TemplateMismatch(f"a size {num} that the template cannot compute from the inputs' shapes")


class Decomposed:
    """Walks the ATen graph in order, appending lines; one instance per lowering."""

    def __init__(self, aten: AtenGraph, model: nn.Module, scans: bool = False,
                 virtual: dict[torch.fx.Node, str] | None = None,
                 shapes: dict[torch.fx.Node, list[tuple[sympy.Expr, int]]] | None = None,
                 computed: dict[torch.fx.Node, str] | None = None):
        self.aten = aten
        self.scans = scans
        self.virtual = virtual or {}  # nodes a family computes itself: an elem line of that expression
        self.virtual_layouts: list[Layout] = []
        self.shapes = shapes or {}  # a virtual node's sizes as the family computes them (symbols it binds itself)
        self.computed = computed or {}  # nodes forward computes itself (a library call): operands of that name
        self.space = Space(self._simplify)
        self.space.named = self._named
        self.attr_binds: dict[sympy.Symbol, str] = {}
        found: dict[int, list[str]] = {}
        for prefix, module in model.named_modules():
            for key, value in vars(module).items():
                if type(value) is int and value > 1 and not key.startswith("_"):
                    found.setdefault(value, []).append(".".join(filter(None, ("self", prefix, key))))
        self.int_attrs = {value: paths[0] for value, paths in found.items() if len(paths) == 1}
        self.lines: list[Line] = []
        self.values: dict[torch.fx.Node, Any] = {}
        self.operands: list[tuple[str, Layout]] = []
        self.scalars: list[str] = []
        self.reduced: tuple[int, ...] | None = None
        self.attrs = {v: k for k, v in reversed(vars(model).items()) if isinstance(v, float) and not k.startswith("_")}
        self.shape_env = next((n.meta["val"].fake_mode.shape_env for n in aten.names
                               if isinstance(n.meta.get("val"), torch.Tensor)), None)

    # sizes

    def _expr(self, size: Any) -> tuple[sympy.Expr, int]:
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            if self.shape_env is None:
                return expr, int(size)
            return expr, self.hint(expr)
        return sympy.Integer(int(size)), int(size)

    def hint(self, expr: sympy.Expr) -> int:
        return int(sympy.sympify(expr).xreplace(self.shape_env.backed_var_to_val)) if self.shape_env else int(expr)

    def _named(self, size: sympy.Expr) -> sympy.Expr:
        """A view's constant dim (GroupNorm's groups) as the model attribute of that value, where one attribute
        has it, so the candidate reads it from the model at run time."""
        if not size.is_Integer or int(size) not in self.int_attrs:
            return size
        symbol = sympy.Symbol(f"kf_attr{int(size)}", positive=True, integer=True)
        self.attr_binds[symbol] = self.int_attrs[int(size)]
        return symbol

    def _simplify(self, expr: sympy.Expr) -> sympy.Expr:
        return self.shape_env.simplify(expr) if self.shape_env is not None else expr

    def shape(self, node: Any) -> list[tuple[sympy.Expr, int]]:
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            raise TemplateMismatch(f"{getattr(node, 'name', node)} is not a single tensor")
        return [self._expr(s) for s in val.shape]

    # values: (Value, Layout)

    def emit(self, kind: Kind, deps: tuple[Value, ...] = (), **fields: Any) -> Value:
        name = f"v{len(self.lines)}"
        self.lines.append(Line(name=name, kind=kind, deps=tuple(d.text for d in deps if d.kind != "scalar"), **fields))
        return Value(name, kind)

    def _load(self, val: Any) -> Value:
        """The last operand's load (as float32); a bool tensor's compared with 0, so that it is a bool again (a
        where's condition, a mask)."""
        loaded = self.emit("elem", load=len(self.operands) - 1)
        if isinstance(val, torch.Tensor) and val.dtype == torch.bool:
            return self.emit("elem", (loaded,), expr=f"{loaded.text} != 0")
        return loaded

    def tensor(self, arg: Any) -> tuple[Value, Layout]:
        if isinstance(arg, torch.fx.Node):
            found = self.values.get(arg)
            if not (isinstance(found, tuple) and len(found) == 2 and isinstance(found[0], Value)):
                raise TemplateMismatch(f"{arg.name} is used as a tensor but is {type(found).__name__}")
            return found
        if isinstance(arg, (bool, int, float)):
            if isinstance(arg, float) and arg in self.attrs:
                return self.scalar_arg(f"self.{self.attrs[arg]}"), ()
            return Value(_literal(arg), "scalar"), ()
        raise TemplateMismatch(f"unsupported argument {arg!r}")

    def scalar_arg(self, expr: str) -> Value:
        if expr not in self.scalars:
            self.scalars.append(expr)
        return Value(f"s{self.scalars.index(expr)}", "scalar")

    def broadcast(self, node: torch.fx.Node, layouts: list[Layout]) -> Layout:
        """The layout of node's output from its inputs' layouts, aligned from the right; matching dims unified."""
        rank = len(self.shape(node))
        out: list[tuple[int, ...]] = []
        for pos in range(rank):
            dims = [lay[pos - rank + len(lay)] for lay in layouts if pos - rank + len(lay) >= 0]
            dims = [d for d in dims if d]
            for other in dims[1:]:
                self.space.unify(self.space.flat((dims[0],)), self.space.flat((other,)))
            out.append(dims[0] if dims else ())
        return tuple(out)

    def pointwise(self, expr: str, deps: list[Value]) -> Value:
        kinds = {d.kind for d in deps}
        kind: Kind = "elem" if "elem" in kinds else "row" if "row" in kinds else "scalar"
        if kind == "scalar":
            return Value(f"({expr})", "scalar")
        return self.emit(kind, tuple(deps), expr=expr)

    def reduce(self, node: torch.fx.Node, how: Reduction, x: Value, layout: Layout, dims: Any) -> Value:
        rank = len(layout)
        dims = list(range(rank)) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else dims
        dims = [d % rank for d in (dims if isinstance(dims, (list, tuple)) else [dims])] if rank else []
        axes = self.space.flat(tuple(layout[d] for d in dims))
        if x.kind != "elem":
            raise TemplateMismatch(f"{node.name}: a reduction of a reduced value")
        self.same_row(node, axes, "reduces")
        return self.emit("row", (x,), reduce=how)

    def same_row(self, node: torch.fx.Node, axes: tuple[int, ...], verb: str) -> None:
        """Every reduction and scan of a program runs over one set of axes (the row). Two runs over axes not yet
        related (sums of two inputs that never meet) become the same loop, which any two runs of equal size may."""
        if self.reduced is None:
            self.reduced = axes
            return
        space = self.space
        before = space.flat((self.reduced,))
        if {space.find(a) for a in before} != {space.find(a) for a in axes} and space.numel(before) == space.numel(axes):
            space.loose = True
            try:
                space.unify(before, axes)
            except TemplateMismatch:
                pass
            finally:
                space.loose = False
        if {space.find(a) for a in space.flat((self.reduced,))} != {space.find(a) for a in space.flat(((*axes,),))}:
            raise TemplateMismatch(f"{node.name} {verb} over other dims than an earlier reduction or scan; one program "
                                   "reduces one set of dims")

    @staticmethod
    def reduced_layout(layout: Layout, dims: Any, keepdim: bool) -> Layout:
        rank = len(layout)
        dims = list(range(rank)) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else dims
        dims = {d % rank for d in (dims if isinstance(dims, (list, tuple)) else [dims])} if rank else set()
        return tuple(() if i in dims else d for i, d in enumerate(layout) if keepdim or i not in dims)

    # nodes

    def run(self, result: torch.fx.Node | None = None) -> Program:
        """The program computing `result` (default: what forward returns)."""
        returned = result is None
        if result is None:
            result = output_node(self.aten)
        needed = self._needed(result)
        for node in self.aten.graph.graph.nodes:
            if node in needed:
                self.values[node] = self.lower_node(node)
        return self._program(result, returned)

    def _needed(self, result: torch.fx.Node) -> set[torch.fx.Node]:
        needed, stack = set(), [result]
        while stack:
            node = stack.pop()
            if node not in needed:
                needed.add(node)
                value = node.meta.get("val")
                sizes = isinstance(value, (torch.SymInt, int)) and not isinstance(value, bool)
                if node not in self.virtual and node not in self.computed and not sizes:  # a size reads no data
                    stack.extend(node.all_input_nodes)
        return needed

    def lower_node(self, node: torch.fx.Node) -> Any:
        val = node.meta.get("val")
        if node in self.computed:
            layout = tuple((self.space.new(e, h),) if h != 1 else () for e, h in self.shape(node))
            self.operands.append((self.computed[node], layout))
            return self._load(val), layout
        if node in self.virtual:
            shape = self.shapes.get(node) or self.shape(node)
            layout = tuple((self.space.new(e, h),) if h != 1 else () for e, h in shape)
            self.virtual_layouts.append(layout)
            return self.emit("elem", expr=self.virtual[node]), layout
        if node.op == "placeholder":
            if not isinstance(val, torch.Tensor):
                return None  # a number forward takes; used only as a size
            sizes = self.aten.dims[node]
            layout = tuple((self.space.new(e, self.hint(e)),) if self.hint(e) != 1 else () for e in sizes)
            self.operands.append((self.aten.names[node], layout))
            return self._load(val), layout
        if node.op != "call_function":
            raise TemplateMismatch(f"unsupported node {node.format_node()}")
        if isinstance(val, torch.Tensor) and val.dtype == torch.float64:
            raise TemplateMismatch(f"{node.name} computes in float64; the kernels compute in float32")
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            return None  # size arithmetic: its uses are views, which read the node's own shape
        name = _name(node)
        if name.endswith("_") and not name.startswith("_"):
            raise TemplateMismatch(f"aten.{name} writes into a tensor the result depends on")
        if name == "getitem":
            return self._select(node)
        if name in _VIEWS:
            return self._view(node, name)
        if name in ("scalar_tensor", "full", "full_like", "zeros_like", "ones_like", "zeros", "ones"):
            return self._constant(node, name)
        if name in _REDUCTIONS or name in ("var_mean", "var", "std"):
            return self._reduction(node, name)
        if name in _SCANS:
            return self._scan(node, name)
        if name in aten_ops.OPS:
            return self._pointwise(node, name)
        if name in ("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d"):
            return self._global_pool(node, name)
        if any(name.startswith(p) for p in _POOLS):
            raise TemplateMismatch(f"aten.{name}: a window reduction (the pooling family's job)")
        raise TemplateMismatch(f"aten.{name}: {_WHY.get(name, 'no family lowers it')}")

    def _pointwise(self, node: torch.fx.Node, name: str) -> tuple[Value, Layout]:
        bound = _bind(node)
        rendered: dict[str, Any] = {}
        deps: list[Value] = []
        layouts: list[Layout] = []
        for key, arg in bound.items():
            if isinstance(arg, torch.fx.Node) or (isinstance(arg, (int, float)) and key not in ("dtype",)):
                value, layout = self.tensor(arg)
                rendered[key] = value.text
                deps.append(value)
                layouts.append(layout)
        if name == "bitwise_not" and bound["self"].meta["val"].dtype != torch.bool:
            raise TemplateMismatch("aten.bitwise_not of an integer tensor")
        expr = aten_ops.build(name, rendered, bound)
        return self.pointwise(expr, deps), self.broadcast(node, layouts)

    def _constant(self, node: torch.fx.Node, name: str) -> tuple[Value, Layout]:
        bound = _bind(node)
        value = {"zeros_like": 0.0, "ones_like": 1.0, "zeros": 0.0, "ones": 1.0}.get(
            name, bound.get("s", bound.get("fill_value", bound.get("value"))))
        if isinstance(value, torch.fx.Node) or value is None:
            raise TemplateMismatch(f"aten.{name} of a computed value")
        layout = tuple((self.space.new(e, h),) if h != 1 else () for e, h in self.shape(node))
        return self.tensor(value)[0], layout

    def _view(self, node: torch.fx.Node, name: str) -> tuple[Value, Layout]:
        source = node.args[0]
        value, layout = self.tensor(source)
        if name in ("_to_copy", "convert_element_type"):
            dtype = _bind(node).get("dtype")
            expr = aten_ops.build(name, {"a": value.text, "self": value.text}, {"dtype": dtype})
            return (self.pointwise(expr, [value]) if expr != value.text else value), layout
        if name == "slice":
            bound = _bind(node)
            size = self.shape(source)[bound["dim"] % len(layout)][1]
            end = bound.get("end")
            whole = bound.get("start") in (None, 0) and bound.get("step", 1) == 1 and (
                end is None or (isinstance(end, int) and end >= size))
            if not whole:
                raise TemplateMismatch(f"aten.slice: {_WHY['slice']}")
            return value, layout
        if name == "repeat":  # each repeated dim gains an outer axis along which the value does not vary
            repeats = [r.meta["val"] if isinstance(r, torch.fx.Node) else r for r in _bind(node)["repeats"]]
            pad = len(repeats) - len(layout)
            out = []
            for i, r in enumerate(repeats):
                expr, hint = self._expr(r)
                src = layout[i - pad] if i >= pad else ()
                out.append(src if hint == 1 else (self.space.new(expr, hint), *src))
            return value, tuple(out)
        if name == "permute":
            order: list[int] = list(_bind(node)["dims"])
            return value, tuple(layout[d % len(layout)] for d in order)
        if name == "expand":
            shape = self.shape(node)
            pad = len(shape) - len(layout)
            out = [() if i < pad else layout[i - pad] for i in range(len(shape))]
            return value, tuple(d if d or h == 1 else (self.space.new(e, h),) for d, (e, h) in zip(out, shape, strict=True))
        shape = self.shape(node)
        return value, self.space.regroup(layout, shape)

    def _select(self, node: torch.fx.Node) -> Any:
        source: Any = node.args[0]
        index: int = int(node.args[1])  # type: ignore[arg-type]
        found = self.values.get(source)
        if not isinstance(found, list):
            raise TemplateMismatch(f"unsupported indexing {node.format_node()}")
        if found[index] is None:
            raise TemplateMismatch(f"{node.name}: {source} output {index} is not lowered (only the values)")
        return found[index]

    def _reduction(self, node: torch.fx.Node, name: str) -> Any:
        bound = _bind(node)
        x, layout = self.tensor(bound["self"])
        dims, keepdim = bound.get("dim"), bool(bound.get("keepdim", False))
        if name in ("sum", "mean") and bound.get("dtype") is not None and not bound["dtype"].is_floating_point:
            raise TemplateMismatch(f"aten.{name} into an integer dtype")
        out = self.reduced_layout(layout, dims, keepdim)
        if name in ("var_mean", "var", "std"):
            correction = bound.get("correction")
            correction = 1 if correction is None else correction
            total = self.reduce(node, "sum", x, layout, dims)
            mean = self.pointwise(f"{total.text} / D", [total])
            centered = self.pointwise(f"{x.text} - {mean.text}", [x, mean])
            squares = self.reduce(node, "sum", self.pointwise(f"{centered.text} * {centered.text}", [centered]),
                                  layout, dims)
            var = self.pointwise(f"{squares.text} / tl.maximum(D - {_literal(correction)}, 0)", [squares])
            if name == "std":
                return self.pointwise(f"tl.sqrt({var.text})", [var]), out
            return [(var, out), (mean, out)] if name == "var_mean" else (var, out)
        if name in ("max", "min") and not isinstance(dims, (int, list, tuple)):
            dims = None
        how = _REDUCTIONS[name]
        result = self.reduce(node, how, x, layout, dims)
        if name == "mean":
            result = self.pointwise(f"{result.text} / D", [result])
        if name in ("max", "min") and dims is not None:
            indices = (self.reduce(node, "argmax", x, layout, dims), out) if name == "max" else None
            return [(result, out), indices]
        return result, out

    def _global_pool(self, node: torch.fx.Node, name: str) -> Any:
        """An adaptive pool to size 1 is a mean (a maximum) over the spatial dims; other sizes are windows."""
        bound = _bind(node)
        sizes = list(bound["output_size"])
        if any(size != 1 for size in sizes):
            raise TemplateMismatch(f"aten.{name}: a window reduction (the pooling family's job)")
        x, layout = self.tensor(bound["self"])
        dims = list(range(len(layout) - len(sizes), len(layout)))
        out = self.reduced_layout(layout, dims, True)
        if name.startswith("_adaptive_avg"):
            total = self.reduce(node, "sum", x, layout, dims)
            return self.pointwise(f"{total.text} / D", [total]), out
        return [(self.reduce(node, "max", x, layout, dims), out), None]

    def _scan(self, node: torch.fx.Node, name: str) -> Any:
        if not self.scans:
            raise TemplateMismatch(f"aten.{name}: a scan along a dim, neither pointwise nor a reduction "
                                   "(the scan family's job)")
        bound = _bind(node)
        if not bound["self"].meta["val"].dtype.is_floating_point:
            raise TemplateMismatch(f"aten.{name} of a non-floating tensor (the kernel scans in float32)")
        x, layout = self.tensor(bound["self"])
        if x.kind != "elem":
            raise TemplateMismatch(f"aten.{name} of a reduced value")
        dim = bound["dim"] % max(len(layout), 1)
        self.same_row(node, self.space.flat((layout[dim],)), "scans")
        line = (self.emit("elem", (x,), scan=_SCANS[name]), layout)
        return [line, None] if name in ("cummax", "cummin") else line

    # the program

    def _program(self, result: torch.fx.Node, returned: bool) -> Program:
        out, layout = self.tensor(result)
        if out.kind == "scalar":
            raise TemplateMismatch("the output is a constant")
        if returned and any(ln.name == out.text and ln.load is not None for ln in self.lines):
            raise TemplateMismatch("forward returns an input unchanged")
        space = self.space
        tensors = [lay for _, lay in self.operands] + self.virtual_layouts + [layout]
        full = max(tensors, key=lambda lay: space.numel(space.flat(lay)))
        canon = [space.find(a) for a in space.flat(full)]
        reduced = {space.find(a) for a in space.flat((self.reduced,))} if self.reduced else set()
        axes_of = [[space.find(a) for a in space.flat(lay)] for lay in tensors]
        if any(a not in canon for axes in axes_of for a in axes) or not reduced <= set(canon):
            raise TemplateMismatch("no tensor of forward spans the whole index space (an outer product)")
        if len(set(canon)) != len(canon) or any(len(set(a)) != len(a) for a in axes_of):
            raise TemplateMismatch("a tensor spans one axis twice (a diagonal)")
        if reduced:
            out = self._per_row(out, reduced, axes_of)
        if out.kind == "row" and (set(axes_of[-1]) & reduced):
            raise TemplateMismatch("the output spans the reduced dims")
        if out.kind == "elem" and reduced and set(axes_of[-1]) != set(canon):
            raise TemplateMismatch("the output is not of the full shape")
        if out.kind == "elem" and not reduced and set(axes_of[-1]) != set(canon):
            raise TemplateMismatch("the output does not span the whole index space (a broadcast output)")
        groups = self._merge(canon, reduced, axes_of)
        index = {a: i for i, group in enumerate(groups) for a in group}

        def merged(axes: list[int]) -> tuple[int, ...]:
            return tuple(dict.fromkeys(index[a] for a in axes))

        sizes = [sympy.Mul(*(space.size[a] for a in group)) for group in groups]
        out_shape = [sympy.Mul(*(space.size[space.find(a)] for a in space.flat((dim,)))) for dim in layout]
        assumed = [e for pair in space.assumed for e in pair]
        binds = self._binds([*sizes, *out_shape, *assumed]) + tuple(
            f"assert {render_size(a)} == {render_size(b)}, 'inputs reduced together differ in size'"
            for a, b in space.assumed)
        if not self.operands and not self.virtual:
            raise TemplateMismatch("forward reads no tensor")
        biggest = max(range(len(self.operands)), key=lambda i: space.numel(space.flat(self.operands[i][1])), default=0)
        text = ", ".join(render_size(e) for e in out_shape)
        lines = identities.apply(self.lines, out.text)
        helpers = sorted({h for ln in lines for h in aten_ops.helpers_of(ln.expr)})
        return Program(
            args=self.aten.args,
            operands=tuple(Operand(expr=expr, broadcast=merged(axes) != tuple(range(len(groups))), axes=merged(axes))
                           for (expr, _), axes in zip(self.operands, axes_of, strict=False)),
            virtual=tuple(merged(axes) for axes in axes_of[len(self.operands):-1]),
            full=biggest, scalars=tuple(self.scalars), helpers=tuple(helpers), lines=tuple(lines),
            output=out.text, out_kind="elem" if out.kind == "elem" else "row",
            out_keepdim=False, out_dtype=str(result.meta["val"].dtype),
            sizes=tuple(render_size(s) for s in sizes), binds=binds,
            reduced=tuple(sorted({index[a] for a in reduced})), out_axes=merged(axes_of[-1]),
            out_shape=f"({text},)" if len(out_shape) == 1 else f"({text})",
            out_dims=tuple(render_size(e) for e in out_shape))

    def _per_row(self, out: Value, reduced: set[int], axes_of: list[list[int]]) -> Value:
        """Lines that do not vary along the row become row lines: the loads of operands that span kept axes only (a
        per-channel weight beside a batch norm's statistics) and what is computed from them and the reductions. Kept
        as they are where a reduction or a scan would read a row line."""
        kinds: dict[str, Kind] = {}
        for line in self.lines:
            if line.load is not None:
                axes = set(axes_of[line.load])
                kinds[line.name] = "row" if axes and not axes & reduced else "elem"
            elif line.reduce or line.scan:
                if any(kinds[d] != "elem" for d in line.deps):
                    return out
                kinds[line.name] = "row" if line.reduce else "elem"
            else:
                kinds[line.name] = "elem" if any(kinds[d] == "elem" for d in line.deps) or not line.deps else "row"
        self.lines = [dataclasses.replace(line, kind=kinds[line.name]) for line in self.lines]
        return Value(out.text, kinds.get(out.text, out.kind))

    @staticmethod
    def _merge(canon: list[int], reduced: set[int], tensors: list[list[int]]) -> list[list[int]]:
        """Adjacent axes merge where every tensor spans both, one right after the other, or neither, and the
        reduction takes both or neither."""
        groups = [[a] for a in canon]
        i = 0
        while i + 1 < len(groups):
            a, b = groups[i][-1], groups[i + 1][0]
            same_side = (a in reduced) == (b in reduced)
            fits = all((a not in t and b not in t) or (a in t and b in t and t.index(b) == t.index(a) + 1)
                       for t in tensors)
            if same_side and fits:
                groups[i] += groups.pop(i + 1)
            else:
                i += 1
        return groups

    def _binds(self, exprs: list[sympy.Expr]) -> tuple[str, ...]:
        symbols = sorted({s for e in exprs for s in sympy.sympify(e).free_symbols}, key=lambda s: s.name)
        lines = []
        for symbol in symbols:
            if symbol in self.attr_binds:
                lines.append(f"n_{symbol.name} = {self.attr_binds[symbol]}")
                continue
            if symbol.name.startswith("kf_"):  # bound by the family's own forward lines
                continue
            if symbol not in self.aten.binds:
                raise TemplateMismatch(f"a size {symbol} that no input's shape gives")
            name, dim = self.aten.binds[symbol]
            lines.append(f"n_{symbol.name} = {name}.shape[{dim}]")
        return tuple(lines)
