"""The offline analysis frames and the HTML report, rendered from real CPU runs and opened in headless Chromium;
the roofline from real H200 profiles (bench/profiles, captured by scripts/bench_gpu.py --profile-only)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from kernelflow.artifacts import analysis
from kernelflow.artifacts.leaderboard import leaderboard
from kernelflow.artifacts.report import STYLE, report, roofline_figure
from kernelflow.artifacts.store import Store
from kernelflow.cli import main as cli
from kernelflow.flows.config import RunConfig
from kernelflow.stages.contracts import ProfileResult
from tests.browser import browser, watch
from tests.families import WRITTEN

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
H200_PROFILES = sorted((ROOT / "bench" / "profiles").glob("*.json"))


@pytest.fixture(scope="module")
def campaign(prefect_harness, tmp_path_factory) -> tuple[Store, list[str], str]:
    """Two optimize runs, two strategies: 09_silu under the ladder (rungs), 17 under greedy, each of the families
    kernelflow writes (elementwise candidates); and a wrong softmax judged by `kernelflow verify` (a run of one
    rejected candidate, with no run record)."""
    from kernelflow.flows.optimize import optimize

    root = tmp_path_factory.mktemp("campaign")
    ids = [optimize(str(ROOT / "problems" / name), RunConfig(budget=budget, store=str(root), device="cpu", executor="inline",
                                                             strategy=strategy, families=WRITTEN))["run_id"]
           for name, budget, strategy in (("09_silu.py", 2, "ladder"), ("17_elementwise_chain.py", 2, "greedy"))]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli(["verify", str(ROOT / "problems" / "01_softmax.py"), str(ROOT / "tests" / "fixtures" /
                    "adversarial" / "wrong.py"), "--device", "cpu", "--store", str(root)]) == 1
    store = Store(root)
    judged = next(r for r in store.read("candidates").run_id if r not in ids)
    return store, ids, judged


def h200_store(root: Path) -> tuple[Store, list[str]]:
    """The captured H200 profiles as a store's profiles table, one run per problem (no other table)."""
    store = Store(root)
    for path in H200_PROFILES:
        profile = ProfileResult.model_validate(json.loads(path.read_text())["profile"])
        store.append("profiles", f"h200-{profile.problem_id}", [profile])
    return store, sorted(set(store.read("profiles").run_id))


def test_analysis_frames_agree_with_the_runs_own_records(campaign):
    store, ids, judged = campaign
    runs = analysis.load(store, "runs", ids).set_index("run_id")
    assert list(runs.index) == ids and (runs.status == "finished").all()  # one row per run: the latest
    cands = analysis.candidates(store, [*ids, judged])
    for run, rows in cands[cands.run_id != judged].groupby("run_id"):
        assert list(rows["index"]) == list(range(1, len(rows) + 1))
        assert len(rows) == runs.n_candidates[run] and rows.verified.sum() == runs.n_verified[run]
        assert rows.best_so_far.max() == pytest.approx(runs.best_speedup_vs_eager[run])
    # the judged candidate fails verify; whether the ladder verifies its second candidate or prunes it at rung 1
    # depends on the CPU's timings: the funnel counts what the runs recorded
    verified = int(runs.n_verified.sum())
    assert verified >= 3 and analysis.funnel(cands) == {"generated": 5, "compiled": 5, "verified": verified,
                                                        "faster than eager": 0}  # CPU
    assert cands[cands.run_id == judged].reason.iloc[0].startswith("verify failed: policy_violation: ")  # torch math
    times = analysis.stage_times(store, ids)
    assert times[times.stage == "compile"].calls.sum() == len(analysis.load(store, "compiles", ids))
    assert analysis.roofline_points(store, ids).empty  # CPU profiles are analytic: no time
    con = analysis.duckdb(store)
    counted = dict(con.execute("select run_id, count(*) from candidates group by run_id").fetchall())
    assert counted == cands.groupby("run_id").size().to_dict()
    assert analysis.resolve_runs(store) == [ids[-1]] and analysis.resolve_runs(store, campaign="all") == ids  # recorded runs
    assert analysis.resolve_runs(store, campaign=",".join(reversed(ids))) == list(reversed(ids))


