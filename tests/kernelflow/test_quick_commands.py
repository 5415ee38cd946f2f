"""The commands that read the store or check files import only what they need: `show` reads a run without torch,
Prefect or Triton; `problems validate` reports a file that does not import without torch, and checks a problem
without torch's meta kernels (which import sympy and torch._dynamo, seconds on first use)."""

import json
import subprocess
import sys
from pathlib import Path

from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import BenchmarkResult, Candidate, Origin, Provenance, RunRecord, Timing

ROOT = Path(__file__).resolve().parents[2]
WATCHED = ("torch", "triton", "prefect", "sympy", "torch._dynamo")


def command(*argv: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The command run by kernelflow.cli.main in a fresh interpreter, and which WATCHED modules it imported."""
    code = ("import json, sys\nfrom kernelflow.cli import main\nrc = main(sys.argv[1:])\n"
            f"print(json.dumps([m for m in {WATCHED!r} if m in sys.modules]))\nsys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT, timeout=300)
    return out, json.loads(out.stdout.splitlines()[-1])


def a_run(store: Store) -> str:
    """A finished CPU run: one verified candidate timed beside eager."""
    prov = Provenance(device="cpu", device_name="x86", torch="2", python="3", hostname="h", code_version="c",
                      tf32=False)
    cand = Candidate.make("p", "triton", "class ModelNew: ...", Origin(kind="builtin", proposer="rowwise", params={}))
    store.append("candidates", "r", [cand])
    timings = [Timing(problem_id="p", candidate_id=cand.id if who == "candidate" else None, contender=who,
                      benchmark_for=cand.id, workload="cpu0", median_us=t, ci_low_us=t, ci_high_us=t, min_us=t,
                      mean_us=t, n_reps=9, l2_flushed=False, input_sets=2, provenance=prov)
               for who, t in (("candidate", 100.0), ("eager", 150.0))]
    store.append_benchmark("r", BenchmarkResult(candidate_id=cand.id, problem_id="p", status="ok", device="cpu",
                                                sizes="cpu", timings=timings, speedup_vs_eager=1.5))
    store.append("runs", "r", [RunRecord(problem_id="p", status="finished", started_at="2026-01-01T00:00:00",
                                         updated_at="2026-01-01T00:01:00", device="cpu", sizes="cpu",
                                         budget_candidates=1, proposer="builtin", n_candidates=1, n_verified=1,
                                         best_candidate_id=cand.id, best_speedup_vs_eager=1.5, code_version="c")])
    return cand.id


def test_show_reads_a_run_without_torch_prefect_or_triton(tmp_path: Path):
    best = a_run(Store(tmp_path))
    out, imported = command("show", "latest", "--store", str(tmp_path))
    assert out.returncode == 0 and best in out.stdout and "baseline medians" in out.stdout, out.stdout + out.stderr
    assert f"best {best} (1.50x vs eager)" in out.stdout, out.stdout
    assert imported == []


def test_validate_reports_a_file_that_does_not_import_without_torch(tmp_path: Path):
    (tmp_path / "typo.py").write_text("import torch\n\ndef get_inputs(:\n")
    out, imported = command("problems", "validate", str(tmp_path / "typo.py"), str(tmp_path / "missing.py"))
    assert out.returncode == 1 and "does not import: SyntaxError" in out.stdout and "no such file" in out.stdout
    assert imported == []


def test_validate_runs_a_problem_without_torchs_meta_machinery():
    out, imported = command("problems", "validate", "problems/09_silu.py", "problems/31_masked_softmax.py")
    assert out.returncode == 0 and out.stdout.count("ok      ") == 2, out.stdout + out.stderr
    assert imported == ["torch"]


def test_validate_leaves_torchs_thread_count_as_it_was():
    """validate runs each reference on one intra-op thread and gives the process its threads back, also when a reference fails."""
    import torch

    from kernelflow.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["problems", "validate", str(ROOT / "problems" / "09_silu.py"),
                     str(ROOT / "tests" / "fixtures" / "broken_problems" / "nan_reference.py")]) == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
