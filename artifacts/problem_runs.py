"""The `problem_runs` table: which runs a problem has. The other tables are partitioned by run, so finding a problem's
runs in them means reading every run's parts, a cost that grows every night; this table is partitioned by problem,
so `kernelflow export PROBLEM` and a warm start outside a campaign read one small partition, then those runs' own.
"""

from __future__ import annotations

import re
from collections import defaultdict

from pydantic import Field

from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import Contract

TABLE = "problem_runs"
COMPLETE = "@complete"  # its row says the index holds every run; no problem's partition has an "@"


class ProblemRun(Contract):
    """A run of a problem, indexed when it starts."""

    problem_id: str = Field(description="the problem's id, exactly (its partition's name may differ: partition())")
    run: str = Field(description="the run's id: its partition in runs, benchmarks, baselines and the other tables")


def partition(problem_id: str) -> str:
    """The problem's partition: its id with characters other than letters, digits, '.', '_' and '-' made '_', at most
    200 (a safe directory name and S3 key). Ids that differ only there share it; their rows keep the exact id."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", problem_id)[:200] or "_"


def index_complete(store: Store) -> bool:
    return not store.read(TABLE, COMPLETE).empty


def _scan(store: Store) -> set[tuple[str, str]]:
    """(problem, run) of every run the runs, benchmarks and baselines tables name, each read whole."""
    frames = [f for f in (store.read(t) for t in ("runs", "benchmarks", "baselines")) if not f.empty]
    return {(str(p), str(r)) for f in frames for p, r in zip(f.problem_id, f.run_id, strict=True)}


def index(store: Store, problem_id: str, run_id: str) -> None:
    """Index a new run of the problem. The first run to index on a store also indexes every run already there (one
    whole scan: a store from before this table, or an empty one) and then marks the index complete; a crash before
    the mark leaves the scan to the next run (rows indexed twice are read once)."""
    backfill = not index_complete(store)
    rows: dict[str, list[ProblemRun]] = defaultdict(list)
    for problem, run in sorted({(problem_id, run_id)} | (_scan(store) if backfill else set())):
        rows[partition(problem)].append(ProblemRun(problem_id=problem, run=run))
    for name, part in rows.items():
        store.append(TABLE, name, part)
    if backfill:
        store.append(TABLE, COMPLETE, [ProblemRun(problem_id="", run=run_id)])


def runs_of(store: Store, problem_id: str) -> list[str]:
    """The problem's runs, sorted: its partition alone. A store no run has indexed yet (written before this table)
    has no index to trust: there the runs, benchmarks and baselines tables are read whole, as they were before it."""
    if not index_complete(store):
        return sorted(run for problem, run in _scan(store) if problem == problem_id)
    rows = store.read(TABLE, partition(problem_id))
    return sorted(set(rows.run[rows.problem_id == problem_id])) if not rows.empty else []
