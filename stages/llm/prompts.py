"""The prompts: Jinja2 templates in prompts/ rendered with StrictUndefined (a missing variable is an error, never
an empty string), and the facts they are filled with (problem, backend guidance, hardware, policy, examples).

Templates: system (the harness's rules), init (write a kernel; the run's best so far, when there is one, is the kernel
to beat: its source, times and profile), debug_diagnose then debug_patch (two steps: find
the cause from the evidence, then a localized SEARCH/REPLACE patch, never a rewrite or a fallback), optimize (the
parent, its times, its profile feedback and the search's lessons; the best so far's times when it is another). backends/<backend>.j2 is the per-backend guidance;
prompts/examples/ holds runnable few-shot modules, verified by tests/stages/llm/test_prompts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from kernelflow.stages.contracts import Backend, GenerateRequest, Policy
from kernelflow.stages.measure.ceilings import peaks_for
from kernelflow.stages.measure.peaks import TARGET_GPU

PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
BACKEND_NAMES: dict[str, str] = {"triton": "Triton", "cuda": "CUDA C++", "cute": "CuTe C++"}
EXAMPLES: dict[str, list[str]] = {"triton": ["triton_softmax.py"], "cuda": ["cuda_silu.py"],
                                  "cute": ["cute_gemm_scale_residual.py"]}
ARCH = "sm_90a"
SMS = 132  # the H200's SM count: the GPU the prompts target

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(PROMPTS), undefined=jinja2.StrictUndefined,
                          keep_trailing_newline=True, autoescape=False)


def render_prompt(name: str, **context: Any) -> str:
    return _ENV.get_template(name).render(**context)


def _hardware() -> str:
    p = peaks_for(TARGET_GPU)
    if p is None:
        return f"{TARGET_GPU}: no measured ceilings"
    return "\n".join([f"- {SMS} SMs; DRAM {p.dram_bytes_per_s / 1e12:.2f} TB/s",
                      f"- fp32 (CUDA cores) {p.fp32_flops_per_s / 1e12:.1f} TFLOP/s; TF32 {p.tf32_flops_per_s / 1e12:.0f}, "
                      f"bf16 {p.bf16_tensor_flops_per_s / 1e12:.0f}, fp16 {p.fp16_tensor_flops_per_s / 1e12:.0f} "
                      "TFLOP/s on the tensor cores",
                      f"- a kernel launch costs ~{p.launch_overhead_us:.1f} us"])


def _policy(policy: Policy) -> str:
    return "\n".join([
        "- cuBLAS/cuDNN calls (torch matmul, linear, conv) " + ("are allowed for the matmul/convolution parts"
                                                               if policy.allow_vendor_libraries else "are forbidden"),
        "- other torch compute ops in forward " + ("are allowed" if policy.allow_torch_compute else
                                                   "are forbidden (allocation, views and copies are fine)"),
        "- fp32 matmul " + ("and convolution may use TF32" if policy.allow_tf32 else "must stay IEEE fp32 (no TF32)"),
        *([] if policy.allow_tf32 else [
            "- fp32 convolution through cuDNN (torch conv) runs in TF32, as PyTorch runs it by default (the tolerance "
            "allows eager's own error); your own kernels keep IEEE fp32 products" if policy.conv_tf32 else
            "- fp32 convolution must stay IEEE fp32 too (no TF32), cuDNN's included"]),
    ])


def _versions() -> dict[str, str]:
    from kernelflow.stages.backends import toolchain

    out = {"torch": "?", "triton": "?", "nvcc": "?", "cutlass": "?", **toolchain()}  # toolchain() has cutlass
    return out


def times(req: GenerateRequest) -> list[str]:
    """The incumbent's median times, one line per timed workload: its own, then the baselines timed beside it."""
    if req.incumbent is None:
        return []
    params = {w.name: w.params for w in req.problem.gpu_workloads + req.problem.cpu_workloads}
    lines = []
    for workload, medians in req.incumbent.medians_us.items():
        own = f"{medians['candidate']:.1f} us" if "candidate" in medians else "not timed"
        others = ", ".join(f"{who} {us:.1f} us" for who, us in medians.items() if who != "candidate")
        lines.append(f"{workload} {params.get(workload, {})}: {own}" + (f" ({others})" if others else ""))
    return lines


def examples(backend: Backend) -> list[dict[str, str]]:
    return [{"name": name, "source": (PROMPTS / "examples" / name).read_text()} for name in EXAMPLES.get(backend, [])
            if (PROMPTS / "examples" / name).is_file()]


def facts(req: GenerateRequest, backend: Backend) -> dict[str, Any]:
    """What every template may use."""
    common = {"gpu": TARGET_GPU, "sms": SMS, "arch": ARCH, "versions": _versions()}
    return {**common, "problem": req.problem, "backend_name": BACKEND_NAMES[backend], "hardware": _hardware(),
            "policy": _policy(req.problem.policy), "guidance": render_prompt(f"backends/{backend}.j2", **common),
            "examples": examples(backend), "workloads": [w.params for w in req.problem.gpu_workloads],
            "parent": req.parent, "failure": req.parent_failure, "feedback": req.feedback, "lessons": req.lessons,
            "speedup": req.parent_speedup_vs_eager, "incumbent": req.incumbent, "incumbent_times": times(req)}


def messages(purpose: str, req: GenerateRequest, backend: Backend, history: list[dict[str, str]] | None = None,
             **extra: Any) -> list[dict[str, str]]:
    """The chat for one call: the system rules, earlier turns (debug's diagnosis), then the purpose's prompt."""
    context = {**facts(req, backend), **extra}
    return [{"role": "system", "content": render_prompt("system.j2", **context)}, *(history or []),
            {"role": "user", "content": render_prompt(f"{purpose}.j2", **context)}]
