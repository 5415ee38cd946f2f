"""Family `library_epilogue`: the product runs in the vendor library through torch, one Triton kernel does the rest.

The matrix products (torch.matmul / mm / @, nn.Linear, F.linear, all 2-D) become torch.mm, or torch.addmm when a
Linear's bias is an input or a parameter (what F.linear itself calls, so the bias lands where the reference puts
it: in cuBLAS's epilogue, before rounding); a Linear weight [N, K] is passed as its transpose view, never copied.
Convolutions (nn.Conv1d/2d/3d with zero padding, F.conv1d/2d/3d) become F.convNd with the reference's own bias,
stride, padding, dilation and groups. Then ONE flat Triton kernel applies the whole pointwise epilogue (activation,
scale, residual, clamp, an unfolded bias, the SwiGLU combine silu(a) * b), lowered by the matmul family's Epilogue:
it reads each product's output once and writes the result once, where eager writes and re-reads an intermediate
per op. A product with no epilogue is declined: the candidate would be the reference's own library call.
Nn.ConvTranspose1d/2d/3d (zero padding) become F.conv_transposeNd with the module's own arguments.
First, where no bias is computed in forward, the rest of the graph is lowered from torch's decompositions with each
product's output an operand (y0, y1, ...: lowering.Traced.computed) and rendered by the first family that takes it:
elementwise (a per-channel bias, inference BatchNorm), rowwise (GroupNorm, a logsumexp over the features), pooling;
their parameters are this family's then.

SwiGLU (two Linear products sharing x): two torch.mm calls, each reading its own weight once per call. One GEMM on
a concatenated [W1; W3] would save a launch and a second read of x, but the weights are the model's parameters,
loaded by load_state_dict into the parameters ModelNew inherits (kernelflow.stages.harness.instantiate.build): concatenating per call
copies both weights every call (2 x ffn x hidden elements), and a persistent concatenated buffer whose halves the
parameters view stays in sync only until something replaces a parameter's storage (.to() to another device or
dtype, assigning a new Parameter), after which it silently computes with stale weights. Writing the two products
into halves of one buffer with out= moves the same bytes as two separate outputs, so it buys nothing either.

Precision: fp32 products use TF32 exactly when the problem's policy allows it (matmuls: allow_tf32; convolutions:
conv_tf32, on by default as in PyTorch). That is torch's global setting,
which the harness sets from the policy for reference, baselines and candidate alike (instantiate.set_precision);
the candidate never touches it. The epilogue computes in fp32 on the product's rounded output, as eager does.
Declined when the policy forbids vendor libraries.
Parameters: the epilogue kernel's BLOCK (elements per program) and num_warps; nothing to tune on the library side.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import launch
from kernelflow.stages.templates.decomposed import _name
from kernelflow.stages.templates.lowering import (
    CONVS,
    PRODUCT_DTYPES,
    TRANSPOSED_CONVS,
    Traced,
    node_op,
    node_shape,
)
from kernelflow.stages.templates.matmul import Epilogue, Product, find_products, tensor_expr
from kernelflow.stages.templates.program import Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import (
    jit_source,
    line_source,
    module_source,
    operand_prologue,
    store_source,
)

_ATEN_PRODUCTS = ("mm", "addmm", "convolution")
_INNER = ("elementwise", "rowwise", "pooling")  # the families that may render what follows the products
_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
# (BLOCK, num_warps), best guess first: 32 bytes per thread per operand (two 16-byte vector loads) first.
_FP32 = ((1024, 4), (2048, 8), (2048, 4), (4096, 8))
_HALF = ((2048, 4), (1024, 4), (4096, 8), (2048, 8))


@dataclass(frozen=True)
class LibraryPlan(Plan):
    calls: tuple[str, ...] = ()  # forward expressions computing each product, in graph order (y0, y1, ...)
    half: bool = False  # the products are bf16/fp16
    inner: str = ""  # the family that renders the rest over the products' outputs ("": the flat epilogue kernel)
    inner_plan: Plan | None = None


def _mm_call(product: Product, bias: str | None) -> str:
    b = f"{product.b}.t()" if product.b_transposed else product.b  # a Linear weight [N, K]: its transpose view
    return f"torch.mm({product.a}, {b})" if bias is None else f"torch.addmm({bias}, {product.a}, {b})"


def _folded_bias(bias: Any) -> str | None:
    """How forward names a Linear bias that addmm can take; None when it is computed in forward (the epilogue adds it)."""
    if isinstance(bias, torch.fx.Node) and bias.op not in ("placeholder", "get_attr"):
        return None
    return bias if isinstance(bias, str) else tensor_expr(bias, "bias")


def _literal(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return tensor_expr(value, "tensor")
    if value is None or isinstance(value, (bool, int, float, str)) or (
            isinstance(value, (tuple, list)) and all(isinstance(v, (int, str)) for v in value)):
        return repr(value)
    raise TemplateMismatch(f"convolution argument {value!r} cannot be rendered")


def _conv_call(traced: Traced, node: torch.fx.Node) -> str | None:
    """The F.convNd call computing node, None if node is no convolution."""
    if node.op == "call_module":
        conv = traced.graph.get_submodule(str(node.target))
        if isinstance(conv, TRANSPOSED_CONVS) and conv.padding_mode == "zeros" and len(node.args) == 1 and not node.kwargs:
            this = f"self.{node.target}"
            bias = f"{this}.bias" if conv.bias is not None else "None"
            args = [tensor_expr(node.args[0], "input"), f"{this}.weight", bias,
                    *(f"{this}.{k}" for k in ("stride", "padding", "output_padding", "groups", "dilation"))]
            return f"F.conv_transpose{len(conv.kernel_size)}d({', '.join(args)}).contiguous()"
        if not isinstance(conv, CONVS):
            return None
        if conv.padding_mode != "zeros":
            raise TemplateMismatch(f"{node.target} pads with {conv.padding_mode!r}; the template renders zero padding")
        if len(node.args) != 1 or node.kwargs:
            raise TemplateMismatch(f"unsupported convolution call {node.format_node()}")
        this = f"self.{node.target}"
        bias = f"{this}.bias" if conv.bias is not None else "None"
        args = [tensor_expr(node.args[0], "input"), f"{this}.weight", bias,
                *(f"{this}.{k}" for k in ("stride", "padding", "dilation", "groups"))]
        name = f"conv{len(conv.kernel_size)}d"
    elif node.op == "call_function" and node_op(node) in ("conv1d", "conv2d", "conv3d"):
        if len(node.args) > len(_CONV_PARAMS) or set(node.kwargs) - set(_CONV_PARAMS):
            raise TemplateMismatch(f"unsupported convolution call {node.format_node()}")
        args = [_literal(a) for a in node.args] + [f"{k}={_literal(v)}" for k, v in node.kwargs.items()]
        name = node_op(node)
    else:
        return None
    return f"F.{name}({', '.join(args)}).contiguous()"  # the epilogue walks it flat, in the logical order


def _products(traced: Traced) -> tuple[list[torch.fx.Node], list[str], dict[torch.fx.Node, Any], set[torch.dtype]]:
    """The product nodes in graph order, the library call of each, the biases left to the epilogue, the dtypes."""
    nodes, products, biases, dtypes = find_products(traced.graph)
    matrix = dict(zip(nodes, products, strict=True))
    found: list[torch.fx.Node] = []
    calls: list[str] = []
    unfolded: dict[torch.fx.Node, Any] = {}
    for node in traced.graph.graph.nodes:
        if node in matrix:
            bias = _folded_bias(biases[node]) if node in biases else None
            if node in biases and bias is None:
                unfolded[node] = biases[node]
            call = _mm_call(matrix[node], bias)
        elif (conv := _conv_call(traced, node)) is not None:
            dtypes |= {n.meta["tensor_meta"].dtype for n in node.all_input_nodes if "tensor_meta" in n.meta}
            call = conv
        else:
            continue
        found.append(node)
        calls.append(call)
        dtypes.add(node.meta["tensor_meta"].dtype)
    return found, calls, unfolded, dtypes


def _fuses_nothing(program: Program, dtype: torch.dtype) -> bool:
    """Every line only renames a product value and the dtype stays: the output is a library call's result as it is."""
    renames = all(line.load is None and line.expr.isidentifier() for line in program.lines)
    return renames and program.out_dtype == str(dtype)


