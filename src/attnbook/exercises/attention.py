"""Checkers for the exercises of chapters 4 and 5 (scaled dot-product attention, projections).

The learner's functions take and return torch tensors (float64 in the hidden
cases, so only real mistakes show up as differences).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

import attnbook.attention
from attnbook.attention import scaled_dot_product_attention
from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    differentiable,
    forbid_calls,
    randn,
    run_cases,
)

__all__ = [
    "check_cross_attention",
    "check_scaled_dot_product_attention",
    "check_self_attention",
]


def _worked_example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four 3-d inputs and integer projections drawn with ``np.random.seed(42)`` (chapter 4)."""
    rng = np.random.RandomState(42)  # the legacy generator the published example uses
    x = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=float)
    w_q, w_k, w_v = (rng.randint(3, size=(3, 3)).astype(float) for _ in range(3))
    return tuple(torch.as_tensor(a, dtype=torch.float64) for a in (x, w_q, w_k, w_v))


def _worked_qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, w_q, w_k, w_v = _worked_example()
    return x @ w_q, x @ w_k, x @ w_v  # (4, 3) each


_SDPA_CASES = [
    Case(
        "the worked example: 4 tokens, d_k = 3",
        _worked_qkv,
        "Three steps: the scores, every query's dot product with every key, divided by "
        "sqrt(d_k); the softmax of each row (over the keys, the last axis); the weighted "
        "sum of the values. Each step's shape: (T, S), (T, S), (T, d_v).",
    ),
    Case(
        "T = 2 queries, S = 5 keys, d_k = 4, d_v = 3",
        lambda: (randn(401, 2, 4), randn(402, 5, 4), randn(403, 5, 3)),
        "The scores have shape (T, S); each query's row is normalised over the keys (the last "
        "axis), and the output has one row per query and the width of a value.",
    ),
    Case(
        "square: T = S = 4 (a transpose mistake hides in the shape)",
        lambda: (randn(404, 4, 4), randn(405, 4, 4), randn(406, 4, 2)),
        "Entry [t, s] of the scores is query t · key s. With T = S a product in the other "
        "order has the right shape but the transposed scores: compare one score of yours with "
        "a dot product you compute by hand.",
    ),
    Case(
        "wide vectors, d_k = 64 (the scale matters)",
        lambda: (randn(407, 3, 64), randn(408, 6, 64), randn(409, 6, 5)),
        "Divide the scores by sqrt(d_k), with d_k the width of a query (the last dimension), "
        "not by d_k itself.",
    ),
    Case(
        "a batch of 2 sequences: shapes (B, T, d_k), (B, S, d_k), (B, S, d_v)",
        lambda: (randn(410, 2, 3, 4), randn(411, 2, 5, 4), randn(412, 2, 5, 3)),
        "With a batch axis in front, swap only the last two axes of the keys, not the "
        "batch axis, and take the softmax over the last axis, the keys.",
    ),
]


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1)  # (..., T, d_k) @ (..., d_k, S) -> (..., T, S)


_TOKEN_COUNT_SCALE = Mistake(
    "a scale of sqrt(T), the number of tokens, instead of sqrt(d_k)",
    lambda q, k, v: torch.softmax(_scores(q, k) / np.sqrt(q.shape[-2]), dim=-1) @ v,
    "d_k is the width of a query, its last dimension (query.shape[-1]): divide the scores "
    "by its square root. len(query) and query.shape[0] count the rows, the tokens "
    "(or, with a batch axis in front, the sequences).",
)

_VALUE_WIDTH_SCALE = Mistake(
    "a scale of sqrt(d_v), the width of a value, instead of sqrt(d_k)",
    lambda q, k, v: torch.softmax(_scores(q, k) / np.sqrt(v.shape[-1]), dim=-1) @ v,
    "The scale belongs to the scores, dot products of queries with keys: divide them by "
    "sqrt(d_k), with d_k the width of a query or key, not by the values' width.",
)

_TRANSPOSED_SCORES = Mistake(
    "key @ queryᵀ, the transposed scores",
    lambda q, k, v: torch.softmax(k @ q.transpose(-2, -1) / np.sqrt(q.shape[-1]), -1) @ v,
    "Entry [t, s] of the scores is query t · key s, so the scores have shape (T, S): "
    "check it with T = 2 queries and S = 5 keys, where a transposed product gives (5, 2).",
)

