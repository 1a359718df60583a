"""Tests of attnbook.softmax: invariants, agreement with torch and SciPy, bad input."""

from __future__ import annotations

import decimal
import itertools

import numpy as np
import pytest
import scipy.special
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnbook import log_softmax, softmax, softmax_jacobian

finite_floats = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 7)), elements=finite_floats))
def test_weights_are_a_probability_distribution(x: np.ndarray) -> None:
    w = softmax(x)
    assert w.shape == x.shape
    assert np.all(w >= 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=0, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 8), elements=st.floats(-50, 50, width=64)),
    st.floats(-1e3, 1e3, width=64),
)
def test_shift_invariance(x: np.ndarray, c: float) -> None:
    np.testing.assert_allclose(softmax(x + c), softmax(x), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_agrees_with_scipy_and_torch(seed: int, axis: int) -> None:
    x = np.random.default_rng(seed).normal(scale=5.0, size=(3, 4, 5))
    expected = scipy.special.softmax(x, axis=axis)
    np.testing.assert_allclose(softmax(x, axis=axis), expected, rtol=1e-12, atol=1e-15)
    t = torch.from_numpy(x)
    torch.testing.assert_close(softmax(t, axis=axis), torch.softmax(t, dim=axis))
    np.testing.assert_allclose(
        log_softmax(x, axis=axis), scipy.special.log_softmax(x, axis=axis), atol=1e-12
    )
    torch.testing.assert_close(log_softmax(t, axis=axis), torch.log_softmax(t, dim=axis))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_at_1e4(dtype: type) -> None:
    x = np.array([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4 - 2.0, -1e4 - 4.0]], dtype=dtype)
    w = softmax(x)
    assert w.dtype == dtype
    assert np.all(np.isfinite(w))
    expected = scipy.special.softmax(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(w, expected, rtol=1e-5)
    wt = softmax(torch.from_numpy(x))
    assert torch.isfinite(wt).all()


def test_temperature_limits() -> None:
    x = np.array([1.0, 3.0, 2.0, -1.0])
    cold = softmax(x, temperature=1e-3)
    np.testing.assert_allclose(cold, [0.0, 1.0, 0.0, 0.0], atol=1e-12)
    hot = softmax(x, temperature=1e6)
    np.testing.assert_allclose(hot, np.full(4, 0.25), atol=1e-5)
    np.testing.assert_allclose(softmax(x, temperature=2.0), softmax(x / 2.0))


# The temperature divides the gaps to the maximum, not the raw scores: dividing
# first overflows (700 / 0.01 is inf in float16, 1e307 / 0.01 in float64) and
# inf - inf gives NaN. Expected values come from exact decimal arithmetic.

DTYPES = [
    ("torch", torch.float16),
    ("torch", torch.bfloat16),
    ("torch", torch.float32),
    ("torch", torch.float64),
    ("numpy", np.float16),
    ("numpy", np.float32),
    ("numpy", np.float64),
]


def _make(kind: str, dtype: object, values: list[float]) -> np.ndarray | torch.Tensor:
    if kind == "torch":
        return torch.tensor(values, dtype=dtype)
    return np.asarray(values, dtype=dtype)


def _as_float64(x: np.ndarray | torch.Tensor) -> np.ndarray:
    return x.double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)


