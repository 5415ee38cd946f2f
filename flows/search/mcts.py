"""MCTS over candidates (KernelPro's domain-adapted tree search, fitted to what a proposer does).

Nodes are candidates under a virtual root ("propose from scratch"); a node's children are the candidates proposed
with it as parent. The reward of an evaluation is its log speedup over eager normalized to [0, 1] by the least and
greatest seen so far (a verified candidate gets at least VERIFIED_FLOOR, a rejected one 0), backpropagated to the
ancestors as visit counts N and per-subtree sums from which W is recomputed under the current bounds. Selection
descends from the root by UCT (W/N + c·sqrt(ln N_parent / N)) while a node is fully widened (at most
ceil(k·N^alpha) live children) and expands the first that may widen. Asymmetric branching: a failed node gets at
most one child, a repair, and only when `repairable` allows; a verified node gets optimize children. A failed node
that cannot be repaired, and a node that can never widen again whose children are all pruned, are pruned: UCT
skips them. After `stagnation` evaluations without a better speedup the next selection is the root (a fresh
proposal). Each verified evaluation leaves a lesson in the run's lessons (the last LESSONS). The state is data
(Tree: plain dicts keyed by candidate id), so `state()` / `from_state()` round-trip through JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import Field

from kernelflow.flows.run import Run
from kernelflow.flows.search.protocol import Expansion, repairable
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import Candidate, Contract

ROOT = "root"  # the virtual root's key (candidate ids are 16 hex digits)
VERIFIED_FLOOR = 0.1  # the least reward of a verified candidate: above every rejected one's 0
BARREN_LIMIT = 2  # expansions in a row of one node that gave no candidate before it may not widen again
LESSONS = 8  # search memory's retention window
NOISE = 0.02  # a speedup within this fraction of the parent's neither helped nor hurt


class Tree(Contract):
    """The search tree and the settings that shape it, as JSON-able data (keys: candidate ids and ROOT)."""

    c: float = Field(default=math.sqrt(2), description="UCT's exploration constant")
    k: float = Field(default=1.0, description="progressive widening: at most ceil(k * N^alpha) live children")
    alpha: float = Field(default=0.5, description="progressive widening's exponent")
    stagnation: int = Field(default=4, description="evaluations without a better speedup before a root expansion")
    parent: dict[str, str] = Field(default_factory=dict, description="node -> its tree parent (ROOT: fresh)")
    children: dict[str, list[str]] = Field(default_factory=dict, description="node -> its children, oldest first")
    visits: dict[str, int] = Field(default_factory=dict, description="N: evaluations in the node's subtree")
    verified: dict[str, int] = Field(default_factory=dict, description="verified evaluations in the subtree")
    log_sum: dict[str, float] = Field(default_factory=dict, description="their summed log speedup over eager")
    log_lo: float | None = Field(default=None, description="least log speedup seen; None: none verified yet")
    log_hi: float | None = Field(default=None, description="greatest log speedup seen")
    pruned: list[str] = Field(default_factory=list, description="dead ends, never selected again")
    barren: dict[str, int] = Field(default_factory=dict, description="expansions in a row that gave no candidate")
    pending: str | None = Field(default=None, description="the node expanded last, until a candidate arrives")
    stale: int = Field(default=0, description="evaluations since the best speedup last improved")

    def reward(self, log_speedup: float | None) -> float:
        """One evaluation's reward under the current bounds: 0 rejected, VERIFIED_FLOOR..1 verified."""
        return 0.0 if log_speedup is None else self._rewards(1, log_speedup)

    def w(self, node: str) -> float:
        """W: the summed reward of the node's subtree (normalization is affine, so the sums give it exactly)."""
        n = self.verified.get(node, 0)
        return self._rewards(n, self.log_sum.get(node, 0.0)) if n else 0.0

    def _rewards(self, n: int, log_sum: float) -> float:
        lo, hi = self.log_lo, self.log_hi
        if lo is None or hi is None or hi <= lo:
            return float(n)  # one value seen: every verified candidate is the best so far
        return n * VERIFIED_FLOOR + (1 - VERIFIED_FLOOR) * (log_sum - n * lo) / (hi - lo)

    def limit(self, node: str) -> int:
        return max(1, math.ceil(self.k * self.visits.get(node, 0) ** self.alpha))

    def live(self, node: str) -> list[str]:
        return [child for child in self.children.get(node, []) if child not in self.pruned]

    def uct(self, node: str) -> str | None:
        """The live child with the highest UCT score (the oldest on ties), None when all are pruned."""
        live = self.live(node)
        if not live:
            return None
        log_n = math.log(self.visits[node])
        return max(live, key=lambda child: self.w(child) / self.visits[child]
                   + self.c * math.sqrt(log_n / self.visits[child]))

    def add(self, node: str, parent_id: str | None, log_speedup: float | None) -> None:
        """Attach an evaluated candidate, backpropagate its result, move the bounds and the stagnation count."""
        parent = parent_id if parent_id in self.parent else ROOT
        self.parent[node] = parent
        self.children.setdefault(parent, []).append(node)
        improved = log_speedup is not None and (self.log_hi is None or log_speedup > self.log_hi)
        self.stale = 0 if improved else self.stale + 1
        if log_speedup is not None:
            self.log_lo = min(log_speedup, self.log_lo if self.log_lo is not None else log_speedup)
            self.log_hi = max(log_speedup, self.log_hi if self.log_hi is not None else log_speedup)
        on: str | None = node
        while on is not None:
            self.visits[on] = self.visits.get(on, 0) + 1
            if log_speedup is not None:
                self.verified[on] = self.verified.get(on, 0) + 1
                self.log_sum[on] = self.log_sum.get(on, 0.0) + log_speedup
            on = self.parent.get(on) if on != ROOT else None


