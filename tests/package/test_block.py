"""Tests of attnbook.block: the feed-forward network and the encoder and decoder blocks.

Agreement with PyTorch's own layers (``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer``, pre-LN and post-LN, weights copied over),
the residual connections, causality, dropout placement and bad input.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnbook import causal_mask, padding_mask
from attnbook.block import DecoderBlock, EncoderBlock, FeedForward


def _perturb_norms(module: nn.Module, seed: int) -> None:
    """LayerNorms start as the identity affine map; make their weights matter in the comparison."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))


# ------------------------------------------------------------------ FeedForward


def test_feed_forward_is_linear_gelu_linear(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    ffn = seeded(0, FeedForward, 6, 10)
    x = randn(1, 2, 3, 6)
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    expected = F.gelu(x @ w1.T + b1) @ w2.T + b2
    torch.testing.assert_close(ffn(x), expected)
    relu = F.relu(x @ w1.T + b1) @ w2.T + b2  # the original Transformer's activation: different
    assert not torch.allclose(ffn(x), relu)


def test_feed_forward_is_position_wise(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    ffn = seeded(0, FeedForward, 4)
    x = randn(2, 1, 5, 4)
    full = ffn(x)
    for t in range(5):  # each position on its own gives the same row
        torch.testing.assert_close(ffn(x[:, t : t + 1]), full[:, t : t + 1])


def test_feed_forward_defaults_and_bad_input(randn: Callable[..., torch.Tensor]) -> None:
    ffn = FeedForward(8)
    assert ffn.d_ff == 32
    assert ffn.linear1.weight.shape == (32, 8)
    assert ffn.linear2.weight.shape == (8, 32)
    assert FeedForward(8, bias=False).linear1.bias is None
    with pytest.raises(ValueError, match="d_model"):
        ffn(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match="d_ff"):
        FeedForward(8, d_ff=0)
    with pytest.raises(ValueError, match="dropout"):
        FeedForward(8, dropout=1.0)


def test_feed_forward_dropout_only_in_training(randn: Callable[..., torch.Tensor]) -> None:
    torch.manual_seed(0)
    ffn = FeedForward(8, dropout=0.5)
    x = torch.randn(4, 8)
    ffn.eval()
    twin = FeedForward(8, dropout=0.0)  # the same weights, no dropout at all
    twin.load_state_dict(ffn.state_dict())
    torch.testing.assert_close(ffn(x), twin(x), rtol=0, atol=0)
    ffn.train()
    assert not torch.allclose(ffn(x), ffn(x))


# ------------------------------------------------------------------ EncoderBlock


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_encoder_block_matches_torch_encoder_layer(
    norm_first: bool,
    seed: int,
    randn: Callable[..., torch.Tensor],
    seeded: Callable[..., nn.Module],
) -> None:
    block = seeded(seed, EncoderBlock, 16, 4, 24, norm_first=norm_first).eval()
    _perturb_norms(block, seed)
    layer = block.to_torch()  # nn.TransformerEncoderLayer with our weights
    x = randn(seed, 3, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(block(x), layer(x))
        # causal: our is_causal against its float mask (0 / -inf: same meaning in both libraries)
        float_causal = nn.Transformer.generate_square_subsequent_mask(7, dtype=torch.float64)
        torch.testing.assert_close(block(x, is_causal=True), layer(x, src_mask=float_causal))
        torch.testing.assert_close(block(x, causal_mask(7)), layer(x, src_mask=float_causal))
        # key padding: ours is True = may attend, theirs True = padding
        pad = padding_mask([7, 4, 2], 7, per_head=True)  # (B, 1, 1, S)
        torch.testing.assert_close(
            block(x, pad)[:, :2], layer(x, src_key_padding_mask=~pad[:, 0, 0])[:, :2]
        )


def test_pre_ln_and_post_ln_differ(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    pre = seeded(0, EncoderBlock, 8, 2)
    post = EncoderBlock(8, 2, norm_first=False).double()
    post.load_state_dict(pre.state_dict())
    x = randn(3, 2, 5, 8)
    assert not torch.allclose(pre(x), post(x))
    # post-LN ends with a LayerNorm: every output row has mean 0 and variance 1 ...
    torch.testing.assert_close(post(x).mean(-1), torch.zeros(2, 5, dtype=torch.float64))
    # ... pre-LN does not normalise its output (the model adds a final LayerNorm).
    assert pre(x).mean(-1).abs().max() > 1e-3


def test_residual_connections_make_a_silent_block_the_identity(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    block = seeded(0, EncoderBlock, 8, 2)
    with torch.no_grad():  # sub-layers that output zero: only the residual path is left
        for linear in (block.self_attn.out_proj, block.ffn.linear2):
            linear.weight.zero_()
            linear.bias.zero_()
    x = randn(4, 2, 5, 8)
    torch.testing.assert_close(block(x), x)


def test_encoder_block_causal_outputs_ignore_the_future(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    block = seeded(0, EncoderBlock, 8, 2).eval()
    x = randn(5, 1, 6, 8)
    changed = x.clone()
    changed[:, 4:] = randn(6, 1, 2, 8)
    with torch.no_grad():
        before, after = block(x, is_causal=True), block(changed, is_causal=True)
        torch.testing.assert_close(before[:, :4], after[:, :4], rtol=0, atol=1e-12)
        assert not torch.allclose(before[:, 4:], after[:, 4:])
        # without the causal flag the early positions do see the change
        assert not torch.allclose(block(x)[:, :4], block(changed)[:, :4])


def test_dropout_acts_in_training_only(randn: Callable[..., torch.Tensor]) -> None:
    torch.manual_seed(0)
    block = EncoderBlock(8, 2, dropout=0.3)
    x = torch.randn(2, 5, 8)
    block.eval()
    twin = EncoderBlock(8, 2)  # the same weights, no dropout at all
    twin.load_state_dict(block.state_dict())
    torch.testing.assert_close(block(x), twin.eval()(x), rtol=0, atol=0)
    block.train()
    assert not torch.allclose(block(x), block(x))
    no_dropout = EncoderBlock(8, 2)
    no_dropout.train()
    torch.testing.assert_close(no_dropout(x), no_dropout.eval()(x))


def test_encoder_block_bad_input(randn: Callable[..., torch.Tensor]) -> None:
    block = EncoderBlock(8, 2)
    with pytest.raises(ValueError, match="d_model"):
        block(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"\(B, T, d_model\)"):
        block(torch.randn(5, 8))
    with pytest.raises(ValueError, match="n_heads"):
        EncoderBlock(8, 3)
    with pytest.raises(ValueError, match="norm_first"):
        EncoderBlock(8, 2, norm_first="pre")
    with pytest.raises(ValueError, match="mask"):
        block(torch.randn(2, 5, 8), torch.ones(4, 4, dtype=torch.bool))
    # a float64 input reached the first LayerNorm and failed inside torch
    with pytest.raises(ValueError, match=r"x must have the block's dtype torch\.float32"):
        block(torch.randn(2, 5, 8, dtype=torch.float64))
    # the name of an encoding is a GPTConfig field; a block takes the encoding itself
    with pytest.raises(ValueError, match="positional must be a PositionalEncoding"):
        EncoderBlock(8, 2, positional="rope")


def test_block_parameter_count() -> None:
    d, f = 16, 40
    block = EncoderBlock(d, 4, f)
    # attention 4 (d^2 + d), feed-forward d f + f + f d + d, two LayerNorms 2 * 2d
    assert sum(p.numel() for p in block.parameters()) == 4 * (d * d + d) + 2 * d * f + f + d + 4 * d
    dec = DecoderBlock(d, 4, f)
    assert sum(p.numel() for p in dec.parameters()) == 8 * (d * d + d) + 2 * d * f + f + d + 6 * d


# ------------------------------------------------------------------ DecoderBlock


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_decoder_block_matches_torch_decoder_layer(
    norm_first: bool,
    seed: int,
    randn: Callable[..., torch.Tensor],
    seeded: Callable[..., nn.Module],
) -> None:
    block = seeded(seed, DecoderBlock, 16, 4, 24, norm_first=norm_first).eval()
    _perturb_norms(block, seed)
    layer = block.to_torch()  # nn.TransformerDecoderLayer with our weights
    assert isinstance(layer, nn.TransformerDecoderLayer)
    assert not layer.training
    assert layer.norm_first == norm_first
    assert layer.self_attn.batch_first
    x, context = randn(seed, 2, 5, 16), randn(seed + 10, 2, 9, 16)
    float_causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    pad = padding_mask([9, 6], 9, per_head=True)  # (B, 1, 1, S): the source's padding
    with torch.no_grad():
        ours = block(x, context, context_mask=pad)
        theirs = layer(x, context, tgt_mask=float_causal, memory_key_padding_mask=~pad[:, 0, 0])
    torch.testing.assert_close(ours, theirs)


def test_decoder_block_is_causal_and_reads_the_context(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    block = seeded(0, DecoderBlock, 8, 2).eval()
    x, context = randn(1, 1, 6, 8), randn(2, 1, 4, 8)
    changed = x.clone()
    changed[:, 3:] += 1.0
    with torch.no_grad():
        torch.testing.assert_close(
            block(x, context)[:, :3], block(changed, context)[:, :3], rtol=0, atol=1e-12
        )
        other_context = context.clone()
        other_context[:, -1] += 1.0  # every target position reads the whole context
        assert (block(x, context) - block(x, other_context)).abs().amax(-1).min() > 0


def test_decoder_block_bad_input(randn: Callable[..., torch.Tensor]) -> None:
    block = DecoderBlock(8, 2)
    with pytest.raises(ValueError, match="context"):
        block(torch.randn(2, 5, 8), torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match="context"):
        block(torch.randn(2, 5, 8), torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match="x"):
        block(torch.randn(2, 5, 7), torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"context must have the block's dtype torch\.float32"):
        block(torch.randn(2, 5, 8), torch.randn(2, 4, 8, dtype=torch.float64))


def test_to_torch_copies_and_does_not_share() -> None:
    block = EncoderBlock(16, 4, 24, dropout=0.1).double()
    layer = block.to_torch()
    assert isinstance(layer, nn.TransformerEncoderLayer)
    assert layer.training  # mode copied
    assert layer.linear1.weight.dtype == torch.float64
    assert layer.dropout.p == 0.1
    with torch.no_grad():
        layer.linear1.weight.zero_()  # a copy: ours is untouched
    assert block.ffn.linear1.weight.abs().sum() > 0
