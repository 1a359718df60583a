"""Attention that costs less: tiled (FlashAttention-style) and low-rank (Linformer) attention.

Introduced in chapter 14 (``chapters/14_efficient_attention.ipynb``).

Plain attention builds the ``T x S`` matrix of scores and then of weights, so
its memory grows like ``T * S``: quadratic in the sequence length for
self-attention. The two functions here avoid that matrix in two different ways:

- :func:`tiled_attention` computes *exactly* the same output as
  :func:`attnbook.scaled_dot_product_attention`, but walks the keys in blocks
  and keeps only ``T x block_size`` scores at a time, thanks to the *online
  softmax* (Milakov & Gimelshein 2018) that FlashAttention (Dao et al. 2022)
  runs inside one GPU kernel. Here it is a Python loop written to be read, not
  to be fast.
- :func:`linformer_attention` *approximates* attention (Wang et al. 2020): a
  ``(k, S)`` projection mixes the ``S`` keys and values down to ``k`` rows, so
  the scores are ``T x k``. It is exact only when nothing is lost in the
  projection.

Shape legend used in this module:
    ``T`` query positions, ``S`` key positions, ``Sb`` keys in one block
    (``block_size``, fewer in the last block), ``k`` projected rows (Linformer),
    ``d_k`` query/key width, ``d_v`` value width, ``...`` any leading batch
    dimensions (they broadcast like NumPy's, e.g. ``(B, H)``).
"""

from __future__ import annotations

import math

import torch

from attnbook._validation import as_float_tensor, check_bool, check_int, compute_dtype, shape_str
from attnbook.attention import attend_fused, check_attention_inputs

__all__ = ["linformer_attention", "tiled_attention"]


def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = False,
) -> torch.Tensor:
    """Exact attention that never holds the ``T x S`` matrix: FlashAttention's recurrence.

    ``softmax(Z) V`` seems to need a whole row of scores before it can divide
    by the row's sum. It does not: keep, for every query row, three running
    quantities over the key blocks seen so far,

    - ``m``, the largest score so far (for numerical stability),
    - ``l``, the sum of ``exp(score - m)`` so far (the softmax's denominator),
    - ``acc``, the sum of ``exp(score - m) * value`` so far (its numerator),

    and, for each new block of keys with scores ``Z_b`` (``T x Sb``)::

        m_new = max(m, rowmax(Z_b))
        c     = exp(m - m_new)                      # rescales what was summed under the old max
        P_b   = exp(Z_b - m_new)                    # (T, Sb)
        l     = c * l   + rowsum(P_b)
        acc   = c * acc + P_b @ V_b                 # (T, Sb) @ (Sb, d_v) -> (T, d_v)
        m     = m_new

    After the last block, ``output = acc / l``: the same numbers as
    ``softmax(Z) V`` up to rounding, since every term was multiplied by the
    same ``exp(-m)`` in the end. Only ``T x block_size`` scores exist at any
    time, so memory grows like ``T * (block_size + d_v)`` instead of ``T * S``.

    For 16-bit inputs (float16, bfloat16) the scores, ``m``, ``l`` and ``acc``
    are computed in float32 and the output is rounded to the inputs' dtype
    once at the end: ``l`` and ``acc`` are sums over all ``S`` keys, which
    overflow float16 (largest value 65504) or stop growing in bfloat16 (8
    bits of mantissa) for long sequences.

    The real FlashAttention kernel does this inside the GPU's fast on-chip
    memory, tiling the queries too, and is fast because it reads and writes
    the large, slow memory far less; this Python loop shows the arithmetic and
    the memory saving, but each block is a separate PyTorch call and it is
    slower than the fused kernel (see ``benchmarks/tiled_attention.py``).

    With ``causal=True`` the causal rule of :func:`attnbook.causal_mask`
    applies, aligned bottom-right: query ``t`` sits at position ``t + S - T``
    and sees keys ``0..t + S - T``. A query that may attend to no key (the
    first ``T - S`` ones when ``T > S``) gets an output row of zeros, as in
    :func:`attnbook.scaled_dot_product_attention`, never NaN. Blocks entirely
    in a query's future contribute ``exp(-inf) = 0``; a block no query can
    see never occurs with this alignment, since the last query sees every key.

    Args:
        query: shape ``(..., T, d_k)``, floating point.
        key: shape ``(..., S, d_k)``; same dtype as ``query``.
        value: shape ``(..., S, d_v)``; same dtype. Leading dimensions of the
            three broadcast against each other.
        block_size: the number of keys scored at once, an int >= 1; the last
            block holds the ``S % block_size`` remaining keys if any.
        causal: apply the bottom-right-aligned causal rule.

    Returns:
        ``output`` of shape ``(..., T, d_v)``, where ``...`` is the broadcast
        of the inputs' leading dimensions, equal to
        ``scaled_dot_product_attention(query, key, value, is_causal=causal)[0]``
        up to rounding.
    """
    query, key, value, _, _, scale = check_attention_inputs(query, key, value, None, 0.0, None)
    block_size = check_int(block_size, "block_size", meaning="keys per block")
    check_bool(causal, "causal")
    n_queries, n_keys = query.shape[-2], key.shape[-2]
    rows = (*torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2]), n_queries)
    out_dtype = query.dtype
    dtype = compute_dtype(query)  # float32 for 16-bit inputs, else the inputs' own dtype
    query = query.to(dtype)  # (..., T, d_k); the same tensor unless it was 16-bit
    m = torch.full((*rows, 1), -math.inf, dtype=dtype, device=query.device)  # (..., T, 1)
    l = torch.zeros((*rows, 1), dtype=dtype, device=query.device)  # (..., T, 1)  # noqa: E741
    acc = torch.zeros((*rows, value.shape[-1]), dtype=dtype, device=query.device)
    # acc: (..., T, d_v)
    first_pos = n_keys - n_queries  # query t sits at position t + S - T
    query_pos = torch.arange(first_pos, n_keys, device=query.device)  # (T,)
    for start in range(0, n_keys, block_size):
        stop = min(start + block_size, n_keys)
        key_block = key[..., start:stop, :].to(dtype)  # (..., Sb, d_k), a view unless 16-bit
        value_block = value[..., start:stop, :].to(dtype)  # (..., Sb, d_v), a view unless 16-bit
        # (..., T, d_k) @ (..., d_k, Sb) -> (..., T, Sb): only this block's scores exist
        scores = (query @ key_block.transpose(-2, -1)) * scale
        if causal and stop - 1 > first_pos:  # some key of this block is in some query's future
            key_pos = torch.arange(start, stop, device=query.device)  # (Sb,)
            allowed = key_pos[None, :] <= query_pos[:, None]  # (T, Sb), True = may attend
            scores = scores.masked_fill(~allowed, -math.inf)  # (..., T, Sb)
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., T, 1)
        # A row that has seen no allowed key yet has m_new = -inf; subtract 0 there instead,
        # so that exp(-inf - (-inf)) = NaN never appears (its P and c are then exp(-inf) = 0).
        m_ref = m_new.masked_fill(m_new == -math.inf, 0.0)  # (..., T, 1)
        correction = torch.exp(m - m_ref)  # (..., T, 1), c in the recurrence
        p = torch.exp(scores - m_ref)  # (..., T, Sb), unnormalised weights of this block
        l = correction * l + p.sum(dim=-1, keepdim=True)  # (..., T, 1)  # noqa: E741
        acc = correction * acc + p @ value_block  # (..., T, Sb) @ (..., Sb, d_v) -> (..., T, d_v)
        m = m_new
    # Rows with no allowed key have l = 0 and acc = 0: divide by 1 there, leaving zeros.
    return (acc / l.masked_fill(l == 0, 1.0)).to(out_dtype)  # (..., T, d_v), rounded once


