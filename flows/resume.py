"""Resume and warm start, from the artifact store alone.

`restore(run)` rebuilds a run's search state from its own tables: the candidates in the order they were tried,
each one's fate (a compile, verify or benchmark failure with its evidence; a verified speedup; a ladder's pruning),
the incumbent, the profile feedback and actions, what it spent of its device-time and LLM budgets, and the
strategy's last saved state (search_state table). It returns the candidates that were proposed but never finished
evaluating (the process died mid-candidate): the search evaluates those first, so nothing is lost and nothing is
proposed twice. A round interrupted mid-way (the
agents strategy's) is put back in the state's round instead, what is left of it: its candidates, the one under way included,
are evaluated by the round, each for the turn (agent) that proposed it.
`last_best(store, problem)` is the best candidate of the latest finished run of the same problem (same source
hash), for a warm start: the next night's run evaluates it first, so it starts from last night's result. A campaign
names the run to start from (`last_best(store, problem, run_id)`: its previous campaign's run of that problem).
"""

from __future__ import annotations

import json
from typing import Literal

import pandas as pd

from kernelflow.artifacts.problem_runs import runs_of
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.tables import model_of
from kernelflow.flows.run import Run
from kernelflow.stages.contracts import (
    Action,
    Candidate,
    CompileResult,
    LLMCall,
    Problem,
    Proposal,
    SearchSnapshot,
)

STAGES: tuple[tuple[str, Literal["compile", "verify", "benchmark"]], ...] = (
    ("compiles", "compile"), ("verifications", "verify"), ("benchmarks", "benchmark"))


def _rows(store: Store, table: str, run_id: str) -> list[dict]:
    frame = store.read(table, run_id)
    return [] if frame.empty else frame.to_dict("records")


def _full(record: dict) -> bool:
    """A benchmark over every timed workload (not a ladder's one-shape screening call)."""
    value = record.get("workloads")
    return value is None or (isinstance(value, float) and pd.isna(value))


def restore(run: Run) -> tuple[list[Candidate], SearchSnapshot | None]:
    """Fill the run's search state from its tables; (candidates to evaluate first, the strategy's last saved
    snapshot)."""
    store, state, done = run.recorder.store, run.state, set()
    for record in _rows(store, "candidates", run.id):
        candidate = model_of(Candidate, record)
        state.consider(candidate)
        run.recorder.recorded.add(candidate.id)
    for record in _rows(store, "compiles", run.id):
        state.compiled_as(model_of(CompileResult, record))
    rows = {table: _rows(store, table, run.id) for table, _ in STAGES}
    for table, stage in STAGES:
        for record in rows[table]:
            cid = record["candidate_id"]
            if cid not in state.candidates:
                continue
            if record["status"] != "ok":
                state.reject(cid, stage, record["failure_kind"], record["message"] or "")
                done.add(cid)
            elif table == "benchmarks" and _full(record) and pd.notna(record.get("speedup_vs_eager")):
                state.speedups[cid] = float(record["speedup_vs_eager"])
    rungs = _rows(store, "rungs", run.id)
    done |= {r["candidate_id"] for r in rungs if r["outcome"] in ("pruned", "kept", "accepted", "rejected")}
    accepted = {r["candidate_id"] for r in rungs if r["outcome"] == "accepted"}
    eligible = {c: s for c, s in state.speedups.items() if not rungs or c in accepted}
    done |= set(state.speedups) if not rungs else set()
    state.verified = len(state.speedups)
    if eligible:
        best = max(eligible, key=lambda c: eligible[c])
        state.best = (eligible[best], state.candidates[best])
        for record in _rows(store, "timings", run.id) + _rows(store, "baselines", run.id):  # its times, latest last
            if record.get("benchmark_for") == best:
                times = state.medians.setdefault(best, {}).setdefault(record["workload"], {})
                times[record["contender"]] = float(record["median_us"])
    for record in _rows(store, "feedback", run.id):
        if record.get("contender") == "candidate" and record["candidate_id"] in state.candidates:
            findings = json.loads(record.get("findings") or "[]")
            state.advise(record["candidate_id"], [Action(**f["action"]) for f in findings
                                                  if not (f.get("explained_by") or f.get("not_own"))],
                         record.get("text") or "")
    spend(run, rows["verifications"] + rows["benchmarks"])
    snapshots = _rows(store, "search_state", run.id)
    saved = model_of(SearchSnapshot, snapshots[-1]) if snapshots else None
    if saved is not None:
        state.teach(saved.lessons)
        state.plan_round(unfinished(saved.round, done))
    in_round = {cid for turn in state.round for cid in turn.left}
    return [state.candidates[c] for c in state.tried if c not in done and c not in in_round], saved


def spend(run: Run, checked: list[dict]) -> None:
    """What the run spent before it stopped, charged again: its device seconds (every verify, candidate benchmark
    and profile call, as run.py charges them; `checked`: the verifications and benchmarks rows, read already) and its
    LLM calls, so a resumed run keeps the budgets it was given rather than starting them anew. Wall time is the
    resumed process's own (the hours between are nobody's)."""
    store = run.recorder.store
    calls = [r for r in checked if isinstance(r.get("candidate_id"), str)] + _rows(store, "profiles", run.id)
    run.state.spend_device(sum(float(r["duration_s"]) for r in calls if pd.notna(r.get("duration_s"))))
    run.state.spend_llm([model_of(LLMCall, record) for record in _rows(store, "llm_calls", run.id)])


def unfinished(round_: list[Proposal], done: set[str]) -> list[Proposal]:
    """The saved round less the candidates whose evaluation finished after it was saved (the process died before
    the next save): a turn left with none of its own is over, not a turn that gave nothing."""
    kept = []
    for turn in round_:
        left = [c for c in turn.left if c not in done]
        if left or not turn.left:
            kept.append(turn.model_copy(update={"left": left}))
    return kept


def last_best(store: Store, problem: Problem, run_id: str | None = None) -> Candidate | None:
    """The best candidate of the latest finished run of this problem (same source), or of run `run_id` only (a
    campaign starts from its previous campaign's run); None when there is none. It reads the runs partitions of
    the problem's own runs (artifacts/problem_runs.py), not the whole runs table."""
    named = [run_id] if run_id is not None else runs_of(store, problem.id)
    frames = [f for f in (store.runs(run) for run in named) if not f.empty]
    if not frames:
        return None
    runs = pd.concat(frames, ignore_index=True)
    finished = runs[(runs.problem_id == problem.id) & (runs.status == "finished") & runs.best_candidate_id.notna()]
    for record in finished.sort_values("updated_at", ascending=False).to_dict("records"):
        problems = store.read("problems", record["run_id"])
        if problems.empty or problems.source_sha256.iloc[0] != problem.source_sha256:
            continue  # the problem changed since: its best answers another question
        cands = store.read("candidates", record["run_id"])
        match = cands[cands.id == record["best_candidate_id"]]
        if not match.empty:
            return model_of(Candidate, match.iloc[0].to_dict())
    return None
