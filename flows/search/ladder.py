"""The multi-fidelity ladder (after KernelBrain): cheap rungs first, so most device time goes to survivors.

Rung 0, policy gate: compile (the compile stage checks the import and the static facts), then, while there is an
  incumbent, a verification of one trial on one small shape (the first CPU workload, on the run's device) at the
  start of rung 1's benchmark call: one stage process for both rungs, so a pruned candidate costs one short call.
  Without an incumbent nothing can be pruned and rung 2's verification follows at once, so the gate is the
  compile alone. A failure is a rejection kept for a repair.
Rung 1, cheap timing: every timed shape, 5 to 20 repetitions each (2 s at most per shape), beside eager only.
  Pruned when it cannot beat the incumbent by the floor, the least gain rungs 2 and 3 ever accept: even its geomean
  speedup raised by rung 1's error stays within the floor above the incumbent's on the same shapes. Rung 1's error
  is the two calls' intervals in quadrature plus DRIFT, not the floor: a speedup is a ratio to eager timed in the same
  call, so it barely moves between calls. What the flat evaluation would spend on a pruned candidate could not change
  the best.
Rung 2, the flat evaluation after compile (flows/run.py's verify_and_time): verify on every shape, 5 trials, then
  the standard timing on every shape. Accepted here when there is no incumbent, or when it beats the incumbent
  beyond the noise band of the two calls; no faster, or faster by no more than the floor: kept (the incumbent
  stays); faster beyond the floor but within the band: a close call, promoted.
Rung 3, for close calls only: a second call with a tight interval (0.5%) and more repetitions, interleaved with
  the baselines; accepted only when faster than the incumbent by more than the noise band of the two calls.
  A candidate within the floor is not promoted: the band is never narrower than the floor, so narrower intervals
  cannot clear it, only a speed that moves by more than the gap.

The noise band: the half-widths of the 95% intervals of the medians, in log space (so a noisy CPU interval wider
than the median still gives a finite factor), combined in quadrature (a speedup's from its candidate's and
eager's; a geomean's over its workloads, which average out), with a floor of 0.03 (3%). Two speedups differ
when their ratio exceeds exp(band). The measurements that set DRIFT, FLOOR and the rung sizes are in docs/LOG.md.
Each rung is a row of the rungs table (RungRecord: outcome, reason, speedup, device seconds); every verify and
benchmark call is charged to the run's device time. evaluate returns a speedup only for a candidate it accepts, so
the loop keeps (and profiles) exactly those; the benchmark row it was accepted on says so (`accepted`, judged before
the row is recorded), and the tables' winner (artifacts/winner.py) follows those rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from kernelflow.artifacts import fmt
from kernelflow.flows.run import Run, benchmark_step, compile_step, verify_and_time
from kernelflow.flows.search.greedy import Greedy
from kernelflow.stages.contracts import BenchmarkResult, Candidate, RungRecord, Timing

FLOOR = 0.03  # the narrowest noise band: clocks, placement and the interval's own error
DRIFT = 0.01  # a speedup's move between two calls beyond their intervals (3x the most measured: docs/LOG.md)
# Rung 1, on one shape: up to 20 repetitions, since below about 12 the order-statistic interval of a median spans
# min..max (stages/measure/timing.py), and one outlier (a cold first call) would set the band; 2 s per shape at most.
CHEAP: dict[str, Any] = dict(min_reps=5, max_reps=20, budget_s=2.0, baselines=["eager"])
PRECISE: dict[str, Any] = dict(min_reps=50, max_reps=1000, target_rel_ci=0.005, budget_s=30.0)  # rung 3, on every shape

Outcome = Literal["passed", "rejected", "pruned", "accepted", "kept"]


def log_half(t: Timing) -> float:
    """Half-width of a median's 95% interval in log space (about its relative half-width when narrow)."""
    return math.log(t.ci_high_us / t.ci_low_us) / 2 if t.ci_low_us > 0 else math.inf


def per_workload(timed: BenchmarkResult) -> dict[str, tuple[float, float]]:
    """Workload -> (speedup over eager, log half-width of its interval) in one benchmark call."""
    by = {(t.contender, t.workload): t for t in timed.timings}
    return {w: (by["eager", w].median_us / t.median_us, math.hypot(log_half(t), log_half(by["eager", w])))
            for (c, w), t in by.items() if c == "candidate" and ("eager", w) in by}


def geomean_half(timed: BenchmarkResult) -> float:
    """Log half-width of a call's geomean speedup (independent workloads)."""
    rels = [r for _, r in per_workload(timed).values()]
    return math.sqrt(sum(r * r for r in rels)) / len(rels) if rels else math.inf


