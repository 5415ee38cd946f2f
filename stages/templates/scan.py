"""Family `scan`: inclusive scans along the last dim (cumsum, cumprod, cummax/cummin values) with the pointwise ops
before and after them, e.g. exp(cumsum(x * scale)); one program per row, one read and one write of the row.

Kernels chosen at runtime from the row length D: `resident` scans the whole row in registers
(BLOCK_D = next_power_of_2(D) <= max_block_d); `looped` walks the row in chunks of max_block_d, scans each chunk
and combines it with the running total of the chunks before it, carried in float32 (a sum, a product, a maximum
or a minimum). With `min_tile`, narrow rows (BLOCK_D < min_tile) go to `rows`: min_tile // BLOCK_D rows per
program as one 2-D tile scanned along its columns. Every scan is of float32 values; lanes past the row's end
hold the scan's identity so that a chunk's total is its scan's last value.
Declined: a program that also reduces its row (a scan of a reduction's result, or a reduction of a scan),
scans along another dim, and what the lowering cannot express (torch.flip for a reverse scan, cummax indices).
Parameters: num_warps (at most; narrow rows use fewer), max_block_d, and optionally min_tile.
"""

from __future__ import annotations

from typing import Any

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import rows
from kernelflow.stages.templates.lowering import Traced, lower
from kernelflow.stages.templates.program import Line, Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import jit_source, module_source

WARPS = (8, 4, 16)
MAX_BLOCKS = (8192, 2048)
MIN_TILES = (4096,)

_IDENTITY = {"sum": "0.0", "prod": "1.0", "max": 'float("-inf")', "min": 'float("inf")'}
_COMBINE = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "tl.maximum({a}, {b})", "min": "tl.minimum({a}, {b})"}
# The combine function each scan and chunk total passes to tl.associative_scan / tl.reduce.
_HELPERS = {how: f"_kf_scan_{how}" for how in _COMBINE}


def match(problem: Problem, traced: Traced) -> Plan:
    program = lower(traced, scans=True)
    if not program.scans:
        raise TemplateMismatch("no scan (cumsum, cumprod, cummax, cummin) along a dim")
    if program.reduces:
        raise TemplateMismatch("the row is also reduced (a scan of a reduction's result, or a reduction of a scan); "
                               "this family renders scans with pointwise ops only")
    return Plan(program=program, reference=traced.reference)


def variants(plan: Plan) -> list[dict[str, Any]]:
    """Multi-row tiles first (they change nothing for rows of min_tile or more), then one row per program."""
    tiled = [{"num_warps": warps, "max_block_d": MAX_BLOCKS[0], "min_tile": tile} for tile in MIN_TILES
             for warps in WARPS[:2]]
    return tiled + [{"num_warps": warps, "max_block_d": block} for block in MAX_BLOCKS for warps in WARPS]


def _helper(how: str) -> str:
    return jit_source(_HELPERS[how], ["a", "b"], [f"return {_COMBINE[how].format(a='a', b='b')}"])


def _line(program: Program, line: Line, axis: int, carried: bool, row_mask: str | None = None) -> list[str]:
    """A pointwise line, or a scan of the chunk along `axis` (combined with the carry of the chunks before it)."""
    if line.scan is None:
        return [rows.pointwise(program, line, row_mask)]
    how, masked = line.scan, f"m_{line.name}"
    scanned = f"tl.associative_scan({masked}, {axis}, {_HELPERS[how]})"
    lines = [f"{masked} = tl.where(mask, {line.deps[0]}, {_IDENTITY[how]})"]
    if not carried:
        return [*lines, f"{line.name} = {scanned}"]
    carry = f"carry_{line.name}"
    return [*lines, f"{line.name} = {_COMBINE[how].format(a=carry, b=scanned)}",
            f"{carry} = {_COMBINE[how].format(a=carry, b=f'tl.reduce({masked}, {axis}, {_HELPERS[how]})')}"]


def _resident(program: Program) -> str:
    body = ["row = tl.program_id(0)", *rows.offsets(program, "row"), "cols = tl.arange(0, BLOCK_D)", "mask = cols < D"]
    body += [s for line in program.lines for s in _line(program, line, 0, carried=False)]
    body.append(rows.store(program))
    return jit_source("_kf_scan_resident", rows.args(program), body)


def _looped(program: Program) -> str:
    """One pass over the row in chunks; each scan's carry is the combined total of the chunks before."""
    body = ["row = tl.program_id(0)", *rows.offsets(program, "row")]
    body += [f"carry_{ln.name} = tl.full([], {_IDENTITY[ln.scan]}, tl.float32)" for ln in program.lines if ln.scan]
    inner = ["cols = start + tl.arange(0, BLOCK_D)", "mask = cols < D"]
    inner += [s for line in program.lines for s in _line(program, line, 0, carried=True)]
    inner += [rows.store(program), "start += BLOCK_D"]
    body += ["start = 0", "while start < D:", *("    " + s for s in inner)]  # range(0, D) fails under the interpreter
    return jit_source("_kf_scan_looped", rows.args(program), body)


def _rows(program: Program) -> str:
    """ROWS rows per program as a [ROWS, BLOCK_D] tile scanned along axis 1; rows past R are masked."""
    body = ["rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]", *rows.offsets(program, "rows"),
            "cols = tl.arange(0, BLOCK_D)[None, :]", "row_mask = rows < R", "col_mask = cols < D",
            "mask = row_mask & col_mask"]
    body += [s for line in program.lines for s in _line(program, line, 1, carried=False, row_mask="row_mask")]
    body.append(rows.store(program))
    return jit_source("_kf_scan_rows", rows.args(program, "R", "ROWS: tl.constexpr"), body)


def _forward(program: Program, params: dict[str, Any]) -> list[str]:
    return rows.head(program) + rows.dispatch(program, params, "_kf_scan_rows", "_kf_scan_resident", "_kf_scan_looped")


def render(plan: Plan, params: dict[str, Any]) -> str:
    program = plan.program
    kernels = [_helper(how) for how in _HELPERS if any(line.scan == how for line in program.lines)]
    kernels += [_resident(program), _looped(program)] + ([_rows(program)] if "min_tile" in params else [])
    return module_source(program, plan.reference, kernels, _forward(program, params))
