"""Small inline SVG bar charts, generated as text: no library, nothing fetched.

A chart is a set of named series over labelled slots, drawn as stacked bars,
with an optional polyline (e.g. a cumulative total) on its own scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from orchestrator.contract import Frozen

WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 70, 70, 40, 40
LEGEND_Y = 23  # the legend's own row under the title: on the title's row a long legend ran over it


class Series(Frozen):
    name: str
    color: str
    values: tuple[float, ...]


def nice_max(value: float) -> float:
    """A round axis maximum at or above ``value``."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def short(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}" if value == 0 or abs(value) >= 1e-3 else f"{value:.1e}"


def bar_chart(
    chart_id: str, title: str, labels: Sequence[str], stacks: Sequence[Series], line: Series | None = None,
    unit: str = "",
) -> str:
    """An SVG element: stacked bars per label, a legend, axes with a few ticks."""
    slots = max(1, len(labels))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    totals = [sum(s.values[i] for s in stacks) for i in range(len(labels))]
    top = nice_max(max(totals, default=0.0))
    slot_w = plot_w / slots
    bar_w = max(1.0, slot_w * 0.7)
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="18" class="title">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" class="axis"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" class="axis"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" '
            f'text-anchor="end">{short(top * fraction)}{escape(unit)}</text>'
        )
    every = max(1, slots // 20)
    for i, label in enumerate(labels):
        x = LEFT + i * slot_w + (slot_w - bar_w) / 2
        base: float = TOP + plot_h
        for series in stacks:
            h = plot_h * series.values[i] / top
            base -= h
            parts.append(
                f'<rect class="bar" x="{x:.2f}" y="{base:.2f}" width="{bar_w:.2f}" height="{h:.2f}" '
                f'fill="{series.color}">'
                f"<title>{escape(label)}: {escape(series.name)} {series.values[i]:,.6g}</title></rect>"
            )
        if i % every == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.2f}" y="{TOP + plot_h + 16}" class="tick" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    if line is not None and line.values:
        parts.append(polyline(line, slot_w, plot_w, plot_h, unit))
    parts.append(legend([*stacks, *([line] if line else [])]))
    parts.append("</svg>")
    return "\n".join(parts)


def polyline(line: Series, slot_w: float, plot_w: float, plot_h: float, unit: str) -> str:
    top = nice_max(max(line.values))
    points = " ".join(
        f"{LEFT + (i + 0.5) * slot_w:.2f},{TOP + plot_h * (1 - v / top):.2f}" for i, v in enumerate(line.values)
    )
    right = LEFT + plot_w
    return (
        f'<polyline class="line" points="{points}" fill="none" stroke="{line.color}" stroke-width="2"/>'
        f'<text x="{right + 6}" y="{TOP + 4}" class="tick">{short(top)}{escape(unit)}</text>'
        f'<text x="{right + 6}" y="{TOP + plot_h + 4}" class="tick">0</text>'
    )


def legend(series: Sequence[Series]) -> str:
    items, x = [], WIDTH - RIGHT
    for s in reversed(series):
        x -= 8 + 7 * len(s.name) + 18
        items.append(
            f'<rect class="key" x="{x}" y="{LEGEND_Y}" width="12" height="12" fill="{s.color}"/>'
            f'<text x="{x + 16}" y="{LEGEND_Y + 10}" class="tick">{escape(s.name)}</text>'
        )
    return "".join(items)
