"""Artifact round trip: rows in, the same values out through pandas; blobs by content hash."""

from pathlib import Path

import pandas as pd
import pytest

from kernelflow.artifacts import tables
from kernelflow.artifacts.blobs import keep_files, put_bytes
from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import Candidate, Origin, Provenance, Timing, VerifyResult


def test_rows_round_trip_through_parquet(tmp_path: Path):
    store = Store(tmp_path)
    cand = Candidate.make("p", "triton", "src", Origin(kind="builtin", proposer="rowwise", params={"BLOCK": 1024}))
    store.append("candidates", "run-a", [cand])
    store.append("verifications", "run-a", [VerifyResult(candidate_id=cand.id, problem_id="p", status="failed",
                                                         failure_kind="nan", device="cpu", sizes=["cpu"])])
    store.append("verifications", "run-b", [VerifyResult(candidate_id="x", problem_id="p", status="ok",
                                                         device="cpu", sizes=["cpu"], max_err_ratio=0.5)])
    frame = pd.read_parquet(tmp_path / "tables" / "verifications")
    assert sorted(frame.run_id.astype(str)) == ["run-a", "run-b"] and set(frame.failure_kind.dropna()) == {"nan"}
    back = store.read("candidates", "run-a").iloc[0]
    assert (back.id, back.origin_proposer, back.origin_params) == (cand.id, "rowwise", '{"BLOCK": 1024}')


def test_timings_carry_flat_provenance(tmp_path: Path):
    prov = Provenance(device="cpu", device_name="x86", torch="2", python="3.11", hostname="h", code_version="abc",
                      tf32=False)
    row = Timing(problem_id="p", candidate_id=None, contender="eager", benchmark_for="baseline", workload="cpu0", median_us=2.0, ci_low_us=1.0,
                 ci_high_us=3.0, min_us=1.0, mean_us=2.0, n_reps=9, l2_flushed=False, input_sets=2, provenance=prov)
    Store(tmp_path).append("baselines", "r", [row])
    frame = Store(tmp_path).read("baselines")
    assert frame.provenance_code_version.iloc[0] == "abc" and frame.median_us.iloc[0] == 2.0


def test_unknown_table_refused_and_a_failed_write_leaves_no_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    store = Store(tmp_path)
    with pytest.raises(ValueError):
        store.append("nope", "r", [Origin(kind="user", proposer="x")])

    def dies_mid_write(table, path):  # a crash after the temporary file exists, before the rename
        Path(path).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(tables.pq, "write_table", dies_mid_write)
    with pytest.raises(OSError):
        store.append("candidates", "r", [Candidate.make("p", "triton", "src", Origin(kind="user", proposer="x"))])
    assert not list(tmp_path.rglob("part-*.parquet")) and store.read("candidates").empty


def test_blobs_are_content_addressed(tmp_path: Path):
    sha = put_bytes(tmp_path, b"ptx text")
    assert put_bytes(tmp_path, b"ptx text") == sha
    assert (tmp_path / sha[:2] / sha).read_bytes() == b"ptx text"


def test_parts_of_different_code_versions_keep_their_columns(tmp_path: Path):
    """A field added to a model (a newer part) must not vanish when the table is read across runs."""
    from pydantic import BaseModel

    class Old(BaseModel):
        x: int

    class New(BaseModel):
        x: int
        y: str

    tables.append(tmp_path, "t", "a", [Old(x=1)])
    tables.append(tmp_path, "t", "b", [New(x=2, y="n")])
    frame = tables.read(tmp_path, "t")
    assert list(frame.x) == [1, 2] and frame.y.isna().tolist() == [True, False] and list(frame.run_id) == ["a", "b"]


def test_a_stage_results_files_become_blobs_and_nothing_outside_its_work_dir_does(tmp_path: Path):
    work, blobs = tmp_path / "work", tmp_path / "blobs"
    (work / "binaries").mkdir(parents=True)
    (work / "binaries" / "k.ptx").write_text(".target sm_90a")
    (tmp_path / "secret.txt").write_text("not the stage's")
    (work / "link.txt").symlink_to(tmp_path / "secret.txt")
    made = VerifyResult(candidate_id="c", problem_id="p", status="ok", device="cpu", sizes=["cpu"], files={
        "ptx:k": "binaries/k.ptx", "escape": "../secret.txt", "link": "link.txt", "gone": "never_written.txt"})
    kept = keep_files(blobs, work, made)
    assert set(kept.blobs) == {"ptx:k"} and kept.files == {}
    assert (blobs / kept.blobs["ptx:k"][:2] / kept.blobs["ptx:k"]).read_text() == ".target sm_90a"
    for what in ("escape (../secret.txt: outside the work dir)", "link (link.txt: outside the work dir)",
                 "gone (never_written.txt: missing)"):
        assert what in kept.message
    assert "files" not in tables.row(kept)  # what the stage made is named by its blobs in the table, not by path


def test_parts_whose_field_changed_type_still_read(tmp_path: Path):
    """A field whose type changed between code versions (int, then str): both parts are read, their values kept."""
    from pydantic import BaseModel

    class Old(BaseModel):
        x: int

    class New(BaseModel):
        x: str

    tables.append(tmp_path, "t", "a", [Old(x=1)])
    tables.append(tmp_path, "t", "b", [New(x="n")])
    assert list(tables.read(tmp_path, "t").x) == [1, "n"]
