"""Checkers for the exercises of chapter 11 (a language model on real text).

Two exercises, each with the typical wrong answers it recognises and names:

- ``check_rms_norm``: RMSNorm, Llama's normalisation (:class:`attnbook.RMSNorm`):
  ``x / sqrt(mean(x**2) + eps) * weight`` over the last axis (the mean
  subtracted as in LayerNorm, eps outside the square root, the standard
  deviation instead of the root mean square, the gain forgotten, the wrong
  axis, ...);
- ``check_bpe_merge``: one merge of byte-pair encoding, every occurrence of a
  pair of ids replaced by a new id, left to right, never overlapping (only the
  first occurrence, overlapping occurrences, the pair in the wrong order, ...);
  the reference is the tokenizer's own :func:`attnbook.tokenizer.merge_pair`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    differentiable,
    randint,
    run_cases,
)
from attnbook.tokenizer import merge_pair

__all__ = ["check_bpe_merge", "check_rms_norm"]


# ------------------------------------------------------------------ RMSNorm


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The reference, as :class:`attnbook.RMSNorm`: divide by the root mean square, scale."""
    rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1)
    return x / rms * weight  # (..., D)


def _mean_subtracted(x, weight, eps):
    """LayerNorm without its bias: the mean is subtracted first."""
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _eps_outside(x, weight, eps):
    return x / (torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) + eps) * weight


def _no_eps(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) * weight


def _unbiased_std(x, weight, eps):
    """The standard deviation (mean subtracted, divided by D - 1), not the root mean square."""
    return x / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight


def _population_std(x, weight, eps):
    """The standard deviation divided by D (``x.var(unbiased=False)``), the mean subtracted."""
    return x / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps) * weight


def _no_weight(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def _first_axis(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=0, keepdim=True) + eps) * weight


def _no_square_root(x, weight, eps):
    return x / (x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def _sum_not_mean(x, weight, eps):
    return x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * weight


def _norm_args(seed: int, shape: tuple[int, ...], scale: float, eps: float) -> tuple:
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(*shape, generator=g, dtype=torch.float64) + 0.5 * scale
    weight = 1.0 + 0.5 * torch.randn(shape[-1], generator=g, dtype=torch.float64)
    return x, weight, eps


_NORM_CASES = [
    Case(
        "x of shape (2, 3, 8), a gain of shape (8,), eps = 1e-5",
        lambda: _norm_args(2000, (2, 3, 8), 1.0, 1e-5),
        "RMSNorm divides each vector along the last axis by its root mean square, which "
        "the exercise's statement defines, then applies the gain, as the table of chapter "
        "11's section 'Two blocks: GPT-2's and Llama's' says: nothing is subtracted and "
        "nothing added. Check your output divided by weight: each vector's mean square "
        "must come out just under 1 (eps keeps it below).",
    ),
    Case(
        "tiny vectors (entries near 1e-3), eps = 4e-6: eps matters",
        lambda: _norm_args(2010, (4, 6), 1e-3, 4e-6),
        "Use the eps argument (here 4e-6, not a constant of your own): inside the square "
        "root, added to the mean of the squares.",
    ),
    Case(
        "one vector of width 5, eps = 1e-6",
        lambda: _norm_args(2020, (5,), 3.0, 1e-6),
        "A 1-D x is one vector: normalise along its only axis, which is also the last.",
    ),
]

_NORM_MISTAKES = [
    Mistake(
        "LayerNorm: the mean subtracted before dividing",
        _mean_subtracted,
        "RMSNorm does not centre: it divides x itself by its root mean square (with eps), so "
        "a constant shift of x is not removed.",
    ),
    Mistake(
        "eps added after the square root",
        _eps_outside,
        "Add eps to the mean of the squares first, then take the square root of the result.",
    ),
    Mistake(
        "eps left out",
        _no_eps,
        "The exercise passes eps for a reason: it keeps the division finite when a vector is "
        "all zeros, and it changes the result measurably for small vectors. Add it to the mean "
        "of the squares, inside the square root.",
    ),
    Mistake(
        "the (unbiased) standard deviation instead of the root mean square",
        _unbiased_std,
        "x.std() and x.var() subtract the mean and divide by D - 1; RMSNorm needs the mean "
        "of the squares over the D entries, no mean subtracted.",
    ),
    Mistake(
        "the standard deviation (divided by D) instead of the root mean square",
        _population_std,
        "x.var(unbiased=False) and x.std(correction=0) divide by D but still subtract the "
        "mean; RMSNorm needs the mean of the squares of x itself, no mean subtracted.",
    ),
    Mistake(
        "the gain forgotten",
        _no_weight,
        "Multiply the normalised vector by weight, the learned gain of each of the D entries.",
    ),
    Mistake(
        "the statistics over the first axis instead of the last",
        _first_axis,
        "Each token's vector is normalised on its own: reduce over the last axis, and keep "
        "that axis so that the statistic broadcasts against x.",
    ),
    Mistake(
        "the mean square without its square root",
        _no_square_root,
        "Divide by the root of the mean square, torch.sqrt(...) (or multiply by torch.rsqrt).",
    ),
    Mistake(
        "the sum of squares instead of their mean",
        _sum_not_mean,
        "Take the mean over the D entries, so that the result does not shrink as D grows.",
    ),
]


def check_rms_norm(fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]) -> Verdict:
    """Check ``fn(x, weight, eps) -> y``: RMSNorm over the last axis, as Llama's blocks use it.

    ``y`` is RMSNorm as the exercise states it (chapter 11's section on GPT-2's and
    Llama's blocks), with ``eps`` and the gain ``weight``. Shapes: ``x``
    ``(..., D)``, ``weight`` ``(D,)``, ``y`` like ``x``. Library normalisations
    (``F.rms_norm``, ``nn.RMSNorm``, ``attnbook.RMSNorm``, LayerNorm) are refused. The model
    trains through it, so ``y`` must be differentiable with respect to ``x`` and ``weight``
    (:func:`~attnbook.exercises._framework.differentiable`): the right numbers cut from
    autograd (``.detach()``, NumPy, ``torch.no_grad()``) fail.
    """
    learner = differentiable(
        "rms_norm",
        fn,
        {"x": 0, "weight": 1},
        why="the language model of this chapter trains through it, and loss.backward() must "
        "reach both the input and the gain",
    )
    return run_cases(
        "rms_norm", learner, _rms_norm, _NORM_CASES, mistakes=_NORM_MISTAKES, rtol=1e-6
    )


