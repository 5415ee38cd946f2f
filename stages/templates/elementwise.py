"""Family `elementwise`: a DAG of pointwise ops over same-shape inputs, one flat Triton kernel.

Operands that broadcast along some dims (a per-column scale, a per-channel [C, 1, 1] bias) are read at their own
address of each output element (index.py).
Computes in fp32, stores in the output dtype. Parameters: BLOCK elements per program, num_warps.

The full blocks run without a bounds mask (EVEN) and a last partial block runs masked, in a second launch: with an
element count that is not a multiple of 16 (8191 x 32771), `offs < n` would be a mask Triton cannot prove constant
over 4 elements, and every load and store would go scalar.
"""

from __future__ import annotations

from typing import Any

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import index, launch
from kernelflow.stages.templates.lowering import Traced, lower
from kernelflow.stages.templates.program import Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import (
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
        raise TemplateMismatch("the computation reduces over dims (the rowwise family's job)")
    return Plan(program=program, reference=traced.reference)


def variants(plan: Plan) -> list[dict[str, Any]]:
    return [{"BLOCK": block, "num_warps": warps} for block in BLOCKS for warps in WARPS]


def _kernel(program: Program) -> str:
    args = [f"p{i}" for i in range(len(program.operands))] + ["out", "n", "start", *index.size_args(program)]
    args += [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK: tl.constexpr", "EVEN: tl.constexpr"]
    body = ["offs = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "if EVEN:", "    mask = tl.full([BLOCK], 1, tl.int1)", "else:", "    mask = offs < n"]
    body += [line_source(line, index.flat(program, program.operands[line.load].axes) if line.load is not None else "")
             for line in program.lines]
    body.append(store_source(program, index.flat(program, program.out_axes)))
    return jit_source("_kf_elementwise", args, body)


def _forward(program: Program, params: dict[str, Any]) -> list[str]:
    block = params["BLOCK"]

    def launched(grid: str, start: str, even: bool) -> str:
        call = [f"p{i}" for i in range(len(program.operands))] + ["out", "n", start, *index.size_args(program)]
        call += [*program.scalars, f"BLOCK={block}", f"EVEN={even}", f"num_warps={params['num_warps']}"]
        return "    " + launch.call("_kf_elementwise", f"({grid},)", ", ".join(call))

    return [
        *operand_prologue(program),
        *index.size_lines(program),
        output_alloc(program),
        "n = out.numel()",
        f"full = n // {block}",
        "if full:",
        launched("full", "0", True),
        f"if n % {block}:",
        launched("1", f"full * {block}", False),
        "return out",
    ]


def render(plan: Plan, params: dict[str, Any]) -> str:
    return module_source(plan.program, plan.reference, [_kernel(plan.program)], _forward(plan.program, params))
