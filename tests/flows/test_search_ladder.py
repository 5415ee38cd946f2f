"""The multi-fidelity ladder (flows/search/ladder.py): its noise band and decisions on synthetic timings, a run end to
end on CPU (Triton's interpreter), and a clearly slower candidate pruned at rung 1."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

from kernelflow.flows.config import RunConfig
from kernelflow.flows.search.ladder import FLOOR, accept, band, prune, verdict
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import BenchmarkResult, Candidate, Origin, Provenance, Timing
from kernelflow.stages.problems.kernelbench import load_problem
from tests.families import WRITTEN

ROOT = Path(__file__).resolve().parents[2]
SILU = ROOT / "problems" / "09_silu.py"
PROV = Provenance(device="cpu", device_name="test", torch="x", python="3", hostname="h", code_version="t", tf32=False)

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * tl.sigmoid(x), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        for _ in range(REPEAT):  # the slow one launches the same kernel REPEAT times
            silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''


def timed(*rows: tuple[str, str, float, float]) -> BenchmarkResult:
    """A synthetic benchmark call: (contender, workload, median_us, log half-width of its interval)."""
    timings = [Timing(problem_id="p", candidate_id="c" if c == "candidate" else None, benchmark_for="c", contender=c,
                      workload=w, median_us=m, ci_low_us=m / math.exp(r), ci_high_us=m * math.exp(r), min_us=m, mean_us=m,
                      n_reps=10, l2_flushed=False, input_sets=2, provenance=PROV)
               for c, w, m, r in rows]
    by = {(t.contender, t.workload): t.median_us for t in timings}
    ratios = [by["eager", w] / by["candidate", w] for (c, w) in by if c == "candidate"]
    speedup = pd.Series(ratios).prod() ** (1 / len(ratios))
    return BenchmarkResult(candidate_id="c", problem_id="p", status="ok", device="cpu", sizes="cpu", timings=timings,
                           speedup_vs_eager=float(speedup))


def test_noise_band_and_the_prune_and_accept_decisions():
    assert band(0.001, 0.002) == FLOOR and band(0.03, 0.04) == pytest.approx(0.05)
    incumbent = timed(("candidate", "cpu0", 50.0, 0.01), ("eager", "cpu0", 100.0, 0.01),
                      ("candidate", "cpu1", 50.0, 0.01), ("eager", "cpu1", 100.0, 0.01))  # 2x on both shapes
    slower = timed(("candidate", "cpu0", 60.0, 0.02), ("eager", "cpu0", 100.0, 0.02))  # 1.67x: beyond a 3% band
    close = timed(("candidate", "cpu0", 51.0, 0.02), ("eager", "cpu0", 100.0, 0.02))  # 1.96x: within it, not above
    ahead = timed(("candidate", "cpu0", 48.0, 0.02), ("eager", "cpu0", 100.0, 0.02))  # 2.08x: may beat it
    noisy = timed(("candidate", "cpu0", 60.0, 0.3), ("eager", "cpu0", 100.0, 0.3))  # 1.67x, but a x1.55 band
    wild = timed(("candidate", "cpu0", 2000.0, 1.0), ("eager", "cpu0", 100.0, 1.0))  # 0.05x: beyond even x4.2
    assert prune(slower, incumbent)[0] and "cannot beat it by the 3% floor" in prune(slower, incumbent)[1]
    assert prune(close, incumbent)[0] and prune(wild, incumbent)[0]  # no faster: rung 2 could not accept it
    assert not prune(ahead, incumbent)[0] and not prune(noisy, incumbent)[0]
    skewed = timed(("candidate", "cpu0", 45.0, 0.01), ("eager", "cpu0", 100.0, 0.01),
                   ("candidate", "cpu1", 80.0, 0.01), ("eager", "cpu1", 100.0, 0.01))  # 2.22x and 1.25x: 1.67x
    assert prune(skewed, incumbent)[0] and "1.67x eager on cpu0+cpu1 vs the incumbent's 2.00x" in \
        prune(skewed, incumbent)[1]  # ahead on the first shape alone, behind over both
    # The H200's softmax case (LOG.md): narrow intervals, so x1.011 above the incumbent cannot reach x1.03; x1.02 may
    narrow = dict(incumbent=both(100 / 1.277, 0.003), within=both(100 / 1.291, 0.003), near=both(100 / 1.303, 0.003))
    assert prune(narrow["within"], narrow["incumbent"])[0] and not prune(narrow["near"], narrow["incumbent"])[0]
    faster = timed(("candidate", "cpu0", 45.0, 0.004), ("eager", "cpu0", 100.0, 0.004),
                   ("candidate", "cpu1", 45.0, 0.004), ("eager", "cpu1", 100.0, 0.004))  # 2.22x: 11% better
    marginal = timed(("candidate", "cpu0", 49.0, 0.004), ("eager", "cpu0", 100.0, 0.004),
                     ("candidate", "cpu1", 49.0, 0.004), ("eager", "cpu1", 100.0, 0.004))  # 2.04x: 2% better
    assert accept(faster, incumbent)[0] and not accept(marginal, incumbent)[0]
    assert "not above the noise band (x1.030)" in accept(marginal, incumbent)[1]


def both(us: float, r: float) -> BenchmarkResult:
    """A candidate at `us` on cpu0 and cpu1 against eager at 100 us, every interval of log half-width `r`."""
    return timed(("candidate", "cpu0", us, r), ("eager", "cpu0", 100.0, r),
                 ("candidate", "cpu1", us, r), ("eager", "cpu1", 100.0, r))


def test_rung_2_promotes_only_a_close_call_that_a_precise_timing_can_decide():
    """Within the 3% floor no narrower interval can clear the band (never narrower than the floor): kept at rung 2.
    Beyond the floor but within a band widened by the intervals: promoted to rung 3."""
    incumbent = both(50.0, 0.004)  # 2x eager
    within = both(49.0, 0.004)  # x1.020: faster, within the floor (the H200's 1.302x against 1.276x)
    noisy = both(48.0, 0.07)  # x1.042: beyond the floor, within a x1.073 band
    clear = both(45.0, 0.004)  # x1.111: beyond the band
    slower = both(51.0, 0.004)
    assert verdict(within, incumbent)[0] == "kept" and \
        "x1.020 is within the 3% floor: a precise timing cannot clear it" in verdict(within, incumbent)[1]
    assert verdict(noisy, incumbent)[0] == "passed" and "not above the noise band (x1.073)" in \
        verdict(noisy, incumbent)[1]
    assert verdict(clear, incumbent)[0] == "accepted" and verdict(slower, incumbent)[0] == "kept"
    assert "floor" not in verdict(slower, incumbent)[1] and verdict(within, None)[0] == "accepted"


def test_a_close_call_within_the_floor_never_reaches_rung_3(monkeypatch):
    """Ladder.evaluate on fake calls: rung 3's precise benchmark call only for the close call beyond the floor."""
    from types import SimpleNamespace

    from kernelflow.flows.search import ladder

    incumbent, inc_candidate = both(50.0, 0.004), user(1)
    at_rung_2 = {"within": both(49.0, 0.004), "noisy": both(48.0, 0.07)}
    precise_calls: list[str] = []

    def benchmark_step(run, candidate, accepted, **kw):
        precise_calls.append(candidate.origin.proposer)
        assert kw["target_rel_ci"] == 0.005  # the precise call
        run.state.spend_device(9.5)
        return both(48.0, 0.002)  # x1.042 with a x1.030 band: accepted

    def verify_and_time(run, candidate, accepted):
        run.state.spend_device(15.0)
        return at_rung_2[candidate.origin.proposer]

    monkeypatch.setattr(ladder, "cheap", lambda run, candidate, inc: True)
    monkeypatch.setattr(ladder, "verify_and_time", verify_and_time)
    monkeypatch.setattr(ladder, "benchmark_step", benchmark_step)
    rows: list = []
    state = SearchState(load_problem(SILU), RunConfig(device="cpu"))
    state.crown(inc_candidate, 2.0)
    run = SimpleNamespace(id="r", problem=state.problem, state=state, recorder=SimpleNamespace(rung=rows.append))
    strategy = ladder.Ladder()
    strategy.timed[inc_candidate.id] = incumbent
    for name in ("within", "noisy"):
        candidate = Candidate.make("09_silu", "triton", KERNEL.replace("REPEAT", name), Origin(kind="user",
                                   proposer=name), inc_candidate.id)
        speedup = strategy.evaluate(run, candidate, lambda c: None)  # type: ignore[arg-type]
        assert (speedup is None) == (name == "within")
    assert len(precise_calls) == 1  # the noisy one only: 9.5 s saved on the one within the floor
    assert [(r.rung, r.outcome) for r in rows] == [(2, "kept"), (2, "passed"), (3, "accepted")]
    assert "cannot clear it" in rows[0].reason and rows[0].device_s == 15.0


