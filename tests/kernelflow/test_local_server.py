"""A run's processes end with the run: `kernelflow optimize` SIGKILLed with its local Prefect server and a stage
process running leaves neither behind (kernelflow/local_server.py; stages/executors/sandbox.py for stage processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelflow.stages.executors.sandbox import descendants

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = str(ROOT / "problems" / "17_elementwise_chain.py")
SERVERS = ("kernelflow.local_server", "prefect.server.api.server")  # ours, or Prefect's own temporary server


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_a_sigkilled_optimize_leaves_no_server_or_stage_process_behind(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {
        "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    cmd = [sys.executable, "-m", "kernelflow.cli", "optimize", PROBLEM, "--device", "cpu", "--budget", "1",
           "--store", str(tmp_path / "store")]
    log = tmp_path / "optimize.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 240
        while True:  # the server answers (the flow runs) and a stage process is under way: kill it now
            tree = {pid: command_line(pid) for pid in descendants(proc.pid)}
            if any(s in c for c in tree.values() for s in SERVERS) and any("kernelflow.stages." in c
                                                                          for c in tree.values()):
                break
            assert proc.poll() is None, f"the run ended before the kill:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no server and stage process in time:\n{log.read_text()[-3000:]}"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)  # frozen, so the listing below is all it started
        tree = {pid: command_line(pid) for pid in descendants(proc.pid)}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while (alive := {pid: c for pid, c in tree.items() if running(pid)}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive, f"outlived the killed run: {alive}"
    finally:
        for pid in [proc.pid, *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_an_api_named_by_the_prefect_profile_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "profiles.toml").write_text('active = "remote"\n\n[profiles.remote]\n'
                                            'PREFECT_API_URL = "http://127.0.0.1:9/api"\n')
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(tmp_path)}
    script = ("import os\nfrom kernelflow.local_server import ensure\nensure(120)\n"
              "from prefect.settings import PREFECT_API_URL\nprint(os.environ.get('PREFECT_API_URL'), PREFECT_API_URL.value())")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["None", "http://127.0.0.1:9/api"], done.stdout + done.stderr