def test_report_command_and_unknown_runs(campaign, tmp_path: Path):
    store, ids, _ = campaign
    out = tmp_path / "r.html"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        assert cli(["report", "--campaign", "all", "--out", str(out), "--store", str(store.root)]) == 0
        assert cli(["report", "no-such-run", "--out", str(tmp_path / "x.html"), "--store", str(store.root)]) == 1
    assert "no run no-such-run" in buffer.getvalue() and not (tmp_path / "x.html").exists()
    page = out.read_text()
    assert all(i in page for i in ids) and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")


def test_report_renders_in_chromium(campaign, tmp_path: Path):
    store, ids, judged = campaign
    path = tmp_path / "report.html"
    path.write_text(report(store, [*ids, judged]))
    with browser(tmp_path / "profile") as context:
        page = context.new_page()
        seen = watch(page)
        page.goto(path.as_uri())
        charts = page.eval_on_selector_all("svg", "els => els.map(e => { const r = e.getBoundingClientRect(); "
                                           "return [e.getAttribute('aria-label'), r.width, r.height]; })")
        assert len(charts) == 5 and all(w > 100 and h > 50 for _, w, h in charts), charts  # 3 trajectories, 2 bars
        dots = page.eval_on_selector_all("figure.trajectory circle", "els => els.map(e => e.getBoundingClientRect()"
                                         ".width)")
        assert len(dots) == 4 and all(w > 0 for w in dots)  # the optimize runs' candidates: verified and timed
        cross = page.locator("figure.trajectory[data-problem='01_softmax'] path.failed")
        assert cross.count() == 1 and cross.bounding_box()["width"] > 0  # the wrong softmax, on the axis
        assert page.locator("figure.trajectory path[stroke-width='2']").count() >= 2  # a best-so-far line per run
        funnel = page.eval_on_selector_all("figure.funnel rect", "els => els.map(e => e.getBoundingClientRect().width)")
        assert funnel[0] == funnel[1] > funnel[2] > 100 and funnel[3] == 0  # 5, 5, 4; none faster than eager on CPU
        assert page.locator("figure.stage-times g.bar").count() == 3
        assert "no profiles" in page.locator("#roofline + p").inner_text()
        for run in [*ids, judged]:
            rows = page.locator(f"table.leaderboard[data-run='{run}'] tbody tr")
            board = leaderboard(store, run)
            assert rows.count() == len(board) and rows.first.is_visible()
            text = page.locator(f"table.leaderboard[data-run='{run}']").inner_text()
            assert all(c in text for c in board.candidate_id)
            if run != judged:  # the judged run timed nothing: no winner
                assert page.locator(f"table.leaderboard[data-run='{run}'] tr.winner").inner_text().startswith("1\teager")
        assert seen.errors == [] and seen.requests == [path.as_uri()]


def test_roofline_of_h200_profiles_renders_in_chromium(tmp_path: Path):
    assert len(H200_PROFILES) >= 9
    store, ids = h200_store(tmp_path / "store")
    points = analysis.roofline_points(store, ids)
    assert len(points) == len(H200_PROFILES) and (points.intensity > 0).all()
    pages = {"report": report(store, ids),  # no run records, no candidates: the report still renders what there is
             "ceilings": f"<style>{STYLE}</style>" + roofline_figure(points, "NVIDIA H200")}
    with browser(tmp_path / "profile") as context:
        for name, html in pages.items():
            path = tmp_path / f"{name}.html"
            path.write_text(html)
            page = context.new_page()
            seen = watch(page)
            page.goto(path.as_uri())
            box = page.locator("figure.roofline svg").bounding_box()
            assert box and box["width"] > 500 and box["height"] > 300
            dots = page.eval_on_selector_all("figure.roofline circle", "els => els.map(e => { const r = "
                                             "e.getBoundingClientRect(); return [r.x, r.y, r.width]; })")
            assert len(dots) == len(points) and all(w > 0 for _, _, w in dots)
            inside = all(box["x"] <= x <= box["x"] + box["width"] and box["y"] <= y <= box["y"] + box["height"]
                         for x, y, _ in dots)
            assert inside and seen.errors == []
            roofs = page.locator("figure.roofline g.series[data-name$='roof'] path").count()
            assert roofs == (2 if name == "ceilings" else 0)  # no timings, so no GPU name: no ceilings in the report
            if name == "report":
                assert "no run record for h200-" in page.locator("#summary ~ p.empty").first.inner_text()
