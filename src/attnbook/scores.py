"""Scores: how well a query matches a key.

Introduced in chapter 1 (``chapters/01_scores.ipynb``). A *score* is one number
per (query, key) pair; attention turns a row of scores into weights (chapter 2).

Shape legend used in this module:
    ``T`` query positions, ``S`` key positions, ``d`` vector width, ``...`` any
    leading batch dimensions (they broadcast like NumPy's).

Every function accepts NumPy arrays or torch tensors (not a mix) and returns the
same kind, so the chapters can start in NumPy and move to PyTorch unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from attnbook._validation import (
    Array,
    as_float_array,
    check_positive_number,
    same_kind,
    shape_str,
)

__all__ = ["cosine_similarity", "dot_product", "score_matrix"]


def _check_pair(a: Array, b: Array, name_a: str, name_b: str) -> tuple[Array, Array]:
    a = as_float_array(a, name_a)
    b = as_float_array(b, name_b)
    same_kind(a, b, name_a, name_b)
    for x, name in ((a, name_a), (b, name_b)):
        if x.ndim == 0:
            raise ValueError(f"{name} must have at least 1 dimension (..., d), got a scalar")
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"{name_a} and {name_b} must have the same last dimension d, got "
            f"{name_a} {shape_str(a)} and {name_b} {shape_str(b)}"
        )
    if a.shape[-1] == 0:
        raise ValueError(f"{name_a} and {name_b} must have a last dimension d >= 1, got 0")
    try:
        np.broadcast_shapes(tuple(a.shape[:-1]), tuple(b.shape[:-1]))
    except ValueError:
        raise ValueError(
            f"the leading dimensions of {name_a} {shape_str(a)} and {name_b} {shape_str(b)} "
            "do not broadcast"
        ) from None
    return a, b


def dot_product(a: Array, b: Array) -> Array:
    """Dot product of vectors along the last axis: ``sum_i a[..., i] * b[..., i]``.

    The simplest score: large when the vectors point the same way *and* are long,
    negative when they point apart.

    Args:
        a: shape ``(..., d)``.
        b: shape ``(..., d)``; leading dimensions broadcast against ``a``'s.

    Returns:
        Shape ``(...)``: one score per pair of vectors.
    """
    a, b = _check_pair(a, b, "a", "b")
    return (a * b).sum(-1)


def cosine_similarity(a: Array, b: Array, eps: float = 1e-8) -> Array:
    """Cosine of the angle between vectors along the last axis, in ``[-1, 1]``.

    The dot product with the lengths divided out: it compares directions only,
    so a long vector cannot win just by being long.

    Args:
        a: shape ``(..., d)``.
        b: shape ``(..., d)``; leading dimensions broadcast against ``a``'s.
        eps: each norm is clamped to at least ``eps``, so a zero vector gets
            similarity 0 instead of NaN (PyTorch's ``F.cosine_similarity`` does the same).

    Returns:
        Shape ``(...)``.
    """
    a, b = _check_pair(a, b, "a", "b")
    eps = check_positive_number(eps, "eps")
    if isinstance(a, torch.Tensor):
        norm_a = torch.linalg.vector_norm(a, dim=-1).clamp_min(eps)
        norm_b = torch.linalg.vector_norm(b, dim=-1).clamp_min(eps)
    else:
        norm_a = np.maximum(np.linalg.norm(a, axis=-1), eps)
        norm_b = np.maximum(np.linalg.norm(b, axis=-1), eps)
    return (a * b).sum(-1) / (norm_a * norm_b)


def score_matrix(queries: Array, keys: Array, scale: float | None = None) -> Array:
    """All query-key dot products at once: ``scores[..., t, s] = queries[..., t, :] · keys[..., s, :]``.

    One matrix product replaces ``T * S`` separate dot products; row ``t`` holds
    how well query ``t`` matches every key.

    Args:
        queries: shape ``(..., T, d)``.
        keys: shape ``(..., S, d)``; leading dimensions broadcast against ``queries``'.
        scale: if given, a positive number every score is multiplied by
            (chapter 4 uses ``1 / sqrt(d)``).

    Returns:
        ``scores`` of shape ``(..., T, S)``.
    """
    queries = as_float_array(queries, "queries")
    keys = as_float_array(keys, "keys")
    same_kind(queries, keys, "queries", "keys")
    for x, name, legend in ((queries, "queries", "T"), (keys, "keys", "S")):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., {legend}, d), got {shape_str(x)}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            "queries and keys must have the same last dimension d, got "
            f"queries {shape_str(queries)} and keys {shape_str(keys)}"
        )
    try:
        np.broadcast_shapes(tuple(queries.shape[:-2]), tuple(keys.shape[:-2]))
    except ValueError:
        raise ValueError(
            f"the batch dimensions of queries {shape_str(queries)} and keys {shape_str(keys)} "
            "do not broadcast"
        ) from None
    keys_t = keys.transpose(-2, -1) if isinstance(keys, torch.Tensor) else np.swapaxes(keys, -2, -1)
    scores = queries @ keys_t  # (..., T, d) @ (..., d, S) -> (..., T, S)
    if scale is not None:
        scores = scores * check_positive_number(scale, "scale")
    return scores
