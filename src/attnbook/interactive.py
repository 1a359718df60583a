"""Interactive figures for the rendered book: a softmax-temperature explorer, a heatmap with hover.

Introduced in chapter 2 (the temperature explorer) and used again in chapter 4 (the
worked example's weights). A reader of the web page drags a slider or hovers over a
cell instead of reading a table; everything the figure can show is computed here, in
Python, and written into the page, so it needs no running kernel.

Each function returns an :class:`InteractiveFigure`, which a notebook shows in three
forms (``_repr_mimebundle_``): ``text/html``, a ``<div>`` that Plotly draws (its script
loaded from Plotly's public CDN, at the version the pinned ``plotly`` package ships;
the book serves its own copy instead, so the pages work offline); ``image/png``, a
static drawing in the course's style (what the PDF shows); and ``text/plain``, a text
alternative giving the numbers. The HTML is deterministic (a fixed id derived from
``name``, numbers rounded), so a stored notebook output reproduces exactly.

Plotly is a dependency of the package, but it is imported only when a figure is made,
never by ``import attnbook``.

Conventions: as in :mod:`attnbook.viz`, rows of a heatmap are queries and columns are
keys. Shapes: ``S`` keys, ``T`` queries.
"""

from __future__ import annotations

import base64
import functools
import html
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnbook._validation import Array, check_no_nan, shape_str
from attnbook.softmax import softmax
from attnbook.viz import course_style, figure_png, plot_bars, plot_heatmap, to_numpy

__all__ = [
    "DEFAULT_TEMPERATURES",
    "InteractiveFigure",
    "attention_heatmap",
    "plotly_cdn_url",
    "softmax_temperature_explorer",
]

DEFAULT_TEMPERATURES: tuple[float, ...] = (
    0.1, 0.13, 0.16, 0.2, 0.25, 0.32, 0.4, 0.5, 0.63, 0.79,
    1.0, 1.3, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.3, 7.9, 10.0,
)  # fmt: skip
"""The slider's temperatures: 0.1 to 10, evenly spaced on a log scale (10 steps a decade)."""

DIGITS = 4  # decimals of every number written into the HTML: stored outputs reproduce
BAR_COLOR = "#1f77b4"  # matplotlib's "C0", the colour of viz.plot_bars
HEIGHT_PX = 360  # the figure's height on the page; its width follows the column
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _plotly() -> object:
    """The ``plotly`` package, or an ImportError that says how to install it."""
    try:
        import plotly
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "attnbook.interactive needs Plotly: pip install plotly "
            "(or pip install 'attnbook[book]')"
        ) from error
    return plotly


def plotly_cdn_url() -> str:
    """The public CDN URL of the plotly.js that the installed ``plotly`` package ships.

    The book rewrites this URL to its own copy of the same file (``_ext/attnbook_book.py``).
    """
    _plotly()
    from plotly.offline import get_plotlyjs_version

    return f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"


@dataclass(frozen=True)
class InteractiveFigure:
    """A figure a notebook shows as Plotly HTML, as a static PNG, and as text.

    Attributes:
        name: the figure's name; the HTML element's id is ``"attnbook-" + name``.
        html: the ``<div>`` and the ``<script>`` that draws it (Plotly loaded from its CDN).
        text: the text alternative: what the figure shows, with its numbers.
    """

    name: str
    html: str
    text: str
    _draw_static: Callable[[], object] = field(repr=False, compare=False)

    @functools.cached_property
    def _static(self) -> tuple[str, dict[str, int]]:
        """The static drawing as `attnbook.viz.figure_png` renders notebook figures."""
        rendered = figure_png(self._draw_static())
        if rendered is None:  # pragma: no cover - the drawings always have axes
            raise RuntimeError(f"{self.name}: the static drawing is empty")
        return rendered

    @property
    def png(self) -> bytes:
        """The static drawing (matplotlib, the course's style) as PNG bytes, at 2x density."""
        return base64.b64decode(self._static[0])

    def _repr_mimebundle_(
        self, include: object = None, exclude: object = None
    ) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
        """What Jupyter shows: the HTML, the PNG (base64) and the text alternative, and the
        PNG's display size (half its pixels, as every figure of the book)."""
        data, size = self._static
        bundle = {"text/html": self.html, "image/png": data, "text/plain": self.text}
        return bundle, {"image/png": size}


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            "name must start with a letter and hold only letters, digits, '-' and '_' "
            f"(it becomes the HTML id), got {name!r}"
        )
    return name


