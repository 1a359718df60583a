"""Tests of the block's variants: RMSNorm, SwiGLU, GELU's tanh form, and the GPTConfig fields choosing them.

Each new layer against a line-by-line reference written here; the default
GPTConfig against values recorded before the variants existed (same
parameters, same state_dict names, same initialisation, same logits), so the
stored outputs of the chapters cannot drift; the GPT-2 and Llama presets;
bad settings.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnbook
from attnbook import GPT, GPTConfig, RMSNorm, SwiGLU, load_checkpoint, save_checkpoint, set_seed
from attnbook.block import (
    FEED_FORWARDS,
    NORMS,
    BlockConfig,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
)
from attnbook.multihead import AttentionConfig

# ------------------------------------------------------------------ RMSNorm


def reference_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Line by line: the root mean square of each row, divide, scale (statistics in float32)."""
    x32 = x.to(torch.float32) if x.dtype != torch.float64 else x
    mean_square = (x32 * x32).sum(dim=-1, keepdim=True) / x.shape[-1]
    normed = x32 / torch.sqrt(mean_square + eps)
    return weight * normed.to(x.dtype)


@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.5])
def test_rms_norm_matches_the_reference(eps: float, randn: Callable[..., torch.Tensor]) -> None:
    norm = RMSNorm(6, eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * randn(0, 6))
    x = randn(1, 2, 3, 6) * 4 + 1
    torch.testing.assert_close(norm(x), reference_rms_norm(x, norm.weight, eps))
    layer_norm = F.layer_norm(x, (6,), norm.weight, None, eps)  # subtracts the mean: different
    assert not torch.allclose(norm(x), layer_norm, atol=1e-3)


def test_rms_norm_has_one_weight_at_one_and_keeps_bfloat16(
    randn: Callable[..., torch.Tensor],
) -> None:
    norm = RMSNorm(8)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    assert torch.equal(norm.weight, torch.ones(8))
    assert norm.eps == 1e-5
    y = norm(torch.full((2, 8), 3.0))
    torch.testing.assert_close(y, torch.ones(2, 8))  # a constant row has root mean square 3
    x = randn(2, 4, 8, dtype=torch.float32) * 100
    out = RMSNorm(8).to(torch.bfloat16)(x.to(torch.bfloat16))  # a bfloat16 model, as Llama's
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), norm(x), atol=0.02, rtol=0.02)
    assert torch.equal(norm(torch.zeros(3, 8)), torch.zeros(3, 8))  # eps: zeros, not NaN


