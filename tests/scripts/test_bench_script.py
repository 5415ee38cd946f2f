"""scripts/bench_gpu.py's profile path on CPU: --profile-only rebuilds the best candidate from its family and
parameters, profiles it and both baselines (on the first GPU workload, or the one --workload picks), keeps each as a
captured profile, and --rerefine re-derives the cells."""

import argparse
import json
from pathlib import Path

import pytest

from kernelflow.stages.problems.kernelbench import load_problem
from kernelflow.stages.templates import TEMPLATES
from tests.flows.test_flow import ROOT, bench_script

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)


def current_09(bench) -> dict:
    """bench/results/09_silu.json as if searched with today's template: its best is the id the elementwise template
    renders now (the stored search predates the unmasked full blocks, and a rebuild of another id is recorded as
    such: the profile of a rebuilt candidate is not the best's)."""
    data = json.loads((ROOT / "bench" / "results" / "09_silu.json").read_text())
    return {**data, "best": bench.rebuild(load_problem(ROOT / "problems" / "09_silu.py"), data).id}


def test_a_rebuild_from_a_changed_template_is_recorded_beside_the_best(tmp_path: Path):
    bench = bench_script()
    stored = json.loads((ROOT / "bench" / "results" / "09_silu.json").read_text())
    stale = {**stored, "best": "0" * 16}
    (tmp_path / "09_silu.json").write_text(json.dumps(stale))
    bench.profile_only(argparse.Namespace(results=str(tmp_path), store=str(tmp_path / "store"), only="09",
                                          skip_done=False, max_minutes=5.0, workload=None))
    data = json.loads((tmp_path / "09_silu.json").read_text())
    assert data["best"] == "0" * 16 and data["rebuilt_candidate_id"] == current_09(bench)["best"]


def test_a_rebuild_of_the_inductor_seed_generates_for_the_device():
    """A family that generates for a device (the inductor seed) is rebuilt for this one, with the record's
    parameters, as the proposer rendered it."""
    bench = bench_script()
    prob = load_problem(ROOT / "problems" / "33_softplus.py")
    plan = TEMPLATES["inductor"].match(prob, None, "cpu")
    params = TEMPLATES["inductor"].variants(plan)[1]
    cand = bench.rebuild(prob, {"best_origin": ["inductor", json.dumps(params)]})
    assert cand is not None and cand.source == TEMPLATES["inductor"].render(plan, params)
    assert cand.origin.params == params


def test_profile_only_then_rerefine_then_render(tmp_path: Path):
    bench = bench_script()
    results = tmp_path / "results"
    results.mkdir()
    (results / "09_silu.json").write_text(json.dumps(current_09(bench)))
    args = argparse.Namespace(results=str(results), store=str(tmp_path / "store"), only="09", skip_done=False,
                              max_minutes=5.0, workload=None)
    bench.profile_only(args)
    data = json.loads((results / "09_silu.json").read_text())
    assert data["rebuilt_candidate_id"] == data["best"]  # the template renders the benchmarked source
    assert set(data["profiles"]) == {"candidate", "eager", "compile"}
    assert all(c["bound"] == "memory" and "no GPU here" in c["note"] for c in data["profiles"].values())
    records = sorted(p.name for p in (tmp_path / "profiles").iterdir())
    assert records == ["09_silu.candidate.json", "09_silu.compile.json", "09_silu.eager.json"]
    data["profiles"] = {}
    (results / "09_silu.json").write_text(json.dumps(data))
    bench.rerefine(args)
    assert set(json.loads((results / "09_silu.json").read_text())["profiles"]) == {"candidate", "eager", "compile"}
    assert "| torch.compile | memory | none |" in bench.render(results)


