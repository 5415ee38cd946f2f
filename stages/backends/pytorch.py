"""Plain PyTorch candidates: nothing to compile; the module must import and define ModelNew."""

from __future__ import annotations

from kernelflow.stages.backends import load_for_compile, result
from kernelflow.stages.contracts import CompileRequest, CompileResult


def compile(req: CompileRequest) -> CompileResult:
    load_for_compile(req)
    return result(req, mode="none", message="plain PyTorch candidate: imports and defines ModelNew; nothing to compile")
