"""Chapter 6's checkers: the masked softmax's backward case, and the write-it-yourself guards.

Issue 18 (E2): ``softmax(scores + additive_mask).nan_to_num(0)`` has the right
weights but a NaN gradient in a fully masked row, so a forward-only checker
accepted it; ``check_masked_softmax`` now runs the backward pass too. And
(P2) an answer that calls the package's function instead of writing it fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnbook
from attnbook.exercises import (
    check_causal_mask,
    check_masked_attention,
    check_masked_softmax,
    check_padding_mask,
)
from attnbook.exercises._framework import seeded_args
from attnbook.exercises.masking import _MASKED_SOFTMAX_CASES


def _rejects(verdict: attnbook.exercises.Verdict, *phrases: str) -> None:
    assert not verdict, verdict.message
    assert verdict.attempted
    assert "Hint:" in verdict.message
    assert "Traceback" not in verdict.message
    for phrase in phrases:
        assert phrase in verdict.message, verdict.message


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


def _additive_then_nan_to_num(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores + _additive(mask, scores.dtype), dim=-1).nan_to_num(0.0)


def _additive_then_where(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores + _additive(mask, scores.dtype), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)


def _filled_then_nan_to_num(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


def _shift_by_zero(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The chapter's solution: shift an empty row by 0 and divide it by 1."""
    scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    e = torch.exp(scores - top)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


# Right answers written three ways, none of them the package's: exact on every case.
_RIGHT_ANSWERS = [
    _shift_by_zero,
    _filled_then_nan_to_num,
    lambda s, m: torch.softmax(s.masked_fill(~m, torch.finfo(s.dtype).min), -1) * m,
]


def test_the_additive_answer_has_right_values_but_a_nan_gradient() -> None:
    """The premise of the backward case, checked directly."""
    scores = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])
    weights = _additive_then_nan_to_num(scores, mask)
    torch.testing.assert_close(weights, attnbook.masked_softmax(scores, mask))
    weights.sum().backward()
    assert torch.isnan(scores.grad[1]).all()
    scores.grad = None
    _filled_then_nan_to_num(scores, mask).sum().backward()  # masked_fill zeroes them
    assert torch.equal(scores.grad[1], torch.zeros(4, dtype=torch.float64))


@pytest.mark.parametrize("wrong", [_additive_then_nan_to_num, _additive_then_where])
def test_masked_softmax_with_a_nan_gradient_fails(wrong: Callable) -> None:
    verdict = check_masked_softmax(wrong)
    _rejects(verdict, "case 8/8", "gradient", "NaN")
    if wrong is _additive_then_nan_to_num:
        assert "an additive -inf mask, then nan_to_num" in verdict.message


@pytest.mark.parametrize("right", [_shift_by_zero, _filled_then_nan_to_num])
def test_masked_softmax_with_a_finite_gradient_passes(right: Callable) -> None:
    verdict = check_masked_softmax(right)
    assert verdict, verdict.message
    assert "all 8 hidden cases pass" in verdict.message


def test_masked_softmax_that_cannot_be_differentiated_fails() -> None:
    def detached(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return _shift_by_zero(scores.detach(), mask)

    verdict = check_masked_softmax(detached)
    assert not verdict
    assert "case 8/8" in verdict.message
    assert "autograd" in verdict.message


def test_forward_failures_count_the_backward_case() -> None:
    verdict = check_masked_softmax(lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), -1))
    _rejects(verdict, "/8 (")
    assert verdict.n_cases == 8


def test_masked_softmax_filled_with_minus_1e9_fails_in_float16() -> None:
    """-1e9, with the blocked weights zeroed afterwards, passes every float64 case; but -1e9
    does not fit in float16 (the chapter's argument against it), so masked_fill refuses it."""
    verdict = check_masked_softmax(lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), dim=-1) * m)
    _rejects(verdict, "case 6/8 (float16 scores", "raised RuntimeError", "65504", "-inf")


def _zeros_of_the_default_dtype(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros(scores.shape))


