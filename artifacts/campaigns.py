"""Campaigns in the store: the `campaigns` table (one row per campaign when it starts and when it ends) and the
`campaign_problems` table (one row per campaign and suite entry when its run starts and when it ends); the latest
row wins in both. Both are partitioned by the campaign id (their `run_id` column when read), so a campaign's rows
sit together and `kernelflow report --campaign ID` finds its optimize runs (`optimize_run_id`).
"""

from __future__ import annotations

import re
from typing import Literal

import pandas as pd
from pydantic import Field

from kernelflow.artifacts.fmt import sig
from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import Contract

CAMPAIGN_ID = re.compile(r"\d{8}T\d{6}-(.+)-[0-9a-f]{6}")  # <UTC start time>-<suite>-<6 hex>; group 1: the suite
Verdict = Literal["ok", "slower", "broken", "not_checked"]


class CampaignRecord(Contract):
    """One campaign: a suite run once over its problems."""

    campaign_id: str = Field(description="<UTC time>-<suite>-<6 hex>; also the tables' partition")
    suite: str = Field(description="the suite's name; campaigns of one suite are compared with each other")
    suite_path: str = Field(description="the suite file as the campaign read it")
    suite_sha256: str = Field(description="sha256 of the suite file's text (the text itself is the `suite` blob)")
    status: Literal["running", "finished", "failed"]
    started_at: str = Field(description="UTC ISO time")
    updated_at: str = Field(description="UTC ISO time of this row")
    dispatch: Literal["local", "deployments"] = Field(description="subflows here, or flow runs on GPU work queues")
    store: str = Field(description="the store's location (a directory or s3://bucket/prefix)")
    n_problems: int = Field(description="entries in the suite")
    n_finished: int = Field(default=0, description="entries whose optimize run finished")
    n_failed: int = Field(default=0, description="entries that failed (a broken problem file, a crashed run)")
    n_slower: int = Field(default=0, description="entries whose previous best re-timed slower beyond the noise")
    previous_campaign_id: str | None = Field(default=None, description="the latest earlier campaign of this suite")
    report_path: str | None = Field(default=None, description="the HTML report in the store's (local) directory")
    message: str = Field(default="", description="why it failed, when it did")
    blobs: dict[str, str] = Field(default_factory=dict, description="suite (its YAML), report (the HTML) -> sha256")
    code_version: str = Field(description="git commit of kernelflow, or 'unknown'")
    prefect_flow_run_id: str | None = Field(default=None, description="the campaign's Prefect flow run")


class CampaignProblem(Contract):
    """One suite entry in one campaign: its optimize run and the regression check of last time's best."""

    campaign_id: str = Field(description="the campaign")
    entry: str = Field(description="the entry's name in the suite (default the problem's stem)")
    problem_path: str = Field(description="the problem file the run was given")
    problem_id: str | None = Field(default=None, description="the problem's id once a run loaded it")
    status: Literal["running", "finished", "failed"]
    message: str = Field(default="", description="the run's stop reason, or why it failed")
    started_at: str = Field(description="UTC ISO time")
    updated_at: str = Field(description="UTC ISO time of this row")
    optimize_run_id: str | None = Field(default=None, description="the optimize run (runs table); None when none began")
    prefect_flow_run_id: str | None = Field(default=None, description="the optimize flow run")
    work_queue: str | None = Field(default=None, description="the work queue it ran on (dispatch: deployments)")
    best_candidate_id: str | None = None
    best_speedup_vs_eager: float | None = None
    winner: str | None = Field(default=None, description="the run's winner under the seeds rule")
    winner_speedup_vs_eager: float | None = None
    previous_run_id: str | None = Field(default=None, description="the run of an earlier campaign of this suite whose "
                                        "best candidate this run started from (warm start) and re-timed")
    previous_candidate_id: str | None = Field(default=None, description="that best candidate")
    verdict: Verdict = Field(default="not_checked", description="the regression check (flows/regression.py): ok, "
                             "slower beyond the noise, broken (no longer compiles or verifies), or not_checked")
    verdict_note: str = Field(default="", description="the check's numbers, or why it was not made")
    previous_speedup_vs_eager: float | None = Field(default=None, description="its geomean speedup over eager as "
                                                    "recorded then, on the shapes timed both times")
    retimed_speedup_vs_eager: float | None = Field(default=None, description="the same, re-timed in this run")
    noise_factor: float | None = Field(default=None, description="exp(band): the ratio of the two beyond which "
                                       "they differ (the intervals' half-widths in quadrature, at least the floor)")


