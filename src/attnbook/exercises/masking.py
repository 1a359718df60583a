"""Checkers for the exercises of chapter 6 (masking).

Masks follow the package's convention: boolean, ``True`` = may attend. The
learner's functions take and return torch tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnbook.attention import scaled_dot_product_attention
from attnbook.exercises._framework import (
    Case,
    Mistake,
    RefusedResult,
    Verdict,
    all_of,
    differentiable,
    forbid_calls,
    randint,
    randn,
    returns_tensor,
    run_cases,
)
from attnbook.masking import (
    apply_mask,
    causal_mask,
    combine_masks,
    masked_softmax,
    padding_mask,
)

__all__ = [
    "check_causal_mask",
    "check_masked_attention",
    "check_masked_softmax",
    "check_padding_mask",
]


_CAUSAL_CASES = [
    Case(
        "seq_len = 4",
        lambda: (4,),
        "Query t may attend to keys 0..t: True on and below the diagonal, and the result must "
        "be boolean (dtype torch.bool).",
        draw=lambda rng: (randint(rng, 2, 6),),
    ),
    Case(
        "seq_len = 1",
        lambda: (1,),
        "A single token may attend to itself: the diagonal is allowed.",
    ),
    Case(
        "seq_len = 7",
        lambda: (7,),
        "Row t is True up to and including column t, False after it (the future).",
        draw=lambda rng: (randint(rng, 7, 12),),
    ),
]


def _upper(seq_len: int, diagonal: int) -> torch.Tensor:
    return torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal)


_CAUSAL_MISTAKES = [
    Mistake(
        "an inverted mask (True marks the future, the pairs to block)",
        lambda seq_len: _upper(seq_len, 1),
        "In this book True means 'may attend': True on and below the diagonal, False above "
        "it. (True = blocked is the convention of nn.MultiheadAttention's boolean attn_mask.)",
    ),
    Mistake(
        "the diagonal left out: s < t instead of s <= t",
        lambda seq_len: ~_upper(seq_len, 0),
        "Query t may attend to key t, itself: the diagonal belongs to the mask. Without it "
        "the first query may attend to nothing: check that row 0 of your mask has one True.",
    ),
    Mistake(
        "the upper triangle: the future allowed instead of the past",
        lambda seq_len: _upper(seq_len, 0),
        "Row t is the query and column s the key: query t may attend to the keys s <= t, on "
        "and below the diagonal, not to the ones after it. Check row 0 of your mask: only its "
        "first entry is True.",
    ),
]


# The causal and padding mask exercises ask for a boolean tensor, built with PyTorch only.
_MASK_TENSOR = "a torch tensor of dtype torch.bool"
_MASK_TENSOR_HINT = (
    "the exercise asks for a boolean torch tensor, built with PyTorch only: the masked "
    "attention it goes into takes a tensor. Build the mask with torch operations, not NumPy."
)


def check_causal_mask(fn: Callable[[int], torch.Tensor]) -> Verdict:
    """Check ``fn(seq_len) -> mask``: a ``(T, T)`` boolean tensor, ``True`` on and below the diagonal.

    An answer that calls ``attnbook.causal_mask`` or ``nn.Transformer``'s mask
    helper (instead of writing the mask) fails.
    """
    return run_cases(
        "causal_mask",
        fn,
        causal_mask,
        _CAUSAL_CASES,
        mistakes=_CAUSAL_MISTAKES,
        guard=all_of(
            forbid_calls(
                {
                    "attnbook.causal_mask": causal_mask,
                    "nn.Transformer.generate_square_subsequent_mask": (
                        nn.Transformer.generate_square_subsequent_mask
                    ),
                },
                "build it yourself from the positions: query t may attend to key s when s <= t.",
            ),
            returns_tensor(_MASK_TENSOR, _MASK_TENSOR_HINT),
        ),
    )


def _scores_favour_the_future() -> tuple[torch.Tensor, ...]:
    """Later keys match every query best, so a leak from the future is obvious."""
    query = torch.ones(4, 2, dtype=torch.float64)  # (T, d_k)
    key = torch.arange(4, dtype=torch.float64)[:, None].repeat(1, 2)  # (S, d_k), growing with s
    value = randn(501, 4, 3)  # (S, d_v)
    return query, key, value, causal_mask(4)


def _huge_scores_favour_the_future() -> tuple[torch.Tensor, ...]:
    """Scores of about -4e9 .. 0 where every blocked key scores higher than every allowed one.

    Only ``-inf`` blocks exactly: a finite penalty (``-10000``) leaves the blocked
    keys the best matches, a fill with ``-1e9`` puts them above the allowed keys
    (which score below -1e9 here), and a softmax taken before masking puts all
    of its weight on them, so the allowed weights underflow to 0.
    """
    query = torch.ones(4, 2, dtype=torch.float64)  # (T, d_k)
    steps = torch.arange(4, dtype=torch.float64) - 3.0  # -3, -2, -1, 0
    key = 1e9 * steps[:, None].repeat(1, 2)  # (S, d_k): scores 1.4e9 * (s - 3)
    value = randn(511, 4, 3)  # (S, d_v)
    return query, key, value, causal_mask(4)


# The advice of the case built to catch a finite fill and a softmax taken before the mask;
# the latter's hint holds it, so a verdict that names that mistake on NaN alone gives it once.
_ONLY_MINUS_INF_BLOCKS = (
    "Only -inf blocks exactly, at any scale of the scores: set the blocked scores to "
    "float('-inf') before the softmax."
)

_MASKED_CASES = [
    Case(
        "causal mask, T = S = 4",
        lambda: (randn(502, 4, 3), randn(503, 4, 3), randn(504, 4, 2), causal_mask(4)),
        "Block a pair by setting its score to -inf before the softmax (exp(-inf) = 0); "
        "True in the mask means 'may attend', so block where the mask is False.",
    ),
    Case(
        "causal mask where future keys have the highest scores",
        _scores_favour_the_future,
        "A score of 0 is not blocked (exp(0) = 1) and zeroing weights after the softmax leaves "
        "rows that no longer sum to 1: mask the scores with -inf, then softmax.",
    ),
    Case(
        "padding mask of shape (B, 1, S) on a batch of 2, T = 3 queries, S = 5 keys",
        lambda: (
            randn(505, 2, 3, 4),
            randn(506, 2, 5, 4),
            randn(507, 2, 5, 3),
            padding_mask([5, 2], 5),
        ),
        "The mask broadcasts against the (B, T, S) scores: use it as it is, without indexing "
        "one row, and keep the 1/sqrt(d_k) scale.",
    ),
    Case(
        "causal and padding masks combined, shape (B, T, T)",
        lambda: (
            randn(508, 2, 4, 3),
            randn(509, 2, 4, 3),
            randn(510, 2, 4, 2),
            combine_masks(causal_mask(4), padding_mask([4, 3], 4)),
        ),
        "Every False entry is blocked, whatever the reason; every row here has at least one key.",
    ),
    Case(
        "huge scores (about 1e9) where every blocked key scores highest",
        _huge_scores_favour_the_future,
        _ONLY_MINUS_INF_BLOCKS,
    ),
]


def _scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, S)


def _masked_by(scores: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The softmax of ``scores`` with the blocked ones at -inf: the weights ``(..., T, S)``."""
    return torch.softmax(scores.masked_fill(~m, float("-inf")), dim=-1)


