"""Checkers for the exercises of chapter 1 (scores)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    all_of,
    forbid_calls,
    no_python_loops,
    run_cases,
)
from attnbook.scores import cosine_similarity, dot_product, score_matrix

__all__ = ["check_cosine_similarity", "check_score_matrix"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


_SCORE_MATRIX_CASES = [
    Case(
        "2 queries, 3 keys, width 4",
        lambda: (_rng(1).normal(size=(2, 4)), _rng(2).normal(size=(3, 4))),
        "Entry [t, s] is the dot product of query t with key s; the result has one row per "
        "query. If your matrix product raised a shape error: it multiplies an (n, k) array by "
        "a (k, m) one, and a (T, d) and an (S, d) array do not line up that way as they are.",
    ),
    Case(
        "1 query, 5 keys",
        lambda: (_rng(3).normal(size=(1, 3)), _rng(4).normal(size=(5, 3))),
        "The output has shape (T, S): T queries down, S keys across.",
    ),
    Case(
        "4 queries, 4 keys (square, so a transpose mistake hides in the shape)",
        lambda: (_rng(5).normal(size=(4, 6)), _rng(6).normal(size=(4, 6))),
        "Entry [t, s] is query t · key s. With as many queries as keys, a product in the other "
        "order has the right shape but holds entry [s, t] there: compare one entry of yours "
        "with a dot product you compute by hand.",
    ),
    Case(
        "vectors with large entries",
        lambda: (100 * _rng(7).normal(size=(3, 2)), 100 * _rng(8).normal(size=(2, 2))),
        "Do not normalise the vectors: a score is a raw dot product.",
    ),
    Case(
        "6 queries, 8 keys, width 5",
        lambda: (_rng(9).normal(size=(6, 5)), _rng(10).normal(size=(8, 5))),
        "All T × S dot products at once, in one matrix product: arrange its two operands so "
        "that their inner dimensions are both d and the result is (T, S).",
    ),
]

_SCORE_MATRIX_MISTAKES = [
    Mistake(
        "keys @ queries.T, the transpose of the score matrix",
        lambda q, k: k @ q.T,
        "Rows are queries and columns keys: scores[t, s] = queries[t] · keys[s], of shape "
        "(T, S). Check with 1 query and 3 keys: the result must be one row of 3.",
    ),
    Mistake(
        "cosine similarities instead of dot products",
        lambda q, k: (
            (q / np.linalg.norm(q, axis=-1, keepdims=True))
            @ (k / np.linalg.norm(k, axis=-1, keepdims=True)).T
        ),
        "Do not divide by the lengths: a score is the raw dot product.",
    ),
    Mistake(
        "scores divided by sqrt(d), the scaled scores of chapter 4",
        lambda q, k: q @ k.T / np.sqrt(q.shape[-1]),
        "The exercise asks for the raw dot products, with nothing scaled: the division by "
        "sqrt(d_k) belongs to scaled dot-product attention (chapter 4).",
    ),
    Mistake(
        "an elementwise product instead of a matrix product",
        lambda q, k: q * k,
        "q * k multiplies entry by entry; the dot products of every query with every key "
        "come from one matrix product, of shape (T, S).",
    ),
]


def check_score_matrix(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Verdict:
    """Check ``fn(queries, keys) -> scores`` with queries ``(T, d)``, keys ``(S, d)``, scores ``(T, S)``.

    The exercise asks for one matrix product, without Python loops: an answer
    that loops (``for``, ``while``, a comprehension, ``map``, ``np.vectorize``)
    fails even when its numbers are right, and so does one that calls
    ``attnbook.score_matrix`` (the function the exercise asks you to write).
    """
    return run_cases(
        "score_matrix",
        fn,
        score_matrix,
        _SCORE_MATRIX_CASES,
        mistakes=_SCORE_MATRIX_MISTAKES,
        guard=all_of(
            forbid_calls(
                {"attnbook.score_matrix": score_matrix, "attnbook.dot_product": dot_product},
                "write the matrix product yourself, with @; use attnbook.score_matrix "
                "afterwards, to check yours.",
            ),
            no_python_loops(
                "loops over queries and keys compute one dot product at a time, far "
                "slower than one matrix product. Write the whole (T, S) matrix at once, as "
                "one matrix product whose inner dimensions are both d."
            ),
        ),
    )


# The orthogonal vectors come first: the cosine distance (1) and the angle (pi / 2) differ
# there, and are named apart, where parallel vectors give both 0.
_COSINE_CASES = [
    Case(
        "two orthogonal vectors",
        lambda: (np.array([1.0, 0.0]), np.array([0.0, 3.0])),
        "Orthogonal vectors have cosine similarity 0.",
    ),
    Case(
        "two parallel vectors of different length",
        lambda: (np.array([1.0, 2.0, 2.0]), np.array([2.0, 4.0, 4.0])),
        "Parallel vectors have cosine similarity 1, whatever their lengths.",
    ),
    Case(
        "opposite vectors",
        lambda: (np.array([1.0, -2.0, 0.5]), np.array([-2.0, 4.0, -1.0])),
        "Divide the dot product by the product of both lengths; opposite directions give -1.",
    ),
    Case(
        "random vectors of width 8",
        lambda: (_rng(11).normal(size=8), _rng(12).normal(size=8)),
        "The first three cases' answers are 0, 1 and -1; this one lies strictly between. "
        "Compare your function with the cosine similarity of chapter 1's section 'Length "
        "versus direction', which compares directions only: scaling a or b by a positive "
        "number must leave your result unchanged, it must stay within [-1, 1], and it must "
        "be the number itself, not rounded.",
    ),
]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.arccos(np.clip(_cosine(a, b), -1.0, 1.0)))  # radians, in [0, pi]


_COSINE_MISTAKES = [
    Mistake(
        "the cosine distance 1 - cos θ instead of the cosine similarity",
        lambda a, b: 1.0 - _cosine(a, b),
        "1 - cos θ is the cosine distance (SciPy's distance.cosine): 0 for parallel vectors, "
        "1 for orthogonal ones, 2 for opposite ones. The similarity is the cosine itself, "
        "between -1 and 1: check that parallel vectors give 1 and opposite ones -1.",
    ),
    Mistake(
        "the angle θ in radians (arccos of the cosine) instead of the cosine similarity",
        _angle,
        "arccos turns the cosine into the angle between the vectors, π / 2 for orthogonal "
        "ones and π for opposite ones. The exercise asks for the cosine of that angle, "
        "between -1 and 1: check that orthogonal vectors give 0 and opposite ones -1.",
    ),
    Mistake(
        "the angle θ in degrees instead of the cosine similarity",
        lambda a, b: math.degrees(_angle(a, b)),
        "That is the angle between the vectors in degrees, 90 for orthogonal ones. The "
        "exercise asks for the cosine of that angle, between -1 and 1: check that orthogonal "
        "vectors give 0 and opposite ones -1.",
    ),
    Mistake(
        "the squared lengths a·a and b·b in the denominator, without the square root",
        lambda a, b: (a @ b) / ((a @ a) * (b @ b)),
        "a·a is the squared length: the length is its square root, ‖a‖ = sqrt(a·a) (or "
        "np.linalg.norm(a)). Divide the dot product by ‖a‖ ‖b‖.",
    ),
    Mistake(
        "the dot product a·b alone, not divided by the lengths",
        lambda a, b: float(a @ b),
        "The dot product grows with both lengths (for parallel vectors it is their product): "
        "the cosine similarity divides it by ‖a‖ ‖b‖, so that only the directions count.",
    ),
    Mistake(
        "the dot product divided by one length only",
        lambda a, b: float(a @ b / np.linalg.norm(a)),
        "Dividing by ‖a‖ alone leaves the length of b in the result (a·b / ‖a‖ is the length "
        "of b's shadow on a's direction): divide by both lengths, ‖a‖ ‖b‖.",
    ),
    Mistake(
        "the dot product divided by the other length only",
        lambda a, b: float(a @ b / np.linalg.norm(b)),
        "Dividing by ‖b‖ alone leaves the length of a in the result: divide by both lengths, "
        "‖a‖ ‖b‖.",
    ),
    Mistake(
        "dividing by ‖a‖, then multiplying by ‖b‖",
        lambda a, b: (a @ b) / np.linalg.norm(a) * np.linalg.norm(b),
        "Python reads x / y * z as (x / y) * z, left to right: the second length ends up in "
        "the numerator. Both lengths belong in the denominator, so group their product "
        "before dividing; parallel vectors must then give exactly 1.",
    ),
]


def _library_cosines() -> dict[str, object]:
    """The cosine similarities of the package, PyTorch and SciPy (if installed)."""
    found: dict[str, object] = {
        "attnbook.cosine_similarity": cosine_similarity,
        "torch.nn.functional.cosine_similarity": F.cosine_similarity,
        "torch.cosine_similarity": torch.cosine_similarity,
    }
    try:
        import scipy.spatial.distance
    except ImportError:  # SciPy is not a dependency of the package
        return found
    found["scipy.spatial.distance.cosine"] = scipy.spatial.distance.cosine
    found["scipy.spatial.distance.cdist"] = scipy.spatial.distance.cdist
    return found


def check_cosine_similarity(fn: Callable[[np.ndarray, np.ndarray], float]) -> Verdict:
    """Check ``fn(a, b) -> float``, the cosine similarity of two 1-D vectors.

    The exercise is to write the formula: an answer that calls a library's
    cosine similarity (``attnbook``'s, PyTorch's or SciPy's) fails.
    """
    return run_cases(
        "cosine_similarity",
        fn,
        cosine_similarity,
        _COSINE_CASES,
        mistakes=_COSINE_MISTAKES,
        guard=forbid_calls(
            _library_cosines(),
            "divide the dot product by the two lengths yourself, with np.linalg.norm or "
            "the square root of a vector's dot product with itself.",
        ),
    )
