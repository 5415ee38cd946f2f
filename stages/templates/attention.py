"""Family `attention`: scaled dot-product attention over [B, H, S, D] (F.scaled_dot_product_attention, or written
out as softmax(q @ k^T * scale [causal masked_fill], dim=-1) @ v) as one flash-attention forward kernel.

One program per BLOCK_M query rows of one (batch, head): online softmax over BLOCK_N key blocks with a running max
and sum in fp32, tl.dot for q k^T and p v (fp32 accumulation; bf16/fp16 operands on the tensor cores, fp32 operands
as IEEE dots unless the policy allows TF32), exp2 with the scale folded into log2(e). The key blocks every row of the
tile sees in full run unmasked; the ragged tail (S % BLOCK_N) and, when causal, the diagonal blocks run masked; the
blocks above the diagonal are skipped, and causal programs start from the longest rows. The head dim is a constexpr,
padded to a power of two >= 16 with masks. K-loops as in matmul.py: `for ... in range()` compiled (pipelined by
num_stages), `while` in the interpreter. Declined: attn_mask, dropout, GQA, q/k/v of different shapes, D > 256.
Causality and scale are read per workload (each is traced): a value that changes between workloads must follow a
model attribute (or, for the scale, 1/sqrt(D)), which the candidate then reads at run time.
Half precision rounds the probabilities p to bf16/fp16 for the p v product, as flash kernels do: a relative error
of 2^-9 (bf16) per weight, which on rows that average few keys (the first rows of a causal mask) can reach the
problem's tolerance (it does on problems/22's causal shape: docs/LOG.md). `split_p` adds p's rounding error as a
second bf16 operand, p_hi + p_lo, in a second dot: 1.5x the tensor-core work, ~16 significant bits per weight, well
inside that tolerance. The proposer tries
it after a mismatch (the raise_precision action, flows/optimize.py) or after the plain variants.
Parameters: BLOCK_M, BLOCK_N, num_warps, num_stages, split_p (half precision only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch import nn

from kernelflow.stages.contracts import Problem, Workload
from kernelflow.stages.problems.fx_trace import trace_with_shapes
from kernelflow.stages.problems.kernelbench import import_problem, workload_call
from kernelflow.stages.templates import launch
from kernelflow.stages.templates.lowering import Traced, node_op, node_shape
from kernelflow.stages.templates.program import Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import module_source

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_MAX_HEAD_DIM = 256
_SDPA = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_LOG2E = 1.4426950408889634
# (BLOCK_M, BLOCK_N, num_warps, num_stages), best guess first for the H200, by padded head dim. Half precision:
# two warpgroups of 64 rows each (wgmma's M); K and V tiles of BLOCK_N x D per stage in shared memory (D 256: fewer
# stages). fp32 IEEE dots are FMA loops holding fp32 tiles in registers: small tiles.
_Config = tuple[int, int, int, int]
_HALF: dict[int, tuple[_Config, ...]] = {
    64: ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (64, 64, 4, 4)),
    128: ((128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 8, 4)),
    256: ((64, 64, 8, 2), (64, 32, 4, 3), (128, 32, 8, 2)),
}
_FP32: tuple[_Config, ...] = ((64, 32, 4, 2), (32, 32, 4, 2), (64, 64, 8, 2))
_ONES = ("ones", "ones_like", "new_ones")
_CASTS = ("bool", "to")  # around a mask: .bool(), .to(torch.bool)


@dataclass(frozen=True)
class Found:
    """What one workload's graph computes."""

    q: str
    k: str
    v: str
    causal: bool
    scale: float | None  # None: SDPA's default 1/sqrt(D)
    dtype: torch.dtype
    head_dim: int


@dataclass(frozen=True)
class AttentionPlan(Plan):
    q: str = "q"
    k: str = "k"
    v: str = "v"
    causal: str = "False"  # forward expression: a literal, or a model attribute when it differs between workloads
    scale: str = "D ** -0.5"  # forward expression; D is the head dim
    precision: str = "ieee"  # tl.dot input_precision of fp32 operands
    half: bool = True
    head_dim: int = 64  # the largest over the workloads (picks the variants)


def _placeholder(node: Any, what: str) -> str:
    if not (isinstance(node, torch.fx.Node) and node.op == "placeholder"):
        raise TemplateMismatch(f"the {what} of attention is computed in forward, not an input")
    return str(node.target)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TemplateMismatch(f"{what} is {value!r}, not a finite constant")
    return float(value)


