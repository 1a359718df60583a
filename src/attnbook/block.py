"""The transformer block: attention and a feed-forward network, each wrapped in a residual.

Introduced in chapter 9 (``chapters/09_transformer_block.ipynb``). A block is
two sub-layers, each of the form ``x + sublayer(x)`` (a *residual connection*),
with a LayerNorm either in front of the sub-layer (*pre-LN*, the default, as in
GPT-2 and most models since) or after the sum (*post-LN*, the original
Transformer):

- pre-LN:  ``x = x + dropout(attention(norm(x)))``, then ``x = x + dropout(ffn(norm(x)))``
- post-LN: ``x = norm(x + dropout(attention(x)))``, then ``x = norm(x + dropout(ffn(x)))``

- :class:`FeedForward`: the position-wise network ``d_model -> d_ff -> d_model``
  (GELU, exact or with GPT-2's tanh approximation).
- :class:`SwiGLU`: the gated feed-forward network of Llama, ``down(silu(gate(x)) * up(x))``.
- :class:`RMSNorm`: LayerNorm without the mean and the bias (Llama's norm).
- :class:`BlockConfig`: a block's settings (its attention's, the norm, the
  feed-forward kind); the norms and feed-forward networks a block can use are
  the entries of :data:`NORMS` and :data:`FEED_FORWARDS`, one small entry each.
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

import functools
import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnbook._validation import (
    as_float_tensor,
    check_bool,
    check_dtype,
    check_int,
    check_mask,
    check_positive_number,
    check_probability,
    plain_numbers,
    shape_str,
)
from attnbook.multihead import AttentionConfig, MultiHeadAttention
from attnbook.positional import PositionalEncoding

__all__ = [
    "FEED_FORWARDS",
    "NORMS",
    "BlockConfig",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "RMSNorm",
    "SwiGLU",
]


def _check_sequence(
    x: object, name: str, d_model: int, needed: str, dtype: torch.dtype
) -> torch.Tensor:
    x = as_float_tensor(x, name, needed)
    if x.ndim != 3 or x.shape[-1] != d_model or x.shape[1] == 0:
        raise ValueError(
            f"{name} must have shape {needed} with d_model = {d_model} and at least one "
            f"position, got {shape_str(x)}"
        )
    check_dtype({name: x}, dtype, "block")  # else a norm before attention fails inside torch
    return x


def _check_last_axis(
    x: object, name: str, d_model: int, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``x`` as a floating-point tensor of shape ``(..., d_model)`` (in ``dtype``, the module's,
    when given), or a ValueError naming it."""
    x = as_float_tensor(x, name, "(..., d_model)")
    if x.ndim < 1 or x.shape[-1] != d_model:
        raise ValueError(
            f"{name} must have shape (..., d_model) with d_model = {d_model}, got {shape_str(x)}"
        )
    if dtype is not None:
        check_dtype({name: x}, dtype)
    return x