def test_profile_only_on_the_worst_workload_keeps_it_beside_the_first(tmp_path: Path, capsys):
    """--workload worst picks 09_silu's gpu1 (made slowest here) and keeps its cells and files apart from the first
    workload's; --skip-done looks at that workload's cells; --rerefine re-derives both kinds; --render shows both."""
    bench = bench_script()
    results = tmp_path / "results"
    results.mkdir()
    data = current_09(bench)
    first = data["profiles"]  # the H200 cells of gpu0
    data.pop("max_autotune")  # without its specialized medians, the search's own decide
    data["workloads"]["gpu1"]["candidate"] = [1239.0, 1230.0, 1250.0]  # 2.00x torch.compile's 619.5 us
    (results / "09_silu.json").write_text(json.dumps(data))
    args = argparse.Namespace(results=str(results), store=str(tmp_path / "store"), only="09", skip_done=False,
                              max_minutes=5.0, workload="worst")
    bench.profile_only(args)
    assert "09_silu: worst workload gpu1: best candidate 2.00x the faster baseline's median" in capsys.readouterr().out
    data = json.loads((results / "09_silu.json").read_text())
    assert data["profiles"] == first
    assert set(data["workload_profiles"]) == {"gpu1"}
    assert list(data["workload_profiles"]["gpu1"]) == ["candidate", "eager", "compile"]
    assert {c["workload"] for c in data["workload_profiles"]["gpu1"].values()} == {"gpu1"}
    records = sorted(p.name for p in (tmp_path / "profiles").iterdir())
    assert records == ["09_silu.gpu1.candidate.json", "09_silu.gpu1.compile.json", "09_silu.gpu1.eager.json"]

    del data["profiles"]  # the first workload's cells missing, gpu1's there: --skip-done passes over 09 for gpu1
    (results / "09_silu.json").write_text(json.dumps(data))
    for wanted in ("worst", "gpu1", "gpu2"):
        bench.profile_only(argparse.Namespace(**{**vars(args), "skip_done": True, "workload": wanted}))
    assert capsys.readouterr().out == "09_silu: skipped: no GPU workload gpu2 (it has gpu0, gpu1)\n"
    assert json.loads((results / "09_silu.json").read_text()) == data
    assert len(list((tmp_path / "profiles").iterdir())) == 3

    stored_best = json.loads((ROOT / "bench" / "results" / "09_silu.json").read_text())["best"]
    for path in (ROOT / "bench" / "profiles").glob("09_silu.*.json"):  # the H200 captures of gpu0
        # of the stored best (the masked kernel): named as today's rendering, as rerefine derives cells only from a
        # capture of the record's best (test_a_rebuild_from_a_changed_template_is_recorded_beside_the_best)
        (tmp_path / "profiles" / path.name).write_text(path.read_text().replace(stored_best, data["best"]))
    data["workload_profiles"]["gpu1"] = {}
    (results / "09_silu.json").write_text(json.dumps(data))
    bench.rerefine(args)
    assert "09_silu gpu1: candidate, eager, compile re-refined" in capsys.readouterr().out
    data = json.loads((results / "09_silu.json").read_text())
    assert list(data["profiles"]) == ["candidate", "eager", "compile"]
    assert {c["workload"] for c in data["profiles"].values()} == {"gpu0"}
    assert list(data["workload_profiles"]["gpu1"]) == ["candidate", "eager", "compile"]
    assert {c["workload"] for c in data["workload_profiles"]["gpu1"].values()} == {"gpu1"}
    table = bench.render_profiles([data])
    assert "| 09_silu | gpu0 | best candidate |" in table and "|  | gpu1 | best candidate |" in table
    del data["workload_profiles"]  # the first workload's cells there, gpu1's not: --skip-done passes over 09 for gpu0
    (results / "09_silu.json").write_text(json.dumps(data))
    for wanted in (None, "gpu0"):
        bench.profile_only(argparse.Namespace(**{**vars(args), "skip_done": True, "workload": wanted}))
    assert json.loads((results / "09_silu.json").read_text()) == data and capsys.readouterr().out == ""


def test_the_worst_workload_is_the_candidates_slowest_against_the_faster_baseline():
    bench = bench_script()
    result = {"workloads": {
        "gpu0": {"candidate": [10.0] * 3, "eager": [20.0] * 3, "compile": [12.0] * 3},  # 0.83
        "gpu1": {"candidate": [9.0] * 3, "eager": [6.0] * 3, "compile": [30.0] * 3},  # 1.5: eager is the faster
        "gpu2": {"candidate": [50.0] * 3, "eager": [10.0] * 3},  # 5.0, but torch.compile untimed: left out
        "gpu3": {"candidate": [40.0] * 3, "compile": [10.0] * 3}}}  # 4.0, eager untimed: left out
    assert bench.worst_workload(result) == ("gpu1", 1.5)
    assert bench.worst_workload({"workloads": {}}) is None and bench.worst_workload({}) is None
    # the max-autotune call's medians, when it compiled every shape specialized, over the search's own
    tuned = {"specialized": True, "workloads": {
        "gpu0": {"candidate": [10.0] * 3, "eager": [20.0] * 3, "compile": [5.0] * 3, "compile_max_nocg": [4.0] * 3},
        "gpu1": {"candidate": [9.0] * 3, "eager": [6.0] * 3, "compile": [30.0] * 3}}}
    assert bench.worst_workload({**result, "max_autotune": tuned}) == ("gpu0", 2.0)
    assert bench.worst_workload({**result, "max_autotune": {**tuned, "specialized": False}}) == ("gpu1", 1.5)
    baselines_only = {"workloads": {"gpu0": {"eager": [1.0] * 3, "compile": [2.0] * 3}}}
    assert bench.worst_workload(baselines_only) is None
    names = ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert bench.target_workload(names, result, None) == ("gpu0", "")
    assert bench.target_workload(names, result, "gpu3") == ("gpu3", "")
    assert bench.target_workload(names, result, "worst") == (
        "gpu1", "worst workload gpu1: best candidate 1.50x the faster baseline's median")
    assert bench.target_workload(["gpu0"], result, "gpu2")[0] is None
    assert bench.target_workload(names, baselines_only, "worst")[0] is None


