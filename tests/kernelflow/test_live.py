"""The progress display (kernelflow/live.py) fed the events of flows/progress.py: the live panel on a terminal (rich's
Console forced to be one, writing into a buffer), plain lines elsewhere, Prefect's console copies of those lines left
out, and events from many threads at once."""

import io
import logging
import re
import sys
import threading

from rich.console import Console

from kernelflow.flows import progress
from kernelflow.flows.progress import Baselines, CandidateDone, ProblemDone, RunFinished, RunStarted
from kernelflow.live import Panelled, Plain, showing

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def done(index: int, speedup: float | None, verdict: str = "verified", vs_compile: float | None = None,
         cid: str = "2fb5852be407b4f5") -> CandidateDone:
    return CandidateDone(index=index, budget=3, candidate_id=cid, family="elementwise", params="{'BLOCK': 1024}",
                         verdict=verdict, speedup_vs_eager=speedup, speedup_vs_compile=vs_compile, seconds=31.4,
                         elapsed_s=82.0)


def run_started(clock: Clock, wall_time_s: float = 600.0) -> RunStarted:
    return RunStarted("20261203T1200-17_elementwise_chain-abc123", "17_elementwise_chain", "cuda", "greedy", 3,
                      wall_time_s, clock.t)


def text(console: Console) -> str:
    return ANSI.sub("", console.file.getvalue())  # type: ignore[attr-defined]


def test_a_candidate_line_says_what_it_is_how_it_did_and_how_long_it_took():
    assert done(2, 0.01543, vs_compile=0.25).line() == ("[2/3] 2fb5852be407b4f5 elementwise {'BLOCK': 1024}: verified, "
                                                        "0.0154x eager, 0.250x torch.compile (31 s; 1:22 elapsed)")
    assert done(1, None, "rejected at verify: mismatch").line().endswith(": rejected at verify: mismatch (31 s; 1:22 "
                                                                         "elapsed)")
    assert [progress.clock(s) for s in (0, 59.9, 61, 3599, 3600, 7322)] == \
        ["0:00", "0:59", "1:01", "59:59", "1:00:00", "2:02:02"]


def test_the_live_panel_shows_stage_candidate_best_against_both_baselines_elapsed_and_budget_left():
    clock = Clock()
    console = Console(force_terminal=True, file=io.StringIO(), width=140, color_system=None)
    with showing(console=console) as shown:
        assert isinstance(shown, Panelled)
        shown.now = clock
        progress.run_started(run_started(clock))
        shown.live.refresh()
        clock.t += 5
        shown.candidate_started(1, 3, "2fb5852be407b4f5", "elementwise")
        progress.stage_started("verify", "2fb5852b (elementwise)")
        clock.t += 3
        shown.live.refresh()
        page = text(console)
        assert "optimize 17_elementwise_chain on cuda, greedy" in page
        assert "candidate 1 of 3, 2fb5852b (elementwise): verify 0:03" in page
        assert "none verified yet" in page and "0:08 elapsed; left: 9:52 of 10:00 wall time, 3 of 3 candidates" in page
        progress.stage_finished("verify", "2fb5852b (elementwise)", "ok", 3.0)
        shown.baselines_timed(Baselines({"eager": {"gpu0": 216.2, "gpu1": 198.1}, "compile": {"gpu0": 120.0,
                                                                                            "gpu1": 99.0}}))
        shown.candidate_finished(done(1, 1.4321, vs_compile=0.812))
        shown.candidate_finished(done(2, 0.9, cid="d3d3ebc66e5c409a"))  # slower: the best stays
        clock.t += 60
        shown.live.refresh()
        page = text(console)
        assert "[1/3] 2fb5852be407b4f5 elementwise {'BLOCK': 1024}: verified, 1.43x eager, 0.812x torch.compile" in page
        assert "2fb5852b (elementwise): 1.43x eager, 0.812x torch.compile" in page
        assert "eager 216.2 us on gpu0, 198.1 us on gpu1; torch.compile 120.0 us on gpu0, 99.0 us on gpu1" in page
        assert "1:08 elapsed; left: 8:52 of 10:00 wall time, 1 of 3 candidates" in page
        shown.run_finished(RunFinished("r", "finished", "candidate budget of 3 spent", "", 68.0))
        assert not shown.live.is_started  # a run outside a campaign leaves its last panel and ends it
    page = text(console)
    assert "finished: candidate budget of 3 spent" in page and "run r finished after 1:08" in page