def user(kernel_launches: int, parent_id: str | None = None) -> Candidate:
    return Candidate.make("09_silu", "triton", KERNEL.replace("REPEAT", str(kernel_launches)),
                          Origin(kind="user", proposer=f"launches{kernel_launches}"), parent_id)


def test_ladder_run_end_to_end(prefect_harness, tmp_path: Path, monkeypatch):
    """The builtin proposer's candidates, and for the second proposal a deliberately slow child of the incumbent."""
    from kernelflow.flows.optimize import optimize
    from kernelflow.stages import generate
    from kernelflow.stages.contracts import GenerateResult

    real, slow = generate.run, user(100)

    def with_a_slow_one(req):
        if len(req.exclude_ids) != 1:
            return real(req)
        return GenerateResult(problem_id=req.problem.id, proposer="user", candidates=[slow])

    monkeypatch.setattr(generate, "run", with_a_slow_one)
    summary = optimize(str(SILU), RunConfig(budget=4, store=str(tmp_path), device="cpu", executor="inline",
                                            profile=False, strategy="ladder", families=WRITTEN))
    assert summary["stop_reason"] == "candidate budget of 4 spent" and summary["best_candidate_id"]
    cands, rungs, runs = (pd.read_parquet(tmp_path / "tables" / t) for t in ("candidates", "rungs", "runs"))
    assert set(rungs.candidate_id) == set(cands.id) and len(cands) == 4 and (rungs.rung == 0).sum() == 4
    reached = set(rungs.candidate_id[(rungs.rung == 2) & rungs.outcome.isin(["accepted", "passed"])])
    accepted = rungs[rungs.outcome == "accepted"]
    assert set(accepted.candidate_id) <= reached and summary["best_candidate_id"] == accepted.candidate_id.iloc[-1]
    bench = pd.read_parquet(tmp_path / "tables" / "benchmarks")  # the rows the accepted candidates were accepted on
    assert list(bench.candidate_id[bench.accepted.eq(True)]) == list(accepted.candidate_id)
    assert runs.best_candidate_id.iloc[-1] == summary["best_candidate_id"] and summary["winner"] in (
        summary["best_candidate_id"], "eager")  # the tables' winner follows the ladder's accepted candidates
    assert rungs[rungs.candidate_id == slow.id].outcome.tolist() == ["passed", "pruned"]  # never fully verified
    # (how much device time pruning saves is a measurement: scripts/bench_search.py, not a timed assertion here)
    bench = importlib.util.spec_from_file_location("bench_search", ROOT / "scripts" / "bench_search.py")
    module = importlib.util.module_from_spec(bench)
    bench.loader.exec_module(module)
    from kernelflow.artifacts.store import Store

    row = module.summarize(Store(tmp_path), summary["run_id"])
    assert row["best_speedup_vs_eager"] == summary["best_speedup_vs_eager"] and row["device_s"] > 0
    assert row["device_s"] == pytest.approx(rungs.device_s.sum(), rel=1e-6) and set(row["rungs"]) <= {"0", "1", "2", "3"}


