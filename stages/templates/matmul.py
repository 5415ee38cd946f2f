"""Family `matmul`: one matrix product (torch.matmul / mm / bmm / @, an einsum that is one, nn.Linear, F.linear)
and a pointwise epilogue (bias, scale, residual, activations) applied to the fp32 accumulator tile before one store.

Operands are matrices or batches of them: bmm and two 3-D operands of one batch; a batch over any number of dims
(reshaped to one) times a matrix, as a Linear over a 3-D or 4-D input; a matrix times a 3-D batch. A matrix
serves every batch, read with batch stride 0. An operand may be the transpose (.T, .t(), .mT, transpose of the
last two dims, an einsum's letter order) of an input or a parameter, read through the view's strides. The batch
index and the tile share the grid's first axis (no 65535 limit on the batch).

Also the SwiGLU shape: two products sharing their left operand (x @ W1^T, x @ W3^T), each with its own
accumulator, combined in the epilogue (silu(a) * b). One program per BLOCK_M x BLOCK_N output tile, in
GROUP_M-grouped order for L2 reuse; a K-loop with masks for ragged M, N and K: `for k in range(...)` when
compiled (so num_stages pipelines it), `while` in the interpreter (which cannot run range() over a runtime
bound), chosen by a constexpr. fp32 inputs use IEEE fp32 dots unless the problem's policy
allows TF32; bf16/fp16 inputs go to the tensor cores with fp32 accumulation. Operands are read through
their strides, so a Linear weight [N, K] is read as its transpose in place.
Parameters: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch import nn

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import launch
from kernelflow.stages.templates.lowering import Lowering, Traced, node_op, node_shape
from kernelflow.stages.templates.program import Plan, Program, TemplateMismatch, Value
from kernelflow.stages.templates.source import (
    jit_source,
    line_source,
    module_source,
    operand_prologue,
    store_source,
)

_MATMUL_OPS = ("matmul", "mm")
_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, GROUP_M), best guess first, per input precision; checked
# for register spills by Triton AOT builds for sm_90a (fp32 IEEE dots are FMA loops: BLOCK_K 32 spills kilobytes).
_Config = tuple[int, int, int, int, int, int]
_HALF: tuple[_Config, ...] = ((128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8), (128, 128, 32, 8, 3, 8),
                              (64, 128, 32, 4, 4, 8), (128, 64, 32, 4, 4, 8))
_HALF_TWO: tuple[_Config, ...] = ((128, 64, 64, 8, 3, 8), (64, 128, 64, 8, 3, 8), (128, 128, 32, 8, 3, 8))  # 2 accs
_TF32: tuple[_Config, ...] = ((128, 128, 32, 8, 3, 8), (64, 128, 32, 4, 4, 8), (128, 64, 32, 4, 4, 8))
_IEEE: tuple[_Config, ...] = ((128, 64, 16, 8, 3, 8), (64, 128, 16, 8, 3, 8), (64, 64, 16, 4, 3, 8))
_MAX_PRODUCTS = 2


@dataclass(frozen=True)
class Product:
    """One matrix product A @ B: how forward names its operands, and B's layout."""

    a: str
    b: str
    b_transposed: bool  # B is a Linear weight [N, K], read as its transpose


@dataclass(frozen=True)
class MatmulPlan(Plan):
    products: tuple[Product, ...] = ()
    precision: str = "ieee"  # tl.dot input_precision of fp32 inputs ("tf32" where the policy allows)
    half: bool = False  # bf16/fp16 inputs


def tensor_expr(node: Any, what: str) -> str:
    if isinstance(node, torch.fx.Node) and node.op == "placeholder":
        return str(node.target)
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        return f"self.{node.target}"
    raise TemplateMismatch(f"the {what} operand of the product is computed in forward, not an input or a parameter")


