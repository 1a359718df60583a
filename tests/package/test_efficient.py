"""Tests of attnbook.efficient: tiled (FlashAttention-style) and Linformer attention.

Agreement with ``F.scaled_dot_product_attention`` over seeds, shapes, dtypes,
block sizes and the causal rule (bottom-right aligned, compared against an
explicit mask since PyTorch's ``is_causal`` aligns top-left when ``T != S``);
that no ``(T, S)`` tensor is ever created (every operation's output shape is
recorded by a dispatch hook, and the same hook catches the naive path); the
Linformer identities and rank bound; every input error.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attnbook import causal_mask, linformer_attention, scaled_dot_product_attention, tiled_attention


def _qkv(seed: int, q_shape: tuple, kv_shape: tuple, d_v: int, dtype: torch.dtype) -> tuple:
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(*q_shape, generator=g, dtype=dtype)
    key = torch.randn(*kv_shape, generator=g, dtype=dtype)
    value = torch.randn(*kv_shape[:-1], d_v, generator=g, dtype=dtype)
    return query, key, value


def _tol(dtype: torch.dtype) -> dict:
    return (
        {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    )


# ------------------------------------------------------------ tiled attention

SHAPES = [  # (query shape, key shape, d_v, block_size)
    ((7, 4), (7, 4), 4, 3),  # T = S = 7, not a multiple of the block
    ((2, 3, 50, 8), (2, 3, 50, 8), 5, 16),  # (B, H, T, d), 50 = 3 * 16 + 2
    ((2, 1, 13, 8), (1, 3, 29, 8), 6, 8),  # broadcast batch, S != T
    ((20, 6), (9, 6), 6, 4),  # T > S
    ((3, 64, 16), (3, 64, 16), 16, 64),  # one block exactly
    ((3, 10, 16), (3, 100, 16), 16, 1),  # one key per block
    ((2, 5, 8), (2, 5, 8), 8, 1000),  # block larger than S
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("q_shape", "kv_shape", "d_v", "block_size"), SHAPES)
def test_tiled_equals_pytorch(
    q_shape: tuple, kv_shape: tuple, d_v: int, block_size: int, seed: int, dtype: torch.dtype
) -> None:
    query, key, value = _qkv(seed, q_shape, kv_shape, d_v, dtype)
    output = tiled_attention(query, key, value, block_size=block_size)
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    q, k, v = (x.expand(*batch, *x.shape[-2:]) for x in (query, key, value))
    expected = F.scaled_dot_product_attention(q, k, v)
    assert output.shape == expected.shape
    assert output.dtype == dtype
    torch.testing.assert_close(output, expected, **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("q_shape", "kv_shape", "d_v", "block_size"), SHAPES)
def test_tiled_causal_equals_explicit_bottom_right_mask(
    q_shape: tuple, kv_shape: tuple, d_v: int, block_size: int, seed: int, dtype: torch.dtype
) -> None:
    query, key, value = _qkv(seed, q_shape, kv_shape, d_v, dtype)
    n_queries, n_keys = query.shape[-2], key.shape[-2]
    output = tiled_attention(query, key, value, block_size=block_size, causal=True)
    mask = causal_mask(n_queries, n_keys)  # (T, S), bottom-right aligned
    expected, _ = scaled_dot_product_attention(query, key, value, mask)
    torch.testing.assert_close(output, expected, **_tol(dtype))
    assert not output.isnan().any()
    if n_queries > n_keys:  # the first T - S queries see no key: rows of zeros
        assert (output[..., : n_queries - n_keys, :] == 0).all()
        assert (output[..., n_queries - n_keys :, :] != 0).any()
    if n_queries == n_keys:  # square: PyTorch's own is_causal agrees
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
        q, k, v = (x.expand(*batch, *x.shape[-2:]) for x in (query, key, value))
        torch.testing.assert_close(
            output, F.scaled_dot_product_attention(q, k, v, is_causal=True), **_tol(dtype)
        )


def test_causal_is_bottom_right_not_top_left() -> None:
    """With T < S the two alignments differ; ours must match causal_mask, not PyTorch's."""
    query, key, value = _qkv(3, (4, 8), (10, 8), 8, torch.float64)
    output = tiled_attention(query, key, value, block_size=3, causal=True)
    top_left = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    assert not torch.allclose(output, top_left)
    # The last query sees every key: the same row as without the causal rule.
    full = tiled_attention(query, key, value, block_size=3)
    torch.testing.assert_close(output[-1], full[-1])


