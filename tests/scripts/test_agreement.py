"""scripts/agreement.py on CPU: KernelBench's statistics and procedure (warm-ups, discarded first call, autograd on),
the ±5% check (median against median), the table (GPU records only), the refusal to run without a GPU, and the
whole per-problem path (rebuild, verify, kernelflow's benchmark, export, import of the package, both timings) on
CPU shapes."""

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def agreement():
    spec = importlib.util.spec_from_file_location("agreement", ROOT / "scripts" / "agreement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernelbench_statistics(agreement):
    stats = agreement.kernelbench_stats([1.0, 2.0, 3.0, 4.0, 100.0])  # ms
    assert stats["reported_ms"] == {"mean": 22.0, "std": 39.0, "min": 1.0, "max": 100.0, "num_trials": 5}
    assert stats["median_us"] == 3000.0 and stats["mean_us"] == 22000.0 and stats["n"] == 5
    assert agreement.kernelbench_stats([1.0, 2.0, 3.0, 4.0])["median_us"] == 2500.0
    assert agreement.sig3(0.0012345) == 0.00123 and agreement.sig3(536.49) == 536.0


def test_host_after_the_flush_counts_the_trials_the_host_outlasted_the_flush(agreement):
    summary = agreement.host_after_flush([40.0, 60.0, 90.0, 120.0, 30.0], 70.0)
    assert summary["median_us"] == 60.0 and summary["max_us"] == 120.0
    assert summary["over_flush_share"] == pytest.approx(2 / 5)
    assert agreement.host_after_flush([], 70.0) is None  # a CPU pass records no host times
    assert agreement.host_after_flush([50.0], None)["over_flush_share"] is None  # no flush time: no share


def test_the_check_is_median_against_median_within_five_percent(agreement):
    kf = {"median_us": 100.0, "mean_us": 100.0}
    outlier = agreement.compare(kf, {"median_us": 104.9, "mean_us": 150.0})  # one slow call moves only the mean
    assert outlier["agree"] and outlier["ratio_mean"] == 1.5 and outlier["ratio_headline"] == 1.5
    assert not agreement.compare(kf, {"median_us": 105.2, "mean_us": 100.0})["agree"]
    assert agreement.compare(kf, {"median_us": 95.0, "mean_us": 95.0})["agree"]
    assert not agreement.compare(kf, {"median_us": 94.9, "mean_us": 100.0})["agree"]
    assert not agreement.agrees(None) and not agreement.agrees(math.nan)


def test_kernelbench_procedure_warms_up_discards_the_first_call_and_keeps_autograd_on(agreement):
    calls, grad = [], []

    def fn():
        calls.append(len(calls))
        grad.append(__import__("torch").is_grad_enabled())
        if len(calls) == 4:  # the first call after the 3 warm-ups is slow: it must be the discarded one
            time.sleep(0.05)

    times = agreement.kernelbench_times_ms(fn, [], "cpu", warmup=3, trials=10)
    assert len(times) == 10 and len(calls) == 3 + 1 + 10 and max(times) < 40.0
    assert all(grad)  # KernelBench's eval times with autograd on
    grad.clear()
    agreement.kernelbench_times_ms(fn, [], "cpu", warmup=1, trials=2, no_grad=True)
    assert grad == [False] * 4


def cell(kf_us: float, kb_us: float, agreement) -> dict:
    kb = agreement.kernelbench_stats([kb_us / 1e3] * 3)
    return agreement.compare({"median_us": kf_us, "ci_low_us": kf_us - 1, "ci_high_us": kf_us + 1,
                              "mean_us": kf_us, "n_reps": 40}, kb)


def test_render_shows_gpu_records_and_counts_agreement(agreement, tmp_path: Path):
    gpu = {"problem": "09_silu", "status": "ok", "device": "cuda", "device_name": "NVIDIA H200", "rebuilt_is_best": True,
           "workloads": {"gpu0": {"candidate": cell(500.0, 510.0, agreement), "eager": cell(1200.0, 1190.0, agreement)},
                         "gpu1": {"candidate": cell(500.0, 540.0, agreement), "eager": cell(1200.0, 1205.0, agreement)}}}
    gpu.update(agree=False, eager_agree=True)
    diagnosed = gpu["workloads"]["gpu1"]["candidate"]  # the diagnostics of the two-pass script, on one cell
    diagnosed.update(kb_first_pass=agreement.kernelbench_stats([0.56] * 3), host_launch_us=80.4,
                     kb_covered=agreement.kernelbench_stats([0.502] * 3), sm_clock_mhz=[1980, 1980, 1965])
    cpu = {**gpu, "problem": "17_elementwise_chain", "device": "cpu", "message": ""}
    broken = {"problem": "22_attention_bf16", "status": "error", "device": "cuda", "message": "RuntimeError: boom"}
    for r in (gpu, cpu, broken):
        (tmp_path / f"{r['problem']}.json").write_text(json.dumps(r))
    table = agreement.render(tmp_path)
    assert "| 09_silu | gpu0 | 500.0 [499.0, 501.0] | 510.0 (510.0) | 1.020 | yes | — | — | — | — | 1200.0 | 1190.0 | " \
           "0.992 | yes | — | — |" in table
    assert "|  | gpu1 | 500.0 [499.0, 501.0] | 540.0 (540.0) | 1.080 | **no** | 560.0 (1.120) | 502.0 (1.004) | 80 | " \
           "1980/1980/1965 | 1200.0 |" in table
    assert "launch cover added to the procedure (a diagnostic): candidate within ±5% on 1 of 1 shapes." in table
    assert "| 17_elementwise_chain |" not in table and "17_elementwise_chain (ok, not timed on a GPU" in table
    assert "22_attention_bf16 (error: RuntimeError: boom)" in table
    assert "1 problems, 2 shapes on NVIDIA H200: the exported kernel agrees within ±5% (median against median) on 1 " \
           "of 2 shapes and 0 of 1 problems; eager PyTorch (the control) on 2 of 2 shapes." in table


def test_no_claim_from_a_cpu(tmp_path: Path):
    out = tmp_path / "agreement"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "agreement.py"), "--only", "09", "--out-dir", str(out)],
                          capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert done.returncode != 0 and "no CUDA device here" in done.stderr and not out.exists(), done.stderr[-2000:]


