"""Tests of attnbook.scores: agreement with torch, invariants, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnbook import cosine_similarity, dot_product, score_matrix


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_score_matrix_is_all_pairwise_dot_products(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    s = score_matrix(q, k)
    assert s.shape == (3, 5)
    for t in range(3):
        for j in range(5):
            assert s[t, j] == pytest.approx(dot_product(q[t], k[j]))


@pytest.mark.parametrize(
    ("shape_q", "shape_k"), [((2, 3, 4), (2, 5, 4)), ((2, 1, 3, 4), (3, 6, 4))]
)
def test_score_matrix_batches_and_broadcasts_like_torch(shape_q: tuple, shape_k: tuple) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(*shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(*shape_k, generator=g, dtype=torch.float64)
    torch.testing.assert_close(score_matrix(q, k), q @ k.transpose(-2, -1))
    torch.testing.assert_close(score_matrix(q, k, scale=0.5), 0.5 * (q @ k.transpose(-2, -1)))
    np.testing.assert_allclose(
        score_matrix(q.numpy(), k.numpy()), (q @ k.transpose(-2, -1)).numpy()
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_cosine_agrees_with_torch(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(4, 6, generator=g, dtype=torch.float64)
    b = torch.randn(4, 6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(cosine_similarity(a, b), F.cosine_similarity(a, b, dim=-1))
    np.testing.assert_allclose(
        cosine_similarity(a.numpy(), b.numpy()), F.cosine_similarity(a, b, dim=-1).numpy()
    )


def test_dot_product_of_stacked_vectors_sums_over_the_last_axis() -> None:
    """One score per pair of rows, and a vector against a stack broadcasts: the sum runs over
    d, never over the stack (which a 1-D example cannot tell apart)."""
    a = np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 4.0]])
    b = np.array([[2.0, 0.0, 1.0], [5.0, 1.0, 0.5]])
    np.testing.assert_array_equal(dot_product(a, b), [5.0, 1.0])
    np.testing.assert_array_equal(dot_product(a[0], b), [5.0, 8.5])
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    torch.testing.assert_close(dot_product(ta, tb), torch.tensor([5.0, 1.0], dtype=torch.float64))


def test_cosine_ignores_length_and_dot_product_does_not() -> None:
    a = np.array([1.0, 2.0, 0.5])
    assert cosine_similarity(a, 10 * a) == pytest.approx(1.0)
    assert cosine_similarity(a, -a) == pytest.approx(-1.0)
    assert dot_product(a, 10 * a) == pytest.approx(10 * dot_product(a, a))
    assert cosine_similarity(np.array([1.0, 0.0]), np.array([0.0, 2.0])) == pytest.approx(0.0)


def test_cosine_of_a_zero_vector_is_zero_not_nan() -> None:
    assert cosine_similarity(np.zeros(3), np.ones(3)) == 0.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_cosine_in_low_precision_keeps_the_zero_vector_rule(dtype: torch.dtype) -> None:
    """In float16 ``eps = 1e-8`` is 0: computing in float32 keeps the rule (no NaN)."""
    zero, one = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    small = torch.tensor([1e-4, 0.0], dtype=dtype)  # its squared length underflows in float16
    for a, b, want in ((zero, one, 0.0), (small, small, 1.0), (one, -one, -1.0)):
        got = cosine_similarity(a, b)
        assert got.dtype == dtype
        assert float(got) == pytest.approx(want, abs=1e-2)
    if dtype != torch.bfloat16:  # NumPy has no bfloat16
        np_dtype = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
        got = cosine_similarity(zero.numpy(), one.numpy())
        assert got.dtype == np_dtype[dtype]
        assert got == 0.0
        assert cosine_similarity(small.numpy(), small.numpy()) == pytest.approx(1.0, abs=1e-2)


@pytest.mark.parametrize(
    ("fn", "args", "match"),
    [
        (
            dot_product,
            (np.zeros(3), np.zeros(4)),
            r"same last dimension d, got a \(3\) and b \(4\)",
        ),
        (dot_product, (np.zeros((2, 3)), np.zeros((4, 3))), "do not broadcast"),
        (dot_product, (np.zeros(3), torch.zeros(3)), "both be NumPy arrays or both torch tensors"),
        (dot_product, (np.array(1.0), np.zeros(1)), "at least 1 dimension"),
        (dot_product, (np.zeros(0), np.zeros(0)), "last dimension d >= 1"),
        (cosine_similarity, (np.arange(3), np.ones(3)), "a must hold floating-point"),
        (cosine_similarity, (np.ones(3), np.ones(3), 0.0), "eps must be a finite number > 0"),
        (
            score_matrix,
            (np.zeros(3), np.zeros((2, 3))),
            r"queries must have shape \(..., T, d\), got \(3\)",
        ),
        (score_matrix, (np.zeros((2, 3)), np.zeros((2, 4))), r"queries \(2, 3\) and keys \(2, 4\)"),
        (score_matrix, (np.zeros((2, 2, 3)), np.zeros((3, 2, 3))), "batch dimensions"),
        (
            score_matrix,
            (np.zeros((2, 3)), np.zeros((2, 3)), -1.0),
            "scale must be a finite number > 0",
        ),
        (
            score_matrix,
            (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3)),
            "queries must be a floating-point tensor",
        ),
    ],
)
def test_bad_input_raises_a_clear_value_error(fn, args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fn(*args)


def test_dot_product_treats_mixed_dtypes_as_score_matrix_does() -> None:
    """dot_product promoted a float32 tensor against a float64 one, which score_matrix refuses."""
    a, b = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"b must have the dtype of a \(torch.float32\), got "):
        dot_product(a, b)
    with pytest.raises(ValueError, match=r"keys must have the dtype of queries \(torch.float32\)"):
        score_matrix(a, b)
    # NumPy arrays promote in both, as NumPy does
    a, b = np.ones((2, 3), dtype=np.float32), np.ones((2, 3))
    assert dot_product(a, b).dtype == score_matrix(a, b).dtype == np.float64


@pytest.mark.parametrize("dtype_b", [torch.float32, torch.float64])
def test_cosine_similarity_treats_mixed_dtypes_as_dot_product_does(dtype_b: torch.dtype) -> None:
    """cosine_similarity promoted float16 against float32 (or float64), which dot_product refuses."""
    a, b = torch.ones(2, 3, dtype=torch.float16), torch.ones(2, 3, dtype=dtype_b)
    for fn in (dot_product, cosine_similarity):
        with pytest.raises(ValueError, match=r"b must have the dtype of a \(torch.float16\), got "):
            fn(a, b)
    a, b = np.ones((2, 3), dtype=np.float16), np.ones((2, 3), dtype=np.float32)
    assert dot_product(a, b).dtype == cosine_similarity(a, b).dtype == np.float32


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([float("inf"), 1.0], [1.0, 1.0], "a must be finite"),
        ([1.0, 1.0], [float("nan"), 1.0], "b must be finite"),
        ([1e20, 1e20], [1e20, 1e20], "a and b are too long for .*float32"),
        ([1e20, 0.0], [1e-20, 1e-20], "a and b are too long"),  # |a|^2 = 1e40 overflows
    ],
)
def test_cosine_refuses_what_would_be_nan(a: list, b: list, match: str, kind: str) -> None:
    """Before: NaN for an infinite entry, and NaN for float32 vectors longer than about 1.8e19."""
    make = torch.tensor if kind == "torch" else (lambda x: np.array(x, dtype=np.float32))
    with pytest.raises(ValueError, match=match):
        cosine_similarity(make(a), make(b))


def test_cosine_of_long_vectors_that_fit_is_exact() -> None:
    a, b = torch.tensor([1e18, 0.0]), torch.tensor([1e18, 1e18])
    assert cosine_similarity(a, b) == pytest.approx(2**-0.5)
    assert cosine_similarity(np.array([1e150, 0.0]), np.array([1e100, 1e100])) == pytest.approx(
        2**-0.5
    )
