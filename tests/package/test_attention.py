"""Tests of attnbook.scaled_dot_product_attention and attnbook.lookup.

Golden values from the published worked example, agreement with
``F.scaled_dot_product_attention`` over seeds, shapes, dtypes and both kinds of
mask, invariants, the fully-masked-row rule, dropout and every input error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook import (
    causal_mask,
    hard_lookup,
    mask_to_additive,
    padding_mask,
    scaled_dot_product_attention,
    soft_lookup,
)

# ---------------------------------------------------------------- golden values


def test_published_worked_example() -> None:
    """Four 3-d inputs, integer projections from np.random.seed(42), drawn W_Q, W_K, W_V."""
    x = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    np.random.seed(42)  # noqa: NPY002 (the published example uses the legacy API)
    w_q = np.random.randint(3, size=(3, 3))  # noqa: NPY002
    w_k = np.random.randint(3, size=(3, 3))  # noqa: NPY002
    w_v = np.random.randint(3, size=(3, 3))  # noqa: NPY002
    q, k, v = (torch.as_tensor(x @ w, dtype=torch.float64) for w in (w_q, w_k, w_v))
    output, weights = scaled_dot_product_attention(q, k, v)
    assert output.shape == (4, 3)
    np.testing.assert_allclose(output[0].numpy(), [0.98522025, 1.74174051, 0.75652026], rtol=1e-7)
    np.testing.assert_allclose(output[-1].numpy(), [0.99560386, 1.90407309, 0.90846923], rtol=1e-7)
    # The same numbers from the formula written out by hand.
    scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(3)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(output.numpy(), (e / e.sum(-1, keepdims=True)) @ (x @ w_v))
    fast, none = scaled_dot_product_attention(q, k, v, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, output)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=torch.float64))


# ---------------------------------------------------- agreement with PyTorch


def _inputs(seed: int, shapes: tuple, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g, dtype=dtype) for s in shapes)


def _mask(kind: str, seed: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor | None:
    """A random mask in which every query row keeps at least one key."""
    if kind == "none":
        return None
    g = torch.Generator().manual_seed(seed + 100)
    allowed = torch.rand(*shape, generator=g) < 0.6
    allowed[..., 0] = True  # no empty rows here; those have their own test
    if kind == "bool":
        return allowed
    bias = 0.5 * torch.randn(*shape, generator=g, dtype=dtype)  # a soft, finite bias ...
    return bias.masked_fill(~allowed, float("-inf"))  # ... plus -inf where blocked


SHAPES = [
    # (query, key, value, mask) shapes; T != S, broadcasting batch dimensions
    ((5, 4), (7, 4), (7, 3), (5, 7)),
    ((2, 3, 8), (2, 6, 8), (2, 6, 5), (6,)),
    ((2, 1, 3, 4), (3, 5, 4), (1, 5, 2), (2, 1, 1, 5)),
    ((2, 4, 6, 16), (2, 4, 9, 16), (2, 4, 9, 16), (2, 1, 6, 9)),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "x".join(map(str, s[0])))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("kind", ["none", "bool", "additive"])
def test_agrees_with_torch_sdpa(seed: int, shapes: tuple, dtype: torch.dtype, kind: str) -> None:
    q, k, v = _inputs(seed, shapes[:3], dtype)
    mask = _mask(kind, seed, shapes[3], dtype)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    expected = F.scaled_dot_product_attention(
        q.expand(*batch, *q.shape[-2:]),
        k.expand(*batch, *k.shape[-2:]),
        v.expand(*batch, *v.shape[-2:]),
        attn_mask=mask,
    )
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    fast, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=False)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(output, fast)
    assert output.dtype == dtype
    assert weights.shape == (*expected.shape[:-1], k.shape[-2])
    # Invariants: rows sum to 1, blocked pairs get exactly 0, output = weights @ value.
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    if mask is not None:
        blocked = ~mask if mask.dtype == torch.bool else torch.isneginf(mask)
        assert bool((weights.masked_select(blocked.expand_as(weights)) == 0).all())
    torch.testing.assert_close(output, weights @ v)


# ----------------------------------------------------------------- is_causal


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kind", ["none", "bool", "additive"])
@pytest.mark.parametrize(("n_queries", "n_keys"), [(6, 6), (1, 6), (3, 6), (6, 4)])
def test_is_causal_is_anded_with_the_mask(
    need_weights: bool, kind: str, n_queries: int, n_keys: int
) -> None:
    q, k, v = _inputs(4, ((2, n_queries, 8), (2, n_keys, 8), (2, n_keys, 3)), torch.float64)
    mask = _mask(kind, 4, (2, 1, n_keys), torch.float64)  # a key-padding-like mask
    causal = causal_mask(n_queries, n_keys)
    if mask is None:
        explicit = causal
    elif mask.dtype == torch.bool:
        explicit = mask & causal
    else:
        explicit = mask.masked_fill(~causal, float("-inf"))
    output, weights = scaled_dot_product_attention(
        q, k, v, mask, is_causal=True, need_weights=need_weights
    )
    expected, expected_weights = scaled_dot_product_attention(q, k, v, explicit)
    torch.testing.assert_close(output, expected)
    assert not bool(torch.isnan(output).any())
    if need_weights:
        torch.testing.assert_close(weights, expected_weights)
        assert bool((weights[..., ~causal] == 0).all())  # nothing from the future


@pytest.mark.parametrize("need_weights", [True, False])
def test_is_causal_serves_a_key_value_cache(need_weights: bool) -> None:
    """The last T queries over all S keys give the last T rows of full causal self-attention."""
    (x,) = _inputs(5, ((2, 7, 4),), torch.float64)
    full, _ = scaled_dot_product_attention(x, x, x, is_causal=True, need_weights=need_weights)
    for n_new in (1, 3, 7):
        new, _ = scaled_dot_product_attention(
            x[:, -n_new:], x, x, is_causal=True, need_weights=need_weights
        )
        torch.testing.assert_close(new, full[:, -n_new:])


def test_is_causal_without_a_mask_uses_the_kernels_own_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """T == S, no mask: no (T, S) mask is built, so PyTorch may pick its flash backend."""
    calls: list[dict] = []
    original = F.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    (x,) = _inputs(6, ((2, 5, 4),), torch.float32)
    scaled_dot_product_attention(x, x, x, is_causal=True, need_weights=False)
    assert calls[-1].get("is_causal") is True
    assert calls[-1].get("attn_mask") is None
    scaled_dot_product_attention(x[:, :2], x, x, is_causal=True, need_weights=False)
    assert not calls[-1].get("is_causal", False)  # T != S: our own bottom-right mask instead
    assert torch.equal(calls[-1]["attn_mask"], causal_mask(2, 5))


# ------------------------------------------------------------ lean hot paths


def test_fused_path_hands_the_mask_to_the_kernel_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """No empty row (checked on the mask alone): one kernel call, the caller's own mask."""
    calls: list[dict] = []
    original = F.scaled_dot_product_attention

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, k, v = _inputs(14, ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)), torch.float32)
    for mask in (None, causal_mask(4, 5), mask_to_additive(causal_mask(4, 5))):
        calls.clear()
        scaled_dot_product_attention(q, k, v, mask, need_weights=False)
        assert len(calls) == 1
        assert calls[0].get("attn_mask") is mask
    empty = causal_mask(4, 5).clone()
    empty[1] = False
    calls.clear()
    output, _ = scaled_dot_product_attention(q, k, v, empty, need_weights=False)
    assert len(calls) == 1
    assert calls[0]["attn_mask"] is not empty  # the empty row is opened for the kernel ...
    assert bool((output[:, :, 1] == 0).all())  # ... and zeroed afterwards


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_gradients_agree_with_the_naive_lines(need_weights: bool, kind: str) -> None:
    q, k, v = (
        t.requires_grad_() for t in _inputs(15, ((2, 4, 8), (2, 6, 8), (2, 6, 3)), torch.float64)
    )
    allowed = torch.rand(2, 4, 6, generator=torch.Generator().manual_seed(15)) < 0.6
    allowed[..., 0] = True
    mask = allowed if kind == "bool" else mask_to_additive(allowed, torch.float64)
    output, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    grads = torch.autograd.grad(output.square().sum(), (q, k, v))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~allowed, float("-inf"))
    naive = torch.softmax(scores, dim=-1) @ v
    expected = torch.autograd.grad(naive.square().sum(), (q, k, v))
    torch.testing.assert_close(output, naive)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_a_mask_larger_than_the_scores_but_not_than_the_batch() -> None:
    """Unbatched query and key with batched values: the mask (B, 1, S) is wider than the scores."""
    q, k, v = _inputs(16, ((4, 8), (5, 8), (3, 5, 2)), torch.float64)
    mask = padding_mask([5, 2, 1], 5)  # (3, 1, 5)
    for need_weights in (True, False):
        output, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
        assert output.shape == (3, 4, 2)
        for b in range(3):
            one, _ = scaled_dot_product_attention(q, k, v[b], mask[b])
            torch.testing.assert_close(output[b], one)


