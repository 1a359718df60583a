"""Checkers for the exercises of chapter 2 (softmax)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnbook.exercises._framework import (
    Case,
    Guard,
    Mistake,
    Verdict,
    forbid_calls,
    library_softmaxes,
    run_cases,
)
from attnbook.softmax import softmax


def _write_it_yourself(hint: str) -> Guard:
    """Fails an answer that calls the package's softmax or a library's (PyTorch, SciPy)."""
    return forbid_calls({"attnbook.softmax": softmax, **library_softmaxes()}, hint)


__all__ = ["check_softmax", "check_softmax_temperature"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


_SOFTMAX_CASES = [
    Case(
        "a small 1-D vector",
        lambda: (np.array([1.0, 2.0, 3.0]),),
        "Exponentiate every entry, then divide by the sum of the exponentials. x may have "
        "one axis, as here, or more: work along the last one, axis=-1 with keepdims=True "
        "(axis=1 or [:, None] fit a matrix only).",
    ),
    Case(
        "a 2-D matrix: one softmax per row",
        lambda: (_rng(21).normal(size=(3, 5)),),
        "Normalise along the last axis (axis=-1, keepdims=True), so that every row sums to 1.",
    ),
    Case(
        "equal scores",
        lambda: (np.zeros(4),),
        "Equal scores share the weight equally.",
        draw=lambda rng: (np.full(4, rng.uniform(-5.0, 5.0)),),  # zeros stay zeros if perturbed
    ),
    Case(
        "large scores (about 1e3): exp overflows",
        lambda: (np.array([1000.0, 999.0, 998.0]),),
        "exp(1000) is inf in float64. Subtract the row's maximum before exponentiating.",
    ),
    Case(
        "very negative scores: exp underflows to 0",
        lambda: (np.array([-1000.0, -1001.0, -1003.0]),),
        "Subtracting the maximum also keeps the sum from becoming 0 (0/0 = NaN).",
    ),
    Case(
        "a batch of matrices with large entries",
        lambda: (1e4 * _rng(22).normal(size=(2, 3, 4)),),
        "Take the maximum along the last axis only, per row (keepdims=True).",
    ),
]


def _shifted_by(shift: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """The stable softmax's steps, each row shifted by ``shift(x)`` (the row's maximum works)."""

    def answer(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - shift(x))
        return e / e.sum(axis=-1, keepdims=True)

    return answer


# Why the maximum, and no other statistic of the row, is the shift that works: the end of the
# hints of the two mistakes that shift by another one.
_WHY_THE_MAXIMUM = (
    "Shift by the row's maximum instead: the largest exponential is then exp(0) = 1, so none "
    "exceeds 1 and nothing overflows, and the sum is at least 1, so it cannot become 0 either."
)

_SOFTMAX_MISTAKES = [
    Mistake(
        "subtracting each row's mean instead of its maximum",
        _shifted_by(lambda x: x.mean(axis=-1, keepdims=True)),
        "The mean lies below the row's largest score (unless all are equal), so the top "
        "score's exponent stays positive: half the gap in a row of two scores such as "
        "[0, 2000], where exp(1000) is inf in float64 and inf / inf is NaN. " + _WHY_THE_MAXIMUM,
    ),
    Mistake(
        "subtracting each row's minimum instead of its maximum",
        _shifted_by(lambda x: x.min(axis=-1, keepdims=True)),
        "Subtracting the minimum makes every exponent at least 0, the opposite of what the shift "
        "is for: the top score's exponent becomes the whole spread of the row, so a row such as "
        "[-1000, 0], which even the formula as written gets right, overflows to inf / inf = NaN. "
        + _WHY_THE_MAXIMUM,
    ),
]


def check_softmax(fn: Callable[[np.ndarray], np.ndarray]) -> Verdict:
    """Check ``fn(x) -> weights``: a numerically stable softmax over the last axis.

    The exercise is to write it with NumPy: an answer that calls a library's
    softmax (``attnbook.softmax``, ``torch.softmax``, ``scipy.special.softmax``, ...)
    fails even though its numbers are right.
    """
    return run_cases(
        "softmax",
        fn,
        softmax,
        _SOFTMAX_CASES,
        mistakes=_SOFTMAX_MISTAKES,
        guard=_write_it_yourself(
            "write the three steps with NumPy: subtract the row's maximum, np.exp, divide by "
            "the row's sum; use attnbook.softmax afterwards, to check yours."
        ),
    )


# The stable softmax itself, the shift that works: what the temperature mistakes apply to.
_stable = _shifted_by(lambda z: z.max(axis=-1, keepdims=True))


def _whole_array_sum(z: np.ndarray) -> np.ndarray:
    e = np.exp(z)
    return e / e.sum()


# The advice of the case built to catch dividing by τ first; that mistake's hint ends with it,
# so a verdict that names the mistake gives it once.
_MAXIMUM_FIRST = (
    "Subtract each row's maximum first, then divide by τ: the gaps x - max(x) are <= 0, "
    "so dividing them can only reach -inf (weight 0), never inf - inf = NaN, and their exp "
    "is at most 1."
)

# The advice of the case built to catch the softmax without the maximum trick; that mistake's
# hint ends with it, so a verdict that names the mistake gives it once. It ends with the advice
# of the 1e307 case, where an answer that survives the case of size 10 (in extended precision,
# say) can still be named as the bare softmax, so that there too the advice comes once. Where
# the mistake is named, exp overflowed, so x / τ passed 709.78 (ln of float64's largest number).
_EXPONENT_FIRST = (
    "Scores / τ pass 709.78 here, beyond which exp overflows in float64. " + _MAXIMUM_FIRST
)

_TEMPERATURE_CASES = [
    Case(
        "temperature 1 is the plain softmax",
        lambda: (np.array([2.0, 1.0, 0.1]), 1.0),
        "With τ = 1 your function must agree with the ordinary softmax.",
    ),
    Case(
        "temperature 0.5 sharpens",
        lambda: (np.array([2.0, 1.0, 0.1]), 0.5),
        "Divide the scores (minus their maximum) by τ before exponentiating.",
    ),
    Case(
        "temperature 10 flattens",
        lambda: (_rng(31).normal(size=(2, 6)), 10.0),
        "Large τ makes the scores closer together, so the weights approach uniform.",
    ),
    Case(
        "tiny temperature 0.01 on scores of size 10 (overflows without the max trick)",
        lambda: (np.array([10.0, 9.0, 1.0]), 0.01),
        _EXPONENT_FIRST,
    ),
    Case(
        "scores of 1e307 at temperature 0.01 (dividing first overflows)",
        lambda: (np.array([[1e307, 0.0, -1e307], [3.0, 2.0, 1.0]]), 0.01),
        _MAXIMUM_FIRST,
    ),
]

_TEMPERATURE_MISTAKES = [
    Mistake(
        "dividing by τ before subtracting the maximum",
        lambda x, t: _stable(x / t),
        "x / τ overflows to inf for large scores and a small τ (1e307 / 0.01). The maximum "
        "of x / τ is max(x) / τ, so the order can change. " + _MAXIMUM_FIRST,
    ),
    Mistake(
        "multiplying by τ instead of dividing",
        lambda x, t: _stable(x * t),
        "A small τ must *sharpen* the weights (towards the arg-max), so the scores are divided "
        "by τ: a small τ makes their gaps larger.",
    ),
    Mistake(
        "dividing the weights by τ after the softmax",
        lambda x, t: _stable(x) / t,
        "τ acts on the scores, inside the exponential, before the normalisation: the weights "
        "must still sum to 1. Check that yours do with τ = 2.",
    ),
    Mistake(
        "normalising by the sum of the whole array, not of each row",
        lambda x, t: _whole_array_sum((x - x.max(axis=-1, keepdims=True)) / t),
        "Each row is its own softmax: sum the exponentials along the last axis only, "
        "e.sum(axis=-1, keepdims=True), so that every row adds up to 1 (a bare e.sum() adds "
        "up all the rows, and then only the whole array sums to 1).",
    ),
    Mistake(
        "the softmax without the maximum trick",
        lambda x, t: np.exp(x / t) / np.exp(x / t).sum(axis=-1, keepdims=True),
        "exp(x / τ) of the largest scores is inf, and inf / inf is NaN. " + _EXPONENT_FIRST,
    ),
]


def check_softmax_temperature(fn: Callable[[np.ndarray, float], np.ndarray]) -> Verdict:
    """Check ``fn(x, temperature) -> weights``: softmax of ``x / temperature`` over the last axis.

    The hidden cases include scores of ``1e307`` at ``τ = 0.01``, where one order of the
    operations overflows (chapter 2's Going deeper block on the temperature says which):
    an answer that overflows there fails, and so does one that calls a library's softmax.
    """
    return run_cases(
        "softmax_temperature",
        fn,
        lambda x, t: softmax(x, temperature=t),
        _TEMPERATURE_CASES,
        mistakes=_TEMPERATURE_MISTAKES,
        guard=_write_it_yourself(
            "write it with NumPy: subtract the row's maximum, divide by τ, np.exp, divide by "
            "the row's sum."
        ),
    )