def _finite_fill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
) -> torch.Tensor:
    return torch.softmax(_scaled_scores(q, k).masked_fill(~m, -1e9), dim=-1) @ v


def _additive_penalty(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
) -> torch.Tensor:
    scores = _scaled_scores(q, k) + (1 - m.to(q.dtype)) * -10000.0
    return torch.softmax(scores, dim=-1) @ v


def _softmax_then_renormalise(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
) -> torch.Tensor:
    weights = torch.softmax(_scaled_scores(q, k), dim=-1) * m
    return weights / weights.sum(dim=-1, keepdim=True) @ v


def _softmax_then_zero(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
) -> torch.Tensor:
    return (torch.softmax(_scaled_scores(q, k), dim=-1) * m) @ v


def _right_answer(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor
) -> torch.Tensor:
    return _masked_by(_scaled_scores(q, k), m) @ v


_FINITE_FILL_HINT = (
    "-1e9 is low only next to ordinary scores: here a query with a blocked key may attend only "
    "to keys that score below -1e9 (about -1.4e9 to -4.2e9), so its blocked keys, filled with "
    "-1e9, score higher and take the softmax's weight. (In float16, -1e9 does not even fit: "
    "masked_fill raises.) Fill with float('-inf'): it is below every score, and "
    "exp(-inf) = 0 exactly."
)

