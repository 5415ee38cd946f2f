"""The campaign flow (flows/campaign.py) over a suite file: every problem run, a broken one recorded as failed while
the others go on, the runs findable by campaign id, the Prefect artifacts made; the next campaign warm-starts each
problem from the last one's best, re-times it and flags a slowdown only beyond the noise (flows/regression.py)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from kernelflow.artifacts.analysis import resolve_runs
from kernelflow.artifacts.campaigns import CampaignProblem, CampaignRecord, campaigns, entries, run_ids
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.tables import model_of
from kernelflow.flows.regression import check_regression
from kernelflow.flows.suite import PROBLEMS, Entry, SuiteError, load_suite
from kernelflow.stages.contracts import (
    BenchmarkResult,
    Candidate,
    Origin,
    Provenance,
    RunRecord,
    Timing,
    VerifyResult,
)

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "fixtures" / "broken_problems" / "import_error.py"
# regression_floor 0.9, a 90% band (the default 5% is for GPUs): on CPU, Triton's interpreter against eager's C++
# on CI's 2 cores beside the other pytest worker, two campaigns apart moved 17's speedup over eager by 1.45x
# (0.016 -> 0.011, same candidate, 2026-12-01); the 10x slowdown made up for 09 below is what must be flagged, and
# 17's re-timing must not be. Both problems are elementwise chains: that family alone is asked (no Inductor
# generation; tests/flows/test_flow.py runs the inductor family end to end)
SUITE = f"""
name: ci-smoke
device: cpu
executor: inline
regression_floor: 0.9
defaults: {{budget: 1, profile: false, families: [elementwise]}}
problems:
  - 09_silu
  - {{problem: {BROKEN}, name: broken}}
  - problems/17_elementwise_chain.py
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def test_a_suite_reads_its_entries_and_refuses_what_it_cannot_do(tmp_path: Path):
    suite = load_suite(write(tmp_path, SUITE + "llm: {model: m, max_usd: 2}\n"))
    silu, broken, chain = suite.problems
    assert suite.problem_path(silu) == str(PROBLEMS / "09_silu.py") and suite.problem_path(broken) == str(BROKEN)
    assert suite.problem_path(chain) == str(PROBLEMS / "17_elementwise_chain.py")  # relative to the project
    assert [e.name for e in suite.problems] == ["09_silu", "broken", "17_elementwise_chain"]
    config = suite.config(silu)  # the top-level keys and `defaults` over RunConfig's own, the entry's over both
    assert (config.budget, config.profile, config.executor, config.device) == (1, False, "inline", "cpu")
    assert (config.llm.model, config.llm.max_usd, config.strategy) == ("m", 2, "greedy")
    every = {"budget": 3, "strategy": "ladder", "proposer": "builtin", "backend": "triton", "wall_time_s": 60.0,
             "gpu_seconds": 30.0, "sizes": "cpu", "baselines": ["eager"], "policy": {"allow_tf32": False}, "seed": 1,
             "profile": True, "target_sol": 0.9, "llm": {"max_tokens": 7}}
    entry = suite.config(Entry(problem="09_silu", **every))  # an entry's settings are RunConfig's fields
    assert entry.model_dump(include=set(every) - {"llm"}) == {k: v for k, v in every.items() if k != "llm"}
    assert (entry.llm.model, entry.llm.max_tokens, entry.device) == ("m", 7, "cpu")  # llm merged key by key
    refused = {
        "api_key": "llm: {model: m, api_key: sk-123}",
        "Input should be 'greedy', 'mcts', 'ladder' or 'agents'": "defaults: {strategy: annealing}",
        "entries named twice": "  - {problem: 09_silu, proposer: builtin}",
        "exactly one of `problem` and `solexec`": "  - {problem: 09_silu, solexec: sol, name: sol}",
        "Extra inputs are not permitted": "budgets: 3",
        "executor docker goes with an image": "  - {problem: 09_silu, name: boxed, executor: docker}",
        "budget: set both at the top of the suite and in `defaults`": "budget: 2",
    }
    for why, line in refused.items():
        with pytest.raises(SuiteError, match=why):
            load_suite(write(tmp_path, SUITE + line + "\n"))