def match(problem: Problem, traced: Traced) -> LibraryPlan:
    if not problem.policy.allow_vendor_libraries:
        raise TemplateMismatch("the policy forbids vendor libraries")
    nodes, calls, unfolded, dtypes = _products(traced)
    if not nodes:
        raise TemplateMismatch("no matmul, mm, @, linear or convolution in forward")
    if len({node_shape(n) for n in nodes}) > 1:
        raise TemplateMismatch("products of different shapes; the epilogue walks one shape")
    if len(dtypes) != 1 or (dtype := dtypes.pop()) not in PRODUCT_DTYPES:
        raise TemplateMismatch(f"product operands of dtypes {sorted(map(str, dtypes))}: one of fp32, bf16, fp16 only")
    if not unfolded:
        try:
            return _decomposed(problem, traced, calls, dtype)
        except TemplateMismatch:
            pass  # the flat epilogue's reasons are the family's
    program = Epilogue(traced, nodes, unfolded).lower()
    if _fuses_nothing(program, dtype):
        raise TemplateMismatch("no epilogue to fuse: the library call alone is the reference")
    return LibraryPlan(program=program, reference=traced.reference, calls=tuple(calls),
                       half=dtype != torch.float32)


def _decomposed(problem: Problem, traced: Traced, calls: list[str], dtype: torch.dtype) -> LibraryPlan:
    """The products' outputs as operands (y0, y1, ...) of the ATen lowering of the rest, rendered by the first
    family of _INNER that takes it: pointwise ops, norms and reductions over any dims, a pooling."""
    from kernelflow.stages.templates import elementwise, pooling, rowwise

    if isinstance(traced.aten, str):
        raise TemplateMismatch(traced.aten)
    products = [n for n in traced.aten.graph.graph.nodes if n.op == "call_function"
                and getattr(n.target, "_schema", None) is not None and _name(n) in _ATEN_PRODUCTS]
    if len(products) != len(calls):
        raise TemplateMismatch(f"{len(products)} ATen products for {len(calls)} library calls")
    inner = dataclasses.replace(traced, computed={node: f"y{j}" for j, node in enumerate(products)})
    reasons = []
    for name, family in zip(_INNER, (elementwise, rowwise, pooling), strict=True):
        try:
            plan = family.match(problem, inner)
        except TemplateMismatch as e:
            reasons.append(f"{name}: {e.reason}")
            continue
        return LibraryPlan(program=plan.program, reference=traced.reference, calls=tuple(calls),
                           half=dtype != torch.float32, inner=name, inner_plan=plan)
    raise TemplateMismatch("; ".join(reasons))