_FINITE_PENALTY_HINT = (
    "A finite penalty only pushes a blocked score down by that much: here the blocked keys "
    "score higher than the allowed ones by more than any such penalty, so they still win the "
    "softmax. (A query with no allowed key would also get a uniform average of the blocked "
    "values instead of nothing.) Look at the value you fill in: only float('-inf') gives "
    "exp = 0 exactly, at any scale."
)

_MASKED_MISTAKES = [
    Mistake(
        "filling blocked scores with a large finite number (-1e9)",
        _finite_fill,
        _FINITE_FILL_HINT,
    ),
    Mistake(
        "adding a finite penalty ((1 - mask) * -10000) to the scores",
        _additive_penalty,
        _FINITE_PENALTY_HINT,
    ),
    Mistake(
        "a softmax first, then zeroing the blocked weights and renormalising",
        _softmax_then_renormalise,
        "Equal on paper, but when a blocked key scores far higher, the softmax gives every "
        "allowed key a weight that underflows to 0, and renormalising is 0 / 0 = NaN. "
        + _ONLY_MINUS_INF_BLOCKS,
    ),
    Mistake(
        "zeroing the blocked weights after the softmax, without renormalising",
        _softmax_then_zero,
        "The weights that remain no longer sum to 1. Mask the scores with -inf before the "
        "softmax, so the allowed keys share all the weight.",
    ),
    Mistake(
        "an inverted mask (blocking where the mask is True)",
        lambda q, k, v, m: _right_answer(q, k, v, ~m),
        "In this book True means 'may attend': block the keys where the mask is False. "
        "(nn.MultiheadAttention uses the opposite convention.)",
    ),
    Mistake(
        "filling blocked scores with 0 instead of -inf",
        lambda q, k, v, m: torch.softmax(_scaled_scores(q, k).masked_fill(~m, 0.0), -1) @ v,
        "exp(0) = 1: a score of 0 is an ordinary score, not a blocked one. Fill with -inf.",
    ),
    Mistake(
        "a softmax over the queries (dim=-2) instead of over the keys",
        lambda q, k, v, m: (
            torch.softmax(_scaled_scores(q, k).masked_fill(~m, float("-inf")), dim=-2) @ v
        ),
        "The mask is applied right, but each query's row of weights must sum to 1 over the "
        "keys, the last axis of the scores (..., T, S): check that your weights' rows sum "
        "to 1.",
    ),
    Mistake(
        "a missing scale (no division by sqrt(d_k))",
        lambda q, k, v, m: _masked_by(q @ k.transpose(-2, -1), m) @ v,
        "The mask is right, but the scores are not scaled: divide them by sqrt(d_k), with "
        "d_k the width of a query, before masking (chapter 4).",
    ),
    Mistake(
        "dividing by d_k instead of sqrt(d_k)",
        lambda q, k, v, m: _masked_by(q @ k.transpose(-2, -1) / q.shape[-1], m) @ v,
        "The mask is right, but the scale is not: divide the scores by sqrt(d_k), not by d_k.",
    ),
    *(
        Mistake(  # two answers, one name: T = S in the first case, where they agree
            "a scale of sqrt(T) or sqrt(S), a number of tokens, instead of sqrt(d_k)",
            lambda q, k, v, m, axis=axis: (
                _masked_by(q @ k.transpose(-2, -1) / math.sqrt(axis(q, k)), m) @ v
            ),
            "The mask is right, but the scale is not: d_k is the width of a query or key, its "
            "last dimension. The second-to-last dimension counts the queries (or the keys), "
            "and len(query) the rows or, with a batch axis, the sequences.",
        )
        for axis in (lambda q, k: q.shape[-2], lambda q, k: k.shape[-2])
    ),
]


