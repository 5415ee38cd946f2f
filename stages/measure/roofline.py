"""Analytic roofline: the work a problem workload must do, its speed-of-light (SOL) floor on a GPU, its
bottleneck class, and the SOL score of a timed kernel (DESIGN.md, "How we time").

Work is counted on `meta` tensors (shapes and dtypes only: no data, no device, milliseconds per workload):
- matmul_flops: torch.utils.flop_counter.FlopCounterMode over the reference forward (mm, addmm, bmm, baddbmm,
  convolution, attention: 2 FLOPs per multiply-add; it counts nothing else); conv_flops: those of convolutions.
- pointwise ops: the forward traced by make_fx into aten ops, with core-ATen decompositions plus those of
  softmax, log_softmax, layer_norm and gelu, so a fused op is counted as the ops it is made of (softmax =
  amax, sub, exp, sum, div). Each op tagged `pointwise` costs one op per output element; each op tagged
  `reduction` one per input element per result (var_mean reads its input for 2); the bias add of
  addmm/baddbmm/convolution one per output element. Views cost nothing; other ops (copies, dtype casts)
  cost nothing and are listed in `uncounted_ops`. An "op" is not a hardware FLOP: exp, tanh and rsqrt
  count 1 though they take several instructions, so the pointwise term is an estimate, not a bound.
- bytes_min: every input read once, every output written once, every parameter and buffer read once, in
  their dtypes; intermediates cost nothing (a perfectly fused kernel).

The floor is max(compute time, memory time). Compute time puts matmul FLOPs at the tensor-core peak of the
dtype (when eligible) and pointwise ops at the fp32 CUDA-core peak; the two overlap on different units, so
their max counts; without tensor cores both share the CUDA cores and add up (= flops / fp32 peak). In fp32,
convolutions go to the TF32 peak where the policy lets cuDNN use TF32 (Policy.conv_tf32, PyTorch's default) though
the candidate's own kernels may not use it (tensor_core_eligible): the floor bounds whatever an allowed
implementation does, a cuDNN call included.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from kernelflow.stages.contracts import Contract, Policy, Problem, Workload
from kernelflow.stages.errors import ProblemError
from kernelflow.stages.measure.peaks import Peaks
from kernelflow.stages.problems import fx_trace
from kernelflow.stages.problems.kernelbench import import_problem, workload_call

MIXED_RATIO = 1.5  # compute and memory times within this factor of each other: "mixed"
LATENCY_LAUNCHES = 4.0  # a floor (or measured time) at most this many launch overheads: "latency"

Bound = Literal["compute", "memory", "latency", "mixed"]

aten = torch.ops.aten
_DECOMPOSITIONS = {
    **core_aten_decompositions(),
    **get_decompositions([aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu]),
}
_BIAS_ARG = {aten.addmm: 0, aten.baddbmm: 0, aten.convolution: 2}  # matmul-like op -> index of its added term


class Work(Contract):
    """What one workload of a problem must compute and move, counted on meta tensors."""

    problem_id: str = Field(description="the problem")
    workload: str = Field(description="workload name, e.g. 'gpu0'")
    matmul_flops: int = Field(description="matmul/conv FLOPs (FlopCounterMode: 2 per multiply-add)")
    conv_flops: int = Field(default=0, description="of matmul_flops, those of convolutions")
    elements_out: int = Field(description="elements of all outputs together")
    pointwise_ops_per_element: float = Field(
        description="non-matmul aten ops (pointwise, reductions, bias adds) per output element; see module doc")
    flops: float = Field(description="matmul_flops + elements_out * pointwise_ops_per_element")
    bytes_min: int = Field(description="inputs read once + outputs written once + parameters and buffers read once")
    dtype: str = Field(description="floating dtype of the inputs, e.g. 'float32'")
    tensor_core_eligible: bool = Field(
        description="matmul/conv present and dtype bf16/fp16, or fp32 with TF32 allowed by the problem's policy")
    conv_tf32: bool = Field(default=False, description="fp32 convolutions present and the problem's policy lets "
                            "cuDNN run them in TF32 (Policy.conv_tf32): the floor puts conv_flops at the TF32 peak")
    uncounted_ops: list[str] = Field(default_factory=list, description="non-view aten ops counted as 0 (copies, casts)")


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _pointwise_ops(graph: torch.fx.GraphModule) -> tuple[int, list[str]]:
    """Non-matmul ops of a decomposed aten graph, in op-elements (see module doc); and the ops counted as 0."""
    total, uncounted = 0, []
    for node in graph.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
            continue  # placeholders, outputs, getitem
        out = sum(t.numel() for t in _tensors(node.meta.get("val")))
        if op.overloadpacket in flop_registry:  # FlopCounterMode's; add only the bias term it leaves out
            bias = _BIAS_ARG.get(op.overloadpacket)
            total += out if bias is not None and node.args[bias] is not None else 0
        elif torch.Tag.pointwise in op.tags:
            total += out
        elif torch.Tag.reduction in op.tags:
            total += node.args[0].meta["val"].numel() * len(_tensors(node.meta.get("val")))
        elif not op.is_view:
            uncounted.append(op.name())
    return total, uncounted


def _tensor_cores(dtype: str, policy: Policy) -> bool:
    return dtype in ("bfloat16", "float16") or (dtype == "float32" and policy.allow_tf32)


def _conv_tf32(dtype: str, policy: Policy) -> bool:
    return dtype == "float32" and (policy.allow_tf32 or policy.conv_tf32)


def count_work(problem: Problem, workload: Workload) -> Work:
    """Count FLOPs and minimum bytes of one workload by running the reference on meta tensors."""
    module = import_problem(problem.path)
    init = workload_call(module, workload, "get_init_inputs", problem.path, meta=True)
    inputs = workload_call(module, workload, "get_inputs", problem.path, meta=True)
    try:
        with torch.device("meta"):
            model = module.Model(*init)

        def forward(*args: Any) -> Any:
            return model(*args)

        with torch.no_grad(), fx_trace.LOCK:  # make_fx patches nn.Module for the process (stages/problems/fx_trace.py)
            counter = FlopCounterMode(display=False)
            with counter:
                outputs = _tensors(model(*inputs))
            graph = make_fx(forward, decomposition_table=_DECOMPOSITIONS)(*inputs)
    except Exception as e:
        raise ProblemError(problem.path, f"cannot count work at {workload.name}: {type(e).__name__}: {e}") from e
    matmul_flops = int(counter.get_total_flops())
    conv_flops = sum(n for op, n in counter.get_flop_counts().get("Global", {}).items() if "conv" in str(op))
    pointwise, uncounted = _pointwise_ops(graph)
    elements_out = sum(t.numel() for t in outputs)
    state = list(model.parameters()) + list(model.buffers())
    return Work(
        problem_id=problem.id, workload=workload.name, matmul_flops=matmul_flops, elements_out=elements_out,
        pointwise_ops_per_element=pointwise / max(elements_out, 1), flops=float(matmul_flops + pointwise),
        bytes_min=_nbytes(_tensors(list(inputs))) + _nbytes(outputs) + _nbytes(state), dtype=problem.dtype,
        tensor_core_eligible=matmul_flops > 0 and _tensor_cores(problem.dtype, problem.policy),
        conv_flops=conv_flops, conv_tf32=conv_flops > 0 and _conv_tf32(problem.dtype, problem.policy),
        uncounted_ops=sorted(set(uncounted)),
    )


def compute_us(work: Work, peaks: Peaks, tensor_cores: bool, conv_tf32: bool = False) -> float:
    """Time of the arithmetic alone at peak rates, microseconds (see module doc). `tensor_cores`: every matmul/conv
    FLOP at the tensor-core peak; else `conv_tf32`: the convolutions' at the TF32 peak."""
    on_tensor_cores = work.matmul_flops if tensor_cores else work.conv_flops if conv_tf32 else 0
    cuda_cores_s = (work.flops - on_tensor_cores) / peaks.fp32_flops_per_s
    if not on_tensor_cores:
        return cuda_cores_s * 1e6
    matmul_peak = {"bfloat16": peaks.bf16_tensor_flops_per_s, "float16": peaks.fp16_tensor_flops_per_s}.get(
        work.dtype, peaks.tf32_flops_per_s)
    return max(on_tensor_cores / matmul_peak, cuda_cores_s) * 1e6


