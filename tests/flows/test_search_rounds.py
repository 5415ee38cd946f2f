"""The agents strategy's rounds (flows/search/protocol.py round_, flows/run.py propose_round): a round's generate
and compile calls overlap, its evaluations run one at a time in agent order with the same results as a serial
round, no round proposes past the candidate budget, and a round interrupted mid-way resumes its own proposals. A real
Run and store under Prefect's test harness; the proposer, the compile task and the evaluation are stand-ins that
sleep and record when they ran."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

import kernelflow.flows.tasks
from kernelflow.artifacts.store import Store
from kernelflow.flows.config import LLMLimits, RunConfig
from kernelflow.flows.resume import restore
from kernelflow.flows.run import Run, compile_step, new_run_id, open_run
from kernelflow.flows.search.agents import Agents
from kernelflow.flows.search.protocol import search
from kernelflow.stages.backends import result
from kernelflow.stages.contracts import (
    BenchmarkResult,
    Candidate,
    CompileRequest,
    CompileResult,
    GenerateRequest,
    GenerateResult,
    LLMCall,
    Origin,
)
from kernelflow.stages.errors import StopSearch
from kernelflow.stages.problems.kernelbench import load_problem
from kernelflow.stages.proposers import PROPOSERS

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

SILU = Path(__file__).resolve().parents[2] / "problems" / "09_silu.py"


class Recorder:
    """What the stand-ins saw: (what, start, end) per call, the requests, the evaluation order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(0.0)

    def reset(self, delay: float | list[float], compile_delay: float = 0.05) -> None:
        """Forget what was seen; each generate call sleeps `delay`, or the next of the list's delays; each compile
        `compile_delay`."""
        self.compile_delay = compile_delay
        self.delays = list(delay) if isinstance(delay, list) else None
        self.delay = delay if isinstance(delay, float) else 0.0
        self.generates: list[tuple[str, float, float]] = []
        self.compiles: list[tuple[str, float, float]] = []
        self.requests: list[GenerateRequest] = []
        self.evaluated: list[str] = []

    def propose(self, req: GenerateRequest) -> GenerateResult:
        """One candidate per request, named by its agent's focus and its seed (so a serial and a parallel round
        propose the same ids), and one (free) LLM call recorded; every fifth one does not compile."""
        with self.lock:
            delay = self.delays.pop(0) if self.delays else self.delay
            self.requests.append(req)
        start = time.monotonic()
        time.sleep(delay)
        who = req.lessons[0].split(":")[0] if req.lessons else "-"
        source = f"# {who} seed {req.seed}\n"
        cand = Candidate.make(req.problem.id, "triton", source, Origin(kind="user", proposer="slow",
                                                                      params={"who": who, "seed": req.seed}))
        with self.lock:
            self.generates.append((cand.id, start, time.monotonic()))
        call = LLMCall(call_id=f"{who} {req.seed}", purpose="optimize", model="stand-in", status="ok")
        return GenerateResult(problem_id=req.problem.id, proposer="slow", candidates=[cand], message=who,
                              llm_calls=[call])


def speedup_of(candidate: Candidate) -> float | None:
    """A deterministic verdict: every fifth candidate (by id) is rejected, the others 0.5x..2.5x."""
    value = int(candidate.id[-6:], 16)
    return None if value % 5 == 0 else 0.5 + (value % 200) / 100


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setitem(PROPOSERS, "slow", lambda req: rec.propose(req))

    @task(name="compile", cache_policy=NO_CACHE)
    def fake_compile(req: CompileRequest, mode: str, store_root: str) -> CompileResult:
        start = time.monotonic()
        time.sleep(rec.compile_delay)
        failed = int(req.candidate.id[-6:], 16) % 5 == 0
        with rec.lock:
            rec.compiles.append((req.candidate.id, start, time.monotonic()))
        return result(req, status="failed" if failed else "ok", failure_kind="compile_error" if failed else None)

    monkeypatch.setitem(kernelflow.flows.tasks.TASKS, "compile", fake_compile)
    return rec


