"""The optimize flow: a search strategy (flows/search/) over [generate → compile → verify → benchmark (→ profile →
refine when promoted)] under the budgets of a RunConfig (flows/config.py); then the baselines are profiled once if
the run's wall-time, the whole run's from the flow's start, allows (flows/run.py after_search). The result is the
fastest of the best candidate, eager and torch.compile by geomean over the timed shapes (the seeds rule,
artifacts/winner.py), so not slower than what the user already has on that measure (a winning candidate may still
lose on one shape).

Thin by design: stages do the work, tasks declare resilience, flows/run.py evaluates and records, strategies decide
what to propose from, the store keeps every artifact. Stop conditions raise StopSearch with their reason and are
caught in one place.
"""

from __future__ import annotations

import json
import os
import time

import torch
from prefect import flow
from prefect.artifacts import create_table_artifact

from kernelflow.artifacts.leaderboard import leaderboard, render_board
from kernelflow.artifacts.store import Store
from kernelflow.flows import progress
from kernelflow.flows.config import RunConfig
from kernelflow.flows.progress import RunFinished, RunStarted
from kernelflow.flows.resume import last_best, restore
from kernelflow.flows.run import (
    Run,
    after_search,
    builtin_seeds,
    checked_run_id,
    evaluate,
    finish,
    new_run_id,
    open_run,
    profile_promoted,
)
from kernelflow.flows.search import strategy_class
from kernelflow.flows.search.protocol import Strategy, search
from kernelflow.flows.tasks import name_flow_run
from kernelflow.stages.contracts import Candidate, Problem
from kernelflow.stages.errors import KernelflowError, StopSearch
from kernelflow.stages.measure.sol_target import floors
from kernelflow.stages.problems.kernelbench import load_problem


@flow(name="optimize", log_prints=True)
def optimize(problem_path: str, config: RunConfig | None = None, run_id: str | None = None,
             resume: str | None = None, warm_start_from: str | None = None) -> dict:
    """One optimize run of the problem at `problem_path` under `config`; its summary (run id, best, winner, stop
    reason).

    `resume`: continue that run from its artifacts (flows/resume.py). `run_id`: the id of the new run (a campaign
    names its entries' runs up front, so it reads back that run's partition alone); if the store already has a run
    of that id (Prefect running the same flow run again after a crash), it is resumed instead, so nothing is
    recorded twice. Without either, the run gets a fresh id. `warm_start_from`: the run whose best candidate is
    evaluated first (a campaign's previous run of this entry). The run's wall-time (RunConfig.wall_time_s) counts from
    here: the search stops when it is spent, and what follows the search starts only while it lasts. The flow run is
    named by the run's id."""
    started, config = time.monotonic(), config or RunConfig()
    problem = load_problem(problem_path)
    if config.policy:  # the run's policy overrides the problem's for every stage
        problem = problem.model_copy(update={"policy": config.policy_of(problem.policy)})
    check_inline(config)
    store = Store(config.store)
    run_id, resume = identity(store, problem, run_id, resume)
    name_flow_run(run_id)
    run = open_run(problem, config, store, run_id, resumed=resume is not None, started=started)
    strategy, pending = prepare(run, resume is not None, warm_start_from)
    progress.run_started(RunStarted(run.id, problem.id, run.state.device, strategy.NAME, config.budget,
                                    config.wall_time_s, started, len(run.state.tried)))
    try:
        search(run, strategy, lambda c: evaluate(run, c), lambda c: profile_promoted(run, c), pending)
    except StopSearch as stop:
        print(f"search stopped: {stop.reason}")
        finish(run, "finished", after_search(run, stop.reason))
    except BaseException as e:
        finish(run, "failed", f"{type(e).__name__}: {e}")
        raise
    finally:
        progress.run_finished(RunFinished(run.id, run.record.status, run.record.stop_reason,
                                          run.record.winner_note, time.monotonic() - started))
    board = leaderboard(store, run.id)
    create_table_artifact(key=f"leaderboard-{problem.id.lower().replace('_', '-')}",
                          table=board.astype(str).to_dict("records"), description=f"run {run.id}")
    print(f"stopped: {run.record.stop_reason}\n{render_board(board)}\n{run.record.winner_note}")
    return {"run_id": run.id, "store": store.location, "best_candidate_id": run.record.best_candidate_id,
            "best_speedup_vs_eager": run.record.best_speedup_vs_eager, "stop_reason": run.record.stop_reason,
            "winner": run.record.winner, "winner_speedup_vs_eager": run.record.winner_speedup_vs_eager,
            "winner_note": run.record.winner_note}


