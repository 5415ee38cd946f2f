"""One candidate's steps, compile → verify → benchmark → profile, without Prefect: each request built with the
run's work directory, the stage run where the executor says (stages/executors/), benchmark and profile under the
GPU's lock (one at a time per GPU), what the call made kept as blobs, its row recorded. `kernelflow verify` and
`kernelflow bench`, the benchmark scripts and the optimize flow all go through here; the flow's `execute` is its
Prefect tasks (flows/tasks.py: retries, the compile and profile caches), which call `execute` below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from kernelflow.artifacts.blobs import keep_files
from kernelflow.flows import progress
from kernelflow.flows.gpu_lock import gpu_lock
from kernelflow.flows.recorder import Recorder
from kernelflow.stages.contracts import (
    Baseline,
    BenchmarkRequest,
    BenchmarkResult,
    Candidate,
    CompileRequest,
    CompileResult,
    Contender,
    Device,
    Problem,
    ProfileRequest,
    ProfileResult,
    SizeSet,
    StageRequest,
    StageResult,
    VerifyRequest,
    VerifyResult,
)
from kernelflow.stages.executors.run import Mode, run_stage

LOCKED = ("benchmark", "profile")  # stages that need the GPU to themselves: timing and counters
R = TypeVar("R", bound=StageResult)
Execute = Callable[[str, StageRequest, Mode, str], StageResult]  # (stage, request, mode, store root) -> result


def execute(name: str, req: StageRequest, mode: Mode, store_root: str) -> StageResult:
    """One stage call: run where `mode` says (benchmark and profile holding the GPU's lock under the store), the files
    it made kept as blobs of the store at `store_root` (its local root: the working copy of an S3 store)."""
    locked = name in LOCKED
    with gpu_lock(Path(store_root), getattr(req, "device", "cpu")) if locked else nullcontext():
        result = run_stage(name, req, mode)
    return keep_files(Path(store_root) / "blobs", req.workdir, result)


@dataclass
class Steps:
    """The steps of one run: its recorder (store and run id), where stages run, their deadline, and how each call is
    executed (`execute`, or the flow's Prefect tasks)."""

    recorder: Recorder
    mode: Mode = "subprocess"
    timeout_s: float = 600.0
    execute: Execute = execute

    def _call(self, name: str, req: StageRequest, result_type: type[R]) -> R:
        subject, began = progress.subject(req), time.monotonic()
        progress.stage_started(name, subject)
        result = cast(R, self.execute(name, req, self.mode, str(self.recorder.store.root)))
        progress.stage_finished(name, subject, result.status, time.monotonic() - began)
        return result

    def fields(self, subject: str, stage: str) -> dict[str, Any]:
        """A request's work directory (work/<run>/<candidate or baseline>/<stage>), the store's build cache, the
        deadline."""
        store = self.recorder.store
        return dict(workdir=str(store.work_dir / self.recorder.run_id / subject / stage), cache_dir=str(store.root),
                    timeout_s=self.timeout_s)

    def compile(self, problem: Problem, candidate: Candidate, done: CompileResult | None = None) -> CompileResult:
        """The candidate recorded (once) and compiled, or `done` (compiled ahead) recorded as its compile."""
        self.recorder.candidate(candidate)
        compiled = done or self._call("compile", CompileRequest(
            candidate=candidate, problem=problem, **self.fields(candidate.id, "compile")), CompileResult)
        self.recorder.compile(compiled)
        return compiled

    def verify(self, problem: Problem, candidate: Candidate, device: Device, sizes: list[SizeSet],
               **knobs: Any) -> VerifyResult:
        """Verified on `sizes` (knobs: VerifyRequest's trials, workloads, policy, seed)."""
        verified = self._call("verify", VerifyRequest(problem=problem, candidate=candidate, device=device, sizes=sizes,
                                                      **knobs, **self.fields(candidate.id, "verify")), VerifyResult)
        self.recorder.verification(verified)
        return verified

    def benchmark(self, problem: Problem, candidate: Candidate | None, device: Device, sizes: SizeSet,
                  baselines: list[Baseline], accept: Callable[[BenchmarkResult], bool] | None = None,
                  **knobs: Any) -> BenchmarkResult:
        """Timed beside the baselines (candidate None: the baselines alone; knobs: BenchmarkRequest's repetitions,
        target, budget, workloads, precheck). `accept` judges a successful call before its row is recorded (the row's
        `accepted`: the search keeps the candidate on this timing)."""
        subject = candidate.id if candidate is not None else "baseline"
        timed = self._call("benchmark", BenchmarkRequest(
            problem=problem, candidate=candidate, device=device, sizes=sizes, baselines=baselines, **knobs,
            **self.fields(subject, "benchmark")), BenchmarkResult)
        if accept is not None and timed.status == "ok":
            timed.accepted = accept(timed)
        progress.baselines_timed(timed)
        self.recorder.benchmark(timed)
        return timed

    def profile(self, problem: Problem, candidate: Candidate | None, device: Device, contender: Contender = "candidate",
                workload: str | None = None, **knobs: Any) -> ProfileResult:
        """Profiled on `workload` (None: the first GPU one): the candidate, or a baseline (`contender`); knobs:
        ProfileRequest's energy_calls."""
        subject, stage = (candidate.id, "profile") if candidate is not None else ("baseline", f"profile-{contender}")
        profiled = self._call("profile", ProfileRequest(
            problem=problem, candidate=candidate, contender=contender, device=device, workload=workload, **knobs,
            **self.fields(subject, stage)), ProfileResult)
        self.recorder.profile(profiled)
        return profiled
