"""Trace the reference to ATen/prims ops with the decompositions torch.compile uses, sizes symbolic.

`make_fx` runs forward on fake tensors whose sizes are symbols (one per input dim, equal sizes not merged), with
Inductor's decomposition table: softplus, selu, mish, logsumexp, the norms, the losses ... arrive as the few
primitives they are made of (pointwise ops, sum/amax/var_mean over dims, views). Pooling ops stay whole (the pooling
family renders their windows). Parameters and buffers are inputs of the traced function, so every tensor the graph
reads is a placeholder named as forward names it (`x`, `self.norm.weight`).

A size in the graph is a sympy expression over the symbols; `binds` says which input dim each symbol is, so a
candidate computes every size from its inputs' shapes at run time (no size is baked into a kernel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx
from torch import nn

from kernelflow.stages.problems.fx_trace import LOCK
from kernelflow.stages.templates.program import TemplateMismatch

# ops kept whole: a window reduction is one op for the pooling family, not an unfold of index arithmetic
_KEPT = {
    torch.ops.aten.max_pool1d, torch.ops.aten.max_pool2d, torch.ops.aten.max_pool3d,
    torch.ops.aten.max_pool2d_with_indices, torch.ops.aten.max_pool3d_with_indices,
    torch.ops.aten.avg_pool1d, torch.ops.aten.avg_pool2d, torch.ops.aten.avg_pool3d,
    torch.ops.aten.adaptive_avg_pool1d, torch.ops.aten.adaptive_avg_pool2d, torch.ops.aten.adaptive_avg_pool3d,
    torch.ops.aten._adaptive_avg_pool2d, torch.ops.aten._adaptive_avg_pool3d,
    torch.ops.aten.adaptive_max_pool1d, torch.ops.aten.adaptive_max_pool2d, torch.ops.aten.adaptive_max_pool3d,
}
_TABLE: dict[Any, Any] | None = None


def decompositions() -> dict[Any, Any]:
    """Inductor's decomposition table without the pooling ops."""
    global _TABLE
    if _TABLE is None:
        from torch._inductor.decomposition import select_decomp_table

        _TABLE = {op: fn for op, fn in select_decomp_table().items()
                  if getattr(op, "overloadpacket", op) not in _KEPT}
    return _TABLE


@dataclass(frozen=True)
class AtenGraph:
    """The reference's forward as ATen/prims ops; node.meta['val'] holds each node's fake value."""

    graph: torch.fx.GraphModule
    names: dict[torch.fx.Node, str]  # each placeholder: how forward names it ('x', 'self.norm.weight')
    args: tuple[str, ...]  # forward's argument names
    binds: dict[sympy.Symbol, tuple[str, int]]  # each size symbol: (the tensor forward names, its dim)
    dims: dict[torch.fx.Node, tuple[sympy.Expr, ...]]  # each placeholder's sizes as traced: symbols, or ints


def _placeholders(graph: torch.fx.GraphModule, params: list[str], args: tuple[str, ...]) -> dict[torch.fx.Node, str]:
    nodes = [n for n in graph.graph.nodes if n.op == "placeholder"]
    return dict(zip(nodes, [f"self.{p}" for p in params] + list(args), strict=True))


def _sizes(names: dict[torch.fx.Node, str]) -> tuple[dict[sympy.Symbol, tuple[str, int]],
                                                       dict[torch.fx.Node, tuple[sympy.Expr, ...]]]:
    """The symbol of each placeholder dim, as make_fx created it (before a guard in forward specialized it to a
    number: LayerNorm's check of normalized_shape), and which forward tensor's dim each symbol is."""
    nodes = list(names)
    shape_env = next((n.meta["val"].fake_mode.shape_env for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)),
                     None)
    source: dict[tuple[int, int], sympy.Symbol] = {}
    for symbol, sources in (shape_env.var_to_sources.items() if shape_env is not None else ()):
        for src in sources:
            found = re.fullmatch(r"input(\d+)\.size\(\)\[(\d+)\]", src.name)
            if found:
                source.setdefault((int(found[1]), int(found[2])), symbol)
    binds: dict[sympy.Symbol, tuple[str, int]] = {}
    dims: dict[torch.fx.Node, tuple[sympy.Expr, ...]] = {}
    for i, node in enumerate(nodes):
        shape = getattr(node.meta.get("val"), "shape", None)
        if shape is None:
            continue
        exprs = []
        for d, size in enumerate(shape):
            symbol = source.get((i, d))
            if symbol is not None:
                binds.setdefault(symbol, (names[node], d))
            exprs.append(symbol if symbol is not None else sympy.Integer(int(size)))
        dims[node] = tuple(exprs)
    return binds, dims


def trace_aten(model: nn.Module, inputs: list[Any], arg_names: tuple[str, ...]) -> AtenGraph:
    """Model's forward on `inputs` (meta tensors) as an ATen graph with symbolic sizes; TemplateMismatch if torch
    cannot trace it so."""
    from torch.fx.experimental import _config as fx_config
    from torch.fx.experimental.proxy_tensor import make_fx

    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}

    def forward(params: dict[str, torch.Tensor], *args: Any) -> Any:
        with torch.no_grad():
            return torch.func.functional_call(model, params, args)

    try:
        with LOCK, fx_config.patch(use_duck_shape=False):  # type: ignore[attr-defined]
            graph = make_fx(forward, decomposition_table=decompositions(), tracing_mode="symbolic")(state, *inputs)
    except Exception as e:  # data-dependent control flow, ops without a meta kernel, ...
        if "convert all Tensors to FakeTensors" in str(e):
            raise TemplateMismatch("forward reads a tensor attribute that is neither a parameter nor a buffer "
                                   "(the templates read only forward's inputs, parameters and buffers)") from e
        raise TemplateMismatch(f"torch cannot trace forward to ATen ops: {type(e).__name__}: {str(e)[:300]}") from e
    names = _placeholders(graph, list(state), arg_names)
    binds, dims = _sizes(names)
    return AtenGraph(graph=graph, names=names, args=arg_names, binds=binds, dims=dims)
