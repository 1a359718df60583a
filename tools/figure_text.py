"""How large the smallest text of each chapter figure will render in the book.

Usage: python -m tools.figure_text chapters/07_multi_head_attention.ipynb [...]
       python -m tools.figure_text --all        (every chapter; exit 1 if one is below)

Every notebook figure is drawn by `attnbook.viz.figure_png`, which records the height of
its smallest text in image pixels (`SMALLEST_TEXT_KEY`); the book shows the PNG at half
its pixel width, scaled down further where the column is narrower. This prints, for each
figure, that smallest text in CSS pixels once shown in the book's column at the laptop
widths (`COLUMN_PX`, measured in Chromium), against `FLOOR_PX`. The browser test
(tests/browser/test_pages.py) measures the same on the rendered pages; this is the quick
check while drawing a figure.

The floor: 9 CSS px. Body text is 16 px; 9 px is about the smallest size that stays
legible on an ordinary (96 dpi) laptop screen, and the book's own smallest text (code at
1280 px) is 11 px. On a phone every figure is held to `PHONE_FLOOR_PX`, 10 CSS px (the browser
test): a diagram of images/ drawn a second time for phones (NAME_narrow.svg, which the book
shows instead below 720 px) in the `PHONE_FIGURE_PX` a 390 px phone gives a figure
(tests/book/test_diagrams.py), any other at the width where its text is that size, which
_ext/attnbook_book.py works out from what the file records, in a box that scrolls sideways.
"""

from __future__ import annotations

import argparse
import base64
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attnbook.viz import PIXEL_DENSITY, png_smallest_text

ROOT = Path(__file__).resolve().parent.parent
FLOOR_PX = 9.0
# Width in CSS px of a cell output's column, by window width (Chromium, the book's theme).
COLUMN_PX = {1440: 800, 1366: 741, 1280: 672}
PHONE_FLOOR_PX = 10.0  # a narrow diagram's smallest text on a phone
PHONE_FIGURE_PX = 342  # a figure's width on a 390 px phone (Chromium, the book's theme)


@dataclass(frozen=True)
class FigureText:
    """One PNG output of a chapter: where it is and how large its smallest text is."""

    notebook: str
    cell: int  # index of the cell in the notebook
    natural_px: int  # width at which the book shows it when the column is wide enough
    smallest_px: float | None  # smallest text at that natural width, CSS px (None: unrecorded)

    def rendered_px(self, column_px: float) -> float | None:
        """The smallest text once shown in a column `column_px` wide."""
        if self.smallest_px is None:
            return None
        return self.smallest_px * min(1.0, column_px / self.natural_px)


def figures(path: Path) -> list[FigureText]:
    """The PNG outputs of the notebook at `path`, in order."""
    nb = nbformat.read(path, as_version=4)
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" not in data:
                continue
            png = base64.b64decode(data["image/png"])
            (width,) = struct.unpack(">I", png[16:20])  # the IHDR chunk
            recorded = png_smallest_text(png)
            found.append(
                FigureText(
                    notebook=path.name,
                    cell=index,
                    natural_px=width // PIXEL_DENSITY,
                    smallest_px=recorded[0] / PIXEL_DENSITY if recorded else None,
                )
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--all", action="store_true", help="every chapter notebook")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "chapters").glob("*.ipynb")) if args.all else args.notebooks
    narrowest = min(COLUMN_PX.values())
    below = 0
    for path in paths:
        for figure in figures(path):
            rendered = figure.rendered_px(narrowest)
            if rendered is None:
                verdict = "no record: re-execute the chapter (course_style draws it)"
                below += 1
            else:
                verdict = "ok" if rendered >= FLOOR_PX else f"BELOW the {FLOOR_PX:g} px floor"
                below += rendered < FLOOR_PX
            shown = "-" if rendered is None else f"{rendered:.1f} px"
            print(
                f"{figure.notebook} cell {figure.cell}: {figure.natural_px} px wide, "
                f"smallest text {shown} in a {narrowest} px column: {verdict}"
            )
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
