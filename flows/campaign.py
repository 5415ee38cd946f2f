"""The campaign flow: every problem of a suite (flows/suite.py) optimized once, the nightly unit of work.

Per suite entry one optimize run (flows/dispatch.py: a subflow here, or a flow run of the optimize deployment on a
GPU work queue), named here (its run id, also its flow run's name; the campaign's flow run is named by the campaign's
id) so that its outcome is read back from its own partition of the store,
warm-started from the previous campaign's best candidate for that entry, which is thereby re-timed beside eager in
the new run and checked for a slowdown beyond the noise (flows/regression.py). A failing entry (a broken problem
file, a crashed run) is recorded as failed and the campaign goes on. Everything lands in the store
(campaigns and campaign_problems tables, artifacts/campaigns.py; the HTML report of the campaign's runs) and the
Prefect UI gets a progress bar, the campaign leaderboard table, a markdown summary and a link to the report.

    kernelflow campaign suites/nightly.yaml [--store DIR|s3://bucket/prefix] [--dispatch local|deployments]
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast
from uuid import UUID

from prefect import flow, runtime
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from kernelflow.artifacts.blobs import put_text
from kernelflow.artifacts.campaigns import (
    CampaignProblem,
    CampaignRecord,
    board,
    entries,
    markdown,
    of_suite,
    previous,
    run_ids,
)
from kernelflow.artifacts.store import Store
from kernelflow.flows import progress
from kernelflow.flows.dispatch import Done, Job, deployments, local
from kernelflow.flows.progress import ProblemDone
from kernelflow.flows.regression import check_regression
from kernelflow.flows.run import new_run_id
from kernelflow.flows.suite import Entry, Suite, load_suite
from kernelflow.flows.tasks import name_flow_run
from kernelflow.stages.measure.provenance import code_version
from kernelflow.stages.problems.kernelbench import problem_id


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@flow(name="campaign", log_prints=True)
def campaign(suite_path: str, store: str | None = None, dispatch: Literal["local", "deployments"] | None = None) -> dict:
    suite = load_suite(suite_path)
    if dispatch is not None:  # the nightly deployment sends the suite's runs to the GPU queues whatever it says
        suite = suite.model_copy(update={"dispatch": suite.dispatch.model_copy(update={"mode": dispatch})})
    where = Store(store or suite.store)
    record = start(where, suite)
    name_flow_run(record.campaign_id)
    print(f"campaign {record.campaign_id}: {len(suite.problems)} problems of suite {suite.name} "
          f"({suite.dispatch.mode}), store {where.location}")
    plans = [plan_entry(where, suite, record.campaign_id, entry) for entry in suite.problems]
    jobs, planned = [job for job, _ in plans], {row.entry: row for _, row in plans}
    bar = cast(UUID, create_progress_artifact(0.0, description=f"problems of campaign {record.campaign_id}"))
    progress.campaign_started(record.campaign_id, [entry.name for entry in suite.problems])
    finished: list[CampaignProblem] = []

    def done(ended: Done) -> None:
        finished.append(conclude(where, suite, planned[ended.job.entry.name], ended))
        update_progress_artifact(bar, 100.0 * len(finished) / len(jobs))
        row = finished[-1]
        progress.problem_finished(ProblemDone(len(finished), len(jobs), ended.job.entry.name, row.status, row.verdict,
                                              row.message or row.verdict_note))

    try:
        if suite.dispatch.mode == "local":
            local(jobs, done)
        else:
            deployments(suite.dispatch, jobs, done, record.campaign_id)
    except BaseException as e:
        where.append("campaigns", record.campaign_id, [record.model_copy(update=dict(
            status="failed", message=f"{type(e).__name__}: {e}", updated_at=_now()))])
        raise
    record = close(where, record, finished)
    publish(where, suite, record)
    return {"campaign_id": record.campaign_id, "store": where.location, "report": record.report_path,
            "problems": {r.entry: {"status": r.status, "run_id": r.optimize_run_id, "verdict": r.verdict}
                         for r in finished}}


def start(store: Store, suite: Suite) -> CampaignRecord:
    """The campaign's id and first row, with the suite's text kept as a blob."""
    campaign_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{suite.name}-{uuid.uuid4().hex[:6]}"
    earlier = of_suite(store, suite.name)
    record = CampaignRecord(
        campaign_id=campaign_id, suite=suite.name, suite_path=suite.path, suite_sha256=suite.sha256,
        status="running", started_at=_now(), updated_at=_now(), dispatch=suite.dispatch.mode, store=store.location,
        n_problems=len(suite.problems), previous_campaign_id=earlier[0] if earlier else None,
        blobs={"suite": put_text(store.blob_dir, suite.text)}, code_version=code_version(),
        prefect_flow_run_id=str(runtime.flow_run.id or ""))
    store.append("campaigns", campaign_id, [record])
    return record


def plan_entry(store: Store, suite: Suite, campaign_id: str, entry: Entry) -> tuple[Job, CampaignProblem]:
    """The entry's optimize parameters (its RunConfig in the campaign's store), warm-started from its previous best
    and naming the run it is to make (`run_id`, so that `conclude` reads that run's partition alone), and its first
    campaign_problems row."""
    last = previous(store, suite.name, entry.name, campaign_id)
    path = suite.problem_path(entry)
    parameters: dict[str, Any] = {"problem_path": path, "config": suite.config(entry).model_copy(update={"store": store.location}),
                  "run_id": new_run_id(problem_id(path))}  # the id load_problem will give it
    previous_run_id, previous_candidate_id = last or (None, None)
    if previous_run_id:
        parameters["warm_start_from"] = previous_run_id
    row = CampaignProblem(campaign_id=campaign_id, entry=entry.name, problem_path=path,
                          status="running", started_at=_now(), updated_at=_now(), previous_run_id=previous_run_id,
                          previous_candidate_id=previous_candidate_id)
    store.append("campaign_problems", campaign_id, [row])
    return Job(entry, parameters, parameters["run_id"]), row


def conclude(store: Store, suite: Suite, planned: CampaignProblem, ended: Done) -> CampaignProblem:
    """The entry's final row: its run as the store recorded it (the run `plan_entry` named) and the regression check."""
    run = recorded(store, ended.job.parameters["run_id"])
    ok = ended.completed and run is not None and run["status"] == "finished"
    fields: dict = dict(status="finished" if ok else "failed", updated_at=_now(), prefect_flow_run_id=ended.flow_run_id,
                        work_queue=ended.work_queue,
                        message=str(run.get("stop_reason", "")) if ok and run else ended.message[-2000:])
    if run is not None:
        fields |= {"optimize_run_id": run["run_id"], **{k: run.get(k) for k in (
            "problem_id", "best_candidate_id", "best_speedup_vs_eager", "winner", "winner_speedup_vs_eager")}}
        if planned.previous_run_id and planned.previous_candidate_id:
            found = check_regression(store, planned.previous_run_id, planned.previous_candidate_id, run["run_id"],
                          suite.regression_floor)
            fields |= dict(verdict=found.verdict, verdict_note=found.note, previous_speedup_vs_eager=found.previous,
                           retimed_speedup_vs_eager=found.retimed, noise_factor=found.noise_factor)
        else:
            fields["verdict_note"] = "no earlier campaign of this suite finished this entry with a best candidate"
    final = CampaignProblem.model_validate({**planned.model_dump(), **fields})
    store.append("campaign_problems", planned.campaign_id, [final])
    return final


def recorded(store: Store, run_id: str) -> dict | None:
    """The latest runs row of optimize run `run_id` (its present values), or None if the run never began. Its own
    partition only: a whole-table read here would grow with every run ever stored (docs/LOG.md)."""
    runs = store.runs(run_id)
    return None if runs.empty else {k: v for k, v in runs.iloc[-1].to_dict().items() if _present(v)}


def close(store: Store, record: CampaignRecord, finished: list[CampaignProblem]) -> CampaignRecord:
    """The HTML report of the campaign's runs into the store, and the campaign's last row."""
    ids = run_ids(store, record.campaign_id)
    blobs, report_path = dict(record.blobs), None
    if ids:
        from kernelflow.artifacts.report import report

        html = report(store, ids)
        path = store.root / "reports" / f"{record.campaign_id}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html)
        blobs["report"], report_path = put_text(store.blob_dir, html), str(path)
    record = record.model_copy(update=dict(
        status="finished", updated_at=_now(), n_finished=sum(r.status == "finished" for r in finished),
        n_failed=sum(r.status == "failed" for r in finished), n_slower=sum(r.verdict == "slower" for r in finished),
        report_path=report_path, blobs=blobs))
    store.append("campaigns", record.campaign_id, [record])
    store.flush()
    return record


def publish(store: Store, suite: Suite, record: CampaignRecord) -> None:
    """The campaign's Prefect artifacts: its leaderboard table, a markdown summary, a link to the report."""
    rows = entries(store, record.campaign_id)
    runs = [store.runs(run_id) for run_id in rows.optimize_run_id.dropna()]  # theirs alone, not every night's
    devices = {device for run in runs if not run.empty for device in run.device}
    create_table_artifact(key=f"campaign-{suite.name}", table=board(rows).astype(str).to_dict("records"),
                          description=f"campaign {record.campaign_id}")
    create_markdown_artifact(key=f"campaign-{suite.name}-summary", description=f"campaign {record.campaign_id}",
                             markdown=markdown(record, rows, "cpu" if devices == {"cpu"} else None))
    if record.report_path:
        link = f"{store.location}/blobs/{record.blobs['report'][:2]}/{record.blobs['report']}" if store.mirror \
            else Path(record.report_path).as_uri()
        create_link_artifact(key=f"campaign-{suite.name}-report", link=link, link_text=f"report of {record.campaign_id}",
                             description=f"the HTML report of campaign {record.campaign_id}'s runs")


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)

