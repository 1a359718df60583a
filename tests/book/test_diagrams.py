"""The book's SVG diagrams (images/*.svg, drawn by tools/draw_*.py) stay legible in its column.

Each diagram records its smallest text in points in its description
(`attnbook.viz.svg_metadata`). The book shows it at the column's full width, so that text
renders at `smallest_pt * column_px / width_pt` CSS px; at the narrowest laptop column
(tools/figure_text.py's `COLUMN_PX`) it must reach the figures' floor, `FLOOR_PX`. A narrow
version (NAME_narrow.svg), which a phone shows instead, must reach `PHONE_FLOOR_PX` in the
`PHONE_FIGURE_PX` a 390 px phone gives it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import matplotlib.figure
import pytest

from attnbook.viz import SVG_SMALLEST_TEXT, svg_smallest_text
from tools.figure_text import COLUMN_PX, FLOOR_PX, PHONE_FIGURE_PX, PHONE_FLOOR_PX

ROOT = Path(__file__).resolve().parents[2]
DIAGRAMS = sorted(p for p in (ROOT / "images").glob("*.svg") if p.name != "favicon.svg")
NARROW = [p for p in DIAGRAMS if p.stem.endswith("_narrow")]
DRAWING_SCRIPTS = sorted(p.stem for p in (ROOT / "tools").glob("draw_*.py"))


def rendered_px(svg: str, column_px: float) -> float:
    """The smallest text of the diagram `svg` in CSS px when shown `column_px` wide."""
    recorded = svg_smallest_text(svg)
    assert recorded, "no smallest text or width in pt recorded: redraw it with its tools/draw_*.py"
    smallest_pt, width_pt = recorded
    return smallest_pt * column_px / width_pt


def test_every_diagram_is_checked() -> None:
    names = {p.name for p in DIAGRAMS}
    assert {"chapter_map.svg", "sdpa_dataflow.svg", "transformer_block.svg"} <= names
    assert {"chapter_map_narrow.svg", "sdpa_dataflow_narrow.svg"} <= names


@pytest.mark.parametrize("path", DIAGRAMS, ids=lambda p: p.stem)
def test_diagram_text_reaches_the_floor_in_the_narrowest_column(path: Path) -> None:
    column = min(COLUMN_PX.values())
    px = rendered_px(path.read_text(encoding="utf-8"), column)
    assert px >= FLOOR_PX, (
        f"{path.name}: smallest text renders at {px:.2f} CSS px in a {column} px column, "
        f"below the {FLOOR_PX:g} px floor: enlarge its text or narrow its drawing"
    )


@pytest.mark.parametrize("path", NARROW, ids=lambda p: p.stem)
def test_a_narrow_diagram_reaches_the_phone_floor(path: Path) -> None:
    assert path.with_stem(path.stem.removesuffix("_narrow")).is_file(), "no wide version"
    px = rendered_px(path.read_text(encoding="utf-8"), PHONE_FIGURE_PX)
    assert px >= PHONE_FLOOR_PX, (
        f"{path.name}: smallest text renders at {px:.2f} CSS px in a {PHONE_FIGURE_PX} px "
        f"figure on a phone, below the {PHONE_FLOOR_PX:g} px floor: narrow its drawing"
    )


def test_rendered_px_reads_the_recorded_text_and_width() -> None:
    svg = (
        '<svg xmlns:xlink="x" width="672pt" height="10pt">'
        f"<dc:description>{SVG_SMALLEST_TEXT.format(9)}</dc:description></svg>"
    )
    assert rendered_px(svg, 672) == pytest.approx(9.0)
    assert rendered_px(svg.replace('"672pt"', '"1344pt"'), 672) == pytest.approx(4.5)


@pytest.mark.parametrize("name", DRAWING_SCRIPTS)
def test_a_drawing_script_s_help_and_a_bad_argument_draw_nothing(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m tools.draw_block --help` (or any argument) redrew the figure."""
    module = importlib.import_module(f"tools.{name}")

    def drawing(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"tools.{name} wrote a file")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", drawing)
    monkeypatch.setattr(Path, "write_text", drawing)
    with pytest.raises(SystemExit) as exit:
        module.main(["--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m tools.{name} [-h]\n")
    assert module.__doc__.splitlines()[0] in out  # the description
    assert "Usage: python -m tools." in out  # and the rest of the docstring

    with pytest.raises(SystemExit) as exit:
        module.main(["--bogus"])
    assert exit.value.code == 2
    assert capsys.readouterr() == (
        "",
        f"python -m tools.{name}: unrecognized arguments: --bogus (--help says what it draws)\n",
    )


def test_the_chapter_map_s_arrows_run_straight() -> None:
    """The wide chapter map's arrows run down each part (one from each chapter to the next) and
    across between the parts' names, never slanted: an arrow from the last box of a part up to
    the first box of the next ran in the narrow gap between two columns, along the boxes'
    edges, where it read as one more border."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    from tools import course, draw_chapter_map

    plan = [(part, [(c.stem, c.map_label) for c in chs]) for part, chs in course.load().parts]
    fig, _names = draw_chapter_map.draw_wide(plan, {stem for _, chs in plan for stem, _ in chs})
    try:
        ends = [p._posA_posB for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)]
    finally:
        plt.close(fig)
    down = [(a, b) for a, b in ends if a[0] == pytest.approx(b[0]) and a[1] > b[1]]
    across = [(a, b) for a, b in ends if a[1] == pytest.approx(b[1]) and a[0] < b[0]]
    slanted = [(a, b) for a, b in ends if (a, b) not in down + across]
    assert not slanted, f"slanted arrows: {slanted}"
    chapters = sum(len(chs) for _, chs in plan)
    assert (len(down), len(across)) == (chapters - len(plan), len(plan) - 1)
