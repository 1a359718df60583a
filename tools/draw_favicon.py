"""Draw the book's favicon (images/favicon.svg, and images/favicon.png for browsers without SVG icons).

Usage: python -m tools.draw_favicon

The icon is a 4 x 4 causal attention-weight matrix: row t spreads its weight over
keys 0..t, so the upper-right triangle is empty (masked) and the diagonal is the
darkest cell of each row. The colours are viridis samples (the book's sequential
colour map), on a dark rounded square that stays visible on light and dark tabs.
The SVG is written by hand (a few rectangles, no date, no random ids), the PNG is
drawn from the same rectangles with matplotlib, so re-running changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Rectangle

from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "images" / "favicon.svg"
PNG = ROOT / "images" / "favicon.png"
PNG_PIXELS = 180  # large enough for an apple-touch-icon; browsers scale it down for tabs

SIZE = 32  # the SVG's view box, in its own units
N = 4  # rows (queries) and columns (keys) of the matrix drawn
MARGIN, GAP = 4.0, 1.0  # around the matrix, and between cells
BACKGROUND = "#1b2a41"
# Weights of a causal row t over keys 0..t: most weight on the diagonal (viridis, dark -> light).
SHADES = {0.0: "#1b2a41", 0.2: "#3b528b", 0.35: "#21918c", 0.5: "#5ec962", 1.0: "#fde725"}
WEIGHTS = [
    [1.0],
    [0.35, 1.0],
    [0.2, 0.35, 1.0],
    [0.2, 0.2, 0.5, 1.0],
]


def cells() -> list[tuple[float, float, float, str]]:
    """`(x, y, side, colour)` of every drawn cell, y measured from the top (SVG's convention)."""
    side = (SIZE - 2 * MARGIN - (N - 1) * GAP) / N
    found = []
    for t, row in enumerate(WEIGHTS):
        for s, weight in enumerate(row):
            x = MARGIN + s * (side + GAP)
            y = MARGIN + t * (side + GAP)
            found.append((x, y, side, SHADES[weight]))
    return found


def svg_text() -> str:
    rects = "\n".join(
        f'  <rect x="{x:g}" y="{y:g}" width="{side:g}" height="{side:g}" rx="1" fill="{colour}"/>'
        for x, y, side, colour in cells()
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SIZE} {SIZE}" '
        'role="img" aria-label="Attention, from scratch">\n'
        f'  <rect width="{SIZE}" height="{SIZE}" rx="6" fill="{BACKGROUND}"/>\n'
        f"{rects}\n</svg>\n"
    )


def draw_png(path: Path) -> None:
    inches = 1.0
    fig = plt.figure(figsize=(inches, inches), dpi=PNG_PIXELS)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, SIZE)
    ax.set_ylim(SIZE, 0)  # y from the top, as in the SVG
    ax.set_axis_off()
    fig.patch.set_alpha(0.0)
    ax.add_patch(
        FancyBboxPatch(
            (0, 0),
            SIZE,
            SIZE,
            boxstyle="round,pad=0,rounding_size=6",
            facecolor=BACKGROUND,
            edgecolor="none",
        )
    )
    for x, y, side, colour in cells():
        ax.add_patch(Rectangle((x, y), side, side, facecolor=colour, edgecolor="none"))
    fig.savefig(path, dpi=PNG_PIXELS, transparent=True, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    SVG.write_text(svg_text(), encoding="utf-8")
    draw_png(PNG)
    print(f"wrote {SVG.relative_to(ROOT)} and {PNG.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
