"""Tensor cores in use but underfed: a compute-bound matmul kernel whose tensor pipe idles between MMAs.

Trigger: a kernel's tensor pipe (sm__pipe_tensor_op_hmma_cycles_active, which counts Hopper's wgmma too) is busy
more than IN_USE_PCT (it does use the tensor cores: else tensor_cores_unused speaks) but less than FED_PCT of its
active cycles. Calibrated on the H200 (bench/profiles/10_matmul_bf16.*, 8192^3 bf16): cuBLAS's kernel keeps the
pipe 96.9% busy at 16% issue; the builtin Triton GEMM (128x256x64 tiles, 8 warps, 3 stages) 84.9% at 25% issue,
with more fixed-latency and barrier stalls per issue: its warps spend issue slots on address arithmetic and
waits that cuBLAS's warp-specialized, TMA-fed kernel does not.
Severity: (1 - pipe% / REACHABLE_PCT) x the kernel's share of the call: the time saved at the library's rate.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity, share

NAME = "tensor_pipe_underfed"
CLASSES = frozenset({"compute"})
IN_USE_PCT = 10.0  # tensor pipe busier than this: the kernel's MMAs are on the tensor cores
FED_PCT = 90.0  # below this the pipe idles for want of operands or issue slots
REACHABLE_PCT = 97.0  # what cuBLAS reaches on the H200 (8192^3 bf16, ncu)
_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        pipe = metric(k, _PIPE)
        if pipe is None or not IN_USE_PCT < pipe < FED_PCT:
            continue
        issue = metric(k, "smsp__issue_active.avg.pct_of_peak_sustained_active")
        stalls = {name: v for name in ("wait", "barrier", "long_scoreboard")
                  if (v := metric(k, _STALL.format(name))) is not None}
        quoted = ", ".join(f"{v:.2f} {name.replace('_', '-')}" for name, v in stalls.items())
        out.append(Finding(
            tool=NAME, kernel=k.kernel, severity=severity((1 - pipe / REACHABLE_PCT) * share(ev, k)),
            diagnosis=f"the tensor pipe is busy {pipe:.1f}% of active cycles (cuBLAS keeps it ~{REACHABLE_PCT:.0f}% "
                      f"busy on this GPU)" + (f", {issue:.0f}% of issue slots used" if issue is not None else "")
                      + (f", stalls per issue: {quoted}" if quoted else "")
                      + ": the MMAs wait for operands or for issue slots spent on other work",
            recommendation="Feed the tensor cores: a larger output tile per program (more MMAs per byte staged), one "
                           "more pipeline stage, grouped tile order for L2 reuse; on Hopper, TMA loads with warp "
                           "specialization or a persistent kernel. Or keep the product in cuBLAS and fuse only the "
                           "epilogue (the library_epilogue family).",
            action=Action(kind="feed_tensor_cores", params={"num_stages": "+1"}),
            evidence={"tensor_pipe_pct": pipe, "issue_active_pct": issue, **{f"{n}_stalls": v for n, v in stalls.items()}}))
    return out
