"""What a profile measures: one contender (the candidate, or eager or torch.compile of the reference) at one workload,
with the workload's fixed-seed weights and one draw of its declared inputs. The profile stage times it and the process
Nsight Compute drives (stages/measure/ncu.py) rebuilds the very same, so both describe one thing."""

from __future__ import annotations

import contextlib
from typing import Any

from kernelflow.stages.contracts import Problem, ProfileRequest, Workload
from kernelflow.stages.errors import ProblemError
from kernelflow.stages.harness.candidate import load_model_class
from kernelflow.stages.harness.instantiate import baseline, build
from kernelflow.stages.harness.integrity import Guard
from kernelflow.stages.problems.inputs import draw, trial_seed
from kernelflow.stages.problems.kernelbench import import_problem

WARMUP_CALLS = 3  # untimed calls before a profile measures (Triton's first-launch compile, allocator warm-up)


def pick_workload(problem: Problem, name: str | None) -> Workload:
    """The named workload (GPU ones first, then CPU ones); None: the first GPU workload."""
    workloads = problem.gpu_workloads + problem.cpu_workloads
    if name is None:
        return workloads[0]
    for w in workloads:
        if w.name == name:
            return w
    raise ProblemError(problem.path, f"no workload named {name!r} (has {[w.name for w in workloads]})")


def guard_for(req: ProfileRequest) -> Guard | None:
    """The integrity guard of a profile of the candidate (stages/harness/integrity.py), made before its import;
    None for a baseline."""
    return Guard(req.workdir, req.candidate.source) if req.contender == "candidate" and req.candidate else None


def instance(req: ProfileRequest, w: Workload, device: str, guard: Guard | None = None) -> tuple[Any, list[Any]]:
    """The contender and its inputs on `device`; with `guard`, the candidate imported and built in its sections."""
    module = import_problem(req.problem.path)
    with guard.section("import") if guard else contextlib.nullcontext():
        new_cls = load_model_class(req.candidate, req.workdir, device) if req.candidate is not None else None
    with guard.section(f"{w.name} constructor") if guard else contextlib.nullcontext():
        ref, new = build(module, new_cls, w, device, seed=trial_seed(0, w.name, "init"))
    inputs = draw(module, w, trial_seed(0, w.name, "profile"), "declared", device)
    if req.contender == "candidate":
        assert new is not None
        return new, inputs
    return baseline(req.contender, ref), inputs
