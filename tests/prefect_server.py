"""A real `prefect server start` for tests: its own PREFECT_HOME, a free port on the loopback, analytics off; a server
that does not start fails the test; stopped with its whole process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prefect_server(home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """(base URL, the environment that points a process at it)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"{base}/api",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                             str(port)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):  # not listening yet
                if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, env
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group a test started (start_new_session=True), SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):  # the group may have ended already
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
