"""A promoted candidate is profiled on the GPU workload where it is furthest behind its fastest baseline (flows/run.py
weakest_workload): on the H200 the best candidates lost on later shapes, which the first shape's profile never saw."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelflow.flows import run as run_module
from kernelflow.flows.config import RunConfig
from kernelflow.flows.run import profile_promoted, weakest_workload
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import BenchmarkResult, Candidate, Origin, Provenance, Timing
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[2]
PROV = Provenance(device="cuda", device_name="NVIDIA H200", torch="2.11", python="3.12", hostname="h",
                  code_version="x", tf32=False)


def timed(candidate_id: str, *rows: tuple[str, str, float]) -> BenchmarkResult:
    """A benchmark call of `candidate_id`: (contender, workload, median_us) rows."""
    timings = [Timing(problem_id="p", candidate_id=candidate_id if c == "candidate" else None, benchmark_for=candidate_id,
                      contender=c, workload=w, median_us=m, ci_low_us=m, ci_high_us=m, min_us=m, mean_us=m, n_reps=10,
                      l2_flushed=True, input_sets=2, provenance=PROV) for c, w, m in rows]
    return BenchmarkResult(candidate_id=candidate_id, problem_id="p", status="ok", device="cuda", sizes="gpu",
                           timings=timings)


def test_the_workload_furthest_behind_the_fastest_baseline():
    # gpu0: ahead of both; gpu1: 1.1x behind eager; gpu2: 1.4x behind torch.compile (eager is slower there)
    result = timed("c", ("candidate", "gpu0", 500.0), ("eager", "gpu0", 900.0), ("compile", "gpu0", 520.0),
                   ("candidate", "gpu1", 550.0), ("eager", "gpu1", 500.0), ("compile", "gpu1", 510.0),
                   ("candidate", "gpu2", 946.0), ("eager", "gpu2", 2640.0), ("compile", "gpu2", 659.0))
    assert weakest_workload(result, "c") == "gpu2"
    # a workload without a baseline row, or without the candidate's, is not compared
    partial = timed("c", ("candidate", "gpu0", 500.0), ("eager", "gpu0", 450.0), ("candidate", "gpu1", 900.0),
                    ("eager", "gpu2", 100.0))
    assert weakest_workload(partial, "c") == "gpu0"


def test_no_choice_without_this_candidates_timing_beside_a_baseline():
    assert weakest_workload(None, "c") is None
    assert weakest_workload(timed("other", ("candidate", "gpu1", 9.0), ("eager", "gpu1", 1.0)), "c") is None
    assert weakest_workload(timed("c", ("candidate", "gpu1", 9.0)), "c") is None


@pytest.mark.parametrize(("device", "expected"), [("cuda", "gpu1"), ("cpu", None)])
def test_profile_promoted_asks_for_that_workload_on_a_gpu(monkeypatch: pytest.MonkeyPatch, device: str, expected):
    problem = load_problem(ROOT / "tests" / "fixtures" / "problems" / "add.py")
    candidate = Candidate.make(problem.id, "triton", "# source\n", Origin(kind="user", proposer="fixture"))
    asked = []
    monkeypatch.setattr(run_module, "should_profile", lambda *a: (True, "test"))
    monkeypatch.setattr(run_module, "structure", lambda *a: "s")
    monkeypatch.setattr(run_module, "refine", lambda *a: None)
    state = SearchState(problem, RunConfig(device=device))
    state.flat_timing = timed(candidate.id, ("candidate", "gpu0", 1.0), ("eager", "gpu0", 2.0),
                              ("candidate", "gpu1", 3.0), ("eager", "gpu1", 2.0))
    steps = SimpleNamespace(profile=lambda problem, subject, device, workload=None: asked.append(workload))
    profile_promoted(SimpleNamespace(state=state, config=state.config, problem=problem, steps=steps), candidate)
    assert asked == [expected]  # on a CPU: the first GPU shape's analytic roofline