class FeedForward(nn.Module):
    """The position-wise feed-forward network: ``linear2(dropout(gelu(linear1(x))))``.

    Attention mixes information *between* positions; this network then
    transforms each position on its own, with the same weights everywhere. It
    widens every vector to ``d_ff`` (usually ``4 * d_model``), applies a
    nonlinearity, and projects back: about two thirds of a block's parameters
    live here. GELU is the activation of GPT and BERT; the original
    Transformer used ReLU. GPT-2 computed GELU with a tanh approximation
    (``approximate="tanh"``, its ``gelu_new``), which differs from the exact
    one by less than ``1e-3``: enough to matter when loading its weights.

    Args:
        d_model: ``D``, the width of the input and the output.
        d_ff: ``F``, the hidden width (default: ``4 * d_model``).
        dropout: probability of dropping a hidden activation, in training mode only.
        bias: whether the two linear maps have a bias.
        approximate: ``"none"`` (exact GELU, ``x * Phi(x)``) or ``"tanh"``
            (GPT-2's approximation), as ``torch.nn.functional.gelu`` takes it.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        approximate: str = "none",
    ) -> None:
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.d_ff = 4 * self.d_model if d_ff is None else check_int(d_ff, "d_ff")
        self.dropout = check_probability(dropout, "dropout")
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate
        self.linear1 = nn.Linear(self.d_model, self.d_ff, bias=check_bool(bias, "bias"))  # (F, D)
        self.linear2 = nn.Linear(self.d_ff, self.d_model, bias=bias)  # weight (D, F)

    def extra_repr(self) -> str:
        tanh = ", approximate='tanh'" if self.approximate == "tanh" else ""
        return f"d_model={self.d_model}, d_ff={self.d_ff}, dropout={self.dropout}{tanh}"

    def forward(self, x: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
        """Transform every position of ``x`` independently.

        Args:
            x: shape ``(..., D)``; any leading dimensions (usually ``(B, T)``).
            validate: ``False`` skips the check of ``x`` (a block has checked it).

        Returns:
            Tensor of the same shape ``(..., D)``.
        """
        if validate:
            x = _check_last_axis(x, "x", self.d_model, self.linear1.weight.dtype)
        hidden = self.linear1(x)  # (..., D) @ (D, F) -> (..., F)
        hidden = F.gelu(hidden, approximate=self.approximate)  # exact, or GPT-2's tanh form
        if self.training and self.dropout > 0.0:
            hidden = F.dropout(hidden, self.dropout, training=True)
        return self.linear2(hidden)  # (..., F) @ (F, D) -> (..., D)


class SwiGLU(nn.Module):
    """The gated feed-forward network of PaLM and Llama: ``down(dropout(silu(gate(x)) * up(x)))``.

    Two maps widen each position to ``d_ff``: one (``up``) makes the values,
    the other (``gate``), through the smooth SiLU ``z * sigmoid(z)``, decides
    how much of each value passes. The product is a *gated* linear unit
    (Dauphin et al. 2017; Shazeer 2020, "GLU Variants Improve Transformer"):
    a unit can be switched off by its gate whatever its value, which trains
    better at equal cost than a plain GELU network. It has three matrices
    instead of two, so the hidden width is usually ``8/3 * d_model`` instead of
    ``4 * d_model``, which keeps the parameter count (``3 * D * F = 8 D^2``).

    Args:
        d_model: ``D``, the width of the input and the output.
        d_ff: ``F``, the hidden width (default :meth:`default_d_ff`, about ``8/3 * D``).
        bias: whether the three linear maps have a bias (Llama's have none).
        dropout: probability of dropping a hidden activation, in training mode only.
    """

    def __init__(
        self, d_model: int, d_ff: int | None = None, bias: bool = False, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.d_ff = self.default_d_ff(self.d_model) if d_ff is None else check_int(d_ff, "d_ff")
        self.dropout = check_probability(dropout, "dropout")
        check_bool(bias, "bias")
        self.gate = nn.Linear(self.d_model, self.d_ff, bias=bias)  # weight (F, D)
        self.up = nn.Linear(self.d_model, self.d_ff, bias=bias)  # weight (F, D)
        self.down = nn.Linear(self.d_ff, self.d_model, bias=bias)  # weight (D, F)

    @staticmethod
    def default_d_ff(d_model: int) -> int:
        """The hidden width for ``d_model``: ``8/3 * d_model`` rounded up to a multiple of 8.

        ``8/3`` keeps the parameters of a ``4 * d_model`` GELU network (Llama
        starts from it too); Llama then rounds up to a multiple of 256, which
        suits its widths of 4096 and more but would add up to half the
        parameters at the book's widths of 64 to 384, so the book rounds to 8.
        """
        return 8 * math.ceil(8 * check_int(d_model, "d_model") / 3 / 8)

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
            x = _check_last_axis(x, "x", self.d_model, self.gate.weight.dtype)
        hidden = F.silu(self.gate(x)) * self.up(x)  # (..., F) * (..., F) -> (..., F)
        if self.training and self.dropout > 0.0:
            hidden = F.dropout(hidden, self.dropout, training=True)
        return self.down(hidden)  # (..., F) @ (F, D) -> (..., D)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang and Sennrich 2019): LayerNorm without the mean.

    LayerNorm subtracts each vector's mean, divides by its standard deviation,
    then scales and shifts. RMSNorm only divides by the root mean square,
    ``x / sqrt(mean(x^2) + eps) * weight``: no mean, no shift (no bias). What
    keeps a deep stack trainable is the rescaling; the re-centring turned out
    not to matter, and dropping it saves a reduction per call. Llama, Mistral
    and most models since use it. As in Llama, the statistics are computed in
    float32 whatever the input's dtype, and the result is cast back before
    the ``weight`` (initialised to 1) multiplies it.

    Args:
        d_model: ``D``, the width of the vectors normalised (the last axis).
        eps: added to the mean square before the square root, so that a zero
            vector gives zeros, not NaN (Llama 2 uses ``1e-5``, Llama 1 ``1e-6``).
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.eps = check_positive_number(eps, "eps")
        self.weight = nn.Parameter(torch.ones(self.d_model))  # (D,), the learned gain

    def extra_repr(self) -> str:
        return f"({self.d_model},), eps={self.eps}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise every vector of ``x`` along its last axis.

        Args:
            x: shape ``(..., D)``, floating point.

        Returns:
            Tensor of the same shape, in the dtype of ``weight * x`` (as in
            Llama: ``x``'s dtype when the module has been converted to it,
            float32 for 16-bit inputs to a float32 module).
        """
        ok = isinstance(x, torch.Tensor) and x.is_floating_point() and x.ndim >= 1
        if not ok or x.shape[-1] != self.d_model:  # the cheap test first: norms run in every block
            x = _check_last_axis(x, "x", self.d_model)  # raises, saying what it needs
        x32 = x.float()  # (..., D), statistics in float32
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., D) / (..., 1)
        return self.weight * x32.to(x.dtype)  # (D,) * (..., D)


