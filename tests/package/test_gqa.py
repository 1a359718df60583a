"""Tests of grouped-query and multi-query attention (``n_kv_heads``).

A module with ``n_kv_heads < n_heads`` must equal an ordinary
``MultiHeadAttention`` whose key and value projections repeat each key/value
head's rows ``G = n_heads / n_kv_heads`` times (``repeat_interleave``), in every
mode: self- and cross-attention, masks, ``is_causal``, rotary positions, ALiBi
biases and ``need_weights``. Plus parameter counts, the default, the GPT
config, and the errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnbook import (
    GPT,
    EncoderBlock,
    GPTConfig,
    MultiHeadAttention,
    alibi_bias,
    causal_mask,
    load_checkpoint,
    save_checkpoint,
)
from attnbook.positional import POSITIONAL_ENCODINGS


def _grouped_and_repeated(
    d_model: int, n_heads: int, n_kv_heads: int, seed: int, **kwargs: object
) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """A grouped-query module and the full multi-head module it must equal."""
    torch.manual_seed(seed)
    grouped = MultiHeadAttention(d_model, n_heads, n_kv_heads=n_kv_heads, **kwargs).double()
    full = MultiHeadAttention(d_model, n_heads, **kwargs).double()
    d_head, group = d_model // n_heads, n_heads // n_kv_heads
    with torch.no_grad():
        full.out_proj.load_state_dict(grouped.out_proj.state_dict())
        full.q_proj.weight.copy_(grouped.q_proj.weight)  # rows of the stacked in_proj
        if grouped.q_proj.bias is not None:
            full.q_proj.bias.copy_(grouped.q_proj.bias)
        for name in ("k_proj", "v_proj"):
            small = getattr(grouped, name)  # weight (H_kv * Dh, D)
            weight = small.weight.view(n_kv_heads, d_head, d_model)  # one block of rows per head
            weight = weight.repeat_interleave(group, dim=0)  # (H, Dh, D): head h <- kv head h // G
            getattr(full, name).weight.copy_(weight.reshape(d_model, d_model))
            if small.bias is not None:
                bias = small.bias.view(n_kv_heads, d_head).repeat_interleave(group, dim=0)
                getattr(full, name).bias.copy_(bias.reshape(d_model))
    return grouped.eval(), full.eval()


CONFIGS = [(24, 6, 3), (24, 6, 2), (24, 6, 1), (16, 4, 4), (32, 8, 4)]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("d_model", "n_heads", "n_kv_heads"), CONFIGS)
@pytest.mark.parametrize("mode", ["self", "self-causal", "cross", "mask", "rope", "alibi"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_grouped_equals_repeated_heads(
    d_model: int, n_heads: int, n_kv_heads: int, seed: int, mode: str, need_weights: bool
) -> None:
    kwargs = {"rope_base": 10000.0} if mode == "rope" else {}
    grouped, full = _grouped_and_repeated(d_model, n_heads, n_kv_heads, seed, **kwargs)
    g = torch.Generator().manual_seed(seed + 100)
    x = torch.randn(2, 7, d_model, generator=g, dtype=torch.float64)
    context = torch.randn(2, 11, d_model, generator=g, dtype=torch.float64)
    key = context if mode == "cross" else x
    mask, is_causal = None, mode in ("self-causal", "rope")
    if mode == "mask":
        mask = torch.rand(2, 1, 7, 7, generator=g) > 0.3  # (B, 1, T, S), some rows may be empty
    if mode == "alibi":
        mask = alibi_bias(n_heads, 7).double()[None]  # (1, H, T, T), one bias per query head
    out, weights = grouped(x, key, key, mask, need_weights=need_weights, is_causal=is_causal)
    expected, expected_weights = full(
        x, key, key, mask, need_weights=need_weights, is_causal=is_causal
    )
    torch.testing.assert_close(out, expected)
    if need_weights:
        assert weights.shape == (2, n_heads, 7, key.shape[1])
        torch.testing.assert_close(weights, expected_weights)
    else:
        assert weights is None


def test_heads_of_one_group_share_keys() -> None:
    """Query heads 0 and 1 (group 0) read kv head 0; changing kv head 1 leaves them alone."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, n_kv_heads=2).double().eval()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    _, before = mha(x, x, x, need_weights=True)
    with torch.no_grad():
        mha.k_proj.weight[4:8] += 1.0  # rows of kv head 1 (d_head = 4)
    _, after = mha(x, x, x, need_weights=True)
    torch.testing.assert_close(after[:, :2], before[:, :2])  # heads 0, 1: group 0, unchanged
    assert not torch.allclose(after[:, 2:], before[:, 2:])  # heads 2, 3: group 1, changed


def test_default_is_unchanged_multihead_attention() -> None:
    torch.manual_seed(3)
    default = MultiHeadAttention(16, 4)
    torch.manual_seed(3)
    explicit = MultiHeadAttention(16, 4, n_kv_heads=4)
    assert default.n_kv_heads == explicit.n_kv_heads == 4
    for p, q in zip(default.parameters(), explicit.parameters()):
        assert p.shape == q.shape
        assert torch.equal(p, q)
    assert "n_kv_heads" not in repr(default)
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(default(x, x, x)[0], explicit(x, x, x)[0], rtol=0, atol=0)


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(8, 8), (8, 4), (8, 2), (8, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count(n_heads: int, n_kv_heads: int, bias: bool) -> None:
    d_model = 64
    d_head = d_model // n_heads
    mha = MultiHeadAttention(d_model, n_heads, bias=bias, n_kv_heads=n_kv_heads)
    d_kv = n_kv_heads * d_head
    expected = 2 * d_model * d_model + 2 * d_model * d_kv  # W_Q, W_O, then W_K, W_V
    if bias:
        expected += 2 * d_model + 2 * d_kv
    assert sum(p.numel() for p in mha.parameters()) == expected
    assert mha.k_proj.weight.shape == mha.v_proj.weight.shape == (d_kv, d_model)


@pytest.mark.parametrize(
    ("n_heads", "n_kv_heads"), [(6, 0), (6, -1), (6, 4), (4, 5), (6, 2.0), (6, True), (6, "2")]
)
def test_bad_n_kv_heads(n_heads: int, n_kv_heads: object) -> None:
    with pytest.raises(ValueError, match="n_kv_heads"):
        MultiHeadAttention(24, n_heads, n_kv_heads=n_kv_heads)
    with pytest.raises(ValueError, match="n_kv_heads"):
        GPTConfig(
            vocab_size=7,
            context_length=8,
            d_model=24,
            n_heads=n_heads,
            n_layers=1,
            n_kv_heads=n_kv_heads,
        )


def test_encoder_block_passes_n_kv_heads() -> None:
    block = EncoderBlock(24, 6, n_kv_heads=2)
    assert block.self_attn.n_kv_heads == 2
    assert block.self_attn.k_proj.out_features == 8


@pytest.mark.parametrize("positional", list(POSITIONAL_ENCODINGS))
def test_gpt_with_grouped_query_attention(positional: str) -> None:
    base = {"vocab_size": 11, "context_length": 12, "d_model": 24, "n_heads": 6, "n_layers": 2}
    config = GPTConfig(**base, positional=positional, n_kv_heads=2)
    assert "n_kv_heads=2" in repr(config)
    assert "n_kv_heads" not in repr(GPTConfig(**base))  # the printed default is unchanged
    torch.manual_seed(0)
    model = GPT(config).eval()
    full = GPT(GPTConfig(**base, positional=positional)).eval()
    d_head, d_model = 4, 24
    # Each block: W_K and W_V shrink from (24, 24) to (8, 24), their biases from 24 to 8.
    saved = config.n_layers * 2 * ((d_model - 2 * d_head) * d_model + (d_model - 2 * d_head))
    assert full.num_parameters() - model.num_parameters() == saved
    for block in model.blocks:
        assert block.self_attn.n_kv_heads == 2
    idx = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(1))
    logits = model(idx)
    assert logits.shape == (3, 12, 11)
    # causal: changing the last token leaves earlier logits alone
    other = idx.clone()
    other[:, -1] = (other[:, -1] + 1) % 11
    torch.testing.assert_close(model(other)[:, :-1], logits[:, :-1])
    weights = model.attention_weights(idx)
    assert all(w.shape == (3, 6, 12, 12) for w in weights)
    assert torch.equal(weights[0] * ~causal_mask(12), torch.zeros_like(weights[0]))


def test_checkpoint_round_trip_keeps_n_kv_heads(tmp_path: Path) -> None:
    config = GPTConfig(
        vocab_size=11, context_length=8, d_model=24, n_heads=6, n_layers=1, n_kv_heads=3
    )
    torch.manual_seed(0)
    model = GPT(config).eval()
    reloaded = load_checkpoint(save_checkpoint(tmp_path / "gqa", model)).eval()
    assert reloaded.config == config
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(reloaded(idx), model(idx))