def _labels(labels: Sequence[str] | None, n: int, name: str, what: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have one label per {what} ({n}), got {len(labels)}")
    return labels


def _ticks(labels: list[str]) -> dict:
    """An axis whose positions 0, 1, ... show ``labels``, repeats and all (as categories,
    Plotly would draw two tokens "the" as one row)."""
    return {"tickmode": "array", "tickvals": list(range(len(labels))), "ticktext": labels}


def _round(values: np.ndarray) -> list:
    """Nested lists of floats rounded to DIGITS decimals (-0.0 written as 0.0)."""
    return (np.round(values.astype(float), DIGITS) + 0.0).tolist()


def _figure_html(name: str, figure: dict, text: str) -> str:
    """A <div> with a fixed id and the script that draws `figure` into it with Plotly.

    Plotly is loaded once per page (a second figure waits for the same <script>); the
    figure resizes with the column. The text alternative is the <div>'s accessible name.
    """
    element = f"attnbook-{name}"
    height = figure["layout"]["height"]
    spec = json.dumps(figure, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    spec = spec.replace("</", "<\\/")  # a label "</script>" must not end the <script> early
    script = (
        "(function () {\n"
        f'  var url = "{plotly_cdn_url()}";\n'
        f'  var id = "{element}";\n'
        f"  var figure = {spec};\n"
        "  function draw() {\n"
        "    window.Plotly.newPlot(id, figure.data, figure.layout, figure.config);\n"
        "  }\n"
        "  if (window.Plotly) { draw(); return; }\n"
        "  // Classic Jupyter loads require.js: there, plotly.js 2 (plotly 5) is an AMD module.\n"
        '  if (typeof window.require === "function" && window.define && window.define.amd) {\n'
        '    window.require.config({paths: {"attnbook-plotly": url.replace(/\\.js$/, "")}});\n'
        '    window.require(["attnbook-plotly"], function (plotly) {\n'
        "      window.Plotly = window.Plotly || plotly; draw();\n"
        "    });\n"
        "    return;\n"
        "  }\n"
        '  var script = document.querySelector("script[data-attnbook-plotly]");\n'
        "  if (!script) {\n"
        '    script = document.createElement("script");\n'
        '    script.src = url; script.charset = "utf-8";\n'
        '    script.setAttribute("data-attnbook-plotly", "");\n'
        "    document.head.appendChild(script);\n"
        "  }\n"
        '  script.addEventListener("load", draw);\n'
        "})();"
    )
    return (
        f'<div id="{element}" class="attnbook-interactive" role="figure" '
        f'aria-label="{html.escape(text)}" style="width: 100%; height: {height}px;"></div>\n'
        f'<script type="text/javascript">\n{script}\n</script>\n'
    )


def _layout(title: str, **extra: object) -> dict:
    return {
        "title": {"text": title, "font": {"size": 15}},
        "height": HEIGHT_PX,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
        "font": {"size": 13},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        **extra,
    }


CONFIG = {"responsive": True, "displaylogo": False, "displayModeBar": False}


def softmax_temperature_explorer(
    scores: Array | Sequence[float],
    labels: Sequence[str] | None = None,
    *,
    name: str,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    temperature: float = 1.0,
) -> InteractiveFigure:
    """Bars of ``softmax(scores / τ)`` with a slider over the temperature ``τ``.

    Dragging the slider shows how a cold softmax picks the arg-max and a hot one
    spreads the weight evenly (chapter 2); hovering over a bar gives its weight.
    Every temperature's weights are computed here and stored in the page.

    Args:
        scores: shape ``(S,)``, finite real numbers.
        labels: ``S`` labels of the keys; ``"0"`` to ``"S-1"`` if ``None``.
        name: the figure's name (letters, digits, ``-``, ``_``): its HTML id.
        temperatures: the slider's values, positive, finite, increasing.
        temperature: the value shown first (and in the static PNG); one of
            ``temperatures``.

    Returns:
        An :class:`InteractiveFigure`.

    Raises:
        ValueError: for scores that are not a non-empty vector of finite numbers, a
            wrong number of labels, a bad name, or temperatures out of range.
    """
    _check_name(name)
    s = to_numpy(scores, "scores")
    if s.ndim != 1 or s.shape[0] == 0:
        raise ValueError(f"scores must have shape (S,) with S >= 1, got {shape_str(s)}")
    if not np.issubdtype(s.dtype, np.number) or np.issubdtype(s.dtype, np.complexfloating):
        raise ValueError(f"scores must hold real numbers, got dtype {s.dtype}")
    s = s.astype(float)
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite (no NaN or inf)")
    keys = _labels(labels, s.shape[0], "labels", "score")
    taus = [float(t) for t in temperatures]
    if not taus or not all(math.isfinite(t) and t > 0 for t in taus):
        raise ValueError(f"temperatures must be finite numbers > 0, got {list(temperatures)}")
    if any(b <= a for a, b in itertools.pairwise(taus)):
        raise ValueError(f"temperatures must be increasing, got {taus}")
    if float(temperature) not in taus:
        raise ValueError(f"temperature must be one of temperatures {taus}, got {temperature}")
    start = taus.index(float(temperature))

    weights = [_round(softmax(s, temperature=tau)) for tau in taus]  # one (S,) row per τ
    bars = {
        "type": "bar",
        "x": list(range(len(keys))),  # positions: Plotly would merge repeated labels
        "customdata": keys,
        "y": weights[start],
        "text": [f"{w:.2f}" for w in weights[start]],
        "textposition": "outside",
        "marker": {"color": BAR_COLOR},
        "hovertemplate": "key %{customdata}<br>weight %{y:.3f}<extra></extra>",
    }
    steps = [
        {
            "label": f"{tau:g}",
            "method": "update",
            "args": [
                {"y": [row], "text": [[f"{w:.2f}" for w in row]]},
                {"title.text": f"softmax(scores / τ) at τ = {tau:g}"},
            ],
        }
        for tau, row in zip(taus, weights)
    ]
    layout = _layout(
        f"softmax(scores / τ) at τ = {taus[start]:g}",
        yaxis={"title": {"text": "weight"}, "range": [0, 1.12], "fixedrange": True},
        xaxis={"title": {"text": "key"}, "fixedrange": True, **_ticks(keys)},
        sliders=[
            {
                "active": start,
                "steps": steps,
                "currentvalue": {"prefix": "temperature τ = ", "font": {"size": 13}},
                "pad": {"t": 60},  # below the key axis's title
            }
        ],
    )
    layout["height"] = HEIGHT_PX + 75  # room for the slider below the axis
    layout["margin"] = {**layout["margin"], "b": 20}
    figure = {"data": [bars], "layout": layout, "config": CONFIG}

    def shown(tau: float, row: list[float]) -> str:
        return ", ".join(f"{k} {w:.2f}" for k, w in zip(keys, row))

    low, high = taus[0], taus[-1]
    text = (
        f"Softmax of the scores {', '.join(f'{v:g}' for v in s)} (keys {', '.join(keys)}) "
        f"at a temperature chosen with a slider from {low:g} to {high:g}. "
        f"At τ = {low:g} the weights are {shown(low, weights[0])}; "
        f"at τ = {taus[start]:g}, {shown(taus[start], weights[start])}; "
        f"at τ = {high:g}, {shown(high, weights[-1])}."
    )

    def draw_static() -> object:
        from matplotlib.figure import Figure

        with course_style():
            fig = Figure(figsize=(max(3.0, 0.5 * len(keys) + 1.5), 2.8))
            plot_bars(
                weights[start],
                keys,
                ax=fig.add_subplot(),
                title=f"softmax(scores / τ) at τ = {taus[start]:g}",
                ylim=(0, 1.12),
            )
            fig.tight_layout()
        return fig

    return InteractiveFigure(name, _figure_html(name, figure, text), text, draw_static)


def attention_heatmap(
    weights: Array,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    name: str,
    title: str | None = None,
) -> InteractiveFigure:
    """An attention-weight matrix as a heatmap; hovering over a cell names its query,
    key and weight.

    Rows are queries, columns are keys, as in :func:`attnbook.viz.plot_heatmap`; the
    colour scale runs from 0 to 1 (viridis), the range of every weight.

    Args:
        weights: shape ``(T, S)``, real numbers in ``[0, 1]`` (each row of a softmax).
        query_labels: ``T`` labels of the queries (rows); ``"0"`` to ``"T-1"`` if ``None``.
        key_labels: ``S`` labels of the keys (columns).
        name: the figure's name (letters, digits, ``-``, ``_``): its HTML id.
        title: the figure's title.

    Returns:
        An :class:`InteractiveFigure`.

    Raises:
        ValueError: for a matrix that is not ``(T, S)``, values outside ``[0, 1]``
            (or NaN), a wrong number of labels, or a bad name.
    """
    _check_name(name)
    w = to_numpy(weights, "weights")
    if w.ndim != 2 or 0 in w.shape:
        raise ValueError(f"weights must have shape (T, S) with T, S >= 1, got {shape_str(w)}")
    if not np.issubdtype(w.dtype, np.number) or np.issubdtype(w.dtype, np.complexfloating):
        raise ValueError(f"weights must hold real numbers, got dtype {w.dtype}")
    w = w.astype(float)
    check_no_nan(w, "weights")  # the range below would ignore it: "values from 1 to 1"
    if not (np.isfinite(w).all() and w.min() >= 0.0 and w.max() <= 1.0):
        raise ValueError(
            f"weights must lie in [0, 1] (attention weights), got values from "
            f"{np.nanmin(w):.4g} to {np.nanmax(w):.4g}"
        )
    T, S = w.shape
    rows = _labels(query_labels, T, "query_labels", "row (query)")
    cols = _labels(key_labels, S, "key_labels", "column (key)")
    z = _round(w)
    heatmap = {
        "type": "heatmap",
        "z": z,
        "x": list(range(S)),  # positions: Plotly would merge repeated labels into one
        "y": list(range(T)),
        "customdata": [[[row, col] for col in cols] for row in rows],
        "zmin": 0,
        "zmax": 1,
        "colorscale": "Viridis",
        "colorbar": {"title": {"text": "weight"}},
        "hovertemplate": (
            "query %{customdata[0]}<br>key %{customdata[1]}<br>weight %{z:.3f}<extra></extra>"
        ),
        "xgap": 1,
        "ygap": 1,
    }
    if T <= 12 and S <= 12:
        heatmap["texttemplate"] = "%{z:.2f}"
    layout = _layout(
        title or "attention weights",
        xaxis={"title": {"text": "keys"}, "side": "bottom", "fixedrange": True, **_ticks(cols)},
        yaxis={
            "title": {"text": "queries"},
            "autorange": "reversed",
            "fixedrange": True,
            **_ticks(rows),
        },
    )
    figure = {"data": [heatmap], "layout": layout, "config": CONFIG}
    text = (
        f"A {T} by {S} heatmap of attention weights, queries down, keys across; hovering "
        "over a cell shows its query, key and weight. Rows: "
        + "; ".join(
            f"{row}: " + ", ".join(f"{v:.2f}" for v in values) for row, values in zip(rows, z)
        )
        + "."
    )

    def draw_static() -> object:
        from matplotlib.figure import Figure

        with course_style():
            fig = Figure(figsize=(max(3.0, 0.6 * S + 2.0), max(2.5, 0.5 * T + 1.5)))
            plot_heatmap(w, rows, cols, ax=fig.add_subplot(), title=title, vmin=0, vmax=1)
            fig.tight_layout()
        return fig

    return InteractiveFigure(name, _figure_html(name, figure, text), text, draw_static)
