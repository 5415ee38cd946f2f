"""Triton candidates, compiled ahead of time for the target GPU on a machine without one.

Runs in a process dedicated to this compile (see kernelflow.stages.compile), so it sets what it needs and restores nothing:
1. TRITON_INTERPRET is removed before the candidate is imported, so @triton.jit makes real JITFunctions.
2. A stand-in Triton driver reports the target (e.g. sm_90a -> GPUTarget("cuda", 90, 32)); no GPU is touched.
3. ModelNew runs forward once on the problem's first GPU workload built on the `meta` device (or, failing that,
   on its first CPU workload as small CPU tensors) with JITFunction.run switched to warmup=True: Triton binds
   the arguments, specializes and compiles exactly as a real launch would, and launches nothing.
   Autotuned kernels compile every config (the GPU worker picks one by timing).
4. The compiled kernels are harvested from the JIT caches (kernelflow.stages.backends.harvest), as a GPU worker would do.
Without a problem in the request only the static checks run (imports, ModelNew, kernels found).
The import, the constructor and the forward run as candidate code (kernelflow.stages.backends.candidate_code): guarded,
within a deadline that does not count Triton's compiles; what the candidate's code did there is its fault (cheat,
timeout, oom), never a capture that "could not run here".
A Triton compile error is the candidate's fault (compile_error, log kept); a capture that fails for another
reason (forward needs a GPU, a toolchain failure) leaves the binaries to the GPU worker and says why.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from kernelflow.stages.backends import candidate_code, load_for_compile, result
from kernelflow.stages.backends.harvest import harvest_triton, triton_kernels
from kernelflow.stages.contracts import CompileRequest, CompileResult, Workload
from kernelflow.stages.errors import CandidateFault, InfrastructureError
from kernelflow.stages.harness.library_policy import Census, op_class
from kernelflow.stages.problems.kernelbench import import_file, workload_call


class CaptureFailed(Exception):
    """No forward pass could be run here to learn the kernels' launch arguments (not the candidate's fault)."""


class _TargetDriver:
    """Stands in for Triton's CUDA driver: names the target; compiling needs nothing else."""

    def __init__(self, capability: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def _capability(arch: str) -> int:
    m = re.fullmatch(r"sm_(\d+)a?", arch)
    if m is None:
        raise InfrastructureError(f"cannot read a CUDA compute capability from arch {arch!r}")
    return int(m.group(1))


def _is_compile_fault(e: Exception) -> bool:
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import PTXASError

    return isinstance(e, (CompilationError, PTXASError)) or "PassManager" in str(e)


class Toolchain:
    """Seconds spent compiling the candidate's kernels, a compile under way included: not the candidate's time."""

    def __init__(self) -> None:
        self.done, self.since = 0.0, None  # type: float, float | None

    def seconds(self) -> float:
        return self.done + (time.monotonic() - self.since if self.since is not None else 0.0)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        outer = self.since is None
        if outer:
            self.since = time.monotonic()
        try:
            yield
        finally:
            if outer and self.since is not None:
                self.done, self.since = self.done + time.monotonic() - self.since, None


def _intercept_launches(errors: list[str], toolchain: Toolchain) -> None:
    """Make every launch compile only (warmup=True); record compile errors even if the candidate catches them."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    real_run = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        try:
            with toolchain.compiling():
                return real_run(self, *args, grid=grid, warmup=True, **kwargs)
        except Exception as e:
            if _is_compile_fault(e):
                errors.append(f"{self.fn.__name__}: {type(e).__name__}: {e}")
            raise

    def every_config(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        for config in self.prune_configs(kwargs):
            self.fn.run(*args, **kwargs, **config.all_kwargs())

    JITFunction.run = compile_only
    Autotuner.run = every_config


def _forward_once(req: CompileRequest, cls: type, kernels: dict[str, Any], calls: Counter[str],
                  toolchain: Toolchain) -> str:
    """Run ModelNew once (launches compile only), its constructor and forward as candidate code; returns which
    workload and device it used. `calls` receives the torch ops the forward dispatched
    (stages/harness/library_policy.py's census): the vendor-library ones do work whose kernels are not the
    candidate's own. A fault of the candidate's code (a cheat, a deadline, memory) ends the capture."""
    problem, workdir = req.problem, req.workdir
    assert problem is not None
    path = Path(workdir) / f"kf_problem_{problem.id}.py"
    path.write_text(problem.source)
    pmod = import_file(path, "kf_problem_" + re.sub(r"\W", "_", problem.id))
    attempts: list[tuple[str, Workload]] = [("meta", problem.gpu_workloads[0])]
    attempts += [("cpu", w) for w in problem.cpu_workloads[:1]]
    why = []
    for device, w in attempts:
        for fn in kernels.values():
            fn.device_caches.clear()  # a half-finished attempt must not leave its variants behind
        try:
            init = workload_call(pmod, w, "get_init_inputs", problem.path)
            inputs = workload_call(pmod, w, "get_inputs", problem.path, meta=device == "meta")
            where = f"{w.name} on {device} tensors"
            with torch.no_grad(), torch.device(device):
                with candidate_code(req, f"capture {where}: constructor", toolchain.seconds):
                    model = cls(*init)
                with Census() as census, candidate_code(req, f"capture {where}: forward", toolchain.seconds):
                    model(*inputs)
            calls.update(census.counts)
            return f"{w.name} {w.params} on {device} tensors"
        except CandidateFault:
            raise
        except Exception as e:
            if _is_compile_fault(e):
                raise
            why.append(f"{w.name} on {device}: {type(e).__name__}: {e}")
    raise CaptureFailed("; ".join(why))


def compile(req: CompileRequest) -> CompileResult:
    os.environ.pop("TRITON_INTERPRET", None)
    from triton.runtime import driver

    driver.set_active(_TargetDriver(_capability(req.arch)))
    errors: list[str] = []
    toolchain = Toolchain()
    _intercept_launches(errors, toolchain)  # before any candidate code: the guard's reference includes it
    module: ModuleType = load_for_compile(req)
    kernels = triton_kernels(module)
    if not kernels:
        raise CandidateFault("compile_error", "no @triton.jit kernel found in the module")
    names, defined = ", ".join(kernels), sorted(kernels)
    if req.problem is None:
        return result(req, mode="on_gpu_worker", defined=defined, message=f"imports; kernels found: {names}. No problem given, "
                      "so no launch arguments: binaries are produced at first launch on the GPU worker")
    calls: Counter[str] = Counter()
    reason = ""
    try:
        where = _forward_once(req, module.ModelNew, kernels, calls, toolchain)
    except CandidateFault:
        raise
    except CaptureFailed as e:
        where = None
        reason = f"forward could not run here ({e})"
    except Exception as e:  # a compile fault; its text is in `errors` too
        where, reason = None, f"{type(e).__name__}: {e}"
    if errors:
        log = req.write("compile_log.txt", "\n\n".join(errors))
        return result(req, status="failed", failure_kind="compile_error", message=errors[0][:2000], files={"log": log})
    rows, files = harvest_triton(module, req)
    if where is None or not rows:
        reason = reason if where is None else f"forward at {where} launched no Triton kernel"
        return result(req, mode="on_gpu_worker", kernels=rows, files=files, defined=defined, message=f"kernels found: {names}. "
                      f"Ahead-of-time capture failed: {reason}. Binaries are produced at first launch on the GPU worker")
    unlaunched = sorted(set(kernels) - {r.name.split(".")[0] for r in rows})
    note = f"; not launched (helpers or other paths): {', '.join(unlaunched)}" if unlaunched else ""
    return result(req, mode="ahead_of_time", kernels=rows, files=files, defined=defined,
                  library_calls=sorted(op for op in calls if op_class(op) == "vendor"),
                  message=f"compiled for {req.arch} from launches captured at {where}: "
                          f"{', '.join(r.name for r in rows)}{note}")
