"""scripts/benchmarks_page.py: the headline and the losses computed from a small record set, the medians an
older-format record is shown with, and BENCHMARKS.md being exactly the page the committed records render to. No GPU,
no Prefect, no torch."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page():
    spec = importlib.util.spec_from_file_location("benchmarks_page", ROOT / "scripts" / "benchmarks_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(us: float) -> list[float]:
    return [us, us * 0.99, us * 1.01]  # median, 95% interval


def record(problem: str, shapes: dict[str, tuple[float, float, float]], **extra) -> dict:
    """A bench/results record whose search timed (best, eager, torch.compile) medians per shape."""
    return {"problem": problem, "run_id": f"20261201T000000-{problem}-abc", "best": "c0ffee", "compile_specialized": True,
            "best_origin": ["rowwise", "{}"], "n_candidates": 2, "n_verified": 2, "leaderboard": [],
            "stop_reason": "candidate budget of 2 spent",
            "provenance": {"device_name": "NVIDIA H200", "driver": "580.159.04", "code_version": "abc123"},
            "workloads": {w: {"candidate": timed(c), "eager": timed(e), "compile": timed(k)}
                          for w, (c, e, k) in shapes.items()}, **extra}


def test_headline_and_losses_from_two_problems(page, tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    # (best, eager, torch.compile) us; 02 gpu1 is the one loss: the best at 100 us against eager's 60
    (results / "01_a.json").write_text(json.dumps(record("01_a", {"gpu0": (100, 200, 150), "gpu1": (100, 400, 300)})))
    (results / "02_b.json").write_text(json.dumps(record("02_b", {"gpu0": (50, 100, 100), "gpu1": (100, 60, 120)})))
    s = page.summarize(page.load(results))
    eager = [math.sqrt(2 * 4), math.sqrt(2 * 0.6)]  # per problem: geomean over its shapes
    compile_ = [math.sqrt(1.5 * 3), math.sqrt(2 * 1.2)]
    assert s["geomean_eager"] == pytest.approx(math.sqrt(eager[0] * eager[1]))  # 1.760
    assert s["geomean_compile"] == pytest.approx(math.sqrt(compile_[0] * compile_[1]))  # 1.813
    assert (s["fast_1.0_eager"], s["fast_1.2_eager"], s["fast_1.0_compile"], s["fast_1.2_compile"]) == (2, 1, 2, 2)
    assert s["faster_than_both"] == 2 and s["n_shapes"] == 4
    text = page.render(results, tmp_path / "no-floors.json", tmp_path / "no-agreement")
    assert "| best verified candidate, geomean over problems | 1.76 (2 problems) | 1.81 (2 problems) |" in text
    assert "| fast_1 | 2 of 2 (100%) | 2 of 2 (100%) |" in text and "| fast_1.2 | 1 of 2 (50%) | 2 of 2 (100%) |" in text
    losses = [line for line in text.splitlines() if line.startswith("- 0")]
    assert losses == ["- 02_b gpu1: best 100.0 us against eager 60.0 us (0.60x)."]
    assert "SOL floors: no floors file" in text and "no GPU records in" in text


def test_problems_without_a_record_are_named(page, tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "01_a.json").write_text(json.dumps(record("01_a", {"gpu0": (100, 200, 150)})))
    floors = tmp_path / "floors.json"
    floors.write_text(json.dumps({"floors_us": {"01_a": {"gpu0": 90.0}, "02_b": {"gpu0": 10.0}, "03_c": {}}}))
    text = page.render(results, floors, tmp_path / "no-agreement")
    assert "- Not benchmarked yet (no record): 02_b, 03_c." in text


def test_the_budget_that_ended_each_search_is_named(page):
    """A candidate budget is a number of candidates; a wall-time budget is seconds, never read as candidates."""
    records = [record("01_a", {}), record("02_b", {}, stop_reason="wall-time budget of 90 s spent (129 s)",
                                          n_candidates=1), record("03_c", {}, stop_reason="no candidate left")]
    assert page.budgets(records) == "2 candidates: 01; not recorded: 03; wall time 90 s (1 tried): 02"


def test_an_older_record_shows_its_max_autotune_call(page):
    """Without compile_specialized the search's torch.compile ran shape-generic after the first shape: the rows show
    the max-autotune call, which timed the same best beside a per-shape torch.compile."""
    old = record("03_c", {"gpu0": (100, 200, 400)}, rebuilt_candidate_id="c0ffee",
                 max_autotune={"status": "ok", "specialized": True,
                               "workloads": {"gpu0": {"candidate": timed(100), "eager": timed(200),
                                                      "compile": timed(90)}}})
    del old["compile_specialized"]
    row = page.problem_row(old)
    assert row["source"] == page.TUNED and row["speedup"]["compile"] == pytest.approx(0.9)
    other = page.problem_row({**old, "rebuilt_candidate_id": "another"})  # the call timed another candidate
    assert other["source"] == page.GENERIC and other["speedup"]["compile"] is None


def test_benchmarks_md_is_what_the_committed_records_render_to(page):
    rendered = page.render(ROOT / "bench" / "results", ROOT / "bench" / "sol-floors.json", ROOT / "bench" / "agreement")
    assert (ROOT / "BENCHMARKS.md").read_text() == rendered, (
        "BENCHMARKS.md differs from the records: run `make benchmarks-page` (scripts/benchmarks_page.py)")