def test_on_cpu_the_panel_says_torch_compile_was_not_timed():
    clock = Clock()
    console = Console(force_terminal=True, file=io.StringIO(), width=140, color_system=None)
    shown = Panelled(console, clock)
    shown.run_started(run_started(clock))
    shown.baselines_timed(Baselines({"eager": {"cpu0": 187.0}}))
    shown.candidate_finished(done(1, 0.0183))
    console.print(shown)
    page = text(console)
    assert "0.0183x eager, torch.compile not timed" in page and "eager 187.0 us on cpu0; torch.compile not timed" in page


def test_a_campaign_panel_counts_its_entries_and_stays_up_between_runs():
    clock = Clock()
    console = Console(force_terminal=True, file=io.StringIO(), width=140, color_system=None)
    with showing(console=console) as shown:
        progress.campaign_started("20261203-nightly-abc", ["softmax", "silu"])
        shown.run_started(run_started(clock))
        shown.run_finished(RunFinished("r1", "finished", "candidate budget of 3 spent", "", 10.0))
        assert shown.live.is_started
        shown.problem_finished(ProblemDone(1, 2, "softmax", "finished", "new", "no earlier campaign"))
        shown.live.refresh()
    page = text(console)
    assert "20261203-nightly-abc: 1 of 2 problems done" in page and "[1/2] softmax: finished, new" in page


def test_plain_lines_when_the_output_is_not_a_terminal():
    out = io.StringIO()
    with showing(out) as shown:
        assert type(shown) is Plain
        progress.run_started(run_started(Clock()))
        progress.stage_started("compile", "2fb5852b (elementwise)")  # no line: stages are for the panel
        shown.candidate_finished(done(1, None, "rejected at compile: compile_error"))
        shown.candidate_finished(done(2, 0.0154))
        shown.run_finished(RunFinished("r", "finished", "candidate budget of 3 spent", "", 95.0))
    assert out.getvalue().splitlines() == [
        "[1/3] 2fb5852be407b4f5 elementwise {'BLOCK': 1024}: rejected at compile: compile_error (31 s; 1:22 elapsed)",
        "[2/3] 2fb5852be407b4f5 elementwise {'BLOCK': 1024}: verified, 0.0154x eager (31 s; 1:22 elapsed)",
        "run r finished after 1:35: candidate budget of 3 spent"]


def test_a_campaign_in_plain_lines_says_each_entry_and_the_campaign_time():
    clock, out = Clock(), io.StringIO()
    shown = Plain(out, clock)
    shown.campaign_started("c1", ["softmax", "silu"])
    clock.t += 130
    shown.problem_finished(ProblemDone(1, 2, "softmax", "failed", "broken", "ProblemError: no get_inputs"))
    assert out.getvalue() == "[1/2] softmax: failed, broken: ProblemError: no get_inputs (2:10 elapsed)\n"


def test_prefect_console_leaves_out_the_progress_lines_the_display_prints_and_shows_the_rest_above_the_panel():
    from prefect.logging.handlers import PrefectConsoleHandler

    stream, root = io.StringIO(), logging.getLogger()
    handler = PrefectConsoleHandler(stream=stream)
    root.addHandler(handler)
    logger = logging.getLogger("kernelflow.test_live")
    console = Console(force_terminal=True, file=io.StringIO(), width=140, color_system=None)
    try:
        with showing(console=console):
            logger.warning("the flow's own line")
            logger.warning("[1/3] a progress line", extra={progress.PROGRESS: True})
        logger.warning("after the display")
    finally:
        root.removeHandler(handler)
    assert "the flow's own line" in text(console) and "progress line" not in text(console) + stream.getvalue()
    assert "the flow's own line" not in stream.getvalue() and "after the display" in stream.getvalue()


