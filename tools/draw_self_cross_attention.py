"""Draw chapter 5's diagram of self- against cross-attention (images/self_vs_cross_attention.svg).

Usage: python -m tools.draw_self_cross_attention   (set PREVIEW_PNG=some.png to also write a PNG preview)

Left: self-attention, where queries, keys and values all come from one
sequence X (the running example "she likes coffee", T = S = 3). Right:
cross-attention, where the queries come from X (the decoder's input "<bos> the
black", T = 3: the query at position t writes word t + 1) and keys and values from
a context C (the encoder's "le chat noir dort .", S = 5), as in chapter 5's example. The weight grid of each panel has one row per
query and one column per key. The SVG is deterministic (no date, fixed ids).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from attnbook.viz import svg_metadata
from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent
QUERY_FILL, CONTEXT_FILL, WEIGHT_FILL = "#dbe9f6", "#fde2c8", "#fbd0d0"
EDGE, TEXT, GREY = "#1f5f99", "#102a43", "#555555"
TEXT_PT = 9.5  # every label but the titles: the smallest text
TOKEN_W = 0.7  # width of a token box (axes units are inches)
CELL = 0.26  # side of one cell of a weight grid
CROSS_X = 4.35  # where the cross-attention panel starts


def tokens(
    ax, x: float, y: float, words: list[str], fill: str, title: str, *, title_below: bool = False
) -> list[tuple]:
    """A column of token boxes, top at y, titled above (or below); returns the right-edge
    midpoint of each box."""
    title_y = y - len(words) * 0.36 - 0.02 if title_below else y + 0.12
    ax.text(
        x, title_y, title, ha="left", va="top" if title_below else "bottom", fontsize=TEXT_PT,
        color=TEXT,
    )  # fmt: skip
    ends = []
    for n, word in enumerate(words):
        top = y - n * 0.36
        ax.add_patch(
            FancyBboxPatch(
                (x, top - 0.29),
                TOKEN_W,
                0.27,
                boxstyle="round,pad=0.01,rounding_size=0.05",
                facecolor=fill,
                edgecolor=EDGE,
                linewidth=1.0,
            )
        )
        ax.text(
            x + TOKEN_W / 2, top - 0.155, word, ha="center", va="center", fontsize=TEXT_PT,
            color=TEXT,
        )  # fmt: skip
        ends.append((x + TOKEN_W, top - 0.155))
    return ends


def box(ax, x: float, y: float, label: str, fill: str, width: float = 0.85) -> tuple:
    ax.add_patch(
        FancyBboxPatch(
            (x, y - 0.16),
            width,
            0.32,
            boxstyle="round,pad=0.01,rounding_size=0.05",
            facecolor=fill,
            edgecolor=EDGE,
            linewidth=1.0,
        )
    )
    ax.text(x + width / 2, y, label, ha="center", va="center", fontsize=TEXT_PT, color=TEXT)
    return (x, y), (x + width, y)


def arrow(ax, start: tuple, end: tuple) -> None:
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color=GREY, linewidth=0.9)
    )


def weight_grid(ax, x: float, y: float, rows: list[str], cols: list[str], title: str) -> None:
    ax.text(
        x + len(cols) * CELL / 2, y + 0.58, title, ha="center", va="bottom", fontsize=TEXT_PT,
        color=TEXT,
    )  # fmt: skip
    for c, word in enumerate(cols):
        ax.text(
            x + (c + 0.5) * CELL, y + 0.05, word, ha="left", va="bottom", fontsize=TEXT_PT,
            color=GREY, rotation=60, rotation_mode="anchor",
        )  # fmt: skip
    for r, word in enumerate(rows):
        ax.text(
            x - 0.06, y - (r + 0.5) * CELL, word, ha="right", va="center", fontsize=TEXT_PT,
            color=GREY,
        )  # fmt: skip
        for c in range(len(cols)):
            ax.add_patch(
                Rectangle(
                    (x + c * CELL, y - (r + 1) * CELL),
                    CELL,
                    CELL,
                    facecolor=WEIGHT_FILL,
                    edgecolor=EDGE,
                    linewidth=0.7,
                )
            )


def panel(ax, x0: float, queries: list[str], context: list[str] | None, title: str) -> None:
    ax.text(
        x0 + 2.0, 1.75, title, ha="center", va="bottom", fontsize=12, fontweight="bold", color=TEXT
    )
    x_title = "X: queries, keys and values" if context is None else "X: queries"
    q_ends = tokens(ax, x0, 1.1, queries, QUERY_FILL, x_title)
    if context is None:
        c_ends, keys = q_ends, queries
        c_label = None
    else:
        c_ends = tokens(
            ax, x0, -0.45, context, CONTEXT_FILL, "C: keys and values", title_below=True
        )
        keys = context
        c_label = CONTEXT_FILL
    q_in, q_out = box(ax, x0 + 1.0, 0.75, "Q = X W_Q", QUERY_FILL)
    src = c_label or QUERY_FILL
    name = "C" if context is not None else "X"
    k_in, k_out = box(ax, x0 + 1.0, 0.05, f"K = {name} W_K", src)
    v_in, v_out = box(ax, x0 + 1.0, -0.65, f"V = {name} W_V", src)
    for end in q_ends:
        arrow(ax, end, q_in)
    for end in c_ends:
        arrow(ax, end, k_in)
        arrow(ax, end, v_in)
    grid_x = x0 + 2.8
    weight_grid(
        ax,
        grid_x,
        0.75,
        queries,
        keys,
        f"weights: {len(queries)} × {len(keys)}  (T × S)",
    )
    arrow(ax, q_out, (grid_x - 0.6, 0.55))
    arrow(ax, k_out, (grid_x - 0.6, 0.4))
    ax.text(
        grid_x + len(keys) * CELL / 2,
        0.75 - len(queries) * CELL - 0.08,
        "A = softmax(QKᵀ/√d_k)",
        ha="center",
        va="top",
        fontsize=TEXT_PT,
        color=GREY,
    )
    o_in, _ = box(ax, grid_x - 0.05, -0.65, f"O = A V: {len(queries)} rows", "#d4efd9", width=1.3)
    arrow(ax, v_out, o_in)
    ax.text(
        x0 + 2.0,
        -1.35 if context is None else -2.75,
        "T = S: one sequence" if context is None else "T ≠ S allowed; one output row per query",
        ha="center",
        va="center",
        fontsize=TEXT_PT,
        color=GREY,
    )


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    plt.rcParams["svg.hashsalt"] = "attnbook-self-cross"
    fig, ax = plt.subplots(figsize=(8.65, 5.05))
    fig.subplots_adjust(0, 0, 1, 1)
    ax.set_xlim(-0.1, 8.55)
    ax.set_ylim(-2.95, 2.1)
    ax.axis("off")
    panel(ax, 0.0, ["she", "likes", "coffee"], None, "Self-attention")
    ax.plot([CROSS_X - 0.25] * 2, [-2.9, 2.0], color="#cccccc", linewidth=1)
    panel(
        ax,
        CROSS_X,
        ["<bos>", "the", "black"],
        ["le", "chat", "noir", "dort", "."],
        "Cross-attention",
    )
    fig.savefig(
        ROOT / "images" / "self_vs_cross_attention.svg",
        metadata=svg_metadata(fig),
        bbox_inches="tight",
    )
    preview = os.environ.get("PREVIEW_PNG")
    if preview:
        fig.savefig(preview, dpi=80, bbox_inches="tight")


if __name__ == "__main__":
    main()