def _transposed(node: Any) -> Any:
    """The tensor whose last two dims `node` swaps (x.T of a matrix, x.t(), x.mT, x.transpose over the last two
    dims), else None."""
    if not isinstance(node, torch.fx.Node) or node.op not in ("call_function", "call_method"):
        return None
    name = node_op(node)
    if name == "getattr" and len(node.args) == 2 and node.args[1] in ("T", "mT"):
        inner, rank = node.args[0], len(node_shape(node))
        return inner if node.args[1] == "mT" or rank == 2 else None
    if name == "t" and len(node.args) == 1 and not node.kwargs:
        return node.args[0]
    if name == "transpose" and not node.kwargs and len(node.args) == 3:
        rank, dims = len(node_shape(node)), [d for d in node.args[1:] if isinstance(d, int)]
        last_two = len(dims) == 2 and {d % rank for d in dims} == {rank - 2, rank - 1}
        return node.args[0] if last_two else None
    return None


def operand_expr(node: Any, what: str) -> str:
    """How forward names a product operand: an input or a parameter, or the transpose of one (a view)."""
    inner = _transposed(node)
    return f"{tensor_expr(inner, what)}.mT" if inner is not None else tensor_expr(node, what)


def _linear_args(node: torch.fx.Node) -> tuple[Any, Any, Any]:
    names = ("input", "weight", "bias")
    bound = {**dict(zip(names, node.args, strict=False)), **node.kwargs}
    if set(bound) - set(names):
        raise TemplateMismatch(f"linear called with unknown arguments {node.format_node()}")
    return bound["input"], bound["weight"], bound.get("bias")


class Epilogue(Lowering):
    """The lowering of the graph around its products: each product is an accumulator line, the rest pointwise."""

    def __init__(self, traced: Traced, products: list[torch.fx.Node], bias: dict[torch.fx.Node, Any]):
        super().__init__(traced.graph, traced.model)
        self.full = node_shape(products[-1])
        self.products = {node: i for i, node in enumerate(products)}
        self.bias = bias
        self.views = {arg for node in products for arg in node.args if _transposed(arg) is not None}

    def operand(self, expr: str, shape: tuple[int, ...]) -> Value:
        value = super().operand(expr, shape)
        if self.operands[-1].broadcast and len(shape) - shape.count(1) > 1:  # loaded per column: [N] only
            raise TemplateMismatch(f"{expr} of shape {list(shape)} broadcasts over the batch; the epilogue loads a "
                                   "full-shape operand or one of the columns only")
        return value

    def lower_node(self, node: torch.fx.Node) -> Any:
        if node in self.views:  # read by the product through its strides
            if any(user not in self.products for user in node.users):
                raise TemplateMismatch(f"{node.name}, a transposed operand, is used outside the product")
            return None
        if node in self.products:
            acc = self.emit("elem", expr=f"acc{self.products[node]}")
            bias = self.bias.get(node)
            if bias is None:
                return acc
            value = self.operand(bias, (self.full[-1],)) if isinstance(bias, str) else self.value(bias)
            return self.pointwise(f"{acc.text} + {value.text}", acc, value)
        return super().lower_node(node)

    def full_operand(self) -> int:
        return -1  # the output's shape is the products', not an input's; ModelNew allocates it from M and N

    def lower(self) -> Program:
        program = self.run()
        if program.reduces:
            raise TemplateMismatch("the epilogue reduces over rows")
        return program


