"""Reading attention weights: bertviz's input, attention rollout and per-head statistics.

Introduced in chapter 13 (``chapters/13_inside_attention.ipynb``). A picture of
attention invites stories ("this head looks at the verb"); the functions here
turn such a story into a number that a cell can compute and assert:

- :func:`to_bertviz` turns per-layer weights (``GPT.attention_weights`` or a
  Hugging Face model's ``outputs.attentions``) into what ``bertviz.head_view``
  and ``bertviz.model_view`` draw;
- :func:`head_entropy`: how spread out a head's rows are (0 = one key, ``ln S`` =
  uniform);
- :func:`attention_share`: how much weight a head puts on chosen keys (a
  ``[CLS]`` token, the mirrored position of a reverse task, ...);
- :func:`offset_share`: how much weight falls on the key at a fixed offset,
  e.g. the previous token;
- :func:`attention_rollout`: Abnar and Zuidema's (2020) estimate of how much
  each input position flows into each output position through *all* layers.

This module imports neither ``transformers`` nor ``bertviz``: it works on
plain tensors, so the package imports without them.

Shape legend used in this module:
    ``L`` layers, ``B`` batch, ``H`` heads, ``T`` query positions, ``S`` key
    positions, ``...`` any leading dimensions (e.g. ``L, B``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from attnbook._validation import (
    check_finite,
    check_int,
    check_probability,
    compute_dtype,
    shape_str,
)

__all__ = [
    "attention_rollout",
    "attention_share",
    "head_entropy",
    "offset_share",
    "to_bertviz",
]

_WEIGHTS_SHAPE = "(..., H, T, S)"

# The dtypes a tensor of positions may have: those that index and compare on every device.
_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _check_weights(
    weights: object, name: str = "weights", *, rows_sum_to_one: bool = False
) -> torch.Tensor:
    """Validate attention weights of shape ``(..., H, T, S)``: float, finite, in [0, 1].

    With ``rows_sum_to_one`` every row must also sum to 1 (softmax weights) or
    be a row of zeros (a query that may attend to no key, as attention returns
    it), up to the rounding of the weights' dtype.
    """
    if not isinstance(weights, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch tensor of shape {_WEIGHTS_SHAPE}, got {type(weights).__name__}"
            "; stack a list of layers first, e.g. torch.stack(weights)"
        )
    if not torch.is_floating_point(weights):
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {weights.dtype}")
    if weights.ndim < 3:
        raise ValueError(
            f"{name} must have shape {_WEIGHTS_SHAPE} (at least 3 dimensions: heads, "
            f"queries, keys), got {shape_str(weights)}"
        )
    if weights.shape[-1] == 0 or weights.shape[-2] == 0:
        raise ValueError(
            f"{name} must have at least one query and one key, got {shape_str(weights)}"
        )
    if not bool(torch.isfinite(weights).all()):
        raise ValueError(f"{name} must be finite, but it contains NaN or infinite values")
    if bool((weights < 0).any()) or bool((weights > 1 + 1e-4).any()):
        raise ValueError(
            f"{name} must hold attention weights in [0, 1] (after the softmax), "
            f"got values in [{weights.min().item():.3g}, {weights.max().item():.3g}]"
        )
    if rows_sum_to_one:
        sums = weights.sum(dim=-1, dtype=compute_dtype(weights))  # (..., H, T)
        tol = max(1e-3, 4 * torch.finfo(weights.dtype).eps)  # bfloat16 rounds to 2^-8
        bad = ((sums - 1).abs() > tol) & (sums > tol)  # neither 1 nor a row of zeros
        if bool(bad.any()):
            low, high = (v.item() for v in torch.aminmax(sums[bad]))
            raise ValueError(
                f"{name} must have rows summing to 1 (softmax weights over the keys; a row "
                "of zeros, a query that may attend to no key, is accepted too), got rows "
                f"summing to values in [{low:.4g}, {high:.4g}]"
            )
    return weights


def _describe(value: object) -> str:
    """A short description of an argument for an error message: its repr, or type and shape."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(value, torch.Tensor) else "NumPy array"
        return f"a {kind} of dtype {value.dtype} and shape {shape_str(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _as_positions(positions: object, name: str, needed: str) -> torch.Tensor:
    """``positions`` as an integer tensor, or a ``ValueError`` naming ``name`` and ``needed``."""
    index = None
    if not isinstance(positions, (str, bytes)):
        try:
            index = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            index = None  # None, strings, objects, ragged lists, generators, ...
    if index is not None and index.numel() == 0 and not isinstance(positions, torch.Tensor):
        index = index.long()  # [] reads as float32: the caller then says it must not be empty
    if index is None or index.dtype not in _INDEX_DTYPES:
        shown = isinstance(positions, (torch.Tensor, np.ndarray)) or index is None
        kind = "" if shown else f" (dtype {index.dtype})"
        raise ValueError(f"{name} must be {needed}, got {_describe(positions)}{kind}")
    return index


