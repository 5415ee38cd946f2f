"""Family `elementwise`: a DAG of pointwise ops over same-shape inputs, one flat Triton kernel.

Operands whose shape is a suffix of the output's (a per-column scale, a bias) are read modulo their size.
Computes in fp32, stores in the output dtype. Parameters: BLOCK elements per program, num_warps.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from stages.contracts import Problem
from stages.templates.lowering import lower
from stages.templates.program import Plan, Program, TemplateMismatch
from stages.templates.source import module_source, operand_prologue, output_alloc, reference_source

BLOCKS = (1024, 2048, 4096, 8192)
WARPS = (4, 8)


def match(problem: Problem, module: ModuleType) -> Plan:
    program = lower(problem, module)
    if program.reduces:
        raise TemplateMismatch("the computation reduces over rows (the rowwise family's job)")
    return Plan(problem_id=problem.id, program=program, reference=reference_source(problem.source))


def variants(plan: Plan) -> list[dict[str, Any]]:
    return [{"BLOCK": block, "num_warps": warps} for block in BLOCKS for warps in WARPS]


def _kernel(program: Program) -> str:
    args = [f"p{i}" for i in range(len(program.operands))] + ["out", "n"]
    args += [f"n{i}" for i, op in enumerate(program.operands) if op.broadcast]
    args += [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK: tl.constexpr"]
    body = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n"]
    for line in program.lines:
        if line.load is not None:
            index = f"offs % n{line.load}" if program.operands[line.load].broadcast else "offs"
            body.append(f"{line.name} = tl.load(p{line.load} + {index}, mask=mask, other=0.0).to(tl.float32)")
        else:
            body.append(f"{line.name} = {line.expr}")
    body.append(f"tl.store(out + offs, {program.output}.to(out.dtype.element_ty), mask=mask)")
    lines = "\n".join("    " + line for line in body)
    return f"@triton.jit\ndef _kf_elementwise({', '.join(args)}):\n{lines}\n"


def _forward(program: Program, params: dict[str, Any]) -> list[str]:
    full = f"p{program.full}"
    call = [f"p{i}" for i in range(len(program.operands))] + ["out", "n"]
    call += [f"p{i}.numel()" for i, op in enumerate(program.operands) if op.broadcast]
    call += [*program.scalars, f"BLOCK={params['BLOCK']}", f"num_warps={params['num_warps']}"]
    return [
        *operand_prologue(program),
        output_alloc(program),
        f"n = {full}.numel()",
        f"_kf_elementwise[(triton.cdiv(n, {params['BLOCK']}),)]({', '.join(call)})",
        "return out",
    ]


def render(plan: Plan, params: dict[str, Any]) -> str:
    return module_source(plan.program, plan.reference, [_kernel(plan.program)], _forward(plan.program, params))
