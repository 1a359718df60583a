"""Positional information: sinusoidal encodings, rotary embeddings (RoPE) and ALiBi biases.

Introduced in chapter 8 (``chapters/08_positional_encoding.ipynb``); the
models of chapter 9 (:mod:`attnbook.multihead`, :mod:`attnbook.model`) use it.

Attention by itself is *permutation-equivariant*: shuffle the tokens and the
outputs shuffle the same way, so "cats chase mice" and "mice chase cats" look
alike to it. Position has to be put in from outside, in one of three places:

- **added to the inputs** (absolute): :func:`sinusoidal_positional_encoding`
  (Vaswani et al., 2017), or a learned table (``nn.Embedding(context_length,
  d_model)``, which needs no function here);
- **rotating the queries and keys** (relative): :func:`apply_rope` (Su et al.,
  2021), so that the score of a query and a key depends on their offset only;
- **biasing the scores** (relative): :func:`alibi_bias` (Press et al., 2022),
  a penalty that grows linearly with the distance between query and key.

**Pairing convention.** Both the sinusoidal encoding and RoPE work on
*interleaved* pairs of features ``(2i, 2i + 1)``, ``i = 0 .. d/2 - 1``, each
pair with frequency ``base^(-2i/d)``, as Meta's original LLaMA code pairs
them. Other RoPE implementations (GPT-NeoX, Hugging Face ``transformers``'
Llama) pair feature ``i`` with feature ``i + d/2`` instead ("half split");
the two are the same rotation applied to permuted features, but weights
trained with one are wrong for the other (the ``transformers`` conversion of
LLaMA permuted the query and key rows: see :mod:`attnbook.pretrained`).

Shape legend used in this module:
    ``T`` positions (queries), ``S`` key positions, ``d`` feature width
    (``d_model`` for the sinusoidal encoding, the head width for RoPE),
    ``H`` heads, ``T_max`` context length (the most positions a model
    accepts), ``...`` any leading batch dimensions (e.g. ``(B, H)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnbook._validation import (
    as_float_tensor,
    check_int,
    check_positive_number,
    check_where,
    shape_str,
)

__all__ = [
    "POSITIONAL_ENCODINGS",
    "AlibiPositions",
    "LearnedPositions",
    "PositionalEncoding",
    "RotaryPositions",
    "SinusoidalPositions",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "position_index",
    "sinusoidal_positional_encoding",
]


def sinusoidal_positional_encoding(
    seq_len: int, d_model: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The fixed sinusoidal position codes of the original transformer (Vaswani et al., 2017).

    Each position gets a vector of sines and cosines at geometrically spaced
    frequencies; added to the token embeddings, it tells attention where each
    token sits. Because ``sin`` and ``cos`` of a shifted angle are a rotation
    of the unshifted ones, ``PE[pos + k]`` is a fixed linear map of ``PE[pos]``
    (one 2x2 rotation per pair of columns), and ``PE[p] · PE[q]`` depends only
    on ``p - q``.

    For pair ``i = 0 .. d_model/2 - 1`` with frequency ``w_i = 10000^(-2i/d_model)``::

        PE[pos, 2i]     = sin(pos * w_i)
        PE[pos, 2i + 1] = cos(pos * w_i)

    so wavelengths run from ``2π`` (columns 0, 1) to almost ``2π · 10000``.
    ``d_model`` must be even: the columns come in (sin, cos) pairs, and a lone
    sine column would break the shift-is-a-rotation property.

    Args:
        seq_len: ``T``, the number of positions (``0 .. T - 1``), an int >= 1.
        d_model: the width of the codes, an even int >= 2.
        device: where to create the tensor (default: the CPU).

    Returns:
        Float32 tensor of shape ``(T, d_model)``; row ``pos`` is ``PE[pos]``.
        The angles are computed in float64 and rounded once, so long sequences
        keep accurate values.
    """
    seq_len = check_int(seq_len, "seq_len")
    d_model = check_int(d_model, "d_model", minimum=2)
    if d_model % 2:
        raise ValueError(f"d_model must be even (columns come in (sin, cos) pairs), got {d_model}")
    device = check_where(device)
    # float64 on the CPU, then moved: Apple's mps device has no float64
    pos = torch.arange(seq_len, dtype=torch.float64)  # (T,)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,)
    freqs = 10000.0 ** (-two_i / d_model)  # (d/2,)
    angles = pos[:, None] * freqs[None, :]  # (T, 1) * (1, d/2) -> (T, d/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, d/2, 2): sin, cos per pair
    return pe.reshape(seq_len, d_model).to(
        device=device, dtype=torch.float32
    )  # (T, d): sin, cos, ...


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Rotary position embedding (RoPE, Su et al., 2021): rotate feature pairs by position.

    Applied to the queries and the keys of every head (not the values), RoPE
    makes the score ``q_t · k_s`` depend on the positions only through the
    offset ``t - s``: rotating both by their own angles leaves the angle
    between them, which is the offset times the pair's frequency. Rotations
    keep norms, so nothing else about the vectors changes.

    Pair ``i`` is the *interleaved* pair ``(x[..., 2i], x[..., 2i + 1])``,
    rotated counter-clockwise by ``theta = pos * base^(-2i/d)``::

        out[..., 2i]     = x[..., 2i] * cos(theta) - x[..., 2i + 1] * sin(theta)
        out[..., 2i + 1] = x[..., 2i] * sin(theta) + x[..., 2i + 1] * cos(theta)

    (GPT-NeoX and Hugging Face ``transformers``' Llama pair feature ``i`` with
    ``i + d/2`` instead; see the module docstring.)

    Args:
        x: float tensor of shape ``(..., T, d)``, e.g. per-head queries
            ``(B, H, T, Dh)``; ``d`` must be even.
        positions: integer tensor of shape ``(T,)``, the position of each row
            (default: ``arange(T)``; pass ``arange(start, start + T)`` for
            tokens that continue a cached prefix).
        base: the base of the frequencies, a number > 1 (10000 in the paper).

    Returns:
        Tensor of the same shape, dtype and device as ``x``, rotated. The
        angles are computed in at least float32 and the result in ``x``'s dtype.
    """
    x = as_float_tensor(x, "x", "(..., T, d)")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., T, d) (at least 2-D), got {shape_str(x)}")
    n_pos, d = x.shape[-2], x.shape[-1]
    if d == 0 or d % 2:
        raise ValueError(
            f"x must have shape (..., T, d) with d even and >= 2 (features are rotated in "
            f"pairs), got {shape_str(x)}"
        )
    base = RotaryPositions.check_base(base)
    if positions is not None:
        if not isinstance(positions, torch.Tensor):
            raise ValueError(
                f"positions must be an integer torch tensor of shape (T,) = ({n_pos},), "
                f"got {type(positions).__name__}"
            )
        if (
            positions.dtype.is_floating_point
            or positions.dtype.is_complex
            or (positions.dtype == torch.bool)
        ):
            raise ValueError(
                f"positions must be an integer tensor of shape (T,) = ({n_pos},), "
                f"got dtype {positions.dtype}"
            )
        if tuple(positions.shape) != (n_pos,):
            raise ValueError(
                f"positions must have shape (T,) = ({n_pos},) (one per row of x "
                f"{shape_str(x)}), got {shape_str(positions)}"
            )
    return _rotate_pairs(x, positions, base)


def _rotate_pairs(x: torch.Tensor, positions: torch.Tensor | None, base: float) -> torch.Tensor:
    """:func:`apply_rope` after its checks: what every layer of a rotary model runs, unchecked."""
    n_pos, d = x.shape[-2], x.shape[-1]
    angle_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    if positions is None:
        pos = torch.arange(n_pos, device=x.device, dtype=angle_dtype)  # (T,)
    else:
        pos = positions.to(device=x.device, dtype=angle_dtype)  # (T,)
    two_i = torch.arange(0, d, 2, device=x.device, dtype=angle_dtype)  # (d/2,)
    freqs = base ** (-two_i / d)  # (d/2,)
    angles = pos[:, None] * freqs[None, :]  # (T, 1) * (1, d/2) -> (T, d/2)
    if x.dtype == angle_dtype and x.device.type != "mps":
        # Fast path: pair (a, b) as the complex number a + ib; turning it by θ is one
        # multiplication by e^(iθ), a single kernel instead of six (5-10x faster on a CPU).
        turn = torch.polar(torch.ones_like(angles), angles)  # (T, d/2) complex, e^(iθ)
        pairs = torch.view_as_complex(x.unflatten(-1, (d // 2, 2)).contiguous())  # (..., T, d/2)
        return torch.view_as_real(pairs * turn).flatten(-2)  # (..., T, d/2, 2) -> (..., T, d)
    # float16 / bfloat16 (no fast complex type) and Apple's MPS: the same rotation, written out
    cos = angles.cos().to(x.dtype)  # (T, d/2)
    sin = angles.sin().to(x.dtype)  # (T, d/2)
    pairs = x.unflatten(-1, (d // 2, 2))  # (..., T, d/2, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]  # (..., T, d/2) each
    rotated = torch.stack(
        (x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1
    )  # (..., T, d/2, 2)
    return rotated.flatten(-2)  # (..., T, d)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The per-head slopes ``m_h`` of ALiBi (Press et al., 2022).

    For ``n_heads`` a power of two the slopes are the geometric sequence
    ``m_h = 2^(-8h/n_heads)``, ``h = 1 .. n_heads`` (8 heads: 1/2, 1/4, ...,
    1/256). Otherwise, following the paper's reference code, take the slopes
    of the closest smaller power of two ``n``, then append every other slope
    of ``2n`` heads (the 1st, 3rd, 5th, ...) until there are ``n_heads``; e.g.
    12 heads: ``2^-1 .. 2^-8`` then ``2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5``.

    Args:
        n_heads: ``H``, an int >= 1.

    Returns:
        Float32 tensor of shape ``(H,)``.
    """
    n_heads = check_int(n_heads, "n_heads")

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(closest)
    if closest < n_heads:
        slopes += power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    n_heads: int,
    seq_len: int,
    key_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """ALiBi's additive score bias (Press et al., 2022): a linear penalty on distance.

    Instead of encoding positions in the inputs, ALiBi adds ``-m_h * (t - s)``
    to the score of query ``t`` and key ``s``: the further back a key, the
    lower its score, each head ``h`` with its own slope ``m_h``
    (:func:`alibi_slopes`), so some heads look far and some near. Nothing is
    learned and nothing depends on the absolute position, which is why it
    keeps working on sequences longer than those seen in training.

    **Above the diagonal** (keys in the future, ``s > t``) the bias holds
    ``-inf``: the tensor is itself a causal additive mask, so passing it as
    the ``mask`` of attention both biases and masks, and combining it with a
    causal mask changes nothing. (ALiBi was designed for left-to-right models.)
    :class:`~attnbook.MultiHeadAttention` refuses a 3-D mask as ambiguous
    (its first axis could be the batch's): give it ``alibi_bias(...)[None]``,
    ``(1, H, T, S)``.

    With ``key_len = S`` different from ``seq_len = T`` the queries are the
    *last* ``T`` of the ``S`` positions (bottom-right, like
    :func:`attnbook.causal_mask`): query ``t`` sits at position ``t + S - T``.

    Args:
        n_heads: ``H``, an int >= 1.
        seq_len: ``T``, the number of queries, an int >= 1.
        key_len: ``S``, the number of keys (default: ``T``).
        device: where to create the tensor (default: the CPU).

    Returns:
        Float32 tensor of shape ``(H, T, S)``: ``-m_h * (t + S - T - s)`` where
        ``s <= t + S - T``, ``-inf`` elsewhere. It broadcasts against scores
        ``(B, H, T, S)`` (``[None]`` makes it ``(1, H, T, S)``, the shape
        :class:`~attnbook.MultiHeadAttention` takes).
    """
    n_heads = check_int(n_heads, "n_heads")
    seq_len = check_int(seq_len, "seq_len")
    key_len = seq_len if key_len is None else check_int(key_len, "key_len")
    device = check_where(device)
    slopes = alibi_slopes(n_heads).to(device)  # (H,)
    q_pos = torch.arange(key_len - seq_len, key_len, device=device)  # (T,)
    k_pos = torch.arange(key_len, device=device)  # (S,)
    offset = (k_pos[None, :] - q_pos[:, None]).to(torch.float32)  # (1, S) - (T, 1) -> (T, S): s - t
    bias = slopes[:, None, None] * offset  # (H, 1, 1) * (T, S) -> (H, T, S), <= 0 in the past
    return bias.masked_fill(offset > 0, float("-inf"))  # (H, T, S): the future is blocked


