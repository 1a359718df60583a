"""Tests of attnbook.MultiHeadAttention.

Agreement with ``nn.MultiheadAttention(batch_first=True)`` (weights copied over
by ``MultiHeadAttention.to_torch()``, boolean masks converted to its opposite
convention) over seeds and shapes; an explicit loop over heads against the
batched module; invariants (causality, parameter count, the fused and explicit
paths agree, dropout only in training, rows that may attend to nothing give
zeros); and every input error.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from attnbook import (
    MultiHeadAttention,
    apply_rope,
    causal_mask,
    mask_to_additive,
    merge_heads,
    padding_mask,
    repeat_kv,
    scaled_dot_product_attention,
    split_heads,
    to_mha_mask,
)
from attnbook.positional import RotaryPositions

# ------------------------------------------------- agreement with nn.MultiheadAttention


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize(
    ("batch", "seq_len", "d_model", "n_heads"), [(2, 5, 8, 2), (3, 7, 12, 3), (1, 4, 16, 4)]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_causal_self_attention_agrees_with_torch(
    seed: int,
    batch: int,
    seq_len: int,
    d_model: int,
    n_heads: int,
    need_weights: bool,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    attn = make_mha(d_model, n_heads, seed)
    mha = attn.to_torch().eval()
    x = randn(seed, batch, seq_len, d_model)
    mask = causal_mask(seq_len)
    theirs, w_theirs = mha(x, x, x, attn_mask=to_mha_mask(mask), average_attn_weights=False)
    for ours, w_ours in (
        attn(x, x, x, mask, need_weights=need_weights),
        attn(x, x, x, need_weights=need_weights, is_causal=True),
    ):
        torch.testing.assert_close(ours, theirs)
        if need_weights:
            assert w_ours.shape == (batch, n_heads, seq_len, seq_len)
            torch.testing.assert_close(w_ours, w_theirs)
        else:
            assert w_ours is None


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("seq_len", "context_len"), [(3, 6), (5, 2)])
@pytest.mark.parametrize("seed", [0, 1])
def test_cross_attention_agrees_with_torch(
    seed: int,
    seq_len: int,
    context_len: int,
    bias: bool,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    attn = make_mha(8, 2, seed, bias=bias)
    mha = attn.to_torch().eval()
    x, c = randn(seed, 2, seq_len, 8), randn(seed + 10, 2, context_len, 8)
    ours, w_ours = attn(x, c, c, need_weights=True)
    theirs, w_theirs = mha(x, c, c, average_attn_weights=False)
    assert ours.shape == (2, seq_len, 8)
    assert w_ours.shape == (2, 2, seq_len, context_len)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(w_ours, w_theirs)
    torch.testing.assert_close(attn(x, c, c)[0], theirs)  # the fused path too


@pytest.mark.parametrize("need_weights", [False, True])
def test_values_are_projected_from_value_not_from_key(
    need_weights: bool, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """Three different tensors: keys from key, values from value, as nn.MultiheadAttention does."""
    attn = make_mha(8, 2, 0)
    mha = attn.to_torch().eval()
    x, key, value = randn(0, 2, 3, 8), randn(1, 2, 6, 8), randn(2, 2, 6, 8)
    theirs, _ = mha(x, key, value)
    ours, _ = attn(x, key, value, need_weights=need_weights)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_key_padding_agrees_with_torch_in_its_opposite_convention(
    seed: int, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    attn = make_mha(12, 3, seed)
    mha = attn.to_torch().eval()
    x, c = randn(seed, 3, 4, 12), randn(seed + 5, 3, 6, 12)
    lengths = [6, 3, 1]
    mask = padding_mask(lengths, 6, per_head=True)  # (B, 1, 1, S), True = real key
    key_padding_mask = to_mha_mask(mask[:, 0, 0])  # (B, S), True = *blocked* there
    theirs, w_theirs = mha(x, c, c, key_padding_mask=key_padding_mask, average_attn_weights=False)
    for need_weights in (False, True):
        ours, w_ours = attn(x, c, c, mask, need_weights=need_weights)
        torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(w_ours, w_theirs)
    assert bool((w_ours[1, :, :, 3:] == 0).all())  # padded keys get weight exactly 0
    # Passed unconverted, our mask means the opposite to torch: a different answer.
    wrong, _ = mha(x, c, c, key_padding_mask=mask[:, 0, 0] & (torch.arange(6) > 0))
    assert not torch.allclose(wrong, theirs)


def test_additive_mask_agrees_with_boolean_mask(
    randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    attn = make_mha(8, 2, 0)
    x = randn(0, 2, 5, 8)
    mask = causal_mask(5) & padding_mask([5, 3], 5, per_head=True)  # (B, 1, 5, 5)
    additive = mask_to_additive(mask, torch.float32)  # cast to the inputs' dtype by the module
    for need_weights in (False, True):
        a = attn(x, x, x, mask, need_weights=need_weights)
        b = attn(x, x, x, additive, need_weights=need_weights)
        torch.testing.assert_close(a[0], b[0])


@pytest.mark.parametrize("seed", [0, 1])
def test_average_attn_weights_is_the_mean_of_our_per_head_weights(
    seed: int, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    attn = make_mha(16, 4, seed)
    mha = attn.to_torch().eval()
    x = randn(seed, 2, 6, 16)
    _, w_ours = attn(x, x, x, need_weights=True, is_causal=True)  # (B, H, T, S)
    mask = to_mha_mask(causal_mask(6))
    _, w_mean = mha(x, x, x, attn_mask=mask, average_attn_weights=True)  # (B, T, S)
    _, w_heads = mha(x, x, x, attn_mask=mask, average_attn_weights=False)  # (B, H, T, S)
    torch.testing.assert_close(w_ours, w_heads)
    torch.testing.assert_close(w_ours.mean(dim=1), w_mean)
    assert not torch.allclose(w_ours[:, 0], w_mean)  # the heads differ: the average loses that


# --------------------------------------------------------- the heads, one at a time


@pytest.mark.parametrize(("d_model", "n_heads"), [(8, 2), (12, 3), (16, 4), (6, 1)])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_loop_over_heads_equals_the_batched_module(
    seed: int,
    d_model: int,
    n_heads: int,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    attn = make_mha(d_model, n_heads, seed)
    x, c = randn(seed, 2, 5, d_model), randn(seed + 1, 2, 7, d_model)
    mask = padding_mask([7, 4], 7)  # (B, 1, S): one mask for every head
    d_head = d_model // n_heads
    heads, head_weights = [], []
    for h in range(n_heads):
        rows = slice(h * d_head, (h + 1) * d_head)  # head h's rows of each W^T
        q = x @ attn.q_proj.weight[rows].T + attn.q_proj.bias[rows]  # (B, T, Dh)
        k = c @ attn.k_proj.weight[rows].T + attn.k_proj.bias[rows]  # (B, S, Dh)
        v = c @ attn.v_proj.weight[rows].T + attn.v_proj.bias[rows]  # (B, S, Dh)
        out, w = scaled_dot_product_attention(q, k, v, mask)  # (B, T, Dh), (B, T, S)
        heads.append(out)
        head_weights.append(w)
    expected = attn.out_proj(torch.cat(heads, dim=-1))  # (B, T, D)
    ours, weights = attn(x, c, c, mask[:, None], need_weights=True)
    torch.testing.assert_close(ours, expected)
    torch.testing.assert_close(weights, torch.stack(head_weights, dim=1))
    torch.testing.assert_close(attn(x, c, c, mask[:, None])[0], expected)


def test_a_per_head_additive_bias_reaches_its_own_head_only(
    randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """A (1, H, T, S) bias (ALiBi's shape, chapter 8) is added to head h's scores only."""
    attn = make_mha(8, 2, 0)
    x = randn(0, 2, 4, 8)
    bias = torch.stack([torch.zeros(4, 4), randn(1, 4, 4)])[None]  # (1, H, T, S); head 0: none
    _, plain = attn(x, x, x, need_weights=True)
    out, biased = attn(x, x, x, bias, need_weights=True)
    torch.testing.assert_close(biased[:, 0], plain[:, 0])
    assert not torch.allclose(biased[:, 1], plain[:, 1])
    torch.testing.assert_close(attn(x, x, x, bias)[0], out)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("d_model", "n_heads"), [(8, 2), (64, 8), (30, 5)])
def test_parameter_count_is_four_full_width_maps(d_model: int, n_heads: int, bias: bool) -> None:
    attn = MultiHeadAttention(d_model, n_heads, bias=bias)
    expected = 4 * d_model**2 + (4 * d_model if bias else 0)
    assert sum(p.numel() for p in attn.parameters()) == expected
    # The same count as one full-width head: the number of heads does not change it.
    assert (
        sum(p.numel() for p in MultiHeadAttention(d_model, 1, bias=bias).parameters()) == expected
    )
    names = {"in_proj.weight", "out_proj.weight"}  # q, k, v stacked: one tensor to optimize
    if bias:
        names |= {"in_proj.bias", "out_proj.bias"}
    assert set(attn.state_dict()) == names
    assert attn.in_proj.weight.shape == (3 * d_model, d_model)


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_q_k_v_proj_are_the_row_blocks_of_in_proj(
    n_kv_heads: int | None, randn: Callable[..., torch.Tensor]
) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, n_kv_heads=n_kv_heads).double()
    d_kv = attn.k_proj.out_features
    assert d_kv == 16 if n_kv_heads is None else d_kv == 8
    blocks = (attn.q_proj, attn.k_proj, attn.v_proj)
    torch.testing.assert_close(torch.cat([b.weight for b in blocks]), attn.in_proj.weight)
    torch.testing.assert_close(torch.cat([b.bias for b in blocks]), attn.in_proj.bias)
    x = randn(0, 2, 3, 16)
    for block in blocks:  # each one behaves as its own nn.Linear
        torch.testing.assert_close(block(x), x @ block.weight.T + block.bias)
    with torch.no_grad():
        attn.k_proj.weight.zero_()  # writes the parameter's rows, and only those
    assert bool(attn.in_proj.weight[16 : 16 + d_kv].eq(0).all())
    assert not bool(attn.in_proj.weight[:16].eq(0).any())
    assert not bool(attn.in_proj.weight[16 + d_kv :].eq(0).any())


@pytest.mark.parametrize("bias", [True, False])
def test_a_state_dict_with_separate_q_k_v_still_loads(
    bias: bool, randn: Callable[..., torch.Tensor]
) -> None:
    torch.manual_seed(0)
    saved = MultiHeadAttention(16, 4, n_kv_heads=2, bias=bias).double()
    old = {"out_proj." + k: v for k, v in saved.out_proj.state_dict().items()}
    for name in ("q_proj", "k_proj", "v_proj"):  # the layout of three nn.Linear
        block = getattr(saved, name)
        old[f"{name}.weight"] = block.weight.detach().clone()
        if bias:
            old[f"{name}.bias"] = block.bias.detach().clone()
    loaded = MultiHeadAttention(16, 4, n_kv_heads=2, bias=bias).double()
    loaded.load_state_dict(old)  # strict: every key used, none missing
    x = randn(0, 2, 5, 16)
    torch.testing.assert_close(loaded(x, x, x)[0], saved(x, x, x)[0], rtol=0, atol=0)


def test_gradients_reach_every_projection_on_both_paths(randn: Callable[..., torch.Tensor]) -> None:
    for need_weights in (False, True):
        attn = MultiHeadAttention(8, 2)
        x = torch.randn(2, 5, 8, requires_grad=True)
        output, _ = attn(x, x, x, need_weights=need_weights, is_causal=True)
        output.square().sum().backward()
        assert x.grad is not None
        assert bool(x.grad.abs().sum() > 0)
        for name, p in attn.named_parameters():
            assert p.grad is not None, name
            assert bool(p.grad.abs().sum() > 0), name


# ------------------------------------------------------------------- invariants


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_need_weights_false_and_true_give_the_same_output(
    seed: int, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    attn = make_mha(12, 4, seed)
    x, c = randn(seed, 2, 5, 12), randn(seed + 3, 2, 8, 12)
    for args, kwargs in (
        ((x, x, x), {}),
        ((x, x, x), {"is_causal": True}),
        ((x, c, c), {"mask": padding_mask([8, 5], 8, per_head=True)}),
        ((x, c, c), {"is_causal": True}),  # T < S: bottom-right aligned
    ):
        fused, none = attn(*args, **kwargs)
        explicit, weights = attn(*args, need_weights=True, **kwargs)
        assert none is None
        torch.testing.assert_close(fused, explicit)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=x.dtype))


def test_is_causal_equals_the_causal_mask_and_ands_with_a_mask(
    randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    attn = make_mha(8, 2, 0)
    x, c = randn(0, 2, 3, 8), randn(1, 2, 6, 8)
    pad = padding_mask([6, 4], 6, per_head=True)  # (B, 1, 1, S)
    for need_weights in (False, True):
        a = attn(x, c, c, need_weights=need_weights, is_causal=True)[0]
        b = attn(x, c, c, causal_mask(3, 6), need_weights=need_weights)[0]
        torch.testing.assert_close(a, b)
        a = attn(x, c, c, pad, need_weights=need_weights, is_causal=True)[0]
        b = attn(x, c, c, pad & causal_mask(3, 6), need_weights=need_weights)[0]
        torch.testing.assert_close(a, b)
    assert not torch.allclose(attn(x, c, c, is_causal=True)[0], attn(x, c, c)[0])


@pytest.mark.parametrize("rope_base", [None, 10000.0])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_future_token_never_changes_an_earlier_output(
    seed: int,
    need_weights: bool,
    rope_base: float | None,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    attn = make_mha(16, 4, seed, rope_base=rope_base)
    x = randn(seed, 2, 8, 16)
    cut = 3 + seed
    changed = x.clone()
    changed[:, cut:] = randn(seed + 100, 2, 8 - cut, 16)
    before = attn(x, x, x, need_weights=need_weights, is_causal=True)[0]
    after = attn(changed, changed, changed, need_weights=need_weights, is_causal=True)[0]
    torch.testing.assert_close(after[:, :cut], before[:, :cut], rtol=0, atol=1e-12)
    assert not torch.allclose(after[:, cut:], before[:, cut:])
    # Without the causal rule the earlier outputs do change: the test can tell.
    free = attn(changed, changed, changed, need_weights=need_weights)[0]
    assert not torch.allclose(free[:, :cut], attn(x, x, x, need_weights=need_weights)[0][:, :cut])


def test_dropout_only_in_training_mode(randn: Callable[..., torch.Tensor]) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, dropout=0.5)
    twin = MultiHeadAttention(16, 4, dropout=0.0)
    twin.load_state_dict(attn.state_dict())
    x = torch.randn(2, 6, 16)
    attn.eval()
    for need_weights in (False, True):
        a = attn(x, x, x, need_weights=need_weights)[0]
        torch.testing.assert_close(a, attn(x, x, x, need_weights=need_weights)[0], rtol=0, atol=0)
        torch.testing.assert_close(a, twin(x, x, x, need_weights=need_weights)[0])
    _, clean = attn(x, x, x, need_weights=True)  # (B, H, T, S)
    attn.train()
    for need_weights in (False, True):
        out, weights = attn(x, x, x, need_weights=need_weights)
        assert not torch.allclose(out, a)
    # Each weight is either dropped (0) or kept and scaled by 1 / (1 - p) = 2.
    dropped = weights == 0
    assert bool(dropped.any())
    assert bool((~dropped).any())
    torch.testing.assert_close(weights[~dropped], 2 * clean[~dropped])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_a_query_that_may_attend_to_nothing_gets_zeros_not_nan(
    need_weights: bool,
    bias: bool,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    attn = make_mha(8, 2, 0, bias=bias)
    x = randn(0, 3, 4, 8).requires_grad_(True)
    mask = padding_mask([4, 0, 2], 4, per_head=True)  # sequence 1 has no real key at all
    output, weights = attn(x, x, x, mask, need_weights=need_weights)
    assert not bool(output.isnan().any())
    empty_row = torch.zeros(4, 8, dtype=x.dtype) if not bias else attn.out_proj.bias.expand(4, 8)
    torch.testing.assert_close(output[1], empty_row)  # attention output 0, then W_O (+ bias)
    if need_weights:
        assert bool((weights[1] == 0).all())
    output.sum().backward()
    assert not bool(x.grad.isnan().any())
    # T > S with is_causal: the first T - S queries come before every key.
    c = randn(1, 3, 2, 8)
    output, _ = attn(x, c, c, need_weights=need_weights, is_causal=True)
    assert not bool(output.isnan().any())
    torch.testing.assert_close(output[:, :2], empty_row[:2].expand(3, 2, 8))


def test_query_key_value_need_not_be_one_tensor_for_self_attention(
    randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """Equal values in separate tensors (the unfused projections) give the same result."""
    attn = make_mha(8, 2, 0)
    x = randn(0, 2, 5, 8)
    fused = attn(x, x, x, is_causal=True)[0]
    separate = attn(x, x.clone(), x.clone(), is_causal=True)[0]
    torch.testing.assert_close(fused, separate)


@pytest.mark.parametrize("need_weights", [False, True])
def test_key_is_query_with_another_value_takes_the_values_from_value(
    need_weights: bool, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """The one-multiply path of self-attention is for query, key and value all one tensor: with
    key = query but a separate value, the values must come from value, not from query."""
    attn = make_mha(8, 2, 0)
    x, value = randn(0, 2, 5, 8), randn(1, 2, 5, 8)
    ours = attn(x, x, value, need_weights=need_weights, is_causal=True)[0]
    separate = attn(x, x.clone(), value, need_weights=need_weights, is_causal=True)[0]
    torch.testing.assert_close(ours, separate)


@pytest.mark.parametrize("need_weights", [False, True])
def test_an_additive_mask_of_another_dtype_is_cast_to_the_projections(
    need_weights: bool, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """forward casts an additive mask to the dtype of the projected heads: under bfloat16
    autocast a float32 bias must not turn the weights into float32, and with validate=False
    (no check_mask to cast it) a float64 bias must not break a float32 module."""
    attn = make_mha(8, 2, 0).float()
    x = randn(0, 2, 5, 8, dtype=torch.float32)
    bias = mask_to_additive(causal_mask(5), torch.float64)
    expected = attn(x, x, x, bias.float(), need_weights=need_weights)
    got = attn(x, x, x, bias, need_weights=need_weights, validate=False)
    torch.testing.assert_close(got[0], expected[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output, weights = attn(x, x, x, bias.float(), need_weights=need_weights)
    assert output.dtype == torch.bfloat16
    if need_weights:
        assert weights.dtype == torch.bfloat16


def test_validate_false_is_forward_without_checks(
    randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    attn = make_mha(8, 2, 0)
    x, c = randn(0, 2, 5, 8), randn(1, 2, 3, 8)
    mask = padding_mask([3, 2], 3, per_head=True)
    for need_weights in (False, True):
        a = attn(x, c, c, mask, need_weights=need_weights)
        b = attn(x, c, c, mask, need_weights=need_weights, validate=False)
        torch.testing.assert_close(a[0], b[0])
        a = attn(x, x, x, need_weights=need_weights, is_causal=True)
        b = attn(x, x, x, None, need_weights=need_weights, is_causal=True, validate=False)
        torch.testing.assert_close(a[0], b[0])
        if need_weights:
            torch.testing.assert_close(a[1], b[1])


@pytest.mark.parametrize(
    ("x", "got"), [(torch.zeros(2, 3, 6), r"shape \(2, 3, 6\)"), (torch.zeros(()), r"shape \(\)")]
)
def test_project_self_refuses_an_input_of_another_width(x: torch.Tensor, got: str) -> None:
    """Before: torch's "mat1 and mat2 shapes cannot be multiplied" from in_proj."""
    with pytest.raises(
        ValueError, match=r"x must be .* \(B, T, d_model\) with d_model = 8, got " + got
    ):
        MultiHeadAttention(8, 2).project_self(x)


def test_float32_module_and_repr(randn: Callable[..., torch.Tensor]) -> None:
    attn = MultiHeadAttention(8, 2, dropout=0.1)
    output, weights = attn(torch.randn(2, 3, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8))
    assert output.dtype == torch.float32
    assert output.shape == (2, 3, 8)
    assert weights is None
    assert "d_model=8, n_heads=2, d_head=4, dropout=0.1" in repr(attn)


@pytest.mark.parametrize("rope_base", [None, 10000.0, 100.0])
@pytest.mark.parametrize("need_weights", [False, True])
def test_the_last_t_queries_attend_as_inside_the_full_sequence(
    need_weights: bool,
    rope_base: float | None,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    """Bottom-right alignment: T new queries over S keys act like the last T rows of S x S."""
    attn = make_mha(16, 4, 0, rope_base=rope_base)
    x = randn(0, 2, 7, 16)
    full, w_full = attn(x, x, x, need_weights=need_weights, is_causal=True)
    for n_new in (1, 3):
        tail, w_tail = _last_queries(attn, x, n_new, need_weights=need_weights, is_causal=True)
        torch.testing.assert_close(tail, full[:, -n_new:])
        if need_weights:
            torch.testing.assert_close(w_tail, w_full[:, :, -n_new:])


def _last_queries(attn: MultiHeadAttention, x: torch.Tensor, n_new: int, **kwargs: object) -> tuple:
    """The last ``n_new`` positions of ``x`` as queries over all of ``x``'s keys.

    Without rotation, a shorter query tensor does it (bottom-right aligned); with
    rotation, attention refuses a key tensor other than the query, so the earlier
    positions go through a cache first, as in generation.
    """
    if n_new == x.shape[1]:
        return attn(x, x, x, **kwargs)
    if attn.positional is None:
        return attn(x[:, -n_new:], x, x, **kwargs)
    cache = SimpleNamespace(key=None, value=None)
    head, tail = x[:, :-n_new], x[:, -n_new:]
    attn(head, head, head, cache=cache)  # fills the cache with positions 0..S-T-1
    return attn(tail, tail, tail, cache=cache, **kwargs)


def test_a_cache_is_checked_and_counted_in_the_mask_shape(
    randn: Callable[..., torch.Tensor],
) -> None:
    """With S_past cached positions the scores have S_past + T keys: the mask is checked so."""
    attn = MultiHeadAttention(8, 2).eval()
    x = randn(0, 2, 7, 8).float()
    cache = SimpleNamespace(key=None, value=None)
    attn(x[:, :4], x[:, :4], x[:, :4], cache=cache)  # 4 positions cached
    tail = x[:, 4:]
    full, _ = attn(x, x, x, is_causal=True)
    stepped = SimpleNamespace(key=cache.key, value=cache.value)
    out, _ = attn(tail, tail, tail, cache=stepped, mask=causal_mask(3, 7))  # (T, S_past + T)
    torch.testing.assert_close(out, full[:, 4:])
    with pytest.raises(
        ValueError, match=r"mask of shape \(3, 3\) does not broadcast .* \(2, 2, 3, 7\)"
    ):
        attn(
            tail,
            tail,
            tail,
            cache=SimpleNamespace(key=cache.key, value=cache.value),
            mask=causal_mask(3),
        )
    bad = [
        (object(), "cache must have attributes key and value"),
        (SimpleNamespace(key=cache.key, value=cache.value[:, :, :3]), "the same positions"),
        (SimpleNamespace(key=cache.key[:1], value=cache.value[:1]), r"cache.key must have shape \(B, H_kv, S_past, Dh\) = \(2, 2, S_past, 4\), got \(1, 2, 4, 4\)"),
        (SimpleNamespace(key=cache.key.double(), value=cache.value.double()), r"cache.key must have dtype torch.float32"),
    ]  # fmt: skip
    for other, match in bad:
        with pytest.raises(ValueError, match=match):
            attn(tail, tail, tail, cache=other)


# ------------------------------------------------------------------------- RoPE


@pytest.mark.parametrize("need_weights", [False, True])
def test_rope_refuses_cross_attention(
    need_weights: bool, randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """The two sides of cross-attention have unrelated positions: rotating them is an error."""
    attn = make_mha(16, 2, 0, rope_base=10000.0)
    x, c = randn(0, 2, 3, 16), randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match=r"rope_base .*self-attention \(query is key\)"):
        attn(x, c, c, need_weights=need_weights)
    with pytest.raises(ValueError, match=r"rope_base"):  # the same length does not make it self
        attn(x, x.clone(), x.clone(), need_weights=need_weights)
    # without rotation, cross-attention is fine
    assert make_mha(16, 2, 0)(x, c, c, need_weights=need_weights)[0].shape == (2, 3, 16)


@pytest.mark.parametrize(("seq_len", "context_len"), [(5, 5), (3, 6)])
@pytest.mark.parametrize("seed", [0, 1])
def test_rope_rotates_each_heads_queries_and_keys(
    seed: int,
    seq_len: int,
    context_len: int,
    randn: Callable[..., torch.Tensor],
    make_mha: Callable[..., nn.Module],
) -> None:
    attn = make_mha(16, 2, seed, rope_base=500.0)
    c = randn(seed + 1, 2, context_len, 16)  # the whole sequence
    x = c[:, context_len - seq_len :]  # its last T positions: the queries
    q = attn.q_proj(x).view(2, seq_len, 2, 8).transpose(1, 2)  # (B, H, T, Dh)
    k = attn.k_proj(c).view(2, context_len, 2, 8).transpose(1, 2)  # (B, H, S, Dh)
    v = attn.v_proj(c).view(2, context_len, 2, 8).transpose(1, 2)  # (B, H, S, Dh)
    q_positions = torch.arange(context_len - seq_len, context_len)  # the last T positions
    q, k = apply_rope(q, q_positions, 500.0), apply_rope(k, None, 500.0)
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(seq_len, context_len))
    expected = attn.out_proj(out.transpose(1, 2).reshape(2, seq_len, 16))  # (B, T, D)
    for need_weights in (False, True):
        ours, w_ours = _last_queries(attn, c, seq_len, need_weights=need_weights, is_causal=True)
        torch.testing.assert_close(ours, expected)
    torch.testing.assert_close(w_ours, weights)
    plain = make_mha(16, 2, seed)  # the same weights without RoPE: a different answer
    assert not torch.allclose(plain(x, c, c, is_causal=True)[0], expected)


def test_rope_scores_depend_on_the_offset_only(
    randn: Callable[..., torch.Tensor], make_mha: Callable[..., nn.Module]
) -> None:
    """Shifting the whole sequence's positions changes nothing: only offsets t - s matter."""
    attn = make_mha(8, 2, 3, rope_base=10000.0)
    x = randn(3, 1, 6, 8)
    _, weights = attn(x, x, x, need_weights=True)  # positions 0..5 for queries and keys
    c = torch.cat([randn(4, 1, 4, 8), x], dim=1)  # 4 extra keys in front: x sits at 4..9
    _, shifted = _last_queries(attn, c, 6, need_weights=True)  # queries at 4..9, keys at 0..9
    # Among x's own keys, the weights are proportional to the unshifted ones.
    renormalised = shifted[..., 4:] / shifted[..., 4:].sum(-1, keepdim=True)
    torch.testing.assert_close(renormalised, weights)


# ----------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 10, "n_heads": 4}, r"d_model must be a multiple of n_heads.*d_model = 10 and n_heads = 4"),
        ({"d_model": 0, "n_heads": 1}, r"d_model must be an int >= 1, got 0"),
        ({"d_model": 8.0, "n_heads": 2}, r"d_model must be an int >= 1, got 8\.0"),
        ({"d_model": 8, "n_heads": 0}, r"n_heads must be an int >= 1, got 0"),
        ({"d_model": 8, "n_heads": True}, r"n_heads must be an int >= 1, got True"),
        ({"d_model": 8, "n_heads": 2, "dropout": 1.0}, r"dropout must be a number in \[0, 1\)"),
        ({"d_model": 8, "n_heads": 2, "bias": 1}, r"bias must be True or False"),
        ({"d_model": 8, "n_heads": 2, "rope_base": 0.0}, r"rope_base must be a finite number > 0"),
        ({"d_model": 8, "n_heads": 2, "rope_base": 1.0}, r"rope_base must be a number > 1"),
        ({"d_model": 8, "n_heads": 2, "rope_base": "10000"}, r"rope_base must be a positive number, got str"),
        ({"d_model": 6, "n_heads": 2, "rope_base": 10000.0}, r"d_head = d_model // n_heads must be even, got d_head = 3"),
        # an encoding object, not its name; one way of asking for rotary positions; an even head
        ({"d_model": 8, "n_heads": 2, "positional": "rope"}, r"positional must be a PositionalEncoding .* got 'rope'"),
        ({"d_model": 8, "n_heads": 2, "rope_base": 100.0, "positional": RotaryPositions()}, r"give rope_base or positional, not both"),
        ({"d_model": 6, "n_heads": 2, "positional": RotaryPositions()}, r"d_head = d_model // n_heads must be even, got d_head = 3"),
    ],
)  # fmt: skip
def test_constructor_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(**kwargs)