def memory_us(work: Work, peaks: Peaks) -> float:
    """Time to move bytes_min at DRAM bandwidth, microseconds."""
    return work.bytes_min / peaks.dram_bytes_per_s * 1e6


def sol_floor_us(work: Work, peaks: Peaks, policy: Policy | None = None) -> float:
    """SOL floor, microseconds: max(compute time, memory time). `policy` decides TF32 for fp32 matmuls and
    convolutions (None: as counted, work.tensor_core_eligible and work.conv_tf32)."""
    tensor_cores = work.tensor_core_eligible if policy is None else (
        work.matmul_flops > 0 and _tensor_cores(work.dtype, policy))
    conv_tf32 = work.conv_tf32 if policy is None else work.conv_flops > 0 and _conv_tf32(work.dtype, policy)
    return max(compute_us(work, peaks, tensor_cores, conv_tf32), memory_us(work, peaks))


def analytic_bound(work: Work, peaks: Peaks, time_us: float | None = None) -> Bound:
    """Bottleneck class from the analytic terms. "latency" when the floor, or the measured `time_us` when
    given, is at most LATENCY_LAUNCHES launch overheads; else "mixed" when compute and memory times are within
    MIXED_RATIO of each other; else the larger term."""
    compute, memory = compute_us(work, peaks, work.tensor_core_eligible, work.conv_tf32), memory_us(work, peaks)
    t = max(compute, memory) if time_us is None else time_us
    if t <= LATENCY_LAUNCHES * peaks.launch_overhead_us:
        return "latency"
    if max(compute, memory) < MIXED_RATIO * min(compute, memory):
        return "mixed"
    return "compute" if compute > memory else "memory"


def sol_score(t_kernel_us: float, t_baseline_us: float, t_sol_us: float) -> float | None:
    """SOL-ExecBench's score S = 1 / (1 + (T_k - T_sol) / (T_b - T_sol)): 1 at the floor, 0.5 at the baseline,
    toward 0 when slower. None when T_b <= T_sol (undefined). A kernel faster than the floor is a bug or a
    cheat, never a score: ValueError."""
    if t_kernel_us < t_sol_us:
        raise ValueError(f"kernel time {t_kernel_us:g} us is below the SOL floor {t_sol_us:g} us: a bug or a cheat")
    if t_baseline_us <= t_sol_us:
        return None
    return 1.0 / (1.0 + (t_kernel_us - t_sol_us) / (t_baseline_us - t_sol_us))


def sol_fraction(t_us: float, t_sol_us: float) -> float:
    """Share of speed of light reached: T_sol / T (1.0 at the floor; above 1 is a bug or a cheat)."""
    return t_sol_us / t_us
