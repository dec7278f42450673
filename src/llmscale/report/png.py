"""Line charts written as PNG with numpy, zlib and struct only — no plotting library.

Why a rasterizer of our own: the core depends on numpy + pydantic + a CLI library only (docs/architecture.md
principle 7), and a chart of a few curves needs lines, axes, ticks and text, not matplotlib. Pixels are a numpy
array (rows × columns × RGB); lines are sampled densely along each segment; text uses a 5×7 bitmap font (upper case,
digits, a few signs) scaled 2×; the PNG is one IDAT chunk of zlib-compressed rows with filter 0 (PNG spec, ISO/IEC
15948 §11).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

_GLYPHS = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    " ": "00000 00000 00000 00000 00000 00000 00000", ".": "00000 00000 00000 00000 00000 01100 01100",
    "-": "00000 00000 00000 11111 00000 00000 00000", "(": "00010 00100 01000 01000 01000 00100 00010",
    ")": "01000 00100 00010 00010 00010 00100 01000", "/": "00000 00001 00010 00100 01000 10000 00000",
    ",": "00000 00000 00000 00000 01100 00100 01000", "%": "11000 11001 00010 00100 01000 10011 00011",
    ":": "00000 01100 01100 00000 01100 01100 00000", "=": "00000 00000 11111 00000 11111 00000 00000",
    "+": "00000 00100 00100 11111 00100 00100 00000",
}
FONT = {ch: np.array([[c == "1" for c in row] for row in bits.split()]) for ch, bits in _GLYPHS.items()}
SCALE = 2
"""Pixels per font dot."""
INK = (40, 40, 40)
GRID = (225, 225, 225)
PALETTE = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14))


@dataclass(frozen=True)
class Series:
    """One curve."""

    label: str
    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class Panel:
    """One chart: log-scaled x, linear y."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    x_ticks: tuple[tuple[float, str], ...]
    y_range: tuple[float, float] = (0.0, 1.0)
    y_ticks: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    marker_x: float | None = None
    """A vertical dashed line (e.g. the chosen interval)."""
    legend_low: bool = False
    """Legend in the lower right corner instead of the upper right."""


def text_width(text: str) -> int:
    return len(text) * 6 * SCALE


def draw_text(img: np.ndarray, x: int, y: int, text: str, color: tuple[int, int, int] = INK) -> None:
    """Top-left at (x, y); characters outside the font print as spaces."""
    for i, ch in enumerate(text.upper()):
        glyph = np.kron(FONT.get(ch, FONT[" "]), np.ones((SCALE, SCALE), dtype=bool))
        x0 = x + i * 6 * SCALE
        region = img[y:y + glyph.shape[0], x0:x0 + glyph.shape[1]]
        region[glyph[:region.shape[0], :region.shape[1]]] = color


