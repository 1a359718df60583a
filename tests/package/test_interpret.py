"""Tests of attnbook.interpret: bertviz's input, attention rollout and per-head statistics."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnbook import GPT, GPTConfig
from attnbook.interpret import (
    attention_rollout,
    attention_share,
    head_entropy,
    offset_share,
    to_bertviz,
)
from attnbook.viz import plot_query_key


def _weights(*shape: int, seed: int = 0, causal: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = 2 * torch.randn(*shape, generator=g)
    if causal:
        T, S = shape[-2:]
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1)


# ------------------------------------------------------------------ to_bertviz


def test_the_package_imports_without_transformers_or_bertviz() -> None:
    """interpret works on plain tensors: importing attnbook loads neither optional package."""
    code = (
        "import sys, attnbook, attnbook.interpret; "
        "assert not {'transformers', 'bertviz'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _gpt_weights(batch: int = 3, seq_len: int = 6) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, context_length=8, d_model=16, n_heads=2, n_layers=3))
    _ = model.eval()
    return model.attention_weights(torch.randint(0, 11, (batch, seq_len)))


def test_to_bertviz_picks_one_sequence_per_layer() -> None:
    weights = _gpt_weights()
    tokens = list("abcdef")
    attention, labels = to_bertviz(weights, tokens, batch_index=2)
    assert isinstance(attention, tuple)
    assert len(attention) == 3
    assert labels == tokens
    for layer, one in zip(weights, attention):
        assert one.shape == (1, 2, 6, 6)
        assert one.dtype == torch.float32
        assert one.device.type == "cpu"
        assert not one.requires_grad
        torch.testing.assert_close(one[0], layer[2])
    # a negative index counts from the end, as in Python
    torch.testing.assert_close(to_bertviz(weights, tokens, batch_index=-1)[0][0], attention[0])


def test_to_bertviz_rounds_when_asked() -> None:
    weights = _gpt_weights()
    attention, _ = to_bertviz(weights, list("abcdef"), decimals=3)
    assert attention[0].dtype == torch.float64
    values = attention[1].numpy()
    np.testing.assert_array_equal(values, np.round(values, 3))
    np.testing.assert_allclose(values[0], weights[1][0].numpy(), atol=5e-4)
    written = json.dumps(attention[1].tolist())  # what bertviz writes into the page
    assert re.findall(r"\d+\.\d+", written)
    assert not re.findall(r"\.\d{4,}", written)  # short numbers: at most 3 decimals


def test_to_bertviz_accepts_a_tuple_as_transformers_returns() -> None:
    layers = tuple(_weights(2, 4, 5, 5, seed=s) for s in range(2))
    attention, _ = to_bertviz(layers, ["[CLS]", "a", "b", "c", "[SEP]"], batch_index=1)
    torch.testing.assert_close(attention[1][0], layers[1][1])


def test_to_bertviz_output_draws_in_bertviz() -> None:
    bertviz = pytest.importorskip("bertviz")
    attention, tokens = to_bertviz(_gpt_weights(), ["x1", "x2", "x3", "x4", "x5", "x6"], decimals=3)
    html = bertviz.head_view(attention, tokens, html_action="return").data
    assert '"x4"' in html
    html = bertviz.model_view(attention, tokens, html_action="return").data
    assert '"x6"' in html


@pytest.mark.parametrize(
    ("weights", "tokens", "kwargs", "match"),
    [
        (torch.rand(1, 2, 3, 3), list("abc"), {}, "list or tuple"),
        ([], list("abc"), {}, "at least one layer"),
        ([torch.rand(2, 3, 3)], list("abc"), {}, r"\(B, H, T, T\)"),
        ([torch.rand(1, 2, 3, 4)], list("abc"), {}, "self-attention"),
        ([torch.rand(1, 2, 3, 3), torch.rand(1, 3, 3, 3)], list("abc"), {}, "same shape"),
        ([torch.rand(1, 2, 3, 3)], list("ab"), {}, "one label per position"),
        ([torch.rand(1, 2, 3, 3)], list("abcd"), {}, "one label per position"),
        ([torch.rand(1, 2, 3, 3)], "abc", {}, "sequence of strings"),
        ([torch.rand(1, 2, 3, 3)], list("abc"), {"batch_index": 1}, "batch_index"),
        ([torch.rand(1, 2, 3, 3)], list("abc"), {"decimals": -1}, "decimals"),
        ([torch.ones(1, 2, 3, 3, dtype=torch.long)], list("abc"), {}, "floating-point"),
        ([torch.rand(1, 2, 3, 3)], None, {}, "tokens must be a sequence of strings"),
        ([torch.rand(1, 2, 3, 3)], [1, 2, 3], {}, "tokens must be a sequence of strings"),
        ([torch.zeros(0, 2, 3, 3)], list("abc"), {}, r"at least one sequence \(B >= 1\)"),
        ([torch.full((1, 2, 3, 3), float("nan"))], list("abc"), {}, r"weights\[0\] must be finite"),
        ([torch.rand(1, 2, 3, 3), -torch.rand(1, 2, 3, 3)], list("abc"), {}, r"weights\[1\].*>= 0"),
    ],
)
def test_to_bertviz_rejects_bad_input(weights, tokens, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        to_bertviz(weights, tokens, **kwargs)


def test_to_bertviz_takes_tokens_from_any_iterable() -> None:
    layers = [_weights(1, 2, 3, 3, seed=s) for s in range(2)]
    _, tokens = to_bertviz(layers, (tok for tok in "abc"))  # a generator is read once
    assert tokens == ["a", "b", "c"]
    _, tokens = to_bertviz(layers, ("x", "y", "z"))
    assert tokens == ["x", "y", "z"]


# ------------------------------------------------------------------ attention rollout


def test_rollout_by_hand() -> None:
    """The two-token example of the chapter's first exercise, computed on paper."""
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    second = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    weights = torch.stack([first, second])[:, None, None]  # (L = 2, B = 1, H = 1, 2, 2)
    expected = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    torch.testing.assert_close(attention_rollout(weights)[0], expected)
    swapped = attention_rollout(weights.flip(0))[0]  # the order of the layers matters
    torch.testing.assert_close(swapped, torch.tensor([[0.5, 0.5], [0.25, 0.75]]))