def _check_projection(proj: object, name: str, n_keys: int) -> torch.Tensor:
    proj = as_float_tensor(proj, name, f"(k, S) with S = {n_keys}")
    if proj.ndim != 2 or proj.shape[1] != n_keys or proj.shape[0] < 1:
        raise ValueError(
            f"{name} must have shape (k, S) with k >= 1 and S = {n_keys} (the number of keys), "
            f"got {shape_str(proj)}"
        )
    return proj


def linformer_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    proj_k: torch.Tensor,
    proj_v: torch.Tensor | None = None,
) -> torch.Tensor:
    """Low-rank attention (Linformer): project the ``S`` keys and values down to ``k`` rows.

    Wang et al. (2020) observed that attention matrices are close to low rank,
    and replaced the ``S`` keys and values by ``k`` mixtures of them, with
    learned ``(k, S)`` matrices ``E`` (keys) and ``F`` (values)::

        K' = E K                       # (k, S) @ (..., S, d_k) -> (..., k, d_k)
        V' = F V                       # (k, S) @ (..., S, d_v) -> (..., k, d_v)
        output = softmax(Q K'ᵀ / sqrt(d_k)) V'    # scores (..., T, k)

    The scores are ``T x k`` instead of ``T x S``: cost and memory linear in
    ``S`` for a fixed ``k``. The price: the output is a product through ``k``
    rows, so as a ``(T, d_v)`` matrix it has rank at most ``k``, and it
    equals full attention only when the projection loses nothing (``k = S``
    and ``E = F = I`` give exactly :func:`attnbook.scaled_dot_product_attention`).
    Mixing the keys across positions also breaks causality, which is why
    Linformer serves encoders, not left-to-right decoders; there is no
    ``causal`` option.

    Args:
        query: shape ``(..., T, d_k)``, floating point.
        key: shape ``(..., S, d_k)``; same dtype as ``query``.
        value: shape ``(..., S, d_v)``; same dtype.
        proj_k: ``E``, shape ``(k, S)``, same dtype: row ``j`` gives the weights of
            the ``S`` keys in projected key ``j``.
        proj_v: ``F``, shape ``(k, S)``, same dtype; default ``proj_k`` (the
            paper's shared-projection variant).

    Returns:
        ``output`` of shape ``(..., T, d_v)``, ``...`` the broadcast of the
        inputs' leading dimensions.
    """
    query, key, value, _, _, scale = check_attention_inputs(query, key, value, None, 0.0, None)
    n_keys = key.shape[-2]
    proj_k = _check_projection(proj_k, "proj_k", n_keys)
    proj_v = proj_k if proj_v is None else _check_projection(proj_v, "proj_v", n_keys)
    if proj_v.shape[0] != proj_k.shape[0]:
        raise ValueError(
            f"proj_v must have shape (k, S) with the same k as proj_k, got proj_k "
            f"{shape_str(proj_k)} and proj_v {shape_str(proj_v)}"
        )
    if not proj_k.dtype == proj_v.dtype == query.dtype:
        raise ValueError(
            f"proj_k and proj_v must have the inputs' dtype {query.dtype}, got {proj_k.dtype} "
            f"and {proj_v.dtype}; convert them, e.g. proj_k.to(query.dtype)"
        )
    key_proj = proj_k @ key  # (k, S) @ (..., S, d_k) -> (..., k, d_k)
    value_proj = proj_v @ value  # (k, S) @ (..., S, d_v) -> (..., k, d_v)
    return attend_fused(query, key_proj, value_proj, None, 0.0, scale)  # (..., T, d_v)
