"""The harness out of the candidate's reach: every stretch of candidate code runs inside a checked section
(docs/INTEGRITY.md).

A `Guard` is made before the candidate's module is imported. It remembers what the harness relies on: the
functions and classes of torch, time, the stage modules (the timer, the statistics, the judge), Triton's launch
path; the math and determinism settings; the ATen kernels registered from Python. Each section (the import, the
constructor, every forward call, timed or not) then checks, when the candidate's code returns:
- nothing it relies on was replaced, here or since the last section (a finalizer or a thread may run candidate code
  between sections). The one exception is torch patching itself (torch.compile's dynamo wraps a few functions),
  recognized by a wrapper whose code is torch's and which holds the function it replaced;
- no setting changed (TF32, reduced-precision reductions, deterministic mode, NaN-filled allocations, default
  dtype, grad mode);
- no ATen operator got a Python implementation (the reference would run it);
- no thread started inside is still running, other than an idle pool worker of library code (its work would
  escape the timed region); threads started through `_thread` directly, which threading.enumerate does not list,
  are tracked by stages/harness/audit.py;
- the audit hook (stages/harness/audit.py) recorded no network use, no write outside the work dir, no secret read.
Any of these fails the candidate as `cheat`, naming the section and what changed. The section also counts the
kernels the code launched (stages/harness/launches.py) for the caller's launch census, and is a phase of candidate
code (stages/phase.py): a stage process that ends inside it is said to have been ended by the candidate, during it.

All of this is in-process and best effort against code that can read the guard's own memory; it raises the cost of
cheating and records the attempt. Isolation is the executor's: its own process in a sandbox (docs/INTEGRITY.md says what each executor prevents).
"""

from __future__ import annotations

import _thread
import builtins
import contextlib
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelflow.stages import phase
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness import audit, launches

TORCH_DIR = str(Path(torch.__file__).resolve().parent)
PRECISION = ("allow_tf32 (cuda matmul)", "allow_tf32 (cudnn)", "float32 matmul precision",
             "fp16 reduced-precision reductions", "bf16 reduced-precision reductions", "TRITON_F32_DEFAULT")
HARNESS_PACKAGES = ("kernelflow.stages", "kernelflow.artifacts")  # the harness: every module under these is watched
TRITON_CLASSES = (("triton.runtime.jit", "JITFunction"), ("triton.runtime.jit", "KernelInterface"),
                  ("triton.runtime.interpreter", "InterpretedFunction"), ("triton.compiler.compiler", "CompiledKernel"),
                  ("triton.runtime.autotuner", "Autotuner"))


_MISSING = object()


def _env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _pop_modes(n: int, length: Callable[[], int], pop: Callable[[], Any]) -> None:
    while length() > n:
        pop()


def _trace(trace: Any, profile: Any) -> None:
    sys.settrace(trace)
    sys.setprofile(profile)


_matmul, _cudnn = torch.backends.cuda.matmul, torch.backends.cudnn


def _set_cudnn(enabled: bool, benchmark: bool, deterministic: bool) -> None:
    _cudnn.enabled, _cudnn.benchmark, _cudnn.deterministic = enabled, benchmark, deterministic