def _exact_softmax(x: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(x / τ) in 60-digit decimal arithmetic, where nothing overflows."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        ctx.Emin, ctx.Emax = -(10**9), 10**9
        z = [decimal.Decimal(float(v)) / decimal.Decimal(temperature) for v in x]
        top = max(z)
        e = [(v - top).exp() for v in z]
        total = sum(e)
        return np.array([float(v / total) for v in e])


def _largest(kind: str, dtype: object) -> float:
    info = torch.finfo(dtype) if kind == "torch" else np.finfo(dtype)
    return float(info.max)


TOLERANCE = {2: 2e-2, 4: 1e-5, 8: 1e-12}  # by the itemsize of the dtype (bfloat16 counts as 2)


@pytest.mark.parametrize(("kind", "dtype"), DTYPES, ids=lambda d: str(d))
@pytest.mark.parametrize("case", ["issue", "extremes"])
@pytest.mark.parametrize("temperature", [1e-300, 1e-30, 0.01, 1.0, 1e4, 1e30, 1e300])
def test_temperature_softmax_at_extreme_scores(
    kind: str, dtype: object, case: str, temperature: float
) -> None:
    big = _largest(kind, dtype)
    values = [700.0, 0.0, -3.0] if case == "issue" else [0.9 * big, 0.45 * big, 0.0, -0.9 * big]
    x = _make(kind, dtype, values)
    exact = _exact_softmax(_as_float64(x), temperature)  # of the numbers x really holds
    tol = TOLERANCE[x.element_size() if kind == "torch" else x.itemsize]
    w = softmax(x, temperature=temperature)
    log_w = log_softmax(x, temperature=temperature)
    for out in (w, log_w):
        assert type(out) is type(x)
        assert out.dtype == x.dtype
        assert not np.isnan(_as_float64(out)).any(), f"NaN at temperature {temperature}: {out}"
    np.testing.assert_allclose(_as_float64(w), exact, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.exp(_as_float64(log_w)), exact, rtol=tol, atol=tol)


@pytest.mark.parametrize(("kind", "dtype"), DTYPES, ids=lambda d: str(d))
def test_a_temperature_near_the_largest_number_divides_the_halved_gaps_by_half_of_it(
    kind: str, dtype: object
) -> None:
    """A gap that overflows (-0.9 max - 0.9 max) is halved to fit, and τ with it: same weights."""
    big = _largest(kind, dtype)
    x = _make(kind, dtype, [0.9 * big, 0.45 * big, 0.0, -0.9 * big])
    exact = _exact_softmax(_as_float64(x), big)  # the softmax of about [0, -0.45, -0.9, -1.8]
    tol = TOLERANCE[x.element_size() if kind == "torch" else x.itemsize]
    w = _as_float64(softmax(x, temperature=big))
    log_w = _as_float64(log_softmax(x, temperature=big))
    np.testing.assert_allclose(w, exact, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.exp(log_w), exact, rtol=tol, atol=tol)


def test_the_examples_of_the_bug_report() -> None:
    half = softmax(torch.tensor([700.0, 0.0], dtype=torch.float16), temperature=0.01)
    assert torch.equal(half, torch.tensor([1.0, 0.0], dtype=torch.float16))
    double = softmax(torch.tensor([1e307, 0.0], dtype=torch.float64), temperature=0.01)
    assert torch.equal(double, torch.tensor([1.0, 0.0], dtype=torch.float64))
    np.testing.assert_array_equal(softmax(np.array([1e307, 0.0]), temperature=0.01), [1.0, 0.0])
    # Dividing first really does give NaN: the order is what fixes it.
    z = torch.tensor([700.0, 0.0], dtype=torch.float16) / 0.01
    assert bool(torch.isnan(torch.exp(z - z.max())).any())


@pytest.mark.parametrize("temperature", [1e-300, 1e300])
def test_temperatures_beyond_the_dtype_give_the_limits(temperature: float) -> None:
    x = torch.tensor([[2.0, 2.0, -1.0, float("-inf")]], dtype=torch.float32)
    w = softmax(x, temperature=temperature)
    expected = [0.5, 0.5, 0.0, 0.0] if temperature < 1 else [1 / 3, 1 / 3, 1 / 3, 0.0]
    torch.testing.assert_close(w, torch.tensor([expected]))


def test_temperature_sharpens_monotonically() -> None:
    x = np.array([0.5, 2.0, 1.0])
    peaks = [softmax(x, temperature=t).max() for t in (4.0, 2.0, 1.0, 0.5, 0.25)]
    assert all(a < b for a, b in itertools.pairwise(peaks))


def test_negative_infinity_gets_zero_weight() -> None:
    x = np.array([1.0, -np.inf, 2.0])
    w = softmax(x)
    assert w[1] == 0.0
    np.testing.assert_allclose(w[[0, 2]], scipy.special.softmax([1.0, 2.0]))


def test_keeps_kind_dtype_and_gradient() -> None:
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    w = softmax(x)
    assert isinstance(w, torch.Tensor)
    assert w.dtype == torch.float64
    (w[:, 0]).sum().backward()
    assert x.grad is not None
    assert torch.isfinite(x.grad).all()


def test_accepts_lists_of_floats() -> None:
    np.testing.assert_allclose(softmax([0.0, 0.0]), [0.5, 0.5])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x": np.array([1, 2, 3])}, "x must hold floating-point"),
        ({"x": torch.tensor([1, 2, 3])}, "x must be a floating-point tensor"),
        ({"x": [1, 2]}, "x must hold floating-point"),
        ({"x": "abc"}, "x must be a NumPy array or a torch tensor"),
        ({"x": [[1.0, 2.0], [3.0]]}, "x must be .* rectangular shape, got a list whose rows"),
        ({"x": np.zeros((2, 0))}, "length 0 along axis"),
        ({"x": np.zeros(3), "axis": 1}, "axis must be in"),
        ({"x": np.zeros(3), "axis": 0.5}, "axis must be an int"),
        ({"x": np.array(1.0)}, "0-dimensional"),
        ({"x": np.zeros(3), "temperature": 0.0}, "temperature must be a finite number > 0"),
        ({"x": np.zeros(3), "temperature": -1.0}, "temperature must be a finite number > 0"),
        (
            {"x": np.zeros(3), "temperature": float("nan")},
            "temperature must be a finite number > 0",
        ),
        (
            {"x": np.zeros(3), "temperature": float("inf")},
            "temperature must be a finite number > 0",
        ),
        ({"x": np.array([1.0, np.nan])}, "NaN"),
        ({"x": np.array([1.0, np.inf])}, r"\+inf"),
        ({"x": np.array([[1.0, 2.0], [-np.inf, -np.inf]])}, "every entry is -inf"),
        ({"x": torch.tensor([-float("inf"), -float("inf")])}, "every entry is -inf"),
    ],
)
def test_bad_input_raises_a_clear_value_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        softmax(**kwargs)


