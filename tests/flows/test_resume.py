"""Resume and warm start from the artifact store (flows/resume.py): a run killed in the middle of a candidate
resumes with that candidate evaluated first, nothing lost or proposed twice, the strategy's state restored; a
warm start evaluates the last finished run's best first."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from kernelflow.artifacts.store import Store
from kernelflow.flows.config import LLMLimits, RunConfig
from tests.families import WRITTEN

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
SILU = str(ROOT / "problems" / "09_silu.py")


def test_a_run_killed_mid_candidate_resumes_where_it_stopped(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    import kernelflow.flows.optimize as flow
    from kernelflow.flows.run import compile_step

    real, calls = flow.evaluate, []

    def dies_on_the_third(run, candidate):
        calls.append(candidate.id)
        if len(calls) == 3:
            compile_step(run, candidate)  # recorded and compiled, then the process "dies" before verify
            raise RuntimeError("killed")
        return real(run, candidate)

    monkeypatch.setattr(flow, "evaluate", dies_on_the_third)
    with pytest.raises(RuntimeError, match="killed"):
        flow.optimize(SILU, RunConfig(budget=5, store=str(tmp_path), device="cpu", executor="inline", profile=False,
                                      strategy="mcts", families=WRITTEN))
    monkeypatch.setattr(flow, "evaluate", real)
    run_id = Store(str(tmp_path)).runs().run_id.iloc[0]
    summary = flow.optimize(SILU, RunConfig(budget=5, store=str(tmp_path), device="cpu", executor="inline",
                                            profile=False, strategy="greedy", families=WRITTEN), resume=run_id)  # the run's own strategy (mcts) is kept
    store = Store(str(tmp_path))
    cands, checks = store.read("candidates", run_id), store.read("verifications", run_id)
    assert summary["run_id"] == run_id and summary["stop_reason"] == "candidate budget of 5 spent"
    assert len(cands) == 5 and cands.id.is_unique and list(cands.id[:3]) == calls
    assert calls[2] in set(checks.candidate_id)  # the interrupted candidate was evaluated after the resume
    states = store.read("search_state", run_id)
    assert set(states.strategy) == {"mcts"} and list(states.n_tried)[-1] == 5
    assert len(store.read("problems", run_id)) == 1


def test_a_resumed_run_keeps_what_it_spent_of_its_budgets(prefect_harness, tmp_path: Path) -> None:
    """Device seconds and LLM tokens spent before the stop count against the same budgets after the resume: with
    exactly that much allowed, the resumed run evaluates nothing more (before, both started again from zero)."""
    from kernelflow.flows.optimize import optimize
    from kernelflow.stages.contracts import LLMCall

    first = optimize(SILU, RunConfig(budget=2, store=str(tmp_path), device="cpu", executor="inline", profile=False,
                                     families=WRITTEN))
    run_id, store = first["run_id"], Store(str(tmp_path))
    store.append("llm_calls", run_id, [LLMCall(call_id="c1", purpose="init", model="m", status="ok", tokens_in=700,
                                               tokens_out=300, started_at="2026-11-30T00:00:00+00:00")])
    spent = sum(float(store.read(t, run_id).duration_s.sum()) for t in ("verifications", "benchmarks"))
    assert spent > 0
    for budgets, why in (({"gpu_seconds": spent - 1e-6}, "device-time budget"),
                         ({"llm": LLMLimits(max_tokens=1000)}, "token budget")):
        summary = optimize(SILU, RunConfig(budget=6, store=str(tmp_path), device="cpu", executor="inline",
                                           profile=False, families=WRITTEN, **budgets), resume=run_id)
        assert why in summary["stop_reason"] and len(store.read("candidates", run_id)) == 2, summary


def test_a_warm_start_evaluates_the_last_best_first(prefect_harness, tmp_path: Path) -> None:
    from kernelflow.flows.optimize import optimize

    first = optimize(SILU, RunConfig(budget=2, store=str(tmp_path), device="cpu", executor="inline", profile=False,
                                     families=WRITTEN))
    second = optimize(SILU, RunConfig(budget=2, store=str(tmp_path), device="cpu", executor="inline", profile=False,
                                      families=WRITTEN, warm_start=True, seed=7))
    cands = pd.read_parquet(tmp_path / "tables" / "candidates" / f"run_id={second['run_id']}")
    assert cands.id.iloc[0] == first["best_candidate_id"] and len(cands) == 2


def test_a_warm_start_outside_a_campaign_reads_the_problems_own_runs_however_many_others_the_store_holds(
        tmp_path: Path, monkeypatch) -> None:
    """last_best without a run id finds the problem's runs in its problem_runs partition and reads theirs alone: no
    table whole, and no more parts with twice as many runs of another problem in the store."""
    from kernelflow.artifacts.problem_runs import COMPLETE, index, partition
    from kernelflow.flows.resume import last_best
    from kernelflow.stages.contracts import Candidate, Origin, RunRecord
    from kernelflow.stages.problems.kernelbench import load_problem
    from tests.artifacts.test_problem_runs import parts_read
    from tests.flows.test_campaign import recording

    problem, store = load_problem(SILU), Store(tmp_path)

    def night(run: str, problem_id: str, when: str, status: str = "finished") -> None:  # as a run records it
        cand = Candidate.make(problem_id, "triton", f"class ModelNew: pass  # {run}", Origin(kind="builtin",
                                                                                              proposer="x"))
        index(store, problem_id, run)
        store.append("problems", run, [problem.model_copy(update={"id": problem_id})])
        store.append("candidates", run, [cand])
        for row_status in ("running", status):
            store.append("runs", run, [RunRecord(problem_id=problem_id, status=row_status, started_at=when,
                                                 updated_at=when, device="cpu", sizes="cpu", budget_candidates=1,
                                                 proposer="builtin", best_candidate_id=cand.id, code_version="c")])

    night("silu-older", problem.id, "2026-11-28T02:00:00+00:00")
    night("silu-newer", problem.id, "2026-11-29T02:00:00+00:00")
    night("silu-failed", problem.id, "2026-11-30T02:00:00+00:00", "failed")
    others = [f"20261201T020000-other-{i:06x}" for i in range(30)]
    for run in others[:15]:
        night(run, "other", "2026-12-01T02:00:00+00:00")
    reads, parts = recording(monkeypatch), parts_read(monkeypatch)
    assert last_best(store, problem).source.endswith("silu-newer")  # type: ignore[union-attr]
    expected = {"silu-older", "silu-newer", "silu-failed", partition(problem.id), COMPLETE}
    assert None not in {run for _, run in reads} and {run for _, run in reads} <= expected, reads
    n_parts = len(parts)
    for run in others[15:]:
        night(run, "other", "2026-12-02T02:00:00+00:00")
    parts.clear()
    assert last_best(store, problem).source.endswith("silu-newer")  # type: ignore[union-attr]
    assert len(parts) == n_parts, parts


def test_a_named_run_already_in_the_store_is_resumed_not_made_twice(prefect_harness, tmp_path: Path,
                                                                    monkeypatch) -> None:
    """optimize(run_id=R) when the store already has run R (Prefect running the same flow run again after a crash,
    with the same parameters) resumes R: one run, one problem row, no candidate recorded twice, the interrupted one
    evaluated; once more after it finished, still one run and nothing evaluated again."""
    import kernelflow.flows.optimize as flow
    from kernelflow.flows.run import compile_step
    from kernelflow.stages.errors import KernelflowError

    run_id = "20261201T020000-09_silu-abc123"
    real, calls = flow.evaluate, []

    def dies_on_the_second(run, candidate):
        calls.append(candidate.id)
        if len(calls) == 2:
            compile_step(run, candidate)
            raise RuntimeError("killed")
        return real(run, candidate)

    monkeypatch.setattr(flow, "evaluate", dies_on_the_second)
    config = RunConfig(budget=3, store=str(tmp_path), device="cpu", executor="inline", profile=False, families=WRITTEN)
    with pytest.raises(RuntimeError, match="killed"):
        flow.optimize(SILU, config, run_id=run_id)
    monkeypatch.setattr(flow, "evaluate", real)
    store = Store(str(tmp_path))
    assert list(store.runs().run_id) == [run_id] and store.runs().status.iloc[0] == "failed"
    summary = flow.optimize(SILU, config, run_id=run_id)  # the same parameters again
    assert summary["run_id"] == run_id and summary["stop_reason"] == "candidate budget of 3 spent"
    cands, checks = store.read("candidates", run_id), store.read("verifications", run_id)
    assert list(store.runs().run_id) == [run_id] and store.runs().status.iloc[0] == "finished"
    assert len(cands) == 3 and cands.id.is_unique and list(cands.id[:2]) == calls
    assert calls[1] in set(checks.candidate_id) and len(store.read("problems", run_id)) == 1
    n_checks = len(checks)
    again = flow.optimize(SILU, config, run_id=run_id)  # a finished run named again: resumed, its budget already spent
    assert again["run_id"] == run_id and again["best_candidate_id"] == summary["best_candidate_id"]
    assert len(store.read("candidates", run_id)) == 3 and len(store.read("verifications", run_id)) == n_checks
    assert list(store.runs().run_id) == [run_id] and len(store.read("problems", run_id)) == 1
    for bad in ("../elsewhere", "a/b", "", "-x", "x" * 201):  # ids become directory names
        with pytest.raises(KernelflowError, match="not a safe name"):
            flow.optimize(SILU, config, run_id=bad)
    with pytest.raises(KernelflowError, match="name different runs"):
        flow.optimize(SILU, config, run_id=run_id, resume="some-other-run")
    with pytest.raises(KernelflowError, match="no run 'some-other-run' in store"):  # a mistyped id: no empty run
        flow.optimize(SILU, config, resume="some-other-run")
    with pytest.raises(KernelflowError, match="not a safe name"):
        flow.optimize(SILU, config, resume="../elsewhere")
    softmax = str(ROOT / "problems" / "01_softmax.py")
    with pytest.raises(KernelflowError, match="is of problem 09_silu, not '01_softmax'"):  # nor two problems mixed
        flow.optimize(softmax, config, resume=run_id)
    with pytest.raises(KernelflowError, match="is of problem 09_silu, not '01_softmax'"):  # named as run_id too
        flow.optimize(softmax, config, run_id=run_id)
    assert list(store.runs().run_id) == [run_id] and list(store.read("problems", run_id).id) == ["09_silu"]


def test_a_fresh_run_id_is_a_safe_name_whatever_the_problems_file_is_called() -> None:
    from kernelflow.flows.run import RUN_ID, checked_run_id, new_run_id

    assert re.fullmatch(r"\d{8}T\d{6}-09_silu-[0-9a-f]{6}", new_run_id("09_silu"))
    for stem in ("my problem (v2)", "ü", "x" * 300, "a=b"):
        assert RUN_ID.fullmatch(new_run_id(stem)) and checked_run_id(new_run_id(stem))
