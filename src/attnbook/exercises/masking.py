"""Checkers for the exercises of chapter 6 (masking).

Masks follow the package's convention: boolean, ``True`` = may attend. The
learner's functions take and return torch tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbook.attention import scaled_dot_product_attention
from attnbook.exercises._framework import Case, Verdict, run_cases
from attnbook.masking import causal_mask, combine_masks, padding_mask

__all__ = ["check_causal_mask", "check_masked_attention"]


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


_CAUSAL_CASES = [
    Case(
        "seq_len = 4",
        lambda: (4,),
        "Query t may attend to keys 0..t: True on and below the diagonal, and the result must "
        "be boolean (dtype torch.bool).",
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
    ),
]


def check_causal_mask(fn: Callable[[int], torch.Tensor]) -> Verdict:
    """Check ``fn(seq_len) -> mask``: a ``(T, T)`` boolean tensor, ``True`` on and below the diagonal."""
    return run_cases("causal_mask", fn, causal_mask, _CAUSAL_CASES)


def _scores_favour_the_future() -> tuple[torch.Tensor, ...]:
    """Later keys match every query best, so a leak from the future is obvious."""
    query = torch.ones(4, 2, dtype=torch.float64)  # (T, d_k)
    key = torch.arange(4, dtype=torch.float64)[:, None].repeat(1, 2)  # (S, d_k), growing with s
    value = _randn(501, 4, 3)  # (S, d_v)
    return query, key, value, causal_mask(4)


_MASKED_CASES = [
    Case(
        "causal mask, T = S = 4",
        lambda: (_randn(502, 4, 3), _randn(503, 4, 3), _randn(504, 4, 2), causal_mask(4)),
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
            _randn(505, 2, 3, 4),
            _randn(506, 2, 5, 4),
            _randn(507, 2, 5, 3),
            padding_mask([5, 2], 5),
        ),
        "The mask broadcasts against the (B, T, S) scores: use it as it is, without indexing "
        "one row, and keep the 1/sqrt(d_k) scale.",
    ),
    Case(
        "causal and padding masks combined, shape (B, T, T)",
        lambda: (
            _randn(508, 2, 4, 3),
            _randn(509, 2, 4, 3),
            _randn(510, 2, 4, 2),
            combine_masks(causal_mask(4), padding_mask([4, 3], 4)),
        ),
        "Every False entry is blocked, whatever the reason; every row here has at least one key.",
    ),
]


def check_masked_attention(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> Verdict:
    """Check ``fn(query, key, value, mask) -> output``: scaled dot-product attention with a mask.

    ``mask`` is boolean, ``True`` = may attend, broadcastable to the scores
    ``(..., T, S)``; every query in the hidden cases may attend to at least one key.
    Output shape ``(..., T, d_v)``.
    """
    return run_cases(
        "masked_attention",
        fn,
        lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m)[0],
        _MASKED_CASES,
    )
