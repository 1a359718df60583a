"""Tests of attnbook.viz: the figures show what they are given, with labels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnbook.viz import DIVERGING_CMAP, SEQUENTIAL_CMAP, plot_bars, plot_heatmap


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


def test_heatmap_centres_signed_scores_on_zero() -> None:
    ax = plot_heatmap(np.array([[-2.0, 1.0], [0.5, 0.0]]))
    image = ax.get_images()[0]
    assert image.get_cmap().name == DIVERGING_CMAP
    assert image.get_clim() == (-2.0, 2.0)


def test_heatmap_skips_annotations_for_large_matrices() -> None:
    ax = plot_heatmap(np.zeros((20, 20)))
    assert len(ax.texts) == 0


def test_heatmap_does_not_change_global_style() -> None:
    before = dict(matplotlib.rcParams)
    plot_heatmap(np.eye(2))
    assert dict(matplotlib.rcParams) == before


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.zeros(3),), r"matrix must have shape \(T, S\), got \(3\)"),
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