def band(*rels: float) -> float:
    """The noise band of a comparison, in log space: its parts' half-widths in quadrature, at least FLOOR. Two
    speedups differ beyond it when their ratio exceeds exp(band) (about 1 + band when narrow)."""
    return max(FLOOR, math.sqrt(sum(r * r for r in rels)))


def geomean_on(timed: dict[str, tuple[float, float]], shapes: list[str]) -> tuple[float, float]:
    """(geomean speedup, its log half-width) over `shapes` of a per_workload map (independent workloads)."""
    logs = [math.log(timed[w][0]) for w in shapes]
    return math.exp(sum(logs) / len(logs)), math.sqrt(sum(timed[w][1] ** 2 for w in shapes)) / len(shapes)


def prune(cheap: BenchmarkResult, incumbent: BenchmarkResult) -> tuple[bool, str]:
    """Rung 1's decision: prune when the cheap geomean speedup raised by its error (the two calls' intervals in
    quadrature, plus DRIFT) stays within the floor above the incumbent's on the same shapes: rung 2 would keep it,
    and no precise timing could clear it."""
    mine, theirs = per_workload(cheap), per_workload(incumbent)
    shared = [w for w in mine if w in theirs]
    if not shared:
        return False, "no shape timed beside the incumbent's: promoted untested"
    (s, r), (s_inc, r_inc) = geomean_on(mine, shared), geomean_on(theirs, shared)
    err = math.hypot(r, r_inc) + DRIFT
    hopeless = s * math.exp(err) <= s_inc * math.exp(FLOOR)
    return hopeless, (f"{fmt.speedup(s)} eager on {'+'.join(shared)} vs the incumbent's {fmt.speedup(s_inc)}: "
                      f"{'cannot beat it' if hopeless else 'may beat it'} by the {FLOOR:.0%} floor within rung 1's "
                      f"error (x{math.exp(err):.3f})")


def accept(precise: BenchmarkResult, incumbent: BenchmarkResult) -> tuple[bool, str]:
    """Rung 3's decision: accept when the precise geomean beats the incumbent's beyond the two calls' band."""
    s, s_inc = precise.speedup_vs_eager or 0.0, incumbent.speedup_vs_eager or 0.0
    b = band(geomean_half(precise), geomean_half(incumbent))
    faster = s > s_inc * math.exp(b)
    return faster, (f"{fmt.speedup(s)} eager vs the incumbent's {fmt.speedup(s_inc)}: "
                    f"{'above' if faster else 'not above'} the noise band (x{math.exp(b):.3f})")


def note(run: Run, candidate: Candidate, rung: int, outcome: Outcome, since_s: float, reason: str,
         speedup: float | None = None, less_s: float = 0.0) -> bool:
    """Record one rung (its device seconds: the run's since `since_s`, less `less_s` charged to an earlier rung of
    the same call); True when the candidate goes on."""
    run.recorder.rung(RungRecord(
        candidate_id=candidate.id, problem_id=run.problem.id, rung=rung, outcome=outcome, reason=reason,
        speedup_vs_eager=speedup, device_s=run.state.gpu_s - since_s - less_s))
    print(f"  rung {rung} {outcome}: {reason}")
    return outcome in ("passed", "accepted")


def failure(run: Run, candidate: Candidate) -> str:
    found = run.state.failures.get(candidate.id)
    return f"{found.stage} {found.kind}: {found.message.splitlines()[0][:200] if found.message else ''}" \
        if found else "no speedup measured"


def small_shape(run: Run) -> str:
    """The gate's shape: the first CPU workload (the first timed one when the problem declares none)."""
    return run.problem.workloads("cpu" if run.problem.cpu_workloads else "gpu")[0].name


def gate(run: Run, candidate: Candidate) -> bool:
    """Rung 0 on its own, when nothing can be pruned: the compile (rung 2's verification follows at once)."""
    since = run.state.gpu_s
    if compile_step(run, candidate).status != "ok":
        return note(run, candidate, 0, "rejected", since, failure(run, candidate))
    return note(run, candidate, 0, "passed", since, "compiled; no incumbent to prune against: rung 2 verifies it")


