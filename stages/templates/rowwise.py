"""Family `rowwise`: reductions over a set of dims (softmax, logsumexp, layer/group/instance/batch norms, sums,
means and maxima over any dims) with the pointwise ops around them; one program per row (rows.py: a row is one
index of the dims kept).

Kernels chosen at runtime from the row length D: `resident` keeps the row in registers
(BLOCK_D = next_power_of_2(D) <= max_block_d); `looped` walks the row in chunks of max_block_d, one pass per
level of reduction (recomputing the pointwise lines it needs) and a last pass for the output, where a sum of
exp(A - max(A)) is carried in its max's pass (online softmax: per-lane running maxima, sums rescaled as they grow)
and a sum of (A - mean(A))^2 in its mean's (per-lane Welford), so a softmax or a layernorm reads its row twice, not
three times. With `min_tile`,
narrow rows (BLOCK_D < min_tile) go to `rows`: min_tile // BLOCK_D rows per program as one 2-D tile, reduced
along its columns, so a program has as much work as a wide row's (with one program per narrow row, eager's
multi-row kernels are ahead: docs/LOG.md).
With `split_below`, few long rows (fewer than split_below, D > max_block_d) of a splittable program (a row
output from sums, maxima or minima of the row, and sums of exp(row - shift) with the shift a function of the row's
max, as logsumexp's) run in two stages: `partial` reduces column chunks of each row into a float32 buffer (a
shifted sum about its chunk's own shift, in a second pass over the chunk), `combine` reduces each row's partials
(a shifted sum's rescaled to the row's shift) and stores.
With `strided_rows`, in a program whose innermost axis is kept (a reduction over a middle dim, a norm over
channels: a row's columns strided, consecutive rows adjacent in memory), rows wider than min_tile //
STRIDED_MIN_ROWS adjacent in runs of STRIDED_RUN or more go to `rows_looped`: strided_rows rows a program as one
2-D tile, walked in chunks of strided_block_d columns (default min_tile // strided_rows; Tile). One program per
such row reads one element of each sector it fetches. Where a splittable program's wide strided rows make fewer than STRIDED_SPLIT_BELOW such
programs, `rows_partial` reduces column chunks of each tile into the partials `combine` reduces.
In a multi-row tile an operand that spans no kept axis (a norm's per-channel weight) is loaded once per column.
Parameters: num_warps (at most; narrow rows use fewer), max_block_d, and optionally loop_block_d and loop_warps
(the looped kernel's chunk and warps; default max_block_d and num_warps), min_tile and tile_warps (the multi-row
resident kernel's warps), split_below, strided_rows and strided_block_d.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from kernelflow.stages.contracts import Problem
from kernelflow.stages.templates import index, launch, rows
from kernelflow.stages.templates.lowering import Traced, lower
from kernelflow.stages.templates.program import Line, Plan, Program, TemplateMismatch
from kernelflow.stages.templates.source import jit_source, module_source

WARPS = (8, 16, 4)
# Rows up to 32768 stay resident, on enough warps that a thread holds at most PER_THREAD elements of a row value
# (rows.resident_warps): a row that long runs faster resident on 32 warps than on 16 (64 a thread) or looped
# (measured: docs/LOG.md). 64 Ki registers an SM are 64 a thread at 1024 threads.
MAX_BLOCKS = (32768, 4096)
PER_THREAD = 32
# The looped kernel's default chunk and warps: on 16 warps it is faster than or level with 8 at chunks 4096-16384 on
# long rows (measured: docs/LOG.md).
LOOP_BLOCK_D, LOOP_WARPS = 16384, 16
MIN_TILES = (4096,)
# Split rows: fewer rows than SPLIT_BELOW, each longer than max_block_d, are cut into column chunks so that about
# SPLIT_PROGRAMS programs run (with one program per row, rows fewer than the SMs leave the rest idle: docs/LOG.md).
SPLIT_BELOW, SPLIT_PROGRAMS = 256, 1024
# Wide strided rows: STRIDED_ROWS rows a program (32 float32 rows are a 128-byte line of each column), where the
# innermost axis is at least STRIDED_RUN long (shorter runs: rows one program each, as elsewhere), in chunks of
# STRIDED_BLOCK_D columns.
STRIDED_ROWS, STRIDED_RUN, STRIDED_BLOCK_D = 32, 16, 128
# Strided rows too wide for STRIDED_MIN_ROWS of them in a min_tile (a 64-byte run of each column in float32) are wide.
STRIDED_MIN_ROWS = 16
# Narrow strided rows (a norm over channels, a middle dim of 64): tiles of STRIDED_TILE elements on STRIDED_WARPS
# warps first (measured on the H200 against 4096 on 8 warps: docs/LOG.md).
STRIDED_TILE, STRIDED_WARPS = 8192, 4
# Wide strided rows of a splittable program that make fewer than STRIDED_SPLIT_BELOW such programs are cut into
# column chunks so that about STRIDED_SPLIT_PROGRAMS run.
STRIDED_SPLIT_BELOW, STRIDED_SPLIT_PROGRAMS = 1024, 2048

_MASKED = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "argmax": 'float("-inf")'}
_COMBINE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min", "argmax": "tl.argmax"}


def match(problem: Problem, traced: Traced) -> Plan:
    program = lower(traced)
    if not program.reduces:
        raise TemplateMismatch("no reduction (the elementwise family's job)")
    if not index.kept(program):
        raise TemplateMismatch("a reduction of the whole tensor to one value (the loss family's job)")
    return Plan(program=program, reference=traced.reference)


def variants(plan: Plan) -> list[dict[str, Any]]:
    """Multi-row tiles first (they change nothing for rows of min_tile or more), then one row per program. Rows
    wider than max_block_d loop in chunks of LOOP_BLOCK_D (at most max_block_d) on LOOP_WARPS warps. Where rows are
    strided (`strided`), the multi-row tiles take wide rows too (strided_rows), and a tile of STRIDED_TILE on
    STRIDED_WARPS comes first."""
    split = {"split_below": SPLIT_BELOW} if splittable(plan.program) else {}
    tiled = [{"num_warps": warps, "max_block_d": MAX_BLOCKS[0], "min_tile": tile, **split} for tile in MIN_TILES
             for warps in WARPS[:2]]
    plain = [{"num_warps": warps, "max_block_d": block} for block in MAX_BLOCKS for warps in WARPS]
    out = [{**p, "loop_block_d": min(LOOP_BLOCK_D, p["max_block_d"]), "loop_warps": LOOP_WARPS} for p in tiled + plain]
    if strided(plan.program):
        wide = {"strided_rows": STRIDED_ROWS, "strided_block_d": STRIDED_BLOCK_D}
        first = {**out[0], "min_tile": STRIDED_TILE, "tile_warps": STRIDED_WARPS}
        out = [{**p, **wide} if "min_tile" in p else p for p in [first, *out]]
    return out


@dataclass(frozen=True)
class Tile:
    """How a kernel lays out its rows and a chunk of their columns. `row`: one row per program, a 1-D chunk. `rows`:
    ROWS rows as [ROWS, BLOCK_D], row values [ROWS, 1] (keep_dims), rows past R masked. Triton's coalescing orders
    a tile's dims by the contiguity it proves of the addresses, a tie going to dim 0 (TTGIR for sm_90: a row's
    address goes through // and % by the sizes, proven contiguous where they are multiples of 16, else a tie); so
    lanes run along a row's columns where those are contiguous, and along the rows where consecutive rows are the
    adjacent ones (the innermost axis kept)."""

    kind: Literal["row", "rows"]

    @property
    def shape(self) -> str:
        """A per-lane accumulator's shape."""
        return "[BLOCK_D]" if self.kind == "row" else "[ROWS, BLOCK_D]"

    @property
    def axis(self) -> str:
        """A reduction's arguments: over the columns, a 2-D tile's keeping its dims."""
        return "axis=0" if self.kind == "row" else "axis=1, keep_dims=True"

    @property
    def row_mask(self) -> str | None:
        return None if self.kind == "row" else "row_mask"

    def lanes(self, start: str | None = None) -> str:
        """Column indices of a chunk beginning at `start`, shaped for the tile."""
        lanes = "tl.arange(0, BLOCK_D)" + ("" if self.kind == "row" else "[None, :]")
        return f"{start} + {lanes}" if start else lanes

    def masks(self, stop: str = "D") -> list[str]:
        """A chunk's masks: `mask` over the tile, and in a multi-row tile `col_mask` over its columns alone."""
        if self.kind == "row":
            return [f"mask = cols < {stop}"]
        return [f"col_mask = cols < {stop}", "mask = row_mask & col_mask"]

    def prologue(self, program: Program) -> list[str]:
        if self.kind == "row":
            return ["row = tl.program_id(0)", *rows.offsets(program, "row")]
        return ["rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]", "row_mask = rows < R",
                *rows.offsets(program, "rows")]

    def args(self, program: Program) -> list[str]:
        return rows.args(program) if self.kind == "row" else rows.args(program, "R", "ROWS: tl.constexpr")