def searched(tmp_path: Path, rec: Recorder, budget: int, workers: int | None = None,
             llm_max_tokens: int | None = None, resume: str | None = None,
             dies_at: int | None = None) -> tuple[Run, Agents, str]:
    """An agents search on 09_silu with the stand-ins, in a flow; (the run, the strategy, the stop reason).
    `resume`: continue that run as the optimize flow does (flows/resume.py); `dies_at`: the process "dies" (raises
    RuntimeError) in the evaluation of that candidate, counted from 1, once it is recorded and compiled."""

    @flow(name="rounds")
    def rounds() -> tuple[Run, Agents, str]:
        config = RunConfig(budget=budget, proposer="slow", device="cpu", profile=False,
                           llm=LLMLimits(max_tokens=llm_max_tokens))
        problem = load_problem(SILU)
        run = open_run(problem, config, Store(tmp_path), resume or new_run_id(problem.id), resumed=resume is not None)
        pending, saved = restore(run) if resume else ([], None)

        def evaluate(candidate: Candidate) -> float | None:
            rec.evaluated.append(candidate.id)
            compiled = compile_step(run, candidate)  # the round compiled it ahead: recorded now
            if len(rec.evaluated) == dies_at:
                raise RuntimeError("killed")
            if compiled.status != "ok":
                return None
            speedup = speedup_of(candidate)
            if speedup is not None:  # its benchmark row: what a resumed run reads back (a rejection: the compile's)
                run.state.speedups[candidate.id] = speedup
                run.recorder.benchmark(BenchmarkResult(
                    candidate_id=candidate.id, problem_id=run.problem.id, status="ok", device="cpu", sizes="cpu",
                    speedup_vs_eager=speedup))
            return speedup

        agents = Agents.from_state(json.loads(saved.state_json)) if saved else Agents()
        agents.workers = workers
        try:
            search(run, agents, evaluate, lambda c: None, pending)
        except StopSearch as stop:
            return run, agents, stop.reason
        raise AssertionError("search returned without a stop reason")

    return rounds()


def overlap(intervals: list[tuple[str, float, float]]) -> bool:
    """Whether all the intervals run at one moment: the last start before the first end."""
    return max(s for _, s, _ in intervals) < min(e for _, _, e in intervals)


def test_a_round_generates_and_compiles_at_once(prefect_harness, tmp_path: Path, recorder: Recorder):
    recorder.reset(1.0, 0.5)
    run, _, reason = searched(tmp_path, recorder, budget=3)
    assert reason == "candidate budget of 3 spent" and len(recorder.generates) == 3
    assert overlap(recorder.generates), recorder.generates  # 3 s of generate calls, all running at one moment
    assert overlap(recorder.compiles) and len(recorder.compiles) == 3
    assert recorder.evaluated == run.state.tried and len(Store(tmp_path).read("compiles", run.id)) == 3
    assert not run.precompiled  # every compile ahead was recorded by its evaluation


def test_one_worker_proposes_one_at_a_time(prefect_harness, tmp_path: Path, recorder: Recorder):
    recorder.reset(0.2)
    searched(tmp_path, recorder, budget=3, workers=1)
    spans = sorted(recorder.generates + recorder.compiles, key=lambda r: r[1])
    assert all(a[2] <= b[1] for a, b in zip(spans, spans[1:], strict=False))  # no two calls at once


