"""The checkers of chapter 13 accept correct answers and reject, and name, typical wrong ones."""

from __future__ import annotations

import math

import torch
from checker_asserts import assert_rejects, stub

from attnbook.exercises import check_attention_rollout, check_head_entropy

# ------------------------------------------------------------------ per-head entropy


def _entropy(weights):  # a correct answer
    return -torch.special.xlogy(weights, weights).sum(-1).mean(-1)


def test_head_entropy_checker_accepts_correct_answers() -> None:
    verdict = check_head_entropy(_entropy)
    assert verdict, verdict.message
    assert "all 5 hidden cases pass" in verdict.message

    def with_where(weights):
        logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
        return -(weights * logs).sum(dim=-1).mean(dim=-1)

    assert check_head_entropy(with_where)
    assert not check_head_entropy(stub).attempted


def test_head_entropy_checker_names_typical_mistakes() -> None:
    def bits(weights):
        return _entropy(weights) / math.log(2)

    def nan(weights):
        return -(weights * weights.log()).sum(-1).mean(-1)

    def no_minus(weights):
        return -_entropy(weights)

    def summed(weights):
        return -torch.special.xlogy(weights, weights).sum(-1).sum(-1)

    def mean_row(weights):
        row = weights.mean(-2)
        return -torch.special.xlogy(row, row).sum(-1)

    def mean_over_keys(weights):
        return -torch.special.xlogy(weights, weights).mean(-1).mean(-1)

    first = "one head, 3 queries, 4 keys"
    for wrong, case, mistake in [
        (bits, first, "the entropy in bits"),
        (nan, "causal weights with zeros", "0 ln 0 computed as NaN"),
        (no_minus, first, "the minus sign forgotten"),
        (summed, first, "a sum over the queries instead of a mean"),
        (mean_row, first, "the entropy of the averaged row"),
        (mean_over_keys, first, "a mean over the keys instead of a sum"),
    ]:
        assert_rejects(check_head_entropy(wrong), case, mistake)


def test_head_entropy_checker_rejects_a_number_added_inside_the_logarithm() -> None:
    # ln(A + eps) is within tolerance on short rows; a long uniform row's weights (7.6e-6)
    # are small enough for the bias to show. Clamping before the logarithm is exact there.
    def plus(eps):
        def entropy(weights):
            return -(weights * (weights + eps).log()).sum(-1).mean(-1)

        return entropy

    def clamped(weights):
        return -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean(-1)

    for eps in (1e-6, 1e-8):
        assert_rejects(check_head_entropy(plus(eps)), "a uniform row over 131,072 keys")
    verdict = check_head_entropy(clamped)
    assert verdict, verdict.message


def test_head_entropy_checker_rejects_a_wrong_shape() -> None:
    def per_query(weights):  # no mean over the queries: (..., H, T)
        return -torch.special.xlogy(weights, weights).sum(-1)

    verdict = check_head_entropy(per_query)
    assert_rejects(verdict, "one head, 3 queries, 4 keys")
    assert "shape" in verdict.message


# ------------------------------------------------------------------ attention rollout


def _rollout(weights, residual):  # a correct answer
    T = weights.shape[-1]
    result = torch.eye(T, dtype=weights.dtype).expand(weights.shape[1], T, T)
    for layer in weights:
        mixed = residual * torch.eye(T, dtype=weights.dtype) + (1 - residual) * layer.mean(1)
        mixed = mixed / mixed.sum(-1, keepdim=True)
        result = mixed @ result
    return result


def test_attention_rollout_checker_accepts_correct_answers() -> None:
    verdict = check_attention_rollout(_rollout)
    assert verdict, verdict.message
    assert "all 5 hidden cases pass" in verdict.message
    assert not check_attention_rollout(stub).attempted


def _layers(weights, residual, heads=lambda w: w.mean(1)):
    T = weights.shape[-1]
    eye = torch.eye(T, dtype=weights.dtype)
    return [residual * eye + (1 - residual) * heads(layer) for layer in weights]


def test_attention_rollout_checker_names_typical_mistakes() -> None:
    def first_on_left(weights, residual):
        layers = _layers(weights, residual)
        result = layers[0]
        for layer in layers[1:]:
            result = result @ layer
        return result

    def no_residual(weights, residual):
        return _rollout(weights, 0.0)

    def last_layer(weights, residual):
        return _layers(weights, residual)[-1]

    def raw_last(weights, residual):
        return weights[-1].mean(1)

    def max_heads(weights, residual):
        layers = _layers(weights, residual, heads=lambda w: w.amax(1))
        result = layers[0] / layers[0].sum(-1, keepdim=True)
        for layer in layers[1:]:
            result = (layer / layer.sum(-1, keepdim=True)) @ result
        return result

    def per_head(weights, residual):
        T = weights.shape[-1]
        eye = torch.eye(T, dtype=weights.dtype)
        result = eye.expand(weights.shape[1:])
        for layer in weights:
            result = (residual * eye + (1 - residual) * layer) @ result
        return result.mean(1)

    def swapped(weights, residual):
        layers = _layers(weights, 1 - residual)
        result = layers[0]
        for layer in layers[1:]:
            result = layer @ result
        return result

    first = "two layers, two heads, 4 tokens"
    for wrong, case, mistake in [
        (first_on_left, first, "the layers multiplied in the wrong order"),
        (no_residual, first, "the residual connection left out"),
        (last_layer, first, "only the last layer's matrix"),
        (raw_last, first, "the raw weights of the last layer"),
        (max_heads, first, "the heads' maximum instead of their mean"),
        (per_head, first, "every head rolled out on its own"),
        (swapped, "residual = 0.25", "the weights of the identity and of the attention swapped"),
    ]:
        assert_rejects(check_attention_rollout(wrong), case, mistake)


def test_attention_rollout_checker_rejects_an_unknown_mistake_with_the_case_hint() -> None:
    def transposed(weights, residual):
        return _rollout(weights, residual).transpose(-2, -1)

    verdict = check_attention_rollout(transposed)
    assert_rejects(verdict, "two layers, two heads, 4 tokens", named="one layer at a time")


def test_attention_rollout_checker_rejects_rows_left_unnormalised() -> None:
    """Without the renormalisation, a query that attends to no key keeps only the residual's
    share of its own vector: right for every row that sums to 1, wrong for that one."""

    def unnormalised(weights, residual):
        T = weights.shape[-1]
        result = torch.eye(T, dtype=weights.dtype).expand(weights.shape[1], T, T)
        for layer in weights:
            result = (
                residual * torch.eye(T, dtype=weights.dtype) + (1 - residual) * layer.mean(1)
            ) @ result
        return result

    verdict = check_attention_rollout(unnormalised)
    assert_rejects(verdict, "attends to no key", "the rows not renormalised")
