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

from collections.abc import Sequence

import torch

from attnbook._validation import check_int, check_probability, shape_str

__all__ = [
    "attention_rollout",
    "attention_share",
    "head_entropy",
    "offset_share",
    "to_bertviz",
]

_WEIGHTS_SHAPE = "(..., H, T, S)"


def _check_weights(weights: object, name: str = "weights") -> torch.Tensor:
    """Validate attention weights of shape ``(..., H, T, S)``: float, finite, in [0, 1]."""
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
    return weights


def _query_index(query_positions: object, T: int) -> torch.Tensor | None:
    """``None`` (every query) or a 1-D long tensor of query positions in ``[0, T)``."""
    if query_positions is None:
        return None
    index = torch.as_tensor(query_positions)
    if index.dtype == torch.bool or torch.is_floating_point(index) or index.ndim != 1:
        raise ValueError(
            "query_positions must be a 1-D sequence of integer query positions, "
            f"got {query_positions!r}"
        )
    if index.numel() == 0 or bool((index < 0).any()) or bool((index >= T).any()):
        raise ValueError(f"query_positions must be non-empty, each in [0, {T}) (T = {T})")
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
        tokens: ``T`` strings, the label of each position.
        batch_index: which sequence of the batch to show, in ``[0, B)``.
        decimals: if given, round the weights to this many decimals and return
            them as float64, so that bertviz writes short numbers such as
            ``0.125`` into its HTML, and last-bit differences between machines
            cannot change the page. ``None`` keeps float32 as computed.

    Returns:
        ``(attention, tokens)``: a tuple of ``n_layers`` tensors of shape
        ``(1, H, T, T)`` (float32 on the CPU, or float64 if ``decimals`` is
        given) and the tokens as a list of ``T`` strings.
    """
    if isinstance(weights, torch.Tensor) or not isinstance(weights, (list, tuple)):
        raise ValueError(
            "weights must be a list or tuple with one (B, H, T, T) tensor per layer, "
            f"got {type(weights).__name__}"
        )
    if len(weights) == 0:
        raise ValueError("weights must hold at least one layer, got an empty sequence")
    if isinstance(tokens, str) or not all(isinstance(tok, str) for tok in tokens):
        raise ValueError("tokens must be a sequence of strings, one per position")
    tokens = list(tokens)
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
        layers.append(layer)
    B, _, T, _ = first.shape  # (B, H, T, T)
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

    Args:
        weights: one tensor of shape ``(B, H, T, T)`` per layer (a list or tuple,
            first layer first), or one tensor of shape ``(L, B, H, T, T)``.
        residual: the weight of the identity, in ``[0, 1)``; Abnar and Zuidema use 0.5.

    Returns:
        The rollout, shape ``(B, T, T)``: row ``t`` is over the input positions.
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
    stacked = _check_weights(stacked)
    if stacked.ndim != 5 or stacked.shape[-1] != stacked.shape[-2]:
        raise ValueError(
            f"weights must have shape (L, B, H, T, T) (self-attention), got {shape_str(stacked)}"
        )
    residual = check_probability(residual, "residual")
    B, T = stacked.shape[1], stacked.shape[-1]  # (L, B, H, T, T)
    eye = torch.eye(T, dtype=stacked.dtype, device=stacked.device)  # (T, T)
    rollout = eye.expand(B, T, T)  # (B, T, T): before any layer, each position is itself
    for layer in stacked:  # (B, H, T, T), the first layer first
        mixed = residual * eye + (1 - residual) * layer.mean(dim=1)  # (B, T, T)
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)  # rows sum to 1 again
        rollout = mixed @ rollout  # (B, T, T) @ (B, T, T) -> (B, T, T)
    return rollout


def head_entropy(weights: torch.Tensor, *, query_positions: object = None) -> torch.Tensor:
    """The mean entropy of each head's rows of weights, in nats.

    A row's entropy ``-sum_s A_ts ln A_ts`` is 0 when the query puts all its
    weight on one key and ``ln S`` when it spreads it evenly over ``S`` keys
    (``ln (t + 1)`` for a causal row). A low-entropy head *selects*; a
    high-entropy head *averages*. Zero weights (masked keys) add nothing.

    Args:
        weights: attention weights of shape ``(..., H, T, S)``, rows summing to 1.
        query_positions: the query rows to average over (a 1-D sequence of
            positions); ``None`` averages over all ``T``.

    Returns:
        The mean row entropy of each head, shape ``(..., H)``.
    """
    weights = _check_weights(weights)
    index = _query_index(query_positions, weights.shape[-2])
    if index is not None:
        weights = weights[..., index.to(weights.device), :]  # (..., H, T', S)
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))  # 0 ln 0 = 0
    return -(weights * logs).sum(dim=-1).mean(dim=-1)  # (..., H, T) -> (..., H)


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
            (the same keys for every query; their weights are added), or a
            boolean tensor of shape ``(T, S)``, ``True`` where key ``s`` counts
            for query ``t``.
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
        keys = torch.as_tensor(key_positions)
        if keys.ndim == 0:
            keys = keys.reshape(1)
        if keys.dtype == torch.bool or torch.is_floating_point(keys) or keys.ndim != 1:
            raise ValueError(
                "key_positions must be an int, a 1-D sequence of ints or a boolean (T, S) "
                f"tensor, got {key_positions!r}"
            )
        if keys.numel() == 0 or bool((keys < -S).any()) or bool((keys >= S).any()):
            raise ValueError(f"key_positions must be non-empty, each in [0, {S}) (S = {S})")
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