def test_rounds_evaluate_in_agent_order_whatever_finishes_first(prefect_harness, tmp_path: Path,
                                                                  recorder: Recorder):
    """The same search with one worker and with a thread per call, the calls' delays shuffled: the same candidates
    evaluated in the same order, the same verdicts, memory and saved state."""
    runs = []
    for name, workers in (("serial", 1), ("parallel", None)):
        shuffle = random.Random(7)
        recorder.reset([shuffle.uniform(0.0, 0.3) for _ in range(40)] if workers is None else 0.0)
        run, agents, reason = searched(tmp_path / name, recorder, budget=11, workers=workers)
        table = Store(tmp_path / name).read("candidates", run.id)
        runs.append((list(recorder.evaluated), run.state.tried, list(table.id), run.state.speedups, agents.board.verdicts,
                     agents.board.memory, agents.state(), reason))
    assert runs[0] == runs[1]
    evaluated, _, _, speedups, verdicts, *_ = runs[0]
    assert len(evaluated) == 11 and any(v.endswith("REJECT") for v in verdicts) and speedups
    whose = [v.split()[1] for v in verdicts]  # agent order, round after round: fusion first in every full round
    assert whose[:4] == ["fusion", "tiling_tensor_cores", "memory_layout", "library_configuration"]


def test_no_round_proposes_past_the_candidate_budget_and_the_llm_budget_is_shared(
        prefect_harness, tmp_path: Path, recorder: Recorder):
    run, agents, reason = searched(tmp_path, recorder, budget=6, llm_max_tokens=1000)
    assert reason == "candidate budget of 6 spent"
    assert len(recorder.requests) == len(run.state.tried) == 6  # 4 agents: a round of 4, then a round of 2 (not 4)
    store = Store(tmp_path)
    assert len(store.read("candidates", run.id)) == 6
    saved = store.read("search_state", run.id)  # saved before a round, then after every evaluation: a resume's state
    assert list(saved.n_tried) == [0, 1, 2, 3, 4, 4, 5, 6] and set(saved.strategy) == {"agents"}
    assert [len(json.loads(turns)) for turns in saved["round"]] == [4, 3, 2, 1, 0, 2, 1, 0]  # turns left to evaluate
    resumed = Agents.from_state(json.loads(saved.state_json.iloc[-1]))
    assert resumed.state() == agents.state() and len(resumed.plan(run, 9)) >= 1
    assert [r.llm_tokens_left for r in recorder.requests] == [250] * 4 + [500] * 2  # 1000 split per round
    seeds = [r.seed for r in recorder.requests]  # in the order the calls started
    assert sorted(seeds[:4]) == [0, 1, 2, 3] and sorted(seeds[4:]) == [4, 5]  # as if each earlier turn's had been tried


def test_a_round_killed_mid_way_resumes_its_proposals_for_their_agents(prefect_harness, tmp_path: Path,
                                                                        recorder: Recorder):
    """The process dies in the evaluation of the round's second proposal, after all four were generated and
    charged. Resumed, the round's proposals are each evaluated once (the interrupted one again from the start), for
    the agent that asked, and nothing is asked of the proposer again: no generate call, no LLM call."""
    with pytest.raises(RuntimeError, match="killed"):
        searched(tmp_path, recorder, budget=4, dies_at=2)
    store = Store(tmp_path)
    run_id, asked = store.runs().run_id.iloc[0], list(recorder.generates)
    assert len(asked) == 4 and len(store.read("llm_calls", run_id)) == 4 and len(recorder.evaluated) == 2
    run, agents, reason = searched(tmp_path, recorder, budget=4, resume=run_id)
    assert reason == "candidate budget of 4 spent"
    assert recorder.generates == asked and len(store.read("llm_calls", run_id)) == 4  # nothing asked again
    assert recorder.evaluated[2:] == recorder.evaluated[1:2] + run.state.tried[2:]  # the interrupted one, then the rest
    judged = [v.split()[:2] for v in agents.board.verdicts]  # 'candidate agent VERDICT', one per evaluation
    assert sorted(c for c, _ in judged) == sorted(c for c, *_ in asked) == sorted(run.state.tried)  # each once, none lost
    assert all(run.state.candidates[c].origin.params["who"] == f"Focus ({who})" for c, who in judged), judged
    assert [who for _, who in judged] == ["fusion", "tiling_tensor_cores", "memory_layout", "library_configuration"]
    assert len(store.read("candidates", run_id)) == 4