def test_the_first_workload_keeps_todays_keys_and_file_names_another_is_named(tmp_path: Path):
    bench = bench_script()
    results = tmp_path / "results"
    assert bench.sidecar(results, "15_add_rmsnorm", "eager") == tmp_path / "profiles" / "15_add_rmsnorm.eager.json"
    assert bench.sidecar(results, "15_add_rmsnorm", "eager", "gpu2") == \
        tmp_path / "profiles" / "15_add_rmsnorm.gpu2.eager.json"
    data: dict = {}
    bench.put_profiles(data, None, {"eager": {"workload": "gpu0"}})
    bench.put_profiles(data, "gpu2", {"compile": {"workload": "gpu2"}})
    assert data == {"profiles": {"eager": {"workload": "gpu0"}},
                    "workload_profiles": {"gpu2": {"compile": {"workload": "gpu2"}}}}
    assert bench.profiles_in(data, "gpu2") == {"compile": {"workload": "gpu2"}} and bench.profiles_in(data, "gpu1") == {}
    (tmp_path / "profiles").mkdir()
    for name in ("15_add_rmsnorm.eager.json", "15_add_rmsnorm.gpu2.candidate.json", "15_add_rmsnorm.gpu2.notes.json",
                 "15_add_rmsnorm.gpu2.x.eager.json", "14_residual_layernorm.eager.json"):
        (tmp_path / "profiles" / name).write_text("{}")
    assert bench.sidecars(results, "15_add_rmsnorm") == {
        None: {"eager": tmp_path / "profiles" / "15_add_rmsnorm.eager.json"},
        "gpu2": {"candidate": tmp_path / "profiles" / "15_add_rmsnorm.gpu2.candidate.json"}}


def test_the_profile_table_lists_other_workloads_after_the_first():
    bench = bench_script()

    def cell(workload: str, bound: str, tools: list[str]) -> dict:
        return {"workload": workload, "status": "ok", "counters": "ncu", "bound": bound, "sol_fraction": 0.5,
                "energy_j_per_call": 0.001, "time_us": 900.0, "tools": tools, "note": ""}

    row = {"problem": "15_add_rmsnorm", "profiles": {"candidate": cell("gpu0", "memory", []),
                                                     "eager": cell("gpu0", "memory", ["dram_excess"])},
           "workload_profiles": {"gpu2": {"compile": cell("gpu2", "memory", []),
                                          "candidate": cell("gpu2", "latency", ["occupancy_low"])}}}
    lines = bench.render_profiles([row]).splitlines()[2:]
    assert [line.split(" | ")[:4] for line in lines] == [
        ["| 15_add_rmsnorm", "gpu0", "best candidate", "memory"], ["| ", "gpu0", "eager", "memory"],
        ["| ", "gpu2", "best candidate", "latency"], ["| ", "gpu2", "torch.compile", "memory"]]
    assert "| occupancy_low | 0.50 | 1.00 | 900.0 |" in lines[2]
    only_other = {"problem": "21_cross_entropy", "workload_profiles": row["workload_profiles"]}
    assert bench.render_profiles([only_other]).splitlines()[2].startswith("| 21_cross_entropy | gpu2 | best candidate")


def test_max_autotune_records_what_happened_and_renders(tmp_path: Path):
    bench = bench_script()
    results = tmp_path / "results"
    results.mkdir()
    (results / "09_silu.json").write_text(json.dumps(current_09(bench)))
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

    from kernelflow.stages.harness.instantiate import baseline

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
