"""Load a KernelBench-format problem file into a Problem, and instantiate it at one workload.

torch is imported where a problem's code runs, not with this module: a file that does not import (missing, a syntax
error) is reported without it, and a problem file imports torch itself.
"""

from __future__ import annotations

import contextlib
import dis
import importlib.util
import inspect
import math
import sys
import threading
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

from kernelflow.stages.contracts import (
    DEFAULT_TOLERANCE,
    Policy,
    Problem,
    SizeSet,
    Tolerance,
    Workload,
    sha256_text,
)
from kernelflow.stages.errors import ProblemError
from kernelflow.stages.problems import fx_trace

_UNCHECKED = threading.RLock()  # held while torch.distributions' checks are off for a meta call


def import_file(path: Path, name: str) -> ModuleType:
    """Import a Python file as a fresh module (registered, so dataclasses and Triton's inspect work)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _module_name(problem_id: str) -> str:
    return "kf_problem_" + "".join(c if c.isalnum() else "_" for c in problem_id)


def import_problem(path: str | Path) -> ModuleType:
    path = Path(path).resolve()
    if not path.is_file():
        raise ProblemError(str(path), "no such file")
    try:
        return import_file(path, _module_name(path.stem))
    except Exception as e:  # the user's file: report, do not crash
        raise ProblemError(str(path), f"does not import: {type(e).__name__}: {e}") from e


def _workloads(path: str, module: ModuleType) -> tuple[list[Workload], list[Workload]]:
    spec = getattr(module, "WORKLOADS", None)
    if spec is None:  # a plain KernelBench file: its constants are the one (GPU) shape; no CPU shape declared
        return [Workload(name="gpu0", params={})], []
    if not isinstance(spec, dict) or not set(spec) <= {"gpu", "cpu"} or "gpu" not in spec:
        raise ProblemError(path, "WORKLOADS must be a dict with key 'gpu' (and optionally 'cpu') of lists of dicts")
    out: dict[str, list[Workload]] = {"gpu": [], "cpu": []}
    for sizes, entries in spec.items():
        if not isinstance(entries, list) or not entries:
            raise ProblemError(path, f"WORKLOADS[{sizes!r}] must be a non-empty list of dicts")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ProblemError(path, f"WORKLOADS[{sizes!r}][{i}] is {type(entry).__name__}, not a dict")
            for key, value in entry.items():
                if not hasattr(module, key):
                    raise ProblemError(path, f"WORKLOADS[{sizes!r}][{i}] overrides {key!r}, which the module does not define")
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise ProblemError(path, f"WORKLOADS[{sizes!r}][{i}][{key!r}] = {value!r} is not a positive int")
            out[sizes].append(Workload(name=f"{sizes}{i}", params=dict(entry)))
    return out["gpu"], out["cpu"]


INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")


def size_constants(module: ModuleType, functions: tuple[str, ...] = INPUT_FUNCTIONS) -> dict[str, int]:
    """The module-level positive ints (bools are not sizes) that `functions` (get_inputs() and get_init_inputs())
    read, in the module's order: the names their code loads as globals, followed into nested code (comprehensions,
    lambdas, inner functions) and into the module's own functions they call. These are the sizes of a plain
    KernelBench file, which a WORKLOADS table would name: its one workload (gpu0) sets none of them. Those that
    get_init_inputs reads are the architecture's (the module's parameters' shapes, a group count)."""
    namespace = vars(module)
    found: set[str] = set()
    seen: set[CodeType] = set()
    todo = [f.__code__ for name in functions if isinstance(f := namespace.get(name), FunctionType)]
    while todo:
        code = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        todo += [c for c in code.co_consts if isinstance(c, CodeType)]
        for ins in dis.get_instructions(code):
            if ins.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or ins.argval not in namespace:
                continue
            value = namespace[ins.argval]
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                found.add(ins.argval)
            elif isinstance(value, FunctionType) and value.__globals__ is namespace:
                todo.append(value.__code__)
    return {name: namespace[name] for name in namespace if name in found}


def _floating_dtype(path: str, inputs: list[Any]) -> str:
    import torch

    dtypes = {t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()}
    if not dtypes:
        return "float32"
    if len(dtypes) > 1:
        raise ProblemError(path, f"get_inputs() mixes floating dtypes {sorted(map(str, dtypes))}")
    return str(dtypes.pop()).removeprefix("torch.")


def problem_id(path: str | Path) -> str:
    """A problem file's id (load_problem's `Problem.id`): the stem of its resolved path; nothing is imported."""
    return Path(path).resolve().stem


