"""What a process that calls run_stage starts ends with it, however it ends (SIGKILL included): its stage processes,
every process they started, and its stage containers.

A stage process dies with the thread that started it (PR_SET_PDEATHSIG), but a process it started does not, and a
container belongs to the Docker engine, not to its owner. So each carries its owner (stages/executors/marks.py: a
process in its environment, a container in a label), and an owner's first stage call starts the owner's guard:
`python -m kernelflow.stages.executors.owner_guard OWNER`, in a session of its own (a Ctrl-C to the run does not
reach it). The guard reads its stdin, a pipe that only the owner holds, so the kernel closes it when the owner ends;
then the guard SIGKILLs every process on this host that carries the owner's mark, removes the owner's containers,
and exits. On start, and again then, it does the same for the owners on this host that have ended: what an owner
left whose guard was killed with it is ended by the next guard on this host.

Containers are removed where the Docker engine answers. An owner that created containers says so on the pipe
(CONTAINERS): only then is an engine that does not answer a warning; other owners' guards try quietly.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from functools import cache
from pathlib import Path
from typing import Any

from kernelflow.stages.executors.marks import CALL_MARK, OWNER_LABEL, OWNER_MARK, end, ended, owner

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = b"containers\n"  # an owner's line to its guard: it has created stage containers
_lock = threading.Lock()
_said: set[tuple[int, bytes]] = set()  # (owner's pid, line) said to its guard


def ensure_guard(containers: bool = False) -> None:
    """Start this process's guard, once; `containers`: tell it that this process creates stage containers."""
    with _lock:
        guard = _guard(os.getpid())  # a forked child is an owner of its own
        if containers and (os.getpid(), CONTAINERS) not in _said and guard.stdin is not None:
            with contextlib.suppress(OSError):  # a guard that has ended cannot be told
                guard.stdin.write(CONTAINERS)
                guard.stdin.flush()
            _said.add((os.getpid(), CONTAINERS))


@cache
def _guard(pid: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in (OWNER_MARK, CALL_MARK)}  # the guard is no stage process
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", "kernelflow.stages.executors.owner_guard", owner()],
                            stdin=subprocess.PIPE, start_new_session=True, env=env)


def remove_orphans(client: Any, also: str | None = None) -> None:
    """Remove the stage containers whose owner has ended, and those of owner `also`."""
    import docker

    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True):
        label = container.labels.get(OWNER_LABEL, "")
        if label == also or ended(label):
            with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile
                container.remove(force=True)


def clean_up(also: str | None = None) -> str | None:
    """End the processes and remove the containers of the owners on this host that have ended, and of owner `also`;
    None, or why the containers could not be looked at."""
    end(OWNER_MARK, lambda label: label == also or ended(label))
    import docker
    import requests

    try:
        client = docker.from_env()
        try:
            remove_orphans(client, also)
        finally:
            client.close()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:  # no engine, or it failed
        return f"{type(e).__name__}: {e}"
    return None


def guard(of: str) -> int:
    """The guard process of owner `of`."""
    clean_up()
    containers = False
    for line in sys.stdin.buffer:  # the loop ends once `of` has ended: the pipe's only writer is gone
        containers = containers or line == CONTAINERS
    if (failed := clean_up(also=of)) is not None and containers:
        print(f"warning: the stage guard of {of} could not remove its containers: {failed}", file=sys.stderr,
              flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(guard(sys.argv[1]))
