"""The seeds rule: the run's result is the fastest of the best candidate, eager and torch.compile, and says so."""

from pathlib import Path

from kernelflow.artifacts import fmt
from kernelflow.artifacts.leaderboard import leaderboard, render_board
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.winner import winner
from kernelflow.stages.contracts import (
    BenchmarkResult,
    Candidate,
    CompileResult,
    Origin,
    Provenance,
    RungRecord,
    Timing,
    VerifyResult,
)

PROV = Provenance(device="cuda", device_name="gpu", torch="2", python="3", hostname="h", code_version="c", tf32=False)


def call(store: Store, candidate: str | None, times: dict[str, list[float]], accepted: bool | None = None) -> None:
    """One benchmark call: `times` maps contender -> median per workload (w0, w1, ...); `accepted` as a search
    judged it (None: not judged)."""
    rows = [Timing(problem_id="p", candidate_id=candidate if who == "candidate" else None, contender=who,
                   benchmark_for=candidate or "baseline", workload=f"w{i}", median_us=t, ci_low_us=t, ci_high_us=t,
                   min_us=t, mean_us=t, n_reps=9, l2_flushed=True, input_sets=2, provenance=PROV)
            for who, ts in times.items() for i, t in enumerate(ts)]

    def geo(other: str) -> float | None:
        if candidate is None or other not in times:
            return None
        ratios = [o / c for o, c in zip(times[other], times["candidate"], strict=True)]
        out = 1.0
        for r in ratios:
            out *= r
        return out ** (1 / len(ratios))

    store.append_benchmark("r", BenchmarkResult(candidate_id=candidate or "baseline", problem_id="p", status="ok",
                                                device="cuda", sizes="gpu", timings=rows,
                                                speedup_vs_eager=geo("eager"), speedup_vs_compile=geo("compile"),
                                                accepted=accepted))


def test_a_candidate_wins_only_when_faster_than_every_baseline(tmp_path: Path):
    store = Store(tmp_path)
    call(store, "slow", {"candidate": [300, 300], "eager": [400, 400], "compile": [200, 200]})
    won = winner(store, "r")
    assert won is not None and won.is_baseline and won.id == "compile" and won.best_candidate_id == "slow"
    assert abs(won.best_speedup_vs_compile - 2 / 3) < 1e-9  # the candidate's own call: what the runs row keeps
    assert abs(won.speedup_vs_eager - 2.0) < 1e-9 and "torch.compile" in won.text and "0.667x torch.compile" in won.text
    call(store, "fast", {"candidate": [100, 150], "eager": [400, 420], "compile": [210, 190]})
    won = winner(store, "r")
    assert won is not None and not won.is_baseline and won.id == "fast"
    assert won.speedup_vs_compile is not None and won.speedup_vs_compile > 1.0


def test_a_tie_keeps_the_baseline(tmp_path: Path):
    store = Store(tmp_path)
    call(store, "same", {"candidate": [100.0], "eager": [100.0]})  # a CPU run: eager only
    won = winner(store, "r")
    assert won is not None and won.id == "eager" and won.speedup_vs_compile is None


def test_with_no_candidate_the_baselines_timed_alone_decide(tmp_path: Path):
    store = Store(tmp_path)
    assert winner(store, "r") is None  # nothing timed at all
    call(store, None, {"eager": [500, 520], "compile": [400, 410]})
    won = winner(store, "r")
    assert won is not None and won.id == "compile" and "no candidate was verified" in won.text
    board = leaderboard(store, "r")
    assert list(board.candidate_id) == ["compile", "eager"] and set(board.status) == {"baseline"}
    assert board.median_us.iloc[0] == "400.0/410.0"


def test_the_leaderboard_ranks_candidates_among_the_seeds(tmp_path: Path):
    store = Store(tmp_path)
    cand = Candidate.make("p", "triton", "class ModelNew: ...", Origin(kind="builtin", proposer="rowwise", params={}))
    store.append("candidates", "r", [cand])
    call(store, cand.id, {"candidate": [300], "eager": [400], "compile": [200]})
    board = leaderboard(store, "r")
    assert list(board.candidate_id) == ["compile", cand.id, "eager"]
    assert list(board.status) == ["baseline", "verified", "baseline"] and board.proposer.iloc[0] == "seed"


