"""The optimize flow: a search strategy (flows/search/) over [generate → compile → verify → benchmark (→ profile →
refine when promoted)] under budgets; then the baselines are profiled once. The result is the fastest of the best
candidate, eager and torch.compile by geomean over the timed shapes (the seeds rule, artifacts/winner.py), so not
slower than what the user already has on that measure (a winning candidate may still lose on one shape).

Thin by design: stages do the work, tasks declare resilience, flows/run.py records what happens, strategies
decide what to propose from, the store keeps every artifact. Stop conditions raise StopSearch with their reason
and are caught in one place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from prefect import flow
from prefect.artifacts import create_table_artifact

from kernelflow.artifacts.leaderboard import leaderboard, render
from kernelflow.artifacts.store import Store
from kernelflow.flows.resume import last_best, restore
from kernelflow.flows.run import (
    Run,
    baseline_only,
    checked_run_id,
    evaluate,
    profile_baselines,
    profile_promoted,
)
from kernelflow.flows.search import STRATEGIES
from kernelflow.flows.search.protocol import Budgets, search
from kernelflow.stages.contracts import Backend, Baseline, Device, Policy, SizeSet
from kernelflow.stages.errors import KernelflowError, StopSearch
from kernelflow.stages.executors.run import Mode
from kernelflow.stages.measure.profiling_policy import ProfilingPolicy
from kernelflow.stages.measure.sol_target import floors
from kernelflow.stages.problems import defaults
from kernelflow.stages.problems.kernelbench import load_problem


@flow(name="optimize", log_prints=True)
def optimize(problem_path: str, budget: int = 8, store: str | None = None, device: Device | None = None,
             sizes: SizeSet | None = None, proposer: str = "builtin", backend: Backend | None = None,
             baselines: list[Baseline] | None = None, wall_time_s: float = 3600.0, executor: Mode = "subprocess",
             stage_timeout_s: float = 600.0, seed: int = 0, profile: bool = True, baseline_profiles: bool = True,
             policy: dict | None = None, model: str | None = None, llm_max_tokens: int | None = None,
             llm_max_usd: float | None = None, strategy: str = "greedy", gpu_s_budget: float | None = None,
             resume: str | None = None, warm_start: bool = False, warm_start_from: str | None = None,
             target_sol: float | None = None, run_id: str | None = None) -> dict:
    """One optimize run of the problem at `problem_path`; its summary (run id, best, winner, stop reason).

    `resume`: continue that run from its artifacts (flows/resume.py). `run_id`: the id of the new run (a campaign
    names its entries' runs up front, so it reads back that run's partition alone); if the store already has a run
    of that id (Prefect running the same flow run again after a crash), it is resumed instead, so nothing is
    recorded twice. Without either, the run gets a fresh id."""
    if strategy not in STRATEGIES:
        raise KernelflowError(f"unknown strategy {strategy!r}; known: {sorted(STRATEGIES)}")
    if run_id is not None:
        checked_run_id(run_id)
        if resume is not None and resume != run_id:
            raise KernelflowError(f"run_id {run_id!r} and resume {resume!r} name different runs; give one")
    problem = load_problem(problem_path)
    if policy:  # a campaign's policy overrides the problem's for every stage (Policy's fields, e.g. allow_tf32)
        problem = problem.model_copy(update={"policy": Policy(**{**problem.policy.model_dump(), **policy})})
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if executor == "inline" and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise KernelflowError("the inline executor on CPU runs Triton in this process, which needs TRITON_INTERPRET=1 "
                              "set before it starts (Triton reads it at import); use the subprocess executor, or set it")
    if device == "cpu":
        print("No GPU in use: candidates run on CPU (Triton through its interpreter); CPU timings are labelled "
              "as such and never compared with GPU numbers.")
    sizes = sizes or defaults.timed_sizes(problem, device)
    baselines = baselines if baselines is not None else defaults.baselines(device)
    profiling = ProfilingPolicy(enabled=profile, baselines=baseline_profiles)
    where = Store(store)
    if run_id is not None and resume is None and begun(where, run_id):
        print(f"run {run_id} is already in the store (this flow run ran before): resuming it")
        resume = run_id
    if resume is not None:  # named either way, a run of this problem
        resumable(where, checked_run_id(resume), problem.id)
    run = Run(problem, where, device, sizes, budget, proposer, profiling, llm_max_tokens, llm_max_usd,
              backend, seed, model, executor, baselines, stage_timeout_s, resume, run_id)
    if target_sol is not None:  # the floors of the timed shapes on this GPU, or a clear refusal
        run.sol_floors = floors(problem, sizes, torch.cuda.get_device_name() if device == "cuda" else None)
    pending, saved = restore(run) if resume else ([], None)
    if saved is not None and saved.strategy != strategy:
        print(f"resuming with the run's own strategy {saved.strategy!r}, not {strategy!r}")
        strategy = saved.strategy
    chosen = STRATEGIES[strategy]
    state = json.loads(saved.state_json) if saved is not None else {}
    strategist = chosen.from_state(state) if saved is not None else chosen()
    # warm_start_from: a run id (a campaign starts from its previous campaign's run of this problem)
    seed_candidate = last_best(run.store, problem, warm_start_from) if warm_start or warm_start_from else None
    if seed_candidate is not None and seed_candidate.id not in run.candidates:
        print(f"warm start: the best of {warm_start_from or 'the last run'}, {seed_candidate.id}, is evaluated first")
        pending.insert(0, seed_candidate)
    print(f"run {run.id}: {problem.id} on {device} ({sizes} shapes), {strategy}, budget {budget}, "
          f"store {run.store.location}" + (f"; resumed with {len(run.tried)} candidates, {len(pending)} "
                                           "unfinished" if resume else ""))
    try:
        search(run, strategist, Budgets(budget, wall_time_s, gpu_s_budget, target_sol), lambda c: evaluate(run, c),
               lambda c: profile_promoted(run, c, executor, stage_timeout_s), pending)
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
    return {"run_id": run.id, "store": run.store.location, "best_candidate_id": run.record.best_candidate_id,
            "best_speedup_vs_eager": run.record.best_speedup_vs_eager, "stop_reason": run.record.stop_reason,
            "winner": run.record.winner, "winner_speedup_vs_eager": run.record.winner_speedup_vs_eager,
            "winner_note": run.record.winner_note}


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


def main(problem_path: str, **kwargs) -> dict:
    return optimize(str(Path(problem_path).resolve()), **kwargs)