def cheap(run: Run, candidate: Candidate, incumbent: BenchmarkResult) -> bool:
    """Rungs 0 and 1 in one benchmark call: compile, one trial on the small shape, then a few repetitions on every
    timed shape beside eager; promoted unless it cannot beat the incumbent."""
    since, small = run.state.gpu_s, small_shape(run)
    if compile_step(run, candidate).status != "ok":
        return note(run, candidate, 0, "rejected", since, failure(run, candidate))
    timed = benchmark_step(run, candidate, precheck=[small], **CHEAP)
    checked_s = timed.precheck_s or 0.0
    if timed.status != "ok" and timed.message.startswith("precheck"):
        return note(run, candidate, 0, "rejected", since, failure(run, candidate))
    note(run, candidate, 0, "passed", since, f"compiled; verified on {small}, 1 trial", less_s=run.state.gpu_s - since
         - checked_s)
    if timed.status != "ok":
        return note(run, candidate, 1, "rejected", since, failure(run, candidate), less_s=checked_s)
    pruned, why = prune(timed, incumbent)
    return note(run, candidate, 1, "pruned" if pruned else "passed", since, why, timed.speedup_vs_eager,
                less_s=checked_s)


def verdict(timed: BenchmarkResult, incumbent: BenchmarkResult | None) -> tuple[Outcome, str]:
    """Rung 2's decision on a timing with a speedup: accepted (the first incumbent, or faster than the incumbent
    beyond the two calls' band), passed (faster beyond the floor but within the band, which is wider than the floor
    only through the intervals: a close call that rung 3's narrower intervals can decide) or kept (no faster, or
    faster by no more than the floor, which no precise timing can clear)."""
    if incumbent is None:
        return "accepted", "verified on every shape; the first incumbent"
    clear, why = accept(timed, incumbent)
    s, s_inc = timed.speedup_vs_eager or 0.0, incumbent.speedup_vs_eager or 0.0
    if clear:
        return "accepted", f"verified on every shape; {why}"
    if s > s_inc * math.exp(FLOOR):
        return "passed", f"verified on every shape; {why}; beyond the {FLOOR:.0%} floor: rung 3 decides"
    if s > s_inc:  # so s_inc > 0 here (were it 0, s > s_inc * exp(FLOOR) above)
        return "kept", (f"verified on every shape; {why}; x{s / s_inc:.3f} is within the {FLOOR:.0%} floor: "
                        "a precise timing cannot clear it")
    return "kept", f"verified on every shape; {why}"


def standard(run: Run, candidate: Candidate, incumbent: BenchmarkResult | None) -> tuple[BenchmarkResult | None, bool]:
    """Rung 2: the flat evaluation. (timing, False) when accepted here: the first incumbent, or faster than the
    incumbent beyond the two calls' band; (timing, True) when faster beyond the floor but within the band (a close
    call for rung 3); (None, False) when rejected, not faster, or faster within the floor (kept: the incumbent
    stays)."""
    since = run.state.gpu_s
    timed = verify_and_time(run, candidate, lambda t: t.speedup_vs_eager is not None and
                            verdict(t, incumbent)[0] == "accepted")
    if timed is None or timed.speedup_vs_eager is None:
        note(run, candidate, 2, "rejected" if timed is None else "kept", since, failure(run, candidate))
        return None, False
    outcome, why = verdict(timed, incumbent)
    note(run, candidate, 2, outcome, since, why, timed.speedup_vs_eager)
    return (None, False) if outcome == "kept" else (timed, outcome == "passed")


def precise(run: Run, candidate: Candidate, incumbent: BenchmarkResult) -> BenchmarkResult | None:
    """Rung 3: a tight re-timing beside the baselines; the timing when it beats the incumbent beyond the band."""
    since = run.state.gpu_s
    timed = benchmark_step(run, candidate, lambda t: accept(t, incumbent)[0], **PRECISE)
    if timed.status != "ok":
        note(run, candidate, 3, "rejected", since, failure(run, candidate))
        return None
    won, why = accept(timed, incumbent)
    return timed if note(run, candidate, 3, "accepted" if won else "kept", since, why, timed.speedup_vs_eager) \
        else None


class Ladder(Greedy):
    """Greedy's selection (repair the latest failure, else refine the incumbent), evaluated in rungs."""

    NAME: ClassVar[str] = "ladder"

    def __init__(self) -> None:
        self.timed: dict[str, BenchmarkResult] = {}  # per accepted candidate: the timing it was accepted on

    def evaluate(self, run: Run, candidate: Candidate, flat: Callable[[Candidate], float | None]) -> float | None:
        incumbent = self.timed.get(run.state.best[1].id) if run.state.best else None
        if not (gate(run, candidate) if incumbent is None else cheap(run, candidate, incumbent)):
            return None
        timed, close = standard(run, candidate, incumbent)
        if close and incumbent is not None:
            timed = precise(run, candidate, incumbent)
        if timed is None:
            return None
        self.timed[candidate.id] = timed
        return timed.speedup_vs_eager
