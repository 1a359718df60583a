"""Tests of GPT.from_hf: small random Hugging Face GPT-2 and Llama models copied into attnbook.GPT.

Offline: every model is built here from a config (no download). Weights are
redrawn larger than the models' own initialisation (norm gains, biases and
all), so that a weight copied to the wrong place changes the logits visibly;
the logits must then agree within 1e-4 in float32, greedy generation with
attnbook's KV cache must give ``transformers``' own tokens, and settings the
book's model does not have must raise ``ValueError`` naming them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never download

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

from attnbook import GPT, apply_rope  # noqa: E402
from attnbook.pretrained import _rope_base, from_hf, interleave_rope_rows  # noqa: E402

VOCAB, CONTEXT = 100, 64


def _redraw(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every weight random and of size ~1/sqrt(fan-in); norm gains near 1, biases nonzero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.ndim == 1:
                p.copy_(1 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5 if "wte" not in name else noise * 0.5)
    return model.eval()


def gpt2(seed: int = 0, **overrides: object) -> GPT2LMHeadModel:
    settings = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=CONTEXT)
    settings.update(bos_token_id=0, eos_token_id=None, pad_token_id=0)
    settings.update(overrides)
    torch.manual_seed(seed)
    return _redraw(GPT2LMHeadModel(GPT2Config(**settings)), seed)


def llama(seed: int = 0, **overrides: object) -> LlamaForCausalLM:
    settings = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=176, num_hidden_layers=2)
    settings.update(num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=CONTEXT)
    settings.update(bos_token_id=0, eos_token_id=None, pad_token_id=0)
    settings.update(overrides)
    torch.manual_seed(seed)
    return _redraw(LlamaForCausalLM(LlamaConfig(**settings)), seed)


def _ids(seed: int, batch: int = 2, length: int = 40) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def max_logit_diff(hf: torch.nn.Module, ours: GPT, idx: torch.Tensor) -> float:
    with torch.no_grad():
        theirs = hf(idx).logits  # (B, T, V)
        mine = ours(idx)
    assert mine.shape == theirs.shape
    assert theirs.std() > 0.5  # the logits are far from zero: the comparison means something
    return (mine - theirs).abs().max().item()


MODELS = {
    "gpt2": lambda: gpt2(),
    "gpt2-untied": lambda: gpt2(6, tie_word_embeddings=False),
    "gpt2-exact-gelu-untied": lambda: gpt2(
        1, activation_function="gelu", tie_word_embeddings=False
    ),
    "gpt2-n_inner-eps": lambda: gpt2(2, n_inner=96, layer_norm_epsilon=1e-3),
    "gpt2-pytorch-tanh-gelu": lambda: gpt2(7, activation_function="gelu_pytorch_tanh"),
    "llama": lambda: llama(),
    "llama-gqa-tied": lambda: llama(3, num_key_value_heads=2, tie_word_embeddings=True),
    "llama-mqa-theta": lambda: llama(4, num_key_value_heads=1, rope_theta=500000.0),
    "llama-eps": lambda: llama(5, rms_norm_eps=1e-2, num_hidden_layers=3),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_equal_transformers(name: str) -> None:
    hf = MODELS[name]()
    ours = from_hf(hf)
    assert not ours.training
    assert max_logit_diff(hf, ours, _ids(0)) < 1e-4
    hf_tied = hf.lm_head.weight is hf.get_input_embeddings().weight
    assert (ours.lm_head.weight is ours.tok_emb.weight) == hf_tied


def test_the_configs_map_field_by_field() -> None:
    c = from_hf(gpt2(2, n_inner=96, layer_norm_epsilon=1e-3)).config
    assert (c.vocab_size, c.context_length, c.d_model, c.n_heads, c.n_layers) == (
        VOCAB,
        CONTEXT,
        64,
        4,
        2,
    )
    assert (c.d_ff, c.norm_eps, c.ffn, c.norm, c.positional, c.bias) == (
        96,
        1e-3,
        "gelu_tanh",
        "layer",
        "learned",
        True,
    )
    c = from_hf(llama(4, num_key_value_heads=1, rope_theta=500000.0, rms_norm_eps=1e-5)).config
    assert (c.n_kv_heads, c.rope_base, c.norm_eps, c.d_ff, c.tie_embeddings) == (
        1,
        500000.0,
        1e-5,
        176,
        False,
    )
    assert (c.norm, c.ffn, c.positional, c.bias) == ("rms", "swiglu", "rope", False)
    assert from_hf(llama()).config.n_kv_heads is None  # as many key/value heads as heads


# Random tied GPT-2s repeat their last token (its embedding scores itself highest): untied ones
# make varied sequences, which a generation test needs.
GENERATING = ["gpt2-untied", "gpt2-exact-gelu-untied", "llama", "llama-gqa-tied", "llama-mqa-theta"]


@pytest.mark.parametrize("name", GENERATING)
def test_greedy_generation_with_the_cache_matches_transformers(name: str) -> None:
    hf = MODELS[name]()
    ours = from_hf(hf)
    prompt = _ids(7, batch=2, length=6)
    with torch.no_grad():
        theirs = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=20,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    mine = ours.generate(prompt, 20, temperature=0.0, use_cache=True)
    assert torch.equal(mine, theirs)
    assert len(set(mine[:, 6:].flatten().tolist())) > 3  # not one token repeated


def test_the_rope_row_order_is_what_makes_llama_agree() -> None:
    """Without the interleaving (copying q/k rows as they are) the logits are far off."""
    hf = llama()
    ours = from_hf(hf)
    with torch.no_grad():
        for block, layer in zip(ours.blocks, hf.model.layers):
            block.self_attn.q_proj.weight.copy_(layer.self_attn.q_proj.weight)
            block.self_attn.k_proj.weight.copy_(layer.self_attn.k_proj.weight)
    assert max_logit_diff(hf, ours, _ids(0)) > 1e-2


def test_gpt2s_tanh_gelu_is_needed() -> None:
    hf = gpt2()
    ours = from_hf(hf)
    for block in ours.blocks:
        block.ffn.approximate = "none"  # exact GELU instead of GPT-2's gelu_new
    assert max_logit_diff(hf, ours, _ids(0)) > 1e-4


def rotate_half_rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Llama's convention written out: feature i turns with feature i + d/2, frequency base^(-2i/d)."""
    T, d = x.shape[-2:]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * freqs  # (T, d/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # (T, d)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-second, first], dim=-1) * sin


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_interleaving_rows_turns_half_split_rope_into_the_books(base: float) -> None:
    H, Dh, D, T = 3, 8, 5, 7
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(H * Dh, D, generator=g, dtype=torch.float64)  # a q_proj weight
    x = torch.randn(T, D, generator=g, dtype=torch.float64)
    theirs = rotate_half_rope((x @ weight.T).view(T, H, Dh).transpose(0, 1), base)  # (H, T, Dh)
    permuted = interleave_rope_rows(weight, H)
    mine = apply_rope((x @ permuted.T).view(T, H, Dh).transpose(0, 1), None, base)  # (H, T, Dh)
    order = torch.arange(Dh).view(2, Dh // 2).t().reshape(-1)  # 0, Dh/2, 1, Dh/2 + 1, ...
    torch.testing.assert_close(mine, theirs[..., order])  # the same numbers, reordered
    scores_theirs = theirs @ theirs.transpose(-1, -2)  # so the scores are equal
    torch.testing.assert_close(mine @ mine.transpose(-1, -2), scores_theirs)
    with pytest.raises(ValueError, match="weight must have"):
        interleave_rope_rows(torch.zeros(9, 4), 3)
    for bad_heads in (0, -2, 2.0):
        with pytest.raises(ValueError, match="n_heads"):
            interleave_rope_rows(torch.zeros(8, 4), bad_heads)
    for bad_weight in (torch.zeros(8, 4).numpy(), torch.tensor(1.0), torch.zeros(2, 4, 4)):
        with pytest.raises(ValueError, match="weight must be a tensor of shape"):
            interleave_rope_rows(bad_weight, 2)


def test_a_bfloat16_model_stays_bfloat16() -> None:
    hf = llama().to(torch.bfloat16)
    ours = GPT.from_hf(hf)
    assert ours.tok_emb.weight.dtype == torch.bfloat16
    assert torch.equal(
        ours.blocks[0].self_attn.v_proj.weight, hf.model.layers[0].self_attn.v_proj.weight
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
        ({"scale_attn_weights": False}, "scale_attn_weights"),
        ({"activation_function": "relu"}, "activation_function"),
        ({"add_cross_attention": True}, "add_cross_attention"),
    ],
)
def test_unsupported_gpt2_settings_are_refused(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        from_hf(gpt2(**overrides))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"head_dim": 32}, "head_dim"),
    ],
)
def test_unsupported_llama_settings_are_refused(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        from_hf(llama(**overrides))


@pytest.mark.parametrize(
    "config",
    [
        SimpleNamespace(rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=1e4),  # v4
        SimpleNamespace(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}),
        SimpleNamespace(  # rotating part of each head only: default type, one setting more
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.5,
            }
        ),
    ],
)
def test_any_rope_setting_beyond_the_base_is_refused(config: SimpleNamespace) -> None:
    """transformers 4 spells the scaling rope_scaling = {"type": ...}, 5 rope_parameters."""
    with pytest.raises(ValueError, match=r"rope_scaling = .* is not supported"):
        _rope_base(config)


