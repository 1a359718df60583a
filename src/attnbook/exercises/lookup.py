"""Checkers for the exercises of chapter 3 (attention as a soft dictionary lookup).

The learner's functions take and return NumPy arrays (torch tensors work too,
as long as the code uses operations both share, such as ``@`` and ``.T``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch.nn.functional as F

from attnbook.attention import scaled_dot_product_attention
from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    forbid_calls,
    library_softmaxes,
    run_cases,
)
from attnbook.lookup import hard_lookup, soft_lookup
from attnbook.softmax import softmax

__all__ = ["check_hard_lookup", "check_soft_lookup"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _dictionary(seed: int, n_keys: int, d: int, d_v: int) -> tuple[np.ndarray, np.ndarray]:
    rng = _rng(seed)
    return rng.normal(size=(n_keys, d)), rng.normal(size=(n_keys, d_v))


# The advice of the case built to catch dividing by τ first; that mistake's hint ends with it,
# so a verdict that names the mistake gives it once.
_MAXIMUM_FIRST = (
    "Subtract each row's maximum score first, then divide by τ: the gaps are <= 0, so "
    "dividing them can only reach -inf (weight 0), never inf - inf = NaN."
)

_SOFT_CASES = [
    Case(
        "one query, 4 keys, temperature 1",
        lambda: (_rng(301).normal(size=3), *_dictionary(302, 4, 3, 2), 1.0),
        "Score the query against every key (dot products), softmax the scores, "
        "then take the weighted sum of the values: the output has the width of a value.",
    ),
    Case(
        "one query, 5 keys, temperature 0.5 (sharper)",
        lambda: (_rng(303).normal(size=4), *_dictionary(304, 5, 4, 3), 0.5),
        "Divide the scores (minus their maximum) by the temperature inside the softmax "
        "(not after it, and not multiply).",
    ),
    Case(
        "one query, 3 keys, temperature 10 (flatter)",
        lambda: (_rng(305).normal(size=2), *_dictionary(306, 3, 2, 4), 10.0),
        "A large temperature brings the weights close to uniform: the output nears the mean value.",
    ),
    Case(
        "tiny temperature 0.01: the scores / τ reach the thousands",
        lambda: (
            np.array([10.0, 0.0]),
            np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]]),
            _rng(307).normal(size=(4, 2)),
            0.01,
        ),
        "exp overflows for scores / τ near 1000: subtract the maximum, then divide by τ, "
        "then exponentiate.",
    ),
    Case(
        "scores of 1e308 at temperature 0.01 (dividing first overflows)",
        lambda: (
            np.array([1e154, 0.0]),
            np.array([[1e154, 0.0], [0.0, 1.0], [-1.0, 0.0]]),
            np.arange(6.0).reshape(3, 2),
            0.01,
        ),
        _MAXIMUM_FIRST,
    ),
    Case(
        "three queries at once, shape (3, d), the last 100 times longer, temperature 0.1",
        lambda: (
            _rng(308).normal(size=(3, 4)) * np.array([[1.0], [1.0], [100.0]]),
            *_dictionary(309, 5, 4, 2),
            0.1,
        ),
        "The scores of (T, d) queries are a (T, S) matrix, one row per query: "
        "normalise each row over the keys (the last axis), subtracting that row's own "
        "maximum: the whole array's maximum belongs to the long query, and exp of the other "
        "rows' gaps to it underflows to 0.",
    ),
]


def _stable_softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _shifted(scores: np.ndarray) -> np.ndarray:
    return scores - scores.max(axis=-1, keepdims=True)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


_SOFT_MISTAKES = [
    Mistake(
        "dividing by τ before subtracting the maximum",
        lambda q, k, v, t: _stable_softmax(q @ k.T / t) @ v,
        "scores / τ overflows to inf for large scores and a small τ (1e308 / 0.01). "
        + _MAXIMUM_FIRST,
    ),
    Mistake(
        "multiplying the scores by τ",
        lambda q, k, v, t: _stable_softmax(q @ k.T * t) @ v,
        "A small τ must sharpen the weights: divide the scores by τ.",
    ),
    Mistake(
        "cosine similarities as the scores instead of dot products",
        lambda q, k, v, t: _stable_softmax(_shifted(_unit(q) @ _unit(k).T) / t) @ v,
        "The lookup scores with the raw dot product query · key, which also rewards a long "
        "key; cosine similarity divides the lengths out. Score with the plain dot products, "
        "unnormalised.",
    ),
    Mistake(  # before the sqrt(d) one: with d = 4 and τ = 0.5 (case 2) the two agree
        "the temperature left out",
        lambda q, k, v, t: _stable_softmax(q @ k.T) @ v,
        "Your weights are those of τ = 1 whatever τ is given: the temperature divides the "
        "scores inside the softmax, so a small τ sharpens the weights and a large one "
        "flattens them.",
    ),
    Mistake(
        "scores divided by sqrt(d) as well as by the temperature",
        lambda q, k, v, t: _stable_softmax(_shifted(q @ k.T / np.sqrt(k.shape[-1])) / t) @ v,
        "The soft lookup divides the scores by the temperature only, with nothing else "
        "scaled: the division by sqrt(d_k) belongs to scaled dot-product attention "
        "(chapter 4).",
    ),
    Mistake(
        "averaging the keys instead of the values",
        lambda q, k, v, t: _stable_softmax(q @ k.T / t) @ k,
        "The weights say how much of each *value* to take: the output is a weighted sum of "
        "values, with the width of a value.",
    ),
]


def check_soft_lookup(fn: Callable[..., np.ndarray]) -> Verdict:
    """Check ``fn(query, keys, values, temperature) -> output``, a soft dictionary lookup.

    ``query`` has shape ``(d,)`` (or ``(T, d)`` for several queries), ``keys``
    ``(S, d)``, ``values`` ``(S, d_v)``; the output has shape ``(d_v,)`` (or
    ``(T, d_v)``): the values averaged with the weights of chapter 3's soft lookup at the
    temperature ``τ`` (its sections "Make it soft" and "Temperature").
    The exercise is to write it without ``attnbook``: an answer that calls the
    package's lookup or softmax, or a library's softmax or attention, fails.
    """
    return run_cases(
        "soft_lookup",
        fn,
        lambda q, k, v, t: soft_lookup(q, k, v, temperature=t)[0],
        _SOFT_CASES,
        mistakes=_SOFT_MISTAKES,
        guard=forbid_calls(
            {
                "attnbook.soft_lookup": soft_lookup,
                "attnbook.softmax": softmax,
                "attnbook.scaled_dot_product_attention": scaled_dot_product_attention,
                "F.scaled_dot_product_attention": F.scaled_dot_product_attention,
                **library_softmaxes(),
            },
            "write the three steps with NumPy: the dot products with the keys, a stable "
            "softmax with the temperature (maximum first, then divide by τ), and the weighted "
            "sum of the values.",
        ),
    )


_HARD_CASES = [
    Case(  # scores -1, 0.5, 1, 1.5: the arg-min (0) and the key before the best (2) differ
        "one query, 4 keys",
        lambda: (
            np.array([1.0, 0.5]),
            np.array([[-1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]),
            np.arange(8.0).reshape(4, 2),
        ),
        "Find the key with the largest dot product with the query and return the value "
        "stored under it (a row of values, not of keys).",
    ),
    Case(
        "a query that points away from most keys",
        lambda: (np.array([-2.0, 0.1, 0.0]), *_dictionary(311, 5, 3, 3)),
        "The best match has the *largest* dot product with the query (arg-max, not arg-min).",
    ),
    Case(
        "a long key beats a short, perfectly aligned one",
        lambda: (
            np.array([1.0, 0.0]),
            np.array([[1.0, 0.0], [3.0, 3.0], [0.0, 1.0]]),
            np.arange(6.0).reshape(3, 2),
        ),
        "The score is the raw dot product, which grows with the key's length: key (3, 3) "
        "scores 3 against (1, 0), key (1, 0) only 1.",
    ),
    Case(
        "random query, 6 keys, values of width 4",
        lambda: (_rng(312).normal(size=5), *_dictionary(313, 6, 5, 4)),
        "Compute one dot product per key, find the index of the largest, and return that row of values.",
    ),
]


def _cosine_lookup(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v[np.argmax(k @ q / (np.linalg.norm(k, axis=-1) * np.linalg.norm(q)))]


_HARD_MISTAKES = [
    Mistake(
        "the arg-max of cosine similarity instead of the dot product",
        _cosine_lookup,
        "Cosine similarity divides out the lengths, so it picks the key pointing most nearly "
        "the query's way; the lookup scores with the raw dot product query · key, which also "
        "rewards a long key. Drop the normalisation: score each key by its plain dot "
        "product with the query.",
    ),
    Mistake(  # before the arg-min: where the most negative score is the largest in size,
        # the two pick the same key, and an arg-min answer already failed on the first case
        "the largest score in absolute value instead of the largest score",
        lambda q, k, v: v[np.argmax(np.abs(k @ q))],
        "A large negative score means the key points away from the query, a bad match: the "
        "best key has the largest score, its sign included.",
    ),
    Mistake(
        "the arg-min instead of the arg-max",
        lambda q, k, v: v[np.argmin(k @ q)],
        "The best match has the *largest* dot product with the query, not the smallest.",
    ),
    Mistake(
        "returning the best key instead of its value",
        lambda q, k, v: k[np.argmax(k @ q)],
        "The key is what you match against; the answer is the value stored under it, the "
        "row of values at the best key's index, of width d_v.",
    ),
]


def check_hard_lookup(fn: Callable[..., np.ndarray]) -> Verdict:
    """Check ``fn(query, keys, values) -> value``: the value of the key with the largest dot product.

    ``query`` has shape ``(d,)``, ``keys`` ``(S, d)``, ``values`` ``(S, d_v)``;
    the result has shape ``(d_v,)``. An answer that calls ``attnbook.hard_lookup``
    (the function the exercise asks you to write) fails.
    """
    return run_cases(
        "hard_lookup",
        fn,
        hard_lookup,
        _HARD_CASES,
        mistakes=_HARD_MISTAKES,
        guard=forbid_calls(
            {"attnbook.hard_lookup": hard_lookup},
            "score every key by its dot product with the query, find the index of the "
            "largest score, and return the value stored there.",
        ),
    )