def test_rollout_of_one_layer_without_residual_is_the_heads_mean() -> None:
    weights = _weights(2, 3, 5, 5, seed=1)  # (B, H, T, T)
    torch.testing.assert_close(attention_rollout([weights], residual=0.0), weights.mean(1))


def test_rollout_rows_sum_to_one_and_list_equals_stacked() -> None:
    layers = [_weights(2, 3, 6, 6, seed=s, causal=True) for s in range(4)]
    rollout = attention_rollout(layers)
    assert rollout.shape == (2, 6, 6)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 6))
    torch.testing.assert_close(attention_rollout(torch.stack(layers)), rollout)
    assert torch.equal(rollout.triu(1), torch.zeros_like(rollout))  # causal stays causal
    # with the residual at 0 it is the plain product of the heads' means, last layer on the left
    product = torch.eye(6).expand(2, 6, 6)
    for layer in layers:
        product = layer.mean(1) @ product
    torch.testing.assert_close(attention_rollout(layers, residual=0.0), product)


def test_rollout_refuses_weights_whose_rows_are_not_distributions() -> None:
    """Causal weights transposed to (keys, queries): the rows no longer sum to 1, and a
    rollout of them would have queries reading the future."""
    weights = torch.softmax(
        torch.randn(1, 2, 4, 4).masked_fill(~torch.ones(4, 4).tril().bool(), -torch.inf), -1
    )
    with pytest.raises(ValueError, match="rows summing to 1"):
        attention_rollout([weights.transpose(-2, -1)])
    assert attention_rollout([weights]).shape == (1, 4, 4)


def test_rollout_without_residual_keeps_a_fully_masked_query_at_zero() -> None:
    """A query that may attend to no key gets weights 0 (not NaN): with residual 0, a zero row."""
    weights = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # row 0 masked
    layers = [weights[None, None], weights[None, None]]  # (B = 1, H = 1, T, T) per layer
    rollout = attention_rollout(layers, residual=0.0)[0]
    torch.testing.assert_close(rollout, weights @ weights)
    assert torch.equal(rollout[0], torch.zeros(3))
    # the package's own attention produces such rows: still no NaN, with or without the residual
    from attnbook import scaled_dot_product_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 3, 4, generator=g) for _ in range(3))
    mask = torch.tensor([[False] * 3, [True] * 3, [True] * 3])
    w = scaled_dot_product_attention(q, k, v, mask=mask)[1]  # (1, 3, 3), row 0 all zero
    for residual in (0.0, 0.5):
        rollout = attention_rollout([w[:, None]], residual=residual)
        assert torch.isfinite(rollout).all()
    assert torch.equal(attention_rollout([w[:, None]], residual=0.0), w)


def test_rollout_of_identity_attention_is_the_identity() -> None:
    weights = torch.eye(4).expand(3, 1, 2, 4, 4)  # (L, B, H, T, T)
    torch.testing.assert_close(attention_rollout(weights), torch.eye(4)[None])


