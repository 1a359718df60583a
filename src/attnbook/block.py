"""The transformer block: attention and a feed-forward network, each wrapped in a residual.

Introduced in chapter 9 (``chapters/09_transformer_block.ipynb``). A block is
two sub-layers, each of the form ``x + sublayer(x)`` (a *residual connection*),
with a LayerNorm either in front of the sub-layer (*pre-LN*, the default, as in
GPT-2 and most models since) or after the sum (*post-LN*, the original
Transformer):

- pre-LN:  ``x = x + dropout(attention(norm(x)))``, then ``x = x + dropout(ffn(norm(x)))``
- post-LN: ``x = norm(x + dropout(attention(x)))``, then ``x = norm(x + dropout(ffn(x)))``

- :class:`FeedForward`: the position-wise network ``d_model -> d_ff -> d_model``.
- :class:`EncoderBlock`: self-attention + feed-forward. With a causal mask it is
  also the block of a decoder-only model (GPT): "decoder-only" blocks have no
  cross-attention, so structurally they are encoder blocks that cannot look ahead.
- :class:`DecoderBlock`: causal self-attention, cross-attention to an encoder's
  output (the *context*), feed-forward.

Dropout sits where the original Transformer put it, on the output of every
sub-layer before it is added to the residual stream, plus on the attention
weights and after the feed-forward activation (as ``torch.nn.TransformerEncoderLayer``
does), so a block with copied weights computes exactly what PyTorch's computes.

The ``forward`` of a block checks its inputs; the models of
:mod:`attnbook.model` check theirs once, at their boundary, and then call the
blocks with ``validate=False``. ``to_torch()`` copies a block into PyTorch's
own ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``.

Shape legend used in this module:
    ``B`` batch, ``T`` positions of the block's input (queries), ``S``
    positions of the context (keys of cross-attention), ``D`` = ``d_model``,
    ``F`` = ``d_ff``, ``H`` heads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnbook._validation import (
    as_float_tensor,
    check_bool,
    check_int,
    check_probability,
    shape_str,
)
from attnbook.multihead import AttentionConfig, MultiHeadAttention
from attnbook.positional import PositionalEncoding

__all__ = ["DecoderBlock", "EncoderBlock", "FeedForward"]


def _check_sequence(x: object, name: str, d_model: int, needed: str) -> torch.Tensor:
    x = as_float_tensor(x, name, needed)
    if x.ndim != 3 or x.shape[-1] != d_model or x.shape[1] == 0:
        raise ValueError(
            f"{name} must have shape {needed} with d_model = {d_model} and at least one "
            f"position, got {shape_str(x)}"
        )
    return x


class FeedForward(nn.Module):
    """The position-wise feed-forward network: ``linear2(dropout(gelu(linear1(x))))``.

    Attention mixes information *between* positions; this network then
    transforms each position on its own, with the same weights everywhere. It
    widens every vector to ``d_ff`` (usually ``4 * d_model``), applies a
    nonlinearity, and projects back: about two thirds of a block's parameters
    live here. GELU is the activation of GPT and BERT; the original
    Transformer used ReLU.

    Args:
        d_model: ``D``, the width of the input and the output.
        d_ff: ``F``, the hidden width (default: ``4 * d_model``).
        dropout: probability of dropping a hidden activation, in training mode only.
        bias: whether the two linear maps have a bias.
    """

    def __init__(
        self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.d_ff = 4 * self.d_model if d_ff is None else check_int(d_ff, "d_ff")
        self.dropout = check_probability(dropout, "dropout")
        self.linear1 = nn.Linear(self.d_model, self.d_ff, bias=bias)  # weight (F, D)
        self.linear2 = nn.Linear(self.d_ff, self.d_model, bias=bias)  # weight (D, F)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}, dropout={self.dropout}"

    def forward(self, x: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
        """Transform every position of ``x`` independently.

        Args:
            x: shape ``(..., D)``; any leading dimensions (usually ``(B, T)``).
            validate: ``False`` skips the check of ``x`` (a block has checked it).

        Returns:
            Tensor of the same shape ``(..., D)``.
        """
        if validate:
            x = as_float_tensor(x, "x", "(..., d_model)")
            if x.ndim < 1 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"x must have shape (..., d_model) with d_model = {self.d_model}, "
                    f"got {shape_str(x)}"
                )
        hidden = F.gelu(self.linear1(x))  # (..., D) @ (D, F) -> (..., F)
        if self.training and self.dropout > 0.0:
            hidden = F.dropout(hidden, self.dropout, training=True)
        return self.linear2(hidden)  # (..., F) @ (F, D) -> (..., D)


class _Block(nn.Module):
    """What encoder and decoder blocks share: widths, norm placement, residual dropout."""

    def __init__(self, attention: AttentionConfig, norm_first: bool) -> None:
        super().__init__()
        self.d_model, self.n_heads = attention.d_model, attention.n_heads
        self.dropout = float(attention.dropout)
        self.norm_first = check_bool(norm_first, "norm_first")

    def extra_repr(self) -> str:
        placement = "pre-LN" if self.norm_first else "post-LN"
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, {placement}, dropout={self.dropout}"
        )

    def _residual(self, x: torch.Tensor, update: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """Add a sub-layer's output to the residual stream (then normalise, if post-LN)."""
        if self.training and self.dropout > 0.0:
            update = F.dropout(update, self.dropout, training=True)
        x = x + update  # (B, T, D)
        return x if self.norm_first else norm(x)