PROV = Provenance(device="cuda", device_name="NVIDIA H200", torch="2", python="3", hostname="h", code_version="c",
                  tf32=False)


def timed(store: Store, run: str, candidate: str, cand_us: float, eager_us: float, rel_ci: float,
          gpu: str = "NVIDIA H200") -> None:
    """One benchmark call over two shapes: the candidate and eager at these medians, each with a 95% interval of
    ±rel_ci around it."""
    prov = PROV.model_copy(update={"device_name": gpu})
    rows = [Timing(problem_id="p", candidate_id=candidate if who == "candidate" else None, benchmark_for=candidate,
                   contender=who, workload=w, median_us=t, ci_low_us=t * (1 - rel_ci), ci_high_us=t * (1 + rel_ci),
                   min_us=t, mean_us=t, n_reps=50, l2_flushed=True, input_sets=2, provenance=prov)
            for who, t in (("candidate", cand_us), ("eager", eager_us)) for w in ("gpu0", "gpu1")]
    store.append_benchmark(run, BenchmarkResult(candidate_id=candidate, problem_id="p", status="ok", device="cuda",
                                                sizes="gpu", timings=rows, speedup_vs_eager=eager_us / cand_us))


def test_the_regression_check_flags_a_slowdown_only_beyond_the_noise(tmp_path: Path):
    store = Store(tmp_path)
    timed(store, "then", "k", 50.0, 100.0, 0.01)  # 2.0x eager, tight intervals
    cases = {"steady": (51.0, 0.01, "ok"),  # 2% slower: inside the 5% floor
             "slower": (50 / 0.9, 0.01, "slower"),  # 10% slower, intervals of 1%: beyond the floor
             "noisy": (50 / 0.9, 0.15, "ok")}  # 10% slower, intervals of 15%: within the band they make (x1.16)
    for run, (cand_us, rel, verdict) in cases.items():
        timed(store, run, "k", cand_us, 100.0, rel)
        found = check_regression(store, "then", "k", run)
        assert found.verdict == verdict, found.note
    assert check_regression(store, "then", "k", "noisy").noise_factor > 1 / 0.9  # type: ignore[operator]
    assert "ratio 0.900" in check_regression(store, "then", "k", "slower").note
    timed(store, "other-gpu", "k", 50.0, 100.0, 0.01, gpu="NVIDIA A100")
    assert check_regression(store, "then", "k", "other-gpu").verdict == "not_checked"
    store.append("verifications", "broken", [VerifyResult(candidate_id="k", problem_id="p", status="failed",
                                                           failure_kind="mismatch", message="off by 3x", device="cuda",
                                                           sizes=["gpu"])])
    found = check_regression(store, "then", "k", "broken")
    assert found.verdict == "broken" and "verify mismatch: off by 3x" in found.note
    assert check_regression(store, "never-timed", "k", "steady").verdict == "not_checked"


def artifacts(flow_run_id: str) -> dict[str, list]:
    """The Prefect artifacts a flow run made, by key (progress artifacts have none: under "progress")."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        made = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[flow_run_id])))
    out: dict[str, list] = {}
    for artifact in made:
        out.setdefault(artifact.key or str(artifact.type), []).append(artifact)
    return out


def flow_run_names(flow_run_ids: list[str]) -> list[str]:
    """The Prefect UI's names of these flow runs, in order."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return [client.read_flow_run(flow_run_id).name for flow_run_id in flow_run_ids]


