"""Scaled dot-product attention, and a single attention head that learns its projections.

Introduced in chapter 4 (``chapters/04_scaled_dot_product_attention.ipynb``);
:class:`SingleHeadAttention` in chapter 5 (``chapters/05_qkv_projections.ipynb``,
self- and cross-attention); masks in chapter 6 (see :mod:`attnbook.masking` for
the mask convention: ``True`` means *may attend*).

Attention is three steps: score every query against every key, turn each row
of scores into weights with a softmax, and average the values with those
weights::

    output = softmax(query @ keyᵀ / sqrt(d_k) + mask) @ value

Shape legend used in this module:
    ``B`` batch, ``T`` query positions, ``S`` key positions, ``D`` model width
    (of the queries' inputs), ``D_ctx`` width of the context's inputs,
    ``d_k`` query/key width, ``d_v`` value width, ``...`` any leading batch
    dimensions (they broadcast like NumPy's).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnbook._validation import (
    as_float_tensor,
    broadcast_shape,
    check_bool,
    check_dtype,
    check_int,
    check_mask,
    check_positive_number,
    check_probability,
    shape_str,
)
from attnbook.masking import causal_mask, empty_rows, softmax_with_mask

__all__ = ["SingleHeadAttention", "scaled_dot_product_attention"]


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention core, with NO input checks: ``(output (..., T, d_v), weights (..., T, S))``.

    :func:`scaled_dot_product_attention` checks its arguments and calls this;
    so do the package's modules once they have checked theirs.
    """
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    # The queries scaled, not the product: in float16, q . k can pass 65504 (and become inf)
    # where q . k / sqrt(d_k) does not.
    scores = (query * scale) @ key.transpose(-2, -1)  # (..., T, d_k) @ (..., d_k, S) -> (..., T, S)
    weights = softmax_with_mask(scores, mask)  # (..., T, S); a row with no allowed key: all 0
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)  # (..., T, S)
    return weights @ value, weights  # (..., T, S) @ (..., S, d_v) -> (..., T, d_v)


def check_attention_inputs(
    query: object,
    key: object,
    value: object,
    mask: object = None,
    dropout_p: object = 0.0,
    scale: object = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, float, float]:
    """Check the arguments of :func:`scaled_dot_product_attention`; return them normalised.

    For the package's own use (:mod:`attnbook.efficient` checks its inputs
    with it too): raises ``ValueError`` naming the argument and the shape it
    needs, and returns ``(query, key, value, mask, dropout_p, scale)`` with an
    additive mask in the inputs' dtype and ``scale`` filled in.
    """
    query = as_float_tensor(query, "query", "(..., T, d_k)")
    key = as_float_tensor(key, "key", "(..., S, d_k)")
    value = as_float_tensor(value, "value", "(..., S, d_v)")
    for x, name, needed in (
        (query, "query", "(..., T, d_k)"),
        (key, "key", "(..., S, d_k)"),
        (value, "value", "(..., S, d_v)"),
    ):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape {needed} (at least 2-D), got {shape_str(x)}")
    if not query.dtype == key.dtype == value.dtype:
        raise ValueError(
            "query, key and value must share one dtype, got "
            f"{query.dtype}, {key.dtype} and {value.dtype}; convert them, e.g. key.to(query.dtype)"
        )
    d_k = query.shape[-1]
    if d_k == 0:
        raise ValueError(
            f"query must have shape (..., T, d_k) with d_k >= 1, got {shape_str(query)}"
        )
    if key.shape[-1] != d_k:
        raise ValueError(
            f"key must have shape (..., S, d_k) with d_k = {d_k} (query's last dimension), "
            f"got key {shape_str(key)} for query {shape_str(query)}"
        )
    n_keys = key.shape[-2]
    if n_keys == 0:
        raise ValueError(f"key must have shape (..., S, d_k) with S >= 1, got {shape_str(key)}")
    if value.shape[-2] != n_keys:
        raise ValueError(
            f"value must have shape (..., S, d_v) with S = {n_keys} (one value per key), "
            f"got value {shape_str(value)} for key {shape_str(key)}"
        )
    batch = broadcast_shape(tuple(query.shape[:-2]), tuple(key.shape[:-2]), tuple(value.shape[:-2]))
    if batch is None:
        raise ValueError(
            f"the batch dimensions of query {shape_str(query)}, key {shape_str(key)} and value "
            f"{shape_str(value)} do not broadcast; they need shapes (..., T, d_k), (..., S, d_k) "
            "and (..., S, d_v) whose leading dimensions '...' are equal or 1"
        )
    if mask is not None:
        mask = check_mask(mask, (*batch, query.shape[-2], n_keys), dtype=query.dtype)
    dropout_p = check_probability(dropout_p, "dropout_p")
    scale = 1.0 / math.sqrt(d_k) if scale is None else check_positive_number(scale, "scale")
    return query, key, value, mask, dropout_p, scale


