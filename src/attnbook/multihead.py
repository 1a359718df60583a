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

Grouped-query attention (chapter 14, Ainslie et al. 2023) lets groups of query
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
    check_probability,
    check_rank,
    plain_numbers,
    shape_str,
)
from attnbook.attention import attend, attend_fused, check_torch_twin, with_causal
from attnbook.positional import PositionalEncoding, RotaryPositions

__all__ = [
    "AttentionConfig",
    "MultiHeadAttention",
    "RowBlock",
    "merge_heads",
    "repeat_kv",
    "split_heads",
]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Cut the last axis into ``n_heads`` heads and put the heads' axis first: ``(B, T, H * Dh) -> (B, H, T, Dh)``.

    Costs nothing (a view): head ``h`` is features ``h * Dh .. (h + 1) * Dh - 1``
    of every position, and from here on each head attends on its own.

    Args:
        x: shape ``(B, T, H * Dh)``, e.g. the output of a query projection.
        n_heads: ``H``, which must divide the last axis.

    Returns:
        A view of shape ``(B, H, T, Dh)``.
    """
    B, T, width = check_rank(x, "x", 3, "(B, T, H * Dh)").shape
    if width % check_int(n_heads, "n_heads"):
        raise ValueError(f"n_heads ({n_heads}) must divide the width of x's last axis, {width}")
    return x.view(B, T, n_heads, width // n_heads).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Undo :func:`split_heads`: concatenate the heads' outputs, ``(B, H, T, Dh) -> (B, T, H * Dh)``.

    Args:
        x: shape ``(B, H, T, Dh)``, one output row per head and position.

    Returns:
        Tensor of shape ``(B, T, H * Dh)``: head ``h``'s features at ``h * Dh .. (h + 1) * Dh - 1``.
    """
    B, H, T, Dh = check_rank(x, "x", 4, "(B, H, T, Dh)").shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)  # (B, T, H, Dh) -> (B, T, H * Dh)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Give every query head its key/value head (grouped-query attention): ``(B, H_kv, S, Dh) -> (B, H_kv * G, S, Dh)``.

    Key/value head ``j`` is repeated ``G = n_rep`` times, for query heads
    ``j * G .. (j + 1) * G - 1``; query head ``h`` thus reads key/value head
    ``h // G`` (like ``torch.repeat_interleave`` along the heads' axis). A copy,
    kept simple: the memory grouped-query attention saves is the cache's,
    which stores only the ``H_kv`` heads.

    Args:
        x: keys or values, shape ``(B, H_kv, S, Dh)``.
        n_rep: ``G``, query heads per key/value head (``1`` returns ``x`` itself).

    Returns:
        Tensor of shape ``(B, H_kv * G, S, Dh)``.
    """
    B, H_kv, S, Dh = check_rank(x, "x", 4, "(B, H_kv, S, Dh)").shape
    if check_int(n_rep, "n_rep", meaning="query heads per key/value head") == 1:
        return x
    x = x[:, :, None].expand(B, H_kv, n_rep, S, Dh)  # (B, H_kv, G, S, Dh), a view
    return x.reshape(B, H_kv * n_rep, S, Dh)  # (B, H, S, Dh)


class RowBlock:
    """One projection inside a stacked ``nn.Linear``: rows ``start..stop-1`` of its weight and bias.

    ``MultiHeadAttention.q_proj``, ``k_proj`` and ``v_proj`` are these: each
    behaves as its own ``nn.Linear`` (call it on ``x``; ``weight`` and ``bias``
    are views into ``in_proj``, so writing them under ``torch.no_grad()``
    writes the module's parameters), while the optimizer sees one parameter.
    """

    __slots__ = ("linear", "start", "stop")

    def __init__(self, linear: nn.Linear, start: int, stop: int) -> None:
        self.linear, self.start, self.stop = linear, start, stop

    @property
    def weight(self) -> torch.Tensor:
        """Rows ``start..stop-1`` of the stacked weight, ``(out_features, in_features)``, a view."""
        return self.linear.weight[self.start : self.stop]

    @property
    def bias(self) -> torch.Tensor | None:
        """Entries ``start..stop-1`` of the stacked bias (a view), or ``None`` without biases."""
        b = self.linear.bias
        return None if b is None else b[self.start : self.stop]

    @property
    def in_features(self) -> int:
        return self.linear.in_features

    @property
    def out_features(self) -> int:
        return self.stop - self.start

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T + bias``, as ``nn.Linear`` computes it."""
        return F.linear(x, self.weight, self.bias)

    def reset_parameters(self) -> None:
        """Draw these rows as ``nn.Linear(in_features, out_features)`` draws its own (in place)."""
        nn.Linear.reset_parameters(self)  # type: ignore[arg-type]  # reads .weight and .bias

    def __repr__(self) -> str:
        return (
            f"RowBlock(rows {self.start}..{self.stop - 1} of Linear(in_features={self.in_features}, "
            f"out_features={self.linear.out_features}))"
        )


@dataclass(frozen=True)
class AttentionConfig:
    """The settings of a :class:`MultiHeadAttention`; frozen, each constraint checked once, here."""

    d_model: int  # D, width of the inputs and the output; a multiple of n_heads
    n_heads: int  # H, number of query heads, each of width d_head = d_model // n_heads
    dropout: float = 0.0  # probability of dropping an attention weight (training mode only)
    _: KW_ONLY  # the options below are passed by name
    bias: bool = True  # whether the four projections have a bias
    n_kv_heads: int | None = None  # H_kv, key/value heads; must divide n_heads; None -> n_heads
    rope_base: float | None = None  # base (> 1) of rotary embeddings inside attention, or None

    def __post_init__(self) -> None:
        plain_numbers(self)  # NumPy ints and floats, as Python's
        check_int(self.d_model, "d_model")
        check_int(self.n_heads, "n_heads")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model must be a multiple of n_heads (each head gets d_model // n_heads "
                f"features), got d_model = {self.d_model} and n_heads = {self.n_heads}"
            )
        if self.n_kv_heads is not None:
            check_int(self.n_kv_heads, "n_kv_heads")
            if self.n_heads % self.n_kv_heads != 0:
                raise ValueError(
                    f"n_kv_heads must divide n_heads (each key/value head serves n_heads // "
                    f"n_kv_heads query heads), got n_heads = {self.n_heads} and n_kv_heads = "
                    f"{self.n_kv_heads}"
                )
        check_probability(self.dropout, "dropout")
        check_bool(self.bias, "bias")
        if self.rope_base is not None:
            RotaryPositions.check_base(self.rope_base, "rope_base")
            RotaryPositions.check_config(self)  # an even head width

    @property
    def d_head(self) -> int:
        """``Dh = d_model // n_heads``, the width of each head."""
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """``H_kv``: ``n_kv_heads``, or ``n_heads`` when it is ``None``."""
        return self.n_heads if self.n_kv_heads is None else int(self.n_kv_heads)


def _check_positional(positional: object, config: AttentionConfig) -> None:
    """Refuse a ``positional`` that is not an encoding, that fights ``rope_base``, or that cannot rotate."""
    if not isinstance(positional, PositionalEncoding):
        raise ValueError(
            "positional must be a PositionalEncoding (e.g. RotaryPositions(10000.0)) or None, "
            f"got {positional!r}; for rotary positions by number use rope_base=10000.0"
        )
    if config.rope_base is not None:
        raise ValueError(
            f"give rope_base or positional, not both: got rope_base = {config.rope_base} and "
            f"positional = {positional!r}"
        )
    if not positional.rotates:  # attention calls only the rotate hook: the rest would be ignored
        raise ValueError(
            "positional must be an encoding whose rotate hook turns queries and keys "
            f"(rotates = True, e.g. RotaryPositions(10000.0)), got {positional!r}, which "
            "attention would ignore: an encoding added to the embeddings, or a score bias such "
            "as alibi_bias(...)[None] passed as mask, works outside the attention layer "
            "(GPTConfig(positional=...) places either for a whole model)"
        )
    positional.check_config(config)  # e.g. an even head width for rotary positions


class MultiHeadAttention(nn.Module):
    """``H`` attention heads in parallel over one model width, mixed by an output projection.

    Each head can attend to different positions for a different reason (one
    to the previous token, one to a matching token, ...), which one softmax
    cannot do at once. The same module serves the three uses in a
    transformer: encoder self-attention (``query = key = value = X``), masked
    decoder self-attention (``is_causal=True``) and encoder-decoder
    cross-attention (``query = X``, ``key = value = C``, ``T != S`` allowed).

    The query, key and value maps are stacked in one ``nn.Linear`` named
    ``in_proj`` (weight ``(3 D, D)``: rows ``W_Qᵀ``, then ``W_Kᵀ``, then
    ``W_Vᵀ``, as PyTorch's ``in_proj_weight``; GPT-2's ``c_attn`` stacks the
    same maps transposed, ``(D, 3 D)``, with Q, K, V as columns), so
    self-attention makes all three with one matrix multiply and the optimizer
    updates one tensor; ``out_proj`` is ``nn.Linear(d_model, d_model)``.
    ``q_proj``, ``k_proj`` and ``v_proj`` are :class:`RowBlock` views of
    ``in_proj``, each used as its own ``nn.Linear``: ``q_proj.weight`` holds
    ``W_Qᵀ`` (``nn.Linear`` computes ``x @ weight.T``), whose rows ``h * Dh``
    to ``(h + 1) * Dh - 1`` make head ``h``'s queries (likewise for keys and
    values). A state dict saved with three separate maps still loads.

    With ``n_kv_heads < n_heads`` (grouped-query attention), ``k_proj`` and
    ``v_proj`` have ``n_kv_heads * d_head`` rows each: each of the
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
            Self-attention only: :meth:`forward` raises ``ValueError`` when
            ``key`` is not ``query`` (cross-attention).
        n_kv_heads: ``H_kv``, the number of key/value heads, which must divide
            ``n_heads``: ``None`` (default) means ``n_heads`` (multi-head
            attention), ``1`` multi-query attention, in between grouped-query.
        positional: instead of ``rope_base``, an encoding object whose ``rotate``
            hook turns each head's queries and keys (``rotates = True``, such as
            :class:`~attnbook.positional.RotaryPositions`; a model passes its own).
            Encodings that add to the embeddings or bias the scores work outside
            attention, and are refused here.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        bias: bool = True,
        rope_base: float | None = None,
        n_kv_heads: int | None = None,
        positional: PositionalEncoding | None = None,
    ) -> None:
        super().__init__()
        config = AttentionConfig(
            d_model, n_heads, dropout, bias=bias, n_kv_heads=n_kv_heads, rope_base=rope_base
        )
        self.config = config
        self.d_model, self.n_heads, self.d_head = config.d_model, config.n_heads, config.d_head
        self.n_kv_heads = config.kv_heads
        self.dropout = float(config.dropout)
        if positional is not None:
            _check_positional(positional, config)
        elif rope_base is not None:
            positional = RotaryPositions(float(rope_base))
        self.positional = positional  # its rotate hook turns queries and keys, or None
        d_kv = self.n_kv_heads * self.d_head  # = D unless grouped-query
        self.n_rep = self.n_heads // self.n_kv_heads  # G, query heads per key/value head
        self.qkv_widths = (self.d_model, d_kv, d_kv)  # the row blocks of in_proj: W_Q, W_K, W_V
        # One stacked (D + 2 H_kv Dh, D) weight, rows W_Qᵀ, then W_Kᵀ, then W_Vᵀ: one matrix
        # multiply in self-attention, one parameter for the optimizer (PyTorch's in_proj_weight).
        self.in_proj = nn.utils.skip_init(  # allocated, not yet drawn (the default device)
            nn.Linear,
            self.d_model,
            sum(self.qkv_widths),
            bias=bias,
            device=torch.get_default_device(),
        )
        self._init_like_three_linears()  # the same random draws as three nn.Linear
        self.register_load_state_dict_pre_hook(_stack_separate_projections)
        self.out_proj = nn.Linear(self.d_model, self.d_model, bias=bias)  # weight (D, D) = W_Oᵀ

    def _init_like_three_linears(self) -> None:
        """Draw ``in_proj`` as three ``nn.Linear(d_model, width)`` would be, in the order q, k, v."""
        with torch.no_grad():
            for block in (self.q_proj, self.k_proj, self.v_proj):
                block.reset_parameters()

    def _row_block(self, i: int) -> RowBlock:
        """Block ``i`` of ``in_proj``'s rows (0: W_Qᵀ, 1: W_Kᵀ, 2: W_Vᵀ), widths ``qkv_widths``."""
        start = sum(self.qkv_widths[:i])
        return RowBlock(self.in_proj, start, start + self.qkv_widths[i])

    @property
    def q_proj(self) -> RowBlock:
        """The query projection: rows ``0..D-1`` of ``in_proj`` (weight ``W_Qᵀ``, ``(D, D)``)."""
        return self._row_block(0)

    @property
    def k_proj(self) -> RowBlock:
        """The key projection: the next ``H_kv Dh`` rows of ``in_proj`` (weight ``W_Kᵀ``)."""
        return self._row_block(1)

    @property
    def v_proj(self) -> RowBlock:
        """The value projection: the last ``H_kv Dh`` rows of ``in_proj`` (weight ``W_Vᵀ``)."""
        return self._row_block(2)

    @classmethod
    def from_config(
        cls, config: AttentionConfig, *, positional: PositionalEncoding | None = None
    ) -> MultiHeadAttention:
        """Build the module from an :class:`AttentionConfig` (and, optionally, a rotating encoding)."""
        c = config
        return cls(
            c.d_model,
            c.n_heads,
            c.dropout,
            bias=c.bias,
            rope_base=c.rope_base,
            n_kv_heads=c.n_kv_heads,
            positional=positional,
        )

    @property
    def rope_base(self) -> float | None:
        """The base of the rotary embeddings inside this attention, or ``None``."""
        return getattr(self.positional, "base", None)

    def extra_repr(self) -> str:
        kv = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}{kv}, d_head={self.d_head}, "
            f"dropout={self.dropout}"
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        is_causal: bool = False,
        cache: Any = None,
        validate: bool = True,
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
            cache: ``None``, or for self-attention during generation (chapter 14)
                an object with attributes ``key`` and ``value``, each ``None``
                while empty or the keys/values of the ``S_past`` earlier
                positions, ``(B, H_kv, S_past, Dh)`` (e.g. ``KVCache.layer(i)``).
                Only the new positions are projected (rotated at positions
                ``S_past..``); their keys and values are appended to the cache
                and the queries attend to all ``S_past + T`` of them.
            validate: ``False`` skips the input checks, for a caller that has
                checked its own inputs once (a model, on every layer and step).

        Returns:
            ``(output, weights)``: ``output`` of shape ``(B, T, d_model)``, and
            ``weights`` of shape ``(B, H, T, S)`` (after dropout, those used),
            or ``None`` when ``need_weights=False``. A query that may attend to
            no key gets weights 0 and an attention output of zeros (so its
            ``output`` row is ``out_proj``'s bias), never NaN.
        """
        if validate:
            query, key, value, mask = self._validate(query, key, value, mask, cache)
            check_bool(need_weights, "need_weights")
            check_bool(is_causal, "is_causal")
        if query is key and key is value:  # self-attention: one multiply for Q, K and V
            q, k, v = self.project_self(query)  # (B, T, D) each, or (B, T, H_kv Dh) for K, V
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        q = split_heads(q, self.n_heads)  # (B, T, D) -> (B, H, T, Dh)
        k = split_heads(k, self.n_kv_heads)  # (B, S, H_kv Dh) -> (B, H_kv, S, Dh)
        v = split_heads(v, self.n_kv_heads)  # (B, S, H_kv Dh) -> (B, H_kv, S, Dh)
        start = 0 if cache is None or cache.key is None else cache.key.shape[-2]  # S_past
        if self.positional is not None:
            if query is not key:  # cross-attention: the two sides' positions are unrelated
                raise ValueError(
                    f"rope_base (positional={self.positional!r}) rotates queries and keys by "
                    "their positions, which holds only in self-attention (query is key); got "
                    "a separate key tensor (cross-attention): build this attention without it"
                )
            q, k = self.positional.rotate(q, k, start)  # keys at start.., queries the last T
        if cache is not None:
            if start:
                k = torch.cat([cache.key, k], dim=-2)  # (B, H_kv, S_past + T, Dh)
                v = torch.cat([cache.value, v], dim=-2)  # (B, H_kv, S_past + T, Dh)
            cache.key, cache.value = k.contiguous(), v.contiguous()  # own memory for the cache
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, S, Dh) each
        if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)  # e.g. a float32 bias under bf16 autocast
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            if is_causal:
                mask = with_causal(mask, q.shape[-2], k.shape[-2], q.device)
            heads, weights = attend(q, k, v, mask, dropout_p)  # (B, H, T, Dh), (B, H, T, S)
        else:
            heads = attend_fused(q, k, v, mask, dropout_p, is_causal=is_causal)  # (B, H, T, Dh)
            weights = None
        return self.out_proj(merge_heads(heads)), weights  # (B, T, D) @ (D, D) -> (B, T, D)

    def project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q_proj(x)``, ``k_proj(x)``, ``v_proj(x)`` as one matrix multiply (self-attention).

        ``in_proj``'s weight ``(D + 2 H_kv Dh, D)``: one pass over ``x``
        instead of three. Returns views ``(B, T, D)``, ``(B, T, H_kv Dh)`` x 2.
        Only the width of ``x`` is checked (shapes, no values: it runs in every
        layer on every forward pass).
        """
        if not isinstance(x, torch.Tensor) or x.ndim == 0 or x.shape[-1] != self.d_model:
            got = f"shape {shape_str(x)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"x must be a torch tensor of shape (B, T, d_model) with d_model = "
                f"{self.d_model}, got {got}"
            )
        qkv = self.in_proj(x)  # (B, T, D) @ (D, D + 2 H_kv Dh)
        return qkv.split(self.qkv_widths, dim=-1)  # views, no copy

    def copy_to(self, theirs: nn.MultiheadAttention) -> None:
        """Copy this module's weights into ``theirs``, a ``torch.nn.MultiheadAttention`` of our shape.

        Its ``in_proj_weight`` ``(3 D, D)`` stacks ``W_Qᵀ``, ``W_Kᵀ``, ``W_Vᵀ`` as
        our ``in_proj.weight`` does, likewise the biases; ``out_proj`` is copied
        as it is; without biases of ours, its biases are zeroed. See :meth:`to_torch`.

        Raises:
            ValueError: for grouped-query or rotary attention (no PyTorch twin), or
                when ``theirs`` has other widths or heads, or lacks our biases.
        """
        if self.n_kv_heads != self.n_heads or self.positional is not None:
            raise ValueError(
                "to_torch() needs plain multi-head attention: n_kv_heads = n_heads and no "
                f"positional rotation, got n_kv_heads = {self.n_kv_heads} and "
                f"positional = {self.positional!r}"
            )
        bias = self.in_proj.bias is not None
        check_torch_twin(
            theirs, embed_dim=self.d_model, num_heads=self.n_heads, kdim=self.d_model, bias=bias
        )
        with torch.no_grad():
            theirs.in_proj_weight.copy_(self.in_proj.weight)  # (3 D, D), the same stacking
            theirs.out_proj.weight.copy_(self.out_proj.weight)  # (D, D)
            for mine, their in (
                (self.in_proj.bias, theirs.in_proj_bias),  # (3 D,)
                (self.out_proj.bias, theirs.out_proj.bias),  # (D,)
            ):
                if their is not None and mine is not None:
                    their.copy_(mine)
                elif their is not None:  # without biases of ours, theirs add nothing
                    their.zero_()

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` holding copies of this module's weights.

        PyTorch keeps the three input projections stacked in one
        ``in_proj_weight`` ``(3 D, D)`` (queries, then keys, then values) and
        our ``out_proj`` as its own. ``batch_first=True``; same device, dtype
        and training mode. Remember that its boolean ``attn_mask`` means
        *blocked* where ours means *may attend* (:func:`attnbook.to_mha_mask`).
        Only plain multi-head attention has a PyTorch twin: no grouped-query
        heads, no rotary embeddings.
        """
        bias = self.in_proj.bias is not None
        weight = self.in_proj.weight
        theirs = nn.MultiheadAttention(
            self.d_model,
            self.n_heads,
            dropout=self.dropout,
            bias=bias,
            batch_first=True,
            device=weight.device,
            dtype=weight.dtype,
        )
        self.copy_to(theirs)
        return theirs.train(self.training)

    def _validate(
        self, query: object, key: object, value: object, mask: object, cache: Any = None
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
        check_dtype({"query": query, "key": key, "value": value}, self.in_proj.weight.dtype)
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
        n_past = 0 if cache is None else self._check_cache(cache, query)  # S_past
        if mask is not None:
            scores_shape = (query.shape[0], self.n_heads, query.shape[1], n_past + key.shape[1])
            if isinstance(mask, torch.Tensor) and mask.ndim == 3 and mask.shape[0] != 1:
                raise ValueError(
                    f"mask of shape {shape_str(mask)} is ambiguous for the scores' shape "
                    f"(B, H, T, S) = ({', '.join(map(str, scores_shape))}): its "
                    "first axis would be read as the heads' axis. Add the missing axis: "
                    "mask[:, None] for one mask per sequence (B, 1, T, S) (a padding mask: "
                    "padding_mask(lengths, per_head=True)), mask[None] for one per head (1, H, T, S)"
                )
            mask = check_mask(mask, scores_shape, dtype=query.dtype)
        return query, key, value, mask

    def _check_cache(self, cache: Any, query: torch.Tensor) -> int:
        """Raise unless ``cache`` can hold this layer's keys and values; return ``S_past``."""
        if not hasattr(cache, "key") or not hasattr(cache, "value"):
            raise ValueError(
                "cache must have attributes key and value (e.g. KVCache.layer(i)), got "
                f"{type(cache).__name__}"
            )
        if cache.key is None and cache.value is None:
            return 0
        needed = (query.shape[0], self.n_kv_heads, self.d_head)  # (B, H_kv, Dh)
        text = f"(B, H_kv, S_past, Dh) = ({needed[0]}, {needed[1]}, S_past, {needed[2]})"
        for name, past in (("key", cache.key), ("value", cache.value)):
            ok = isinstance(past, torch.Tensor) and past.ndim == 4
            if not ok or (past.shape[0], past.shape[1], past.shape[3]) != needed:
                got = shape_str(past) if isinstance(past, torch.Tensor) else type(past).__name__
                raise ValueError(f"cache.{name} must have shape {text}, got {got}")
            if past.dtype != query.dtype:
                raise ValueError(f"cache.{name} must have dtype {query.dtype}, got {past.dtype}")
        if cache.key.shape[2] != cache.value.shape[2]:
            raise ValueError(
                "cache.key and cache.value must hold the same positions, got "
                f"{shape_str(cache.key)} and {shape_str(cache.value)}"
            )
        return cache.key.shape[2]


def _stack_separate_projections(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Load a state dict saved with separate ``q_proj``/``k_proj``/``v_proj`` weights.

    Before ``in_proj`` stacked them, :class:`MultiHeadAttention` kept three
    ``nn.Linear``; their entries are stacked here into ``in_proj.weight`` and
    ``in_proj.bias``, so checkpoints written then still load.
    """
    for kind in ("weight", "bias"):
        names = [f"{prefix}{p}.{kind}" for p in ("q_proj", "k_proj", "v_proj")]
        if all(name in state_dict for name in names):
            state_dict[f"{prefix}in_proj.{kind}"] = torch.cat([state_dict.pop(n) for n in names])