ROW, ROWS = Tile("row"), Tile("rows")


def _innermost(program: Program) -> int:
    """The axis the full operand is contiguous along."""
    return program.operands[program.full].axes[-1]


def strided(program: Program) -> bool:
    """The full operand's innermost axis is kept: consecutive rows are adjacent in memory, a row's columns strided."""
    return _innermost(program) not in program.reduced


def _masked(line: Line) -> str:
    return f"tl.where(mask, {line.deps[0]}, {_MASKED[str(line.reduce)]})"


def _resident(program: Program, tile: Tile, name: str) -> str:
    """The whole row (a tile's rows) in registers: every line once, reductions over the columns."""
    body = [*tile.prologue(program), f"cols = {tile.lanes()}", *tile.masks()]
    for line in program.lines:
        if line.reduce:
            body.append(f"{line.name} = {_COMBINE[line.reduce]}({_masked(line)}, {tile.axis})")
        else:
            body.append(rows.pointwise(program, line, tile.row_mask))
    body.append(rows.store(program, tile.row_mask or "mask"))
    return jit_source(name, tile.args(program), body)


def _levels(program: Program) -> dict[str, int]:
    """A reduction's level is 1 + the highest level it depends on; it runs in pass `level`."""
    level: dict[str, int] = {}
    for line in program.lines:
        below = max((level[d] for d in line.deps), default=0)
        level[line.name] = below + 1 if line.reduce else below
    return level


def _chunk_loop(program: Program, tile: Tile, roots: list[str], updates: list[str], start: str = "0",
                stop: str = "D") -> list[str]:
    inner = [f"cols = {tile.lanes('start')}", *tile.masks(stop)]
    inner += [rows.pointwise(program, line, tile.row_mask) for line in program.closure(roots)]
    inner += [*updates, "start += BLOCK_D"]
    return [f"start = {start}", f"while start < {stop}:", *("    " + line for line in inner)]


def _accumulate(line: Line, tile: Tile) -> tuple[list[str], list[str], list[str]]:
    """Init, per-chunk update and final lines of a reduction carried across chunks, per lane."""
    acc, shape, axis = f"acc_{line.name}", tile.shape, tile.axis
    if line.reduce == "sum":
        return ([f"{acc} = tl.zeros({shape}, dtype=tl.float32)"], [f"{acc} += {_masked(line)}"],
                [f"{line.name} = tl.sum({acc}, {axis})"])
    if line.reduce in ("max", "min"):
        how = "maximum" if line.reduce == "max" else "minimum"
        return ([f"{acc} = tl.full({shape}, {_MASKED[line.reduce]}, tl.float32)"],
                [f"{acc} = tl.{how}({acc}, {_masked(line)})"], [f"{line.name} = tl.{line.reduce}({acc}, {axis})"])
    masked = f"m_{line.name}"  # argmax: the first index of the maximum, lane by lane, then across lanes
    return ([f"{acc} = tl.full({shape}, float(\"-inf\"), tl.float32)",
             f"idx_{line.name} = tl.zeros({shape}, dtype=tl.int32)"],
            [f"{masked} = {_masked(line)}", f"better = {masked} > {acc}", f"{acc} = tl.where(better, {masked}, {acc})",
             f"idx_{line.name} = tl.where(better, cols, idx_{line.name})"],
            [f"{line.name} = tl.min(tl.where({acc} == tl.max({acc}, {axis}), idx_{line.name}, D), {axis})"])


def _exp_difference(program: Program, s: Line) -> tuple[Line, Line] | None:
    """(A, X) where the sum S is sum(tl.exp(A - X)), else None."""
    e = program.line(s.deps[0])
    if len(e.deps) != 1 or e.expr != f"tl.exp({e.deps[0]})":
        return None
    d = program.line(e.deps[0])
    if len(d.deps) != 2 or d.expr != "{} - {}".format(*d.deps):
        return None
    a, x = (program.line(name) for name in d.deps)
    return a, x


def _online(program: Program) -> dict[str, Line]:
    """Sums carried in their max's pass, by the max's name: S = sum(tl.exp(A - M)) with M = max(A), A an elem line."""
    carried: dict[str, Line] = {}
    for s in (ln for ln in program.lines if ln.reduce == "sum"):
        if (pair := _exp_difference(program, s)) is None:
            continue
        a, m = pair
        if a.kind == "elem" and m.reduce == "max" and m.deps == (a.name,):
            carried.setdefault(m.name, s)
    return carried


def _online_accumulate(m: Line, s: Line, tile: Tile) -> tuple[list[str], list[str], list[str]]:
    """`_accumulate` for M = max(A) and S = sum(exp(A - M)) together: per lane a running max and a sum of exp(A - it),
    rescaled when it grows. A lane of -inf only adds 0 (torch's NaN for a row of -inf comes from the output's
    exp(-inf - -inf)); +inf or NaN makes S NaN, as in torch (lanes are guarded on S == 0, not on M == -inf, so a NaN
    that the GPU's NaN-dropping maximum left out of M still reaches S)."""
    inf, a, new, acc_m, acc_s = _MASKED["max"], f"m_{m.name}", f"new_{m.name}", f"acc_{m.name}", f"acc_{s.name}"
    return ([f"{acc_m} = tl.full({tile.shape}, {inf}, tl.float32)",
             f"{acc_s} = tl.zeros({tile.shape}, dtype=tl.float32)"],
            [f"{a} = {_masked(m)}", f"{new} = tl.maximum({acc_m}, {a})",
             f"{acc_s} = {acc_s} * tl.where({new} == {inf}, 0.0, tl.exp({acc_m} - {new}))"
             f" + tl.where({a} == {inf}, 0.0, tl.exp({a} - {new}))", f"{acc_m} = {new}"],
            [f"{m.name} = tl.max({acc_m}, {tile.axis})",
             f"{s.name} = tl.sum(tl.where({acc_s} == 0.0, 0.0, {acc_s} * tl.exp({acc_m} - {m.name})), {tile.axis})"])


def _welford(program: Program) -> dict[str, tuple[Line, Line]]:
    """Sums of squared deviations carried in their mean's pass, by the mean's sum: S2 = sum(d * d) with d = A - mean,
    mean = S1 / D and S1 = sum(A), A an elem line (a layernorm's variance), with the mean line."""
    carried: dict[str, tuple[Line, Line]] = {}
    for s2 in (ln for ln in program.lines if ln.reduce == "sum"):
        q = program.line(s2.deps[0])
        if not q.deps or set(q.deps) != {q.deps[0]} or q.expr != f"{q.deps[0]} * {q.deps[0]}":
            continue
        d = program.line(q.deps[0])
        if len(d.deps) != 2 or d.expr != "{} - {}".format(*d.deps):
            continue
        a, mean = (program.line(name) for name in d.deps)
        if a.kind != "elem" or mean.kind != "row" or len(mean.deps) != 1 or mean.expr != f"{mean.deps[0]} / D":
            continue
        s1 = program.line(mean.deps[0])
        if s1.reduce == "sum" and s1.deps == (a.name,):
            carried.setdefault(s1.name, (s2, mean))
    return carried


def _welford_accumulate(s1: Line, s2: Line, tile: Tile) -> tuple[list[str], list[str], list[str]]:
    """`_accumulate` for S1 = sum(A) with S2's per-lane Welford terms carried in its pass: each lane's mean of A and
    sum of squared deviations from it. A lane's count n is the number of chunks that reach it, the same for every
    live lane of a chunk, so an update multiplies by one reciprocal per chunk, and S1 is sum(n * mean): two arrays
    carried, not four (with four, BLOCK_D 16384 on 8 warps spills 880 bytes a thread on sm_90: docs/LOG.md)."""
    a, mu, m2, delta, inv, n = (f"{x}_{s2.name}" for x in ("w", "mu", "m2", "delta", "inv", "n"))
    return ([f"{x} = tl.zeros({tile.shape}, dtype=tl.float32)" for x in (mu, m2)],
            [f"{a} = tl.where(mask, {s1.deps[0]}, 0.0)", f"{inv} = 1.0 / (start // BLOCK_D + 1)",
             f"{delta} = {a} - {mu}", f"{mu} += tl.where(mask, {delta} * {inv}, 0.0)",
             f"{m2} += tl.where(mask, {delta} * ({a} - {mu}), 0.0)"],
            [f"{n} = ((D - {tile.lanes()} + BLOCK_D - 1) // BLOCK_D).to(tl.float32)",
             f"{s1.name} = tl.sum({n} * {mu}, {tile.axis})"])


