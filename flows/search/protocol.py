"""The search's one loop and the contract of a strategy (issue 6).

A strategy answers four questions and nothing else: `select` (where the next proposal comes from: a parent to
refine, a failed parent to repair, or nothing: start fresh; and how many children), `evaluate` (how much of the
evaluation a candidate gets: all of it, or rungs of a ladder), `update` (what it learns from one evaluated
candidate) and `stop` (a reason of its own to stop, e.g. a plateau). `search` owns everything the
strategies share: the budgets (candidates, wall time, device seconds, LLM tokens and dollars), proposing (the
request is filled from the run: the parent's profile actions and feedback, its speedup, the lessons), evaluating,
keeping the incumbent and profiling it. StopSearch carries every stop reason to the flow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Protocol, cast, runtime_checkable
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from kernelflow.flows.run import Run, charge, new_best, outcome, propose, propose_round
from kernelflow.stages.contracts import Candidate, Failure, GenerateRequest, Proposal, SearchState
from kernelflow.stages.errors import StopSearch
from kernelflow.stages.proposers import REPAIRS

MAX_REPAIRS = 2  # failed candidates in a row along one lineage before a strategy stops repairing it


@dataclass(frozen=True)
class Budgets:
    candidates: int
    wall_time_s: float
    gpu_s: float | None = None  # device seconds of verify, benchmark and profile calls; None: no limit
    target_sol: float | None = None  # stop once the best is at this share of speed of light (stages/measure/sol_target.py)


@dataclass(frozen=True)
class Expansion:
    parent: Candidate | None = None  # None: propose from scratch
    failure: Failure | None = None  # set: repair the parent
    n: int = 1  # children to ask for
    seed: int | None = None  # the request's seed; None: the run's seed plus the candidates tried so far


class Strategy(Protocol):
    NAME: ClassVar[str]

    def select(self, run: Run) -> Expansion: ...

    def update(self, run: Run, candidate: Candidate, speedup: float | None) -> None: ...

    def stop(self, run: Run) -> str | None: ...

    def state(self) -> dict:
        """What the strategy learned, JSON-able: saved after every evaluation for a resume."""
        ...

    @classmethod
    def from_state(cls, state: dict) -> Strategy: ...

    def evaluate(self, run: Run, candidate: Candidate, flat: Callable[[Candidate], float | None]) -> float | None:
        """The candidate's geomean speedup over eager, or None when rejected (or, for a strategy that evaluates in
        rungs, not kept: pruned, or not faster than the incumbent beyond the noise); `flat` is the full evaluation
        (compile, verify on every shape, standard timing): a strategy that evaluates in rungs calls less."""
        ...


@dataclass(frozen=True)
class Turn:
    """One proposal of a round: who asks (the strategy's own name for it, e.g. an agent) and its request."""
    who: str
    request: GenerateRequest


@runtime_checkable
class Rounds(Strategy, Protocol):
    """A strategy that proposes in rounds (flows/search/agents.py): `plan` builds a round's requests in the flow
    thread, in a fixed order, at most `limit` of them; `begin` and `end` bracket the evaluation of the candidates of
    `who`'s turn, in that order (after a resume too: what they need of the plan is in the state). `workers`: the
    round's thread pool (None: one thread per call; 1: one at a time)."""
    workers: int | None

    def plan(self, run: Run, limit: int) -> list[Turn]: ...

    def begin(self, run: Run, who: str) -> None: ...

    def end(self, run: Run, who: str) -> None: ...


def repair_depth(run: Run, candidate: Candidate) -> int:
    """How many failed ancestors in a row lead to this failed candidate (itself included)."""
    depth, node = 0, cast(Candidate | None, candidate)
    while node is not None and node.id in run.failures:
        depth, node = depth + 1, run.candidates.get(node.parent_id or "")
    return depth


def repairable(run: Run, candidate: Candidate | None) -> Failure | None:
    """The candidate's failure when the run's proposer repairs that kind and the lineage has not failed
    MAX_REPAIRS times in a row; else None."""
    failure = run.failures.get(candidate.id) if candidate else None
    if candidate is None or failure is None or failure.kind not in REPAIRS.get(run.proposer, ()):
        return None
    return failure if repair_depth(run, candidate) < MAX_REPAIRS else None


def request(run: Run, expansion: Expansion) -> GenerateRequest:
    parent, failure = expansion.parent, expansion.failure
    return GenerateRequest(
        problem=run.problem, n=expansion.n, proposer=run.proposer, backend=run.backend, parent=parent,
        parent_failure=failure, actions=run.actions.get(parent.id, []) if parent and not failure else [],
        feedback=run.feedback.get(parent.id, "") if parent else "",
        parent_speedup_vs_eager=run.speedups.get(parent.id) if parent else None, lessons=run.lessons,
        exclude_ids=run.tried, seed=run.seed + len(run.tried) if expansion.seed is None else expansion.seed,
        model=run.model,
        llm_tokens_left=run.llm.tokens_left(), llm_usd_left=run.llm.usd_left())


def spent(run: Run, budgets: Budgets, started: float) -> str | None:
    if len(run.tried) >= budgets.candidates:
        return f"candidate budget of {budgets.candidates} spent"
    if time.monotonic() - started > budgets.wall_time_s:
        return f"wall-time budget of {budgets.wall_time_s:.0f} s spent"
    if budgets.gpu_s is not None and run.gpu_s >= budgets.gpu_s:
        return f"device-time budget of {budgets.gpu_s:.0f} s spent ({run.gpu_s:.0f} s)"
    if budgets.target_sol is not None and (reached := run.best_sol) is not None and reached >= budgets.target_sol:
        return f"target of {budgets.target_sol:.2f} of speed of light reached: the best is at {reached:.2f}"
    return run.llm.exhausted()


def search(run: Run, strategy: Strategy, budgets: Budgets, evaluate_one: Callable[[Candidate], float | None],
           profile_one: Callable[[Candidate], None], pending: list[Candidate] | None = None) -> None:
    """Evaluate `pending` first (a resumed run's unfinished candidates, a warm start's seed), then select, propose,
    evaluate, keep the best, tell the strategy and save its state; raises StopSearch with the reason."""
    started = time.monotonic()
    progress = cast(UUID, create_progress_artifact(0.0, description=f"candidates of {run.id}"))
    for candidate in pending or []:
        consider(run, strategy, candidate, evaluate_one, profile_one, budgets)
    while True:
        if (why := spent(run, budgets, started) or strategy.stop(run)) is not None:
            raise StopSearch(why)
        if isinstance(strategy, Rounds):
            round_(run, strategy, budgets, started, evaluate_one, profile_one, progress)
            continue
        for candidate in propose(run, request(run, strategy.select(run))):
            consider(run, strategy, candidate, evaluate_one, profile_one, budgets)
            update_progress_artifact(progress, 100.0 * len(run.tried) / budgets.candidates)
            if len(run.tried) >= budgets.candidates:
                break


def shares(run: Run, requests: list[GenerateRequest]) -> list[GenerateRequest]:
    """The run's LLM budget left, split evenly among a round's requests (tokens rounded up), so that the round's
    concurrent calls, each stopping once its own share is spent, pass the budget by at most one call each."""
    k, tokens, usd = len(requests), run.llm.tokens_left(), run.llm.usd_left()
    return [req.model_copy(update=dict(llm_tokens_left=None if tokens is None else -(-tokens // k),
                                       llm_usd_left=None if usd is None else usd / k)) for req in requests]


def round_(run: Run, strategy: Rounds, budgets: Budgets, started: float,
           evaluate_one: Callable[[Candidate], float | None], profile_one: Callable[[Candidate], None],
           progress: UUID) -> None:
    """One round of a Rounds strategy: its requests planned (no more than the candidate budget left), proposed and
    compiled at once (proposals), the round saved; then, in the plan's order, each turn's candidates evaluated one
    at a time, told to the strategy and saved, exactly as the one-at-a-time loop would: the result does not depend
    on which call finished first. A resumed run whose round was interrupted (run.round, from the saved state)
    evaluates what is left of it instead, asking for nothing again. Before every turn but the first the budgets and
    the strategy's stop are checked again; a stop there leaves the round's later proposals unevaluated (their LLM
    calls are recorded and charged; their compiles, done, are not recorded; they stay in the saved round)."""
    if not run.round:
        run.round = proposals(run, strategy, budgets)
        save(run, strategy)  # before any evaluation: a crash from here on loses none of the round's proposals
    try:
        for i, turn in enumerate(list(run.round)):
            if i and (why := spent(run, budgets, started) or strategy.stop(run)) is not None:
                raise StopSearch(why)
            strategy.begin(run, turn.who)
            run.lessons = list(turn.lessons)
            candidates = {c.id: c for c in outcome(run, turn.proposed)}
            # A turn leaves the saved round with its last candidate's evaluation (consider saves after it): a
            # resumed turn with nothing left would count as one that gave nothing. One with no candidate at all is
            # over once begun and ended, before the next save.
            if not turn.left:
                run.round.remove(turn)
            while turn.left:
                candidate = candidates[turn.left.pop(0)]
                if not turn.left:
                    run.round.remove(turn)
                consider(run, strategy, candidate, evaluate_one, profile_one, budgets)
                update_progress_artifact(progress, 100.0 * len(run.tried) / budgets.candidates)
                if len(run.tried) >= budgets.candidates:
                    break
            strategy.end(run, turn.who)
    finally:
        run.precompiled.clear()  # a stopped round's compiles: never recorded


def proposals(run: Run, strategy: Rounds, budgets: Budgets) -> list[Proposal]:
    """A round's turns planned, their generate calls and compiles run at once (propose_round), charged, in the
    plan's order. A candidate proposed twice in a round is evaluated once, for the first turn that proposed it."""
    turns = strategy.plan(run, budgets.candidates - len(run.tried))
    requests = shares(run, [turn.request for turn in turns])
    planned, seen = list[Proposal](), set[str]()
    for turn, proposed in zip(turns, propose_round(run, requests, strategy.workers), strict=True):
        charge(run, proposed)
        left = []
        for candidate in proposed.candidates:
            if candidate.id in seen:
                print(f"{turn.who}: {candidate.id} was proposed earlier this round; evaluated once")
                continue
            seen.add(candidate.id)
            left.append(candidate.id)
        planned.append(Proposal(who=turn.who, lessons=turn.request.lessons, proposed=proposed, left=left))
    return planned


def consider(run: Run, strategy: Strategy, candidate: Candidate, evaluate_one: Callable[[Candidate], float | None],
             profile_one: Callable[[Candidate], None], budgets: Budgets) -> None:
    """One candidate: evaluated as the strategy says, kept if best (and profiled), the strategy told, its state
    saved (search_state table) so an interrupted run resumes from here."""
    if candidate.id not in run.candidates:
        run.tried.append(candidate.id)
        run.candidates[candidate.id] = candidate
    speedup = strategy.evaluate(run, candidate, evaluate_one)
    print(f"[{len(run.tried)}/{budgets.candidates}] {candidate.id} {candidate.origin.proposer} "
          f"{candidate.origin.params}: " + (f"verified, {speedup:.3f}x eager" if speedup else
                                            "rejected or not kept (see leaderboard)"))
    if speedup and (run.best is None or speedup > run.best[0]):
        new_best(run, candidate, speedup)
        profile_one(candidate)
    strategy.update(run, candidate, speedup)
    save(run, strategy)


def save(run: Run, strategy: Strategy) -> None:
    """The search's state as a row of the search_state table: the strategy's, the lessons, the round in progress."""
    run.store.append("search_state", run.id, [SearchState(
        strategy=strategy.NAME, n_tried=len(run.tried), state_json=json.dumps(strategy.state(), default=str),
        lessons=run.lessons, round=run.round, updated_at=datetime.now(UTC).isoformat(timespec="seconds"))])
