"""The pointwise ATen/prims primitives that torch's decompositions produce, as Triton expressions over fp32 values.

An entry takes the op's arguments by their schema names: `a` holds each tensor or number argument rendered (a line
name or a literal; None when absent), `raw` the Python values (dtypes, modes). What is not here is named by the
lowering as an op no family lowers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernelflow.stages.templates.program import TemplateMismatch

HELPERS: dict[str, str] = {
    "_kf_tanh": '''@triton.jit
def _kf_tanh(x):
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0.0, -y, y)
''',
    "_kf_tanh_softplus": '''@triton.jit
def _kf_tanh_softplus(x, threshold):
    e = tl.exp(tl.where(x > threshold, threshold, x))
    n = e * (e + 2.0)
    return tl.where(x > threshold, 1.0, n / (n + 2.0))
''',
    "_kf_expm1": '''@triton.jit
def _kf_expm1(x):
    small = tl.abs(x) < 1e-2
    series = x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0))))
    return tl.where(small, series, tl.exp(x) - 1.0)
''',
    "_kf_log1p": '''@triton.jit
def _kf_log1p(x):
    small = tl.abs(x) < 1e-3
    series = x * (1.0 + x * (-0.5 + x * (1.0 / 3.0 - 0.25 * x)))
    return tl.where(small, series, tl.log(1.0 + x))
''',
}

Build = Callable[[dict[str, Any], dict[str, Any]], str]


def _unary(template: str) -> Build:
    return lambda a, raw: template.format(x=a.get("self") if a.get("self") is not None else a["a"])


def _binary(symbol: str) -> Build:
    return lambda a, raw: f"{a['self']} {symbol} {a['other']}"


def _scaled(symbol: str) -> Build:
    def build(a: dict[str, Any], raw: dict[str, Any]) -> str:
        other = a["other"] if raw.get("alpha", 1) == 1 else f"{a['other']} * {a['alpha']}"
        return f"{a['self']} {symbol} {other}"
    return build


def _pow(a: dict[str, Any], raw: dict[str, Any]) -> str:
    x, exponent = a["self"], raw.get("exponent")
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)):
        return f"tl.exp2({a['exponent']} * tl.log2({x}))"  # a tensor exponent: positive bases only
    if float(exponent).is_integer() and 0 <= exponent <= 4:
        return " * ".join([x] * int(exponent)) or "1.0"
    named = {0.5: f"tl.sqrt({x})", -0.5: f"tl.rsqrt({x})", -1: f"1.0 / {x}", -2: f"1.0 / ({x} * {x})"}
    if exponent in named:
        return named[exponent]
    if float(exponent).is_integer():  # an odd or even integer power of a negative base keeps its sign rule
        magnitude = f"tl.exp2({float(exponent)!r} * tl.log2(tl.abs({x})))"
        return magnitude if int(exponent) % 2 == 0 else f"tl.where({x} < 0.0, -{magnitude}, {magnitude})"
    return f"tl.exp2({float(exponent)!r} * tl.log2({x}))"


def _clamp(a: dict[str, Any], raw: dict[str, Any]) -> str:
    out = a["self"]
    if a.get("min") is not None:
        out = f"tl.maximum({out}, {a['min']})"
    if a.get("max") is not None:
        out = f"tl.minimum({out}, {a['max']})"
    return out


def _div(a: dict[str, Any], raw: dict[str, Any]) -> str:
    mode = raw.get("rounding_mode")
    quotient = f"{a['self']} / {a['other']}"
    if mode is None:
        return quotient
    if mode == "floor":
        return f"tl.floor({quotient})"
    return f"_kf_trunc({quotient})"


def _convert(a: dict[str, Any], raw: dict[str, Any]) -> str:
    dtype = raw.get("dtype")
    x: str = a["a"] if a.get("a") is not None else a["self"]
    if dtype is None or dtype.is_floating_point:
        return x  # every value is fp32 in the kernel; the store casts to the output's dtype
    if dtype == torch.bool:
        return f"({x} != 0)"
    return f"_kf_trunc({x})"


OPS: dict[str, Build] = {
    "add": _scaled("+"),
    "sub": _scaled("-"),
    "rsub": lambda a, raw: f"{a['other']} - {a['self']}",
    "mul": _binary("*"),
    "div": _div,
    "eq": _binary("=="),
    "ne": _binary("!="),
    "gt": _binary(">"),
    "ge": _binary(">="),
    "lt": _binary("<"),
    "le": _binary("<="),
    "logical_and": lambda a, raw: f"(({a['self']} != 0) & ({a['other']} != 0))",
    "logical_or": lambda a, raw: f"(({a['self']} != 0) | ({a['other']} != 0))",
    "logical_not": _unary("({x} == 0)"),
    "bitwise_not": _unary("({x} == 0)"),  # of a bool tensor (the lowering declines other dtypes)
    "maximum": lambda a, raw: f"tl.maximum({a['self']}, {a['other']})",
    "minimum": lambda a, raw: f"tl.minimum({a['self']}, {a['other']})",
    "neg": _unary("-{x}"),
    "abs": _unary("tl.abs({x})"),
    "exp": _unary("tl.exp({x})"),
    "exp2": _unary("tl.exp2({x})"),
    "expm1": _unary("_kf_expm1({x})"),
    "log": _unary("tl.log({x})"),
    "log2": _unary("tl.log2({x})"),
    "log1p": _unary("_kf_log1p({x})"),
    "sqrt": _unary("tl.sqrt({x})"),
    "rsqrt": _unary("tl.rsqrt({x})"),
    "reciprocal": _unary("1.0 / {x}"),
    "sin": _unary("tl.sin({x})"),
    "cos": _unary("tl.cos({x})"),
    "tanh": _unary("_kf_tanh({x})"),
    "sigmoid": _unary("tl.sigmoid({x})"),
    "erf": _unary("tl.erf({x})"),
    "relu": _unary("tl.maximum({x}, 0.0)"),
    "sign": _unary("tl.where({x} > 0.0, 1.0, tl.where({x} < 0.0, -1.0, 0.0))"),
    "floor": _unary("tl.floor({x})"),
    "ceil": _unary("tl.ceil({x})"),
    "trunc": _unary("_kf_trunc({x})"),
    "isnan": _unary("({x} != {x})"),
    "isinf": _unary("(tl.abs({x}) == float(\"inf\"))"),
    "clamp": _clamp,
    "clamp_min": lambda a, raw: f"tl.maximum({a['self']}, {a['min']})",
    "clamp_max": lambda a, raw: f"tl.minimum({a['self']}, {a['max']})",
    "pow": _pow,
    "where": lambda a, raw: f"tl.where({a['condition']}, {a['self']}, {a['other']})",
    "fmod": lambda a, raw: f"({a['self']} - _kf_trunc({a['self']} / {a['other']}) * {a['other']})",
    "remainder": lambda a, raw: f"({a['self']} - tl.floor({a['self']} / {a['other']}) * {a['other']})",
    "addcmul": lambda a, raw: f"{a['self']} + {a['value']} * {a['tensor1']} * {a['tensor2']}",
    "addcdiv": lambda a, raw: f"{a['self']} + {a['value']} * {a['tensor1']} / {a['tensor2']}",
    "lerp": lambda a, raw: f"{a['self']} + {a['weight']} * ({a['end']} - {a['self']})",
    "clone": _unary("{x}"),
    "alias": _unary("{x}"),
    "lift_fresh_copy": _unary("{x}"),
    "_to_copy": _convert,
    "convert_element_type": _convert,
}

# helpers each expression needs, found by name in the expression
HELPERS["_kf_trunc"] = '''@triton.jit
def _kf_trunc(x):
    return tl.where(x < 0.0, tl.ceil(x), tl.floor(x))
'''


def helpers_of(expr: str) -> set[str]:
    return {name for name in HELPERS if f"{name}(" in expr}


def build(name: str, a: dict[str, Any], raw: dict[str, Any]) -> str:
    if name not in OPS:
        raise KeyError(name)
    try:
        return OPS[name](a, raw)
    except KeyError as e:
        raise TemplateMismatch(f"aten.{name} called without its argument {e}") from e
