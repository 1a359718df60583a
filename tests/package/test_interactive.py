"""Tests of attnbook.interactive: the Plotly figures of the web book and their fallbacks.

What the page gets must be deterministic (nbval compares the stored HTML), carry the
numbers the reader explores (every temperature's weights, every cell's weight), load
plotly.js from the pinned version's CDN URL (which the book rewrites), and fall back to a
PNG and a text alternative. Bad input raises ValueError naming the argument.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnbook import softmax
from attnbook.interactive import (
    DEFAULT_TEMPERATURES,
    InteractiveFigure,
    attention_heatmap,
    plotly_cdn_url,
    softmax_temperature_explorer,
)
from attnbook.viz import SMALLEST_TEXT_KEY, png_text

plotly = pytest.importorskip("plotly")

SCORES = np.array([2.0, 1.0, 0.1, -1.0])
KEYS = ["k0", "k1", "k2", "k3"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _figure_json(figure: InteractiveFigure) -> dict:
    """The Plotly figure (data, layout, config) written into the figure's script."""
    match = re.search(r"var figure = (\{.*\});\n", figure.html)
    assert match, "no figure in the HTML"
    return json.loads(match[1])


def test_cdn_url_is_the_installed_plotly_js() -> None:
    from plotly.offline import get_plotlyjs_version

    assert plotly_cdn_url() == f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"


def test_explorer_holds_every_temperature_and_starts_at_the_chosen_one() -> None:
    figure = softmax_temperature_explorer(SCORES, KEYS, name="t", temperature=2.0)
    spec = _figure_json(figure)
    slider = spec["layout"]["sliders"][0]
    assert [step["label"] for step in slider["steps"]] == [f"{t:g}" for t in DEFAULT_TEMPERATURES]
    assert slider["active"] == DEFAULT_TEMPERATURES.index(2.0)
    for tau, step in zip(DEFAULT_TEMPERATURES, slider["steps"]):
        (row,) = step["args"][0]["y"]
        np.testing.assert_allclose(row, softmax(SCORES, temperature=tau), atol=5e-5)
        assert abs(sum(row) - 1) < 1e-3
    np.testing.assert_allclose(spec["data"][0]["y"], softmax(SCORES, temperature=2.0), atol=5e-5)
    assert spec["layout"]["xaxis"]["ticktext"] == spec["data"][0]["customdata"] == KEYS
    assert spec["data"][0]["x"] == spec["layout"]["xaxis"]["tickvals"] == list(range(len(KEYS)))
    assert "%{y" in spec["data"][0]["hovertemplate"]  # hovering a bar shows its weight
    assert "%{customdata}" in spec["data"][0]["hovertemplate"]  # ... and its key


def test_explorer_sharpens_as_it_cools() -> None:
    steps = _figure_json(softmax_temperature_explorer(SCORES, KEYS, name="t"))["layout"]
    tops = [step["args"][0]["y"][0][0] for step in steps["sliders"][0]["steps"]]
    assert tops == sorted(tops, reverse=True), "the top key's weight falls as τ grows"
    assert tops[0] > 0.99
    assert tops[-1] < 0.35


