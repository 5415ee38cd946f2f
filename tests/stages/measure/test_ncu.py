"""Nsight Compute on CPU: raw-CSV parsing, rejected metrics, ncu's version, ncu missing, the retry loop."""

from pathlib import Path

import pytest

from kernelflow.stages.contracts import Candidate, Origin, ProfileRequest
from kernelflow.stages.measure import ncu as ncu_stage
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[3]
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")
RAW_CSV = (ROOT / "tests" / "fixtures" / "ncu" / "raw.csv").read_text()


def request(tmp_path: Path) -> ProfileRequest:
    source = (ROOT / "tests" / "fixtures" / "adversarial" / "good.py").read_text()
    candidate = Candidate.make(SOFTMAX.id, "torch", source, Origin(kind="user", proposer="fixture"))
    return ProfileRequest(workdir=str(tmp_path / "w"), problem=SOFTMAX,
                          candidate=candidate, device="cpu")


def test_raw_csv_is_grouped_per_kernel_with_per_launch_means():
    kernels = ncu_stage.parse_raw_csv(RAW_CSV)
    assert [(k.kernel[:14], k.invocations) for k in kernels] == [("softmax_kernel", 2), ("void at::nativ", 1)]
    softmax = kernels[0]
    assert softmax.duration_us == pytest.approx(300.0) and softmax.metrics["dram__bytes_read.sum"] == 2**30
    assert softmax.metrics["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"] is None
    assert softmax.metrics["smsp__inst_executed.sum"] == 12_582_912 and set(softmax.metrics) == set(ncu_stage.METRICS)
    assert kernels[1].metrics["launch__block_size"] == 128


def test_real_h200_csv_parses_to_every_metric():
    """`ncu --import <report> --csv --page raw --print-units base` of the fma_low_ilp defect on the H200 (ncu
    2025.3.1): ncu adds ~200 device__attribute and launch columns of its own; every metric we asked for is read."""
    [k] = ncu_stage.parse_raw_csv((ROOT / "tests" / "fixtures" / "ncu" / "raw_h200.csv").read_text())
    assert k.kernel.startswith("chain_kernel") and k.invocations == 1 and 600 < k.duration_us < 800
    assert set(k.metrics) == set(ncu_stage.METRICS) and all(v is not None for v in k.metrics.values())
    assert k.metrics["launch__grid_size"] == 132 and k.metrics["device__attribute_multiprocessor_count"] == 132
    assert k.metrics["dram__bytes_read.sum"] > 1e8  # bytes (base units), not Mbyte


def test_raw_csv_scales_units_and_skips_noise_before_the_header():
    lines = RAW_CSV.splitlines()
    lines[1] = lines[1].replace('"nsecond"', '"usecond"', 1)
    kernels = ncu_stage.parse_raw_csv("==PROF== Disconnected from process 1\n" + "\n".join(lines))
    assert kernels[0].duration_us == pytest.approx(300_000.0)


def test_rejected_metrics_are_dropped_and_named():
    out = ("==PROF== Connected to process 4242 (/usr/bin/python3.12)\n"
           "==ERROR== Failed to find metric regex:^sm__inst_executed_pipe_xu\\.avg\\.pct_of_peak_sustained_active$\n"
           "==ERROR== Failed to find metric launch__occupancy_limit_shared_mem\n")
    kept, rejected = ncu_stage.drop_rejected(list(ncu_stage.METRICS), out)
    assert rejected == ["launch__occupancy_limit_shared_mem", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"]
    assert len(kept) == len(ncu_stage.METRICS) - 2 and "smsp__inst_executed.sum" in kept
    other = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert ncu_stage.drop_rejected(list(ncu_stage.METRICS), other) == (list(ncu_stage.METRICS), [])


def test_ncu_version_line():
    out = "NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n" \
          "Version 2025.3.1.0 (build 36398880) (public-release)\n"
    assert ncu_stage.ncu_version(out) == "2025.3.1.0 (build 36398880) (public-release)"


def test_ncu_missing_from_path_is_unavailable_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("KERNELFLOW_NCU", raising=False)
    monkeypatch.setattr(ncu_stage, "NCU_FALLBACKS", ())
    counters = ncu_stage.collect_counters(request(tmp_path), timeout_s=60)
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
    ncu.write_text(FAKE_NCU % (ROOT / "tests" / "fixtures" / "ncu" / "raw.csv", ncu_stage.DRIVER_OK))
    ncu.chmod(0o755)
    monkeypatch.setenv("KERNELFLOW_NCU", str(ncu))
    counters = ncu_stage.collect_counters(request(tmp_path), timeout_s=60)
    assert counters.reason == "" and counters.version == "2025.3.1.0 (build 1)"
    assert counters.notes == ["ncu rejected metrics ['sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active']: "
                              "profiled without them"]
    assert [k.invocations for k in counters.kernels] == [2, 1] and {"ncu_rep", "ncu_log"} <= set(counters.files)
    assert "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active" not in counters.kernels[0].metrics