def _bind(node: torch.fx.Node, params: tuple[str, ...]) -> dict[str, Any]:
    args = list(node.args)
    if node.op == "call_method":  # the tensor is self, not input
        params = ("self", *params[1:])
    if len(args) > len(params) or set(node.kwargs) - set(params):
        raise TemplateMismatch(f"unexpected arguments in {node.format_node()}")
    return {**dict(zip(params, args, strict=False)), **node.kwargs}


def _name(graph: torch.fx.GraphModule, node: Any) -> str:
    if not isinstance(node, torch.fx.Node):
        return ""
    if node.op == "call_module":
        return "softmax" if isinstance(graph.get_submodule(str(node.target)), nn.Softmax) else ""
    return node_op(node) if node.op in ("call_function", "call_method") else ""


def _sdpa(node: torch.fx.Node, used: set[torch.fx.Node]) -> tuple[Any, Any, Any, bool, float | None]:
    bound = _bind(node, _SDPA)
    if bound.get("attn_mask") is not None:
        raise TemplateMismatch("scaled_dot_product_attention with an attn_mask (only is_causal masks are supported)")
    if bound.get("dropout_p", 0.0) != 0.0:
        raise TemplateMismatch("scaled_dot_product_attention with dropout (not deterministic)")
    if bound.get("enable_gqa", False):
        raise TemplateMismatch("scaled_dot_product_attention with enable_gqa (grouped-query attention)")
    causal = bound.get("is_causal", False)
    if not isinstance(causal, bool):
        raise TemplateMismatch(f"is_causal is {causal!r}, not a constant")
    scale = bound.get("scale")
    used.add(node)
    return bound["query"], bound["key"], bound["value"], causal, None if scale is None else _number(scale, "the scale")


def _key_transposed(graph: torch.fx.GraphModule, node: Any, used: set[torch.fx.Node]) -> Any:
    """k from k.transpose(-2, -1) (either order, any sign) or k.permute(0, 1, 3, 2)."""
    name = _name(graph, node)
    if name == "transpose":
        bound = _bind(node, ("input", "dim0", "dim1"))
        dims = [bound.get("dim0"), bound.get("dim1")]
        if all(isinstance(d, int) for d in dims) and {int(d) % 4 for d in dims if d is not None} == {2, 3}:
            used.add(node)
            return bound.get("input", bound.get("self"))
    if name == "permute" and [a % 4 if isinstance(a, int) else a for a in node.args[1:]] in ([0, 1, 3, 2],):
        used.add(node)
        return node.args[0]
    raise TemplateMismatch("the right operand of the score product is not k transposed over its last two dims")


def _causal_mask(graph: torch.fx.GraphModule, node: Any, size: int, used: set[torch.fx.Node]) -> None:
    """The mask is True strictly above the diagonal: triu(ones, 1), or the negation of tril(ones) (== 0, ~, logical_not)."""
    def strip(n: Any) -> Any:
        while _name(graph, n) in _CASTS and all(a in (torch.bool,) for a in [*n.args[1:], *n.kwargs.values()]):
            used.add(n)
            n = n.args[0]
        return n

    node, negated = strip(node), False
    name = _name(graph, node)
    if name in ("eq", "logical_not", "invert", "__invert__"):
        if name == "eq" and node.args[1:] not in ((0,), (False,), (0.0,)):
            raise TemplateMismatch(f"unsupported mask comparison {node.format_node()}")
        used.add(node)
        node, negated = strip(node.args[0]), True
    name = _name(graph, node)
    want = ("tril", 0) if negated else ("triu", 1)
    if name != want[0]:
        raise TemplateMismatch(f"the masked_fill mask is not triu(ones, diagonal=1) or ~tril(ones): {name or node}")
    bound = _bind(node, ("input", "diagonal"))
    if bound.get("diagonal", 0) != want[1]:
        raise TemplateMismatch(f"{name} with diagonal {bound.get('diagonal', 0)}, not the causal {want[1]}")
    used.add(node)
    ones = strip(bound.get("input", bound.get("self")))
    if _name(graph, ones) not in _ONES or node_shape(ones)[-2:] != (size, size):
        raise TemplateMismatch("the causal mask is not built from ones of shape [..., S, S]")
    used.add(ones)
    sizes = list(ones.all_input_nodes)  # its size arguments: q.size(-2), q.shape[-2]
    while sizes:
        n = sizes.pop()
        if n not in used and n.op != "placeholder" and _name(graph, n) in ("size", "getattr", "getitem"):
            used.add(n)
            sizes += n.all_input_nodes


