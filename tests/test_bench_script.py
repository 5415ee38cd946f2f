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


def test_max_autotune_records_what_happened_and_renders(tmp_path: Path):
    bench = bench_script()
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(ROOT / "bench" / "results" / "09_silu.json", results)
    args = argparse.Namespace(results=str(results), store=str(tmp_path / "store"), only="09", skip_done=False,
                              max_minutes=5.0, autotune_timeout=120.0)
    bench.max_autotune(args)  # no GPU here: the call fails, and says so, instead of vanishing
    cell = json.loads((results / "09_silu.json").read_text())["max_autotune"]
    assert cell["status"] == "failed" and cell["message"] and cell["workloads"] == {}
    row = {"problem": "09_silu", "max_autotune": {"status": "ok", "message": "", "wall_s": 1.0, "specialized": True,
                                                  "workloads": {
        "gpu0": {"eager": [10.0, 9.0, 11.0], "compile": [6.0, 5.0, 7.0], "compile_max": [5.0, 4.0, 6.0],
                 "compile_max_nocg": [4.8, 4.0, 5.0], "candidate": [4.0, 3.0, 5.0]}}}}
    assert "| 09_silu | gpu0 | 10.0 [9.0, 11.0] | 6.0 [5.0, 7.0] | 5.0 [4.0, 6.0] | 4.8 [4.0, 5.0] | " \
        "4.0 [3.0, 5.0] | 1.25 | 1.20 | ok |" in bench.render_max_autotune([row])
    generic = {**row, "max_autotune": {k: v for k, v in row["max_autotune"].items() if k != "specialized"}}
    assert "| ok (torch.compile shape-generic after the first shape) |" in bench.render_max_autotune([generic])
    failed = {"problem": "09_silu", "max_autotune": {"status": "failed", "message": "timed out", "workloads": {}}}
    assert "| 09_silu | - | - | - | - | - | - | - | - | failed: timed out |" in bench.render_max_autotune([failed])


def test_a_max_autotune_cell_without_the_no_cudagraphs_mode_is_timed_again(tmp_path: Path):
    """The first H200 cells (2026-11-30) timed max-autotune alone, the second (2026-12-01) shape-generic code after
    the first shape; --skip-done does those again, failed ones too, but not a failed cell of the current kind."""
    bench = bench_script()
    old = {"status": "ok", "message": "", "wall_s": 1.0, "specialized": True,
           "workloads": {"gpu0": {"eager": [1.0] * 3, "compile_max": [2.0] * 3}}}
    new = {**old, "workloads": {"gpu0": {**old["workloads"]["gpu0"], "compile_max_nocg": [1.0] * 3}}}
    generic = {k: v for k, v in new.items() if k != "specialized"}
    failed = {"status": "failed", "message": "timed out", "wall_s": 1.0, "specialized": True, "workloads": {}}
    failed_generic = {k: v for k, v in failed.items() if k != "specialized"}
    assert [bench.tuned_all(c) for c in (old, new, generic, failed, failed_generic)] == [False, True, False, True,
                                                                                         False]


def test_max_autotune_is_torch_compiles_own_mode(monkeypatch):
    import torch

    from stages.instantiate import baseline

    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, mode=None, **_: modes.append(mode) or model)
    ref, config = torch.nn.Identity(), torch._dynamo.config
    with config.patch(recompile_limit=config.recompile_limit, fail_on_recompile_limit_hit=False):  # baseline() sets them
        assert baseline("eager", ref) is ref and baseline("compile", ref) is ref and baseline("compile_max", ref) is ref
        assert baseline("compile_max_nocg", ref) is ref
    assert modes == [None, "max-autotune", "max-autotune-no-cudagraphs"]


def test_results_timed_against_a_shape_generic_torch_compile_are_marked():
    """Rows recorded before torch.compile was specialized per shape carry a mark and the note that says why."""
    bench = bench_script()
    times = {"gpu0": {"eager": [10.0] * 3, "compile": [5.0] * 3, "candidate": [4.0] * 3}}
    old = {"problem": "09_silu", "workloads": times}
    new = {**old, "problem": "05_gelu_tanh", "compile_specialized": True}
    table = bench.render_results([old, new])
    assert "| 09_silu † | single op |" in table and "| 05_gelu_tanh | single op |" in table
    assert bench.GENERIC_NOTE in table
    assert bench.GENERIC_NOTE not in bench.render_results([new])
