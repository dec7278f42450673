"""Drawing helpers for the offline HTML reports: inline SVG bar, stacked-bar and log-log scatter charts, HTML
tables and the shared stylesheet. No scripts, no external fonts or stylesheets."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#a0cbe8", "#ffbe7d", "#8cd17d", "#b6992d", "#499894", "#86bcb6", "#d37295",
           "#fabfd2", "#79706e", "#d4a6c8")
"""Tableau 20 (Tableau's 10 and their light tones): one distinct colour for each of up to 20 parts of a stacked bar
(the step's 11 parts, the memory classes); a chart with more parts reuses them in order."""
CHART_W = 1060
CHAR_W = 7.0
"""Upper estimate of a 12 px sans-serif character's width, to size label columns."""
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:24px auto;
max-width:1100px;padding:0 16px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
dl{display:grid;grid-template-columns:160px 1fr;gap:2px 12px;margin:8px 0}dt{color:#666}dd{margin:0}
code{font:12px ui-monospace,Menlo,Consolas,monospace}
.rec{background:#eef4fb;border-left:4px solid #4e79a7;padding:8px 12px;margin:12px 0;font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th{background:#f6f6f6}tr.units th{font-weight:normal;color:#666;font-size:12px}
td.l,th.l{text-align:left}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:13px;margin:4px 0}
.legend span::before{content:"";display:inline-block;width:12px;height:12px;margin-right:5px;
vertical-align:-1px;background:var(--c)}
svg{display:block;margin:6px 0}svg text{font:12px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;fill:#222}
.note{color:#666;font-size:13px}
"""


@dataclass(frozen=True)
class Bar:
    """One row of a horizontal stacked bar chart."""

    label: str
    parts: list[float]
    note: str
    """Text written after the bar's end."""


def num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def tick_text(value: float) -> str:
    return num(value) if abs(value) >= 1000 or value == int(value) else f"{value:g}"


def linear_ticks(high: float, count: int = 6) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 × 10^k) up to the first at or above `high`."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 × 10^k from the last at or below `low` to the first at or above `high` (at least two)."""
    ladder = [m * 10.0**k for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 2)
              for m in (1, 2, 5)]
    start = max(i for i, t in enumerate(ladder) if t <= low)
    stop = min(i for i, t in enumerate(ladder) if t >= high)
    return ladder[start:max(stop, start + 1) + 1]


def svg_text(x: float, y: float, body: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{escape(body)}</text>'


def legend(names: list[str]) -> str:
    spans = "".join(f'<span style="--c:{PALETTE[i % len(PALETTE)]}">{escape(n)}</span>' for i, n in enumerate(names))
    return f'<div class="legend">{spans}</div>'


def stacked_bars(bars: list[Bar], names: list[str], unit: str, label_w: int = 120,
                  marker: tuple[str, float] | None = None) -> str:
    """Horizontal stacked bars, one row per `Bar`, an x axis in `unit`, an optional labelled vertical line."""
    row_h, top, note_w = 28, 22 if marker else 8, 170
    label_w = max(label_w, 16 + int(CHAR_W * max(len(b.label) for b in bars)))  # labels are never clipped
    plot_w = CHART_W - label_w - note_w
    high = max([sum(b.parts) for b in bars] + [marker[1] if marker else 0.0])
    ticks = linear_ticks(high)
    scale = plot_w / ticks[-1]
    axis_y = top + row_h * len(bars) + 4
    out = [f'<svg width="{CHART_W}" height="{axis_y + 36}" role="img">']
    for tick in ticks:
        x = label_w + tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" stroke="#000" stroke-opacity=".1"/>')
        out.append(svg_text(x, axis_y + 15, tick_text(tick), "middle"))
    for row, bar in enumerate(bars):
        y = top + row * row_h
        out.append(svg_text(label_w - 8, y + 16, bar.label, "end"))
        x = float(label_w)
        for i, part in enumerate(bar.parts):
            if part > 0:
                out.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{max(part * scale, 0.5):.1f}" height="{row_h - 6}" '
                           f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(names[i])}: '
                           f'{num(part, 3)} {escape(unit)}</title></rect>')
            x += part * scale
        out.append(svg_text(x + 6, y + 16, bar.note))
    out.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + plot_w}" y2="{axis_y}" stroke="#888"/>')
    out.append(svg_text(label_w + plot_w / 2, axis_y + 31, unit, "middle", 'fill="#666"'))
    if marker:
        x = label_w + marker[1] * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{axis_y}" stroke="#c00" '
                   'stroke-dasharray="4 3" stroke-width="1.5"/>')
        out.append(svg_text(x, top - 8, marker[0], "middle", 'fill="#c00"'))
    out.append("</svg>")
    return "".join(out)


