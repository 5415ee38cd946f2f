"""One optimize run and what it does to a candidate: evaluate (compile → verify → benchmark through the run's steps,
every result recorded, device seconds charged, a rejection's evidence kept for a repair; its parts are what a ladder's
rungs call), profile (delayed, per the profiling policy) and refine into feedback, propose (a generate call, its LLM
calls recorded and charged). A run is its configuration, its search state (flows/state.py), its recorder
(flows/recorder.py) and its steps (flows/steps.py); strategies (flows/search/) decide what to propose from.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import torch
from prefect import runtime
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner

from kernelflow.artifacts.store import Store
from kernelflow.artifacts.winner import winner
from kernelflow.flows import progress
from kernelflow.flows.config import RunConfig
from kernelflow.flows.recorder import Recorder
from kernelflow.flows.secrets import llm_api_key
from kernelflow.flows.state import SearchState
from kernelflow.flows.steps import Steps
from kernelflow.flows.tasks import generate_task, in_tasks, refine_task, stage_task
from kernelflow.stages.contracts import (
    BenchmarkResult,
    Candidate,
    CompileRequest,
    CompileResult,
    Contender,
    GenerateRequest,
    GenerateResult,
    Problem,
    ProfileResult,
    RunRecord,
    SizeSet,
    VerifyResult,
)
from kernelflow.stages.errors import KernelflowError, StopSearch
from kernelflow.stages.measure.objective import weakest
from kernelflow.stages.measure.profiling_policy import ProfilingPolicy, should_profile, structure
from kernelflow.stages.measure.provenance import code_version
from kernelflow.stages.measure.tools import evidence
from kernelflow.stages.problems import defaults
from kernelflow.stages.proposers.coverage import coverage
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


@dataclass
class Run:
    """One optimize run: what it knows (state), what it writes (recorder), how it calls the stages (steps)."""

    state: SearchState
    recorder: Recorder
    steps: Steps
    record: RunRecord
    api_key: Any = None  # the LLM key the flow resolved for the llm proposer (a SecretStr), else None
    precompiled: dict[str, CompileResult] = field(default_factory=dict)  # compiled ahead by propose_round

    @property
    def id(self) -> str:
        return self.recorder.run_id

    @property
    def problem(self) -> Problem:
        return self.state.problem

    @property
    def config(self) -> RunConfig:
        return self.state.config


def open_run(problem: Problem, config: RunConfig, store: Store, run_id: str, resumed: bool = False,
             started: float | None = None) -> Run:
    """Run `run_id` of `problem` begun in `store` (its problem row and index written unless it is `resumed`: they
    are there), its runs row saying it is running and which template families match the problem (and why the others
    do not); the stages called through the flow's Prefect tasks. `started`: when the run began (`time.monotonic()`;
    None: now), the start of its wall-time."""
    state = SearchState(problem, config, started)
    recorder = Recorder(store, run_id)
    record = RunRecord(problem_id=problem.id, status="running", started_at=_now(), updated_at=_now(),
                       device=state.device, sizes=state.sizes, budget_candidates=config.budget,
                       proposer=config.proposer, code_version=code_version(),
                       prefect_flow_run_id=str(runtime.flow_run.id or ""),
                       coverage=coverage(problem, state.device, config.families))
    if not resumed:
        recorder.problem(problem)
    recorder.run(record)
    key = llm_api_key() if config.proposer == "llm" else None
    return Run(state, recorder, Steps(recorder, config.mode(), config.stage_timeout_s, in_tasks), record, key)


def finish(run: Run, status: Literal["finished", "failed"], reason: str) -> None:
    """The run's last runs row: how it ended, what it tried, its best and the winner under the seeds rule."""
    state = run.state
    won = winner(run.recorder.store, run.id) if status == "finished" else None
    note = (won.text + (" (on CPU times, which say nothing about GPU speed)" if state.device == "cpu" else "")) \
        if won else ""
    run.record = run.record.model_copy(update=dict(
        status=status, stop_reason=reason, updated_at=_now(), n_candidates=len(state.tried),
        n_verified=state.verified, best_candidate_id=state.best[1].id if state.best else None,
        best_speedup_vs_eager=state.best[0] if state.best else None,
        best_speedup_vs_compile=won.best_speedup_vs_compile if won else None,
        winner=won.id if won else None, winner_speedup_vs_eager=won.speedup_vs_eager if won else None,
        winner_note=note))
    run.recorder.run(run.record)
    run.recorder.flush()


