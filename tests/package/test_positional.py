"""Positional encodings: sinusoidal codes, rotary embeddings and ALiBi biases."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from attnbook import (
    GPT,
    GPTConfig,
    TrainConfig,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    load_checkpoint,
    save_checkpoint,
    set_seed,
    sinusoidal_positional_encoding,
)
from attnbook.positional import (
    POSITIONAL_ENCODINGS,
    AlibiPositions,
    LearnedPositions,
    PositionalEncoding,
    RotaryPositions,
    SinusoidalPositions,
    position_index,
)
from attnbook.training import make_optimizer

# ------------------------------------------------------------- sinusoidal


def test_sinusoidal_shape_and_dtype() -> None:
    pe = sinusoidal_positional_encoding(7, 10)
    assert pe.shape == (7, 10)
    assert pe.dtype == torch.float32


def test_sinusoidal_columns_are_sin_then_cos_at_the_papers_frequencies() -> None:
    seq_len, d_model = 50, 16
    pe = sinusoidal_positional_encoding(seq_len, d_model).double()
    pos = torch.arange(seq_len, dtype=torch.float64)
    for i in range(d_model // 2):
        freq = 10000.0 ** (-2 * i / d_model)
        torch.testing.assert_close(pe[:, 2 * i], torch.sin(pos * freq), rtol=0, atol=1e-6)
        torch.testing.assert_close(pe[:, 2 * i + 1], torch.cos(pos * freq), rtol=0, atol=1e-6)


def test_sinusoidal_first_row_and_a_golden_value() -> None:
    pe = sinusoidal_positional_encoding(3, 4)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    # position 2, pair i = 1: frequency 10000^(-2/4) = 0.01
    torch.testing.assert_close(
        pe[2], torch.tensor([math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)])
    )


def test_sinusoidal_shift_is_one_fixed_linear_map() -> None:
    seq_len, d_model, k = 200, 12, 5
    pe = sinusoidal_positional_encoding(seq_len, d_model).double()
    # M is block-diagonal: one 2x2 rotation by k * w_i per (sin, cos) pair; it does not
    # depend on the position, so PE[pos + k] = M PE[pos] for every pos at once
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = 10000.0 ** (-2 * i / d_model)
        c, s = math.cos(k * w), math.sin(k * w)
        # (sin(a + b), cos(a + b)) = (sin a cos b + cos a sin b, cos a cos b - sin a sin b)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]])
    torch.testing.assert_close(pe[: seq_len - k] @ m.T, pe[k:], rtol=0, atol=1e-5)
    # a shift by another k needs another map
    assert not torch.allclose(pe[: seq_len - k - 1] @ m.T, pe[k + 1 :], atol=1e-2)


def test_sinusoidal_dot_product_depends_on_offset_only() -> None:
    pe = sinusoidal_positional_encoding(64, 32).double()
    gram = pe @ pe.T  # (T, T)
    for offset in (-7, 0, 1, 3, 20):
        diag = torch.diagonal(gram, offset=offset)
        torch.testing.assert_close(diag, diag[0].expand_as(diag), rtol=0, atol=1e-5)
    assert not torch.allclose(torch.diagonal(gram, 1)[0], torch.diagonal(gram, 3)[0])


def test_sinusoidal_device_argument() -> None:
    assert sinusoidal_positional_encoding(2, 2, device="cpu").device.type == "cpu"


def test_sinusoidal_makes_no_float64_tensor_off_the_cpu() -> None:
    # Apple's mps device has no float64: the float64 angles must stay on the CPU. No such
    # device here, so "meta" stands in for it, and a mode records where float64 appears.
    made = []

    class Float64Places(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.dtype == torch.float64:
                made.append(out.device.type)
            return out

    with Float64Places():
        pe = sinusoidal_positional_encoding(8, 4, device="meta")
    assert (pe.device.type, pe.dtype, pe.shape) == ("meta", torch.float32, (8, 4))
    assert made  # the angles are float64 ...
    assert set(made) == {"cpu"}  # ... and on the CPU only


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0, 4), "seq_len"),
        ((3.0, 4), "seq_len"),
        ((True, 4), "seq_len"),
        ((3, 0), "d_model"),
        ((3, 5), "d_model"),
        ((3, "4"), "d_model"),
    ],
)
def test_sinusoidal_rejects_bad_sizes(args, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        sinusoidal_positional_encoding(*args)


# ------------------------------------------------------------------- RoPE


def _rope_by_hand(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """One explicit 2x2 rotation matrix per position and pair (slow and obvious)."""
    out = torch.empty_like(x)
    d = x.shape[-1]
    for t, p in enumerate(positions.tolist()):
        for i in range(d // 2):
            theta = p * base ** (-2 * i / d)
            rot = torch.tensor(
                [[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]],
                dtype=x.dtype,
            )
            out[..., t, 2 * i : 2 * i + 2] = x[..., t, 2 * i : 2 * i + 2] @ rot.T
    return out


def test_rope_agrees_with_explicit_rotation_matrices(randn: Callable[..., torch.Tensor]) -> None:
    x = randn(0, 2, 3, 5, 8)  # (B, H, T, Dh)
    positions = torch.tensor([0, 1, 2, 7, 30])
    torch.testing.assert_close(
        apply_rope(x, positions, base=100.0), _rope_by_hand(x, positions, 100.0)
    )


def test_rope_rotates_interleaved_pairs_counter_clockwise() -> None:
    x = torch.zeros(2, 4, dtype=torch.float64)
    x[:, 0] = 1.0  # the first pair is (1, 0)
    out = apply_rope(x)
    # position 1, pair 0 (frequency 1): (1, 0) -> (cos 1, sin 1); the other pair stays 0
    torch.testing.assert_close(
        out[1], torch.tensor([math.cos(1), math.sin(1), 0, 0], dtype=torch.float64)
    )
    torch.testing.assert_close(out[0], x[0])  # position 0 is not rotated


def test_rope_keeps_shape_dtype_and_norms(randn: Callable[..., torch.Tensor]) -> None:
    for dtype in (torch.float32, torch.float64):
        x = randn(1, 2, 4, 9, 16, dtype=dtype)
        out = apply_rope(x)
        assert out.shape == x.shape
        assert out.dtype == dtype
        torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
        assert not torch.allclose(out, x)


def test_rope_bfloat16_input_stays_bfloat16(randn: Callable[..., torch.Tensor]) -> None:
    x = randn(2, 5, 8).to(torch.bfloat16)
    out = apply_rope(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), apply_rope(x.double()), atol=0.05, rtol=0.02)


def test_rope_fast_and_written_out_paths_agree(randn: Callable[..., torch.Tensor]) -> None:
    # float32/float64 take the complex-number path, float16 the written-out rotation
    x = randn(9, 2, 3, 7, 8, dtype=torch.float32)
    positions = torch.tensor([0, 1, 2, 5, 17, 60, 61])
    torch.testing.assert_close(
        apply_rope(x.half(), positions).float(), apply_rope(x, positions), atol=5e-3, rtol=5e-3
    )
    torch.testing.assert_close(
        apply_rope(x, positions), _rope_by_hand(x, positions), atol=1e-5, rtol=1e-5
    )


def test_rope_accepts_views_that_are_not_contiguous(randn: Callable[..., torch.Tensor]) -> None:
    base = randn(10, 2, 5, 3, 12)  # (B, T, H, 12)
    permuted = base.transpose(1, 2)  # (B, H, T, 12), a strided view
    torch.testing.assert_close(apply_rope(permuted), apply_rope(permuted.contiguous()))
    odd_offset = base[..., 1:9].transpose(1, 2)  # starts at an odd element
    torch.testing.assert_close(apply_rope(odd_offset), apply_rope(odd_offset.contiguous()))


def test_rope_gradient(randn: Callable[..., torch.Tensor]) -> None:
    x = randn(11, 2, 4, 6).requires_grad_()
    positions = torch.tensor([0, 3, 4, 9])
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, positions), (x,))
    # a rotation is orthogonal: the gradient of sum(out * g) is the inverse rotation of g
    g = randn(12, 2, 4, 6)
    (apply_rope(x, positions) * g).sum().backward()
    torch.testing.assert_close(apply_rope(x.grad, positions), g)


def test_rope_score_depends_on_offset_only(randn: Callable[..., torch.Tensor]) -> None:
    q, k = randn(2, 1, 16), randn(3, 1, 16)  # one query vector, one key vector
    scores = {}
    for t, s in [(5, 2), (10, 7), (103, 100), (3, 0), (8, 8), (20, 20)]:
        q_rot = apply_rope(q, torch.tensor([t]))
        k_rot = apply_rope(k, torch.tensor([s]))
        scores.setdefault(t - s, []).append(float(q_rot @ k_rot.T))
    for offset, values in scores.items():
        assert max(values) - min(values) < 1e-9, (offset, values)
    assert abs(scores[3][0] - scores[0][0]) > 1e-3  # and it does depend on the offset


def test_rope_default_positions_equal_arange(randn: Callable[..., torch.Tensor]) -> None:
    x = randn(4, 3, 6, 8)
    torch.testing.assert_close(apply_rope(x), apply_rope(x, torch.arange(6)))
    # shifting every position by the same amount changes the vectors, not the scores
    shifted = apply_rope(x, torch.arange(6) + 11)
    assert not torch.allclose(shifted, apply_rope(x))
    torch.testing.assert_close(
        shifted @ shifted.transpose(-2, -1), apply_rope(x) @ apply_rope(x).transpose(-2, -1)
    )


def test_rope_base_changes_the_frequencies(randn: Callable[..., torch.Tensor]) -> None:
    x = randn(5, 4, 8)
    assert not torch.allclose(apply_rope(x, base=10.0), apply_rope(x))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"x": torch.zeros(3, 5)}, "x"),  # odd d
        ({"x": torch.zeros(4)}, "x"),  # 1-D
        ({"x": torch.zeros(3, 4, dtype=torch.long)}, "x"),
        ({"x": [[0.0, 1.0]]}, "x"),
        ({"x": torch.zeros(3, 4), "positions": torch.arange(4)}, "positions"),
        ({"x": torch.zeros(3, 4), "positions": torch.arange(3.0)}, "positions"),
        ({"x": torch.zeros(3, 4), "positions": torch.zeros(1, 3, dtype=torch.long)}, "positions"),
        ({"x": torch.zeros(3, 4), "positions": [0, 1, 2]}, "positions"),
        ({"x": torch.zeros(3, 4), "base": 1.0}, "base"),
        ({"x": torch.zeros(3, 4), "base": -5.0}, "base"),
        ({"x": torch.zeros(3, 4), "base": float("inf")}, "base"),
        ({"x": torch.zeros(3, 4), "base": "10000"}, "base"),
    ],
)
def test_rope_rejects_bad_input(kwargs, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        apply_rope(**kwargs)


# ------------------------------------------------------------------ ALiBi


def test_alibi_slopes_for_8_heads_are_a_half_to_1_over_256() -> None:
    expected = torch.tensor([1 / 2**h for h in range(1, 9)])
    torch.testing.assert_close(alibi_slopes(8), expected, rtol=0, atol=0)


def test_alibi_slopes_for_16_heads_interleave_the_8_head_ones() -> None:
    # Press et al. (2022), section 3: 16 heads use 1/2^0.5, 1/2^1, ..., 1/2^8
    expected = torch.tensor([2.0 ** (-h / 2) for h in range(1, 17)])
    torch.testing.assert_close(alibi_slopes(16), expected)


@pytest.mark.parametrize(
    ("n_heads", "exponents"),
    [
        # the reference code's rule: the closest smaller power of two n, then every
        # other slope of 2n heads (1st, 3rd, ...) appended
        (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),
        (6, [2, 4, 6, 8, 1, 3]),
        (3, [4, 8, 2]),
        (1, [8]),
        (2, [4, 8]),
    ],
)
def test_alibi_slopes_for_other_head_counts(n_heads: int, exponents: list[float]) -> None:
    torch.testing.assert_close(alibi_slopes(n_heads), torch.tensor([2.0**-e for e in exponents]))


def test_alibi_bias_values_and_future_is_blocked() -> None:
    bias = alibi_bias(4, 5)
    assert bias.shape == (4, 5, 5)
    assert bias.dtype == torch.float32
    assert not torch.signbit(bias.diagonal(dim1=-2, dim2=-1)).any()  # 0, not -0 (prints cleanly)
    slopes = alibi_slopes(4)
    for h in range(4):
        for t in range(5):
            for s in range(5):
                if s <= t:
                    assert bias[h, t, s] == pytest.approx(-float(slopes[h]) * (t - s))
                else:
                    assert bias[h, t, s] == float("-inf")


def test_alibi_bias_with_keys_is_bottom_right_aligned() -> None:
    bias = alibi_bias(2, 2, 5)  # two queries at positions 3 and 4
    assert bias.shape == (2, 2, 5)
    torch.testing.assert_close(bias, alibi_bias(2, 5)[:, 3:, :])


def test_alibi_bias_is_a_causal_mask_for_attention(randn: Callable[..., torch.Tensor]) -> None:
    from attnbook import causal_mask, scaled_dot_product_attention

    q, k, v = randn(6, 1, 4, 5, 8), randn(7, 1, 4, 5, 8), randn(8, 1, 4, 5, 8)
    bias = alibi_bias(4, 5).double()
    with_bias, weights = scaled_dot_product_attention(q, k, v, bias)
    assert torch.all(weights.triu(1) == 0)
    both, _ = scaled_dot_product_attention(q, k, v, bias, is_causal=True)
    torch.testing.assert_close(with_bias, both)
    # and the bias changes the result compared with a causal mask alone
    plain, _ = scaled_dot_product_attention(q, k, v, causal_mask(5))
    assert not torch.allclose(with_bias, plain)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0, 4), "n_heads"),
        ((2.0, 4), "n_heads"),
        ((2, 0), "seq_len"),
        ((2, None), "seq_len"),
        ((2, 3, 0), "key_len"),
    ],
)
def test_alibi_bias_rejects_bad_sizes(args, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        alibi_bias(*args)


def test_alibi_slopes_rejects_bad_n_heads() -> None:
    with pytest.raises(ValueError, match="n_heads"):
        alibi_slopes(-1)


# ------------------------------------------------------- a new encoding, plugged in


class _NoPositions(PositionalEncoding):
    """A toy encoding: no position information at all (every hook keeps its default)."""


def test_a_new_encoding_is_one_class_and_one_table_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POSITIONAL_ENCODINGS, "none", _NoPositions)
    config = GPTConfig(
        vocab_size=11, context_length=8, d_model=16, n_heads=2, n_layers=1, positional="none"
    )
    set_seed(0)
    model = GPT(config)
    assert isinstance(model.pos_emb, _NoPositions)
    idx = torch.randint(0, 11, (4, 8), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):  # it trains: the loss of a fixed batch goes down
        loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5
    # Without positions one causal layer sees its prefix as a set: the last output ignores order.
    model.eval()
    a, b = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[3, 1, 2, 4]])
    with torch.no_grad():
        torch.testing.assert_close(model(a)[0, -1], model(b)[0, -1])
    # and generation with a cache uses the same hooks
    out = model.generate(a, 3, temperature=0.0)
    assert torch.equal(out, model.generate(a, 3, temperature=0.0, use_cache=False))
    monkeypatch.delitem(POSITIONAL_ENCODINGS, "none")
    with pytest.raises(ValueError, match="positional must be one of"):
        GPTConfig(
            vocab_size=11, context_length=8, d_model=16, n_heads=2, n_layers=1, positional="none"
        )


class _OffsetPositions(PositionalEncoding):
    """A toy encoding with parameters: a plain (T_max, D) table and a (D,) offset, both added."""

    def __init__(self, context_length: int, d_model: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.zeros(context_length, d_model))  # not an Embedding
        self.offset_bias = torch.nn.Parameter(torch.ones(d_model))  # "bias" is a hook

    @classmethod
    def from_config(cls, config: GPTConfig) -> _OffsetPositions:
        return cls(config.context_length, config.d_model)

    def embed(self, x: torch.Tensor, start: int | torch.Tensor) -> torch.Tensor:
        index = position_index(start, x.shape[1], context_length=self.table.shape[0])
        return x + self.table[index] + self.offset_bias  # (B, T, D) + ([B,] T, D) + (D,)


def test_a_new_encodings_parameters_are_treated_as_the_models_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What CONTRIBUTING.md promises a registered encoding's parameters: GPT-2's initialisation,
    saved as pos_emb.*, weight decay on a 2-D one, left out of the count without embeddings."""
    monkeypatch.setitem(POSITIONAL_ENCODINGS, "offset", _OffsetPositions)
    config = GPTConfig(
        vocab_size=11, context_length=8, d_model=16, n_heads=2, n_layers=1, positional="offset"
    )
    set_seed(0)
    model = GPT(config)
    table, bias = model.pos_emb.table, model.pos_emb.offset_bias
    assert 0.015 < table.std().item() < 0.025  # N(0, 0.02), not the zeros it was built with
    assert torch.equal(bias, torch.zeros(16))  # a name ending in "bias": zeros, not ones
    assert {"pos_emb.table", "pos_emb.offset_bias"} <= set(model.state_dict())
    decay, rest = make_optimizer(model, TrainConfig()).param_groups
    assert any(p is table for p in decay["params"])
    assert any(p is bias for p in rest["params"])
    own = 8 * 16 + 16  # table and bias
    assert model.num_parameters(include_embeddings=False) == model.num_parameters() - 11 * 16 - own
    save_checkpoint(tmp_path / "ckpt", model)
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert isinstance(loaded.pos_emb, _OffsetPositions)
    torch.testing.assert_close(loaded.pos_emb.table, table.detach(), rtol=0, atol=0)


