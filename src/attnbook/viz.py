"""Figures in one consistent style: heatmaps of score/weight matrices and bar charts.

Introduced in chapter 1 and used by every chapter. This module only *draws*
what it is given; it computes no scores or attention weights itself.

Conventions: in every heatmap rows are queries and columns are keys, so row
``t`` of a weight matrix reads "where query ``t`` looks".

Figures shown in a notebook are drawn at twice their pixel density (sharp on
high-density screens, displayed at their natural size) and each PNG records the
size of its smallest text (`smallest_text_pt`), so that the book's browser test
can check that no figure text renders below its legibility floor. `course_style`
switches this on; nothing changes outside IPython.
"""

from __future__ import annotations

import base64
import contextlib
import math
import re
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from io import BytesIO
from types import MappingProxyType
from typing import Protocol

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

from attnbook._validation import Array, shape_str

__all__ = [
    "STYLE",
    "course_style",
    "figure_png",
    "plot_bars",
    "plot_heatmap",
    "plot_history",
    "plot_query_key",
    "png_smallest_text",
    "png_text",
    "smallest_text_pt",
    "svg_metadata",
    "svg_smallest_text",
    "to_numpy",
]

STYLE: Mapping[str, object] = MappingProxyType(
    {
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "figure.figsize": (5.5, 4.0),
        "font.size": 10,
        "axes.titlesize": 11,
        "axes.titleweight": "bold",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": False,
        "image.cmap": "viridis",
    }
)
"""Matplotlib settings applied (temporarily, never globally) by every helper here; read-only."""

_MAX_TICKS = 48  # a heatmap labels at most this many positions per axis (every k-th beyond)

SEQUENTIAL_CMAP = "viridis"  # weights in [0, 1]: perceptually uniform, colour-blind safe
DIVERGING_CMAP = "RdBu_r"  # scores of either sign: blue negative, red positive


PIXEL_DENSITY = 2  # notebook figures are rendered at 2x their `figure.dpi` and shown at 1x
SMALLEST_TEXT_KEY = "attnbook:smallest-text-px"
"""PNG text key of `figure_png`: the height of the figure's smallest text in image pixels."""
SVG_SMALLEST_TEXT = "smallest text: {:.2f} pt"
"""The description `svg_metadata` gives an SVG diagram: its smallest text, in points."""


@contextmanager
def course_style() -> Iterator[None]:
    """Context manager that draws with the course's style without changing global settings.

    In IPython it also makes figures display through `figure_png` (twice the pixel
    density, smallest text recorded), which stays on for the rest of the session.
    """
    _use_figure_png()
    with plt.rc_context(STYLE):
        yield


def _check_figure(fig: object) -> None:
    """Raise unless ``fig`` is a matplotlib ``Figure`` (else: "'NoneType' object has no
    attribute 'findobj'", say, from inside the function)."""
    if not isinstance(fig, Figure):
        raise ValueError(
            f"fig must be a matplotlib Figure (e.g. plt.figure(), or ax.figure), "
            f"got {type(fig).__name__}"
        )


def smallest_text_pt(fig: Figure) -> float | None:
    """Font size in points of the smallest visible, non-empty text of `fig` (None: no text).

    Tick labels, titles, legends, colour bars and annotations all count; draw the
    figure first (saving it does) so that tick labels hold their text.
    """
    _check_figure(fig)
    sizes = [
        text.get_fontsize()
        for text in fig.findobj(Text)
        if text.get_visible() and text.get_text().strip() and _drawn(text)
    ]
    return float(min(sizes)) if sizes else None


def svg_metadata(fig: Figure) -> dict[str, str | None]:
    """`savefig` metadata of an SVG diagram: no date (the file is reproducible) and its smallest
    text (`SVG_SMALLEST_TEXT`, in points), which the book's browser test reads."""
    _check_figure(fig)
    fig.draw_without_rendering()
    smallest = smallest_text_pt(fig)
    metadata: dict[str, str | None] = {"Date": None}
    if smallest is not None:
        metadata["Description"] = SVG_SMALLEST_TEXT.format(smallest)
    return metadata


