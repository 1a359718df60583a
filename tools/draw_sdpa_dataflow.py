"""Draw chapter 4's data-flow diagram of scaled dot-product attention (images/sdpa_dataflow.svg).

Usage: python -m tools.draw_sdpa_dataflow   (set PREVIEW_PNG=some.png to also write PNG
previews, some.png and some_narrow.png)

Every matrix is drawn as a grid whose number of rows and columns is its shape
for T = 3 queries, S = 4 keys, d_k = 2 and d_v = 3, so the picture shows which
dimensions meet in each product. The notation is the book's: scores Z, weights
A, output O. sdpa_dataflow_narrow.svg, which a phone shows instead (the book's
extension), draws the same in two bands, the scores above and the weights and output
below, so that its 10 pt text stays readable on a 390 px screen. The SVGs are
deterministic (no date, fixed ids), so re-drawing an unchanged diagram changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from attnbook.viz import svg_metadata
from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent
T, S, D_K, D_V = 3, 4, 2, 3  # the shapes drawn
CELL = 0.32  # side of one matrix entry, in axes units
FILL = {"input": "#dbe9f6", "scores": "#fde2c8", "weights": "#fbd0d0", "output": "#d4efd9"}
EDGE, TEXT, GREY = "#1f5f99", "#102a43", "#555555"


def matrix(ax, x: float, y: float, rows: int, cols: int, kind: str, name: str, shape: str) -> tuple:
    """A rows x cols grid with its top-left corner at (x, y); returns (left, right, top, bottom)."""
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(
                Rectangle(
                    (x + c * CELL, y - (r + 1) * CELL),
                    CELL,
                    CELL,
                    facecolor=FILL[kind],
                    edgecolor=EDGE,
                    linewidth=0.8,
                )
            )
    width, height = cols * CELL, rows * CELL
    ax.text(x + width / 2, y + 0.12, name, ha="center", va="bottom", fontsize=11, color=TEXT)
    ax.text(x + width / 2, y - height - 0.1, shape, ha="center", va="top", fontsize=10, color=GREY)
    return x, x + width, y, y - height


def arrow(ax, start: tuple, end: tuple, label: str = "", offset: tuple = (0.0, 0.12)) -> None:
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=11, color=GREY, linewidth=1.1)
    )
    if label:
        mid = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        ax.text(*mid, label, ha="center", va="bottom", fontsize=10, color=TEXT)


NOTE = "one row per query t,\none column per key s"


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    preview = os.environ.get("PREVIEW_PNG")
    for name, size, draw in (
        ("sdpa_dataflow", (8.1, 3.5), draw_wide),
        ("sdpa_dataflow_narrow", (4.6, 6.2), draw_narrow),
    ):
        plt.rcParams["svg.hashsalt"] = f"attnbook-{name.replace('_', '-')}"
        fig, ax = plt.subplots(figsize=size)
        ax.axis("off")
        draw(ax)
        fig.tight_layout()
        fig.savefig(
            ROOT / "images" / f"{name}.svg", metadata=svg_metadata(fig), bbox_inches="tight"
        )
        if preview:
            path = Path(preview)
            suffix = name.removeprefix("sdpa_dataflow")
            fig.savefig(path.with_stem(path.stem + suffix), dpi=80, bbox_inches="tight")
        plt.close(fig)


def draw_inputs_and_scores(ax) -> tuple:
    """Q, K and its transpose, and the scores Z they make; returns Z's (left, right, top, bottom)."""
    q = matrix(ax, 0.3, 0.8, T, D_K, "input", "queries Q", "T × d_k")
    k = matrix(ax, 0.3, -1.0, S, D_K, "input", "keys K", "S × d_k")
    kt = matrix(ax, 2.0, -0.75, D_K, S, "input", "Kᵀ", "d_k × S")
    arrow(ax, (k[1] + 0.05, -1.6), (kt[0] - 0.05, -1.0), "transpose", (0.05, -0.65))
    z = matrix(ax, 4.3, 0.8, T, S, "scores", "scores Z\n= QKᵀ/√d_k", "T × S")
    arrow(ax, (q[1] + 0.05, 0.35), (z[0] - 0.08, 0.35), "Q Kᵀ, ÷ √d_k")
    arrow(ax, (kt[1] + 0.05, -0.9), (z[0] + 0.2, z[3] - 0.35))
    return z


def draw_output(ax, x: float, y: float, softmax: Callable[[tuple], None]) -> None:
    """The weights A with their top-left corner at (x, y), the arrow into them
    (`softmax(a)`, given A's left, right, top and bottom), the values V and the output O."""
    a = matrix(ax, x, y, T, S, "weights", "weights A\n= softmax(Z)", "T × S,\nrows sum to 1")
    softmax(a)
    v = matrix(ax, x + 0.15, y - 2.1, S, D_V, "input", "values V", "S × d_v")
    o = matrix(ax, x + 2.95, y, T, D_V, "output", "output O\n= A V", "T × d_v")
    arrow(ax, (a[1] + 0.05, y - 0.45), (o[0] - 0.08, y - 0.45), "A V")
    arrow(ax, (v[1] + 0.05, y - 2.65), (o[0] + 0.4, o[3] - 0.35))


def draw_wide(ax) -> None:
    """The book's column: from the inputs on the left to the output on the right."""
    ax.set_xlim(0, 10.9)
    ax.set_ylim(-3.0, 1.6)
    z = draw_inputs_and_scores(ax)
    draw_output(
        ax,
        6.75,
        0.8,
        lambda a: arrow(ax, (z[1] + 0.05, 0.35), (a[0] - 0.08, 0.35), "softmax\nover s"),
    )
    ax.text(1.5, -2.45, NOTE, ha="left", va="top", fontsize=10, color=GREY)


def draw_narrow(ax) -> None:
    """A phone: the inputs and scores above, the weights, values and output below them."""
    ax.set_xlim(0, 6.0)
    ax.set_ylim(-7.9, 1.6)
    z = draw_inputs_and_scores(ax)

    def softmax(a: tuple) -> None:  # from under Z, at the right, down to A's name
        start, end = ((z[0] + z[1]) / 2 + 0.3, z[3] - 0.55), ((a[0] + a[1]) / 2 + 0.3, a[2] + 0.75)
        arrow(ax, start, end, "softmax\nover s", (0.75, -0.2))

    draw_output(ax, 1.2, -3.7, softmax)
    ax.text(2.9, -6.6, NOTE, ha="left", va="top", fontsize=10, color=GREY)


if __name__ == "__main__":
    main()
