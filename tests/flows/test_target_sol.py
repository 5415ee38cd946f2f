"""Stop at a target SOL fraction (stages/measure/sol_target.py): the share computed from a candidate's own timings, the run
stopping once its best reaches the target, and a refusal where no GPU ceilings exist (never a silent no-op)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kernelflow.flows.config import RunConfig
from kernelflow.stages.contracts import BenchmarkResult, Provenance, Timing
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.measure.sol_target import floors, fraction
from kernelflow.stages.problems.kernelbench import load_problem
from tests.families import WRITTEN

ROOT = Path(__file__).resolve().parents[2]
SILU = ROOT / "problems" / "09_silu.py"
PROV = Provenance(device="cuda", device_name="NVIDIA H200", torch="x", python="3", hostname="h", code_version="t",
                  tf32=False)


def timing(contender: str, workload: str, median_us: float) -> Timing:
    return Timing(problem_id="p", candidate_id="c", benchmark_for="c", contender=contender, workload=workload,
                  median_us=median_us, ci_low_us=median_us, ci_high_us=median_us, min_us=median_us,
                  mean_us=median_us, n_reps=10, l2_flushed=True, input_sets=2, provenance=PROV)


def test_the_fraction_is_the_geomean_of_floor_over_median_of_the_candidate_only():
    timed = BenchmarkResult(candidate_id="c", problem_id="p", status="ok", device="cuda", sizes="gpu", timings=[
        timing("candidate", "gpu0", 100.0), timing("candidate", "gpu1", 400.0), timing("eager", "gpu0", 50.0)])
    assert fraction({"gpu0": 80.0, "gpu1": 100.0}, timed) == pytest.approx(math.sqrt(0.8 * 0.25))
    assert fraction({"gpu2": 1.0}, timed) is None  # no timed workload with a floor


def test_the_h200_floors_come_from_the_counted_work():
    problem = load_problem(SILU)
    got = floors(problem, "gpu", "NVIDIA H200")
    assert set(got) == {w.name for w in problem.workloads("gpu")} and all(f > 0 for f in got.values())
    with pytest.raises(KernelflowError, match="needs a GPU with known ceilings"):
        floors(problem, "gpu", None)
    with pytest.raises(KernelflowError, match="needs a GPU with known ceilings"):
        floors(problem, "gpu", "Some Unknown GPU")


def test_a_cpu_run_refuses_a_target(prefect_harness, tmp_path: Path):
    from kernelflow.flows.optimize import optimize

    with pytest.raises(KernelflowError, match="has no GPU"):
        optimize(str(SILU), RunConfig(budget=2, store=str(tmp_path), device="cpu", executor="inline", profile=False, target_sol=0.8))


def test_the_run_stops_once_the_best_reaches_the_target(prefect_harness, tmp_path: Path, monkeypatch):
    """Floors stand in for a GPU's (on CPU the interpreter's medians are ms): set so that the first verified
    candidate is at 0.9 of its floor on every shape, the run stops after it with budget 4 left unspent."""
    import kernelflow.flows.optimize
    from kernelflow.stages.benchmark import run as real_benchmark

    problem = load_problem(SILU)
    floors_us: dict[str, float] = {}

    def benchmark_that_sets_floors(req):
        res = real_benchmark(req)
        for t in res.timings:
            if t.contender == "candidate":
                floors_us[t.workload] = 0.9 * t.median_us
        return res

    monkeypatch.setattr("kernelflow.stages.benchmark.run", benchmark_that_sets_floors)
    monkeypatch.setattr(kernelflow.flows.optimize, "floors", lambda p, sizes, name: floors_us)
    summary = kernelflow.flows.optimize.optimize(str(SILU), RunConfig(
        budget=4, store=str(tmp_path), device="cpu", executor="inline", profile=False, target_sol=0.85, families=WRITTEN))
    assert set(floors_us) == {w.name for w in problem.workloads("cpu")}
    assert summary["stop_reason"] == "target of 0.85 of speed of light reached: the best is at 0.90"
    assert summary["best_candidate_id"] is not None