def check_masked_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> Verdict:
    """Check ``fn(query, key, value, mask) -> output``: scaled dot-product attention with a mask.

    ``mask`` is boolean, ``True`` = may attend, broadcastable to the scores
    ``(..., T, S)``; every query in the hidden cases may attend to at least one key.
    Output shape ``(..., T, d_v)``. One case has scores of about ``1e9`` where
    the blocked keys score highest: only ``-inf`` blocks them exactly. An answer
    that calls an attention function (``attnbook``'s or PyTorch's) or the package's
    masked softmax fails: the exercise is to apply the mask yourself. The models of the
    later chapters train through masked attention, so the output must be differentiable
    with respect to ``query``, ``key`` and ``value``.
    """
    return run_cases(
        "masked_attention",
        differentiable(
            "masked_attention",
            fn,
            {"query": 0, "key": 1, "value": 2},
            why="the models of the later chapters train through masked attention, and "
            "loss.backward() goes through it to the queries, keys and values",
        ),
        lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m)[0],
        _MASKED_CASES,
        mistakes=_MASKED_MISTAKES,
        guard=forbid_calls(
            {
                "attnbook.scaled_dot_product_attention": scaled_dot_product_attention,
                "attnbook.masked_softmax": masked_softmax,
                "attnbook.apply_mask": apply_mask,
                "F.scaled_dot_product_attention": F.scaled_dot_product_attention,
                "F.multi_head_attention_forward (nn.MultiheadAttention)": (
                    F.multi_head_attention_forward
                ),
            },
            "write the steps yourself with @, masked_fill and a softmax: the scaled scores, "
            "-inf where the mask is False, the softmax over the keys, the weighted sum of the "
            "values.",
        ),
    )


# ------------------------------------------------------------------ padding_mask


def _draw_lengths(
    rng: np.random.Generator, *, longest: bool = False, empty: bool = False
) -> tuple[torch.Tensor, int]:
    """``(lengths (B,), max_len)`` for the grader: 2 to 4 sequences shorter than ``max_len``,
    but one as long as ``max_len`` if ``longest``, and one empty if ``empty``."""
    batch, max_len = randint(rng, 2, 4), randint(rng, 3, 8)
    lengths = [randint(rng, 1, max_len - 1) for _ in range(batch)]
    if longest:
        lengths[randint(rng, 0, batch - 1)] = max_len
    if empty:
        lengths[0] = 0
        lengths[1] = randint(rng, 1, max_len)  # and one sequence that is not
        rng.shuffle(lengths)
    return torch.tensor(lengths), max_len


_PADDING_CASES = [
    Case(
        "lengths [3, 1, 4], max_len = 4",
        lambda: (torch.tensor([3, 1, 4]), 4),
        "Key s of sequence b is real when s < lengths[b]: True there, False on the padding; "
        "shape (B, 1, S), dtype torch.bool.",
        draw=lambda rng: _draw_lengths(rng, longest=True),
    ),
    Case(
        "lengths [2, 5], max_len = 6 (every sequence is padded)",
        lambda: (torch.tensor([2, 5]), 6),
        "The mask has max_len columns even when no sequence is that long.",
        draw=lambda rng: _draw_lengths(rng),
    ),
    Case(
        "an empty sequence: lengths [0, 2], max_len = 3",
        lambda: (torch.tensor([0, 2]), 3),
        "A sequence of length 0 has no real key: its row is all False.",
        draw=lambda rng: _draw_lengths(rng, empty=True),
    ),
    Case(
        "one sequence, lengths [1], max_len = 1",
        lambda: (torch.tensor([1]), 1),
        "Shape (B, 1, S) = (1, 1, 1) here; keep the middle axis of size 1.",
    ),
]

