"""The checkers of chapters 1-2 accept correct answers and reject typical wrong ones."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from attnbook.exercises import (
    check_cosine_similarity,
    check_score_matrix,
    check_softmax,
    check_softmax_temperature,
)


def _stable_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _naive_softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def _softmax_wrong_axis(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _softmax_global_max(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max())  # one maximum for the whole batch underflows other rows
        return e / e.sum(axis=-1, keepdims=True)


def test_softmax_checker_accepts_a_correct_answer() -> None:
    verdict = check_softmax(_stable_softmax)
    assert verdict
    assert verdict.passed
    assert verdict.attempted
    assert "all 6 hidden cases pass" in repr(verdict)


@pytest.mark.parametrize(
    ("wrong", "failing_case"),
    [
        (_naive_softmax, "exp overflows"),
        (_softmax_wrong_axis, "one softmax per row"),
        (lambda x: np.exp(x - x.max(axis=-1, keepdims=True)), "a small 1-D vector"),
        (_softmax_global_max, "a batch of matrices"),
    ],
)
def test_softmax_checker_rejects_typical_mistakes(wrong, failing_case: str) -> None:
    verdict = check_softmax(wrong)
    assert not verdict
    assert verdict.attempted
    assert failing_case in verdict.message
    assert "Hint:" in verdict.message
    assert "Traceback" not in verdict.message


@pytest.mark.parametrize(
    "matrix_only",
    [
        lambda x: (lambda e: e / e.sum(axis=1, keepdims=True))(
            np.exp(x - x.max(axis=1, keepdims=True))
        ),
        lambda x: (lambda e: e / e.sum(axis=-1)[:, None])(np.exp(x - x.max(axis=-1)[:, None])),
    ],
    ids=["axis=1", "[:, None]"],
)
def test_softmax_written_for_matrices_only_is_told_about_the_last_axis(matrix_only) -> None:
    """It raises on the 1-D case, whose hint was only the formula, which the answer has."""
    verdict = check_softmax(matrix_only)
    assert not verdict
    assert "case 1/6 (a small 1-D vector) raised" in verdict.message
    assert "axis=-1 with keepdims=True" in verdict.message.split("Hint:")[1]


def test_numbers_returned_as_text_fail_and_as_a_list_pass() -> None:
    """np.asarray(text, dtype=float) reads "0.5" as 0.5: text must not pass for numbers."""
    for as_text in (lambda y: y.astype(str), lambda y: y.astype(str).tolist()):
        verdict = check_softmax(lambda x, as_text=as_text: as_text(_stable_softmax(x)))
        assert not verdict.passed
        assert "returned text" in verdict.message
    assert check_softmax(lambda x: _stable_softmax(x).tolist()).passed


def test_complex_numbers_fail_without_a_warning() -> None:
    """Read as floats, complex numbers lose their imaginary parts with only a warning: a
    complex softmax passed."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's ComplexWarning
        verdict = check_softmax(lambda x: _stable_softmax(x).astype(complex))
    assert not verdict.passed
    assert "returned complex numbers (complex128), expected real numbers" in verdict.message


def test_a_returned_object_is_named_with_its_article() -> None:
    assert "returned an object, expected an array" in check_softmax(lambda x: object()).message
    assert "returned a dict, expected an array" in check_softmax(lambda x: {}).message


def test_a_wrong_answer_too_close_to_see_at_4_decimals_is_told_how_far_off_it_is() -> None:
    verdict = check_softmax(lambda x: _stable_softmax(x) + 2e-5)
    assert not verdict.passed
    assert "largest difference 2e-05 at index" in verdict.message


def test_stub_reads_as_not_attempted() -> None:
    def stub(x):
        raise NotImplementedError

    verdict = check_softmax(stub)
    assert not verdict
    assert not verdict.attempted
    assert "not attempted yet" in verdict.message


def test_an_exception_becomes_a_one_line_verdict() -> None:
    verdict = check_softmax(lambda x: x.nonexistent_method())
    assert not verdict
    assert "raised AttributeError" in verdict.message
    assert "Traceback" not in verdict.message


def test_checker_wants_the_function_not_its_result() -> None:
    with pytest.raises(ValueError, match="pass the function without calling it"):
        check_softmax(np.zeros(3))  # type: ignore[arg-type]


def test_temperature_checker() -> None:
    # The maximum first, then the temperature: dividing first overflows (see issue 7).
    assert check_softmax_temperature(
        lambda x, t: _stable_softmax((x - x.max(axis=-1, keepdims=True)) / t)
    )
    with np.errstate(all="ignore"):
        assert not check_softmax_temperature(lambda x, t: _stable_softmax(x / t))
        assert not check_softmax_temperature(lambda x, t: _stable_softmax(x * t))
        assert not check_softmax_temperature(lambda x, t: _naive_softmax(x / t))
        assert not check_softmax_temperature(lambda x, t: _stable_softmax(x) / t)


def test_score_matrix_checker() -> None:
    assert check_score_matrix(lambda q, k: q @ k.T)
    transposed = check_score_matrix(lambda q, k: k @ q.T)
    assert not transposed
    assert "shape" in transposed.message or "wrong values" in transposed.message

    def normalised(q, k):
        qn = q / np.linalg.norm(q, axis=-1, keepdims=True)
        kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
        return qn @ kn.T

    assert not check_score_matrix(normalised)
    # Square inputs hide a transpose in the shape; the values still catch it.
    assert (
        "square"
        in check_score_matrix(lambda q, k: (k @ q.T) if q.shape == k.shape else q @ k.T).message
    )


def test_score_matrix_squeezed_fails_on_one_query() -> None:
    """np.squeeze drops the query axis of a single query's (1, S) scores."""
    verdict = check_score_matrix(lambda q, k: np.squeeze(q @ k.T))
    assert not verdict
    assert "case 2/5 (1 query, 5 keys) returned shape (5,), expected shape (1, 5)" in (
        verdict.message
    )


def test_cosine_checker() -> None:
    assert check_cosine_similarity(lambda a, b: a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert not check_cosine_similarity(lambda a, b: a @ b)
    assert not check_cosine_similarity(lambda a, b: a @ b / np.linalg.norm(a) ** 2)


def test_cosine_similarity_of_the_absolute_dot_product_fails_on_opposite_vectors() -> None:
    """Only the opposite vectors have a negative cosine: |a . b| passes every other case."""
    verdict = check_cosine_similarity(
        lambda a, b: abs(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))
    )
    assert not verdict
    assert "case 3/4 (opposite vectors) returned the wrong values" in verdict.message
