"""The leaderboard of a run, from the artifact tables alone."""

from __future__ import annotations

import pandas as pd

from kernelflow.artifacts import fmt
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.winner import BASELINE_NAMES, winner

COLUMNS = ["rank", "candidate_id", "proposer", "params", "status", "speedup_vs_eager", "speedup_vs_compile",
           "median_us", "reason"]


PASSED = {"compile": "compiled", "verify": "verified, not timed"}  # a candidate's status once it passed that stage;
# a full benchmark makes it "verified", a failure "<stage> failed"


def leaderboard(store: Store, run_id: str) -> pd.DataFrame:
    """Every candidate of the run and the baselines (the seeds: artifacts/winner.py), ranked by geomean speedup
    over eager; failures with reasons; a candidate not timed says how far it got (compiled, verified, not timed).
    median_us joins one median per workload with "/", in the order of `attrs["workloads"]` ("-" where a contender
    was not timed on one); `attrs["baselines"]` names the baselines timed."""
    cands = store.read("candidates", run_id)
    rows = {c.id: {"candidate_id": c.id, "proposer": c.origin_proposer, "params": c.origin_params, "status": "proposed",
                   "speedup_vs_eager": None, "speedup_vs_compile": None, "median_us": None, "reason": ""}
            for c in cands.itertuples()}
    for table, stage in (("compiles", "compile"), ("verifications", "verify"), ("benchmarks", "benchmark")):
        frame = store.read(table, run_id)
        for r in frame.itertuples():
            if r.candidate_id not in rows:
                continue
            row = rows[r.candidate_id]
            if r.status != "ok":
                first_line = str(r.message).splitlines()[0][:120] if r.message else ""
                row["status"], row["reason"] = f"{stage} failed", f"{r.failure_kind}: {first_line}"
            elif stage in PASSED and row["status"] in ("proposed", "compiled"):  # the tables come in stage order
                row["status"] = PASSED[stage]
            elif table == "benchmarks" and not isinstance(getattr(r, "workloads", None), str):  # not a screening
                row.update(status="verified", speedup_vs_eager=r.speedup_vs_eager, speedup_vs_compile=r.speedup_vs_compile)
    rungs = store.read("rungs", run_id)  # a ladder's (flows/search/ladder.py): pruned on a cheap timing, and why
    for r in (rungs[rungs.outcome == "pruned"] if not rungs.empty else rungs).itertuples():
        if r.candidate_id in rows:
            rows[r.candidate_id].update(status="pruned", reason=r.reason)
    timings = store.read("timings", run_id)
    base = baseline_medians(store, run_id)
    workloads = sorted({*(timings.workload if not timings.empty else ()), *base.columns})

    def joined(medians: dict) -> str:
        return "/".join(fmt.us(medians.get(w)) for w in workloads)

    if not timings.empty:
        for cid, group in timings.groupby("candidate_id"):
            if cid in rows:  # each workload's latest timing (a precise re-timing supersedes the standard one)
                latest = group.drop_duplicates("workload", keep="last")
                rows[cid]["median_us"] = joined(dict(zip(latest.workload, latest.median_us, strict=True)))
    won = winner(store, run_id)
    seeds = won.baselines if won else {}
    for name, speedup in seeds.items():
        medians = joined(base.loc[name].dropna().to_dict()) if name in base.index else None
        rows[name] = {"candidate_id": name, "proposer": "seed", "params": BASELINE_NAMES[name], "status": "baseline",
                      "speedup_vs_eager": speedup, "speedup_vs_compile": speedup / seeds["compile"]
                      if "compile" in seeds else None, "median_us": medians, "reason": ""}
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.DataFrame(list(rows.values()))
    frame = frame.sort_values("speedup_vs_eager", ascending=False, na_position="last").reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    frame = frame[COLUMNS]
    frame.attrs.update(workloads=[str(w) for w in workloads], baselines=list(seeds))
    return frame


def baseline_medians(store: Store, run_id: str) -> pd.DataFrame:
    """Median baseline times per workload over the run (each benchmark call re-times them)."""
    frame = store.read("baselines", run_id)
    if frame.empty:
        return frame
    return frame.groupby(["contender", "workload"], observed=True).median_us.median().unstack("workload")


def render_board(board: pd.DataFrame) -> str:
    """The leaderboard as text: speedups to 3 significant digits, the workloads of median_us named in its header, and
    a footnote for a speedup column that is empty because its baseline was not timed."""
    if board.empty:
        return "(no candidates)"
    shown = board.copy()
    for column in ("speedup_vs_eager", "speedup_vs_compile"):
        shown[column] = [fmt.speedup(v, missing="-") for v in shown[column]]
    workloads = board.attrs.get("workloads") or []
    if workloads:
        shown = shown.rename(columns={"median_us": f"median_us ({'/'.join(workloads)})"})
    text = shown.to_string(index=False, na_rep="-", max_colwidth=40)
    baselines = board.attrs.get("baselines")
    if baselines is not None and "compile" not in baselines:
        text += (f"\nspeedup_vs_compile -: torch.compile was not timed in this run (baselines: "
                 f"{', '.join(baselines) or 'none'}; it is timed on cuda only by default)")
    return text
