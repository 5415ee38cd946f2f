"""What a stage process is doing, kept where its executor reads it when the process ends without a result.

A stage process (stages/entry.py `stage_main`) keeps a phase file beside its result file (`verify.phase` beside
`verify.result.json`): one line of JSON, rewritten in place on entering and on leaving a phase. A phase is a stretch
of candidate code (every guarded section: stages/harness/integrity.py) or a step of the harness whose crash has a
meaning of its own (verify's held-out shape: a process that dies there is shape hard-coding, whatever code was
running when it died, since an out-of-bounds store can corrupt the heap long before the process aborts). Phases
nest; the file holds the open ones, outermost first. os._exit (posix._exit) is wrapped when the process starts,
before any guard takes its snapshot, so a call made while candidate code runs is named in the file before the
process ends; so is a SystemExit or KeyboardInterrupt that leaves candidate code. After that the file is left as it
is. Python raises no audit event for os._exit, and nothing else would tell the executor it was called.

When a stage process ends without a result, the executor (stages/executors/run.py) reads the file (`died`): with
candidate code running, the candidate ended the process, whatever its exit status (the harness's own INFRA_EXIT
included); inside a phase that carries a verdict, a crash gets that verdict's kind. Inline stages write no file.
The file is the harness's: the audit hook refuses a candidate's opening it (stages/harness/audit.py), but its
descriptor is open in the process, so a candidate could rewrite it through that; the executor accepts only the
verdict kinds of FailureKind from it, so a rewrite changes how a failure is named, never whether it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import posix
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, get_args

from kernelflow.stages.contracts import FailureKind

RESULT_SUFFIX = ".result.json"
_real_exit = os._exit
_fd: int | None = None  # the phase file, in a stage process
_open: list[dict[str, Any]] = []  # the open phases, outermost first
_ended: str | None = None  # how candidate code ended the process ("os._exit(0)"), once it has
_width = 0  # the longest line written


def path_for(result: str | Path) -> Path:
    """The phase file beside a stage's result file: verify.result.json -> verify.phase."""
    result = Path(result)
    return result.with_name(result.name.removesuffix(RESULT_SUFFIX) + ".phase")


def record(result: str | Path) -> None:
    """In a stage process, before the stage runs: keep the phase file beside `result`, and wrap os._exit."""
    global _fd, _ended, _width
    _fd, _ended, _width = os.open(path_for(result), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), None, 0
    os._exit = posix._exit = _exit
    _write()


def _write() -> None:
    """The open phases, as one line over the file (pwrite, padded to the longest line written so far: no truncate,
    whose audit event a section's hook would refuse)."""
    global _width
    if _fd is None:
        return
    line = json.dumps({"phases": _open, "ended": _ended}).encode()
    _width = max(_width, len(line))
    with contextlib.suppress(OSError):
        os.pwrite(_fd, line.ljust(_width) + b"\n", 0)


def _candidate_running() -> bool:
    return any(p["candidate"] for p in _open)


def _end(how: str) -> None:
    """Candidate code is ending the process: say how, and write nothing after it."""
    global _fd, _ended
    _ended = how
    _write()
    _fd = None


def _exit(status: int) -> NoReturn:
    """os._exit, named in the phase file when candidate code calls it."""
    if _candidate_running():
        _end(f"os._exit({status!r})")
    _real_exit(status)


@contextlib.contextmanager
def running(what: str, candidate: bool = False, verdict: tuple[FailureKind, str] | None = None) -> Iterator[None]:
    """Inside: candidate code (`candidate`), or a harness step whose crash is `verdict`: (kind, what the crash
    means). Outside a stage process (no file: an inline stage, maybe one of several threads) nothing is kept."""
    if _fd is None:
        yield
        return
    _open.append({"what": what, "candidate": candidate, "verdict": verdict})
    _write()
    ending = None
    try:
        yield
    except BaseException as e:
        if not isinstance(e, Exception):  # SystemExit, KeyboardInterrupt: the process is ending
            ending = f"{type(e).__name__}({', '.join(map(repr, e.args))})"
        raise
    finally:
        if ending is not None and _candidate_running():
            _end(ending)
        _open.pop()
        _write()


@dataclass(frozen=True)
class Died:
    """What a stage process was running when it ended without a result: its open phases, outermost first, each
    (what, candidate code?, verdict or None); and how candidate code ended it, where the file says."""

    phases: tuple[tuple[str, bool, tuple[str, str] | None], ...]
    ended: str | None

    @property
    def candidate(self) -> bool:
        return any(candidate for _, candidate, _ in self.phases)

    def verdict(self, kind: str, why: str) -> tuple[str, str]:
        """(kind, why) of the process's end (the executor's: "crash", "killed by signal SIGSEGV"), told with where it
        ended. A crash while candidate code ran is the candidate's ending the process; a crash inside a phase that
        carries a verdict gets that verdict. Any other kind (a deadline, a sandbox limit) keeps its own."""
        during = self.phases[-1][0]
        if kind != "crash":
            return kind, f"{why}, during {during}"
        if self.candidate:
            why = f"the candidate ended the process with {self.ended}" if self.ended else \
                f"the candidate ended the process ({why})"
        why = f"{why} during {during}"
        step = next((v for _, _, v in reversed(self.phases) if v is not None), None)
        return (step[0], f"{step[1]}: {why}") if step else (kind, why)


def _verdict(value: Any) -> tuple[str, str] | None:
    if isinstance(value, list) and len(value) == 2 and value[0] in get_args(FailureKind) and isinstance(value[1], str):
        return value[0], value[1][:1000]
    return None


def died(result: str | Path) -> Died | None:
    """The phases open when the stage process that was to write `result` ended; None when none was open (the
    harness's own code, or no file: an inline stage, a process that ended before it started the file)."""
    try:
        with open(path_for(result), encoding="utf-8", errors="replace") as f:
            record = json.loads(f.readline(1 << 16))
        phases = tuple((str(p["what"])[:500], p["candidate"] is True, _verdict(p.get("verdict")))
                       for p in record["phases"])
        ended = record.get("ended")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return Died(phases, str(ended)[:200] if ended is not None else None) if phases else None
