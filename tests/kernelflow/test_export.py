"""`kernelflow export`: the best verified kernel as a package that a fresh Python process imports and runs, as
ModelNew, through its custom op, and through the op under torch.compile, matching the reference within tolerance.

The kernel comes from a real optimize run on CPU (17_elementwise_chain: parameters and constructor arguments).
On CPU, Triton's interpreter never beats eager, so that run's winner is eager: exporting it is refused unless
asked for. A candidate that wins is the same candidate with a GPU benchmark call recorded in a second run, as
tests/artifacts/test_winner.py records its calls.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelflow.artifacts.problem_runs import COMPLETE, index
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.tables import model_of
from kernelflow.export import ExportError, export
from kernelflow.flows.config import RunConfig
from kernelflow.stages.contracts import (
    BenchmarkResult,
    Candidate,
    CompileResult,
    Problem,
    Provenance,
    RunRecord,
    Timing,
    VerifyResult,
)
from tests.artifacts.test_problem_runs import parts_read
from tests.families import WRITTEN
from tests.flows.test_campaign import recording
from tests.kernelflow.test_cli import kf

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "17_elementwise_chain"
GPU_RUN = "gpu-run"
PROV = Provenance(device="cuda", device_name="NVIDIA H200", torch="2.11", python="3.12", hostname="h",
                  code_version="abc123", tf32=False)

# Run in a fresh process: import the export (nothing of kernelflow may come with it), then compare ModelNew, OpModel
# and OpModel under torch.compile (with work after the op, so its fake outputs matter) with the float64 reference on
# the problem's CPU workloads, the reference's weights loaded; the three agree bitwise and opcheck passes.
CHECK = """
import copy, importlib, json, sys
from pathlib import Path
import torch
out, problem_path = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, str(out.parent))
pkg = importlib.import_module(out.name)
leaked = sorted({m.split(".")[0] for m in sys.modules} & {"stages", "artifacts", "kernelflow", "flows"})
from kernelflow.stages.harness.compare import as_list, error_ratio
from kernelflow.stages.problems.kernelbench import import_problem, load_problem, workload_call
problem, module = load_problem(problem_path), import_problem(problem_path)
ratios, same = {}, []
for w in problem.cpu_workloads:
    init, inputs = workload_call(module, w, "get_init_inputs"), workload_call(module, w, "get_inputs")
    torch.manual_seed(1)
    ref = module.Model(*init)
    expect = as_list(copy.deepcopy(ref).double()(*[x.double() for x in inputs]))
    new, op = pkg.ModelNew(*init), pkg.OpModel(*init)
    for m in (new, op):
        m.load_state_dict(ref.state_dict(), strict=False)
    doubled = torch.compile(lambda *x: [o * 2 for o in as_list(op(*x))], fullgraph=True)  # work after the op
    outs = {}
    with torch.no_grad():
        for name, f in (("ModelNew", new), ("OpModel", op), ("compiled", lambda *x: [o / 2 for o in doubled(*x)])):
            outs[name] = as_list(f(*inputs))
            ratios[w.name + " " + name] = max(error_ratio(o, e, problem.tolerance) for o, e in zip(outs[name], expect))
    same.append(all(torch.equal(a, b) for a, b in zip(outs["ModelNew"], outs["OpModel"] + outs["compiled"])))
    checks = torch.library.opcheck(getattr(torch.ops.kf_export, pkg.MANIFEST["custom_op"]["name"].split("::")[1]),
                                   (op.kf_handle, list(inputs)))
    same.append(set(checks.values()) == {"SUCCESS"})
