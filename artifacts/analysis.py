"""Offline analysis: the artifact tables as pandas frames over one run or many, and the joined frames the report
(artifacts/report.py) plots. Everything here reads the store only; nothing needs a GPU, torch or Prefect.

    from kernelflow.artifacts.analysis import load, candidates
    frame = candidates(Store("runs"), ["20261130T005611-01_softmax-1e659d"])   # one row per candidate

`duckdb(store)` opens the same tables as duckdb views (the optional `analysis` extra) for SQL across runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kernelflow.artifacts.store import TABLES, Store
from kernelflow.artifacts.timed import full_calls
from kernelflow.stages.errors import KernelflowError

COLUMNS = ["run_id", "problem_id", "candidate_id", "index", "backend", "proposer", "params", "compiled", "verified",
           "speedup_vs_eager", "speedup_vs_compile", "faster_than_eager", "competes", "best_so_far", "reason"]
STAGE_TABLES = {"compile": "compiles", "verify": "verifications", "benchmark": "benchmarks", "profile": "profiles"}


def load(store: Store, table: str, run_id: str | Sequence[str] | None = None) -> pd.DataFrame:
    """A table over one run, several, or all (None); the run_id partition is a column. For `runs`, each run's latest
    row (a run gets one when it starts and one when it ends)."""
    if table not in TABLES:
        raise KernelflowError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")
    ids = [run_id] if isinstance(run_id, str) else run_id
    frames = [store.read(table, r) for r in ids] if ids is not None else [store.read(table)]
    frames = [f for f in frames if not f.empty]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if table == "runs" and not frame.empty:
        frame = frame.sort_values("updated_at", kind="stable").groupby("run_id").tail(1)
        frame = frame.sort_values("started_at", kind="stable").reset_index(drop=True)
    return frame


def resolve_runs(store: Store, runs: Sequence[str] = (), campaign: str | None = None) -> list[str]:
    """Run ids from the command line: ids of optimize runs or of checks (`kernelflow verify`/`bench`,
    artifacts/checks.py), 'latest' (the optimize run started last), or a campaign: 'all' (every optimize run in the
    store), a campaign id (the runs the campaign flow recorded, artifacts/campaigns.py) or comma-separated run ids.
    Unknown ids raise with the list of known ones."""
    from kernelflow.artifacts import checks
    from kernelflow.artifacts.campaigns import campaigns, run_ids

    known = load(store, "runs")
    ids = list(known.run_id) if not known.empty else []
    named = campaigns(store) if campaign not in (None, "all") else pd.DataFrame()
    if campaign is not None and not named.empty and campaign in set(named.campaign_id):
        members = run_ids(store, campaign)
        if not members:
            raise KernelflowError(f"campaign {campaign} recorded no run (every entry failed before its run began)")
        campaign = ",".join(members)
    wanted = [r for r in runs] + ([] if campaign is None else ids if campaign == "all" else
                                  [c.strip() for c in campaign.split(",") if c.strip()])
    wanted = [(ids[-1] if ids else "latest") if r == "latest" else r for r in wanted or ["latest"]]
    missing = [r for r in wanted if r not in ids and not checks.is_check(store, r, ids)]
    if missing:
        judged = checks.ids(store, ids)
        if not ids and not judged:
            raise KernelflowError(f"no runs in {store.root}")
        known_ids = "; ".join(f"{what}: {', '.join(some[-20:])}" for what, some in
                              (("optimize runs", ids), ("verify and bench runs", judged)) if some)
        what = "no optimize run (for 'latest')" if "latest" in missing else f"no run {', '.join(missing)}"
        raise KernelflowError(f"{what} in {store.root}; {known_ids}")
    return list(dict.fromkeys(wanted))


def candidates(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """One row per candidate, in the order the run generated them (`index` from 1): backend, proposer, params,
    how far it got (compiled, verified, its speedups, faster than eager), whether it competes for the run's best
    (a ladder's accepted candidates only, as in artifacts/winner.py), the best competing speedup so far, and the
    reason it stopped where it did. A ladder's candidate counts as verified once its full verification passed
    (rung 2), not on its policy gate alone."""
    cands = load(store, "candidates", run_ids)
    if cands.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame = cands.rename(columns={"id": "candidate_id", "origin_proposer": "proposer", "origin_params": "params"})
    frame = frame.drop_duplicates(["run_id", "candidate_id"])[["run_id", "problem_id", "candidate_id", "backend",
                                                               "proposer", "params"]].reset_index(drop=True)
    frame.insert(3, "index", frame.groupby("run_id").cumcount() + 1)
    key = ["run_id", "candidate_id"]
    reasons: dict[tuple[str, str], str] = {}
    stage_ok: dict[str, set[tuple[str, str]]] = {}
    for stage in ("compile", "verify"):
        rows = load(store, STAGE_TABLES[stage], run_ids)
        latest = rows.drop_duplicates(key, keep="last") if not rows.empty else rows
        stage_ok[stage] = set(map(tuple, latest.loc[latest.status == "ok", key].values)) if not rows.empty else set()
        for r in latest[latest.status != "ok"].itertuples() if not rows.empty else []:
            first_line = str(r.message).splitlines()[0][:120] if isinstance(r.message, str) and r.message else ""
            reasons[(r.run_id, r.candidate_id)] = f"{stage} failed: {r.failure_kind}: {first_line}"
    rungs = load(store, "rungs", run_ids)
    laddered = set(rungs.run_id) if not rungs.empty else set()
    if laddered:  # a ladder verifies twice: its gate (rung 0) and in full (rung 2)
        full = rungs[(rungs.rung >= 2) & (rungs.outcome != "rejected")]
        stage_ok["verify"] = {k for k in stage_ok["verify"] if k[0] not in laddered} | set(map(tuple, full[key].values))
        for r in rungs[rungs.outcome.isin(["pruned", "rejected"])].itertuples():
            reasons.setdefault((r.run_id, r.candidate_id), f"rung {r.rung} {r.outcome}: {r.reason}")
    pairs = list(zip(frame.run_id, frame.candidate_id, strict=True))
    frame["verified"] = [p in stage_ok["verify"] for p in pairs]
    frame["compiled"] = pd.Series([p in stage_ok["compile"] for p in pairs]) | frame.verified  # verified implies compiled
    bench = full_calls(load(store, "benchmarks", run_ids))
    cols = ["speedup_vs_eager", "speedup_vs_compile"]
    frame = frame.merge(bench[key + cols] if not bench.empty else pd.DataFrame(columns=key + cols), on=key, how="left")
    frame[cols] = frame[cols].astype(float)
    frame["faster_than_eager"] = frame.speedup_vs_eager > 1.0
    accepted = set(map(tuple, rungs.loc[rungs.outcome == "accepted", key].values)) if laddered else set()
    frame["competes"] = frame.speedup_vs_eager.notna() & pd.Series([p[0] not in laddered or p in accepted
                                                                    for p in pairs])
    frame["best_so_far"] = frame.speedup_vs_eager.where(frame.competes).groupby(frame.run_id).cummax()
    frame["reason"] = [reasons.get(p, "" if v else "not verified") for p, v in zip(pairs, frame.verified, strict=True)]
    return frame[COLUMNS]


def funnel(frame: pd.DataFrame) -> dict[str, int]:
    """Candidates generated → compiled → verified → faster than eager, from `candidates(...)`."""
    return {"generated": len(frame), "compiled": int(frame.compiled.sum()), "verified": int(frame.verified.sum()),
            "faster than eager": int(frame.faster_than_eager.sum())}


def stage_times(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """Seconds spent per run and stage (compile, verify, benchmark, profile from their duration_s; llm from the
    llm_calls' latency_s): calls, total_s, median_s, max_s."""
    parts = []
    for stage, table in [*STAGE_TABLES.items(), ("llm", "llm_calls")]:
        frame = load(store, table, run_ids)
        column = "latency_s" if stage == "llm" else "duration_s"
        if not frame.empty and column in frame:
            parts.append(frame[["run_id", column]].rename(columns={column: "s"}).dropna().assign(stage=stage))
    if not parts:
        return pd.DataFrame(columns=["run_id", "stage", "calls", "total_s", "median_s", "max_s"])
    times = pd.concat(parts, ignore_index=True)
    return times.groupby(["run_id", "stage"], sort=False).s.agg(calls="count", total_s="sum", median_s="median",
                                                                 max_s="max").reset_index()


def roofline_points(store: Store, run_ids: Sequence[str]) -> pd.DataFrame:
    """Profiles with a measured time (GPU runs): arithmetic intensity (counted FLOPs per byte that must move) and
    the achieved rates. A CPU run's profiles are analytic (counted work and SOL floor, no time) and give none."""
    prof = load(store, "profiles", run_ids)
    cols = ["run_id", "problem_id", "candidate_id", "contender", "workload", "time_us", "flops", "bytes_min",
            "achieved_flops_per_s", "achieved_bytes_per_s", "sol_fraction", "bound", "bound_source"]
    if prof.empty or "time_us" not in prof:
        return pd.DataFrame(columns=[*cols, "intensity"])
    ok = prof[(prof.status == "ok") & prof.time_us.notna() & (prof.flops > 0) & (prof.bytes_min > 0)
              & (prof.achieved_flops_per_s > 0)]
    return ok[cols].assign(intensity=ok.flops / ok.bytes_min).reset_index(drop=True)


def gpu_names(store: Store, run_ids: Sequence[str]) -> dict[str, str]:
    """Per run, the device name its timings were taken on (provenance)."""
    out: dict[str, str] = {}
    for table in ("timings", "baselines"):
        frame = load(store, table, run_ids)
        if not frame.empty and "provenance_device_name" in frame:
            for run, name in frame.dropna(subset=["provenance_device_name"]).groupby("run_id").provenance_device_name:
                out.setdefault(str(run), str(name.iloc[-1]))
    return out


def duckdb(store: Store) -> Any:
    """An in-memory duckdb connection with one view per table written so far (hive partitioning, union by name:
    parts written by different code versions keep all their columns). Needs `pip install kernelflow[analysis]`."""
    try:
        import duckdb as ddb
    except ImportError as e:
        raise KernelflowError("duckdb is not installed: pip install 'kernelflow[analysis]' (or duckdb)") from e
    if store.mirror:  # an S3 store: bring every table part into the local copy first
        for table in TABLES:
            store.read(table)
    con = ddb.connect()
    tables = Path(store.root) / "tables"
    for table in TABLES:
        if any((tables / table).glob("run_id=*/part-*.parquet")):
            pattern = str(tables / table / "run_id=*" / "part-*.parquet").replace("'", "''")
            con.execute(f"create view {table} as select * from read_parquet('{pattern}', hive_partitioning=true, "
                        "union_by_name=true)")
    return con
