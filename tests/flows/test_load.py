"""Load (issue 8, part 6), small: scripts/load_campaign.py runs a campaign of 2 synthetic problems x 3 candidates
through the real flow (its own ephemeral Prefect server, the real store, stages inline) on top of 200 earlier runs
already in the store; the runs ask the elementwise family alone (the one the load-grid proposer renders), not
Inductor, which takes seconds a problem. What is asserted cannot flake on a loaded machine: counts and what was read
(a candidate, a run's end and the campaign's `conclude` of each entry stay within the entry's own run). Wall times
and memory are the script's to measure (BENCHMARKS.md, "Load")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
HISTORY = 200  # earlier runs in the store: 400 runs-table parts, so a whole-table scan shows up in the counts
# two entries (the second runs and concludes with the first's run in the store as well), each run with candidates after
# its first (which carries the run's set-up reads); each candidate is seconds of stage processes on the CPU
PROBLEMS, CANDIDATES = 2, 3


def test_a_campaign_records_every_candidate_once_and_reads_only_its_own_runs(tmp_path: Path):
    out = tmp_path / "load.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # its own ephemeral server
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "load_campaign.py"), "--problems", str(PROBLEMS),
                           "--candidates", str(CANDIDATES), "--reps", "3", "3", "--timing-budget-s", "1", "--history",
                           str(HISTORY), "--families", "elementwise", "--workdir", str(tmp_path), "--out", str(out)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    checks = result["checks"]
    assert checks["ok"] and not checks["issues"], checks
    total = PROBLEMS * CANDIDATES
    assert (checks["n_finished"], checks["n_runs"], checks["n_candidates_recorded"], checks["n_verified"]) == (
        PROBLEMS, PROBLEMS, total, total)
    assert len(result["candidates"]) == total and len({c["candidate_id"] for c in result["candidates"]}) == total
    runs = {p["entry"]: p for p in result["problems_measured"]}
    for cand in result["candidates"]:  # evaluating a candidate reads at most its own run's parts, never the store
        assert cand["parts_read"] <= runs[cand["problem_id"]]["parts_written_run"], cand
        assert cand["parts_written"] == result["candidates"][0]["parts_written"], cand  # the same rows each time
    for run in runs.values():  # a run's own reads (its end: winner, leaderboard) stay within its own partition
        assert run["parts_read_run"] <= 3 * run["parts_written_run"] < 2 * HISTORY, run
    for run in runs.values():  # conclude reads the entry's own runs partition (its start and end rows), not the
        assert 0 < run["parts_read_conclude"] <= 2, run  # whole table (2 * HISTORY parts and more before)
