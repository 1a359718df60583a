"""Tests of attnbook.model: GPTConfig, GPT and the encoder-decoder.

Shapes, causality in every positional mode, that each positional mode really
injects positions (and that they differ), agreement with a GPT built from
``nn.TransformerEncoderLayer``, parameter counts against a closed formula,
weight tying, ``attention_weights`` and bad input.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

import attnbook
from attnbook import GPT, EncoderDecoder, EncoderDecoderConfig, GPTConfig

# The parameters each positional encoding adds to a GPT of context length c and width d (the
# parameter formula's one term per encoding): a new encoding is one entry here.
POSITION_PARAMETERS = {
    "learned": lambda c, d: c * d,  # a (c, d) table
    "sinusoidal": lambda c, d: 0,  # a fixed table, a buffer
    "rope": lambda c, d: 0,
    "alibi": lambda c, d: 0,
}
MODES = list(POSITION_PARAMETERS)


def test_every_registered_positional_encoding_is_tested_here() -> None:
    """The parameter formula below has a term per encoding: a new one must be added."""
    registered = list(attnbook.positional.POSITIONAL_ENCODINGS)
    assert registered == MODES, (
        f"add the new encoding to POSITION_PARAMETERS in this file with the number of parameters "
        f"it adds: registered {registered}, tested {MODES}"
    )


def _config(**overrides: object) -> GPTConfig:
    fields = {"vocab_size": 11, "context_length": 12, "d_model": 16, "n_heads": 4, "n_layers": 2}
    return GPTConfig(**(fields | overrides))


def _ids(seed: int, *shape: int, vocab_size: int = 11) -> torch.Tensor:
    return torch.randint(0, vocab_size, shape, generator=torch.Generator().manual_seed(seed))


def _gpt_parameters(v: int, c: int, d: int, n_layers: int, f: int, positional: str) -> int:
    """The closed formula of the chapter: embeddings + layers + final LayerNorm (head tied)."""
    per_layer = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * (2 * d)
    positions = POSITION_PARAMETERS[positional](c, d)
    return v * d + positions + n_layers * per_layer + 2 * d


# ------------------------------------------------------------------ GPTConfig


def test_config_defaults_and_frozen() -> None:
    config = _config()
    assert config.d_ff == 64  # 4 * d_model
    assert config.dropout == 0.0
    assert config.positional == "learned"
    assert _config(d_ff=24).d_ff == 24
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 32  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vocab_size", 0),
        ("context_length", -1),
        ("d_model", 2.5),
        ("n_heads", 0),
        ("n_layers", True),
        ("d_ff", 0),
        ("dropout", 1.0),
        ("positional", "absolute"),
    ],
)
def test_config_rejects_bad_fields_by_name(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        _config(**{field: value})


def test_config_rejects_impossible_combinations() -> None:
    with pytest.raises(ValueError, match="n_heads"):
        _config(n_heads=3)  # 16 is not a multiple of 3
    assert _config(d_model=12, n_heads=4).d_model == 12  # fine ...
    with pytest.raises(ValueError, match="rope"):
        _config(d_model=12, n_heads=4, positional="rope")  # ... but heads of width 3 cannot rotate
    with pytest.raises(ValueError, match="sinusoidal"):
        _config(d_model=15, n_heads=3, positional="sinusoidal")


# ------------------------------------------------------------------ GPT


@pytest.mark.parametrize("positional", MODES)
def test_gpt_shapes_and_parameter_formula(positional: str) -> None:
    torch.manual_seed(0)
    config = _config(positional=positional, d_ff=40, n_layers=3)
    model = GPT(config)
    assert model(_ids(0, 2, 7)).shape == (2, 7, 11)
    expected = _gpt_parameters(11, 12, 16, 3, 40, positional)
    assert model.num_parameters() == expected
    assert sum(p.numel() for p in model.parameters()) == expected
    no_embeddings = expected - 11 * 16 - POSITION_PARAMETERS[positional](12, 16)
    assert model.num_parameters(include_embeddings=False) == no_embeddings


def test_gpt_parameter_formula_at_the_chapter_10_size() -> None:
    model = GPT(GPTConfig(65, 64, 128, 4, 4))
    assert model.num_parameters() == _gpt_parameters(65, 64, 128, 4, 512, "learned") == 809_856


@pytest.mark.parametrize("positional", MODES)
def test_gpt_is_causal(positional: str) -> None:
    torch.manual_seed(0)
    model = GPT(_config(positional=positional)).eval()
    idx = _ids(1, 2, 10)
    changed = idx.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 11  # every future token replaced
    with torch.no_grad():
        before, after = model(idx), model(changed)
    torch.testing.assert_close(before[:, :6], after[:, :6], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, 6:], after[:, 6:])


def _with_shared_weights(positional: str, n_layers: int = 2) -> GPT:
    """A GPT in the given mode whose shared weights come from one seed-0 'learned' model."""
    torch.manual_seed(0)
    source = GPT(_config(n_layers=n_layers))
    model = GPT(_config(positional=positional, n_layers=n_layers))
    model.load_state_dict(source.state_dict(), strict=False)  # all but the position embedding
    return model.eval()


def test_every_positional_mode_makes_the_model_see_order() -> None:
    # Without positions, one causal layer treats the prefix as a set: the last position's
    # output is unchanged when earlier tokens are permuted. Each mode must break that.
    # (With two layers or more, causal masking alone leaks order: position t sees t + 1 keys.)
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    permuted = torch.tensor([[6, 4, 2, 7, 1, 3, 5, 8]])  # a permutation of the first 7, same last
    for positional in MODES:
        model = _with_shared_weights(positional, n_layers=1)
        with torch.no_grad():
            last, last_permuted = model(idx)[0, -1], model(permuted)[0, -1]
        # (sinusoids change the logits least at this tiny width: well above float32 noise)
        assert (last - last_permuted).abs().max() > 1e-6, positional
    # The control: a learned model whose position vectors are all zero sees no order.
    blind = _with_shared_weights("learned", n_layers=1)
    with torch.no_grad():
        blind.pos_emb.weight.zero_()
        torch.testing.assert_close(blind(idx)[0, -1], blind(permuted)[0, -1])


def test_the_positional_modes_differ() -> None:
    # Untrained, RoPE moves these logits by only 2e-4 from a model without positions (a learned
    # score bias drawn from N(0, 0.02), T5's, by 3e-4), and float32 rounding by 5e-8.
    idx = _ids(3, 2, 9)
    with torch.no_grad():
        logits = {mode: _with_shared_weights(mode)(idx) for mode in MODES}
    for i, a in enumerate(MODES):
        for b in MODES[i + 1 :]:
            assert not torch.allclose(logits[a], logits[b], rtol=0, atol=1e-6), (a, b)


def test_rope_and_alibi_models_run_past_no_learned_table() -> None:
    # learned positions have one row per position up to context_length; the others have none
    assert not list(_with_shared_weights("rope").pos_emb.parameters())
    assert not list(_with_shared_weights("alibi").pos_emb.parameters())
    sinusoidal = _with_shared_weights("sinusoidal")
    assert "pos_emb.table" in dict(sinusoidal.named_buffers())  # a fixed table ...
    assert not any(key.startswith("pos_emb") for key in sinusoidal.state_dict())  # ... not saved


def test_gpt_matches_a_gpt_built_from_torch_encoder_layers() -> None:
    torch.manual_seed(0)
    config = _config(n_layers=3)
    model = GPT(config).double().eval()
    d = config.d_model
    layer = nn.TransformerEncoderLayer(d, config.n_heads, batch_first=True, dtype=torch.float64)
    stack = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False).eval()
    stack.layers = nn.ModuleList(block.to_torch() for block in model.blocks)  # our weights
    idx = _ids(4, 2, 10)
    with torch.no_grad():
        x = model.tok_emb(idx) + model.pos_emb.weight[:10]
        mask = nn.Transformer.generate_square_subsequent_mask(10, dtype=torch.float64)
        theirs = model.norm(stack(x, mask=mask, is_causal=True)) @ model.tok_emb.weight.T
        torch.testing.assert_close(model(idx), theirs)


def test_weights_are_tied() -> None:
    model = GPT(_config())
    assert model.lm_head.weight is model.tok_emb.weight
    names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" not in names  # listed once, under the embedding
    logits = model(_ids(5, 2, 4))
    logits.sum().backward()
    grad = model.tok_emb.weight.grad
    assert grad is not None
    assert grad.abs().sum(-1).min() > 0  # the head gives every token's row a gradient


def test_gpt2_initialisation() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(50, 16, 64, 4, 8))
    assert abs(model.blocks[0].ffn.linear1.weight.std().item() - 0.02) < 0.002
    scaled = model.blocks[0].ffn.linear2.weight.std().item()
    assert abs(scaled - 0.02 / math.sqrt(2 * 8)) < 0.0008
    assert torch.all(model.blocks[0].self_attn.q_proj.bias == 0)
    assert torch.all(model.norm.weight == 1)


def _stream_variance_growth(d_model: int, n_layers: int) -> float:
    """Variance of the residual stream after the last block over that of the embeddings."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(50, 16, d_model, 4, n_layers)).eval()
    ids = torch.randint(0, 50, (4, 16))
    with torch.no_grad():
        x = model.tok_emb(ids) + model.pos_emb.weight  # (B, T, D)
        start = x.var().item()
        for block in model.blocks:
            x = block(x, is_causal=True)
    return x.var().item() / start