_SDPA_MISTAKES = [
    Mistake(
        "a missing scale (no division by sqrt(d_k))",
        lambda q, k, v: torch.softmax(_scores(q, k), dim=-1) @ v,
        "Divide the scores by sqrt(d_k), the width of a query: without it wide vectors give "
        "huge scores and a saturated softmax.",
    ),
    Mistake(
        "dividing by d_k instead of sqrt(d_k)",
        lambda q, k, v: torch.softmax(_scores(q, k) / q.shape[-1], dim=-1) @ v,
        "The spread of a dot product of d_k unit-variance terms grows like sqrt(d_k): divide "
        "by sqrt(d_k), not by d_k.",
    ),
    _TOKEN_COUNT_SCALE,
    _VALUE_WIDTH_SCALE,
    Mistake(
        "multiplying the scores by sqrt(d_k) instead of dividing",
        lambda q, k, v: torch.softmax(_scores(q, k) * np.sqrt(q.shape[-1]), dim=-1) @ v,
        "The scale is there to shrink the scores, whose spread grows like sqrt(d_k): divide "
        "them by sqrt(d_k), do not multiply.",
    ),
    Mistake(
        "dividing the weights by sqrt(d_k) after the softmax",
        lambda q, k, v: torch.softmax(_scores(q, k), dim=-1) / np.sqrt(q.shape[-1]) @ v,
        "The scale acts on the scores, inside the softmax: softmax(scores / sqrt(d_k)). Divided "
        "afterwards, the weights no longer sum to 1.",
    ),
    Mistake(
        "a softmax over the queries (dim=-2) instead of over the keys",
        lambda q, k, v: torch.softmax(_scores(q, k) / np.sqrt(q.shape[-1]), dim=-2) @ v,
        "Each query's row of weights must sum to 1 over the keys, the last axis of the "
        "(..., T, S) scores: check that your weights' rows sum to 1.",
    ),
    _TRANSPOSED_SCORES,
]

_FORBIDDEN_SDPA = {
    "F.scaled_dot_product_attention": F.scaled_dot_product_attention,
    "attnbook.scaled_dot_product_attention": attnbook.attention.scaled_dot_product_attention,
    "attnbook's fused attention": attnbook.attention.attend_fused,
    "attnbook's attention core": attnbook.attention.attend,
    "F.multi_head_attention_forward (nn.MultiheadAttention)": F.multi_head_attention_forward,
}


_TRAINED_THROUGH = (
    "the models of the later chapters train through attention, and loss.backward() goes "
    "through it to the queries, keys and values and the weights that make them"
)


def check_scaled_dot_product_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> Verdict:
    """Check ``fn(query, key, value) -> output``: scaled dot-product attention.

    The output is the exercise's formula, that of chapter 4's matrix form (only the
    output, not the weights).

    Shapes: ``query`` ``(..., T, d_k)``, ``key`` ``(..., S, d_k)``, ``value``
    ``(..., S, d_v)``, output ``(..., T, d_v)``; the last case has a batch axis.
    The exercise is to write it: an answer that calls
    ``F.scaled_dot_product_attention`` or ``attnbook.scaled_dot_product_attention``
    (however imported or renamed) fails, even though its numbers are right. Every model of the
    later chapters trains through attention, so the output must be differentiable with
    respect to ``query``, ``key`` and ``value``
    (:func:`~attnbook.exercises._framework.differentiable`): the right numbers cut from
    autograd fail.
    """
    return run_cases(
        "scaled_dot_product_attention",
        differentiable(
            "scaled_dot_product_attention",
            fn,
            {"query": 0, "key": 1, "value": 2},
            why=_TRAINED_THROUGH,
        ),
        lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
        _SDPA_CASES,
        mistakes=_SDPA_MISTAKES,
        guard=forbid_calls(
            _FORBIDDEN_SDPA,
            "write the three steps yourself with @, a softmax and a division: the scaled "
            "scores, their softmax over the keys, and the weighted sum of the values. Use the "
            "library version afterwards, to check yours.",
        ),
    )


def _self_attention_reference(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    # (..., T, D) @ (D, d_k) -> (..., T, d_k); likewise for keys and values
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)[0]


_SELF_CASES = [
    Case(
        "the worked example: 4 tokens of width 3, integer W_Q, W_K, W_V",
        _worked_example,
        "Project first: the queries, keys and values are x times W_Q, W_K and W_V, the "
        "matrices acting from the right; then scaled dot-product attention of the three.",
    ),
    Case(
        "d_model = 6, d_k = 3, d_v = 2 (all widths differ)",
        lambda: (randn(421, 5, 6), randn(422, 6, 3), randn(423, 6, 3), randn(424, 6, 2)),
        "Scale by sqrt(d_k), the width of the projected queries, not sqrt(d_model); and the "
        "output is a mix of the projected values V, of width d_v.",
    ),
    Case(
        "a batch of 2 sequences, x of shape (B, T, d_model)",
        lambda: (randn(425, 2, 4, 5), randn(426, 5, 3), randn(427, 5, 3), randn(428, 5, 4)),
        "A matrix product with W works for a batch too; transpose only the last two axes of "
        "the keys.",
    ),
]


