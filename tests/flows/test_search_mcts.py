"""The mcts strategy (flows/search/mcts.py): UCT, progressive widening, asymmetric branching, pruning, root
re-expansion on stagnation, lessons and its state as JSON; unit tests on a run's search state alone (end to end:
tests/flows/test_flow.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, get_args

from kernelflow.flows.config import RunConfig, StrategyName
from kernelflow.flows.search import STRATEGIES, strategy_class
from kernelflow.flows.search.mcts import LESSONS, ROOT, Mcts, Tree
from kernelflow.flows.search.protocol import Expansion
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import Candidate, FailureKind, Origin
from kernelflow.stages.problems.kernelbench import load_problem

PROBLEM = load_problem(Path(__file__).resolve().parents[2] / "problems" / "09_silu.py")


def new_state(proposer: str = "builtin") -> SearchState:
    """A run's search state, with no store, Prefect or stage behind it: what a strategy reads and changes."""
    return SearchState(PROBLEM, RunConfig(proposer=proposer, device="cpu"))


def step(mcts: Mcts, run: Any, speedup: float | None = None, failed: FailureKind | None = None,
         family: str = "rowwise", params: dict[str, Any] | None = None) -> tuple[Expansion, Candidate]:
    """One turn of flows/search/protocol.py's loop: select, a proposal from the expansion, its evaluation, update."""
    expansion = mcts.select(run)
    parent = expansion.parent
    candidate = Candidate.make("p", "triton", f"# candidate {len(run.tried)}", Origin(
        kind="builtin", proposer=family, params=params or {"i": len(run.tried)}), parent_id=parent.id if parent else None)
    run.consider(candidate)
    if failed is not None:
        run.reject(candidate.id, "verify", failed, "outside tolerance")
    elif speedup is not None:
        run.speedups[candidate.id] = speedup
    mcts.update(run, candidate, None if failed else speedup)
    return expansion, candidate


def test_registered():
    assert strategy_class("mcts") is Mcts and Mcts.NAME == "mcts"
    assert set(STRATEGIES) == set(get_args(StrategyName))  # every name a run may ask for has a strategy


def test_uct_prefers_the_higher_mean_at_equal_visits():
    tree = Tree()
    tree.add("a", None, math.log(1.1))
    tree.add("b", None, math.log(1.5))
    assert tree.uct(ROOT) == "b" and tree.reward(math.log(1.1)) == 0.1 and tree.reward(None) == 0.0


def test_uct_prefers_the_less_visited_at_equal_means():
    tree = Tree()
    tree.add("a", None, math.log(1.2))
    tree.add("a1", "a", math.log(1.2))
    tree.add("b", None, math.log(1.2))
    assert tree.w("a") / tree.visits["a"] == tree.w("b") / tree.visits["b"] and tree.uct(ROOT) == "b"


def test_rewards_are_log_speedups_normalized_by_the_bounds_seen():
    tree = Tree()
    for node, speedup in (("a", 1.0), ("b", 2.0), ("c", 4.0)):
        tree.add(node, None, math.log(speedup))
    assert [round(tree.reward(math.log(s)), 6) for s in (1.0, 2.0, 4.0)] == [0.1, 0.55, 1.0]
    assert math.isclose(tree.w(ROOT), 0.1 + 0.55 + 1.0) and tree.visits[ROOT] == 3


def test_progressive_widening_limits_children():
    mcts, run = Mcts(), new_state()
    first, a = step(mcts, run, 1.2)
    refine, _ = step(mcts, run, 1.3)  # the root has its ceil(1 * 1^0.5) = 1 child: descend to it
    fresh, _ = step(mcts, run, 1.1)  # two evaluations: the root may have 2 children
    again, _ = step(mcts, run, 1.0)  # root full (ceil(sqrt 3) = 2): UCT picks a (higher mean), which may now widen
    assert first.parent is None and refine.parent == a and fresh.parent is None and again.parent == a
    assert [mcts.tree.limit(n) for n in ("x", ROOT)] == [1, 2] and len(mcts.tree.children[a.id]) == 2


