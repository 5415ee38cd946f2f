"""The campaign's regression check: is last time's best still as fast, relative to eager, as it was recorded?

A campaign warm-starts each problem's run from the previous campaign's best candidate, so that candidate is the
run's first evaluation: compiled, verified and timed beside eager (and torch.compile on a GPU) in this run's own
benchmark call (flows/run.py). Its speedup over eager then and now are compared on the shapes timed both times:

- each workload's speedup carries the log half-widths of its two medians' 95% intervals in quadrature, a geomean the
  quadrature mean over its workloads (flows/search/ladder.py's per_workload and geomean_on, the ladder's own noise
  model);
- the two geomeans differ when their ratio exceeds exp(band), band = the two half-widths in quadrature but at least
  log(1 + floor), the floor 5% by default (the suite's regression_floor). The floor is wider than the ladder's 3%
  because these are two processes on different nights, possibly on another host of the same GPU model: clocks,
  placement and thermal state differ more than within one interleaved call;
- slower: now × exp(band) < then. A speedup over eager also falls when eager gets faster (a torch upgrade): that is
  a loss of the kernel's advantage and is flagged too; the note gives the candidate's own median ratio beside it.

Verdicts: ok, slower, broken (the candidate no longer compiles, verifies or times), not_checked (no previous best,
the problem changed, another device, no shape in common, no timing of it then).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelflow.artifacts import fmt
from kernelflow.artifacts.campaigns import Verdict
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.timed import latest_full_timing
from kernelflow.flows.search.ladder import geomean_on, per_workload
from kernelflow.stages.contracts import BenchmarkResult


@dataclass(frozen=True)
class Check:
    verdict: Verdict
    note: str
    previous: float | None = None  # geomean speedup over eager then, on the shapes compared
    retimed: float | None = None  # and now
    noise_factor: float | None = None  # exp(band)


def _failure(store: Store, run_id: str, candidate_id: str) -> str | None:
    """The first stage that rejected the candidate in that run, as one line."""
    for table, stage in (("compiles", "compile"), ("verifications", "verify"), ("benchmarks", "benchmark")):
        frame = store.read(table, run_id)
        bad = frame[(frame.candidate_id == candidate_id) & (frame.status != "ok")] if not frame.empty else frame
        if not bad.empty:
            first = str(bad.message.iloc[0] or "").splitlines()[:1]
            return f"{stage} {bad.failure_kind.iloc[0]}: {first[0][:200] if first else ''}"
    return None


def _device(timed: BenchmarkResult) -> str:
    names = {f"{t.provenance.device} {t.provenance.device_name}" for t in timed.timings if t.contender == "candidate"}
    return ", ".join(sorted(names))


def check_regression(store: Store, previous_run_id: str, candidate_id: str, run_id: str, floor: float = 0.05) -> Check:
    """Compare the candidate's timing in `previous_run_id` with its re-timing in `run_id` (see the module doc)."""
    sources = [store.read("problems", r) for r in (previous_run_id, run_id)]
    if all(not f.empty for f in sources) and sources[0].source_sha256.iloc[0] != sources[1].source_sha256.iloc[0]:
        return Check("not_checked", f"the problem changed since {previous_run_id}: last time's best answers another "
                     "question")
    then = latest_full_timing(store, previous_run_id, candidate_id)
    if then is None:
        return Check("not_checked", f"run {previous_run_id} has no full timing of {candidate_id}")
    now = latest_full_timing(store, run_id, candidate_id)
    if now is None:
        why = _failure(store, run_id, candidate_id)
        if why is not None:
            return Check("broken", f"{candidate_id}, {fmt.speedup(then.speedup_vs_eager)} eager in {previous_run_id}, now "
                         f"fails: {why}")
        return Check("not_checked", f"run {run_id} did not time {candidate_id} (a warm start evaluates it first; "
                     "was the problem changed, or the run stopped before it?)")
    if _device(then) != _device(now):
        return Check("not_checked", f"timed on {_device(then)} then and on {_device(now)} now")
    mine, theirs = per_workload(now), per_workload(then)
    shared = sorted(set(mine) & set(theirs))
    if not shared:
        return Check("not_checked", "no shape timed both times")
    (s_now, r_now), (s_then, r_then) = geomean_on(mine, shared), geomean_on(theirs, shared)
    band = max(math.log1p(floor), math.hypot(r_now, r_then))
    own = _own_ratio(then, now, shared)
    numbers = (f"{fmt.speedup(s_now)} eager now vs {fmt.speedup(s_then)} in {previous_run_id} on {'+'.join(shared)} "
               f"(ratio {s_now / s_then:.3f}, noise band x{math.exp(band):.3f}; the candidate's own median time "
               f"x{own:.3f})")
    slower = s_now * math.exp(band) < s_then
    return Check("slower" if slower else "ok", ("SLOWER beyond the noise: " if slower else "within the noise or "
                                                "faster: ") + numbers, s_then, s_now, math.exp(band))


def _own_ratio(then: BenchmarkResult, now: BenchmarkResult, shared: list[str]) -> float:
    """Geomean over the shared shapes of the candidate's median now / then (context: was it the kernel or eager?)."""
    def medians(timed: BenchmarkResult) -> dict[str, float]:
        return {t.workload: t.median_us for t in timed.timings if t.contender == "candidate"}

    a, b = medians(now), medians(then)
    logs = [math.log(a[w] / b[w]) for w in shared if w in a and w in b and a[w] > 0 and b[w] > 0]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan

