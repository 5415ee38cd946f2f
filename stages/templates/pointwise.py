"""Pointwise torch ops as Triton expressions over fp32 values (each argument is a name or a literal)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelflow.stages.templates.program import TemplateMismatch


@dataclass(frozen=True)
class Op:
    params: tuple[str, ...]  # torch's positional parameter names, in order
    build: Callable[..., str]  # the named arguments -> a Triton expression
    raw: tuple[str, ...] = ()  # parameters passed as Python values, not as names or literals
    helpers: tuple[str, ...] = ()  # HELPERS that the expression calls


def _pow(input: str, exponent: Any) -> str:
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        raise TemplateMismatch(f"pow with a non-constant exponent {exponent!r}")
    if float(exponent).is_integer() and 1 <= exponent <= 4:
        return " * ".join([input] * int(exponent))
    if exponent == 0.5:
        return f"tl.sqrt({input})"
    if exponent == -0.5:
        return f"tl.rsqrt({input})"
    if exponent == -1:
        return f"1.0 / {input}"
    return f"tl.exp2({float(exponent)!r} * tl.log2({input}))"


def _clamp(input: str, min: str | None = None, max: str | None = None) -> str:
    out = input if min is None else f"tl.maximum({input}, {min})"
    return out if max is None else f"tl.minimum({out}, {max})"


def _gelu(input: str, approximate: str = "none") -> str:
    if approximate == "tanh":
        return f"0.5 * {input} * (1.0 + _kf_tanh(0.7978845608028654 * ({input} + 0.044715 * {input} * {input} * {input})))"
    return f"0.5 * {input} * (1.0 + tl.erf({input} * 0.7071067811865476))"


def _binary(symbol: str) -> Op:
    return Op(("input", "other"), lambda input, other: f"{input} {symbol} {other}")


def _unary(template: str, helpers: tuple[str, ...] = ()) -> Op:
    return Op(("input",), lambda input: template.format(x=input), helpers=helpers)


OPS: dict[str, Op] = {
    "add": _binary("+"),
    "sub": _binary("-"),
    "mul": _binary("*"),
    "truediv": _binary("/"),
    "div": _binary("/"),
    "gt": _binary(">"),
    "lt": _binary("<"),
    "ge": _binary(">="),
    "le": _binary("<="),
    "eq": _binary("=="),
    "ne": _binary("!="),
    "maximum": Op(("input", "other"), lambda input, other: f"tl.maximum({input}, {other})"),
    "minimum": Op(("input", "other"), lambda input, other: f"tl.minimum({input}, {other})"),
    "neg": _unary("-{x}"),
    "abs": _unary("tl.abs({x})"),
    "exp": _unary("tl.exp({x})"),
    "log": _unary("tl.log({x})"),
    "sqrt": _unary("tl.sqrt({x})"),
    "rsqrt": _unary("tl.rsqrt({x})"),
    "reciprocal": _unary("1.0 / {x}"),
    "square": _unary("{x} * {x}"),
    "sin": _unary("tl.sin({x})"),
    "cos": _unary("tl.cos({x})"),
    "tanh": _unary("_kf_tanh({x})", ("_kf_tanh",)),
    "sigmoid": _unary("tl.sigmoid({x})"),
    "silu": _unary("{x} * tl.sigmoid({x})"),
    "relu": _unary("tl.maximum({x}, 0.0)"),
    "hardsigmoid": _unary("tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)"),
    "hardswish": _unary("{x} * tl.minimum(tl.maximum({x} / 6.0 + 0.5, 0.0), 1.0)"),
    "contiguous": _unary("{x}"),
    "float": _unary("{x}"),
    "leaky_relu": Op(("input", "negative_slope"),
                     lambda input, negative_slope="0.01": f"tl.where({input} >= 0.0, {input}, {input} * {negative_slope})"),
    "gelu": Op(("input", "approximate"), _gelu, raw=("approximate",), helpers=("_kf_tanh",)),
    "pow": Op(("input", "exponent"), _pow, raw=("exponent",)),
    "clamp": Op(("input", "min", "max"), _clamp),
    "clip": Op(("input", "min", "max"), _clamp),
    "clamp_min": Op(("input", "min"), _clamp),
    "clamp_max": Op(("input", "max"), lambda input, max: _clamp(input, None, max)),
    "hardtanh": Op(("input", "min_val", "max_val"),
                   lambda input, min_val="-1.0", max_val="1.0": _clamp(input, min_val, max_val)),
    "where": Op(("condition", "input", "other"),
                lambda condition, input, other: f"tl.where({condition}, {input}, {other})"),
}