def test_heatmap_holds_the_weights_rows_are_queries() -> None:
    weights = softmax(torch.tensor([[3.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), axis=-1)
    figure = attention_heatmap(weights, ["q0", "q1"], ["a", "b", "c"], name="h", title="w")
    spec = _figure_json(figure)
    trace = spec["data"][0]
    np.testing.assert_allclose(trace["z"], weights.numpy(), atol=5e-5)
    assert spec["layout"]["yaxis"]["ticktext"] == ["q0", "q1"]
    assert spec["layout"]["xaxis"]["ticktext"] == ["a", "b", "c"]
    assert trace["customdata"][1][2] == ["q1", "c"]
    assert (trace["zmin"], trace["zmax"]) == (0, 1)
    for part in ("%{customdata[0]}", "%{customdata[1]}", "%{z"):  # hover: query, key, weight
        assert part in trace["hovertemplate"]
    assert "q0: 0.84, 0.04, 0.11" in figure.text


def test_repeated_labels_keep_their_own_rows_columns_and_bars() -> None:
    """A sentence repeats words ("the ... the"): as categories, Plotly would draw the two
    as one row or column, and stack their bars; positions with tick labels keep them apart."""
    words = ["the", "cat", "sat", "on", "the", "mat"]
    spec = _figure_json(attention_heatmap(np.eye(6), words, words, name="h"))
    trace = spec["data"][0]
    assert trace["x"] == trace["y"] == list(range(6))
    assert spec["layout"]["xaxis"]["ticktext"] == spec["layout"]["yaxis"]["ticktext"] == words
    assert [trace["customdata"][t][t] for t in range(6)] == [[w, w] for w in words]
    bars = _figure_json(softmax_temperature_explorer([3.0, 1, 1, 1, -3, 1], words, name="t"))
    assert bars["data"][0]["x"] == list(range(6))
    assert bars["layout"]["xaxis"]["ticktext"] == words


def test_a_label_that_closes_the_script_stays_a_label() -> None:
    html = attention_heatmap(np.eye(2), ["</script>", "b"], name="h").html
    assert html.count("</script>") == 1  # the script's own end, nothing before it
    spec = json.loads(re.search(r"var figure = (\{.*\});\n", html)[1])
    assert spec["layout"]["yaxis"]["ticktext"] == ["</script>", "b"]


def test_html_is_deterministic_with_a_fixed_id_and_the_cdn_url() -> None:
    make = lambda: softmax_temperature_explorer(SCORES, KEYS, name="ch02-temp")  # noqa: E731
    first, second = make(), make()
    assert first.html == second.html
    assert 'id="attnbook-ch02-temp"' in first.html
    assert plotly_cdn_url() in first.html
    # Numbers are rounded: no long float tails that differ between BLAS builds.
    assert not re.search(r"\d\.\d{5,}", first.html)
    other = attention_heatmap(np.eye(2), name="ch04-weights")
    assert 'id="attnbook-ch04-weights"' in other.html


def test_mimebundle_has_html_png_and_text() -> None:
    figure = softmax_temperature_explorer(SCORES, KEYS, name="t")
    bundle, metadata = figure._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(PNG_MAGIC)
    # as every notebook figure: twice the pixels of its display size, smallest text recorded
    width = int.from_bytes(png[16:20], "big")
    assert metadata["image/png"]["width"] == width // 2
    assert float(png_text(png)[SMALLEST_TEXT_KEY]) > 0
    assert bundle["text/plain"] == figure.text
    assert "k0 0.64" in figure.text  # the weights at the first temperature shown (τ = 1)
    assert figure.text in figure.html.replace("&#x27;", "'")  # the div's accessible name


def test_static_png_draws_nothing_into_pyplot() -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    assert attention_heatmap(np.eye(3), name="h").png.startswith(PNG_MAGIC)
    assert plt.get_fignums() == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scores": np.zeros((2, 2))}, r"scores must have shape \(S,\).*got \(2, 2\)"),
        ({"scores": np.array([])}, r"scores must have shape \(S,\)"),
        ({"scores": np.array([1.0, np.nan])}, "scores must be finite"),
        ({"labels": ["a"]}, r"labels must have one label per score \(4\), got 1"),
        ({"name": "2 bad"}, "name must start with a letter"),
        ({"temperatures": [1.0, 0.0]}, "temperatures must be finite numbers > 0"),
        ({"temperatures": [2.0, 1.0]}, "temperatures must be increasing"),
        ({"temperature": 0.7}, "temperature must be one of temperatures"),
    ],
)
def test_explorer_rejects_bad_input(kwargs: dict, message: str) -> None:
    arguments = {"scores": SCORES, "labels": KEYS, "name": "t", **kwargs}
    scores = arguments.pop("scores")
    labels = arguments.pop("labels")
    with pytest.raises(ValueError, match=message):
        softmax_temperature_explorer(scores, labels, **arguments)


@pytest.mark.parametrize(
    ("weights", "kwargs", "message"),
    [
        (np.ones(3) / 3, {}, r"weights must have shape \(T, S\).*got \(3\)"),
        (np.zeros((0, 2)), {}, r"weights must have shape \(T, S\) with T, S >= 1"),
        (np.array([[1.5, -0.5]]), {}, r"weights must lie in \[0, 1\].*-0.5 to 1.5"),
        (np.array([[np.nan, 1.0]]), {}, "weights contains NaN"),  # not "values from 1 to 1"
        (np.array([[np.inf, 1.0]]), {}, r"weights must lie in \[0, 1\].*1 to inf"),
        (np.eye(2), {"query_labels": ["a"]}, r"query_labels must have one label per row"),
        (np.eye(2), {"key_labels": ["a", "b", "c"]}, r"key_labels must have one label"),
        (np.eye(2), {"name": "a b"}, "name must start with a letter"),
    ],
)
def test_heatmap_rejects_bad_input(weights: np.ndarray, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        attention_heatmap(weights, **{"name": "h", **kwargs})


def test_importing_the_module_does_not_import_plotly() -> None:
    """Plotly is imported when a figure is made, not when the module is."""
    code = (
        "import sys, attnbook.interactive as interactive\n"
        "assert 'plotly' not in sys.modules\n"
        "interactive.attention_heatmap([[1.0]], name='x')\n"
        "assert 'plotly' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
