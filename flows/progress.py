"""What a run tells a live display while it works. The flows call this module's functions at the points that matter (a
run or campaign begun, a stage started and finished, a candidate begun and finished with its verdict and time, the
baselines timed, a run finished, a campaign entry finished); each passes the event to the Reporter in use: the quiet one
unless the caller installed another with `reporting` (kernelflow/live.py: a rich display on a terminal, plain lines
otherwise). Stage calls may come from Prefect's worker threads, so a reporter is thread-safe; one that raises is
logged and never fails the run. Nothing here draws anything.

A finished candidate and a finished campaign entry are also one line of the Prefect run's log (the UI, and the console
where nobody draws progress), marked with the LogRecord attribute PROGRESS so that a reporter that prints those lines
itself can keep them off the console.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kernelflow.artifacts import fmt

if TYPE_CHECKING:
    from kernelflow.flows.state import SearchState
    from kernelflow.stages.contracts import BenchmarkResult, Candidate, StageRequest

PROGRESS = "kernelflow_progress"  # set on the log records of progress lines
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    problem_id: str
    device: str
    strategy: str
    budget: int  # candidates
    wall_time_s: float
    started: float  # time.monotonic() when the run began: its wall-time counts from here
    tried: int = 0  # candidates a resumed run had tried before


@dataclass(frozen=True)
class CandidateDone:
    index: int  # the candidate's place in the run, from 1
    budget: int
    candidate_id: str
    family: str  # its template family or proposer
    params: str
    verdict: str  # "verified", "rejected at <stage>: <kind>", or "not kept" (pruned, or no faster than the incumbent)
    speedup_vs_eager: float | None  # geomean over the timed shapes; None when not verified
    speedup_vs_compile: float | None  # None when torch.compile was not timed beside it
    seconds: float  # its evaluation, profile excluded
    elapsed_s: float  # since the run began

    def line(self) -> str:
        """`[2/6] 3f2a9c1b... elementwise {"BLOCK": 1024}: verified, 0.0154x eager (31 s; 1:22 elapsed)`."""
        outcome = self.verdict
        if self.speedup_vs_eager is not None:
            outcome += f", {fmt.speedup(self.speedup_vs_eager)} eager"
            if self.speedup_vs_compile is not None:
                outcome += f", {fmt.speedup(self.speedup_vs_compile)} torch.compile"
        return (f"[{self.index}/{self.budget}] {self.candidate_id} {self.family} {self.params}: {outcome} "
                f"({self.seconds:.0f} s; {clock(self.elapsed_s)} elapsed)")


@dataclass(frozen=True)
class RunFinished:
    run_id: str
    status: str  # "finished" or "failed"
    stop_reason: str
    winner_note: str
    elapsed_s: float


@dataclass(frozen=True)
class ProblemDone:
    index: int  # entries finished so far, this one included
    total: int
    entry: str
    status: str  # the campaign_problems row's
    verdict: str
    note: str

    def line(self) -> str:
        return f"[{self.index}/{self.total}] {self.entry}: {self.status}, {self.verdict}: {self.note}"


@dataclass(frozen=True)
class Baselines:
    medians_us: dict[str, dict[str, float]] = field(default_factory=dict)  # per baseline, per workload: its median


class Reporter(Protocol):
    def run_started(self, run: RunStarted) -> None: ...

    def candidate_started(self, index: int, budget: int, candidate_id: str, family: str) -> None: ...

    def stage_started(self, stage: str, subject: str) -> None: ...

    def stage_finished(self, stage: str, subject: str, status: str, seconds: float) -> None: ...

    def baselines_timed(self, baselines: Baselines) -> None: ...

    def candidate_finished(self, done: CandidateDone) -> None: ...

    def run_finished(self, run: RunFinished) -> None: ...

    def campaign_started(self, campaign_id: str, entries: list[str]) -> None: ...

    def problem_finished(self, done: ProblemDone) -> None: ...


class Quiet:
    """The reporter in use unless another is installed: it shows nothing. A reporter may subclass it and implement
    only what it shows."""

    def run_started(self, run: RunStarted) -> None:
        pass

    def candidate_started(self, index: int, budget: int, candidate_id: str, family: str) -> None:
        pass

    def stage_started(self, stage: str, subject: str) -> None:
        pass

    def stage_finished(self, stage: str, subject: str, status: str, seconds: float) -> None:
        pass

    def baselines_timed(self, baselines: Baselines) -> None:
        pass

    def candidate_finished(self, done: CandidateDone) -> None:
        pass

    def run_finished(self, run: RunFinished) -> None:
        pass

    def campaign_started(self, campaign_id: str, entries: list[str]) -> None:
        pass

    def problem_finished(self, done: ProblemDone) -> None:
        pass


_reporter: Reporter = Quiet()
_installing = threading.Lock()


@contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """`reporter` gets the events of every run in this process (all threads) until the block ends."""
    global _reporter
    with _installing:
        previous, _reporter = _reporter, reporter
    try:
        yield reporter
    finally:
        with _installing:
            _reporter = previous


def _tell(event: str, *args: Any) -> None:
    try:
        getattr(_reporter, event)(*args)
    except Exception:  # a display's fault never fails a run
        _log.warning("progress reporter %s failed on %s", type(_reporter).__name__, event, exc_info=True)


def clock(seconds: float) -> str:
    """A duration as `m:ss`, or `h:mm:ss` from an hour."""
    s = max(0, math.floor(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def short(candidate: Candidate) -> str:
    """A candidate as progress names it: its id's first 8 characters and its family (template or proposer)."""
    return f"{candidate.id[:8]} ({candidate.origin.proposer})"


