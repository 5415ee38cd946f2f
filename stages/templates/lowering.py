"""The reference, traced once per proposal for every family, and the lowering of its forward to a Program.

`trace` records two graphs at the problem's first workload on the meta device (no data, any size): the torch.fx
graph at the level of nn modules and functions (what the matmul, library_epilogue, attention and cross-entropy
families recognize) and the ATen graph of torch's own decompositions (aten.py). `lower` turns the ATen graph into a
Program (decomposed.py): any op with a pointwise or reduction decomposition, reductions and norms over any dims; with
`scans=True` inclusive scans along a dim become scan lines (the scan family), else they are named.
`Lowering` lowers the fx graph's pointwise ops around matrix products (the matmul families' epilogues) from a
whitelist (pointwise.OPS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
import torch.fx
from torch import nn

from kernelflow.stages.contracts import Problem
from kernelflow.stages.problems.fx_trace import trace_with_shapes
from kernelflow.stages.problems.kernelbench import workload_call
from kernelflow.stages.templates.aten import AtenGraph, trace_aten
from kernelflow.stages.templates.decomposed import Decomposed
from kernelflow.stages.templates.pointwise import OPS
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
from kernelflow.stages.templates.source import reference_source

_TORCH_MODULES = ("torch", "_operator", "builtins")
CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
TRANSPOSED_CONVS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
PRODUCT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the product families multiply
_FLOAT32_EPS = torch.finfo(torch.float32).eps  # rms_norm's eps when none is given
_REDUCTIONS: dict[str, Reduction] = {"sum": "sum", "mean": "sum", "amax": "max", "amin": "min", "argmax": "argmax"}
_SCANS: dict[str, Scan] = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}


@dataclass(frozen=True)
class Traced:
    """The reference, traced once per proposal and shared by every family's match."""

    graph: torch.fx.GraphModule  # shapes and dtypes in node.meta['tensor_meta']
    model: nn.Module  # on the meta device
    reference: str  # the problem's Model renamed _Reference (source.reference_source)
    aten: AtenGraph | str  # forward as ATen ops, or why torch could not trace it so
    computed: dict[torch.fx.Node, str] = field(default_factory=dict)  # ATen nodes forward computes before the kernels


def trace(problem: Problem, module: ModuleType) -> Traced:
    """Model at the first workload, in eval mode as the harness runs it (stages/harness/instantiate.py): its fx
    graph with shapes and dtypes in node.meta['tensor_meta'], and its ATen graph."""
    workload = (problem.cpu_workloads or problem.gpu_workloads)[0]
    with torch.device("meta"):
        model = module.Model(*workload_call(module, workload, "get_init_inputs", problem.path)).eval()
    inputs = workload_call(module, workload, "get_inputs", problem.path, meta=True)
    try:
        graph = trace_with_shapes(model, inputs)
    except Exception as e:  # data-dependent control flow and the like: not a template problem
        raise TemplateMismatch(f"torch.fx cannot trace forward: {type(e).__name__}: {e}") from e
    args = tuple(str(n.target) for n in graph.graph.nodes if n.op == "placeholder")
    try:
        aten: AtenGraph | str = trace_aten(model, inputs, args)
    except TemplateMismatch as e:
        aten = e.reason
    return Traced(graph, model, reference_source(problem.source), aten)


def lower(traced: Traced, scans: bool = False) -> Program:
    """The reference's ATen graph as a Program; with `scans`, scans along a dim are lowered too."""
    if isinstance(traced.aten, str):
        raise TemplateMismatch(traced.aten)
    return Decomposed(traced.aten, traced.model, scans, computed=traced.computed).run()


def node_shape(node: torch.fx.Node) -> tuple[int, ...]:
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "shape"):
        raise TemplateMismatch(f"{node.name} is not a single tensor")
    return tuple(meta.shape)


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _literal(value: float | int) -> str:
    if not math.isfinite(value):
        raise TemplateMismatch(f"non-finite constant {value!r}")
    text = repr(float(value)) if isinstance(value, float) else str(value)
    return f"({text})" if value < 0 else text