@pytest.mark.parametrize(
    ("args", "match"),
    [((0,), "d_model"), ((8.0,), "d_model"), ((8, 0.0), "eps"), ((8, -1e-5), "eps")],
)
def test_rms_norm_rejects_bad_settings(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RMSNorm(*args)


def test_rms_norm_rounds_to_the_input_dtype_before_its_weight(
    randn: Callable[..., torch.Tensor],
) -> None:
    """As Llama's: the normalised vector is cast to the input's dtype, then the weight multiplies
    it, so a float32 norm given bfloat16 input returns float32 (not the product rounded)."""
    norm = RMSNorm(8)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * randn(0, 8, dtype=torch.float32))
    x = (randn(1, 3, 8, dtype=torch.float32) * 4).to(torch.bfloat16)
    out = norm(x)
    assert out.dtype == torch.float32
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + norm.eps)
    torch.testing.assert_close(out, norm.weight * normed.to(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("x", [torch.zeros(2, 7), torch.zeros(2, 8, dtype=torch.long), [1.0] * 8])
def test_rms_norm_rejects_bad_input(x: object) -> None:
    with pytest.raises(ValueError, match="x must"):
        RMSNorm(8)(x)  # type: ignore[arg-type]


# ------------------------------------------------------------------ SwiGLU


def test_swiglu_matches_the_reference(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    ffn = seeded(0, SwiGLU, 6, 10)
    assert [n for n, _ in ffn.named_parameters()] == ["gate.weight", "up.weight", "down.weight"]
    x = randn(1, 2, 3, 6)
    gate = x @ ffn.gate.weight.T
    silu = gate * (1 / (1 + torch.exp(-gate)))  # SiLU written out: z * sigmoid(z)
    expected = (silu * (x @ ffn.up.weight.T)) @ ffn.down.weight.T
    torch.testing.assert_close(ffn(x), expected)
    ungated = F.gelu(x @ ffn.up.weight.T) @ ffn.down.weight.T
    assert not torch.allclose(ffn(x), ungated)


def test_swiglu_with_biases_and_dropout(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    ffn = seeded(0, SwiGLU, 4, 8, bias=True, dropout=0.5)
    x = randn(2, 5, 4)
    g, u, d = ffn.gate, ffn.up, ffn.down
    expected = (F.silu(x @ g.weight.T + g.bias) * (x @ u.weight.T + u.bias)) @ d.weight.T + d.bias
    torch.testing.assert_close(ffn.eval()(x), expected)
    ffn.train()
    assert not torch.allclose(ffn(x), expected)  # dropout on the hidden units in training


@pytest.mark.parametrize(("d_model", "d_ff"), [(64, 176), (96, 256), (384, 1024), (768, 2048)])
def test_swiglu_default_width_keeps_a_gelu_networks_parameters(d_model: int, d_ff: int) -> None:
    ffn = SwiGLU(d_model)
    assert ffn.d_ff == SwiGLU.default_d_ff(d_model) == d_ff
    assert d_ff % 8 == 0
    assert 8 * d_model / 3 <= d_ff < 8 * d_model / 3 + 8
    gelu = FeedForward(d_model, bias=False)
    ratio = sum(p.numel() for p in ffn.parameters()) / sum(p.numel() for p in gelu.parameters())
    assert 1.0 <= ratio < 1.04


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 0}, "d_model"),
        ({"d_ff": 0}, "d_ff"),
        ({"bias": 1}, "bias"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_swiglu_rejects_bad_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SwiGLU(**{"d_model": 8, **kwargs})


def test_swiglu_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="x must have shape"):
        SwiGLU(8)(torch.zeros(2, 3, 7))


def test_gelu_tanh_is_gpt2s_formula(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    ffn = seeded(0, FeedForward, 6, 10, approximate="tanh")
    x = randn(1, 3, 6) * 3
    h = x @ ffn.linear1.weight.T + ffn.linear1.bias
    gelu_new = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    torch.testing.assert_close(ffn(x), gelu_new @ ffn.linear2.weight.T + ffn.linear2.bias)
    assert "approximate='tanh'" in repr(ffn)
    assert "approximate" not in repr(FeedForward(6))
    with pytest.raises(ValueError, match="approximate"):
        FeedForward(6, approximate="sigmoid")


# ------------------------------------------------------------------ blocks and their config


def test_the_tables_hold_the_variants() -> None:
    assert set(NORMS) == {"layer", "rms"}
    assert set(FEED_FORWARDS) == {"gelu", "gelu_tanh", "swiglu"}
    assert isinstance(NORMS["rms"](8, eps=1e-6, bias=True), RMSNorm)
    assert NORMS["layer"](8, eps=1e-6, bias=False).bias is None
    assert isinstance(FEED_FORWARDS["swiglu"](8, None, dropout=0.0, bias=False), SwiGLU)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"norm": "batch"}, "norm must be one of"),
        ({"norm": None}, "norm must be one of"),
        ({"ffn": "relu"}, "ffn must be one of"),
        ({"ffn": ["gelu"]}, "ffn must be one of"),
        ({"norm_eps": 0.0}, "norm_eps"),
        ({"d_ff": -1}, "d_ff"),
        ({"norm_first": 1}, "norm_first"),
    ],
)
def test_block_config_rejects_bad_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BlockConfig(AttentionConfig(8, 2), **kwargs)
    with pytest.raises(ValueError, match=match):
        EncoderBlock(8, 2, **kwargs)
    with pytest.raises(ValueError, match="attention must be an AttentionConfig"):
        BlockConfig((8, 2))  # type: ignore[arg-type]


def test_a_llama_block_is_rmsnorm_swiglu_rope_without_biases(
    randn: Callable[..., torch.Tensor],
) -> None:
    torch.manual_seed(0)
    block = EncoderBlock(
        16, 4, rope_base=10000.0, n_kv_heads=2, bias=False, norm="rms", ffn="swiglu", norm_eps=1e-6
    ).double()
    assert isinstance(block.norm1, RMSNorm)
    assert isinstance(block.ffn, SwiGLU)
    assert block.norm1.eps == 1e-6
    assert block.ffn.d_ff == SwiGLU.default_d_ff(16)
    assert not any(name.endswith("bias") for name, _ in block.named_parameters())
    assert block.self_attn.k_proj.weight.shape == (8, 16)  # 2 key/value heads of width 4
    with torch.no_grad():
        block.norm1.weight.copy_(1 + 0.3 * randn(3, 16))
        block.norm2.weight.copy_(1 + 0.3 * randn(4, 16))
    x = randn(5, 2, 6, 16)
    n1 = block.norm1(x)  # one tensor three times: self-attention, so RoPE may rotate
    h = x + block.self_attn(n1, n1, n1, is_causal=True)[0]
    expected = h + block.ffn(reference_rms_norm(h, block.norm2.weight, 1e-6))
    torch.testing.assert_close(block(x, is_causal=True), expected)
    rebuilt = EncoderBlock.from_config(block.config)
    assert rebuilt.config == block.config
    with pytest.raises(ValueError, match="norm='layer' and ffn='gelu'"):
        block.to_torch()


