"""The agents strategy (flows/search/agents.py): the guard's verdicts, turns and rests, the shared memory, REVERT,
the plateau's redraft, STOP, its state as JSON; unit tests on a run's search state alone (end to end:
tests/flows/test_flow.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelflow.flows.config import RunConfig
from kernelflow.flows.search import strategy_class
from kernelflow.flows.search.agents import Agent, Agents, Board, guard, roster
from kernelflow.flows.search.protocol import Expansion
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import Candidate, FailureKind, Origin, Policy
from kernelflow.stages.problems.kernelbench import load_problem

FOUR = ["fusion", "tiling_tensor_cores", "memory_layout", "library_configuration"]


PROBLEM = load_problem(Path(__file__).resolve().parents[2] / "problems" / "09_silu.py")


def new_state(dtype: str = "float32", allow_tf32: bool = False) -> SearchState:
    """A run's search state, with no store, Prefect or stage behind it: what a strategy reads and changes."""
    problem = PROBLEM.model_copy(update={"dtype": dtype, "policy": Policy(allow_tf32=allow_tf32)})
    return SearchState(problem, RunConfig(device="cpu"))


def step(agents: Agents, run: Any, speedup: float | None = None, failed: FailureKind | None = None,
         family: str = "rowwise") -> tuple[Expansion, Candidate, str]:
    """One turn of flows/search/protocol.py's loop: select, a proposal, its evaluation, update; and whose turn."""
    expansion = agents.select(run)
    who, parent = agents.board.pending or "", expansion.parent
    candidate = Candidate.make("p", "triton", f"# candidate {len(run.tried)}", Origin(
        kind="builtin", proposer=family, params={"i": len(run.tried)}), parent_id=parent.id if parent else None)
    run.consider(candidate)
    if failed is not None:
        run.reject(candidate.id, "compile", failed, "no")
    elif speedup is not None:
        run.speedups[candidate.id] = speedup
    agents.update(run, candidate, None if failed else speedup)
    return expansion, candidate, who


def test_registered_and_roster():
    assert strategy_class("agents") is Agents and Agents.NAME == "agents"
    assert roster(new_state().problem) == FOUR
    assert roster(new_state("float16").problem)[-1] == roster(new_state(allow_tf32=True).problem)[-1] == "precision"


def test_guard_verdicts():
    c = Candidate.make("p", "triton", "# x", Origin(kind="builtin", proposer="rowwise"))
    board = Board(agents=[Agent(name="fusion"), Agent(name="memory_layout")], best_id="b", best_speedup=1.2)
    assert [guard(board, c, s, "fusion") for s in (None, 1.5, 1.1)] == ["REJECT", "ACCEPT", "KEEP"]
    board.agents[0].streak = 2  # revert_after 3: this is the third non-improving result
    assert guard(board, c, 1.1, "fusion") == guard(board, c, None, "fusion") == "REVERT"
    for agent in board.agents:
        agent.since_improved = 4
    assert guard(board, c, 1.1, "fusion") == "REVERT"  # every agent plateaued, but no redraft tried yet
    board.redrafted = True
    assert guard(board, c, 1.1, "fusion") == "STOP" and guard(board, c, 1.3, "fusion") == "ACCEPT"


def test_round_robin_and_resting():
    agents, run = Agents(revert_after=99, plateau=99), new_state()
    turns = [step(agents, run, None if i % 4 == 0 else 1.0 + i / 100, "compile_error" if i % 4 == 0 else None)[2]
             for i in range(8)]
    assert turns == FOUR + FOUR  # fusion's two proposals gave nothing: it rests for its next 2 turns
    assert [step(agents, run, 1.0)[2] for _ in range(7)] == FOUR[1:] + FOUR[1:] + FOUR[:1]
    agents.select(run)  # a proposal that gave no candidate counts as nothing too
    agents.select(run)
    assert agents.board.agent("tiling_tensor_cores").empty == 1


def test_shared_memory_holds_verified_conclusions_only_windowed():
    agents, run = Agents(memory_size=3), new_state()
    step(agents, run, 1.2)
    step(agents, run, failed="compile_error")
    assert agents.board.memory == ["fusion: rowwise {i: 0}: 1.20x eager (fresh start)"]
    for speedup in (1.3, 1.4, 1.5, 1.6):
        step(agents, run, speedup)
    assert len(agents.board.memory) == 3 and agents.board.memory[-1].endswith("1.50x -> 1.60x eager (helped)")
    agents.select(run)
    assert run.lessons[0].startswith("Focus (") and "Leaderboard: 1) 1.60x" in run.lessons[0]
    assert run.lessons[1:] == agents.board.memory


def test_an_agent_refines_its_lineage_and_revert_resets_it_to_the_global_best():
    agents, run = Agents(revert_after=2, plateau=99), new_state()
    _, own, _ = step(agents, run, 1.5)  # fusion
    _, best, _ = step(agents, run, 2.0)  # tiling: the global best
    step(agents, run, 1.0), step(agents, run, 1.0)
    expansion, _, who = step(agents, run, 1.4)
    assert who == "fusion" and expansion.parent == own and agents.board.verdicts[-1].endswith("KEEP")
    for _ in range(3):
        step(agents, run, 1.0)
    expansion, _, who = step(agents, run, 1.3)
    assert who == "fusion" and expansion.parent == own and agents.board.verdicts[-1].endswith("fusion REVERT")
    for _ in range(3):
        step(agents, run, 1.0)
    expansion, _, who = step(agents, run, 1.0)
    assert who == "fusion" and expansion.parent == best


def test_plateau_triggers_a_redraft_then_stop():
    agents, run = Agents(plateau=2, revert_after=99), new_state()
    for speedup in (1.5, 1.0, 1.0):
        step(agents, run, speedup)
    expansion, _, _ = step(agents, run, 1.0)
    assert expansion.parent is None and expansion.seed not in (None, run.config.seed + 3) and agents.board.redrafted
    assert run.lessons[0].startswith("Redraft") and agents.stop(run) is None
    while agents.stop(run) is None and len(run.tried) < 20:
        step(agents, run, 1.0)
    assert "every agent plateaued" in (agents.stop(run) or "") and agents.board.verdicts[-1].endswith("STOP")


def test_state_round_trips_through_json():
    agents, run = Agents(plateau=3), new_state()
    for speedup, failed in ((1.2, None), (None, "mismatch"), (1.4, None), (1.1, None), (1.0, None)):
        step(agents, run, speedup, failed)
    restored = Agents.from_state(json.loads(json.dumps(agents.state())))
    assert restored.state() == agents.state() and restored.board.plateau == 3
    assert restored.select(run) == agents.select(run)
