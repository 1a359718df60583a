"""Tests of attnbook.SingleHeadAttention and the additive (Bahdanau) scorer.

Shapes for self- and cross-attention, agreement with a computation written out
by hand and with ``nn.MultiheadAttention(num_heads=1)`` (weights copied over by
``SingleHeadAttention.to_torch()``, boolean masks converted to its opposite
convention), and the additive score.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from attnbook import (
    AdditiveScorer,
    SingleHeadAttention,
    additive_scores,
    causal_mask,
    padding_mask,
    score_matrix,
    to_mha_mask,
)

# --------------------------------------------------------- SingleHeadAttention


def test_self_attention_shapes(randn: Callable[..., torch.Tensor]) -> None:
    attn = SingleHeadAttention(d_model=8, d_k=4, d_v=6)
    output, weights = attn(torch.randn(2, 5, 8))
    assert output.shape == (2, 5, 6)
    assert weights.shape == (2, 5, 5)
    assert SingleHeadAttention(8, 4)(torch.randn(5, 8))[0].shape == (5, 4)  # d_v defaults to d_k


def test_cross_attention_shapes_with_t_different_from_s(randn: Callable[..., torch.Tensor]) -> None:
    attn = SingleHeadAttention(d_model=8, d_k=4, d_v=3, d_context=6)
    output, weights = attn(torch.randn(2, 3, 8), torch.randn(2, 7, 6))
    assert output.shape == (2, 3, 3)
    assert weights.shape == (2, 3, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_the_computation_written_out(
    bias: bool, seed: int, randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    attn = seeded(seed, SingleHeadAttention, 6, 4, 3, d_context=5, bias=bias)
    x, c = randn(seed, 2, 3, 6), randn(seed + 10, 2, 4, 5)
    mask = padding_mask([4, 2], 4)
    w_q, w_k, w_v = (p.weight.T for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    q, k, v = x @ w_q, c @ w_k, c @ w_v
    if bias:
        q, k, v = q + attn.q_proj.bias, k + attn.k_proj.bias, v + attn.v_proj.bias
    scores = (q @ k.transpose(-2, -1) / math.sqrt(4)).masked_fill(~mask, float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ v
    output, weights = attn(x, c, mask)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))
    fast, none = attn(x, c, mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_torch_multihead_attention_with_one_head(
    bias: bool, seed: int, randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    attn = seeded(seed, SingleHeadAttention, 8, 8, 8, bias=bias).eval()
    mha = attn.to_torch()  # nn.MultiheadAttention(8, 1) with our projections, W_O = identity
    x = randn(seed, 2, 5, 8)
    mask = causal_mask(5)
    ours, w_ours = attn(x, mask=mask)
    theirs, w_theirs = mha(x, x, x, attn_mask=to_mha_mask(mask))  # True = *blocked* there
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(w_ours, w_theirs)
    # Unconverted, the same boolean mask means the opposite to MHA: the outputs differ.
    _, w_wrong = mha(
        x[:, :4], x[:, :4], x[:, :4], attn_mask=mask[:4, :4] & ~torch.eye(4, dtype=torch.bool)
    )
    assert bool((w_wrong[:, ~mask[:4, :4]] > 0).all())


@pytest.mark.parametrize("bias", [False, True])
def test_cross_attention_agrees_with_torch_multihead_attention(
    bias: bool, randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    attn = seeded(3, SingleHeadAttention, 8, 8, 8, d_context=5, bias=bias).eval()
    mha = attn.to_torch()  # kdim = vdim = 5: separate q/k/v weights in PyTorch
    assert mha.in_proj_weight is None
    x, c = randn(3, 2, 3, 8), randn(4, 2, 6, 5)
    lengths = [6, 4]
    ours, w_ours = attn(x, c, padding_mask(lengths, 6))
    theirs, w_theirs = mha(x, c, c, key_padding_mask=to_mha_mask(padding_mask(lengths, 6)[:, 0]))
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(w_ours, w_theirs)


@pytest.mark.parametrize("d_context", [8, 5])
@pytest.mark.parametrize("block", [0, 1, 2])  # the query, key or value projection
def test_agreement_detects_a_perturbed_weight(
    d_context: int, block: int, randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    attn = seeded(5, SingleHeadAttention, 8, 8, d_context=d_context, bias=True).eval()
    mha = attn.to_torch()
    x, c = randn(5, 2, 4, 8), randn(6, 2, 6, d_context)
    torch.testing.assert_close(attn(x, c)[0], mha(x, c, c)[0])
    with torch.no_grad():  # nudge one entry of one projection in PyTorch's copy only
        if mha.in_proj_weight is not None:
            mha.in_proj_weight[block * 8, 0] += 0.1
        else:
            (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)[block][0, 0] += 0.1
    with pytest.raises(AssertionError, match="not close"):
        torch.testing.assert_close(attn(x, c)[0], mha(x, c, c)[0])
    torch.testing.assert_close(attn(x, c)[0], attn.to_torch()(x, c, c)[0])  # ours untouched


def test_to_torch_copies_with_the_same_dropout_dtype_and_mode() -> None:
    attn = SingleHeadAttention(6, 6, bias=True, dropout=0.25)  # training mode, float32
    mha = attn.to_torch()
    assert (mha.embed_dim, mha.num_heads, mha.dropout, mha.training) == (6, 1, 0.25, True)
    assert mha.batch_first
    assert mha.in_proj_weight.dtype == torch.float32
    torch.testing.assert_close(mha.out_proj.weight, torch.eye(6))  # a single head has no W_O
    torch.testing.assert_close(mha.out_proj.bias, torch.zeros(6))
    before = attn.q_proj.weight.clone()
    with torch.no_grad():
        mha.in_proj_weight.zero_()  # copies, not shared storage
    torch.testing.assert_close(attn.q_proj.weight, before)
    assert not attn.eval().to_torch().training
    assert attn.double().to_torch().in_proj_weight.dtype == torch.float64
    # copy_to fills an existing module, and zeros its biases for a head without any.
    no_bias = SingleHeadAttention(6, 6)
    theirs = nn.MultiheadAttention(6, 1, batch_first=True)
    no_bias.copy_to(theirs)
    assert bool((theirs.in_proj_bias == 0).all())
    x = torch.randn(1, 3, 6)
    torch.testing.assert_close(no_bias(x)[0], theirs(x, x, x)[0])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: SingleHeadAttention(8, 4).to_torch(), r"to_torch\(\) needs d_k = d_model = 8.*got d_k = 4"),
        (lambda: SingleHeadAttention(8, 8, 6).to_torch(), r"to_torch\(\) needs d_v = d_model = 8.*got d_v = 6"),
        (lambda: SingleHeadAttention(8, 8).copy_to(nn.MultiheadAttention(8, 2)), r"\(embed_dim, num_heads, kdim, vdim\) = .*\(8, 1, 8, 8\), got \(8, 2, 8, 8\)"),
        (lambda: SingleHeadAttention(8, 8, d_context=5).copy_to(nn.MultiheadAttention(8, 1)), r"= \(8, 1, 5, 5\), got \(8, 1, 8, 8\)"),
        (lambda: SingleHeadAttention(8, 8, bias=True).copy_to(nn.MultiheadAttention(8, 1, bias=False)), r"theirs must have biases"),
        (lambda: SingleHeadAttention(8, 8).copy_to(nn.MultiheadAttention(8, 1, add_bias_kv=True)), r"add_bias_kv=False"),
        (lambda: SingleHeadAttention(8, 8).copy_to(nn.Linear(8, 8)), r"theirs must be an nn.MultiheadAttention, got Linear"),
    ],
)  # fmt: skip
def test_to_torch_refuses_what_pytorch_has_no_twin_for(
    call: Callable[[], object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_dropout_only_in_training_mode(randn: Callable[..., torch.Tensor]) -> None:
    torch.manual_seed(0)
    attn = SingleHeadAttention(8, 4, dropout=0.5)
    x = torch.randn(2, 6, 8)
    attn.eval()
    a, _ = attn(x)
    b, _ = attn(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    attn.train()
    c, w = attn(x)
    assert not torch.allclose(a, c)
    assert bool((w == 0).any())


def test_gradients_reach_every_projection(randn: Callable[..., torch.Tensor]) -> None:
    attn = SingleHeadAttention(6, 4, 3, bias=True)
    output, _ = attn(torch.randn(2, 5, 6), mask=causal_mask(5))
    output.square().sum().backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None, name
        assert bool(p.grad.abs().sum() > 0), name


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda a: a(torch.randn(2, 5, 7)), r"x_query must have shape \(\.\.\., T, d_model\) with d_model = 8, got \(2, 5, 7\)"),
        (lambda a: a(torch.randn(2, 5, 8), torch.randn(2, 4, 7)), r"x_context must have shape \(\.\.\., S, d_context\) with d_context = 6"),
        (lambda a: a(torch.randn(2, 5, 8)), r"x_context is None \(self-attention\).*d_context = 6"),
        (lambda a: a(np.ones((5, 8)), torch.randn(4, 6)), r"x_query must be a torch tensor.*expects torch tensors"),
        (lambda a: a(torch.randn(5, 8), torch.randn(4, 6), causal_mask(5)), r"mask of shape \(5, 5\) does not broadcast.*\(5, 4\)"),
    ],
)  # fmt: skip
def test_forward_bad_inputs(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(SingleHeadAttention(8, 4, d_context=6))


def test_constructor_bad_arguments() -> None:
    with pytest.raises(ValueError, match="d_k must be an int >= 1, got 0"):
        SingleHeadAttention(8, 0)
    with pytest.raises(ValueError, match="d_model must be an int >= 1"):
        SingleHeadAttention(8.0, 4)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\)"):
        SingleHeadAttention(8, 4, dropout=1.5)


# ------------------------------------------------------------- additive scores


def test_additive_scores_shape_and_formula(randn: Callable[..., torch.Tensor]) -> None:
    queries, keys = randn(0, 2, 3, 4), randn(1, 2, 5, 6)
    w_q, w_k, v = randn(2, 4, 7), randn(3, 6, 7), randn(4, 7)
    scores = additive_scores(queries, keys, w_q, w_k, v)
    assert scores.shape == (2, 3, 5)
    b, t, s = 1, 2, 4
    expected = v @ torch.tanh(queries[b, t] @ w_q + keys[b, s] @ w_k)
    torch.testing.assert_close(scores[b, t, s], expected)
    as_numpy = additive_scores(*(a.numpy() for a in (queries, keys, w_q, w_k, v)))
    np.testing.assert_allclose(as_numpy, scores.numpy())


def test_additive_scorer_module_matches_the_function_and_trains(
    randn: Callable[..., torch.Tensor],
) -> None:
    torch.manual_seed(0)
    scorer = AdditiveScorer(d_query=4, d_key=6, d_attn=5)
    queries, keys = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    scores = scorer(queries, keys)
    assert scores.shape == (2, 3, 7)
    expected = additive_scores(
        queries, keys, scorer.W_q.weight.T, scorer.W_k.weight.T, scorer.v.weight[0]
    )
    torch.testing.assert_close(scores, expected)
    scores.sum().backward()
    assert all(p.grad is not None for p in scorer.parameters())


def test_additive_score_can_rank_keys_unlike_the_dot_product() -> None:
    query = torch.tensor([[1.0, 0.0]])  # (T=1, d=2)
    keys = torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # key 0 aligned with the query, key 1 not
    dot = score_matrix(query, keys)
    additive = additive_scores(query, keys, torch.eye(2), torch.eye(2), torch.tensor([0.0, 1.0]))
    assert int(dot.argmax()) == 0  # the dot product prefers the aligned key
    assert int(additive.argmax()) == 1  # this scorer has learned to look at the 2nd feature
    assert float(dot[0, 1]) == 0.0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((3, 4), (5, 6), (4, 7), (6, 7), (8,)), r"W_q must have shape \(4, 8\)"),
        (((3, 4), (5, 6), (4, 7), (5, 7), (7,)), r"W_k must have shape \(6, 7\) = \(width of keys, len\(v\)\), got \(5, 7\)"),
        (((3, 4), (5, 6), (4, 7), (6, 7), (7, 1)), r"v must have shape \(d_a,\), got \(7, 1\)"),
        (((4,), (5, 6), (4, 7), (6, 7), (7,)), r"queries must have shape \(\.\.\., T, d_q\)"),
        (((2, 3, 4), (3, 5, 6), (4, 7), (6, 7), (7,)), r"batch dimensions of queries \(2, 3, 4\) and keys \(3, 5, 6\)"),
    ],
)  # fmt: skip
def test_additive_scores_bad_inputs(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        additive_scores(*(torch.zeros(s) for s in args))


def test_additive_scorer_bad_widths() -> None:
    with pytest.raises(ValueError, match="d_attn must be an int >= 1, got 0"):
        AdditiveScorer(4, 4, 0)


def test_additive_scorer_names_its_inputs_not_its_weights_in_errors() -> None:
    """additive_scores, called with the module's W_q and W_k, blamed them ("W_q must have shape
    (4, 6)", "convert it, e.g. W_q.to(queries.dtype)") for queries of the wrong width or dtype."""
    scorer = AdditiveScorer(3, 4, 6)
    with pytest.raises(
        ValueError,
        match=r"queries must have shape \(\.\.\., T, d_query\) with "
        r"d_query = 3, got \(2, 5, 4\)",
    ):
        scorer(torch.ones(2, 5, 4), torch.ones(7, 4))
    with pytest.raises(
        ValueError,
        match=r"keys must have shape \(\.\.\., S, d_key\) with "
        r"d_key = 4, got \(7, 3\)",
    ):
        scorer(torch.ones(2, 5, 3), torch.ones(7, 3))
    with pytest.raises(ValueError, match=r"queries and keys must have the module's dtype"):
        scorer(torch.ones(2, 5, 3, dtype=torch.float64), torch.ones(7, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="queries must be a torch tensor"):
        scorer(np.ones((2, 5, 3)), torch.ones(7, 4))
    assert scorer(torch.ones(2, 5, 3), torch.ones(7, 4)).shape == (2, 5, 7)


def test_single_head_with_no_position_to_attend_to_names_its_own_input() -> None:
    """Not "key must have shape (..., S, d_k) with S >= 1": key is no argument of forward."""
    head = SingleHeadAttention(8, 8)
    with pytest.raises(ValueError, match=r"x_query must have at least one position"):
        head(torch.ones(2, 0, 8))
    with pytest.raises(ValueError, match=r"x_context must have at least one position"):
        head(torch.ones(2, 3, 8), torch.ones(2, 0, 8))
    assert head(torch.ones(2, 0, 8), torch.ones(2, 3, 8))[0].shape == (2, 0, 8)  # no query
