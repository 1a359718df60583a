"""The checkers of chapters 3-6 accept correct answers and reject typical wrong ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from checker_asserts import assert_refuses_cut_answers, assert_rejects

import attnbook
from attnbook.exercises import (
    check_causal_mask,
    check_cross_attention,
    check_hard_lookup,
    check_masked_attention,
    check_scaled_dot_product_attention,
    check_self_attention,
    check_soft_lookup,
)

# ------------------------------------------------------- learners' answers


def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


def _masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


# ------------------------------------------------------------------ chapter 3


def _shifted(scores: np.ndarray) -> np.ndarray:
    return scores - scores.max(axis=-1, keepdims=True)  # the maximum first, then divide by τ


def test_soft_lookup_checker() -> None:
    verdict = check_soft_lookup(
        lambda q, keys, values, t: _softmax_np(_shifted(q @ keys.T) / t) @ values
    )
    assert verdict, verdict.message
    assert "all 6 hidden cases pass" in verdict.message


@pytest.mark.parametrize(
    ("wrong", "failing_case"),
    [
        (lambda q, keys, values, t: _softmax_np(q @ keys.T * t) @ values, "temperature 0.5"),
        (
            lambda q, keys, values, t: (np.exp(q @ keys.T / t) / np.exp(q @ keys.T / t).sum(-1, keepdims=True)) @ values,
            "tiny temperature",
        ),
        (lambda q, keys, values, t: _softmax_np(q @ keys.T / t), "one query, 4 keys"),
        (
            lambda q, keys, values, t: (lambda s: np.exp(s - s.max()) / np.exp(s - s.max()).sum(0))((q @ keys.T - (q @ keys.T).max()) / t) @ values,
            "three queries at once",
        ),
    ],
)  # fmt: skip
def test_soft_lookup_checker_rejects_typical_mistakes(wrong, failing_case: str) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        assert_rejects(check_soft_lookup(wrong), failing_case)


def test_hard_lookup_checker() -> None:
    assert check_hard_lookup(lambda q, keys, values: values[np.argmax(keys @ q)])
    assert_rejects(
        check_hard_lookup(lambda q, keys, values: values[np.argmin(keys @ q)]), "one query"
    )
    assert_rejects(
        check_hard_lookup(lambda q, keys, values: keys[np.argmax(keys @ q)]), "one query"
    )


# ------------------------------------------------------------------ chapter 4


def test_sdpa_checker_accepts_a_correct_answer() -> None:
    verdict = check_scaled_dot_product_attention(_sdpa)
    assert verdict, verdict.message
    assert "all 5 hidden cases pass" in verdict.message


@pytest.mark.parametrize(
    ("wrong", "failing_case"),
    [
        # forgetting the scale
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v, "worked example"),
        # scaling by d_k instead of sqrt(d_k)
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], dim=-1) @ v, "worked example"),
        # softmax over the queries instead of the keys
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2) @ v, "worked example"),
        # transposing the queries instead of the keys
        (lambda q, k, v: torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v, "worked example"),
        # k.T (deprecated beyond 2-D) reverses *every* axis of a batch: (B, S, d) -> (d, S, B)
        (lambda q, k, v: torch.softmax(q @ k.permute(*reversed(range(k.ndim))) / math.sqrt(q.shape[-1]), dim=-1) @ v, "a batch of 2"),
        # softmax over dim=1, right only without a batch axis
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=1) @ v, "a batch of 2"),
    ],
)  # fmt: skip
def test_sdpa_checker_rejects_typical_mistakes(wrong, failing_case: str) -> None:
    assert_rejects(check_scaled_dot_product_attention(wrong), failing_case)


def test_sdpa_checker_stub_and_transposed_scores() -> None:
    def stub(q, k, v):
        raise NotImplementedError

    assert not check_scaled_dot_product_attention(stub).attempted
    # k @ qᵀ only fails loudly when T != S; the square case catches it otherwise.
    verdict = check_scaled_dot_product_attention(
        lambda q, k, v: _sdpa(q, k, v) if q.shape[-2] != k.shape[-2] else torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v
    )  # fmt: skip
    assert_rejects(verdict, "worked example")


# ------------------------------------------------------------------ chapter 5


def _self_attention(x, w_q, w_k, w_v):
    return _sdpa(x @ w_q, x @ w_k, x @ w_v)


def _cross_attention(xq, xc, w_q, w_k, w_v):
    return _sdpa(xq @ w_q, xc @ w_k, xc @ w_v)


@pytest.mark.parametrize(
    ("checker", "right", "position", "name", "failing_case"),
    [
        (check_scaled_dot_product_attention, _sdpa, 0, "query", "the worked example"),
        (check_self_attention, _self_attention, 3, "W_v", "the worked example"),
        (check_cross_attention, _cross_attention, 1, "x_context", "T = 2 queries"),
        (check_masked_attention, _masked, 2, "value", "causal mask, T = S = 4"),
    ],
)
def test_attention_checkers_refuse_answers_cut_from_autograd(
    checker, right, position: int, name: str, failing_case: str
) -> None:
    """The later chapters train through attention: the right numbers computed from a detached
    input, or copied out of the graph, are refused by the checkers of chapters 4 to 6, each
    naming the argument."""
    assert_refuses_cut_answers(checker, right, position, name, failing_case)


def test_self_attention_checker() -> None:
    verdict = check_self_attention(lambda x, w_q, w_k, w_v: _sdpa(x @ w_q, x @ w_k, x @ w_v))
    assert verdict, verdict.message

    def scale_by_d_model(x, w_q, w_k, w_v):
        scores = (x @ w_q) @ (x @ w_k).transpose(-2, -1) / math.sqrt(x.shape[-1])
        return torch.softmax(scores, dim=-1) @ (x @ w_v)

    assert_rejects(check_self_attention(scale_by_d_model), "all widths differ")
    assert_rejects(
        check_self_attention(lambda x, w_q, w_k, w_v: _sdpa(x @ w_q, x @ w_k, x)), "worked example"
    )
    assert_rejects(
        check_self_attention(lambda x, w_q, w_k, w_v: _sdpa(x @ w_q.T, x @ w_k.T, x @ w_v.T)),
        "worked example",
    )


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (
            lambda x, w_q, w_k, w_v: attnbook.scaled_dot_product_attention(
                x @ w_q, x @ w_k, x @ w_v
            )[0],
            "attnbook.scaled_dot_product_attention",
        ),
        (
            lambda x, w_q, w_k, w_v: F.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v),
            "F.scaled_dot_product_attention",
        ),
    ],
)
def test_self_attention_that_calls_a_library_fails(wrong, name: str) -> None:
    verdict = check_self_attention(wrong)
    assert not verdict, verdict.message
    assert f"calls {name}" in verdict.message


def test_cross_attention_checker() -> None:
    right = check_cross_attention(lambda xq, xc, w_q, w_k, w_v: _sdpa(xq @ w_q, xc @ w_k, xc @ w_v))
    assert right, right.message
    assert_rejects(
        check_cross_attention(lambda xq, xc, w_q, w_k, w_v: _sdpa(xq @ w_q, xc @ w_k, xq @ w_v)),
        "T = 2 queries",
    )
    assert_rejects(
        check_cross_attention(lambda xq, xc, w_q, w_k, w_v: _sdpa(xc @ w_q, xq @ w_k, xq @ w_v)),
        "T = 2 queries",
    )


def _two_dimensional(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Right for one sequence (T, d): softmax over dim=1, the keys only when there is no
    batch axis in front."""
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=1) @ v


