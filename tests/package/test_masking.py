"""Tests of attnbook.masking: the True = may-attend convention, shapes, broadcasting, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook import (
    apply_mask,
    causal_mask,
    combine_masks,
    mask_to_additive,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
    to_mha_mask,
)


@pytest.mark.parametrize("seq_len", [1, 2, 5])
def test_causal_mask_is_true_on_and_below_the_diagonal(seq_len: int) -> None:
    mask = causal_mask(seq_len)
    assert mask.dtype == torch.bool
    assert mask.shape == (seq_len, seq_len)
    for t in range(seq_len):
        for s in range(seq_len):
            assert bool(mask[t, s]) == (s <= t)
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_rectangular_causal_mask_is_aligned_bottom_right() -> None:
    """Two new queries after two cached keys: query t sits at position t + S - T."""
    expected = torch.tensor([[True, True, True, False], [True, True, True, True]])
    assert torch.equal(causal_mask(2, 4), expected)
    assert torch.equal(causal_mask(4, 4), causal_mask(4))
    assert torch.equal(causal_mask(1, 5), torch.ones(1, 5, dtype=torch.bool))  # sees every key


@pytest.mark.parametrize(("n_queries", "n_keys"), [(1, 1), (3, 5), (5, 5), (4, 7), (5, 3)])
def test_causal_mask_follows_its_formula(n_queries: int, n_keys: int) -> None:
    mask = causal_mask(n_queries, n_keys)
    assert mask.shape == (n_queries, n_keys)
    assert mask.dtype == torch.bool
    for t in range(n_queries):
        for s in range(n_keys):
            assert bool(mask[t, s]) == (s <= t + n_keys - n_queries)
    assert bool(mask[-1].all())  # the last query always sees every key
    if n_queries > n_keys:  # more queries than keys: the first T - S queries see nothing
        assert not bool(mask[: n_queries - n_keys].any())


def test_torch_is_causal_aligns_top_left_ours_bottom_right() -> None:
    """For T != S PyTorch's is_causal lets query t see keys 0..t; ours, keys 0..t + S - T."""
    g = torch.Generator().manual_seed(3)
    n_queries, n_keys = 3, 5
    q = torch.randn(2, n_queries, 4, generator=g)
    k, v = (torch.randn(2, n_keys, 4, generator=g) for _ in range(2))
    top_left = torch.ones(n_queries, n_keys, dtype=torch.bool).tril()  # s <= t
    torch_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(torch_causal, F.scaled_dot_product_attention(q, k, v, top_left))
    for need_weights in (True, False):
        ours, _ = scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=need_weights)
        bottom_right = F.scaled_dot_product_attention(q, k, v, causal_mask(n_queries, n_keys))
        torch.testing.assert_close(ours, bottom_right)
        assert not torch.allclose(ours, torch_causal)  # the two alignments differ ...
        # ... except for a square mask, where both are the ordinary lower triangle.
        square, _ = scaled_dot_product_attention(
            q, q, v[:, :n_queries], is_causal=True, need_weights=need_weights
        )
        torch.testing.assert_close(
            square, F.scaled_dot_product_attention(q, q, v[:, :n_queries], is_causal=True)
        )
    assert not torch.equal(top_left, causal_mask(n_queries, n_keys))


def test_padding_mask_shapes_and_values() -> None:
    mask = padding_mask([3, 1, 0], 4)
    assert mask.dtype == torch.bool
    assert mask.shape == (3, 1, 4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(mask[:, 0], expected)
    assert padding_mask([3, 1, 0], 4, per_head=True).shape == (3, 1, 1, 4)
    assert torch.equal(padding_mask([3, 1, 0], 4, per_head=True), mask[:, None])
    assert padding_mask([2, 5]).shape == (2, 1, 5)  # max_len defaults to the longest
    assert torch.equal(padding_mask(torch.tensor([3, 1, 0]), 4), mask)
    assert torch.equal(padding_mask(np.array([3, 1, 0]), 4), mask)


def test_padding_mask_broadcasts_against_single_and_multi_head_scores() -> None:
    g = torch.Generator().manual_seed(0)
    B, H, T, S, d = 2, 3, 4, 5, 8
    lengths = [5, 2]
    q, k, v = (torch.randn(B, H, n, d, generator=g, dtype=torch.float64) for n in (T, S, S))
    _, w_heads = scaled_dot_product_attention(q, k, v, padding_mask(lengths, S, per_head=True))
    assert w_heads.shape == (B, H, T, S)
    assert bool((w_heads[1, ..., 2:] == 0).all())
    _, w_single = scaled_dot_product_attention(q[:, 0], k[:, 0], v[:, 0], padding_mask(lengths, S))
    assert w_single.shape == (B, T, S)
    torch.testing.assert_close(w_single, w_heads[:, 0])
    # (B, 1, S) against (B, H, T, S) would put B on the head axis: rejected, not misread.
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5\) does not broadcast"):
        scaled_dot_product_attention(q, k, v, padding_mask(lengths, S))


