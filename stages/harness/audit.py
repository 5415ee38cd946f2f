"""What candidate code does to the outside world: network, files, secrets (docs/INTEGRITY.md).

Python raises an audit event when code opens a file, connects a socket, looks up a host, renames or removes a file
(sys.addaudithook). One hook per process, installed on first use, acts only while a `Watch` is active: the harness
activates one around every stretch of candidate code (stages/harness/integrity.py). It judges the events of the thread
that runs the candidate and of threads started while a watch was active; the harness's other threads (a Prefect
client talking to its API, a log writer) are left alone. While active, the hook blocks (PermissionError) and
records:
- network: socket connect, bind, sendto and host-name lookups;
- writes outside the allowed places (the work dir, Triton's and torch's caches and extension builds, tempfile's
  own names in the temp dir unless the work dir lies in one) and writes to the stage's own files (request,
  result, log, phase);
- reads of credential files and of /proc/*/environ;
- processes the candidate's own code starts (subprocess, os.system, exec, spawn, fork): the first caller outside
  the standard library is the candidate's, not a library's (Triton's ptxas, torch.compile's workers).
While active (timed calls excepted), os.environ is a twin over the same variables that watches reads: a
secret-named variable read by code outside the Python installation and this project (the candidate's code, not
torch's) is recorded and reads as absent. Outside a section os.environ is Python's own.

What this cannot see: C code (ctypes, an extension) calling the OS directly, and what child processes do. Those are
the process sandbox's to stop (rlimits, network namespace, Landlock, scrubbed environment), not an in-process hook's.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import re
import sys
import sysconfig
import tempfile
import threading
import traceback
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from kernelflow.stages import caches
from kernelflow.stages.harness.static_checks import SECRET_FILES

# the names stages/executors/run.py keeps out of a stage's environment
SECRET_ENV = re.compile(r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|^OPENAI_|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^HF_|"
                        r"^PREFECT_API", re.IGNORECASE)
NETWORK = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
                     "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr"})
# event -> (position of a path it writes, position of the directory descriptor that path is relative to or None)
WRITES = {"os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.rename": ((0, 2), (1, 3)), "os.mkdir": ((0, 2),),
          "os.symlink": ((1, 2),), "os.link": ((1, 3),), "os.truncate": ((0, None),), "os.chmod": ((0, 2),),
          "os.chown": ((0, 3),), "os.utime": ((0, 3),), "shutil.rmtree": ((0, None),),
          "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),), "shutil.move": ((0, None), (1, None))}
# process-starting events; refused when the candidate's own code asked (a library, e.g. Triton's ptxas or
# torch.compile's workers, may start processes on its behalf)
PROCESSES = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                       "os.forkpty", "pty.spawn"})
STDLIB = sysconfig.get_paths()["stdlib"]
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
TEMP_NAMES = ("tmp", "torchinductor_")  # tempfile's own names (Triton's ptxas files), inductor's cache
STAGE_FILES = re.compile(r"\.(request\.json|result\.json|log|phase)$")
LIBRARY_ROOTS = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)} |
                      {str(Path(__file__).resolve().parents[2] / d) for d in ("stages", "artifacts", "flows", "kernelflow")})


_current: Watch | None = None
_busy = threading.local()  # the hook's own calls raise events too (sys._getframe): not re-entered


def _real(path: Any, dir_fd: Any = None) -> str | None:
    """The absolute path, a relative one taken from `dir_fd` when given (shutil.rmtree removes entries that way)."""
    if isinstance(path, int) or path is None:
        return None  # a file descriptor: opened (and checked) before
    path = os.fsdecode(os.fspath(path))
    if isinstance(dir_fd, int) and not os.path.isabs(path):
        try:
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            return "<relative to an unknown directory>"  # not in an allowed place, so refused
    return os.path.realpath(path)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Watch:
    """The rules for one stage call: where the candidate may write, and what it attempted so far."""

    def __init__(self, workdir: str | Path):
        self.workdir = os.path.realpath(workdir)
        self.allowed = [self.workdir, *(os.path.realpath(place) for place in caches.writable(os.environ))]
        self.temp = os.path.realpath(tempfile.gettempdir())
        self.attempts: list[str] = []
        self.born: set[int] = set()  # threads started while active: the candidate's, whatever they do later
        self.harness: set[int] = set()  # threads that were running when it became active, its own excepted

    def may_write(self, path: str) -> bool:
        """Opening the temp dir itself for writing is allowed by `on_event`: only an unnamed file comes of it
        (O_TMPFILE, tempfile.TemporaryFile, which torch.compile's max-autotune uses), gone with its descriptor;
        its size is the process limits' business."""
        if path == os.devnull:
            return True
        if os.path.dirname(path) == self.workdir and STAGE_FILES.search(os.path.basename(path)):
            return False  # the stage's own request, result, log, phase (stages/executors/run.py); not any *.log below
        if any(_inside(path, root) for root in self.allowed):
            return True
        if not _inside(path, self.temp):
            return False
        first = os.path.join(self.temp, os.path.relpath(path, self.temp).split(os.sep)[0])
        return os.path.basename(first).startswith(TEMP_NAMES) and not _inside(self.workdir, first)

    def refuse(self, what: str) -> None:
        """Blocked and recorded; the stack goes to the stage log (kept as a blob) to show whose code tried."""
        self.attempts.append(what)
        print(f"kernelflow audit: refused to {what}", file=sys.stderr)
        traceback.print_stack(limit=16, file=sys.stderr)
        raise PermissionError(f"kernelflow: a candidate may not {what}")

    def on_event(self, event: str, args: tuple[Any, ...]) -> None:
        if event in NETWORK:
            where = args[1] if event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg") else args[:2]
            self.refuse(f"open network connections ({event} {where!r})")
        elif event in PROCESSES:
            if _asked_by_candidate():
                what = args[0] if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn") else \
                    args[1] if event == "os.spawn" else ""
                self.refuse(f"start a process ({event} {what!r})".replace(" ''", ""))
        elif event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if (path := _real(path)) is None:
                return
            writes = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & WRITE_FLAGS)
            if writes and not self.may_write(path) and path != self.temp:  # see `may_write`
                self.refuse(f"write {path} (outside its work dir, or a file of the harness)")
            if not writes and SECRET_FILES.search(path):
                self.refuse(f"read {path} (secrets)")
        elif event in WRITES:
            for i, fd in WRITES[event]:
                at = args[fd] if fd is not None and fd < len(args) else None
                if i < len(args) and (path := _real(args[i], at)) is not None and not self.may_write(path):
                    self.refuse(f"{event.split('.')[-1]} {path} (outside its work dir, or a file of the harness)")

    @contextlib.contextmanager
    def active(self, environment: bool = True) -> Iterator[None]:
        """Candidate code runs inside: events are checked, bytecode caches are not written (site-packages stays
        untouched), and with `environment` os.environ is the watched one (a Python layer on every read, so timed
        calls go without it: Triton reads its knobs from the environment on every launch)."""
        global _current
        install_hook()
        running = _thread_ids()
        self.harness = running - self.born - {threading.get_ident()}
        previous, bytecode, env = _current, sys.dont_write_bytecode, os.environ
        _current, sys.dont_write_bytecode = self, True
        os.environ = _watched[0] if environment else _plain[0]  # noqa: B003 (the same variables, reads watched)
        try:
            yield
        finally:
            _current, sys.dont_write_bytecode = previous, bytecode
            os.environ = env  # noqa: B003
            self.born |= {t.ident for t in threading.enumerate() if t.ident is not None and t.ident not in running
                          and not self.harness_started(t)}

    def harness_started(self, thread: threading.Thread) -> bool:
        """Whether a harness thread started this one (torch.compile's pool reader starts a timer thread when a late
        compile result arrives, at any moment): the harness's, not the candidate's. A thread started any other way
        than threading.Thread.start is not known here, so it counts as the candidate's."""
        return _started_by.get(thread) in self.harness


