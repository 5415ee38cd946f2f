"""The benchmark calls that count for a candidate: successful calls over every timed workload, with a speedup over
eager (not a ladder's screening call over some shapes, not a failure), each candidate's latest (a precise re-timing
supersedes the standard one). The winner, the export, the campaign's regression check and the offline analysis all
read a candidate's timing through here."""

from __future__ import annotations

import pandas as pd

from kernelflow.artifacts.store import Store
from kernelflow.artifacts.tables import model_of
from kernelflow.stages.contracts import BenchmarkResult


def full_calls(bench: pd.DataFrame) -> pd.DataFrame:
    """The rows of a benchmarks frame that are full, successful calls with a speedup, latest per (run, candidate)."""
    if bench.empty:
        return bench
    full = bench[(bench.status == "ok") & bench.speedup_vs_eager.notna()]
    if "workloads" in full:  # absent from stores written before screening calls existed
        full = full[full.workloads.isna()]
    key = ["run_id", "candidate_id"] if "run_id" in full else ["candidate_id"]
    return full.drop_duplicates(key, keep="last")


def latest_full_timing(store: Store, run_id: str, candidate_id: str) -> BenchmarkResult | None:
    """The candidate's latest full, successful benchmark call in run `run_id`, or None."""
    calls = full_calls(store.read("benchmarks", run_id))
    mine = calls[calls.candidate_id == candidate_id] if not calls.empty else calls
    return model_of(BenchmarkResult, mine.iloc[-1].to_dict()) if not mine.empty else None
