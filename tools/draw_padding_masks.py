"""Draw chapter 6's two padding diagrams (images/padding_mask_broadcast.svg, images/left_right_padding.svg).

Usage: python -m tools.draw_padding_masks   (set PREVIEW_PNG_DIR=some/dir to also write PNG previews)

Every cell of every grid is computed with attnbook's own ``padding_mask`` and
``causal_mask``, not typed in by hand, so the pictures show what the package does.
The batch is the book's running example: "she likes coffee" and "she likes"
padded to three positions. The SVGs are deterministic (no date, fixed ids), so
re-drawing changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from attnbook import causal_mask, combine_masks, padding_mask
from attnbook.viz import svg_metadata
from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = [["she", "likes", "coffee"], ["she", "likes"]]
LENGTHS = [len(s) for s in SENTENCES]  # [3, 2]
S = max(LENGTHS)  # the padded length
PAD = "<pad>"

ALLOWED, BLOCKED = "#dbe9f6", "white"  # fill of a True (may attend) and a False cell
EDGE, TEXT, GREY, WARN = "#1f5f99", "#102a43", "#8a8a8a", "#b3261e"


def cell(ax, x: float, y: float, allowed: bool, size: float = 1.0, **kwargs) -> None:
    """One mask cell with its lower-left corner at (x, y): filled when attention is allowed."""
    ax.add_patch(
        Rectangle(
            (x, y),
            size,
            size,
            facecolor=ALLOWED if allowed else BLOCKED,
            edgecolor=kwargs.pop("edgecolor", EDGE),
            linewidth=kwargs.pop("linewidth", 1.0),
            **kwargs,
        )
    )
    ax.text(
        x + size / 2,
        y + size / 2,
        "1" if allowed else "0",
        ha="center",
        va="center",
        fontsize=9.5 if size >= 1 else 9,
        color=TEXT if allowed else GREY,
    )


def token(ax, x: float, y: float, word: str, width: float = 1.0, fontsize: float = 9.5) -> None:
    """A token box: real words framed in blue, padding in dashed grey."""
    real = word != PAD
    ax.add_patch(
        Rectangle(
            (x, y),
            width,
            0.8,
            facecolor="white",
            edgecolor=EDGE if real else GREY,
            linestyle="-" if real else "--",
            linewidth=1.0,
        )
    )
    ax.text(
        x + width / 2,
        y + 0.4,
        word,
        ha="center",
        va="center",
        fontsize=fontsize,
        color=TEXT if real else GREY,
    )


def arrow(ax, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="#555555", lw=1.2)
    )


def save(fig, name: str) -> None:
    fig.savefig(ROOT / "images" / name, metadata=svg_metadata(fig), bbox_inches="tight")
    preview = os.environ.get("PREVIEW_PNG_DIR")
    if preview:
        fig.savefig(Path(preview) / name.replace(".svg", ".png"), dpi=80, bbox_inches="tight")
    plt.close(fig)


def draw_broadcast() -> None:
    """padding_mask(lengths, per_head=True), (B, 1, 1, S), copied along heads and queries."""
    plt.rcParams["svg.hashsalt"] = "attnbook-padding-broadcast"
    mask = padding_mask(LENGTHS, S, per_head=True)  # (B, 1, 1, S)
    n_heads, n_queries = 2, S
    fig, ax = plt.subplots(figsize=(8.2, 4.0))
    ax.set_aspect("equal")
    ax.axis("off")

    # Left: the mask as stored, one row of S keys per sequence.
    left_x, top = 0.0, 7.0
    ax.text(left_x, top + 2.2, "padding_mask(lengths, per_head=True)", fontsize=10, color=TEXT)
    ax.text(left_x, top + 1.5, "stored shape (B, 1, 1, S) = (2, 1, 1, 3)", fontsize=9, color=GREY)
    for b, words in enumerate(SENTENCES):
        y = top - 2.4 * b
        padded = words + [PAD] * (S - len(words))
        for s in range(S):
            token(ax, left_x + s, y + 0.15, padded[s], fontsize=9)
            cell(ax, left_x + s, y - 1.0, bool(mask[b, 0, 0, s]))
        ax.text(left_x - 0.3, y - 0.5, f"b = {b}", ha="right", va="center", fontsize=9)
    ax.text(left_x, top - 4.3, "1 = may attend, 0 = blocked", fontsize=9, color=GREY)

    arrow(ax, (left_x + S + 0.5, top - 1.0), (left_x + S + 2.8, top - 1.0))
    ax.text(
        left_x + S + 1.65,
        top - 0.6,
        "broadcast\n(no copy)",
        ha="center",
        va="bottom",
        fontsize=9,
        color="#555555",
    )

    # Right: what the scores (B, H, T, S) see: the row repeated for every head and query.
    right_x = left_x + S + 3.7
    ax.text(
        right_x, top + 2.2, "as seen by scores (B, H, T, S) = (2, 2, 3, 3)", fontsize=10, color=TEXT
    )
    ax.text(
        right_x,
        top + 1.5,
        "the same row for every head h and every query t",
        fontsize=9,
        color=GREY,
    )
    size = 0.55
    for b in range(len(SENTENCES)):
        base_y = top - 2.4 * b - 1.3
        for h in range(n_heads):
            x0 = right_x + h * (S * size + 1.2)
            for t in range(n_queries):
                for s in range(S):
                    cell(ax, x0 + s * size, base_y - t * size + 0.8, bool(mask[b, 0, 0, s]), size)
            ax.text(
                x0 + S * size / 2,
                base_y + 1.55,
                f"b = {b}, h = {h}",
                ha="center",
                fontsize=9,
                color=TEXT,
            )
        ax.text(
            right_x + n_heads * (S * size + 1.2) - 0.6,
            base_y + 0.8 - size * (n_queries - 1) / 2 - 0.1,
            "rows: queries t\ncolumns: keys s",
            fontsize=9,
            color=GREY,
            va="center",
        )
    ax.set_xlim(left_x - 1.2, right_x + 7.5)
    ax.set_ylim(top - 4.8, top + 2.7)
    fig.tight_layout()
    save(fig, "padding_mask_broadcast.svg")


def draw_left_right() -> None:
    """The short sentence padded on the right and on the left, with its causal & padding mask."""
    plt.rcParams["svg.hashsalt"] = "attnbook-left-right-padding"
    right = padding_mask(LENGTHS, S)  # (B, 1, S)
    sides = [("right padding", right), ("left padding", right.flip(-1))]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.set_aspect("equal")
    ax.axis("off")
    for i, (name, pad) in enumerate(sides):
        x0 = i * 7.5
        ax.text(x0, 6.2, name, fontsize=11, fontweight="bold", color=TEXT)
        rows = []
        for b, words in enumerate(SENTENCES):
            fill = [PAD] * (S - len(words))
            padded = words + fill if i == 0 else fill + words
            rows.append(padded)
            for s in range(S):
                token(ax, x0 + 1.3 * s, 5.0 - 1.0 * b, padded[s], width=1.2)
        both = combine_masks(causal_mask(S), pad)  # (B, T, S)
        short = both[1]  # (T, S): the mask of "she likes"
        gx, gy = x0 + 1.3, -0.8
        ax.text(
            x0,
            2.8,
            "causal & padding mask of sequence b = 1\n(rows: queries t, columns: keys s)",
            fontsize=9.5,
            color=TEXT,
        )
        for t in range(S):
            ax.text(
                gx - 0.15,
                gy + (S - 1 - t) + 0.5,
                rows[1][t],
                ha="right",
                va="center",
                fontsize=9.5,
                color=TEXT if rows[1][t] != PAD else GREY,
            )
            for s in range(S):
                cell(ax, gx + s, gy + (S - 1 - t), bool(short[t, s]))
            if not bool(short[t].any()):
                ax.add_patch(
                    Rectangle(
                        (gx - 0.05, gy + (S - 1 - t) - 0.05),
                        S + 0.1,
                        1.1,
                        fill=False,
                        edgecolor=WARN,
                        linewidth=2.0,
                    )
                )
                ax.text(
                    gx + S + 0.2,
                    gy + (S - 1 - t) + 0.5,
                    "empty row:\nattends to nothing",
                    va="center",
                    fontsize=9.5,
                    color=WARN,
                )
        for s in range(S):
            ax.text(
                gx + s + 0.5,
                gy - 0.35,
                rows[1][s],
                ha="center",
                va="top",
                fontsize=9.5,
                rotation=30,
                color=TEXT if rows[1][s] != PAD else GREY,
            )
    ax.set_xlim(-0.3, 14.6)
    ax.set_ylim(-2.4, 6.7)
    fig.tight_layout()
    save(fig, "left_right_padding.svg")


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    draw_broadcast()
    draw_left_right()


if __name__ == "__main__":
    main()
