"""Strategy-specialized agents taking turns, with a shared memory and a deterministic guard.

Agents (FOCUS: fusion, tiling_tensor_cores, memory_layout, library_configuration, and precision when the problem's
policy allows TF32 or its dtype is half) take turns, round robin; an agent whose last `skip_after` proposals gave
nothing verified (no candidate, or a rejected one) rests for `rest_turns` of its turns. An agent's focus shapes
its request three ways:
- its parent: a repair of its own latest candidate when `repairable` allows, else the best verified candidate of
  its own lineage (the candidates it proposed), else the best verified candidate of one of its focus families, else
  the global best, else nothing (a fresh start);
- its hint, put first into the run's lessons (which request() hands to the proposer): the focus, and a read-only
  leaderboard (the top 3 by speedup). The llm proposer shows it to the model (prompts/optimize.j2);
- the shared memory after the hint: verified conclusions only (mcts.lesson: what helped / hurt, from verified
  results), tagged with the agent that found them, the last `memory_size`.
What the builtin proposer can do with a focus: it ignores lessons and hints. It sees only the parent and the seed:
a parent of a focus family makes that family's variants nearest the parent (and the parent's profile actions)
the family's candidates, but the builtin still gives the other families' untried best guesses their turns first,
so a focus biases the builtin's order, never restricts it; a seed only rotates its (family, variant) order.
After every evaluation the guard (a pure function) gives one verdict, recorded (printed and kept in the state):
ACCEPT (verified, faster than the global best) > STOP (every agent plateaued: no global improvement in its last
`plateau` results, and a redraft was tried since the last improvement) > REVERT (the agent's `revert_after`-th
non-improving result in a row: its lineage restarts from the global best) > REJECT (failed) > KEEP (verified, not
faster). When the whole search plateaus (`plateau` evaluations without global improvement) the next proposal is a
redraft: parent None, a seed of its own (the builtin rotates to another untried family / variant), and a hint
asking the LLM for another design, backend or layout.
Rounds (flows/search/protocol.py's round_): the agents propose in rounds, once around the roster. In the flow
thread, every agent not resting gets its request built, one after another (parent, hint, memory, seed; no more
requests than the candidate budget left, and the LLM budget left split evenly among them); then the round's
generate calls and the compile of each candidate as soon as its proposal is back run at once, as Prefect tasks on
a thread pool (flows/state.py's propose_round; compiles are processes of their own, so they truly overlap). Nothing
else is concurrent: back in the flow thread, in agent order, each proposal's LLM calls are recorded and charged,
and its candidates are recorded, verified and benchmarked one at a time (the GPU part), the guard and the memory
told, the state saved, so the result does not depend on which call finished first. The round's proposals are saved
with the state before the first is evaluated (SearchSnapshot.round), so a run killed mid-round resumes them, each for its
agent, without asking again. What a round cannot do: an agent does not see the results of the agents before it in the
same round (a serial turn would).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field

from kernelflow.flows.run import Run
from kernelflow.flows.search.mcts import lesson
from kernelflow.flows.search.protocol import Expansion, Turn, repairable, request
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import Candidate, Contract, Problem

Verdict = Literal["REJECT", "KEEP", "ACCEPT", "REVERT", "STOP"]
REDRAFT_STRIDE = 7919  # a redraft's seed offset: far from the seeds of ordinary proposals


class Focus(Contract):
    hint: str = Field(description="what the agent asks the proposer for, first in the request's lessons")
    families: list[str] = Field(description="builtin template families it prefers a parent from")


FOCUS: dict[str, Focus] = {
    "fusion": Focus(hint="fuse producers and consumers into one kernel; keep intermediates in registers",
                    families=["elementwise", "rowwise", "scan", "attention"]),
    "tiling_tensor_cores": Focus(hint="tile for the tensor cores: block shapes, warps, stages, mma-friendly layouts",
                                 families=["matmul", "attention"]),
    "memory_layout": Focus(hint="coalesce loads and stores, vectorize, read each byte once, pick the layout",
                           families=["rowwise", "scan", "loss", "elementwise"]),
    "library_configuration": Focus(hint="let the vendor library do the product; fuse the epilogue around it",
                                   families=["library_epilogue"]),
    "precision": Focus(hint="use the precision the policy allows (TF32, half inputs, fp32 accumulation)",
                       families=["matmul", "library_epilogue"]),
}
REDRAFT = ("Redraft: the search has plateaued; propose a different design (another algorithm, backend or data "
           "layout), not a variant of the leaders")


def roster(problem: Problem) -> list[str]:
    """The agents for a problem: precision only when the policy allows TF32 or the dtype is half."""
    half = problem.dtype in ("float16", "bfloat16", "half")
    return [name for name in FOCUS if name != "precision" or problem.policy.allow_tf32 or half]


class Agent(Contract):
    name: str = Field(description="its FOCUS key")
    lineage_best: str | None = Field(default=None, description="its lineage's best verified candidate (its parent)")
    lineage_speedup: float | None = Field(default=None, description="that candidate's speedup over eager")
    last: str | None = Field(default=None, description="its latest candidate, repaired when it failed repairably")
    streak: int = Field(default=0, description="its non-improving results in a row (REVERT at revert_after)")
    since_improved: int = Field(default=0, description="its results since it last improved the global best")
    empty: int = Field(default=0, description="its proposals in a row that gave nothing verified")
    rest: int = Field(default=0, description="its turns left to skip")


class Board(Contract):
    """The agents, the shared memory, the global best and the verdicts, as JSON-able data."""

    revert_after: int = Field(default=3, description="R: non-improving results in a row before a REVERT")
    plateau: int = Field(default=4, description="P: evaluations without improvement that make a plateau")
    skip_after: int = Field(default=2, description="K: proposals in a row that gave nothing before a rest")
    rest_turns: int = Field(default=2, description="turns an agent that gave nothing is skipped")
    memory_size: int = Field(default=8, description="M: the shared memory's retention window")
    agents: list[Agent] = Field(default_factory=list, description="in turn order; empty until the first select")
    cursor: int = Field(default=0, description="the index of the agent whose turn comes next")
    pending: str | None = Field(default=None, description="the agent whose proposal is awaited")
    pending_redraft: bool = Field(default=False, description="the awaited proposal is a redraft")
    best_id: str | None = Field(default=None, description="the global best verified candidate")
    best_speedup: float | None = Field(default=None, description="its speedup over eager")
    stale: int = Field(default=0, description="evaluations since the global best improved (or the last redraft)")
    redrafts: int = Field(default=0, description="redrafts proposed so far")
    redrafted: bool = Field(default=False, description="a redraft was evaluated since the global best improved")
    memory: list[str] = Field(default_factory=list, description="verified conclusions, the last memory_size")
    verdicts: list[str] = Field(default_factory=list, description="'candidate agent VERDICT', oldest first")
    stopped: str | None = Field(default=None, description="the guard's STOP reason")
    redrafting: list[str] = Field(default_factory=list, description="agents whose turn in the round in progress is "
                                  "a redraft (plan sets it, begin reads it; in the state, so a resumed round keeps it)")

    def agent(self, name: str) -> Agent:
        return next(agent for agent in self.agents if agent.name == name)


def guard(board: Board, candidate: Candidate, speedup: float | None, agent: str) -> Verdict:
    """The verdict on one evaluated candidate of `agent`, from the board as it was before this result."""
    if speedup is not None and speedup > 0 and (board.best_speedup is None or speedup > board.best_speedup):
        return "ACCEPT"
    redraft_tried = board.redrafted or board.pending_redraft
    if redraft_tried and all(a.since_improved + (a.name == agent) >= board.plateau for a in board.agents):
        return "STOP"
    if board.agent(agent).streak + 1 >= board.revert_after and board.best_id is not None:
        return "REVERT"
    return "REJECT" if speedup is None or speedup <= 0 else "KEEP"


def standings(state: SearchState, top: int = 3) -> str:
    ranked = sorted(state.speedups.items(), key=lambda item: -item[1])[:top]
    return "; ".join(f"{i}) {s:.2f}x {state.candidates[c].origin.proposer} {c}" for i, (c, s) in enumerate(ranked, 1)
                     if c in state.candidates) or "none verified yet"


class Agents:
    NAME: ClassVar[str] = "agents"

    def __init__(self, revert_after: int = 3, plateau: int = 4, skip_after: int = 2, rest_turns: int = 2,
                 memory_size: int = 8, board: Board | None = None, workers: int | None = None):
        self.board = board if board is not None else Board(
            revert_after=revert_after, plateau=plateau, skip_after=skip_after, rest_turns=rest_turns,
            memory_size=memory_size)
        self.workers = workers  # a round's threads (flows/state.py's propose_round): None, one per call; 1, serial

    def state(self) -> dict[str, Any]:
        return self.board.model_dump(mode="json")

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Agents:
        return cls(board=Board.model_validate(state))

    def select(self, state: SearchState) -> Expansion:
        """One proposal (the one-at-a-time protocol; search uses plan)."""
        board = self._settle(state)
        agent = self._next()
        board.pending = agent.name
        expansion, board.pending_redraft = self._expansion(state, agent)
        return expansion

    def plan(self, run: Run, limit: int) -> list[Turn]:
        """A round: from the agent whose turn it is, once around the roster, a request for every agent not resting
        (a resting agent passed over spends one turn of rest), at most `limit`; when all rest, the one whose turn it
        is. Built here, in the flow thread, one after another: each request carries its agent's lessons, and its
        seed is the one it would get if the earlier ones had each given one candidate."""
        board, turns = self._settle(run.state), list[Turn]()
        start, count = board.cursor % len(board.agents), len(board.agents)
        for i in range(count):
            if len(turns) >= max(limit, 1):
                break
            agent = board.agents[(start + i) % count]
            board.cursor = (start + i + 1) % count
            if agent.rest > 0:
                agent.rest -= 1
                continue
            turns.append(self._turn(run, agent, len(turns)))
        if not turns:
            board.cursor = (start + 1) % count
            turns.append(self._turn(run, board.agents[start], 0))
        return turns

    def begin(self, state: SearchState, who: str) -> None:
        """The candidates of `who`'s turn are evaluated next: theirs is that agent's (a redraft's)."""
        board = self.board
        board.pending, board.pending_redraft = who, who in board.redrafting
        board.redrafting = [name for name in board.redrafting if name != who]

    def end(self, state: SearchState, who: str) -> None:
        """A turn whose proposal gave no candidate counts as nothing verified (as a select with no update does)."""
        self._settle(state)

    def _turn(self, run: Run, agent: Agent, i: int) -> Turn:
        expansion, redraft = self._expansion(run.state, agent)
        if redraft:
            self.board.redrafting.append(agent.name)
        req = request(run, expansion)
        return Turn(agent.name, req if expansion.seed is not None else req.model_copy(update={"seed": req.seed + i}))

    def _expansion(self, state: SearchState, agent: Agent) -> tuple[Expansion, bool]:
        """The agent's proposal (the lessons set to its hint and the memory), and whether it is a redraft."""
        board = self.board
        if board.stale >= board.plateau:  # the whole search plateaued: a fresh draft, a seed of its own
            board.stale, board.redrafts = 0, board.redrafts + 1
            state.teach([f"{REDRAFT}. Leaderboard: {standings(state)}", *board.memory])
            return Expansion(seed=state.config.seed + len(state.tried) + REDRAFT_STRIDE * board.redrafts), True
        state.teach([f"Focus ({agent.name}): {FOCUS[agent.name].hint}. Leaderboard: {standings(state)}",
                     *board.memory])
        last = state.candidates.get(agent.last or "")
        if (failure := repairable(state, last)) is not None:
            return Expansion(parent=last, failure=failure), False
        return Expansion(parent=self._parent(state, agent)), False

    def evaluate(self, run: Run, candidate: Candidate, flat: Callable[[Candidate], float | None]) -> float | None:
        return flat(candidate)

    def update(self, state: SearchState, candidate: Candidate, speedup: float | None) -> None:
        board = self.board
        if not board.agents:  # a candidate evaluated before any selection (a resumed or warm-started run)
            board.agents = [Agent(name=name) for name in roster(state.problem)]
        agent = board.agent(board.pending or board.agents[board.cursor % len(board.agents)].name)
        verdict = guard(board, candidate, speedup, agent.name)
        board.verdicts.append(f"{candidate.id} {agent.name} {verdict}")
        print(f"agents: {agent.name} {candidate.id}: {verdict}")
        redraft, board.pending, board.pending_redraft = board.pending_redraft, None, False
        verified = speedup is not None and speedup > 0
        agent.last, agent.empty = candidate.id, 0 if verified else agent.empty + 1
        if speedup is not None and verified and (agent.lineage_speedup is None or speedup > agent.lineage_speedup):
            agent.lineage_best, agent.lineage_speedup = candidate.id, speedup
        if verdict == "ACCEPT":
            board.best_id, board.best_speedup, board.stale, board.redrafted = candidate.id, speedup, 0, False
            agent.streak = agent.since_improved = 0
        else:
            board.stale, board.redrafted = board.stale + 1, board.redrafted or redraft
            agent.streak, agent.since_improved = agent.streak + 1, agent.since_improved + 1
        if verdict == "REVERT":  # its lineage restarts from the global best
            agent.lineage_best, agent.lineage_speedup, agent.last, agent.streak = (
                board.best_id, board.best_speedup, None, 0)
        if verdict == "STOP":
            board.stopped = f"agents: every agent plateaued ({board.plateau} results without improvement) after " \
                            f"{board.redrafts} redraft(s); best {board.best_speedup or 0:.2f}x eager"
        if agent.empty >= board.skip_after:
            agent.rest, agent.empty = board.rest_turns, 0
        if verified and speedup is not None:
            board.memory = (board.memory + [f"{agent.name}: {lesson(state, candidate, speedup)}"])[-board.memory_size:]

    def stop(self, state: SearchState) -> str | None:
        return self.board.stopped

    def _next(self) -> Agent:
        """The next agent in turn that is not resting (a resting agent passed over spends one turn of rest);
        when all rest, the one whose turn it is."""
        board, start = self.board, self.board.cursor % len(self.board.agents)
        for i in range(len(board.agents)):
            agent = board.agents[(start + i) % len(board.agents)]
            if agent.rest == 0:
                board.cursor = (start + i + 1) % len(board.agents)
                return agent
            agent.rest -= 1
        board.cursor = (start + 1) % len(board.agents)
        return board.agents[start]

    def _parent(self, state: SearchState, agent: Agent) -> Candidate | None:
        """Its lineage's best, else the best verified candidate of a focus family, else the global best."""
        if agent.lineage_best in state.candidates:
            return state.candidates[agent.lineage_best]
        ours = [c for c in state.speedups if c in state.candidates
                and state.candidates[c].origin.proposer in FOCUS[agent.name].families]
        best = max(ours, key=state.speedups.__getitem__, default=self.board.best_id)
        return state.candidates.get(best or "")

    def _settle(self, state: SearchState) -> Board:
        """The roster on the first selection; a selection followed by no update: that proposal gave nothing."""
        board = self.board
        if not board.agents:
            board.agents = [Agent(name=name) for name in roster(state.problem)]
        if board.pending is not None:
            agent = board.agent(board.pending)
            agent.empty, board.pending, board.pending_redraft = agent.empty + 1, None, False
            if agent.empty >= board.skip_after:
                agent.rest, agent.empty = board.rest_turns, 0
        return board
