"""The search's one loop and the contract of a strategy.

A strategy answers four questions and nothing else: `select` (where the next proposal comes from: a parent to
refine, a failed parent to repair, or nothing: start fresh; and how many children), `evaluate` (how much of the
evaluation a candidate gets: all of it, or rungs of a ladder), `update` (what it learns from one evaluated
candidate) and `stop` (a reason of its own to stop, e.g. a plateau). `search` owns everything the
strategies share: the budgets (candidates, the run's wall time, device seconds, LLM tokens and dollars), proposing (the
request is filled from the run: the parent's profile actions and feedback, its speedup, the lessons), evaluating,
keeping the incumbent and profiling it. StopSearch carries every stop reason to the flow. Strategies read the run's
search state (flows/state.py) and change it through its methods; `evaluate` gets the run, whose steps a ladder calls.
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

from kernelflow.flows import progress
from kernelflow.flows.run import Run, ask_proposer, charge, outcome, propose_round
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import Candidate, Failure, GenerateRequest, Proposal, SearchSnapshot
from kernelflow.stages.errors import StopSearch
from kernelflow.stages.proposers import REPAIRS

MAX_REPAIRS = 2  # failed candidates in a row along one lineage before a strategy stops repairing it


@dataclass(frozen=True)
class Expansion:
    parent: Candidate | None = None  # None: propose from scratch
    failure: Failure | None = None  # set: repair the parent
    n: int = 1  # children to ask for
    seed: int | None = None  # the request's seed; None: the run's seed plus the candidates tried so far


class Strategy(Protocol):
    NAME: ClassVar[str]

    def select(self, state: SearchState) -> Expansion: ...

    def update(self, state: SearchState, candidate: Candidate, speedup: float | None) -> None: ...

    def stop(self, state: SearchState) -> str | None: ...

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

    def begin(self, state: SearchState, who: str) -> None: ...

    def end(self, state: SearchState, who: str) -> None: ...


def repair_depth(state: SearchState, candidate: Candidate) -> int:
    """How many failed ancestors in a row lead to this failed candidate (itself included)."""
    depth, node = 0, cast(Candidate | None, candidate)
    while node is not None and node.id in state.failures:
        depth, node = depth + 1, state.candidates.get(node.parent_id or "")
    return depth


def repairable(state: SearchState, candidate: Candidate | None) -> Failure | None:
    """The candidate's failure when the run's proposer made it (a seed of the builtin proposer in an llm run is
    evaluated as it is), repairs that kind, and the lineage has not failed MAX_REPAIRS times in a row; else None."""
    failure = state.failures.get(candidate.id) if candidate else None
    if candidate is None or failure is None or failure.kind not in REPAIRS.get(state.config.proposer, ()):
        return None
    if candidate.origin.kind in ("builtin", "llm") and candidate.origin.kind != state.config.proposer:
        return None
    return failure if repair_depth(state, candidate) < MAX_REPAIRS else None


def request(run: Run, expansion: Expansion) -> GenerateRequest:
    """The generate request of an expansion, filled from the run: the parent's actions, feedback and speedup, the
    incumbent (the best verified so far, with its times and profile), the lessons, the candidates tried, the LLM
    budget left."""
    state, config = run.state, run.config
    parent, failure = expansion.parent, expansion.failure
    return GenerateRequest(
        problem=state.problem, n=expansion.n, proposer=config.proposer, backend=config.backend,
        device=state.device, families=config.families, parent=parent,
        parent_failure=failure, actions=state.actions.get(parent.id, []) if parent and not failure else [],
        feedback=state.feedback.get(parent.id, "") if parent else "",
        parent_speedup_vs_eager=state.speedups.get(parent.id) if parent else None, incumbent=state.incumbent(),
        lessons=state.lessons,
        exclude_ids=state.tried, seed=config.seed + len(state.tried) if expansion.seed is None else expansion.seed,
        model=config.llm.model, llm_tokens_left=state.llm.tokens_left(), llm_usd_left=state.llm.usd_left(),
        api_key=run.api_key)


def spent(state: SearchState) -> str | None:
    """Which budget of the run's configuration is spent, if any; the wall-time on the run's own clock (it started
    with the run, not with the search)."""
    config = state.config
    if len(state.tried) >= config.budget:
        return f"candidate budget of {config.budget} spent"
    if (late := state.no_room()) is not None:
        return late
    if config.gpu_seconds is not None and state.gpu_s >= config.gpu_seconds:
        return f"device-time budget of {config.gpu_seconds:.0f} s spent ({state.gpu_s:.0f} s)"
    if config.target_sol is not None and (reached := state.best_sol) is not None and reached >= config.target_sol:
        return f"target of {config.target_sol:.2f} of speed of light reached: the best is at {reached:.2f}"
    return state.llm.exhausted()


def search(run: Run, strategy: Strategy, evaluate_one: Callable[[Candidate], float | None],
           profile_one: Callable[[Candidate], None], pending: list[Candidate] | None = None) -> None:
    """Evaluate `pending` first (a resumed run's unfinished candidates, a warm start's seed, seeds), each only while
    the run's wall-time lasts, then select, propose, evaluate, keep the best, tell the strategy and save its state;
    raises StopSearch with the reason. Budgets are checked between candidates: one begun in time is evaluated to its
    end, so none begins once the wall-time left is shorter than the slowest candidate so far took."""
    state = run.state
    progress = cast(UUID, create_progress_artifact(0.0, description=f"candidates of {run.id}"))
    for candidate in pending or []:
        if (late := state.no_room()) is not None:
            raise StopSearch(late)
        consider(run, strategy, candidate, evaluate_one, profile_one)
    while True:
        if (why := spent(state) or strategy.stop(state)) is not None:
            raise StopSearch(why)
        if isinstance(strategy, Rounds):
            round_(run, strategy, evaluate_one, profile_one, progress)
            continue
        for candidate in ask_proposer(run, request(run, strategy.select(state))):
            consider(run, strategy, candidate, evaluate_one, profile_one)
            update_progress_artifact(progress, 100.0 * len(state.tried) / run.config.budget)
            if len(state.tried) >= run.config.budget:
                break


def shares(state: SearchState, requests: list[GenerateRequest]) -> list[GenerateRequest]:
    """The run's LLM budget left, split evenly among a round's requests (tokens rounded up), so that the round's
    concurrent calls, each stopping once its own share is spent, pass the budget by at most one call each."""
    k, tokens, usd = len(requests), state.llm.tokens_left(), state.llm.usd_left()
    return [req.model_copy(update=dict(llm_tokens_left=None if tokens is None else -(-tokens // k),
                                       llm_usd_left=None if usd is None else usd / k)) for req in requests]


def round_(run: Run, strategy: Rounds, evaluate_one: Callable[[Candidate], float | None],
           profile_one: Callable[[Candidate], None], progress: UUID) -> None:
    """One round of a Rounds strategy: its requests planned (no more than the candidate budget left), proposed and
    compiled at once (proposals), the round saved; then, in the plan's order, each turn's candidates evaluated one
    at a time, told to the strategy and saved, exactly as the one-at-a-time loop would: the result does not depend
    on which call finished first. A resumed run whose round was interrupted (state.round, from the saved state)
    evaluates what is left of it instead, asking for nothing again. Before every turn but the first the budgets and
    the strategy's stop are checked again; a stop there leaves the round's later proposals unevaluated (their LLM
    calls are recorded and charged; their compiles, done, are not recorded; they stay in the saved round)."""
    state, budget = run.state, run.config.budget
    if not state.round:
        state.plan_round(proposals(run, strategy))
        save(run, strategy)  # before any evaluation: a crash from here on loses none of the round's proposals
    try:
        for i, turn in enumerate(list(state.round)):
            if i and (why := spent(state) or strategy.stop(state)) is not None:
                raise StopSearch(why)
            strategy.begin(state, turn.who)
            state.teach(turn.lessons)
            candidates = {c.id: c for c in outcome(run, turn.proposed)}
            # A turn leaves the saved round with its last candidate's evaluation (consider saves after it): a
            # resumed turn with nothing left would count as one that gave nothing. One with no candidate at all is
            # over once begun and ended, before the next save.
            if not turn.left:
                state.turn_done(turn)
            while turn.left:
                candidate = candidates[turn.left.pop(0)]
                if not turn.left:
                    state.turn_done(turn)
                consider(run, strategy, candidate, evaluate_one, profile_one)
                update_progress_artifact(progress, 100.0 * len(state.tried) / budget)
                if len(state.tried) >= budget:
                    break
            strategy.end(state, turn.who)
    finally:
        run.precompiled.clear()  # a stopped round's compiles: never recorded


def proposals(run: Run, strategy: Rounds) -> list[Proposal]:
    """A round's turns planned, their generate calls and compiles run at once (propose_round), charged, in the
    plan's order. A candidate proposed twice in a round is evaluated once, for the first turn that proposed it."""
    turns = strategy.plan(run, run.config.budget - len(run.state.tried))
    requests = shares(run.state, [turn.request for turn in turns])
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
             profile_one: Callable[[Candidate], None]) -> None:
    """One candidate: evaluated as the strategy says, kept if best (and profiled), the strategy told, its state
    saved (search_state table) so an interrupted run resumes from here."""
    state = run.state
    state.consider(candidate)
    progress.candidate_started(state, candidate)
    began = time.monotonic()
    speedup = strategy.evaluate(run, candidate, evaluate_one)
    state.evaluated(time.monotonic() - began)
    progress.candidate_finished(state, candidate, speedup, time.monotonic() - began, time.monotonic() - state.started)
    if speedup and (state.best is None or speedup > state.best[0]):
        state.crown(candidate, speedup)
        profile_one(candidate)
    strategy.update(state, candidate, speedup)
    save(run, strategy)


def save(run: Run, strategy: Strategy) -> None:
    """The search's state as a row of the search_state table: the strategy's, the lessons, the round in progress."""
    state = run.state
    run.recorder.snapshot(SearchSnapshot(
        strategy=strategy.NAME, n_tried=len(state.tried), state_json=json.dumps(strategy.state(), default=str),
        lessons=state.lessons, round=state.round, updated_at=datetime.now(UTC).isoformat(timespec="seconds")))
