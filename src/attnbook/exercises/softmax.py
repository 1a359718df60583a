"""Checkers for the exercises of chapter 2 (softmax)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attnbook.exercises._framework import Case, Verdict, run_cases
from attnbook.softmax import softmax

__all__ = ["check_softmax", "check_softmax_temperature"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


_SOFTMAX_CASES = [
    Case(
        "a small 1-D vector",
        lambda: (np.array([1.0, 2.0, 3.0]),),
        "Exponentiate every entry, then divide by the sum of the exponentials.",
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


def check_softmax(fn: Callable[[np.ndarray], np.ndarray]) -> Verdict:
    """Check ``fn(x) -> weights``: a numerically stable softmax over the last axis."""
    return run_cases("softmax", fn, softmax, _SOFTMAX_CASES)


_TEMPERATURE_CASES = [
    Case(
        "temperature 1 is the plain softmax",
        lambda: (np.array([2.0, 1.0, 0.1]), 1.0),
        "With τ = 1 your function must agree with the ordinary softmax.",
    ),
    Case(
        "temperature 0.5 sharpens",
        lambda: (np.array([2.0, 1.0, 0.1]), 0.5),
        "Divide the scores by τ before the softmax (not after, and not multiply).",
    ),
    Case(
        "temperature 10 flattens",
        lambda: (_rng(31).normal(size=(2, 6)), 10.0),
        "Large τ makes the scores closer together, so the weights approach uniform.",
    ),
    Case(
        "tiny temperature 0.01 on scores of size 10 (overflows without the max trick)",
        lambda: (np.array([10.0, 9.0, 1.0]), 0.01),
        "Scores / τ can be 1000; subtract the maximum after dividing by τ.",
    ),
]


def check_softmax_temperature(fn: Callable[[np.ndarray, float], np.ndarray]) -> Verdict:
    """Check ``fn(x, temperature) -> weights``: softmax of ``x / temperature`` over the last axis."""
    return run_cases(
        "softmax_temperature",
        fn,
        lambda x, t: softmax(x, temperature=t),
        _TEMPERATURE_CASES,
    )
