"""Stand-ins for libdevice functions in Triton's CPU interpreter, which runs no libdevice call (its stubs return None).

A candidate whose kernels call `libdevice.NAME` (Inductor's do) carries this class and uses it only when Triton
interprets (`triton.knobs.runtime.interpret`): CPU verification of the kernels' structure, indexing and masks. On a
GPU the kernels call libdevice itself. Each stand-in is built from tl.math functions the interpreter runs, accurate
to a few float32 ulps on moderate arguments (log1p and expm1 switch to their series near 0); a function not here
raises with its name. The candidate's copy is the class's source (SOURCE).
"""

from __future__ import annotations

import inspect

import triton.language as tl


class _KfInterpretedLibdevice:
    """Used as an instance (`libdevice = _KfInterpretedLibdevice()`); tl's functions are looked up at each call, when
    the interpreter has patched them."""

    def __getattr__(self, name):
        if name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "floor", "ceil", "abs", "sin", "cos", "fma"):
            return getattr(tl, name)
        raise NotImplementedError(f"libdevice.{name} has no stand-in in Triton's interpreter")

    @staticmethod
    def log10(x):
        return tl.log(x) * 0.4342944819032518

    @staticmethod
    def log1p(x):
        return tl.where(tl.abs(x) < 1e-4, x * (1.0 - x * (0.5 - x / 3.0)), tl.log(1.0 + x))

    @staticmethod
    def expm1(x):
        return tl.where(tl.abs(x) < 1e-4, x * (1.0 + x * (0.5 + x / 6.0)), tl.exp(x) - 1.0)

    @staticmethod
    def erfc(x):
        return 1.0 - tl.erf(x)

    @staticmethod
    def tanh(x):
        return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)

    fast_tanhf = tanh

    @staticmethod
    def sinh(x):
        return (tl.exp(x) - tl.exp(-x)) * 0.5

    @staticmethod
    def cosh(x):
        return (tl.exp(x) + tl.exp(-x)) * 0.5

    @staticmethod
    def tan(x):
        return tl.sin(x) / tl.cos(x)

    @staticmethod
    def trunc(x):
        return tl.where(x < 0, tl.ceil(x), tl.floor(x))

    @staticmethod
    def nearbyint(x):  # round half to even, as rint
        r = tl.floor(x + 0.5)
        return tl.where((r - x == 0.5) & (r - 2.0 * tl.floor(r * 0.5) != 0), r - 1.0, r)

    llrint = nearbyint

    @staticmethod
    def fmod(a, b):
        q = a / b
        return a - tl.where(q < 0, tl.ceil(q), tl.floor(q)) * b

    @staticmethod
    def pow(a, b):
        mag = tl.exp(b * tl.log(tl.abs(a)))
        odd = (tl.floor(b) == b) & (b - 2.0 * tl.floor(b * 0.5) != 0)
        return tl.where(a < 0, tl.where(tl.floor(b) == b, tl.where(odd, -mag, mag), float("nan")),
                        tl.where(a == 0, tl.where(b == 0, 1.0, tl.where(b < 0, float("inf"), 0.0)), mag))

    @staticmethod
    def isnan(x):
        return x != x

    @staticmethod
    def isinf(x):
        return tl.abs(x) == float("inf")

    @staticmethod
    def signbit(x):
        return x < 0

    @staticmethod
    def copysign(a, b):
        return tl.where(b < 0, -tl.abs(a), tl.abs(a))

    @staticmethod
    def hypot(a, b):
        return tl.sqrt(a * a + b * b)


SOURCE = inspect.getsource(_KfInterpretedLibdevice)