def evaluate(run: Run, candidate: Candidate) -> float | None:
    """The flat evaluation: compile → verify on every shape → standard timing; every result recorded; returns the
    candidate's geomean speedup over eager, or None when rejected. Every verified candidate is kept (its timing
    accepted: it competes for the winner, the best being the fastest)."""
    if compile_step(run, candidate).status != "ok":
        return None
    timed = verify_and_time(run, candidate, lambda _: True)
    return timed.speedup_vs_eager if timed else None


def compile_step(run: Run, candidate: Candidate) -> CompileResult:
    """The candidate compiled (off the device: not charged to the device budget) unless a round compiled it ahead
    (then that result is recorded now); a failure kept for a repair."""
    compiled = run.steps.compile(run.problem, candidate, run.precompiled.pop(candidate.id, None))
    run.state.compiled_as(compiled)
    if compiled.status != "ok":
        rejected(run, candidate, "compile", compiled)
    return compiled


def verify_step(run: Run, candidate: Candidate, sizes: list[SizeSet], **knobs: Any) -> VerifyResult:
    """Verified on the run's device (knobs: VerifyRequest's trials, workloads); its duration charged, a failure kept
    for a repair."""
    verified = run.steps.verify(run.problem, candidate, run.state.device, sizes, **knobs)
    run.state.spend_device(verified.duration_s)
    if verified.status != "ok":
        rejected(run, candidate, "verify", verified)
    return verified


def benchmark_step(run: Run, candidate: Candidate, accept: Callable[[BenchmarkResult], bool] | None = None,
                   **knobs: Any) -> BenchmarkResult:
    """Timed beside the run's baselines on its timed shapes (knobs: BenchmarkRequest's repetitions, target, budget,
    baselines, workloads, precheck); charged, a failure kept. `accept`: as Steps.benchmark."""
    state = run.state
    knobs.setdefault("baselines", state.baselines)
    knobs["budget_s"] = min(knobs.get("budget_s", state.timing_budget_s), state.timing_budget_s)
    timed = run.steps.benchmark(run.problem, candidate, state.device, state.sizes, accept=accept, **knobs)
    state.spend_device(timed.duration_s)
    if timed.status != "ok":
        rejected(run, candidate, "benchmark", timed)
    return timed


def verify_and_time(run: Run, candidate: Candidate,
                    accept: Callable[[BenchmarkResult], bool]) -> BenchmarkResult | None:
    """A compiled candidate verified on every shape (5 trials) then timed on every timed shape beside the baselines,
    the timing judged by `accept` (the flat evaluation after compile; a ladder's rung 2); the timing, or None when
    rejected."""
    state = run.state
    if verify_step(run, candidate, defaults.verified_sizes(run.problem, state.device, state.sizes)).status != "ok":
        return None
    timed = benchmark_step(run, candidate, accept)
    if timed.status != "ok":
        return None
    state.timed(timed)
    return timed


def rejected(run: Run, candidate: Candidate, stage: Literal["compile", "verify", "benchmark"],
             result: CompileResult | VerifyResult | BenchmarkResult) -> None:
    """Keep a rejection's evidence (a compile's: its message and the log's tail) for a proposer that repairs."""
    message = result.message
    if stage == "compile" and "log" in result.blobs:
        log = run.recorder.store.blob(result.blobs["log"]).decode(errors="replace")
        message += "\n--- compiler log (tail) ---\n" + log[-3000:]
    run.state.reject(candidate.id, stage, result.failure_kind, message)