def test_only_timings_the_strategy_accepted_compete(tmp_path: Path):
    store = Store(tmp_path)
    call(store, "first", {"candidate": [200], "eager": [400]}, accepted=True)
    call(store, "close", {"candidate": [190], "eager": [400]}, accepted=False)  # within the noise: incumbent stays
    won = winner(store, "r")
    assert won is not None and won.id == "first" and won.speedup_vs_eager == 2.0
    call(store, "close", {"candidate": [180], "eager": [400]}, accepted=True)  # its precise re-timing accepted it
    won = winner(store, "r")
    assert won is not None and won.id == "close"


def test_a_store_from_before_the_flag_follows_the_ladders_rungs(tmp_path: Path):
    store = Store(tmp_path)
    call(store, "first", {"candidate": [200], "eager": [400]})
    call(store, "close", {"candidate": [190], "eager": [400]})
    store.append("rungs", "r", [RungRecord(candidate_id=c, problem_id="p", rung=2, outcome=o, reason="",
                                           speedup_vs_eager=s, device_s=1.0)
                                for c, o, s in (("first", "accepted", 2.0), ("close", "kept", 2.1))])
    won = winner(store, "r")
    assert won is not None and won.id == "first"


def test_the_rendered_board_names_its_workloads_and_says_why_a_column_is_empty(tmp_path: Path):
    store = Store(tmp_path)
    cand = Candidate.make("p", "triton", "class ModelNew: ...", Origin(kind="builtin", proposer="rowwise", params={}))
    store.append("candidates", "r", [cand])
    call(store, cand.id, {"candidate": [300.04, 600], "eager": [400, 700]})
    text = render_board(leaderboard(store, "r"))
    assert "median_us (w0/w1)" in text and "300.0/600.0" in text and "1.25x" in text, text
    assert text.splitlines()[-1].startswith("speedup_vs_compile -: torch.compile was not timed in this run "
                                            "(baselines: eager"), text


def test_numbers_print_to_three_significant_digits_or_one_decimal_of_a_microsecond():
    assert [fmt.speedup(x) for x in (0.01451952968295369, 1.4319, 1430.2, None, float("nan"))] == \
        ["0.0145x", "1.43x", "1430x", "not timed", "not timed"]
    assert [fmt.eng(x) for x in (5243174913.0, 2.5, 812.3, 999.9, 0.0)] == ["5.24G", "2.50", "812", "1.00k", "0"]
    assert fmt.us(216.24) == "216.2" and fmt.us(None) == "-"


def test_a_candidate_not_timed_says_how_far_it_got(tmp_path: Path):
    """Compiled only, or verified but never timed (a wall time spent, a ladder's screening): the leaderboard names
    the stage it passed, not "proposed"; a failure names the stage that failed."""
    store = Store(tmp_path)
    cands = [Candidate.make("p", "triton", f"class ModelNew: ...  # {i}", Origin(kind="builtin", proposer="rowwise",
                                                                                  params={})) for i in range(4)]
    store.append("candidates", "r", cands)
    store.append("compiles", "r", [CompileResult(candidate_id=c.id, problem_id="p", status="ok", backend="triton", arch="sm_90a",
                                                 mode="ahead_of_time") for c in cands[1:]])
    store.append("verifications", "r", [
        VerifyResult(candidate_id=cands[2].id, problem_id="p", status="ok", device="cuda", sizes=["gpu"], trials_passed=10),
        VerifyResult(candidate_id=cands[3].id, problem_id="p", status="failed", failure_kind="mismatch", message="at gpu0",
                     device="cuda", sizes=["gpu"])])
    board = leaderboard(store, "r").set_index("candidate_id")
    assert [board.loc[c.id, "status"] for c in cands] == ["proposed", "compiled", "verified, not timed", "verify failed"]
    assert board.loc[cands[3].id, "reason"] == "mismatch: at gpu0"
