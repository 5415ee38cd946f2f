"""The progress of `optimize` and `campaign` as a user sees it (the events of flows/progress.py): on a terminal a live
panel drawn by rich (the campaign's entries, the run's current candidate i of N and its stage, the best so far against
eager and torch.compile, the baselines' medians, elapsed and budget left in wall time and candidates) under the lines of
the run's log; elsewhere (CI, a log file) plain lines, one per finished candidate and campaign entry with its time.

Either way the finished candidates' and entries' lines are printed here, and Prefect's console handler leaves out its
own copies (the log records flows/progress.py marks PROGRESS); on a terminal its other lines are printed above the
panel. Events come from any thread: every reporter keeps its state under one lock.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.file_proxy import FileProxy
from rich.live import Live
from rich.panel import Panel
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from kernelflow.artifacts import fmt
from kernelflow.flows import progress
from kernelflow.flows.progress import Baselines, CandidateDone, ProblemDone, RunFinished, RunStarted, clock

BASELINE_NAMES = {"eager": "eager", "compile": "torch.compile"}


class Tracker(progress.Quiet):
    """What the display knows, kept from the events under one lock. `now`: the clock of RunStarted.started."""

    def __init__(self, now: Callable[[], float] = time.monotonic):
        self.lock = threading.RLock()
        self.now = now
        self.campaign: tuple[str, list[str]] | None = None
        self.campaign_began = 0.0
        self.problems: list[ProblemDone] = []
        self.run: RunStarted | None = None
        self.candidate: tuple[int, int, str, str] | None = None  # index, budget, id, family
        self.stage: tuple[str, str, float] | None = None  # stage, subject, since
        self.tried = 0
        self.best: CandidateDone | None = None
        self.baselines: dict[str, dict[str, float]] = {}
        self.ended: RunFinished | None = None

    def run_started(self, run: RunStarted) -> None:
        with self.lock:
            self.run, self.candidate, self.stage, self.tried = run, None, None, run.tried
            self.best, self.baselines, self.ended = None, {}, None

    def candidate_started(self, index: int, budget: int, candidate_id: str, family: str) -> None:
        with self.lock:
            self.candidate = (index, budget, candidate_id, family)

    def stage_started(self, stage: str, subject: str) -> None:
        with self.lock:
            self.stage = (stage, subject, self.now())

    def stage_finished(self, stage: str, subject: str, status: str, seconds: float) -> None:
        with self.lock:
            if self.stage is not None and self.stage[:2] == (stage, subject):
                self.stage = None

    def baselines_timed(self, baselines: Baselines) -> None:
        with self.lock:
            for name, medians in baselines.medians_us.items():
                self.baselines[name] = dict(medians)

    def candidate_finished(self, done: CandidateDone) -> None:
        with self.lock:
            self.tried += 1
            self.candidate = None
            if done.speedup_vs_eager is not None and (
                    self.best is None or done.speedup_vs_eager > (self.best.speedup_vs_eager or 0.0)):
                self.best = done

    def run_finished(self, run: RunFinished) -> None:
        with self.lock:
            self.ended, self.stage, self.candidate = run, None, None

    def campaign_started(self, campaign_id: str, entries: list[str]) -> None:
        with self.lock:
            self.campaign, self.problems, self.campaign_began = (campaign_id, list(entries)), [], self.now()

    def problem_finished(self, done: ProblemDone) -> None:
        with self.lock:
            self.problems.append(done)

    def elapsed(self) -> float:
        return self.now() - self.run.started if self.run else 0.0


class Plain(Tracker):
    """Plain lines for a log: one per finished candidate and campaign entry, one when a run ends."""

    def __init__(self, out: IO[str], now: Callable[[], float] = time.monotonic):
        super().__init__(now)
        self.out = out

    def say(self, line: str) -> None:
        with self.lock:  # not print: inside a flow, Prefect's log_prints turns a print to stdout into a log record
            self.out.write(line + "\n")
            self.out.flush()

    def candidate_finished(self, done: CandidateDone) -> None:
        super().candidate_finished(done)
        self.say(done.line())

    def run_finished(self, run: RunFinished) -> None:
        super().run_finished(run)
        self.say(f"run {run.run_id} {run.status} after {clock(run.elapsed_s)}: {run.stop_reason}")

    def problem_finished(self, done: ProblemDone) -> None:
        super().problem_finished(done)
        with self.lock:
            elapsed = self.now() - self.campaign_began if self.campaign else 0.0
        self.say(f"{done.line()} ({clock(elapsed)} elapsed)")


class Panelled(Plain):
    """A live panel at the bottom of a terminal (rich.live.Live on `console`), the plain lines above it. `start` and
    `stop` bracket the panel; a run that ends outside a campaign leaves its last state on screen and stops it."""

    def __init__(self, console: Console, now: Callable[[], float] = time.monotonic, refresh_per_second: float = 4):
        super().__init__(console.file, now)
        self.console = console
        self.live = Live(self, console=console, refresh_per_second=refresh_per_second, transient=False)
        self.relayed: list[tuple[Any, IO[str] | None]] = []  # Prefect's console handlers' consoles, their own files

    def say(self, line: str) -> None:
        self.console.print(Text(line), soft_wrap=True)

    def start(self) -> None:
        """The panel drawn; Prefect's console log lines printed above it, not through it."""
        self.live.start()
        for h in _prefect_consoles():
            self.relayed.append((h.console, h.console._file))
            h.console.file = _Relay(self.console)

    def stop(self) -> None:
        if self.live.is_started:
            self.live.stop()
        for console, file in self.relayed:
            console.file = file
        self.relayed.clear()

    def run_finished(self, run: RunFinished) -> None:
        super().run_finished(run)
        if self.campaign is None:
            self.live.refresh()
            self.stop()

    def __rich__(self) -> RenderableType:
        with self.lock:
            rows = Table.grid(padding=(0, 2))
            rows.add_column(style="bold")
            rows.add_column()
            if self.campaign is not None:
                campaign_id, entries = self.campaign
                rows.add_row("campaign", f"{campaign_id}: {len(self.problems)} of {len(entries)} problems done, "
                             f"{clock(self.now() - self.campaign_began)} elapsed")
            if self.run is None:
                rows.add_row("run", "starting")
                return Panel(rows, title="kernelflow", title_align="left")
            rows.add_row("run", self.run.run_id)
            rows.add_row("now", self.now_doing())
            rows.add_row("best", self.best_line())
            rows.add_row("baselines", self.baseline_line())
            rows.add_row("time", self.budget_line())
            title = f"optimize {self.run.problem_id} on {self.run.device}, {self.run.strategy}"
            return Panel(rows, title=title, title_align="left")

    def now_doing(self) -> RenderableType:
        if self.ended is not None:
            return Text(f"{self.ended.status}: {self.ended.stop_reason}")
        if self.candidate is None and self.stage is None:
            return Text("choosing the next candidate")
        what = []
        if self.candidate is not None:
            index, budget, candidate_id, family = self.candidate
            what.append(f"candidate {index} of {budget}, {candidate_id[:8]} ({family})")
        if self.stage is not None:
            stage, subject, since = self.stage
            ours = self.candidate is not None and subject.startswith(self.candidate[2][:8])
            doing = {"generate": f"proposing ({subject})"}.get(stage, stage if ours else f"{stage} {subject}")
            what.append(f"{doing} {clock(self.now() - since)}")
            return Spinner("dots", Text(": ".join(what)))
        return Text(": ".join(what))

    def best_line(self) -> str:
        best = self.best
        if best is None:
            return "none verified yet"
        vs_compile = (f"{fmt.speedup(best.speedup_vs_compile)} torch.compile" if best.speedup_vs_compile is not None
                      else "torch.compile not timed")
        return f"{best.candidate_id[:8]} ({best.family}): {fmt.speedup(best.speedup_vs_eager)} eager, {vs_compile}"

    def baseline_line(self) -> str:
        if not self.baselines:
            return "not timed yet"
        parts = [f"{BASELINE_NAMES.get(name, name)} " + ", ".join(f"{fmt.us(us)} us on {workload}"
                                                                  for workload, us in medians.items())
                 for name, medians in self.baselines.items()]
        if "compile" not in self.baselines:
            parts.append("torch.compile not timed")
        return "; ".join(parts)

    def budget_line(self) -> str:
        run, elapsed = self.run, self.elapsed()
        assert run is not None
        if self.ended is not None:
            elapsed = self.ended.elapsed_s
        left_s = max(0.0, run.wall_time_s - elapsed)
        return (f"{clock(elapsed)} elapsed; left: {clock(left_s)} of {clock(run.wall_time_s)} wall time, "
                f"{max(0, run.budget - self.tried)} of {run.budget} candidates")