def _welford_variance(s2: Line, mean: Line, tile: Tile) -> str:
    """S2 from `_welford_accumulate`'s lanes once the row's mean is known: their sums combined about it,
    sum(m2 + n * (mu - mean)^2), which keeps the two-pass sum's accuracy (no E[x^2] - mean^2 cancellation)."""
    mu, m2, n = (f"{x}_{s2.name}" for x in ("mu", "m2", "n"))
    return f"{s2.name} = tl.sum({m2} + {n} * ({mu} - {mean.name}) * ({mu} - {mean.name}), {tile.axis})"


def _looped(program: Program, tile: Tile, name: str) -> str:
    """Rows (a tile's rows) walked in chunks of BLOCK_D columns, one pass per level of reduction."""
    body, known = tile.prologue(program), set[str]()
    levels, online, welford = _levels(program), _online(program), _welford(program)
    carried = {s.name for s in online.values()} | {s2.name for s2, _ in welford.values()}

    def row_lines() -> list[str]:
        ready = [ln for ln in program.lines if ln.kind == "row" and not ln.reduce and ln.name not in known
                 and all(d in known for d in ln.deps)]
        known.update(ln.name for ln in ready)
        return [rows.pointwise(program, ln, tile.row_mask) for ln in ready]

    while (more := row_lines()):  # the row loads and what they alone give, before the first chunk loop
        body += more
    for level in sorted({levels[ln.name] for ln in program.lines if ln.reduce and ln.name not in carried}):
        reduces = [ln for ln in program.lines if ln.reduce and levels[ln.name] == level and ln.name not in carried]
        parts = [_online_accumulate(ln, online[ln.name], tile) if ln.name in online else
                 _welford_accumulate(ln, welford[ln.name][0], tile) if ln.name in welford else _accumulate(ln, tile)
                 for ln in reduces]
        body += [s for p in parts for s in p[0]]
        body += _chunk_loop(program, tile, [ln.deps[0] for ln in reduces], [s for p in parts for s in p[1]])
        body += [s for p in parts for s in p[2]]
        known.update(ln.name for ln in reduces)
        known.update(online[ln.name].name for ln in reduces if ln.name in online)
        while (more := row_lines()):
            body += more
        body += [_welford_variance(*welford[ln.name], tile) for ln in reduces if ln.name in welford]  # after the mean
        known.update(welford[ln.name][0].name for ln in reduces if ln.name in welford)
        while (more := row_lines()):
            body += more
    if program.out_kind == "elem":
        body += _chunk_loop(program, tile, [program.output], [rows.store(program)])
    else:
        body.append(rows.store(program, tile.row_mask or "mask"))
    return jit_source(name, tile.args(program), body)


def _shifted(program: Program) -> dict[str, tuple[str, str, list[Line]]]:
    """Second-level sums split rows can combine, by the sum's name: S = sum(tl.exp(A - C)), A an elem line without
    reductions in it, C a row value computed from M = max(A) alone (M itself, or logsumexp's where(|M| == inf, 0,
    M)); (M's name, C's name, the row lines from M to C). A chunk's S_j = sum(exp(A - C_j)), C_j from the chunk's
    own max, rescales to the row's as S_j * exp(C_j - C)."""
    levels, found = _levels(program), {}
    for s in (ln for ln in program.lines if ln.reduce == "sum" and levels[ln.name] == 2):
        if (pair := _exp_difference(program, s)) is None:
            continue
        a, c = pair
        if a.kind != "elem" or levels[a.name] != 0 or c.kind != "row":
            continue
        chain: set[str] = set()
        sources: set[str] = set()  # what C reads other than row pointwise lines: M alone, for a shift of M's
        stack = [c.name]
        while stack:
            line = program.line(stack.pop())
            if line.kind == "row" and not line.reduce and line.load is None:
                if line.name not in chain:
                    chain.add(line.name)
                    stack.extend(line.deps)
            else:
                sources.add(line.name)
        m = program.line(sources.pop()) if len(sources) == 1 else None
        if m is not None and m.reduce == "max" and m.deps == (a.name,):
            found[s.name] = (m.name, c.name, [ln for ln in program.lines if ln.name in chain])
    return found


