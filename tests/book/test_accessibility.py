"""Colour maps a colour-blind reader can read: the package's, and every one a chapter or tool names.

About one reader in twelve (men) sees red and green alike. A colour map is safe when it
stays readable under the common colour-vision deficiencies (deuteranopia, protanopia,
tritanopia): either its lightness alone orders the values (viridis and its family, the
single-hue ColorBrewer maps), or its two arms use hues those readers tell apart (blue and
red/orange, purple and orange, brown and teal). Rainbow maps (jet, rainbow, hsv, Spectral)
and red-green diverging maps (RdYlGn) are not. The rest of the page's accessibility (alt
text, contrast, axe-core) is checked by the browser test (tests/browser).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

import attnbook.viz as viz

ROOT = Path(__file__).resolve().parents[2]

SEQUENTIAL_SAFE = {
    # perceptually uniform, lightness rises monotonically (matplotlib's viridis family)
    "viridis", "cividis", "magma", "inferno", "plasma",
    # single-hue ColorBrewer maps: lightness alone carries the value
    "Blues", "Greys", "gray", "Purples", "Oranges", "Greens", "Reds",
    # multi-hue ColorBrewer sequential maps marked colour-blind safe
    "YlGnBu", "YlOrRd", "YlOrBr", "PuBu", "BuPu", "GnBu",
}  # fmt: skip
DIVERGING_SAFE = {
    # ColorBrewer diverging maps marked colour-blind safe, and Moreland's cool-warm
    "RdBu", "PuOr", "BrBG", "RdYlBu", "coolwarm",
}  # fmt: skip
NOT_SAFE_EXAMPLES = ["jet", "rainbow", "hsv", "Spectral", "RdYlGn", "PiYG_r"]

# A colour map named in code: cmap="x", get_cmap("x"), colormaps["x"], "image.cmap": "x".
CMAP_NAMED = re.compile(
    r"""(?:\bcmap\s*=\s*|get_cmap\(\s*|colormaps\[\s*|["']image\.cmap["']\s*:\s*)["']([\w.]+)["']"""
)


def is_safe(name: str) -> bool:
    """Whether the colour map `name` (or its reversed "_r" form) is in the allow-list."""
    base = name.removesuffix("_r")
    return base in SEQUENTIAL_SAFE or base in DIVERGING_SAFE


def _sources() -> dict[str, str]:
    """Every place a colour map may be named: the package, tools, benchmarks, chapters' code."""
    found = {}
    for folder in ("src", "tools", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[path.relative_to(ROOT).as_posix()] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        code = [
            "".join(cell["source"])
            for cell in notebook["cells"]
            if cell["cell_type"] == "code"
            or (cell["cell_type"] == "markdown" and "```python" in "".join(cell["source"]))
        ]
        found[path.relative_to(ROOT).as_posix()] = "\n".join(code)
    return found


def _lightness(name: str, n: int = 64) -> np.ndarray:
    """CIE L* (0 black .. 100 white) of `n` colours sampled along the colour map."""
    rgb = matplotlib.colormaps[name](np.linspace(0, 1, n))[:, :3]
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    y = linear @ np.array([0.2126, 0.7152, 0.0722])
    return np.where(y > (6 / 29) ** 3, 116 * np.cbrt(y) - 16, y * (29 / 3) ** 3)


def test_the_package_colour_maps_are_colour_blind_safe() -> None:
    assert viz.SEQUENTIAL_CMAP.removesuffix("_r") in SEQUENTIAL_SAFE, viz.SEQUENTIAL_CMAP
    assert viz.DIVERGING_CMAP.removesuffix("_r") in DIVERGING_SAFE, viz.DIVERGING_CMAP
    assert is_safe(str(viz.STYLE["image.cmap"])), viz.STYLE["image.cmap"]


def test_the_sequential_map_is_ordered_by_lightness_alone() -> None:
    # Readable without hue at all (and in greyscale print): L* rises all the way.
    lightness = _lightness(viz.SEQUENTIAL_CMAP)
    steps = np.diff(lightness) if not viz.SEQUENTIAL_CMAP.endswith("_r") else -np.diff(lightness)
    assert (steps > 0).all(), f"{viz.SEQUENTIAL_CMAP}: lightness is not monotonic"
    assert lightness.max() - lightness.min() > 60


def test_the_diverging_map_is_light_in_the_middle_and_dark_at_both_ends() -> None:
    # Its two arms are told apart by hue; its centre (a weight near 0) by lightness.
    lightness = _lightness(viz.DIVERGING_CMAP)
    middle = lightness[len(lightness) // 2 - 1 : len(lightness) // 2 + 1].mean()
    assert middle > lightness[0] + 40
    assert middle > lightness[-1] + 40


def test_every_colour_map_named_in_the_book_is_colour_blind_safe() -> None:
    named = {
        (where, match[1])
        for where, text in _sources().items()
        for match in CMAP_NAMED.finditer(text)
    }
    assert any(where == "src/attnbook/viz.py" for where, _ in named), "the scan found nothing"
    unsafe = sorted(f"{where}: {name}" for where, name in named if not is_safe(name))
    assert not unsafe, "colour maps that are not colour-blind safe:\n" + "\n".join(unsafe)


@pytest.mark.parametrize("name", NOT_SAFE_EXAMPLES)
def test_the_check_rejects_rainbow_and_red_green_maps(name: str) -> None:
    assert not is_safe(name)
    text = f'ax.imshow(m, cmap="{name}")\nplt.get_cmap("{name}")'
    assert [match[1] for match in CMAP_NAMED.finditer(text)] == [name, name]


def test_the_lightness_check_rejects_a_rainbow() -> None:
    steps = np.diff(_lightness("jet"))
    assert not (steps > 0).all()