# ------------------------------------------------------------------ one BPE merge


def _first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return [*ids[:i], new_id, *ids[i + 2 :]]
    return list(ids)


def _overlapping(ids, pair, new_id):
    """Every position where the pair starts gets the new id, overlaps included (a a a -> X X)."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            if i + 2 < len(ids) and (ids[i + 1], ids[i + 2]) == tuple(pair):
                i += 1  # the second id is reused by the next match
            else:
                i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _reversed_pair(ids, pair, new_id):
    return merge_pair(ids, (pair[1], pair[0]), new_id)


def _right_to_left(ids, pair, new_id):
    return merge_pair(list(ids)[::-1], (pair[1], pair[0]), new_id)[::-1]


def _kept_second(ids, pair, new_id):
    """The new id inserted, but the pair's second id kept."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 1
        else:
            out.append(ids[i])
            i += 1
    return out


def _last_id_dropped(ids, pair, new_id):
    """The walk stops one id early (``while i < len(ids) - 1``): a last id that no match
    used is lost."""
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _back_to_back_missed(ids, pair, new_id):
    """After a match the next id is copied without a look, so the second of two occurrences back
    to back stays unmerged: what replacing " left right " (spaces around, so that no id's digits
    run into another's) in the ids written as text gives, since a match uses up the space that the
    next one starts with."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            out.extend(ids[i + 2 : i + 3])  # the next id, never the start of a match
            i += 3
        else:
            out.append(ids[i])
            i += 1
    return out


def _relabelled(ids: list[int], pair: tuple[int, int], rng) -> tuple:
    """The grader's variant of a merge case: every id renamed to another byte, one for one (the
    same occurrences, overlaps and orders), and a new id drawn above the bytes."""
    alphabet = sorted(set(ids) | set(pair))
    rename = dict(zip(alphabet, rng.choice(256, size=len(alphabet), replace=False).tolist()))
    return [rename[i] for i in ids], (rename[pair[0]], rename[pair[1]]), randint(rng, 256, 999)


def _digits_run_together(rng) -> tuple:
    """Case 4 redrawn: two digits a != b, ids [aa, b, a, ba, b, a, b] and the pair (a, b), where
    joining the ids' digits puts "ab" inside "aab" and "aba"."""
    a, b = rng.choice(range(1, 10), size=2, replace=False).tolist()
    return [11 * a, b, a, 10 * b + a, b, a, b], (a, b), randint(rng, 100, 999)