# ------------------------------------------------- the mask's batch dimensions

B, H, T, S = 2, 3, 4, 5


def _documented_masks() -> dict[str, torch.Tensor]:
    """Every mask shape the docstring names for (B, H, T, S) scores, as True/False tensors."""
    g = torch.Generator().manual_seed(11)
    full = torch.rand(B, H, T, S, generator=g) < 0.7
    full[..., 0] = True
    return {
        "(T, S)": full[0, 0],
        "(S,)": full[0, 0, 0],
        "(1, S)": full[0, 0, :1],
        "(B, 1, 1, S)": full[:, :1, :1],
        "(B, 1, T, S)": full[:, :1],
        "(H, T, S)": full[0],
        "(B, H, T, S)": full,
        "(1, 1, 1, 1)": full[:1, :1, :1, :1],
    }


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("name", list(_documented_masks()))
def test_mask_broadcasts_as_documented(name: str, need_weights: bool) -> None:
    """A mask broadcasts to the scores (..., T, S); each output row uses its broadcast row."""
    q, k, v = _inputs(12, ((B, H, T, 8), (B, H, S, 8), (B, H, S, 6)), torch.float64)
    mask = _documented_masks()[name]
    output, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert output.shape == (B, H, T, 6)  # the mask never changes the batch shape
    expanded = mask.expand(B, H, T, S)
    for b in range(B):
        for h in range(H):
            one, _ = scaled_dot_product_attention(q[b, h], k[b, h], v[b, h], expanded[b, h])
            torch.testing.assert_close(output[b, h], one)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mask_cannot_add_batch_dimensions(need_weights: bool) -> None:
    q, k, v = _inputs(13, ((T, 8), (S, 8), (S, 6)), torch.float64)
    too_big = torch.ones(B, 1, S, dtype=torch.bool)  # a padding mask for a batch of 2
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5\) does not broadcast.*\(4, 5\)"):
        scaled_dot_product_attention(q, k, v, too_big, need_weights=need_weights)
    # Nor can it enlarge a batch of 1: (B, T, S) against (1, T, S) scores is refused too.
    q1, k1, v1 = q[None], k[None], v[None]
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4, 5\) does not broadcast"):
        scaled_dot_product_attention(q1, k1, v1, too_big.expand(B, T, S), need_weights=need_weights)
    # Batched inputs of the right batch size take it.
    qb, kb, vb = (x.expand(B, *x.shape) for x in (q, k, v))
    output, _ = scaled_dot_product_attention(qb, kb, vb, too_big, need_weights=need_weights)
    assert output.shape == (B, T, 6)
    # The batch of the inputs themselves broadcasts: (B, 1, T, d) against (H, S, d).
    q4 = q.expand(B, 1, T, 8)
    k3, v3 = k.expand(H, S, 8), v.expand(H, S, 6)
    output, _ = scaled_dot_product_attention(q4, k3, v3, need_weights=need_weights)
    assert output.shape == (B, H, T, 6)


