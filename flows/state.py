"""What the search knows of one run: every candidate tried and its fate, the incumbent, the profiles' advice, the
lessons, what it has spent, and the round in progress. Strategies (flows/search/) read its fields and change it only
through its methods; the run's evaluation (flows/run.py) reports results into it; a resume rebuilds it from the
run's tables (flows/resume.py). It writes nothing: the recorder does (flows/recorder.py)."""

from __future__ import annotations

import time
from typing import Literal

from kernelflow.flows.config import RunConfig
from kernelflow.stages.contracts import (
    Action,
    Baseline,
    BenchmarkResult,
    Candidate,
    CompileResult,
    Device,
    Failure,
    FailureKind,
    Incumbent,
    LLMCall,
    Problem,
    Proposal,
    SizeSet,
)
from kernelflow.stages.llm.client import LLMBudget
from kernelflow.stages.measure.sol_target import fraction
from kernelflow.stages.problems import defaults

Stage = Literal["compile", "verify", "benchmark"]


class SearchState:
    """The search's state of a run of `problem` under `config` (its device, timed sizes and baselines decided here).
    `started`: when the run began, on `time.monotonic()`'s clock (None: now); its wall-time counts from there."""

    def __init__(self, problem: Problem, config: RunConfig, started: float | None = None):
        self.problem, self.config = problem, config
        self.started = time.monotonic() if started is None else started
        self.device: Device = config.device_here()
        self.sizes: SizeSet = config.sizes or defaults.timed_sizes(problem, self.device)
        self.baselines: list[Baseline] = (config.baselines if config.baselines is not None
                                          else defaults.baselines(self.device))
        self.timing_budget_s: float = (config.timing_budget_s if config.timing_budget_s is not None
                                       else defaults.timing_budget_s(self.device))
        self.tried: list[str] = []  # candidate ids, in the order they were first considered
        self.candidates: dict[str, Candidate] = {}
        self.best: tuple[float, Candidate] | None = None  # the incumbent: its geomean speedup over eager
        self.verified = 0
        self.compiled: dict[str, CompileResult] = {}
        self.failures: dict[str, Failure] = {}  # per rejected candidate: the stage's evidence, for a repair
        self.speedups: dict[str, float] = {}  # per verified candidate: geomean speedup over eager
        self.medians: dict[str, dict[str, dict[str, float]]] = {}  # per verified candidate: its latest timing's
        # median per workload and contender (itself and the baselines timed beside it), us
        self.actions: dict[str, list[Action]] = {}  # per profiled candidate: its findings' actions, causes first
        self.feedback: dict[str, str] = {}  # per profiled candidate: its feedback text
        self.lessons: list[str] = []  # search memory: verified conclusions a strategy hands to the proposer
        self.promoted_structures: list[str] = []  # the structures profiled so far (delayed profiling)
        self.round: list[Proposal] = []  # a round in progress: its turns not yet evaluated (saved with the state)
        self.slowest_s = 0.0  # the longest evaluation of a candidate so far (its profile excluded), s
        self.slowest_profile_s = 0.0  # the longest profile so far (a candidate's or a baseline's), wall s
        self.gpu_s = 0.0  # device seconds of verify, benchmark and profile calls (on a CPU run: CPU seconds)
        self.llm = LLMBudget(max_tokens=config.llm.max_tokens, max_usd=config.llm.max_usd)
        self.barren = 0  # proposals in a row that gave no candidate (an LLM reply with no usable code)
        self.sol_floors: dict[str, float] | None = None  # per timed workload, us: set for a target_sol run
        self.best_sol: float | None = None  # the incumbent's share of speed of light on a target_sol run
        self.flat_timing: BenchmarkResult | None = None  # the latest flat evaluation's timing

    def consider(self, candidate: Candidate) -> None:
        """The candidate is tried (once: a resumed or repeated one keeps its place)."""
        if candidate.id not in self.candidates:
            self.tried.append(candidate.id)
            self.candidates[candidate.id] = candidate

    def compiled_as(self, result: CompileResult) -> None:
        self.compiled[result.candidate_id] = result

    def reject(self, candidate_id: str, stage: Stage, kind: FailureKind | None, message: str) -> None:
        """The candidate failed at `stage`; its evidence is kept for a proposer that repairs."""
        self.failures[candidate_id] = Failure(stage=stage, kind=kind or "crash", message=message[-6000:])

    def timed(self, timing: BenchmarkResult) -> None:
        """A verified candidate's flat timing: it counts as verified, with its speedup over eager."""
        self.verified += 1
        if timing.speedup_vs_eager is not None and timing.candidate_id in self.candidates:
            self.speedups[timing.candidate_id] = timing.speedup_vs_eager
        if timing.candidate_id in self.candidates:
            medians = self.medians.setdefault(timing.candidate_id, {})
            for t in timing.timings:
                medians.setdefault(t.workload, {})[t.contender] = t.median_us
        self.flat_timing = timing

    def crown(self, candidate: Candidate, speedup: float) -> None:
        """The candidate is the incumbent; on a target_sol run its share of speed of light is taken from its flat
        timing (for a ladder, rung 2's, not a rung-3 re-timing)."""
        self.best, self.best_sol, timing = (speedup, candidate), None, self.flat_timing
        if self.sol_floors is not None and timing is not None and timing.candidate_id == candidate.id:
            self.best_sol = fraction(self.sol_floors, timing)

    def incumbent(self) -> Incumbent | None:
        """The best verified candidate so far, its times and its profile's feedback: what a proposal has to beat."""
        if self.best is None:
            return None
        speedup, best = self.best
        return Incumbent(candidate=best, device=self.device, speedup_vs_eager=speedup,
                         medians_us=self.medians.get(best.id, {}), feedback=self.feedback.get(best.id, ""))

    def advise(self, candidate_id: str, actions: list[Action], text: str) -> None:
        """The profile's feedback on a candidate: what the proposer may act on when it is the parent."""
        self.actions[candidate_id], self.feedback[candidate_id] = actions, text

    def promote(self, structure: str) -> None:
        self.promoted_structures.append(structure)

    def teach(self, lessons: list[str]) -> None:
        """The search memory handed to the proposer from now on."""
        self.lessons = list(lessons)

    def spend_device(self, seconds: float | None) -> None:
        self.gpu_s += seconds or 0.0

    def overtime(self) -> str | None:
        """Why the run may start nothing more, once it has run for its wall-time budget (the whole run's, counted
        from `started`); else None."""
        elapsed, budget = time.monotonic() - self.started, self.config.wall_time_s
        return f"wall-time budget of {budget:g} s spent ({elapsed:.0f} s)" if elapsed > budget else None

    def evaluated(self, seconds: float) -> None:
        """A candidate's evaluation took `seconds`: the estimate of the next one's."""
        self.slowest_s = max(self.slowest_s, seconds)

    def profiled(self, seconds: float) -> None:
        """A profile took `seconds` of wall time: the estimate of the next one's."""
        self.slowest_profile_s = max(self.slowest_profile_s, seconds)

    def no_room(self) -> str | None:
        """Why the run may start no other candidate: its wall-time is spent, or what is left of it is shorter than
        the slowest candidate so far took (one begun is evaluated to its end, so one begun late would overrun the
        budget by its whole evaluation); else None."""
        return self._room(self.slowest_s, "candidate")

    def no_room_to_profile(self) -> str | None:
        """Why the run may start no other profile: as `no_room`, against the slowest profile so far."""
        return self._room(self.slowest_profile_s, "profile")

    def _room(self, need_s: float, step: str) -> str | None:
        if (late := self.overtime()) is not None:
            return late
        left = self.config.wall_time_s - (time.monotonic() - self.started)
        if left < need_s:
            return (f"wall-time budget of {self.config.wall_time_s:g} s: {left:.0f} s left, less than the slowest "
                    f"{step} so far took ({need_s:.0f} s)")
        return None

    def spend_llm(self, calls: list[LLMCall]) -> None:
        for call in calls:
            self.llm.charge(call)

    def proposed(self, n_candidates: int) -> int:
        """A proposal gave `n_candidates`; returns how many proposals in a row gave none."""
        self.barren = 0 if n_candidates else self.barren + 1
        return self.barren

    def plan_round(self, round_: list[Proposal]) -> None:
        self.round = list(round_)

    def turn_done(self, turn: Proposal) -> None:
        self.round.remove(turn)