def subject(req: StageRequest) -> str:
    """What a stage call works on: its candidate, else the baseline it profiles, else the baselines it times."""
    candidate = getattr(req, "candidate", None)
    if candidate is not None:
        return short(candidate)
    contender = getattr(req, "contender", None)
    return contender if isinstance(contender, str) and contender != "candidate" else \
        ", ".join(getattr(req, "baselines", None) or ["baselines"])


def log_line(line: str) -> None:
    """`line` in the Prefect run's log, marked PROGRESS; printed outside a run."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        logger = get_run_logger()
    except MissingContextError:
        print(line)
        return
    logger.info(line, extra={PROGRESS: True})


def run_started(run: RunStarted) -> None:
    _tell("run_started", run)


def candidate_started(state: SearchState, candidate: Candidate) -> None:
    _tell("candidate_started", len(state.tried), state.config.budget, candidate.id, candidate.origin.proposer)


def stage_started(stage: str, subject: str) -> None:
    _tell("stage_started", stage, subject)


def stage_finished(stage: str, subject: str, status: str, seconds: float) -> None:
    _tell("stage_finished", stage, subject, status, seconds)


def baselines_timed(timed: BenchmarkResult) -> None:
    """A timing's baseline medians, when it has any."""
    medians: dict[str, dict[str, float]] = {}
    for t in timed.timings:
        if t.contender != "candidate" and t.median_us is not None:
            medians.setdefault(t.contender, {})[t.workload] = t.median_us
    if medians:
        _tell("baselines_timed", Baselines(medians))


def candidate_finished(state: SearchState, candidate: Candidate, speedup: float | None, seconds: float,
                       elapsed_s: float) -> None:
    """The candidate's outcome as the search took it (`speedup`: over eager; None: rejected or not kept), logged and
    reported."""
    failure = state.failures.get(candidate.id)
    timing = state.flat_timing if state.flat_timing and state.flat_timing.candidate_id == candidate.id else None
    verdict = "verified" if speedup else f"rejected at {failure.stage}: {failure.kind}" if failure else "not kept"
    done = CandidateDone(
        index=len(state.tried), budget=state.config.budget, candidate_id=candidate.id, family=candidate.origin.proposer,
        params=str(candidate.origin.params), verdict=verdict, speedup_vs_eager=speedup or None,
        speedup_vs_compile=timing.speedup_vs_compile if speedup and timing else None, seconds=seconds,
        elapsed_s=elapsed_s)
    log_line(done.line())
    _tell("candidate_finished", done)


def run_finished(run: RunFinished) -> None:
    _tell("run_finished", run)


def campaign_started(campaign_id: str, entries: list[str]) -> None:
    _tell("campaign_started", campaign_id, entries)


def problem_finished(done: ProblemDone) -> None:
    log_line(done.line())
    _tell("problem_finished", done)
