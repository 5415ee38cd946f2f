"""The docker executor's stage containers end with the process that started them, however it ends (SIGKILL included).

A container belongs to the Docker engine, not to the process that created it: killed before it removes its
container, a run would leave it running (a hung candidate: for ever). So each container carries its owner in a label,
OWNER_LABEL = "HOST:PID:START" (START: the process's start time, so a later process that reuses the pid is not
taken for it), and the first container a process creates starts that process's guard:
`python -m kernelflow.stages.executors.container_guard OWNER`, in a session of its own (a Ctrl-C to the run does not
reach it). The guard reads its stdin, a pipe that only the owner holds, so the kernel closes it when the owner ends;
then the guard removes the owner's containers, and exits. On start, and again then, it also removes the containers
of owners on this host that have ended: a guard killed together with its owner (or a container whose creation
landed after its guard looked) is cleaned up by the next guard on this host.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path
from typing import Any

OWNER_LABEL = "org.kernelflow.owner"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
_lock = threading.Lock()


def started(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks after boot), or None when it has ended (a zombie included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def owner() -> str:
    """This process, as OWNER_LABEL names it."""
    return f"{socket.gethostname()}:{os.getpid()}:{started(os.getpid())}"


def ended(label: str) -> bool:
    """Whether the owner `label` names ran on this host and has ended (owners on other hosts are never judged)."""
    host, pid, start = (label.rsplit(":", 2) + ["", ""])[:3]
    return host == socket.gethostname() and pid.isdigit() and started(int(pid)) != start


def ensure_guard() -> None:
    """Start this process's guard, once."""
    with _lock:
        _guard()


@cache
def _guard() -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "kernelflow.stages.executors.container_guard", owner()],
                            stdin=subprocess.PIPE, start_new_session=True, env=env)


def remove_orphans(client: Any, also: str | None = None) -> None:
    """Remove the stage containers whose owner has ended, and those of owner `also`."""
    import docker

    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True):
        label = container.labels.get(OWNER_LABEL, "")
        if label == also or ended(label):
            with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile
                container.remove(force=True)


def guard(of: str) -> int:
    """The guard process of owner `of`."""
    import docker

    try:
        client = docker.from_env()
        remove_orphans(client)
        sys.stdin.buffer.read()  # returns once `of` has ended: the pipe's only writer is gone
        remove_orphans(client, also=of)
    except docker.errors.DockerException as e:
        print(f"warning: the stage container guard of {of} could not clean up: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(guard(sys.argv[1]))