def test_a_failed_node_gets_one_repair_child_and_only_when_repairable():
    mcts, run = Mcts(k=0.5), new_state()  # narrow: the root keeps one child for a while
    _, broken = step(mcts, run, failed="mismatch")  # the builtin repairs a mismatch
    repair, fixed = step(mcts, run, 1.2)
    after, _ = step(mcts, run, 1.3)
    assert repair.parent == broken and repair.failure is not None and repair.failure.kind == "mismatch"
    assert after.parent == fixed and after.failure is None  # the failed node's one child taken: descend past it
    mcts, run = Mcts(), new_state()
    step(mcts, run, failed="compile_error")  # the builtin does not repair this: a dead end
    assert step(mcts, run, 1.1)[0] == Expansion() and len(mcts.tree.pruned) == 1


def test_dead_ends_are_pruned_up_the_tree_and_skipped():
    mcts, run = Mcts(), new_state()
    _, broken = step(mcts, run, failed="mismatch")
    _, again = step(mcts, run, failed="mismatch")  # MAX_REPAIRS failures in a row: no further repair
    assert mcts.tree.pruned == [again.id, broken.id]  # its only child dead, the repaired node is dead too
    assert step(mcts, run, 1.1)[0].parent is None
    tree = Tree()
    tree.add("a", None, math.log(2.0))
    tree.add("b", None, math.log(1.1))
    tree.pruned.append("a")
    assert tree.uct(ROOT) == "b" and tree.uct("b") is None


def test_stagnation_reexpands_the_root_and_resets():
    mcts, run = Mcts(k=0.25), new_state()  # narrow: the root keeps one child for 16 evaluations
    parents = [step(mcts, run, s)[0].parent for s in (1.5, 1.2, 1.1, 1.0, 1.3)]
    assert parents[0] is None and all(p is not None for p in parents[1:])  # a chain under the first
    stale_then, _ = step(mcts, run, 1.2)  # 4 evaluations without a better speedup: a fresh proposal
    assert stale_then.parent is None and mcts.tree.stale == 1
    assert step(mcts, run, 1.2)[0].parent is not None


def test_lessons_are_distilled_from_verified_results_and_windowed():
    mcts, run = Mcts(), new_state()
    step(mcts, run, 1.18, params={"BLOCK": 1024, "num_warps": 8})
    step(mcts, run, 1.25, params={"BLOCK": 1024, "num_warps": 16})
    assert run.lessons == ["rowwise {BLOCK: 1024, num_warps: 8}: 1.18x eager (fresh start)",
                           "rowwise {num_warps: 16} from {num_warps: 8}: 1.18x -> 1.25x eager (helped)"]
    step(mcts, run, failed="compile_error")
    assert len(run.lessons) == 2  # verified conclusions only
    for speedup in (1.0, 0.9, 1.1, 1.2, 1.3, 1.4, 1.5):
        step(mcts, run, speedup)
    assert len(run.lessons) == LESSONS and run.lessons[-1].endswith("1.50x eager (helped)")
    assert any(lesson.endswith("(hurt)") for lesson in run.lessons)


def test_state_round_trips_through_json():
    mcts, run = Mcts(c=1.0, stagnation=3), new_state()
    for speedup, failed in ((1.2, None), (None, "mismatch"), (1.4, None), (1.1, None)):
        step(mcts, run, speedup, failed)
    restored = Mcts.from_state(json.loads(json.dumps(mcts.state())))
    assert restored.state() == mcts.state() and restored.tree.c == 1.0
    assert restored.select(run) == mcts.select(run)


def test_stops_when_everything_is_pruned_and_the_root_gives_nothing():
    mcts, run = Mcts(), new_state()
    step(mcts, run, failed="compile_error")
    for _ in range(2):  # two fresh proposals that gave no candidate (no update between selections)
        assert mcts.stop(run) is None and mcts.select(run) == Expansion()
    assert "every subtree is pruned" in (mcts.stop(run) or "")