def test_combine_masks_is_a_logical_and_with_broadcasting() -> None:
    combined = combine_masks(causal_mask(4), padding_mask([4, 2], 4))
    assert combined.shape == (2, 4, 4)
    assert torch.equal(combined[0], causal_mask(4))
    assert torch.equal(combined[1], causal_mask(4) & torch.tensor([True, True, False, False]))
    assert torch.equal(combine_masks(causal_mask(3)), causal_mask(3))


def test_mask_to_additive_and_apply_mask() -> None:
    mask = causal_mask(3)
    additive = mask_to_additive(mask, torch.float64)
    assert additive.dtype == torch.float64
    assert bool((additive[mask] == 0).all())
    assert bool(torch.isneginf(additive[~mask]).all())
    scores = torch.randn(2, 3, 3, dtype=torch.float64)
    by_bool = apply_mask(scores, mask)
    torch.testing.assert_close(by_bool, apply_mask(scores, additive))
    torch.testing.assert_close(by_bool[:, mask], scores[:, mask])
    assert bool(torch.isneginf(by_bool[:, ~mask]).all())
    assert apply_mask(scores, None) is scores
    # An additive mask keeps the scores' dtype even when given in another one.
    assert apply_mask(scores.float(), additive).dtype == torch.float32


def test_masked_softmax_rows_sum_to_one_or_are_all_zero() -> None:
    scores = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    weights = masked_softmax(scores, mask)
    torch.testing.assert_close(weights[[0, 2]].sum(-1), torch.ones(2, dtype=torch.float64))
    assert bool((weights[1] == 0).all())
    assert bool((weights[0, 2:] == 0).all())
    torch.testing.assert_close(weights[2], torch.softmax(scores[2], -1))
    (weights * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    assert bool(torch.isfinite(scores.grad).all())


def test_torch_sdpa_shares_our_convention() -> None:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    ours, _ = scaled_dot_product_attention(q, k, v, causal_mask(5))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, causal_mask(5)))


def test_multihead_attention_reads_boolean_masks_the_opposite_way() -> None:
    """nn.MultiheadAttention: True = *blocked*. to_mha_mask converts; forgetting it is wrong."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 1, batch_first=True).eval()
    x = torch.randn(2, 5, 4)
    mask = causal_mask(5)
    assert torch.equal(to_mha_mask(mask), ~mask)
    _, w_converted = mha(x, x, x, attn_mask=to_mha_mask(mask))
    assert bool((w_converted[:, ~mask] == 0).all())  # the future is blocked, as intended
    # Ours: every query may attend to keys 0..2 only. Unconverted, MHA reads the opposite.
    ours = torch.tensor([True, True, True, False, False]).expand(5, 5)
    _, w_right = mha(x, x, x, attn_mask=to_mha_mask(ours))
    _, w_wrong = mha(x, x, x, attn_mask=ours)
    assert bool((w_right[..., 3:] == 0).all())
    assert bool((w_wrong[..., :3] == 0).all())  # it attended to exactly the blocked keys
    assert bool((w_wrong[..., 3:] > 0).all())
    # key_padding_mask (B, S) follows the same rule as attn_mask.
    lengths = [5, 3]
    _, w_pad = mha(x, x, x, key_padding_mask=to_mha_mask(padding_mask(lengths, 5)[:, 0]))
    _, w_ours = scaled_dot_product_attention(
        x @ mha.in_proj_weight[:4].T + mha.in_proj_bias[:4],
        x @ mha.in_proj_weight[4:8].T + mha.in_proj_bias[4:8],
        x @ mha.in_proj_weight[8:].T + mha.in_proj_bias[8:],
        padding_mask(lengths, 5),
    )
    torch.testing.assert_close(w_pad, w_ours)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: causal_mask(0), r"seq_len must be an int >= 1, got 0"),
        (lambda: causal_mask(2.5), r"seq_len must be an int >= 1, got 2\.5"),
        (lambda: causal_mask(2, 0), r"key_len must be an int >= 1, got 0"),
        (lambda: causal_mask(2, "4"), r"key_len must be an int >= 1, got '4'"),
        (lambda: padding_mask([3, 5], 4), r"every length must be <= max_len = 4"),
        (lambda: padding_mask([-1, 2], 4), r"lengths must be >= 0"),
        (lambda: padding_mask([[1, 2]], 4), r"lengths must have shape \(B,\)"),
        (lambda: padding_mask([1.5, 2.0], 4), r"lengths must be a sequence of ints"),
        (lambda: padding_mask(torch.tensor([1.0]), 4), r"lengths must hold integers"),
        (lambda: padding_mask([1, 2], 0), r"max_len must be an int >= 1"),
        (lambda: combine_masks(), r"at least one mask"),
        (lambda: combine_masks(causal_mask(3), torch.ones(3, 3)), r"masks\[1\] must be a boolean tensor"),
        (lambda: combine_masks(causal_mask(3), causal_mask(4)), r"masks of shapes \(3, 3\), \(4, 4\) do not broadcast"),
        (lambda: mask_to_additive(torch.zeros(2, 2)), r"mask must be a boolean tensor .* got dtype torch.float32"),
        (lambda: mask_to_additive(causal_mask(2), torch.int64), r"dtype must be a floating torch dtype"),
        (lambda: to_mha_mask(np.ones((2, 2), dtype=bool)), r"mask must be a boolean torch tensor"),
        (lambda: apply_mask(torch.zeros(3, 4), causal_mask(4)), r"mask of shape \(4, 4\) does not broadcast to the scores' shape \(\.\.\., T, S\) = \(3, 4\)"),
        (lambda: apply_mask(torch.zeros(3, 4), torch.full((3, 4), float("inf"))), r"additive mask must hold finite numbers or -inf"),
        (lambda: apply_mask(torch.zeros(4), None), r"scores must have shape \(\.\.\., T, S\), got \(4\)"),
        (lambda: masked_softmax(np.zeros((2, 2))), r"scores must be a floating-point torch tensor"),
        # a NaN score would pass for a blocked key (weight 0) and +inf has no softmax
        (lambda: masked_softmax(torch.tensor([[1.0, float("nan"), 2.0]])), r"contain NaN or \+inf"),
        (lambda: masked_softmax(torch.tensor([[float("inf"), 0.0]])), r"contain NaN or \+inf"),
        # finite in the mask's dtype, +inf in the scores': float32 7e4 on float16, 1e39 on float32
        (lambda: apply_mask(torch.zeros(2, 2, dtype=torch.float16), torch.full((2, 2), 7e4)), r"above the largest torch.float16 number"),
        (lambda: masked_softmax(torch.zeros(1, 2), torch.tensor([[1e39, 0.0]], dtype=torch.float64)), r"above the largest torch.float32 number"),
        (lambda: scaled_dot_product_attention(*torch.zeros(3, 1, 2, 4).half(), mask=torch.full((2, 2), 7e4)), r"above the largest torch.float16 number"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_a_clear_value_error(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_a_large_negative_additive_mask_still_blocks_in_half_precision() -> None:
    """-1e9 becomes -inf in float16: that blocks, so it is no overflow to refuse."""
    scores = torch.zeros(1, 2, dtype=torch.float16)
    weights = masked_softmax(scores, torch.tensor([[0.0, -1e9]]))
    assert weights.dtype == torch.float16
    assert weights.tolist() == [[1.0, 0.0]]


def test_a_row_of_values_below_float16_s_range_is_fully_masked_in_half_precision() -> None:
    """As masked_softmax's docstring says: -1e5 becomes -inf in float16, so the row is empty."""
    mask = torch.full((1, 3), -1e5)
    torch.testing.assert_close(masked_softmax(torch.zeros(1, 3), mask), torch.full((1, 3), 1 / 3))
    half = masked_softmax(torch.zeros(1, 3, dtype=torch.float16), mask)
    assert half.tolist() == [[0.0, 0.0, 0.0]]


def test_padding_mask_of_zero_lengths_says_why_it_needs_max_len() -> None:
    """Not "max_len must be an int >= 1, got 0" when no max_len was passed."""
    with pytest.raises(ValueError, match="lengths are all 0"):
        padding_mask([0, 0])
    assert not padding_mask([0, 0], max_len=3).any()