def after_search(run: Run, reason: str) -> str:
    """What a run does once its search stopped for `reason`; returns the run's stop reason: `reason` and what was
    left out. When no candidate verified, the baselines are timed alone (what the user already has, so the run still
    names a winner); then, where the configuration asks (profile, baseline_profiles), the baselines are profiled once,
    in a run with no candidate too: their class and share of speed of light say what there is to win. A user's
    wall-time is the whole run's: each of these steps starts only while it lasts, a profile only while what is left holds
    the slowest profile so far (one begun runs to its end, as a candidate's evaluation does), and one left out is
    printed and named in the stop reason."""
    config, left_out = run.config, []
    if run.state.verified == 0:
        if (late := skipped("baseline timing", run.state.overtime())) is None:
            baseline_only(run)
        left_out.append(late)
    if config.profile and config.baseline_profiles:
        left_out.append(profile_baselines(run))
    return "; ".join([reason, *filter(None, left_out)])


def skipped(what: str, late: str | None) -> str | None:
    """`what` skipped for the reason `late` (printed), or None when there is none: a profile begins while the time left
    holds the slowest profile so far (SearchState.no_room_to_profile), the baselines' timing while any is left."""
    if late is None:
        return None
    print(f"{what} skipped: {late}")
    return f"{what} skipped: {late}"


def baseline_only(run: Run) -> None:
    """The baselines timed alone: what the user already has, recorded when no candidate verified."""
    state = run.state
    run.steps.benchmark(run.problem, None, state.device, state.sizes, state.baselines, budget_s=state.timing_budget_s)


def profile_promoted(run: Run, candidate: Candidate) -> None:
    """Delayed profiling: profile a promoted candidate when the policy says so and the run's wall-time is not spent
    (its feedback serves a next proposal, which a spent wall-time rules out), then turn it into feedback."""
    state = run.state
    policy = ProfilingPolicy(enabled=run.config.profile, baselines=run.config.baseline_profiles)
    compiled = state.compiled.get(candidate.id)
    go, why = should_profile(policy, candidate, compiled, True, state.promoted_structures)
    state.promote(structure(candidate, compiled))
    print(f"profile {candidate.id}: {why}")
    if go and skipped(f"profile of {candidate.id}", state.no_room_to_profile()) is None:
        # on a GPU the shape it is weakest on; on a CPU the first GPU shape's analytic roofline (the GPU we target)
        workload = weakest_workload(state.flat_timing, candidate.id) if state.device == "cuda" else None
        refine(run, timed_profile(run, candidate, workload=workload), compiled, candidate)


def weakest_workload(timed: BenchmarkResult | None, candidate_id: str) -> str | None:
    """The workload where the candidate is furthest behind its fastest baseline (the largest candidate median over the
    least baseline median of that workload): its profile's advice is about the shape that holds the search back. None
    (the first GPU workload) without this candidate's timing beside a baseline."""
    if timed is None or timed.candidate_id != candidate_id:
        return None
    medians: dict[str, dict[str, float]] = {}
    for t in timed.timings:
        medians.setdefault(t.workload, {})[t.contender] = t.median_us
    found = weakest(medians)
    return found[0] if found else None


def profile_baselines(run: Run) -> str | None:
    """The baselines profiled once per run on the candidates' workload: class, SOL fraction and energy of what
    the user already has, beside the best candidate's. Each starts only while the wall-time left holds the slowest
    profile so far; returns why those left were skipped, or None."""
    baselines = run.state.baselines
    for i, name in enumerate(baselines):
        if (late := skipped(f"baseline profiles ({', '.join(baselines[i:])})",
                            run.state.no_room_to_profile())) is not None:
            return late
        contender: Contender = name
        refine(run, timed_profile(run, None, contender=contender), None, None)
    return None


def timed_profile(run: Run, candidate: Candidate | None, **where: Any) -> ProfileResult:
    """A profile through the run's steps (`where`: Steps.profile's contender or workload), its wall time kept as the
    estimate of the next one's."""
    began = time.monotonic()
    profiled = run.steps.profile(run.problem, candidate, run.state.device, **where)
    run.state.profiled(time.monotonic() - began)
    return profiled