def _self_projected(attend: Callable) -> Callable:
    """An attention mistake, as a self-attention answer: the projections done right first."""

    def answer(x, w_q, w_k, w_v):
        return attend(x @ w_q, x @ w_k, x @ w_v)

    return answer


def _self_model_width_scale(x, w_q, w_k, w_v):
    scores = _scores(x @ w_q, x @ w_k) / np.sqrt(x.shape[-1])  # sqrt(d_model), not sqrt(d_k)
    return torch.softmax(scores, dim=-1) @ (x @ w_v)


def _self_unprojected_values(x, w_q, w_k, w_v):
    return _self_attention_reference(x, w_q, w_k, torch.eye(x.shape[-1], dtype=x.dtype))


def _self_transposed_weights(x, w_q, w_k, w_v):
    return _self_attention_reference(x, w_q.T, w_k.T, w_v.T)  # nn.Linear's habit


# Self-attention has one sequence, T = S: the transposed scores keep their shape, and the
# same numbers come from W_q and W_k swapped (x W_k (x W_q)ᵀ), so the hint cannot be chapter 4's.
_SELF_TRANSPOSED_HINT = (
    "Entry [t, s] of the scores is query t · key s, with the queries made by W_q and the keys "
    "by W_k. In self-attention the transposed scores have the same (T, T) shape, so the shape "
    "cannot tell you: compute one score by hand, query t · key s, and compare it with yours."
)

_SELF_MISTAKES = [
    *(
        Mistake(
            m.name,
            _self_projected(m.answer),
            _SELF_TRANSPOSED_HINT if m is _TRANSPOSED_SCORES else m.hint,
        )
        for m in _SDPA_MISTAKES
    ),
    Mistake(
        "a scale of sqrt(d_model), the input's width, instead of sqrt(d_k)",
        _self_model_width_scale,
        "d_k is the width of the projected queries and keys (W_q's last dimension), not the "
        "width of x: divide the scores by its square root.",
    ),
    Mistake(
        "averaging x itself instead of the projected values x @ W_v",
        _self_unprojected_values,
        "The weights mix the projected values, x times W_v, not the inputs themselves: the "
        "output has width d_v, W_v's last dimension.",
    ),
    Mistake(
        "the transposed weight matrices, x @ W.T",
        _self_transposed_weights,
        "The matrices act from the right as they are given, x times W_q, with W_q of shape "
        "(d_model, d_k). Transpose only an nn.Linear's weight, which stores W transposed.",
    ),
]


def check_self_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> Verdict:
    """Check ``fn(x, W_q, W_k, W_v) -> output``: self-attention with learned projections.

    Shapes: ``x`` ``(..., T, d_model)``, ``W_q`` and ``W_k`` ``(d_model, d_k)``,
    ``W_v`` ``(d_model, d_v)``; output ``(..., T, d_v)``: chapter 5's self-attention, the
    projections of ``x`` attending as in chapter 4's scaled dot-product attention.
    The exercise asks for PyTorch
    operations only: an answer that calls a library attention (PyTorch's, the package's,
    or a ``SingleHeadAttention``) fails, even though its numbers are right. The output must be
    differentiable with respect to ``x`` and the three matrices (training learns them
    through it).
    """
    return run_cases(
        "self_attention",
        differentiable(
            "self_attention", fn, {"x": 0, "W_q": 1, "W_k": 2, "W_v": 3}, why=_TRAINED_THROUGH
        ),
        _self_attention_reference,
        _SELF_CASES,
        mistakes=_SELF_MISTAKES,
        guard=forbid_calls(
            {
                **_FORBIDDEN_SDPA,
                "attnbook.SingleHeadAttention": attnbook.attention.SingleHeadAttention.forward,
            },
            "project x with the three matrices, then write the scaled dot product of "
            "chapter 4 yourself: the scaled scores, their softmax over the keys, the weighted "
            "sum of the values.",
        ),
    )


def _cross_attention_reference(
    x_query: torch.Tensor,
    x_context: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
) -> torch.Tensor:
    q = x_query @ w_q  # (..., T, D) @ (D, d_k) -> (..., T, d_k)
    k = x_context @ w_k  # (..., S, D_ctx) @ (D_ctx, d_k) -> (..., S, d_k)
    v = x_context @ w_v  # (..., S, D_ctx) @ (D_ctx, d_v) -> (..., S, d_v)
    return scaled_dot_product_attention(q, k, v)[0]


