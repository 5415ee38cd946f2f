"""scripts/bench_gpu.py's profile path on CPU: --profile-only rebuilds the best candidate from its family and
parameters, profiles it and both baselines, keeps each as a captured profile, and --rerefine re-derives the cells."""

import argparse
import json
import shutil
from pathlib import Path

from tests.test_flow import ROOT, bench_script


def test_profile_only_then_rerefine_then_render(tmp_path: Path):
    bench = bench_script()
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(ROOT / "bench" / "results" / "09_silu.json", results)
    args = argparse.Namespace(results=str(results), store=str(tmp_path / "store"), only="09", skip_done=False,
                              max_minutes=5.0)
    bench.profile_only(args)
    data = json.loads((results / "09_silu.json").read_text())
    assert data["rebuilt_candidate_id"] == data["best"]  # the template still renders the benchmarked source
    assert set(data["profiles"]) == {"candidate", "eager", "compile"}
    assert all(c["bound"] == "memory" and "no GPU here" in c["note"] for c in data["profiles"].values())
    records = sorted(p.name for p in (tmp_path / "profiles").iterdir())
    assert records == ["09_silu.candidate.json", "09_silu.compile.json", "09_silu.eager.json"]
    data["profiles"] = {}
    (results / "09_silu.json").write_text(json.dumps(data))
    bench.rerefine(args)
    assert set(json.loads((results / "09_silu.json").read_text())["profiles"]) == {"candidate", "eager", "compile"}
    assert "| torch.compile | memory | none |" in bench.render(results)
