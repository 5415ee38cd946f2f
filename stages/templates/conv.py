"""Family `conv`: one nn.Conv1d/2d/3d or nn.ConvTranspose1d/2d/3d (zero padding, any stride, padding, dilation,
output padding and groups, with or without a bias) as an implicit GEMM, and a pointwise epilogue on the fp32
accumulator before one store.

The product is out[n, g*COG + co, od, oh, ow] = sum over (c, kd, kh, kw) of x[n, g*CG + c, id, ih, iw]
* w[g*COG + co, c, kd, kh, kw] with id = od*SD - PD + kd*DD (a transposed convolution: w[g*CG + c, co, kd, kh, kw]
where od = id*SD - PD + kd*DD, so id = (od + PD - kd*DD) / SD where that divides): rows M = N*OD*OH*OW output
positions, columns the COG output channels of a group, K = CG*KD*KH*KW. Each program takes a BLOCK_M x BLOCK_N tile of one group (the group on the grid's second axis),
gathers the input tile of each K step from the row's output position and the step's (c, kd, kh, kw), masked
where the window reads the padding, loads the weight tile from its [COG, K] rows, and accumulates with tl.dot
(fp32 inputs as IEEE fp32 dots: Policy.conv_tf32 is cuDNN's, which the static checks hold a candidate's own
kernel to; bf16/fp16 on the tensor cores). 1-D and 2-D convolutions run as 3-D ones with unit leading dims. The geometry
(stride, padding, dilation, groups) is read from the module at each call, so a module built with other init
arguments runs right. The epilogue takes scalars and operands of the output's full shape (a per-channel operand
broadcasts otherwise than the tile's columns: the library_epilogue and inductor families take those).
Declined: padding modes other than zeros, string padding other than 'valid', a transposed convolution called
with output_size.
Parameters: BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch import nn

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import launch
from kernelflow.stages.templates.lowering import CONVS, PRODUCT_DTYPES, TRANSPOSED_CONVS, Traced, node_shape
from kernelflow.stages.templates.matmul import Epilogue, tensor_expr
from kernelflow.stages.templates.program import Plan, TemplateMismatch, Value
from kernelflow.stages.templates.source import (
    jit_source,
    line_source,
    module_source,
    operand_prologue,
    store_source,
)

_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
# best guess first; BLOCK_N >= 16 (tl.dot's least), BLOCK_K 16 for IEEE fp32 (an FMA loop: wider spills)
_IEEE = ((64, 64, 16, 4, 3), (128, 64, 16, 8, 3), (64, 32, 16, 4, 3))
_HALF = ((128, 64, 32, 4, 3), (64, 64, 32, 4, 3), (128, 128, 32, 8, 3))
_NARROW = ((64, 16, 16, 4, 3), (128, 16, 16, 4, 3))  # at most 16 output channels a group (depthwise: 1)


@dataclass(frozen=True)
class ConvPlan(Plan):
    conv: str = ""  # how forward names the module: self.<target>
    source: str = ""  # how forward names the convolved input
    dims: int = 2  # spatial dims
    has_bias: bool = False
    half: bool = False
    narrow: bool = False  # a group's output channels fit one narrow tile
    transposed: bool = False


class _ConvEpilogue(Epilogue):
    """The lines after the convolution; an operand must have the output's full shape."""

    def operand(self, expr: str, shape: tuple[int, ...]) -> Value:
        value = super().operand(expr, shape)
        if self.operands[-1].broadcast:
            raise TemplateMismatch(f"{expr} of shape {list(shape)} broadcasts against the convolution's output "
                                   f"{list(self.full)}; the conv template's epilogue takes full-shape operands")
        return value