@pytest.mark.parametrize("scale", [0.1, 1.0, 2.5])
def test_custom_scale_agrees_with_torch(scale: float) -> None:
    q, k, v = _inputs(3, ((2, 4, 8), (2, 5, 8), (2, 5, 3)), torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v, scale=scale)
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, scale=scale)[0], expected)
    fast, _ = scaled_dot_product_attention(q, k, v, scale=scale, need_weights=False)
    torch.testing.assert_close(fast, expected)


def test_default_scale_is_one_over_sqrt_dk() -> None:
    q, k, v = _inputs(4, ((3, 16), (4, 16), (4, 2)), torch.float64)
    _, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights, torch.softmax(q @ k.T / 4.0, dim=-1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_runs_and_is_close_to_float32(dtype: torch.dtype) -> None:
    q, k, v = _inputs(5, ((2, 4, 8), (2, 6, 8), (2, 6, 4)), torch.float32)
    mask = causal_mask(6)[:4]
    reference, _ = scaled_dot_product_attention(q, k, v, mask)
    output, weights = scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert output.dtype == dtype
    assert weights.dtype == dtype
    torch.testing.assert_close(output.float(), reference, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("need_weights", [True, False])
def test_float16_scores_past_65504_before_scaling_are_not_nan(need_weights: bool) -> None:
    """q . k = 64 * 40 * 40 = 102400 overflows float16; q . k / 8 = 12800 does not (both paths).

    Every key the same: each query's weights are 1/5 each, its output the mean value.
    """
    q, k = torch.full((2, 3, 64), 40.0), torch.full((2, 5, 64), 40.0)  # (B, T, d_k), (B, S, d_k)
    v = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))  # (B, S, d_v)
    output, weights = scaled_dot_product_attention(
        q.half(), k.half(), v.half(), need_weights=need_weights
    )
    expected = v.mean(dim=1, keepdim=True).expand(2, 3, 4)  # (B, T, d_v)
    torch.testing.assert_close(output.float(), expected, atol=2e-3, rtol=0)
    if need_weights:
        assert torch.equal(weights, torch.full((2, 3, 5), 0.2, dtype=torch.float16))