def test_rotary_positions_rotate_as_apply_rope_and_check_their_base_once() -> None:
    """The layers' unchecked rotation is apply_rope's; the base is checked when built."""
    rope = RotaryPositions(500.0)
    q, k = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 7, 8)  # (B, H, T, Dh), (B, H_kv, S, Dh)
    q_rot, k_rot = rope.rotate(q, k, start=5)  # keys at 5..11, queries at 9..11
    torch.testing.assert_close(q_rot, apply_rope(q, torch.arange(9, 12), 500.0), rtol=0, atol=0)
    torch.testing.assert_close(k_rot, apply_rope(k, torch.arange(5, 12), 500.0), rtol=0, atol=0)
    with pytest.raises(ValueError, match="base must be a number > 1"):
        RotaryPositions(0.5)


@pytest.mark.parametrize("cls", [SinusoidalPositions, LearnedPositions])
@pytest.mark.parametrize(
    ("start", "n_tokens"),
    [(3, 3), (2, 3), (5, 1), (-1, 3), (0, 5)],  # one row left (it used to broadcast), ..., T > 4
)
def test_embed_refuses_positions_past_the_table(cls: type, start: int, n_tokens: int) -> None:
    encoding = cls(4, 8)  # context_length 4
    with pytest.raises(ValueError, match=r"start.*context_length = 4"):
        encoding.embed(torch.zeros(1, n_tokens, 8), start)
    assert encoding.embed(torch.zeros(2, 2, 8), 2).shape == (2, 2, 8)  # the last two positions


