"""Checkers for the exercises of chapter 13 (looking inside attention).

Two exercises, each with the typical wrong answers it recognises and names:

- ``check_head_entropy``: the mean row entropy of each head, in nats (a base-2
  logarithm, ``0 ln 0`` left as NaN, the minus sign forgotten, a sum over the
  queries instead of a mean, the entropy of the averaged row, ...);
- ``check_attention_rollout``: attention rollout through every layer (the
  layers multiplied in the wrong order, the residual identity left out, the
  last layer alone, the heads' maximum instead of their mean, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnbook.exercises._framework import Case, Mistake, Verdict, run_cases
from attnbook.interpret import attention_rollout, head_entropy

__all__ = ["check_attention_rollout", "check_head_entropy"]


def _random_weights(seed: int, shape: tuple[int, ...], *, causal: bool = False, sharp: float = 2.0):
    """Softmax weights of the given shape ``(..., T, S)``, with causal zeros if asked."""
    g = torch.Generator().manual_seed(seed)
    scores = sharp * torch.randn(*shape, generator=g, dtype=torch.float64)
    if causal:
        T, S = shape[-2:]
        allowed = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # (T, S)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)


# ------------------------------------------------------------------ per-head entropy


def _entropy_log2(weights):
    return head_entropy(weights) / math.log(2.0)


def _entropy_nan(weights):
    return -(weights * weights.log()).sum(-1).mean(-1)  # 0 * log 0 = 0 * -inf = NaN


def _entropy_no_minus(weights):
    return -head_entropy(weights)


def _entropy_summed_over_queries(weights):
    return head_entropy(weights) * weights.shape[-2]


def _entropy_of_mean_row(weights):
    mean_row = weights.mean(dim=-2)  # (..., H, S)
    logs = torch.where(mean_row > 0, mean_row.log(), torch.zeros_like(mean_row))
    return -(mean_row * logs).sum(-1)


def _entropy_mean_over_keys(weights):
    return head_entropy(weights) / weights.shape[-1]


# The advice of the case built to catch 0 ln 0 computed as NaN; that mistake's hint holds it,
# so a verdict that names the mistake gives it once.
_ZEROS_OUT_OF_THE_LOG = (
    "Masked keys have weight exactly 0 and contribute 0 (the limit of p ln p as p -> 0); "
    "ln 0 is -inf, so keep them out of the logarithm."
)

_ENTROPY_CASES = [
    Case(
        "one head, 3 queries, 4 keys: shape (1, 3, 4)",
        lambda: (_random_weights(0, (1, 3, 4)),),
        "Each query's row is a distribution over the keys: take its entropy in nats, as "
        "chapter 13 defines it in 'What each head does, in numbers', then average the rows "
        "of each head. Check one row by hand first: weight split evenly between two keys "
        "gives ln 2 = 0.693, all of it on one key 0.",
    ),
    Case(
        "causal weights with zeros: shape (2, 5, 5)",
        lambda: (_random_weights(1, (2, 5, 5), causal=True),),
        _ZEROS_OUT_OF_THE_LOG,
    ),
    Case(
        "leading dimensions: shape (2, 3, 4, 6) (batch, heads, queries, keys)",
        lambda: (_random_weights(2, (2, 3, 4, 6)),),
        "Reduce only the last two dimensions (keys, then queries): the result has shape (..., H).",
    ),
    Case(
        "one-hot rows (entropy 0) and uniform rows (entropy ln S): shape (2, 2, 4)",
        lambda: (
            torch.stack(
                [
                    torch.eye(4, dtype=torch.float64)[:2],
                    torch.full((2, 4), 0.25, dtype=torch.float64),
                ]
            ),
        ),
        "A row with all its weight on one key has entropy 0; a uniform row over 4 keys ln 4.",
    ),
    Case(
        "a uniform row over 131,072 keys, a long context's: shape (1, 1, 131072)",
        lambda: (torch.full((1, 1, 2**17), 2.0**-17, dtype=torch.float64),),
        "Each weight is about 7.6e-6, so a small number added inside the logarithm, "
        "ln(A + 1e-8), already moves the entropy (ln 131072 = 11.78) by 1e-3 nats: keep zero "
        "weights out of the logarithm instead (torch.where, or torch.special.xlogy).",
    ),
]

_ENTROPY_MISTAKES = [
    Mistake(
        "the entropy in bits (a base-2 logarithm)",
        _entropy_log2,
        "Use the natural logarithm (torch.log): the chapter measures entropy in nats.",
    ),
    Mistake(
        "0 ln 0 computed as NaN",
        _entropy_nan,
        "0 * log(0) is 0 * -inf = NaN in floating point. " + _ZEROS_OUT_OF_THE_LOG + " "
        "torch.where or torch.special.xlogy does it. Check a row (1, 0): its entropy is 0.",
    ),
    Mistake(
        "the minus sign forgotten",
        _entropy_no_minus,
        "sum A ln A is negative (ln of a number in (0, 1] is <= 0); the entropy is its negative.",
    ),
    Mistake(
        "a sum over the queries instead of a mean",
        _entropy_summed_over_queries,
        "Average the rows' entropies over the queries (the second-to-last dimension).",
    ),
    Mistake(
        "the entropy of the averaged row, not the average of the rows' entropies",
        _entropy_of_mean_row,
        "Compute each row's entropy first, then average: a head whose every query looks at a "
        "different single key has entropy 0, although its average row is spread out.",
    ),
    Mistake(
        "a mean over the keys instead of a sum",
        _entropy_mean_over_keys,
        "The entropy of a row sums -A_ts ln A_ts over the keys s.",
    ),
]


def check_head_entropy(fn: Callable[[torch.Tensor], torch.Tensor]) -> Verdict:
    """Check ``fn(weights) -> entropy``: the mean row entropy of each head, in nats.

    ``weights`` has shape ``(..., H, T, S)`` (rows sum to 1, masked keys are
    0); the answer has shape ``(..., H)``: for each head, the mean over the
    ``T`` queries of the entropy of the query's row, as chapter 13's section "What each
    head does, in numbers" defines it, a masked key contributing 0. The reference is
    :func:`attnbook.interpret.head_entropy`. The exercise is to write the sum: an answer
    that uses a ready-made entropy (the package's, ``scipy.stats.entropy``,
    ``torch.distributions.Categorical``'s) or ``torch.special.entr`` fails, as its text says.
    """
    return run_cases("head_entropy", fn, head_entropy, _ENTROPY_CASES, mistakes=_ENTROPY_MISTAKES)


# ------------------------------------------------------------------ attention rollout


def _rollout(weights: torch.Tensor, residual: float) -> torch.Tensor:
    return attention_rollout(weights, residual=residual)


def _layer_matrices(weights: torch.Tensor, residual: float, reduce: str = "mean") -> torch.Tensor:
    """``residual * I + (1 - residual) * A`` per layer, heads reduced: ``(L, B, T, T)``."""
    heads = weights.mean(dim=2) if reduce == "mean" else weights.amax(dim=2)
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    mixed = residual * eye + (1 - residual) * heads
    return mixed / mixed.sum(dim=-1, keepdim=True)


def _rollout_not_renormalised(weights, residual):
    heads = weights.mean(dim=2)  # (L, B, T, T)
    result = torch.eye(weights.shape[-1], dtype=weights.dtype).expand(heads.shape[1:])
    for layer in heads:
        result = (
            residual * torch.eye(layer.shape[-1], dtype=layer.dtype) + (1 - residual) * layer
        ) @ result
    return result


def _with_an_empty_row() -> torch.Tensor:
    """Causal weights in which query 2 of the first layer may attend to no key (all 0)."""
    weights = _random_weights(14, (2, 1, 2, 4, 4), causal=True)
    weights[0, :, :, 2] = 0.0  # every head of layer 0: the row the package's attention returns
    return weights


def _rollout_first_on_left(weights, residual):
    layers = _layer_matrices(weights, residual)
    result = layers[0]
    for layer in layers[1:]:
        result = result @ layer  # A'_1 A'_2 ... A'_L: the first layer on the left
    return result


def _rollout_no_residual(weights, residual):
    return attention_rollout(weights, residual=0.0)


def _rollout_last_layer(weights, residual):
    return _layer_matrices(weights, residual)[-1]


def _rollout_raw_last_layer(weights, residual):
    return weights[-1].mean(dim=1)


def _rollout_max_heads(weights, residual):
    layers = _layer_matrices(weights, residual, reduce="max")
    result = layers[0]
    for layer in layers[1:]:
        result = layer @ result
    return result


def _rollout_per_head(weights, residual):
    """Each head rolled out on its own through the layers, then the heads averaged."""
    eye = torch.eye(weights.shape[-1], dtype=weights.dtype)
    result = eye.expand(weights.shape[1:])  # (B, H, T, T)
    for layer in weights:
        result = (residual * eye + (1 - residual) * layer) @ result
    return result.mean(dim=1)


def _rollout_swapped_residual(weights, residual):
    layers = _layer_matrices(weights, 1.0 - residual)  # (1 - residual) * I + residual * A
    result = layers[0]
    for layer in layers[1:]:
        result = layer @ result
    return result


_ROLLOUT_CASES = [
    Case(
        "two layers, two heads, 4 tokens, residual = 0.5",
        lambda: (_random_weights(10, (2, 1, 2, 4, 4)), 0.5),
        "Follow chapter 13's rollout (in 'Attention is not (yet) an explanation') one layer "
        "at a time, with the residual connection's share given as residual instead of one "
        "half. Check one layer's matrix first: each of its rows must sum to 1.",
    ),
    Case(
        "three layers, causal weights, a batch of 2, residual = 0.5",
        lambda: (_random_weights(11, (3, 2, 3, 5, 5), causal=True), 0.5),
        "Each layer mixes what the layers below it have already mixed: build the rollout "
        "layer by layer, the first layer first, in the order in which the chapter multiplies "
        "the layers' matrices.",
    ),
    Case(
        "two layers, residual = 0.25",
        lambda: (_random_weights(12, (2, 1, 2, 4, 4)), 0.25),
        "residual is the residual connection's share of each layer's matrix, the share the "
        "chapter sets to one half; the heads' mean gets the rest.",
    ),
    Case(
        "one layer, residual = 0.0: the head-averaged weights themselves",
        lambda: (_random_weights(13, (1, 2, 3, 4, 4)), 0.0),
        "With one layer and no residual, the rollout is the mean of the heads' weights.",
    ),
    Case(
        "a query that attends to no key in the first layer (a row of zeros), residual = 0.5",
        lambda: (_with_an_empty_row(), 0.5),
        "A query that attends to no key keeps only its own vector, through the residual "
        "connection: once the rows are renormalised, its row is the identity's row, not a row "
        "that sums to residual.",
    ),
]

_ROLLOUT_MISTAKES = [
    Mistake(
        "the rows not renormalised after adding the identity",
        _rollout_not_renormalised,
        "Each layer's matrix must have rows that sum to 1 once the identity is mixed in (the "
        "chapter renormalises them): where a query attends to no key, your row sums to "
        "residual.",
    ),
    Mistake(
        "the layers multiplied in the wrong order (the first layer on the left)",
        _rollout_first_on_left,
        "Layer l reads the output of layer l - 1, so the later layer's matrix goes on the "
        "left of the product of the layers before it.",
    ),
    Mistake(
        "the residual connection left out",
        _rollout_no_residual,
        "Each layer's matrix mixes the identity into the heads' mean, with the share "
        "residual, not the heads' mean alone: the residual stream carries every position's "
        "own vector past the attention.",
    ),
    Mistake(
        "only the last layer's matrix",
        _rollout_last_layer,
        "Multiply the matrices of every layer, not only the last one.",
    ),
    Mistake(
        "the raw weights of the last layer, averaged over the heads",
        _rollout_raw_last_layer,
        "Rollout multiplies the matrices of every layer, each with the residual identity added.",
    ),
    Mistake(
        "the heads' maximum instead of their mean",
        _rollout_max_heads,
        "Average the heads of each layer (dimension 2 of the (L, B, H, T, T) weights).",
    ),
    Mistake(
        "every head rolled out on its own, then the heads averaged",
        _rollout_per_head,
        "Average the heads within each layer first: the next layer's heads read the mix of "
        "all heads of this one, not one head each.",
    ),
    Mistake(
        "the weights of the identity and of the attention swapped",
        _rollout_swapped_residual,
        "residual is the identity's share, the residual connection's; the heads' mean gets "
        "the rest.",
    ),
]


def check_attention_rollout(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> Verdict:
    """Check ``fn(weights, residual) -> rollout`` (Abnar and Zuidema, 2020).

    ``weights`` has shape ``(L, B, H, T, T)``, the first layer first; the
    answer has shape ``(B, T, T)``: the rollout that chapter 13's section "Attention is
    not (yet) an explanation" builds, with ``residual`` as the residual connection's
    share of each layer's matrix. The reference is
    :func:`attnbook.interpret.attention_rollout`.
    """
    return run_cases("attention_rollout", fn, _rollout, _ROLLOUT_CASES, mistakes=_ROLLOUT_MISTAKES)
