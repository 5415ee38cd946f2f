"""What the search reports of a candidate (flows/progress.py): its verdict from the search state, its line, and the
stage subjects a display names."""

from pathlib import Path

from kernelflow.flows import progress
from kernelflow.flows.config import RunConfig
from kernelflow.flows.state import SearchState
from kernelflow.stages.contracts import (
    BenchmarkRequest,
    BenchmarkResult,
    Candidate,
    Origin,
    ProfileRequest,
    Timing,
    VerifyRequest,
)
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[2]


class Heard(progress.Quiet):
    def __init__(self) -> None:
        self.done: list[progress.CandidateDone] = []

    def candidate_finished(self, done: progress.CandidateDone) -> None:
        self.done.append(done)


def candidate(n: int) -> Candidate:
    return Candidate.make("17_elementwise_chain", "triton", f"# {n}",
                          Origin(kind="builtin", proposer="elementwise", params={"BLOCK": 1024}))


def test_a_finished_candidate_is_reported_with_its_verdict_and_logged_as_a_line(capsys):
    state = SearchState(load_problem(str(ROOT / "problems" / "17_elementwise_chain.py")), RunConfig(budget=4,
                                                                                                    device="cpu"))
    rejected, pruned, kept = candidate(1), candidate(2), candidate(3)
    for c in (rejected, pruned, kept):
        state.consider(c)
    state.reject(rejected.id, "verify", "mismatch", "max error 3.1x the tolerance")
    state.flat_timing = BenchmarkResult.model_construct(candidate_id=kept.id, status="ok", speedup_vs_eager=1.5,
                                                        speedup_vs_compile=0.8, timings=[])
    heard = Heard()
    with progress.reporting(heard):
        progress.candidate_finished(state, rejected, None, 12.0, 30.0)
        progress.candidate_finished(state, pruned, None, 3.0, 33.0)
        progress.candidate_finished(state, kept, 1.5, 20.0, 53.0)
    assert [(d.index, d.verdict, d.speedup_vs_eager, d.speedup_vs_compile) for d in heard.done] == [
        (3, "rejected at verify: mismatch", None, None), (3, "not kept", None, None), (3, "verified", 1.5, 0.8)]
    lines = capsys.readouterr().out.splitlines()  # outside a flow run the log line is printed
    assert lines[2] == f"[3/4] {kept.id} elementwise {{'BLOCK': 1024}}: verified, 1.50x eager, 0.800x torch.compile " \
                       "(20 s; 0:53 elapsed)"


def test_stage_subjects_name_the_candidate_or_the_baselines():
    problem = load_problem(str(ROOT / "problems" / "17_elementwise_chain.py"))
    c = candidate(1)
    common = dict(problem=problem, device="cpu", workdir="/tmp/w", timeout_s=1.0)
    assert progress.subject(VerifyRequest(candidate=c, sizes=["cpu"], **common)) == f"{c.id[:8]} (elementwise)"
    assert progress.subject(BenchmarkRequest(candidate=None, sizes="cpu", baselines=["eager", "compile"], **common)) \
        == "eager, compile"
    assert progress.subject(ProfileRequest(candidate=None, contender="eager", **common)) == "eager"


def test_baseline_medians_of_a_timing_are_reported_per_workload():
    heard: list[progress.Baselines] = []

    class Listener(progress.Quiet):
        def baselines_timed(self, baselines: progress.Baselines) -> None:
            heard.append(baselines)

    def timing(contender: str, workload: str, us: float) -> Timing:
        return Timing.model_construct(contender=contender, workload=workload, median_us=us)

    timed = BenchmarkResult.model_construct(timings=[timing("candidate", "cpu0", 900.0), timing("eager", "cpu0", 187.0),
                                                     timing("eager", "cpu1", 195.4)])
    with progress.reporting(Listener()):
        progress.baselines_timed(timed)
        progress.baselines_timed(BenchmarkResult.model_construct(timings=[timing("candidate", "cpu0", 900.0)]))
    assert heard == [progress.Baselines({"eager": {"cpu0": 187.0, "cpu1": 195.4}})]