def test_a_decoder_block_takes_grouped_query_attention_and_the_variants(
    randn: Callable[..., torch.Tensor],
) -> None:
    torch.manual_seed(0)
    block = DecoderBlock(16, 4, n_kv_heads=1, norm="rms", ffn="gelu_tanh", bias=False).eval()
    assert block.self_attn.n_kv_heads == block.cross_attn.n_kv_heads == 1
    assert isinstance(block.norm3, RMSNorm)
    assert block.ffn.approximate == "tanh"
    out = block(torch.randn(2, 5, 16), torch.randn(2, 7, 16))
    assert out.shape == (2, 5, 16)
    assert torch.isfinite(out).all()
    assert DecoderBlock.from_config(block.config).config == block.config
    with pytest.raises(ValueError, match="rope_base"):
        DecoderBlock.from_config(BlockConfig(AttentionConfig(16, 4, rope_base=10000.0)))


def test_a_block_without_biases_has_none_in_its_layernorms_and_matches_pytorch(
    randn: Callable[..., torch.Tensor], seeded: Callable[..., nn.Module]
) -> None:
    block = seeded(0, EncoderBlock, 16, 4, bias=False, norm_eps=1e-6).eval()
    assert block.norm1.bias is None
    assert block.norm1.eps == 1e-6
    theirs = block.to_torch()
    x = randn(1, 2, 5, 16)
    torch.testing.assert_close(block(x), theirs(x))


# ------------------------------------------------------------------ GPTConfig and GPT

# Recorded with the package as it was before norm/ffn/bias/tie_embeddings/norm_eps/rope_base
# existed (GPTConfig(11, 16, 32, 4, 2, positional=..., n_kv_heads=...), set_seed(0), ids
# arange(12) % 11 twice): parameter count, sum of all parameters (the initialisation and its use
# of the random numbers), sum of the logits and the last position's first four logits.
BEFORE = {
    ("learned", None): (26336, 156.4143620742, 8.6912352201, [0.468634, 0.051034, -0.071893, 0.219723]),
    ("learned", 2): (24224, 155.5619360475, 9.3648066595, [0.365906, 0.293799, -0.07135, 0.132852]),
    ("rope", None): (25824, 156.0160925439, 10.5187665448, [0.612982, -0.025707, 0.01277, 0.051181]),
    ("alibi", 2): (23712, 155.9981154255, 7.5934408270, [0.613434, -0.056392, 0.087471, -0.089523]),
}  # fmt: skip
BEFORE_KEYS = "19a250751275e167"  # sha256 of "|".join(state_dict keys) for positional="learned"
# (since q, k and v are stacked in in_proj; the weights and logits above did not change)


@pytest.mark.parametrize(("positional", "n_kv_heads"), list(BEFORE))
def test_the_default_gpt_is_unchanged(positional: str, n_kv_heads: int | None) -> None:
    set_seed(0)
    config = GPTConfig(11, 16, 32, 4, 2, positional=positional, n_kv_heads=n_kv_heads)
    model = GPT(config).eval()
    n_params, param_sum, logit_sum, last = BEFORE[(positional, n_kv_heads)]
    assert model.num_parameters() == n_params
    total = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum().item()
    assert total == pytest.approx(param_sum, abs=1e-6)
    with torch.no_grad():
        logits = model(torch.arange(12).remainder(11)[None].repeat(2, 1))
    assert logits.double().sum().item() == pytest.approx(logit_sum, abs=1e-4)
    torch.testing.assert_close(logits[0, -1, :4], torch.tensor(last), atol=1e-5, rtol=0)
    if positional == "learned":
        digest = hashlib.sha256("|".join(model.state_dict()).encode()).hexdigest()[:16]
        assert digest == BEFORE_KEYS
        assert model.lm_head.weight is model.tok_emb.weight
    assert "norm" not in repr(config)
    assert "bias" not in repr(config)
    assert repr(config).startswith("GPTConfig(vocab_size=11, context_length=16, d_model=32")


def test_a_variant_gpt_has_the_parts_its_config_names() -> None:
    set_seed(0)
    config = GPTConfig(
        50, 16, 32, 4, 2, norm="rms", ffn="swiglu", bias=False, tie_embeddings=False, norm_eps=1e-6
    )
    model = GPT(config)
    assert config.d_ff == SwiGLU.default_d_ff(32) == 88
    assert isinstance(model.norm, RMSNorm)
    assert model.norm.eps == 1e-6
    assert isinstance(model.blocks[1].ffn, SwiGLU)
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())
    assert model.lm_head.weight is not model.tok_emb.weight
    D, F_, V, C = 32, 88, 50, 16
    per_block = 4 * D * D + 3 * D * F_ + 2 * D  # attention, SwiGLU, two RMSNorm weights
    assert model.num_parameters() == 2 * V * D + C * D + 2 * per_block + D
    assert model.num_parameters(include_embeddings=False) == V * D + 2 * per_block + D
    down = model.blocks[0].ffn.down.weight.std().item()  # a residual write: scaled down at init
    assert down == pytest.approx(0.02 / math.sqrt(4), rel=0.15)
    assert "norm='rms', ffn='swiglu', bias=False, tie_embeddings=False, norm_eps=1e-06" in repr(
        config
    )