def _layer_norm(d_model: int, *, eps: float, bias: bool) -> nn.LayerNorm:
    """PyTorch's LayerNorm: subtract the mean, divide by the standard deviation, scale, shift."""
    return nn.LayerNorm(d_model, eps=eps, bias=bias)


def _rms_norm(d_model: int, *, eps: float, bias: bool) -> RMSNorm:
    """:class:`RMSNorm` (which has no bias, whatever ``bias`` says)."""
    return RMSNorm(d_model, eps)


NORMS: dict[str, Callable[..., nn.Module]] = {"layer": _layer_norm, "rms": _rms_norm}
"""The norms a block accepts by name: ``NORMS[name](d_model, eps=..., bias=...)``; add one here."""

FEED_FORWARDS: dict[str, Callable[..., nn.Module]] = {
    "gelu": FeedForward,
    "gelu_tanh": functools.partial(FeedForward, approximate="tanh"),
    "swiglu": SwiGLU,
}
"""The feed-forward networks a block accepts by name, each built as
``FEED_FORWARDS[name](d_model, d_ff, dropout=..., bias=...)``; add one here."""


@dataclass(frozen=True)
class BlockConfig:
    """The settings of a block: its attention's, the norm, the feed-forward network.

    Frozen, each constraint checked once, here. A model builds one and hands it
    to every block (:meth:`EncoderBlock.from_config`); the defaults are the
    book's GPT block (pre-LN, LayerNorm, GELU).
    """

    attention: AttentionConfig  # d_model, n_heads, dropout, bias, n_kv_heads, rope_base
    d_ff: int | None = None  # hidden width of the feed-forward network; None -> its default
    _: KW_ONLY  # the options below are passed by name
    norm_first: bool = True  # True: pre-LN (norm before each sub-layer); False: post-LN
    norm: str = "layer"  # a key of NORMS: "layer" (LayerNorm) or "rms" (RMSNorm)
    ffn: str = "gelu"  # a key of FEED_FORWARDS: "gelu", "gelu_tanh" or "swiglu"
    norm_eps: float = 1e-5  # the norms' eps

    def __post_init__(self) -> None:
        plain_numbers(self)  # NumPy ints and floats, as Python's
        if not isinstance(self.attention, AttentionConfig):
            raise ValueError(
                f"attention must be an AttentionConfig, got {type(self.attention).__name__}"
            )
        if self.d_ff is not None:
            check_int(self.d_ff, "d_ff")
        check_bool(self.norm_first, "norm_first")
        if not isinstance(self.norm, str) or self.norm not in NORMS:
            raise ValueError(f"norm must be one of {tuple(NORMS)}, got {self.norm!r}")
        if not isinstance(self.ffn, str) or self.ffn not in FEED_FORWARDS:
            raise ValueError(f"ffn must be one of {tuple(FEED_FORWARDS)}, got {self.ffn!r}")
        check_positive_number(self.norm_eps, "norm_eps")

    def make_norm(self) -> nn.Module:
        """A new norm of this config's kind over ``d_model`` features."""
        a = self.attention
        return NORMS[self.norm](a.d_model, eps=self.norm_eps, bias=a.bias)

    def make_ffn(self) -> nn.Module:
        """A new feed-forward network of this config's kind."""
        a = self.attention
        return FEED_FORWARDS[self.ffn](a.d_model, self.d_ff, dropout=a.dropout, bias=a.bias)


