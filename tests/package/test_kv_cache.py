"""Tests of the key-value cache: ``KVCache``, ``GPT.prefill``, ``GPT.decode``, ``generate(use_cache=)``.

- prefill + decode give the logits of a full forward pass, in every positional
  mode and with grouped-query attention (and a corrupted cache does not, so
  the comparison can fail);
- ``generate`` returns identical tokens with and without the cache, greedy
  and seeded sampling, batch > 1, prompts shorter than, reaching and longer
  than the context, and generation past it (the window slides);
- ``nbytes`` is the memory formula and the tensors' real size;
- bad input raises ``ValueError`` naming the argument;
- left-padded batches (``pad_left``, ``left_pad=``): each row gets the logits
  and writes the tokens it gets alone, in every positional mode, with and
  without the cache and once the window slides; what the padding holds does
  not matter; without ``left_pad`` the rows change (so the comparisons can fail).
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import GPT, GPTConfig, KVCache, generation
from attnbook.generation import pad_left
from attnbook.positional import POSITIONAL_ENCODINGS, position_index

CONTEXT = 10


def _model(positional: str = "learned", n_kv_heads: int | None = None, seed: int = 0) -> GPT:
    config = GPTConfig(
        vocab_size=13,
        context_length=CONTEXT,
        d_model=32,
        n_heads=4,
        n_layers=2,
        positional=positional,
        n_kv_heads=n_kv_heads,
    )
    torch.manual_seed(seed)
    model = GPT(config).eval()
    with torch.no_grad():  # weights twice GPT-2's init: predictions far from uniform
        for p in model.parameters():
            p.mul_(2.0)
    return model


def _ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 13, (batch, length), generator=torch.Generator().manual_seed(seed))


MODES = list(POSITIONAL_ENCODINGS)  # a new encoding is tested here as soon as it is registered


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("positional", MODES)
def test_prefill_and_decode_give_full_forward_logits(positional: str, n_kv_heads: int) -> None:
    model = _model(positional, n_kv_heads)
    idx = _ids(2, CONTEXT)
    full = model(idx)  # (B, C, V)
    logits, cache = model.prefill(idx[:, :3])
    assert isinstance(cache, KVCache)
    assert cache.length == 3
    torch.testing.assert_close(logits, full[:, 2])
    for t in range(3, CONTEXT):
        same = cache
        logits = model.decode(idx[:, t : t + 1], cache)
        assert cache is same  # grown in place
        assert cache.length == t + 1
        assert logits.shape == (2, 13)
        torch.testing.assert_close(logits, full[:, t])
    with pytest.raises(ValueError, match="cache is full"):
        model.decode(idx[:, :1], cache)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope"])
def test_a_one_token_decode_step_builds_no_mask(
    positional: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One new query sees every cached key: no (1, S) all-True mask, so that PyTorch's flash
    kernel (which takes no mask) stays eligible on CUDA; the logits are unchanged."""
    import torch.nn.functional as F

    import attnbook.attention

    model = _model(positional)
    idx = _ids(2, 6)
    full = model(idx)  # (B, T, V)
    _, cache = model.prefill(idx[:, :3])
    masks, built = [], []
    sdpa, causal = F.scaled_dot_product_attention, attnbook.attention.causal_mask

    def spy_sdpa(*args: object, **kwargs: object) -> torch.Tensor:
        masks.append(kwargs.get("attn_mask", args[3] if len(args) > 3 else None))
        return sdpa(*args, **kwargs)

    def spy_causal(*args: object, **kwargs: object) -> torch.Tensor:
        built.append(args)
        return causal(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy_sdpa)
    monkeypatch.setattr(attnbook.attention, "causal_mask", spy_causal)
    for t in range(3, 6):
        torch.testing.assert_close(model.decode(idx[:, t : t + 1], cache), full[:, t])
    assert len(masks) == 3 * model.config.n_layers  # the spy saw every layer's attention
    assert all(m is None for m in masks), [None if m is None else m.shape for m in masks]
    assert built == []
    # the spy can tell: a two-token step after the cache does need the causal mask
    model(idx[:, 3:5], cache=cache)
    assert masks[-1] is not None
    assert len(built) == model.config.n_layers


