"""Whose a stage process or container is: marks that find it again whatever became of the process that started it.

An owner is a process that calls run_stage, named "HOST:PID:START": HOST the host name and the owner's pid namespace
(`host()`: a process of another namespace on this host, a container's, is never judged by the pids seen here), START
the process's start time (a later process that reuses the pid is not taken for it). A stage container carries its owner in the label OWNER_LABEL. A
stage process carries two marks in its environment, which every process it starts inherits: OWNER_MARK, its owner,
and CALL_MARK, its stage call (a fresh id per call). They are read from /proc/PID/environ, so a process is found
whatever its parent, session or process group: in a session of its own, or orphaned, it still carries them.

What is read is the environment a process was started with, as its own memory holds it: a process started with an
environment without the marks, or one that overwrites them in its memory, is not found; nor is a process whose
environment this process may not read (another uid, or, for a caller without CAP_SYS_PTRACE, a process that made
itself non-dumpable outside a user namespace of ours).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

OWNER_LABEL = "org.kernelflow.owner"  # a stage container's label: its owner
OWNER_MARK = "KERNELFLOW_STAGE_OWNER"  # a stage process's environment: its owner
CALL_MARK = "KERNELFLOW_STAGE_CALL"  # a stage process's environment: its stage call


def started(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks after boot), or None when it has ended (a zombie included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def host() -> str:
    """This host and this process's pid namespace: "NAME/INODE" (NAME alone where /proc shows no namespace)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}/{namespace}"


def owner() -> str:
    """This process, as an owner."""
    return f"{host()}:{os.getpid()}:{started(os.getpid())}"


def ended(label: str) -> bool:
    """Whether the owner `label` names ran on this host, in this pid namespace, and has ended (other owners are never
    judged)."""
    where, pid, start = (label.rsplit(":", 2) + ["", ""])[:3]
    return where == host() and pid.isdigit() and started(int(pid)) != start


def carrying(mark: str, match: Callable[[str], bool]) -> set[int]:
    """The processes on this host, this one aside, whose environment has `mark` with a value that `match` accepts."""
    key, found = f"{mark}=".encode(), set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue  # ended meanwhile, or not ours to read
        if key in environ and any(item.startswith(key) and match(item[len(key):].decode(errors="replace"))
                                  for item in environ.split(b"\0")):
            found.add(int(name))
    return found


def end(mark: str, match: Callable[[str], bool]) -> set[int]:
    """SIGKILL to every process `carrying(mark, match)`, looked for again until no new one appears (a process being
    ended may have just started another, which carries the mark too); the processes signalled."""
    signalled: set[int] = set()
    while found := carrying(mark, match) - signalled:
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        signalled |= found
    return signalled
