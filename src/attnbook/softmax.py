"""Softmax: turning a row of scores into weights that are positive and sum to 1.

Introduced in chapter 2 (``chapters/02_softmax.ipynb``).

Shape legend: ``...`` any dimensions; the softmax runs along one ``axis`` of
length ``n`` and leaves the shape unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from attnbook._validation import (
    Array,
    as_float_array,
    check_no_nan,
    check_positive_number,
    compute_dtype,
    normalize_axis,
    shape_str,
)

__all__ = ["log_softmax", "softmax", "softmax_jacobian"]


def _shifted_scores(x: object, axis: int, temperature: float) -> tuple[Array, int]:
    """Validate, subtract the maximum along ``axis``, *then* divide by the temperature.

    The order matters. ``max(x / τ) = max(x) / τ`` for ``τ > 0``, so both orders
    are the same mathematically, but dividing first can overflow: ``700 / 0.01``
    is ``inf`` in float16 and ``1e307 / 0.01`` in float64, and ``inf - inf`` is
    NaN. Subtracting first leaves gaps ``x - max(x) <= 0``, which dividing by
    ``τ`` can only send towards ``-inf`` (weight 0), never to NaN.

    Returns the shifted scores ``(x - max) / τ`` (at least float32) and the axis.
    """
    x = as_float_array(x, "x")
    temperature = check_positive_number(temperature, "temperature")
    ax = normalize_axis(axis, x.ndim)
    if x.shape[ax] == 0:
        raise ValueError(
            f"x has length 0 along axis {axis} (shape {shape_str(x)}); softmax needs at least one entry"
        )
    check_no_nan(x, "x")
    xp = torch if isinstance(x, torch.Tensor) else np
    if bool(xp.isposinf(x).any()):
        raise ValueError("x contains +inf; softmax is undefined there (inf - inf)")
    if isinstance(x, torch.Tensor):
        x = x.to(compute_dtype(x))
        top = x.amax(dim=ax, keepdim=True).detach()  # the shift does not change the softmax
    else:
        x = x.astype(compute_dtype(x), copy=False)
        top = x.max(axis=ax, keepdims=True)
    if bool(xp.isneginf(top).any()):
        raise ValueError(
            f"x has a slice along axis {axis} where every entry is -inf; its softmax is undefined"
        )
    with np.errstate(over="ignore"):  # overflowing to -inf is fine here: it means weight 0
        return _divide_gap(x, top, temperature), ax


def _divide_gap(x: Array, top: Array, temperature: float) -> Array:
    """``(x - top) / τ`` with no NaN: each entry is 0 (a maximum), negative, or ``-inf``."""
    xp = torch if isinstance(x, torch.Tensor) else np
    gap = x - top  # <= 0; -inf stays -inf
    if bool((xp.isneginf(gap) & xp.isfinite(x)).any()):
        # x - max overflowed (entries near -max and +max of the dtype): halve both first.
        gap, temperature = x * 0.5 - top * 0.5, temperature * 0.5
    if isinstance(gap, torch.Tensor):
        tau = torch.tensor(temperature, dtype=gap.dtype, device=gap.device)
    else:
        tau = np.asarray(temperature, dtype=gap.dtype)
    if bool(tau == 0):  # τ is below the dtype's smallest number: its limit τ -> 0, the arg-max
        return xp.where(gap == 0, xp.zeros_like(gap), xp.full_like(gap, -np.inf))
    if bool(xp.isinf(tau)):  # τ is above the dtype's largest number: its limit, uniform
        return xp.where(xp.isneginf(gap), gap, xp.zeros_like(gap))
    return gap / tau


def softmax(x: Array, axis: int = -1, temperature: float = 1.0) -> Array:
    """Numerically stable softmax: ``exp(x_i / τ) / sum_j exp(x_j / τ)`` along ``axis``.

    Subtracting the maximum first changes nothing mathematically (the common
    factor ``exp(-max / τ)`` cancels) but keeps every exponent ``<= 0``, so
    nothing overflows even for scores of ``1e4``. The maximum is subtracted
    *before* dividing by ``τ``: dividing first overflows for a small ``τ``
    (``700 / 0.01`` is ``inf`` in float16) and gives NaN. Entries equal to
    ``-inf`` get weight exactly 0; that is how masks will work in chapter 6.
    16-bit inputs are computed in float32 and the result is cast back.

    Args:
        x: scores, any shape, floating point (NumPy array or torch tensor).
        axis: the axis whose entries compete for weight; the default ``-1``
            normalises each row of a ``(T, S)`` score matrix over the keys.
        temperature: ``τ > 0``. Small ``τ`` sharpens the distribution towards
            the arg-max (a hard lookup); large ``τ`` flattens it towards uniform.

    Returns:
        ``weights`` with the shape, dtype and array kind of ``x``: non-negative,
        summing to 1 along ``axis``. Differentiable when ``x`` is a tensor.

    Raises:
        ValueError: for integer input, an empty or out-of-range ``axis``, a
            temperature that is not a finite positive number, NaN or +inf
            entries, or a slice that is entirely ``-inf``.
    """
    shifted, ax = _shifted_scores(x, axis, temperature)  # (x - max) / τ, at least float32
    if isinstance(shifted, torch.Tensor):
        e = torch.exp(shifted)  # in (0, 1], the largest entry exactly 1
        return (e / e.sum(dim=ax, keepdim=True)).to(x.dtype)
    e = np.exp(shifted)
    return (e / e.sum(axis=ax, keepdims=True)).astype(np.asarray(x).dtype, copy=False)


def log_softmax(x: Array, axis: int = -1, temperature: float = 1.0) -> Array:
    """Logarithm of :func:`softmax`, computed without ever forming tiny weights.

    ``log(softmax(x))`` loses accuracy once a weight drops below about
    ``1e-308`` (float64's smallest normal number) and is ``-inf`` below about
    ``2.5e-324`` (half the smallest positive float64, ``4.9e-324``), where the
    weight rounds to 0; ``z - logsumexp(z)`` stays finite and accurate.
    Cross-entropy losses use this form.

    Args:
        x: scores, any shape, floating point.
        axis: the axis to normalise over.
        temperature: ``τ > 0``, as in :func:`softmax`.

    Returns:
        Same shape and kind as ``x``; ``exp`` of it sums to 1 along ``axis``.
    """
    shifted, ax = _shifted_scores(x, axis, temperature)  # (x - max) / τ, at least float32
    if isinstance(shifted, torch.Tensor):
        return (shifted - torch.log(torch.exp(shifted).sum(dim=ax, keepdim=True))).to(x.dtype)
    out = shifted - np.log(np.exp(shifted).sum(axis=ax, keepdims=True))
    with np.errstate(over="ignore"):  # a log-weight below float16's range is -inf there
        return out.astype(np.asarray(x).dtype, copy=False)


def softmax_jacobian(weights: Array) -> Array:
    """The derivative of softmax, from its output: ``J = diag(p) - p pᵀ``.

    ``J[..., i, j] = ∂p_i / ∂x_j = p_i (δ_ij - p_j)``. When one weight is near 1
    and the others near 0, every entry of ``J`` is near 0: a saturated softmax
    passes almost no gradient back to its scores (chapter 2).

    Args:
        weights: softmax outputs ``p`` of shape ``(..., n)``, each row summing to 1
            up to the rounding of their dtype (a float16 or bfloat16 row of
            :func:`softmax` can sum to ``1 - 2^-11`` or ``1 - 2^-8``).

    Returns:
        Shape ``(..., n, n)``.
    """
    p = as_float_array(weights, "weights")
    if p.ndim == 0:
        raise ValueError("weights must have shape (..., n), got a scalar")
    check_no_nan(p, "weights")
    # Summed in at least float32, and compared with a tolerance no finer than the dtype's
    # rounding: each 16-bit weight is rounded on its own, so a row's sum may miss 1 by eps.
    if isinstance(p, torch.Tensor):
        row_sums = p.sum(-1, dtype=compute_dtype(p))
        tol = max(1e-4, torch.finfo(p.dtype).eps)
        ok = bool(torch.allclose(row_sums, torch.ones_like(row_sums), atol=tol))
    else:
        row_sums = p.sum(-1, dtype=compute_dtype(p))
        tol = max(1e-4, float(np.finfo(p.dtype).eps))
        ok = bool(np.allclose(row_sums, 1.0, atol=tol))
    ok = ok and bool((p >= 0).all())
    if not ok:
        raise ValueError(
            "weights must be non-negative and sum to 1 along the last axis (the output of softmax); "
            f"got rows summing to values in [{float(row_sums.min()):.4g}, {float(row_sums.max()):.4g}]"
        )
    if isinstance(p, torch.Tensor):
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    eye = np.eye(p.shape[-1], dtype=p.dtype)
    return p[..., :, None] * eye - p[..., :, None] * p[..., None, :]