def test_the_rope_base_is_read_from_either_spelling() -> None:
    for config in (
        SimpleNamespace(rope_scaling=None, rope_theta=5e5),  # transformers 4
        SimpleNamespace(rope_parameters={"rope_type": "default", "rope_theta": 5e5}),  # 5
        SimpleNamespace(rope_parameters={"rope_theta": 5e5}),
    ):
        assert _rope_base(config) == 5e5


def test_other_models_are_refused() -> None:
    with pytest.raises(ValueError, match="model must be a transformers model"):
        GPT.from_hf(torch.nn.Linear(4, 4))
    base = transformers.GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB))
    with pytest.raises(ValueError, match=r"model must be .*GPT2LMHeadModel.*got GPT2Model"):
        GPT.from_hf(base)
    with pytest.raises(ValueError, match="name"):
        GPT.from_pretrained("")


@pytest.fixture
def no_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' from_pretrained, replaced by one that fails the test if it is called."""

    def download(*args: object, **kwargs: object) -> None:
        raise AssertionError("from_pretrained asked transformers for the model")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", download)


@pytest.mark.parametrize("name", ["gpt2-small", "gpt2-tiny", "gpt-2"])
@pytest.mark.usefixtures("no_download")
def test_a_gpt2_that_is_none_of_its_sizes_is_refused_before_any_download(name: str) -> None:
    """'gpt2-small' ended in transformers' OSError, after its retries where online."""
    sizes = "'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'"
    with pytest.raises(
        ValueError, match=f"name '{name}' is none of GPT-2's sizes on the Hub: {sizes}"
    ):
        GPT.from_pretrained(name)


