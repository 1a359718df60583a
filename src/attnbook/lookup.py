"""Attention as a soft dictionary lookup.

Introduced in chapter 3 (``chapters/03_soft_lookup.ipynb``). A Python ``dict``
returns the value whose key *equals* the query. With vectors, no key equals the
query exactly, but some match it better than others (chapter 1's scores):

- a *hard* lookup returns the value of the best-matching key (an arg-max);
- a *soft* lookup returns an average of all values, weighted by the softmax of
  the scores (chapter 2). As the temperature ``τ → 0`` the weights pile onto
  the best key and the soft lookup becomes the hard one; unlike the hard
  lookup it is differentiable, which is what lets attention be learned.

Shape legend used in this module:
    ``S`` number of key-value pairs, ``d`` query/key width, ``d_v`` value
    width, ``...`` any leading dimensions of the query (several queries at once).

Both functions accept NumPy arrays or torch tensors (not a mix) and return the
same kind. There is no ``1 / sqrt(d)`` scaling here; that comes in chapter 4.
"""

from __future__ import annotations

import numpy as np
import torch

from attnbook._validation import (
    Array,
    as_float_array,
    check_finite,
    same_dtype,
    same_kind,
    shape_str,
)
from attnbook.softmax import softmax

__all__ = ["hard_lookup", "soft_lookup"]


def _check_lookup(query: object, keys: object, values: object) -> tuple[Array, Array, Array]:
    query = as_float_array(query, "query")
    keys = as_float_array(keys, "keys")
    values = as_float_array(values, "values")
    same_kind(query, keys, "query", "keys")
    same_kind(query, values, "query", "values")
    same_dtype(query, keys, "query", "keys")
    same_dtype(query, values, "query", "values")
    if query.ndim < 1:
        raise ValueError("query must have shape (..., d), got a scalar")
    if keys.ndim != 2 or 0 in keys.shape:  # d = 0: every score 0, a lookup that looks at nothing
        raise ValueError(f"keys must have shape (S, d) with S, d >= 1, got {shape_str(keys)}")
    if keys.shape[-1] != query.shape[-1]:
        raise ValueError(
            f"keys must have shape (S, d) with d = {query.shape[-1]} (query's last dimension), "
            f"got keys {shape_str(keys)} for query {shape_str(query)}"
        )
    if values.ndim != 2 or values.shape[0] != keys.shape[0]:
        raise ValueError(
            f"values must have shape (S, d_v) with S = {keys.shape[0]} (one value per key), "
            f"got {shape_str(values)}"
        )
    return query, keys, values


def _scores(query: Array, keys: Array) -> Array:
    """``query · keys`` for every key, refusing NaN or inf: no best key, no softmax exists then."""
    if isinstance(query, torch.Tensor):
        scores = query @ keys.T  # (..., d) @ (d, S) -> (..., S)
        finite = bool(scores.isfinite().all())
    else:
        with np.errstate(invalid="ignore", over="ignore"):  # reported below, not as a warning
            scores = query @ keys.T
        finite = bool(np.isfinite(scores).all())
    if not finite:
        raise ValueError(
            "the scores query · keys must be finite, but some are NaN or inf: query and keys "
            f"must hold finite numbers, small enough that their dot products fit in {scores.dtype}"
        )
    return scores


def hard_lookup(query: Array, keys: Array, values: Array) -> Array:
    """Return the value of the key that best matches the query (highest dot product).

    A dictionary lookup for vectors: exactly one value comes back. The arg-max
    has zero gradient almost everywhere, so a model cannot *learn* through it;
    :func:`soft_lookup` fixes that.

    Args:
        query: shape ``(..., d)``: one query, or several stacked.
        keys: shape ``(S, d)``.
        values: shape ``(S, d_v)``.

    Returns:
        Shape ``(..., d_v)``: ``values[argmax_s query · keys[s]]`` for each query
        (ties go to the first best key).
    """
    query, keys, values = _check_lookup(query, keys, values)
    best = _scores(query, keys).argmax(-1)  # (..., S) -> (...)
    return values[best]  # (..., d_v)


def soft_lookup(
    query: Array, keys: Array, values: Array, temperature: float = 1.0
) -> tuple[Array, Array]:
    """Return the average of all values, weighted by ``softmax(query · keys / τ)``.

    Every key contributes in proportion to how well it matches, so the output
    moves smoothly as the query moves, and gradients flow to query, keys and
    values. As ``τ → 0`` it tends to :func:`hard_lookup` (when one key is the
    unique best match); as ``τ → ∞`` to the plain mean of the values.

    Args:
        query: shape ``(..., d)``: one query, or several stacked.
        keys: shape ``(S, d)``.
        values: shape ``(S, d_v)``.
        temperature: ``τ > 0``.

    Returns:
        ``(output, weights)`` of shapes ``(..., d_v)`` and ``(..., S)``; each row
        of ``weights`` sums to 1.

    Raises:
        ValueError: for scores ``query · keys`` that are NaN or inf, or for NaN or
            infinite ``values``: a weight of 0 (a cold temperature) times an
            infinite value is NaN, where the hard lookup would return a finite one.
    """
    query, keys, values = _check_lookup(query, keys, values)
    check_finite(values, "values")
    weights = softmax(_scores(query, keys), axis=-1, temperature=temperature)  # (..., S)
    output = weights @ values  # (..., S) @ (S, d_v) -> (..., d_v)
    return output, weights
