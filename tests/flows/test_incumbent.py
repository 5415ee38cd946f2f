"""The incumbent handed to the proposer: the best verified candidate with its times and profile in every request,
and the builtin seeds of an llm run evaluated as they are (the model does not repair them). Unit tests on a run's
search state alone (end to end: tests/flows/test_llm_flow.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kernelflow.flows.config import RunConfig
from kernelflow.flows.search.protocol import Expansion, repairable, request
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import BenchmarkResult, Candidate, Origin, Timing
from kernelflow.stages.problems.kernelbench import load_problem

PROBLEM = load_problem(Path(__file__).resolve().parents[2] / "problems" / "09_silu.py")


def candidate(kind: str, note: str) -> Candidate:
    return Candidate.make(PROBLEM.id, "triton", f"# {note}", Origin(kind=kind, proposer="elementwise" if kind ==
                                                                       "builtin" else kind))


def timing(cid: str, medians: dict[str, dict[str, float]], speedup: float) -> BenchmarkResult:
    rows = [Timing.model_construct(workload=w, contender=who, median_us=us) for w, by in medians.items()
            for who, us in by.items()]
    return BenchmarkResult.model_construct(candidate_id=cid, timings=rows, speedup_vs_eager=speedup)


def test_every_request_carries_the_best_so_far_with_its_times_and_profile():
    state = SearchState(PROBLEM, RunConfig(proposer="llm", device="cpu"))
    run = SimpleNamespace(state=state, config=state.config, api_key=None)
    assert request(run, Expansion()).incumbent is None  # nothing verified yet: nothing to beat
    seed, slower = candidate("builtin", "seed"), candidate("llm", "slower")
    for c, us, speedup in ((seed, 40.0, 1.5), (slower, 70.0, 0.9)):
        state.consider(c)
        state.timed(timing(c.id, {"cpu0": {"candidate": us, "eager": 60.0}}, speedup))
    state.crown(seed, 1.5)
    state.advise(seed.id, [], "Bottleneck class: memory")
    best = request(run, Expansion()).incumbent
    assert best is not None and best.candidate == seed and best.speedup_vs_eager == 1.5 and best.device == "cpu"
    assert best.medians_us == {"cpu0": {"candidate": 40.0, "eager": 60.0}} and best.feedback == "Bottleneck class: memory"
    assert request(run, Expansion(parent=slower)).incumbent == best  # refining another: the bar stays the best


def test_a_failed_builtin_seed_is_not_the_models_to_repair():
    state = SearchState(PROBLEM, RunConfig(proposer="llm", device="cpu"))
    seed, own = candidate("builtin", "seed"), candidate("llm", "own")
    for c in (seed, own):
        state.consider(c)
        state.reject(c.id, "verify", "mismatch", "off by 3x")
    assert repairable(state, seed) is None and repairable(state, own) is not None
    builtin = SearchState(PROBLEM, RunConfig(proposer="builtin", device="cpu"))
    builtin.consider(seed)
    builtin.reject(seed.id, "verify", "mismatch", "off by 3x")
    assert repairable(builtin, seed) is not None  # the builtin repairs its own accuracy failure