def test_a_reporter_that_fails_never_fails_the_run(caplog):
    class Broken(progress.Quiet):
        def stage_started(self, stage: str, subject: str) -> None:
            raise RuntimeError("display bug")

    with progress.reporting(Broken()), caplog.at_level(logging.WARNING):
        progress.stage_started("verify", "x")
    assert "progress reporter Broken failed on stage_started" in caplog.text
    assert isinstance(progress._reporter, progress.Quiet) and type(progress._reporter) is progress.Quiet


def test_events_from_many_threads_while_the_panel_redraws():
    """Prefect runs tasks on thread pools: 8 threads report stages and candidates at once while the panel is drawn
    over and over; every event counts, the best is the fastest, nothing raises."""
    clock = Clock()
    shown = Panelled(Console(force_terminal=True, file=io.StringIO(), width=140, color_system=None), clock)
    shown.run_started(run_started(clock, wall_time_s=60.0))
    errors: list[BaseException] = []
    working = threading.Event()
    per_thread, start = 500, threading.Barrier(9)

    def work(t: int) -> None:
        start.wait()
        try:
            for i in range(per_thread):
                subject = f"{t:02d}{i:06d} (elementwise)"
                shown.candidate_started(i, 3, subject[:8], "elementwise")
                shown.stage_started("verify", subject)
                shown.baselines_timed(Baselines({"eager": {f"w{t}": float(i)}}))
                shown.stage_finished("verify", subject, "ok", 0.1)
                shown.candidate_finished(done(t * per_thread + i + 1, 1.0 + t + i / 1000, cid=f"{t:02d}{i:014d}"))
        except BaseException as e:  # handed to the main thread
            errors.append(e)

    def draw() -> None:
        console = Console(force_terminal=True, file=io.StringIO(), width=140)
        start.wait()
        try:
            while working.is_set():
                console.print(shown)
        except BaseException as e:
            errors.append(e)

    working.set()
    switch, threads = sys.getswitchinterval(), [threading.Thread(target=work, args=(t,)) for t in range(8)]
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: a race shows up within the test
    try:
        drawing = threading.Thread(target=draw)
        drawing.start()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        working.clear()
        drawing.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors
    assert shown.tried == 8 * per_thread and shown.best is not None and shown.best.candidate_id == f"07{per_thread - 1:014d}"
    assert shown.baselines["eager"] in [{f"w{t}": per_thread - 1.0} for t in range(8)]  # the latest timing's, whole


def test_an_event_waits_while_the_panel_is_being_drawn():
    """A drawing and an event never interleave: an event that arrives mid-drawing waits for it to end, so no drawing
    shows half an update."""
    inside, release = threading.Event(), threading.Event()

    def now() -> float:
        if threading.current_thread().name == "draw":
            inside.set()
            release.wait(10)
        return 1000.0

    shown = Panelled(Console(force_terminal=True, file=io.StringIO(), width=140, color_system=None), now)
    shown.run_started(run_started(Clock()))
    page = Console(file=io.StringIO(), width=140)
    drawing = threading.Thread(target=lambda: page.print(shown), name="draw")
    drawing.start()
    assert inside.wait(10)
    event = threading.Thread(target=shown.candidate_finished, args=(done(1, 1.5),))
    event.start()
    event.join(0.3)
    assert event.is_alive()  # held back by the drawing
    release.set()
    drawing.join(10)
    event.join(10)
    assert not event.is_alive() and shown.best is not None
    assert "none verified yet" in page.file.getvalue()  # type: ignore[attr-defined]