def _query_index(query_positions: object, T: int) -> torch.Tensor | None:
    """``None`` (every query) or a 1-D long tensor of query positions in ``[0, T)``."""
    if query_positions is None:
        return None
    needed = "a 1-D sequence of integer query positions (or None for every query)"
    index = _as_positions(query_positions, "query_positions", needed)
    if index.ndim != 1:
        raise ValueError(f"query_positions must be {needed}, got {_describe(query_positions)}")
    if index.numel() == 0 or bool((index < 0).any()) or bool((index >= T).any()):
        raise ValueError(
            f"query_positions must be non-empty, each in [0, {T}) (T = {T}), "
            f"got {_describe(query_positions)}"
        )
    return index.long()


def to_bertviz(
    weights: Sequence[torch.Tensor],
    tokens: Sequence[str],
    *,
    batch_index: int = 0,
    decimals: int | None = None,
) -> tuple[tuple[torch.Tensor, ...], list[str]]:
    """Turn per-layer attention weights and tokens into the input of bertviz's views.

    ``bertviz.head_view(attention, tokens)`` and ``bertviz.model_view`` want one
    tensor of shape ``(1, H, T, T)`` per layer, on the CPU, and one label per
    position. ``GPT.attention_weights`` returns ``(B, H, T, T)`` per layer
    (maybe on a GPU), and a Hugging Face model called with
    ``output_attentions=True`` returns the same as a tuple; this picks one
    sequence of the batch and checks that the pieces fit together.

    Args:
        weights: one tensor of shape ``(B, H, T, T)`` per layer (a list or a
            tuple), every layer with the same ``B``, ``H`` and ``T``.
        tokens: ``T`` strings, the label of each position (a list, a tuple or
            any other iterable of strings, read once).
        batch_index: which sequence of the batch to show, in ``[-B, B)`` (negative
            counts from the end, as in Python).
        decimals: if given, round the weights to this many decimals and return
            them as float64, so that bertviz writes short numbers such as
            ``0.125`` into its HTML, and last-bit differences between machines
            cannot change the page. ``None`` keeps float32 as computed.

    Returns:
        ``(attention, tokens)``: a tuple of ``n_layers`` tensors of shape
        ``(1, H, T, T)`` (float32 on the CPU, or float64 if ``decimals`` is
        given) and the tokens as a list of ``T`` strings.

    The weights must be finite and non-negative. They need not lie in
    ``[0, 1]`` nor sum to 1 per row: a model in training mode returns its
    weights after dropout (scaled by ``1 / (1 - p)``), and bertviz draws those.
    """
    if isinstance(weights, torch.Tensor) or not isinstance(weights, (list, tuple)):
        raise ValueError(
            "weights must be a list or tuple with one (B, H, T, T) tensor per layer, "
            f"got {type(weights).__name__}"
        )
    if len(weights) == 0:
        raise ValueError("weights must hold at least one layer, got an empty sequence")
    # A set has no order and a str is one label split into characters: both refused.
    if isinstance(tokens, (str, bytes, set, frozenset)) or not isinstance(tokens, Iterable):
        raise ValueError(
            f"tokens must be a sequence of strings, one per position, got {type(tokens).__name__}"
        )
    tokens = list(tokens)  # a generator is read once, here
    if not all(isinstance(tok, str) for tok in tokens):
        kinds = sorted({type(tok).__name__ for tok in tokens if not isinstance(tok, str)})
        raise ValueError(
            "tokens must be a sequence of strings, one per position, got elements of type "
            + ", ".join(kinds)
        )
    if decimals is not None:
        check_int(decimals, "decimals", minimum=0, meaning="or None")
    first = weights[0]
    layers = []
    for i, layer in enumerate(weights):
        if not isinstance(layer, torch.Tensor) or not torch.is_floating_point(layer):
            raise ValueError(f"weights[{i}] must be a floating-point tensor of shape (B, H, T, T)")
        if layer.ndim != 4 or layer.shape[-1] != layer.shape[-2]:
            raise ValueError(
                f"weights[{i}] must have shape (B, H, T, T) (self-attention), "
                f"got {shape_str(layer)}"
            )
        if layer.shape != first.shape:
            raise ValueError(
                f"every layer must have the same shape (B, H, T, T): weights[0] is "
                f"{shape_str(first)}, weights[{i}] is {shape_str(layer)}"
            )
        check_finite(layer, f"weights[{i}]")
        if bool((layer < 0).any()):
            raise ValueError(
                f"weights[{i}] must hold attention weights >= 0 (after the softmax), got "
                f"values down to {layer.min().item():.3g}"
            )
        layers.append(layer)
    B, _, T, _ = first.shape  # (B, H, T, T)
    if B == 0:
        raise ValueError(
            f"weights must hold at least one sequence (B >= 1) to draw, got layers of shape "
            f"(B, H, T, T) = {shape_str(first)}"
        )
    if len(tokens) != T:
        raise ValueError(f"tokens must have one label per position (T = {T}), got {len(tokens)}")
    check_int(batch_index, "batch_index", minimum=-B, maximum=B - 1, meaning=f"B = {B}")
    attention = []
    for layer in layers:
        one = layer[batch_index : batch_index + 1 or None].detach().to("cpu")  # (1, H, T, T)
        one = one.float() if decimals is None else one.double().round(decimals=decimals)
        attention.append(one)
    return tuple(attention), tokens