def test_the_exported_package_is_what_is_timed_on_cpu_shapes(agreement, tmp_path: Path):
    data = json.loads((ROOT / "bench" / "results" / "09_silu.json").read_text())
    record = agreement.agree("09_silu", data, "cpu", tmp_path / "work", kb_trials=3, kb_warmup=1, verify_trials=1,
                             bench_knobs={"min_reps": 3, "max_reps": 3}, log=lambda line: None)
    assert record["status"] == "ok", record.get("message")
    assert record["candidate_id"] == record["export"]["candidate_id"]  # the rebuilt candidate is what is exported
    assert record["rebuilt_is_best"] == (record["candidate_id"] == data["best"])  # and says if the template changed
    assert record["export"]["timed_class"] == "kb_agree_09_silu.model_new"  # ModelNew from the exported package
    assert record["export"]["host_path"] == "replay"  # a template's kernel: replayed on CUDA tensors
    assert record["verify"]["status"] == "ok" and record["device"] == "cpu"
    assert sorted(record["workloads"]) == ["cpu0", "cpu1"]
    for w in record["workloads"].values():
        for name in ("candidate", "eager"):
            c = w[name]
            assert c["kb"]["n"] == 3 and c["kf"]["n_reps"] == 3 and c["ratio_median"] > 0 and isinstance(c["agree"], bool)
        assert w["candidate"]["replay"] == ["tensors on cpu: the verified forward runs"]
    out = tmp_path / "agreement"
    out.mkdir()
    (out / "09_silu.json").write_text(json.dumps(record, default=str))
    table = agreement.render(out)
    assert "| 09_silu |" not in table and "0 problems, 0 shapes" in table and "not timed on a GPU" in table


def test_speedups_are_rendered_from_kernelflows_medians_with_the_sol_ceiling(agreement, tmp_path: Path):
    medians = {f"{w}/{c}": {"median_us": us, "ci_low_us": us - 1, "ci_high_us": us + 1}
               for w in ("gpu0", "gpu1") for c, us in (("eager", 1250.0), ("compile", 550.0), ("candidate", 500.0))}
    record = {"problem": "09_silu", "status": "ok", "device": "cuda", "device_name": "NVIDIA H200",
              "kernelflow_medians": medians, "compile_specialized": True}
    (tmp_path / "09_silu.json").write_text(json.dumps(record))
    (tmp_path / "10_matmul_bf16.json").write_text(json.dumps({**record, "problem": "10_matmul_bf16", "device": "cpu"}))
    out = agreement.speedups([tmp_path])
    assert "| 09_silu | single op | 2.50 | 1.10 | 2.27 | candidate | 1.10 |" in out and "10_matmul_bf16" not in out
    row = next(line for line in out.splitlines() if line.startswith("| 09_silu | single op | 0."))
    compile_fraction, candidate_fraction, ceiling = (float(x) for x in row.split("|")[3:6])
    assert candidate_fraction > compile_fraction and abs(ceiling * compile_fraction - 1) < 0.01
    assert "single ops: a kernel at the SOL floor on every shape would be" in out
    searched = {"problem": "09_silu", "compile_specialized": True, "provenance": {"device": "cuda",
                "device_name": "NVIDIA H200"}, "workloads": {w: {"eager": [1250.0, 1249.0, 1251.0], "compile": [
                    550.0, 549.0, 551.0], "candidate": [440.0, 439.0, 441.0]} for w in ("gpu0", "gpu1")}}
    (tmp_path / "searched.json").write_text(json.dumps(searched))  # a later search's record of bench/results
    later = agreement.speedups([tmp_path, tmp_path / "searched.json"])
    assert "| 09_silu | single op | 2.84 | 1.25 | 2.27 | candidate | 1.25 |" in later
    (tmp_path / "searched.json").unlink()
    del record["compile_specialized"]  # a record from before torch.compile was specialized per shape
    (tmp_path / "09_silu.json").write_text(json.dumps(record))
    assert "| 09_silu † | single op |" in agreement.speedups([tmp_path])


