"""The artifact store: content-addressed blobs and append-only Parquet tables under one root directory, which, for
an `s3://bucket/prefix` store, is the local working copy of the bucket (artifacts/mirror.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from pydantic import BaseModel

from kernelflow.artifacts import tables
from kernelflow.artifacts.blobs import blob_path
from kernelflow.stages.contracts import BenchmarkResult

if TYPE_CHECKING:
    from kernelflow.artifacts.mirror import Mirror

TABLES = ("runs", "problems", "candidates", "compiles", "verifications", "benchmarks", "timings", "baselines",
          "profiles", "feedback", "llm_calls", "search_state", "rungs", "campaigns", "campaign_problems",
          "problem_runs")


def local_copy(url: str) -> Path:
    """Where an S3 store's working copy and spool live: $KERNELFLOW_STORE_LOCAL, else under the kernelflow cache."""
    if local := os.environ.get("KERNELFLOW_STORE_LOCAL"):
        return Path(local)
    cache = Path(os.environ.get("KERNELFLOW_CACHE") or Path.home() / ".cache" / "kernelflow")
    return cache / "stores" / url.removeprefix("s3://").strip("/")


class Store:
    """`root`: a directory, or s3://bucket/prefix (default $KERNELFLOW_STORE, else ./runs). For S3, `self.root` is
    the local working copy (`local`, default local_copy(url)) and every table part and named blob goes up too."""

    def __init__(self, root: str | Path | None = None, local: str | Path | None = None):
        root = str(root or os.environ.get("KERNELFLOW_STORE") or "runs")
        self.mirror: Mirror | None = None
        if root.startswith("s3://"):
            from kernelflow.artifacts.mirror import Mirror  # boto3 only for S3 stores
            from kernelflow.artifacts.s3 import S3Remote

            remote = S3Remote(root)
            self.location = remote.url
            self.root = Path(local or local_copy(remote.url)).resolve()
            self.mirror = Mirror(self.root, remote)
        else:
            self.root = Path(root).resolve()
            self.location = str(self.root)
        self.blob_dir = self.root / "blobs"
        self.work_dir = self.root / "work"
        for d in (self.blob_dir, self.work_dir):
            d.mkdir(parents=True, exist_ok=True)
        if self.mirror:  # what an earlier process left in the spool
            self.mirror.flush()

    def append(self, table: str, run_id: str, rows: Sequence[BaseModel]) -> None:
        """Rows as a new table part; for S3, the blobs the rows name (their `blobs` field), then the part, go up."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; tables are {TABLES}")
        part = tables.append(self.root, table, run_id, rows)
        if self.mirror and part:
            named = [blob_path(self.blob_dir, sha) for r in rows for sha in (getattr(r, "blobs", None) or {}).values()]
            self.mirror.push([p.relative_to(self.root).as_posix() for p in dict.fromkeys([*named, part])])

    def flush(self) -> int:
        """Try the spooled uploads now; how many still wait (0 for a local store)."""
        return self.mirror.flush() if self.mirror else 0

    def append_benchmark(self, run_id: str, result: BenchmarkResult) -> None:
        """A benchmark call: its result row, the candidate's timings, and the baselines timed beside it."""
        self.append("benchmarks", run_id, [result])
        self.append("timings", run_id, [t for t in result.timings if t.contender == "candidate"])
        self.append("baselines", run_id, [t for t in result.timings if t.contender != "candidate"])

    def read(self, table: str, run_id: str | None = None) -> pd.DataFrame:
        if self.mirror:
            self.mirror.fetch_parts(f"tables/{table}" + (f"/run_id={run_id}" if run_id is not None else ""))
        return tables.read(self.root, table, run_id)

    def partitions(self, table: str) -> list[str]:
        """The table's partition names (run ids; campaign ids), sorted, none of its parts read. For S3 the parts the
        local copy lacks are fetched first, as `read` would (each once: parts are immutable)."""
        if self.mirror:
            self.mirror.fetch_parts(f"tables/{table}")
        return tables.partitions(self.root, table)

    def blob(self, sha: str) -> bytes:
        path = blob_path(self.blob_dir, sha)
        if self.mirror and not path.exists() and not self.mirror.fetch(path.relative_to(self.root).as_posix()):
            raise FileNotFoundError(f"blob {sha} is neither in {self.blob_dir} nor in {self.location}")
        return path.read_bytes()

    def runs(self, run_id: str | None = None) -> pd.DataFrame:
        """Latest row of every run, or of run `run_id` only (its partition alone is read)."""
        frame = self.read("runs", run_id)
        if frame.empty:
            return frame
        return frame.sort_values("updated_at").groupby("run_id", observed=True).tail(1).reset_index(drop=True)