_PADDING_MISTAKES = [
    Mistake(
        "an off-by-one: s <= length instead of s < length",
        lambda lengths, max_len: (torch.arange(max_len) <= lengths[:, None])[:, None, :],
        "Positions count from 0, so a sequence of length L has its real keys at 0..L-1: "
        "check that row b of your mask holds exactly lengths[b] True entries.",
    ),
    Mistake(
        "an inverted mask (True marks the padding)",
        lambda lengths, max_len: (torch.arange(max_len) >= lengths[:, None])[:, None, :],
        "In this book True means 'may attend', so True marks the real keys. (True = padding is "
        "nn.MultiheadAttention's key_padding_mask convention.)",
    ),
    Mistake(
        "shape (B, S) without the query axis",
        lambda lengths, max_len: torch.arange(max_len) < lengths[:, None],
        "The mask needs the axis of size 1 that broadcasts over the T queries, between the "
        "batch and the keys: shape (B, 1, S).",
    ),
    Mistake(
        "shape (B, S, 1): the axis of size 1 in the wrong place",
        lambda lengths, max_len: (torch.arange(max_len) < lengths[:, None])[:, :, None],
        "The padding is along the keys, the last axis of the scores (..., T, S): the mask "
        "must be (B, 1, S), so that it is shared by all queries.",
    ),
]