def test_additive_and_boolean_masks_mean_the_same() -> None:
    q, k, v = _inputs(6, ((2, 5, 4), (2, 5, 4), (2, 5, 3)), torch.float64)
    mask = causal_mask(5)
    by_bool = scaled_dot_product_attention(q, k, v, mask)
    by_add = scaled_dot_product_attention(q, k, v, mask_to_additive(mask, torch.float64))
    torch.testing.assert_close(by_bool[0], by_add[0])
    torch.testing.assert_close(by_bool[1], by_add[1])


# ------------------------------------------------------------------ invariants


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_fully_masked_row_gives_zeros_not_nan(need_weights: bool, kind: str) -> None:
    q, k, v = _inputs(7, ((2, 4, 3), (2, 5, 3), (2, 5, 6)), torch.float64)
    allowed = torch.ones(2, 4, 5, dtype=torch.bool)
    allowed[0, 1] = False  # query 1 of sequence 0 may attend to nothing
    allowed[1, :, 3:] = False  # an ordinary padding mask elsewhere
    mask = allowed if kind == "bool" else mask_to_additive(allowed, torch.float64)
    output, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert not bool(torch.isnan(output).any())
    assert bool((output[0, 1] == 0).all())
    reference, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(output, reference)
    if need_weights:
        assert bool((weights[0, 1] == 0).all())
        torch.testing.assert_close(weights[1].sum(-1), torch.ones(4, dtype=torch.float64))


