"""The artifact store: content-addressed blobs and append-only Parquet tables under one root directory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from artifacts import tables
from artifacts.blobs import get_bytes
from stages.contracts import BenchmarkResult

TABLES = ("runs", "problems", "candidates", "compiles", "verifications", "benchmarks", "timings", "baselines",
          "profiles", "feedback", "llm_calls", "search_state", "rungs")


def default_root() -> Path:
    return Path(os.environ.get("KERNELFLOW_STORE", "runs")).resolve()


class Store:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root).resolve() if root else default_root()
        self.blob_dir = self.root / "blobs"
        self.work_dir = self.root / "work"
        for d in (self.blob_dir, self.work_dir):
            d.mkdir(parents=True, exist_ok=True)

    def append(self, table: str, run_id: str, rows: Sequence[BaseModel]) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; tables are {TABLES}")
        tables.append(self.root, table, run_id, rows)

    def append_benchmark(self, run_id: str, result: BenchmarkResult) -> None:
        """A benchmark call: its result row, the candidate's timings, and the baselines timed beside it."""
        self.append("benchmarks", run_id, [result])
        self.append("timings", run_id, [t for t in result.timings if t.contender == "candidate"])
        self.append("baselines", run_id, [t for t in result.timings if t.contender != "candidate"])

    def read(self, table: str, run_id: str | None = None) -> pd.DataFrame:
        return tables.read(self.root, table, run_id)

    def blob(self, sha: str) -> bytes:
        return get_bytes(self.blob_dir, sha)

    def runs(self) -> pd.DataFrame:
        """Latest row of every run."""
        frame = self.read("runs")
        if frame.empty:
            return frame
        return frame.sort_values("updated_at").groupby("run_id", observed=True).tail(1).reset_index(drop=True)