def splittable(program: Program) -> bool:
    """A row output from reductions of the loaded row (sum, mean, max, min) and of exp-shifted sums of it
    (`_shifted`): partial results combine."""
    levels, shifted = _levels(program), _shifted(program)
    return program.out_kind == "row" and all(
        (levels[ln.name] == 1 and ln.reduce != "argmax") or ln.name in shifted for ln in program.lines if ln.reduce)


def _partial(program: Program, tile: Tile) -> str:
    """Split rows, stage 1: program (row, split) (a tile's rows: (row block, split)) reduces columns
    [split * CHUNK, +CHUNK) into part[j, row, split]: the first-level reductions in one pass, then the exp-shifted
    sums in another, about shifts from the chunk's own max."""
    reduces = [ln for ln in program.lines if ln.reduce]
    shifted = _shifted(program)
    chains = {ln.name for _, _, chain in shifted.values() for ln in chain}
    chunk = {"start": "split * CHUNK", "stop": "tl.minimum(split * CHUNK + CHUNK, D)"}
    body = [*tile.prologue(program), *rows.row_loads(program, tile.row_mask), "split = tl.program_id(1)"]
    for level in ([ln for ln in reduces if ln.name not in shifted], [ln for ln in reduces if ln.name in shifted]):
        if not level:
            continue
        if level[0].name in shifted:
            body += [rows.pointwise(program, ln) for ln in program.lines if ln.name in chains]
        parts = [_accumulate(ln, tile) for ln in level]
        body += [x for p in parts for x in p[0]]
        body += _chunk_loop(program, tile, [ln.deps[0] for ln in level], [x for p in parts for x in p[1]], **chunk)
        body += [x for p in parts for x in p[2]]
    row, masked = ("row", "") if tile.kind == "row" else ("rows", ", mask=row_mask")
    body += [f"tl.store(part + ({j} * R + {row}) * SPLITS + split, {ln.name}{masked})" for j, ln in enumerate(reduces)]
    extra = ["part", "R", "CHUNK", "SPLITS"] + ([] if tile.kind == "row" else ["ROWS: tl.constexpr"])
    return jit_source(f"_kf_{tile.kind}_partial", rows.args(program, *extra), body)


def _combine(program: Program) -> str:
    """Split rows, stage 2: each row combines its SPLITS partials (an exp-shifted sum's each rescaled by
    exp(C_j - C), C_j its chunk's shift and C the row's, where the partial is not 0), then its row lines, and
    stores."""
    shifted = _shifted(program)
    body = ["row = tl.program_id(0)", *rows.offsets(program, "row"), "s = tl.arange(0, SPLITS_P2)"]
    reduces = [ln for ln in program.lines if ln.reduce]
    for j, ln in enumerate(reduces):
        body.append(f"parts_{ln.name} = tl.load(part + ({j} * R + row) * SPLITS + s, mask=s < SPLITS, "
                    f"other={_MASKED[str(ln.reduce)]})")
    body += [f"{ln.name} = {_COMBINE[str(ln.reduce)]}(parts_{ln.name}, axis=0)" for ln in reduces
             if ln.name not in shifted]
    known = {ln.name for ln in reduces}
    for name, (m, c, chain) in shifted.items():
        renamed = r"\b(" + "|".join([m, *(ln.name for ln in chain)]) + r")\b"
        for ln in chain:  # the shift of the row's max, then of each chunk's (vectors parts_*)
            if ln.name not in known:
                body.append(rows.pointwise(program, ln))
            body.append(re.sub(renamed, r"parts_\1", rows.pointwise(program, ln)))
        known.update(ln.name for ln in chain)
        body.append(f"{name} = tl.sum(tl.where(parts_{name} == 0.0, 0.0, parts_{name} * tl.exp(parts_{c} - {c})), "
                    "axis=0)")
    body += [rows.pointwise(program, ln) for ln in program.lines
             if ln.kind == "row" and not ln.reduce and ln.name not in known]
    body.append(rows.store(program))
    return jit_source("_kf_row_combine", [*rows.args(program)[:-1], "part", "R", "SPLITS", "SPLITS_P2: tl.constexpr"],
                      body)


