"""The problem_runs index (artifacts/problem_runs.py): a problem's runs from its own partition; a store written before
the index still answers (read whole, as before), and its first indexed run indexes every earlier run once."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.artifacts import tables
from kernelflow.artifacts.problem_runs import COMPLETE, TABLE, index, partition, runs_of
from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import BenchmarkResult, RunRecord


def parts_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every table part read from now on (tables.read reads them one by one)."""
    real, parts = tables.read_part, []

    def counted(path, *a, **k):
        parts.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(tables, "read_part", counted)
    return parts


def started(store: Store, problem_id: str, run_id: str) -> None:
    """A run's first runs row, written as code from before the index wrote it: not indexed."""
    store.append("runs", run_id, [RunRecord(problem_id=problem_id, status="running", started_at="2026-11-01",
                                            updated_at="2026-11-01", device="cpu", sizes="cpu", budget_candidates=1,
                                            proposer="builtin", code_version="c")])


def test_a_store_from_before_the_index_is_read_whole_until_its_first_indexed_run_indexes_it_all(tmp_path: Path,
                                                                                                monkeypatch):
    store = Store(tmp_path)
    for run in ("r1", "r2"):
        started(store, "09_silu", run)
    started(store, "other", "r3")
    store.append("benchmarks", "cli-1", [BenchmarkResult(candidate_id="k", problem_id="09_silu", status="ok",  # a
                                                         device="cpu", sizes="cpu")])  # `kernelflow bench`: no runs row
    assert runs_of(store, "09_silu") == ["cli-1", "r1", "r2"]  # no index yet: found the old way
    index(store, "01_softmax", "r4")  # the first run under the index, of another problem
    assert sorted(p.name for p in (tmp_path / "tables" / TABLE).iterdir()) == [
        f"run_id={p}" for p in ("01_softmax", "09_silu", COMPLETE, "other")]
    parts = parts_read(monkeypatch)
    assert runs_of(store, "09_silu") == ["cli-1", "r1", "r2"] and runs_of(store, "01_softmax") == ["r4"]
    assert runs_of(store, "17_elementwise_chain") == []
    assert parts and all(f"/tables/{TABLE}/" in p for p in parts), parts  # the index alone: no scan any more


def test_a_problems_partition_is_a_safe_name_and_ids_sharing_one_stay_apart(tmp_path: Path):
    store = Store(tmp_path)
    index(store, "my problem (v2)", "a")
    index(store, "my_problem__v2_", "b")
    index(store, "../up", "c")
    assert partition("my problem (v2)") == partition("my_problem__v2_") == "my_problem__v2_"
    assert partition("../up") == ".._up" and partition("ü" * 300) == "_" * 200 and partition("") == "_"
    assert runs_of(store, "my problem (v2)") == ["a"] and runs_of(store, "my_problem__v2_") == ["b"]
    assert runs_of(store, "../up") == ["c"] and (tmp_path / "tables" / TABLE / "run_id=.._up").is_dir()
    index(store, "my problem (v2)", "a")  # indexed twice (a crash before the mark): listed once
    assert runs_of(store, "my problem (v2)") == ["a"]