def _explicit(graph: torch.fx.GraphModule, node: Any, used: set[torch.fx.Node]) -> tuple[Any, Any, Any, bool, float]:
    """softmax(q @ k^T [* c | / c]... [.masked_fill(causal, -inf)], dim=-1) @ v."""
    if _name(graph, node) != "matmul" or len(node.args) != 2 or node.kwargs:
        raise TemplateMismatch("forward is neither scaled_dot_product_attention nor softmax(q @ k^T * scale) @ v")
    used.add(node)
    probs, v = node.args
    if _name(graph, probs) != "softmax":
        raise TemplateMismatch("the left operand of the final product is not a softmax")
    if probs.op == "call_module":
        dim: Any = graph.get_submodule(str(probs.target)).dim
    else:
        bound = _bind(probs, ("input", "dim", "_stacklevel", "dtype"))
        if bound.get("dtype") is not None:
            raise TemplateMismatch("softmax with a dtype argument")
        dim = bound.get("dim")
    if not isinstance(dim, int) or dim % 4 != 3:
        raise TemplateMismatch(f"softmax over dim {dim}, not the key dim")
    used.add(probs)
    scores, scale, causal = probs.args[0], 1.0, False
    while _name(graph, scores) != "matmul":
        name = _name(graph, scores)
        if name in ("mul", "truediv") and not isinstance(scores.args[1], torch.fx.Node):
            factor = _number(scores.args[1], "the score scale")
            scale = scale * factor if name == "mul" else scale / factor
            nxt = scores.args[0]
        elif name == "mul" and not isinstance(scores.args[0], torch.fx.Node):
            scale, nxt = scale * _number(scores.args[0], "the score scale"), scores.args[1]
        elif name == "masked_fill" and not causal:
            bound = _bind(scores, ("input", "mask", "value"))
            value = bound.get("value")
            dtype = scores.meta["tensor_meta"].dtype
            if not isinstance(value, float) or value not in (-math.inf, torch.finfo(dtype).min):
                raise TemplateMismatch(f"masked_fill with {value!r}, not -inf (or the dtype's lowest)")
            _causal_mask(graph, bound["mask"], node_shape(scores)[-1], used)
            if scale <= 0:
                raise TemplateMismatch("a non-positive scale after the causal mask")
            causal, nxt = True, bound.get("input", bound.get("self"))
        else:
            raise TemplateMismatch(f"unsupported op between the score product and the softmax: {name or scores}")
        used.add(scores)
        scores = nxt
    if len(scores.args) != 2 or scores.kwargs:
        raise TemplateMismatch(f"unsupported matmul call {scores.format_node()}")
    used.add(scores)
    q, kt = scores.args
    return q, _key_transposed(graph, kt, used), v, causal, scale


def recognize(graph: torch.fx.GraphModule) -> Found:
    """What the traced forward computes, or a TemplateMismatch saying why it is not attention."""
    nodes = [n for n in graph.graph.nodes if n.op not in ("placeholder", "output")]
    output = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    used: set[torch.fx.Node] = set()
    if any(n.op == "call_function" and _name(graph, n) == "scaled_dot_product_attention" for n in nodes):
        if _name(graph, output) != "scaled_dot_product_attention":
            raise TemplateMismatch("forward computes more than scaled_dot_product_attention's output")
        q, k, v, causal, scale = _sdpa(output, used)
    else:
        q, k, v, causal, scale = _explicit(graph, output, used)
    extra = [n for n in nodes if n not in used]
    if extra:
        raise TemplateMismatch(f"forward computes more than attention: {extra[0].format_node()}")
    names = _placeholder(q, "query"), _placeholder(k, "key"), _placeholder(v, "value")
    shapes = {node_shape(n) for n in (q, k, v, output)}
    dtypes = {n.meta["tensor_meta"].dtype for n in (q, k, v, output)}
    if len(shapes) != 1 or len(shape := shapes.pop()) != 4:
        raise TemplateMismatch(f"q, k, v and the output of shapes {sorted(map(list, shapes))}, not one [B, H, S, D]")
    if len(dtypes) != 1 or (dtype := dtypes.pop()) not in _DTYPES:
        raise TemplateMismatch(f"q, k, v and the output of dtypes {sorted(map(str, dtypes))}: one of bf16, fp16, fp32")
    if not 1 <= shape[-1] <= _MAX_HEAD_DIM:
        raise TemplateMismatch(f"head dim {shape[-1]}: at most {_MAX_HEAD_DIM}")
    return Found(*names, causal=causal, scale=scale, dtype=dtype, head_dim=shape[-1])


