"""Micro-profiling tools (KernelPro's stage two): one file per tool, found by name in TOOLS.

A tool is a module with
- NAME: its registry name;
- CLASSES: the bottleneck classes that select it (`select`; "mixed" or an unknown class runs every tool);
- EXPLAINS (optional): tools whose findings on the same kernel are likely consequences of this tool's (too few
  warps or blocks, wasted sectors and spills all show up as long-scoreboard stalls); refine lists a consequence
  after its cause, marked `explained_by`, so a generator fixes the cause first;
- check(ev: Evidence) -> list[Finding]: a trigger over Nsight Compute metrics, SASS statistics, ptxas resources
  or counted work; when it fires, a diagnosis with the numbers, a recommendation in plain words and an Action
  the builtin proposer can apply. A tool whose inputs are missing (None, or no counters here) says nothing.

Metrics keep ncu's raw names and base units (stages/measure/ncu.py collects them); they are read per launch, and a
kernel's share of the call is its duration x invocations over the sum for all profiled kernels (`share`).
Severity is each tool's rough estimate of the share of the call's time its fix could recover (each docstring
says how); a per-kernel estimate is multiplied by the kernel's share.
"""

from __future__ import annotations

import math
import re
from typing import Protocol

from pydantic import Field

from kernelflow.stages.backends.sass import SassStats
from kernelflow.stages.contracts import (
    Bound,
    CompileResult,
    Contender,
    Contract,
    Finding,
    KernelBinary,
    KernelProfile,
    Problem,
    ProfileResult,
)
from kernelflow.stages.measure.ceilings import peaks_for
from kernelflow.stages.measure.peaks import TARGET_GPU, Peaks
from kernelflow.stages.measure.roofline import Work, count_work


class Evidence(Contract):
    """Everything the tools may read about one candidate on one workload."""

    problem_id: str = Field(description="the problem")
    candidate_id: str = Field(description="the candidate judged (a baseline's name for a baseline)")
    contender: Contender = Field(default="candidate", description="the candidate, or the baseline profiled")
    bound: Bound | None = Field(default=None, description="bottleneck class (stages/measure/bottleneck.py); None: unknown")
    time_us: float | None = Field(default=None, description="median time per forward call, microseconds")
    sol_floor_us: float | None = Field(default=None, description="analytic SOL floor of the workload, microseconds")
    work: Work | None = Field(default=None, description="counted work of the workload (stages/measure/roofline.py)")
    profile: ProfileResult | None = Field(default=None, description="the profile stage's result; None: not profiled")
    binaries: list[KernelBinary] = Field(default_factory=list, description="ptxas resources and SASS stats per kernel")
    library_calls: list[str] = Field(default_factory=list, description="vendor-library ops the candidate calls: "
                                     "their kernels are not among `binaries` (CompileResult.library_calls)")
    defined: list[str] = Field(default_factory=list, description="kernel functions the candidate defines, compiled "
                               "or not (CompileResult.defined): its own, like those of `binaries`")
    peaks: Peaks | None = Field(default=None, description="ceilings of the GPU; None: unknown GPU or CPU")
    launches_per_call: int | None = Field(default=None, description="kernels launched per forward, from the profile")


def evidence(problem: Problem, compiled: CompileResult | None, profile: ProfileResult,
             gpu_name: str | None) -> Evidence:
    """What the tools read, gathered from the stages' results (counted work recomputed on meta tensors). The class
    is left to the refine stage, which decides it from the profile as the profile stage does (counters, else counted work),
    so a changed classifier applies to captured profiles too."""
    workload = next((w for w in problem.gpu_workloads + problem.cpu_workloads if w.name == profile.workload), None)
    return Evidence(problem_id=problem.id, candidate_id=profile.candidate_id, contender=profile.contender,
                    time_us=profile.time_us,
                    sol_floor_us=profile.sol_floor_us, work=count_work(problem, workload) if workload else None,
                    profile=profile, binaries=compiled.kernels if compiled else [],
                    library_calls=compiled.library_calls if compiled else [],
                    defined=compiled.defined if compiled else [],
                    peaks=peaks_for(gpu_name or TARGET_GPU),  # no GPU here: advice for the GPU we optimize for
                    launches_per_call=sum(k.invocations for k in profile.kernels) if profile.kernels else None)


class Tool(Protocol):
    NAME: str
    CLASSES: frozenset[str]

    def check(self, ev: Evidence) -> list[Finding]: ...


