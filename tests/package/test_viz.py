"""Tests of attnbook.viz: the figures show what they are given, with labels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import attnbook
from attnbook.training import History
from attnbook.viz import DIVERGING_CMAP, SEQUENTIAL_CMAP, plot_bars, plot_heatmap, plot_history


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_heatmap_labels_rows_as_queries_and_columns_as_keys() -> None:
    weights = torch.softmax(torch.randn(2, 3), dim=-1)
    ax = plot_heatmap(weights, ["q1", "q2"], ["a", "b", "c"], title="weights")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["q1", "q2"]
    assert ax.get_xlabel() == "keys"
    assert ax.get_ylabel() == "queries"
    assert ax.get_title() == "weights"
    image = ax.get_images()[0]
    np.testing.assert_allclose(image.get_array(), weights.numpy(), rtol=1e-6)
    assert image.get_cmap().name == SEQUENTIAL_CMAP
    assert len(ax.texts) == 6  # one annotation per cell


def test_plots_take_bfloat16_tensors_which_numpy_lacks() -> None:
    """Weights from a model run under bfloat16 autocast plot as float32."""
    weights = torch.softmax(torch.randn(2, 3), dim=-1).to(torch.bfloat16)
    ax = plot_heatmap(weights)
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), weights.float().numpy())
    ax = plot_bars(weights[0], ["a", "b", "c"])
    assert [round(p.get_height(), 6) for p in ax.patches] == [
        round(v, 6) for v in weights[0].float().tolist()
    ]


def test_heatmap_centres_signed_scores_on_zero() -> None:
    ax = plot_heatmap(np.array([[-2.0, 1.0], [0.5, 0.0]]))
    image = ax.get_images()[0]
    assert image.get_cmap().name == DIVERGING_CMAP
    assert image.get_clim() == (-2.0, 2.0)


def _contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """WCAG 2 contrast ratio of two sRGB colours."""

    def luminance(rgb: tuple[float, ...]) -> float:
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb[:3]]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    lighter, darker = sorted((luminance(a), luminance(b)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


@pytest.mark.parametrize(
    "cmap", [SEQUENTIAL_CMAP, DIVERGING_CMAP, "gray", "gray_r", "magma", "Blues"]
)
def test_heatmap_annotations_take_the_text_colour_that_contrasts_more(cmap: str) -> None:
    """Black or white, whichever stands out more from the cell, whatever the colour map."""
    values = np.linspace(-1.0, 1.0, 11)[None]  # (1, 11)
    ax = plot_heatmap(values, cmap=cmap, vmin=-1.0, vmax=1.0, fmt="{:.1f}")
    image = ax.get_images()[0]
    for text, value in zip(ax.texts, values[0], strict=True):
        cell = image.cmap(image.norm(value))
        black, white = _contrast(cell, (0, 0, 0)), _contrast(cell, (1, 1, 1))
        assert text.get_color() == ("black" if black > white else "white"), (cmap, value)
    plt.close("all")


def test_heatmap_skips_annotations_for_large_matrices() -> None:
    ax = plot_heatmap(np.zeros((20, 20)))
    assert len(ax.texts) == 0


def test_heatmap_of_a_long_sequence_fits_a_page_and_thins_its_labels() -> None:
    """One inch per few positions would make 512 tokens a 300-inch figure."""
    ax = plot_heatmap(np.zeros((512, 300)), col_labels=[f"k{s}" for s in range(300)])
    assert tuple(ax.figure.get_size_inches()) == (16.0, 12.0)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) <= 48
    assert labels[:2] == ["k0", "k7"]  # every 7th of 300
    assert len(ax.get_yticks()) <= 48
    small = plot_heatmap(np.zeros((3, 4)))  # short ones keep one label per position
    assert list(small.get_xticks()) == [0, 1, 2, 3]


def test_heatmap_does_not_change_global_style() -> None:
    before = dict(matplotlib.rcParams)
    plot_heatmap(np.eye(2))
    assert dict(matplotlib.rcParams) == before


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.zeros(3),), r"matrix must have shape \(T, S\) with T, S >= 1, got \(3\)"),
        (
            (np.zeros((2, 2)), ["a"]),
            r"row_labels must have one label per row \(query\) \(2\), got 1",
        ),
        (
            (np.zeros((2, 2)), None, ["a", "b", "c"]),
            r"col_labels must have one label per column \(key\) \(2\), got 3",
        ),
    ],
)
def test_heatmap_rejects_bad_input(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plot_heatmap(*args)


def test_bars_show_values_with_labels() -> None:
    ax = plot_bars([0.2, 0.8], ["cat", "dog"], title="w")
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([0.2, 0.8])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cat", "dog"]
    with pytest.raises(ValueError, match=r"values must have shape \(n,\)"):
        plot_bars(np.zeros((2, 2)))


@pytest.mark.parametrize(
    ("draw", "match"),
    [
        # no bars: an empty figure, no error, before
        (lambda: plot_bars([]), r"values must have shape \(n,\) with n >= 1"),
        # an upside-down axis, silently
        (lambda: plot_bars([0.2, 0.8], ylim=(1, 0)), r"ylim must be \(low, high\) with low < high"),
        # Python's "too many values to unpack (expected 2)", which did not name ylim
        (lambda: plot_bars([0.2, 0.8], ylim=(0, 1, 2)), r"ylim must be \(low, high\), two numbers"),
        # matplotlib's or Python's own errors, which did not name fmt
        (lambda: plot_bars([0.2, 0.8], fmt="{:d}"), r"fmt must be a format string .* '\{:d\}'"),
        (lambda: plot_heatmap(np.eye(2), fmt="{:d}"), r"fmt must be a format string"),
        (lambda: plot_heatmap(np.eye(2), fmt="{0} {1}"), r"fmt must be a format string"),
    ],
)
def test_bars_and_heatmap_name_a_bad_layout_argument(draw, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        draw()
    plt.close("all")


def test_bars_keep_matplotlib_open_ended_limits() -> None:
    ax = plot_bars([0.2, 0.8], ylim=(0, None))
    assert ax.get_ylim()[0] == 0
    plt.close("all")


def test_plot_history_draws_the_losses_and_exact_match() -> None:
    history = History(
        train_loss=[2.0 / (i + 1) for i in range(20)],
        lr=[1e-3] * 20,
        eval_step=[10, 20],
        eval_metrics={"test_loss": [0.5, 0.2], "test_exact_match": [0.1, 0.9]},
    )
    fig = plot_history(history)
    axes = fig.axes
    assert len(axes) == 2
    assert all(ax.get_xlabel() == "step" for ax in axes)
    assert "loss" in axes[0].get_ylabel()
    assert "exact-match" in axes[1].get_ylabel()
    assert list(axes[0].lines[0].get_ydata()) == history.train_loss
    assert list(axes[0].lines[1].get_xdata()) == [10, 20]
    assert list(axes[1].lines[0].get_ydata()) == [0.1, 0.9]
    for ax in axes:  # the course's style, as every helper here draws, with or without course_style
        assert ax.title.get_fontweight() == "bold"
        assert not ax.spines["top"].get_visible()
    without_em = plot_history(History(train_loss=[1.0, 0.5], eval_step=[2], eval_metrics={}))
    assert len(without_em.axes) == 1
    with pytest.raises(ValueError, match="history"):
        plot_history(History())
    with pytest.raises(ValueError, match="history"):
        plot_history([1.0, 0.5])  # type: ignore[arg-type]
    assert attnbook.plot_history is plot_history  # the package re-exports it, imported on use


# ------------------------------------------------------------------ figure_png


def test_figure_png_is_twice_as_dense_and_records_its_smallest_text() -> None:
    import base64
    import struct

    from attnbook.viz import PIXEL_DENSITY, SMALLEST_TEXT_KEY, figure_png, png_text

    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.set_title("big", fontsize=14)
    ax.text(0.5, 0.5, "small", fontsize=7)
    ax.tick_params(labelsize=9)
    data, size = figure_png(fig)
    png = base64.b64decode(data)
    width, height = struct.unpack(">II", png[16:24])
    assert size == {"width": width // PIXEL_DENSITY, "height": height // PIXEL_DENSITY}
    assert 350 < size["width"] < 420  # 4 inches at 100 dpi, trimmed to the drawing
    assert float(png_text(png)[SMALLEST_TEXT_KEY]) == pytest.approx(7 * 200 / 72, abs=0.01)
    plt.close(fig)


def test_smallest_text_ignores_empty_and_hidden_text() -> None:
    from attnbook.viz import smallest_text_pt

    fig, ax = plt.subplots()
    ax.set_axis_off()
    ax.text(0.5, 0.5, "  ", fontsize=4)
    hidden = ax.text(0.5, 0.5, "hidden", fontsize=5)
    hidden.set_visible(False)
    ax.text(0.1, 0.1, "shown", fontsize=11)
    fig.canvas.draw()
    assert smallest_text_pt(fig) == 11
    plt.close(fig)


@pytest.mark.parametrize("name", ["figure_png", "smallest_text_pt", "svg_metadata"])
def test_figure_helpers_refuse_what_is_not_a_figure(name: str) -> None:
    """Before: AttributeError, "'NoneType' object has no attribute ..." (or 'Axes' object)."""
    import attnbook.viz

    _, ax = plt.subplots()
    for not_a_figure in (None, ax):
        with pytest.raises(ValueError, match=r"fig must be a matplotlib Figure .* got"):
            getattr(attnbook.viz, name)(not_a_figure)
    plt.close("all")


def test_png_smallest_text_reads_what_figure_png_recorded() -> None:
    import base64
    import io
    import struct

    from attnbook.viz import figure_png, png_smallest_text

    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.tick_params(labelsize=9)
    png = base64.b64decode(figure_png(fig)[0])
    plain = io.BytesIO()
    fig.savefig(plain, format="png")  # matplotlib's own PNG records no smallest text
    plt.close(fig)
    smallest, width = png_smallest_text(png)
    assert smallest == pytest.approx(9 * 200 / 72, abs=0.01)
    assert width == struct.unpack(">I", png[16:20])[0]
    assert png_smallest_text(plain.getvalue()) is None
    with pytest.raises(ValueError, match="data must be the bytes of a PNG"):
        png_smallest_text(b"GIF89a")


def test_png_text_refuses_other_bytes() -> None:
    from attnbook.viz import png_text

    with pytest.raises(ValueError, match="data must be the bytes of a PNG"):
        png_text(b"GIF89a")


def test_heatmap_draws_a_boolean_mask_as_ones_and_zeros() -> None:
    ax = plot_heatmap(attnbook.causal_mask(3), annotate=False)
    np.testing.assert_array_equal(ax.images[0].get_array(), np.tril(np.ones((3, 3))))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"matrix": torch.zeros(0, 4)}, r"matrix must have shape \(T, S\) with T, S >= 1"),
        ({"matrix": torch.ones(2, 2), "vmin": 1.0, "vmax": 0.0}, "vmin must be below vmax"),
        ({"matrix": torch.ones(2, 2), "cmap": "viridiss"}, "cmap must name a matplotlib colour"),
    ],
    ids=["empty", "vmin above vmax", "unknown cmap"],
)
def test_heatmap_refuses_what_matplotlib_would_fail_on_obscurely(
    kwargs: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        plot_heatmap(**kwargs)
