"""Checks: the runs of `kernelflow verify` and `kernelflow bench`, which judge a user's candidate file through the run
steps (flows/steps.py). A check records under its run id (`cli-<UTC time>-<problem>-<6 hex>`) the candidate, its
compile and verification and, for bench, its benchmark call with the baselines timed beside it (benchmarks, timings,
baselines). It writes no `runs` row, which is an optimize run's record: `latest`, `--campaign all` and a warm start
take optimize runs only, and `show`/`report` take a check by its id. A check is thus a run with candidates and no
run record; its lines here are those the command printed, rebuilt from what it recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernelflow.artifacts import fmt
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.tables import model_of
from kernelflow.stages.contracts import BenchmarkResult, Candidate, CompileResult, StageResult, VerifyResult

PREFIX = "cli-"  # a check's run id begins with it
STAGES = {CompileResult: "compile", VerifyResult: "verify", BenchmarkResult: "benchmark"}


def ids(store: Store, recorded: Sequence[str] | None = None) -> list[str]:
    """The store's checks, sorted (by time: a check's id begins with it): the runs with candidates and no run record.
    `recorded`: the ids of the runs table, when the caller has read it already. Partition names only
    (Store.partitions)."""
    known = set(store.partitions("runs") if recorded is None else recorded)
    return [r for r in store.partitions("candidates") if r not in known]


def is_check(store: Store, run_id: str, recorded: Sequence[str]) -> bool:
    """Whether run `run_id` is a check: it has candidates and is not among `recorded` (the runs table's ids). Its own
    candidates partition alone is read (ids() fetches every partition of an S3 store's table)."""
    return run_id not in recorded and not store.read("candidates", run_id).empty


def result_line(result: StageResult) -> str:
    """A stage call as one entry: `verify   failed: mismatch: ...` (the message as recorded, whole)."""
    kind = f": {result.failure_kind}" if result.failure_kind else ""
    return f"{STAGES[type(result)]:8s} {result.status}{kind}" + (f": {result.message}" if result.message else "")


def timing_lines(timed: BenchmarkResult) -> list[str]:
    """A successful benchmark call: each contender's median and 95% interval per workload, in the order timed, and the
    candidate's geomean speedups over eager and torch.compile."""
    unit = "GPU" if timed.device == "cuda" else "CPU (not comparable with GPU numbers)"
    lines = [f"{'workload':10s} {'contender':10s} {'median us':>12s} {'95% CI':>24s} {'reps':>5s}   [{unit}]"]
    lines += [f"{t.workload:10s} {t.contender:10s} {fmt.us(t.median_us):>12s} "
              f"{f'[{fmt.us(t.ci_low_us)}, {fmt.us(t.ci_high_us)}]':>24s} {t.n_reps:5d}" for t in timed.timings]
    return lines + [f"speedup vs eager {fmt.speedup(timed.speedup_vs_eager)}, vs torch.compile "
                    f"{fmt.speedup(timed.speedup_vs_compile)}"]


def verdict(results: Sequence[StageResult], timed: bool) -> str:
    """VERIFIED (verified, and for bench timed), REJECTED (a stage failed, or bench timed nothing), or UNFINISHED (the
    command stopped before its last stage: interrupted, or killed)."""
    if any(r.status != "ok" for r in results):
        return "REJECTED"
    last = BenchmarkResult if timed else VerifyResult
    done = next((r for r in results if isinstance(r, last)), None)
    if done is None:
        return "UNFINISHED"
    return "REJECTED" if isinstance(done, BenchmarkResult) and not done.timings else "VERIFIED"


@dataclass
class Check:
    """One candidate's check, as recorded."""

    run_id: str
    candidate: Candidate
    compiled: CompileResult | None = None
    verified: VerifyResult | None = None
    timed: BenchmarkResult | None = None

    @property
    def command(self) -> str:
        """verify or bench, as the candidate's origin names it; a check recorded before origins named it: bench when it
        has a benchmark call."""
        named = self.candidate.origin.params.get("command")
        return str(named) if named in ("verify", "bench") else "bench" if self.timed else "verify"

    @property
    def results(self) -> list[StageResult]:
        return [r for r in (self.compiled, self.verified, self.timed) if r is not None]

    @property
    def verdict(self) -> str:
        return verdict(self.results, self.command == "bench")

    @property
    def device(self) -> str | None:
        ran = self.timed or self.verified
        return ran.device if ran else None

    @property
    def reason(self) -> str:
        """The failed stage's line, its message's first line clipped to 120 characters; empty when none failed."""
        failed = next((r for r in self.results if r.status != "ok"), None)
        if failed is None:
            return ""
        first = failed.message.splitlines()[0][:120] if failed.message else ""
        return f"{STAGES[type(failed)]} failed: {failed.failure_kind}" + (f": {first}" if first else "")

    def summary(self) -> str:
        """One line: the command, its verdict, and the reason or (bench) the speedups."""
        text = f"kernelflow {self.command}: {self.verdict}"
        if self.reason:
            return f"{text}: {self.reason}"
        if self.timed is not None and self.timed.timings:
            return (f"{text}, {fmt.speedup(self.timed.speedup_vs_eager)} eager, "
                    f"{fmt.speedup(self.timed.speedup_vs_compile)} torch.compile")
        return text + (" (verify only: not timed)" if self.command == "verify" else "")

    def lines(self) -> list[str]:
        """What the command printed: the candidate, each stage's line, bench's timings, the verdict."""
        path = self.candidate.origin.params.get("path", "a file")
        where = f" on {self.device}" if self.device else ""
        out = [f"run {self.run_id}: `kernelflow {self.command}` of {path}, {self.candidate.backend} candidate "
               f"{self.candidate.id} for {self.candidate.problem_id}{where}"]
        out += [result_line(r) for r in self.results]
        if self.timed is not None and self.timed.status == "ok" and self.timed.timings:
            out += timing_lines(self.timed)
        return out + [self.verdict]


def checks(store: Store, run_id: str) -> list[Check]:
    """The checks recorded under `run_id`, one per candidate (a check judges one), each with its latest stage rows."""
    def latest(table: str) -> dict[str, dict]:
        frame = store.read(table, run_id)
        return {str(r["candidate_id"]): r for r in frame.to_dict("records")} if not frame.empty else {}

    compiles, verifications, benchmarks = latest("compiles"), latest("verifications"), latest("benchmarks")
    cands, out = store.read("candidates", run_id), []
    for row in cands.drop_duplicates("id").to_dict("records") if not cands.empty else []:
        cid = str(row["id"])
        out.append(Check(run_id, model_of(Candidate, row),
                         model_of(CompileResult, compiles[cid]) if cid in compiles else None,
                         model_of(VerifyResult, verifications[cid]) if cid in verifications else None,
                         model_of(BenchmarkResult, benchmarks[cid]) if cid in benchmarks else None))
    return out