def test_presets_say_what_they_are() -> None:
    gpt2 = GPTConfig.gpt2(50257, 1024, 768, 12, 12)
    assert (gpt2.positional, gpt2.norm, gpt2.ffn, gpt2.bias, gpt2.tie_embeddings) == (
        "learned",
        "layer",
        "gelu_tanh",
        True,
        True,
    )
    assert gpt2.d_ff == 3072
    assert gpt2.norm_eps == 1e-5
    assert GPT(GPTConfig.gpt2(100, 32, 64, 4, 2)).num_parameters() == (
        100 * 64 + 32 * 64 + 2 * (4 * 64 * 64 + 4 * 64 + 2 * 64 * 256 + 256 + 64 + 4 * 64) + 2 * 64
    )
    llama = GPTConfig.llama(32000, 4096, 4096, 32, 32, n_kv_heads=8, rope_base=500000.0)
    assert (llama.positional, llama.norm, llama.ffn, llama.bias, llama.tie_embeddings) == (
        "rope",
        "rms",
        "swiglu",
        False,
        False,
    )
    assert llama.n_kv_heads == 8
    assert llama.rope_base == 500000.0
    assert llama.norm_eps == 1e-5
    assert GPTConfig.llama(100, 32, 64, 4, 2, d_ff=100).d_ff == 100
    assert GPTConfig.gpt2(100, 32, 64, 4, 2, dropout=0.1).dropout == 0.1
    assert "Radford" in GPTConfig.gpt2.__doc__
    assert "Touvron" in GPTConfig.llama.__doc__


def test_the_rope_base_reaches_the_attention() -> None:
    set_seed(0)
    model = GPT(GPTConfig.llama(20, 16, 32, 4, 1, rope_base=500000.0))
    assert model.pos_emb.base == 500000.0
    assert model.blocks[0].self_attn.positional is model.pos_emb
    idx = torch.arange(16)[None] % 20
    other = GPT(GPTConfig.llama(20, 16, 32, 4, 1))
    other.load_state_dict(model.state_dict())
    assert not torch.allclose(model(idx), other(idx))  # a different base: different logits


def test_a_llama_style_model_generates_the_same_with_and_without_the_cache() -> None:
    set_seed(0)
    model = GPT(GPTConfig.llama(30, 24, 32, 4, 2, n_kv_heads=2)).eval()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    cached = model.generate(prompt, 12, temperature=0.0)
    assert torch.equal(cached, model.generate(prompt, 12, temperature=0.0, use_cache=False))


def test_a_variant_checkpoint_round_trips(tmp_path: object) -> None:
    set_seed(0)
    model = GPT(GPTConfig.llama(30, 16, 32, 4, 2, n_kv_heads=2, rope_base=500000.0)).eval()
    loaded = load_checkpoint(save_checkpoint(tmp_path, model))
    assert loaded.config == model.config
    idx = torch.arange(10)[None]
    torch.testing.assert_close(loaded(idx), model(idx))
    plain = GPTConfig(11, 16, 32, 4, 2)
    assert set(plain.to_dict()) == {
        "vocab_size",
        "context_length",
        "d_model",
        "n_heads",
        "n_layers",
        "d_ff",
        "dropout",
        "positional",
    }


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"norm": "batch"}, "norm must be one of"),
        ({"ffn": "relu"}, "ffn must be one of"),
        ({"bias": "yes"}, "bias"),
        ({"tie_embeddings": 1}, "tie_embeddings"),
        ({"norm_eps": -1.0}, "norm_eps"),
        ({"norm_eps": "1e-5"}, "norm_eps"),
        ({"rope_base": 1.0}, "rope_base"),
        ({"rope_base": None}, "rope_base"),
        ({"positional": ["rope"]}, "positional"),
    ],
)
def test_gpt_config_rejects_bad_variants(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GPTConfig(11, 16, 32, 4, 2, **kwargs)


def test_the_variants_are_public() -> None:
    assert attnbook.RMSNorm is RMSNorm
    assert attnbook.SwiGLU is SwiGLU
    assert isinstance(GPT(GPTConfig(11, 16, 32, 4, 1, norm="rms")).norm, nn.Module)