def _conv_node(traced: Traced) -> tuple[torch.fx.Node, nn.Module]:
    found: list[tuple[torch.fx.Node, nn.Module]] = []
    for node in traced.graph.graph.nodes:
        if node.op == "call_module":
            module = traced.graph.get_submodule(str(node.target))
            if isinstance(module, (*CONVS, *TRANSPOSED_CONVS)):
                found.append((node, module))
        elif node.op == "call_function" and getattr(node.target, "__name__", "") in (
                "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
            raise TemplateMismatch(f"F.{node.target.__name__} in forward; the conv template takes nn.ConvNd modules")
    if not found:
        raise TemplateMismatch("no nn.Conv1d/2d/3d or nn.ConvTranspose1d/2d/3d in forward")
    if len(found) > 1:
        raise TemplateMismatch(f"{len(found)} convolutions; the template renders one")
    return found[0]


def match(problem: Problem, traced: Traced) -> ConvPlan:
    node, conv = _conv_node(traced)
    assert isinstance(conv, nn.modules.conv._ConvNd)
    if conv.padding_mode != "zeros":
        raise TemplateMismatch(f"{node.target} pads with {conv.padding_mode!r}; the template reads zero padding")
    if isinstance(conv.padding, str) and conv.padding != "valid":
        raise TemplateMismatch(f"{node.target} has padding {conv.padding!r}; the template takes sizes or 'valid'")
    if len(node.args) != 1 or node.kwargs:
        raise TemplateMismatch(f"unsupported convolution call {node.format_node()}")
    source, arg = tensor_expr(node.args[0], "input"), node.args[0]
    assert isinstance(arg, torch.fx.Node)  # tensor_expr took it
    dtype = conv.weight.dtype
    if dtype not in PRODUCT_DTYPES or arg.meta["tensor_meta"].dtype != dtype:
        raise TemplateMismatch(f"a convolution of {arg.meta['tensor_meta'].dtype} by {dtype} weights: "
                               "fp32, bf16 or fp16 alike only")
    if len(node_shape(arg)) != len(conv.kernel_size) + 2:
        raise TemplateMismatch(f"{node.target} convolves an unbatched input")
    program = _ConvEpilogue(traced, [node], {}).lower()
    return ConvPlan(program=program, reference=traced.reference, conv=f"self.{node.target}", source=source,
                    dims=len(conv.kernel_size), has_bias=conv.bias is not None,
                    half=dtype != torch.float32, narrow=conv.out_channels // conv.groups <= 16,
                    transposed=isinstance(conv, TRANSPOSED_CONVS))


def variants(plan: Plan) -> list[dict[str, Any]]:
    assert isinstance(plan, ConvPlan)
    configs = _NARROW if plan.narrow else _HALF if plan.half else _IEEE
    return [dict(zip(_KEYS, config, strict=True)) for config in configs]


def _window(transposed: bool) -> list[str]:
    """The input position each (output position, K index) reads, and whether it is inside the input."""
    if not transposed:
        return ["i_d = od[:, None] * SD - PD + kd[None, :] * DD",
                "i_h = oh[:, None] * SH - PH + kh[None, :] * DH",
                "i_w = ow[:, None] * SW - PW + kw[None, :] * DW",
                "inside = (i_d >= 0) & (i_d < D) & (i_h >= 0) & (i_h < H) & (i_w >= 0) & (i_w < W)"]
    lines = []
    for o, k, s, p, d, n in (("od", "kd", "SD", "PD", "DD", "D"), ("oh", "kh", "SH", "PH", "DH", "H"),
                             ("ow", "kw", "SW", "PW", "DW", "W")):
        i = "i_" + o[1]
        lines += [f"t_{o[1]} = {o}[:, None] + {p} - {k}[None, :] * {d}",  # the input position times the stride
                  f"{i} = tl.where(t_{o[1]} >= 0, t_{o[1]}, 0) // {s}",
                  f"in_{o[1]} = (t_{o[1]} >= 0) & (t_{o[1]} % {s} == 0) & ({i} < {n})"]
    return [*lines, "inside = in_d & in_h & in_w"]


def _weight(transposed: bool) -> str:
    """The weight tile's offsets: a convolution's weight is [COUT, CG, KD, KH, KW] (a row per output channel), a
    transposed one's [C, COG, KD, KH, KW]."""
    if not transposed:
        return "(g * COG + rn[None, :]).to(tl.int64) * K + rk[:, None]"
    return "((g * CG + c[:, None]).to(tl.int64) * COG + rn[None, :]) * (KD * KH * KW) + (rk % (KD * KH * KW))[:, None]"


def _kernel(plan: ConvPlan) -> str:
    program = plan.program
    args = ["x", "w", "bias"] + [f"p{i}" for i in range(len(program.operands))] + ["out"]
    args += ["C", "D", "H", "W", "COUT", "OD", "OH", "OW", "KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW",
             "DD", "DH", "DW", "CG", "COG", "M", "K"]
    args += [f"s{i}" for i in range(len(program.scalars))]
    args += [f"{k}: tl.constexpr" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "HAS_BIAS", "UPCAST", "INTERPRETED")]
    dot = "" if plan.half else ', input_precision="ieee"'
    body = [
        "num_pid_n = tl.cdiv(COG, BLOCK_N)",
        "pid_m = tl.program_id(0) // num_pid_n",
        "pid_n = tl.program_id(0) % num_pid_n",
        "g = tl.program_id(1)",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",  # output positions (n, od, oh, ow)
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",  # output channels of group g
        "mask_m = rm < M",
        "mask_n = rn < COG",
        "ow = rm % OW",
        "oh = (rm // OW) % OH",
        "od = (rm // (OW * OH)) % OD",
        "nb = (rm // (OW * OH * OD)).to(tl.int64)",
        "acc0 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)",  # the epilogue reads acc0
    ]
    step = [
        "rk = k + tl.arange(0, BLOCK_K)",
        "mask_k = rk < K",
        "kw = rk % KW",
        "kh = (rk // KW) % KH",
        "kd = (rk // (KW * KH)) % KD",
        "c = rk // (KW * KH * KD)",
        *_window(plan.transposed),
        "x_off = (((nb[:, None] * C + g * CG + c[None, :]) * D + i_d) * H + i_h) * W + i_w",
        "tile_x = tl.load(x + x_off, mask=mask_m[:, None] & mask_k[None, :] & inside, other=0.0)",
        f"tile_w = tl.load(w + {_weight(plan.transposed)}, mask=mask_k[:, None] & mask_n[None, :], other=0.0)",
        "if UPCAST:",
        "    tile_x = tile_x.to(tl.float32)",
        "    tile_w = tile_w.to(tl.float32)",
        f"acc0 = tl.dot(tile_x, tile_w, acc0{dot})",
    ]
    # The compiler pipelines (num_stages) only `for` loops over range(); the interpreter cannot run a range()
    # with a runtime bound. INTERPRETED is a constexpr, so each side compiles only its own branch.
    body += ["if INTERPRETED:", "    k = 0", "    while k < K:", *("        " + s for s in step),
             "        k += BLOCK_K", "else:", "    for k in range(0, K, BLOCK_K):", *("        " + s for s in step),
             "if HAS_BIAS:",
             "    acc0 += tl.load(bias + g * COG + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]",
             "mask = mask_m[:, None] & mask_n[None, :]",
             "offs = (nb[:, None] * COUT + g * COG + rn[None, :]) * (OD * OH * OW) + (rm % (OD * OH * OW))[:, None]"]
    body += [line_source(line, "offs") for line in program.lines]
    body.append(store_source(program, "offs"))
    return jit_source("_kf_conv", args, body)