def test_position_index_checks_an_int_start_against_the_table() -> None:
    assert position_index(1, 3, context_length=4) == slice(1, 4)
    for start, n in ((2, 3), (-1, 2), (0, 5)):
        with pytest.raises(ValueError, match=f"got start = {start}"):
            position_index(start, n, context_length=4)
    # per-row starts of a left-padded batch: negative positions are padding, clamped to 0
    start = torch.tensor([[0], [-2]])
    assert position_index(start, 3, context_length=4).tolist() == [[0, 1, 2], [0, 0, 0]]


@pytest.mark.parametrize("cls", [SinusoidalPositions, LearnedPositions])
def test_embed_refuses_a_start_that_is_neither_an_int_nor_a_tensor(cls: type) -> None:
    """Before: AttributeError, "'float' object has no attribute 'device'"."""
    with pytest.raises(ValueError, match=r"start must be an int or a tensor \(B, 1\).*float 1\.0"):
        cls(4, 8).embed(torch.zeros(1, 2, 8), 1.0)


def test_rotary_positions_refuse_more_queries_than_keys() -> None:
    rope = RotaryPositions()
    with pytest.raises(ValueError, match="more queries than keys"):
        rope.rotate(torch.randn(1, 1, 6, 4), torch.randn(1, 1, 5, 4), 0)
    with pytest.raises(ValueError, match=r"T = 3, S = 2"):
        rope.rotate(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 2, 4), 4)


@pytest.mark.parametrize(("d_q", "d_k"), [(5, 5), (6, 4), (0, 0)])
def test_rotary_positions_refuse_a_head_width_they_cannot_pair(d_q: int, d_k: int) -> None:
    """Before: torch's error from unflatten for an odd width, and no error at all for unlike
    widths (q and k rotated apart, left for the scores to fail on) or an empty one."""
    with pytest.raises(ValueError, match=rf"Dh, even and >= 2 .*got q \(1, 2, 3, {d_q}\)"):
        RotaryPositions().rotate(torch.randn(1, 2, 3, d_q), torch.randn(1, 2, 3, d_k), 0)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: AlibiPositions("8"), "n_heads"),
        (lambda: AlibiPositions(0), "n_heads"),
        (lambda: AlibiPositions(2.5), "n_heads"),
        (lambda: LearnedPositions(4.0, 8), "context_length"),
        (lambda: LearnedPositions(0, 8), "context_length"),
        (lambda: LearnedPositions(4, True), "d_model"),
    ],
)
def test_encodings_check_their_sizes_when_built(build: Callable[[], object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        build()