# ------------------------------------------------------------- encodings a model can plug in


def position_index(
    start: int | torch.Tensor, n: int, *, context_length: int | None = None
) -> slice | torch.Tensor:
    """Where ``n`` tokens from ``start`` sit in a table of positions: an index for ``table[...]``.

    With one ``start`` for the whole batch, the slice ``start..start+n-1``
    (``table[...]`` is then ``(n, D)``, a view). In a left-padded batch each
    row's first real token sits in column ``left_pad[b]`` but at position 0,
    so a window of columns ``c..c+n-1`` starts at ``c - left_pad[b]``:
    ``start = c - left_pad[:, None]`` ``(B, 1)``, and the index is each row's
    positions ``(B, n)`` (``table[...]`` is ``(B, n, D)``). Columns of padding
    get negative positions, clamped to 0 (any valid row would do: padding is
    masked out of attention and its outputs are never read).

    With ``context_length`` (the table's number of rows), an int ``start``
    is checked: positions ``start..start+n-1`` must lie in
    ``[0, context_length)``, else a ``ValueError`` (a slice past the end would
    come back short, and one row left would broadcast over all ``n`` tokens).
    The check is a plain comparison of Python ints, cheap on every forward
    pass. Per-row tensor starts are not checked here, which would read the
    tensor back from the device; the model checks ``cache.length + T``
    itself.
    """
    if isinstance(start, int):
        if context_length is not None and (start < 0 or start + n > context_length):
            raise ValueError(
                f"positions start..start+T-1 = {start}..{start + n - 1} must lie in the table "
                f"of context_length = {context_length} positions (0..{context_length - 1}), "
                f"got start = {start} for T = {n} tokens"
            )
        return slice(start, start + n)
    if not isinstance(start, torch.Tensor):  # a float: else "'float' object has no attribute"
        raise ValueError(
            f"start must be an int or a tensor (B, 1) of each row's first position, "
            f"got {type(start).__name__} {start!r}"
        )
    return (start + torch.arange(n, device=start.device)).clamp(min=0)  # (B, 1) + (n,) -> (B, n)