@pytest.mark.parametrize(
    ("weights", "kwargs", "match"),
    [
        ([], {}, "at least one layer"),
        (torch.rand(2, 1, 2, 3, 3).softmax(-1), {"residual": 1.0}, "residual"),
        (torch.rand(2, 1, 2, 3, 4).softmax(-1), {}, "self-attention"),
        (torch.rand(1, 2, 3, 3).softmax(-1), {}, r"\(L, B, H, T, T\)"),
        (torch.full((1, 1, 1, 2, 2), float("nan")), {}, "finite"),
        ([torch.rand(1, 2, 3, 3), torch.rand(1, 2, 4, 4)], {}, "one shape"),
        ("weights", {}, "list of"),
        (torch.zeros(1, 1, 0, 3, 3), {}, r"at least one head \(H >= 1\)"),
        (torch.zeros(0, 1, 2, 3, 3), {}, "at least one layer"),
    ],
)
def test_rollout_rejects_bad_input(weights, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        attention_rollout(weights, **kwargs)


# ------------------------------------------------------------------ head statistics


def test_entropy_of_one_hot_uniform_and_causal_uniform_rows() -> None:
    one_hot = torch.eye(5)[None]  # (H = 1, 5, 5)
    uniform = torch.full((1, 5, 5), 0.2)
    causal = torch.ones(5, 5).tril()
    causal = (causal / causal.sum(-1, keepdim=True))[None]
    entropy = head_entropy(torch.cat([one_hot, uniform, causal]))  # (H = 3,)
    expected = [0.0, math.log(5), sum(math.log(t + 1) for t in range(5)) / 5]
    torch.testing.assert_close(entropy, torch.tensor(expected))
    assert math.copysign(1.0, entropy[0].item()) == 1.0  # printed as 0., not -0.


def test_entropy_matches_the_formula_and_selects_queries() -> None:
    weights = _weights(2, 3, 4, 6, seed=3).double()  # (B, H, T, S)
    by_hand = -(weights * weights.log()).sum(-1)  # (B, H, T): no zeros here
    torch.testing.assert_close(head_entropy(weights), by_hand.mean(-1))
    torch.testing.assert_close(
        head_entropy(weights, query_positions=[1, 3]), by_hand[..., [1, 3]].mean(-1)
    )


def test_entropy_gradient_is_finite_where_weights_are_zero() -> None:
    """d(w ln w)/dw = ln w + 1 where w > 0; a zero (masked) weight gets gradient 0, not NaN."""
    weights = torch.tensor([[[1.0, 0.0, 0.0], [0.25, 0.75, 0.0]]], requires_grad=True)
    head_entropy(weights).sum().backward()
    expected = torch.tensor([[[1.0, 0.0, 0.0], [math.log(0.25) + 1, math.log(0.75) + 1, 0.0]]])
    torch.testing.assert_close(weights.grad, -expected / 2)  # the mean over 2 queries


def test_entropy_accepts_rows_of_zeros_and_refuses_rows_not_summing_to_one() -> None:
    weights = torch.tensor([[[0.0, 0.0], [0.5, 0.5]]])  # a fully masked query: a row of zeros
    torch.testing.assert_close(head_entropy(weights), torch.tensor([math.log(2) / 2]))
    with pytest.raises(ValueError, match="rows summing to 1"):
        head_entropy(torch.ones(1, 2, 4))
    with pytest.raises(ValueError, match="rows summing to 1"):
        head_entropy(_weights(1, 3, 5)[..., :4])  # some keys cut off


def test_statistics_accept_bfloat16_softmax_weights() -> None:
    """Softmax weights rounded to bfloat16 (8 bits of mantissa) sum to 1 only within about
    2e-3, which the check of the rows must allow for that dtype."""
    weights = _weights(2, 3, 5, 5, seed=7)
    rounded = weights.bfloat16()
    assert (rounded.float().sum(-1) - 1).abs().max() > 1e-3
    torch.testing.assert_close(
        head_entropy(rounded).float(), head_entropy(weights), atol=2e-2, rtol=0
    )
    assert attention_rollout([rounded]).dtype == torch.bfloat16


def test_share_refuses_scores_in_place_of_weights() -> None:
    """Weights above 1 are not softmax weights (scores, or weights summed over heads)."""
    scores = 1 + _weights(2, 3, 5, 5, seed=8)  # all positive: only the upper bound tells
    for call in (lambda w: attention_share(w, 0), lambda w: offset_share(w, -1)):
        with pytest.raises(ValueError, match=r"weights must hold attention weights in \[0, 1\]"):
            call(scores)


def test_share_on_fixed_keys_and_on_a_selection_per_query() -> None:
    weights = _weights(2, 3, 5, 5, seed=4)  # (B, H, T, S)
    torch.testing.assert_close(attention_share(weights, 0), weights[..., 0].mean(-1))
    torch.testing.assert_close(
        attention_share(weights, [0, 4]), (weights[..., 0] + weights[..., 4]).mean(-1)
    )
    mirror = torch.zeros(5, 5, dtype=torch.bool)
    mirror[torch.arange(5), 4 - torch.arange(5)] = True  # the anti-diagonal
    expected = weights[..., torch.arange(5), 4 - torch.arange(5)]  # (B, H, T)
    torch.testing.assert_close(attention_share(weights, mirror), expected.mean(-1))
    torch.testing.assert_close(
        attention_share(weights, mirror, query_positions=[2, 3]), expected[..., [2, 3]].mean(-1)
    )
    assert torch.allclose(attention_share(weights, range(5)), torch.ones(2, 3))
    cross = _weights(2, 3, 4, 6, seed=9)  # cross-attention: T = 4 queries, S = 6 keys
    torch.testing.assert_close(
        attention_share(cross, [0, 5], query_positions=[1, 3]),
        (cross[..., [1, 3], 0] + cross[..., [1, 3], 5]).mean(-1),
    )


def test_offset_share_finds_a_previous_token_head() -> None:
    T = 6
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1.0  # each query on the token before
    weights = torch.stack([previous, torch.eye(T), torch.full((T, T), 1 / T)])  # (H = 3, T, T)
    torch.testing.assert_close(offset_share(weights, -1), torch.tensor([1.0, 0.0, 1 / T]))
    torch.testing.assert_close(offset_share(weights, 0), torch.tensor([1 / T, 1.0, 1 / T]))
    torch.testing.assert_close(offset_share(weights.transpose(-2, -1), +1)[0], torch.tensor(1.0))
    weights = _weights(2, 3, 5, 5, seed=5)
    torch.testing.assert_close(
        offset_share(weights, -2), weights[..., [2, 3, 4], [0, 1, 2]].mean(-1)
    )
    torch.testing.assert_close(offset_share(weights, -1, query_positions=[4]), weights[..., 4, 3])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda w: head_entropy(w[0, 0]), "at least 3 dimensions"),
        (lambda w: head_entropy(-w), r"\[0, 1\]"),
        (lambda w: head_entropy((w * 10).long()), "floating-point"),
        (lambda w: head_entropy(w.numpy()), "torch tensor"),
        (lambda w: head_entropy(w, query_positions=[5]), "query_positions"),
        (lambda w: attention_share(w, 5), "key_positions"),
        (lambda w: attention_share(w, [0.5]), "key_positions"),
        (lambda w: attention_share(w, torch.ones(4, 5, dtype=torch.bool)), r"\(T, S\)"),
        (lambda w: offset_share(w, 5), "offset"),
        (lambda w: offset_share(w[..., :4], -1), "self-attention"),
        (lambda w: offset_share(w, -1, query_positions=[0]), "query_positions"),
        (lambda w: offset_share(w, 1, query_positions=[4]), r"t \+ offset = t \+ 1 in \[0, 5\)"),
        (lambda w: head_entropy(w, query_positions="01"), "query_positions"),
        (lambda w: head_entropy(w, query_positions=[None]), "query_positions"),
        (lambda w: head_entropy(w, query_positions=[[1]]), "query_positions"),
        (lambda w: head_entropy(w, query_positions=[-1]), "query_positions"),
        (lambda w: head_entropy(w, query_positions=np.array([1], np.uint64)), "query_positions"),
        (lambda w: attention_share(w, None), "key_positions"),
        (lambda w: attention_share(w, "0"), "key_positions"),
        (lambda w: attention_share(w, -1), r"key_positions .*each in \[0, 5\)"),
        (lambda w: attention_share(w, [], query_positions=[0]), "key_positions must be non-empty"),
        (lambda w: head_entropy(w, query_positions=[]), "query_positions must be non-empty"),
        (lambda w: attention_share(w, 0, query_positions=object()), "query_positions"),
    ],
)
def test_statistics_reject_bad_input(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call(_weights(2, 3, 5, 5, seed=6))


# ------------------------------------------------------------------ the query-key view


def test_query_key_view_draws_the_products_and_their_sum() -> None:
    q, k = torch.tensor([1.0, -2.0, 0.5, 3.0]), torch.tensor([0.5, 1.0, -1.0, 2.0])
    products = q * k / 2.0
    ax_vec, ax_prod = plot_query_key(q, k, products, title="one score")
    heights = [bar.get_height() for bar in ax_prod.patches]
    np.testing.assert_allclose(heights, products.numpy())
    assert f"{products.sum().item():.2f}" in ax_prod.get_title()
    np.testing.assert_allclose(ax_vec.get_images()[0].get_array(), np.stack([q, k]))
    assert ax_vec.get_title() == "one score"
    plt.close("all")
    with pytest.raises(ValueError, match="same shape"):
        plot_query_key(q, k[:3], products)
    with pytest.raises(ValueError, match=r"\(d_k,\)"):
        plot_query_key(q[None], k, products)
    with pytest.raises(ValueError, match="d_k >= 1"):  # not numpy's "zero-size array"
        plot_query_key([], [], [])
