"""The checkers' differentiability rule compares gradients, not only the graph's reach.

``differentiable`` once asked only that the result's graph reach each input: an answer that
computed its values with NumPy and added ``query.sum() * 0`` (a zero gradient that reaches
``query``) passed. Its gradients are now compared with the reference's, and answers with other
graphs of the same function (einsum, a softmax by hand with the maximum subtracted, float32
inside, ``torch.where`` for ``masked_fill``) still pass.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnbook.exercises import (
    check_apply_rope,
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


def _rope_with_numpy(x: torch.Tensor, positions: torch.Tensor) -> np.ndarray:
    """RoPE's values, vectorised, through NumPy (outside autograd)."""
    xs, d = x.detach().numpy(), x.shape[-1]
    angle = positions.numpy()[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    out = np.empty_like(xs)
    out[..., 0::2] = xs[..., 0::2] * np.cos(angle) - xs[..., 1::2] * np.sin(angle)
    out[..., 1::2] = xs[..., 0::2] * np.sin(angle) + xs[..., 1::2] * np.cos(angle)
    return out


_PENDING: list[tuple[torch.Tensor, torch.Tensor]] = []


class _FilledLater(torch.Tensor):
    """A result whose numbers its own numpy() writes, by Python loops, the first time the
    checker reads them (when it compares the gradients, unwatched), handing that comparison
    the numbers from before."""

    def numpy(self, *args: object, **kwargs: object) -> np.ndarray:
        if not _PENDING:
            return torch.Tensor.numpy(self, *args, **kwargs)
        x, positions = _PENDING.pop()
        before = torch.Tensor.numpy(self).copy()
        d = x.shape[-1]
        for t in range(x.shape[-2]):
            for i in range(d // 2):
                angle = float(positions[t]) * 10000 ** (-2 * i / d)
                a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
                self[..., t, 2 * i] = a * math.cos(angle) - b * math.sin(angle)
                self[..., t, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
        return before


def _rope_filled_later(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    _PENDING.append((x.detach(), positions))
    return (x * 0).as_subclass(_FilledLater)


def test_a_tensor_subclass_cannot_compute_its_numbers_while_the_gradients_are_compared() -> None:
    """RoPE by Python loops, in the numpy() of a tensor subclass that the answer returned,
    run when the checker read the result to compare its gradients, where no guard watches
    (and handed the numbers from before to that comparison, so that it compared nothing):
    passed in the notebook and in the grader. The result is now read as a plain tensor with
    a copy of its numbers, made inside the answer's watched call."""
    _PENDING.clear()
    verdict = check_apply_rope(_rope_filled_later)
    _PENDING.clear()
    assert not verdict
    assert "case 1/4" in verdict.message, verdict.message


def test_code_of_the_answers_that_runs_while_the_gradients_are_compared_fails() -> None:
    """RoPE's values through NumPy, tied to x by x * 0, and torch.Tensor.double replaced, in
    the answer's call, by a function of the answer's that put the library's back and moved
    the numbers once: the comparison of gradients, which reads the result through .double(),
    saw other values than the reference's and compared nothing (passed, in the notebook and
    in the grader)."""
    real = torch.Tensor.double

    def once(t: torch.Tensor) -> torch.Tensor:
        torch.Tensor.double = real  # type: ignore[method-assign]
        return real(t) + 1

    def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        torch.Tensor.double = once  # type: ignore[method-assign]
        return torch.from_numpy(_rope_with_numpy(x, positions)) + x * 0

    try:
        verdict = check_apply_rope(rope)
    finally:
        torch.Tensor.double = real  # type: ignore[method-assign]
    assert not verdict
    assert "ran code of yours (once) while the checker compared its gradients" in verdict.message


class _Writer:
    """Writes ``values`` into ``out`` when it is let go of."""

    def __init__(self, out: torch.Tensor, values: torch.Tensor) -> None:
        self.out, self.values = out, values

    def __del__(self) -> None:
        self.out.copy_(self.values)


def _written_after(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    values = torch.from_numpy(_numpy_attention(q, k, v))
    result = torch.zeros_like(values) + (q.sum() + k.sum() + v.sum()) * 0
    # let go of, and so written, when the checker lets go of q: after comparing the gradients
    q.writer = _Writer(result.detach(), values)
    return result


def test_the_numbers_whose_gradients_are_compared_are_the_numbers_returned() -> None:
    """Attention's values through NumPy, written into the answer's result (zeros, tied to
    the inputs) by a finalizer when the checker let go of the query, after it had compared
    the gradients of the zeros (other values than the reference's: nothing compared):
    passed. The checker reads a copy of the result, made when the answer returned, and
    returns that copy's numbers."""
    verdict = check_scaled_dot_product_attention(_written_after)
    assert not verdict
    assert "case 1/5" in verdict.message, verdict.message
    assert "returned the wrong values" in verdict.message, verdict.message