def test_gpt2_initialisation_keeps_the_stream_variance_level_in_depth() -> None:
    """init_gpt2's docstring: level in depth (2 or 8 layers), growing with the width."""
    shallow, deep = _stream_variance_growth(64, 2), _stream_variance_growth(64, 8)
    assert 1.2 < shallow < 2.0  # about 1.5 at d_model = 64
    assert abs(deep / shallow - 1) < 0.2  # 4 times the writes, not 4 times the variance
    assert _stream_variance_growth(256, 2) > 5 * shallow  # wider: larger writes


@pytest.mark.parametrize("positional", MODES)
def test_attention_weights(positional: str) -> None:
    torch.manual_seed(0)
    model = GPT(_config(positional=positional, n_layers=3)).eval()
    idx = _ids(6, 2, 9)
    with torch.no_grad():
        before = model(idx)
    weights = model.attention_weights(idx)
    assert len(weights) == 3
    for w in weights:
        assert w.shape == (2, 4, 9, 9)
        assert not w.requires_grad
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 9))
        assert torch.all(w.triu(diagonal=1) == 0)  # causal: nothing above the diagonal
    with torch.no_grad():
        torch.testing.assert_close(model(idx), before)  # asking for weights changes nothing


def test_attention_weights_are_the_first_layers_softmax() -> None:
    torch.manual_seed(0)
    model = GPT(_config()).double().eval()
    idx = _ids(7, 1, 6)
    block = model.blocks[0]
    with torch.no_grad():
        h = block.norm1(model.tok_emb(idx) + model.pos_emb.weight[:6])  # (1, T, D)
        q = block.self_attn.q_proj(h).view(1, 6, 4, 4).transpose(1, 2)  # (1, H, T, Dh)
        k = block.self_attn.k_proj(h).view(1, 6, 4, 4).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / 2.0  # sqrt(d_head) = 2
        expected = torch.softmax(scores.masked_fill(~attnbook.causal_mask(6), -math.inf), -1)
    torch.testing.assert_close(model.attention_weights(idx)[0], expected)