def test_fully_masked_row_has_finite_gradients() -> None:
    q, k, v = (t.requires_grad_() for t in _inputs(8, ((3, 4), (5, 4), (5, 2)), torch.float64))
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2] = False
    output, _ = scaled_dot_product_attention(q, k, v, mask)
    output.sum().backward()
    for t in (q, k, v):
        assert bool(torch.isfinite(t.grad).all())
    assert bool((q.grad[2] == 0).all())  # a query that sees nothing learns nothing


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_row_of_an_additive_mask_has_finite_gradients(need_weights: bool) -> None:
    """An additive mask lets gradients through to the scores: the empty row must not be NaN there.

    (Its scores are set to 0 before the softmax; a softmax of all -inf would send NaN back
    into the query and every key.)
    """
    q, k, v = (t.requires_grad_() for t in _inputs(8, ((3, 4), (5, 4), (5, 2)), torch.float64))
    allowed = torch.ones(3, 5, dtype=torch.bool)
    allowed[2] = False
    mask = mask_to_additive(allowed, torch.float64)
    output, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    output.sum().backward()
    for t in (q, k, v):
        assert bool(torch.isfinite(t.grad).all())
    assert bool((q.grad[2] == 0).all())


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_future_token_never_changes_an_earlier_output(need_weights: bool, seed: int) -> None:
    (x,) = _inputs(seed, ((2, 6, 4),), torch.float64)
    mask = causal_mask(6)
    before, _ = scaled_dot_product_attention(x, x, x, mask, need_weights=need_weights)
    for t in range(5):
        changed = x.clone()
        changed[:, t + 1 :] += 10.0 * torch.randn(2, 5 - t, 4, dtype=torch.float64)
        after, _ = scaled_dot_product_attention(changed, changed, changed, mask)
        torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1])
        assert not torch.allclose(after[:, t + 1 :], before[:, t + 1 :])


def test_weights_follow_the_best_matching_key() -> None:
    keys = torch.eye(3, dtype=torch.float64) * 10
    values = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    query = torch.tensor([[0.0, 10.0, 0.0]], dtype=torch.float64)
    output, weights = scaled_dot_product_attention(query, keys, values)
    assert int(weights.argmax()) == 1
    assert float(output) == pytest.approx(2.0, abs=1e-6)


# --------------------------------------------------------------------- dropout


def test_dropout_zero_is_deterministic() -> None:
    q, k, v = _inputs(9, ((2, 4, 8), (2, 6, 8), (2, 6, 4)), torch.float32)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    b = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)


def test_dropout_drops_weights_and_returns_the_weights_it_used() -> None:
    q, k, v = _inputs(10, ((4, 8), (6, 8), (6, 3)), torch.float64)
    _, clean = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(0)
    output, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(output, weights @ v)  # post-dropout weights
    dropped = weights == 0
    assert 0 < int(dropped.sum()) < weights.numel()
    torch.testing.assert_close(weights[~dropped], clean[~dropped] / 0.5)  # survivors rescaled
    torch.manual_seed(0)
    again, _ = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(again, output)  # reproducible under the same seed
    # Inverted dropout keeps the expected weights unchanged.
    mean = torch.stack(
        [scaled_dot_product_attention(q, k, v, dropout_p=0.3)[1] for _ in range(2000)]
    ).mean(0)
    torch.testing.assert_close(mean, clean, atol=0.03, rtol=0)


def test_fast_path_applies_dropout_too() -> None:
    q, k, v = _inputs(11, ((2, 8, 8), (2, 8, 8), (2, 8, 4)), torch.float32)
    clean, _ = scaled_dot_product_attention(q, k, v, need_weights=False)
    torch.manual_seed(0)
    dropped, weights = scaled_dot_product_attention(q, k, v, dropout_p=0.5, need_weights=False)
    assert weights is None
    assert dropped.shape == clean.shape
    assert not torch.allclose(dropped, clean)


