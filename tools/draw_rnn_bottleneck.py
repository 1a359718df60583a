"""Draw chapter 1's "why attention" diagram (images/rnn_bottleneck.svg).

Usage: python -m tools.draw_rnn_bottleneck   (set PREVIEW_PNG=some.png to also write a PNG preview)

Top: an encoder-decoder RNN without attention translates "she likes coffee" into
"elle aime le café" through one fixed-size vector c, the last encoder state.
Bottom: with attention (Bahdanau et al. 2015) the decoder keeps every encoder
state h_s and, at each output step t, reads a weighted sum of all of them. The
line widths of the bottom panel only illustrate that the weights differ; they
are not taken from a trained model. The SVG is deterministic (no date, fixed
ids), so re-drawing changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.viz import svg_metadata
from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ["she", "likes", "coffee"]  # the book's running example
TARGET = ["elle", "aime", "le", "café"]
STEP = 3  # the decoder step drawn with its attention weights in the bottom panel ("café")
WEIGHTS = [0.1, 0.2, 0.7]  # illustrative only: how much step STEP reads each h_s

FILL, EDGE, TEXT, GREY, HOT = "#dbe9f6", "#1f5f99", "#102a43", "#8a8a8a", "#b3261e"
DECODER_FILL = "#e8f4e5"
DECODER_EDGE = "#2e7d32"


def box(ax, x: float, y: float, label: str, fill: str = FILL, edge: str = EDGE, w=0.7, h=0.5):
    """A rounded state box centred on (x, y)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=fill,
            edgecolor=edge,
            linewidth=1.3,
        )
    )
    ax.text(x, y, label, ha="center", va="center", fontsize=10, color=TEXT)


def arrow(ax, start, end, color: str = "#555555", width: float = 1.0, style: str = "arc3"):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=10,
            color=color,
            linewidth=width,
            connectionstyle=style,
            shrinkA=2,
            shrinkB=2,
        )
    )


def encoder(ax, y: float) -> list[tuple[float, float]]:
    """Source words and encoder states h_0..h_2 at height y; returns the states' centres."""
    centres = []
    for s, word in enumerate(SOURCE):
        x = 0.6 + 1.1 * s
        ax.text(x, y - 0.85, word, ha="center", va="center", fontsize=10, color=TEXT)
        arrow(ax, (x, y - 0.68), (x, y - 0.27))
        box(ax, x, y, f"$h_{s}$")
        if s:
            arrow(ax, (x - 1.1 + 0.36, y), (x - 0.36, y))
        centres.append((x, y))
    return centres


def decoder(ax, y: float, x0: float) -> list[tuple[float, float]]:
    """Decoder states and the words they emit, starting at x0; returns the states' centres."""
    centres = []
    for t, word in enumerate(TARGET):
        x = x0 + 1.1 * t
        box(ax, x, y, f"step {t}", fill=DECODER_FILL, edge=DECODER_EDGE)
        arrow(ax, (x, y + 0.27), (x, y + 0.68))
        ax.text(x, y + 0.85, word, ha="center", va="center", fontsize=10, color=TEXT)
        if t:
            arrow(ax, (x - 1.1 + 0.36, y), (x - 0.36, y))
        centres.append((x, y))
    return centres


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    plt.rcParams["svg.hashsalt"] = "attnbook-rnn-bottleneck"
    fig, ax = plt.subplots(figsize=(8.4, 5.8))
    ax.set_xlim(-0.2, 9.6)
    ax.set_ylim(-6.5, 1.1)
    ax.axis("off")

    # --- top: no attention, one fixed-size vector c -----------------------------------------
    ax.text(
        -0.1,
        0.85,
        "Without attention: the whole sentence must pass through one vector c",
        fontsize=11,
        fontweight="bold",
        color=TEXT,
    )
    y_top = -0.6
    states = encoder(ax, y_top)
    c_x = states[-1][0] + 1.5
    box(ax, c_x, y_top, "c", fill="white", edge=HOT, w=0.6)
    arrow(ax, (states[-1][0] + 0.36, y_top), (c_x - 0.31, y_top), color=HOT, width=1.6)
    ax.text(
        c_x,
        y_top - 0.55,
        "fixed size:\nd numbers,\nwhatever the length",
        ha="center",
        va="top",
        fontsize=10,
        color=HOT,
    )
    steps = decoder(ax, y_top, c_x + 1.3)
    arrow(ax, (c_x + 0.31, y_top), (steps[0][0] - 0.36, y_top), color=HOT, width=1.6)

    # --- bottom: attention, every encoder state kept -----------------------------------------
    ax.text(
        -0.1,
        -2.35,
        "With attention: every step t reads a weighted sum of all the encoder states",
        fontsize=11,
        fontweight="bold",
        color=TEXT,
    )
    y_bottom = -5.3
    states = encoder(ax, y_bottom)
    steps = decoder(ax, y_bottom, c_x + 1.3)
    mix_x, mix_y = steps[STEP][0] - 0.9, y_bottom + 2.0
    ax.add_patch(plt.Circle((mix_x, mix_y), 0.3, facecolor="white", edgecolor=HOT, linewidth=1.4))
    ax.text(mix_x, mix_y, "Σ", ha="center", va="center", fontsize=13, color=HOT)
    ax.text(
        mix_x,
        mix_y + 0.38,
        "$\\sum_s\\, a_s h_s$",
        ha="center",
        va="bottom",
        fontsize=10,
        color=HOT,
    )
    for s, ((x, y), weight) in enumerate(zip(states, WEIGHTS)):
        arrow(ax, (x, y + 0.27), (mix_x - 0.3, mix_y - 0.05), color=HOT, width=0.6 + 5 * weight)
        ax.text(x - 0.08, y + 0.42, f"$a_{s}$", fontsize=10, color=HOT, ha="right")
    arrow(
        ax,
        (mix_x + 0.22, mix_y - 0.22),
        (steps[STEP][0] - 0.3, steps[STEP][1] + 0.27),
        color=HOT,
        width=1.6,
    )
    ax.text(
        9.55,
        -6.45,
        "line widths illustrate the weights $a_s$ of step 3;\nthey are not from a trained model",
        ha="right",
        va="bottom",
        fontsize=10,
        color=GREY,
    )
    fig.tight_layout()
    fig.savefig(
        ROOT / "images" / "rnn_bottleneck.svg", metadata=svg_metadata(fig), bbox_inches="tight"
    )
    preview = os.environ.get("PREVIEW_PNG")  # e.g. PREVIEW_PNG=bottleneck.png to look at it
    if preview:
        fig.savefig(preview, dpi=80, bbox_inches="tight")


if __name__ == "__main__":
    main()
