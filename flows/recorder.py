"""What one run writes to the store: its problem and run rows, each candidate once, every stage result, profile,
feedback, LLM call, ladder rung and search snapshot, as whole rows appended to the run's partition of each table
(artifacts/store.py, docs/ARTIFACTS.md). Nothing else in the flows writes a run's tables."""

from __future__ import annotations

from kernelflow.artifacts.problem_runs import index
from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import (
    BenchmarkResult,
    Candidate,
    CompileResult,
    Feedback,
    LLMCall,
    Problem,
    ProfileResult,
    RungRecord,
    RunRecord,
    SearchSnapshot,
    VerifyResult,
)


class Recorder:
    """The writer of run `run_id`'s rows in `store`."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.run_id = store, run_id
        self.recorded: set[str] = set()  # candidate ids in the candidates table already

    def problem(self, problem: Problem) -> None:
        """A new run of `problem`: indexed under the problem (artifacts/problem_runs.py) and its problem row."""
        index(self.store, problem.id, self.run_id)
        self.store.append("problems", self.run_id, [problem])

    def run(self, record: RunRecord) -> None:
        self.store.append("runs", self.run_id, [record])

    def candidate(self, candidate: Candidate) -> None:
        """The candidate's row, once per run."""
        if candidate.id not in self.recorded:
            self.store.append("candidates", self.run_id, [candidate])
            self.recorded.add(candidate.id)

    def compile(self, result: CompileResult) -> None:
        self.store.append("compiles", self.run_id, [result])

    def verification(self, result: VerifyResult) -> None:
        self.store.append("verifications", self.run_id, [result])

    def benchmark(self, result: BenchmarkResult) -> None:
        """The call's row, the candidate's timings and the baselines timed beside it."""
        self.store.append_benchmark(self.run_id, result)

    def profile(self, result: ProfileResult) -> None:
        self.store.append("profiles", self.run_id, [result])

    def feedback(self, feedback: Feedback) -> None:
        self.store.append("feedback", self.run_id, [feedback])

    def llm_calls(self, calls: list[LLMCall]) -> None:
        self.store.append("llm_calls", self.run_id, calls)

    def rung(self, rung: RungRecord) -> None:
        self.store.append("rungs", self.run_id, [rung])

    def snapshot(self, snapshot: SearchSnapshot) -> None:
        self.store.append("search_state", self.run_id, [snapshot])

    def flush(self) -> None:
        """A remote store gets what its spool still holds (a warning if it still cannot)."""
        self.store.flush()