class PositionalEncoding(nn.Module):
    """One way of giving a model positions: up to three hooks, each a no-op unless overridden.

    A model (:class:`attnbook.GPT`) holds one encoding and calls its hooks at
    the three places where position can enter:

    - :meth:`embed` adds position information to the token embeddings;
    - :meth:`rotate` turns each head's queries and keys (set ``rotates = True``
      so that the attention layers call it);
    - :meth:`bias` returns an additive score mask for every layer's attention.

    Adding an encoding is one subclass and one entry in
    :data:`POSITIONAL_ENCODINGS` (``CONTRIBUTING.md`` shows how). An encoding
    is an ``nn.Module``, so a learned one holds its parameters and they move
    and save with the model (as ``pos_emb.*`` of a GPT).
    """

    rotates: bool = False  # True if rotate() does something: attention layers then call it

    @classmethod
    def check_config(cls, config: object) -> None:
        """Raise ``ValueError`` if ``config`` (e.g. a ``GPTConfig``) cannot use this encoding."""

    @classmethod
    def from_config(cls, config: object) -> PositionalEncoding:
        """Build the encoding for a model of ``config`` (``context_length``, ``d_model``, ``n_heads``)."""
        return cls()

    def embed(self, x: torch.Tensor, start: int | torch.Tensor) -> torch.Tensor:
        """Token embeddings ``x`` ``(B, T, D)`` of positions ``start..start+T-1`` -> model input ``(B, T, D)``.

        ``start`` is an int, or in a left-padded batch one start per row,
        a tensor ``(B, 1)`` (see :func:`position_index`): each row's tokens then
        count from their own first real token.
        """
        return x

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, start: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head queries ``(B, H, T, Dh)`` and keys ``(B, H_kv, S, Dh)`` -> the same, positioned.

        The keys sit at positions ``start..start+S-1`` and the queries at the
        last ``T`` of them (bottom-right, as the causal rule aligns them).
        ``start`` counts columns, the same for every row even in a left-padded
        batch: the hook must depend on positions only through their
        differences (rotations do), which no padding shifts.
        """
        return q, k

    def bias(
        self, n_queries: int, n_keys: int, *, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """An additive mask ``(H, T, S)`` for the scores (queries at the last ``T`` of ``S``), or ``None``.

        A bias replaces the causal rule, so it must hold ``-inf`` above the diagonal.
        Like :meth:`rotate`, it must depend on distances ``s - t`` only (the
        model adds the padding mask of a left-padded batch itself).
        """
        return None


def _check_embeddings(x: object, d_model: int) -> None:
    """Raise unless ``x`` is a floating-point ``(B, T, d_model)`` tensor of token embeddings."""
    if not (isinstance(x, torch.Tensor) and x.ndim == 3 and x.shape[-1] == d_model):
        got = f"shape {shape_str(x)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"x must be token embeddings of shape (B, T, D) with D = d_model = {d_model}, got {got}"
        )


class LearnedPositions(nn.Embedding, PositionalEncoding):
    """A learned vector per position, added to the token embeddings (GPT-2).

    An ``nn.Embedding(context_length, d_model)`` (initialised as one, and
    treated as an embedding by the optimiser: no weight decay) whose
    ``weight`` row ``t`` is added to the token at position ``t``.
    """

    def __init__(self, context_length: int, d_model: int) -> None:
        context_length = check_int(context_length, "context_length")
        d_model = check_int(d_model, "d_model")
        super().__init__(context_length, d_model)  # weight (T_max, D)

    @classmethod
    def from_config(cls, config: object) -> LearnedPositions:
        return cls(config.context_length, config.d_model)

    def embed(self, x: torch.Tensor, start: int | torch.Tensor) -> torch.Tensor:
        _check_embeddings(x, self.embedding_dim)
        index = position_index(start, x.shape[1], context_length=self.num_embeddings)
        return x + self.weight[index]  # (B, T, D) + ([B,] T, D)


class SinusoidalPositions(PositionalEncoding):
    """The fixed sinusoids of :func:`sinusoidal_positional_encoding`, added to scaled embeddings.

    Fixed sinusoids have a root-mean-square entry of ``1/sqrt(2) = 0.71``.
    As in the original Transformer (Vaswani et al. 2017), token embeddings
    are multiplied by ``sqrt(d_model)`` before the sinusoids are added (a
    tied output head uses them unscaled). That scale was meant for
    embeddings drawn with standard deviation ``d_model^(-1/2)``, which it
    brings to size 1; the package keeps GPT-2's 0.02 for every encoding, so
    the scaled tokens start at ``0.02 sqrt(d_model)`` and the positions
    are ``35 / sqrt(d_model)`` times larger at initialisation: 6.2x at
    ``d_model = 32``, 4.4x at 64, 1.6x at 512 (training then grows the
    tokens). A deliberate choice: with the head tied to the embedding,
    std ``d_model^(-1/2)`` would make every untrained model predict a copy
    of its input token, with a logit about ``sqrt(d_model) / 1.2`` where
    the rest have size 1 (measured with 1,000 tokens: 4.7 at ``d_model =
    32``, where 0.02 gives 0.1; 19 at 512, where it gives 6, and an initial
    loss of 19 instead of 7.3). The table is a buffer, not saved in ``state_dict``.
    """

    def __init__(self, context_length: int, d_model: int) -> None:
        super().__init__()
        table = sinusoidal_positional_encoding(context_length, d_model)  # (T_max, D)
        self.register_buffer("table", table, persistent=False)
        self.scale = math.sqrt(d_model)

    @classmethod
    def check_config(cls, config: object) -> None:
        if config.d_model % 2:
            raise ValueError(
                "sinusoidal positions pair a sine and a cosine per frequency, so d_model "
                f"must be even, got d_model = {config.d_model}"
            )

    @classmethod
    def from_config(cls, config: object) -> SinusoidalPositions:
        return cls(config.context_length, config.d_model)

    def embed(self, x: torch.Tensor, start: int | torch.Tensor) -> torch.Tensor:
        _check_embeddings(x, self.table.shape[1])
        index = position_index(start, x.shape[1], context_length=self.table.shape[0])
        table = self.table[index].to(x.dtype)  # ([B,] T, D)
        return x * self.scale + table  # (B, T, D) + ([B,] T, D)


class RotaryPositions(PositionalEncoding):
    """Rotary embeddings (:func:`apply_rope`) of each head's queries and keys, inside attention."""

    rotates = True

    def __init__(self, base: float = 10000.0) -> None:
        super().__init__()
        self.base = self.check_base(base)  # the base of the rotary frequencies (Su et al. 2021)

    @staticmethod
    def check_base(value: object, name: str = "base") -> float:
        """Return ``value`` as a float, raising unless it is a finite number > 1.

        The rotary frequencies ``base^(-2i/d)`` must decrease with ``i``,
        which needs ``base > 1``. The one statement of this rule, used by
        :func:`apply_rope`, ``AttentionConfig`` and ``GPTConfig``.

        Args:
            value: the base to check, e.g. ``10000.0``.
            name: the argument's name, quoted in the message.

        Returns:
            ``value`` as a float.
        """
        base = check_positive_number(value, name)
        if base <= 1.0:
            raise ValueError(
                f"{name} must be a number > 1 (rotary frequencies {name}^(-2i/d) must "
                f"decrease), got {value}"
            )
        return base

    @classmethod
    def check_config(cls, config: object) -> None:
        d_head = config.d_model // config.n_heads
        if d_head % 2:
            raise ValueError(
                "rotary positions (positional='rope', rope_base) turn pairs of features, so "
                f"the head width d_head = d_model // n_heads must be even, got d_head = {d_head} "
                f"(d_model = {config.d_model}, n_heads = {config.n_heads})"
            )

    @classmethod
    def from_config(cls, config: object) -> RotaryPositions:
        return cls(float(getattr(config, "rope_base", 10000.0)))  # GPTConfig.rope_base

    def extra_repr(self) -> str:
        return f"base={self.base}"

    def rotate(
        self, q: torch.Tensor, k: torch.Tensor, start: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # The attention layer has checked q and k, and the model the base; only the head width
        # is checked here, from the shapes (no values are read, so no device sync per layer).
        d_head = q.shape[-1]
        if d_head % 2 or d_head == 0 or k.shape[-1] != d_head:
            raise ValueError(
                "q and k must have shapes (B, H, T, Dh) and (B, H_kv, S, Dh) with the same head "
                "width Dh, even and >= 2 (rotary positions turn pairs of features), got q "
                f"{shape_str(q)} and k {shape_str(k)}"
            )
        n_queries, n_keys = q.shape[-2], k.shape[-2]
        if start == 0 and n_queries == n_keys:  # the usual case: positions 0..T-1 for both
            return _rotate_pairs(q, None, self.base), _rotate_pairs(k, None, self.base)
        if n_queries > n_keys:  # the queries are the last T of the S key positions
            raise ValueError(
                "q and k must have T <= S (the queries sit at the last T of the S key "
                f"positions), got more queries than keys: T = {n_queries}, S = {n_keys}"
            )
        key_positions = torch.arange(start, start + n_keys, device=q.device)  # (S,)
        q = _rotate_pairs(q, key_positions[n_keys - n_queries :], self.base)  # (B, H, T, Dh)
        return q, _rotate_pairs(k, key_positions, self.base)  # (B, H_kv, S, Dh)


class AlibiPositions(PositionalEncoding):
    """ALiBi's distance penalty (:func:`alibi_bias`), added to every layer's scores."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = check_int(n_heads, "n_heads")

    @classmethod
    def from_config(cls, config: object) -> AlibiPositions:
        return cls(config.n_heads)

    def bias(
        self, n_queries: int, n_keys: int, *, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor:
        return alibi_bias(self.n_heads, n_queries, n_keys, device=device).to(dtype)  # (H, T, S)


POSITIONAL_ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "learned": LearnedPositions,
    "sinusoidal": SinusoidalPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
}
"""The encodings ``GPTConfig(positional=...)`` accepts, by name; register a new one here."""