def test_dropout_in_training_mode_only() -> None:
    torch.manual_seed(0)
    model = GPT(_config(dropout=0.2))
    idx = _ids(8, 2, 5)
    model.train()
    assert not torch.allclose(model(idx), model(idx))
    model.eval()
    twin = GPT(_config())  # the same weights, no dropout at all
    twin.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(idx), twin.eval()(idx), rtol=0, atol=0)


def test_dropout_reaches_the_embeddings_in_training() -> None:
    """Dropout acts on the embeddings too (GPT-2's embd_pdrop), not only inside the blocks: in
    training mode the first block reads zeros where entries were dropped, the rest doubled."""
    torch.manual_seed(0)
    model = GPT(_config(dropout=0.5))
    seen = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    idx = _ids(8, 2, 5)
    with torch.no_grad():
        model.train()(idx)
        model.eval()(idx)
    dropped, kept = seen  # (B, T, D) each: the embeddings the first block read
    assert (dropped == 0).any()
    assert not (kept == 0).any()
    torch.testing.assert_close(dropped[dropped != 0], 2 * kept[dropped != 0])


def test_a_cached_forward_pass_must_fit_the_context() -> None:
    """model(idx, cache=cache) refuses new tokens that would run past context_length, also with
    rotary positions, which have no table of positions to run out of."""
    model = GPT(_config(positional="rope")).eval()
    _, cache = model.prefill(_ids(3, 1, 10))
    with pytest.raises(ValueError, match="fit the context"):
        model(_ids(4, 1, 3), cache=cache)  # 10 + 3 positions > context_length = 12
    assert model(_ids(4, 1, 2), cache=cache).shape == (1, 2, 11)  # 10 + 2 fit


