"""The optimize flow end to end on CPU under Prefect's test harness: every artifact kept, leaderboard shown."""

import json
from pathlib import Path

import pandas as pd

from kernelflow.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent


def test_optimize_flow_end_to_end(prefect_harness, tmp_path: Path, capsys):
    from flows.optimize import main as optimize

    summary = optimize(str(ROOT / "problems" / "17_elementwise_chain.py"), budget=3, store=str(tmp_path),
                       device="cpu")
    assert summary["best_candidate_id"] and summary["best_speedup_vs_eager"] > 0
    assert summary["stop_reason"] == "candidate budget of 3 spent"
    tables = {t: pd.read_parquet(tmp_path / "tables" / t) for t in
              ("runs", "problems", "candidates", "compiles", "verifications", "timings", "baselines")}
    assert len(tables["candidates"]) == 3 and len(tables["verifications"]) == 3
    assert set(tables["runs"].status) == {"running", "finished"}
    assert (tables["verifications"].status == "ok").all(), tables["verifications"].message.tolist()
    for blob in tables["verifications"].blobs:
        for sha in json.loads(blob).values():
            assert (tmp_path / "blobs" / sha[:2] / sha).is_file()
    assert cli(["show", summary["run_id"], "--store", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert summary["best_candidate_id"] in shown and "verified" in shown and "baseline medians" in shown
