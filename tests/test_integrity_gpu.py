"""The adversarial fixtures on a GPU (skipped without one): the verdicts of tests/test_integrity.py hold when the
candidate's kernels are real CUDA launches (Triton compiled by ptxas, not interpreted) and its tensors live on the
device, and the two exploits that exist only there are caught: work hidden on a side stream, and a result left in
fresh device memory by the reference (the caching allocator hands the block back)."""

from pathlib import Path

import pytest
import torch

from stages.contracts import BenchmarkRequest, VerifyRequest
from stages.executor import run_stage
from tests.test_integrity import (
    BENCHMARK_CHEATS,
    DEFECTS,
    SOFTMAX,
    SUBPROCESS_CHEATS,
    TORCH_COMPUTE,
    VERIFY_CHEATS,
    candidate,
)

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lead runs it on the H200)")
pytestmark = needs_gpu


def verify(name: str, tmp_path: Path, mode: str = "inline", trials: int = 2):
    """The problem's small shapes, on the device: what is checked does not depend on the size, and the fixtures
    stay cheap (the side stream's tail is timed at the GPU sizes)."""
    cand = candidate(name)
    request = VerifyRequest(workdir=str(tmp_path / "work"), blob_dir=str(tmp_path / "blobs"), problem=SOFTMAX,
                            candidate=cand, device="cuda", trials=trials,
                            policy=TORCH_COMPUTE if cand.backend == "torch" else None)
    return run_stage("verify", request, mode)  # type: ignore[arg-type]


def bench(name: str, tmp_path: Path, sizes: str = "cpu", workloads: list[str] | None = None):
    request = BenchmarkRequest(workdir=str(tmp_path / "w"), blob_dir=str(tmp_path / "b"), problem=SOFTMAX,
                               candidate=candidate(name), device="cuda", sizes=sizes,  # type: ignore[arg-type]
                               workloads=workloads, baselines=["eager"], min_reps=10, max_reps=40)
    return run_stage("benchmark", request, "inline")


@pytest.mark.parametrize("name", sorted(VERIFY_CHEATS))
def test_verify_calls_each_cheat_a_cheat_on_the_gpu(name: str, tmp_path: Path):
    result = verify(name, tmp_path)
    assert (result.failure_kind, VERIFY_CHEATS[name] in result.message) == ("cheat", True), result.message


@pytest.mark.parametrize("name", sorted(SUBPROCESS_CHEATS))
def test_cheats_that_outlive_the_candidate_are_caught_on_the_gpu(name: str, tmp_path: Path):
    result = verify(name, tmp_path, "subprocess", trials=1)
    assert (result.failure_kind, SUBPROCESS_CHEATS[name] in result.message) == ("cheat", True), result.message


@pytest.mark.parametrize("name", sorted(BENCHMARK_CHEATS))
def test_benchmark_calls_each_timed_cheat_a_cheat_on_the_gpu(name: str, tmp_path: Path):
    assert verify(name, tmp_path / "v", trials=1).status == "ok"  # verification alone does not see it
    result = bench(name, tmp_path)
    assert (result.failure_kind, BENCHMARK_CHEATS[name] in result.message) == ("cheat", True), result.message


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_wrong_outputs_keep_their_defect_kind_on_the_gpu(name: str, tmp_path: Path):
    """stale_memory is the GPU's own case: torch.empty_like gets the block the reference's output was freed to."""
    result = verify(name, tmp_path)
    assert result.failure_kind == DEFECTS[name], result.message


def test_work_hidden_on_a_side_stream_is_a_cheat(tmp_path: Path):
    """Right when verified (the device-wide sync waits for the side stream); its tail escapes the end event."""
    assert verify("side_stream", tmp_path / "v", trials=1).status == "ok"
    result = bench("side_stream", tmp_path, sizes="gpu", workloads=["gpu0"])
    assert result.failure_kind == "cheat" and "side stream" in result.message, result.message


@pytest.mark.parametrize("name", ["good", "prompts/examples/triton_softmax.py"])
def test_honest_candidates_pass_on_the_gpu(name: str, tmp_path: Path):
    if name == "good":
        assert verify(name, tmp_path / "v").status == "ok"
        result = bench(name, tmp_path)
    else:
        from stages.contracts import Candidate, Origin

        root = Path(__file__).resolve().parent.parent
        cand = Candidate.make(SOFTMAX.id, "triton", (root / name).read_text(), Origin(kind="user", proposer="example"))
        checked = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "v"), blob_dir=str(tmp_path / "b"),
                                                    problem=SOFTMAX, candidate=cand, device="cuda", sizes=["gpu"],
                                                    trials=1), "subprocess")
        assert checked.status == "ok", checked.message
        result = run_stage("benchmark", BenchmarkRequest(workdir=str(tmp_path / "w"), blob_dir=str(tmp_path / "b"),
                                                         problem=SOFTMAX, candidate=cand, device="cuda", sizes="gpu",
                                                         workloads=["gpu0"], baselines=["eager"], min_reps=10,
                                                         max_reps=40), "subprocess")
    assert result.status == "ok" and result.recheck_passed, result.message