_MERGE_CASES = [
    Case(
        "the pair (104, 101) ('h', 'e') in 'the hehe there', new id 256",
        lambda: (list(b"the hehe there"), (104, 101), 256),
        "Walk left to right; where ids[i], ids[i + 1] is the pair, write new_id and skip both.",
        draw=lambda rng: _relabelled(list(b"the hehe there"), (104, 101), rng),
    ),
    Case(
        "overlapping occurrences: (97, 97) in 'aaaaa', new id 300",
        lambda: (list(b"aaaaa"), (97, 97), 300),
        "Occurrences do not overlap: in a a a a a the pair (a, a) is merged twice, leaving "
        "[300, 300, 97]; an id used by a match is not reused by the next.",
        # an odd run of 5 or more, as "aaaaa": from the right, the merges would leave the first
        # id alone, and with 3 the first occurrence is the only one
        draw=lambda rng: _relabelled([97] * (2 * randint(rng, 2, 4) + 1), (97, 97), rng),
    ),
    Case(
        "the pair in one order only: (98, 97) in 'abab ba', new id 400",
        lambda: (list(b"abab ba"), (98, 97), 400),
        "A pair is ordered: (b, a) matches b followed by a, not a followed by b.",
        draw=lambda rng: _relabelled(list(b"abab ba"), (98, 97), rng),
    ),
    Case(
        "ids whose digits run together: (1, 2) in [11, 2, 1, 21, 2, 1, 2], new id 300",
        lambda: ([11, 2, 1, 21, 2, 1, 2], (1, 2), 300),
        "Compare whole ids, not their digits: 11 followed by 2 is not the pair (1, 2), and "
        "neither is 21 after 1.",
        draw=_digits_run_together,
    ),
    Case(
        "no occurrence, and a list of one id",
        lambda: ([5], (5, 5), 500),
        "When the pair does not occur, the ids come back unchanged.",
        draw=lambda rng: _relabelled([5], (5, 5), rng),
    ),
]

_MERGE_MISTAKES = [
    Mistake(
        "the last id dropped: the walk stops one id early",
        _last_id_dropped,
        "Your result loses the last id when no match uses it: it must still be copied. "
        "Check [1, 2, 3] with the pair (1, 2): [new_id, 3].",
    ),
    Mistake(
        "no occurrence found: the ids came back as they were",
        lambda ids, pair, new_id: list(ids),
        "Compare like with like: in Python a list never equals a tuple, [1, 2] == (1, 2) "
        "is False, so a slice of ids compared with the pair never matches.",
    ),
    Mistake(
        "only the first occurrence merged",
        _first_only,
        "A merge replaces every occurrence of the pair, not just the first: keep walking "
        "after a match.",
    ),
    Mistake(
        "overlapping occurrences both merged",
        _overlapping,
        "An id used by a match is not reused by the next: in a a a the pair (a, a) occurs "
        "once, not twice, and [a, a, a] becomes [new_id, a].",
    ),
    Mistake(
        "the pair matched in the wrong order",
        _reversed_pair,
        "pair = (left, right) is ordered: left must come first and right directly after "
        "it. Check [1, 2] with the pair (2, 1): nothing merges.",
    ),
    Mistake(
        "the second of two occurrences back to back missed",
        _back_to_back_missed,
        "After a match, the very next id may start the next one: in h e h e the pair (h, e) "
        "occurs twice. A replace of the ids written as text, with spaces around the pair, "
        "misses the second, because the first match used up the space between them.",
    ),
    Mistake(
        "occurrences taken right to left",
        _right_to_left,
        "Walk from the left, as the tokenizer does: in a a a the first two a's merge.",
    ),
    Mistake(
        "the pair's second id kept after the new id",
        _kept_second,
        "The new id replaces both ids of the pair: after a match, move past both. Check "
        "[1, 2] with the pair (1, 2): [new_id], one id.",
    ),
]


def _as_list(fn: Callable) -> Callable:
    """Call ``fn`` and hand its result to the comparison as a list of ints (or as it is)."""

    def merged(ids, pair, new_id):
        result = fn(ids, pair, new_id)
        if isinstance(result, (list, tuple)) and all(isinstance(i, int) for i in result):
            return torch.tensor(list(result), dtype=torch.int64)
        return result

    return merged


def check_bpe_merge(fn: Callable[[list[int], tuple[int, int], int], list[int]]) -> Verdict:
    """Check ``fn(ids, pair, new_id) -> ids``: one merge step of byte-pair encoding.

    ``ids`` is a list of ints, ``pair`` a tuple ``(left, right)``; the result is
    a new list in which every occurrence of ``left`` directly followed by
    ``right`` is replaced by ``new_id``, scanning from the left, occurrences
    never overlapping (``[a, a, a]`` with pair ``(a, a)`` gives ``[new_id, a]``).
    This is the step that :meth:`attnbook.BPETokenizer.train` repeats for each
    merge it learns and that encoding replays.
    """
    if not callable(fn):
        return run_cases("bpe_merge", fn, _as_list(merge_pair), _MERGE_CASES)
    return run_cases(
        "bpe_merge", _as_list(fn), _as_list(merge_pair), _MERGE_CASES, mistakes=_MERGE_MISTAKES
    )
