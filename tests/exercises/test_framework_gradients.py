"""The checkers' differentiability rule compares gradients, not only the graph's reach.

``differentiable`` once asked only that the result's graph reach each input: an answer that
computed its values with NumPy and added ``query.sum() * 0`` (a zero gradient that reaches
``query``) passed. Its gradients are now compared with the reference's, and answers with other
graphs of the same function (einsum, a softmax by hand with the maximum subtracted, float32
inside, ``torch.where`` for ``masked_fill``) still pass.
"""

from __future__ import annotations

import numpy as np
import torch

from attnbook.exercises import (
    check_masked_attention,
    check_multi_head_attention,
    check_pre_ln_block,
    check_scaled_dot_product_attention,
)
from attnbook.exercises._framework import checker_spec, gradient_problem, prime_reference


def _numpy_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> np.ndarray:
    q, k, v = (t.detach().numpy() for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


def _zero_weight(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The right values through NumPy, tied to the graph by terms of weight zero."""
    return torch.from_numpy(_numpy_attention(q, k, v)) + (q.sum() + k.sum() + v.sum()) * 0


def _einsum(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    s = torch.einsum("...td,...sd->...ts", q, k) / q.shape[-1] ** 0.5
    e = (s - s.amax(dim=-1, keepdim=True)).exp()
    return torch.einsum("...ts,...sd->...td", e / e.sum(dim=-1, keepdim=True), v)


def _in_float32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = q.float(), k.float(), v.float()
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v


def test_values_through_numpy_tied_by_a_zero_weight_fail_on_their_gradient() -> None:
    verdict = check_scaled_dot_product_attention(_zero_weight)
    assert not verdict, verdict.message
    assert "case 1/5" in verdict.message, verdict.message
    assert "the gradient with respect to `query` differs from the reference's" in verdict.message
    assert "computed outside autograd" in verdict.message
    assert "Traceback" not in verdict.message


def test_other_graphs_of_the_same_attention_pass() -> None:
    for answer in (_einsum, _in_float32):
        verdict = check_scaled_dot_product_attention(answer)
        assert verdict, (answer.__name__, verdict.message)


def test_masked_fill_and_where_both_pass_the_masked_attention() -> None:
    def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5

    def filled(q, k, v, mask):
        s = scores(q, k).masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v

    def where(q, k, v, mask):
        s = torch.where(mask, scores(q, k), torch.tensor(float("-inf"), dtype=q.dtype))
        return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v

    for answer in (filled, where):
        verdict = check_masked_attention(answer)
        assert verdict, (answer.__name__, verdict.message)


def test_a_mistake_right_on_one_case_is_named_where_its_values_differ() -> None:
    """Keys and values read from x_query: on the self-attention case x_context holds the same
    values, so the values are right there and only the gradient differs. The gradient is told
    only once every case's values pass, so the mistake is named on the case that shows it."""

    def from_x_query(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads):
        b, t, d = x_query.shape
        split = lambda x: x.reshape(b, -1, n_heads, d // n_heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(x_query @ W_Q), split(x_query @ W_K), split(x_query @ W_V)
        w = torch.softmax(q @ k.transpose(-2, -1) / (d // n_heads) ** 0.5, dim=-1)
        return (w @ v).transpose(1, 2).reshape(b, t, d) @ W_O

    verdict = check_multi_head_attention(from_x_query)
    assert not verdict
    assert "this looks like keys and values from x_query" in verdict.message, verdict.message
    assert "gradient" not in verdict.message, verdict.message


def test_the_reference_is_primed_before_the_answer_runs() -> None:
    """The grader computes the reference's gradients before the exercise's library functions
    become tripwires; the answer's call then compares with those, and says what it found."""
    spec = checker_spec(check_scaled_dot_product_attention, _zero_weight)
    args = spec.cases[0].make_args()
    prime_reference(spec.learner_fn, args)
    spec.learner_fn(*args)
    assert "gradient with respect to `query`" in (gradient_problem(spec.learner_fn) or "")
    assert gradient_problem(spec.learner_fn) is None  # told once
    spec = checker_spec(check_scaled_dot_product_attention, _einsum)
    prime_reference(spec.learner_fn, args)
    spec.learner_fn(*args)
    assert gradient_problem(spec.learner_fn) is None


def test_the_pre_ln_block_compares_gradients_too() -> None:
    """The block's reference keeps its graph, so its answer's gradient is compared as well: the
    right values computed without a graph and tied to ``x`` by ``x.sum() * 0`` fail, and the
    block as the chapter writes it passes."""

    def block(x, attention, ffn, norm1, norm2):
        x = x + attention(norm1(x))
        return x + ffn(norm2(x))

    def tied_by_zero(x, attention, ffn, norm1, norm2):
        with torch.no_grad():
            out = block(x, attention, ffn, norm1, norm2)
        return out + x.sum() * 0

    assert check_pre_ln_block(block)
    verdict = check_pre_ln_block(tied_by_zero)
    assert not verdict, verdict.message
    assert "the gradient with respect to `x` differs from the reference's" in verdict.message
