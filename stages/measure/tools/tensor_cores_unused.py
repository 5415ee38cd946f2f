"""Tensor cores unused on matmul-like work.

Trigger: matmul/conv FLOPs are at least MATMUL_DOMINANT of the counted FLOPs, the problem may use tensor cores
(bf16/fp16, or fp32 with TF32 allowed: work.tensor_core_eligible), and no kernel shows tensor-core use: no
HMMA/HGMMA/... in any binary's SASS, and no profiled kernel's tensor pipe above TENSOR_PIPE_MIN_PCT. SASS decides
when present; the hmma pipe metric alone may miss Hopper wgmma, so it only speaks when no SASS is known. A
candidate that calls cuBLAS/cuDNN (Evidence.library_calls) has the product outside its own binaries: its SASS
says nothing about the product, so only the profiled pipes can speak.
Severity: matmul share of the FLOPs x (1 - fp32 peak / tensor peak of the dtype), or x DEFAULT_GAIN without peaks.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, sass_of, severity

NAME = "tensor_cores_unused"
CLASSES = frozenset({"compute"})
MATMUL_DOMINANT = 0.5  # matmul FLOPs at least this share of all counted FLOPs
TENSOR_PIPE_MIN_PCT = 1.0  # tensor pipe busier than this (% of peak): tensor cores in use
DEFAULT_GAIN = 0.8  # share of matmul time recoverable when the peaks are unknown
_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"


def check(ev: Evidence) -> list[Finding]:
    w = ev.work
    if w is None or not w.tensor_core_eligible or w.flops <= 0 or w.matmul_flops < MATMUL_DOMINANT * w.flops:
        return []
    stats = [s for b in ev.binaries if (s := sass_of(b)) is not None] if not ev.library_calls else []
    pipes = [p for k in kernels(ev) if (p := metric(k, _PIPE)) is not None]
    if any(s.tensor_core_instructions for s in stats) or any(p > TENSOR_PIPE_MIN_PCT for p in pipes):
        return []
    if not stats and not pipes:
        return []
    peaks = ev.peaks
    gain = DEFAULT_GAIN if peaks is None else 1 - peaks.fp32_flops_per_s / {
        "bfloat16": peaks.bf16_tensor_flops_per_s, "float16": peaks.fp16_tensor_flops_per_s,
    }.get(w.dtype, peaks.tf32_flops_per_s)
    matmul_share = w.matmul_flops / w.flops
    source = "SASS has no HMMA/HGMMA instructions" if stats else f"tensor pipe at most {max(pipes):.1f}% busy"
    return [Finding(
        tool=NAME, severity=severity(matmul_share * gain),
        diagnosis=f"{w.dtype} matmul work is {matmul_share:.0%} of the counted FLOPs "
                  f"({w.matmul_flops / 1e9:.1f} GFLOP) "
                  f"but runs on CUDA cores: {source}",
        recommendation="Do the matmul on tensor cores: tl.dot on bf16/fp16 tiles (TF32 only where the policy allows), "
                       "or mma.sync / wgmma (CuTe MMA atoms) in CUDA, with tiles of at least 64x64 staged in "
                       "shared memory.",
        action=Action(kind="use_tensor_cores", params={"dtype": w.dtype}),
        evidence={"matmul_share": matmul_share, "tensor_core_instructions": 0,
                  "max_tensor_pipe_pct": max(pipes, default=None)})]