def with_causal(
    mask: torch.Tensor | None, n_queries: int, n_keys: int, device: torch.device
) -> torch.Tensor | None:
    """AND the bottom-right causal rule into ``mask`` (``None``, boolean or additive); unchecked."""
    if n_queries == 1:
        # The single query (a decode step) sits at the last position and sees every key: no
        # (1, S) all-True mask, which would rule out the flash kernel on CUDA.
        return mask
    causal = causal_mask(n_queries, n_keys, device=device)  # (T, S), True = may attend
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal  # (..., T, S)
    return mask.masked_fill(~causal, -math.inf)  # (..., T, S), additive


def attend_fused(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    *,
    is_causal: bool = False,
) -> torch.Tensor:
    """What :func:`attend` computes, by PyTorch's fused kernel, weights never stored; NO checks.

    The fastest path (``F.scaled_dot_product_attention``): far less memory for
    long sequences. The caller has checked everything, as
    :func:`check_attention_inputs` does. ``is_causal`` is ANDed with ``mask``
    and aligned bottom-right (query ``t`` sees keys ``0..t + S - T``); without
    a mask and with ``T == S`` it goes straight to the kernel's own
    ``is_causal`` (the two alignments agree there), which keeps the flash
    backend eligible. A row with no allowed key gets an output of zeros, as in
    :func:`attend` (found by :func:`attnbook.masking.empty_rows`, from the mask alone).

    Returns:
        ``output`` of shape ``(..., T, d_v)``.
    """
    n_queries, n_keys = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        # Different batch shapes: give all three the full batch (views, no copy), so that a
        # mask with the batch of only one of them, e.g. (B, 1, S), still fits the kernel.
        batch = broadcast_shape(
            tuple(query.shape[:-2]), tuple(key.shape[:-2]), tuple(value.shape[:-2])
        )
        query = query.expand(*batch, *query.shape[-2:])  # (..., T, d_k)
        key = key.expand(*batch, *key.shape[-2:])  # (..., S, d_k)
        value = value.expand(*batch, *value.shape[-2:])  # (..., S, d_v)
    if query.ndim < 4:
        # PyTorch's fused kernels (flash, memory-efficient) take only 4-D inputs: a (T, d_k)
        # or (B, T, d_k) query would run its math path, which builds the (..., T, S) weights.
        # Leading 1s (views, no copy) make it (1, 1, T, d_k); the mask broadcasts as before.
        lead = (None,) * (4 - query.ndim)
        output = attend_fused(
            query[lead], key[lead], value[lead], mask, dropout_p, scale, is_causal=is_causal
        )  # (1, ..., T, d_v)
        return output[(0,) * len(lead)]  # (..., T, d_v)
    if is_causal and mask is None and n_queries == n_keys:
        return F.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout_p, is_causal=True, scale=scale
        )  # (..., T, d_v)
    if is_causal:
        mask = with_causal(mask, n_queries, n_keys, query.device)
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p, scale=scale)
    if mask.ndim == 1:
        mask = mask[None]  # (S,) -> (1, S): the kernel wants a mask of at least 2-D
    empty = empty_rows(mask)  # (..., T or 1, 1), or None
    if empty is not None:
        # Depending on version and backend, the fused kernel returns NaN or 0 for such rows
        # (and NaN gradients); let it attend everywhere there, then zero those rows.
        mask = mask | empty if mask.dtype == torch.bool else mask.masked_fill(empty, 0.0)
    output = F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale
    )  # (..., T, d_v)
    return output if empty is None else output.masked_fill(empty, 0.0)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    *,
    need_weights: bool = True,
    is_causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention: each query's output is an average of the values, weighted by softmax(scores).

    Dividing the scores by ``sqrt(d_k)`` keeps their spread near 1 whatever the
    width, so the softmax neither saturates (vanishing gradients) nor goes flat
    (chapter 4). This is the operation every transformer layer repeats.

    Dropout, when ``dropout_p > 0``, zeroes each weight with probability
    ``dropout_p`` and scales the rest by ``1 / (1 - dropout_p)``; it applies
    whenever ``dropout_p > 0`` (as in ``F.scaled_dot_product_attention``), so a
    module passes ``dropout_p=0.0`` in eval mode. The returned ``weights`` are
    the ones *after* dropout, those actually used, so ``output == weights @ value``
    always holds (``nn.MultiheadAttention`` returns the same).

    A query whose mask row allows no key gets weights 0 and an output row of
    zeros, not NaN (see :mod:`attnbook.masking`), on both paths. The inputs are
    not scanned for NaN or infinities (a pass over them, and a wait for the
    device, on every call): a NaN or an infinite query, key or value gives NaN.

    Args:
        query: shape ``(..., T, d_k)``, floating point.
        key: shape ``(..., S, d_k)``; same dtype as ``query``.
        value: shape ``(..., S, d_v)``; same dtype. Leading dimensions of the
            three broadcast against each other.
        mask: ``None``, a boolean tensor (``True`` = may attend) or an additive
            float tensor (``0`` keeps, ``-inf`` blocks, added to the scaled
            scores), that broadcasts to the scores' shape ``(..., T, S)``,
            where ``...`` is the broadcast of the inputs' leading dimensions:
            aligned from the right, each of its dimensions is 1 or equal to
            the scores'. It may have fewer dimensions (``(T, S)``, ``(S,)``,
            ``(B, 1, S)`` for ``(B, T, S)`` scores, ``(B, 1, 1, S)`` for
            ``(B, H, T, S)``) but not more, and it cannot enlarge the batch:
            a ``(B, 1, S)`` mask with unbatched ``(T, d_k)`` inputs raises
            ``ValueError`` instead of silently returning ``B`` outputs.
        dropout_p: probability in ``[0, 1)`` of dropping each weight.
        scale: the factor multiplying ``query @ keyᵀ``; default ``1 / sqrt(d_k)``.
        need_weights: if ``False``, skip materialising the weights and call
            PyTorch's fused ``F.scaled_dot_product_attention`` (faster, far less
            memory for long sequences); the result is then ``(output, None)``.
            PyTorch runs a fused kernel only on 4-D inputs (and under further
            conditions, e.g. ``d_v = d_k`` for its flash kernel): inputs with
            fewer leading dimensions are viewed as 4-D here; otherwise (more
            than two leading dimensions, ``d_v != d_k`` on the CPU) it falls back
            to its math path, which builds the ``(..., T, S)`` weights.
        is_causal: if ``True``, also apply the causal rule of
            :func:`attnbook.causal_mask` (ANDed with ``mask``), aligned
            bottom-right when ``T != S``: query ``t`` sits at position
            ``t + S - T`` and sees keys ``0..t + S - T``, as generation with a
            key-value cache needs. (PyTorch's own ``is_causal`` aligns top-left
            when ``T != S``.) No ``(T, S)`` mask is built when ``T == S`` and
            ``mask`` is ``None`` on the fused path.

    Returns:
        ``(output, weights)``: ``output`` of shape ``(..., T, d_v)`` and
        ``weights`` of shape ``(..., T, S)`` (``None`` when ``need_weights=False``),
        where ``...`` is the broadcast of the leading dimensions of ``query``,
        ``key`` and ``value`` (the mask never adds to it).
    """
    query, key, value, mask, dropout_p, scale = check_attention_inputs(
        query, key, value, mask, dropout_p, scale
    )
    check_bool(is_causal, "is_causal")
    check_bool(need_weights, "need_weights")
    if not need_weights:
        return attend_fused(query, key, value, mask, dropout_p, scale, is_causal=is_causal), None
    if is_causal:
        mask = with_causal(mask, query.shape[-2], key.shape[-2], query.device)
    return attend(query, key, value, mask, dropout_p, scale)


def check_torch_twin(
    theirs: object, *, embed_dim: int, num_heads: int, kdim: int, bias: bool
) -> nn.MultiheadAttention:
    """``theirs``, if it is an ``nn.MultiheadAttention`` that can hold a copy of our weights.

    The check of every ``copy_to`` into PyTorch's attention: its widths and
    its number of heads must be ours (``kdim`` is also its ``vdim``), it must
    have biases if we have (without ours, the copy zeroes its biases), and it
    must add nothing of its own (``add_bias_kv``, ``add_zero_attn``);
    otherwise a ``ValueError`` says what differs.
    """
    if not isinstance(theirs, nn.MultiheadAttention):
        raise ValueError(f"theirs must be an nn.MultiheadAttention, got {type(theirs).__name__}")
    got = (theirs.embed_dim, theirs.num_heads, theirs.kdim, theirs.vdim)
    needed = (embed_dim, num_heads, kdim, kdim)
    if got != needed:
        raise ValueError(
            f"theirs must have (embed_dim, num_heads, kdim, vdim) = {needed}, got {got}"
        )
    if theirs.bias_k is not None or theirs.add_zero_attn:
        raise ValueError("theirs must have add_bias_kv=False and add_zero_attn=False")
    if bias and theirs.in_proj_bias is None:
        raise ValueError("theirs must have biases (bias=True), as the module copied into it has")
    return theirs


class SingleHeadAttention(nn.Module):
    """One attention head with learned projections: ``Q = X W_Q``, ``K = C W_K``, ``V = C W_V``.

    The inputs are not queries, keys and values yet: three learned linear maps
    decide what each position asks for (query), what it offers to be found by
    (key) and what it hands over when found (value). With no context ``C`` the
    sequence attends to itself (self-attention); with one, the queries come
    from ``X`` and keys and values from ``C`` (cross-attention, ``T != S`` allowed).

    There is no output projection ``W_O``: it arrives with multi-head
    attention. ``q_proj.weight`` holds ``W_Qᵀ`` (``nn.Linear`` computes ``x @ weight.T``),
    and likewise for ``k_proj`` and ``v_proj``.

    Args:
        d_model: ``D``, the width of the query inputs ``x_query``.
        d_k: width of queries and keys.
        d_v: width of values and of the output (default: ``d_k``).
        d_context: ``D_ctx``, the width of the context inputs (default: ``d_model``).
        bias: whether the three projections have a bias.
        dropout: probability of dropping an attention weight, in training mode only.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int,
        d_v: int | None = None,
        *,
        d_context: int | None = None,
        bias: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.d_k = check_int(d_k, "d_k")
        self.d_v = check_int(d_k if d_v is None else d_v, "d_v")
        self.d_context = check_int(d_model if d_context is None else d_context, "d_context")
        self.dropout = check_probability(dropout, "dropout")
        bias = check_bool(bias, "bias")
        self.q_proj = nn.Linear(self.d_model, self.d_k, bias=bias)  # weight (d_k, D) = W_Qᵀ
        self.k_proj = nn.Linear(self.d_context, self.d_k, bias=bias)  # weight (d_k, D_ctx) = W_Kᵀ
        self.v_proj = nn.Linear(self.d_context, self.d_v, bias=bias)  # weight (d_v, D_ctx) = W_Vᵀ

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}, dropout={self.dropout}"

    def forward(
        self,
        x_query: torch.Tensor,
        x_context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x_query`` to ``x_context`` (or to itself).

        Args:
            x_query: shape ``(..., T, D)``.
            x_context: shape ``(..., S, D_ctx)``, or ``None`` for self-attention (``S = T``).
            mask: optional boolean (``True`` = may attend) or additive mask,
                broadcastable to ``(..., T, S)``.
            need_weights: as in :func:`scaled_dot_product_attention`.

        Returns:
            ``(output, weights)`` of shapes ``(..., T, d_v)`` and ``(..., T, S)``
            (``weights`` is ``None`` when ``need_weights=False``).
        """
        x_query = as_float_tensor(x_query, "x_query", "(..., T, d_model)")
        if x_query.ndim < 2 or x_query.shape[-1] != self.d_model:
            raise ValueError(
                f"x_query must have shape (..., T, d_model) with d_model = {self.d_model}, "
                f"got {shape_str(x_query)}"
            )
        context_name = "x_context"
        if x_context is None:
            if self.d_context != self.d_model:
                raise ValueError(
                    f"x_context is None (self-attention), but this module was built for a "
                    f"context of width d_context = {self.d_context} != d_model = {self.d_model}"
                )
            x_context, context_name = x_query, "x_query"  # the keys are the queries' positions
        x_context = as_float_tensor(x_context, "x_context", "(..., S, d_context)")
        if x_context.ndim < 2 or x_context.shape[-1] != self.d_context:
            raise ValueError(
                f"x_context must have shape (..., S, d_context) with d_context = {self.d_context}, "
                f"got {shape_str(x_context)}"
            )
        if x_context.shape[-2] == 0:  # named here: attention would blame its "key"
            raise ValueError(
                f"{context_name} must have at least one position to attend to (S >= 1), got "
                f"{shape_str(x_context)}"
            )
        check_dtype({"x_query": x_query, "x_context": x_context}, self.q_proj.weight.dtype)
        if broadcast_shape(tuple(x_query.shape[:-2]), tuple(x_context.shape[:-2])) is None:
            raise ValueError(
                f"x_query and x_context must have leading (batch) dimensions that broadcast "
                f"together, got x_query {shape_str(x_query)} and x_context {shape_str(x_context)}"
            )
        q = self.q_proj(x_query)  # (..., T, D) @ (D, d_k) -> (..., T, d_k)
        k = self.k_proj(x_context)  # (..., S, D_ctx) @ (D_ctx, d_k) -> (..., S, d_k)
        v = self.v_proj(x_context)  # (..., S, D_ctx) @ (D_ctx, d_v) -> (..., S, d_v)
        dropout_p = self.dropout if self.training else 0.0
        return scaled_dot_product_attention(q, k, v, mask, dropout_p, need_weights=need_weights)

    def copy_to(self, theirs: nn.MultiheadAttention) -> None:
        """Copy this head into ``theirs``, a one-head ``torch.nn.MultiheadAttention`` of our widths.

        ``theirs`` then computes what this head computes: its query, key and
        value projections get ours (stacked in its ``in_proj_weight`` ``(3 D, D)``
        when ``d_context = d_model``, else in its ``q_proj_weight``,
        ``k_proj_weight`` and ``v_proj_weight``), and its output projection,
        which a single head does not have, becomes the identity. See :meth:`to_torch`.

        Args:
            theirs: ``nn.MultiheadAttention(d_model, 1, kdim=d_context, vdim=d_context)``,
                with biases if this head has them.

        Raises:
            ValueError: if this head has no PyTorch twin (``d_k`` or ``d_v`` differs
                from ``d_model``) or ``theirs`` has other widths, heads or biases.
        """
        self._check_widths_for_torch()
        bias = self.q_proj.bias is not None
        check_torch_twin(
            theirs, embed_dim=self.d_model, num_heads=1, kdim=self.d_context, bias=bias
        )
        projections = (self.q_proj, self.k_proj, self.v_proj)
        with torch.no_grad():
            if theirs.in_proj_weight is not None:  # d_context = d_model: one stacked weight
                theirs.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))  # (3 D, D)
            else:  # weights (D, D), (D, D_ctx), (D, D_ctx)
                for mine, their_weight in zip(
                    projections, (theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight)
                ):
                    their_weight.copy_(mine.weight)
            if bias:
                theirs.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))  # (3 D,)
            elif theirs.in_proj_bias is not None:
                theirs.in_proj_bias.zero_()  # a head without biases: theirs add nothing
            nn.init.eye_(theirs.out_proj.weight)  # (D, D): a single head has no W_O
            if theirs.out_proj.bias is not None:
                theirs.out_proj.bias.zero_()

    def to_torch(self) -> nn.MultiheadAttention:
        """A one-head ``torch.nn.MultiheadAttention`` holding copies of this head's weights.

        It computes the same outputs and weights, which makes it the reference to
        test this head against: ``nn.MultiheadAttention(d_model, 1, kdim=d_context,
        vdim=d_context, batch_first=True)`` with our projections and an identity
        output projection (:meth:`copy_to`); same dropout, device, dtype and
        training mode. Its boolean ``attn_mask`` means *blocked* where ours means
        *may attend*: convert it with :func:`attnbook.to_mha_mask`.

        Returns:
            A new ``nn.MultiheadAttention``; changing it leaves this head unchanged.

        Raises:
            ValueError: if ``d_k`` or ``d_v`` differs from ``d_model``:
                PyTorch projects queries, keys and values to ``embed_dim = d_model``.
        """
        self._check_widths_for_torch()
        weight = self.q_proj.weight
        theirs = nn.MultiheadAttention(
            self.d_model,
            1,
            dropout=self.dropout,
            bias=self.q_proj.bias is not None,
            kdim=self.d_context,
            vdim=self.d_context,
            batch_first=True,
            device=weight.device,
            dtype=weight.dtype,
        )
        self.copy_to(theirs)
        return theirs.train(self.training)

    def _check_widths_for_torch(self) -> None:
        """Raise ``ValueError`` unless ``nn.MultiheadAttention`` can hold this head (``d_k = d_v = D``)."""
        for name, width in (("d_k", self.d_k), ("d_v", self.d_v)):
            if width != self.d_model:
                raise ValueError(
                    f"to_torch() needs {name} = d_model = {self.d_model} (nn.MultiheadAttention "
                    f"projects queries, keys and values to its embed_dim, the width of its "
                    f"queries' inputs), got {name} = {width}"
                )
