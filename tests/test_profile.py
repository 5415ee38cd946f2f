"""Profile stage on CPU: analytic floor and class, counters unavailable with the reason, ncu output parsing."""

from pathlib import Path

import pytest

from stages import generate, profile
from stages.contracts import Candidate, GenerateRequest, Origin, ProfileRequest
from stages.executor import run_stage
from stages.problem import load_problem

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")
RAW_CSV = (ROOT / "tests" / "fixtures" / "ncu" / "raw.csv").read_text()


def fixture(name: str) -> Candidate:
    source = (ROOT / "tests" / "fixtures" / "adversarial" / f"{name}.py").read_text()
    return Candidate.make(SOFTMAX.id, "torch", source, Origin(kind="user", proposer="fixture"))


def request(candidate: Candidate, tmp_path: Path, **kw) -> ProfileRequest:
    return ProfileRequest(workdir=str(tmp_path / "w"), blob_dir=str(tmp_path / "b"), problem=SOFTMAX,
                          candidate=candidate, device="cpu", **kw)


def test_cpu_gives_the_analytic_roofline_and_says_why_no_counters(tmp_path: Path):
    result = profile.run(request(fixture("good"), tmp_path))
    assert (result.status, result.counters, result.device) == ("ok", "unavailable", "cpu")
    assert "no GPU" in result.counters_reason and "no time, energy or counters" in result.message
    assert (result.bound, result.bound_source, result.workload) == ("memory", "analytic", "gpu0")
    assert result.bytes_min == 2 * 32768 * 8192 * 4 and result.sol_floor_us == pytest.approx(result.bytes_min / 4.3e6)
    assert result.time_us is None and result.energy_j_per_call is None and result.kernels == []


def test_cpu_runs_a_builtin_triton_candidate_once(tmp_path: Path):
    candidate = generate.run(GenerateRequest(problem=SOFTMAX, n=1, backend="triton")).candidates[0]
    result = profile.run(request(candidate, tmp_path, workload="gpu2"))
    assert result.status == "ok" and result.workload == "gpu2" and "ran once on CPU" in result.message
    assert result.bound == "memory" and result.counters == "unavailable"


def test_a_candidate_that_raises_is_a_failure_row(tmp_path: Path):
    result = profile.run(request(fixture("raises"), tmp_path))
    assert (result.status, result.failure_kind) == ("failed", "runtime_error")


def test_a_crashing_candidate_is_a_crash_row_in_its_own_process(tmp_path: Path):
    result = run_stage("profile", request(fixture("segfault"), tmp_path, timeout_s=60))
    assert (result.status, result.failure_kind) == ("failed", "crash") and "stage_log" in result.blobs


def test_raw_csv_is_grouped_per_kernel_with_per_launch_means():
    kernels = profile.parse_raw_csv(RAW_CSV)
    assert [(k.kernel[:14], k.invocations) for k in kernels] == [("softmax_kernel", 2), ("void at::nativ", 1)]
    softmax = kernels[0]
    assert softmax.duration_us == pytest.approx(300.0) and softmax.metrics["dram__bytes_read.sum"] == 2**30
    assert softmax.metrics["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"] is None
    assert softmax.metrics["smsp__inst_executed.sum"] == 12_582_912 and set(softmax.metrics) == set(profile.METRICS)
    assert kernels[1].metrics["launch__block_size"] == 128


def test_raw_csv_scales_units_and_skips_noise_before_the_header():
    lines = RAW_CSV.splitlines()
    lines[1] = lines[1].replace('"nsecond"', '"usecond"', 1)
    kernels = profile.parse_raw_csv("==PROF== Disconnected from process 1\n" + "\n".join(lines))
    assert kernels[0].duration_us == pytest.approx(300_000.0)


def test_rejected_metrics_are_dropped_and_named():
    out = ("==PROF== Connected to process 4242 (/usr/bin/python3.12)\n"
           "==ERROR== Failed to find metric regex:^sm__inst_executed_pipe_xu\\.avg\\.pct_of_peak_sustained_active$\n"
           "==ERROR== Failed to find metric launch__occupancy_limit_shared_mem\n")
    kept, rejected = profile.drop_rejected(list(profile.METRICS), out)
    assert rejected == ["launch__occupancy_limit_shared_mem", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"]
    assert len(kept) == len(profile.METRICS) - 2 and "smsp__inst_executed.sum" in kept
    other = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert profile.drop_rejected(list(profile.METRICS), other) == (list(profile.METRICS), [])


def test_ncu_version_line():
    out = "NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n" \
          "Version 2025.3.1.0 (build 36398880) (public-release)\n"
    assert profile.ncu_version(out) == "2025.3.1.0 (build 36398880) (public-release)"


def test_ncu_missing_from_path_is_unavailable_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KERNELFLOW_NCU", raising=False)
    monkeypatch.setattr(profile, "NCU_FALLBACKS", ())
    counters = profile.collect_counters(request(fixture("good"), tmp_path), timeout_s=60)
    assert counters.kernels == [] and "ncu (Nsight Compute CLI) not found: not on PATH" in counters.reason


FAKE_NCU = """#!/bin/sh
# A stand-in for ncu: rejects one metric, writes a report, prints the recorded CSV on --import.
case "$1" in
  --version) echo "NVIDIA (R) Nsight Compute Command Line Profiler"; echo "Version 2025.3.1.0 (build 1)"; exit 0;;
  --import) cat "%s"; exit 0;;
esac
while [ $# -gt 0 ]; do
  case "$1" in --metrics) metrics="$2"; shift;; --export) export="$2"; shift;; esac; shift
done
case "$metrics" in *sm__inst_executed_pipe_xu*)
  echo "==ERROR== Failed to find metric regex:^sm__inst_executed_pipe_xu\\\\.avg\\\\.pct_of_peak_sustained_active$"
  exit 1;;
esac
echo report > "$export.ncu-rep"
echo "%s"
"""


def test_ncu_run_retries_without_a_rejected_metric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text(FAKE_NCU % (ROOT / "tests" / "fixtures" / "ncu" / "raw.csv", profile.DRIVER_OK))
    ncu.chmod(0o755)
    monkeypatch.setenv("KERNELFLOW_NCU", str(ncu))
    counters = profile.collect_counters(request(fixture("good"), tmp_path), timeout_s=60)
    assert counters.reason == "" and counters.version == "2025.3.1.0 (build 1)"
    assert counters.notes == ["ncu rejected metrics ['sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active']: "
                              "profiled without them"]
    assert [k.invocations for k in counters.kernels] == [2, 1] and {"ncu_rep", "ncu_log"} <= set(counters.blobs)
    assert "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active" not in counters.kernels[0].metrics