def deterministic(mode: bool, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms without its `import torch._inductor.config`, which loads dynamo: seconds of
    every stage process, and with the census's own path to dynamo (stages/harness/library_policy.py) most of a verify
    call's time (measured: docs/LOG.md, "Stage process overhead").
    Inductor's own flag is set too when inductor is loaded already; code that loads it later compiles with its
    default, and a verification still catches what that changes (a second call disagreeing is `nondeterministic`)."""
    if (config := sys.modules.get("torch._inductor.config")) is not None:
        config.deterministic = mode  # type: ignore[attr-defined]
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


# name -> (read it, put a value back); precision first, in PRECISION's order
SETTINGS: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {
    PRECISION[0]: (lambda: _matmul.allow_tf32, lambda v: setattr(_matmul, "allow_tf32", v)),
    PRECISION[1]: (lambda: _cudnn.allow_tf32, lambda v: setattr(_cudnn, "allow_tf32", v)),
    PRECISION[2]: (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    PRECISION[3]: (lambda: _matmul.allow_fp16_reduced_precision_reduction,
                   lambda v: setattr(_matmul, "allow_fp16_reduced_precision_reduction", v)),
    PRECISION[4]: (lambda: _matmul.allow_bf16_reduced_precision_reduction,
                   lambda v: setattr(_matmul, "allow_bf16_reduced_precision_reduction", v)),
    PRECISION[5]: (lambda: os.environ.get("TRITON_F32_DEFAULT"), lambda v: _env("TRITON_F32_DEFAULT", v)),
    "deterministic algorithms": (lambda: (torch.are_deterministic_algorithms_enabled(),
                                          torch.is_deterministic_algorithms_warn_only_enabled()),
                                 lambda v: deterministic(*v)),
    "NaN-filled allocations": (lambda: torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
                               lambda v: setattr(torch.utils.deterministic, "fill_uninitialized_memory", v)),
    "cudnn": (lambda: (_cudnn.enabled, _cudnn.benchmark, _cudnn.deterministic), lambda v: _set_cudnn(*v)),
    "default dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
    "torch function modes": (torch._C._len_torch_function_stack,
                             lambda n: _pop_modes(n, torch._C._len_torch_function_stack,
                                                  torch._C._pop_torch_function_stack)),
    "dispatch modes": (torch._C._len_torch_dispatch_stack,
                       lambda n: _pop_modes(n, torch._C._len_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack)),
    "trace and profile functions": (lambda: (sys.gettrace(), sys.getprofile()), lambda v: _trace(*v)),
}


def settings() -> dict[str, Any]:
    """The math and determinism settings the harness chose, by name."""
    return {name: read() for name, (read, _) in SETTINGS.items()}


def _restore(before: dict[str, Any]) -> list[str]:
    """Put back every setting that differs from `before`; returns what changed, with both values."""
    after, changed = settings(), []
    for name, value in before.items():
        if after[name] != value:
            changed.append(f"{name} from {value!r} to {after[name]!r}")
            with contextlib.suppress(Exception):
                SETTINGS[name][1](value)
    return changed


def _namespaces() -> Iterator[tuple[str, Any, bool]]:
    """(label, module or class, harness?) for everything watched. Functions, classes and modules are compared by
    identity everywhere; the harness's containers by content and its public plain values too, and so are torch.nn's
    global module hooks. Elsewhere plain values and containers change honestly (torch.cuda._initialized, Triton's
    caches), and so do the harness's private counters."""
    for m in (time, torch, torch.cuda, torch.nn.functional, torch.library, builtins, math, random, threading, _thread):
        yield m.__name__, m, False
    yield "torch.nn.modules.module", torch.nn.modules.module, True
    classes: list[type] = [torch.Tensor, torch.nn.Module, torch.cuda.Event, torch.cuda.Stream, TorchDispatchMode]
    classes += [c for c in vars(torch.nn).values() if isinstance(c, type) and issubclass(c, torch.nn.Module)]
    for module_name, name in TRITON_CLASSES:
        if (cls := getattr(sys.modules.get(module_name), name, None)) is not None:
            classes.append(cls)
    for c in classes:
        yield f"{c.__module__}.{c.__qualname__}", c, False
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(tuple(f"{p}." for p in HARNESS_PACKAGES)):
            yield name, module, True
            for c in [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == name]:
                yield f"{name}.{c.__qualname__}", c, True


def _code(value: Any) -> bool:
    return callable(value) or isinstance(value, type(os) | property)  # a property: the census's CompiledKernel.run


def _frozen(value: Any) -> Any:
    """A container's content, compared item by item (an in-place edit counts); None for anything else."""
    if isinstance(value, dict):
        return list(value.items())
    return list(value) if isinstance(value, list | set) else None


def _watched(label: str, name: str, value: Any, harness: bool) -> bool:
    if label == "torch.nn.modules.module":
        return name.startswith("_global_")
    return _code(value) or (harness and not name.startswith("_"))


Entries = dict[str, tuple[Any, Any]]


def snapshot() -> dict[str, tuple[Any, Entries]]:
    """label -> (the module or class, name -> (value, a container value's content)) for everything watched."""
    return {label: (owner, {k: (v, _frozen(v) if harness else None) for k, v in list(vars(owner).items())
                            if _watched(label, k, v, harness)})
            for label, owner, harness in _namespaces()}


def _put_back(owner: Any, name: str, old: tuple[Any, Any]) -> None:
    """The value the name had, and a container's old content (best effort: some attributes refuse)."""
    value, content = old
    with contextlib.suppress(Exception):
        if vars(owner).get(name, _MISSING) is not value:
            setattr(owner, name, value)
        if isinstance(value, dict):
            value.clear()
            value.update(content)
        elif isinstance(value, list):
            value[:] = content
        elif isinstance(value, set):
            value.clear()
            value.update(content)


def _same(value: Any, old: tuple[Any, Any]) -> bool:
    if value is not old[0]:
        return False
    if old[1] is None:
        return True
    try:
        now = _frozen(value)
        return len(now) == len(old[1]) and all(x is y or bool(x == y) for x, y in zip(now, old[1], strict=True))
    except Exception:  # contents that do not compare (tensors): identity only
        return True


def _torch_patching_itself(old: Any, new: Any) -> bool:
    """A wrapper torch installed over its own function (dynamo's wrappers of manual_seed, Module.__init__)."""
    code = getattr(new, "__code__", None)
    if code is None or not code.co_filename.startswith(TORCH_DIR):
        return False
    cells = [c.cell_contents for c in getattr(new, "__closure__", None) or () if c.cell_contents is not None]
    return getattr(new, "__wrapped__", None) is old or any(c is old for c in cells)


def _aten_impls() -> frozenset[str]:
    return frozenset(k for k in getattr(torch.library, "_impls", ()) if k.startswith("aten/"))


IDLE = frozenset({"wait", "get", "acquire", "_wait_for_tstate_lock", "select", "poll"})


def _idle(thread: threading.Thread) -> bool:
    """A thread that waits in library code with none of the candidate's code on its stack (a pool's idle worker,
    e.g. torch.compile's): not work escaping the timed region. Any other thread is."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None or frame.f_code.co_name not in IDLE:
        return False
    while frame is not None:
        if not audit.library_code(frame):
            return False
        frame = frame.f_back
    return True


@dataclass
class Call:
    """What one section saw: the kernels launched inside it (stages/harness/launches.py)."""

    launches: int = 0


class Guard:
    """Checks every section of candidate code in one stage call. Make it before the candidate is imported."""

    def __init__(self, workdir: str | Path, source: str):
        launches.install_counters(triton="triton" in source)
        audit.install_hook()
        Path(workdir).mkdir(parents=True, exist_ok=True)  # the harness's to make, before candidate code runs
        self.watch = audit.Watch(workdir)
        self.reference = snapshot()
        self.aten = _aten_impls()

    def _replaced(self) -> list[str]:
        """Watched names whose value changed since the reference, each put back; torch patching itself is adopted
        instead."""
        changed = []
        for label, (owner, entries) in self.reference.items():
            ns = vars(owner)
            for name, old in entries.items():
                value = ns.get(name, _MISSING)
                if _same(value, old):
                    continue
                if old[1] is None and _torch_patching_itself(old[0], value):
                    entries[name] = (value, None)
                    continue
                changed.append(name if label == "builtins" else f"{label}.{name}")
                _put_back(owner, name, old)
        return changed

    def _fault(self, what: str, threads: set[threading.Thread | object], before: dict[str, Any],
               attempts: int) -> str | None:
        """Why the section was a cheat, or None; whatever it changed is put back either way."""
        why = []
        if tried := list(dict.fromkeys(self.watch.attempts[attempts:])):
            why.append(f"tried to {'; '.join(tried)}")
        if replaced := self._replaced():
            why.append(f"replaced {', '.join(replaced[:8])} (torch, the timer and the harness must stay as they are)")
        if changed := _restore(before):
            precision = any(c.startswith(PRECISION) for c in changed)
            why.append(("precision downgrade: " if precision else "") + "changed " + ", ".join(changed))
        if aten := sorted(_aten_impls() - self.aten):
            why.append(f"registered its own kernels for ATen operators ({', '.join(aten)}), which the reference runs")
        alive = [t.name for t in threading.enumerate() if t not in threads and t.is_alive() and not _idle(t)
                 and not self.watch.harness_started(t)]
        alive += [f"{name} (started through _thread)" for token, (starter, name) in audit.raw_threads().items()
                  if token not in threads and starter not in self.watch.harness]
        if alive:
            why.append(f"left {len(alive)} thread(s) running ({', '.join(alive)}) after it returned: "
                       "work done there is outside the timed region")
        return "; ".join(why) or None

    @contextlib.contextmanager
    def section(self, what: str, timed: bool = False) -> Iterator[Call]:
        """Run candidate code inside; raises CandidateFault('cheat') naming `what` if it broke a rule. A timed
        section does not watch environment reads (stages/harness/audit.py: that costs every Triton launch a little); the
        same code's untimed calls do."""
        if replaced := self._replaced():  # changed while no candidate code was meant to run (put back)
            raise CandidateFault("cheat", f"before {what}: {', '.join(replaced[:8])} replaced between calls")
        call, threads, before = Call(), {*threading.enumerate(), *audit.raw_threads()}, settings()
        attempts, launched = len(self.watch.attempts), launches.count()
        try:
            with phase.running(what, candidate=True), self.watch.active(environment=not timed):
                yield call
        except Exception as error:  # a cheat outranks the error it caused (an attempt the hook refused raises)
            if (why := self._fault(what, threads, before, attempts)) is not None:
                raise CandidateFault("cheat", f"{what}: {why}") from error
            raise
        call.launches = launches.count() - launched
        if (why := self._fault(what, threads, before, attempts)) is not None:
            raise CandidateFault("cheat", f"{what}: {why}")