# ---------------------------------------------------------------- bad inputs


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"key": torch.randn(2, 5, 3)}, r"key must have shape \(\.\.\., S, d_k\) with d_k = 4"),
        ({"value": torch.randn(2, 4, 6)}, r"value must have shape \(\.\.\., S, d_v\) with S = 5"),
        ({"key": torch.randn(3, 5, 4), "value": torch.randn(3, 5, 6)}, r"batch dimensions.*query \(2, 3, 4\)"),
        ({"mask": torch.ones(4, 5, dtype=torch.bool)}, r"mask of shape \(4, 5\) does not broadcast.*\(2, 3, 5\)"),
        ({"mask": torch.ones(2, 1, 1, 5, dtype=torch.bool)}, r"mask of shape \(2, 1, 1, 5\) does not broadcast"),
        ({"mask": torch.ones(3, 5, dtype=torch.int64)}, r"mask must be boolean .* got dtype torch.int64"),
        ({"mask": torch.full((3, 5), float("nan"))}, r"additive mask must hold finite numbers or -inf"),
        ({"mask": np.ones((3, 5), dtype=bool)}, r"mask must be a torch tensor.*expects torch tensors"),
        ({"scale": 0.0}, r"scale must be a finite number > 0, got 0.0"),
        ({"scale": -1.0}, r"scale must be a finite number > 0"),
        ({"scale": float("inf")}, r"scale must be a finite number > 0"),
        ({"dropout_p": 1.0}, r"dropout_p must be a number in \[0, 1\), got 1.0"),
        ({"dropout_p": -0.1}, r"dropout_p must be a number in \[0, 1\)"),
        ({"query": torch.ones(2, 3, 4, dtype=torch.int64)}, r"query must be a floating-point tensor of shape \(\.\.\., T, d_k\), got dtype torch.int64"),
        ({"key": np.ones((2, 5, 4))}, r"key must be a torch tensor of shape \(\.\.\., S, d_k\), got a NumPy array of shape \(2, 5, 4\).*expects torch tensors"),
        ({"query": torch.randn(4)}, r"query must have shape \(\.\.\., T, d_k\) \(at least 2-D\), got \(4\)"),
        ({"value": torch.randn(5)}, r"value must have shape \(\.\.\., S, d_v\)"),
        ({"key": torch.randn(2, 5, 4, dtype=torch.float64)}, r"query, key and value must share one dtype"),
        ({"key": torch.randn(2, 0, 4), "value": torch.randn(2, 0, 6)}, r"key must have shape \(\.\.\., S, d_k\) with S >= 1"),
        ({"is_causal": 1}, r"is_causal must be True or False, got 1"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_a_clear_value_error(change: dict, match: str) -> None:
    q, k, v = _qkv()
    args = {"query": q, "key": k, "value": v, "mask": None} | change
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=match):
            scaled_dot_product_attention(**args, need_weights=need_weights)


# ---------------------------------------------------------------------- lookup


def test_hard_lookup_returns_the_value_of_the_best_key() -> None:
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    values = np.array([[10.0], [20.0], [30.0]])
    np.testing.assert_array_equal(hard_lookup(np.array([0.2, 0.9]), keys, values), [20.0])
    queries = np.array([[0.2, 0.9], [-3.0, 0.0], [5.0, 1.0]])
    np.testing.assert_array_equal(hard_lookup(queries, keys, values), [[20.0], [30.0], [10.0]])


