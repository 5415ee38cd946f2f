"""Family `elementwise`: a DAG of pointwise ops over same-shape inputs, one flat Triton kernel.

Operands whose shape is a suffix of the output's (a per-column scale, a bias) are read modulo their size.
Computes in fp32, stores in the output dtype. Parameters: BLOCK elements per program, num_warps.
"""

from __future__ import annotations

from typing import Any

from stages.contracts import Problem
from stages.templates.lowering import Traced, lower
from stages.templates.program import Plan, Program, TemplateMismatch
from stages.templates.source import (
    jit_source,
    line_source,
    module_source,
    operand_prologue,
    output_alloc,
    store_source,
)

BLOCKS = (1024, 2048, 4096, 8192)
WARPS = (4, 8)


def match(problem: Problem, traced: Traced) -> Plan:
    program = lower(traced)
    if program.reduces:
        raise TemplateMismatch("the computation reduces over rows (the rowwise family's job)")
    return Plan(program=program, reference=traced.reference)


def variants(plan: Plan) -> list[dict[str, Any]]:
    return [{"BLOCK": block, "num_warps": warps} for block in BLOCKS for warps in WARPS]


def _kernel(program: Program) -> str:
    args = [f"p{i}" for i in range(len(program.operands))] + ["out", "n"]
    args += [f"n{i}" for i, op in enumerate(program.operands) if op.broadcast]
    args += [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK: tl.constexpr"]
    body = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n"]
    body += [line_source(line, f"offs % n{line.load}" if line.load is not None and program.operands[line.load].broadcast
                         else "offs") for line in program.lines]
    body.append(store_source(program, "offs"))
    return jit_source("_kf_elementwise", args, body)


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