def node_op(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    module = getattr(node.target, "__module__", None) or ""
    if module not in _TORCH_MODULES and not module.startswith("torch."):
        raise TemplateMismatch(f"call to {node.target!r} outside torch")
    return getattr(node.target, "__name__", str(node.target))


class Lowering:
    """Walks the graph in order, appending lines; one instance per lowering."""

    def __init__(self, graph: torch.fx.GraphModule, model: nn.Module, scans: bool = False):
        self.graph = graph
        self.scans = scans  # lower cumsum & co. to scan lines (else they are a mismatch)
        self.lines: list[Line] = []
        self.values: dict[torch.fx.Node, Any] = {}
        self.operands: list[Operand] = []
        self.scalars: list[str] = []
        self.helpers: set[str] = set()
        self.attrs = {v: k for k, v in reversed(vars(model).items())
                      if isinstance(v, float) and not k.startswith("_")}
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        if not placeholders:
            raise TemplateMismatch("forward takes no inputs")
        shapes = [node_shape(n) for n in placeholders]
        self.full = max(shapes, key=math.prod)
        self.full_index = next(i for i, n in enumerate(placeholders) if node_shape(n) == self.full)
        self.args = tuple(str(n.target) for n in placeholders)

    def run(self) -> Program:
        for node in self.graph.graph.nodes:
            if node.op == "output":
                return self._program(node)
            self.values[node] = self.lower_node(node)
        raise TemplateMismatch("the graph has no output")

    # values and lines

    def emit(self, kind: Kind, deps: tuple[Value, ...] = (), **fields: Any) -> Value:
        name = f"v{len(self.lines)}"
        names = tuple(d.text for d in deps if d.kind != "scalar")
        self.lines.append(Line(name=name, kind=kind, deps=names, **fields))
        return Value(name, kind)

    def pointwise(self, expr: str, *deps: Value) -> Value:
        kinds = {d.kind for d in deps}
        kind: Kind = "elem" if "elem" in kinds else "row" if "row" in kinds else "scalar"
        if kind == "scalar":
            raise TemplateMismatch(f"an op on constants only: {expr}")
        return self.emit(kind, deps, expr=expr)

    def reduce(self, how: Reduction, x: Value) -> Value:
        if x.kind != "elem":
            raise TemplateMismatch("a reduction of a reduced value")
        return self.emit("row", (x,), reduce=how)

    def value(self, arg: Any) -> Value:
        if isinstance(arg, torch.fx.Node):
            if self.values[arg] is None:  # a tensor operand, loaded at first use (so an unsupported op is named first)
                name = str(arg.target) if arg.op == "placeholder" else f"self.{arg.target}"
                self.values[arg] = self.operand(name, node_shape(arg))
            found = self.values[arg]
            if not isinstance(found, Value):
                raise TemplateMismatch(f"{arg.name} is used as a tensor but is a tuple")
            return found
        if isinstance(arg, bool) or not isinstance(arg, (int, float)):
            raise TemplateMismatch(f"unsupported argument {arg!r}")
        if arg in self.attrs:
            return self.scalar_arg(f"self.{self.attrs[arg]}")
        return Value(_literal(arg), "scalar")

    def scalar_arg(self, expr: str) -> Value:
        """A float that forward reads from the model (self.eps) and passes to the kernel."""
        if expr not in self.scalars:
            self.scalars.append(expr)
        return Value(f"s{self.scalars.index(expr)}", "scalar")

    def operand(self, expr: str, shape: tuple[int, ...]) -> Value:
        if _strip(shape) == self.full or shape == self.full:
            broadcast = False
        elif _strip(shape) and len(_strip(shape)) < len(self.full) and self.full[-len(_strip(shape)):] == _strip(shape):
            broadcast = True
        else:
            raise TemplateMismatch(f"{expr} has shape {list(shape)}, neither the full shape {list(self.full)} nor a suffix of it")
        self.operands.append(Operand(expr=expr, broadcast=broadcast))
        return self.emit("elem", load=len(self.operands) - 1)

    def last_dim(self, node: torch.fx.Node, source: Any, dim: Any, verb: str = "reduces") -> None:
        rank = len(self.full)
        dims = dim if isinstance(dim, (list, tuple)) else [dim]
        if len(dims) != 1 or not isinstance(dims[0], int) or dims[0] % rank != rank - 1:
            raise TemplateMismatch(f"{node.name} {verb} over dim {dim}, not the last dim")
        if not isinstance(source, torch.fx.Node) or node_shape(source) != self.full:
            raise TemplateMismatch(f"{node.name} {verb} a tensor that is not of the full shape {list(self.full)}")

    def check_row_broadcast(self, node: torch.fx.Node) -> None:
        """A reduced value meets full-shape values only with its reduced dim kept (torch broadcasts it so)."""
        if node_shape(node) != self.full:
            return
        for arg in node.all_input_nodes:
            if getattr(self.values.get(arg), "kind", None) == "row" and node_shape(arg) != self.full[:-1] + (1,):
                raise TemplateMismatch(f"{node.name} broadcasts the reduced {arg.name} of shape {list(node_shape(arg))}")

    # nodes

    def lower_node(self, node: torch.fx.Node) -> Any:
        if node.op in ("placeholder", "get_attr"):
            return None
        if node.op == "call_module":
            return self._module(node, self.graph.get_submodule(str(node.target)))
        return self._call(node, node_op(node), list(node.args), dict(node.kwargs))

    def _call(self, node: torch.fx.Node, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name in OPS:
            self.check_row_broadcast(node)
            return self._pointwise_op(name, args, kwargs)
        if name in _REDUCTIONS or name in ("max", "min"):
            return self._reduction(node, name, args, kwargs)
        if name in _SCANS:
            return self._scan(node, name, args, kwargs)
        if name in ("getitem", "getattr"):
            return self._select(node, args)
        library = {"softmax": self._softmax, "log_softmax": self._log_softmax,
                   "layer_norm": self._layer_norm, "rms_norm": self._rms_norm}
        if name in library:
            return library[name](node, args, kwargs)
        raise TemplateMismatch(f"unsupported op {name!r} ({node.format_node()})")

    def _bind(self, params: tuple[str, ...], args: list[Any], kwargs: dict[str, Any], what: str) -> dict[str, Any]:
        if kwargs.get("inplace"):
            raise TemplateMismatch(f"{what} writes into its input (inplace=True)")
        kwargs = {k: v for k, v in kwargs.items() if k != "inplace"}
        if len(args) > len(params) or set(kwargs) - set(params):
            raise TemplateMismatch(f"{what} called with arguments this template does not know: {args}, {kwargs}")
        return {**dict(zip(params, args, strict=False)), **kwargs}

    def _pointwise_op(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Value:
        op = OPS[name]
        bound = self._bind(op.params, args, kwargs, name)
        values = {k: self.value(v) for k, v in bound.items() if k not in op.raw and v is not None}
        texts = {k: (values[k].text if k in values else None) for k in bound if k not in op.raw}
        self.helpers.update(op.helpers)
        expr = op.build(**texts, **{k: v for k, v in bound.items() if k in op.raw})
        return self.pointwise(expr, *values.values())

    def _reduction(self, node: torch.fx.Node, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        bound = self._bind(("input", "dim", "keepdim"), args, kwargs, name)
        if bound.get("dim") is None:
            if name in ("max", "min"):
                raise TemplateMismatch(f"{name} without dim reduces the whole tensor")
            raise TemplateMismatch(f"{name} without dim reduces the whole tensor, not rows")
        if isinstance(bound["dim"], torch.fx.Node):  # torch.max(x, y): elementwise
            return self._pointwise_op("maximum" if name == "max" else "minimum", args, {})
        self.last_dim(node, bound["input"], bound["dim"])
        x = self.value(bound["input"])
        if name in ("max", "min"):
            return (name, x)  # a (values, indices) pair, resolved by getitem
        total = self.reduce(_REDUCTIONS[name], x)
        return self.pointwise(f"{total.text} / D", total) if name == "mean" else total

    def _scan(self, node: torch.fx.Node, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if not self.scans:
            raise TemplateMismatch(f"{name} is a scan along the row, neither pointwise nor a reduction "
                                   "(the scan family's job)")
        if kwargs.pop("dtype", None) is not None:
            raise TemplateMismatch(f"{name} with a dtype argument")
        bound = self._bind(("input", "dim"), args, kwargs, name)
        self.last_dim(node, bound["input"], bound.get("dim"), "scans")
        if not bound["input"].meta["tensor_meta"].dtype.is_floating_point:
            raise TemplateMismatch(f"{name} of a non-floating tensor (the kernel scans in float32)")
        x = self.value(bound["input"])
        if x.kind != "elem":
            raise TemplateMismatch(f"{name} of a reduced value")
        if name in ("cummax", "cummin"):
            return (name, x)  # a (values, indices) pair, resolved by getitem
        return self.emit("elem", (x,), scan=_SCANS[name])

    def _select(self, node: torch.fx.Node, args: list[Any]) -> Value:
        pair = self.values.get(args[0]) if isinstance(args[0], torch.fx.Node) else None
        if not isinstance(pair, tuple):
            raise TemplateMismatch(f"unsupported indexing {node.format_node()}")
        how, x = pair
        if how in _SCANS:
            if args[1] in (0, "values"):
                return self.emit("elem", (x,), scan=_SCANS[how])
            raise TemplateMismatch(f"{how} {args[1]!r}: only the values of a running max/min are rendered")
        if args[1] in (0, "values"):
            return self.reduce(how, x)
        if args[1] in (1, "indices") and how == "max":
            return self.reduce("argmax", x)
        raise TemplateMismatch(f"unsupported selection {args[1]!r} of {how}")

    def _softmax_parts(self, node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any]) -> tuple[Value, Value, Value]:
        if kwargs.pop("dtype", None) is not None:
            raise TemplateMismatch("softmax with a dtype argument")
        kwargs.pop("_stacklevel", None)
        bound = self._bind(("input", "dim"), args, kwargs, "softmax")
        self.last_dim(node, bound["input"], bound.get("dim"))
        x = self.value(bound["input"])
        m = self.reduce("max", x)
        shifted = self.pointwise(f"{x.text} - {m.text}", x, m)
        e = self.pointwise(f"tl.exp({shifted.text})", shifted)
        return shifted, e, self.reduce("sum", e)

    def _softmax(self, node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any]) -> Value:
        _, e, s = self._softmax_parts(node, args, kwargs)
        return self.pointwise(f"{e.text} / {s.text}", e, s)

    def _log_softmax(self, node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any]) -> Value:
        shifted, _, s = self._softmax_parts(node, args, kwargs)
        return self.pointwise(f"{shifted.text} - tl.log({s.text})", shifted, s)

    def _normalized(self, node: torch.fx.Node, source: Any, shape: Any) -> None:
        dims = tuple(shape) if isinstance(shape, (list, tuple, torch.Size)) else (shape,)
        if dims != self.full[-1:]:
            raise TemplateMismatch(f"{node.name} normalizes over {list(dims)}, not the last dim only")
        self.last_dim(node, source, -1)

    def _affine(self, y: Value, weight: Value | None, bias: Value | None) -> Value:
        if weight is not None:
            y = self.pointwise(f"{y.text} * {weight.text}", y, weight)
        if bias is not None:
            y = self.pointwise(f"{y.text} + {bias.text}", y, bias)
        return y

    def _layer_norm(self, node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any]) -> Value:
        bound = self._bind(("input", "normalized_shape", "weight", "bias", "eps"), args, kwargs, "layer_norm")
        self._normalized(node, bound["input"], bound["normalized_shape"])
        weight, bias = (self.value(bound[k]) if bound.get(k) is not None else None for k in ("weight", "bias"))
        return self._layer_norm_lines(self.value(bound["input"]), weight, bias, self.value(bound.get("eps", 1e-5)))

    def _layer_norm_lines(self, x: Value, weight: Value | None, bias: Value | None, eps: Value) -> Value:
        total = self.reduce("sum", x)
        mean = self.pointwise(f"{total.text} / D", total)
        centered = self.pointwise(f"{x.text} - {mean.text}", x, mean)
        squares = self.reduce("sum", self.pointwise(f"{centered.text} * {centered.text}", centered))
        rstd = self.pointwise(f"tl.rsqrt({squares.text} / D + {eps.text})", squares, eps)
        return self._affine(self.pointwise(f"{centered.text} * {rstd.text}", centered, rstd), weight, bias)

    def _rms_norm(self, node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any]) -> Value:
        bound = self._bind(("input", "normalized_shape", "weight", "eps"), args, kwargs, "rms_norm")
        self._normalized(node, bound["input"], bound["normalized_shape"])
        weight = self.value(bound["weight"]) if bound.get("weight") is not None else None
        eps = bound.get("eps")
        return self._rms_norm_lines(self.value(bound["input"]), weight, self.value(eps if eps is not None else _FLOAT32_EPS))

    def _rms_norm_lines(self, x: Value, weight: Value | None, eps: Value) -> Value:
        squares = self.reduce("sum", self.pointwise(f"{x.text} * {x.text}", x))
        rstd = self.pointwise(f"tl.rsqrt({squares.text} / D + {eps.text})", squares, eps)
        return self._affine(self.pointwise(f"{x.text} * {rstd.text}", x, rstd), weight, None)

    def _module(self, node: torch.fx.Node, module: nn.Module) -> Value:
        target, args = str(node.target), list(node.args)
        if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            return self._norm_module(node, target, module)
        simple: dict[type[nn.Module], tuple[str, dict[str, Any]]] = {
            nn.ReLU: ("relu", {}), nn.SiLU: ("silu", {}), nn.Tanh: ("tanh", {}), nn.Sigmoid: ("sigmoid", {}),
            nn.Identity: ("contiguous", {}), nn.Hardsigmoid: ("hardsigmoid", {}), nn.Hardswish: ("hardswish", {}),
        }
        if type(module) in simple:
            name, kwargs = simple[type(module)]
            return self._pointwise_op(name, args, kwargs)
        if isinstance(module, nn.GELU):
            return self._pointwise_op("gelu", args, {"approximate": module.approximate})
        if isinstance(module, nn.LeakyReLU):
            return self._pointwise_op("leaky_relu", args, {"negative_slope": module.negative_slope})
        if isinstance(module, nn.Hardtanh):
            return self._pointwise_op("hardtanh", args, {"min_val": module.min_val, "max_val": module.max_val})
        if isinstance(module, (nn.Softmax, nn.LogSoftmax)):
            method = self._softmax if isinstance(module, nn.Softmax) else self._log_softmax
            return method(node, args, {"dim": module.dim})
        raise TemplateMismatch(f"unsupported module {type(module).__name__} ({target})")

    def _norm_module(self, node: torch.fx.Node, target: str, module: nn.LayerNorm | nn.RMSNorm) -> Value:
        self._normalized(node, node.args[0], module.normalized_shape)
        weight, bias = (self.operand(f"self.{target}.{k}", tuple(p.shape)) if (p := getattr(module, k, None)) is not None
                        else None for k in ("weight", "bias"))
        eps = self.scalar_arg(f"self.{target}.eps") if module.eps is not None else self.value(_FLOAT32_EPS)
        x = self.value(node.args[0])
        if isinstance(module, nn.LayerNorm):
            return self._layer_norm_lines(x, weight, bias, eps)
        return self._rms_norm_lines(x, weight, eps)

    def _output(self, node: torch.fx.Node) -> tuple[Value, tuple[int, ...], torch.dtype]:
        """The one tensor forward returns: lowered, its shape and its dtype."""
        result = node.args[0]
        if not isinstance(result, torch.fx.Node):
            raise TemplateMismatch("forward returns more than one tensor")
        return self.value(result), node_shape(result), result.meta["tensor_meta"].dtype

    def _program(self, node: torch.fx.Node) -> Program:
        out, shape, dtype = self._output(node)
        if out.kind == "elem" and shape != self.full:
            raise TemplateMismatch(f"the output shape {list(shape)} is not the full shape {list(self.full)}")
        if out.kind == "row" and shape not in (self.full[:-1], self.full[:-1] + (1,)):
            raise TemplateMismatch(f"the output shape {list(shape)} is not the row shape of {list(self.full)}")
        if out.kind == "scalar":
            raise TemplateMismatch("the output is a constant")
        return Program(args=self.args, operands=tuple(self.operands), full=self.full_operand(),
                       scalars=tuple(self.scalars), helpers=tuple(sorted(self.helpers)), lines=tuple(self.lines),
                       output=out.text, out_kind=out.kind, out_keepdim=len(shape) == len(self.full),
                       out_dtype=str(dtype))

    def full_operand(self) -> int:
        full = self.args[self.full_index]
        found = next((i for i, o in enumerate(self.operands) if o.expr == full and not o.broadcast), None)
        if found is None:
            raise TemplateMismatch(f"forward does not read its largest input {full}")
        return found
