"""Family `rowwise`: reductions over the last dim (softmax, norms, row sums and maxima) with the pointwise
ops around them; one program per row.

Two kernels per candidate, chosen at runtime from the row length D: `resident` keeps the row in registers
(BLOCK_D = next_power_of_2(D) <= max_block_d); `looped` walks the row in chunks of max_block_d, one pass per
level of reduction (recomputing the pointwise lines it needs) and a last pass for the output.
Parameters: num_warps (at most; narrow rows use fewer) and max_block_d.
"""

from __future__ import annotations

from typing import Any

from stages.contracts import Problem
from stages.templates.lowering import Traced, lower
from stages.templates.program import Line, Plan, Program, TemplateMismatch
from stages.templates.source import (
    jit_source,
    line_source,
    module_source,
    operand_prologue,
    output_alloc,
    store_source,
)

WARPS = (8, 16, 4)
MAX_BLOCKS = (16384, 4096)

_MASKED = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "argmax": 'float("-inf")'}
_COMBINE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min", "argmax": "tl.argmax"}


def match(problem: Problem, traced: Traced) -> Plan:
    program = lower(traced)
    if not program.reduces:
        raise TemplateMismatch("no reduction over the last dim (the elementwise family's job)")
    return Plan(program=program, reference=traced.reference)


def variants(plan: Plan) -> list[dict[str, Any]]:
    return [{"num_warps": warps, "max_block_d": block} for block in MAX_BLOCKS for warps in WARPS]


def _args(program: Program) -> list[str]:
    args = [f"p{i}" for i in range(len(program.operands))] + ["out", "D"]
    args += [f"r{i}" for i, op in enumerate(program.operands) if op.broadcast]
    return args + [f"s{i}" for i in range(len(program.scalars))] + ["BLOCK_D: tl.constexpr"]


def _prologue(program: Program) -> list[str]:
    """Row offsets: a full operand starts at row * D, a broadcast one at (row % its rows) * D."""
    lines = ["row = tl.program_id(0)", "base = row.to(tl.int64) * D"]
    lines += [f"o{i} = (row % r{i}).to(tl.int64) * D" for i, op in enumerate(program.operands) if op.broadcast]
    return lines


def _pointwise(program: Program, line: Line) -> str:
    offset = f"o{line.load}" if line.load is not None and program.operands[line.load].broadcast else "base"
    return line_source(line, f"{offset} + cols")


def _masked(line: Line) -> str:
    return f"tl.where(mask, {line.deps[0]}, {_MASKED[str(line.reduce)]})"


def _store(program: Program) -> str:
    return store_source(program, "row", None) if program.out_kind == "row" else store_source(program, "base + cols")


def _resident(program: Program) -> str:
    body = [*_prologue(program), "cols = tl.arange(0, BLOCK_D)", "mask = cols < D"]
    for line in program.lines:
        if line.reduce:
            body.append(f"{line.name} = {_COMBINE[line.reduce]}({_masked(line)}, axis=0)")
        else:
            body.append(_pointwise(program, line))
    body.append(_store(program))
    return _kernel(program, "_kf_row_resident", body)


def _levels(program: Program) -> dict[str, int]:
    """A reduction's level is 1 + the highest level it depends on; it runs in pass `level`."""
    level: dict[str, int] = {}
    for line in program.lines:
        below = max((level[d] for d in line.deps), default=0)
        level[line.name] = below + 1 if line.reduce else below
    return level


def _closure(program: Program, roots: list[str]) -> list[Line]:
    """The elem lines that roots need within a chunk, in program order (row values are already known)."""
    needed, stack = set(), list(roots)
    while stack:
        line = program.line(stack.pop())
        if line.kind == "elem" and line.name not in needed:
            needed.add(line.name)
            stack.extend(line.deps)
    return [line for line in program.lines if line.name in needed]


def _chunk_loop(program: Program, roots: list[str], updates: list[str]) -> list[str]:
    inner = ["cols = start + tl.arange(0, BLOCK_D)", "mask = cols < D"]
    inner += [_pointwise(program, line) for line in _closure(program, roots)] + updates + ["start += BLOCK_D"]
    return ["start = 0", "while start < D:", *("    " + line for line in inner)]