def _computed_in_float32(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _shift_by_zero(scores.float(), mask)  # safe from float16 overflow, never cast back


@pytest.mark.parametrize(
    ("wrong", "case", "dtypes"),
    [
        (_zeros_of_the_default_dtype, "case 6/8 (float16 scores", "float32 weights for float16"),
        (_computed_in_float32, "case 1/8 (", "float32 weights for float64 scores"),
    ],
)
def test_masked_softmax_in_another_dtype_than_the_scores_fails(
    wrong: Callable, case: str, dtypes: str
) -> None:
    """Right values, but float32 weights for float16 scores: a float16 model's weights @ value
    then raises (torch multiplies no two dtypes). Zeros of the default dtype promote the
    result (float64 scores hide it); computing in float32 without converting back fails on
    the first case. The checker's own wrapper refuses them: told as what the answer
    returned, not as an error it raised."""
    verdict = check_masked_softmax(wrong)
    _rejects(verdict, case, f") returned {dtypes}", "torch.zeros_like(scores)")
    assert "raised" not in verdict.message, verdict.message


@pytest.mark.parametrize("right", _RIGHT_ANSWERS)
def test_masked_softmax_in_float16_matches_the_package(right: Callable) -> None:
    """The float16 case is exact however a right answer computes (one allowed key or none
    per row), also on the grader's variants of it, whose scores differ."""
    (case,) = [case for case in _MASKED_SOFTMAX_CASES if "float16" in case.name]
    for seed in range(5):
        scores, mask = seeded_args(case, seed)
        assert scores.dtype == torch.float16
        weights = right(scores, mask)
        assert torch.equal(weights.double(), attnbook.masked_softmax(scores, mask).double())


def _filled_with_minus_1e4(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1) * mask


def _filled_with_minus_1e4_then_where(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)


def _penalised_by_1e9_then_where(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores + (1 - mask.to(scores.dtype)) * -1e9, dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)


_FAR_BELOW = "case 7/8 (allowed scores far below -1e4"


def test_masked_softmax_filled_with_minus_1e4_fails() -> None:
    """-1e4 fits in float16 and blocks while the allowed scores stay well above it; the case
    whose allowed scores lie far below -1e4 rejects it, naming the mistake."""
    verdict = check_masked_softmax(_filled_with_minus_1e4)
    _rejects(verdict, _FAR_BELOW, "this looks like a finite fill or penalty (-1e4)", "-inf")


@pytest.mark.parametrize("wrong", [_filled_with_minus_1e4_then_where, _penalised_by_1e9_then_where])
def test_masked_softmax_with_other_finite_blocks_fails(wrong: Callable) -> None:
    """Empty rows zeroed otherwise, or a penalty of 1e9: the case's own hint, which says why."""
    verdict = check_masked_softmax(wrong)
    _rejects(verdict, _FAR_BELOW, "A finite number is not below every score", "float('-inf')")


@pytest.mark.parametrize(
    "right",
    [
        _shift_by_zero,
        _filled_then_nan_to_num,
        lambda s, m: torch.softmax(s.masked_fill(~m, torch.finfo(s.dtype).min), -1) * m,
    ],
)
def test_masked_softmax_far_below_minus_1e4_is_exact(right: Callable) -> None:
    """The case is exact however a right answer computes, also on the grader's variants;
    and on each variant the allowed scores stay below -1e4 and the blocked ones above 1e9,
    so a fill of -1e4 or a penalty of 1e9 stays wrong."""
    (case,) = [case for case in _MASKED_SOFTMAX_CASES if "far below -1e4" in case.name]
    for seed in range(20):
        scores, mask = case.make_args() if seed == 0 else seeded_args(case, seed)
        assert scores.dtype == torch.float64
        assert bool(mask.any(dim=-1).all())  # every row has an allowed key
        assert bool((scores[mask] < -5e4).all())
        assert bool((scores[~mask] > 1.5e9).all())
        expected = attnbook.masked_softmax(scores, mask)
        torch.testing.assert_close(right(scores, mask), expected, rtol=1e-12, atol=1e-15)
        for wrong in (_filled_with_minus_1e4, _penalised_by_1e9_then_where):
            assert not torch.allclose(wrong(scores, mask), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("right", _RIGHT_ANSWERS)
def test_masked_softmax_right_answers_pass_every_case(right: Callable) -> None:
    verdict = check_masked_softmax(right)
    assert verdict, verdict.message
    assert verdict.n_cases == 8


# -------------------------------------------------- calling the library instead


def _scaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


@pytest.mark.parametrize(
    ("checker", "wrong", "name"),
    [
        (check_causal_mask, lambda n: attnbook.causal_mask(n), "attnbook.causal_mask"),
        (
            check_causal_mask,
            lambda n: nn.Transformer.generate_square_subsequent_mask(n) == 0,
            "generate_square_subsequent_mask",
        ),
        (check_padding_mask, lambda lengths, n: attnbook.padding_mask(lengths, n), "padding_mask"),
        (
            check_masked_attention,
            lambda q, k, v, m: attnbook.scaled_dot_product_attention(q, k, v, m)[0],
            "attnbook.scaled_dot_product_attention",
        ),
        (
            check_masked_attention,
            lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            "F.scaled_dot_product_attention",
        ),
        (
            check_masked_attention,
            lambda q, k, v, m: attnbook.masked_softmax(_scaled(q, k), m) @ v,
            "attnbook.masked_softmax",
        ),
        (
            check_masked_softmax,
            lambda s, m: attnbook.masked_softmax(s, m),
            "attnbook.masked_softmax",
        ),
    ],
)
def test_calling_the_library_fails(checker: Callable, wrong: Callable, name: str) -> None:
    _rejects(checker(wrong), name, "asks you to write yourself")


@pytest.mark.parametrize(
    ("checker", "right"),
    [
        (check_causal_mask, lambda n: torch.ones(n, n, dtype=torch.bool).tril()),
        (check_causal_mask, lambda n: torch.arange(n)[None, :] <= torch.arange(n)[:, None]),
        (
            check_padding_mask,
            lambda lengths, n: (torch.arange(n) < torch.as_tensor(lengths)[:, None])[:, None],
        ),
        (
            check_masked_attention,
            lambda q, k, v, m: torch.softmax(_scaled(q, k).masked_fill(~m, -math.inf), -1) @ v,
        ),
        (check_masked_softmax, _shift_by_zero),
    ],
)
def test_answers_written_by_hand_pass(checker: Callable, right: Callable) -> None:
    verdict = checker(right)
    assert verdict, verdict.message
