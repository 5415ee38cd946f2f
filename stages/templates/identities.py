"""Algebraic identities applied to a lowered program's lines: a chain of pointwise lines replaced by one cheaper
expression of the same value (to float32 rounding), the chain's lines no longer read dropped.

- tanh(softplus(x)) (mish's inner term; softplus as torch decomposes it with beta 1: where(x > T, x,
  log1p(exp(x)))) = n / (n + 2) with n = e * (e + 2), e = exp(x): with 1 + e = u, tanh(log u) = (u^2 - 1) /
  (u^2 + 1). One exponential and one division instead of two exponentials, a logarithm and a division. Above T
  the value is tanh(x), which for T >= 9 is within one float32 ulp of 1 (1 - tanh(9) = 3e-8), so it is 1.
"""

from __future__ import annotations

import re

from kernelflow.stages.templates.program import Line

TANH_SOFTPLUS_MIN_THRESHOLD = 9.0

_NAME = r"(\w+)"


def _tanh_softplus(line: Line, by_name: dict[str, Line]) -> Line | None:
    """`line` as one _kf_tanh_softplus call where it is tanh(where(x > T, x, log1p(exp(x)))), T >= 9."""
    found = re.fullmatch(rf"_kf_tanh\({_NAME}\)", line.expr)
    softplus = by_name.get(found[1]) if found else None
    parts = re.fullmatch(rf"tl\.where\({_NAME}, {_NAME}, {_NAME}\)", softplus.expr) if softplus else None
    if parts is None:
        return None
    cond, x, log1p = (by_name.get(name) for name in parts.groups())
    if cond is None or log1p is None:
        return None
    above = re.fullmatch(rf"{re.escape(parts[2])} > \(?([0-9.e+-]+)\)?", cond.expr)
    inner = re.fullmatch(rf"_kf_log1p\({_NAME}\)", log1p.expr)
    exp = by_name.get(inner[1]) if inner else None
    if above is None or exp is None or exp.expr != f"tl.exp({parts[2]})":
        return None
    threshold = float(above[1])
    if threshold < TANH_SOFTPLUS_MIN_THRESHOLD:
        return None
    return Line(name=line.name, kind=line.kind, deps=(parts[2],), expr=f"_kf_tanh_softplus({parts[2]}, {threshold!r})")


def apply(lines: list[Line], output: str) -> list[Line]:
    """The lines with every identity applied, then the pointwise lines nothing reads any more (not the output)
    dropped; loads, reductions and scans stay."""
    by_name = {line.name: line for line in lines}
    out = [_tanh_softplus(line, by_name) or line for line in lines]
    while True:
        read = {dep for line in out for dep in line.deps} | {output}
        kept = [line for line in out if line.name in read or line.load is not None or line.reduce or line.scan]
        if len(kept) == len(out):
            return out
        out = kept
