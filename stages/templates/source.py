"""Assemble a candidate module: imports, kernels, the problem's Model as _Reference, and ModelNew."""

from __future__ import annotations

import ast
import re

from kernelflow.stages.templates import launch
from kernelflow.stages.templates.aten_ops import HELPERS
from kernelflow.stages.templates.program import Line, Program, TemplateMismatch

HEADER = """import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
"""
_PROVIDED = {"torch", "nn", "F", "triton", "tl"}
_HARNESS = {"Model", "get_inputs", "get_init_inputs", "WORKLOADS", "TOLERANCE", "POLICY"}


def _binds(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _names(node: ast.AST) -> set[str]:
    """Names read in node that its functions do not bind as arguments (those may be module-level)."""
    args = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - args


def reference_source(problem_source: str) -> str:
    """The problem's Model class renamed _Reference, after the module-level definitions it uses."""
    tree = ast.parse(problem_source)
    model = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"), None)
    if model is None:
        raise TemplateMismatch("the problem defines no class Model")
    wanted, kept = _names(model) - _PROVIDED, []
    for stmt in reversed(tree.body):  # later definitions may use earlier ones
        bound = _binds(stmt) - _HARNESS
        if bound & wanted:
            kept.append(stmt)
            wanted |= _names(stmt) - _PROVIDED
    kept.reverse()
    parts = [ast.get_source_segment(problem_source, s) or "" for s in kept]
    text = ast.get_source_segment(problem_source, model) or ""
    parts.append(re.sub(r"\bModel\b", "_Reference", text))
    return "\n\n".join(parts)


def line_source(line: Line, address: str = "", mask: str = "mask", suffix: str = "") -> str:
    """One pointwise line of a kernel: its expression, or a masked fp32 load of operand p<line.load> at
    `address` (`suffix` reshapes the loaded value, e.g. "[None, :]" for a per-column operand of a 2-D tile)."""
    if line.load is None:
        return f"{line.name} = {line.expr}"
    return f"{line.name} = tl.load(p{line.load} + {address}, mask={mask}, other=0.0).to(tl.float32){suffix}"


def store_source(program: Program, address: str, mask: str | None = "mask") -> str:
    """The kernel's store of the program's output, cast to the output's dtype."""
    masked = f", mask={mask}" if mask else ""
    return f"tl.store(out + {address}, {program.output}.to(out.dtype.element_ty){masked})"


def jit_source(name: str, args: list[str], body: list[str]) -> str:
    """A @triton.jit function from its argument list and body lines."""
    lines = "\n".join("    " + line for line in body)
    return f"@triton.jit\ndef {name}({', '.join(args)}):\n{lines}\n"


def operand_prologue(program: Program) -> list[str]:
    return [f"p{i} = {op.expr}.contiguous()" for i, op in enumerate(program.operands)]


def output_alloc(program: Program) -> str:
    return f"out = p{program.full}.new_empty({program.out_shape}, dtype={program.out_dtype})"


def module_source(program: Program, reference: str, kernels: list[str], forward_body: list[str]) -> str:
    helpers = [HELPERS[name] for name in program.helpers]
    signature = ", ".join(("self", *program.args))
    body = "\n".join("        " + line for line in forward_body)
    model_new = f"class ModelNew(_Reference):\n    def forward({signature}):\n{body}\n"
    return "\n\n".join([HEADER, launch.SOURCE, *helpers, *kernels, reference, model_new])
