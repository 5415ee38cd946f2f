"""Kernel launches per candidate call, counted from Python; and ghost replay (docs/INTEGRITY.md).

`install_counters()` wraps, once per process, the places a candidate launches kernels from Python: on a GPU the compiled
kernel's launcher (`CompiledKernel.run`), which every Triton launch reaches: the JIT's `kernel[grid](...)`, a
compiled kernel's `CompiledKernel[grid](...)`, and the launcher called directly, as the templates' lean launch does
(stages/templates/launch.py); the interpreter's InterpretedFunction.run (the same launch on CPU tensors); and the
functions of every extension that torch.utils.cpp_extension.load_inline / load returns (one call into the extension
counts as one launch: what the C++ launches inside it is not seen from here). `count()` is the running total. Inside
`ghost()` every Triton launch does nothing (and is not counted): a candidate whose output is still right without
its kernels computed it somewhere else.

The census is cheap (one Python call per launch), so it runs on every call, timed calls included, identically:
a candidate cannot tell a counted call from an uncounted one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from kernelflow.stages.errors import InfrastructureError

_launches = 0
_suppressed = 0  # Triton launches ghost() turned into no-ops
_ghost = False
_installed: set[str] = set()


def count() -> int:
    """Kernel launches (and extension calls) counted so far in this process."""
    return _launches


def suppressed() -> int:
    """Triton launches that ghost() turned into no-ops so far in this process."""
    return _suppressed


@contextlib.contextmanager
def ghost() -> Iterator[None]:
    """Triton launches do nothing while active (extension calls still run: their outputs cannot be faked)."""
    global _ghost
    _ghost = True
    try:
        yield
    finally:
        _ghost = False


def _launch(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One Triton launch: counted, or inside ghost() made a no-op."""
    global _launches, _suppressed
    if _ghost:
        _suppressed += 1
        return None
    _launches += 1
    return fn(*args, **kwargs)


def _counted_run(run: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(run)
    def launch(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if warmup:  # compiles only: no launch
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        return _launch(run, self, *args, grid=grid, warmup=warmup, **kwargs)
    return launch


def _counted_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        global _launches
        _launches += 1
        return fn(*args, **kwargs)
    return call


def count_extension(module: Any) -> Any:
    """Wrap the public functions of a built extension module so each call counts as a launch."""
    if isinstance(module, ModuleType):
        for name in dir(module):
            fn = getattr(module, name)
            if not name.startswith("_") and type(fn).__name__ == "builtin_function_or_method":
                setattr(module, name, _counted_call(fn))
    return module


def _counted_loader(load: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(load)
    def loader(*args: Any, **kwargs: Any) -> Any:
        return count_extension(load(*args, **kwargs))
    return loader


def _install_triton() -> None:
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.interpreter import InterpretedFunction

    InterpretedFunction.run = _counted_run(InterpretedFunction.run)  # type: ignore[method-assign]
    run = vars(CompiledKernel).get("run")
    if not isinstance(run, property) or run.fget is None:
        raise InfrastructureError("the launch census needs Triton's CompiledKernel.run to be a property (Triton 3.6); "
                                  f"this Triton has {run!r}")
    fget = run.fget
    CompiledKernel.run = property(lambda self: functools.partial(_launch, fget(self)))  # type: ignore[method-assign,assignment]


def install_counters(triton: bool) -> None:
    """Count launches from now on (Triton's only when `triton`: importing it costs a second; a candidate that does not
    name Triton launches none of its kernels)."""
    if "extensions" not in _installed:
        from torch.utils import cpp_extension

        cpp_extension.load_inline = _counted_loader(cpp_extension.load_inline)
        cpp_extension.load = _counted_loader(cpp_extension.load)
        _installed.add("extensions")
    if triton and "triton" not in _installed:
        with contextlib.suppress(ImportError):  # no Triton installed: a candidate that names it fails its import
            _install_triton()
            _installed.add("triton")