print(json.dumps({"leaked": leaked, "ratios": ratios, "same": all(same), "replay": sorted(set(pkg.replay_status(new).values()))}))
"""


@pytest.fixture(scope="module")
def cpu_run(prefect_harness, tmp_path_factory) -> tuple[Path, dict]:
    """A real optimize run on CPU: (its store, its summary)."""
    from kernelflow.flows.optimize import optimize

    store = tmp_path_factory.mktemp("store")
    summary = optimize(str(ROOT / "problems" / f"{PROBLEM}.py"), RunConfig(budget=1, store=str(store), device="cpu",
                                                                         families=WRITTEN))
    assert summary["winner"] == "eager" and summary["best_candidate_id"]  # CPU: the interpreter never wins
    return store, summary


def with_gpu_win(cpu_run: tuple[Path, dict], root: Path) -> Store:
    """A copy of the CPU run's store plus a run whose benchmark call on an H200 has its best candidate winning."""
    shutil.copytree(cpu_run[0], root)
    store, run, cid = Store(root), cpu_run[1]["run_id"], cpu_run[1]["best_candidate_id"]
    index(store, PROBLEM, GPU_RUN)  # as a run does when it starts
    for table, model, key in (("problems", Problem, "id"), ("candidates", Candidate, "id"),
                              ("compiles", CompileResult, "candidate_id"), ("verifications", VerifyResult, "candidate_id")):
        frame = store.read(table, run)
        rows = frame[frame[key] == (PROBLEM if table == "problems" else cid)].to_dict("records")
        store.append(table, GPU_RUN, [model_of(model, r) for r in rows])
    times = {"candidate": 100.0, "eager": 200.0, "compile": 125.0}
    timings = [Timing(problem_id=PROBLEM, candidate_id=cid if who == "candidate" else None, benchmark_for=cid,
                      contender=who, workload="gpu0", median_us=t, ci_low_us=t, ci_high_us=t, min_us=t, mean_us=t,
                      n_reps=50, l2_flushed=True, input_sets=2, provenance=PROV)  # type: ignore[arg-type]
               for who, t in times.items()]
    store.append_benchmark(GPU_RUN, BenchmarkResult(candidate_id=cid, problem_id=PROBLEM, status="ok", device="cuda",
                                                    sizes="gpu", timings=timings, speedup_vs_eager=2.0,
                                                    speedup_vs_compile=1.25, recheck_passed=True))
    return store


def test_a_baseline_win_exports_nothing_unless_asked(cpu_run, tmp_path: Path):
    store, summary = cpu_run
    out = tmp_path / "chain_kernel"
    refused = kf("export", PROBLEM, "--out", str(out), "--store", str(store), store=store)
    assert refused.returncode == 1 and "baseline eager PyTorch" in refused.stderr, refused.stdout + refused.stderr
    assert "--even-if-slower" in refused.stderr and not out.exists()
    asked = kf("export", PROBLEM, "--out", str(out), "--store", str(store), "--even-if-slower", store=store)
    assert asked.returncode == 0 and "NOT faster than the baseline" in asked.stdout, asked.stdout + asked.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert not manifest["beats_baselines"] and manifest["winner"]["id"] == "eager" and manifest["device"] == "cpu"
    assert manifest["candidate"]["id"] == summary["best_candidate_id"] and manifest["run_id"] == summary["run_id"]
    runs = Store(store).runs()
    assert manifest["code_version"] == runs[runs.run_id == summary["run_id"]].code_version.iloc[0]
    assert "NOT FASTER THAN WHAT YOU HAVE" in (out / "__init__.py").read_text()