class _Block(nn.Module):
    """What encoder and decoder blocks share: widths, norm placement, residual dropout."""

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        self.config = config
        self.d_model, self.n_heads = config.attention.d_model, config.attention.n_heads
        self.dropout = float(config.attention.dropout)
        self.norm_first = config.norm_first

    def extra_repr(self) -> str:
        placement = "pre-LN" if self.norm_first else "post-LN"
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, {placement}, dropout={self.dropout}"
        )

    def _residual(self, x: torch.Tensor, update: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        """Add a sub-layer's output to the residual stream (then normalise, if post-LN)."""
        if self.training and self.dropout > 0.0:
            update = F.dropout(update, self.dropout, training=True)
        x = x + update  # (B, T, D)
        return x if self.norm_first else norm(x)


def _block_kwargs(config: BlockConfig) -> dict[str, Any]:
    """The constructor arguments of a block that ``config`` describes."""
    a = config.attention
    return dict(
        d_model=a.d_model,
        n_heads=a.n_heads,
        d_ff=config.d_ff,
        dropout=a.dropout,
        norm_first=config.norm_first,
        bias=a.bias,
        rope_base=a.rope_base,
        n_kv_heads=a.n_kv_heads,
        norm=config.norm,
        ffn=config.ffn,
        norm_eps=config.norm_eps,
    )


def _torch_layer(kind: type[nn.Module], block: _Block) -> nn.Module:
    """An empty PyTorch encoder or decoder layer shaped like ``block`` (GELU, batch first)."""
    c = block.config
    if c.norm != "layer" or c.ffn != "gelu":
        raise ValueError(
            "to_torch() needs a block of PyTorch's kind: norm='layer' and ffn='gelu', got "
            f"norm={c.norm!r} and ffn={c.ffn!r}"
        )
    return kind(
        block.d_model,
        block.n_heads,
        block.ffn.d_ff,
        block.dropout,
        activation="gelu",
        batch_first=True,
        layer_norm_eps=c.norm_eps,
        norm_first=block.norm_first,
        bias=c.attention.bias,
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
    same weights (its ``self_attn.in_proj_weight`` is our ``self_attn.in_proj.weight``,
    stacked alike); with ``norm_first=False``, its post-LN.

    Args:
        d_model: ``D``, the width of the residual stream.
        n_heads: ``H``, number of attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward network (default: the network's own,
            ``4 * d_model`` for GELU, about ``8/3 * d_model`` for ``ffn="swiglu"``).
        dropout: dropout probability for the attention weights, the
            feed-forward hidden layer and each sub-layer's output (training mode only).
        norm_first: ``True`` for pre-LN (normalise each sub-layer's input),
            ``False`` for post-LN (normalise after each residual sum).
        bias: whether the linear maps and the norms have biases (a LayerNorm
            without one, as ``nn.TransformerEncoderLayer(bias=False)`` builds it).
        rope_base: if not ``None``, the attention rotates queries and keys with
            rotary position embeddings of this base (see :mod:`attnbook.positional`).
        n_kv_heads: key/value heads of the attention (grouped-query attention,
            see :class:`~attnbook.multihead.MultiHeadAttention`); ``None`` means ``n_heads``.
        positional: instead of ``rope_base``, an encoding whose ``rotate`` hook
            the attention calls (a model passes its own).
        norm: the norms' kind, a key of :data:`NORMS`: ``"layer"`` (LayerNorm)
            or ``"rms"`` (:class:`RMSNorm`).
        ffn: the feed-forward network's kind, a key of :data:`FEED_FORWARDS`:
            ``"gelu"``, ``"gelu_tanh"`` or ``"swiglu"`` (:class:`SwiGLU`).
        norm_eps: the norms' ``eps``.
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
        norm: str = "layer",
        ffn: str = "gelu",
        norm_eps: float = 1e-5,
    ) -> None:
        attention = AttentionConfig(
            d_model, n_heads, dropout, bias=bias, n_kv_heads=n_kv_heads, rope_base=rope_base
        )
        super().__init__(
            BlockConfig(
                attention, d_ff, norm_first=norm_first, norm=norm, ffn=ffn, norm_eps=norm_eps
            )
        )
        self.self_attn = MultiHeadAttention.from_config(attention, positional=positional)
        self.norm1 = self.config.make_norm()  # before attention (pre-LN) or after its sum
        self.norm2 = self.config.make_norm()  # the same around the feed-forward network
        self.ffn = self.config.make_ffn()

    @classmethod
    def from_config(
        cls, config: BlockConfig, *, positional: PositionalEncoding | None = None
    ) -> EncoderBlock:
        """Build the block from a :class:`BlockConfig` (and, optionally, a rotating encoding)."""
        return cls(**_block_kwargs(config), positional=positional)

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
            dtype = self.self_attn.in_proj.weight.dtype
            x = _check_sequence(x, "x", self.d_model, "(B, T, d_model)", dtype)
        h = self.norm1(x) if self.norm_first else x  # (B, T, D)
        update, weights = self.self_attn(
            h,
            h,
            h,
            mask,
            need_weights=need_weights,
            is_causal=is_causal,
            cache=cache,
            validate=validate,
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
    Three sub-layers, each in a residual connection with its own norm.

    With ``norm_first=True`` it computes what ``torch.nn.TransformerDecoderLayer(
    ..., activation="gelu", batch_first=True, norm_first=True)`` computes with a
    causal target mask, given the same weights.

    Args:
        d_model: ``D``, the width of the residual stream and of the context.
        n_heads: ``H``, heads of both attentions; must divide ``d_model``.
        d_ff: hidden width of the feed-forward network (default: the network's own,
            ``4 * d_model`` for GELU, about ``8/3 * d_model`` for ``ffn="swiglu"``).
        dropout: as in :class:`EncoderBlock`.
        norm_first: ``True`` for pre-LN, ``False`` for post-LN.
        bias: whether the linear maps and the norms have biases.
        n_kv_heads: key/value heads of both attentions (grouped-query
            attention); ``None`` means ``n_heads``.
        norm, ffn, norm_eps: the norms' and the feed-forward network's kinds,
            as in :class:`EncoderBlock`.
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
        n_kv_heads: int | None = None,
        norm: str = "layer",
        ffn: str = "gelu",
        norm_eps: float = 1e-5,
    ) -> None:
        attention = AttentionConfig(d_model, n_heads, dropout, bias=bias, n_kv_heads=n_kv_heads)
        super().__init__(
            BlockConfig(
                attention, d_ff, norm_first=norm_first, norm=norm, ffn=ffn, norm_eps=norm_eps
            )
        )
        self.self_attn = MultiHeadAttention.from_config(attention)
        self.cross_attn = MultiHeadAttention.from_config(attention)
        self.norm1 = self.config.make_norm()  # around the self-attention
        self.norm2 = self.config.make_norm()  # around the cross-attention
        self.norm3 = self.config.make_norm()  # around the feed-forward network
        self.ffn = self.config.make_ffn()

    @classmethod
    def from_config(cls, config: BlockConfig) -> DecoderBlock:
        """Build the block from a :class:`BlockConfig` (rotary positions: not in a decoder)."""
        if config.attention.rope_base is not None:
            raise ValueError(
                "config.attention.rope_base must be None for a DecoderBlock (its cross-attention "
                f"has no shared positions), got {config.attention.rope_base}"
            )
        kwargs = _block_kwargs(config)
        del kwargs["rope_base"]
        return cls(**kwargs)

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
            dtype = self.self_attn.in_proj.weight.dtype
            x = _check_sequence(x, "x", self.d_model, "(B, T, d_model)", dtype)
            context = _check_sequence(context, "context", self.d_model, "(B, S, d_model)", dtype)
            if context.shape[0] != x.shape[0]:
                raise ValueError(
                    f"context must have shape (B, S, d_model) with B = {x.shape[0]} (x's batch), "
                    f"got {shape_str(context)} for x {shape_str(x)}"
                )
        h = self.norm1(x) if self.norm_first else x  # (B, T, D)
        update, self_weights = self.self_attn(
            h,
            h,
            h,
            mask,
            need_weights=need_weights,
            is_causal=is_causal,
            cache=cache,
            validate=validate,
        )
        x = self._residual(x, update, self.norm1)  # (B, T, D)
        h = self.norm2(x) if self.norm_first else x  # queries from the target ...
        if context_cache is not None and context_cache.key is not None:
            context = context[:, :0]  # (B, 0, D): nothing new, the cached keys are all of them
        fresh = context_cache is None or context.shape[1] > 0  # a cached context is not checked
        if validate and fresh and context_mask is not None:  # named here, not as the MHA's mask
            scores = (x.shape[0], self.cross_attn.n_heads, x.shape[1], context.shape[1])
            context_mask = check_mask(context_mask, scores, "context_mask", dtype=h.dtype)
        update, cross_weights = self.cross_attn(
            h,
            context,
            context,
            context_mask,
            need_weights=need_weights,
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