def _trace_at(module: Any, workload: Workload, where: str) -> tuple[Found, nn.Module]:
    with torch.device("meta"):
        model = module.Model(*workload_call(module, workload, "get_init_inputs", where))
    inputs = workload_call(module, workload, "get_inputs", where, meta=True)
    try:
        graph = trace_with_shapes(model, inputs)
    except Exception as e:
        raise TemplateMismatch(f"torch.fx cannot trace forward at {workload.name}: {type(e).__name__}: {e}") from e
    return recognize(graph), model


def _follow(values: list[Any], models: list[nn.Module], kind: type, what: str) -> str:
    """A model attribute equal to the value at every workload (the candidate reads it at run time)."""
    for name, value in vars(models[0]).items():
        if (not name.startswith("_") and name != "training" and type(value) is kind
                and all(type(getattr(m, name, None)) is kind and getattr(m, name) == v for m, v in zip(models, values, strict=True))):
            return f"self.{name}"
    raise TemplateMismatch(f"{what} changes between workloads ({values}) and no model attribute follows it")


def match(problem: Problem, traced: Traced) -> AttentionPlan:
    first = recognize(traced.graph)  # the family's reason for an unrelated problem, before any further trace
    module = import_problem(problem.path)
    workloads = [*problem.cpu_workloads, *problem.gpu_workloads]
    found, models = zip(*(_trace_at(module, w, problem.path) for w in workloads), strict=True)
    if len({(f.q, f.k, f.v, f.dtype) for f in found}) != 1 or found[0].q != first.q:
        raise TemplateMismatch("the workloads trace to different attention inputs or dtypes")
    causals = [f.causal for f in found]
    causal = str(causals[0]) if len(set(causals)) == 1 else _follow(causals, list(models), bool, "is_causal")
    scales = [f.scale if f.scale is not None else f.head_dim ** -0.5 for f in found]
    if all(f.scale is None for f in found):
        scale = "D ** -0.5"
    elif len(set(scales)) == 1:
        scale = repr(scales[0])
    elif all(math.isclose(s, f.head_dim ** -0.5, rel_tol=1e-12) for s, f in zip(scales, found, strict=True)):
        scale = "D ** -0.5"
    else:
        scale = _follow(scales, list(models), float, "the scale")
    program = Program(args=tuple(str(n.target) for n in traced.graph.graph.nodes if n.op == "placeholder"),
                      operands=(), full=0, scalars=(), helpers=(), lines=(), output="out", out_kind="elem",
                      out_keepdim=True, out_dtype=str(first.dtype))
    return AttentionPlan(program=program, reference=traced.reference, q=first.q, k=first.k, v=first.v, causal=causal,
                         scale=scale, precision="tf32" if problem.policy.allow_tf32 else "ieee",
                         half=first.dtype != torch.float32, head_dim=max(f.head_dim for f in found))


def variants(plan: Plan) -> list[dict[str, Any]]:
    assert isinstance(plan, AttentionPlan)
    padded = max(64, 1 << (plan.head_dim - 1).bit_length())
    configs = _HALF[padded] if plan.half else _FP32
    keys = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
    plain = [dict(zip(keys, config, strict=True)) for config in configs]
    if not plan.half:  # fp32 probabilities are never rounded: nothing to split
        return plain
    return [{**p, "split_p": False} for p in plain] + [{**p, "split_p": True} for p in plain]


_BLOCK = '''@triton.jit
def _kf_attention_block(acc, l_i, m_i, q_tile, k_base, v_base, start_n, rows, S, qk_scale, stride_ks, stride_kd,
                        stride_vs, stride_vd, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                        MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, SPLIT_P: tl.constexpr):
    """One key block: scores, the online-softmax update of the running max and sum, and p @ v into acc."""
    cols = start_n + tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    kv_mask = (cols[:, None] < S) & (rd[None, :] < HEAD_D)
    k_tile = tl.load(k_base + cols[:, None] * stride_ks + rd[None, :] * stride_kd, mask=kv_mask, other=0.0)
    v_tile = tl.load(v_base + cols[:, None] * stride_vs + rd[None, :] * stride_vd, mask=kv_mask, other=0.0)
    if UPCAST:
        k_tile = k_tile.to(tl.float32)
    qk = tl.dot(q_tile, tl.trans(k_tile){dot}) * qk_scale
    if MASKED:
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p_hi = p.to(v_base.dtype.element_ty)
    if SPLIT_P:  # the rounding error of p_hi, itself rounded: p_hi + p_lo carries ~16 significant bits, not 8
        p_lo = (p - p_hi.to(tl.float32)).to(v_base.dtype.element_ty)
    if UPCAST:
        p_hi = p_hi.to(tl.float32)
        v_tile = v_tile.to(tl.float32)
    acc = tl.dot(p_hi, v_tile, acc * alpha[:, None]{dot})
    if SPLIT_P:
        if UPCAST:
            p_lo = p_lo.to(tl.float32)
        acc = tl.dot(p_lo, v_tile, acc{dot})
    return acc, l_i, m_new
'''

