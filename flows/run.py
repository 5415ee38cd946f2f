"""One optimize run's state and what it does to a candidate: evaluate (compile → verify → benchmark, every result
recorded, device seconds charged, a rejection's evidence kept for a repair; its steps are what a ladder's rungs
call), profile (delayed, per the profiling policy) and refine into feedback, propose (a generate call, its LLM
calls recorded and charged). Strategies (flows/search/) decide what to propose from; the flow (flows/optimize.py)
wires them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

import torch
from prefect import runtime
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner

from kernelflow.artifacts.blobs import get_bytes
from kernelflow.artifacts.problem_runs import index
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.winner import winner
from kernelflow.flows.tasks import (
    benchmark_task,
    compile_task,
    generate_task,
    profile_task,
    refine_task,
    verify_task,
)
from kernelflow.stages.contracts import (
    Action,
    Backend,
    Baseline,
    BenchmarkRequest,
    BenchmarkResult,
    Candidate,
    CompileRequest,
    CompileResult,
    Device,
    Failure,
    GenerateRequest,
    GenerateResult,
    Problem,
    ProfileRequest,
    Proposal,
    RunRecord,
    SizeSet,
    VerifyRequest,
    VerifyResult,
)
from kernelflow.stages.errors import KernelflowError, StopSearch
from kernelflow.stages.executors.run import Mode
from kernelflow.stages.llm.client import LLMBudget
from kernelflow.stages.measure.objective import weakest
from kernelflow.stages.measure.profiling_policy import ProfilingPolicy, should_profile, structure
from kernelflow.stages.measure.provenance import code_version
from kernelflow.stages.measure.sol_target import fraction
from kernelflow.stages.measure.tools import evidence
from kernelflow.stages.problems import defaults
from kernelflow.stages.refine import RefineRequest

MAX_BARREN = 3  # proposals in a row without a usable candidate (LLM replies with no code) before stopping
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # a run id: a partition's and a work directory's name


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id(problem_id: str) -> str:
    """A fresh run id, `<UTC time>-<problem id>-<6 hex>`; characters of the problem id outside RUN_ID's become `_`.
    The optimize flow makes one when it is given none; a campaign makes its entries' up front (flows/campaign.py)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", problem_id)[:170]
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{safe}-{uuid.uuid4().hex[:6]}"


def checked_run_id(run_id: str) -> str:
    """`run_id` if it is safe as a directory name (RUN_ID: letters, digits, `.`, `_`, `-`, not first `.`, `_`, `-`;
    at most 200), else a KernelflowError saying so."""
    if not RUN_ID.fullmatch(run_id):
        raise KernelflowError(f"run id {run_id!r} is not a safe name: letters, digits, '.', '_' and '-' only, starting "
                              "with a letter or digit, at most 200 characters")
    return run_id


