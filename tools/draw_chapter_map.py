"""Draw the chapter map of the introduction (images/chapter_map.svg, and a narrow one for phones).

Usage: python -m tools.draw_chapter_map   (run again when course.yml or _toc.yml
changes; set PREVIEW_PNG=some.png to also write PNG previews, some.png and some_narrow.png)

The boxes are the chapters of course.yml, labelled with their `map_label`. Chapters listed
in _toc.yml are drawn solid; planned ones dashed. chapter_map.svg has one column per part;
chapter_map_narrow.svg, which a phone shows instead (attnbook.css), one box per row, each
part's name beside its boxes, so that its labels stay readable on a 390 px screen. The SVGs
are deterministic (no date, fixed ids), so re-drawing an unchanged map changes nothing.

Each solid box is a link to its chapter's page (`chapters/NN_name.html`, relative to the
start page), named by its label (`aria-label`); its label text lets clicks through to it.
The book's extension puts the SVGs themselves in the start page (an <img> would not follow
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
BOX_H = 0.76  # height of a chapter's box, in the wide map's rows
NARROW_IN = 4.6  # width of the narrow map, inches: its labels are 10.5 pt at 331 pt
NARROW_PART_IN = 1.35  # of which the parts' names take this much, at the left
NARROW_BOX_IN = 0.4  # one box height (BOX_H) of the narrow map, in inches


def main(argv: list[str] | None = None) -> None:
    parse_figure_args(__doc__, __file__, argv)  # --help, or a usage error: nothing drawn
    plan = [
        (part, [(c.stem, c.map_label) for c in chapters]) for part, chapters in course.load().parts
    ]
    toc = (ROOT / "_toc.yml").read_text()
    written = set(re.findall(r"file:\s*chapters/(\S+)", toc))
    preview = os.environ.get("PREVIEW_PNG")  # e.g. PREVIEW_PNG=map.png to look at them
    for name, draw in (("chapter_map", draw_wide), ("chapter_map_narrow", draw_narrow)):
        plt.rcParams["svg.hashsalt"] = f"attnbook-{name.replace('_', '-')}"
        fig, names = draw(plan, written)
        svg = io.StringIO()
        fig.savefig(svg, format="svg", metadata=svg_metadata(fig), bbox_inches="tight")
        (ROOT / "images" / f"{name}.svg").write_text(named_links(svg.getvalue(), names))
        if preview:
            path = Path(preview)
            suffix = name.removeprefix("chapter_map")
            fig.savefig(path.with_stem(path.stem + suffix), dpi=80, bbox_inches="tight")
        plt.close(fig)


def chapter_box(ax, x: float, y: float, width: float, stem: str, label: str, done: bool) -> None:
    """The box of a chapter centred at (x, y), `width` wide, linking its page if `done`."""
    box = FancyBboxPatch(
        (x - width / 2, y - BOX_H / 2),
        width,
        BOX_H,
        boxstyle="round,pad=0.02,rounding_size=0.06",
        facecolor="#dbe9f6" if done else "white",
        edgecolor="#1f5f99" if done else "#8a8a8a",
        linestyle="-" if done else "--",
        linewidth=1.4,
    )
    if done:
        box.set_url(f"chapters/{stem}.html")
    ax.add_patch(box)
    text = ax.text(
        x,
        y,
        label,
        ha="center",
        va="center",
        fontsize=LABEL_PT,
        color="#102a43" if done else "#6b6b6b",
    )
    text.set_gid(f"map-label-{stem}")  # attnbook.css: clicks pass through to the box


def arrow(ax, start: tuple[float, float], end: tuple[float, float], style: str) -> None:
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


def legend(ax, x: float, y: float) -> None:
    """The legend, only needed while some chapter is still to be written."""
    ax.text(
        x,
        y,
        "solid: available    dashed: planned",
        ha="right",
        va="bottom",
        fontsize=LABEL_PT,
        color="#6b6b6b",
    )


def draw_wide(plan: list, written: set[str]) -> tuple[plt.Figure, dict[str, str]]:
    """The map of the book's column: one column per part, the chapters down each column."""
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
    headers = []
    names: dict[str, str] = {}
    for col, (part, chapters) in enumerate(plan):
        header = ax.text(
            col + 0.5,
            0.35,
            part.replace(" and ", " and\n") if len(part) > 14 else part,
            ha="center",
            va="center",
            fontsize=12,
            fontweight="bold",
            color="#333333",
        )
        headers.append(header)
        for row, (stem, title) in enumerate(chapters):
            number += 1
            x, y = col + 0.5, -0.55 - 1.05 * row
            chapter_box(ax, x, y, BOX_W, stem, f"{number}. {title}", stem in written)
            names[stem] = f"{number}. {title}".replace("\n", " ")
            centres.append((x, y))
    # Down each part, an arrow from each chapter to the next; from one part to the next, an
    # arrow between their names. (An arrow from the last box of a part up to the first of the
    # next ran almost vertically in the narrow gap between two columns, along the boxes'
    # edges, where it read as one more border.)
    for (x0, y0), (x1, y1) in itertools.pairwise(centres):
        if x0 == x1:
            arrow(ax, (x0, y0 - 0.4), (x1, y1 + 0.4), "arc3")
    if planned:
        legend(ax, columns, -0.35 - 1.05 * rows)
    fig.tight_layout()
    fig.canvas.draw()  # the names' extents, in the axes' final size
    to_data = ax.transData.inverted()
    spans = [to_data.transform(h.get_window_extent().get_points())[:, 0] for h in headers]
    for (_, right), (left, _) in itertools.pairwise(spans):
        arrow(ax, (right + 0.06, 0.35), (left - 0.06, 0.35), "arc3")
    return fig, names


