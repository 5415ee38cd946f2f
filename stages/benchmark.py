"""Benchmark a candidate against eager and torch.compile in one process (DESIGN.md, "How we time").

Per workload: contenders interleaved in a shuffled order every round, each call timed alone (all streams
synced, L2 flushed, CUDA events), inputs rotated over several fresh sets, repetitions until the 95% interval
of every median is tight or the budget ends. The candidate's outputs on timed calls are re-checked against
the float64 reference, so a kernel cannot be right only when it is not being timed.
"""

from __future__ import annotations

import copy
import math
import random
import time
from typing import Any

import torch

from stages.candidate import load_model_class
from stages.compare import judge
from stages.contracts import (
    BenchmarkRequest,
    BenchmarkResult,
    FailureKind,
    Provenance,
    SizeSet,
    Timing,
    VerifyRequest,
    VerifyResult,
    Workload,
)
from stages.errors import CandidateFault
from stages.inputs import draw, nbytes, trial_seed, upcast
from stages.instantiate import baseline, build, classify, guarded, set_precision
from stages.problem import geomean, import_problem
from stages.provenance import collect
from stages.timing import Timer, median_ci, rel_width

Result = BenchmarkResult
RECHECK_EVERY = 10  # re-check the candidate's outputs on every input set, in every 10th rotation of the sets


def failed(req: BenchmarkRequest, kind: FailureKind, message: str, blobs: dict[str, str] | None = None):
    return BenchmarkResult(candidate_id=req.candidate.id if req.candidate else "baseline", problem_id=req.problem.id,
                           status="failed", failure_kind=kind, message=message, blobs=blobs or {},
                           device=req.device, sizes=req.sizes, workloads=req.workloads)


def _input_sets(module: Any, w: Workload, req: BenchmarkRequest, timer: Timer) -> list[list[Any]]:
    first = draw(module, w, trial_seed(req.seed, w.name, "bench", 0), "declared", req.device)
    size = max(nbytes(first), 1)
    want = min(8, max(2, math.ceil(4 * timer.l2_bytes / size)))  # together several times the L2, 2 to 8 sets
    return [first] + [draw(module, w, trial_seed(req.seed, w.name, "bench", k), "declared", req.device)
                      for k in range(1, want)]


def _contenders(req: BenchmarkRequest, ref: torch.nn.Module, new: torch.nn.Module | None) -> dict[str, Any]:
    out: dict[str, Any] = {"eager": ref}
    for name in req.baselines:
        if name != "eager":
            out[name] = baseline(name, copy.deepcopy(ref))
    if new is not None:
        out["candidate"] = new
    return out


def _warm(contenders: dict[str, Any], args: list[Any], notes: list[str]) -> None:
    for name in list(contenders):
        try:
            with torch.no_grad():
                for _ in range(3):
                    guarded(contenders[name], *args)
        except CandidateFault as fault:
            if name == "candidate":
                raise
            notes.append(f"baseline {name} dropped: {fault.message[:300]}")
            del contenders[name]