class Run:
    """The state of one optimize run and how it records what happens."""

    def __init__(self, problem: Problem, store: Store, device: Device, sizes: SizeSet, budget: int, proposer: str,
                 profiling: ProfilingPolicy, llm_max_tokens: int | None = None, llm_max_usd: float | None = None,
                 backend: Backend | None = None, seed: int = 0, model: str | None = None, mode: Mode = "subprocess",
                 baselines: list[Baseline] | None = None, timeout_s: float = 600.0, resume: str | None = None,
                 run_id: str | None = None):
        """`resume`: the id of a run in the store to continue (its problem and problem_runs rows are not written
        again); else `run_id`, the id of the new run (a campaign names its entries' runs up front), else a fresh one
        (new_run_id)."""
        self.id = resume or run_id or new_run_id(problem.id)
        self.problem, self.store, self.device, self.sizes = problem, store, device, sizes
        self.proposer, self.backend, self.seed, self.model = proposer, backend, seed, model
        self.mode, self.timeout_s = mode, timeout_s  # where stage calls run, and their deadline
        self.baselines = baselines if baselines is not None else defaults.baselines(device)  # timed beside a candidate
        self.gpu_s = 0.0  # device seconds of verify, benchmark and profile calls (on a CPU run: its CPU seconds)
        self.record = RunRecord(problem_id=problem.id, status="running", started_at=_now(), updated_at=_now(),
                                device=device, sizes=sizes, budget_candidates=budget, proposer=proposer,
                                code_version=code_version(), prefect_flow_run_id=str(runtime.flow_run.id or ""))
        self.tried: list[str] = []
        self.best: tuple[float, Candidate] | None = None
        self.verified = 0
        self.profiling = profiling
        self.compiled: dict[str, CompileResult] = {}
        self.actions: dict[str, list[Action]] = {}  # per profiled candidate: its findings' actions, causes first
        self.failures: dict[str, Failure] = {}  # per rejected candidate: the stage's evidence, for a repair
        self.feedback: dict[str, str] = {}  # per profiled candidate: its feedback text
        self.speedups: dict[str, float] = {}  # per verified candidate: geomean speedup over eager
        self.sol_floors: dict[str, float] | None = None  # per timed workload, µs: set for a --target-sol run
        self.best_sol: float | None = None  # the best's share of speed of light on a --target-sol run (new_best)
        self.flat_timing: BenchmarkResult | None = None  # the latest flat evaluation's timing (verify_and_time)
        self.candidates: dict[str, Candidate] = {}
        self.llm = LLMBudget(max_tokens=llm_max_tokens, max_usd=llm_max_usd)
        self.barren = 0  # proposals in a row that gave no candidate (an LLM reply with no usable code)
        self.lessons: list[str] = []  # search memory: verified conclusions a strategy hands to the proposer
        self.promoted_structures: list[str] = []
        self.recorded: set[str] = set()  # candidate ids already in the candidates table (a resumed run's)
        self.precompiled: dict[str, CompileResult] = {}  # compiled ahead by propose_round, not yet recorded
        self.round: list[Proposal] = []  # the round in progress: its turns not yet evaluated (saved with the state)
        if resume is None:
            index(store, problem.id, self.id)
            store.append("problems", self.id, [problem])
        store.append("runs", self.id, [self.record])

    def request_fields(self, candidate: Candidate, stage: str, timeout_s: float) -> dict:
        workdir = self.store.work_dir / self.id / candidate.id / stage
        return dict(workdir=str(workdir), blob_dir=str(self.store.blob_dir), timeout_s=timeout_s)

    def finish(self, status: str, reason: str) -> None:
        won = winner(self.store, self.id) if status == "finished" else None
        self.record = self.record.model_copy(update=dict(
            status=status, stop_reason=reason, updated_at=_now(), n_candidates=len(self.tried),
            n_verified=self.verified, best_candidate_id=self.best[1].id if self.best else None,
            best_speedup_vs_eager=self.best[0] if self.best else None,
            best_speedup_vs_compile=won.best_speedup_vs_compile if won else None,
            winner=won.id if won else None, winner_speedup_vs_eager=won.speedup_vs_eager if won else None,
            winner_note=(won.text + (" (on CPU times, which say nothing about GPU speed)" if self.device == "cpu"
                                      else "")) if won else ""))
        self.store.append("runs", self.id, [self.record])
        self.store.flush()  # a remote store gets what its spool still holds (a warning if it still cannot)


def evaluate(run: Run, candidate: Candidate) -> float | None:
    """The flat evaluation: compile → verify on every shape → standard timing; every result recorded; returns the
    candidate's geomean speedup over eager, or None when rejected. Every verified candidate is kept (its timing
    accepted: it competes for the winner, the best being the fastest)."""
    if compile_step(run, candidate).status != "ok":
        return None
    timed = verify_and_time(run, candidate, lambda _: True)
    return timed.speedup_vs_eager if timed else None


def compile_request(run: Run, candidate: Candidate) -> CompileRequest:
    return CompileRequest(candidate=candidate, problem=run.problem,
                          **run.request_fields(candidate, "compile", run.timeout_s))


def compile_step(run: Run, candidate: Candidate) -> CompileResult:
    """Record the candidate, compile it (off the device: not charged to run.gpu_s) unless a round compiled it ahead
    (run.precompiled: then its result is recorded now); a failure kept for a repair."""
    if candidate.id not in run.recorded:
        run.store.append("candidates", run.id, [candidate])
        run.recorded.add(candidate.id)
    compiled = run.precompiled.pop(candidate.id, None) or compile_task(compile_request(run, candidate), run.mode)
    run.store.append("compiles", run.id, [compiled])
    run.compiled[candidate.id] = compiled
    if compiled.status != "ok":
        rejected(run, candidate, "compile", compiled)
    return compiled


def verify_step(run: Run, candidate: Candidate, sizes: list[SizeSet], **knobs: Any) -> VerifyResult:
    """Verify on the run's device (knobs: VerifyRequest's trials, workloads); recorded, its duration charged to
    run.gpu_s, a failure kept for a repair."""
    verified = verify_task(VerifyRequest(problem=run.problem, candidate=candidate, device=run.device, sizes=sizes,
                                         **knobs, **run.request_fields(candidate, "verify", run.timeout_s)), run.mode)
    run.store.append("verifications", run.id, [verified])
    run.gpu_s += verified.duration_s or 0.0
    if verified.status != "ok":
        rejected(run, candidate, "verify", verified)
    return verified


