"""Addresses in a kernel over a program's index space: where a tensor spanning some axes holds the element at given
indices.

A kernel enumerates the axes through index variables, each running row-major over a list of axes: the elementwise
family's flat `offs` over all axes, a row family's `row` over the kept axes and `cols` over the reduced ones (a
reduction over any set of dims is a row of that logical permute and reshape). Axis k's size is the kernel argument
`z<k>`. A tensor (read contiguous) spanning `axes` in its memory order has stride prod(z of the axes after it) on
each; a run of its axes that is also a run of one variable's list is one term: (var // the sizes after the run) %
the run's size, times the stride of the run's last axis. A tensor that spans none of a variable's axes broadcasts
along them.
"""

from __future__ import annotations

from kernelflow.stages.templates.program import Program


def _product(axes: list[int] | tuple[int, ...], size: str = "z") -> str:
    return " * ".join(f"{size}{a}" for a in axes) or "1"


def _runs(axes: tuple[int, ...], order: tuple[int, ...]) -> list[list[int]]:
    """The tensor's axes that `order` enumerates, cut into runs consecutive in both."""
    runs: list[list[int]] = []
    for a in (a for a in axes if a in order):
        last = runs[-1][-1] if runs else None
        if last is not None and axes.index(a) == axes.index(last) + 1 and order.index(a) == order.index(last) + 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    return runs


def address(axes: tuple[int, ...], parts: list[tuple[str, tuple[int, ...]]], wide: bool = True,
            size: str = "z") -> str:
    """The address (in elements) of a tensor spanning `axes`, for index variables `parts` ((name, its axes)).
    `wide` casts each scaled term to int64 first; axis k's size is `size`<k>."""
    terms: list[str] = []
    for var, order in parts:
        for run in _runs(axes, order):
            first, last = order.index(run[0]), order.index(run[-1])
            index = var
            if last + 1 < len(order):
                index = f"({index} // ({_product(order[last + 1:], size)}))"
            if first > 0:
                index = f"({index} % ({_product(run, size)}))"
            stride = axes[axes.index(run[-1]) + 1:]
            if stride:
                scale = _product(stride, size)
                index = f"{index}.to(tl.int64) * ({scale})" if wide else f"{index} * ({scale})"
            terms.append(index)
    return " + ".join(terms) or "0"


def flat(program: Program, axes: tuple[int, ...], var: str = "offs", size: str = "z") -> str:
    """The address at flat index `var` over all axes, shaped like `var` even where the tensor spans no axis."""
    found = address(axes, [(var, tuple(range(len(program.sizes))))], size=size)
    return found if var in found else f"{found} + {var} * 0"


def kept(program: Program) -> tuple[int, ...]:
    return tuple(a for a in range(len(program.sizes)) if a not in program.reduced)


def size_args(program: Program, size: str = "z") -> list[str]:
    return [f"{size}{k}" for k in range(len(program.sizes))]


def size_lines(program: Program, size: str = "z") -> list[str]:
    """The forward's lines computing the sizes it passes: the bound input dims, then `size`<k> per axis."""
    return [*program.binds, *(f"{size}{k} = {expr}" for k, expr in enumerate(program.sizes))]