def test_a_corrupted_cache_gives_other_logits() -> None:
    """The comparison above can fail: stale or shifted keys change the logits."""
    model = _model("rope")
    idx = _ids(2, 6)
    full = model(idx)
    _, cache = model.prefill(idx[:, :5])
    cache.keys[1] = cache.keys[1].roll(1, dims=-2)  # keys at the wrong positions
    assert not torch.allclose(model.decode(idx[:, 5:6], cache), full[:, 5], atol=1e-3)
    # Decoding with a cache of another prompt: also different.
    _, other = model.prefill(_ids(2, 5, seed=7))
    assert not torch.allclose(model.decode(idx[:, 5:6], other), full[:, 5], atol=1e-3)


# Every positional mode with every prompt length (short, reaching and longer than the
# context); the key/value heads cycle through 4 (H), 2 and 1 (multi-query).
GENERATE_CASES = [
    (positional, [None, 2, 1][(i + j) % 3], prompt_len)
    for i, positional in enumerate(MODES)
    for j, prompt_len in enumerate([1, 4, CONTEXT, CONTEXT + 3])
]


@pytest.mark.parametrize(("positional", "n_kv_heads", "prompt_len"), GENERATE_CASES)
def test_generate_same_tokens_with_and_without_cache(
    positional: str, n_kv_heads: int, prompt_len: int
) -> None:
    model = _model(positional, n_kv_heads)
    idx = _ids(3, prompt_len)
    n_new = 2 * CONTEXT  # runs well past the context: the window slides
    greedy = model.generate(idx, n_new, temperature=0)
    assert greedy.shape == (3, prompt_len + n_new)
    assert torch.equal(greedy[:, :prompt_len], idx)
    assert torch.equal(greedy, model.generate(idx, n_new, temperature=0, use_cache=False))
    for temperature, top_k in ((1.0, None), (0.7, 5)):
        cached = model.generate(
            idx,
            n_new,
            temperature=temperature,
            top_k=top_k,
            generator=torch.Generator().manual_seed(11),
        )
        plain = model.generate(
            idx,
            n_new,
            temperature=temperature,
            top_k=top_k,
            generator=torch.Generator().manual_seed(11),
            use_cache=False,
        )
        assert torch.equal(cached, plain)
        assert len(set(cached[:, prompt_len:].flatten().tolist())) > 3  # varied tokens


def test_sampling_depends_on_the_seed() -> None:
    """The sampled-token comparison above is not trivial: another seed gives other tokens."""
    model = _model()
    idx = _ids(3, 4)
    a = model.generate(idx, 12, generator=torch.Generator().manual_seed(11))
    b = model.generate(idx, 12, generator=torch.Generator().manual_seed(12))
    assert not torch.equal(a, b)


@pytest.mark.parametrize("temperature", [1e-30, 1e-40])
def test_a_tiny_temperature_samples_the_greedy_tokens(temperature: float) -> None:
    """logits / 1e-40 overflows to inf; sampling subtracts each row's maximum first."""
    model = _model()
    idx = _ids(3, 4)
    greedy = model.generate(idx, 12, temperature=0.0)
    cold = model.generate(
        idx, 12, temperature=temperature, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(cold, greedy)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_at_the_book_s_temperatures_the_shift_moves_no_sample(
    seed: int, temperature: float
) -> None:
    """At T = 1 and T = 0.5 (exact in binary) the shifted logits draw what the plain softmax drew."""
    logits = 4 * torch.randn(500, 13, generator=torch.Generator().manual_seed(seed))
    for top_k in (None, 5):
        kept = logits
        if top_k is not None:
            kept = logits.masked_fill(logits < torch.topk(logits, top_k).values[:, -1:], -math.inf)
        probs = torch.softmax(kept / temperature, dim=-1)
        plain = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))
        drawn = generation.sample_next(
            logits, temperature, top_k, torch.Generator().manual_seed(seed)
        )
        assert torch.equal(drawn, plain)


