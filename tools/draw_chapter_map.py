"""Draw the chapter map of the introduction (images/chapter_map.svg).

Usage: python -m tools.draw_chapter_map   (run again when course.yml or _toc.yml
changes; set PREVIEW_PNG=some.png to also write a PNG preview)

The boxes are the chapters of course.yml, one column per part, labelled with their
`map_label`. Chapters listed in _toc.yml are drawn solid; planned ones dashed. The SVG is
deterministic (no date, fixed ids), so re-drawing an unchanged map changes nothing.

Each solid box is a link to its chapter's page (`chapters/NN_name.html`, relative to the
start page), named by its label (`aria-label`); its label text lets clicks through to it.
The book's extension puts the SVG itself in the start page (an <img> would not follow
links); the PDF shows it as a picture.
"""

from __future__ import annotations

import io
import itertools
import os
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attnbook.viz import svg_metadata
from tools import course
from tools.figure_command import parse_figure_args

ROOT = Path(__file__).resolve().parent.parent
COLUMN_IN = 1.9  # width of one part's column, inches
LABEL_PT = 10.5  # the chapters' labels, the map's smallest text
BOX_W = 0.92  # width of a chapter's box, in columns


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    plan = [
        (part, [(c.stem, c.map_label) for c in chapters]) for part, chapters in course.load().parts
    ]
    toc = (ROOT / "_toc.yml").read_text()
    written = set(re.findall(r"file:\s*chapters/(\S+)", toc))
    plt.rcParams["svg.hashsalt"] = "attnbook-chapter-map"
    columns = len(plan)
    rows = max(len(chapters) for _, chapters in plan)
    # One column per part, COLUMN_IN inches wide: narrow enough that the labels, at LABEL_PT,
    # stay above the book's 9 px floor when the map fills a 672 px column.
    planned = [stem for _, chapters in plan for stem, _ in chapters if stem not in written]
    bottom = -1.05 * rows - (0.4 if planned else 0.05)  # room for the legend if one is drawn
    fig, ax = plt.subplots(figsize=(COLUMN_IN * columns, 0.87 * (0.85 - bottom)))
    ax.set_xlim(0, columns)
    ax.set_ylim(bottom, 0.85)
    ax.axis("off")
    number = 0
    centres = []
    names: dict[str, str] = {}
    for col, (part, chapters) in enumerate(plan):
        ax.text(
            col + 0.5,
            0.35,
            part.replace(" and ", " and\n") if len(part) > 14 else part,
            ha="center",
            va="center",
            fontsize=12,
            fontweight="bold",
            color="#333333",
        )
        for row, (stem, title) in enumerate(chapters):
            number += 1
            x, y = col + 0.5, -0.55 - 1.05 * row
            done = stem in written
            box = FancyBboxPatch(
                (x - BOX_W / 2, y - 0.38),
                BOX_W,
                0.76,
                boxstyle="round,pad=0.02,rounding_size=0.06",
                facecolor="#dbe9f6" if done else "white",
                edgecolor="#1f5f99" if done else "#8a8a8a",
                linestyle="-" if done else "--",
                linewidth=1.4,
            )
            if done:
                box.set_url(f"chapters/{stem}.html")
            ax.add_patch(box)
            label = ax.text(
                x,
                y,
                f"{number}. {title}",
                ha="center",
                va="center",
                fontsize=LABEL_PT,
                color="#102a43" if done else "#6b6b6b",
            )
            label.set_gid(f"map-label-{stem}")  # attnbook.css: clicks pass through to the box
            names[stem] = f"{number}. {title}".replace("\n", " ")
            centres.append((x, y))
    for (x0, y0), (x1, y1) in itertools.pairwise(centres):
        if x0 == x1:
            start, end, style = (x0, y0 - 0.4), (x1, y1 + 0.4), "arc3"
        else:
            start, end, style = (
                (x0 + BOX_W / 2 + 0.01, y0),
                (x1 - BOX_W / 2 - 0.01, y1),
                "arc3,rad=0.0",
            )
        ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                arrowstyle="-|>",
                mutation_scale=10,
                color="#555555",
                connectionstyle=style,
                linewidth=1.0,
            )
        )
    if planned:  # the legend is only needed while some chapter is still to be written
        ax.text(
            columns,
            -0.35 - 1.05 * rows,
            "solid: available    dashed: planned",
            ha="right",
            va="bottom",
            fontsize=LABEL_PT,
            color="#6b6b6b",
        )
    fig.tight_layout()
    svg = io.StringIO()
    fig.savefig(svg, format="svg", metadata=svg_metadata(fig), bbox_inches="tight")
    (ROOT / "images" / "chapter_map.svg").write_text(named_links(svg.getvalue(), names))
    preview = os.environ.get("PREVIEW_PNG")  # e.g. PREVIEW_PNG=map.png to look at it
    if preview:
        fig.savefig(preview, dpi=80, bbox_inches="tight")


def named_links(svg: str, names: dict[str, str]) -> str:
    """Give each chapter's link in `svg` an `href` (SVG 2) beside matplotlib's `xlink:href`
    and an accessible name, opening in the same tab (matplotlib says `target="_blank"`):
    `names` maps a chapter's stem to its box's label."""

    def name(match: re.Match) -> str:
        stem = match[1]
        return (
            f'<a xlink:href="chapters/{stem}.html" href="chapters/{stem}.html" '
            f'aria-label="Chapter {names[stem]}">'
        )

    return re.sub(r'<a xlink:href="chapters/([^"]+)\.html"[^>]*>', name, svg)


if __name__ == "__main__":
    main()