@pytest.mark.parametrize("name", ["./no-such-folder", "../no-such-folder", "~/no-such-folder"])
@pytest.mark.usefixtures("no_download")
def test_a_relative_folder_that_is_not_there_is_refused_before_any_download(name: str) -> None:
    with pytest.raises(ValueError, match=f"name '{re.escape(name)}' looks like a local folder"):
        GPT.from_pretrained(name)


@pytest.mark.parametrize("name", ["gpt2", "someone/no-such-model"])
def test_a_model_transformers_cannot_load_offline_is_named_with_what_to_do(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline (HF_HUB_OFFLINE=1) with an empty cache, as without a network or with an unknown
    id: transformers' OSError ("We couldn't connect to 'https://huggingface.co'...") named
    neither the argument nor what the course loads."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    start = f"name '{name}': transformers could not load this model"
    with pytest.raises(OSError, match=f"^{start}") as caught:
        GPT.from_pretrained(name)
    message = str(caught.value)
    sizes = "'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'"
    assert f"The course loads 'gpt2' (GPT-2 small; its sizes: {sizes})" in message
    assert "HF_HUB_OFFLINE=1) the model must already be in the Hugging Face cache" in message
    assert isinstance(caught.value.__cause__, OSError)  # transformers' own error, chained


def test_a_folder_transformers_cannot_load_is_named(tmp_path: Path) -> None:
    """A folder with a config and no weights: no word of the Hub or the network."""
    GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB).save_pretrained(tmp_path)
    with pytest.raises(OSError, match=r"name '.*' is a folder, but transformers could not load"):
        GPT.from_pretrained(str(tmp_path))
