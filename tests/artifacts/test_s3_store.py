"""The S3 store against a real S3-compatible server (moto's, on a free localhost port), through a proxy that
injects faults: a run's tables and blobs land on S3 and read back into an empty local copy; a large blob goes up
in parts; an unreachable S3 spools and warns, and a flush later uploads everything once; transient 5xx are
retried; blobs already there are not uploaded again; the command line works with `s3://` stores."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kernelflow.artifacts.mirror import MirrorWarning
from kernelflow.artifacts.s3 import S3Remote
from kernelflow.artifacts.store import Store
from tests.s3_fixtures import candidate, checked, keys

ROOT = Path(__file__).resolve().parents[2]


def test_a_runs_tables_and_blobs_land_on_s3_and_read_back_into_an_empty_copy(s3, tmp_path):
    bucket, client = s3
    store = Store(f"s3://{bucket}/team/nightly", local=tmp_path / "worker")
    cands = [candidate(1), candidate(2)]
    store.append("candidates", "r1", cands)
    store.append("verifications", "r1", [checked(store, c, f"log {c.id}".encode()) for c in cands])
    store.append("candidates", "r2", [candidate(3)])
    (store.work_dir / "r1" / "scratch.txt").parent.mkdir(parents=True)
    (store.work_dir / "r1" / "scratch.txt").write_text("stays local")

    local = sorted(p.relative_to(store.root).as_posix() for p in store.root.rglob("*")
                   if p.is_file() and p.parts[len(store.root.parts)] in ("tables", "blobs"))
    assert keys(client, bucket) == [f"team/nightly/{rel}" for rel in local] and len(local) == 5 and not store.flush()

    fresh = Store(f"s3://{bucket}/team/nightly", local=tmp_path / "laptop")
    assert sorted(fresh.read("candidates").run_id) == ["r1", "r1", "r2"]
    rows = fresh.read("verifications", "r1")
    assert list(rows.candidate_id) == [c.id for c in cands]
    sha = json.loads(rows.blobs.iloc[0])["verify_log"]
    assert fresh.blob(sha) == f"log {cands[0].id}".encode() and not (fresh.work_dir / "r1").exists()
    with pytest.raises(FileNotFoundError, match="neither in"):
        fresh.blob("0" * 64)


def test_a_large_blob_goes_up_in_parts(s3, tmp_path, monkeypatch):
    bucket, client = s3
    monkeypatch.setattr(S3Remote, "MULTIPART_THRESHOLD_BYTES", 5 * 2**20)
    monkeypatch.setattr(S3Remote, "CHUNK_BYTES", 5 * 2**20)
    store = Store(f"s3://{bucket}/big", local=tmp_path / "a")
    data = os.urandom(11 * 2**20)
    store.append("verifications", "r", [checked(store, candidate(1), data)])
    sha = json.loads(store.read("verifications").blobs.iloc[0])["verify_log"]
    etag = client.head_object(Bucket=bucket, Key=f"big/blobs/{sha[:2]}/{sha}")["ETag"]
    assert etag.strip('"').endswith("-3")  # three parts of 5, 5 and 1 MiB
    assert Store(f"s3://{bucket}/big", local=tmp_path / "b").blob(sha) == data


def test_s3_down_spools_with_a_warning_and_a_flush_uploads_everything_once(s3, proxy, tmp_path, monkeypatch):
    bucket, client = s3
    monkeypatch.setattr(S3Remote, "ATTEMPTS", 2)
    store = Store(f"s3://{bucket}/p", local=tmp_path / "a")
    proxy.stop()
    with pytest.warns(MirrorWarning, match=r"2 artifact file\(s\) not uploaded to s3://.*they wait in"):
        store.append("verifications", "r", [checked(store, candidate(1), b"first log")])
    with warnings.catch_warnings():  # cooling down: later writes only spool, without waiting on S3 again
        warnings.simplefilter("error", MirrorWarning)
        store.append("candidates", "r", [candidate(1), candidate(2)])
        assert list(store.read("candidates").id) == [candidate(1).id, candidate(2).id]  # the local copy reads on
    assert len(store.mirror.pending()) == 3 and keys(client, bucket) == []

    proxy.start()
    assert store.flush() == 0 and store.mirror.pending() == []
    assert len(keys(client, bucket)) == 3
    fresh = Store(f"s3://{bucket}/p", local=tmp_path / "b")
    assert len(fresh.read("candidates")) == 2 and len(fresh.read("verifications")) == 1
    assert store.flush() == 0 and len(keys(client, bucket)) == 3
    puts = [path for method, path, status in proxy.log if method == "PUT" and status == 200]
    assert len(puts) == len(set(puts)) == 3  # each file uploaded exactly once


def test_a_spool_left_by_an_earlier_process_goes_up_with_kernelflow_flush(s3, proxy, tmp_path, monkeypatch):
    bucket, client = s3
    monkeypatch.setattr(S3Remote, "ATTEMPTS", 1)
    proxy.stop()
    with pytest.warns(MirrorWarning):
        Store(f"s3://{bucket}/p", local=tmp_path / "a").append("candidates", "r", [candidate(1)])
    proxy.start()
    env = {**{k: v for k, v in os.environ.items() if k.startswith(("AWS_", "PATH"))},
           "KERNELFLOW_STORE_LOCAL": str(tmp_path / "a")}
    out = subprocess.run([sys.executable, "-m", "kernelflow.cli", "flush", "--store", f"s3://{bucket}/p"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "nothing pending" in out.stdout, out.stdout + out.stderr
    assert [k.split("/")[2] for k in keys(client, bucket)] == ["candidates"]


def test_transient_5xx_are_retried(s3, proxy, tmp_path):
    bucket, client = s3
    store = Store(f"s3://{bucket}/p", local=tmp_path / "a")
    proxy.fail("PUT", 2, status=503)
    proxy.fail("HEAD", 1, status=500)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MirrorWarning)
        store.append("verifications", "r", [checked(store, candidate(1), b"log")])
    assert proxy.requests("HEAD", "/blobs/") == [500, 404]
    assert proxy.requests("PUT", "/blobs/") == [503, 503, 200] and proxy.requests("PUT", "/tables/") == [200]
    proxy.fail("GET", 1, status=502)
    assert len(Store(f"s3://{bucket}/p", local=tmp_path / "b").read("verifications")) == 1
    assert proxy.requests("GET", "list-type=2")[:2] == [502, 200]


def test_a_blob_already_on_s3_is_not_uploaded_again(s3, proxy, tmp_path):
    bucket, _ = s3
    for host in ("a", "b"):  # two machines, each with its own local copy, write the same log
        store = Store(f"s3://{bucket}/p", local=tmp_path / host)
        store.append("verifications", "r", [checked(store, candidate(1), b"the same log")])
        store.append("verifications", "r", [checked(store, candidate(2), b"the same log")])
    assert proxy.requests("PUT", "/blobs/") == [200] and proxy.requests("HEAD", "/blobs/") == [404, 200]
    assert len(proxy.requests("PUT", "/tables/")) == 4


def test_optimize_and_show_on_an_s3_store_from_the_command_line(prefect_harness, s3, tmp_path, monkeypatch):
    from kernelflow.cli import main as cli

    bucket, client = s3
    url = f"s3://{bucket}/nightly"
    monkeypatch.setenv("KERNELFLOW_STORE_LOCAL", str(tmp_path / "worker"))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert cli(["optimize", str(ROOT / "problems" / "09_silu.py"), "--store", url, "--budget", "1",
                    "--device", "cpu", "--executor", "inline"]) == 0
    assert f"--store {url}`" in buffer.getvalue()
    worker = Store(url)
    assert worker.mirror is not None and worker.mirror.pending() == []
    best = worker.runs().best_candidate_id.iloc[0]
    logs = [sha for blobs in worker.read("compiles").blobs for sha in json.loads(blobs).values()]
    assert logs and all(f"nightly/blobs/{sha[:2]}/{sha}" in keys(client, bucket) for sha in logs)

    env = {**{k: v for k, v in os.environ.items() if k.startswith(("AWS_", "PATH"))}, "KERNELFLOW_STORE": url,
           "KERNELFLOW_STORE_LOCAL": str(tmp_path / "laptop")}  # another machine: an empty local copy
    out = subprocess.run([sys.executable, "-m", "kernelflow.cli", "show"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and best in out.stdout and "baseline medians" in out.stdout, out.stdout + out.stderr