def _accumulate(line: Line) -> tuple[list[str], list[str], list[str]]:
    """Init, per-chunk update and final lines of a reduction carried across chunks, per lane."""
    acc = f"acc_{line.name}"
    if line.reduce == "sum":
        return ([f"{acc} = tl.zeros([BLOCK_D], dtype=tl.float32)"], [f"{acc} += {_masked(line)}"],
                [f"{line.name} = tl.sum({acc}, axis=0)"])
    if line.reduce in ("max", "min"):
        how = "maximum" if line.reduce == "max" else "minimum"
        return ([f"{acc} = tl.full([BLOCK_D], {_MASKED[line.reduce]}, tl.float32)"],
                [f"{acc} = tl.{how}({acc}, {_masked(line)})"], [f"{line.name} = tl.{line.reduce}({acc}, axis=0)"])
    masked = f"m_{line.name}"  # argmax: the first index of the maximum, lane by lane, then across lanes
    return ([f"{acc} = tl.full([BLOCK_D], float(\"-inf\"), tl.float32)", f"idx_{line.name} = tl.zeros([BLOCK_D], dtype=tl.int32)"],
            [f"{masked} = {_masked(line)}", f"better = {masked} > {acc}", f"{acc} = tl.where(better, {masked}, {acc})",
             f"idx_{line.name} = tl.where(better, cols, idx_{line.name})"],
            [f"{line.name} = tl.min(tl.where({acc} == tl.max({acc}, axis=0), idx_{line.name}, D), axis=0)"])


def _looped(program: Program) -> str:
    body, known = _prologue(program), set[str]()
    levels = _levels(program)

    def row_lines() -> list[str]:
        ready = [ln for ln in program.lines if ln.kind == "row" and not ln.reduce and ln.name not in known
                 and all(d in known for d in ln.deps)]
        known.update(ln.name for ln in ready)
        return [_pointwise(program, ln) for ln in ready]

    for level in sorted({levels[ln.name] for ln in program.lines if ln.reduce}):
        reduces = [ln for ln in program.lines if ln.reduce and levels[ln.name] == level]
        parts = [_accumulate(ln) for ln in reduces]
        body += [s for p in parts for s in p[0]]
        body += _chunk_loop(program, [ln.deps[0] for ln in reduces], [s for p in parts for s in p[1]])
        body += [s for p in parts for s in p[2]]
        known.update(ln.name for ln in reduces)
        while (more := row_lines()):
            body += more
    if program.out_kind == "elem":
        body += _chunk_loop(program, [program.output], [_store(program)])
    else:
        body.append(_store(program))
    return _kernel(program, "_kf_row_looped", body)


def _kernel(program: Program, name: str, body: list[str]) -> str:
    return jit_source(name, _args(program), body)


def _forward(program: Program, params: dict[str, Any]) -> list[str]:
    full, cap, warps = f"p{program.full}", params["max_block_d"], params["num_warps"]
    call = [f"p{i}" for i in range(len(program.operands))] + ["out", "D"]
    call += [f"p{i}.numel() // D" for i, op in enumerate(program.operands) if op.broadcast]
    call += list(program.scalars)
    launch = ", ".join(call)
    return [
        *operand_prologue(program),
        output_alloc(program),
        f"D = {full}.shape[-1]",
        f"rows = {full}.numel() // D",
        "block_d = triton.next_power_of_2(D)",
        f"if block_d <= {cap}:",
        f"    _kf_row_resident[(rows,)]({launch}, BLOCK_D=block_d, num_warps=max(1, min({warps}, block_d // 256)))",
        "else:",
        f"    _kf_row_looped[(rows,)]({launch}, BLOCK_D={cap}, num_warps={warps})",
        "return out",
    ]


def render(plan: Plan, params: dict[str, Any]) -> str:
    kernels = [_resident(plan.program), _looped(plan.program)]
    return module_source(plan.program, plan.reference, kernels, _forward(plan.program, params))