def test_the_winner_exports_as_a_drop_in_package(cpu_run, tmp_path: Path):
    store = with_gpu_win(cpu_run, tmp_path / "store")
    cid = cpu_run[1]["best_candidate_id"]
    with pytest.raises(ExportError, match="baseline eager PyTorch"):  # the CPU run alone: eager won
        export(store, PROBLEM, tmp_path / "cpu_only", run_id=cpu_run[1]["run_id"])
    out = tmp_path / "chain_kernel"
    manifest = export(store, PROBLEM, out)  # the best over every run: the GPU run's winner
    assert manifest["run_id"] == GPU_RUN and manifest["beats_baselines"] and manifest["candidate"]["id"] == cid
    assert manifest["speedup_vs_eager"] == 2.0 and abs(manifest["winner"]["speedup_vs_compile"] - 1.25) < 1e-9
    assert manifest["code_version"] == "abc123" and manifest["measured_with"]["device_name"] == "NVIDIA H200"
    assert manifest["compile"]["toolchain"]["triton"] and manifest["verification"]["trials_passed"] > 0
    assert manifest["candidate"]["backend"] == "triton" and manifest["requires"] == ["torch", "triton"]
    source = Store(tmp_path / "store").read("candidates", GPU_RUN).source.iloc[0]
    assert (out / "model_new.py").read_text() == source  # the source as verified, byte for byte
    assert any(f.endswith(".cubin") for f in manifest["files"]) and all(
        (out / f).is_file() for f in manifest["files"])
    assert "The winner of run gpu-run: 2.00x eager PyTorch, 1.25x torch.compile" in (out / "__init__.py").read_text()
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # inductor's cache keys ignore the op's fake
    done = subprocess.run([sys.executable, "-c", CHECK, str(out), str(ROOT / "problems" / f"{PROBLEM}.py")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["leaked"] == [] and result["same"], result
    # a template's kernel: its forward replays on CUDA tensors (tests/kernelflow/test_export_replay.py), on CPU ones never
    assert manifest["host_path"] == "replay" and "replay.py" in manifest["files"]
    assert result["replay"] == ["tensors on cpu: the verified forward runs"], result
    assert len(result["ratios"]) == 6 and max(result["ratios"].values()) <= 1.0, result["ratios"]


def test_an_export_reads_the_problems_own_runs_however_many_other_runs_the_store_holds(cpu_run, tmp_path: Path,
                                                                                         monkeypatch):
    """A named run's export reads that run's partitions alone; an export over every run finds the problem's runs in
    its problem_runs partition and reads theirs: no table whole, and no more parts with twice as many runs of another
    problem in the store (whole-table reads grew with every night: BENCHMARKS.md, "Load")."""
    store = with_gpu_win(cpu_run, tmp_path / "store")

    def other_nights(first: int) -> None:  # runs of another problem, recorded as a run records them
        for i in range(first, first + 15):
            other, when = f"20261101T020000-other-{i:06x}", "2026-11-01T02:00:00+00:00"
            index(store, "other", other)
            store.append("runs", other, [RunRecord(problem_id="other", status="finished", started_at=when,
                                                   updated_at=when, device="cuda", sizes="gpu", budget_candidates=1,
                                                   proposer="builtin", code_version="old")])
            store.append_benchmark(other, BenchmarkResult(candidate_id="k", problem_id="other", status="ok",
                                                          device="cuda", sizes="gpu", speedup_vs_eager=9.0))

    other_nights(0)
    reads, parts = recording(monkeypatch), parts_read(monkeypatch)
    assert export(store, PROBLEM, tmp_path / "named", run_id=GPU_RUN)["code_version"] == "abc123"
    assert {run for _, run in reads} == {GPU_RUN}, reads
    reads.clear()
    parts.clear()
    assert export(store, PROBLEM, tmp_path / "any")["run_id"] == GPU_RUN
    assert {run for _, run in reads} == {GPU_RUN, cpu_run[1]["run_id"], PROBLEM, COMPLETE}, reads
    n_parts = len(parts)
    other_nights(15)
    parts.clear()
    assert export(store, PROBLEM, tmp_path / "again")["run_id"] == GPU_RUN
    assert len(parts) == n_parts, parts


def test_export_errors_say_what_is_wrong(cpu_run, tmp_path: Path):
    store, summary = Store(cpu_run[0]), cpu_run[1]
    with pytest.raises(ExportError, match="the store holds no benchmark"):
        export(Store(tmp_path / "empty"), PROBLEM, tmp_path / "k")
    with pytest.raises(ExportError, match=f"timed problem '01_softmax': it holds {PROBLEM}"):
        export(store, "01_softmax", tmp_path / "k")
    with pytest.raises(ExportError, match=f"runs that did: {summary['run_id']}"):
        export(store, PROBLEM, tmp_path / "k", run_id="no-such-run")
    with pytest.raises(ExportError, match="must be a Python identifier"):
        export(store, PROBLEM, tmp_path / "my-kernel", even_if_slower=True)
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not an earlier export"):
        export(store, PROBLEM, tmp_path / "k", even_if_slower=True, force=True)
    assert (tmp_path / "k" / "notes.txt").is_file()
    export(store, str(ROOT / "problems" / f"{PROBLEM}.py"), tmp_path / "again", even_if_slower=True)  # a path names the problem too
    with pytest.raises(ExportError, match="--force replaces"):
        export(store, PROBLEM, tmp_path / "again", even_if_slower=True)
    assert export(store, PROBLEM, tmp_path / "again", even_if_slower=True, force=True)["run_id"] == summary["run_id"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging dir left
