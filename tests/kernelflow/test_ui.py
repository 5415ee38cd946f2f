"""The Prefect UI shows a kernelflow run: a real `prefect server start` (own home, free port), the optimize flow
run against it from the command line, then the flow run page and the leaderboard artifact's page rendered by
the UI's JavaScript in headless Chromium."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from kernelflow.artifacts.store import Store
from tests.browser import browser, chromium, watch
from tests.prefect_server import prefect_server

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
KNOWN_404 = {"/ico/undefined.svg"}  # Prefect 3.9.1's UI asks for an icon it names `undefined`; nothing of ours


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """(base URL, the environment that points a process at it)."""
    chromium()  # skip (or fail under CI) before spending a server start and a flow run
    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as running:
        yield running


def test_the_ui_shows_the_run_and_its_leaderboard(server, tmp_path: Path):
    base, env = server
    store = tmp_path / "store"
    flow = subprocess.run([sys.executable, "-m", "kernelflow.cli", "optimize", str(ROOT / "problems" / "09_silu.py"),
                           "--budget", "1", "--device", "cpu", "--executor", "inline", "--families", "elementwise",
                           "--store", str(store)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert flow.returncode == 0, flow.stdout[-3000:] + flow.stderr[-3000:]
    record = Store(store).runs().iloc[-1]
    flow_run = httpx.get(f"{base}/api/flow_runs/{record.prefect_flow_run_id}").json()
    assert flow_run["state_type"] == "COMPLETED"
    artifacts = httpx.post(f"{base}/api/artifacts/filter", json={"artifacts": {"key": {"any_": ["leaderboard-09-silu"]}}})
    artifact = artifacts.json()[0]
    assert artifact["flow_run_id"] == record.prefect_flow_run_id
    with browser(tmp_path / "profile") as context:
        page = context.new_page()
        seen = watch(page)
        failed: list[str] = []
        page.on("response", lambda r: failed.append(urlparse(r.url).path) if r.status >= 400 else None)
        page.goto(f"{base}/runs/flow-run/{flow_run['id']}")
        page.get_by_text(flow_run["name"]).first.wait_for(timeout=60_000)  # rendered by the UI's JavaScript
        page.get_by_text("Completed").first.wait_for()
        page.get_by_text(f"run {record.run_id}: 09_silu on cpu").first.wait_for()  # the flow's own log line
        page.get_by_text("Artifacts", exact=True).first.click()
        page.get_by_text("leaderboard-09-silu").first.wait_for()
        page.goto(f"{base}/artifacts/artifact/{artifact['id']}")
        page.get_by_text("leaderboard-09-silu").first.wait_for(timeout=60_000)
        page.get_by_text(f"run {record.run_id}").first.wait_for()  # the artifact's description
        cells = page.locator("table td")
        cells.first.wait_for()
        shown = cells.all_inner_texts()
        assert {"eager", record.best_candidate_id} <= set(shown)
    fetched = {urlparse(u).netloc for u in seen.requests if not u.startswith(("data:", "blob:"))}
    assert fetched == {urlparse(base).netloc}, seen.requests  # the UI bundle fetches nothing from elsewhere
    assert set(failed) <= KNOWN_404 and not [e for e in seen.errors if "Failed to load resource" not in e]