def _einsum(node: torch.fx.Node) -> tuple[Any, Any, bool, bool]:
    """(left, right, left transposed, right transposed) of an einsum that is one matrix product: one letter
    contracted, the left's last (or second-last: transposed) with the right's second-last (or last: transposed);
    the right 2-D, or 3-D with the left 2-D or of the same batch letter; the output the batch letters, the left's
    row letter, then the right's column letter."""
    args, what = node.args, f"einsum {node.args[0]!r}" if node.args else "einsum"
    operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
    if node.kwargs or not args or not isinstance(args[0], str) or len(operands) != 2:
        raise TemplateMismatch(f"{what} of {len(operands)} operands: a matrix product has two")
    equation = args[0].replace(" ", "")
    ins, _, out = equation.partition("->")
    x, _, y = ins.partition(",")
    contracted = (set(x) & set(y)) - set(out)
    if "." in equation or not out or len(contracted) != 1 or any(len(set(t)) != len(t) for t in (x, y, out)) \
            or len(x) < 2 or len(y) not in (2, 3):
        raise TemplateMismatch(f"{what} is not one matrix product (one contracted letter, no ellipsis or repeats)")
    c = contracted.pop()
    a_t, b_t = x[-2] == c, y[-1] == c
    m, n = (x[-1] if a_t else x[-2]), (y[-2] if b_t else y[-1])
    other_batches = len(y) == 3 and len(x) > 2 and x[:-2] != y[:-2]  # a batch times a batch: the same letter
    if c not in (x[-1], x[-2]) or c not in (y[-1], y[-2]) or other_batches or out != (x[:-2] or y[:-2]) + m + n:
        raise TemplateMismatch(f"{what} is not one matrix product of the last two dims")
    return operands[0], operands[1], a_t, b_t


def _check_ranks(node: torch.fx.Node, left: tuple[int, ...], right: tuple[int, ...], batched: bool) -> None:
    """A matrix times a matrix; with `batched`, also any batch of matrices times a matrix, a matrix times a batch,
    or two batches of as many matrices."""
    if len(left) == len(right) == 2:
        return
    if batched and len(left) >= 2 and (len(right) == 2 or (len(right) == 3 and len(left) in (2, 3))):
        if len(left) == len(right) == 3 and left[0] != right[0]:
            raise TemplateMismatch(f"{node.name} broadcasts batches of {sorted({left[0], right[0]})} matrices")
        return
    raise TemplateMismatch(f"{node.name} multiplies tensors of shapes {list(left)} and {list(right)}: "
                           f"{'a matrix or a batch of them times a matrix or a batch' if batched else '2-D'} only")


def find_products(graph: torch.fx.GraphModule, batched: bool = False) -> tuple[
        list[torch.fx.Node], list[Product], dict[torch.fx.Node, Any], set[torch.dtype]]:
    """The product nodes, their operands, their Linear biases and the dtypes of everything they multiply; with
    `batched`, batches of matrices (_check_ranks), bmm and einsum too."""
    ops = (*_MATMUL_OPS, "linear", *(("bmm", "einsum") if batched else ()))
    nodes: list[torch.fx.Node] = []
    products: list[Product] = []
    biases: dict[torch.fx.Node, Any] = {}
    dtypes: set[torch.dtype] = set()
    for node in graph.graph.nodes:
        if node.op == "call_module":
            module = graph.get_submodule(str(node.target))
            if not isinstance(module, nn.Linear):
                continue
            a, b = node.args[0], f"self.{node.target}.weight"
            if module.bias is not None:
                biases[node] = f"self.{node.target}.bias"
            products.append(Product(operand_expr(a, "left"), b, True))
            operands = [a]
            shapes = node_shape(a), tuple(module.weight.shape)
            dtypes.add(module.weight.dtype)
        elif node.op in ("call_function", "call_method") and node_op(node) in ops:
            if node_op(node) == "linear":
                a, w, bias = _linear_args(node)
                if bias is not None:
                    biases[node] = bias
                products.append(Product(operand_expr(a, "left"), tensor_expr(w, "weight"), True))
                operands = [a, w]
                shapes = node_shape(a), node_shape(w)
            elif node_op(node) == "einsum":
                a, b, a_t, b_t = _einsum(node)
                products.append(Product(operand_expr(a, "left") + ".mT" * a_t,
                                        operand_expr(b, "right") + ".mT" * b_t, False))
                operands = [a, b]
                shapes = node_shape(a), node_shape(b)
            else:
                if len(node.args) != 2 or node.kwargs:
                    raise TemplateMismatch(f"unsupported matmul call {node.format_node()}")
                a, b = node.args
                products.append(Product(operand_expr(a, "left"), operand_expr(b, "right"), False))
                operands = [a, b]
                shapes = node_shape(a), node_shape(b)
        else:
            continue
        _check_ranks(node, *shapes, batched)
        dtypes |= {arg.meta["tensor_meta"].dtype for arg in operands}
        nodes.append(node)
    return nodes, products, biases, dtypes


