"""The run id `verify` and `bench` print is one `show` and `report` take, and they show what was recorded: the verdict,
bench's timings beside both baselines, a rejection's reason; `latest` and `--campaign all` stay optimize runs. And
`export`'s refusal is one line however many runs timed the problem."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelflow.artifacts.store import Store
from kernelflow.export import ExportError, export
from kernelflow.stages.contracts import BenchmarkResult, Candidate, Origin, Provenance, Timing

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "problems" / "01_softmax.py")
EXAMPLE = str(ROOT / "prompts" / "examples" / "triton_softmax.py")
WRONG = str(ROOT / "tests" / "fixtures" / "adversarial" / "wrong.py")  # torch math: the policy rejects it
PRINTED_ID = re.compile(r"^run (cli-\S+): ", re.M)


def kf(store: Path, *args: str) -> subprocess.CompletedProcess:
    """The command as a user runs it, in a fresh interpreter, from the store's folder (Prefect's home lands there)."""
    return subprocess.run([sys.executable, "-m", "kernelflow.cli", *args, "--store", str(store)], capture_output=True,
                          text=True, cwd=store.parent, env={**os.environ, "KERNELFLOW_TIMING_BUDGET_S": "1"},
                          timeout=600)


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """A store with a real bench of the example kernel (eager and torch.compile timed) and a verify that rejects."""
    store = tmp_path_factory.mktemp("checks") / "store"
    bench = kf(store, "bench", SOFTMAX, EXAMPLE, "--device", "cpu", "--baselines", "eager,compile")
    assert bench.returncode == 0, bench.stdout + bench.stderr
    verify = kf(store, "verify", SOFTMAX, WRONG, "--device", "cpu")
    assert verify.returncode == 1 and "REJECTED" in verify.stderr, verify.stdout + verify.stderr
    return store, bench, verify


def printed_id(out: subprocess.CompletedProcess) -> str:
    match = PRINTED_ID.search(out.stdout)
    assert match, out.stdout
    return match.group(1)


def timing_block(text: str) -> list[str]:
    """From the timing table's header to the speedup line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("workload "))
    end = next(i for i, line in enumerate(lines) if line.startswith("speedup vs eager"))
    return lines[start:end + 1]


@pytest.mark.slow  # a real bench with torch.compile on the CPU (~30 s)
def test_show_takes_the_id_bench_printed_and_shows_its_timings(judged):
    store, bench, _ = judged
    run_id = printed_id(bench)
    shown = kf(store, "show", run_id)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(f"run {run_id}: `kernelflow bench` of {EXAMPLE}, triton candidate "), shown.stdout
    table = timing_block(shown.stdout)
    assert table == timing_block(bench.stdout)  # what bench printed, rebuilt from its records
    contenders = {(line.split()[0], line.split()[1]) for line in table[1:-1]}
    assert contenders == {(w, c) for w in ("cpu0", "cpu1") for c in ("eager", "compile", "candidate")}, table
    assert re.fullmatch(r"speedup vs eager \d[\d.]*x, vs torch.compile \d[\d.]*x", table[-1]), table[-1]
    assert "verify   ok: " in shown.stdout and shown.stdout.rstrip().endswith("VERIFIED")


@pytest.mark.slow
def test_show_takes_the_id_verify_printed_and_shows_the_reason(judged):
    store, _, verify = judged
    run_id = printed_id(verify)
    shown = kf(store, "show", run_id)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"run {run_id}: `kernelflow verify` of {WRONG}, torch candidate " in shown.stdout
    assert "verify   failed: policy_violation: " in shown.stdout and "aten.exp x1" in shown.stdout
    assert shown.stdout.rstrip().endswith("REJECTED") and "workload " not in shown.stdout


@pytest.mark.slow
def test_report_takes_both_ids_and_latest_stays_an_optimize_run(judged):
    store, bench, verify = judged
    ids = [printed_id(bench), printed_id(verify)]
    page = store.parent / "checks.html"
    out = kf(store, "report", *ids, "--out", str(page))
    assert out.returncode == 0 and "report of 2 run(s)" in out.stdout, out.stdout + out.stderr
    html = page.read_text()
    assert '<table class="checks">' in html and all(f'data-run="{i}"' in html for i in ids)
    assert "kernelflow bench: VERIFIED, " in html and "x torch.compile" in html
    assert "kernelflow verify: REJECTED: verify failed: policy_violation: " in html
    for command in ("show", "report"):  # no optimize run here: `latest` names none, and says which ids there are
        latest = kf(store, command, *(["--out", str(page)] if command == "report" else []))
        assert latest.returncode == 1 and "no optimize run (for 'latest')" in latest.stderr, latest.stderr
        assert all(i in latest.stderr for i in ids), latest.stderr
    typo = kf(store, "show", "cli-nope")
    assert typo.returncode == 1 and f"no run 'cli-nope' in {store.resolve()}; verify and bench runs: {', '.join(ids)}" in typo.stderr


def a_slow_run(store: Store, run_id: str, problem_id: str, speedup: float, device: str = "cpu") -> str:
    """A run that timed one verified candidate `speedup` times eager's speed: eager wins below 1."""
    prov = Provenance(device=device, device_name="x86", torch="2", python="3", hostname="h", code_version="c",
                      tf32=False)
    cand = Candidate.make(problem_id, "triton", f"class ModelNew: ...  # {run_id}", Origin(kind="builtin",
                                                                                           proposer="rowwise"))
    store.append("candidates", run_id, [cand])
    timings = [Timing(problem_id=problem_id, candidate_id=cand.id if who == "candidate" else None, contender=who,
                      benchmark_for=cand.id, workload="cpu0", median_us=t, ci_low_us=t, ci_high_us=t, min_us=t,
                      mean_us=t, n_reps=9, l2_flushed=False, input_sets=2, provenance=prov)
               for who, t in (("candidate", 100.0 / speedup), ("eager", 100.0))]
    store.append_benchmark(run_id, BenchmarkResult(candidate_id=cand.id, problem_id=problem_id, status="ok",
                                                   device=device, sizes="cpu", timings=timings,
                                                   speedup_vs_eager=speedup))  # type: ignore[arg-type]
    return cand.id


def test_export_refusal_is_one_short_line_over_many_runs(tmp_path: Path):
    store = Store(tmp_path)
    speedups = [0.01451952968295369, 0.3141592653589793, 0.2718281828459045, 0.5]
    cids = [a_slow_run(store, f"r{i}", "17_elementwise_chain", s) for i, s in enumerate(speedups)]
    with pytest.raises(ExportError) as refused:
        export(store, "17_elementwise_chain", tmp_path / "pkg")
    message = str(refused.value)
    assert "\n" not in message and len(message) < 300, message
    assert message == ("no kernel of '17_elementwise_chain' beat the baselines in 4 runs: the baseline eager PyTorch "
                       f"won 4; the best candidate, {cids[3]} (run r3), reached 0.500x eager on cpu; --even-if-slower "
                       "exports it anyway, marked as slower")
    with pytest.raises(ExportError, match=r"in run r0: the baseline eager PyTorch won; the best candidate, \w+, "
                                          r"reached 0\.0145x eager on cpu; --even-if-slower"):
        export(store, "17_elementwise_chain", tmp_path / "pkg", run_id="r0")