def benchmark_step(run: Run, candidate: Candidate, accept: Callable[[BenchmarkResult], bool] | None = None,
                   **knobs: Any) -> BenchmarkResult:
    """Time the candidate beside the run's baselines on the run's timed shapes (knobs: BenchmarkRequest's
    repetitions, target, budget, baselines, workloads); recorded, charged to run.gpu_s, a failure kept. `accept`
    judges a successful call before it is recorded (its row's `accepted`: the strategy keeps the candidate on it)."""
    fields = dict(problem=run.problem, candidate=candidate, device=run.device, sizes=run.sizes,
                  baselines=run.baselines) | knobs
    timed = benchmark_task(BenchmarkRequest(**fields, **run.request_fields(candidate, "benchmark", run.timeout_s)),
                           run.mode, str(run.store.root))
    if accept is not None and timed.status == "ok":
        timed.accepted = accept(timed)
    run.store.append_benchmark(run.id, timed)
    run.gpu_s += timed.duration_s or 0.0
    if timed.status != "ok":
        rejected(run, candidate, "benchmark", timed)
    return timed


def verify_and_time(run: Run, candidate: Candidate,
                    accept: Callable[[BenchmarkResult], bool]) -> BenchmarkResult | None:
    """A compiled candidate verified on every shape (5 trials) then timed on every timed shape beside the baselines,
    the timing judged by `accept` (the flat evaluation after compile; a ladder's rung 2); the timing, or None when
    rejected."""
    if verify_step(run, candidate, defaults.verified_sizes(run.problem, run.device, run.sizes)).status != "ok":
        return None
    timed = benchmark_step(run, candidate, accept)
    if timed.status != "ok":
        return None
    run.verified += 1
    if timed.speedup_vs_eager is not None:
        run.speedups[candidate.id] = timed.speedup_vs_eager
    run.flat_timing = timed
    return timed


def new_best(run: Run, candidate: Candidate, speedup: float) -> None:
    """The candidate is the run's best; on a --target-sol run its share of speed of light is taken from its flat
    timing (verify_and_time's: for a ladder, rung 2's, not a rung-3 re-timing)."""
    run.best, run.best_sol, timed = (speedup, candidate), None, run.flat_timing
    if run.sol_floors is not None and timed is not None and timed.candidate_id == candidate.id:
        run.best_sol = fraction(run.sol_floors, timed)


def rejected(run: Run, candidate: Candidate, stage: Literal["compile", "verify", "benchmark"],
             result: CompileResult | VerifyResult | BenchmarkResult) -> None:
    """Keep a rejection's evidence (a compile's: its message and the log's tail) for a proposer that repairs."""
    message = result.message
    if stage == "compile" and "log" in result.blobs:
        log = get_bytes(run.store.blob_dir, result.blobs["log"]).decode(errors="replace")
        message += "\n--- compiler log (tail) ---\n" + log[-3000:]
    run.failures[candidate.id] = Failure(stage=stage, kind=result.failure_kind or "crash", message=message[-6000:])


def baseline_only(run: Run, baselines: list[Baseline], mode: Mode, timeout_s: float) -> None:
    workdir = run.store.work_dir / run.id / "baseline"
    timed = benchmark_task(BenchmarkRequest(problem=run.problem, device=run.device, sizes=run.sizes,
                                            baselines=baselines, workdir=str(workdir),
                                            blob_dir=str(run.store.blob_dir), timeout_s=timeout_s),
                           mode, str(run.store.root))
    run.store.append_benchmark(run.id, timed)


def profile_promoted(run: Run, candidate: Candidate, mode: Mode, timeout_s: float) -> None:
    """Delayed profiling: profile a promoted candidate when the policy says so, then turn it into feedback."""
    compiled = run.compiled.get(candidate.id)
    go, why = should_profile(run.profiling, candidate, compiled, True, run.promoted_structures)
    run.promoted_structures.append(structure(candidate, compiled))
    print(f"profile {candidate.id}: {why}")
    if go:  # on a GPU the shape it is weakest on; on a CPU the first GPU shape's analytic roofline (the GPU we target)
        workload = weakest_workload(run.flat_timing, candidate.id) if run.device == "cuda" else None
        profile_and_refine(run, ProfileRequest(problem=run.problem, candidate=candidate, device=run.device,
                                               workload=workload, **run.request_fields(candidate, "profile", timeout_s)),
                           mode, compiled)


