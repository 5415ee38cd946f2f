"""The local Prefect server of a command that runs flows with no Prefect API configured: a child process that ends
with the process that started it.

The server is `python -m kernelflow.local_server`. Before it serves, it asks the kernel for SIGKILL when its parent
ends (PR_SET_PDEATHSIG), so a run killed in any way, SIGKILL included, takes it along. It runs in a session of its
own, so a Ctrl-C in the terminal reaches the run (which then records how it ended) and not the server. It serves
what Prefect's own temporary server serves (`prefect.server.api.server.create_app(ephemeral=True)` under uvicorn: no
UI, the ephemeral set of services, the database of $PREFECT_HOME) on a loopback socket the parent bound, so no port
is raced for. The parent sets PREFECT_API_URL to it before Prefect is imported, and stops it when it exits (SIGTERM,
SIGKILL after STOP_GRACE_S).

Left as they are: an API that is configured (PREFECT_API_URL in the environment or in the active Prefect profile),
a Prefect whose ephemeral mode is off (it then says itself that it needs an API), and a process that imported
Prefect already (its settings are fixed by then: an embedding caller such as a test harness configured them).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import kernelflow
from kernelflow.stages.errors import InfrastructureError

PR_SET_PDEATHSIG = 1
NOT_NEEDED_EXIT = 64  # the server's exit status when Prefect's settings name an API or forbid a local server
STOP_GRACE_S = 5.0  # from SIGTERM to SIGKILL when the parent stops its server at exit
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def ensure(startup_s: float) -> None:
    """Point Prefect at a local server that ends with this process, started and answering within `startup_s`
    seconds, unless the rules above leave Prefect as it is. Raises InfrastructureError when the server does not
    answer in time or exits first (its own output is on stderr)."""
    if "PREFECT_API_URL" in os.environ or "prefect" in sys.modules:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/api"
        path = os.pathsep.join(filter(None, [str(Path(kernelflow.__file__).parents[1]), os.environ.get("PYTHONPATH")]))
        server = subprocess.Popen([sys.executable, "-m", "kernelflow.local_server", str(os.getpid()), str(sock.fileno())],
                                  pass_fds=[sock.fileno()], start_new_session=True, env=os.environ | {"PYTHONPATH": path})
    atexit.register(stop, server)
    deadline = time.monotonic() + startup_s
    while not answers(url):
        if (status := server.poll()) == NOT_NEEDED_EXIT:
            return
        if status is not None:
            raise InfrastructureError(f"the local Prefect server exited with status {status} before it answered")
        if time.monotonic() > deadline:
            raise InfrastructureError(f"the local Prefect server did not answer at {url} within {startup_s:g} s "
                                      "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")
        time.sleep(0.1)
    os.environ["PREFECT_API_URL"] = url
    os.environ.setdefault("PREFECT_UI_URL", "")  # it serves no UI: no "View at" links to it


def answers(url: str) -> bool:
    try:
        with _direct.open(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def serve(parent: int, fd: int) -> int:
    """The server process: dies with `parent`, then serves Prefect's API on the listening socket `fd` until
    stopped. NOT_NEEDED_EXIT when Prefect's settings name an API or forbid a local server."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the line above
        return 1
    os.environ["PREFECT_UI_ENABLED"] = "0"  # as Prefect's temporary server: the API alone
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        return NOT_NEEDED_EXIT
    import uvicorn
    from prefect.server.api.server import create_app

    uvicorn.Server(uvicorn.Config(create_app(ephemeral=True, final=True), log_level="error", lifespan="on")).run(
        sockets=[socket.socket(fileno=fd)])
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