def refine(run: Run, profiled: ProfileResult, compiled: CompileResult | None, candidate: Candidate | None) -> None:
    """A profile turned into feedback (recorded); a candidate's is what the proposer may act on as its parent."""
    run.state.spend_device(profiled.duration_s)
    if profiled.status != "ok":
        return
    gpu = torch.cuda.get_device_name() if run.state.device == "cuda" else None
    feedback = refine_task(RefineRequest(evidence=evidence(run.problem, compiled, profiled, gpu)))
    run.recorder.feedback(feedback)
    if candidate is not None:
        run.state.advise(candidate.id, [f.action for f in feedback.findings if not (f.explained_by or f.not_own)],
                         feedback.text)
    print(f"profile of {profiled.candidate_id}:\n{feedback.text}")


def builtin_seeds(run: Run, pending: list[Candidate]) -> list[Candidate]:
    """In a run of another proposer that has tried nothing yet: the builtin proposer's best guess of each template
    family that matches (RunConfig.seeds of them, default one per family; with `pending`, those evaluated first
    anyway, at most the budget less one), new to `pending`, to evaluate first, so that the first proposal has the
    best of them (GenerateRequest.incumbent) to beat. None in a builtin run."""
    config = run.config
    if config.proposer == "builtin" or run.state.tried:
        return []
    wanted = len(run.record.coverage.matched) if config.seeds is None else config.seeds
    n = min(wanted, config.budget - 1 - len(pending))
    if n <= 0:
        return []
    proposed = generate_task(GenerateRequest(problem=run.problem, n=n, proposer="builtin", backend=config.backend,
                                             device=run.state.device, families=config.families,
                                             exclude_ids=[c.id for c in pending]))
    families = ", ".join(c.origin.proposer for c in proposed.candidates)
    print(f"seeds: {len(proposed.candidates)} of the builtin proposer's ({families or proposed.message}) are "
          f"evaluated before the {config.proposer} proposer's first proposal")
    return proposed.candidates


def ask_proposer(run: Run, req: GenerateRequest) -> list[Candidate]:
    """One proposal: its LLM calls recorded and charged to the run's budget; raises StopSearch when the proposer
    stops producing candidates."""
    progress.stage_started("generate", req.proposer)
    began = time.monotonic()
    proposed = generate_task(req)
    progress.stage_finished("generate", req.proposer, f"{len(proposed.candidates)} candidates", time.monotonic() - began)
    charge(run, proposed)
    return outcome(run, proposed)


def charge(run: Run, proposed: GenerateResult) -> None:
    """A proposal's LLM calls recorded and charged to the run's budget."""
    run.recorder.llm_calls(proposed.llm_calls)
    run.state.spend_llm(proposed.llm_calls)


def outcome(run: Run, proposed: GenerateResult) -> list[Candidate]:
    """A charged proposal's candidates; raises StopSearch when the proposer stops producing candidates."""
    barren = run.state.proposed(len(proposed.candidates))
    if proposed.candidates:
        return proposed.candidates
    if not proposed.llm_calls or barren >= MAX_BARREN:  # nothing to ask (no family, no model), or no code again
        raise StopSearch(f"proposer {run.config.proposer!r} gave no candidate: {proposed.message}")
    print(f"proposal gave no candidate ({barren} in a row): {proposed.message}")
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
    root, mode = str(run.recorder.store.root), run.steps.mode
    progress.stage_started("generate", f"{len(requests)} proposals")
    began = time.monotonic()
    with runner:
        generating: dict[PrefectFuture[GenerateResult], int] = {
            runner.submit(generate_task, {"req": req}): i for i, req in enumerate(requests)}
        compiling: dict[str, PrefectFuture[CompileResult]] = {}
        for done in as_completed(list(generating)):
            proposed = results[generating[done]] = done.result()
            for candidate in proposed.candidates:
                if candidate.id not in compiling:
                    req = CompileRequest(candidate=candidate, problem=run.problem,
                                         **run.steps.fields(candidate.id, "compile"))
                    compiling[candidate.id] = runner.submit(stage_task("compile"),
                                                            {"req": req, "mode": mode, "store_root": root})
        for cid, future in compiling.items():
            run.precompiled[cid] = future.result()
    progress.stage_finished("generate", f"{len(requests)} proposals", "ok", time.monotonic() - began)
    return [r for r in results if r is not None]
