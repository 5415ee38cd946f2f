"""The index space of a lowered program: axes that every tensor of the graph is made of.

Each tensor value's layout is, per dim, the axes that dim spans (major to minor; none for a dim of size 1). A binary
op's broadcast makes the axes of its operands' matching dims the same (union), a view regroups a value's axes into
its new dims (splitting an axis where a new dim boundary falls inside it: GroupNorm's C into groups and channels per
group), a permute reorders dims. So a reduction over any set of dims is a reduction over a set of axes, and an
operand that broadcasts along any dims (a per-channel [C, 1, 1] parameter) spans a subset of the axes.

Sizes are sympy expressions over the trace's size symbols; hints (their values at the traced shape) decide how a view
groups axes.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from kernelflow.stages.templates.program import TemplateMismatch

Layout = tuple[tuple[int, ...], ...]  # per dim of a value: the axes it spans, major to minor


class Space:
    """Axes, found by union-find; `simplify` maps a size to the form in which equal sizes are equal (the trace's
    guards applied)."""

    def __init__(self, simplify: Callable[[sympy.Expr], sympy.Expr] = sympy.simplify) -> None:
        self.simplify = simplify
        self.named: Callable[[sympy.Expr], sympy.Expr] = lambda size: size  # a view's constant size, named
        self.parent: list[int] = []
        self.size: list[sympy.Expr] = []
        self.hint: list[int] = []
        self.split: dict[int, tuple[int, int]] = {}  # a split axis: (outer, inner)
        self.loose = False  # while set, a union of sizes equal only at the traced shape is assumed (and recorded)
        self.assumed: list[tuple[sympy.Expr, sympy.Expr]] = []  # sizes the candidate checks equal at run time

    def new(self, size: sympy.Expr, hint: int) -> int:
        self.parent.append(len(self.parent))
        self.size.append(sympy.sympify(size))
        self.hint.append(int(hint))
        return len(self.parent) - 1

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def leaves(self, a: int) -> tuple[int, ...]:
        a = self.find(a)
        if a in self.split:
            outer, inner = self.split[a]
            return self.leaves(outer) + self.leaves(inner)
        return (a,)

    def flat(self, layout: Layout) -> tuple[int, ...]:
        return tuple(leaf for dim in layout for a in dim for leaf in self.leaves(a))

    def split_axis(self, a: int, outer: sympy.Expr, hint: int) -> tuple[int, int]:
        """Split leaf a into (outer of size `outer`, inner of the rest)."""
        a = self.find(a)
        if self.hint[a] % hint:
            raise TemplateMismatch(f"a view splits a dim of size {self.hint[a]} by {hint}")
        parts = (self.new(outer, hint), self.new(sympy.simplify(self.size[a] / outer), self.hint[a] // hint))
        self.split[a] = parts
        return parts

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        if self.hint[a] != self.hint[b]:
            raise TemplateMismatch(f"dims of sizes {self.size[a]} and {self.size[b]} meet in one op")
        if sympy.simplify(self.simplify(self.size[a]) - self.simplify(self.size[b])) != 0:
            if not self.loose:
                raise TemplateMismatch(f"dims of sizes {self.size[a]} and {self.size[b]} meet in one op")
            self.assumed.append((self.size[a], self.size[b]))
        if a in self.split and b in self.split:
            self.unify(self.leaves(a), self.leaves(b))
            return
        if b in self.split:
            a, b = b, a
        if a in self.split:  # b takes a's split
            outer, inner = self.split[a]
            o, i = self.split_axis(b, self.size[outer], self.hint[outer])
            self.union(outer, o)
            self.union(inner, i)
            return
        if not self.size[a].free_symbols and self.size[b].free_symbols:
            a, b = b, a  # the root keeps a size that follows the inputs' shapes
        self.parent[b] = a

    def unify(self, xs: tuple[int, ...], ys: tuple[int, ...]) -> None:
        """Make two runs of axes of the same total size the same axes, splitting where their boundaries differ."""
        left, right = list(xs), list(ys)
        while left and right:
            a, b = self.find(left[0]), self.find(right[0])
            if a in self.split or b in self.split:
                left[:1], right[:1] = self.leaves(a), self.leaves(b)
                continue
            ha, hb = self.hint[a], self.hint[b]
            if ha == hb:
                self.union(a, b)
                left.pop(0)
                right.pop(0)
            elif ha > hb:
                outer, inner = self.split_axis(a, self.size[b], hb)
                self.union(outer, b)
                left[0] = inner
                right.pop(0)
            else:
                outer, inner = self.split_axis(b, self.size[a], ha)
                self.union(outer, a)
                right[0] = inner
                left.pop(0)
        if left or right:
            raise TemplateMismatch("dims of different sizes meet in one op")

    def regroup(self, layout: Layout, shape: list[tuple[sympy.Expr, int]]) -> Layout:
        """A view of a value of `layout` as `shape` ((size, hint) per new dim): its axes grouped into the new dims."""
        pending = list(self.flat(layout))
        out: list[tuple[int, ...]] = []
        for size, hint in shape:
            dim: list[int] = []
            need, done = hint, sympy.Integer(1)
            while need > 1:
                if not pending:
                    raise TemplateMismatch("a view to more elements than its input")
                a = self.find(pending[0])
                h = self.hint[a]
                if need % h == 0:
                    dim.append(pending.pop(0))
                    need //= h
                    done *= self.size[a]
                elif h % need == 0:
                    outer, inner = self.split_axis(a, self.named(sympy.simplify(size / done)), need)
                    dim.append(outer)
                    pending[0] = inner
                    need = 1
                else:
                    raise TemplateMismatch(f"a view regroups a dim of size {h} across new dims")
            out.append(tuple(dim))
        if pending:
            raise TemplateMismatch("a view to fewer elements than its input")
        return tuple(out)

    def numel(self, axes: tuple[int, ...]) -> int:
        total = 1
        for a in axes:
            total *= self.hint[self.find(a)]
        return total