def weakest_workload(timed: BenchmarkResult | None, candidate_id: str) -> str | None:
    """The workload where the candidate is furthest behind its fastest baseline (the largest candidate median over the
    least baseline median of that workload): its profile's advice is about the shape that holds the search back (the
    H200's losses were on later shapes: rows too long for the resident kernel, BENCHMARKS.md). None (the first GPU
    workload) without this candidate's timing beside a baseline."""
    if timed is None or timed.candidate_id != candidate_id:
        return None
    medians: dict[str, dict[str, float]] = {}
    for t in timed.timings:
        medians.setdefault(t.workload, {})[t.contender] = t.median_us
    found = weakest(medians)
    return found[0] if found else None


def profile_baselines(run: Run, baselines: list[Baseline], mode: Mode, timeout_s: float) -> None:
    """The baselines profiled once per run on the candidates' workload: class, SOL fraction and energy of what
    the user already has, beside the best candidate's."""
    for name in baselines:
        workdir = run.store.work_dir / run.id / "baseline" / f"profile-{name}"
        profile_and_refine(run, ProfileRequest(problem=run.problem, contender=name, device=run.device,
                                               workdir=str(workdir), blob_dir=str(run.store.blob_dir),
                                               timeout_s=timeout_s), mode, None)


def profile_and_refine(run: Run, req: ProfileRequest, mode: Mode, compiled: CompileResult | None) -> None:
    profiled = profile_task(req, mode, str(run.store.root), compiled)
    run.store.append("profiles", run.id, [profiled])
    run.gpu_s += profiled.duration_s or 0.0
    if profiled.status != "ok":
        return
    gpu = torch.cuda.get_device_name() if run.device == "cuda" else None
    feedback = refine_task(RefineRequest(evidence=evidence(run.problem, compiled, profiled, gpu)))
    run.store.append("feedback", run.id, [feedback])
    if req.candidate is not None:  # what the proposer may act on when this candidate is the parent
        run.actions[req.candidate.id] = [f.action for f in feedback.findings if not (f.explained_by or f.not_own)]
        run.feedback[req.candidate.id] = feedback.text
    print(f"profile of {req.subject_id}:\n{feedback.text}")


def propose(run: Run, req: GenerateRequest) -> list[Candidate]:
    """One proposal: its LLM calls recorded and charged to the run's budget; raises StopSearch when the proposer
    stops producing candidates."""
    proposed = generate_task(req)
    charge(run, proposed)
    return outcome(run, proposed)


def charge(run: Run, proposed: GenerateResult) -> None:
    """A proposal's LLM calls recorded and charged to the run's budget."""
    run.store.append("llm_calls", run.id, proposed.llm_calls)
    for call in proposed.llm_calls:
        run.llm.charge(call)


def outcome(run: Run, proposed: GenerateResult) -> list[Candidate]:
    """A charged proposal's candidates; raises StopSearch when the proposer stops producing candidates."""
    if proposed.candidates:
        run.barren = 0
        return proposed.candidates
    run.barren += 1
    if not proposed.llm_calls or run.barren >= MAX_BARREN:  # nothing to ask (no family, no model), or no code again
        raise StopSearch(f"proposer {run.proposer!r} gave no candidate: {proposed.message}")
    print(f"proposal gave no candidate ({run.barren} in a row): {proposed.message}")
    return []


def propose_round(run: Run, requests: list[GenerateRequest], workers: int | None = None) -> list[GenerateResult]:
    """Several proposals at once: every request's generate call, and the compile of each new candidate as soon as
    its proposal is back, run as Prefect tasks on a thread pool of `workers` threads (None: one per call), so the
    proposer's calls (an LLM's) and the compile processes overlap. Returns the proposals in request order, charged
    to nothing; the compiles wait in run.precompiled (by candidate id, each id compiled once) for compile_step to
    record them when their candidate is evaluated. Only this (the flow's) thread touches the run; the tasks get
    their requests, nothing else. A task that raises (an infrastructure fault past its retries) raises here."""
    results: list[GenerateResult | None] = [None] * len(requests)
    runner: ThreadPoolTaskRunner[Any] = ThreadPoolTaskRunner(max_workers=workers or max(2 * len(requests), 1))
    with runner:
        generating: dict[PrefectFuture[GenerateResult], int] = {
            runner.submit(generate_task, {"req": req}): i for i, req in enumerate(requests)}
        compiling: dict[str, PrefectFuture[CompileResult]] = {}
        for done in as_completed(list(generating)):
            proposed = results[generating[done]] = done.result()
            for candidate in proposed.candidates:
                if candidate.id not in compiling:
                    compiling[candidate.id] = runner.submit(
                        compile_task, {"req": compile_request(run, candidate), "mode": run.mode})
        for cid, future in compiling.items():
            run.precompiled[cid] = future.result()
    return [r for r in results if r is not None]