def test_tiled_is_stable_for_large_scores() -> None:
    """Scores near 1e4 would overflow exp() without the running maximum."""
    query, key, value = _qkv(0, (2, 12, 4), (2, 30, 4), 4, torch.float32)
    query = query * 300.0
    output = tiled_attention(query, key, value, block_size=7, causal=True)
    assert torch.isfinite(output).all()
    expected, _ = scaled_dot_product_attention(query, key, value, is_causal=True)
    torch.testing.assert_close(output, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiled_keeps_16_bit_running_sums_in_float32(dtype: torch.dtype) -> None:
    """8192 equal keys: l = 8192 and acc = 81920 overflow float16 (max 65504) if kept in it."""
    query = torch.zeros(1, 1, 4, dtype=dtype)
    key = torch.zeros(1, 8192, 4, dtype=dtype)
    value = torch.full((1, 8192, 2), 10.0, dtype=dtype)
    output = tiled_attention(query, key, value, block_size=1024)
    assert output.dtype == dtype
    torch.testing.assert_close(output, torch.full((1, 1, 2), 10.0, dtype=dtype), rtol=0, atol=0)
    # 70000 keys: the running sum l alone would overflow float16
    key, value = torch.zeros(1, 70000, 4, dtype=dtype), torch.ones(1, 70000, 2, dtype=dtype)
    output = tiled_attention(query, key, value, block_size=8192)
    torch.testing.assert_close(output, torch.ones(1, 1, 2, dtype=dtype), rtol=0, atol=0)
    # random inputs: the float32 computation, rounded once to the 16-bit dtype
    query, key, value = _qkv(7, (2, 9, 8), (2, 300, 8), 5, torch.float32)
    output = tiled_attention(query.to(dtype), key.to(dtype), value.to(dtype), block_size=32)
    reference = tiled_attention(
        *(x.to(dtype).float() for x in (query, key, value)), block_size=32
    ).to(dtype)
    torch.testing.assert_close(output, reference, rtol=0, atol=0)


def test_tiled_gradients_match() -> None:
    query, key, value = _qkv(5, (2, 9, 4), (2, 11, 4), 3, torch.float64)
    for x in (query, key, value):
        x.requires_grad_(True)
    tiled_attention(query, key, value, block_size=4, causal=True).square().sum().backward()
    grads = [x.grad.clone() for x in (query, key, value)]
    for x in (query, key, value):
        x.grad = None
    expected, _ = scaled_dot_product_attention(query, key, value, is_causal=True)
    expected.square().sum().backward()
    for got, x in zip(grads, (query, key, value)):
        torch.testing.assert_close(got, x.grad)


class _RecordShapes(TorchDispatchMode):
    """Records the shape of every tensor that every operation inside the ``with`` returns."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.shapes.append(tuple(x.shape))
        return out


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_never_creates_the_t_by_s_matrix(causal: bool) -> None:
    n_queries, n_keys, width, block = 96, 128, 4, 16
    query, key, value = _qkv(0, (2, n_queries, width), (2, n_keys, width), width, torch.float32)
    with _RecordShapes() as tiled:
        tiled_attention(query, key, value, block_size=block, causal=causal)
    largest = max(math.prod(s) for s in tiled.shapes)
    assert largest <= 2 * n_queries * block  # scores of one block: (B, T, block)
    assert not any(s[-2:] == (n_queries, n_keys) for s in tiled.shapes if len(s) >= 2)
    # The same hook sees the (T, S) matrix of the naive path: this test can fail.
    with _RecordShapes() as naive:
        scaled_dot_product_attention(query, key, value, is_causal=causal)
    assert any(s[-2:] == (n_queries, n_keys) for s in naive.shapes if len(s) >= 2)
    assert max(math.prod(s) for s in naive.shapes) >= 2 * n_queries * n_keys


@pytest.mark.parametrize(
    "block_size", [0, -3, 2.0, 64.5, True, False, "64", None], ids=lambda b: repr(b)
)
def test_bad_block_size(block_size: object) -> None:
    query, key, value = _qkv(0, (4, 8), (4, 8), 8, torch.float32)
    with pytest.raises(ValueError, match="block_size"):
        tiled_attention(query, key, value, block_size=block_size)


def test_bad_causal() -> None:
    query, key, value = _qkv(0, (4, 8), (4, 8), 8, torch.float32)
    with pytest.raises(ValueError, match="causal"):
        tiled_attention(query, key, value, causal=1)


BAD_INPUTS = [  # (query, key, value, the start of the message: it names the argument)
    (torch.randn(8), torch.randn(4, 8), torch.randn(4, 8), r"^query must have shape"),
    (torch.randn(4, 8), torch.randn(4, 7), torch.randn(4, 8), r"^key must have shape .* d_k = 8"),
    (torch.randn(4, 8), torch.randn(4, 8), torch.randn(5, 8), r"^value must have shape"),
    (torch.randn(4, 8), torch.randn(0, 8), torch.randn(0, 8), r"^key must have shape .* S >= 1"),
    (torch.randn(4, 8), torch.randn(4, 8).double(), torch.randn(4, 8), r"share one dtype"),
    (torch.randn(2, 4, 8), torch.randn(3, 4, 8), torch.randn(3, 4, 8), r"^the batch dimensions"),
    (torch.ones(4, 8, dtype=torch.long), torch.randn(4, 8), torch.randn(4, 8), r"^query .* float"),
    ([[1.0]], torch.randn(4, 8), torch.randn(4, 8), r"^query must be a torch tensor"),
]


@pytest.mark.parametrize(("query", "key", "value", "match"), BAD_INPUTS)
@pytest.mark.parametrize("function", ["tiled", "linformer"])
def test_bad_inputs(query: object, key: object, value: object, match: str, function: str) -> None:
    if function == "tiled":
        with pytest.raises(ValueError, match=match):
            tiled_attention(query, key, value, block_size=2)
    else:
        n_keys = key.shape[-2] if isinstance(key, torch.Tensor) and key.ndim >= 2 else 4
        proj = torch.eye(max(n_keys, 1))[:, :n_keys]  # (k, S)
        with pytest.raises(ValueError, match=match):
            linformer_attention(query, key, value, proj)


# --------------------------------------------------------- Linformer attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_linformer_with_identity_is_full_attention(seed: int, dtype: torch.dtype) -> None:
    query, key, value = _qkv(seed, (2, 3, 11, 8), (2, 3, 17, 8), 5, dtype)
    identity = torch.eye(17, dtype=dtype)  # k = S, nothing lost
    output = linformer_attention(query, key, value, identity)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(query, key, value))
    torch.testing.assert_close(linformer_attention(query, key, value, identity, identity), output)


def test_linformer_matches_attention_on_projected_keys_and_values() -> None:
    query, key, value = _qkv(4, (2, 10, 8), (2, 30, 8), 6, torch.float64)
    g = torch.Generator().manual_seed(9)
    proj_k = torch.randn(7, 30, generator=g, dtype=torch.float64) / math.sqrt(7)
    proj_v = torch.randn(7, 30, generator=g, dtype=torch.float64) / math.sqrt(7)
    output = linformer_attention(query, key, value, proj_k, proj_v)
    assert output.shape == (2, 10, 6)
    expected, weights = scaled_dot_product_attention(query, proj_k @ key, proj_v @ value)
    assert weights.shape == (2, 10, 7)  # T x k scores, not T x S
    torch.testing.assert_close(output, expected)
    # proj_v defaults to proj_k, and using a different one changes the result
    shared = linformer_attention(query, key, value, proj_k)
    torch.testing.assert_close(shared, linformer_attention(query, key, value, proj_k, proj_k))
    assert not torch.allclose(shared, output)


@pytest.mark.parametrize("rank", [1, 3, 6])
def test_linformer_output_has_rank_at_most_k(rank: int) -> None:
    """softmax(Q K'ᵀ) V' is a (T, k) @ (k, d_v) product: its rank is at most k."""
    n, width = 40, 24
    query, key, value = _qkv(rank, (n, width), (n, width), width, torch.float64)
    proj = torch.randn(rank, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    output = linformer_attention(query, key, value, proj)
    assert int(torch.linalg.matrix_rank(output)) <= rank
    full = F.scaled_dot_product_attention(query, key, value)  # the check can fail:
    assert int(torch.linalg.matrix_rank(full)) > rank  # full attention has higher rank


def test_linformer_is_exact_with_the_identity_and_with_a_selection() -> None:
    """Projecting with I (k = S) is full attention; with the first k rows of I, it is full
    attention over the first k keys. (How the error of pooling projections falls as k grows
    is measured in chapter 14 and benchmarks/sparse_low_rank.py.)"""
    query, key, value = _qkv(0, (16, 8), (64, 8), 8, torch.float64)
    full = F.scaled_dot_product_attention(query, key, value)
    exact = linformer_attention(query, key, value, torch.eye(64, dtype=torch.float64))
    torch.testing.assert_close(exact, full)
    # Keeping only the first k keys (a selection matrix) is exact on those keys' attention.
    select = torch.eye(64, dtype=torch.float64)[:10]  # (10, 64)
    torch.testing.assert_close(
        linformer_attention(query, key, value, select),
        F.scaled_dot_product_attention(query, key[:10], value[:10]),
    )


BAD_PROJECTIONS = [  # (proj_k, proj_v, the argument the message must name)
    (torch.randn(3, 9), None, "proj_k"),  # S = 10 expected
    (torch.randn(10), None, "proj_k"),  # not 2-D
    (torch.randn(0, 10), None, "proj_k"),  # k = 0
    (torch.randn(2, 3, 10), None, "proj_k"),  # batched projections are not supported
    (torch.ones(3, 10, dtype=torch.long), None, "proj_k"),  # not floating point
    ("eye", None, "proj_k"),
    (torch.randn(3, 10), torch.randn(4, 10), "proj_v"),  # k differs
    (torch.randn(3, 10), torch.randn(3, 11), "proj_v"),
    (torch.randn(3, 10).double(), None, "dtype"),
    (torch.randn(3, 10), torch.randn(3, 10).double(), "proj_v"),  # proj_v's dtype alone differs
]


@pytest.mark.parametrize(("proj_k", "proj_v", "name"), BAD_PROJECTIONS)
def test_linformer_bad_projections(proj_k: object, proj_v: object, name: str) -> None:
    query, key, value = _qkv(0, (2, 5, 8), (2, 10, 8), 8, torch.float32)
    with pytest.raises(ValueError, match=name):
        linformer_attention(query, key, value, proj_k, proj_v)