def variants(plan: Plan) -> list[dict[str, Any]]:
    assert isinstance(plan, LibraryPlan)
    if plan.inner:
        return _inner(plan).variants(plan.inner_plan)
    return [{"BLOCK": block, "num_warps": warps} for block, warps in (_HALF if plan.half else _FP32)]


def _kernel(plan: LibraryPlan) -> str:
    program = plan.program
    args = [f"y{j}" for j in range(len(plan.calls))] + [f"p{i}" for i in range(len(program.operands))] + ["out", "n"]
    args += [f"n{i}" for i, op in enumerate(program.operands) if op.broadcast]
    args += [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK: tl.constexpr"]
    body = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n"]
    body += [f"acc{j} = tl.load(y{j} + offs, mask=mask, other=0.0).to(tl.float32)" for j in range(len(plan.calls))]
    body += [line_source(line, f"offs % n{line.load}" if line.load is not None and program.operands[line.load].broadcast
                         else "offs") for line in program.lines]
    body.append(store_source(program, "offs"))
    return jit_source("_kf_epilogue", args, body)


def _forward(plan: LibraryPlan, params: dict[str, Any]) -> list[str]:
    program = plan.program
    call = [f"y{j}" for j in range(len(plan.calls))] + [f"p{i}" for i in range(len(program.operands))] + ["out", "n"]
    call += [f"p{i}.numel()" for i, op in enumerate(program.operands) if op.broadcast]
    call += [*program.scalars, f"BLOCK={params['BLOCK']}", f"num_warps={params['num_warps']}"]
    return [
        *(f"y{j} = {text}" for j, text in enumerate(plan.calls)),
        *operand_prologue(program),
        f"out = y0.new_empty(y0.shape, dtype={program.out_dtype})",
        "n = y0.numel()",
        launch.call("_kf_epilogue", f"(_kf_cdiv(n, {params['BLOCK']}),)", ", ".join(call)),
        "return out",
    ]


def _inner(plan: LibraryPlan) -> Any:
    from kernelflow.stages.templates import elementwise, pooling, rowwise

    return {"elementwise": elementwise, "rowwise": rowwise, "pooling": pooling}[plan.inner]


def render(plan: Plan, params: dict[str, Any]) -> str:
    assert isinstance(plan, LibraryPlan)
    if plan.inner:  # the inner family's module, its forward first computing the products
        source = _inner(plan).render(plan.inner_plan, params)
        signature = source.index("\n    def forward(", source.index("class ModelNew(_Reference):"))
        head = source.index("\n", signature + 1) + 1
        calls = "".join(f"        y{j} = {text}\n" for j, text in enumerate(plan.calls))
        return source[:head] + calls + source[head:]
    return module_source(plan.program, plan.reference, [_kernel(plan)], _forward(plan, params))
