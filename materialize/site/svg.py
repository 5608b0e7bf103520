"""Inline SVG charts for the report, generated in Python: nothing to fetch at view time.

A chart library shipped as JavaScript would be a second renderer to vendor and keep offline; two
small charts (bars of the culprit posterior, dots of metric samples over a noise band) are a few
dozen SVG elements. Every coordinate is rounded and every element emitted in a fixed order, so the
same data gives the same bytes (two reports of the same inputs diff cleanly). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 720
HEIGHT = 260
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 24, 44


def _n(value: float) -> str:
    """A coordinate with one decimal and no trailing zeros: stable text for stable bytes."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True)
class Bar:
    """One bar: its x label, height (0..1 of the axis), tooltip and CSS class."""

    label: str
    value: float
    title: str
    css: str = "bar"


def bar_chart(bars: Sequence[Bar], *, y_label: str, x_label: str, threshold: float | None = None,
              threshold_label: str = "", chart_id: str = "chart") -> str:
    """Vertical bars on a 0..1 axis, with an optional dashed horizontal threshold line."""
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    out = [_open(chart_id, y_label)]
    out += _y_axis(plot_h, [(0.0, "0"), (0.25, "0.25"), (0.5, "0.5"), (0.75, "0.75"), (1.0, "1")])
    n = max(len(bars), 1)
    slot = plot_w / n
    width = max(2.0, min(48.0, slot * 0.7))
    for i, bar in enumerate(bars):
        value = min(max(bar.value, 0.0), 1.0)
        h = value * plot_h
        x = LEFT + slot * i + (slot - width) / 2
        y = TOP + plot_h - h
        out.append(f'<rect class="{escape(bar.css)}" x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" '
                   f'height="{_n(h)}" data-label="{escape(bar.label)}" data-value="{bar.value:.4f}">'
                   f'<title>{escape(bar.title)}</title></rect>')
        out.append(f'<text class="tick" x="{_n(LEFT + slot * i + slot / 2)}" y="{_n(TOP + plot_h + 14)}" '
                   f'text-anchor="middle">{escape(bar.label)}</text>')
    if threshold is not None:
        y = TOP + plot_h - threshold * plot_h
        out.append(f'<line class="threshold" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{_n(y)}" y2="{_n(y)}"/>')
        out.append(f'<text class="tick" x="{LEFT + plot_w}" y="{_n(y - 4)}" text-anchor="end">'
                   f'{escape(threshold_label)}</text>')
    out.append(_x_label(x_label))
    out.append("</svg>")
    return "\n".join(out)


@dataclass(frozen=True)
class Column:
    """The samples measured at one series position, and its verdict (CSS class)."""

    label: str
    samples: Sequence[float]
    css: str = "sample"


def samples_chart(columns: Sequence[Column], *, band: tuple[float, float] | None, y_label: str, x_label: str,
                  band_label: str = "", chart_id: str = "samples") -> str:
    """Every sample as a dot over its position, with the good end's noise band shaded."""
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    values = [v for c in columns for v in c.samples] + (list(band) if band else [])
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - 1.0, hi + 1.0
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad

    def y_of(v: float) -> float:
        return TOP + plot_h - (v - lo) / (hi - lo) * plot_h

    out = [_open(chart_id, y_label)]
    ticks = [lo + (hi - lo) * k / 4 for k in range(5)]
    out += _y_axis(plot_h, [((t - lo) / (hi - lo), f"{t:.4g}") for t in ticks])
    if band is not None:
        y1, y2 = y_of(band[1]), y_of(band[0])
        out.append(f'<rect class="band" x="{LEFT}" y="{_n(y1)}" width="{plot_w}" height="{_n(y2 - y1)}">'
                   f'<title>{escape(band_label)}</title></rect>')
    n = max(len(columns), 1)
    slot = plot_w / n
    for i, col in enumerate(columns):
        cx = LEFT + slot * i + slot / 2
        for j, v in enumerate(col.samples):
            jitter = ((j % 7) - 3) * min(3.0, slot / 12)
            out.append(f'<circle class="{escape(col.css)}" cx="{_n(cx + jitter)}" cy="{_n(y_of(v))}" r="3">'
                       f'<title>{escape(col.label)}: {v:.6g}</title></circle>')
        out.append(f'<text class="tick" x="{_n(cx)}" y="{_n(TOP + plot_h + 14)}" text-anchor="middle">'
                   f'{escape(col.label)}</text>')
    out.append(_x_label(x_label))
    out.append("</svg>")
    return "\n".join(out)


def _open(chart_id: str, y_label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(chart_id)}" class="chart" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
            f'aria-label="{escape(y_label)}">\n'
            f'<text class="axis-label" x="12" y="{_n(TOP + (HEIGHT - TOP - BOTTOM) / 2)}" '
            f'transform="rotate(-90 12 {_n(TOP + (HEIGHT - TOP - BOTTOM) / 2)})" text-anchor="middle">'
            f'{escape(y_label)}</text>')


def _y_axis(plot_h: float, ticks: Sequence[tuple[float, str]]) -> list[str]:
    out = [f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{_n(TOP + plot_h)}"/>',
           f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_n(TOP + plot_h)}" y2="{_n(TOP + plot_h)}"/>']
    for frac, label in ticks:
        y = TOP + plot_h - frac * plot_h
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_n(y)}" y2="{_n(y)}"/>')
        out.append(f'<text class="tick" x="{LEFT - 6}" y="{_n(y + 4)}" text-anchor="end">{escape(label)}</text>')
    return out


def _x_label(text: str) -> str:
    return (f'<text class="axis-label" x="{_n(LEFT + (WIDTH - LEFT - RIGHT) / 2)}" y="{HEIGHT - 8}" '
            f'text-anchor="middle">{escape(text)}</text>')