def _forward(plan: ConvPlan, params: dict[str, Any]) -> list[str]:
    conv, pad = plan.conv, 3 - plan.dims

    def lead(unit: int) -> str:  # a 1-D or 2-D convolution's unit leading dims
        return f"({unit},) * {pad} + " if pad else ""

    call = ["x", "w", f"{conv}.bias if {conv}.bias is not None else w"]
    if plan.transposed:  # weight [C, COG, ...]; the output grows from the input
        cout = f"w.shape[1] * {conv}.groups"
        sizes = ("OD, OH, OW = ((n - 1) * s - 2 * p + d * (k - 1) + q + 1 for n, p, d, k, s, q in "
                 "((D, PD, DD, KD, SD, QD), (H, PH, DH, KH, SH, QH), (W, PW, DW, KW, SW, QW)))")
        extra = [f"QD, QH, QW = {lead(0)}tuple({conv}.output_padding)"]
    else:
        cout = "w.shape[0]"
        sizes = ("OD, OH, OW = ((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p, d, k, s in "
                 "((D, PD, DD, KD, SD), (H, PH, DH, KH, SH), (W, PW, DW, KW, SW)))")
        extra = []
    call += [f"p{i}" for i in range(len(plan.program.operands))]
    call += ["out", "C", "D", "H", "W", "COUT", "OD", "OH", "OW", "KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW",
             "DD", "DH", "DW", "CG", "COG", "M", "K", *plan.program.scalars]
    call += [f"{k}={params[k]}" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
    # CPU tensors run in the Triton interpreter, whose tl.dot misreads bf16 (Triton 3.6): dot their fp32 upcast.
    on_cpu = 'x.device.type == "cpu"'
    call += [f"HAS_BIAS={plan.has_bias}", f"UPCAST={on_cpu if plan.half else 'False'}", f"INTERPRETED={on_cpu}",
             f"num_warps={params['num_warps']}", f"num_stages={params['num_stages']}"]
    grid = f"(_kf_cdiv(M, {params['BLOCK_M']}) * _kf_cdiv(COG, {params['BLOCK_N']}), {conv}.groups)"
    return [
        f"x = {plan.source}.contiguous()",
        f"w = {conv}.weight.contiguous()",
        *operand_prologue(plan.program),
        f"N, C, COUT = x.shape[0], x.shape[1], {cout}",
        f"D, H, W = {lead(1)}tuple(x.shape[2:])",
        f"KD, KH, KW = {lead(1)}tuple(w.shape[2:])",
        f"SD, SH, SW = {lead(1)}tuple({conv}.stride)",
        f"PD, PH, PW = {lead(0)}((0,) * {plan.dims} if {conv}.padding == 'valid' else tuple({conv}.padding))",
        f"DD, DH, DW = {lead(1)}tuple({conv}.dilation)",
        *extra,
        sizes,
        f"CG, COG = C // {conv}.groups, COUT // {conv}.groups",
        "M, K = N * OD * OH * OW, CG * KD * KH * KW",
        f"out = x.new_empty((N, COUT, *(OD, OH, OW)[{pad}:]), dtype={plan.program.out_dtype})",
        launch.call("_kf_conv", grid, ", ".join(call)),
        "return out",
    ]


def render(plan: Plan, params: dict[str, Any]) -> str:
    assert isinstance(plan, ConvPlan)
    return module_source(plan.program, plan.reference, [_kernel(plan)], _forward(plan, params))
