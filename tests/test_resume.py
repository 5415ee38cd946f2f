"""Resume and warm start from the artifact store (flows/resume.py): a run killed in the middle of a candidate
resumes with that candidate evaluated first, nothing lost or proposed twice, the strategy's state restored; a
warm start evaluates the last finished run's best first."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from artifacts.store import Store

ROOT = Path(__file__).resolve().parents[1]
SILU = str(ROOT / "problems" / "09_silu.py")


def test_a_run_killed_mid_candidate_resumes_where_it_stopped(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    import flows.optimize as flow
    from flows.run import compile_step

    real, calls = flow.evaluate, []

    def dies_on_the_third(run, candidate):
        calls.append(candidate.id)
        if len(calls) == 3:
            compile_step(run, candidate)  # recorded and compiled, then the process "dies" before verify
            raise RuntimeError("killed")
        return real(run, candidate)

    monkeypatch.setattr(flow, "evaluate", dies_on_the_third)
    with pytest.raises(RuntimeError, match="killed"):
        flow.main(SILU, budget=5, store=str(tmp_path), device="cpu", executor="inline", profile=False, strategy="mcts")
    monkeypatch.setattr(flow, "evaluate", real)
    run_id = Store(str(tmp_path)).runs().run_id.iloc[0]
    summary = flow.main(SILU, budget=5, store=str(tmp_path), device="cpu", executor="inline", profile=False,
                        resume=run_id, strategy="greedy")  # the run's own strategy (mcts) is kept
    store = Store(str(tmp_path))
    cands, checks = store.read("candidates", run_id), store.read("verifications", run_id)
    assert summary["run_id"] == run_id and summary["stop_reason"] == "candidate budget of 5 spent"
    assert len(cands) == 5 and cands.id.is_unique and list(cands.id[:3]) == calls
    assert calls[2] in set(checks.candidate_id)  # the interrupted candidate was evaluated after the resume
    states = store.read("search_state", run_id)
    assert set(states.strategy) == {"mcts"} and list(states.n_tried)[-1] == 5
    assert len(store.read("problems", run_id)) == 1


def test_a_warm_start_evaluates_the_last_best_first(prefect_harness, tmp_path: Path) -> None:
    from flows.optimize import main as optimize

    first = optimize(SILU, budget=2, store=str(tmp_path), device="cpu", executor="inline", profile=False)
    second = optimize(SILU, budget=2, store=str(tmp_path), device="cpu", executor="inline", profile=False,
                      warm_start=True, seed=7)
    cands = pd.read_parquet(tmp_path / "tables" / "candidates" / f"run_id={second['run_id']}")
    assert cands.id.iloc[0] == first["best_candidate_id"] and len(cands) == 2