def latest(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The latest row per key (rows carry updated_at)."""
    if frame.empty:
        return frame
    return frame.sort_values("updated_at", kind="stable").groupby(keys, observed=True).tail(1).reset_index(drop=True)


def campaigns(store: Store) -> pd.DataFrame:
    """The latest row of every campaign, oldest first."""
    frame = latest(store.read("campaigns"), ["campaign_id"])
    return frame.sort_values("started_at", kind="stable") if not frame.empty else frame


def entries(store: Store, campaign_id: str) -> pd.DataFrame:
    """The latest row of every entry of one campaign, in the suite's order (that of their first rows)."""
    frame = store.read("campaign_problems", campaign_id)
    if frame.empty:
        return frame
    order = {entry: i for i, entry in enumerate(frame.entry.drop_duplicates())}
    return latest(frame, ["entry"]).sort_values("entry", key=lambda e: e.map(order)).reset_index(drop=True)


def run_ids(store: Store, campaign_id: str) -> list[str]:
    """The optimize runs of a campaign, in the suite's order."""
    rows = entries(store, campaign_id)
    return [] if rows.empty else list(rows.optimize_run_id.dropna())


def of_suite(store: Store, suite: str) -> list[str]:
    """The suite's campaign ids, latest first, from the campaigns table's partition names alone: an id is
    `<UTC start time>-<suite>-<6 hex>`, so no part is read and the cost does not grow with the nights stored (campaigns
    started within the same second are ordered by their hex, not by `started_at`)."""
    return sorted((c for c in store.partitions("campaigns") if (m := CAMPAIGN_ID.fullmatch(c)) and m[1] == suite),
                  reverse=True)


def previous(store: Store, suite: str, entry: str, before: str) -> tuple[str, str] | None:
    """(run, best candidate) of the entry in the latest other campaign of this suite (not `before`, the campaign
    asking) that finished the entry with a best candidate: what that campaign re-times and warm-starts from; None if
    there is none. Only the latest campaign that planned the entry is read: its row already names what it found
    further back, so an entry that never finishes does not send every night back through all earlier ones."""
    for campaign_id in (c for c in of_suite(store, suite) if c != before):
        rows = entries(store, campaign_id)
        rows = rows[rows.entry == entry] if not rows.empty else rows
        if rows.empty:
            continue
        last = rows.iloc[-1]
        if last.status == "finished" and pd.notna(last.best_candidate_id):
            return str(last.optimize_run_id), str(last.best_candidate_id)
        return (str(last.previous_run_id), str(last.previous_candidate_id)) \
            if pd.notna(last.previous_run_id) and pd.notna(last.previous_candidate_id) else None
    return None


BOARD = ["entry", "problem", "status", "run", "winner", "winner x eager", "best x eager", "last time x eager",
         "re-timed x eager", "regression", "note"]


def board(rows: pd.DataFrame) -> pd.DataFrame:
    """A campaign's entries as one table: the campaign leaderboard (best first; failures last)."""
    if rows.empty:
        return pd.DataFrame(columns=BOARD)
    frame = pd.DataFrame({
        "entry": rows.entry, "problem": rows.problem_id, "status": rows.status, "run": rows.optimize_run_id,
        "winner": rows.winner, "winner x eager": rows.winner_speedup_vs_eager,
        "best x eager": rows.best_speedup_vs_eager, "last time x eager": rows.previous_speedup_vs_eager,
        "re-timed x eager": rows.retimed_speedup_vs_eager, "regression": rows.verdict,
        "note": [m if s == "failed" else v for s, m, v in zip(rows.status, rows.message, rows.verdict_note,
                                                                strict=True)]})
    return frame.sort_values("best x eager", ascending=False, na_position="last", kind="stable")[BOARD]


def _number(value: object) -> str:
    return "-" if value is None or (isinstance(value, float) and pd.isna(value)) else \
        sig(value) if isinstance(value, float) else str(value)


def markdown(record: CampaignRecord, rows: pd.DataFrame, device: str | None) -> str:
    """The campaign's summary for the Prefect UI: counts, where everything is, the board, regressions and failures."""
    table = board(rows)
    lines = [f"# Campaign `{record.campaign_id}` of suite {record.suite}", "",
             f"{record.n_problems} problems: {record.n_finished} finished, {record.n_failed} failed, "
             f"{record.n_slower} slower than last time beyond the noise.", "",
             f"- store: `{record.store}`",
             f"- report: `{record.report_path}`" + (f" (blob `{record.blobs['report']}`)" if "report" in record.blobs
                                                   else "") if record.report_path else "- report: none (no run)",
             f"- suite: `{record.suite_path}` (sha256 `{record.suite_sha256[:12]}`)",
             f"- compared with campaign `{record.previous_campaign_id}`" if record.previous_campaign_id else
             "- no earlier campaign of this suite: nothing re-timed", ""]
    if device == "cpu":
        lines += ["CPU runs: Triton candidates ran in Triton's interpreter; their times say nothing about GPU speed.", ""]
    lines += ["| " + " | ".join(BOARD) + " |", "|" + "---|" * len(BOARD)]
    lines += ["| " + " | ".join(_number(v).replace("|", "/").replace("\n", " ") for v in r) + " |"
              for r in table.itertuples(index=False)]
    for title, picked in (("Slower than last time", rows[rows.verdict.isin(["slower", "broken"])]),
                          ("Failed", rows[rows.status == "failed"])):
        if not picked.empty:
            lines += ["", f"## {title}", ""]
            lines += [f"- **{r.entry}**: {r.verdict_note if title.startswith('Slower') else r.message}"
                      for r in picked.itertuples()]
    lines += ["", "Look closer: `kernelflow show RUN_ID --store STORE`; `kernelflow report --campaign "
              f"{record.campaign_id} --store {record.store} --out report.html`."]
    return "\n".join(lines) + "\n"