def load_problem(path: str | Path) -> Problem:
    """Read and check a problem file; raises ProblemError saying exactly what is wrong.

    The sample that gives the dtype is drawn at the first CPU shape on the CPU when the problem declares CPU shapes
    (small by declaration; torch's meta kernels would import sympy and torch._dynamo, seconds on first use), else at
    the first GPU shape on `meta`. The caller's torch RNG stream is left as it was."""
    path = Path(path).resolve()
    module = import_problem(path)
    import torch

    where = str(path)
    model = getattr(module, "Model", None)
    if not (inspect.isclass(model) and issubclass(model, torch.nn.Module)):
        raise ProblemError(where, "defines no class Model(nn.Module)")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn, None)):
            raise ProblemError(where, f"defines no function {fn}()")
    gpu, cpu = _workloads(where, module)
    with torch.random.fork_rng(devices=[]):
        sample = workload_call(module, cpu[0], "get_inputs", where, device="cpu") if cpu else \
            workload_call(module, gpu[0], "get_inputs", where, meta=True)
    if not isinstance(sample, (list, tuple)) or not sample:
        raise ProblemError(where, "get_inputs() must return a non-empty list")
    dtype = _floating_dtype(where, list(sample))
    tol = getattr(module, "TOLERANCE", None)
    try:
        tolerance = Tolerance(**tol) if tol is not None else DEFAULT_TOLERANCE.get(dtype, DEFAULT_TOLERANCE["float32"])
        policy = Policy(**getattr(module, "POLICY", {}))
    except Exception as e:
        raise ProblemError(where, f"TOLERANCE or POLICY is malformed: {e}") from e
    source = path.read_text()
    return Problem(id=problem_id(path), path=where, source=source, source_sha256=sha256_text(source), dtype=dtype,
                   gpu_workloads=gpu, cpu_workloads=cpu, tolerance=tolerance, policy=policy)


def workload_call(module: ModuleType, workload: Workload, fn: str, where: str = "", meta: bool = False,
                  device: str | None = None) -> Any:
    """Call get_inputs/get_init_inputs with the workload's constants set (restored afterwards).

    With `device`, tensors the function creates are created there directly (no multi-GB CPU draw and copy);
    `meta` gives shapes and dtypes only: torch.distributions' argument checks read values (`.item()`), which meta
    tensors have none of, so they are off for a meta call."""
    import torch

    saved = {k: getattr(module, k) for k in workload.params}
    with _UNCHECKED if meta else contextlib.nullcontext():  # the checks' switch is process-wide
        validate = torch.distributions.Distribution._validate_args
        try:
            for k, v in workload.params.items():
                setattr(module, k, v)
            if meta:
                torch.distributions.Distribution.set_default_validate_args(False)
            with torch.device("meta" if meta else device or "cpu"):
                return getattr(module, fn)()
        except ProblemError:
            raise
        except Exception as e:
            raise ProblemError(where or module.__name__,
                               f"{fn}() fails for workload {workload.name}: {type(e).__name__}: {e}") from e
        finally:
            torch.distributions.Distribution.set_default_validate_args(validate)
            for k, v in saved.items():
                setattr(module, k, v)


def check_runs(problem: Problem, sizes: SizeSet = "cpu") -> list[str]:
    """Run the reference once per workload of `sizes` on CPU; returns a note per workload (raises if broken). The CPU
    shapes run on one intra-op thread (the process's count is restored after): at their small sizes, waking torch's
    thread pool costs more than the work it shares; GPU shapes run on the CPU keep every thread."""
    module = import_problem(problem.path)
    import torch

    threads = torch.get_num_threads()
    if sizes == "cpu":
        torch.set_num_threads(1)
    try:
        return _run_each(problem, module, sizes)
    finally:
        torch.set_num_threads(threads)


def _run_each(problem: Problem, module: ModuleType, sizes: SizeSet) -> list[str]:
    import torch

    notes = []
    for w in problem.workloads(sizes):
        init = workload_call(module, w, "get_init_inputs", problem.path)
        inputs = workload_call(module, w, "get_inputs", problem.path)
        try:
            with fx_trace.LOCK:  # a trace in another thread patches nn.Module (stages/problems/fx_trace.py)
                out = module.Model(*init)(*inputs)
        except Exception as e:
            raise ProblemError(problem.path, f"Model(*get_init_inputs())(*get_inputs()) fails at {w.name}: {type(e).__name__}: {e}") from e
        outs = out if isinstance(out, (tuple, list)) else [out]
        for o in outs:
            if not isinstance(o, torch.Tensor):
                raise ProblemError(problem.path, f"forward returns {type(o).__name__}, not tensors, at {w.name}")
            if not torch.isfinite(o).all():
                raise ProblemError(problem.path, f"the reference output has NaN/Inf at {w.name} (inputs must be valid)")
            if o.numel() and not o.ne(0).any():
                raise ProblemError(problem.path, f"the reference output is all zeros at {w.name}: nothing to verify against")
        notes.append(f"{w.name} {w.params}: ok, output {[tuple(o.shape) for o in outs]}")
    return notes


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))