def _time_workload(req: BenchmarkRequest, module: Any, w: Workload, new_cls: Any, timer: Timer,
                   prov: Provenance, notes: list[str]) -> list[Timing]:
    ref, new = build(module, new_cls, w, req.device, seed=trial_seed(req.seed, w.name, "init"))
    sets = _input_sets(module, w, req, timer)
    contenders = _contenders(req, ref, new)
    _warm(contenders, sets[0], notes)
    expect: list[tuple[Any, Any]] = []
    if new is not None:
        ref64 = copy.deepcopy(ref).double() if req.problem.policy.reference_fp64 else ref
        with torch.no_grad():
            expect = [(ref(*s), ref64(*upcast(s))) for s in sets]
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    rng, started, rep = random.Random(req.seed), time.perf_counter(), 0
    while True:
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            k = rep % len(sets)
            try:
                with torch.no_grad():
                    us, out = timer.time_us(contenders[name], sets[k])
            except Exception as e:
                if name == "candidate":
                    raise classify(e) from e
                notes.append(f"baseline {name} dropped on {w.name}: it failed in timed call {rep}: "
                             f"{type(e).__name__}: {e}"[:400])  # the baseline's fault, not the candidate's
                del contenders[name], samples[name]
                continue
            samples[name].append(us)
            if name == "candidate" and (rep // len(sets)) % RECHECK_EVERY == 0:  # every set, not only set 0
                judge(out, expect[k][1], expect[k][0], req.problem.tolerance, f"{w.name} timed call {rep}")
            del out
        rep += 1
        tight = all(rel_width(s) <= req.target_rel_ci for s in samples.values())
        if rep >= req.max_reps or (rep >= req.min_reps and (tight or time.perf_counter() - started > req.budget_s)):
            break
    rows = []
    for name, s in samples.items():
        med, lo, hi = median_ci(s)
        rows.append(Timing(problem_id=req.problem.id, candidate_id=req.candidate.id if name == "candidate" and
                           req.candidate else None, contender=name,  # type: ignore[arg-type]
                           benchmark_for=req.candidate.id if req.candidate else "baseline", workload=w.name, median_us=med, ci_low_us=lo,
                           ci_high_us=hi, min_us=min(s), mean_us=sum(s) / len(s), n_reps=len(s),
                           l2_flushed=timer.flushes_l2, input_sets=len(sets), provenance=prov))
    return rows


def _speedup(timings: list[Timing], baseline: str) -> float | None:
    by: dict[tuple[str, str], float] = {(t.contender, t.workload): t.median_us for t in timings}
    ratios = [by[(baseline, w)] / by[("candidate", w)] for (c, w) in by if c == "candidate" and (baseline, w) in by]
    return geomean(ratios) if ratios else None


def precheck(req: BenchmarkRequest) -> VerifyResult:
    """The request's precheck workloads verified in this process, one trial each (stages/verify.py's own checks)."""
    from stages import verify

    assert req.candidate is not None and req.precheck is not None
    sizes: list[SizeSet] = [s for s in ("cpu", "gpu") if any(w.name in req.precheck for w in req.problem.workloads(s))]
    return verify.run(VerifyRequest(problem=req.problem, candidate=req.candidate, device=req.device, sizes=sizes,
                                    trials=1, workloads=req.precheck, seed=req.seed, workdir=req.workdir,
                                    blob_dir=req.blob_dir, timeout_s=req.timeout_s))


def run(req: BenchmarkRequest) -> BenchmarkResult:
    started, notes = time.perf_counter(), list[str]()
    checked = precheck(req) if req.precheck and req.candidate else None
    if checked is not None:
        if checked.status != "ok":
            result = failed(req, checked.failure_kind or "mismatch", f"precheck: {checked.message}", checked.blobs)
            result.duration_s = result.precheck_s = time.perf_counter() - started
            return result
        notes.append(f"precheck on {', '.join(req.precheck or [])}: {checked.message}, "
                     f"error ratio {checked.max_err_ratio:.3g}")
    set_precision(req.problem.policy)
    module = import_problem(req.problem.path)
    timer = Timer(req.device)
    prov = collect(req.device)
    timings: list[Timing] = []
    try:
        new_cls = load_model_class(req.candidate, req.workdir, req.device) if req.candidate else None
        for w in [w for w in req.problem.workloads(req.sizes) if req.workloads is None or w.name in req.workloads]:
            timings += _time_workload(req, module, w, new_cls, timer, prov, notes)
    except CandidateFault as fault:
        result = failed(req, fault.kind, fault.message)  # type: ignore[arg-type]
        result.timings = timings
    else:
        result = BenchmarkResult(candidate_id=req.candidate.id if req.candidate else "baseline",
                                 problem_id=req.problem.id, status="ok", message="; ".join(notes), device=req.device,
                                 sizes=req.sizes, workloads=req.workloads, timings=timings,
                                 speedup_vs_eager=_speedup(timings, "eager"),
                                 speedup_vs_compile=_speedup(timings, "compile"),
                                 recheck_passed=True if req.candidate else None)
    result.duration_s = time.perf_counter() - started
    result.precheck_s = checked.duration_s if checked else None
    return result


if __name__ == "__main__":
    from stages.entry import main

    main(BenchmarkRequest, run)