def svg_smallest_text(svg: str) -> tuple[float, float] | None:
    """What `svg_metadata` recorded in an SVG diagram's text: (smallest text, width), in points.

    None if the SVG records no smallest text or does not give its width in points.
    """
    number = r"([0-9]+(?:\.[0-9]+)?)"
    smallest = re.search(re.escape(SVG_SMALLEST_TEXT).replace(re.escape("{:.2f}"), number), svg)
    width = re.search(r'<svg\b[^>]*\bwidth="' + number + 'pt"', svg)
    if not smallest or not width:
        return None
    return float(smallest[1]), float(width[1])


def _drawn(text: Text) -> bool:
    """Whether `text` is inside the figure (ticks outside the view limits are not drawn)."""
    axes = text.axes
    if axes is None or text.get_figure() is None:
        return True
    box = text.get_window_extent()
    canvas = text.get_figure().bbox
    return (
        box.x1 >= canvas.x0 and box.x0 <= canvas.x1 and box.y1 >= canvas.y0 and box.y0 <= canvas.y1
    )


def figure_png(fig: Figure) -> tuple[str, dict[str, int]] | None:
    """IPython's PNG of `fig`: base64 data at `PIXEL_DENSITY` x its dpi, and display metadata.

    The metadata's width and height are the figure's size at its own dpi, so it shows
    at its natural size, sharper. The PNG holds `SMALLEST_TEXT_KEY`: the smallest text's
    height in image pixels (points x dpi / 72). Returns None for an empty figure, as
    IPython's own formatter does.
    """
    _check_figure(fig)
    if not fig.axes and not fig.lines:
        return None
    dpi = fig.dpi * PIXEL_DENSITY
    fig.draw_without_rendering()  # tick labels get their text (any canvas)
    smallest = smallest_text_pt(fig)
    metadata = {"Software": None}
    if smallest is not None:
        metadata[SMALLEST_TEXT_KEY] = f"{smallest * dpi / 72:.2f}"
    buffer = BytesIO()
    fig.canvas.print_figure(
        buffer,
        format="png",
        dpi=dpi,
        bbox_inches="tight",
        facecolor=fig.get_facecolor(),
        edgecolor=fig.get_edgecolor(),
        metadata=metadata,
    )
    data = buffer.getvalue()
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    size = {"width": width // PIXEL_DENSITY, "height": height // PIXEL_DENSITY}
    return base64.b64encode(data).decode("ascii"), size


def png_text(data: bytes) -> dict[str, str]:
    """The tEXt and zTXt entries of a PNG file's bytes (e.g. `SMALLEST_TEXT_KEY`)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("data must be the bytes of a PNG file")
    entries: dict[str, str] = {}
    at = 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            entries[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            entries[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        at += 12 + length
    return entries


def png_smallest_text(data: bytes) -> tuple[float, int] | None:
    """What `figure_png` recorded in a PNG file's bytes: (smallest text, width), in image pixels.

    The PNG counterpart of `svg_smallest_text`; None if the PNG records no smallest text.
    """
    recorded = png_text(data).get(SMALLEST_TEXT_KEY)  # refuses bytes that are no PNG
    if recorded is None:
        return None
    (width,) = struct.unpack(">I", data[16:20])  # the IHDR chunk
    return float(recorded), width


def _use_figure_png() -> None:
    """In IPython, display matplotlib figures with `figure_png` (idempotent; no-op elsewhere)."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing displays figures
        return
    shell = get_ipython()
    if shell is None:
        return
    # The inline backend sets IPython's figure formatters when first imported: import it
    # before registering ours (elsewhere, another front end's formatters are simply replaced).
    with contextlib.suppress(ImportError):
        import matplotlib_inline.backend_inline  # noqa: F401
    shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def to_numpy(x: Array | Sequence[float], name: str = "x") -> np.ndarray:
    """Return ``x`` as a NumPy array (detached and on the CPU if it is a tensor; bfloat16,
    which NumPy lacks, as float32). ``name`` is the argument's name in error messages."""
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu")
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as error:  # ragged lists, or a tuple of unlike tensors
        hint = (
            "; a function that returns (output, weights), such as "
            "scaled_dot_product_attention, needs unpacking first: output, weights = ..."
            if isinstance(x, tuple) and any(isinstance(t, torch.Tensor) for t in x)
            else ""
        )
        raise ValueError(
            f"{name} must be one array or tensor, or a list of numbers of one rectangular "
            f"shape, got a {type(x).__name__} whose parts have unlike shapes ({error}){hint}"
        ) from None


def _real(x: Array | Sequence[float], name: str) -> np.ndarray:
    """``x`` as a float64 NumPy array, raising unless it holds real numbers (booleans as 0/1)."""
    arr = to_numpy(x, name)
    if arr.dtype.kind not in "biuf":  # booleans, signed and unsigned ints, floats
        raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(float)


def _check_labels(labels: Sequence[str] | None, n: int, name: str, axis_name: str) -> None:
    if labels is not None and not hasattr(labels, "__len__"):
        raise ValueError(
            f"{name} must be a list of {n} labels, one per {axis_name}, or None, "
            f"got {type(labels).__name__} {labels!r}"
        )
    if labels is not None and len(labels) != n:
        raise ValueError(f"{name} must have one label per {axis_name} ({n}), got {len(labels)}")


# Relative luminance (WCAG 2) of a colour at which black and white text contrast equally with it:
# above it black text reads better, below it white.
_BLACK_OR_WHITE = 0.179


def _luminance(rgba: Sequence[float]) -> float:
    """The relative luminance (WCAG 2) of a matplotlib colour ``(r, g, b, a)`` in ``[0, 1]``."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _check_fmt(fmt: object, sample: object) -> None:
    """Refuse an annotation format that cannot print one of the values (``{:d}`` for floats)."""
    try:
        if not isinstance(fmt, str):
            raise TypeError
        fmt.format(sample)
    except (ValueError, TypeError, IndexError, KeyError) as error:
        raise ValueError(
            f"fmt must be a format string for one number, such as '{{:.2f}}', got {fmt!r}"
            + (f" ({error})" if str(error) else "")
        ) from None


def plot_heatmap(
    matrix: Array,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    xlabel: str = "keys",
    ylabel: str = "queries",
    annotate: bool | None = None,
    fmt: str = "{:.2f}",
    cmap: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = True,
) -> Axes:
    """Draw a 2-D matrix (scores or weights) as a labelled heatmap.

    Rows are queries, columns are keys. Values are written in the cells when
    the matrix is small enough to read them (at most 12 x 12 by default), in
    black on light cells and white on dark ones, whatever the colour map.
    Scores with both signs get a diverging colour map centred on 0; weights
    (all in ``[0, 1]``) a sequential one.

    Args:
        matrix: shape ``(T, S)``, NumPy array or tensor; a boolean mask is drawn as 1s and 0s.
        row_labels: ``T`` labels for the queries (e.g. tokens).
        col_labels: ``S`` labels for the keys.
        ax: axes to draw into; a new figure is made if ``None``.
        title: axes title.
        xlabel: label of the key axis.
        ylabel: label of the query axis.
        annotate: write the values into the cells; ``None`` means "if small".
        fmt: format string for annotations.
        cmap: colour map; chosen from the data's sign if ``None``.
        vmin: lower end of the colour scale.
        vmax: upper end of the colour scale.
        colorbar: add a colour bar.

    Returns:
        The matplotlib ``Axes``.
    """
    m = to_numpy(matrix, "matrix")
    if m.dtype == bool:  # a mask: True (may attend) as 1, False as 0
        m = m.astype(float)
    if m.ndim != 2 or 0 in m.shape:
        raise ValueError(f"matrix must have shape (T, S) with T, S >= 1, got {shape_str(m)}")
    if not np.issubdtype(m.dtype, np.number) or np.issubdtype(m.dtype, np.complexfloating):
        raise ValueError(f"matrix must hold real numbers, got dtype {m.dtype}")
    if vmin is not None and vmax is not None and not vmin < vmax:
        raise ValueError(f"vmin must be below vmax, got vmin = {vmin} and vmax = {vmax}")
    if isinstance(cmap, str) and cmap not in plt.colormaps():
        raise ValueError(f"cmap must name a matplotlib colour map (plt.colormaps()), got {cmap!r}")
    T, S = m.shape
    _check_labels(row_labels, T, "row_labels", "row (query)")
    _check_labels(col_labels, S, "col_labels", "column (key)")
    m = m.astype(float)
    finite = m[np.isfinite(m)]
    if cmap is None:
        cmap = DIVERGING_CMAP if finite.size and finite.min() < 0 else SEQUENTIAL_CMAP
    if cmap == DIVERGING_CMAP and vmin is None and vmax is None and finite.size:
        bound = float(np.abs(finite).max()) or 1.0
        vmin, vmax = -bound, bound
    if annotate is None:
        annotate = T <= 12 and S <= 12
    if annotate:
        _check_fmt(fmt, float(m.flat[0]))
    with course_style():
        if ax is None:  # room for each label, up to a page: a long sequence gets thin cells
            width, height = min(16.0, max(3.0, 0.6 * S + 2.0)), min(12.0, max(2.5, 0.5 * T + 1.5))
            _, ax = plt.subplots(figsize=(width, height))
        image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
        for set_ticks, n, labels in (
            (ax.set_xticks, S, col_labels),
            (ax.set_yticks, T, row_labels),
        ):
            shown = range(0, n, math.ceil(n / _MAX_TICKS))  # every position, up to _MAX_TICKS
            names = [labels[i] for i in shown] if labels is not None else list(shown)
            set_ticks(shown, labels=names)
        if col_labels is not None and max((len(str(c)) for c in col_labels), default=0) > 3:
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        for spine in ax.spines.values():
            spine.set_visible(False)
        if annotate:
            for t in range(T):
                for s in range(S):
                    value = m[t, s]
                    if not np.isfinite(value):
                        text, dark = ("-inf" if value < 0 else str(value)), False
                    else:  # black on light cells, white on dark ones, by their luminance
                        text = fmt.format(value)
                        dark = _luminance(image.cmap(image.norm(value))) > _BLACK_OR_WHITE
                    ax.text(
                        s,
                        t,
                        text,
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="black" if dark else "white",
                    )
        if colorbar:
            ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_bars(
    values: Array | Sequence[float],
    labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str = "weight",
    ylim: tuple[float, float] | None = None,
    color: str = "C0",
    annotate: bool = True,
    fmt: str = "{:.2f}",
) -> Axes:
    """Draw one vector (a row of scores or weights) as labelled bars.

    Args:
        values: shape ``(n,)``.
        labels: ``n`` labels (e.g. the keys' tokens).
        ax: axes to draw into; a new figure is made if ``None``.
        title: axes title.
        ylabel: label of the value axis.
        ylim: limits of the value axis.
        color: bar colour.
        annotate: write each value above its bar.
        fmt: format string for annotations.

    Returns:
        The matplotlib ``Axes``.
    """
    v = _real(values, "values")
    if v.ndim != 1 or v.shape[0] == 0:
        raise ValueError(f"values must have shape (n,) with n >= 1, got {shape_str(v)}")
    _check_labels(labels, v.shape[0], "labels", "value")
    if ylim is not None:
        try:
            low, high = ylim  # None keeps that end, as in matplotlib
        except (TypeError, ValueError):  # not two values: "too many values to unpack"
            raise ValueError(f"ylim must be (low, high), two numbers, got {ylim!r}") from None
        if low is not None and high is not None and not low < high:
            raise ValueError(f"ylim must be (low, high) with low < high, got {ylim!r}")
    if annotate:
        _check_fmt(fmt, v[0])  # as the bars are annotated: integers stay integers
    with course_style():
        if ax is None:
            _, ax = plt.subplots(figsize=(max(3.0, 0.5 * v.shape[0] + 1.5), 2.8))
        xs = np.arange(v.shape[0])
        ax.bar(xs, v, color=color)
        ax.set_xticks(xs, labels=labels if labels is not None else xs)
        ax.set_ylabel(ylabel)
        if ylim is not None:
            ax.set_ylim(*ylim)
        if title:
            ax.set_title(title)
        if annotate:
            for x, y in zip(xs, v):
                ax.annotate(
                    fmt.format(y),
                    (x, y),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    xytext=(0, 2),
                    textcoords="offset points",
                )
    return ax


def plot_query_key(
    query: Array | Sequence[float],
    key: Array | Sequence[float],
    products: Array | Sequence[float],
    *,
    axes: Sequence[Axes] | None = None,
    title: str | None = None,
) -> list[Axes]:
    """Draw how one score is built: a query, a key and their scaled elementwise products.

    The score of query ``t`` and key ``s`` is ``sum_i q_i k_i / sqrt(d_k)``: a
    sum of ``d_k`` products. Seeing them one by one shows whether a few
    coordinates decide the score or many small ones add up. The caller
    computes the products (this module computes no attention); the figure
    writes their sum, the score, in the bar chart's title.

    Args:
        query: the query vector ``q_t``, shape ``(d_k,)``.
        key: the key vector ``k_s``, shape ``(d_k,)``.
        products: ``q_t * k_s / sqrt(d_k)``, shape ``(d_k,)``.
        axes: two axes to draw into (the vectors, then the products); a new
            figure is made if ``None``.
        title: title of the top axes.

    Returns:
        The two matplotlib ``Axes``.
    """
    q, k, p = (_real(v, n) for v, n in ((query, "query"), (key, "key"), (products, "products")))
    for name, v in (("query", q), ("key", k), ("products", p)):
        if v.ndim != 1:
            raise ValueError(f"{name} must have shape (d_k,), got {shape_str(v)}")
    if not q.shape == k.shape == p.shape:
        raise ValueError(
            "query, key and products must have the same shape (d_k,), got "
            f"{shape_str(q)}, {shape_str(k)} and {shape_str(p)}"
        )
    if not q.size:
        raise ValueError("query, key and products must have d_k >= 1 coordinates, got (0,)")
    if axes is not None and len(axes) != 2:
        raise ValueError(f"axes must hold two Axes (vectors, products), got {len(axes)}")
    d_k = q.shape[0]
    with course_style():
        if axes is None:
            _, axes = plt.subplots(
                2,
                1,
                figsize=(max(5.0, 0.3 * d_k + 1.5), 4.0),
                gridspec_kw={"height_ratios": [1, 2]},
                sharex=True,
            )
        ax_vec, ax_prod = axes
        bound = float(np.abs(np.concatenate([q, k])).max()) or 1.0
        image = ax_vec.imshow(
            np.stack([q, k]), cmap=DIVERGING_CMAP, vmin=-bound, vmax=bound, aspect="auto"
        )
        ax_vec.set_yticks([0, 1], labels=["query", "key"])
        ax_vec.figure.colorbar(image, ax=ax_vec, fraction=0.046, pad=0.04)
        if title:
            ax_vec.set_title(title)
        xs = np.arange(d_k)
        ax_prod.bar(xs, p, color=np.where(p >= 0, "C3", "C0"))
        ax_prod.axhline(0.0, color="black", linewidth=0.8)
        ax_prod.set_xlabel("coordinate i")
        ax_prod.set_ylabel("q_i k_i / sqrt(d_k)")
        ax_prod.set_title(f"products; their sum, the score: {p.sum():.2f}")
        ax_prod.set_xticks(xs[:: max(1, d_k // 16)])
    return list(axes)


class TrainingCurves(Protocol):
    """What :func:`plot_history` reads: the fields of :class:`attnbook.training.History`."""

    train_loss: Sequence[float]  # per step
    eval_step: Sequence[int]  # steps done at each evaluation
    eval_metrics: Mapping[str, Sequence[float]]  # "test_loss", "test_exact_match", ...


def plot_history(history: TrainingCurves) -> Figure:
    """Loss curves (training per step, held-out at each evaluation) and exact-match, if any.

    Args:
        history: what :func:`attnbook.training.train` returned (a
            :class:`~attnbook.training.History`; anything with the same
            ``train_loss``, ``eval_step`` and ``eval_metrics`` will do).

    Returns:
        The matplotlib ``Figure`` (one panel for the losses, one for
        exact-match when recorded).
    """
    if not all(hasattr(history, name) for name in ("train_loss", "eval_step", "eval_metrics")):
        raise ValueError(
            "history must be a History (what attnbook.training.train returned), "
            f"got {type(history).__name__}"
        )
    if not history.train_loss:
        raise ValueError("history has no steps: train first")
    with course_style():
        has_em = "test_exact_match" in history.eval_metrics
        fig, axes = plt.subplots(1, 2 if has_em else 1, figsize=(10 if has_em else 5.5, 3.6))
        axes = list(axes) if has_em else [axes]
        ax = axes[0]
        ax.plot(
            range(1, len(history.train_loss) + 1), history.train_loss, lw=1, label="training batch"
        )
        if "test_loss" in history.eval_metrics:
            ax.plot(history.eval_step, history.eval_metrics["test_loss"], "o-", label="held-out")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy loss (nats, log scale)")
        ax.set_title("Loss")
        ax.legend()
        if has_em:
            ax = axes[1]
            ax.plot(history.eval_step, history.eval_metrics["test_exact_match"], "o-", color="C2")
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("step")
            ax.set_ylabel("held-out exact-match")
            ax.set_title("Whole answers right")
        fig.tight_layout()
    return fig