def match(problem: Problem, traced: Traced) -> MatmulPlan:
    nodes, products, biases, dtypes = find_products(traced.graph, batched=True)
    if not nodes:
        raise TemplateMismatch("no matmul, mm, bmm, @ or linear in forward")
    if len(nodes) > _MAX_PRODUCTS:
        raise TemplateMismatch(f"{len(nodes)} matrix products; the template fuses at most {_MAX_PRODUCTS}")
    if len({p.a for p in products}) > 1 or len({node_shape(n) for n in nodes}) > 1:
        raise TemplateMismatch("two products that do not share their left operand and output shape")
    if len(dtypes) != 1 or (dtype := dtypes.pop()) not in _DTYPES:
        raise TemplateMismatch(f"product operands of dtypes {sorted(map(str, dtypes))}: one of fp32, bf16, fp16 only")
    program = Epilogue(traced, nodes, biases).lower()
    precision = "tf32" if problem.policy.allow_tf32 else "ieee"
    return MatmulPlan(program=program, reference=traced.reference,
                      products=tuple(products), precision=precision, half=dtype != torch.float32)


def variants(plan: Plan) -> list[dict[str, Any]]:
    assert isinstance(plan, MatmulPlan)
    if plan.half:
        configs = _HALF if len(plan.products) == 1 else _HALF_TWO
    else:
        configs = _TF32 if plan.precision == "tf32" else _IEEE
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "GROUP_M")
    return [dict(zip(keys, config, strict=True)) for config in configs]


def _kernel(plan: MatmulPlan) -> str:
    program, count = plan.program, len(plan.products)
    args = ["a", *(f"b{j}" for j in range(count))] + [f"p{i}" for i in range(len(program.operands))]
    args += ["out", "M", "N", "K", "stride_ab", "stride_am", "stride_ak"]
    args += [f"stride_b{j}{d}" for j in range(count) for d in "bkn"]
    args += [f"s{i}" for i in range(len(program.scalars))]
    args += [f"{k}: tl.constexpr" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "UPCAST", "INTERPRETED")]
    dot = "" if plan.half else f', input_precision="{plan.precision}"'
    body = [
        "num_pid_m = tl.cdiv(M, BLOCK_M)",
        "num_pid_n = tl.cdiv(N, BLOCK_N)",
        "pid_b = (tl.program_id(0) // (num_pid_m * num_pid_n)).to(tl.int64)",  # the matrix of the batch
        "pid = tl.program_id(0) % (num_pid_m * num_pid_n)",
        "num_pid_in_group = GROUP_M * num_pid_n",
        "first_pid_m = (pid // num_pid_in_group) * GROUP_M",
        "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
        "pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m",
        "pid_n = (pid % num_pid_in_group) // group_size_m",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
        "mask_m = rm < M",
        "mask_n = rn < N",
        "a_ptrs = a + pid_b * stride_ab + rm[:, None] * stride_am + rk[None, :] * stride_ak",
        *(f"b{j}_ptrs = b{j} + pid_b * stride_b{j}b + rk[:, None] * stride_b{j}k + rn[None, :] * stride_b{j}n"
          for j in range(count)),
        *(f"acc{j} = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)" for j in range(count)),
    ]
    step = ["mask_k = rk < K - k",
            "tile_a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)",
            "if UPCAST:",
            "    tile_a = tile_a.to(tl.float32)"]
    for j in range(count):
        step += [f"tile_b{j} = tl.load(b{j}_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)",
                 "if UPCAST:",
                 f"    tile_b{j} = tile_b{j}.to(tl.float32)",
                 f"acc{j} = tl.dot(tile_a, tile_b{j}, acc{j}{dot})",
                 f"b{j}_ptrs += BLOCK_K * stride_b{j}k"]
    step.append("a_ptrs += BLOCK_K * stride_ak")
    # The compiler pipelines (num_stages) only `for` loops over range(); the interpreter cannot run a range()
    # with a runtime bound. INTERPRETED is a constexpr, so each side compiles only its own branch.
    body += ["if INTERPRETED:", "    k = 0", "    while k < K:", *("        " + s for s in step),
             "        k += BLOCK_K", "else:", "    for k in range(0, K, BLOCK_K):", *("        " + s for s in step),
             "mask = mask_m[:, None] & mask_n[None, :]", "offs = pid_b * M * N + rm[:, None] * N + rn[None, :]"]
    for line in program.lines:
        per_column = line.load is not None and program.operands[line.load].broadcast  # a [N] operand
        body.append(line_source(line, "rn", "mask_n", "[None, :]") if per_column else line_source(line, "offs"))
    body.append(store_source(program, "offs"))
    return jit_source("_kf_matmul", args, body)


