"""The optimize flow: [generate → compile → verify → benchmark (→ profile → refine when promoted)]* under a
budget, greedy; then the baselines are profiled once. The result is the fastest of the best candidate, eager
and torch.compile by geomean over the timed shapes (the seeds rule, artifacts/winner.py), so not slower than
what the user already has on that measure (a winning candidate may still lose on one shape).

Thin by design: stages do the work, tasks declare resilience, the store keeps every artifact. Stop
conditions raise StopSearch with their reason and are caught in one place.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, cast
from uuid import UUID

import torch
from prefect import flow, runtime
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from artifacts.blobs import get_bytes
from artifacts.leaderboard import leaderboard, render
from artifacts.store import Store
from artifacts.winner import winner
from flows.tasks import benchmark_task, compile_task, generate_task, profile_task, refine_task, verify_task
from stages import defaults
from stages.contracts import (
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
    Policy,
    Problem,
    ProfileRequest,
    RunRecord,
    SizeSet,
    VerifyRequest,
    VerifyResult,
)
from stages.errors import StopSearch
from stages.executor import Mode
from stages.llm.client import LLMBudget
from stages.problem import load_problem
from stages.profiling_policy import ProfilingPolicy, should_profile, structure
from stages.proposers import REPAIRS
from stages.provenance import code_version
from stages.refine import RefineRequest, evidence

MAX_REPAIRS = 2  # failed candidates in a row along one lineage before the search goes back to the incumbent
MAX_BARREN = 3  # proposals in a row without a usable candidate (LLM replies with no code) before stopping


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Run:
    """The state of one optimize run and how it records what happens."""

    def __init__(self, problem: Problem, store: Store, device: Device, sizes: SizeSet, budget: int, proposer: str,
                 profiling: ProfilingPolicy, llm_max_tokens: int | None = None, llm_max_usd: float | None = None):
        self.id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{problem.id}-{uuid.uuid4().hex[:6]}"
        self.problem, self.store, self.device, self.sizes = problem, store, device, sizes
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
        self.candidates: dict[str, Candidate] = {}
        self.llm = LLMBudget(max_tokens=llm_max_tokens, max_usd=llm_max_usd)
        self.barren = 0  # proposals in a row that gave no candidate (an LLM reply with no usable code)
        self.promoted_structures: list[str] = []
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


def evaluate(run: Run, candidate: Candidate, mode: Mode, baselines: list[Baseline], timeout_s: float) -> float | None:
    """compile → verify → benchmark one candidate; every result is recorded; returns its speedup or None."""
    store, problem = run.store, run.problem
    store.append("candidates", run.id, [candidate])
    compiled = compile_task(CompileRequest(candidate=candidate, problem=problem, **run.request_fields(
        candidate, "compile", timeout_s)), mode)
    store.append("compiles", run.id, [compiled])
    run.compiled[candidate.id] = compiled
    if compiled.status != "ok":
        rejected(run, candidate, "compile", compiled)
        return None
    verified = verify_task(VerifyRequest(problem=problem, candidate=candidate, device=run.device,
                                         sizes=defaults.verified_sizes(problem, run.device, run.sizes),
                                         **run.request_fields(candidate, "verify", timeout_s)), mode)
    store.append("verifications", run.id, [verified])
    if verified.status != "ok":
        rejected(run, candidate, "verify", verified)
        return None
    timed = benchmark_task(BenchmarkRequest(problem=problem, candidate=candidate, device=run.device, sizes=run.sizes,
                                            baselines=baselines, **run.request_fields(candidate, "benchmark", timeout_s)),
                           mode, str(store.root))
    store.append_benchmark(run.id, timed)
    if timed.status != "ok":
        rejected(run, candidate, "benchmark", timed)
        return None
    run.verified += 1
    if timed.speedup_vs_eager is not None:
        run.speedups[candidate.id] = timed.speedup_vs_eager
    return timed.speedup_vs_eager


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
    if go:  # the first GPU shape: measured on a GPU; on a CPU its analytic roofline (advice for the GPU we target)
        profile_and_refine(run, ProfileRequest(problem=run.problem, candidate=candidate, device=run.device,
                                               **run.request_fields(candidate, "profile", timeout_s)), mode, compiled)


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
    if profiled.status != "ok":
        return
    gpu = torch.cuda.get_device_name() if run.device == "cuda" else None
    feedback = refine_task(RefineRequest(evidence=evidence(run.problem, compiled, profiled, gpu)))
    run.store.append("feedback", run.id, [feedback])
    if req.candidate is not None:  # what the proposer may act on when this candidate is the parent
        run.actions[req.candidate.id] = [f.action for f in feedback.findings if not (f.explained_by or f.not_own)]
        run.feedback[req.candidate.id] = feedback.text
    print(f"profile of {req.subject_id}:\n{feedback.text}")


def next_request(run: Run, proposer: str, backend: Backend | None, seed: int, model: str | None) -> GenerateRequest:
    """Repair the latest candidate when it failed in a way the proposer repairs (at most MAX_REPAIRS in a row),
    else refine the incumbent (its profile's actions and feedback), else start fresh."""
    latest = run.candidates.get(run.tried[-1]) if run.tried else None
    failure = run.failures.get(latest.id) if latest else None
    parent: Candidate | None = latest
    if latest is None or failure is None or failure.kind not in REPAIRS.get(proposer, ()) or \
            repair_depth(run, latest) >= MAX_REPAIRS:
        parent, failure = (run.best[1] if run.best else None), None
    return GenerateRequest(
        problem=run.problem, n=1, proposer=proposer, backend=backend, parent=parent, parent_failure=failure,
        actions=run.actions.get(parent.id, []) if parent and not failure else [],
        feedback=run.feedback.get(parent.id, "") if parent else "",
        parent_speedup_vs_eager=run.speedups.get(parent.id) if parent else None, exclude_ids=run.tried,
        seed=seed + len(run.tried), model=model, llm_tokens_left=run.llm.tokens_left(), llm_usd_left=run.llm.usd_left())


def repair_depth(run: Run, candidate: Candidate) -> int:
    """How many failed ancestors in a row lead to this failed candidate (itself included)."""
    depth, node = 0, cast(Candidate | None, candidate)
    while node is not None and node.id in run.failures:
        depth, node = depth + 1, run.candidates.get(node.parent_id or "")
    return depth


def propose(run: Run, req: GenerateRequest) -> list[Candidate]:
    """One proposal: its LLM calls recorded and charged to the run's budget; raises StopSearch when the proposer
    stops producing candidates."""
    proposed = generate_task(req)
    run.store.append("llm_calls", run.id, proposed.llm_calls)
    for call in proposed.llm_calls:
        run.llm.charge(call)
    if proposed.candidates:
        run.barren = 0
        return proposed.candidates
    run.barren += 1
    if not proposed.llm_calls or run.barren >= MAX_BARREN:  # the builtin's "nothing more", or replies without code
        raise StopSearch(f"proposer {req.proposer!r} has nothing more to propose: {proposed.message}")
    print(f"proposal gave no candidate ({run.barren} in a row): {proposed.message}")
    return []


def greedy(run: Run, budget: int, wall_time_s: float, proposer: str, backend: Backend | None, seed: int,
           evaluate_one, profile_one, model: str | None = None) -> None:
    """Propose (a repair of the latest failure, else a refinement of the incumbent), evaluate, keep the best;
    raises StopSearch with the reason."""
    started = time.monotonic()
    progress = cast(UUID, create_progress_artifact(0.0, description=f"candidates of {run.id}"))
    while True:
        if len(run.tried) >= budget:
            raise StopSearch(f"candidate budget of {budget} spent")
        if time.monotonic() - started > wall_time_s:
            raise StopSearch(f"wall-time budget of {wall_time_s:.0f} s spent")
        if (spent := run.llm.exhausted()) is not None:
            raise StopSearch(spent)
        for candidate in propose(run, next_request(run, proposer, backend, seed, model)):
            run.tried.append(candidate.id)
            run.candidates[candidate.id] = candidate
            speedup = evaluate_one(candidate)
            print(f"[{len(run.tried)}/{budget}] {candidate.id} {candidate.origin.proposer} {candidate.origin.params}: "
                  + (f"verified, {speedup:.3f}x eager" if speedup else "rejected (see leaderboard)"))
            if speedup and (run.best is None or speedup > run.best[0]):
                run.best = (speedup, candidate)
                profile_one(candidate)
            update_progress_artifact(progress, 100.0 * len(run.tried) / budget)


@flow(name="optimize", log_prints=True)
def optimize(problem_path: str, budget: int = 8, store: str | None = None, device: Device | None = None,
             sizes: SizeSet | None = None, proposer: str = "builtin", backend: Backend | None = None,
             baselines: list[Baseline] | None = None, wall_time_s: float = 3600.0, executor: Mode = "subprocess",
             stage_timeout_s: float = 600.0, seed: int = 0, profile: bool = True, baseline_profiles: bool = True,
             policy: dict | None = None, model: str | None = None, llm_max_tokens: int | None = None,
             llm_max_usd: float | None = None) -> dict:
    problem = load_problem(problem_path)
    if policy:  # a campaign's policy overrides the problem's for every stage (Policy's fields, e.g. allow_tf32)
        problem = problem.model_copy(update={"policy": Policy(**{**problem.policy.model_dump(), **policy})})
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        print("No GPU in use: candidates run on CPU (Triton through its interpreter); CPU timings are labelled "
              "as such and never compared with GPU numbers.")
    sizes = sizes or defaults.timed_sizes(problem, device)
    baselines = baselines if baselines is not None else defaults.baselines(device)
    profiling = ProfilingPolicy(enabled=profile, baselines=baseline_profiles)
    run = Run(problem, Store(store), device, sizes, budget, proposer, profiling, llm_max_tokens, llm_max_usd)
    print(f"run {run.id}: {problem.id} on {device} ({sizes} shapes), budget {budget}, store {run.store.root}")
    try:
        greedy(run, budget, wall_time_s, proposer, backend, seed,
               lambda c: evaluate(run, c, executor, baselines, stage_timeout_s),
               lambda c: profile_promoted(run, c, executor, stage_timeout_s), model)
    except StopSearch as stop:
        if run.verified == 0:  # still record what the user already has: the baselines, timed alone
            baseline_only(run, baselines, executor, stage_timeout_s)
        if run.profiling.enabled and run.profiling.baselines:
            profile_baselines(run, baselines, executor, stage_timeout_s)
        run.finish("finished", stop.reason)
    except BaseException as e:
        run.finish("failed", f"{type(e).__name__}: {e}")
        raise
    board = leaderboard(run.store, run.id)
    create_table_artifact(key=f"leaderboard-{problem.id.lower().replace('_', '-')}",
                          table=board.astype(str).to_dict("records"), description=f"run {run.id}")
    print(f"stopped: {run.record.stop_reason}\n{render(board)}\n{run.record.winner_note}")
    return {"run_id": run.id, "store": str(run.store.root), "best_candidate_id": run.record.best_candidate_id,
            "best_speedup_vs_eager": run.record.best_speedup_vs_eager, "stop_reason": run.record.stop_reason,
            "winner": run.record.winner, "winner_speedup_vs_eager": run.record.winner_speedup_vs_eager,
            "winner_note": run.record.winner_note}


def main(problem_path: str, **kwargs) -> dict:
    return optimize(str(Path(problem_path).resolve()), **kwargs)
