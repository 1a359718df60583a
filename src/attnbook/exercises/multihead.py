"""Checkers for the exercises of chapter 7 (multi-head attention).

The learner's functions take and return torch tensors (float64 in the hidden
cases, so only real mistakes show up as differences). Weight matrices act from
the right, as in chapter 5: ``Q = x @ W_Q`` with ``W_Q`` of shape
``(d_model, d_model)``; there are no biases.

Shape legend: ``B`` batch, ``T`` query positions, ``S`` key positions, ``H``
heads, ``D`` model width (``d_model``), ``Dh`` head width (``d_head = D / H``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnbook.attention import scaled_dot_product_attention
from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    differentiable,
    randn,
    run_cases,
)
from attnbook.multihead import merge_heads, split_heads

__all__ = ["check_merge_heads", "check_multi_head_attention", "check_split_heads"]

# The running example of the book: "she likes coffee", one 4-d embedding per word.
_SHE_LIKES_COFFEE = [[0.2, 0.9, 0.1, 0.5], [0.8, 0.3, 0.7, 0.2], [0.4, 0.6, 0.3, 0.9]]


def _she_likes_coffee() -> torch.Tensor:
    return torch.tensor([_SHE_LIKES_COFFEE], dtype=torch.float64)  # (B, T, D) = (1, 3, 4)


# ------------------------------------------------------------------ split heads

_SPLIT_HINT = (
    "Head h owns the features h * d_head to (h + 1) * d_head - 1 of every position, and its "
    "rows are the positions in order. Check both on a small x, torch.arange(12.0).view(1, 3, 4) "
    "with 2 heads: heads[0, h, t] must equal x[0, t, h * d_head : (h + 1) * d_head]."
)

_SPLIT_CASES = [
    Case(
        "'she likes coffee': B = 1, T = 3, d_model = 4, 2 heads",
        lambda: (_she_likes_coffee(), 2),
        _SPLIT_HINT,
    ),
    Case(
        "B = 2, T = 5, d_model = 6, 3 heads",
        lambda: (randn(701, 2, 5, 6), 3),
        "The result has shape (B, n_heads, T, d_head) with d_head = d_model // n_heads: "
        "(2, 3, 5, 2) for this x of shape (2, 5, 6) and 3 heads, the batch axis first. "
        + _SPLIT_HINT,
    ),
    Case(
        "square: T = n_heads = d_head = 4 (a wrong order hides in the shape)",
        lambda: (randn(702, 2, 4, 16), 4),
        "Each head takes a contiguous block of d_head features (not every n_heads-th feature), "
        "and the head axis goes before the positions: (B, n_heads, T, d_head).",
    ),
    Case(
        "one head: the result is x with a head axis of size 1",
        lambda: (randn(703, 2, 3, 5), 1),
        "With one head, d_head = d_model: that head holds all of x, position by position, "
        "and the result is x's numbers in their own order with a head axis of size 1 after "
        "the batch axis.",
    ),
]


def _split_variant(x: torch.Tensor, n_heads: int, *, how: str) -> torch.Tensor:
    """A split of x (B, T, D) into heads done wrong in one known way (for the hints)."""
    B, T, D = x.shape
    Dh = D // n_heads
    if how == "memory order":  # the numbers read straight into (B, H, T, Dh)
        return x.reshape(B, n_heads, T, Dh)
    if how == "interleaved":  # head h gets features h, h + H, h + 2H, ...
        return x.reshape(B, T, Dh, n_heads).permute(0, 3, 1, 2)
    heads = x.reshape(B, T, n_heads, Dh)  # (B, T, H, Dh): the right cut
    if how == "head and feature axes":  # (B, T, Dh, H)
        return heads.transpose(2, 3)
    if how == "batch and head axes":  # (H, B, T, Dh)
        return heads.permute(2, 0, 1, 3)
    raise AssertionError(how)


_SPLIT_MISTAKES = [
    Mistake(
        "x read in memory order straight into (B, n_heads, T, d_head)",
        lambda x, n: _split_variant(x, n, how="memory order"),
        "The shape is right, but reading x's numbers in memory order fills head 0 with whole "
        "positions, one after another, so a head's rows are no longer the positions. Only the "
        "feature axis is to be cut into heads; then the head axis has to move in front of "
        "the positions. Compare heads[0, h, t] with x[0, t, h * d_head : (h + 1) * d_head].",
    ),
    Mistake(
        "every n_heads-th feature given to a head (interleaved), not a block of d_head",
        lambda x, n: _split_variant(x, n, how="interleaved"),
        "Head h gets d_head features in a row, starting at h * d_head, not the features h, "
        "h + n_heads, h + 2 * n_heads, ...: look at which of x's features land in head 0.",
    ),
    Mistake(
        "the head and feature axes in each other's place: (B, T, d_head, n_heads)",
        lambda x, n: _split_variant(x, n, how="head and feature axes"),
        "Your axes are (B, T, d_head, n_heads); the head axis comes right after the batch "
        "axis, before the positions: (B, n_heads, T, d_head). Print the shape on an x whose "
        "T, n_heads and d_head all differ, where a wrong order shows.",
    ),
    Mistake(
        "the batch and head axes in each other's place: (n_heads, B, T, d_head)",
        lambda x, n: _split_variant(x, n, how="batch and head axes"),
        "Your axes are (n_heads, B, T, d_head): the batch axis stays first, the head axis "
        "comes second.",
    ),
    Mistake(
        "x returned without a head axis",
        lambda x, n: x,
        "The result still has x's shape (B, T, d_model): cut the features into n_heads heads "
        "of d_head, a result of shape (B, n_heads, T, d_head).",
    ),
]


_TRAINED_THROUGH = (
    "every model of the later chapters trains through multi-head attention, and "
    "loss.backward() goes through it to its inputs and its four matrices"
)


def check_split_heads(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> Verdict:
    """Check ``fn(x, n_heads) -> heads``: ``(B, T, d_model)`` to ``(B, n_heads, T, d_head)``.

    Head ``h`` gets the features ``h * d_head`` to ``(h + 1) * d_head - 1`` of every
    position, with ``d_head = d_model // n_heads``.
    """
    learner = differentiable("split_heads", fn, {"x": 0}, why=_TRAINED_THROUGH)
    return run_cases(
        "split_heads",
        learner,
        split_heads,
        _SPLIT_CASES,
        rtol=0.0,
        atol=0.0,
        mistakes=_SPLIT_MISTAKES,
    )


# ------------------------------------------------------------------ merge heads

_MERGE_CASES = [
    Case(
        "B = 1, 2 heads, T = 3, d_head = 2 (back to 'she likes coffee' shapes)",
        lambda: (split_heads(_she_likes_coffee(), 2),),
        "Row t of the output is the heads' outputs at position t, side by side along the "
        "features (concatenated, not averaged or summed): out[0, t, h * d_head : (h + 1) * "
        "d_head] must equal heads[0, h, t]. Merging the result of your split must give back "
        "the split's input.",
    ),
    Case(
        "B = 2, 3 heads, T = 5, d_head = 2",
        lambda: (randn(711, 2, 3, 5, 2),),
        "The output has shape (B, T, n_heads * d_head): every head's d_head features, side by "
        "side (concatenated, not averaged or summed). After the transpose the tensor is no "
        "longer contiguous in memory, so .view raises: use .reshape, or .contiguous().view.",
    ),
    Case(
        "square: n_heads = T = d_head = 4",
        lambda: (randn(712, 2, 4, 4, 4),),
        "Row t of the output is [head 0 at t, head 1 at t, ...]: here the shapes cannot tell "
        "a wrong order of the axes, so compare out[0, t, h * d_head : (h + 1) * d_head] with "
        "heads[0, h, t].",
    ),
]


def _merge_variant(heads: torch.Tensor, *, how: str) -> torch.Tensor:
    """A merge of heads (B, H, T, Dh) done wrong in one known way (for the hints)."""
    B, H, T, Dh = heads.shape
    if how == "memory order":  # reshaped without moving the head axis
        return heads.reshape(B, T, H * Dh)
    if how == "along the positions":  # (B, H * T, Dh)
        return torch.cat(list(heads.unbind(1)), dim=1)
    raise AssertionError(how)


_MERGE_MISTAKES = [
    Mistake(
        "the heads read in memory order straight into (B, T, n_heads * d_head)",
        lambda heads: _merge_variant(heads, how="memory order"),
        "The shape is right, but reading the heads' numbers in memory order puts head 0's "
        "positions side by side in row 0. Row t must hold position t of every head: the "
        "head axis has to move next to d_head before the two become one axis.",
    ),
    Mistake(
        "the heads averaged instead of concatenated",
        lambda heads: heads.mean(dim=1),
        "Averaging the heads loses d_model - d_head features: concatenate them along the "
        "features, so that the output is n_heads * d_head wide.",
    ),
    Mistake(
        "the heads summed instead of concatenated",
        lambda heads: heads.sum(dim=1),
        "Summing the heads loses d_model - d_head features: concatenate them along the "
        "features, so that the output is n_heads * d_head wide.",
    ),
    Mistake(
        "the heads concatenated along the positions instead of the features",
        lambda heads: _merge_variant(heads, how="along the positions"),
        "Your output has n_heads * T rows of d_head: the heads go side by side along the "
        "features, (B, T, n_heads * d_head), one row per position.",
    ),
]


def check_merge_heads(fn: Callable[[torch.Tensor], torch.Tensor]) -> Verdict:
    """Check ``fn(heads) -> x``: ``(B, n_heads, T, d_head)`` to ``(B, T, n_heads * d_head)``.

    The inverse of splitting: position ``t``'s output is the concatenation of the
    heads' outputs at ``t``, head 0 first.
    """
    learner = differentiable("merge_heads", fn, {"heads": 0}, why=_TRAINED_THROUGH)
    return run_cases(
        "merge_heads",
        learner,
        merge_heads,
        _MERGE_CASES,
        rtol=0.0,
        atol=0.0,
        mistakes=_MERGE_MISTAKES,
    )


# ------------------------------------------------------- multi-head attention


def _mha_reference(
    x_query: torch.Tensor,
    x_context: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    w_o: torch.Tensor,
    n_heads: int,
) -> torch.Tensor:
    q = split_heads(x_query @ w_q, n_heads)  # (B, T, D) @ (D, D) -> (B, H, T, Dh)
    k = split_heads(x_context @ w_k, n_heads)  # (B, S, D) @ (D, D) -> (B, H, S, Dh)
    v = split_heads(x_context @ w_v, n_heads)  # (B, S, D) @ (D, D) -> (B, H, S, Dh)
    heads, _ = scaled_dot_product_attention(q, k, v)  # (B, H, T, Dh), scaled by 1/sqrt(Dh)
    return merge_heads(heads) @ w_o  # (B, T, D) @ (D, D) -> (B, T, D)


def _mha_args(seed: int, B: int, T: int, S: int, D: int, n_heads: int, *, self_attn: bool):
    x = randn(seed, B, T, D)
    context = x.clone() if self_attn else randn(seed + 1, B, S, D)
    ws = [randn(seed + i, D, D) / D**0.5 for i in range(2, 6)]  # W_Q, W_K, W_V, W_O
    return (x, context, *ws, n_heads)


def _she_likes_coffee_mha() -> tuple:
    x = _she_likes_coffee()  # (1, 3, 4)
    ws = [randn(720 + i, 4, 4) for i in range(4)]  # W_Q, W_K, W_V, W_O
    return (x, x.clone(), *ws, 2)


_MHA_CASES = [
    Case(
        "one head (n_heads = 1): chapter 5's attention, then W_O",
        lambda: _mha_args(730, 1, 3, 3, 4, 1, self_attn=True),
        "With one head this is chapter 5's scaled dot-product attention of the three "
        "projections, followed by the output projection with W_O.",
    ),
    Case(
        "'she likes coffee', self-attention, d_model = 4, 2 heads",
        _she_likes_coffee_mha,
        "Scale each head's scores by sqrt(d_head) = sqrt(d_model / n_heads), not sqrt(d_model); "
        "split and merge the heads as in the two exercises before (check_split_heads and "
        "check_merge_heads test those steps on their own); concatenate the heads instead of "
        "averaging them; then apply W_O.",
    ),
    Case(
        "cross-attention: T = 2 queries, S = 5 keys, d_model = 8, 4 heads",
        lambda: _mha_args(740, 2, 2, 5, 8, 4, self_attn=False),
        "Queries come from x_query; keys and values both come from x_context. Each head's "
        "weights are (T, S), so its output has one row per query.",
    ),
    Case(
        "wide heads: B = 2, T = 4, d_model = 32, 2 heads (the scale matters)",
        lambda: _mha_args(750, 2, 4, 4, 32, 2, self_attn=True),
        "Divide by sqrt(d_head) = sqrt(16) = 4, the width of one head's queries.",
    ),
]


def _mha_variant(
    x_query: torch.Tensor,
    x_context: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    w_o: torch.Tensor,
    n_heads: int,
    *,
    scale_width: str = "d_head",
    softmax_dim: int = -1,
    transpose: bool = True,
    merge_transpose: bool | None = None,
    out: bool = True,
    kv_from_query: bool = False,
    weights_transposed: bool = False,
    causal: bool = False,
) -> torch.Tensor:
    """Multi-head attention written out, with one step optionally done wrong (for the hints).

    ``transpose`` is the split's (and, unless ``merge_transpose`` says otherwise, the merge's);
    ``weights_transposed`` uses the four matrices as ``nn.Linear`` stores them
    (``F.linear(x, W) = x @ W.T``); ``causal`` adds chapter 6's mask, which this exercise has
    not.
    """
    B, T, D = x_query.shape
    context = x_query if kv_from_query else x_context
    Dh = D // n_heads
    if weights_transposed:
        w_q, w_k, w_v, w_o = w_q.T, w_k.T, w_v.T, w_o.T
    if merge_transpose is None:
        merge_transpose = transpose

    def split(x: torch.Tensor) -> torch.Tensor:
        if transpose:
            return x.view(B, x.shape[1], n_heads, Dh).transpose(1, 2)  # (B, H, T or S, Dh)
        return x.reshape(B, n_heads, x.shape[1], Dh)  # memory order: positions mixed up

    q, k, v = split(x_query @ w_q), split(context @ w_k), split(context @ w_v)
    scores = q @ k.transpose(-2, -1)  # (B, H, T, Dh) @ (B, H, Dh, S) -> (B, H, T, S)
    width = {"d_head": Dh, "d_model": D, "T": T, "none": 1}[scale_width]
    scores = scores / math.sqrt(width)
    if causal:  # key s > query t blocked
        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()  # (T, S)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim)  # (B, H, T, S)
    heads = weights @ v  # (B, H, T, Dh)
    # (B, H, T, Dh) -> (B, T, H * Dh); without the transpose, memory order again
    merged = heads.transpose(1, 2).reshape(B, T, D) if merge_transpose else heads.reshape(B, T, D)
    return merged @ w_o if out else merged  # (B, T, D)


_MHA_MISTAKES = [
    Mistake(
        "forgetting the output projection W_O",
        lambda *a: _mha_variant(*a, out=False),
        "The concatenated heads still need the output projection, W_O, acting from the "
        "right: W_O is what lets the heads' outputs mix.",
    ),
    Mistake(
        "scores without the 1 / sqrt(d_head) scale",
        lambda *a: _mha_variant(*a, scale_width="none"),
        "Divide each head's scores by sqrt(d_head) before the softmax, as in chapter 4; "
        "unscaled scores make the softmax too peaked.",
    ),
    Mistake(
        "scaling by sqrt(d_model) instead of sqrt(d_head)",
        lambda *a: _mha_variant(*a, scale_width="d_model"),
        "Each head's queries and keys have d_head = d_model / n_heads features, so scale by "
        "sqrt(d_head), not sqrt(d_model).",
    ),
    Mistake(
        "a scale of sqrt(T), the number of queries, instead of sqrt(d_head)",
        lambda *a: _mha_variant(*a, scale_width="T"),
        "After the split each head's queries have shape (B, n_heads, T, d_head): d_head is "
        "the last dimension, and the one before it counts the positions. Scale the scores by "
        "the square root of the last one.",
    ),
    Mistake(
        "the softmax over the wrong axis (over the queries, not the keys)",
        lambda *a: _mha_variant(*a, softmax_dim=-2),
        "Each query's weights over the keys sum to 1: take the softmax over the last axis of "
        "the (B, n_heads, T, S) scores, dim=-1.",
    ),
    Mistake(
        "splitting (and merging) the heads without a transpose",
        lambda *a: _mha_variant(*a, transpose=False),
        "Your split reads the projections' numbers in memory order straight into (B, n_heads, "
        "T, d_head), so a head's rows are not the positions, and your merge does the same "
        "back. Test the two steps on their own with check_split_heads and check_merge_heads.",
    ),
    Mistake(
        "splitting the heads without a transpose (the merge is right)",
        lambda *a: _mha_variant(*a, transpose=False, merge_transpose=True),
        "Your split reads the projections' numbers in memory order straight into (B, n_heads, "
        "T, d_head), so a head's rows are not the positions. Your merge moves the head axis "
        "back; the split must move it first. Test the split on its own with check_split_heads.",
    ),
    Mistake(
        "merging the heads without a transpose (the split is right)",
        lambda *a: _mha_variant(*a, transpose=True, merge_transpose=False),
        "The heads are (B, n_heads, T, d_head), and a reshape straight from there to "
        "(B, T, d_model) puts head 0's positions side by side in row 0: the head axis has to "
        "move next to d_head first. Test the merge on its own with check_merge_heads.",
    ),
    Mistake(
        "the weight matrices used transposed (x @ W.T, as F.linear(x, W) computes)",
        lambda *a: _mha_variant(*a, weights_transposed=True),
        "The matrices act from the right as they are given, the input times the matrix, for "
        "the projections and W_O alike. F.linear(x, W) and nn.Linear multiply by W "
        "transposed, since they store the transpose.",
    ),
    Mistake(
        "a causal mask, which this exercise does not ask for",
        lambda *a: _mha_variant(*a, causal=True),
        "This exercise has no mask: every query attends to every key of x_context. In "
        "cross-attention the keys are another sequence, where a causal mask means nothing.",
    ),
    Mistake(
        "keys and values from x_query instead of x_context",
        lambda *a: _mha_variant(*a, kv_from_query=True),
        "Queries come from x_query; keys and values both come from x_context (in "
        "cross-attention they differ).",
    ),
]


def check_multi_head_attention(
    fn: Callable[..., torch.Tensor],
) -> Verdict:
    """Check ``fn(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads) -> output``.

    Multi-head attention without biases or masks, the matrices acting from the right: the
    queries projected from ``x_query``, the keys and values from ``x_context``, ``n_heads``
    heads of width ``d_head = d_model // n_heads`` each attending with the scale
    ``1 / sqrt(d_head)``, the heads concatenated and projected with ``W_O``. The checker
    names the usual mistakes (the scale, the softmax's axis, the heads' reshapes, ``W_O``).

    Shapes: ``x_query`` ``(B, T, d_model)``, ``x_context`` ``(B, S, d_model)``,
    each ``W`` ``(d_model, d_model)``; output ``(B, T, d_model)``. The output, like that of
    the two reshapes, must be differentiable with respect to every tensor argument
    (:func:`~attnbook.exercises._framework.differentiable`).
    """
    learner = differentiable(
        "multi_head_attention",
        fn,
        {"x_query": 0, "x_context": 1, "W_Q": 2, "W_K": 3, "W_V": 4, "W_O": 5},
        why=_TRAINED_THROUGH,
    )
    return run_cases(
        "multi_head_attention", learner, _mha_reference, _MHA_CASES, mistakes=_MHA_MISTAKES
    )