_CROSS_CASES = [
    Case(
        "T = 2 queries of width 4 attend to S = 5 context vectors of width 6",
        lambda: (
            randn(431, 2, 4),
            randn(432, 5, 6),
            randn(433, 4, 3),
            randn(434, 6, 3),
            randn(435, 6, 2),
        ),
        "Queries come from x_query; keys and values both come from x_context. The output has "
        "one row per query.",
    ),
    Case(
        "T = S = 3, both inputs of width 4 (a mix-up hides in the shape)",
        lambda: (
            randn(436, 3, 4),
            randn(437, 3, 4),
            randn(438, 4, 4),
            randn(439, 4, 4),
            randn(440, 4, 4),
        ),
        "Check which input each projection reads: only W_q sees x_query.",
    ),
    Case(
        "a batch of 2: x_query (B, T, D), x_context (B, S, D_ctx)",
        lambda: (
            randn(441, 2, 3, 4),
            randn(442, 2, 6, 5),
            randn(443, 4, 2),
            randn(444, 5, 2),
            randn(445, 5, 3),
        ),
        "Transpose only the last two axes of K, and softmax over the keys (dim=-1).",
    ),
]


def _projected(attend: Callable) -> Callable:
    """An attention mistake, as a cross-attention answer: the projections done right first."""

    def answer(x_query, x_context, w_q, w_k, w_v):
        return attend(x_query @ w_q, x_context @ w_k, x_context @ w_v)

    return answer


def _context_width_scale(x_query, x_context, w_q, w_k, w_v):
    scores = _scores(x_query @ w_q, x_context @ w_k) / np.sqrt(x_context.shape[-1])
    return torch.softmax(scores, dim=-1) @ (x_context @ w_v)


def _query_width_scale(x_query, x_context, w_q, w_k, w_v):
    scores = _scores(x_query @ w_q, x_context @ w_k) / np.sqrt(x_query.shape[-1])
    return torch.softmax(scores, dim=-1) @ (x_context @ w_v)


def _context_length_scale(x_query, x_context, w_q, w_k, w_v):
    scores = _scores(x_query @ w_q, x_context @ w_k) / np.sqrt(x_context.shape[-2])
    return torch.softmax(scores, dim=-1) @ (x_context @ w_v)


def _self_not_cross(x_query, x_context, w_q, w_k, w_v):
    return _self_attention_reference(x_query, w_q, w_k, w_v)  # x_context never read


_CROSS_MISTAKES = [
    *(
        Mistake(m.name, _projected(m.answer), m.hint)
        for m in _SDPA_MISTAKES
        if m not in (_TOKEN_COUNT_SCALE, _VALUE_WIDTH_SCALE)
    ),
    Mistake(  # T = d_v in every case (2, 4 and 3): the two scales cannot be told apart
        "a scale of sqrt(T), the number of queries, or sqrt(d_v), the width of a value, "
        "instead of sqrt(d_k)",
        _projected(_TOKEN_COUNT_SCALE.answer),
        "d_k is the width of the projected queries and keys (W_q's last dimension): divide "
        "the scores by its square root. len(x_query) counts the queries (or, with a "
        "batch axis, the sequences), and W_v's last dimension is the values' width.",
    ),
    Mistake(
        "a scale of sqrt(D_ctx), the context's width, instead of sqrt(d_k)",
        _context_width_scale,
        "d_k is the width of the projected queries and keys (W_q's last dimension), not the "
        "width of either input: divide the scores by its square root.",
    ),
    Mistake(
        "a scale of sqrt(d_model), x_query's width, instead of sqrt(d_k)",
        _query_width_scale,
        "d_k is the width of the projected queries and keys (W_q's last dimension), not the "
        "width of either input: divide the scores by its square root.",
    ),
    Mistake(
        "a scale of sqrt(S), the number of context tokens, instead of sqrt(d_k)",
        _context_length_scale,
        "d_k is the width of the projected queries and keys (W_q's last dimension), not a "
        "count of tokens: divide the scores by its square root. len(x_context) and "
        "x_context.shape[0] count the rows (or, with a batch axis, the sequences).",
    ),
    Mistake(
        "keys and values projected from x_query: self-attention, not cross-attention",
        _self_not_cross,
        "Only the queries come from x_query: the keys and the values are both projections "
        "of x_context.",
    ),
]


def check_cross_attention(
    fn: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
    ],
) -> Verdict:
    """Check ``fn(x_query, x_context, W_q, W_k, W_v) -> output``: cross-attention.

    Shapes: ``x_query`` ``(..., T, D)``, ``x_context`` ``(..., S, D_ctx)``,
    ``W_q`` ``(D, d_k)``, ``W_k`` ``(D_ctx, d_k)``, ``W_v`` ``(D_ctx, d_v)``;
    output ``(..., T, d_v)``, differentiable with respect to both inputs and the three
    matrices (training learns them through it).
    """
    learner = differentiable(
        "cross_attention",
        fn,
        {"x_query": 0, "x_context": 1, "W_q": 2, "W_k": 3, "W_v": 4},
        why=_TRAINED_THROUGH,
    )
    return run_cases(
        "cross_attention",
        learner,
        _cross_attention_reference,
        _CROSS_CASES,
        mistakes=_CROSS_MISTAKES,
    )
