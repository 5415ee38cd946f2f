"""--max-minutes for the resumable GPU scripts (bench_gpu.py, agreement.py): a call is one chunk of a longer job,
and a problem starts only if it is expected to end inside the chunk, the longest problem so far in this call being
the estimate. Checking only the start let a call with --max-minutes 7 start a third problem at minute 6.6 and be
killed at the device's 10-minute limit with that problem's result lost (H200, 2026-12-01, docs/LOG.md)."""

from __future__ import annotations

import time
from collections.abc import Callable


class Chunk:
    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock, self.deadline = clock, clock() + minutes * 60
        self.longest: float = 0.0
        self.started: float | None = None

    def admits(self, name: str) -> bool:
        """True to start `name` now (the previous admitted problem counts as ended); False, with the reason printed,
        when the longest problem so far would run past the chunk."""
        now = self.clock()
        if self.started is not None:
            self.longest = max(self.longest, now - self.started)
        if now + self.longest > self.deadline:
            print(f"stopping before {name}: --max-minutes would pass (the longest problem so far took "
                  f"{self.longest:.0f} s); rerun with --skip-done to resume", flush=True)
            return False
        self.started = now
        return True
