"""One candidate's steps without Prefect (flows/steps.py): what `kernelflow verify`/`bench` and the benchmark scripts
run, and what the flow's tasks wrap: each result recorded in the run's tables, what a stage made kept as blobs, the
GPU's lock held around benchmark and profile calls only."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from kernelflow.artifacts.store import Store
from kernelflow.flows import steps as steps_module
from kernelflow.flows.recorder import Recorder
from kernelflow.flows.steps import Steps
from kernelflow.stages.contracts import Candidate, Origin
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = load_problem(ROOT / "tests" / "fixtures" / "problems" / "add.py")
CANDIDATE = Candidate.make(PROBLEM.id, "triton", (ROOT / "tests" / "fixtures" / "candidates" / "triton_add.py").read_text(),
                           Origin(kind="user", proposer="fixture"))


def test_the_steps_record_every_result_with_its_files_kept_as_blobs(tmp_path: Path, monkeypatch) -> None:
    locked: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def lock(root: Path, device: str):
        locked.append((str(root), device))
        yield

    monkeypatch.setattr(steps_module, "gpu_lock", lock)
    store = Store(tmp_path)
    steps = Steps(Recorder(store, "r1"), "inline", 300.0)
    compiled = steps.compile(PROBLEM, CANDIDATE)  # a compile runs in a process of its own even when inline
    verified = steps.verify(PROBLEM, CANDIDATE, "cpu", ["cpu"], trials=1)
    timed = steps.benchmark(PROBLEM, CANDIDATE, "cpu", "cpu", ["eager"], accept=lambda t: True, min_reps=3,
                            max_reps=3)
    assert (compiled.status, verified.status, timed.status) == ("ok", "ok", "ok"), timed.message
    assert locked == [(str(store.root), "cpu")]  # the benchmark only (a CPU call: the lock lets it through)
    rows = {t: store.read(t, "r1") for t in ("candidates", "compiles", "verifications", "benchmarks", "timings")}
    assert list(rows["candidates"].id) == [CANDIDATE.id] and bool(rows["benchmarks"].accepted.iloc[0])
    assert "files" not in rows["compiles"] and len(rows["timings"]) == len(PROBLEM.cpu_workloads)
    kept = json.loads(rows["compiles"].blobs.iloc[0])
    assert {"ptx:add_kernel", "cubin:add_kernel", "stage_log"} <= set(kept)
    assert store.blob(kept["cubin:add_kernel"])[:4] == b"\x7fELF"
    assert b"trial 0" in store.blob(json.loads(rows["verifications"].blobs.iloc[0])["verify_log"])


def test_a_runs_timing_budget_bounds_every_benchmark_call_of_its_search(monkeypatch) -> None:
    """The run's timing budget (RunConfig.timing_budget_s, else KERNELFLOW_TIMING_BUDGET_S, else 30 s on cuda and 5 s
    on cpu) caps each benchmark call's budget per shape; a search's own rung may ask for less, never for more."""
    monkeypatch.delenv("KERNELFLOW_TIMING_BUDGET_S", raising=False)  # the suite's own (tests/conftest.py)
    from types import SimpleNamespace

    from kernelflow.flows.config import RunConfig
    from kernelflow.flows.run import benchmark_step
    from kernelflow.flows.state import SearchState

    asked: list[float] = []

    def benchmark(problem, candidate, device, sizes, accept=None, **knobs):
        asked.append(knobs["budget_s"])
        return SimpleNamespace(status="ok", duration_s=0.0)

    for config, knobs, expect in ((RunConfig(device="cpu"), {}, 5.0), (RunConfig(device="cuda"), {}, 30.0),
                                  (RunConfig(device="cpu", timing_budget_s=1.5), {}, 1.5),
                                  (RunConfig(device="cuda"), {"budget_s": 2.0}, 2.0),
                                  (RunConfig(device="cpu"), {"budget_s": 30.0}, 5.0)):
        run = SimpleNamespace(problem=PROBLEM, state=SearchState(PROBLEM, config), steps=SimpleNamespace(benchmark=benchmark))
        benchmark_step(run, CANDIDATE, **knobs)  # type: ignore[arg-type]
        assert asked[-1] == expect, (config, knobs)
    monkeypatch.setenv("KERNELFLOW_TIMING_BUDGET_S", "0.5")
    for config, expect in ((RunConfig(device="cuda"), 0.5), (RunConfig(device="cpu", timing_budget_s=1.5), 1.5)):
        run = SimpleNamespace(problem=PROBLEM, state=SearchState(PROBLEM, config), steps=SimpleNamespace(benchmark=benchmark))
        benchmark_step(run, CANDIDATE)  # type: ignore[arg-type]
        assert asked[-1] == expect, config
    for bad in ("0", "-1", "inf", "nan", "soon"):
        monkeypatch.setenv("KERNELFLOW_TIMING_BUDGET_S", bad)
        with pytest.raises(KernelflowError, match="KERNELFLOW_TIMING_BUDGET_S"):
            SearchState(PROBLEM, RunConfig(device="cpu"))