def test_self_attention_for_one_sequence_only_fails_on_the_batch() -> None:
    """Only the batch case tells a softmax over dim=1 (the keys of a (T, S) matrix, the
    queries of a (B, T, S) one) from the right answer."""
    assert_rejects(
        check_self_attention(lambda x, w_q, w_k, w_v: _two_dimensional(x @ w_q, x @ w_k, x @ w_v)),
        "a batch of 2 sequences",
    )


def test_cross_attention_for_one_sequence_only_fails_on_the_batch() -> None:
    assert_rejects(
        check_cross_attention(
            lambda xq, xc, w_q, w_k, w_v: _two_dimensional(xq @ w_q, xc @ w_k, xc @ w_v)
        ),
        "a batch of 2",
    )


# ------------------------------------------------------------------ chapter 6


def test_causal_mask_checker() -> None:
    assert check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).tril())
    # The exercise asks for a boolean tensor, built with PyTorch only: the masked attention
    # it goes into takes a tensor, so a NumPy array (or a list) is refused, naming the type.
    for numpy_mask in (
        lambda n: np.tril(np.ones((n, n), dtype=bool)),
        lambda n: np.tril(np.ones((n, n), dtype=bool)).tolist(),
    ):
        verdict = check_causal_mask(numpy_mask)
        assert_rejects(verdict, "seq_len = 4")
        assert "expected a torch tensor of dtype torch.bool" in verdict.message
    assert "returned a NumPy array" in check_causal_mask(lambda n: np.eye(n, dtype=bool)).message
    assert_rejects(
        check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).triu()), "seq_len = 4"
    )
    assert_rejects(
        check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)), "seq_len = 4"
    )
    float_mask = check_causal_mask(lambda n: torch.ones(n, n).tril())
    assert_rejects(float_mask, "seq_len = 4")
    assert "expected a boolean mask" in float_mask.message


def test_masked_attention_checker() -> None:
    verdict = check_masked_attention(_masked)
    assert verdict, verdict.message
    assert "all 5 hidden cases pass" in verdict.message
    # A large negative number is NOT as good as -inf (tests/exercises/test_exercises_mistakes.py).
    assert not check_masked_attention(
        lambda q, k, v, m: (
            torch.softmax(
                (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~m, -1e9), dim=-1
            )
            @ v
        )
    )


@pytest.mark.parametrize(
    ("wrong", "failing_case"),
    [
        # inverted mask: blocks exactly what may be attended to
        (lambda q, k, v, m: _masked(q, k, v, ~m), "causal mask, T = S = 4"),
        # masking with 0 instead of -inf
        (lambda q, k, v, m: torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~m, 0.0), -1) @ v, "causal mask, T = S = 4"),
        # masking the weights after the softmax, without renormalising
        (lambda q, k, v, m: (torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) * m) @ v, "causal mask, T = S = 4"),
        # ignoring the mask
        (lambda q, k, v, m: _sdpa(q, k, v), "causal mask, T = S = 4"),
        # using only the first sequence's padding row for the whole batch
        (lambda q, k, v, m: _masked(q, k, v, m[0] if m.ndim == 3 else m), "padding mask"),
    ],
)  # fmt: skip
def test_masked_attention_checker_rejects_typical_mistakes(wrong, failing_case: str) -> None:
    assert_rejects(check_masked_attention(wrong), failing_case)
