"""The seeds rule: eager and torch.compile are always contenders, so a run's result is never slower than
what the user already has. The winner is the fastest of the best verified candidate and the baselines, by
geomean speedup over eager across the timed workloads; a candidate wins only when it is faster than every
baseline; a tie goes to the baseline.

The comparison uses one benchmark call where it can: the best candidate's call timed eager and torch.compile in
the same process on the same inputs, so torch.compile's speedup over eager is taken from that call
(speedup_vs_eager / speedup_vs_compile, both geomeans over the same workloads). With no verified candidate the
baselines timed alone (the flow's baseline-only call) decide between eager and torch.compile.
"""

from __future__ import annotations

import math

import pandas as pd
from pydantic import BaseModel

from kernelflow.artifacts.fmt import speedup as x
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.timed import full_calls
from kernelflow.stages.contracts import BASELINE_LABELS

BASELINE_NAMES = BASELINE_LABELS  # compile_max is timed only on request (bench_gpu --max-autotune), never a seed


class Winner(BaseModel):
    """A run's result under the seeds rule."""

    id: str  # a candidate id, or "eager" / "compile"
    is_baseline: bool
    speedup_vs_eager: float
    speedup_vs_compile: float | None  # None when torch.compile was not timed
    best_candidate_id: str | None
    best_speedup_vs_compile: float | None  # the best candidate's, from its own benchmark call
    baselines: dict[str, float]  # each baseline's geomean speedup over eager (eager: 1.0)
    text: str  # one line for the report


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _compile_vs_eager_alone(base: pd.DataFrame) -> float | None:
    """torch.compile's geomean speedup over eager from the baselines timed without a candidate."""
    alone = base[base.benchmark_for == "baseline"]
    medians = alone.groupby(["contender", "workload"], observed=True).median_us.median().unstack("contender")
    if medians.empty or not {"eager", "compile"} <= set(medians.columns):
        return None
    both = medians.dropna(subset=["eager", "compile"])
    return _geomean(list(both.eager / both.compile)) if not both.empty else None


def _competing(store: Store, run_id: str, ok: pd.DataFrame) -> pd.DataFrame:
    """The benchmark rows that compete: each candidate's full call (artifacts/timed.py) where its strategy accepted
    the candidate (the row's `accepted`: a ladder leaves the incumbent when one is faster only within the noise). A
    row no search judged (a store from before that column) competes unless a ladder's rungs name other candidates as
    accepted."""
    judged = ok["accepted"] if "accepted" in ok else pd.Series(None, index=ok.index, dtype=object)
    unjudged = judged.isna()
    if unjudged.any() and not (rungs := store.read("rungs", run_id)).empty:
        unjudged &= ok.candidate_id.isin(rungs.candidate_id[rungs.outcome == "accepted"])
    return ok[judged.eq(True) | unjudged]


def winner(store: Store, run_id: str) -> Winner | None:
    """The run's winner, or None when nothing was timed (not even the baselines)."""
    ok = full_calls(store.read("benchmarks", run_id))
    ok = _competing(store, run_id, ok[ok.candidate_id != "baseline"]) if not ok.empty else ok  # not baseline-only
    best_id, cand_e, cand_c = None, None, None
    if not ok.empty:
        row = ok.sort_values("speedup_vs_eager", ascending=False).iloc[0]
        best_id, cand_e = str(row.candidate_id), float(row.speedup_vs_eager)
        cand_c = float(row.speedup_vs_compile) if pd.notna(row.speedup_vs_compile) else None
        compile_e = cand_e / cand_c if cand_c else None
    else:
        base = store.read("baselines", run_id)
        if base.empty:
            return None
        compile_e = _compile_vs_eager_alone(base)
    contenders = {"eager": 1.0}
    if compile_e is not None:
        contenders["compile"] = compile_e
    baseline = max(contenders, key=lambda k: contenders[k])  # eager first: a tie keeps eager
    if cand_e is not None and best_id is not None and cand_e > contenders[baseline]:
        vs_compile = cand_e / contenders["compile"] if "compile" in contenders else None
        return Winner(id=best_id, is_baseline=False, speedup_vs_eager=cand_e, speedup_vs_compile=vs_compile,
                      best_candidate_id=best_id, best_speedup_vs_compile=cand_c, baselines=contenders,
                      text=f"winner: candidate {best_id}, {x(cand_e)} eager"
                           + (f", {x(vs_compile)} torch.compile" if vs_compile else ""))
    speed = contenders[baseline]
    vs_compile = speed / contenders["compile"] if "compile" in contenders else None
    if best_id is None or cand_e is None:
        why = "no candidate was verified and timed"
    else:
        why = f"the best candidate {best_id} reached {x(cand_e)} eager" + (
            f", {x(cand_e / speed)} {BASELINE_NAMES[baseline]}" if baseline != "eager" else "")
    return Winner(id=baseline, is_baseline=True, speedup_vs_eager=speed, speedup_vs_compile=vs_compile,
                  best_candidate_id=best_id, best_speedup_vs_compile=cand_c, baselines=contenders,
                  text=f"winner: the baseline {BASELINE_NAMES[baseline]} ({x(speed)} eager); {why}; "
                       "keep what you have")