@pytest.mark.parametrize(
    ("idx", "match"),
    [
        (torch.zeros(2, 13, dtype=torch.long), "context_length = 12"),
        (torch.full((2, 3), 11), r"\[0, 11\)"),
        (torch.full((2, 3), -1), r"\[0, 11\)"),
        (torch.zeros(2, 3, dtype=torch.int32), "int64"),
        (torch.zeros(2, 3), "int64"),
        (torch.zeros(3, dtype=torch.long), r"\(B, T\)"),
        (torch.zeros(2, 0, dtype=torch.long), r"1 <= T"),
        ([[1, 2]], "torch tensor"),
    ],
)
def test_gpt_bad_input(idx: object, match: str) -> None:
    model = GPT(_config())
    with pytest.raises(ValueError, match=match):
        model(idx)
    with pytest.raises(ValueError, match=match):
        model.attention_weights(idx)


def test_gpt_needs_a_config() -> None:
    with pytest.raises(ValueError, match="GPTConfig"):
        GPT({"vocab_size": 11})  # type: ignore[arg-type]


# ------------------------------------------------------------------ EncoderDecoder


def _ed_config(**overrides: object) -> EncoderDecoderConfig:
    fields = {
        "src_vocab_size": 13,
        "tgt_vocab_size": 11,
        "context_length": 10,
        "d_model": 16,
        "n_heads": 4,
        "n_encoder_layers": 2,
        "n_decoder_layers": 3,
    }
    return EncoderDecoderConfig(**(fields | overrides))


def test_encoder_decoder_shapes_and_parameter_formula() -> None:
    torch.manual_seed(0)
    model = EncoderDecoder(_ed_config(d_ff=24))
    src, tgt = _ids(9, 2, 8, vocab_size=13), _ids(10, 2, 5)
    assert model(src, tgt).shape == (2, 5, 11)
    assert model.encode(src).shape == (2, 8, 16)
    d, f = 16, 24
    attention, ffn, norm = 4 * (d * d + d), 2 * d * f + f + d, 2 * d
    encoder = 2 * (attention + ffn + 2 * norm) + norm
    decoder = 3 * (2 * attention + ffn + 3 * norm) + norm
    assert model.num_parameters() == 13 * d + 11 * d + encoder + decoder
    assert model.lm_head.weight is model.tgt_emb.weight


def test_encoder_decoder_normalises_the_encoder_output_and_the_head_input() -> None:
    """Pre-LN stacks end with a norm: the encoder's output (the context every cross-attention
    reads) and the decoder's last stream before the tied head are normalised (at init: mean 0,
    variance 1 per position)."""
    torch.manual_seed(0)
    model = EncoderDecoder(_ed_config()).eval()
    src, tgt = _ids(9, 2, 8, vocab_size=13), _ids(10, 2, 5)
    seen = []
    model.lm_head.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model(src, tgt)
        context = model.encode(src)
    for x in (context, seen[0]):  # (B, S, D), (B, T, D)
        torch.testing.assert_close(x.mean(-1), torch.zeros(x.shape[:2]), atol=1e-5, rtol=0)
        var = x.var(-1, unbiased=False)
        torch.testing.assert_close(var, torch.ones(x.shape[:2]), atol=1e-3, rtol=0)


def test_encoder_decoder_causal_target_bidirectional_source_and_padding() -> None:
    torch.manual_seed(0)
    model = EncoderDecoder(_ed_config()).eval()
    src, tgt = _ids(11, 2, 8, vocab_size=13), _ids(12, 2, 6)
    lengths = torch.tensor([8, 5])
    src_mask = torch.arange(8)[None, :] < lengths[:, None]  # (B, S), True = real token
    with torch.no_grad():
        base = model(src, tgt, src_mask)
        later_tgt = tgt.clone()
        later_tgt[:, 4:] = (later_tgt[:, 4:] + 1) % 11
        torch.testing.assert_close(model(src, later_tgt, src_mask)[:, :4], base[:, :4])
        last_src = src.clone()
        last_src[0, -1] = (last_src[0, -1] + 1) % 13  # a real token of sequence 0
        assert not torch.allclose(model(last_src, tgt, src_mask)[0, 0], base[0, 0])
        junk = src.clone()
        junk[1, 5:] = (junk[1, 5:] + 3) % 13  # sequence 1's padding
        torch.testing.assert_close(model(junk, tgt, src_mask), base)
        assert not torch.allclose(model(junk, tgt)[1], model(src, tgt)[1])  # unmasked: it leaks


