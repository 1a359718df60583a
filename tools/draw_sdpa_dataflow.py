"""Draw chapter 4's data-flow diagram of scaled dot-product attention (images/sdpa_dataflow.svg).

Usage: python -m tools.draw_sdpa_dataflow   (set PREVIEW_PNG=some.png to also write a PNG preview)

Every matrix is drawn as a grid whose number of rows and columns is its shape
for T = 3 queries, S = 4 keys, d_k = 2 and d_v = 3, so the picture shows which
dimensions meet in each product. The notation is the book's: scores Z, weights
A, output O. The SVG is deterministic (no date, fixed ids), so re-drawing an
unchanged diagram changes nothing.
"""

from __future__ import annotations

import os
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


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    plt.rcParams["svg.hashsalt"] = "attnbook-sdpa-dataflow"
    fig, ax = plt.subplots(figsize=(8.1, 3.5))
    ax.set_xlim(0, 10.9)
    ax.set_ylim(-3.0, 1.6)
    ax.axis("off")

    # inputs: Q on top, K and V below
    q = matrix(ax, 0.3, 0.8, T, D_K, "input", "queries Q", "T × d_k")
    k = matrix(ax, 0.3, -1.0, S, D_K, "input", "keys K", "S × d_k")
    kt = matrix(ax, 2.0, -0.75, D_K, S, "input", "Kᵀ", "d_k × S")
    arrow(ax, (k[1] + 0.05, -1.6), (kt[0] - 0.05, -1.0), "transpose", (0.05, -0.65))

    # scores and weights
    z = matrix(ax, 4.3, 0.8, T, S, "scores", "scores Z\n= QKᵀ/√d_k", "T × S")
    arrow(ax, (q[1] + 0.05, 0.35), (z[0] - 0.08, 0.35), "Q Kᵀ, ÷ √d_k")
    arrow(ax, (kt[1] + 0.05, -0.9), (z[0] + 0.2, z[3] - 0.35))
    a = matrix(ax, 6.75, 0.8, T, S, "weights", "weights A\n= softmax(Z)", "T × S,\nrows sum to 1")
    arrow(ax, (z[1] + 0.05, 0.35), (a[0] - 0.08, 0.35), "softmax\nover s")

    # values and output
    v = matrix(ax, 6.9, -1.3, S, D_V, "input", "values V", "S × d_v")
    o = matrix(ax, 9.7, 0.8, T, D_V, "output", "output O\n= A V", "T × d_v")
    arrow(ax, (a[1] + 0.05, 0.35), (o[0] - 0.08, 0.35), "A V")
    arrow(ax, (v[1] + 0.05, -1.85), (o[0] + 0.4, o[3] - 0.35))
    ax.text(
        1.5,
        -2.45,
        "one row per query t,\none column per key s",
        ha="left",
        va="top",
        fontsize=10,
        color=GREY,
    )
    fig.tight_layout()
    fig.savefig(
        ROOT / "images" / "sdpa_dataflow.svg", metadata=svg_metadata(fig), bbox_inches="tight"
    )
    preview = os.environ.get("PREVIEW_PNG")
    if preview:
        fig.savefig(preview, dpi=80, bbox_inches="tight")


if __name__ == "__main__":
    main()