_X = torch.randn(2, 5, 8)
_C = torch.randn(2, 3, 8)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((torch.randn(2, 5, 7), _X, _X), {}, r"query must have shape \(B, T, d_model\) with d_model = 8, got \(2, 5, 7\)"),
        ((_X, torch.randn(2, 3, 6), _C), {}, r"key must have shape \(B, S, d_model\) with d_model = 8, got \(2, 3, 6\)"),
        ((_X, _C, torch.randn(2, 3, 9)), {}, r"value must have shape \(B, S, d_model\) with d_model = 8, got \(2, 3, 9\)"),
        ((torch.randn(5, 8), _C, _C), {}, r"query must have shape \(B, T, d_model\) with d_model = 8, got \(5, 8\)"),
        ((_X, torch.randn(1, 2, 3, 8), _C), {}, r"key must have shape \(B, S, d_model\).*got \(1, 2, 3, 8\)"),
        ((torch.randn(2, 0, 8), _C, _C), {}, r"query must have shape \(B, T, d_model\) with at least one position"),
        ((np.ones((2, 5, 8)), _C, _C), {}, r"query must be a torch tensor of shape \(B, T, d_model\), got a NumPy array"),
        ((_X, _C.long(), _C), {}, r"key must be a floating-point tensor of shape \(B, S, d_model\)"),
        ((_X.double(), _C.double(), _C.double()), {}, r"must have the module's dtype torch.float32, got torch.float64"),
        ((_X, torch.randn(3, 3, 8), torch.randn(3, 3, 8)), {}, r"must share the batch size B.*query \(2, 5, 8\), key \(3, 3, 8\)"),
        ((_X, _C, torch.randn(2, 4, 8)), {}, r"value must have shape \(B, S, d_model\) with S = 3 \(one value per key\), got value \(2, 4, 8\)"),
        ((_X, _C, _C), {"mask": causal_mask(5)}, r"mask of shape \(5, 5\) does not broadcast to the scores' shape \(\.\.\., T, S\) = \(2, 2, 5, 3\)"),
        ((_X, _X, _X), {"mask": padding_mask([5, 3], 5)}, r"mask of shape \(2, 1, 5\) is ambiguous for the scores' shape \(B, H, T, S\) = \(2, 2, 5, 5\).*per_head=True"),
        ((_X, _X, _X), {"mask": torch.ones(2, 5, 5, dtype=torch.bool)}, r"mask of shape \(2, 5, 5\) is ambiguous.*mask\[:, None\]"),
        ((_X, _C, _C), {"mask": torch.ones(1, 2, 3, 4, dtype=torch.bool)}, r"mask of shape \(1, 2, 3, 4\) does not broadcast.*\(2, 2, 5, 3\)"),
        ((_X, _X, _X), {"mask": torch.ones(3, 1, 5, 5, dtype=torch.bool)}, r"mask of shape \(3, 1, 5, 5\) does not broadcast"),
        ((_X, _X, _X), {"mask": torch.ones(5, 5, dtype=torch.int64)}, r"mask must be boolean \(True = may attend\) or floating-point"),
        ((_X, _X, _X), {"mask": [[True]]}, r"mask must be a torch tensor broadcastable"),
        ((_X, _X, _X), {"need_weights": 1}, r"need_weights must be True or False, got 1"),
        ((_X, _X, _X), {"is_causal": None}, r"is_causal must be True or False, got None"),
    ],
)  # fmt: skip
def test_forward_bad_inputs(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(8, 2)(*args, **kwargs)


def test_to_torch_refuses_what_pytorch_has_no_twin_for() -> None:
    for attn in (MultiHeadAttention(8, 4, n_kv_heads=2), MultiHeadAttention(8, 2, rope_base=1e4)):
        with pytest.raises(ValueError, match="to_torch"):
            attn.to_torch()
    theirs = MultiHeadAttention(8, 2, bias=False).to_torch()
    assert theirs.in_proj_bias is None
    assert theirs.batch_first


@pytest.mark.parametrize(
    ("theirs", "match"),
    [
        (nn.MultiheadAttention(8, 4), r"\(embed_dim, num_heads, kdim, vdim\) = \(8, 2, 8, 8\), got \(8, 4, 8, 8\)"),
        (nn.MultiheadAttention(8, 2, bias=False), r"theirs must have biases \(bias=True\)"),
        (nn.MultiheadAttention(8, 2, add_zero_attn=True), r"add_zero_attn=False"),
        (nn.Linear(8, 8), r"theirs must be an nn.MultiheadAttention, got Linear"),
    ],
)  # fmt: skip
def test_copy_to_refuses_a_torch_attention_of_another_shape(theirs: nn.Module, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(8, 2).copy_to(theirs)


def test_copy_to_zeroes_the_biases_of_a_torch_attention_for_a_module_without_any() -> None:
    ours = MultiHeadAttention(8, 2, bias=False)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_bias.fill_(1.0)
        theirs.out_proj.bias.fill_(1.0)
    ours.copy_to(theirs)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(theirs(x, x, x)[0], ours(x, x, x)[0])


def test_in_proj_follows_the_default_device_like_the_other_parameters() -> None:
    with torch.device("meta"):  # shapes only, as chapter 9 counts GPT-2's parameters
        attn = MultiHeadAttention(16, 4)
    assert {p.device.type for p in attn.parameters()} == {"meta"}


@pytest.mark.parametrize(("n_kv_heads", "bias"), [(None, True), (2, True), (1, False)])
def test_in_proj_is_drawn_as_three_linears_would_be(n_kv_heads: int | None, bias: bool) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, bias=bias, n_kv_heads=n_kv_heads)
    torch.manual_seed(0)
    widths = attn.qkv_widths
    three = [torch.nn.Linear(16, width, bias=bias) for width in widths]  # q, k, v in order
    out = torch.nn.Linear(16, 16, bias=bias)
    torch.testing.assert_close(attn.in_proj.weight, torch.cat([p.weight for p in three]))
    if bias:
        torch.testing.assert_close(attn.in_proj.bias, torch.cat([p.bias for p in three]))
    torch.testing.assert_close(attn.out_proj.weight, out.weight)


# ------------------------------------------------- split_heads, merge_heads, repeat_kv
def test_split_heads_gives_head_h_its_own_slice_of_features_and_merge_heads_undoes_it() -> None:
    x = torch.arange(2 * 3 * 12, dtype=torch.float32).reshape(2, 3, 12)
    heads = split_heads(x, 4)  # (2, 4, 3, 3)
    assert heads.shape == (2, 4, 3, 3)
    for h in range(4):
        torch.testing.assert_close(heads[:, h], x[..., 3 * h : 3 * (h + 1)])
    torch.testing.assert_close(merge_heads(heads), x, rtol=0, atol=0)


def test_repeat_kv_gives_query_head_h_key_value_head_h_over_g() -> None:
    kv = torch.randn(2, 3, 5, 4)
    torch.testing.assert_close(repeat_kv(kv, 2), kv.repeat_interleave(2, dim=1), rtol=0, atol=0)
    assert repeat_kv(kv, 1) is kv


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: split_heads(torch.randn(2, 5, 10), 3), r"n_heads \(3\) must divide the width of x's last axis, 10"),
        (lambda: split_heads(torch.randn(5, 8), 4), r"x must be a torch tensor of shape \(B, T, H \* Dh\), got shape \(5, 8\)"),
        (lambda: split_heads(np.ones((2, 5, 8)), 4), r"x must be a torch tensor .* got a NumPy array of shape \(2, 5, 8\)"),
        (lambda: split_heads(_X, 0), r"n_heads must be an int >= 1, got 0"),
        (lambda: split_heads(_X, True), r"n_heads must be an int >= 1, got True"),
        (lambda: merge_heads(_X), r"x must be a torch tensor of shape \(B, H, T, Dh\), got shape \(2, 5, 8\)"),
        (lambda: merge_heads([1.0]), r"x must be a torch tensor of shape \(B, H, T, Dh\), got list"),
        (lambda: repeat_kv(torch.randn(2, 2, 5, 4), 0), r"n_rep must be an int >= 1 \(query heads per key/value head\), got 0"),
        (lambda: repeat_kv(torch.randn(2, 2, 5, 4), 2.0), r"n_rep must be an int >= 1 .* got 2.0"),
        (lambda: repeat_kv(_X, 1), r"x must be a torch tensor of shape \(B, H_kv, S, Dh\), got shape \(2, 5, 8\)"),
    ],
)  # fmt: skip
def test_head_helpers_bad_inputs(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