def attention_rollout(weights: Sequence[torch.Tensor], *, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema, 2020): attention traced through every layer.

    One layer's weights say which positions of *that layer's input* a query
    reads, but after the first layer those inputs are already mixtures of
    tokens, so raw weights of a deep layer say little about input tokens.
    Rollout follows the mixing down to the tokens: average the heads of each
    layer, account for the residual connection (the position keeps part of
    itself) as ``residual * I + (1 - residual) * A``, renormalise the rows, and
    multiply the layers' matrices, the last layer on the left:
    ``R = A'_L ... A'_2 A'_1``. Row ``t`` of ``R`` sums to 1 and says how much
    each input position contributes to position ``t`` at the top, *if* the
    information mixed linearly as the weights say; it ignores the values, the
    output projections and the feed-forward networks.

    A query that may attend to no key has a row of zero weights (what
    :func:`attnbook.scaled_dot_product_attention` returns for it). With
    ``residual > 0`` its row becomes the identity's (the position keeps
    itself); with ``residual = 0`` there is nothing to renormalise and the row
    stays 0: that position receives nothing from the input positions, as its
    attention output is 0, and the rollout stays the plain product of the
    heads' means. Such rows, and rows that read only from them, sum to 0, not 1.

    Args:
        weights: one tensor of shape ``(B, H, T, T)`` per layer (a list or tuple,
            first layer first), or one tensor of shape ``(L, B, H, T, T)``.
        residual: the weight of the identity, in ``[0, 1)``; Abnar and Zuidema use 0.5.

    Returns:
        The rollout, shape ``(B, T, T)``: row ``t`` is over the input positions.

    Raises:
        ValueError: for weights of another shape, outside [0, 1], or with a row that
            neither sums to 1 nor is all 0 (such as weights transposed to (keys, queries)).
    """
    if isinstance(weights, (list, tuple)):
        if len(weights) == 0:
            raise ValueError("weights must hold at least one layer, got an empty sequence")
        shapes = {tuple(w.shape) if isinstance(w, torch.Tensor) else None for w in weights}
        if len(shapes) != 1 or None in shapes:
            raise ValueError("weights must be tensors of one shape (B, H, T, T), one per layer")
        stacked = torch.stack(list(weights))  # (L, B, H, T, T)
    elif isinstance(weights, torch.Tensor):
        stacked = weights
    else:
        raise ValueError(
            "weights must be a list of (B, H, T, T) tensors or one (L, B, H, T, T) tensor, "
            f"got {type(weights).__name__}"
        )
    stacked = _check_weights(stacked, rows_sum_to_one=True)  # e.g. not (keys, queries)
    if stacked.ndim != 5 or stacked.shape[-1] != stacked.shape[-2]:
        raise ValueError(
            f"weights must have shape (L, B, H, T, T) (self-attention), got {shape_str(stacked)}"
        )
    if stacked.shape[0] == 0:
        raise ValueError(
            f"weights must hold at least one layer, got shape (L, B, H, T, T) = "
            f"{shape_str(stacked)}"
        )
    if stacked.shape[2] == 0:
        raise ValueError(
            "weights must have at least one head (H >= 1) to average, got shape "
            f"(L, B, H, T, T) = {shape_str(stacked)}"
        )
    residual = check_probability(residual, "residual")
    B, T = stacked.shape[1], stacked.shape[-1]  # (L, B, H, T, T)
    eye = torch.eye(T, dtype=stacked.dtype, device=stacked.device)  # (T, T)
    rollout = eye.expand(B, T, T)  # (B, T, T): before any layer, each position is itself
    for layer in stacked:  # (B, H, T, T), the first layer first
        mixed = residual * eye + (1 - residual) * layer.mean(dim=1)  # (B, T, T)
        sums = mixed.sum(dim=-1, keepdim=True)  # (B, T, 1)
        # rows sum to 1 again; a row of zeros (residual 0, a query that saw no key) stays 0
        mixed = mixed / sums.masked_fill(sums == 0, 1.0)
        rollout = mixed @ rollout  # (B, T, T) @ (B, T, T) -> (B, T, T)
    return rollout


def head_entropy(weights: torch.Tensor, *, query_positions: object = None) -> torch.Tensor:
    """The mean entropy of each head's rows of weights, in nats.

    A row's entropy ``-sum_s A_ts ln A_ts`` is 0 when the query puts all its
    weight on one key and ``ln S`` when it spreads it evenly over ``S`` keys
    (``ln (t + 1)`` for a causal row). A low-entropy head *selects*; a
    high-entropy head *averages*. Zero weights (masked keys) add nothing, and
    get gradient 0 (the derivative ``ln A + 1`` has no finite value at 0).

    Args:
        weights: attention weights of shape ``(..., H, T, S)``, rows summing to 1
            (a row of zeros, a query that may attend to no key, counts as entropy 0).
        query_positions: the query rows to average over (a 1-D sequence of
            positions); ``None`` averages over all ``T``.

    Returns:
        The mean row entropy of each head, shape ``(..., H)``.
    """
    weights = _check_weights(weights, rows_sum_to_one=True)
    index = _query_index(query_positions, weights.shape[-2])
    if index is not None:
        weights = weights[..., index.to(weights.device), :]  # (..., H, T', S)
    # 0 ln 0 = 0: take the log of 1 where a weight is 0, so that the backward pass never
    # meets log(0) either (0 * inf would make that weight's gradient NaN); it gets 0
    logs = torch.where(weights > 0, weights, torch.ones_like(weights)).log()  # (..., H, T', S)
    # 0.0 minus, not a minus sign: a head of one-hot rows has entropy 0, not -0
    return 0.0 - (weights * logs).sum(dim=-1).mean(dim=-1)  # (..., H, T) -> (..., H)


def attention_share(
    weights: torch.Tensor, key_positions: object, *, query_positions: object = None
) -> torch.Tensor:
    """The mean weight each head puts on chosen keys.

    With ``key_positions = [0]`` this is the weight on the first token (e.g.
    ``[CLS]``); with a boolean ``(T, S)`` selection, each query can have its
    own keys, e.g. the mirrored position ``s = 2n - 1 - t`` of the reverse task.

    Args:
        weights: attention weights of shape ``(..., H, T, S)``.
        key_positions: an int or a 1-D sequence of key positions in ``[0, S)``
            (the same keys for every query; their weights are added, a key named twice
            counting once), or a boolean tensor of shape ``(T, S)``, ``True`` where key
            ``s`` counts for query ``t``.
        query_positions: the query rows to average over; ``None`` means all ``T``.

    Returns:
        The mean, over the queries, of the weight on the chosen keys, shape ``(..., H)``.
    """
    weights = _check_weights(weights)
    T, S = weights.shape[-2:]
    if isinstance(key_positions, torch.Tensor) and key_positions.dtype == torch.bool:
        if key_positions.shape != (T, S):
            raise ValueError(
                f"key_positions as a boolean selection must have shape (T, S) = ({T}, {S}), "
                f"got {shape_str(key_positions)}"
            )
        selected = key_positions.to(weights.device)  # (T, S)
    else:
        needed = "an int, a 1-D sequence of ints or a boolean (T, S) tensor"
        keys = _as_positions(key_positions, "key_positions", needed)
        if keys.ndim == 0:
            keys = keys.reshape(1)
        if keys.ndim != 1:
            raise ValueError(f"key_positions must be {needed}, got {_describe(key_positions)}")
        if keys.numel() == 0 or bool((keys < 0).any()) or bool((keys >= S).any()):
            raise ValueError(
                f"key_positions must be non-empty, each in [0, {S}) (S = {S}), "
                f"got {_describe(key_positions)}"
            )
        selected = torch.zeros(S, dtype=torch.bool, device=weights.device)
        selected[keys.long().to(weights.device)] = True  # (S,): the same keys for every query
        selected = selected.expand(T, S)
    share = (weights * selected).sum(dim=-1)  # (..., H, T)
    index = _query_index(query_positions, T)
    if index is not None:
        share = share[..., index.to(share.device)]  # (..., H, T')
    return share.mean(dim=-1)  # (..., H)


def offset_share(
    weights: torch.Tensor, offset: int = -1, *, query_positions: object = None
) -> torch.Tensor:
    """The mean weight each head puts on the key at ``t + offset``, e.g. the previous token.

    ``offset = -1`` measures a *previous-token head*, ``0`` a head that looks at
    its own position, ``+1`` (bidirectional models only) the next token. Only
    queries whose key ``t + offset`` exists are averaged.

    Args:
        weights: self-attention weights of shape ``(..., H, T, T)``.
        offset: the key position relative to the query, ``-(T - 1) .. T - 1``.
        query_positions: the queries to average over (those whose ``t + offset``
            falls outside ``[0, T)`` are rejected); ``None`` means every query
            that has such a key.

    Returns:
        The mean weight on key ``t + offset``, shape ``(..., H)``.
    """
    weights = _check_weights(weights)
    T, S = weights.shape[-2:]
    if T != S:
        raise ValueError(
            f"weights must be self-attention weights (..., H, T, T), got {shape_str(weights)}"
        )
    check_int(offset, "offset", minimum=1 - T, maximum=T - 1, meaning=f"T = {T}")
    index = _query_index(query_positions, T)
    if index is None:
        index = torch.arange(max(0, -offset), min(T, T - offset))
    elif bool((index + offset < 0).any()) or bool((index + offset >= T).any()):
        raise ValueError(
            f"query_positions must have their key t + offset = t + {offset} in [0, {T})"
        )
    index = index.to(weights.device)
    on_key = torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1)  # (..., H, T - |offset|)
    return on_key[..., index - max(0, -offset)].mean(dim=-1)  # (..., H)