def test_logits_over_a_temperature_just_above_float32_s_tiny_do_not_overflow() -> None:
    """8.5 / 2e-38 is inf in float32: each row's maximum is subtracted before dividing."""
    temperature = 2e-38
    assert temperature > torch.finfo(torch.float32).tiny  # sampled, not the argmax shortcut
    logits = torch.tensor([[10.0, 0.0, -5.0], [-10.0, -20.0, -30.0], [1.0, 8.0, 8.5]])
    drawn = generation.sample_next(logits, temperature, None, torch.Generator().manual_seed(0))
    assert drawn.flatten().tolist() == [0, 0, 2]


def test_top_k_keeps_the_logits_tied_with_the_k_th() -> None:
    """As its docstring says: with top_k=1 and three tied maxima, each of the three is drawn."""
    logits = torch.tensor([[1.0, 1.0, 1.0, 0.0]]).expand(3000, 4)
    drawn = generation.sample_next(logits, 1.0, 1, torch.Generator().manual_seed(0))
    assert set(drawn.flatten().tolist()) == {0, 1, 2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_nbytes_is_the_memory_formula(n_kv_heads: int, dtype: torch.dtype) -> None:
    model = _model("rope", n_kv_heads).to(dtype)
    batch, length = 3, 7
    _, cache = model.prefill(_ids(batch, length))
    c = model.config
    h_kv = c.n_heads if n_kv_heads is None else n_kv_heads
    d_head = c.d_model // c.n_heads
    bytes_per_element = torch.finfo(dtype).bits // 8
    formula = 2 * c.n_layers * batch * h_kv * length * d_head * bytes_per_element
    assert cache.nbytes == formula
    real = sum(t.untyped_storage().nbytes() for t in (*cache.keys, *cache.values))
    assert real == formula  # no hidden views into larger buffers
    for keys, values in zip(cache.keys, cache.values):
        assert keys.shape == values.shape == (batch, h_kv, length, d_head)
        assert keys.dtype == dtype
    model.decode(_ids(batch, 1), cache)
    assert cache.nbytes == formula * (length + 1) // length
    assert cache.batch_size == batch
    assert f"length={length + 1}" in repr(cache)


def test_empty_cache() -> None:
    cache = KVCache(3)
    assert (cache.n_layers, cache.length, cache.batch_size, cache.nbytes) == (3, 0, 0, 0)
    assert "empty" in repr(cache)
    with pytest.raises(ValueError, match="n_layers"):
        KVCache(0)


def test_generate_keeps_mode_and_handles_zero_tokens() -> None:
    model = _model().train()
    idx = _ids(2, 3)
    assert torch.equal(model.generate(idx, 0), idx)
    model.generate(idx, 3)
    assert model.training


BAD_PREFILL = [
    (torch.zeros(2, 3), "idx"),  # float
    (torch.zeros(3, dtype=torch.long), "idx"),  # 1-D
    (torch.zeros(2, CONTEXT + 1, dtype=torch.long), "idx"),  # longer than the context
    (torch.full((2, 3), 13), "idx"),  # id out of range
    ([[1, 2]], "idx"),
]


@pytest.mark.parametrize(("idx", "name"), BAD_PREFILL)
def test_bad_prefill(idx: object, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        _model().prefill(idx)


def test_bad_decode() -> None:
    model = _model()
    _, cache = model.prefill(_ids(2, 4))
    good = _ids(2, 1)
    with pytest.raises(ValueError, match="next_idx"):
        model.decode(_ids(2, 2), cache)  # two tokens at once
    with pytest.raises(ValueError, match=r"next_idx.*\(2, 1\)"):
        model.decode(_ids(3, 1), cache)  # batch differs from the cache's
    with pytest.raises(ValueError, match="next_idx"):
        model.decode(good.float(), cache)
    with pytest.raises(ValueError, match="next_idx"):
        model.decode(good + 13, cache)
    with pytest.raises(ValueError, match="cache"):
        model.decode(good, None)
    with pytest.raises(ValueError, match="cache"):
        model.decode(good, KVCache(2))  # empty
    with pytest.raises(ValueError, match="cache"):
        model.decode(good, KVCache(3))  # another number of layers
    _, other = _model(n_kv_heads=1).prefill(_ids(2, 4))
    with pytest.raises(ValueError, match="cache"):
        model.decode(good, other)  # keys of another shape
    assert cache.length == 4  # nothing was appended by the failed calls
    with pytest.raises(ValueError, match="use_cache"):
        model.generate(good, 2, use_cache=1)


def test_forward_checks_the_cache_it_is_given() -> None:
    """The public forward(cache=...) makes decode's checks, before anything is appended."""
    model = _model()
    _, cache = model.prefill(_ids(2, 4))
    good = _ids(2, 1)
    bad = [
        ({}, "cache must be a KVCache"),
        (KVCache(3), r"one entry per layer of this model, n_layers = 2"),
        (_model(n_kv_heads=1).prefill(_ids(2, 4))[1], r"keys of shape \(B, H_kv, S, Dh\) = \(B, 4, S, 8\)"),
    ]  # fmt: skip
    for other, match in bad:
        with pytest.raises(ValueError, match=match):
            model(good, cache=other)
    with pytest.raises(ValueError, match="cache holds 2 sequences, but idx has 3 rows"):
        model(_ids(3, 1), cache=cache)
    assert cache.length == 4  # nothing was appended by the failed calls
    assert model(good, cache=KVCache(2)).shape == (2, 1, 13)  # an empty cache of the right size


def test_flags_and_models_are_checked() -> None:
    model, idx = _model(), _ids(2, 3)
    with pytest.raises(ValueError, match="last_only must be True or False, got 'y'"):
        model(idx, last_only="y")
    with pytest.raises(ValueError, match="include_embeddings must be True or False, got 'no'"):
        model.num_parameters(include_embeddings="no")
    not_a_gpt = torch.nn.Linear(2, 2)
    for call in (
        lambda: generation.prefill(not_a_gpt, idx),
        lambda: generation.generate(not_a_gpt, idx, 2),
        lambda: generation.decode(not_a_gpt, idx[:, :1], KVCache(2)),
    ):
        with pytest.raises(ValueError, match=r"model must be an attnbook\.GPT, got Linear"):
            call()


# ------------------------------------------------------------ left-padded batches


def _prompts(*lengths: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 13, (n,), generator=generator) for n in lengths]


def test_pad_left_puts_each_prompt_at_the_right_end() -> None:
    prompts = _prompts(3, 1, 5)
    idx, left_pad = pad_left(prompts, pad_id=7)
    assert idx.shape == (3, 5)
    assert left_pad.tolist() == [2, 4, 0]
    for row, pad, prompt in zip(idx, left_pad, prompts):
        assert torch.equal(row[pad:], prompt)
        assert (row[:pad] == 7).all()


def test_position_index_counts_from_each_rows_first_token() -> None:
    start = torch.tensor([[0], [-2], [3]])  # (B, 1): no padding, two pads, a later window
    assert position_index(start, 4).tolist() == [[0, 1, 2, 3], [0, 0, 0, 1], [3, 4, 5, 6]]
    assert position_index(3, 4) == slice(3, 7)  # one start for the whole batch: a view


@pytest.mark.parametrize("n_kv_heads", [None, 1])
@pytest.mark.parametrize("positional", MODES)
def test_each_row_gets_its_logits_alone(positional: str, n_kv_heads: int | None) -> None:
    model = _model(positional, n_kv_heads)
    prompts = _prompts(6, 2, 4, 1)
    idx, left_pad = pad_left(prompts)
    with torch.no_grad():
        batch = model(idx, left_pad=left_pad)  # (B, T, V)
        naive = model(idx)  # the same batch, the padding read as tokens
        assert torch.isfinite(batch).all()  # rows of padding attend to nothing: zeros, no NaN
        for row, (pad, prompt) in enumerate(zip(left_pad, prompts)):
            alone = model(prompt[None])[0]  # (T_b, V)
            torch.testing.assert_close(batch[row, pad:], alone)
            if pad:
                assert not torch.allclose(naive[row, pad:], alone, atol=1e-3)


@pytest.mark.parametrize("positional", MODES)
def test_what_the_padding_holds_does_not_matter(positional: str) -> None:
    model = _model(positional)
    prompts = _prompts(5, 2)
    (idx_a, left_pad), (idx_b, _) = pad_left(prompts, pad_id=0), pad_left(prompts, pad_id=12)
    with torch.no_grad():
        a, b = model(idx_a, left_pad=left_pad), model(idx_b, left_pad=left_pad)
    torch.testing.assert_close(a[1, 3:], b[1, 3:])
    torch.testing.assert_close(a[0], b[0])


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("positional", MODES)
def test_generate_writes_what_each_prompt_gets_alone(positional: str, use_cache: bool) -> None:
    model = _model(positional, n_kv_heads=2)
    prompts = _prompts(12, 2, 7)  # the longest is cropped to the context from the start
    idx, left_pad = pad_left(prompts)
    new = 9  # the window slides at once, and each row loses its padding first
    out = model.generate(idx, new, temperature=0, left_pad=left_pad, use_cache=use_cache)
    assert out.shape == (3, 12 + new)
    for row, (pad, prompt) in enumerate(zip(left_pad, prompts)):
        alone = model.generate(prompt[None], new, temperature=0, use_cache=use_cache)[0]
        assert torch.equal(out[row, pad:], alone)


@pytest.mark.parametrize("positional", MODES)
def test_without_left_pad_the_padding_changes_what_a_row_writes(positional: str) -> None:
    model = _model(positional)
    prompts = _prompts(6, 2, 3)
    idx, left_pad = pad_left(prompts)
    naive = model.generate(idx, 9, temperature=0)  # the padding read as tokens
    alone = [model.generate(prompt[None], 9, temperature=0)[0] for prompt in prompts]
    assert any(
        not torch.equal(naive[row, pad:], a) for row, (pad, a) in enumerate(zip(left_pad, alone))
    )


@pytest.mark.parametrize("positional", MODES)
def test_sampling_a_padded_batch_is_the_same_with_and_without_cache(positional: str) -> None:
    model = _model(positional)
    idx, left_pad = pad_left(_prompts(3, 8, 1))
    runs = [
        model.generate(
            idx, 6, left_pad=left_pad, generator=torch.Generator().manual_seed(3), use_cache=cached
        )
        for cached in (True, False)
    ]
    assert torch.equal(runs[0], runs[1])


def test_prefill_keeps_the_padding_and_decode_uses_it() -> None:
    model = _model("rope")
    idx, left_pad = pad_left(_prompts(4, 2))
    logits, cache = model.prefill(idx, left_pad=left_pad)
    assert torch.equal(cache.left_pad, left_pad)
    assert "left_pad=[0, 2]" in repr(cache)
    token = logits.argmax(-1, keepdim=True)  # (B, 1)
    step = model.decode(token, cache)
    with torch.no_grad():
        full = model(torch.cat([idx, token], 1), left_pad=left_pad)[:, -1]
    torch.testing.assert_close(step, full)
    assert "left_pad" not in repr(model.prefill(idx)[1])  # no padding, nothing shown


BAD_LEFT_PAD = [
    ([0, 1], "torch tensor"),
    (torch.tensor([0.0, 1.0]), "int64"),
    (torch.tensor([0, 1, 0]), r"shape \(2,\)"),
    (torch.tensor([[0, 1]]), r"shape \(2,\)"),
    (torch.tensor([0, -1]), r"\[0, T - 1\] = \[0, 3\]"),
    (torch.tensor([0, 4]), r"at least one real token"),
]


@pytest.mark.parametrize(("left_pad", "message"), BAD_LEFT_PAD)
def test_bad_left_pad(left_pad: object, message: str) -> None:
    model = _model()
    idx = torch.zeros(2, 4, dtype=torch.long)
    for call in (
        lambda: model(idx, left_pad=left_pad),
        lambda: model.prefill(idx, left_pad=left_pad),
        lambda: model.generate(idx, 2, left_pad=left_pad),
    ):
        with pytest.raises(ValueError, match="left_pad") as info:
            call()
        assert info.match(message)


def test_left_pad_goes_to_the_first_call_with_a_cache() -> None:
    model = _model()
    idx, left_pad = pad_left(_prompts(3, 1))
    _, cache = model.prefill(idx, left_pad=left_pad)
    with pytest.raises(ValueError, match="left_pad must be None once the cache"):
        model(idx[:, :1], cache=cache, left_pad=left_pad)


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        ([], "non-empty list"),
        (torch.zeros(2, 3, dtype=torch.long), "non-empty list"),
        ([torch.zeros(2, 3, dtype=torch.long)], r"prompts\[0\].*one-dimensional"),
        ([torch.zeros(3, dtype=torch.long), torch.zeros(2)], r"prompts\[1\].*int64"),
        ([torch.zeros(0, dtype=torch.long)], r"prompts\[0\].*>= 1"),
        ([[1, 2]], r"prompts\[0\]"),
    ],
)
def test_bad_pad_left(prompts: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pad_left(prompts)
    with pytest.raises(ValueError, match="pad_id"):
        pad_left([torch.zeros(2, dtype=torch.long)], pad_id=-1)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_refuses_nan_logits(temperature: float, use_cache: bool) -> None:
    # argmax takes a NaN for the largest logit: greedy decoding went on with token ids
    # that mean nothing, and sampling raised torch's "probability tensor contains nan"
    model = _model()
    with torch.no_grad():
        next(model.parameters()).fill_(math.nan)
    with pytest.raises(ValueError, match="NaN logits at decoding step 0"):
        generation.generate(model, _ids(2, 3), 4, temperature=temperature, use_cache=use_cache)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(
    ("logits", "match"),
    [
        ([[math.nan, 1.0]], "NaN or \\+inf"),  # argmax took the NaN for the largest logit
        ([[math.inf, 1.0]], "NaN or \\+inf"),
        ([[-math.inf, -math.inf], [0.0, 1.0]], "only -inf"),
    ],
)
def test_sample_next_refuses_logits_with_no_distribution(
    logits: list[list[float]], match: str, temperature: float
) -> None:
    """No token comes back silently (greedy: token 0 for a NaN) and no RuntimeError from
    torch.multinomial: a ValueError that says what is wrong with the logits."""
    with pytest.raises(ValueError, match=match):
        generation.sample_next(torch.tensor(logits), temperature, None, None)


def test_sample_next_refuses_an_empty_vocabulary() -> None:
    with pytest.raises(ValueError, match="V >= 1"):
        generation.sample_next(torch.zeros(2, 0), 1.0, None, None)
    assert generation.sample_next(torch.zeros(0, 3), 1.0, None, None).shape == (0, 1)
    masked = torch.tensor([[-math.inf, 2.0, -math.inf]])  # -inf: a token that cannot be drawn
    assert generation.sample_next(masked, 1.0, None, None).tolist() == [[1]]