class Mcts:
    NAME: ClassVar[str] = "mcts"

    def __init__(self, c: float = math.sqrt(2), k: float = 1.0, alpha: float = 0.5, stagnation: int = 4,
                 tree: Tree | None = None):
        self.tree = tree if tree is not None else Tree(c=c, k=k, alpha=alpha, stagnation=stagnation)

    def state(self) -> dict[str, Any]:
        return self.tree.model_dump(mode="json")

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Mcts:
        return cls(tree=Tree.model_validate(state))

    def select(self, state: SearchState) -> Expansion:
        self._settle(state)
        tree = self.tree
        if tree.stale >= tree.stagnation and tree.barren.get(ROOT, 0) < BARREN_LIMIT:
            tree.stale = 0  # stagnation: a fresh proposal (the proposer excludes everything tried)
            return self._expand(state, ROOT)
        node = ROOT
        while not self._can_widen(state, node):
            child = tree.uct(node)
            if child is None and node != ROOT:  # a dead end the updates could not see yet: prune, start over
                self._prune(state, node)
                node = ROOT
            elif child is None:
                break  # nothing left anywhere: stop() says so before the next selection
            else:
                node = child
        return self._expand(state, node)

    def evaluate(self, run: Run, candidate: Candidate, flat: Callable[[Candidate], float | None]) -> float | None:
        return flat(candidate)

    def update(self, state: SearchState, candidate: Candidate, speedup: float | None) -> None:
        tree = self.tree
        if tree.pending is not None:
            tree.barren.pop(tree.pending, None)
            tree.pending = None
        if speedup is None or speedup <= 0:  # rejected: reward 0; a dead end unless it gets a repair
            tree.add(candidate.id, candidate.parent_id, None)
            self._prune(state, candidate.id)
            return
        tree.add(candidate.id, candidate.parent_id, math.log(speedup))
        state.teach((state.lessons + [lesson(state, candidate, speedup)])[-LESSONS:])

    def stop(self, state: SearchState) -> str | None:
        self._settle(state)
        if self.tree.barren.get(ROOT, 0) >= BARREN_LIMIT and not self.tree.live(ROOT):
            return f"mcts: every subtree is pruned and the last {BARREN_LIMIT} fresh proposals gave no candidate"
        return None

    def _can_widen(self, state: SearchState, node: str) -> bool:
        tree = self.tree
        if node in tree.pruned or tree.barren.get(node, 0) >= BARREN_LIMIT:
            return False
        if node in state.failures:  # asymmetric branching: one repair child, when the proposer can repair it
            return not tree.children.get(node) and repairable(state, state.candidates[node]) is not None
        return len(tree.live(node)) < tree.limit(node)

    def _expand(self, state: SearchState, node: str) -> Expansion:
        self.tree.pending = node
        if node == ROOT:
            return Expansion()
        parent = state.candidates[node]
        return Expansion(parent=parent, failure=repairable(state, parent))

    def _prune(self, state: SearchState, node: str) -> None:
        """Prune the node when it can never widen again and all its children are pruned; then its ancestors so."""
        tree = self.tree
        while (node != ROOT and node not in tree.pruned and not self._can_widen(state, node)
               and not tree.live(node)):
            tree.pruned.append(node)
            node = tree.parent[node]

    def _settle(self, state: SearchState) -> None:
        """A selection followed by no update: that expansion gave no candidate."""
        node, self.tree.pending = self.tree.pending, None
        if node is not None:
            self.tree.barren[node] = self.tree.barren.get(node, 0) + 1
            self._prune(state, node)


def lesson(state: SearchState, candidate: Candidate, speedup: float) -> str:
    """One verified conclusion: what the candidate changed from its parent, and what that did to the speedup."""
    parent = state.candidates.get(candidate.parent_id or "")
    what = _what(candidate, parent)
    if parent is None:
        return f"{what}: {speedup:.2f}x eager (fresh start)"
    if (failure := state.failures.get(parent.id)) is not None:
        return f"{what}: repaired its parent's {failure.kind}, {speedup:.2f}x eager"
    if (before := state.speedups.get(parent.id)) is None:
        return f"{what}: {speedup:.2f}x eager"
    verdict = ("helped" if speedup > before * (1 + NOISE) else "hurt" if speedup < before * (1 - NOISE)
               else "within noise")
    return f"{what}: {before:.2f}x -> {speedup:.2f}x eager ({verdict})"


def _what(candidate: Candidate, parent: Candidate | None) -> str:
    origin = candidate.origin
    if origin.kind == "llm":
        of = f" of {parent.origin.proposer} {parent.id}" if parent else ""
        return f"llm {origin.params.get('purpose', '')} ({origin.params.get('mode', '')}){of}"
    if parent is None or parent.origin.proposer != origin.proposer:
        instead = f" instead of {parent.origin.proposer} {_params(parent.origin.params)}" if parent else ""
        return f"{origin.proposer} {_params(origin.params)}{instead}"
    now, was = origin.params, parent.origin.params
    changed = [key for key in {**was, **now} if was.get(key) != now.get(key)]
    return f"{origin.proposer} {_params(now, changed)} from {_params(was, changed)}"


def _params(params: dict[str, Any], keys: list[str] | None = None) -> str:
    shown = params if keys is None else {key: params[key] for key in keys if key in params}
    return "{" + ", ".join(f"{key}: {value}" for key, value in shown.items()) + "}"