def check_padding_mask(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> Verdict:
    """Check ``fn(lengths, max_len) -> mask``: the key-padding mask of a padded batch.

    ``lengths`` is an int64 tensor ``(B,)``; the result is boolean ``(B, 1, S)``
    with ``S = max_len``, ``True`` at the real keys ``s < lengths[b]`` (the
    convention of :func:`attnbook.padding_mask`). An answer that calls
    ``attnbook.padding_mask`` fails.
    """
    return run_cases(
        "padding_mask",
        fn,
        lambda lengths, max_len: padding_mask(lengths, max_len),
        _PADDING_CASES,
        mistakes=_PADDING_MISTAKES,
        guard=all_of(
            forbid_calls(
                {"attnbook.padding_mask": padding_mask},
                "build it yourself: key s of sequence b is real when s < lengths[b], and the "
                "mask has shape (B, 1, max_len).",
            ),
            returns_tensor(_MASK_TENSOR, _MASK_TENSOR_HINT),
        ),
    )


# ---------------------------------------------------------------- masked_softmax


def _row_blocked() -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (2, 3, 5); query 1 of sequence 0 may attend to nothing."""
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    mask[1, :, 3:] = False
    return randn(521, 2, 3, 5), mask


def _empty_sequence() -> tuple[torch.Tensor, torch.Tensor]:
    """A batch whose second sequence has length 0: all its rows are blocked."""
    return randn(522, 2, 4, 4), padding_mask([3, 0], 4)  # (B, T, S), (B, 1, S)


def _large_scores() -> tuple[torch.Tensor, torch.Tensor]:
    """Scores in the thousands, and a blocked key far above them: stability is needed.

    Unshifted, exp(1000) is inf in float64 and the row is NaN; shifted by the
    largest score of the row, blocked keys included (1e9 here), every allowed
    weight underflows to 0. Only a shift by the largest *allowed* score works.
    """
    scores = torch.tensor(
        [[1000.0, 999.0, 1e9, 0.0], [5e8, 0.0, -1000.0, 2.0], [1.0, 2.0, 3.0, 0.5]],
        dtype=torch.float64,
    )  # (3, 4); the last row is an ordinary one
    mask = torch.tensor(
        [[True, True, False, False], [False, True, True, True], [True, True, False, True]]
    )
    return scores, mask


_FAR_BELOW_HINT = (
    "A finite number is not below every score: here the allowed scores (about -1e5 to -3e5) "
    "lie below -1e4, and the blocked keys score about 3e9, so a blocked key filled with -1e4, "
    "or lowered by a penalty of 1e4 (or even 1e9), still outscores the allowed keys and takes "
    "the softmax's weight. Set the blocked scores to float('-inf'): it is below every score, "
    "at any scale, in float16, bfloat16, float32 and float64 alike."
)


def _half_precision() -> tuple[torch.Tensor, torch.Tensor]:
    """float16 scores (B, T, S) = (2, 3, 4) and a padding mask of lengths 1 and 0.

    Models are often run in float16, where -1e9 does not fit: ``masked_fill``
    refuses it. One allowed key per row (weight exactly 1) and empty rows
    (exactly 0) keep the answer exact in float16, however it is computed.
    """
    return randn(524, 2, 3, 4).to(torch.float16), padding_mask([1, 0], 4)


def _scores_far_below_minus_1e4() -> tuple[torch.Tensor, torch.Tensor]:
    """Allowed scores of about -1e5 .. -3e5, blocked scores of about 3e9: (B, T, S) = (2, 3, 5).

    Only ``-inf`` blocks here. A fill with ``-1e4`` (which fits in float16) sits
    above every allowed score, and a penalty of ``1e4``, or even ``1e9``, leaves
    a blocked key far above them: either way the blocked keys take the weight and
    the allowed ones underflow to 0. Every row has an allowed key; the grader's
    variants (each score times about 1 +- 0.1) keep the signs and the gaps, so
    this stays true, and the right weights stay exact (at worst one-hot).
    """
    mask = combine_masks(causal_mask(3, 5), padding_mask([5, 2], 5))  # (B, T, S)
    offsets = -1e5 * torch.arange(1, 4, dtype=torch.float64)[:, None]  # (T, 1): -1e5, -2e5, -3e5
    allowed = offsets + randn(525, 2, 3, 5)  # (B, T, S)
    return torch.where(mask, allowed, 3e9), mask


# The advice of the case built to catch a plain softmax of -inf scores; that mistake's hint
# holds it, so a verdict that names the mistake gives it once.
_EMPTY_ROW_ZEROS = (
    "A fully masked row has no allowed key: its weights must all be 0 (not NaN, not "
    "uniform), while every other row still sums to 1."
)

_MASKED_SOFTMAX_CASES = [
    Case(
        "4 queries share a mask (1, 5): keys 3 and 4 are padding",
        lambda: (randn(519, 4, 5), torch.tensor([[True, True, True, False, False]])),
        "Set the blocked scores to -inf, then a stable softmax over the keys (the last axis); "
        "True in the mask means 'may attend', and the mask broadcasts over the queries.",
    ),
    Case(
        "a causal mask, every row has an allowed key",
        lambda: (randn(520, 4, 4), causal_mask(4)),
        "Set the blocked scores to -inf, then a stable softmax over the keys (the last axis); "
        "True in the mask means 'may attend'.",
    ),
    Case(
        "one query that may attend to nothing (a fully masked row)",
        _row_blocked,
        _EMPTY_ROW_ZEROS,
    ),
    Case(
        "a padding mask (B, 1, S) with an empty sequence (length 0)",
        _empty_sequence,
        "The mask broadcasts over the queries; every row of the empty sequence is all 0.",
    ),
    Case(
        "scores near 1000, and blocked keys that score far higher (1e9)",
        _large_scores,
        "Keep the softmax stable: shift each row by its largest *allowed* score before "
        "exponentiating. Unshifted, exp(1000) overflows to inf; shifted by a blocked key's "
        "score, every allowed weight underflows to 0.",
    ),
    Case(
        "float16 scores, a padding mask with lengths 1 and 0",
        _half_precision,
        "Models often run in float16, whose largest finite number is 65504: -1e9 does not fit, "
        "so filling it into float16 scores raises (and a conversion quietly gives -inf). Fill with "
        "float('-inf'), which float16 holds (as do bfloat16, float32 and float64), and return "
        "the weights in float16, the scores' dtype.",
    ),
    Case(
        "allowed scores far below -1e4 (about -1e5 to -3e5), blocked keys far above (3e9)",
        _scores_far_below_minus_1e4,
        _FAR_BELOW_HINT,
    ),
]


def _plain(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def _softmax_then_renormalise_weights(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores, dim=-1) * mask
    total = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(total == 0, 1.0, total)  # an empty row: 0 / 1


_MASKED_SOFTMAX_MISTAKES = [
    Mistake(
        "a plain softmax of -inf scores, which is NaN on a fully masked row",
        _plain,
        "A row of only -inf has exp = 0 everywhere and 0 / 0 = NaN. " + _EMPTY_ROW_ZEROS + " "
        "The mask tells which rows those are: compute theirs without a division by a sum of "
        "zeros.",
    ),
    Mistake(
        "filling with a large finite number, which spreads a fully masked row uniformly",
        lambda scores, mask: torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1),
        "With -1e9 (or torch.finfo(dtype).min) a fully masked row has equal scores, so its "
        "weights are uniform over keys it may not see: it attends to padding. Use -inf and "
        "give rows with no allowed key weights 0.",
    ),
    Mistake(
        "a finite fill or penalty (-1e4) instead of -inf, with the blocked weights zeroed after",
        lambda scores, mask: torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1) * mask,
        "-1e4 fits in float16, but it is not below every score: when the allowed scores lie "
        "below it, or the blocked keys score higher than the allowed ones by more than the "
        "penalty, the blocked keys take the softmax's weight, the allowed weights underflow to "
        "0, and zeroing the blocked ones leaves a row of zeros. Fill with float('-inf') before "
        "the softmax, and give only the rows with no allowed key weights 0.",
    ),
    Mistake(
        "a softmax over all keys, blocked ones included, then zeroing the blocked weights and "
        "renormalising",
        _softmax_then_renormalise_weights,
        "Equal on paper, but when a blocked key scores far higher, a softmax over all keys (or "
        "a shift by the row's largest score, blocked keys included) gives every allowed key a "
        "weight that underflows to 0, and renormalising leaves a row of zeros (or 0 / 0 = NaN). "
        "Set the blocked scores to -inf first, then shift by the largest *allowed* score and "
        "take the softmax.",
    ),
    Mistake(
        "computing in float32 (scores.float()) and converting back",
        lambda scores, mask: masked_softmax(scores.float(), mask).to(scores.dtype),
        "scores.float() rounds float64 scores to float32, which keeps about 7 significant "
        "digits: a score of -1e5 to -3e5 moves by up to 0.004 to 0.016, and its weight with it. "
        "Compute in the scores' own dtype; to guard float16, widen only the dtypes narrower "
        "than float32 (torch.promote_types tells which), and leave float64 as it is.",
    ),
    Mistake(
        "an inverted mask (blocking where the mask is True)",
        lambda scores, mask: masked_softmax(scores, ~mask),
        "True means 'may attend': block (set to -inf) where the mask is False.",
    ),
    Mistake(
        "zeroing the blocked weights after the softmax, without renormalising",
        lambda scores, mask: torch.softmax(scores, dim=-1) * mask,
        "The allowed weights must sum to 1: mask the scores with -inf before the softmax.",
    ),
]


def _in_dtype_of(scores: torch.Tensor, weights: object) -> object:
    """``weights``, refused when they are a tensor of another floating-point dtype than
    ``scores``: right numbers, but a float16 model's ``weights @ value`` raises on them."""
    if (
        isinstance(weights, torch.Tensor)
        and weights.is_floating_point()
        and weights.dtype != scores.dtype
    ):
        got, want = (str(t.dtype).removeprefix("torch.") for t in (weights, scores))
        raise RefusedResult(
            f"returned {got} weights for {want} scores: return them in the scores' dtype, "
            f"as a {want} model multiplies them by {want} values and torch refuses to multiply "
            "two dtypes. Make zeros with torch.zeros_like(scores) or 0.0 (torch.zeros(shape) "
            "is float32), and convert back with .to(scores.dtype) after computing in another "
            "precision"
        )
    return weights


def _forward_or_gradient(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """``fn``'s weights, or, given an upstream gradient, its gradient with respect to the scores.

    The cases of ``check_masked_softmax`` are ``(scores, mask, upstream)``:
    ``upstream`` is ``None`` for a forward case, and for the backward case the
    gradient of ``(weights * upstream).sum()`` is compared.
    """

    def run(scores: torch.Tensor, mask: torch.Tensor, upstream: torch.Tensor | None) -> object:
        if upstream is None:
            return _in_dtype_of(scores, fn(scores, mask))
        traced = differentiable(
            "masked_softmax",
            fn,
            {"scores": 0},
            noun="weights",
            why="the model's loss.backward() goes through the weights to the scores",
            keep_graph=True,
        )(scores, mask)
        if traced is None:
            return None
        weights, (scores,) = traced
        if not isinstance(weights, torch.Tensor) or not weights.requires_grad:
            return torch.zeros_like(scores)  # weights that do not read the scores at all
        (grad,) = torch.autograd.grad((weights * upstream).sum(), scores, allow_unused=True)
        return torch.zeros_like(scores) if grad is None else grad

    return run


def _gradient_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The scores and mask of a fully masked row, and a random upstream gradient."""
    scores, mask = _row_blocked()
    return scores, mask, randn(523, 2, 3, 5)


# The advice of the backward case; the hint of the additive mask repaired by nan_to_num, which
# is matched there on NaN alone, holds it, so a verdict that names that mistake gives it once.
_FINITE_GRADIENT = (
    "A fully masked row does not depend on its scores: its gradient must be 0, not NaN. "
    "Build the weights from operations whose backward pass is finite there (masked_fill, "
    "torch.where), not from a NaN that is replaced afterwards, and edit no result in place "
    "(w[...] = 0, w.masked_fill_): softmax's backward pass reads its own output."
)


def _additive_then_nan_to_num(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    additive = torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + additive, dim=-1).nan_to_num(0.0)


_ALL_MASKED_SOFTMAX_CASES = [
    *(
        Case(case.name, lambda case=case: (*case.make_args(), None), case.hint)
        for case in _MASKED_SOFTMAX_CASES
    ),
    Case(
        "the gradient with respect to the scores, with a fully masked row",
        _gradient_case,
        _FINITE_GRADIENT,
    ),
]

_ALL_MASKED_SOFTMAX_MISTAKES = [
    Mistake(
        "an additive -inf mask, then nan_to_num: right weights, NaN gradient",
        _forward_or_gradient(_additive_then_nan_to_num),
        "scores + mask, with -inf in the mask, gives a row of -inf whose softmax is NaN; "
        "nan_to_num repairs the values but not the backward pass, which multiplies by those "
        "NaNs: fill the blocked scores with -inf instead of adding it. " + _FINITE_GRADIENT,
    ),
    *(
        Mistake(mistake.name, _forward_or_gradient(mistake.answer), mistake.hint)
        for mistake in _MASKED_SOFTMAX_MISTAKES
    ),
]


def check_masked_softmax(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Verdict:
    """Check ``fn(scores, mask) -> weights``: a softmax over the allowed keys, 0 where none is.

    ``scores`` is float64 ``(..., T, S)`` (float16 in one case, where ``-1e9``
    cannot be filled in; in another the allowed scores lie far below ``-1e4``
    and the blocked ones far above them, so no finite fill or penalty of that
    size blocks), ``mask`` boolean (``True`` = may attend) broadcastable to it.
    Every row with an allowed key sums to 1 with exact zeros on blocked keys;
    a fully masked row must be all zeros, not NaN and not uniform (the
    rule of :func:`attnbook.masked_softmax`), in the scores' dtype (float32 weights for
    float16 scores fail: a float16 model's ``weights @ value`` would raise). The last case
    runs the backward
    pass: the gradient with respect to the scores must match the package's, 0
    in a fully masked row and never NaN. An answer that calls
    ``attnbook.masked_softmax`` fails.
    """
    if not callable(fn):  # checked here, before it is wrapped
        return run_cases("masked_softmax", fn, masked_softmax, _MASKED_SOFTMAX_CASES)
    return run_cases(
        "masked_softmax",
        _forward_or_gradient(fn),
        _forward_or_gradient(masked_softmax),
        _ALL_MASKED_SOFTMAX_CASES,
        mistakes=_ALL_MASKED_SOFTMAX_MISTAKES,
        guard=forbid_calls(
            {
                "attnbook.masked_softmax": masked_softmax,
                "attnbook.scaled_dot_product_attention": scaled_dot_product_attention,
            },
            "set the blocked scores to -inf, shift each row by its largest allowed score (0 in "
            "an empty row), exponentiate, and divide by the row's sum (1 where it is 0).",
        ),
    )