def _strided_split(program: Program, params: dict[str, Any]) -> list[str]:
    """Wide strided rows too few for STRIDED_SPLIT_BELOW programs of strided_rows rows, of a splittable program:
    `_kf_rows_partial` on (row block, split), each split a multiple of the wide tile's chunk (rows.strided_tile),
    so that about STRIDED_SPLIT_PROGRAMS programs run, then `_kf_row_combine`."""
    if "split_below" not in params:
        return []
    (per, chunk, warps), call = rows.strided_tile(params), rows.launch_args(program)
    n_reduce = sum(1 for ln in program.lines if ln.reduce)
    return [
        f"if wide and _kf_cdiv(rows, {per}) < {STRIDED_SPLIT_BELOW} and D > {chunk}:",
        f"    splits = min(_kf_cdiv(D, {chunk}), max(1, {STRIDED_SPLIT_PROGRAMS} // _kf_cdiv(rows, {per})))",
        f"    chunk = _kf_cdiv(_kf_cdiv(D, splits), {chunk}) * {chunk}",
        "    splits = _kf_cdiv(D, chunk)",
        f"    part = p{program.full}.new_empty(({n_reduce}, rows, splits), dtype=torch.float32)",
        "    " + launch.call("_kf_rows_partial", f"(_kf_cdiv(rows, {per}), splits)",
                            f"{call}, part, rows, chunk, splits, ROWS={per}, BLOCK_D={chunk}, num_warps={warps}"),
        "    " + launch.call("_kf_row_combine", "(rows,)", f"{call}, part, rows, splits, SPLITS_P2=_kf_pow2(splits)"),
        "    return out",
    ]


def _forward(program: Program, params: dict[str, Any]) -> list[str]:
    split = []
    if "split_below" in params:
        full, cap, warps, call = f"p{program.full}", params["max_block_d"], params["num_warps"], rows.launch_args(program)
        n_reduce = sum(1 for ln in program.lines if ln.reduce)
        split = [
            f"if rows < {params['split_below']} and D > {cap}:",
            f"    splits = min(_kf_cdiv(D, {cap}), max(1, {SPLIT_PROGRAMS} // max(rows, 1)))",
            f"    chunk = _kf_cdiv(_kf_cdiv(D, splits), {cap}) * {cap}",
            "    splits = _kf_cdiv(D, chunk)",
            f"    part = {full}.new_empty(({n_reduce}, rows, splits), dtype=torch.float32)",
            "    " + launch.call("_kf_row_partial", "(rows, splits)", f"{call}, part, rows, chunk, splits, "
                                f"BLOCK_D={cap}, num_warps={rows.resident_warps(str(cap), warps, PER_THREAD)}"),
            "    " + launch.call("_kf_row_combine", "(rows,)",
                                f"{call}, part, rows, splits, SPLITS_P2=_kf_pow2(splits)"),
            "    return out",
        ]
    wide, head = None, rows.head(program)
    if "strided_rows" in params:
        wide = ("_kf_rows_looped", "wide")
        head.append(f"wide = z{_innermost(program)} >= {STRIDED_RUN} and block_d * {STRIDED_MIN_ROWS} > "
                    f"{params['min_tile']}")
        split = _strided_split(program, params) + split
    return head + split + rows.dispatch(program, params, "_kf_rows_resident", "_kf_row_resident", "_kf_row_looped",
                                        PER_THREAD, wide)


def render(plan: Plan, params: dict[str, Any]) -> str:
    program = plan.program
    kernels = [_resident(program, ROW, "_kf_row_resident"), _looped(program, ROW, "_kf_row_looped")]
    if "min_tile" in params:
        kernels.append(_resident(program, ROWS, "_kf_rows_resident"))
    if "strided_rows" in params:
        if not strided(program) or "min_tile" not in params:
            raise TemplateMismatch("strided_rows needs min_tile and rows adjacent in memory (the innermost axis kept)")
        kernels.append(_looped(program, ROWS, "_kf_rows_looped"))
    if "split_below" in params:
        if not splittable(program):
            raise TemplateMismatch("split rows need a row output from first-level sum/max/min reductions and "
                                   "exp-shifted sums of the row")
        kernels += [_partial(program, ROW), _combine(program)]
        if "strided_rows" in params:
            kernels.append(_partial(program, ROWS))
    return module_source(program, plan.reference, kernels, _forward(program, params))
