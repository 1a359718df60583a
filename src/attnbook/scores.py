"""Scores: how well a query matches a key.

Introduced in chapter 1 (``chapters/01_scores.ipynb``). A *score* is one number
per (query, key) pair; attention turns a row of scores into weights (chapter 2).
The additive (Bahdanau) score, :func:`additive_scores` and :class:`AdditiveScorer`,
is built in chapter 5 (``chapters/05_qkv_projections.ipynb``) and compared there with
the dot product (ranking, saturation, cost); chapters 1 and 4 only mention it.

Shape legend used in this module:
    ``T`` query positions, ``S`` key positions, ``d`` vector width (``d_q``,
    ``d_k`` when queries and keys differ), ``d_a`` the hidden width of the
    additive score, ``...`` any leading batch dimensions (they broadcast like NumPy's).

Every function accepts NumPy arrays or torch tensors (not a mix) and returns the
same kind, so the chapters can start in NumPy and move to PyTorch unchanged.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from attnbook._validation import (
    Array,
    as_float_array,
    as_float_tensor,
    check_batch_broadcast,
    check_dtype,
    check_finite,
    check_int,
    check_positive_number,
    compute_dtype,
    same_dtype,
    same_kind,
    shape_str,
)

__all__ = ["AdditiveScorer", "additive_scores", "cosine_similarity", "dot_product", "score_matrix"]


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
    check_batch_broadcast(a, b, name_a, name_b, core_dims=1)
    return a, b


def dot_product(a: Array, b: Array) -> Array:
    """Dot product of vectors along the last axis: ``sum_i a[..., i] * b[..., i]``.

    The simplest score: large when the vectors point the same way *and* are long,
    negative when they point apart.

    Args:
        a: shape ``(..., d)``.
        b: shape ``(..., d)``; leading dimensions broadcast against ``a``'s.
            Torch tensors must share ``a``'s dtype, as in :func:`score_matrix`
            (NumPy arrays promote).

    Returns:
        Shape ``(...)``: one score per pair of vectors.
    """
    a, b = _check_pair(a, b, "a", "b")
    same_dtype(a, b, "a", "b")
    return (a * b).sum(-1)


def cosine_similarity(a: Array, b: Array, eps: float = 1e-8) -> Array:
    """Cosine of the angle between vectors along the last axis, in ``[-1, 1]``.

    The dot product with the lengths divided out: it compares directions only,
    so a long vector cannot win just by being long.

    Args:
        a: shape ``(..., d)``.
        b: shape ``(..., d)``; leading dimensions broadcast against ``a``'s.
            Torch tensors must share ``a``'s dtype, as in :func:`dot_product`
            (NumPy arrays promote).
        eps: each norm is clamped to at least ``eps``, so a zero vector gets
            similarity 0 instead of NaN (PyTorch's ``F.cosine_similarity`` does the
            same). A vector shorter than ``eps`` is therefore treated as if it had
            length ``eps``: its similarities shrink towards 0.

    Returns:
        Shape ``(...)``, in the dtype of ``a * b``; 16-bit inputs are computed
        in float32 (where ``1e-8`` would round to 0) and cast back.

    Raises:
        ValueError: for torch tensors of two dtypes, NaN or infinite entries, or
            vectors so long that the product of their lengths overflows (float32:
            about ``1.8e19`` each).
    """
    a, b = _check_pair(a, b, "a", "b")
    same_dtype(a, b, "a", "b")
    check_finite(a, "a")
    check_finite(b, "b")
    eps = check_positive_number(eps, "eps")
    if isinstance(a, torch.Tensor):
        out = a.dtype  # b's too
        a, b = a.to(compute_dtype(a)), b.to(compute_dtype(b))
        norm_a = torch.linalg.vector_norm(a, dim=-1).clamp_min(eps)
        norm_b = torch.linalg.vector_norm(b, dim=-1).clamp_min(eps)
        _check_lengths_fit(norm_a * norm_b)
        return ((a * b).sum(-1) / (norm_a * norm_b)).to(out)
    out = np.result_type(a, b)
    a, b = a.astype(compute_dtype(a), copy=False), b.astype(compute_dtype(b), copy=False)
    with np.errstate(over="ignore"):  # an overflow is reported by the check below
        norm_a = np.maximum(np.linalg.norm(a, axis=-1), eps)
        norm_b = np.maximum(np.linalg.norm(b, axis=-1), eps)
        _check_lengths_fit(norm_a * norm_b)
    return ((a * b).sum(-1) / (norm_a * norm_b)).astype(out, copy=False)


def _check_lengths_fit(lengths: Array) -> None:
    """Raise if a product of two lengths overflowed (the dot product, no larger, then fits)."""
    try:
        check_finite(lengths, "the product of the lengths of a and b")
    except ValueError:  # the same finding, with what to do about it
        raise ValueError(
            f"a and b are too long for {lengths.dtype}: the product of their lengths "
            "overflows; cosine similarity ignores length, so divide each vector by its "
            "largest absolute entry first"
        ) from None


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
    same_dtype(queries, keys, "queries", "keys")
    for x, name, legend in ((queries, "queries", "T"), (keys, "keys", "S")):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., {legend}, d), got {shape_str(x)}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            "queries and keys must have the same last dimension d, got "
            f"queries {shape_str(queries)} and keys {shape_str(keys)}"
        )
    if queries.shape[-1] == 0:  # the sum of no products would be a matrix of zeros
        raise ValueError(
            f"queries and keys must have a last dimension d >= 1, got queries "
            f"{shape_str(queries)} and keys {shape_str(keys)}"
        )
    check_batch_broadcast(queries, keys, "queries", "keys")
    keys_t = keys.transpose(-2, -1) if isinstance(keys, torch.Tensor) else np.swapaxes(keys, -2, -1)
    scores = queries @ keys_t  # (..., T, d) @ (..., d, S) -> (..., T, S)
    if scale is not None:
        scores = scores * check_positive_number(scale, "scale")
    return scores


def additive_scores(queries: Array, keys: Array, W_q: Array, W_k: Array, v: Array) -> Array:
    """Additive (Bahdanau) scores: ``scores[..., t, s] = v · tanh(queries[t] W_q + keys[s] W_k)``.

    The score of the first attention model (Bahdanau et al., 2015): a small
    one-hidden-layer network judges each (query, key) pair. Unlike the dot
    product it can compare vectors of different widths and rank keys by more
    than alignment, at the cost of a ``(T, S, d_a)`` intermediate tensor.

    The paper writes ``vᵀ tanh(W_q q + W_k k)`` with column vectors; with the
    row vectors used throughout this package the matrices act from the right,
    as in ``Q = X W_Q``, so here ``W_q`` has shape ``(d_q, d_a)``.

    Args:
        queries: shape ``(..., T, d_q)``.
        keys: shape ``(..., S, d_k)``; leading dimensions broadcast against ``queries``'.
        W_q: shape ``(d_q, d_a)``.
        W_k: shape ``(d_k, d_a)``.
        v: shape ``(d_a,)``.

    Returns:
        ``scores`` of shape ``(..., T, S)``.
    """
    named = {"queries": queries, "keys": keys, "W_q": W_q, "W_k": W_k, "v": v}
    arrays = {name: as_float_array(x, name) for name, x in named.items()}
    for name in ("keys", "W_q", "W_k", "v"):
        same_kind(arrays["queries"], arrays[name], "queries", name)
    queries, keys, W_q, W_k, v = arrays.values()
    for name in ("keys", "W_q", "W_k", "v"):
        same_dtype(queries, arrays[name], "queries", name)
    for x, name, needed in (
        (queries, "queries", "(..., T, d_q)"),
        (keys, "keys", "(..., S, d_k)"),
    ):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape {needed}, got {shape_str(x)}")
    if v.ndim != 1:
        raise ValueError(f"v must have shape (d_a,), got {shape_str(v)}")
    d_a = v.shape[0]
    for W, name, x, x_name in ((W_q, "W_q", queries, "queries"), (W_k, "W_k", keys, "keys")):
        if W.ndim != 2 or W.shape[0] != x.shape[-1] or W.shape[1] != d_a:
            raise ValueError(
                f"{name} must have shape ({x.shape[-1]}, {d_a}) = (width of {x_name}, len(v)), "
                f"got {shape_str(W)}"
            )
    check_batch_broadcast(queries, keys, "queries", "keys")
    q = (queries @ W_q)[..., :, None, :]  # (..., T, d_q) @ (d_q, d_a) -> (..., T, 1, d_a)
    k = (keys @ W_k)[..., None, :, :]  # (..., S, d_k) @ (d_k, d_a) -> (..., 1, S, d_a)
    hidden = torch.tanh(q + k) if isinstance(q, torch.Tensor) else np.tanh(q + k)
    return hidden @ v  # (..., T, S, d_a) @ (d_a,) -> (..., T, S)


class AdditiveScorer(nn.Module):
    """Learned additive (Bahdanau) scores, a module wrapping :func:`additive_scores`.

    The three learnable pieces ``W_q``, ``W_k`` and ``v`` are ``nn.Linear``
    layers without bias, so the scorer trains like any other layer.
    ``W_q.weight`` holds ``W_qᵀ`` (shape ``(d_a, d_q)``), as ``nn.Linear`` stores it.

    Args:
        d_query: ``d_q``, the width of the queries.
        d_key: ``d_k``, the width of the keys (may differ from ``d_q``).
        d_attn: ``d_a``, the hidden width of the scoring network.
    """

    def __init__(self, d_query: int, d_key: int, d_attn: int) -> None:
        super().__init__()
        for value, name in ((d_query, "d_query"), (d_key, "d_key"), (d_attn, "d_attn")):
            check_int(value, name)
        self.W_q = nn.Linear(d_query, d_attn, bias=False)  # weight (d_a, d_q)
        self.W_k = nn.Linear(d_key, d_attn, bias=False)  # weight (d_a, d_k)
        self.v = nn.Linear(d_attn, 1, bias=False)  # weight (1, d_a)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Score every query against every key.

        Args:
            queries: shape ``(..., T, d_q)``.
            keys: shape ``(..., S, d_k)``.

        Returns:
            ``scores`` of shape ``(..., T, S)``.
        """
        # Checked here, by the names the caller passed: additive_scores would blame the
        # module's own W_q and W_k for a query of the wrong width or dtype.
        tensors = {}
        for x, name, width, field in (
            (queries, "queries", self.W_q.in_features, "T, d_query"),
            (keys, "keys", self.W_k.in_features, "S, d_key"),
        ):
            x = as_float_tensor(x, name, f"(..., {field})")
            if x.ndim < 2 or x.shape[-1] != width:
                raise ValueError(
                    f"{name} must have shape (..., {field}) with {field[3:]} = {width}, "
                    f"got {shape_str(x)}"
                )
            tensors[name] = x
        check_dtype(tensors, self.W_q.weight.dtype)
        return additive_scores(
            queries, keys, self.W_q.weight.T, self.W_k.weight.T, self.v.weight[0]
        )  # W_q.weight.T: (d_q, d_a), W_k.weight.T: (d_k, d_a), v.weight[0]: (d_a,)