class _Relay(io.TextIOBase):
    """Text written here is printed above a live display (rich's FileProxy, which rich's Console would unwrap and
    bypass if it were given it as its file)."""

    def __init__(self, console: Console):
        self._proxy = FileProxy(console, console.file)

    def write(self, text: str) -> int:
        self._proxy.write(text)
        return len(text)

    def flush(self) -> None:
        self._proxy.flush()

    def isatty(self) -> bool:
        return True


class _NotProgress(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, progress.PROGRESS, False)


def _prefect_consoles() -> list[Any]:
    return [h for h in logging.getLogger().handlers if type(h).__name__ == "PrefectConsoleHandler"]


@contextmanager
def showing(out: IO[str] | None = None, console: Console | None = None) -> Iterator[Plain]:
    """Progress of the runs begun in the block, shown on `out` (default stdout): a live panel when it is a terminal (or
    `console` is given), plain lines otherwise."""
    out = out or sys.stdout
    handlers, dropped = _prefect_consoles(), _NotProgress()
    for h in handlers:
        h.addFilter(dropped)
    terminal = console is not None or out.isatty()
    reporter = Panelled(console or Console(file=out)) if terminal else Plain(out)
    try:
        if isinstance(reporter, Panelled):
            reporter.start()
        with progress.reporting(reporter):
            yield reporter
    finally:
        if isinstance(reporter, Panelled):
            reporter.stop()
        for h in handlers:
            h.removeFilter(dropped)
