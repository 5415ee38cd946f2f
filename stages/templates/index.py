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


def _product(axes: list[int] | tuple[int, ...]) -> str:
    return " * ".join(f"z{a}" for a in axes) or "1"


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


def address(axes: tuple[int, ...], parts: list[tuple[str, tuple[int, ...]]], wide: bool = True) -> str:
    """The address (in elements) of a tensor spanning `axes`, for index variables `parts` ((name, its axes)).
    `wide` casts each scaled term to int64 first."""
    terms: list[str] = []
    for var, order in parts:
        for run in _runs(axes, order):
            first, last = order.index(run[0]), order.index(run[-1])
            index = var
            if last + 1 < len(order):
                index = f"({index} // ({_product(order[last + 1:])}))"
            if first > 0:
                index = f"({index} % ({_product(run)}))"
            stride = axes[axes.index(run[-1]) + 1:]
            if stride:
                index = f"{index}.to(tl.int64) * ({_product(stride)})" if wide else f"{index} * ({_product(stride)})"
            terms.append(index)
    return " + ".join(terms) or "0"


def flat(program: Program, axes: tuple[int, ...], var: str = "offs") -> str:
    """The address at flat index `var` over all axes, shaped like `var` even where the tensor spans no axis."""
    found = address(axes, [(var, tuple(range(len(program.sizes))))])
    return found if var in found else f"{found} + {var} * 0"


def kept(program: Program) -> tuple[int, ...]:
    return tuple(a for a in range(len(program.sizes)) if a not in program.reduced)


def size_args(program: Program) -> list[str]:
    return [f"z{k}" for k in range(len(program.sizes))]


def size_lines(program: Program) -> list[str]:
    """The forward's lines computing the sizes it passes: the bound input dims, then z<k> per axis."""
    return [*program.binds, *(f"z{k} = {size}" for k, size in enumerate(program.sizes))]