def test_a_clearly_slower_candidate_is_pruned_at_rung_1(prefect_harness, tmp_path: Path):
    from prefect import flow

    from kernelflow.artifacts.leaderboard import leaderboard
    from kernelflow.artifacts.store import Store
    from kernelflow.flows.run import Run, open_run
    from kernelflow.flows.search.ladder import Ladder

    problem = load_problem(SILU)
    fast, slow = user(1), user(100)
    wrong = Candidate.make("09_silu", "triton", user(1).source.replace("x * tl.sigmoid(x)", "x"),
                           Origin(kind="user", proposer="identity"))

    @flow
    def ladder() -> Run:
        run = open_run(problem, RunConfig(budget=3, device="cpu", executor="inline", profile=False, families=WRITTEN),
                       Store(tmp_path), "ladder-run")
        strategy = Ladder()
        for candidate in (fast, slow, wrong):
            run.state.consider(candidate)
            if (speedup := strategy.evaluate(run, candidate, lambda c: None)) is not None:
                run.state.crown(candidate, speedup)
        return run

    run = ladder()
    rungs = pd.read_parquet(tmp_path / "tables" / "rungs")
    outcome = {(r.candidate_id, r.rung): r.outcome for r in rungs.itertuples()}
    assert outcome == {(fast.id, 0): "passed", (fast.id, 2): "accepted", (slow.id, 0): "passed",
                       (slow.id, 1): "pruned", (wrong.id, 0): "rejected"}, rungs.reason.tolist()
    # the gate's trial ran in rung 1's benchmark call, and stopped it before anything was timed
    [call] = [b for b in pd.read_parquet(tmp_path / "tables" / "benchmarks").itertuples() if b.candidate_id == wrong.id]
    assert (call.status, call.failure_kind) == ("failed", "mismatch") and call.message.startswith("precheck: ")
    assert run.state.failures[wrong.id].kind == "mismatch"
    assert run.state.best is not None and run.state.best[1].id == fast.id
    assert run.state.gpu_s == pytest.approx(rungs.device_s.sum())
    board = leaderboard(Store(tmp_path), run.id).set_index("candidate_id")
    assert board.loc[slow.id, "status"] == "pruned" and "cannot beat it" in board.loc[slow.id, "reason"]
    assert board.loc[fast.id, "status"] == "verified"
