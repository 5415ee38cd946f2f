"""A helper process ends with the one that started it: `die_with_parent` as Popen's preexec_fn sets
PR_SET_PDEATHSIG, so a SIGKILLed caller leaves no helper running (stage processes get the same from their sandbox).
The signal comes when the thread that started the child ends: start it from a thread that waits for it."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1
# looked up in the parent: the forked child makes system calls only (a lookup there takes the loader's lock)
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent: int, status: int = 1) -> None:
    """In the forked child, before exec: SIGKILL when `parent` (os.getpid() of the caller, read before the fork)
    ends, and exit with `status` now if it already has."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(status)
