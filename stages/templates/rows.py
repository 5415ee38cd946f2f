"""What the one-program-per-row families (rowwise, scan) share: the kernel arguments, the row offsets, a pointwise
line's load address, the launch arguments, and the forward's choice between a multi-row tile, a resident row and
a looped row.

A row is one index of the kept axes (those no reduction or scan runs over), its D columns the indices of the
reduced axes, both row-major (index.py): a reduction over the last dim, over a middle dim or over (N, H, W) of a
batch norm is the same kernel with other addresses."""

from __future__ import annotations

from typing import Any

from kernelflow.stages.templates import index, launch
from kernelflow.stages.templates.program import Line, Program
from kernelflow.stages.templates.source import line_source, operand_prologue, output_alloc, store_source


def args(program: Program, *extra: str) -> list[str]:
    """Kernel arguments: operands, out, D, the axis sizes, scalars, `extra`, BLOCK_D."""
    out = [f"p{i}" for i in range(len(program.operands))] + ["out", "D", *index.size_args(program)]
    return out + [f"s{i}" for i in range(len(program.scalars))] + [*extra, "BLOCK_D: tl.constexpr"]


def _address(program: Program, axes: tuple[int, ...], var: str) -> str:
    """The part of a tensor's address that `var` (the row or the columns) indexes."""
    order = index.kept(program) if var != "cols" else program.reduced
    return index.address(axes, [(var, order)])


def offsets(program: Program, rows: str) -> list[str]:
    """Each operand's row offset o<i> and the output's, oo (the row part of their addresses)."""
    return [f"o{i} = {_address(program, op.axes, rows)}" for i, op in enumerate(program.operands)] + [
        f"oo = {_address(program, program.out_axes, rows)}"]


def columns(program: Program, axes: tuple[int, ...]) -> str:
    """The column part of the address of a tensor spanning `axes`, shaped like cols even where it spans none."""
    found = _address(program, axes, "cols")
    return found if "cols" in found else f"{found} + cols * 0"


def pointwise(program: Program, line: Line, row_mask: str | None = None) -> str:
    """A line of a row kernel: a row load reads once per row (masked by `row_mask` in a multi-row tile); in a
    multi-row tile, an operand that spans no kept axis (a per-channel weight of a norm over channels) is loaded
    once per column ([1, BLOCK_D], masked by `col_mask`), not once per element of the tile."""
    if line.load is None:
        return line_source(line)
    axes = program.operands[line.load].axes
    if line.kind == "row":
        masked = f", mask={row_mask}, other=0.0" if row_mask else ""
        return f"{line.name} = tl.load(p{line.load} + o{line.load}{masked}).to(tl.float32)"
    per_column = row_mask is not None and not set(axes) & set(index.kept(program))
    return line_source(line, f"o{line.load} + {columns(program, axes)}", "col_mask" if per_column else "mask")


def row_loads(program: Program, row_mask: str | None = None) -> list[str]:
    """The row loads, for a kernel whose chunk loops read them before any reduction is known."""
    return [pointwise(program, line, row_mask) for line in program.lines if line.kind == "row" and line.load is not None]


def store(program: Program, mask: str | None = "mask") -> str:
    """The output's store: a row output at its row offset, an elem output at its columns too."""
    if program.out_kind == "row":
        return store_source(program, "oo", None if mask == "mask" else mask)
    return store_source(program, f"oo + {columns(program, program.out_axes)}", "mask")


def launch_args(program: Program) -> str:
    """The launch arguments matching `args` (without extra and BLOCK_D)."""
    call = [f"p{i}" for i in range(len(program.operands))] + ["out", "D", *index.size_args(program)]
    return ", ".join(call + list(program.scalars))


def head(program: Program) -> list[str]:
    """The forward's first lines: operands, sizes, output, row length D, rows and the row's power-of-two block."""
    sizes = index.size_args(program)
    row_len = " * ".join(sizes[a] for a in program.reduced) or "1"
    count = " * ".join(sizes[a] for a in index.kept(program)) or "1"
    return [*operand_prologue(program), *index.size_lines(program), output_alloc(program), f"D = {row_len}",
            f"rows = {count}", "block_d = _kf_pow2(D)"]


