"""Draw the transformer-block figure of chapter 9 (images/transformer_block.svg).

Usage: python -m tools.draw_block   (set PREVIEW_PNG=some.png to also write a PNG preview)

Three columns, read bottom to top: the pre-LN block (encoder, and with a causal
mask the GPT block), the post-LN block of the original Transformer, and the
pre-LN decoder block with cross-attention. The boxes name the modules of
attnbook.block. The SVG is deterministic (no date, fixed ids).
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from attnbook.viz import svg_metadata
from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent

COLOURS = {  # fill colours, one per kind of module
    "norm": "#fff2c7",
    "attn": "#fcd9c4",
    "ffn": "#d4e6f6",
    "drop": "#ececec",
}
EDGE = "#444444"
BOX_W, BOX_H, GAP = 2.05, 0.42, 0.2
TITLE_Y = 8.5  # every column's title at the same height
SKIP_DX = 1.2  # how far left of the column the residual (skip) path runs
PITCH = 2.95  # from one column to the next
TEXT_PT = 9.5  # every label but the titles: the smallest text


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=9, color=EDGE, linewidth=1.0,
            shrinkA=0, shrinkB=0,
        )
    )  # fmt: skip


def _box(ax: plt.Axes, x: float, y: float, label: str, kind: str) -> float:
    """A box whose bottom edge is at ``y``; return the y of its top edge."""
    ax.add_patch(
        FancyBboxPatch(
            (x - BOX_W / 2, y),
            BOX_W,
            BOX_H,
            boxstyle="round,pad=0.0,rounding_size=0.08",
            facecolor=COLOURS[kind],
            edgecolor=EDGE,
            linewidth=1.0,
        )
    )
    ax.text(x, y + BOX_H / 2, label, ha="center", va="center", fontsize=TEXT_PT, color="#102a43")
    return y + BOX_H


def _plus(ax: plt.Axes, x: float, y: float) -> float:
    """A residual sum (circle with a plus) centred at height ``y + r``; return its top."""
    r = 0.13
    ax.add_patch(Circle((x, y + r), r, facecolor="white", edgecolor=EDGE, linewidth=1.0))
    ax.text(x, y + r, "+", ha="center", va="center", fontsize=11, color=EDGE)
    return y + 2 * r


def _sublayer(
    ax: plt.Axes, x: float, y: float, boxes: list[tuple[str, str]], norm_after: bool
) -> float:
    """One residual sub-layer starting at height ``y``: branch, boxes, sum (then LN if post-LN)."""
    branch = y + 0.12
    ax.plot([x, x], [y, branch], color=EDGE, linewidth=1.0)
    ax.plot([x, x - SKIP_DX, x - SKIP_DX], [branch, branch, 0], color=EDGE, linewidth=1.0)
    y = branch
    for label, kind in boxes:
        _arrow(ax, (x, y), (x, y + GAP))
        y = _box(ax, x, y + GAP, label, kind)
    _arrow(ax, (x, y), (x, y + GAP))
    plus_bottom = y + GAP
    top = _plus(ax, x, plus_bottom)
    # the skip path rises on the left and enters the sum from the side
    skip_y = plus_bottom + 0.13
    ax.lines[-1].set_data([x, x - SKIP_DX, x - SKIP_DX], [branch, branch, skip_y])
    _arrow(ax, (x - SKIP_DX, skip_y), (x - 0.13, skip_y))
    if norm_after:
        _arrow(ax, (x, top), (x, top + GAP))
        top = _box(ax, x, top + GAP, "LayerNorm", "norm")
    return top


def _column(
    ax: plt.Axes,
    x: float,
    title: str,
    sublayers: list[list[tuple[str, str]]],
    *,
    pre_ln: bool,
    final: str,
    context_at: int | None = None,
) -> None:
    y = 0.0
    ax.text(x, y - 0.28, "X  (B, T, d_model)", ha="center", va="center", fontsize=TEXT_PT)
    for i, boxes in enumerate(sublayers):
        boxes = [("LayerNorm", "norm"), *boxes] if pre_ln else boxes
        start = y
        y = _sublayer(ax, x, y, [*boxes, ("Dropout", "drop")], norm_after=not pre_ln)
        if i == context_at:  # cross-attention: keys and values from the encoder's output C
            attn_index = 2 if pre_ln else 1
            attn_y = start + 0.12 + attn_index * (GAP + BOX_H) - BOX_H / 2
            ax.text(
                x + BOX_W / 2 + 0.55, attn_y - 0.75, "C (encoder\noutput)", ha="center",
                va="center", fontsize=TEXT_PT,
            )  # fmt: skip
            _arrow(ax, (x + BOX_W / 2 + 0.5, attn_y - 0.4), (x + BOX_W / 2, attn_y))
        y += 0.08
    _arrow(ax, (x, y - 0.08), (x, y + GAP))
    ax.text(x, y + GAP + 0.1, final, ha="center", va="bottom", fontsize=TEXT_PT)
    ax.text(x - 0.1, TITLE_Y, title, ha="center", va="center", fontsize=11, fontweight="bold")


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    plt.rcParams["svg.hashsalt"] = "attnbook-transformer-block"
    fig, ax = plt.subplots(figsize=(7.9, 7.8))
    attention = [("Multi-head attention", "attn")]
    ffn = [("Feed-forward (GELU)", "ffn")]
    _column(
        ax, 1.5, "Pre-LN block\n(encoder, GPT)", [attention, ffn], pre_ln=True,
        final="to the next block;\nthe model ends with\none more LayerNorm",
    )  # fmt: skip
    _column(
        ax, 1.5 + PITCH, "Post-LN block\n(2017)", [attention, ffn], pre_ln=False,
        final="to the next block",
    )  # fmt: skip
    _column(
        ax, 1.5 + 2 * PITCH, "Pre-LN decoder\nblock",
        [[("Causal self-attention", "attn")], [("Cross-attention", "attn")], ffn],
        pre_ln=True, final="to the next decoder block", context_at=1,
    )  # fmt: skip
    ax.set_xlim(0.1, 1.5 + 2 * PITCH + 2.0)
    ax.set_ylim(-0.55, 8.8)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(
        ROOT / "images" / "transformer_block.svg", metadata=svg_metadata(fig), bbox_inches="tight"
    )
    preview = os.environ.get("PREVIEW_PNG")
    if preview:
        fig.savefig(preview, dpi=90, bbox_inches="tight")


if __name__ == "__main__":
    main()
