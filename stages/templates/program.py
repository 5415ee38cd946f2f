"""The row program: what a template family renders, lowered from the reference's torch.fx graph.

Every value is one of three kinds: `elem` (one per element of the full tensor), `row` (one per row,
the result of a reduction over the last dim) or `scalar` (a literal or a float attribute of the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kernelflow.stages.errors import KernelflowError

Kind = Literal["elem", "row", "scalar"]
Reduction = Literal["sum", "max", "min", "argmax"]
Scan = Literal["sum", "prod", "max", "min"]


class TemplateMismatch(KernelflowError):
    """A template family does not apply to a problem; the reason says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Value:
    text: str  # a line name, a literal, or a scalar kernel argument
    kind: Kind


@dataclass(frozen=True)
class Line:
    """One SSA assignment in the kernel: a load, a reduction over the row, or a pointwise expression."""

    name: str
    kind: Kind
    deps: tuple[str, ...] = ()  # names of the lines it reads
    expr: str = ""  # pointwise: the Triton expression
    load: int | None = None  # load: index of the operand
    reduce: Reduction | None = None  # reduction of deps[0] over the row
    scan: Scan | None = None  # inclusive scan of deps[0] along the row (an elem value; only lower(scans=True))


@dataclass(frozen=True)
class Operand:
    """A tensor the kernel reads: a forward argument or a parameter of the model."""

    expr: str  # how forward names it: 'x', 'self.norm.weight'
    broadcast: bool  # its shape is a proper suffix of the full shape (read modulo its size)
    axes: tuple[int, ...] = ()  # the index space's axes it spans, in its memory order (it is read contiguous)


@dataclass(frozen=True)
class Program:
    args: tuple[str, ...]  # forward's argument names
    operands: tuple[Operand, ...]
    full: int  # index of an operand whose shape is the full shape
    scalars: tuple[str, ...]  # forward expressions passed as scalar arguments s0, s1, ...
    helpers: tuple[str, ...]  # names of the @triton.jit helpers the lines call
    lines: tuple[Line, ...]
    output: str  # the line stored
    out_kind: Kind
    out_keepdim: bool  # a row output keeps the reduced dim as size 1
    out_dtype: str  # e.g. 'torch.float32'
    sizes: tuple[str, ...] = ()  # each axis of the index space: its size as a forward expression
    binds: tuple[str, ...] = ()  # forward lines binding the names `sizes` reads (n_s0 = x.shape[0])
    reduced: tuple[int, ...] = ()  # the axes every reduction (or the scan) of the program runs over
    out_axes: tuple[int, ...] = ()  # the axes the output spans, in its memory order
    out_shape: str = ""  # the output's shape as a forward expression
    out_dims: tuple[str, ...] = ()  # each dim of the output's shape as a forward expression
    virtual: tuple[tuple[int, ...], ...] = ()  # the axes of each value a family computes itself (Decomposed.virtual)

    def line(self, name: str) -> Line:
        return next(line for line in self.lines if line.name == name)

    def closure(self, roots: list[str]) -> list[Line]:
        """The elem lines the roots need, in program order (row values are computed outside it)."""
        needed, stack = set(), list(roots)
        while stack:
            line = self.line(stack.pop())
            if line.kind == "elem" and line.name not in needed:
                needed.add(line.name)
                stack.extend(line.deps)
        return [line for line in self.lines if line.name in needed]

    @property
    def reduces(self) -> bool:
        return any(line.reduce for line in self.lines)

    @property
    def scans(self) -> bool:
        return any(line.scan for line in self.lines)


@dataclass(frozen=True)
class Plan:
    """What a family matched: the lowered program and the reference class to subclass."""

    program: Program
    reference: str  # source of the problem's Model renamed _Reference, with the module names it needs