def test_each_miss_is_named_by_its_own_controls(agreement, tmp_path: Path):
    """The cover closes a host-path miss while eager agrees; a miss that eager shares, with the speedup over eager
    the same under both procedures, is the machine's state; a candidate timed power-capped at a clock off
    KernelBench's, the way the times differ, is the power state (22 gpu1 of the fifteenth session: 1905 MHz capped
    against 1980, ratio 0.949); anything else is unexplained."""
    def shape(cand_kb: float, covered_kb: float, eager_kb: float, clocks: tuple | None = None) -> dict:
        c = cell(500.0, cand_kb, agreement)
        c["kb_covered"] = agreement.kernelbench_stats([covered_kb / 1e3] * 3)
        if clocks:
            (c["kf"]["timed_sm_clock_mhz"], c["kf"]["power_capped_share"]), c["sm_clock_mhz"] = clocks[:2], clocks[2]
        return {"candidate": c, "eager": cell(1000.0, eager_kb, agreement)}

    record = {"problem": "15_add_rmsnorm", "status": "ok", "device": "cuda", "device_name": "NVIDIA H200",
              "rebuilt_is_best": True, "agree": False, "eager_agree": False,
              "workloads": {"gpu0": shape(536.0, 501.0, 1002.0),  # host path
                            "gpu1": shape(570.0, 565.0, 1150.0),  # machine state: 1.14 and 1.15
                            "gpu2": shape(560.0, 560.0, 1001.0),  # unexplained
                            "gpu3": shape(505.0, 505.0, 1000.0),  # agrees
                            "gpu4": shape(474.0, 474.0, 1000.0, (1905.0, 1.0, [1965, 1980, 1980])),  # power state
                            "gpu5": shape(474.0, 474.0, 1000.0, (1905.0, 0.2, [1965, 1980, 1980])),  # not capped
                            "gpu6": shape(474.0, 474.0, 1000.0, (1980.0, 1.0, [1905, 1905, 1905])),  # the wrong way
                            "gpu7": shape(474.0, 474.0, 1000.0, (1965.0, 1.0, [1800, 1980, 1980]))}}  # within 2%
    assert [agreement.cause(c) for _, c in sorted(record["workloads"].items())] == [
        "host path", "machine state", "unexplained", None, "power state", "unexplained", "unexplained", "unexplained"]
    record["workloads"]["gpu0"]["candidate"]["replay"] = ["replayed"]
    record["workloads"]["gpu1"]["candidate"]["replay"] = ["seen once"]
    (tmp_path / "15_add_rmsnorm.json").write_text(json.dumps(record))
    table = agreement.render(tmp_path)
    assert ("- the export's host path (kernelflow/export_replay.py): replayed on 1 of 2 shapes; 15_add_rmsnorm gpu1: "
            "seen once") in table
    assert "- the speedup over eager (KernelBench's procedure against kernelflow's) within ±5% on 2 of 8 shapes." in table
    assert "- misses, host path (the launch cover brings it within ±5%, eager agrees): 1 (15_add_rmsnorm gpu0)" in table
    assert "- misses, machine state (eager misses too, the speedup over eager agrees): 1 (15_add_rmsnorm gpu1)" in table
    assert ("- misses, power state (kernelflow's timed calls ran power-capped, at a clock 2% or more off the one read "
            "after KernelBench's passes, the way the times differ): 1 (15_add_rmsnorm gpu4)") in table
    assert "- misses, unexplained (none of these): 4 (15_add_rmsnorm gpu2, 15_add_rmsnorm gpu5, 15_add_rmsnorm gpu6, " \
           "15_add_rmsnorm gpu7)" in table
