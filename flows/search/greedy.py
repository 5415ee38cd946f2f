"""Greedy, the baseline strategy: repair the latest candidate when it failed in a way the proposer repairs,
else refine the incumbent (the best verified so far), else start fresh. It keeps no state of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from kernelflow.flows.run import Run
from kernelflow.flows.search.protocol import Expansion, repairable
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import Candidate


class Greedy:
    NAME: ClassVar[str] = "greedy"

    def select(self, state: SearchState) -> Expansion:
        latest = state.candidates.get(state.tried[-1]) if state.tried else None
        if (failure := repairable(state, latest)) is not None:
            return Expansion(parent=latest, failure=failure)
        return Expansion(parent=state.best[1] if state.best else None)

    def evaluate(self, run: Run, candidate: Candidate, flat: Callable[[Candidate], float | None]) -> float | None:
        return flat(candidate)

    def update(self, state: SearchState, candidate: Candidate, speedup: float | None) -> None:
        pass

    def stop(self, state: SearchState) -> str | None:
        return None

    def state(self) -> dict:
        return {}

    @classmethod
    def from_state(cls, state: dict) -> Greedy:
        return cls()
