"""Answers with the right values in the wrong shape get a verdict about the shape.

Learners get shapes wrong in a few ways: a transpose, an axis of size 1 too many or too few
(a ``(1, n)`` row for an ``(n,)`` vector), axes flattened, heads split but never merged. The
verdict must say that the shape is wrong and which shape the exercise asks for, in its own
letters (``(B, T, n_heads * d_head)``), instead of the case's hint about the values; a known
mistake that explains the shape (a transposed score matrix) is still named first.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from checker_asserts import assert_rejects
from test_notebook_solutions import CASES, run_solution

import attnbook.exercises as exercises
from attnbook.exercises import (
    check_cosine_similarity,
    check_lr_schedule,
    check_merge_heads,
    check_online_softmax_update,
    check_padding_mask,
    check_score_matrix,
    check_softmax_temperature,
    check_split_heads,
)
from attnbook.exercises._framework import _RESULT_SHAPES, checker_spec


def _merged(heads: torch.Tensor) -> torch.Tensor:
    batch, n_heads, seq_len, d_head = heads.shape
    return heads.transpose(1, 2).reshape(batch, seq_len, n_heads * d_head)


def _split(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, n_heads, d_model // n_heads).transpose(1, 2)


def _softmax_t(x: np.ndarray, temperature: float) -> np.ndarray:
    z = x / temperature
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _hint(message: str) -> str:
    return message.split("Hint:")[1]


@pytest.mark.parametrize(
    ("answer", "shape", "how"),
    [
        # heads split but never merged back: the input itself, (B, n_heads, T, d_head)
        (lambda h: h * 1.0, "(1, 2, 3, 2)", "with the axes in another order and not yet merged"),
        # the heads moved next to d_head, but the last two axes not merged
        (lambda h: h.transpose(1, 2) * 1.0, "(1, 3, 2, 2)", "in more axes than asked"),
        (lambda h: _merged(h).transpose(-1, -2), "(1, 4, 3)", "transposed"),
        (lambda h: _merged(h)[None], "(1, 1, 3, 4)", "with an extra axis of size 1"),
        (lambda h: _merged(h)[0], "(3, 4)", "an axis of size 1 is missing"),
        (lambda h: _merged(h).reshape(-1), "(12,)", "in fewer axes than asked"),
    ],
    ids=["heads-not-merged", "last-two-not-merged", "transposed", "extra-axis", "squeezed", "flat"],
)
def test_a_merge_of_the_wrong_shape_names_the_shape_asked(answer, shape, how) -> None:
    verdict = check_merge_heads(answer)
    assert_rejects(verdict, "case 1/3")
    assert (
        f"returned shape {shape}, expected shape (1, 3, 4), that is (B, T, n_heads * d_head)"
        in verdict.message
    ), verdict.message
    hint = _hint(verdict.message)
    assert f"Your numbers are right, but {how}" in hint, verdict.message
    assert f"{shape} where (B, T, n_heads * d_head) = (1, 3, 4) is asked" in hint, verdict.message


def test_a_vector_returned_as_a_row_is_told_so() -> None:
    verdict = check_softmax_temperature(lambda x, t: _softmax_t(x, t)[None, :])
    assert_rejects(verdict, "case 1/5")
    assert "returned shape (1, 3), expected shape (3,), that is x's shape" in verdict.message
    assert "with an extra axis of size 1: (1, 3) where x's shape = (3,)" in verdict.message


def test_a_number_returned_as_an_array_is_told_so() -> None:
    verdict = check_cosine_similarity(
        lambda a, b: np.array([a @ b / (np.linalg.norm(a) * np.linalg.norm(b))])
    )
    assert_rejects(verdict, "case 1/4")
    assert "returned shape (1,), expected shape (), that is a single number" in verdict.message
    assert "(1,) where a single number, shape () is asked" in _hint(verdict.message)


def test_a_squeezed_batch_axis_is_told_in_the_exercises_letters() -> None:
    verdict = check_split_heads(lambda x, n: _split(x, n)[0])
    assert_rejects(verdict, "case 1/4")
    assert "(2, 3, 2) where (B, n_heads, T, d_head) = (1, 2, 3, 2) is asked" in verdict.message
    assert "an axis of size 1 is missing" in verdict.message


def test_a_part_of_a_tuple_of_the_wrong_shape_is_named_with_its_letters() -> None:
    def transposed_acc(m, ell, acc, scores, values):
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        correction, p = torch.exp(m - m_new), torch.exp(scores - m_new)
        new_acc = correction * acc + p @ values
        return m_new, correction * ell + p.sum(-1, keepdim=True), new_acc.T

    verdict = check_online_softmax_update(transposed_acc)
    assert_rejects(verdict, "case 1/6")
    assert (
        "returned, for acc (value 3 of 3), shape (2, 3), expected shape (3, 2), that is (T, d_v)"
        in verdict.message
    )
    assert "transposed: (2, 3) where (T, d_v) = (3, 2) for acc is asked" in verdict.message


def test_wrong_values_in_the_wrong_shape_get_the_shape_first_then_the_cases_hint() -> None:
    verdict = check_score_matrix(lambda q, k: (q @ k.T).sum(axis=0))
    assert_rejects(verdict, "case 1/5")
    hint = _hint(verdict.message)
    assert "The shape is wrong: (3,) where (T, S) = (2, 3) is asked" in hint, verdict.message
    assert "Then, for the values: Entry [t, s] is the dot product" in hint, verdict.message


def test_a_known_mistake_that_explains_the_shape_is_still_named_first() -> None:
    verdict = check_score_matrix(lambda q, k: k @ q.T)
    assert_rejects(verdict, "case 1/5", "keys @ queries.T, the transpose of the score matrix")
    assert "that is (T, S)" in verdict.message
    assert "Your numbers are right" not in verdict.message

    def keys_last(lengths, max_len):
        return (torch.arange(max_len)[None, :] < lengths[:, None])[:, :, None]

    verdict = check_padding_mask(keys_last)
    assert_rejects(verdict, "case 1/4", "shape (B, S, 1)")


def test_a_learning_rate_returned_as_an_array_is_refused_by_its_shape() -> None:
    def rate(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        progress = (step - warmup_steps) / (total_steps - 1 - warmup_steps)
        return min_lr + (max_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))

    assert check_lr_schedule(rate)
    for answer, shape in [
        (lambda *args: np.array([rate(*args)]), "(1,)"),
        (lambda step, *args: np.array([rate(s, *args) for s in range(args[-1])]), "(20,)"),
    ]:
        verdict = check_lr_schedule(answer)
        assert_rejects(verdict, "case 1/3")
        assert (
            f"returned an array of shape {shape} for one step, expected a single number"
            in verdict.message
        ), verdict.message


def test_every_exercise_has_its_result_shape_in_its_letters() -> None:
    names = {
        checker_spec(getattr(exercises, name), lambda *args: None).exercise
        for name in exercises.__all__
        if name.startswith("check_")
    }
    assert names == set(_RESULT_SHAPES)


def _with_extra_axis(fn):
    def answer(*args):
        result = fn(*args)
        if isinstance(result, tuple):  # the last part: the online softmax takes m as (T,)
            return (*result[:-1], result[-1][None])
        return result[None] if hasattr(result, "shape") else np.array([result])

    return answer


@pytest.mark.parametrize(("path", "label", "code"), CASES)
def test_every_books_solution_with_an_extra_axis_is_told_its_shape(path, label, code) -> None:
    """Each solution of the book, its result given an extra leading axis of size 1: the verdict
    names the shape, and says the numbers are right (or names a mistake that fits)."""
    verdicts = run_solution(path, label, code, answer=_with_extra_axis)
    assert verdicts
    for verdict in verdicts:
        assert not verdict.passed, verdict.message
        first, hint = verdict.message.split("\n   Hint: ", 1)
        if "for one step" in first:  # the learning rate: refused by the checker's wrapper
            assert "expected a single number, shape ()" in first, verdict.message
            continue
        assert "expected shape" in first, verdict.message
        assert ", that is " in first, verdict.message
        assert hint.startswith(("Your numbers are right, but", "this looks like")), verdict.message