@pytest.fixture
def one_thread():
    """Eager on one intra-op thread, as the interpreter runs: both then get the same share of CI's two cores, which
    the other pytest workers contend for. Eager's two threads wait on whichever of them was preempted, so its time,
    and with it a speedup over eager, moved with the load of the moment (17 once drifted past the x1.9 band)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_campaign_runs_its_suite_then_the_next_one_rechecks_last_times_best(prefect_harness, one_thread,
                                                                              tmp_path: Path):
    from kernelflow.cli import main as cli
    from kernelflow.flows.campaign import campaign

    suite, where = write(tmp_path, SUITE), tmp_path / "store"
    first = campaign(str(suite), store=str(where))
    store = Store(where)
    rows = entries(store, first["campaign_id"]).set_index("entry")
    assert list(rows.status) == ["finished", "failed", "finished"], rows.message.tolist()
    assert rows.optimize_run_id.isna()["broken"] and "does not import" in rows.message["broken"]
    assert set(rows.verdict) == {"not_checked"}  # nothing to compare with yet
    ids = run_ids(store, first["campaign_id"])
    assert ids == list(rows.optimize_run_id.dropna()) and resolve_runs(store, campaign=first["campaign_id"]) == ids
    assert re.fullmatch(r"\d{8}T\d{6}-09_silu-[0-9a-f]{6}", rows.optimize_run_id["09_silu"])  # named by `plan_entry`
    assert set(store.runs().set_index("run_id").status[ids]) == {"finished"}
    record = campaigns(store).iloc[-1]
    assert (record.status, record.n_finished, record.n_failed) == ("finished", 2, 1)
    report = Path(record.report_path).read_text()
    assert "09_silu" in report and "17_elementwise_chain" in report
    assert store.blob(json.loads(record.blobs)["report"]).decode() == report  # kept as a blob too (S3 gets it)
    made = artifacts(record.prefect_flow_run_id)
    assert [a.data for a in made["progress"]] == [100.0]
    assert flow_run_names([record.prefect_flow_run_id]) == [first["campaign_id"]]  # the UI's names: the campaign's
    flow_runs = {r.run_id: r.prefect_flow_run_id for r in store.runs().itertuples()}  # id, and each entry's run id
    assert flow_run_names([flow_runs[i] for i in ids]) == ids
    assert {r["entry"] for r in json.loads(made["campaign-ci-smoke"][0].data)} == set(rows.index)
    summary = made["campaign-ci-smoke-summary"][0].data
    assert first["campaign_id"] in summary and record.report_path in summary and "does not import" in summary
    assert Path(record.report_path).as_uri() in made["campaign-ci-smoke-report"][0].data

    silu = rows.optimize_run_id["09_silu"]  # last time's record of silu's best: made 10x faster than it was
    best = str(rows.best_candidate_id["09_silu"])
    bench = store.read("benchmarks", silu)
    real = model_of(BenchmarkResult, bench[bench.candidate_id == best].iloc[-1].to_dict())
    store.append_benchmark(silu, real.model_copy(update=dict(
        speedup_vs_eager=real.speedup_vs_eager * 10,  # type: ignore[operator]
        timings=[t.model_copy(update={k: getattr(t, k) / 10 for k in ("median_us", "ci_low_us", "ci_high_us",
                                                                      "min_us", "mean_us")})
                 if t.contender == "candidate" else t for t in real.timings])))

    out = io.StringIO()  # not capsys: Prefect's log handler would keep its stream after the test closes it
    with contextlib.redirect_stdout(out):
        status = cli(["campaign", str(suite), "--store", str(where)])
    assert status == 1  # a problem failed and one re-timed slower
    second = campaigns(store).iloc[-1]
    assert second.previous_campaign_id == first["campaign_id"] and second.n_slower == 1
    again = entries(store, second.campaign_id).set_index("entry")
    assert dict(again.verdict) == {"09_silu": "slower", "broken": "not_checked", "17_elementwise_chain": "ok"}
    assert "SLOWER beyond the noise" in again.verdict_note["09_silu"] and again.noise_factor["09_silu"] >= 1.9
    for entry in ("09_silu", "17_elementwise_chain"):  # warm start: last time's best is each new run's first
        cands = store.read("candidates", again.optimize_run_id[entry])
        assert cands.id.iloc[0] == rows.best_candidate_id[entry] == again.previous_candidate_id[entry]
        assert again.previous_run_id[entry] == rows.optimize_run_id[entry]
    assert "slower" in out.getvalue() and second.campaign_id in out.getvalue()
    summary = artifacts(second.prefect_flow_run_id)["campaign-ci-smoke-summary"][0].data
    assert "## Slower than last time" in summary and "**09_silu**: SLOWER" in summary



def record(store: Store, run_id: str, status: Literal["running", "finished", "failed"], when: str,
           best: str | None = None) -> None:
    store.append("runs", run_id, [RunRecord(problem_id="09_silu", status=status, started_at=when, updated_at=when,
                                            device="cpu", sizes="cpu", budget_candidates=1, proposer="builtin",
                                            best_candidate_id=best, code_version="c", prefect_flow_run_id="fr-1")])


def recording(monkeypatch) -> list[tuple[str, str | None]]:
    """Every table read from now on, as (table, partition); None: the whole table."""
    real, reads = Store.read, []

    def counted(self: Store, table: str, run: str | None = None):
        reads.append((table, run))
        return real(self, table, run)

    monkeypatch.setattr(Store, "read", counted)
    return reads


def test_an_entry_names_its_run_and_conclude_reads_that_runs_partition_alone(tmp_path: Path, monkeypatch):
    """`plan_entry` names each entry's optimize run (optimize's `run_id`); `conclude` reads that run's runs partition and
    nothing else of the runs table, however many runs the store holds (a whole-table read grew with every night)."""
    from kernelflow.flows.campaign import conclude, plan_entry
    from kernelflow.flows.dispatch import Done
    from kernelflow.flows.optimize import optimize

    suite, store = load_suite(write(tmp_path, SUITE)), Store(tmp_path / "store")
    for i in range(5):  # earlier nights, one of them made by a flow run of the same id
        record(store, f"20261101T020000-09_silu-{i:06x}", "finished", "2026-11-01T02:00:00+00:00", best="old")
    (job, row), (job_broken, row_broken) = (plan_entry(store, suite, "c1", entry) for entry in suite.problems[:2])
    run_id = job.parameters["run_id"]
    assert re.fullmatch(r"\d{8}T\d{6}-09_silu-[0-9a-f]{6}", run_id), run_id
    assert re.fullmatch(r"\d{8}T\d{6}-import_error-[0-9a-f]{6}", job_broken.parameters["run_id"])
    inspect.signature(optimize.fn).bind(**job.parameters)  # optimize takes what plan_entry gives it
    record(store, run_id, "running", "2026-12-01T02:00:00+00:00")
    record(store, run_id, "finished", "2026-12-01T02:05:00+00:00", best="k1")
    reads = recording(monkeypatch)
    final = conclude(store, suite, row, Done(job, "fr-1", True, ""))
    assert (final.status, final.optimize_run_id, final.best_candidate_id) == ("finished", run_id, "k1")
    assert reads == [("runs", run_id)]
    reads.clear()  # a run that never began (its problem did not load): failed, with the flow run's message, no run
    final = conclude(store, suite, row_broken, Done(job_broken, "fr-2", False, "ProblemError: does not import"))
    assert (final.status, final.optimize_run_id, final.message) == ("failed", None, "ProblemError: does not import")
    assert reads == [("runs", job_broken.parameters["run_id"])]


def test_a_warm_start_from_a_named_run_seeds_that_runs_best(tmp_path: Path):
    """last_best with a run id picks that run's best, not the latest run's: a campaign names its previous run."""
    from kernelflow.flows.resume import last_best
    from kernelflow.stages.problems.kernelbench import load_problem

    problem, store = load_problem(PROBLEMS / "09_silu.py"), Store(tmp_path)
    for run, when in (("older", "2026-11-29T02:00:00+00:00"), ("newer", "2026-11-30T02:00:00+00:00")):
        cand = Candidate.make(problem.id, "triton", f"class ModelNew: pass  # {run}", Origin(kind="builtin",
                                                                                            proposer="x"))
        store.append("problems", run, [problem])
        store.append("candidates", run, [cand])
        store.append("runs", run, [RunRecord(problem_id=problem.id, status="finished", started_at=when, updated_at=when,
                                             device="cpu", sizes="cpu", budget_candidates=1, proposer="builtin",
                                             best_candidate_id=cand.id, code_version="c")])
    assert last_best(store, problem, "older").source.endswith("older")  # type: ignore[union-attr]
    assert last_best(store, problem).source.endswith("newer")  # type: ignore[union-attr]


def nights(store: Store, suite: str, n: int, entries: dict[str, Callable[[int], tuple[str, str | None]]]) -> list[str]:
    """`n` earlier campaigns of `suite`, a day apart: per entry `outcome(night)` is its final status and best candidate
    (its run `<entry>-<night>`), and each planned row names what the latest earlier night finished, as `plan_entry` does."""
    ids, last = [], {}
    for night in range(n):
        campaign_id, when = f"202610{1 + night:02d}T020000-{suite}-{night:06x}", f"2026-10-{1 + night:02d}T02:00:00"
        store.append("campaigns", campaign_id, [CampaignRecord(
            campaign_id=campaign_id, suite=suite, suite_path="s.yaml", suite_sha256="0", status="finished",
            started_at=when, updated_at=when, dispatch="local", store="", n_problems=len(entries), code_version="c")])
        for entry, outcome in entries.items():
            status, best = outcome(night)
            row = CampaignProblem(campaign_id=campaign_id, entry=entry, problem_path="p.py", status="running",
                                  started_at=when, updated_at=when, previous_run_id=last.get(entry, (None, None))[0],
                                  previous_candidate_id=last.get(entry, (None, None))[1])
            store.append("campaign_problems", campaign_id, [row])
            store.append("campaign_problems", campaign_id, [row.model_copy(update=dict(
                status=status, optimize_run_id=f"{entry}-{night}", best_candidate_id=best))])
            if status == "finished" and best:
                last[entry] = (f"{entry}-{night}", best)
        ids.append(campaign_id)
    return ids


def test_start_and_plan_read_one_earlier_campaign_however_many_nights_the_store_holds(tmp_path: Path, monkeypatch):
    """`start` finds its previous campaign by the campaigns' partition names, and `plan_entry` reads the entries of the
    latest earlier campaign of its suite alone: that night's row names what it found further back, so an entry that
    has not finished for a while, or never did, reads no more than one that finished last night."""
    from kernelflow.flows.campaign import plan_entry, start

    suite, store = load_suite(write(tmp_path, SUITE)), Store(tmp_path / "store")
    ours = nights(store, "ci-smoke", 20, {"09_silu": lambda i: ("finished", f"k{i}"),
                                          "broken": lambda i: ("failed", None),
                                          "17_elementwise_chain": lambda i: ("failed", None) if i >= 15 else
                                          ("finished", f"c{i}")})
    nights(store, "ci-smoke-other", 25, {"09_silu": lambda i: ("finished", "theirs")})  # later nights, another suite
    reads = recording(monkeypatch)
    record = start(store, suite)
    assert record.previous_campaign_id == ours[-1] and reads == []
    rows = {entry.name: plan_entry(store, suite, record.campaign_id, entry)[1] for entry in suite.problems}
    found = {name: (row.previous_run_id, row.previous_candidate_id) for name, row in rows.items()}
    assert found == {"09_silu": ("09_silu-19", "k19"), "broken": (None, None),
                     "17_elementwise_chain": ("17_elementwise_chain-14", "c14")}
    assert set(reads) == {("campaign_problems", ours[-1])}, reads


def test_publish_reads_the_campaigns_own_runs_alone(tmp_path: Path, monkeypatch):
    """The summary's device comes from the runs partitions of the campaign's own runs, not from the whole runs table
    (every night's runs)."""
    import kernelflow.flows.campaign as campaign
    from kernelflow.flows.dispatch import Done

    suite, store = load_suite(write(tmp_path, SUITE)), Store(tmp_path / "store")
    for i in range(20):  # earlier nights, on a GPU
        store.append("runs", f"20261101T020000-09_silu-{i:06x}", [RunRecord(
            problem_id="09_silu", status="finished", started_at="2026-11-01", updated_at="2026-11-01", device="cuda",
            sizes="gpu", budget_candidates=1, proposer="builtin", code_version="c")])
    record_ = campaign.start(store, suite)
    ran = []
    for entry in (suite.problems[0], suite.problems[2]):
        job, row = campaign.plan_entry(store, suite, record_.campaign_id, entry)
        record(store, job.parameters["run_id"], "finished", "2026-12-01T02:00:00+00:00", best="k")
        campaign.conclude(store, suite, row, Done(job, "fr", True, ""))
        ran.append(job.parameters["run_id"])
    made: list[dict] = []
    for name in ("create_table_artifact", "create_markdown_artifact", "create_link_artifact"):
        monkeypatch.setattr(campaign, name, lambda **kw: made.append(kw))
    reads = recording(monkeypatch)
    campaign.publish(store, suite, record_)
    assert reads == [("campaign_problems", record_.campaign_id), *(("runs", run) for run in ran)], reads
    assert "CPU runs" in made[1]["markdown"]
