"""Compile backends, one per file, found by name in BACKENDS; each exposes `compile(req) -> CompileResult`.

A backend runs in a process dedicated to one compile (kernelflow.stages.compile sees to that), so it may set the
environment, patch process-wide functions and import the candidate without restoring anything. Candidate code (the
import, a capture's constructor and forward) runs only inside `candidate_code`: under the integrity guard made when
it first runs, after the backend's own patches (stages/harness/integrity.py: no write outside the work dir, no
network, no secret read, nothing of the harness replaced, no thread left running), within a deadline sized to the
work, and with a MemoryError named as the candidate's.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import platform
import resource
import subprocess
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from kernelflow.stages.backends.cutlass import version as cutlass_version
from kernelflow.stages.backends.harvest import find_tool
from kernelflow.stages.contracts import CompileRequest, CompileResult
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness import candidate
from kernelflow.stages.harness.deadline import deadline
from kernelflow.stages.harness.integrity import Guard

BACKENDS = {"cuda": "kernelflow.stages.backends.cuda", "cute": "kernelflow.stages.backends.cute", "triton": "kernelflow.stages.backends.triton",
            "torch": "kernelflow.stages.backends.pytorch"}


def backend(name: str) -> ModuleType:
    return importlib.import_module(BACKENDS[name])


@functools.cache
def toolchain() -> dict[str, str]:
    """Versions of what compiles here: torch, triton, python, the CUTLASS headers the cute backend finds (their
    release and directory: the nvidia-cutlass wheel's or $CUTLASS_PATH's), and the release line of the nvcc the
    CUDA backends use."""
    tools = {"torch": torch.__version__, "python": platform.python_version()}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        tools["triton"] = importlib.metadata.version("triton")
    if cutlass := cutlass_version():
        tools["cutlass"] = cutlass
    if nvcc := find_tool("nvcc"):
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        tools["nvcc"] = next((line for line in out if "release" in line), out[-1] if out else "unknown")
    return tools


def result(req: CompileRequest, **fields: Any) -> CompileResult:
    """A CompileResult for this request; `fields` gives status, mode, message, kernels, files, ..."""
    fields.setdefault("status", "ok")
    fields.setdefault("mode", "none")
    return CompileResult(candidate_id=req.candidate.id, problem_id=req.candidate.problem_id,
                         backend=req.candidate.backend, arch=req.arch, toolchain=toolchain(), **fields)


_guard: list[Guard] = []  # this compile's, made when candidate code first runs


@contextlib.contextmanager
def candidate_code(req: CompileRequest, what: str, toolchain_s: Callable[[], float] = lambda: 0.0) -> Iterator[None]:
    """Run candidate code of this compile inside: guarded, within the request's candidate_code_s (not counting
    `toolchain_s()`, the seconds the toolchain spent meanwhile), a MemoryError made an "oom" fault."""
    if not _guard:
        _guard.append(Guard(req.workdir, req.candidate.source))
    try:
        with deadline(req.candidate_code_s, what, toolchain_s), _guard[0].section(what):
            yield
    except MemoryError as e:
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        within = f" (address space limited to {limit} bytes)" if limit != resource.RLIM_INFINITY else ""
        raise CandidateFault("oom", f"{what}: the candidate's code ran out of host memory{within}: MemoryError "
                             f"{e}".rstrip()) from e


def load_for_compile(req: CompileRequest) -> ModuleType:
    """The candidate's module, imported as candidate code (`candidate_code`)."""
    with candidate_code(req, "import"):
        return candidate.import_candidate(req.candidate, req.workdir)