def test_encoder_decoder_bad_input() -> None:
    model = EncoderDecoder(_ed_config())
    src, tgt = _ids(13, 2, 8, vocab_size=13), _ids(14, 2, 6)
    with pytest.raises(ValueError, match="tgt"):
        model(src, torch.full((2, 3), 11))
    with pytest.raises(ValueError, match="src"):
        model(torch.zeros(2, 11, dtype=torch.long), tgt)
    with pytest.raises(ValueError, match="batch"):
        model(src, tgt[:1])
    with pytest.raises(ValueError, match="src_mask"):
        model(src, tgt, torch.ones(2, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="n_decoder_layers"):
        _ed_config(n_decoder_layers=0)


@pytest.mark.parametrize("d_model", [32, 64, 512])
def test_sinusoidal_positions_start_larger_than_the_scaled_tokens(d_model: int) -> None:
    """What SinusoidalPositions documents: with GPT-2's 0.02 kept, the sqrt(d) scale leaves the
    sinusoids (rms 1/sqrt(2)) 0.71 / (0.02 sqrt(d)) times larger: 6.2x at d = 32, 1.6x at 512."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(1000, 64, d_model, 4, 1, positional="sinusoidal"))
    tokens = model.tok_emb.weight * model.pos_emb.scale  # (V, D), as they enter the model
    positions = model.pos_emb.table  # (C, D)
    ratio = (positions.pow(2).mean().sqrt() / tokens.pow(2).mean().sqrt()).item()
    expected = math.sqrt(0.5) / (0.02 * math.sqrt(d_model))
    assert abs(ratio / expected - 1) < 0.05
    assert round(expected, 1) == {32: 6.2, 64: 4.4, 512: 1.6}[d_model]
    assert model.lm_head.weight is model.tok_emb.weight  # tied


def test_a_larger_embedding_init_would_copy_the_input_token() -> None:
    """Why SinusoidalPositions keeps 0.02: std d^(-1/2) with a tied head gives each position a
    logit of about sqrt(d) / 1.2 for its own input token, far above the rest."""
    for d_model, low, high in ((32, 4.0, 5.5), (512, 17.0, 21.0)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(1000, 64, d_model, 4, 2, positional="sinusoidal")).eval()
        idx = torch.randint(0, 1000, (4, 64))
        with torch.no_grad():
            kept = model(idx).gather(-1, idx[..., None]).mean().item()
            nn.init.normal_(model.tok_emb.weight, std=d_model**-0.5)
            logits = model(idx)  # (B, T, V)
        own = logits.gather(-1, idx[..., None]).mean().item()
        assert low < own < high, own
        assert own > kept + 3.0  # with 0.02: 0.1 at d = 32, 6 at d = 512
        assert 0.8 < logits.std().item() < 1.3  # the other logits are of size 1


def test_encoder_decoder_initialisation() -> None:
    """Decoder blocks write three times into the residual stream, encoder blocks twice."""
    torch.manual_seed(0)
    c = _ed_config(d_model=64, n_encoder_layers=2, n_decoder_layers=6, src_vocab_size=500)
    model = EncoderDecoder(c)

    def std(weights: list[torch.Tensor]) -> float:
        return torch.cat([w.flatten() for w in weights]).std().item()

    encoder_writes = [
        w for b in model.encoder for w in (b.self_attn.out_proj.weight, b.ffn.linear2.weight)
    ]
    decoder_writes = [
        w
        for b in model.decoder
        for w in (b.self_attn.out_proj.weight, b.cross_attn.out_proj.weight, b.ffn.linear2.weight)
    ]
    assert abs(std(encoder_writes) / (0.02 / math.sqrt(2 * 2)) - 1) < 0.05
    assert abs(std(decoder_writes) / (0.02 / math.sqrt(3 * 6)) - 1) < 0.05
    assert abs(std([model.decoder[0].ffn.linear1.weight]) - 0.02) < 0.001
    assert abs(model.src_emb.weight.std().item() - 0.02) < 0.001
    assert model.lm_head.weight is model.tgt_emb.weight