@pytest.mark.parametrize("lookup", [hard_lookup, soft_lookup])
def test_lookups_refuse_scores_that_are_not_finite(lookup) -> None:
    """A NaN query would pick key 0, and scores that overflow float16 tie at inf."""
    keys, values = torch.eye(2), torch.tensor([[10.0], [20.0]])
    with pytest.raises(ValueError, match="scores query · keys must be finite"):
        lookup(torch.tensor([float("nan"), 1.0]), keys, values)
    big_query = torch.full((4,), 300.0, dtype=torch.float16)  # 300 · 200 · 4 > 65504
    big_keys = torch.stack([torch.full((4,), 200.0), torch.full((4,), 300.0)]).half()
    with pytest.raises(ValueError, match=r"fit in torch\.float16"):
        lookup(big_query, big_keys, torch.eye(2).half())
    with pytest.raises(ValueError, match="scores query · keys must be finite"):
        lookup(np.array([np.inf, 0.0]), keys.numpy(), values.numpy())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soft_lookup_tends_to_hard_lookup_and_to_the_mean(seed: int) -> None:
    rng = np.random.default_rng(seed)
    query, keys, values = rng.normal(size=(3, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    output, weights = soft_lookup(query, keys, values)
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    np.testing.assert_allclose(output, weights @ values)
    sharp, _ = soft_lookup(query, keys, values, temperature=1e-6)
    np.testing.assert_allclose(sharp, hard_lookup(query, keys, values), atol=1e-6)
    flat, _ = soft_lookup(query, keys, values, temperature=1e6)
    np.testing.assert_allclose(flat, np.broadcast_to(values.mean(0), flat.shape), atol=1e-4)


def test_soft_lookup_matches_attention_without_scaling_and_works_in_torch() -> None:
    g = torch.Generator().manual_seed(0)
    query, keys, values = (
        torch.randn(*s, generator=g, dtype=torch.float64) for s in ((3, 4), (5, 4), (5, 2))
    )
    output, weights = soft_lookup(query, keys, values, temperature=2.0)
    expected, expected_w = scaled_dot_product_attention(query, keys, values, scale=0.5)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights, expected_w)
    np_out, _ = soft_lookup(query.numpy(), keys.numpy(), values.numpy(), temperature=2.0)
    np.testing.assert_allclose(np_out, output.numpy())
    torch.testing.assert_close(
        hard_lookup(query, keys, values), values[(query @ keys.T).argmax(-1)]
    )


@pytest.mark.parametrize("bad", [np.inf, np.nan])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_soft_lookup_refuses_values_that_are_not_finite(bad: float, kind: str) -> None:
    """Before: a cold lookup gave NaN (weight 0 times inf), where hard_lookup gives 1."""
    keys, values = np.eye(2), np.array([[1.0], [bad]])
    if kind == "torch":
        keys, values = torch.from_numpy(keys), torch.from_numpy(values)
    query = keys[0] * 1.0
    assert hard_lookup(query, keys, values).tolist() == [1.0]
    with pytest.raises(ValueError, match="values must be finite"):
        soft_lookup(query, keys, values, temperature=1e-3)


def test_soft_lookup_bad_inputs() -> None:
    keys, values = np.ones((4, 3)), np.ones((4, 2))
    with pytest.raises(ValueError, match=r"keys must have shape \(S, d\) with d = 2"):
        soft_lookup(np.ones(2), keys, values)
    with pytest.raises(ValueError, match=r"values must have shape \(S, d_v\) with S = 4"):
        soft_lookup(np.ones(3), keys, np.ones((5, 2)))
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        soft_lookup(np.ones(3), keys, values, temperature=0.0)
    with pytest.raises(ValueError, match="query and keys must both be NumPy arrays or both torch"):
        hard_lookup(torch.ones(3), keys, values)


@pytest.mark.parametrize("batch", [(), (1,), (3,)])
def test_the_fused_path_builds_no_t_by_s_matrix_for_inputs_of_fewer_than_four_dims(
    batch: tuple[int, ...],
) -> None:
    """need_weights=False promises far less memory: PyTorch's fused kernels take 4-D inputs only
    (and, for flash, d_v = d_k), so (T, d) and (B, T, d) ones are viewed as 4-D instead of
    running its math path."""
    from attnbook.runtime import largest_allocation

    generator = torch.Generator().manual_seed(0)
    T, S = 64, 512
    q = torch.randn(*batch, T, 16, generator=generator)
    k = torch.randn(*batch, S, 16, generator=generator)
    v = torch.randn(*batch, S, 16, generator=generator)
    weights_bytes = max(1, math.prod(batch)) * T * S * 4
    fused = largest_allocation(lambda: scaled_dot_product_attention(q, k, v, need_weights=False))
    assert fused < weights_bytes / 8
    output, none = scaled_dot_product_attention(q, k, v, need_weights=False)
    assert none is None
    assert output.shape == (*batch, T, 16)
    torch.testing.assert_close(output, scaled_dot_product_attention(q, k, v)[0])
    empty = torch.ones(T, S, dtype=torch.bool)
    empty[3] = False  # a row with no key: zeros on the fused path too
    output, _ = scaled_dot_product_attention(q, k, v, empty, need_weights=False)
    assert bool((output[..., 3, :] == 0).all())
    torch.testing.assert_close(output, scaled_dot_product_attention(q, k, v, empty)[0])
