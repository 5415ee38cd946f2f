"""A deadline for a stretch of candidate code inside a stage process, sized to that work rather than to the stage.

The stage's own deadline (its request's timeout_s, enforced by the executor from outside) covers toolchains that may
take minutes; candidate code whose work takes seconds (an import, a forward on meta tensors) gets its own: past it,
`CandidateFault("timeout")` is raised in the main thread, where a Python-level wait (time.sleep, a loop) ends.
Time spent in the toolchain on the candidate's behalf (Triton compiling its kernels) is not counted; code stuck in
C past the deadline is left to the stage's deadline.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kernelflow.stages.errors import CandidateFault

TICK_S = 0.5  # how often the clock is read once the deadline is near


@contextlib.contextmanager
def deadline(seconds: float, what: str, excluded: Callable[[], float] = lambda: 0.0) -> Iterator[None]:
    """Raise CandidateFault("timeout") in the code inside once it has run `seconds`, not counting `excluded()`
    seconds (spent in the toolchain meanwhile). Main thread only (signals); elsewhere the code runs without it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    started = time.monotonic()

    def ran() -> float:
        return time.monotonic() - started - excluded()

    def on_alarm(signum: int, frame: Any) -> None:
        left = seconds - ran()
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, max(left, TICK_S))
            return
        raise CandidateFault("timeout", f"{what} ran past its {seconds:g} s deadline (work that takes seconds)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
