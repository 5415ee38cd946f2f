"""The exploits that exist only on a GPU, and the honest candidates there (skipped without one): work hidden on a
side stream, which the events around a call do not see; an honest torch and an honest Triton candidate passing
every check on real launches. The fixture tables of tests/stages/harness/test_integrity.py run on the GPU there (its `device`
parameter)."""

from pathlib import Path

from kernelflow.stages.contracts import BenchmarkRequest, Candidate, Origin, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from tests.stages.harness.test_integrity import SOFTMAX, bench, needs_gpu, verify

ROOT = Path(__file__).resolve().parents[3]
pytestmark = needs_gpu


def test_work_hidden_on_a_side_stream_is_a_cheat(tmp_path: Path):
    """Right when verified (the device-wide sync waits for the side stream); its tail escapes the end event."""
    assert verify("side_stream", tmp_path / "v", trials=1, device="cuda").status == "ok"
    result = bench("side_stream", tmp_path, "cuda", sizes="gpu", workloads=["gpu0"])
    assert result.failure_kind == "cheat" and "side stream" in result.message, result.message


def test_untimed_calls_that_skip_their_work_are_a_cheat(tmp_path: Path):
    """Right on every call that follows a new input, so verification and the timed calls see nothing; the lead-in
    queued before each timed call (stages/measure/timing.py SUSTAIN_US) is where it skips its work. In stage
    processes: this process interprets Triton (tests/conftest.py), and an interpreted call is too slow for a lead-in
    of more than a few calls."""
    assert verify("cool_lead_in", tmp_path / "v", "subprocess", trials=1, device="cuda").status == "ok"
    result = bench("cool_lead_in", tmp_path, "cuda", "subprocess")
    assert result.failure_kind == "cheat" and "untimed calls skipped their work" in result.message, result.message


def test_an_honest_torch_candidate_passes_on_the_gpu(tmp_path: Path):
    assert verify("good", tmp_path / "v", device="cuda").status == "ok"
    result = bench("good", tmp_path, "cuda")
    assert result.status == "ok" and result.recheck_passed, result.message
    # every timed call followed its lead-in, and NVML's clock was read after each (the device has nvidia-ml-py)
    assert all(t.lead_calls >= 1 and 300 < (t.timed_sm_clock_mhz or 0) < 2500 and t.power_capped_share is not None
               for t in result.timings), result.timings


def test_an_honest_triton_candidate_passes_on_the_gpu_in_stage_processes(tmp_path: Path):
    source = (ROOT / "prompts" / "examples" / "triton_softmax.py").read_text()
    cand = Candidate.make(SOFTMAX.id, "triton", source, Origin(kind="user", proposer="example"))
    common = dict(problem=SOFTMAX, candidate=cand, device="cuda")
    checked = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "v"), sizes=["gpu"], trials=1, **common),
                        "subprocess")
    assert checked.status == "ok", checked.message
    result = run_stage("benchmark", BenchmarkRequest(workdir=str(tmp_path / "w"), sizes="gpu", workloads=["gpu0"],
                                                     baselines=["eager"], min_reps=10, max_reps=40, **common),
                       "subprocess")
    assert result.status == "ok" and result.recheck_passed, result.message