def kernels(ev: Evidence) -> list[KernelProfile]:
    """The profiled kernels with hardware counters; empty when there are none (CPU, no counter access)."""
    p = ev.profile
    return p.kernels if p is not None and p.counters == "ncu" else []


def metric(k: KernelProfile, name: str) -> float | None:
    """One ncu metric of a kernel as a float; None when missing or not finite."""
    v = k.metrics.get(name)
    return float(v) if v is not None and math.isfinite(v) else None


def kernel_time_us(k: KernelProfile) -> float | None:
    """GPU time of all of a kernel's launches in one call, microseconds."""
    ns = metric(k, "gpu__time_duration.sum")
    t = k.duration_us if k.duration_us is not None else None if ns is None else ns / 1e3
    return None if t is None else t * k.invocations


def share(ev: Evidence, k: KernelProfile) -> float:
    """The kernel's share of the call: its GPU time over the call's measured time, or over the profiled kernels'
    total when that is larger (launch gaps count: speeding up a kernel of a launch-bound call recovers little);
    an equal split when durations are missing."""
    times = {id(x): kernel_time_us(x) or 0.0 for x in kernels(ev)}
    total = max(sum(times.values()), ev.time_us or 0.0)
    return times.get(id(k), 0.0) / total if total > 0 else 1.0 / max(len(times), 1)


def base_name(name: str) -> str:
    """A kernel's bare function name from an Itanium-mangled name (`_Z11relu_kernelPKfPfi`, `_ZN2ns1kEv`) or a
    demangled one (`void ns::k<4>(float*)`), so ncu's names and the binaries' names can be matched."""
    if name.startswith("_Z"):
        rest, words = name[3:] if name.startswith("_ZN") else name[2:], []
        while m := re.match(r"\d+", rest):
            end = len(m[0]) + int(m[0])
            words.append(rest[len(m[0]):end])
            rest = rest[end:]
        return words[-1] if words else name
    words = re.sub(r"<.*>", "", name.split("(")[0]).split()
    return words[-1].split("::")[-1] if words else name


def binary(ev: Evidence, k: KernelProfile) -> KernelBinary | None:
    """The compiled binary of a profiled kernel, matched by bare function name."""
    return next((b for b in ev.binaries if base_name(b.name) == base_name(k.kernel)), None)


def profiled(ev: Evidence, b: KernelBinary) -> KernelProfile | None:
    """The profiled kernel of a binary, matched by bare function name; None when it has no counters."""
    return next((k for k in kernels(ev) if base_name(k.kernel) == base_name(b.name)), None)


def static_only(ev: Evidence, *names: str) -> list[KernelBinary]:
    """Binaries whose kernel has no counters for `names`: the tools fall back to ptxas/SASS evidence there."""
    return [b for b in ev.binaries
            if (k := profiled(ev, b)) is None or any(metric(k, n) is None for n in names)]


def binary_share(ev: Evidence, b: KernelBinary) -> float:
    """The binary's share of the profiled time when profiled, else an equal split over the binaries."""
    k = profiled(ev, b)
    return share(ev, k) if k is not None else 1.0 / max(len(ev.binaries), 1)


def sass_of(b: KernelBinary | None) -> SassStats | None:
    return SassStats.model_validate(b.sass) if b is not None and b.sass is not None else None


def severity(x: float) -> float:
    """Clamp an estimate to 0..1, rounded (it is rough; three digits are plenty)."""
    return round(min(1.0, max(0.0, x)), 3)


from . import (  # noqa: E402  (tools import the helpers above)
    bank_conflicts,
    costly_instructions,
    dram_excess,
    fma_low_ilp,
    launch_bound,
    long_scoreboard,
    low_occupancy,
    spills,
    tail_wave,
    tensor_cores_unused,
    tensor_pipe_underfed,
    uncoalesced_access,
    warp_divergence,
)

TOOLS: dict[str, Tool] = {t.NAME: t for t in (
    uncoalesced_access, low_occupancy, spills, tensor_cores_unused, bank_conflicts, warp_divergence,
    long_scoreboard, tail_wave, launch_bound, dram_excess, fma_low_ilp, costly_instructions, tensor_pipe_underfed)}


def explains(tool: str) -> frozenset[str]:
    """The tools whose findings a finding of `tool` on the same kernel explains (its module's EXPLAINS)."""
    return frozenset(getattr(TOOLS[tool], "EXPLAINS", frozenset()))


def select(bound: Bound | None) -> list[Tool]:
    """The tools a bottleneck class selects; all of them for "mixed" or an unknown class."""
    return [t for t in TOOLS.values() if bound in (None, "mixed") or bound in t.CLASSES]