def bar_chart(labels: list[str], values: list[float], unit: str, name: str) -> str:
    """Plain horizontal bars: a stacked chart with one part, the value after each bar."""
    bars = [Bar(label, [value], f"{num(value)} {unit}") for label, value in zip(labels, values, strict=True)]
    return stacked_bars(bars, [name], unit)


def log_scale(low: float, high: float, start: float, length: float) -> Callable[[float], float]:
    span = math.log(high) - math.log(low)
    return lambda v: start + (math.log(v) - math.log(low)) / span * length


def scatter_chart(points: list[tuple[float, float]], front: list[int], chosen: int | None,
                   x_unit: str, y_unit: str) -> str:
    """Log-log scatter: every point, the `front` points joined by a line, `chosen` ringed; ticks on both axes."""
    width, height, left, right, top, bottom = CHART_W, 420, 80, 30, 20, 50
    xs, ys = sorted({p[0] for p in points}), [p[1] for p in points]
    y_ticks = log_ticks(min(ys), max(ys))
    fx = log_scale(xs[0] / 1.5, xs[-1] * 1.5, left, width - left - right)
    low, high = min(y_ticks[0], min(ys) / 1.3), max(y_ticks[-1], max(ys) * 1.3)  # room for the labels
    fy = log_scale(low, high, height - bottom, -(height - top - bottom))
    out = [f'<svg width="{width}" height="{height}" role="img">']
    for x in xs:
        out.append(f'<line x1="{fx(x):.1f}" y1="{top}" x2="{fx(x):.1f}" y2="{height - bottom}" stroke="#000" '
                   'stroke-opacity=".08"/>')
        out.append(svg_text(fx(x), height - bottom + 16, tick_text(x), "middle"))
    for y in y_ticks:
        out.append(f'<line x1="{left}" y1="{fy(y):.1f}" x2="{width - right}" y2="{fy(y):.1f}" stroke="#000" '
                   'stroke-opacity=".08"/>')
        out.append(svg_text(left - 6, fy(y) + 4, tick_text(y), "end"))
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               'fill="none" stroke="#888"/>')
    out.append(svg_text((width + left - right) / 2, height - 12, x_unit, "middle", 'fill="#666"'))
    out.append(svg_text(16, (height - bottom + top) / 2, y_unit, "middle",
                     f'fill="#666" transform="rotate(-90 16 {(height - bottom + top) / 2:.1f})"'))
    line = " ".join(f"{fx(points[i][0]):.1f},{fy(points[i][1]):.1f}" for i in front)
    out.append(f'<polyline points="{line}" fill="none" stroke="{PALETTE[0]}" stroke-width="2"/>')
    for i, (x, y) in enumerate(points):
        colour = PALETTE[0] if i in front else PALETTE[9]
        out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="5" fill="{colour}"><title>{num(x)} GPUs: '
                   f'{num(y, 1)} {escape(y_unit)}</title></circle>')
        out.append(svg_text(fx(x) + 8, fy(y) - 8, num(y, 1 if y < 100 else 0)))
    if chosen is not None:
        cx, cy = fx(points[chosen][0]), fy(points[chosen][1])
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="10" fill="none" stroke="{PALETTE[1]}" stroke-width="3"/>')
        out.append(svg_text(cx, cy + 26, "chosen", "middle", f'fill="{PALETTE[1]}" font-weight="bold"'))
    out.append("</svg>")
    return "".join(out)


def html_table(header: list[str], units: list[str] | None, rows: list[list[str]], left: int = 1) -> str:
    """A table whose first `left` columns are left-aligned; an optional units row under the header."""
    def cells(tag: str, values: list[str]) -> str:
        return "".join(f'<{tag}{" class=l" if i < left else ""}>{escape(v)}</{tag}>' for i, v in enumerate(values))

    head = f"<tr>{cells('th', header)}</tr>" + (f'<tr class="units">{cells("th", units)}</tr>' if units else "")
    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table>{head}{body}</table>"