_MAIN = '''@triton.jit
def _kf_attention(q, k, v, out, qk_scale, H, S, stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh,
                  stride_ks, stride_kd, stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os,
                  stride_od, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, SPLIT_P: tl.constexpr,
                  INTERPRETED: tl.constexpr):
    pid_m = tl.program_id(0)
    if CAUSAL:  # the longest rows first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    k_base = k + b * stride_kb + h * stride_kh
    v_base = v + b * stride_vb + h * stride_vh
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < S) & (rd[None, :] < HEAD_D)
    q_tile = tl.load(q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + rd[None, :] * stride_qd,
                     mask=row_mask, other=0.0)
    if UPCAST:
        q_tile = q_tile.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # Key blocks before `full` are seen whole by every row of the tile; [full, end) needs the masks.
    if CAUSAL:
        full = (pid_m * BLOCK_M) // BLOCK_N * BLOCK_N
        end = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        full = S // BLOCK_N * BLOCK_N
        end = S
    if INTERPRETED:
        start_n = 0
        while start_n < full:
{unmasked}
            start_n += BLOCK_N
        while start_n < end:
{masked}
            start_n += BLOCK_N
    else:
        for start_n in range(0, full, BLOCK_N):
{unmasked}
        for start_n in range(full, end, BLOCK_N):
{masked}
    acc = acc / l_i[:, None]
    tl.store(out + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + rd[None, :] * stride_od,
             acc.to(out.dtype.element_ty), mask=row_mask)
'''


def _kernels(plan: AttentionPlan) -> list[str]:
    dot = "" if plan.half else f', input_precision="{plan.precision}"'
    step = ("acc, l_i, m_i = _kf_attention_block(acc, l_i, m_i, q_tile, k_base, v_base, start_n, rows, S, qk_scale, "
            "stride_ks, stride_kd, stride_vs, stride_vd, HEAD_D, BLOCK_N, BLOCK_D, {masked}, CAUSAL, UPCAST, SPLIT_P)")
    main = _MAIN.replace("{unmasked}", " " * 12 + step.format(masked="False"))
    main = main.replace("{masked}", " " * 12 + step.format(masked="True"))
    return [_BLOCK.replace("{dot}", dot), main]


def _forward(plan: AttentionPlan, params: dict[str, Any]) -> list[str]:
    # CPU tensors run in the Triton interpreter, whose tl.dot misreads bf16 (Triton 3.6): dot their fp32 upcast.
    on_cpu = "q.device.type == \"cpu\""
    call = ["q", "k", "v", "out", f"({plan.scale}) * {_LOG2E}", "H", "S", "*q.stride()", "*k.stride()", "*v.stride()",
            "*out.stride()", "HEAD_D=D", f"BLOCK_M={params['BLOCK_M']}", f"BLOCK_N={params['BLOCK_N']}",
            "BLOCK_D=max(16, _kf_pow2(D))", f"CAUSAL=bool({plan.causal})",
            f"UPCAST={on_cpu if plan.half else 'False'}", f"SPLIT_P={bool(params.get('split_p', False))}",
            f"INTERPRETED={on_cpu}",
            f"num_warps={params['num_warps']}", f"num_stages={params['num_stages']}"]
    return [
        *([] if (plan.q, plan.k, plan.v) == ("q", "k", "v") else [f"q, k, v = {plan.q}, {plan.k}, {plan.v}"]),
        "B, H, S, D = q.shape",
        "out = q.new_empty((B, H, S, D), dtype=q.dtype)",
        launch.call("_kf_attention", f"(_kf_cdiv(S, {params['BLOCK_M']}), B * H)", ", ".join(call)),
        "return out",
    ]


def render(plan: Plan, params: dict[str, Any]) -> str:
    assert isinstance(plan, AttentionPlan)
    return module_source(plan.program, plan.reference, _kernels(plan), _forward(plan, params))

