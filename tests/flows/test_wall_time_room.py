"""The wall-time between candidates and profiles: none begins once the time left is shorter than the slowest of its
kind so far took, since one begun runs to its end. Unit tests on a run's search state (end to end: test_flow.py's
wall-time tests)."""

from __future__ import annotations

import time
from pathlib import Path

from kernelflow.flows.config import RunConfig
from kernelflow.flows.search.protocol import spent
from kernelflow.flows.state import SearchState
from kernelflow.stages.problems.kernelbench import load_problem

PROBLEM = load_problem(Path(__file__).resolve().parents[2] / "problems" / "09_silu.py")


def state_at(elapsed_s: float, wall_s: float = 150.0) -> SearchState:
    return SearchState(PROBLEM, RunConfig(device="cpu", budget=6, wall_time_s=wall_s),
                       started=time.monotonic() - elapsed_s)


def test_no_candidate_begins_when_the_slowest_so_far_would_overrun():
    state = state_at(110.0)
    assert state.no_room() is None and spent(state) is None  # nothing evaluated yet: no estimate
    state.evaluated(30.0)
    state.evaluated(89.0)
    state.evaluated(40.0)  # the estimate is the slowest, not the latest
    assert state.slowest_s == 89.0
    why = spent(state)
    assert why is not None and why.startswith("wall-time budget of 150 s: 40 s left, less than the slowest "
                                              "candidate so far took (89 s)"), why


def test_a_candidate_that_fits_still_begins_and_a_spent_budget_says_spent():
    state = state_at(50.0)
    state.evaluated(89.0)
    assert state.no_room() is None  # 100 s left
    late = state_at(151.0)
    assert late.no_room() is not None and late.no_room().startswith("wall-time budget of 150 s spent")


def test_no_profile_begins_when_the_slowest_profile_so_far_would_overrun():
    state = state_at(120.0)
    assert state.no_room_to_profile() is None  # no profile yet: only a spent budget stops one
    state.profiled(31.0)
    state.profiled(18.0)
    why = state.no_room_to_profile()
    assert why == "wall-time budget of 150 s: 30 s left, less than the slowest profile so far took (31 s)", why
    assert state.no_room() is None  # the candidates' estimate is their own
    roomy = state_at(100.0)
    roomy.profiled(31.0)
    assert roomy.no_room_to_profile() is None  # 50 s left
