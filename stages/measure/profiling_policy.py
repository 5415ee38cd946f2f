"""Delayed profiling (CuTeGen): profile only what the search promotes, and complex kernels only once their
structure has settled; simple kernels are profiled as soon as they are promoted.

A candidate's structure is its backend, its proposer family and the set of kernels it compiles to; it is
"complex" when it has several kernels or a long source. Structure has settled when the last `settle_after`
promoted candidates share one structure: from then on profiler advice tunes that structure instead of
steering a design that is still changing.
"""

from __future__ import annotations

from pydantic import Field

from kernelflow.stages.contracts import Candidate, CompileResult, Contract

COMPLEX_SOURCE_LINES = 150  # a candidate longer than this is structurally complex
COMPLEX_KERNELS = 2  # ... and so is one that compiles to this many kernels or more


class ProfilingPolicy(Contract):
    enabled: bool = Field(default=True, description="profile at all")
    promoted_only: bool = Field(default=True, description="profile only candidates the search promotes")
    baselines: bool = Field(default=True, description="also profile the baselines (eager, torch.compile) once per "
                            "run, on the candidates' workload")
    settle_after: int = Field(default=2, ge=1, description="promotions with one structure before complex kernels "
                              "are profiled")


def structure(candidate: Candidate, compiled: CompileResult | None) -> str:
    kernels = sorted({k.name.split(".")[0] for k in compiled.kernels}) if compiled else []
    return f"{candidate.backend}|{candidate.origin.proposer}|{','.join(kernels)}"


def is_complex(candidate: Candidate, compiled: CompileResult | None) -> bool:
    n_kernels = len({k.name.split(".")[0] for k in compiled.kernels}) if compiled else 0
    return n_kernels >= COMPLEX_KERNELS or len(candidate.source.splitlines()) > COMPLEX_SOURCE_LINES


def should_profile(policy: ProfilingPolicy, candidate: Candidate, compiled: CompileResult | None, promoted: bool,
                   promoted_structures: list[str]) -> tuple[bool, str]:
    """Decide for one candidate; `promoted_structures` lists structures of earlier promotions, oldest first."""
    if not policy.enabled:
        return False, "profiling disabled"
    if policy.promoted_only and not promoted:
        return False, "not promoted by the search"
    if not is_complex(candidate, compiled):
        return True, "simple kernel, promoted: profile now"
    mine = structure(candidate, compiled)
    recent = [*promoted_structures, mine][-policy.settle_after:]
    if len(recent) == policy.settle_after and len(set(recent)) == 1:
        return True, f"structure settled over {policy.settle_after} promotions"
    return False, "complex kernel whose structure is still changing: profile later"
