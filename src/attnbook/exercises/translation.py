"""Checkers for the exercises of chapter 12 (translation with an encoder-decoder).

Two exercises, each with the typical wrong answers it recognises and names:

- ``check_additive_step``: the attention weights of one step of a Bahdanau
  decoder, ``softmax_s(v . tanh(state W_q + memory[s] W_k))`` over the real
  source words (no mask, no tanh, the softmax over the wrong axis, padding
  scored 0 instead of excluded, the two matrices swapped);
- ``check_beam_step``: one step of beam search: extend each of the ``K``
  partial translations by every word and keep the best ``K`` of all ``K V``
  (the best ``K`` words of each beam, the previous scores forgotten,
  probabilities multiplied as numbers, the best of the first beam only, the
  beam and the word returned in each other's place).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from attnbook.exercises._framework import Case, Mistake, Verdict, differentiable, run_cases

__all__ = ["check_additive_step", "check_beam_step"]


# ------------------------------------------------------------------ one additive attention step


def _additive_step(state, memory, src_mask, W_q, W_k, v):
    """Weights ``(B, S)``: the masked softmax of ``v . tanh(state W_q + memory W_k)``."""
    hidden = torch.tanh((state @ W_q)[:, None, :] + memory @ W_k)  # (B, S, d_a)
    scores = hidden @ v  # (B, S)
    return torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)  # (B, S)


def _no_mask(state, memory, src_mask, W_q, W_k, v):
    return torch.softmax(torch.tanh((state @ W_q)[:, None, :] + memory @ W_k) @ v, dim=-1)


def _inverted_mask(state, memory, src_mask, W_q, W_k, v):
    scores = torch.tanh((state @ W_q)[:, None, :] + memory @ W_k) @ v
    return torch.softmax(scores.masked_fill(src_mask, float("-inf")), dim=-1)


def _no_tanh(state, memory, src_mask, W_q, W_k, v):
    scores = ((state @ W_q)[:, None, :] + memory @ W_k) @ v
    return torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)


def _zero_scores(state, memory, src_mask, W_q, W_k, v):
    scores = torch.tanh((state @ W_q)[:, None, :] + memory @ W_k) @ v
    return torch.softmax(scores.masked_fill(~src_mask, 0.0), dim=-1)


def _batch_softmax(state, memory, src_mask, W_q, W_k, v):
    scores = torch.tanh((state @ W_q)[:, None, :] + memory @ W_k) @ v
    return torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=0).nan_to_num()


def _swapped(state, memory, src_mask, W_q, W_k, v):
    return _additive_step(state, memory, src_mask, W_k, W_q, v)


def _additive_args(seed: int, batch: int, lengths: list[int], width: int, d_attn: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    S = max(lengths)
    state = torch.randn(batch, width, generator=g, dtype=torch.float64)
    memory = torch.randn(batch, S, width, generator=g, dtype=torch.float64)
    src_mask = torch.arange(S)[None] < torch.tensor(lengths)[:, None]  # (B, S)
    W_q = torch.randn(width, d_attn, generator=g, dtype=torch.float64)
    W_k = torch.randn(width, d_attn, generator=g, dtype=torch.float64)
    v = torch.randn(d_attn, generator=g, dtype=torch.float64)
    return state, memory, src_mask, W_q, W_k, v


_ADDITIVE_CASES = [
    Case(
        "B = 2 sentences of 5 source words, no padding, width 4, d_a = 3",
        lambda: _additive_args(1200, 2, [5, 5], 4, 3),
        "Project the state with W_q and every source state with W_k, add them (broadcasting "
        "the state over the S positions), tanh, a dot product with v, softmax over S.",
    ),
    Case(
        "three sentences of 6, 2 and 4 words, padded to 6",
        lambda: _additive_args(1210, 3, [6, 2, 4], 5, 4),
        "Padded source positions must get weight exactly 0: set their scores to -inf "
        "before the softmax, so the real words share all the weight.",
    ),
    Case(
        "a single sentence of one word",
        lambda: _additive_args(1220, 1, [1], 3, 2),
        "With one real word, all the weight goes to it.",
    ),
]

_ADDITIVE_MISTAKES = [
    Mistake(
        "no padding mask",
        _no_mask,
        "Padding is not a word: give padded positions (src_mask False) score -inf, so that "
        "their weight is exactly 0.",
    ),
    Mistake(
        "padding given score 0 instead of -inf",
        _zero_scores,
        "A score of 0 is an ordinary score: exp(0) = 1 still takes weight. Use -inf.",
    ),
    Mistake(
        "an inverted mask (the real words blocked, the padding kept)",
        _inverted_mask,
        "src_mask is True at the real source words, the ones to keep: block where it is "
        "False. Blocking every position of an unpadded sentence leaves a softmax "
        "of nothing but -inf, which is NaN.",
    ),
    Mistake(
        "the score without tanh",
        _no_tanh,
        "The additive score is v . tanh(state W_q + memory W_k): the tanh is what makes it a "
        "small neural network rather than a linear map.",
    ),
    Mistake(
        "a softmax over the batch instead of over the source positions",
        _batch_softmax,
        "Each sentence's weights are a distribution over its own S source positions: "
        "softmax over the last axis.",
    ),
    Mistake(
        "W_q applied to the source states and W_k to the decoder state",
        _swapped,
        "The query is the decoder's state, projected with W_q; the keys are the source "
        "states, projected with W_k.",
    ),
]


def check_additive_step(fn: Callable) -> Verdict:
    """Check ``fn(state, memory, src_mask, W_q, W_k, v) -> weights``: one Bahdanau step.

    Shapes: ``state`` ``(B, Hd)`` (the decoder's previous state, the query),
    ``memory`` ``(B, S, Hd)`` (the encoder's states, the keys and values),
    ``src_mask`` ``(B, S)`` bool (``True`` at real words), ``W_q`` and ``W_k``
    ``(Hd, d_a)``, ``v`` ``(d_a,)``. Returns ``(B, S)``: for each sentence the
    softmax over its real source words of ``v . tanh(state W_q + memory[s] W_k)``,
    exactly 0 at padding. The translation model of chapter 12 learns ``W_q``, ``W_k`` and
    ``v`` through these weights, and its encoder and decoder through ``memory`` and
    ``state``, so the weights must be differentiable with respect to all five
    (:func:`~attnbook.exercises._framework.differentiable`).
    """
    learner = differentiable(
        "additive_step",
        fn,
        {"state": 0, "memory": 1, "W_q": 3, "W_k": 4, "v": 5},
        noun="weights",
        why="the translation model learns W_q, W_k and v through these weights, and its "
        "encoder and decoder through memory and state",
    )
    return run_cases(
        "additive_step", learner, _additive_step, _ADDITIVE_CASES, mistakes=_ADDITIVE_MISTAKES
    )


# ------------------------------------------------------------------ one beam-search step


class BeamStep(NamedTuple):
    """One beam-search step's result, each ``(B, K)``: compared part by part, by name."""

    scores: torch.Tensor
    parents: torch.Tensor
    tokens: torch.Tensor


def _as_step(result: object) -> object:
    """Three values (a tuple or a list) as a :class:`BeamStep`; anything else as it is."""
    if isinstance(result, tuple | list) and len(result) == 3:
        return BeamStep(*result)
    return result  # the framework says what is wrong with it


def _stepwise(fn: Callable) -> Callable:
    def run(scores, log_probs):
        return _as_step(fn(scores, log_probs))

    return run


def _beam_step(scores, log_probs):
    """Best ``K`` of all ``K V`` extensions: ``(new scores, parent beams, tokens)``, each ``(B, K)``."""
    B, K, V = log_probs.shape
    total = (scores[:, :, None] + log_probs).reshape(B, K * V)  # (B, K V)
    new_scores, pick = total.topk(K, dim=-1)  # (B, K), best first
    return new_scores, pick // V, pick % V


def _per_beam(scores, log_probs):
    """Each beam keeps its own best word: K extensions, never two from one beam."""
    best, tokens = log_probs.max(-1)  # (B, K)
    new = scores + best
    order = new.argsort(dim=-1, descending=True)
    return new.gather(1, order), order, tokens.gather(1, order)


def _forget_history(scores, log_probs):
    B, K, V = log_probs.shape
    new_scores, pick = log_probs.reshape(B, K * V).topk(K, dim=-1)
    return new_scores, pick // V, pick % V


def _multiply_probs(scores, log_probs):
    B, K, V = log_probs.shape
    total = (scores[:, :, None].exp() * log_probs.exp()).reshape(B, K * V)
    new_scores, pick = total.topk(K, dim=-1)
    return new_scores, pick // V, pick % V


def _first_beam_only(scores, log_probs):
    new_scores, tokens = (
        (scores[:, :1, None] + log_probs[:, :1]).squeeze(1).topk(scores.shape[1], dim=-1)
    )
    return new_scores, torch.zeros_like(tokens), tokens


def _unsorted(scores, log_probs):
    """The right K extensions in the order ``topk(sorted=False)`` leaves them (not best first)."""
    B, K, V = log_probs.shape
    total = (scores[:, :, None] + log_probs).reshape(B, K * V)  # (B, K V)
    new_scores, pick = total.topk(K, dim=-1, sorted=False)  # (B, K), in no promised order
    return new_scores, pick // V, pick % V


def _flat_parent(scores, log_probs):
    """The position among the K V sums returned as the beam, unsplit."""
    B, K, V = log_probs.shape
    new_scores, pick = (scores[:, :, None] + log_probs).reshape(B, K * V).topk(K, dim=-1)
    return new_scores, pick, pick % V


def _split_by_beams(scores, log_probs):
    """The position among the K V sums split by the number of beams instead of words."""
    B, K, V = log_probs.shape
    new_scores, pick = (scores[:, :, None] + log_probs).reshape(B, K * V).topk(K, dim=-1)
    return new_scores, pick // K, pick % K


def _words_and_beams_swapped(scores, log_probs):
    """The right K extensions, with the word returned where the beam is asked and back."""
    new_scores, parents, tokens = _beam_step(scores, log_probs)
    return new_scores, tokens, parents


def _beam_args(seed: int, B: int, K: int, V: int, spread: float) -> tuple:
    g = torch.Generator().manual_seed(seed)
    scores = -spread * torch.rand(B, K, generator=g, dtype=torch.float64).sort(-1, True).values
    scores = scores.sort(-1, descending=True).values  # best first, as beam search keeps them
    log_probs = torch.log_softmax(2 * torch.randn(B, K, V, generator=g, dtype=torch.float64), -1)
    return scores, log_probs


_BEAM_CASES = [
    Case(
        "B = 1 sentence, K = 2 beams, V = 5 words, close scores",
        lambda: _beam_args(1300, 1, 2, 5, 0.5),
        "Add each beam's score to the log-probability of every word, then take the K best "
        "of all K * V sums. Each of those sums belongs to one beam and one word: recover "
        "both from its position among the K * V, and check them on a case small enough to "
        "read.",
    ),
    Case(
        "B = 3 sentences, K = 3 beams, V = 7 words, one beam far ahead",
        lambda: _beam_args(1310, 3, 3, 7, 6.0),
        "Two of the K survivors may extend the same beam: do not keep one word per beam.",
    ),
    Case(
        "B = 2 sentences, K = 4 beams, V = 6 words",
        lambda: _beam_args(1320, 2, 4, 6, 2.0),
        "Return the new scores best first, with the beam and the word each one extends.",
    ),
]

_BEAM_MISTAKES = [
    Mistake(
        "the best word of each beam, one survivor per beam",
        _stepwise(_per_beam),
        "The K survivors are the best of all K * V extensions: a strong beam may have two "
        "children and a weak one none. Choose among all K * V extensions of a sentence at "
        "once, not among each beam's V words.",
    ),
    Mistake(
        "the new word's log-probability without the beam's score",
        _stepwise(_forget_history),
        "A partial translation is scored by the sum of the log-probabilities of all its "
        "words: add each beam's score to the log-probabilities of its next words before "
        "choosing.",
    ),
    Mistake(
        "probabilities multiplied instead of log-probabilities added",
        _stepwise(_multiply_probs),
        "Scores are log-probabilities: add them (multiplying probabilities underflows on long "
        "sentences, and the returned scores must stay logs).",
    ),
    Mistake(
        "only the first beam extended",
        _stepwise(_first_beam_only),
        "Every beam is extended by every word, not only the best one.",
    ),
    Mistake(
        "the position among all K * V extensions returned as the beam",
        _stepwise(_flat_parent),
        "Your parents reach K * V - 1, but a beam is a number in [0, K). The position of a "
        "sum among the K * V holds the beam and the word together, V words per beam: recover "
        "the beam from it as you recovered the word.",
    ),
    Mistake(
        "the position among the K * V split by K, the number of beams, instead of by V",
        _stepwise(_split_by_beams),
        "The K * V sums lie beam after beam, V words each: the width of one beam's block is "
        "the number of words, V, and that is what splits a position into its beam and its "
        "word. Check on a case with K = 2 and V = 5.",
    ),
    Mistake(
        "the beam and the word swapped: the words returned as the parents",
        _stepwise(_words_and_beams_swapped),
        "Return (new scores, parent beams, words) in that order: your second tensor holds "
        "the words each survivor adds and your third the beams they extend.",
    ),
    Mistake(
        "the right K extensions, not in order best first (topk with sorted=False)",
        _stepwise(_unsorted),
        "Return the survivors best first: topk sorts them unless told sorted=False; the "
        "parents and words must follow the same order.",
    ),
]


def check_beam_step(fn: Callable) -> Verdict:
    """Check ``fn(scores, log_probs) -> (new_scores, parents, tokens)``: one beam-search step.

    Shapes: ``scores`` ``(B, K)``, the summed log-probabilities of the ``K``
    partial translations of each sentence (best first); ``log_probs``
    ``(B, K, V)``, the model's log-probabilities of the next word after each.
    Returns three ``(B, K)`` tensors, best first: the scores of the ``K`` best
    of the ``K V`` one-word extensions, the beam each extends (in ``[0, K)``)
    and the word it adds (in ``[0, V)``).
    """
    if not callable(fn):
        return run_cases("beam_step", fn, _stepwise(_beam_step), _BEAM_CASES)
    return run_cases(
        "beam_step", _stepwise(fn), _stepwise(_beam_step), _BEAM_CASES, mistakes=_BEAM_MISTAKES
    )