def _torch_layer(kind: type[nn.Module], block: _Block) -> nn.Module:
    """An empty PyTorch encoder or decoder layer shaped like ``block`` (GELU, batch first)."""
    return kind(
        block.d_model,
        block.n_heads,
        block.ffn.d_ff,
        block.dropout,
        activation="gelu",
        batch_first=True,
        norm_first=block.norm_first,
        bias=block.ffn.linear1.bias is not None,
        device=block.norm1.weight.device,
        dtype=block.norm1.weight.dtype,
    )


def _copy_rest(block: _Block, layer: nn.Module, norms: tuple[str, ...]) -> None:
    """Copy the feed-forward network and the LayerNorms of ``block`` into PyTorch's ``layer``."""
    for name in ("linear1", "linear2"):
        getattr(layer, name).load_state_dict(getattr(block.ffn, name).state_dict())
    for name in norms:
        getattr(layer, name).load_state_dict(getattr(block, name).state_dict())


class EncoderBlock(_Block):
    """Self-attention then a feed-forward network, each in a residual connection.

    Every position reads every other position it is allowed to (the mask
    decides), then each is transformed on its own. Stacking these blocks is an
    encoder; with ``is_causal=True`` the same block is a decoder-only (GPT) block.
    The residual connections let each block add a correction to its input
    instead of replacing it, which keeps gradients flowing through deep stacks.

    With ``norm_first=True`` (pre-LN) it computes what
    ``torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout,
    activation="gelu", batch_first=True, norm_first=True)`` computes, given the
    same weights (its ``self_attn.in_proj_weight`` is our ``q_proj``, ``k_proj``
    and ``v_proj`` weights stacked); with ``norm_first=False``, its post-LN.

    Args:
        d_model: ``D``, the width of the residual stream.
        n_heads: ``H``, number of attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward network (default: ``4 * d_model``).
        dropout: dropout probability for the attention weights, the
            feed-forward hidden layer and each sub-layer's output (training mode only).
        norm_first: ``True`` for pre-LN (normalise each sub-layer's input),
            ``False`` for post-LN (normalise after each residual sum).
        bias: whether the linear maps have biases.
        rope_base: if not ``None``, the attention rotates queries and keys with
            rotary position embeddings of this base (see :mod:`attnbook.positional`).
        n_kv_heads: key/value heads of the attention (grouped-query attention,
            see :class:`~attnbook.multihead.MultiHeadAttention`); ``None`` means ``n_heads``.
        positional: instead of ``rope_base``, an encoding whose ``rotate`` hook
            the attention calls (a model passes its own).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        *,
        norm_first: bool = True,
        bias: bool = True,
        rope_base: float | None = None,
        n_kv_heads: int | None = None,
        positional: PositionalEncoding | None = None,
    ) -> None:
        attention = AttentionConfig(d_model, n_heads, dropout, bias, n_kv_heads, rope_base)
        super().__init__(attention, norm_first)
        self.self_attn = MultiHeadAttention.from_config(attention, positional=positional)
        self.norm1 = nn.LayerNorm(d_model)  # before attention (pre-LN) or after its sum (post-LN)
        self.norm2 = nn.LayerNorm(d_model)  # the same around the feed-forward network
        self.ffn = FeedForward(d_model, d_ff, dropout, bias)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: Any = None,
        validate: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """Run the block on a batch of sequences.

        Args:
            x: shape ``(B, T, D)``, floating point.
            mask: optional boolean mask (``True`` = may attend) or additive
                float mask, broadcastable to ``(B, H, T, T)``: e.g. a causal
                ``(T, T)`` mask or a key padding mask ``(B, 1, 1, T)``.
            is_causal: if ``True``, position ``t`` may attend only to positions
                ``<= t`` (ANDed with ``mask``); lets PyTorch use its fused causal kernel.
            need_weights: also return the attention weights ``(B, H, T, S)``.
            cache: the attention's key-value cache during generation, see
                :meth:`MultiHeadAttention.forward` (``x`` then holds only the
                new positions).
            validate: ``False`` skips the input checks (a model has checked its own).

        Returns:
            Tensor of shape ``(B, T, D)``; with ``need_weights=True`` the pair
            ``(output, weights)``.
        """
        if validate:
            x = _check_sequence(x, "x", self.d_model, "(B, T, d_model)")
        h = self.norm1(x) if self.norm_first else x  # (B, T, D)
        update, weights = self.self_attn(
            h, h, h, mask, need_weights, is_causal=is_causal, cache=cache, validate=validate
        )  # (B, T, D)
        x = self._residual(x, update, self.norm1)  # (B, T, D)
        h = self.norm2(x) if self.norm_first else x
        x = self._residual(x, self.ffn(h, validate=False), self.norm2)  # (B, T, D)
        return (x, weights) if need_weights else x

    def to_torch(self) -> nn.TransformerEncoderLayer:
        """A ``torch.nn.TransformerEncoderLayer`` holding copies of this block's weights.

        It computes what this block computes (``batch_first=True``, GELU, the
        same ``norm_first``), which is how the tests and chapter 9 check the
        block against PyTorch's. Same device, dtype and training mode.
        """
        layer = _torch_layer(nn.TransformerEncoderLayer, self)
        with torch.no_grad():
            self.self_attn.copy_to(layer.self_attn)
            _copy_rest(self, layer, ("norm1", "norm2"))
        return layer.train(self.training)


class DecoderBlock(_Block):
    """Causal self-attention, cross-attention to a context, then a feed-forward network.

    The decoder of an encoder-decoder model (translation, summarisation): each
    target position first reads the target so far (causally: it may not see
    the words it is about to produce), then reads the encoder's output
    ``context`` (the whole source sentence), then is transformed on its own.
    Three sub-layers, each in a residual connection with its own LayerNorm.

    With ``norm_first=True`` it computes what ``torch.nn.TransformerDecoderLayer(
    ..., activation="gelu", batch_first=True, norm_first=True)`` computes with a
    causal target mask, given the same weights.

    Args:
        d_model: ``D``, the width of the residual stream and of the context.
        n_heads: ``H``, heads of both attentions; must divide ``d_model``.
        d_ff: hidden width of the feed-forward network (default: ``4 * d_model``).
        dropout: as in :class:`EncoderBlock`.
        norm_first: ``True`` for pre-LN, ``False`` for post-LN.
        bias: whether the linear maps have biases.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        *,
        norm_first: bool = True,
        bias: bool = True,
    ) -> None:
        attention = AttentionConfig(d_model, n_heads, dropout, bias)
        super().__init__(attention, norm_first)
        self.self_attn = MultiHeadAttention.from_config(attention)
        self.cross_attn = MultiHeadAttention.from_config(attention)
        self.norm1 = nn.LayerNorm(d_model)  # around the self-attention
        self.norm2 = nn.LayerNorm(d_model)  # around the cross-attention
        self.norm3 = nn.LayerNorm(d_model)  # around the feed-forward network
        self.ffn = FeedForward(d_model, d_ff, dropout, bias)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        mask: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        *,
        is_causal: bool = True,
        need_weights: bool = False,
        cache: Any = None,
        context_cache: Any = None,
        validate: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor | None, torch.Tensor | None]]:
        """Run the block on a batch of target sequences and their contexts.

        Args:
            x: the target side, shape ``(B, T, D)``.
            context: the encoder's output, shape ``(B, S, D)``.
            mask: optional extra mask of the self-attention, broadcastable to
                ``(B, H, T, T)`` (``True`` = may attend), ANDed with the causal mask.
            context_mask: optional mask of the cross-attention, broadcastable to
                ``(B, H, T, S)``, e.g. a source padding mask ``(B, 1, 1, S)``.
            is_causal: whether the self-attention is causal (default ``True``;
                ``False`` only for experiments).
            need_weights: also return the weights of both attentions.
            cache: the self-attention's key-value cache during generation, as in
                :meth:`EncoderBlock.forward` (``x`` then holds only the new positions).
            context_cache: a slot (attributes ``key``, ``value``) for the
                cross-attention's keys and values: filled from ``context`` when
                empty, and then reused: the context is projected once per source.
            validate: ``False`` skips the input checks (a model has checked its own).

        Returns:
            Tensor of shape ``(B, T, D)``; with ``need_weights=True`` the pair
            ``(output, (self_weights (B, H, T, T_all), cross_weights (B, H, T, S)))``.
        """
        if validate:
            x = _check_sequence(x, "x", self.d_model, "(B, T, d_model)")
            context = _check_sequence(context, "context", self.d_model, "(B, S, d_model)")
            if context.shape[0] != x.shape[0]:
                raise ValueError(
                    f"context must have shape (B, S, d_model) with B = {x.shape[0]} (x's batch), "
                    f"got {shape_str(context)} for x {shape_str(x)}"
                )
        h = self.norm1(x) if self.norm_first else x  # (B, T, D)
        update, self_weights = self.self_attn(
            h, h, h, mask, need_weights, is_causal=is_causal, cache=cache, validate=validate
        )
        x = self._residual(x, update, self.norm1)  # (B, T, D)
        h = self.norm2(x) if self.norm_first else x  # queries from the target ...
        if context_cache is not None and context_cache.key is not None:
            context = context[:, :0]  # (B, 0, D): nothing new, the cached keys are all of them
        fresh = context_cache is None or context.shape[1] > 0  # a cached context is not checked
        update, cross_weights = self.cross_attn(
            h,
            context,
            context,
            context_mask,
            need_weights,
            cache=context_cache,
            validate=validate and fresh,
        )  # ... keys and values from the context: (B, T, D)
        x = self._residual(x, update, self.norm2)
        h = self.norm3(x) if self.norm_first else x
        x = self._residual(x, self.ffn(h, validate=False), self.norm3)  # (B, T, D)
        return (x, (self_weights, cross_weights)) if need_weights else x

    def to_torch(self) -> nn.TransformerDecoderLayer:
        """A ``torch.nn.TransformerDecoderLayer`` holding copies of this block's weights.

        It computes what this block computes when given a causal ``tgt_mask``
        (``batch_first=True``, GELU, the same ``norm_first``). Same device,
        dtype and training mode.
        """
        layer = _torch_layer(nn.TransformerDecoderLayer, self)
        with torch.no_grad():
            self.self_attn.copy_to(layer.self_attn)
            self.cross_attn.copy_to(layer.multihead_attn)
            _copy_rest(self, layer, ("norm1", "norm2", "norm3"))
        return layer.train(self.training)
