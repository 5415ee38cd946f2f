"""Numbers as kernelflow prints them: speedups to 3 significant digits, times in microseconds to one decimal, counts
too large for a column in engineering notation, and a missing measurement said in words."""

from __future__ import annotations

import math

NOT_TIMED = "not timed"
_PREFIXES = ["", "k", "M", "G", "T", "P"]


def _missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def sig(x: float, digits: int = 3) -> str:
    """`x` to `digits` significant digits in fixed notation: 0.0145, 1.43, 216, 1430."""
    x = float(f"{x:.{digits}g}")
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def speedup(x: float | None, missing: str = NOT_TIMED) -> str:
    """A speedup as `1.43x`; `missing` when it was not measured."""
    return missing if _missing(x) else f"{sig(x)}x"  # type: ignore[arg-type]


def us(x: float | None, missing: str = "-") -> str:
    """Microseconds to one decimal."""
    return missing if _missing(x) else f"{x:.1f}"


def eng(x: float | None, missing: str = "-") -> str:
    """3 significant digits with an SI prefix from a thousand up: 2.50, 812, 5.24G."""
    if _missing(x):
        return missing
    x = float(f"{x:.3g}")  # 999.9 is 1.00k
    step = min(max(0, math.floor(math.log10(abs(x))) // 3), len(_PREFIXES) - 1) if x else 0  # type: ignore[arg-type]
    return sig(x / 1000 ** step) + _PREFIXES[step]  # type: ignore[operator]