def draw_narrow(plan: list, written: set[str]) -> tuple[plt.Figure, dict[str, str]]:
    """The map of a phone: one chapter per row, its label on one line, each part's name at
    the left of its chapters; NARROW_IN inches wide, so that the labels render at 10 CSS px
    or more on a 390 px screen (a 342 px figure)."""
    pitch, gap = 1.55, 0.45  # from one box to the next, in box heights; between two parts
    rows = sum(len(chapters) for _, chapters in plan)
    planned = [stem for _, chapters in plan for stem, _ in chapters if stem not in written]
    height = pitch * rows + gap * (len(plan) - 1) + (0.7 if planned else 0.0)
    fig, ax = plt.subplots(figsize=(NARROW_IN, height * BOX_H * NARROW_BOX_IN))
    ax.set_xlim(0, NARROW_IN / NARROW_BOX_IN)  # one unit: one box height in inches
    ax.set_ylim(-height * BOX_H, 0)
    ax.axis("off")
    width = (NARROW_IN - NARROW_PART_IN) / NARROW_BOX_IN  # a box, in the same units
    x = NARROW_PART_IN / NARROW_BOX_IN + width / 2
    number = 0
    y = -pitch * BOX_H / 2
    centres = []
    names: dict[str, str] = {}
    for index, (part, chapters) in enumerate(plan):
        if index:  # a thin line between two parts, halfway between their boxes
            y -= gap * BOX_H
            middle = y + (pitch + gap) * BOX_H / 2
            ax.plot([0.05, NARROW_IN / NARROW_BOX_IN - 0.05], [middle] * 2, color="#cccccc", lw=0.8)
        first = y
        for stem, title in chapters:
            number += 1
            label = f"{number}. {title}".replace("\n", " ")
            chapter_box(ax, x, y, width - 0.1, stem, label, stem in written)
            names[stem] = label
            centres.append(y)
            y -= pitch * BOX_H
        ax.text(
            0.05,
            (first + y + pitch * BOX_H) / 2,
            part.replace(" and ", " and\n") if len(part) > 12 else part,
            ha="left",
            va="center",
            fontsize=LABEL_PT,
            fontweight="bold",
            color="#333333",
        )
    for y0, y1 in itertools.pairwise(centres):
        arrow(ax, (x, y0 - BOX_H / 2 - 0.01), (x, y1 + BOX_H / 2 + 0.01), "arc3")
    if planned:
        legend(ax, NARROW_IN / NARROW_BOX_IN, y + pitch * BOX_H / 2 - 0.6 * BOX_H)
    fig.subplots_adjust(0, 0, 1, 1)
    return fig, names


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
