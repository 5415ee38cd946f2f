"""Profile stage on CPU: analytic floor and class, counters unavailable with the reason, candidate faults."""

from pathlib import Path

import pytest

from kernelflow.stages import generate, profile
from kernelflow.stages.contracts import Candidate, GenerateRequest, Origin, ProfileRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.measure import subject
from kernelflow.stages.problems.kernelbench import load_problem
from tests.families import WRITTEN

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")


def fixture(name: str) -> Candidate:
    source = (ROOT / "tests" / "fixtures" / "adversarial" / f"{name}.py").read_text()
    return Candidate.make(SOFTMAX.id, "torch", source, Origin(kind="user", proposer="fixture"))


def request(candidate: Candidate, tmp_path: Path, **kw) -> ProfileRequest:
    return ProfileRequest(workdir=str(tmp_path / "w"), problem=SOFTMAX,
                          candidate=candidate, device="cpu", **kw)


def test_cpu_gives_the_analytic_roofline_and_says_why_no_counters(tmp_path: Path):
    result = profile.run(request(fixture("good"), tmp_path))
    assert (result.status, result.counters, result.device) == ("ok", "unavailable", "cpu")
    assert "no GPU" in result.counters_reason and "no time, energy or counters" in result.message
    assert (result.bound, result.bound_source, result.workload) == ("memory", "analytic", "gpu0")
    assert result.bytes_min == 2 * 32768 * 8192 * 4 and result.sol_floor_us == pytest.approx(result.bytes_min / 4.3e6)
    assert result.time_us is None and result.energy_j_per_call is None and result.kernels == []


def test_cpu_runs_a_builtin_triton_candidate_once(tmp_path: Path):
    candidate = generate.run(GenerateRequest(problem=SOFTMAX, n=1, backend="triton", families=WRITTEN)).candidates[0]
    result = profile.run(request(candidate, tmp_path, workload="gpu2"))
    assert result.status == "ok" and result.workload == "gpu2" and "ran once on CPU" in result.message
    assert result.bound == "memory" and result.counters == "unavailable"


def test_a_candidate_that_raises_is_a_failure_row(tmp_path: Path):
    result = profile.run(request(fixture("raises"), tmp_path))
    assert (result.status, result.failure_kind) == ("failed", "runtime_error")


@pytest.mark.parametrize("name", ["write_outside", "background_thread", "patch_timer"])
def test_the_candidates_code_runs_guarded_a_cheat_is_a_cheat_row(tmp_path: Path, name: str):
    result = profile.run(request(fixture(name), tmp_path))
    assert (result.status, result.failure_kind) == ("failed", "cheat"), result.message
    assert not (tmp_path / "escaped.txt").exists()


def test_a_crashing_candidate_is_a_crash_row_in_its_own_process(tmp_path: Path):
    result = run_stage("profile", request(fixture("segfault"), tmp_path, timeout_s=60))
    assert (result.status, result.failure_kind) == ("failed", "crash") and "stage_log" in result.files


def test_a_baseline_is_profiled_without_a_candidate(tmp_path: Path):
    req = ProfileRequest(workdir=str(tmp_path / "w"), problem=SOFTMAX, contender="eager",
                         device="cpu")
    result = run_stage("profile", req)
    assert (result.status, result.candidate_id, result.contender, result.bound) == ("ok", "eager", "eager", "memory")
    assert "baseline eager not run on CPU" in result.message
    w = SOFTMAX.cpu_workloads[0]
    eager, inputs = subject.instance(req, w, "cpu")
    assert type(eager).__name__ == "Model" and eager(*inputs).shape == inputs[0].shape
    compiled, _ = subject.instance(req.model_copy(update={"contender": "compile"}), w, "cpu")
    assert type(compiled).__name__ == "OptimizedModule" and compiled._orig_mod is not eager  # torch.compile(reference)


def test_candidate_and_contender_must_agree(tmp_path: Path):
    with pytest.raises(ValueError, match="exactly when contender"):
        request(fixture("good"), tmp_path, contender="eager")
    with pytest.raises(ValueError, match="exactly when contender"):
        ProfileRequest(workdir="w", problem=SOFTMAX, device="cpu")
