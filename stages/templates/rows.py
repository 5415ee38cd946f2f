"""What the one-program-per-row families (rowwise, scan) share: the kernel arguments, the row offsets, a pointwise
line's load address, the launch arguments, and the forward's choice between a multi-row tile, a resident row and
a looped row."""

from __future__ import annotations

from typing import Any

from kernelflow.stages.templates import launch
from kernelflow.stages.templates.program import Line, Program
from kernelflow.stages.templates.source import line_source, operand_prologue, output_alloc


def args(program: Program, *extra: str) -> list[str]:
    """Kernel arguments: operands, out, D, each broadcast operand's row count, scalars, `extra`, BLOCK_D."""
    out = [f"p{i}" for i in range(len(program.operands))] + ["out", "D"]
    out += [f"r{i}" for i, op in enumerate(program.operands) if op.broadcast]
    return out + [f"s{i}" for i in range(len(program.scalars))] + [*extra, "BLOCK_D: tl.constexpr"]


def offsets(program: Program, rows: str) -> list[str]:
    """Row offsets: a full operand starts at row * D, a broadcast one at (row % its rows) * D."""
    return [f"base = {rows}.to(tl.int64) * D"] + [
        f"o{i} = ({rows} % r{i}).to(tl.int64) * D" for i, op in enumerate(program.operands) if op.broadcast]


def pointwise(program: Program, line: Line) -> str:
    offset = f"o{line.load}" if line.load is not None and program.operands[line.load].broadcast else "base"
    return line_source(line, f"{offset} + cols")


def launch_args(program: Program) -> str:
    """The launch arguments matching `args` (without extra and BLOCK_D)."""
    call = [f"p{i}" for i in range(len(program.operands))] + ["out", "D"]
    call += [f"p{i}.numel() // D" for i, op in enumerate(program.operands) if op.broadcast]
    return ", ".join(call + list(program.scalars))


def head(program: Program) -> list[str]:
    """The forward's first lines: operands, output, row length D, rows and the row's power-of-two block."""
    full = f"p{program.full}"
    return [*operand_prologue(program), output_alloc(program), f"D = {full}.shape[-1]", f"rows = {full}.numel() // D",
            "block_d = _kf_pow2(D)"]


# The looped kernel's own launch parameters, by the ending of its name (`_kf_row_looped`, `_kf_scan_looped`): a
# profiler finding on that kernel moves these first (stages/proposers/mutations.py).
KERNEL_PARAMS = {"_looped": ("loop_block_d", "loop_warps")}


def resident_warps(block_d: str, warps: int, per_thread: int | None) -> str:
    """The resident kernel's warps for a row block of `block_d` (an expression): num_warps, at most one warp per 256
    elements, and with `per_thread` at least enough warps that a thread holds no more than that many elements of
    each row value (up to Triton's 32)."""
    fit = f"max(1, min({warps}, {block_d} // 256))"
    return f"max({fit}, min(32, {block_d} // {32 * per_thread}))" if per_thread else fit


def dispatch(program: Program, params: dict[str, Any], tiled: str, resident: str, looped: str,
             per_thread: int | None = None) -> list[str]:
    """Narrow rows (with min_tile) to the multi-row kernel, rows up to max_block_d to the resident one (on
    `resident_warps`), the rest to the looped one, in chunks of loop_block_d on loop_warps warps (default:
    max_block_d and num_warps)."""
    cap, warps, call = params["max_block_d"], params["num_warps"], launch_args(program)
    chunk, chunk_warps = params.get("loop_block_d", cap), params.get("loop_warps", warps)
    lines = []
    if "min_tile" in params:
        tile = params["min_tile"]
        lines = [f"if block_d < {tile}:",
                 f"    per = {tile} // block_d",
                 "    " + launch.call(tiled, "(_kf_cdiv(rows, per),)", f"{call}, rows, ROWS=per, BLOCK_D=block_d, "
                                     f"num_warps=max(1, min({warps}, {tile} // 256))"),
                 "    return out"]
    return lines + [
        f"if block_d <= {cap}:",
        "    " + launch.call(resident, "(rows,)",
                            f"{call}, BLOCK_D=block_d, num_warps={resident_warps('block_d', warps, per_thread)}"),
        "else:",
        "    " + launch.call(looped, "(rows,)", f"{call}, BLOCK_D={chunk}, num_warps={chunk_warps}"),
        "return out",
    ]