def _forward(plan: MatmulPlan, params: dict[str, Any]) -> list[str]:
    first = plan.products[0]
    # a matrix's batch stride: its first when it is 3-D, 0 when one matrix serves every batch
    b_strides = [f"_kf_batch_stride(b{j}), b{j}.stride({-2 + p.b_transposed}), b{j}.stride({-1 - p.b_transposed})"
                 for j, p in enumerate(plan.products)]
    n_dim = "b0.shape[-2]" if first.b_transposed else "b0.shape[-1]"
    count = len(plan.products)
    call = ["a", *(f"b{j}" for j in range(count))] + [f"p{i}" for i in range(len(plan.program.operands))]
    call += ["out", "M", "N", "K", "_kf_batch_stride(a)", "a.stride(-2)", "a.stride(-1)", *b_strides,
             *plan.program.scalars]
    call += [f"{k}={params[k]}" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")]
    # CPU tensors run in the Triton interpreter, whose tl.dot misreads bf16 (Triton 3.6): dot their fp32 upcast.
    # Tested on the device type, not is_cuda: the compile stage captures launches on meta tensors, which must
    # build what the GPU builds.
    on_cpu = 'a.device.type == "cpu"'
    call += [f"UPCAST={on_cpu if plan.half else 'False'}", f"INTERPRETED={on_cpu}",
             f"num_warps={params['num_warps']}",
             f"num_stages={params['num_stages']}"]
    grid = f"(batch * _kf_cdiv(M, {params['BLOCK_M']}) * _kf_cdiv(N, {params['BLOCK_N']}),)"
    return [
        *([] if first.a == "a" else [f"a = {first.a}"]),
        *(f"b{j} = {p.b}" for j, p in enumerate(plan.products)),
        *operand_prologue(plan.program),
        f"M, K, N = a.shape[-2], a.shape[-1], {n_dim}",
        "batches = a.shape[:-2] or b0.shape[:-2]",
        "batch = batches.numel()",
        "a = a.reshape(batch, M, K) if a.dim() > 3 else a",  # batches over several dims: one batch dim
        f"out = a.new_empty((*batches, M, N), dtype={plan.program.out_dtype})",
        launch.call("_kf_matmul", grid, ", ".join(call)),
        "return out",
    ]


_BATCH_STRIDE = """def _kf_batch_stride(x):
    return x.stride(0) if x.dim() == 3 else 0"""


def render(plan: Plan, params: dict[str, Any]) -> str:
    assert isinstance(plan, MatmulPlan)
    return module_source(plan.program, plan.reference, [_BATCH_STRIDE, _kernel(plan)], _forward(plan, params))
