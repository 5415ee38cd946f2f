"""Benchmark a candidate against eager and torch.compile in one process (DESIGN.md, "How we time").

Per workload: contenders interleaved in a shuffled order every round, each call timed alone (all streams
synced, L2 flushed, CUDA events), inputs rotated over several fresh sets, repetitions until the 95% interval
of every median is tight or the budget ends. The candidate's outputs on timed calls are re-checked against
the float64 reference, with verify's bound (stages/harness/compare.py), so a kernel cannot be right only when it is
not being timed. On CUDA each timed call follows
untimed calls of the same contender, about 20 ms of device time (stages/measure/timing.py SUSTAIN_US), so that a
power-limited kernel is timed at the clocks it keeps under sustained load; once NVML reports the power cap on a
workload, about 150 ms (SETTLE_US), so that a timed call meets its own contender's power state and not the one its
neighbour in the round left, and the rounds timed before are dropped.

Integrity (docs/INTEGRITY.md): the timer's primitives were bound before the candidate was imported
(stages/measure/timing.py), and every candidate call, timed ones included, runs in a guarded section (stages/harness/integrity.py)
that fails it as `cheat` if it replaced the timer, the statistics or the judge, changed a setting or left work
running on a thread. Every timed call's kernel launches are counted: one that launches fewer than the fewest of the
warm-up calls replayed a result, or let one launch serve several calls. Before each of its timed calls the
candidate's inputs are rewritten in place (their version changes), and one rotation in every RECHECK_EVERY refills
each set's buffers with another set's values: a result replayed by address (and version) is then stale. On CUDA, work a
call leaves on other streams after its end event is measured (a side stream escapes the events), and persisting L2
is reset before timing and must still be off after the candidate's calls. The untimed calls are guarded and counted
like the timed ones: fewer launches than the warm-up's would let the device cool before a timed call.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import time
from typing import TYPE_CHECKING, Any

import torch

from kernelflow.stages.contracts import (
    POWER_LIMITED_SHARE,
    BenchmarkRequest,
    BenchmarkResult,
    FailureKind,
    Provenance,
    SizeSet,
    Timing,
    Tolerance,
    VerifyRequest,
    VerifyResult,
    Workload,
)
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness import static_checks
from kernelflow.stages.harness.candidate import load_model_class
from kernelflow.stages.harness.compare import judge
from kernelflow.stages.harness.instantiate import baseline, build, fault_of, guarded, set_precision
from kernelflow.stages.harness.integrity import Guard
from kernelflow.stages.measure.provenance import collect
from kernelflow.stages.measure.timing import (
    Timer,
    clock_summary,
    left_running,
    median_ci,
    persisting_l2_bytes,
    rel_width,
    reset_persisting_l2,
)
from kernelflow.stages.problems.inputs import clone, draw, nbytes, trial_seed, upcast
from kernelflow.stages.problems.kernelbench import geomean, import_problem

if TYPE_CHECKING:
    from kernelflow.stages.verify import Loaded

Result = BenchmarkResult
RECHECK_EVERY = 10  # re-check the candidate's outputs on every input set, in every 10th rotation of the sets
SWAPPED = 1  # ... and, in the rotation after, with each set's buffers refilled with the next set's values


def failed(req: BenchmarkRequest, kind: FailureKind, message: str, files: dict[str, str] | None = None):
    return BenchmarkResult(candidate_id=req.candidate.id if req.candidate else "baseline", problem_id=req.problem.id,
                           status="failed", failure_kind=kind, message=message, files=files or {},
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
    for name in [n for n in contenders if n != "candidate"]:
        try:
            with torch.no_grad():
                for _ in range(3):
                    guarded(contenders[name], *args)
        except CandidateFault as fault:
            notes.append(f"baseline {name} dropped: {fault.message[:300]}")
            del contenders[name]


def _refill(buffers: list[Any], values: list[Any]) -> list[Any]:
    """Copy `values`' tensors into `buffers`' tensors in place (same addresses, new contents); returns the old ones."""
    old = clone(buffers)
    for b, v in zip(buffers, values, strict=True):
        if isinstance(b, torch.Tensor):
            b.copy_(v)
    return old


class _Candidate:
    """The candidate's calls on one workload: each in a guarded section; its launches counted (none after calls that
    launched some, or fewer than the fewest of the warm-up calls, is a cheat); its tail (work left on other streams)
    and the persisting-L2 set-aside checked."""

    def __init__(self, guard: Guard, fn: Any, tolerance: Tolerance, workload: str):
        self.guard, self.fn, self.tolerance, self.workload = guard, fn, tolerance, workload
        self.fewest, self.most, self.tails = 0, 0, list[float]()

    def launched(self, n: int, what: str) -> None:
        if n == 0 and self.most:
            raise CandidateFault("cheat", f"{what}: launched no kernel where its earlier calls launched {self.most}: "
                                 "its result came from an earlier launch (replay, memoization, or one launch serving "
                                 "several calls)")
        if n < self.fewest:
            raise CandidateFault("cheat", f"{what}: launched {n} kernels, every warm-up call launched at least "
                                 f"{self.fewest}: one launch serving several timed calls, or a result replayed")
        self.most = max(self.most, n)

    def warm(self, args: list[Any]) -> None:
        counts = []
        for i in range(3):
            what = f"{self.workload} warm-up call {i + 1}"
            with self.guard.section(what) as call, torch.no_grad():
                guarded(self.fn, *args)
            self.launched(call.launches, what)
            counts.append(call.launches)
        self.fewest = min(counts)
        self.l2(f"{self.workload} warm-up")

    def l2(self, what: str) -> None:
        if held := persisting_l2_bytes():
            raise CandidateFault("cheat", f"{what}: {held} bytes of L2 are set aside as persisting (they survive the "
                                 "flush between timed calls)")

    def timed(self, timer: Timer, args: list[Any], what: str) -> tuple[float, Any]:
        """One timed call. Its inputs are rewritten in place first (same values, a new version): a result kept by
        address and version is stale."""
        with torch.no_grad():
            for a in args:
                if isinstance(a, torch.Tensor):
                    a.copy_(a)
        with self.guard.section(what, timed=True) as call, torch.no_grad():
            us, out = timer.time_us(self.fn, args)
        self.launched(call.launches, what)
        if timer.last_tail_us is not None:
            self.tails.append(timer.last_tail_us)
        self.l2(what)
        return us, out

    def lead_in(self, timer: Timer, args: list[Any], calls: int, what: str) -> None:
        """The untimed calls queued before a timed call (stages/measure/timing.py SUSTAIN_US), guarded as a timed call is.
        Each must launch as a warm-up call did: calls that skipped their work while untimed would let the device cool
        before the timed one."""
        what = f"{what} lead-in"
        with self.guard.section(what, timed=True) as call, torch.no_grad():
            timer.sustain(self.fn, args, calls)
        if call.launches < calls * self.fewest:
            raise CandidateFault("cheat", f"{what}: {calls} calls launched {call.launches} kernels, every warm-up call "
                                 f"launched at least {self.fewest}: untimed calls skipped their work, which lets the "
                                 "device cool before the timed call")

    def check(self, out: Any, expect: list[tuple[Any, Any]], k: int, j: int, what: str) -> None:
        """Judge a timed call's output on set j's values (held in set k's buffers when j != k)."""
        try:
            judge(out, expect[j][1], expect[j][0], self.tolerance, what)
        except CandidateFault:
            if j != k and _matches(out, expect[k], self.tolerance):
                raise CandidateFault("cheat", f"{what}: its input buffers were refilled in place with other values, "
                                     "and it returned the result of their old values: a result replayed by address") \
                    from None
            raise


def _matches(out: Any, expect: tuple[Any, Any], tolerance: Tolerance) -> bool:
    try:
        judge(out, expect[1], expect[0], tolerance, "")
    except CandidateFault:
        return False
    return True


def _time_workload(req: BenchmarkRequest, module: Any, w: Workload, new_cls: Any, timer: Timer,
                   prov: Provenance, notes: list[str], guard: Guard | None) -> list[Timing]:
    reset_persisting_l2()
    with guard.section(f"{w.name} constructor") if guard else contextlib.nullcontext():
        ref, new = build(module, new_cls, w, req.device, seed=trial_seed(req.seed, w.name, "init"))
    sets = _input_sets(module, w, req, timer)
    contenders = _contenders(req, ref, new)
    _warm(contenders, sets[0], notes)
    cand = _Candidate(guard, new, req.problem.tolerance, w.name) if new is not None and guard else None
    expect: list[tuple[Any, Any]] = []
    if cand is not None:
        cand.warm(sets[0])
        reset_persisting_l2()
        ref64 = copy.deepcopy(ref).double() if req.problem.policy.reference_fp64 else ref
        with torch.no_grad():
            expect = [(ref(*s), ref64(*upcast(s))) for s in sets]
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    tails: dict[str, list[float]] = {name: [] for name in contenders}
    lead: dict[str, int] = {}  # untimed calls queued before each timed call (stages/measure/timing.py SUSTAIN_US)
    clocks: dict[str, list[tuple[int, bool]]] = {name: [] for name in contenders}  # NVML, after each timed call

    def one(name: str, k: int, j: int, what: str) -> tuple[float, Any] | None:
        """One timed call on set k (its buffers refilled with set j's values when j != k), after its lead-in; None
        when a baseline failed (it is dropped)."""
        saved = None
        try:
            if lead.get(name):  # before the refill and the rewrite, so the timed call still meets new inputs
                if cand is not None and name == "candidate":
                    cand.lead_in(timer, sets[k], lead[name], what)
                else:
                    with torch.no_grad():
                        timer.sustain(contenders[name], sets[k], lead[name])
            saved = _refill(sets[k], sets[j]) if j != k else None
            if cand is not None and name == "candidate":
                return cand.timed(timer, sets[k], what)
            with torch.no_grad():
                result = timer.time_us(contenders[name], sets[k])
            if timer.last_tail_us is not None:
                tails[name].append(timer.last_tail_us)
            return result
        except Exception as e:
            if name == "candidate":
                raise fault_of(e) from e
            notes.append(f"baseline {name} dropped on {w.name}: it failed in {what}: {type(e).__name__}: {e}"[:400])
            del contenders[name], samples[name]  # the baseline's fault, not the candidate's
            return None
        finally:
            if saved is not None:
                _refill(sets[k], saved)

    # where the power cap is on (or NVML cannot tell), every lead-in settles the power state (stages/measure/timing.py)
    settle, device_us = timer.device == "cuda" and not timer.reads_clock, {}
    if timer.device == "cuda":
        for name in list(contenders):  # one call each sizes its first lead-in (not kept); then the median does
            if (sized := one(name, 0, 0, f"{w.name} sizing call")) is not None:
                device_us[name] = sized[0]
                settle = settle or bool(timer.last_clock and timer.last_clock[1])
        lead.update((name, timer.lead_calls(us, settle)) for name, us in device_us.items())
    rng, started, rep, first = random.Random(req.seed), time.perf_counter(), 0, 0
    while True:
        order = list(contenders)
        rng.shuffle(order)
        cap_seen = False
        for name in order:
            k, rotation = rep % len(sets), rep // len(sets)
            j = (k + 1) % len(sets) if rotation % RECHECK_EVERY == SWAPPED and name == "candidate" else k
            if (timed := one(name, k, j, f"{w.name} timed call {rep}")) is None:
                continue
            us, out = timed
            samples[name].append(us)
            device_us[name] = median_ci(samples[name])[0]  # the sizing call alone can be an outlier
            lead[name] = timer.lead_calls(device_us[name], settle)
            if timer.last_clock is not None:
                clocks[name].append(timer.last_clock)
                cap_seen = cap_seen or timer.last_clock[1]
            if cand is not None and name == "candidate" and rotation % RECHECK_EVERY in (0, SWAPPED):
                cand.check(out, expect, k, j, f"{w.name} timed call {rep}")  # every set, not only set 0
            del out, timed
        rep += 1
        if cap_seen and not settle:  # the cap came on: the rounds timed so far met their neighbours' state; dropped
            settle, first = True, rep  # (the tails of work left running do not depend on the power state: kept)
            for kept in (samples, clocks):
                for v in kept.values():
                    v.clear()
            lead.update((name, timer.lead_calls(device_us[name], settle)) for name in contenders)
            continue
        tight = all(rel_width(s) <= req.target_rel_ci for s in samples.values())
        over = time.perf_counter() - started > req.budget_s
        if rep >= max(req.max_reps, first + min(req.min_reps, req.max_reps)) or \
                (rep - first >= req.min_reps and (tight or over)):  # a restart still gets its own rounds
            break
    if settle:
        why = "the power cap is on" if timer.reads_clock else "NVML cannot read the power cap here, so it is assumed on"
        least = min((lead[n] * device_us[n] for n in contenders), default=0.0) / 1e3
        notes.append(f"{why} for {w.name}: each timed call followed at least {least:.0f} ms of its contender's own "
                     "calls (stages/measure/timing.py SETTLE_US)" +
                     (f"; the {first} rounds timed before the cap was seen were dropped" if first else ""))
    if cand is not None and (tail := left_running(samples["candidate"], cand.tails, tails.get("eager", []))):
        raise CandidateFault("cheat", f"{w.name}: its calls left a median {tail:.1f} us of work running after their "
                             "end event (work on a side stream the timer does not see)")
    rows = []
    for name, s in samples.items():
        med, lo, hi = median_ci(s)
        host = _back_to_back(timer, contenders[name], sets[0], cand if name == "candidate" else None, w.name, notes)
        mhz, capped = clock_summary(clocks[name])
        if name == "candidate" and capped is not None and capped >= POWER_LIMITED_SHARE:
            notes.append(f"candidate is power-limited on {w.name}: NVML reported the power cap after {capped:.0%} of its "
                         f"timed calls (median SM clock {mhz:.0f} MHz); its times are those of sustained load")
        if host is not None and host > med:
            notes.append(f"{name} is launch-bound on {w.name}: {host:.1f} us of host time per call issued back to "
                         f"back against {med:.1f} us on the device (back to back it runs at the host's speed)")
        rows.append(Timing(problem_id=req.problem.id, candidate_id=req.candidate.id if name == "candidate" and
                           req.candidate else None, contender=name,  # type: ignore[arg-type]
                           benchmark_for=req.candidate.id if req.candidate else "baseline", workload=w.name, median_us=med, ci_low_us=lo,
                           ci_high_us=hi, min_us=min(s), mean_us=sum(s) / len(s), n_reps=len(s), host_us=host,
                           lead_calls=lead.get(name, 0), timed_sm_clock_mhz=mhz, power_capped_share=capped,
                           l2_flushed=timer.flushes_l2, input_sets=len(sets), provenance=prov))
    return rows


def _back_to_back(timer: Timer, fn: Any, args: list[Any], cand: _Candidate | None, workload: str,
                  notes: list[str]) -> float | None:
    """Host time per call issued back to back (Timer.back_to_back_us); the candidate's calls in a guarded section.
    A baseline that fails here loses its host time, with a note; the candidate's failure is its fault."""
    what = f"{workload} back-to-back calls"
    try:
        with cand.guard.section(what, timed=True) if cand else contextlib.nullcontext(), torch.no_grad():
            return guarded(timer.back_to_back_us, fn, args)
    except CandidateFault as fault:
        if cand is not None:
            raise
        notes.append(f"{what}: a baseline failed: {fault.message}"[:400])
        return None


def _speedup(timings: list[Timing], baseline: str) -> float | None:
    by: dict[tuple[str, str], float] = {(t.contender, t.workload): t.median_us for t in timings}
    ratios = [by[(baseline, w)] / by[("candidate", w)] for (c, w) in by if c == "candidate" and (baseline, w) in by]
    return geomean(ratios) if ratios else None


def precheck(req: BenchmarkRequest) -> tuple[VerifyResult, Loaded | None]:
    """The request's precheck workloads verified in this process, one trial each (stages/verify.py's own checks);
    and, when it passed, the candidate's class and guard as the verification loaded them, for the timing (one
    import)."""
    from kernelflow.stages import verify

    assert req.candidate is not None and req.precheck is not None
    sizes: list[SizeSet] = [s for s in ("cpu", "gpu") if any(w.name in req.precheck for w in req.problem.workloads(s))]
    return verify.checked(VerifyRequest(problem=req.problem, candidate=req.candidate, device=req.device, sizes=sizes,
                                        trials=1, workloads=req.precheck, seed=req.seed, workdir=req.workdir,
                                        cache_dir=req.cache_dir, timeout_s=req.timeout_s))


def run(req: BenchmarkRequest) -> BenchmarkResult:
    started, notes = time.perf_counter(), list[str]()
    checked, loaded = precheck(req) if req.precheck and req.candidate else (None, None)
    if checked is not None:
        if checked.status != "ok":
            result = failed(req, checked.failure_kind or "mismatch", f"precheck: {checked.message}", checked.files)
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
        new_cls, guard = loaded or (None, None)
        if req.candidate and loaded is None:
            static_checks.check_source(req.candidate.source, req.problem)
            guard = Guard(req.workdir, req.candidate.source)
            with guard.section("import"):
                new_cls = load_model_class(req.candidate, req.workdir, req.device)
        for w in [w for w in req.problem.workloads(req.sizes) if req.workloads is None or w.name in req.workloads]:
            timings += _time_workload(req, module, w, new_cls, timer, prov, notes, guard)
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
    from kernelflow.stages.entry import stage_main

    stage_main(BenchmarkRequest, run)