def draw_line(img: np.ndarray, p0: tuple[float, float], p1: tuple[float, float], color: tuple[int, int, int],
              width: int = 2, dash: int = 0) -> None:
    """A segment sampled every half pixel; `dash` > 0 leaves gaps of that many pixels."""
    n = int(max(abs(p1[0] - p0[0]), abs(p1[1] - p0[1])) * 2) + 2
    t = np.linspace(0.0, 1.0, n)
    xs = np.round(p0[0] + (p1[0] - p0[0]) * t).astype(int)
    ys = np.round(p0[1] + (p1[1] - p0[1]) * t).astype(int)
    if dash:
        keep = (np.arange(n) // (2 * dash)) % 2 == 0
        xs, ys = xs[keep], ys[keep]
    for dx in range(width):
        for dy in range(width):
            xx, yy = xs + dx - width // 2, ys + dy - width // 2
            inside = (xx >= 0) & (xx < img.shape[1]) & (yy >= 0) & (yy < img.shape[0])
            img[yy[inside], xx[inside]] = color


def _x_range(panel: Panel) -> tuple[float, float]:
    """The panel's x range in log10 (0..1 when it has no points)."""
    xs = np.concatenate([s.x[np.isfinite(s.x) & (s.x > 0)] for s in panel.series] + [np.zeros(0)])
    if xs.size == 0:
        return 0.0, 1.0
    lo, hi = float(np.log10(xs.min())), float(np.log10(xs.max()))
    return lo, hi if hi > lo else lo + 1.0


def draw_panel(img: np.ndarray, panel: Panel, box: tuple[int, int, int, int]) -> None:
    """Axes, grid, ticks, curves and legend inside box = (left, top, right, bottom) of the plot area."""
    left, top, right, bottom = box
    lo, hi = _x_range(panel)
    y0, y1 = panel.y_range

    def px(x: np.ndarray) -> np.ndarray:
        return left + (np.log10(x) - lo) / (hi - lo) * (right - left)

    def py(y: np.ndarray) -> np.ndarray:
        return bottom - (np.clip(y, y0, y1) - y0) / (y1 - y0) * (bottom - top)

    for value in panel.y_ticks:
        y = float(py(np.array(value)))
        draw_line(img, (left, y), (right, y), GRID, width=1)
        label = f"{value:.1f}"
        draw_text(img, left - text_width(label) - 6, int(y) - 7, label)
    shown = [(float(px(np.array(value))), label) for value, label in panel.x_ticks
             if lo - 1e-9 <= np.log10(value) <= hi + 1e-9]
    for x, _ in shown:
        draw_line(img, (x, top), (x, bottom), GRID, width=1)
    for x, label in apart(shown):
        draw_text(img, int(x) - text_width(label) // 2, bottom + 8, label)
    draw_line(img, (left, bottom), (right, bottom), INK)
    draw_line(img, (left, top), (left, bottom), INK)
    if panel.marker_x is not None and panel.marker_x > 0:
        x = float(px(np.array(panel.marker_x)))
        draw_line(img, (x, top), (x, bottom), INK, width=1, dash=4)
    for i, series in enumerate(panel.series):
        color = PALETTE[i % len(PALETTE)]
        ok = np.isfinite(series.x) & np.isfinite(series.y) & (series.x > 0)
        points = list(zip(px(series.x[ok]), py(series.y[ok]), strict=True))
        for a, b in pairwise(points):
            draw_line(img, a, b, color)
        row = (bottom - 22 * (len(panel.series) - i) - 4) if panel.legend_low else top + 12 + 22 * i
        draw_line(img, (right - 150, row), (right - 120, row), color, width=3)
        draw_text(img, right - 112, row - 7, series.label)
    draw_text(img, left, top - 52, panel.title)
    draw_text(img, (left + right - text_width(panel.x_label)) // 2, bottom + 32, panel.x_label)
    draw_text(img, left - 64, top - 26, panel.y_label)


TICK_GAP = 8
"""Pixels kept free between two x-axis labels."""


def apart(ticks: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The x-axis labels (centred at x) that do not overlap: the last (the axis' end) always, then from the left
    each one that keeps TICK_GAP from the one before it and from the last."""
    if not ticks:
        return []

    def span(tick: tuple[float, str]) -> tuple[float, float]:
        return tick[0] - text_width(tick[1]) / 2, tick[0] + text_width(tick[1]) / 2

    last = ticks[-1]
    kept: list[tuple[float, str]] = []
    for tick in ticks[:-1]:
        low, high = span(tick)
        if (not kept or low >= span(kept[-1])[1] + TICK_GAP) and high + TICK_GAP <= span(last)[0]:
            kept.append(tick)
    return [*kept, last]


def encode_png(img: np.ndarray) -> bytes:
    """8-bit RGB PNG: signature, IHDR, one IDAT of zlib rows (filter byte 0 per row), IEND."""
    height, width, _ = img.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = np.concatenate([np.zeros((height, 1), dtype=np.uint8), img.reshape(height, -1)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9))
            + chunk(b"IEND", b""))


def write_png(path: Path, panels: list[Panel], panel_width: int = 640, height: int = 460) -> None:
    """Panels side by side on a white canvas."""
    img = np.full((height, panel_width * len(panels), 3), 255, dtype=np.uint8)
    for i, panel in enumerate(panels):
        x = i * panel_width
        draw_panel(img, panel, (x + 90, 70, x + panel_width - 30, height - 70))
    path.write_bytes(encode_png(img))
