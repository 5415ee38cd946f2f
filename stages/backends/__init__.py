"""Compile backends, one per file, found by name in BACKENDS; each exposes `compile(req) -> CompileResult`.

A backend runs in a process dedicated to one compile (kernelflow.stages.compile sees to that), so it may set the
environment, patch process-wide functions and import the candidate without restoring anything.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import platform
import subprocess
from types import ModuleType
from typing import Any

import torch

from kernelflow.stages.backends.cutlass import version as cutlass_version
from kernelflow.stages.backends.harvest import find_tool
from kernelflow.stages.contracts import CompileRequest, CompileResult
from kernelflow.stages.harness import candidate

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


def load_for_compile(req: CompileRequest) -> ModuleType:
    return candidate.import_candidate(req.candidate, req.workdir)
