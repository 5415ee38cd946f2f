"""Verify a candidate against the reference (DESIGN.md, "How we verify"). A kernel is wrong until shown right.

Per workload, `trials` fresh draws cycling through several input distributions; reference in float64 on
upcast inputs; outputs NaN-poisoned (uninitialized memory is filled with NaN); NaN/Inf, all-zero, structure,
tolerance, input mutation and a second call on the same inputs all checked.

Library policy: every forward call runs under a census of the torch operators it dispatches
(stages/library_policy.py). An op the policy forbids (torch math standing in for a kernel; cuBLAS/cuDNN when
vendor libraries are off) fails the candidate as `policy_violation`, before its output is judged. The policy
is the request's if it carries one (a campaign's), else the problem's. The constructor is not counted.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
import traceback
from collections.abc import Iterator

import torch

from artifacts.blobs import put_text
from stages.candidate import load_model_class
from stages.compare import as_list, error_ratio, judge
from stages.contracts import FailureKind, VerifyRequest, VerifyResult
from stages.errors import CandidateFault
from stages.inputs import DISTRIBUTIONS, clone, draw, trial_seed, upcast
from stages.instantiate import build, guarded, set_precision
from stages.library_policy import Census, listing, violation
from stages.problem import import_problem

Result = VerifyResult


def failed(req: VerifyRequest, kind: FailureKind, message: str, blobs: dict[str, str] | None = None) -> VerifyResult:
    return VerifyResult(candidate_id=req.candidate.id, problem_id=req.problem.id, status="failed", failure_kind=kind,
                        message=message, blobs=blobs or {}, device=req.device, sizes=req.sizes)


def poison_device_cache(nbytes: int) -> None:
    """Fill the CUDA caching allocator's free blocks with NaN so outputs it hands out start as NaN."""
    if torch.cuda.is_available():
        junk = torch.empty(max(nbytes, 1 << 20) // 4, dtype=torch.float32, device="cuda").fill_(float("nan"))
        del junk


def _same(a: list, b: list) -> bool:
    return all(not isinstance(x, torch.Tensor) or torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _verify(req: VerifyRequest, log: io.StringIO) -> tuple[int, int, float, float, str | None]:
    problem, device, policy = req.problem, req.device, req.effective_policy
    set_precision(policy)
    module = import_problem(problem.path)
    new_cls = load_model_class(req.candidate, req.workdir, device)
    passed = skipped = 0
    worst, eager_worst, worst_at = 0.0, 0.0, None
    dists = list(DISTRIBUTIONS)
    every = [w for sizes in req.sizes for w in problem.workloads(sizes)]
    for w in [w for w in every if req.workloads is None or w.name in req.workloads]:
        ref, new = build(module, new_cls, w, device, seed=trial_seed(req.seed, w.name, "init"))
        ref64 = copy.deepcopy(ref).double() if policy.reference_fp64 else ref
        assert new is not None
        for t in range(req.trials):
            dist = dists[t % len(dists)]
            what = f"{w.name} trial {t} ({dist} inputs)"
            inputs = draw(module, w, trial_seed(req.seed, w.name, t), dist, device)
            with torch.no_grad():
                expect = ref(*clone(inputs))
                expect64 = ref64(*upcast(inputs)) if policy.reference_fp64 else expect
            if not all(torch.isfinite(r).all() for r in as_list(expect64) if r.is_floating_point()):
                skipped += 1
                log.write(f"{what}: skipped, the reference is not finite on these inputs\n")
                continue
            eager = max(error_ratio(e, r.to(e.device), problem.tolerance)
                        for e, r in zip(as_list(expect), as_list(expect64), strict=True))
            if eager > 1.0:
                log.write(f"{what}: eager PyTorch itself is {eager:.3g}x off the tolerance (check TOLERANCE)\n")
            eager_worst = max(eager_worst, eager)
            kept = clone(inputs)
            outs, trial_worst = [], 0.0
            for call in (1, 2):
                poison_device_cache(4 * sum(r.numel() * r.element_size() for r in as_list(expect)))
                with torch.no_grad(), Census() as census:
                    out = guarded(new, *inputs)
                if t == 0 and call == 1:
                    log.write(f"{w.name}: the forward dispatches {listing(census.counts) or 'no torch ops'}\n")
                if (why := violation(census.counts, policy)) is not None:
                    raise CandidateFault("policy_violation", f"{why} [{what} call {call}]")
                if not _same(inputs, kept):
                    raise CandidateFault("input_mutation", f"{what}: the candidate modified its inputs")
                ratio = judge(out, expect64, expect, problem.tolerance, f"{what} call {call}")
                outs.append(out)
                trial_worst = max(trial_worst, ratio)
                if ratio > worst:
                    worst, worst_at = ratio, w.name
            if not all(torch.equal(a, b) for a, b in zip(as_list(outs[0]), as_list(outs[1]), strict=True)):
                log.write(f"{what}: second call differs bitwise (within tolerance)\n")
            passed += 1
            log.write(f"{what}: ok, error ratio {trial_worst:.3g} (eager {eager:.3g})\n")
    if passed == 0:
        raise CandidateFault("mismatch", "no trial could be judged (the reference was never finite)")
    return passed, skipped, worst, eager_worst, worst_at


@contextlib.contextmanager
def _strict_torch() -> Iterator[None]:
    """Deterministic algorithms and NaN-filled fresh allocations while verifying; the process's settings come back
    afterwards (an inline verify must not slow or change the benchmarks that follow in the same process)."""
    det, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]


def run(req: VerifyRequest) -> VerifyResult:
    started, log = time.perf_counter(), io.StringIO()
    try:
        with _strict_torch():
            passed, skipped, worst, eager_worst, worst_at = _verify(req, log)
        result = VerifyResult(candidate_id=req.candidate.id, problem_id=req.problem.id, status="ok",
                              message=f"{passed} trials passed, {skipped} skipped", device=req.device,
                              sizes=req.sizes, trials_passed=passed, trials_skipped=skipped, max_err_ratio=worst,
                              eager_err_ratio=eager_worst, worst_workload=worst_at)
    except CandidateFault as fault:
        log.write(traceback.format_exc())
        result = failed(req, fault.kind, fault.message)  # type: ignore[arg-type]
    result.blobs["verify_log"] = put_text(req.blob_dir, log.getvalue())
    result.duration_s = time.perf_counter() - started
    return result


if __name__ == "__main__":
    from stages.entry import main

    main(VerifyRequest, run)