# A kernel's own launch parameters, by the ending of its name, the first ending that fits (`_kf_rows_resident`,
# `_kf_rows_looped`, `_kf_rows_partial`, then `_kf_row_looped`, `_kf_scan_looped`): a profiler finding on that
# kernel moves these first (stages/proposers/mutations.py).
KERNEL_PARAMS = {"_rows_resident": ("min_tile", "tile_warps"), "_rows_looped": ("strided_block_d", "min_tile"),
                 "_rows_partial": ("strided_block_d",), "_looped": ("loop_block_d", "loop_warps")}


def resident_warps(block_d: str, warps: int, per_thread: int | None) -> str:
    """The resident kernel's warps for a row block of `block_d` (an expression): num_warps, at most one warp per 256
    elements, and with `per_thread` at least enough warps that a thread holds no more than that many elements of
    each row value (up to Triton's 32)."""
    fit = f"max(1, min({warps}, {block_d} // 256))"
    return f"max({fit}, min(32, {block_d} // {32 * per_thread}))" if per_thread else fit


def tile_warps(params: dict[str, Any]) -> str:
    """The multi-row resident kernel's warps: tile_warps, else num_warps up to one warp per 256 elements of the
    tile."""
    if "tile_warps" in params:
        return str(params["tile_warps"])
    return f"max(1, min({params['num_warps']}, {params['min_tile']} // 256))"


def strided_tile(params: dict[str, Any]) -> tuple[int, int, str]:
    """The wide strided rows' kernel: (rows a program, columns a chunk, warps): strided_rows rows in chunks of
    strided_block_d columns (default min_tile // strided_rows), on num_warps up to one warp per 256 elements of
    the chunk."""
    per = params["strided_rows"]
    chunk = params.get("strided_block_d", params["min_tile"] // per)
    return per, chunk, f"max(1, min({params['num_warps']}, {per * chunk} // 256))"


def dispatch(program: Program, params: dict[str, Any], tiled: str, resident: str, looped: str,
             per_thread: int | None = None, wide: tuple[str, str] | None = None) -> list[str]:
    """Narrow rows (with min_tile) to the multi-row kernel, rows up to max_block_d to the resident one (on
    `resident_warps`), the rest to the looped one, in chunks of loop_block_d on loop_warps warps (default:
    max_block_d and num_warps). `wide`: (a multi-row looped kernel, a condition) for the rows where the condition
    holds, in the tile `strided_tile`, before min_tile's. The multi-row resident kernel runs on `tile_warps`."""
    cap, warps, call = params["max_block_d"], params["num_warps"], launch_args(program)
    chunk, chunk_warps = params.get("loop_block_d", cap), params.get("loop_warps", warps)
    lines = []
    if "min_tile" in params:
        tile = params["min_tile"]
        narrow = f"block_d < {tile}" + (f" and not {wide[1]}" if wide is not None else "")
        lines = [f"if {narrow}:",
                 f"    per = {tile} // block_d",
                 "    " + launch.call(tiled, "(_kf_cdiv(rows, per),)", f"{call}, rows, ROWS=per, BLOCK_D=block_d, "
                                     f"num_warps={tile_warps(params)}"),
                 "    return out"]
        if wide is not None:
            per, columns, wide_warps = strided_tile(params)
            lines += [f"if {wide[1]}:",
                      "    " + launch.call(wide[0], f"(_kf_cdiv(rows, {per}),)", f"{call}, rows, ROWS={per}, "
                                          f"BLOCK_D={columns}, num_warps={wide_warps}"),
                      "    return out"]
    return lines + [
        f"if block_d <= {cap}:",
        "    " + launch.call(resident, "(rows,)",
                            f"{call}, BLOCK_D=block_d, num_warps={resident_warps('block_d', warps, per_thread)}"),
        "else:",
        "    " + launch.call(looped, "(rows,)", f"{call}, BLOCK_D={chunk}, num_warps={chunk_warps}"),
        "return out",
    ]
