"""Multi-head attention: several attention heads side by side, then one output projection.

Introduced in chapter 7 (``chapters/07_multi_head_attention.ipynb``); the
transformer blocks of chapter 9 (:mod:`attnbook.block`) are built from it.

One softmax row is one weighted average, so one head can gather only one kind
of information per query. Multi-head attention splits the model width
``d_model`` into ``H`` heads of width ``d_head = d_model / H``; each head
attends on its own (its own scores, its own weights), and the heads' outputs
are concatenated and mixed by an output projection ``W_O``::

    Q = X W_Q,  K = C W_K,  V = C W_V                 # (B, T, D), (B, S, D), (B, S, D)
    split the last axis into H heads of width Dh      # (B, H, T, Dh), (B, H, S, Dh), ...
    O_h = softmax(Q_h K_hᵀ / sqrt(Dh) + mask) V_h     # (B, H, T, Dh), one head each
    output = concat_h(O_h) W_O                        # (B, T, D)

The split costs nothing: the parameters and multiply-adds are those of one
full-width head (plus ``W_O``); only the softmax is taken per head.

Grouped-query attention (chapter 12, Ainslie et al. 2023) lets groups of query
heads share one key/value head: with ``n_kv_heads = H_kv`` dividing ``H``, the
key and value projections produce only ``H_kv`` heads, and query head ``h``
reads key/value head ``h // (H / H_kv)``. ``H_kv = H`` is ordinary multi-head
attention, ``H_kv = 1`` multi-query attention (Shazeer 2019). The saving is in
what generation keeps: a key-value cache stores ``H_kv`` heads instead of ``H``.

Shape legend used in this module:
    ``B`` batch, ``T`` query positions, ``S`` key positions, ``H`` heads
    (``n_heads``), ``D`` model width (``d_model``), ``Dh`` head width
    (``d_head = D / H``), ``H_kv`` key/value heads (``n_kv_heads``), ``G``
    query heads per key/value head (``H / H_kv``).

Masks follow the package's convention (:mod:`attnbook.masking`): boolean with
``True`` = *may attend*, or additive floats (``0`` keeps, ``-inf`` blocks),
broadcastable to the scores' shape ``(B, H, T, S)``: a causal ``(T, S)`` mask,
a key-padding ``(B, 1, 1, S)`` mask (``padding_mask(lengths, per_head=True)``),
a per-head ``(1, H, T, S)`` bias. A 3-D mask ``(X, T, S)`` with ``X > 1`` is
refused as ambiguous: right-aligned broadcasting would read ``X`` as the heads'
axis, so a per-sequence ``(B, T, S)`` mask (or the ``(B, 1, S)`` of
``padding_mask(lengths)``) would silently mask the wrong thing whenever
``B == H``. Give it its missing axis: ``mask[:, None]`` per sequence,
``mask[None]`` per head.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnbook._validation import (
    as_float_tensor,
    check_positive_number,
    check_probability,
    shape_str,
)
from attnbook.attention import _fused_attention, scaled_dot_product_attention
from attnbook.masking import check_mask
from attnbook.positional import apply_rope

__all__ = ["MultiHeadAttention"]


def _check_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


class MultiHeadAttention(nn.Module):
    """``H`` attention heads in parallel over one model width, mixed by an output projection.

    Each head can attend to different positions for a different reason (one
    to the previous token, one to a matching token, ...), which one softmax
    cannot do at once. The same module serves the three uses in a
    transformer: encoder self-attention (``query = key = value = X``), masked
    decoder self-attention (``is_causal=True``) and encoder-decoder
    cross-attention (``query = X``, ``key = value = C``, ``T != S`` allowed).

    The four maps are ``nn.Linear(d_model, d_model)`` members ``q_proj``,
    ``k_proj``, ``v_proj`` and ``out_proj``; ``q_proj.weight`` holds ``W_Qᵀ``
    (``nn.Linear`` computes ``x @ weight.T``), whose rows ``h * Dh`` to
    ``(h + 1) * Dh - 1`` make head ``h``'s queries (likewise for keys and values).
    In self-attention the three input projections run as one matrix multiply
    with their weights stacked (same result, fewer passes over ``X``).

    With ``n_kv_heads < n_heads`` (grouped-query attention), ``k_proj`` and
    ``v_proj`` are ``nn.Linear(d_model, n_kv_heads * d_head)``: each of the
    ``n_kv_heads`` key/value heads serves ``G = n_heads // n_kv_heads``
    consecutive query heads (query head ``h`` uses key/value head ``h // G``).
    The result equals ordinary multi-head attention whose key and value
    projections repeat each key/value head's rows ``G`` times.

    Args:
        d_model: ``D``, the width of inputs and output; a multiple of ``n_heads``.
        n_heads: ``H``, the number of heads; each has width ``d_head = d_model // n_heads``.
        dropout: probability of dropping an attention weight, in training mode only.
        bias: whether the four projections have a bias.
        rope_base: ``None`` (no positions inside attention) or the base (> 1, e.g.
            ``10000.0``) of rotary position embeddings (chapter 8,
            :func:`attnbook.apply_rope`), applied to each head's queries and keys
            before the scores; needs an even ``d_head``. Keys get positions
            ``0..S-1`` and queries the last ``T`` of them, ``S-T..S-1`` (as
            the causal rule aligns them), which is ``0..T-1`` in self-attention.
        n_kv_heads: ``H_kv``, the number of key/value heads, which must divide
            ``n_heads``: ``None`` (default) means ``n_heads`` (multi-head
            attention), ``1`` multi-query attention, in between grouped-query.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        rope_base: float | None = None,
        n_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        self.d_model = _check_count(d_model, "d_model")
        self.n_heads = _check_count(n_heads, "n_heads")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model must be a multiple of n_heads (each head gets d_model // n_heads "
                f"features), got d_model = {self.d_model} and n_heads = {self.n_heads}"
            )
        self.d_head = self.d_model // self.n_heads
        self.n_kv_heads = (
            self.n_heads if n_kv_heads is None else _check_count(n_kv_heads, "n_kv_heads")
        )
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(
                f"n_kv_heads must divide n_heads (each key/value head serves n_heads // "
                f"n_kv_heads query heads), got n_heads = {self.n_heads} and n_kv_heads = "
                f"{self.n_kv_heads}"
            )
        self.dropout = check_probability(dropout, "dropout")
        if not isinstance(bias, bool):
            raise ValueError(f"bias must be True or False, got {bias!r}")
        if rope_base is not None and check_positive_number(rope_base, "rope_base") <= 1.0:
            raise ValueError(
                f"rope_base must be a number > 1 (rotary frequencies rope_base^(-2i/d_head) must "
                f"decrease), got {rope_base}"
            )
        self.rope_base = None if rope_base is None else float(rope_base)
        if self.rope_base is not None and self.d_head % 2 != 0:
            raise ValueError(
                "rope_base needs an even head width d_head = d_model // n_heads (rotary "
                f"embeddings rotate pairs of features), got d_head = {self.d_head}"
            )
        self.q_proj = nn.Linear(self.d_model, self.d_model, bias=bias)  # weight (D, D) = W_Qᵀ
        d_kv = self.n_kv_heads * self.d_head  # = D unless grouped-query
        self.k_proj = nn.Linear(self.d_model, d_kv, bias=bias)  # weight (H_kv * Dh, D) = W_Kᵀ
        self.v_proj = nn.Linear(self.d_model, d_kv, bias=bias)  # weight (H_kv * Dh, D) = W_Vᵀ
        self.out_proj = nn.Linear(self.d_model, self.d_model, bias=bias)  # weight (D, D) = W_Oᵀ

    def extra_repr(self) -> str:
        rope = "" if self.rope_base is None else f", rope_base={self.rope_base}"
        kv = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}{kv}, d_head={self.d_head}, "
            f"dropout={self.dropout}{rope}"
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        *,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` with every head; check the inputs first.

        Pass the same tensor three times for self-attention, ``(X, C, C)`` for
        cross-attention.

        Args:
            query: ``X``, shape ``(B, T, d_model)``.
            key: ``C``, shape ``(B, S, d_model)``.
            value: shape ``(B, S, d_model)`` (usually the same tensor as ``key``).
            mask: ``None``, a boolean mask (``True`` = may attend) or an additive
                float mask, broadcastable to the scores' shape ``(B, H, T, S)``,
                e.g. ``(T, S)`` or ``(B, 1, 1, S)``.
            need_weights: also return every head's attention weights (computed
                explicitly). With ``False`` (the default) the weights are never
                stored and PyTorch's fused kernel does the attention.
            is_causal: apply the causal rule of :func:`attnbook.causal_mask`
                (ANDed with ``mask``; bottom-right aligned when ``T != S``)
                without building a mask, which keeps the fastest kernel eligible.

        Returns:
            ``(output, weights)``: ``output`` of shape ``(B, T, d_model)``, and
            ``weights`` of shape ``(B, H, T, S)`` (after dropout, those used),
            or ``None`` when ``need_weights=False``. A query that may attend to
            no key gets weights 0 and an attention output of zeros (so its
            ``output`` row is ``out_proj``'s bias), never NaN.
        """
        query, key, value, mask = self._validate(query, key, value, mask)
        for flag, name in ((need_weights, "need_weights"), (is_causal, "is_causal")):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        return self._forward_unchecked(query, key, value, mask, is_causal, need_weights)

    def _validate(
        self, query: object, key: object, value: object, mask: object
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Check :meth:`forward`'s inputs; return them (an additive mask in the inputs' dtype)."""
        names = (("query", "(B, T, d_model)"), ("key", "(B, S, d_model)"))
        names += (("value", "(B, S, d_model)"),)
        tensors = []
        for x, (name, needed) in zip((query, key, value), names):
            x = as_float_tensor(x, name, needed)
            if x.ndim != 3 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have shape {needed} with d_model = {self.d_model}, "
                    f"got {shape_str(x)}"
                )
            if x.shape[1] == 0:
                raise ValueError(f"{name} must have shape {needed} with at least one position")
            tensors.append(x)
        query, key, value = tensors
        if not query.dtype == key.dtype == value.dtype == self.q_proj.weight.dtype:
            raise ValueError(
                "query, key and value must have the module's dtype "
                f"{self.q_proj.weight.dtype}, got {query.dtype}, {key.dtype} and {value.dtype}; "
                "convert the inputs (x.to(dtype)) or the module (module.to(dtype))"
            )
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must share the batch size B, got query "
                f"{shape_str(query)}, key {shape_str(key)} and value {shape_str(value)}"
            )
        if value.shape[1] != key.shape[1]:
            raise ValueError(
                f"value must have shape (B, S, d_model) with S = {key.shape[1]} (one value per "
                f"key), got value {shape_str(value)} for key {shape_str(key)}"
            )
        if mask is not None:
            scores_shape = (query.shape[0], self.n_heads, query.shape[1], key.shape[1])
            if isinstance(mask, torch.Tensor) and mask.ndim == 3 and mask.shape[0] != 1:
                raise ValueError(
                    f"mask of shape {shape_str(mask)} is ambiguous for the scores' shape "
                    f"(B, H, T, S) = ({', '.join(map(str, scores_shape))}): its "
                    "first axis would be read as the heads' axis. Add the missing axis: "
                    "mask[:, None] for one mask per sequence (B, 1, T, S) (a padding mask: "
                    "padding_mask(lengths, per_head=True)), mask[None] for one per head (1, H, T, S)"
                )
            mask = check_mask(mask, scores_shape)
            if mask.dtype != torch.bool:
                mask = mask.to(query.dtype)
        return query, key, value, mask

    def _project(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The three input projections, split into heads.

        Returns ``q`` ``(B, H, T, Dh)`` and ``k``, ``v`` ``(B, H_kv, S, Dh)``
        (``H_kv = H`` unless grouped-query).
        """
        B, T, _ = query.shape
        S = key.shape[1]
        H, H_kv, Dh = self.n_heads, self.n_kv_heads, self.d_head
        if query is key and key is value:  # self-attention: one multiply for Q, K and V
            weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            bias = self.q_proj.bias
            if bias is not None:
                bias = torch.cat([bias, self.k_proj.bias, self.v_proj.bias])  # (D + 2 H_kv Dh,)
            qkv = F.linear(query, weight, bias)  # (B, T, D) @ (D, D + 2 H_kv Dh) -> (B, T, ...)
            if H_kv == H:
                qkv = qkv.view(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh), no copy
                q, k, v = qkv.unbind(0)  # each (B, H, T, Dh)
                return q, k, v
            q, k, v = qkv.split([H * Dh, H_kv * Dh, H_kv * Dh], dim=-1)  # views, no copy
            q = q.view(B, T, H, Dh).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)
            k = k.view(B, T, H_kv, Dh).transpose(1, 2)  # (B, T, H_kv Dh) -> (B, H_kv, T, Dh)
            v = v.view(B, T, H_kv, Dh).transpose(1, 2)  # (B, T, H_kv Dh) -> (B, H_kv, T, Dh)
            return q, k, v
        q = self.q_proj(query).view(B, T, H, Dh).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)
        k = self.k_proj(key).view(B, S, H_kv, Dh).transpose(1, 2)  # (B, S, ...) -> (B, H_kv, S, Dh)
        v = self.v_proj(value).view(B, S, H_kv, Dh).transpose(1, 2)  # (B, H_kv, S, Dh)
        return q, k, v

    def _repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        """Give each query head its key/value head: ``(B, H_kv, S, Dh)`` -> ``(B, H, S, Dh)``.

        Key/value head ``j`` is repeated for query heads ``j * G .. (j + 1) * G - 1``
        (``torch.repeat_interleave`` along the heads' axis). A copy, kept simple:
        the memory that grouped-query attention saves is the cache's, which
        stores only the ``H_kv`` heads.
        """
        if self.n_kv_heads == self.n_heads:
            return x
        B, H_kv, S, Dh = x.shape
        G = self.n_heads // H_kv
        x = x[:, :, None].expand(B, H_kv, G, S, Dh)  # (B, H_kv, G, S, Dh), a view
        return x.reshape(B, H_kv * G, S, Dh)  # (B, H, S, Dh): head h reads kv head h // G

    def _rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary embeddings of each head's queries ``(B, H, T, Dh)`` and keys ``(B, H, S, Dh)``.

        Keys sit at positions ``0..S-1``; queries at the *last* ``T`` of them,
        ``S-T..S-1``, the same bottom-right alignment as the causal rule, so
        ``T`` new tokens attending to ``S`` keys (the ``S - T`` before them
        and themselves) rotate exactly as they would inside the full sequence.
        """
        n_queries, n_keys = q.shape[-2], k.shape[-2]
        positions = None  # arange(T) for the queries, as for the keys when T == S
        if n_queries != n_keys:
            positions = torch.arange(n_keys - n_queries, n_keys, device=q.device)  # (T,)
        q = apply_rope(q, positions, self.rope_base)  # (B, H, T, Dh)
        k = apply_rope(k, None, self.rope_base)  # (B, H, S, Dh), positions 0..S-1
        return q, k

    def _forward_unchecked(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`forward` without any input check: the hot path of the transformer blocks.

        The caller guarantees what :meth:`forward` checks: 3-D inputs of width
        ``d_model`` and the module's dtype, one batch size, ``key`` and
        ``value`` of one length, and ``mask`` ``None``, boolean or additive,
        broadcastable to ``(B, H, T, S)``. A model validates its own input once
        and then calls this in every layer, every step.
        """
        q, k, v = self._project(query, key, value)  # (B, H, T, Dh), (B, H_kv, S, Dh) x 2
        if self.rope_base is not None:
            q, k = self._rotate(q, k)  # (B, H, T, Dh), (B, H_kv, S, Dh)
        return self._attend(
            q, self._repeat_kv(k), self._repeat_kv(v), mask, is_causal, need_weights
        )

    def _forward_cached(
        self,
        x: torch.Tensor,
        past_key: torch.Tensor | None,
        past_value: torch.Tensor | None,
        mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Causal self-attention of ``T`` new positions to the cached ones and to themselves.

        The step of generation with a key-value cache (chapter 12): the keys and
        values of earlier positions never change in a causal model, so they are
        computed once, kept, and only the new positions are projected. With
        rotary embeddings the new queries and keys are rotated at their true
        positions ``S_past..S_past+T-1`` before the keys are stored. No input
        checks (the model's ``prefill``/``decode`` check theirs).

        Args:
            x: the new positions' inputs, shape ``(B, T, D)``.
            past_key: the cached keys ``(B, H_kv, S_past, Dh)`` (already rotated), or
                ``None`` when nothing is cached yet (then ``S_past = 0``).
            past_value: the cached values ``(B, H_kv, S_past, Dh)``, or ``None``.
            mask: ``None`` for the causal rule (bottom-right aligned), or an
                additive mask broadcastable to ``(B, H, T, S_past + T)`` that
                already holds it (ALiBi's bias rows).

        Returns:
            ``(output, key, value)``: ``output`` ``(B, T, D)``, and the keys and
            values of all ``S = S_past + T`` positions, ``(B, H_kv, S, Dh)`` each,
            fresh contiguous tensors for the cache.
        """
        T = x.shape[1]
        q, k, v = self._project(x, x, x)  # (B, H, T, Dh), (B, H_kv, T, Dh) x 2
        n_past = 0 if past_key is None else past_key.shape[-2]
        if self.rope_base is not None:
            positions = None  # arange(T) when nothing is cached, as in _rotate
            if n_past:
                positions = torch.arange(n_past, n_past + T, device=x.device)  # (T,)
            q = apply_rope(q, positions, self.rope_base)  # (B, H, T, Dh)
            k = apply_rope(k, positions, self.rope_base)  # (B, H_kv, T, Dh)
        if past_key is None or past_value is None:
            k, v = k.contiguous(), v.contiguous()  # own memory, not views into the QKV product
        else:
            k = torch.cat([past_key, k], dim=-2)  # (B, H_kv, S_past + T, Dh)
            v = torch.cat([past_value, v], dim=-2)  # (B, H_kv, S_past + T, Dh)
        output, _ = self._attend(
            q, self._repeat_kv(k), self._repeat_kv(v), mask, mask is None, False
        )  # (B, T, D)
        return output, k, v

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of per-head ``q`` ``(B, H, T, Dh)`` to ``k``, ``v`` ``(B, H, S, Dh)``, then ``W_O``."""
        B, _, T, _ = q.shape
        dropout_p = self.dropout if self.training else 0.0
        if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)  # e.g. a float32 bias under bf16 autocast
        scale = 1.0 / math.sqrt(self.d_head)
        if need_weights:
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p, scale, need_weights=True, is_causal=is_causal
            )  # (B, H, T, Dh), (B, H, T, S)
        else:
            heads = _fused_attention(q, k, v, mask, dropout_p, scale, is_causal)  # (B, H, T, Dh)
            weights = None
        heads = heads.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, H, Dh) -> (B, T, D)
        return self.out_proj(heads), weights  # (B, T, D) @ (D, D) -> (B, T, D)