@pytest.mark.parametrize(("kind", "dtype"), DTYPES[2:4] + DTYPES[5:], ids=lambda d: str(d))
def test_log_softmax_stays_finite_where_the_weight_underflows(kind: str, dtype: object) -> None:
    """z - logsumexp(z), not log(softmax(z)): a weight of exp(-200) is 0 in float32 (and
    exp(-1000) in float64), whose log is -inf; the log-weight is the gap itself."""
    gap = -200.0 if _largest(kind, dtype) < 1e300 else -1000.0
    log_w = log_softmax(_make(kind, dtype, [0.0, gap]))
    assert log_w.dtype == dtype
    np.testing.assert_allclose(_as_float64(log_w), [0.0, gap], rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_jacobian_matches_autograd(seed: int) -> None:
    x = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    expected = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, dim=-1), x)
    torch.testing.assert_close(softmax_jacobian(softmax(x)), expected)
    np.testing.assert_allclose(softmax_jacobian(softmax(x.numpy())), expected.numpy(), atol=1e-12)


def test_jacobian_vanishes_when_saturated() -> None:
    p = softmax(np.array([0.0, 1.0, 2.0]) * 100)
    assert np.abs(softmax_jacobian(p)).max() < 1e-30 + 1e-40
    assert np.abs(softmax_jacobian(softmax(np.zeros(3)))).max() > 0.1


def test_jacobian_rejects_non_distributions() -> None:
    with pytest.raises(ValueError, match="weights must be non-negative and sum to 1"):
        softmax_jacobian(np.array([0.5, 0.7]))
    with pytest.raises(ValueError, match="weights must have shape"):
        softmax_jacobian(np.array(1.0))


@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_jacobian_rejects_negative_weights_that_sum_to_one(kind: str) -> None:
    """[1.5, -0.5] sums to 1 but is no softmax output: the sign is checked, not only the sum."""
    p = _make(kind, torch.float64 if kind == "torch" else np.float64, [1.5, -0.5])
    with pytest.raises(ValueError, match="weights must be non-negative"):
        softmax_jacobian(p)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, np.float16])
def test_jacobian_takes_every_16_bit_output_of_softmax(dtype: object) -> None:
    """Its docstring takes softmax outputs: 16-bit rows, each weight rounded on its own, can sum
    to 1 - 2^-11 (float16) or 1 - 2^-8 (bfloat16), which a fixed 1e-4 tolerance refused."""
    generator = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(2000, 5, generator=generator)
    x = x.numpy().astype(dtype) if dtype is np.float16 else x.to(dtype)
    p = softmax(x)
    jacobian = softmax_jacobian(p)
    assert jacobian.shape == (2000, 5, 5)
    assert jacobian.dtype == p.dtype
    with pytest.raises(ValueError, match="sum to 1"):
        softmax_jacobian(p * 0.9)  # still refused: not softmax weights
