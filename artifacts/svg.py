"""Inline SVG charts for the HTML report (artifacts/report.py): points and lines on linear or log axes, and
horizontal bars. Each chart is one self-contained <svg> element: no script, no font or image to fetch; a mark's
<title> is its tooltip."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Literal

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22"]
FAILED = "#c0392b"
_SI = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
MARGIN = {"left": 64, "right": 16, "top": 16, "bottom": 44}


def fmt(value: float) -> str:
    """A tick label: 2.5T, 40M, 0.02, 1e-05."""
    if value == 0:
        return "0"
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:g}{prefix}"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.0e}"


@dataclass
class Series:
    """Marks of one name: points (x, y, tooltip), y None drawn as a failure on the x axis."""

    name: str
    points: Sequence[tuple[float, float | None, str]]
    color: str
    line: Literal["none", "line", "step"] = "none"
    markers: bool = True
    dashed: bool = False


@dataclass
class Scale:
    lo: float
    hi: float
    start: float  # pixel of lo
    end: float  # pixel of hi
    log: bool = False

    def __post_init__(self) -> None:
        if self.log:  # a margin of 30% each side, so marks never sit on the frame
            self.lo, self.hi = self.lo / 1.3, self.hi * 1.3
        elif self.hi == self.lo:
            self.lo, self.hi = self.lo - 1, self.hi + 1

    def _t(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def __call__(self, v: float) -> float:
        lo, hi = self._t(self.lo), self._t(self.hi)
        return self.start + (self._t(v) - lo) / (hi - lo) * (self.end - self.start)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            span = math.log10(self.hi / self.lo)
            mults = (1,) if span > 3 else (1, 2, 5) if span > 1 else (1, 1.5, 2, 3, 5, 7)
            every = max(1, math.ceil((last - first) / 7))
            return [m * 10.0 ** d for d in range(first, last + 1) for m in mults
                    if self.lo <= m * 10.0 ** d <= self.hi and (m != 1 or (d - first) % every == 0)]
        raw = (self.hi - self.lo) / 5
        step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def _domain(values: list[float], log: bool) -> tuple[float, float]:
    values = [v for v in values if v > 0] if log else values
    if not values:
        return (0.1, 10.0) if log else (0.0, 1.0)
    return min(values), max(values)


def chart(series: list[Series], *, x_label: str, y_label: str, log_x: bool = False, log_y: bool = False,
          width: int = 440, height: int = 280, hlines: Sequence[tuple[float, str, str]] = (), integer_x: bool = False,
          label: str = "") -> str:
    """A point/line chart; hlines are reference lines (y, label, color) drawn across."""
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points if p[1] is not None] + [y for y, _, _ in hlines]
    x_lo, x_hi = _domain(xs, log_x)
    y_lo, y_hi = _domain(ys, log_y)
    if integer_x:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    left, top, right, bottom = MARGIN["left"], MARGIN["top"], width - MARGIN["right"], height - MARGIN["bottom"]
    sx, sy = Scale(x_lo, x_hi, left, right, log_x), Scale(y_lo, y_hi, bottom, top, log_y)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{escape(label or y_label)}" class="chart">',
           f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fff" stroke="#999"/>']
    x_ticks = [t for t in sx.ticks() if not integer_x or t == int(t)]
    for t in x_ticks:
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eee"/>'
                   f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">{fmt(t)}</text>')
    for t in sy.ticks():
        y = sy(t)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">{fmt(t)}</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{height - 8}" text-anchor="middle" class="axis">{escape(x_label)}</text>'
               f'<text transform="translate(14 {(top + bottom) / 2}) rotate(-90)" text-anchor="middle" class="axis">'
               f'{escape(y_label)}</text>')
    for ref, name, color in hlines:
        out.append(f'<line x1="{left}" y1="{sy(ref):.1f}" x2="{right}" y2="{sy(ref):.1f}" stroke="{color}" '
                   f'stroke-dasharray="5 3"><title>{escape(name)}</title></line>'
                   f'<text x="{right - 4}" y="{sy(ref) - 4:.1f}" text-anchor="end" class="ref" fill="{color}">'
                   f'{escape(name)}</text>')
    for s in series:
        out.append(f'<g class="series" data-name="{escape(s.name)}">')
        drawn = [(sx(x), sy(y)) for x, y, _ in s.points if y is not None]
        if s.line != "none" and len(drawn) > 1:
            steps = [drawn[0]]
            for (_, y0), (x1, y1) in zip(drawn, drawn[1:], strict=False):
                steps += [(x1, y0), (x1, y1)] if s.line == "step" else [(x1, y1)]
            path = " ".join(f"{'M' if i == 0 else 'L'}{px:.1f},{py:.1f}" for i, (px, py) in enumerate(steps))
            dash = ' stroke-dasharray="6 3"' if s.dashed else ""
            out.append(f'<path d="{path}" fill="none" stroke="{s.color}" stroke-width="2"{dash}>'
                       f'<title>{escape(s.name)}</title></path>')
        for x, value, tip in s.points if s.markers else []:
            if value is None:  # a failure: a cross on the x axis
                px = sx(x)
                out.append(f'<path class="failed" d="M{px - 4:.1f},{bottom - 4} L{px + 4:.1f},{bottom + 4} '
                           f'M{px - 4:.1f},{bottom + 4} L{px + 4:.1f},{bottom - 4}" stroke="{FAILED}" '
                           f'stroke-width="2"><title>{escape(tip)}</title></path>')
            else:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(value):.1f}" r="4" fill="{s.color}" fill-opacity="0.8">'
                           f'<title>{escape(tip)}</title></circle>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


@dataclass
class Bar:
    """One horizontal bar: a label and its segments (name, value, color), stacked left to right."""

    label: str
    segments: list[tuple[str, float, str]] = field(default_factory=list)
    note: str = ""  # printed right of the bar (default: the total)


def bars(rows: list[Bar], *, unit: str, width: int = 720, row_height: int = 22, label: str = "") -> str:
    """Horizontal (stacked) bars on a common linear scale starting at zero."""
    left, right = 200, width - 110
    height = MARGIN["top"] + row_height * len(rows) + 30
    top_total = max([sum(v for _, v, _ in r.segments) for r in rows] + [0.0]) or 1.0
    scale = Scale(0.0, top_total, left, right)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{escape(label or unit)}" class="chart">']
    for t in scale.ticks():
        out.append(f'<line x1="{scale(t):.1f}" y1="{MARGIN["top"] - 4}" x2="{scale(t):.1f}" y2="{height - 26}" '
                   f'stroke="#eee"/><text x="{scale(t):.1f}" y="{height - 12}" text-anchor="middle" class="tick">'
                   f'{fmt(t)}</text>')
    out.append(f'<text x="{right + 8}" y="{height - 12}" class="axis">{escape(unit)}</text>')
    for i, row in enumerate(rows):
        y, x = MARGIN["top"] + i * row_height, float(left)
        out.append(f'<g class="bar" data-label="{escape(row.label)}"><text x="{left - 6}" y="{y + row_height * 0.65:.1f}"'
                   f' text-anchor="end" class="label">{escape(row.label)}</text>')
        for name, value, color in row.segments:
            w = scale(value) - left
            out.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{max(w, 0):.1f}" height="{row_height - 6}" '
                       f'fill="{color}"><title>{escape(f"{row.label}: {name} {value:.4g} {unit}")}</title></rect>')
            x += w
        note = row.note or f"{sum(v for _, v, _ in row.segments):.4g}"
        out.append(f'<text x="{x + 6:.1f}" y="{y + row_height * 0.65:.1f}" class="value">{escape(note)}</text></g>')
    out.append("</svg>")
    return "".join(out)


def legend(items: list[tuple[str, str]]) -> str:
    """Color keys as HTML (wraps with the page, unlike SVG text)."""
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{c}"></i>{escape(n)}</span>' for n, c in items) + "</div>"
