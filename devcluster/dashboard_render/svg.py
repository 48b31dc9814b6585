"""SVG drawing shared by every panel: a dark theme close to Grafana's, element strings with
coordinates rounded to a tenth of a pixel (so the same data gives the same bytes), the panel frame
with its title, and the panel that has no data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

BACKGROUND = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
GRID = "#2a2e33"
TEXT = "#ccccdc"
MUTED = "#8e8e9a"
FONT = "Inter, Helvetica, Arial, sans-serif"
TITLE_HEIGHT = 32.0
PADDING = 8.0
# Grafana's classic palette, in its order: series i gets colour i.
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0",
           "#37872d", "#fade2a", "#447ebc", "#c15c17", "#890f02", "#0a437c", "#6d1f62", "#584477")
# Grafana's named colours, as thresholds name them.
NAMED = {"green": "#73bf69", "red": "#f2495c", "orange": "#ff9830", "yellow": "#fade2a", "blue": "#5794f2",
         "purple": "#b877d9", "text": TEXT, "transparent": "none"}


@dataclass(frozen=True)
class Box:
    """A rectangle in pixels: top-left corner, width, height."""

    x: float
    y: float
    w: float
    h: float

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    def inset(self, left: float, top: float, right: float, bottom: float) -> Box:
        return Box(self.x + left, self.y + top, max(0.0, self.w - left - right), max(0.0, self.h - top - bottom))

    def contains(self, x: float, y: float) -> bool:
        return self.x - 0.05 <= x <= self.right + 0.05 and self.y - 0.05 <= y <= self.bottom + 0.05


def num(value: float) -> str:
    """A coordinate: one decimal, no trailing ``.0``, never ``-0``."""
    text = f"{round(value, 1) + 0.0:.1f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def color(name: str) -> str:
    """A Grafana colour name or a hex colour as SVG takes it."""
    return NAMED.get(name, name)


def text_width(text: str, size: float) -> float:
    """An estimate of a text's width: SVG cannot measure text without a renderer."""
    return len(text) * size * 0.56


def clip(text: str, width: float, size: float) -> str:
    """``text`` shortened with an ellipsis to fit ``width`` pixels."""
    fits = int(width / (size * 0.56))
    return text if len(text) <= fits else text[:max(0, fits - 1)] + "…"


def rect(box: Box, fill: str, stroke: str = "none", radius: float = 0.0) -> str:
    corner = f' rx="{num(radius)}"' if radius else ""
    return (f'<rect x="{num(box.x)}" y="{num(box.y)}" width="{num(box.w)}" height="{num(box.h)}"{corner} '
            f'fill="{fill}" stroke="{stroke}"/>')


def line(x1: float, y1: float, x2: float, y2: float, stroke: str = GRID, width: float = 1.0) -> str:
    return (f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" stroke="{stroke}" '
            f'stroke-width="{num(width)}"/>')


def text(x: float, y: float, content: str, size: float = 12.0, fill: str = TEXT, anchor: str = "start",
         weight: str = "normal") -> str:
    bold = f' font-weight="{weight}"' if weight != "normal" else ""
    return (f'<text x="{num(x)}" y="{num(y)}" font-size="{num(size)}" fill="{fill}" text-anchor="{anchor}"'
            f'{bold}>{escape(content)}</text>')


def polyline(points: Sequence[tuple[float, float]], stroke: str, width: float = 1.5, fill: str = "none",
             opacity: float = 1.0) -> str:
    coords = " ".join(f"{num(x)},{num(y)}" for x, y in points)
    alpha = f' fill-opacity="{num(opacity)}"' if fill != "none" else ""
    return (f'<polyline points="{coords}" fill="{fill}"{alpha} stroke="{stroke}" stroke-width="{num(width)}" '
            'stroke-linejoin="round" stroke-linecap="round"/>')


def circle(x: float, y: float, radius: float, fill: str) -> str:
    return f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(radius)}" fill="{fill}"/>'


def frame(box: Box, title: str) -> tuple[list[str], Box]:
    """A panel's background and title; returns the elements and the box left for its content."""
    parts = [rect(box, PANEL, BORDER, radius=2.0),
             text(box.x + PADDING, box.y + 20.0, clip(title, box.w - 2 * PADDING, 13.0), size=13.0, weight="500")]
    return parts, box.inset(PADDING, TITLE_HEIGHT, PADDING, PADDING)


def no_data(box: Box, title: str, message: str = "No data") -> list[str]:
    """A panel whose queries returned nothing in the window: Grafana's "No data", centred."""
    parts, content = frame(box, title)
    parts.append(text(content.x + content.w / 2, content.y + content.h / 2 + 6.0,
                      clip(message, content.w, 16.0), size=16.0, fill=MUTED, anchor="middle"))
    return parts


def group(parts: Sequence[str]) -> str:
    return "<g>" + "".join(parts) + "</g>"