def _thread_ids() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


_started_by: weakref.WeakKeyDictionary[threading.Thread, int | None] = weakref.WeakKeyDictionary()


def _starter(frame: FrameType | None) -> int | None:
    """The starting thread's ident, or None when candidate code is on its stack from `frame` up: a harness thread
    that was made to run the candidate's code (a callback it was handed) starts the candidate's threads, not its
    own."""
    while frame is not None and library_code(frame):
        frame = frame.f_back
    return threading.get_ident() if frame is None else None


def _recording_starter(start: Any) -> Any:
    """threading.Thread.start, noting which thread started each thread (Python raises no audit event for it)."""
    @functools.wraps(start)
    def recorded(self: threading.Thread) -> None:
        _started_by[self] = _starter(sys._getframe(1))
        start(self)

    return recorded


_raw: dict[object, tuple[int | None, str]] = {}  # a running raw thread's token -> (its starter, its function's name)


def raw_threads() -> dict[object, tuple[int | None, str]]:
    """The running threads started through _thread (or threading's private alias of it) rather than Thread.start:
    threading.enumerate does not list them, so the thread check asks here."""
    return dict(_raw)


def _recording_raw(start_new: Any) -> Any:
    """_thread.start_new_thread (or start_joinable_thread), with the thread kept in `_raw` from before it starts
    until its function returns. Thread.start's own calls pass through: it records those threads itself."""
    @functools.wraps(start_new)
    def recorded(function: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(getattr(function, "__self__", None), threading.Thread):
            return start_new(function, *args, **kwargs)
        token = object()

        def run(*a: Any, **k: Any) -> Any:
            try:
                return function(*a, **k)
            finally:
                _raw.pop(token, None)

        _raw[token] = (_starter(sys._getframe(1)), getattr(function, "__qualname__", repr(function)))
        try:
            return start_new(run, *args, **kwargs)
        except BaseException:
            _raw.pop(token, None)
            raise

    return recorded


def _hook(event: str, args: tuple[Any, ...]) -> None:
    watch = _current
    if watch is None or getattr(_busy, "on", False) or threading.get_ident() in watch.harness or \
            watch.harness_started(threading.current_thread()):
        return  # the harness's other threads (a Prefect client, its log writer) go on as before
    _busy.on = True
    try:
        watch.on_event(event, args)
    finally:
        _busy.on = False


def library_code(frame: FrameType) -> bool:
    """Whether the frame runs code of the Python installation (torch, Triton, the standard library) or this project's;
    else it is the candidate's (its file, or code it compiled at run time)."""
    name = frame.f_code.co_filename
    return name.startswith("<frozen ") or (os.path.isabs(name) and name.startswith(LIBRARY_ROOTS))


def _asked_by_candidate() -> bool:
    """Whether the first caller outside the standard library (subprocess, os, multiprocessing, ...) is the
    candidate's code, not a library's."""
    frame: FrameType | None = sys._getframe(3)
    while frame is not None and _stdlib(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is not None and not library_code(frame)


def _stdlib(name: str) -> bool:
    return name.startswith("<frozen ") or (name.startswith(STDLIB) and "-packages" not in name)


def _from_candidate() -> bool:
    """Whether the code reading the environment is the candidate's: the first caller outside os and collections.abc."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") in ("os", "_collections_abc", "collections.abc"):
        frame = frame.f_back
    return frame is not None and not library_code(frame)


_secret_names: dict[str, bool] = {}  # name -> matches SECRET_ENV (Triton reads its knobs on every launch: keep it cheap)


def _secret(key: Any) -> bool:
    if (known := _secret_names.get(key)) is None:
        known = _secret_names[key] = isinstance(key, str) and SECRET_ENV.search(key) is not None
    return known


class _WatchedEnviron(os._Environ):
    def __getitem__(self, key: Any) -> Any:
        watch = _current
        if watch is not None and _secret(key) and not getattr(_busy, "on", False) and \
                threading.get_ident() not in watch.harness:
            _busy.on = True
            try:
                mine = _from_candidate()
            finally:
                _busy.on = False
            if mine:
                watch.attempts.append(f"read the secret-named environment variable {key}")
                raise KeyError(key)
        return super().__getitem__(key)


_plain: list[Any] = []  # os.environ as Python made it
_watched: list[Any] = []  # a _WatchedEnviron over the same variables


def install_hook() -> None:
    """The audit hook, once per process (an audit hook cannot be removed), and the watched twin of os.environ."""
    if _plain:
        return
    sys.addaudithook(_hook)
    threading.Thread.start = _recording_starter(threading.Thread.start)  # type: ignore[method-assign]
    for owner, name in ((_thread, "start_new_thread"), (_thread, "start_new"), (_thread, "start_joinable_thread"),
                        (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        if hasattr(owner, name):  # the names differ across Python versions
            setattr(owner, name, _recording_raw(getattr(owner, name)))
    env: Any = os.environ
    _plain.append(env)
    _watched.append(_WatchedEnviron(env._data, env.encodekey, env.decodekey, env.encodevalue, env.decodevalue))