def identity(store: Store, problem: Problem, run_id: str | None, resume: str | None) -> tuple[str, str | None]:
    """(the run's id, the id of the run resumed or None): a named run already in the store is resumed; a resumed run
    must be one of this problem."""
    if run_id is not None:
        checked_run_id(run_id)
        if resume is not None and resume != run_id:
            raise KernelflowError(f"run_id {run_id!r} and resume {resume!r} name different runs; give one")
        if resume is None and begun(store, run_id):
            print(f"run {run_id} is already in the store (this flow run ran before): resuming it")
            resume = run_id
    if resume is not None:
        resumable(store, checked_run_id(resume), problem.id)
    return resume or run_id or new_run_id(problem.id), resume


def check_inline(config: RunConfig) -> None:
    """The inline executor on CPU runs Triton in this process: only with its interpreter on from the start."""
    if config.executor == "inline" and config.device_here() == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise KernelflowError("the inline executor on CPU runs Triton in this process, which needs TRITON_INTERPRET=1 "
                              "set before it starts (Triton reads it at import); use the subprocess executor, or set it")


def prepare(run: Run, resumed: bool, warm_start_from: str | None) -> tuple[Strategy, list[Candidate]]:
    """The strategy (a resumed run's own, from its saved state) and the candidates to evaluate first: a resumed
    run's unfinished ones, a warm start's seed, and in a fresh run of another proposer the builtin proposer's seeds."""
    state, config = run.state, run.config
    if state.device == "cpu":
        print("No GPU in use: candidates run on CPU (Triton through its interpreter); CPU timings are labelled "
              "as such and never compared with GPU numbers.")
    if config.target_sol is not None:  # the floors of the timed shapes on this GPU, or a clear refusal
        state.sol_floors = floors(run.problem, state.sizes,
                                  torch.cuda.get_device_name() if state.device == "cuda" else None)
    pending, saved = restore(run) if resumed else ([], None)
    name: str = config.strategy
    if saved is not None and saved.strategy != name:
        print(f"resuming with the run's own strategy {saved.strategy!r}, not {name!r}")
        name = saved.strategy
    chosen = strategy_class(name)
    strategy = chosen.from_state(json.loads(saved.state_json)) if saved is not None else chosen()
    seed = last_best(run.recorder.store, run.problem, warm_start_from) \
        if config.warm_start or warm_start_from else None
    if seed is not None and seed.id not in state.candidates:
        print(f"warm start: the best of {warm_start_from or 'the last run'}, {seed.id}, is evaluated first")
        pending.insert(0, seed)
    pending += builtin_seeds(run, pending)
    print(f"run {run.id}: {run.problem.id} on {state.device} ({state.sizes} shapes), {name}, budget {config.budget}, "
          f"store {run.recorder.store.location}" + (f"; resumed with {len(state.tried)} candidates, {len(pending)} "
                                                    "unfinished" if resumed else ""))
    return strategy, pending


def begun(store: Store, run_id: str) -> bool:
    """Whether run `run_id` wrote anything a new run would write again: its problem row (written first) or a runs
    row. Its own partitions only."""
    return any(not store.read(table, run_id).empty for table in ("problems", "runs"))


def resumable(store: Store, run_id: str, problem_id: str) -> None:
    """A KernelflowError unless the store has run `run_id` of this problem: a mistyped or foreign id would otherwise
    start an empty run under that id, or mix two problems' candidates in one run."""
    recorded = store.read("problems", run_id)
    if recorded.empty:
        raise KernelflowError(f"resume: no run {run_id!r} in store {store.location}")
    if problem_id not in set(recorded.id):
        raise KernelflowError(f"resume: run {run_id!r} is of problem {', '.join(sorted(set(recorded.id)))}, "
                              f"not {problem_id!r}")
