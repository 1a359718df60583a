"""Generation: a key-value cache, sampling, and the prefill / decode / generate loop of a GPT.

Introduced in chapter 10 (sampling, :func:`generate`) and chapter 14 (the
cache). :class:`attnbook.GPT`'s methods ``prefill``, ``decode`` and
``generate`` call the functions here; the model's ``forward`` does the work,
given a :class:`KVCache` (``model(idx, cache=cache, last_only=True)``).

In a causal model the keys and values of a position never change once
computed, so generation can keep them (the cache): :func:`prefill` reads the
prompt once, and :func:`decode` then costs one position per new token.
Prompts of different lengths share one batch padded on the left
(:func:`pad_left`; the ``left_pad`` argument of :func:`prefill` and
:func:`generate`).

Shape legend used in this module:
    ``B`` batch, ``T`` positions, ``S`` cached positions, ``H_kv`` key/value
    heads, ``Dh`` head width, ``V`` vocabulary size, ``N`` new tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from attnbook._validation import (
    check_bool,
    check_int,
    check_left_pad,
    check_logits,
    check_number,
    check_token_ids,
    shape_str,
)

__all__ = [
    "KVCache",
    "LayerCache",
    "check_cache",
    "check_model",
    "decode",
    "generate",
    "pad_left",
    "prefill",
    "sample_next",
]


class KVCache:
    """The keys and values a GPT has computed so far, per layer: generation's memory.

    In a causal model the keys and values of a position never change once
    computed (later tokens cannot influence earlier ones), so generation can
    keep them and, for each new token, project only that token and attend to
    the stored keys: one position of work per step instead of the whole
    sequence again. The price is memory, for every layer a key and a value
    tensor of shape ``(B, H_kv, S, Dh)``::

        nbytes = 2 * n_layers * B * H_kv * S * Dh * bytes_per_element

    (2 for keys and values; ``H_kv = n_kv_heads``, which is why grouped-query
    and multi-query attention shrink it by ``n_heads / n_kv_heads``). Made by
    :func:`prefill`, grown in place by :func:`decode` (and the ``GPT`` methods of
    the same names). Each step
    concatenates one position onto each tensor, which keeps the code short;
    serving systems instead preallocate the memory (or allocate it in pages).

    Attributes:
        keys: one tensor ``(B, H_kv, S, Dh)`` per layer (with rotary positions,
            already rotated), or ``None`` per layer while empty.
        values: one tensor ``(B, H_kv, S, Dh)`` per layer, or ``None``.
        left_pad: for a left-padded batch, the padding tokens at the start of
            each row ``(B,)`` (set by the first forward pass, the prefill, and
            used by every step after it); ``None`` for a batch without padding.
    """

    def __init__(self, n_layers: int) -> None:
        n_layers = check_int(n_layers, "n_layers")
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.left_pad: torch.Tensor | None = None

    @property
    def n_layers(self) -> int:
        """The number of layers the cache holds keys and values for."""
        return len(self.keys)

    @property
    def length(self) -> int:
        """``S``, the number of positions cached (0 while empty)."""
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    @property
    def batch_size(self) -> int:
        """``B``, the number of sequences cached (0 while empty)."""
        return 0 if self.keys[0] is None else self.keys[0].shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes held by all the cached keys and values (the formula in the class docstring)."""
        tensors = [t for t in (*self.keys, *self.values) if t is not None]
        return sum(t.numel() * t.element_size() for t in tensors)

    def layer(self, i: int) -> LayerCache:
        """Layer ``i``'s slot, with attributes ``key`` and ``value``, for that layer's attention.

        Reading or assigning ``slot.key`` reads or assigns ``self.keys[i]`` (and
        likewise for values), so :meth:`MultiHeadAttention.forward
        <attnbook.multihead.MultiHeadAttention.forward>` grows the cache in place.
        """
        i = check_int(i, "i", minimum=0, maximum=self.n_layers - 1, meaning="a layer index")
        return LayerCache(self, i)

    def __repr__(self) -> str:
        if self.keys[0] is None:
            return f"KVCache(n_layers={self.n_layers}, empty)"
        B, H_kv, S, Dh = self.keys[0].shape
        pad = "" if self.left_pad is None else f", left_pad={self.left_pad.tolist()}"
        return (
            f"KVCache(n_layers={self.n_layers}, batch_size={B}, n_kv_heads={H_kv}, "
            f"length={S}, d_head={Dh}, dtype={self.keys[0].dtype}, nbytes={self.nbytes}{pad})"
        )


class LayerCache:
    """One layer's view of a :class:`KVCache`: ``key`` and ``value`` read and write its lists."""

    def __init__(self, cache: KVCache, index: int) -> None:
        self.cache, self.index = cache, index

    @property
    def key(self) -> torch.Tensor | None:
        return self.cache.keys[self.index]

    @key.setter
    def key(self, tensor: torch.Tensor) -> None:
        self.cache.keys[self.index] = tensor

    @property
    def value(self) -> torch.Tensor | None:
        return self.cache.values[self.index]

    @value.setter
    def value(self, tensor: torch.Tensor) -> None:
        self.cache.values[self.index] = tensor


def check_model(model: object) -> nn.Module:
    """Return ``model``, raising unless it is a GPT-like model (``config``, ``blocks``) to generate with."""
    if (
        not isinstance(model, nn.Module)
        or not hasattr(model, "config")
        or not hasattr(model, "blocks")
    ):
        raise ValueError(f"model must be an attnbook.GPT, got {type(model).__name__}")
    return model


def check_cache(model: nn.Module, cache: object, batch_size: int | None = None) -> KVCache:
    """Return ``cache``, raising unless it can serve ``model`` (and a batch of ``batch_size`` rows).

    An empty cache needs only one entry per layer; a filled one must also hold
    keys of this model's shape ``(B, H_kv, S, Dh)``, for ``batch_size`` rows.
    """
    c = model.config
    if not isinstance(cache, KVCache):
        raise ValueError(
            "cache must be a KVCache (from GPT.prefill, or KVCache(n_layers) to fill), got "
            f"{type(cache).__name__}"
        )
    if cache.n_layers != c.n_layers:
        raise ValueError(
            f"cache must have one entry per layer of this model, n_layers = {c.n_layers}, "
            f"got {cache!r}"
        )
    if cache.length:
        B, n_kv, _, d_head = cache.keys[0].shape
        if (n_kv, d_head) != (model.blocks[0].self_attn.n_kv_heads, c.d_model // c.n_heads):
            raise ValueError(
                "cache must hold keys of shape (B, H_kv, S, Dh) = (B, "
                f"{model.blocks[0].self_attn.n_kv_heads}, S, {c.d_model // c.n_heads}) "
                f"for this model, got {shape_str(cache.keys[0])}"
            )
        computes = model.tok_emb.weight.dtype
        keys = cache.keys[0]
        if keys.dtype != computes and not torch.is_autocast_enabled(keys.device.type):
            raise ValueError(
                f"cache holds keys of dtype {keys.dtype}, but the model computes in {computes}: "
                "a cache serves the model as it was when it was filled; prefill again"
            )
        if batch_size is not None and batch_size != B:
            raise ValueError(
                f"cache holds {B} sequences, but idx has {batch_size} rows: one new row per "
                "cached sequence"
            )
    return cache


def prefill(
    model: nn.Module, idx: torch.Tensor, *, left_pad: torch.Tensor | None = None
) -> tuple[torch.Tensor, KVCache]:
    """Read a prompt once and keep every layer's keys and values: generation's first step.

    Costs one ordinary forward pass over the prompt (all positions at once,
    in parallel); afterwards each new token costs one :func:`decode` step
    over a single position. Runs without gradients, in the model's current
    mode (call ``model.eval()`` first for deterministic output).

    Args:
        model: a :class:`attnbook.GPT`.
        idx: the prompts, token ids of shape ``(B, T)``, int64 in
            ``[0, vocab_size)``, ``1 <= T <= context_length``; prompts of
            different lengths padded on the left (:func:`pad_left`).
        left_pad: ``None`` (all prompts fill their row), or the number of
            padding tokens at the start of each row, ``(B,)`` int64 in
            ``[0, T - 1]``; the cache keeps it for :func:`decode`.

    Returns:
        ``(logits, cache)``: the logits of the token after each prompt,
        shape ``(B, V)`` (equal to ``model(idx, left_pad=left_pad)[:, -1]``
        up to rounding), and a :class:`KVCache` holding ``T`` positions.
    """
    c = check_model(model).config
    idx = check_token_ids(idx, "idx", c.vocab_size, c.context_length)
    if left_pad is not None:
        left_pad = check_left_pad(left_pad, idx)
    cache = KVCache(c.n_layers)
    with torch.no_grad():
        logits = model(idx, cache=cache, left_pad=left_pad, last_only=True, validate=False)
    return logits, cache  # (B, V), the cache


def decode(model: nn.Module, next_idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """One generation step with the cache: run one new token per sequence, append to ``cache``.

    Only the new position is projected; its query attends to the ``S``
    cached keys and to itself. ``cache`` grows by one position, in place.
    The model has no position beyond ``context_length``: a full cache
    raises ``ValueError`` (:func:`generate` then re-reads the last
    ``context_length`` tokens with :func:`prefill`).

    Args:
        model: the :class:`attnbook.GPT` that made ``cache``.
        next_idx: the new tokens, shape ``(B, 1)``, int64 in ``[0, vocab_size)``,
            on the cache's device, ``B`` the cache's batch size.
        cache: a :class:`KVCache` from :func:`prefill` of this model, with
            ``1 <= cache.length < context_length``.

    Returns:
        The logits of the token after ``next_idx``, shape ``(B, V)``, equal
        (up to rounding) to the last row of a full forward pass over all
        ``cache.length`` tokens (counted after the append).
    """
    c = check_model(model).config
    check_cache(model, cache)
    if cache.length == 0:
        raise ValueError(
            f"cache must come from this model's prefill: at least one position, got {cache!r}"
        )
    next_idx = check_token_ids(next_idx, "next_idx", c.vocab_size, c.context_length)
    if next_idx.shape != (cache.batch_size, 1):
        raise ValueError(
            f"next_idx must have shape (B, 1) = ({cache.batch_size}, 1) (one new token per "
            f"cached sequence), got {shape_str(next_idx)}"
        )
    if next_idx.device != cache.keys[0].device:
        raise ValueError(
            f"next_idx must be on the cache's device {cache.keys[0].device}, got {next_idx.device}"
        )
    if cache.length >= c.context_length:
        raise ValueError(
            f"cache is full: it holds {cache.length} positions = context_length, and the "
            "model has no position beyond its context; re-read the last context_length "
            "tokens with prefill (as generate does)"
        )
    with torch.no_grad():
        return model(next_idx, cache=cache, last_only=True, validate=False)  # (B, V)


def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    left_pad: torch.Tensor | None = None,
) -> torch.Tensor:
    """Continue token sequences autoregressively: sample a token, append it, repeat.

    Each step feeds the last ``context_length`` tokens (older ones are
    cropped: the model has no position beyond its context), divides the
    next-token logits by ``temperature`` and samples from their softmax.

    With ``use_cache=True`` (the default) the prompt is read once
    (:func:`prefill`) and each new token costs one :func:`decode` step
    instead of a forward pass over the whole window; the tokens are the
    same as with ``use_cache=False`` (the logits agree up to rounding).
    Once the window is full and slides, every cached key is stale: the
    oldest token leaves, so every position (and every later layer's
    keys) would be computed differently. To stay identical to
    ``use_cache=False`` the cache is then rebuilt from the last
    ``context_length`` tokens, which costs a full forward pass per step:
    the cache speeds up generation only while the sequence fits the context.
    ``temperature=0`` is greedy decoding (the argmax), lower temperatures
    sharpen the distribution, higher ones flatten it; ``top_k`` keeps only
    the ``k`` most likely tokens before sampling (and any tied with the
    ``k``-th, as nanoGPT and Hugging Face do). Runs in ``eval()`` mode
    without gradients and restores the model's training mode afterwards.

    Args:
        model: a :class:`attnbook.GPT`.
        idx: the prompts, token ids of shape ``(B, T)``, int64 in
            ``[0, vocab_size)``, ``T >= 1`` (longer than ``context_length`` is fine).
            Prompts of different lengths are padded on the left
            (:func:`pad_left`) and ``left_pad`` says by how much.
        max_new_tokens: ``N >= 0``, the number of tokens to append.
        temperature: ``>= 0``; ``0`` means greedy (as does a temperature
            too small for the logits' dtype, the limit of sampling).
        top_k: ``None`` (all tokens) or an int in ``[1, vocab_size]``.
        generator: the random number generator of the sampling (``None``:
            torch's global one); on the model's device.
        use_cache: keep a :class:`KVCache` between steps (faster, same tokens).
        left_pad: ``None``, or the number of padding tokens at the start of
            each row of ``idx``, ``(B,)`` int64 in ``[0, T - 1]``. Each row
            then generates exactly what it would alone (up to rounding): its
            positions count from its first real token, nothing attends to the
            padding, and once the window slides a row loses its padding
            before its tokens.

    Returns:
        Token ids of shape ``(B, T + N)``: the prompts followed by the new
        tokens (row ``b``'s sequence starts at column ``left_pad[b]``).
    """
    c = check_model(model).config
    if isinstance(idx, torch.Tensor) and idx.ndim == 2:  # any length: cropped below
        check_token_ids(idx, "idx", c.vocab_size, max(c.context_length, idx.shape[1]))
    else:
        check_token_ids(idx, "idx", c.vocab_size, c.context_length)
    check_int(max_new_tokens, "max_new_tokens", minimum=0)
    check_number(temperature, "temperature", 0.0, math.inf)
    if top_k is not None:
        check_int(top_k, "top_k", maximum=c.vocab_size, meaning="or None; at most vocab_size")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {generator!r}")
    check_bool(use_cache, "use_cache")
    if left_pad is not None:
        left_pad = check_left_pad(left_pad, idx)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = idx
            if use_cache and max_new_tokens:
                cache = KVCache(c.n_layers)
                logits = _step(model, *_window(out, left_pad, c.context_length), cache)  # (B, V)
            for step in range(max_new_tokens):
                if not use_cache:
                    logits = _step(model, *_window(out, left_pad, c.context_length), None)
                check_logits(logits, step)
                token = _sample(logits.float(), temperature, top_k, generator)  # (B, 1)
                out = torch.cat([out, token], dim=1)
                if use_cache and step + 1 < max_new_tokens:
                    if cache.length < c.context_length:
                        logits = _step(model, token, None, cache)  # decode one position
                    else:  # the window slides: rebuild the cache (see the docstring)
                        cache = KVCache(c.n_layers)
                        logits = _step(model, *_window(out, left_pad, c.context_length), cache)
    finally:
        model.train(was_training)
    return out  # (B, T + N)


def pad_left(prompts: Sequence[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack prompts of different lengths into one batch, padded on the left.

    Left, not right: every row then ends with its last real token, so the
    next-token logits of all rows sit in the last column, and each new token
    is appended in one column for the whole batch.

    Args:
        prompts: ``B >= 1`` one-dimensional int64 tensors of token ids, each of
            length ``>= 1``, on one device.
        pad_id: the token id written into the padding (any valid id: the
            padding is masked out and never read).

    Returns:
        ``(idx, left_pad)``: the batch ``(B, T)`` with ``T`` the longest
        prompt's length, and the padding tokens at the start of each row
        ``(B,)``, for ``generate(..., left_pad=left_pad)``.
    """
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence) or not prompts:
        raise ValueError(
            "prompts must be a non-empty list of one-dimensional token-id tensors, "
            f"got {type(prompts).__name__}"
        )
    pad_id = check_int(pad_id, "pad_id", minimum=0)
    for i, p in enumerate(prompts):
        if not isinstance(p, torch.Tensor) or p.ndim != 1 or p.dtype != torch.int64 or not len(p):
            got = shape_str(p) + f" {p.dtype}" if isinstance(p, torch.Tensor) else type(p).__name__
            raise ValueError(
                f"prompts[{i}] must be a one-dimensional int64 tensor of token ids, (T_{i},) "
                f"with T_{i} >= 1, got {got}"
            )
        if p.device != prompts[0].device:
            raise ValueError(
                f"prompts must share one device: prompts[0] is on {prompts[0].device}, "
                f"prompts[{i}] on {p.device}"
            )
    longest = max(len(p) for p in prompts)
    idx = torch.full((len(prompts), longest), pad_id, dtype=torch.int64, device=prompts[0].device)
    for row, p in zip(idx, prompts):
        row[longest - len(p) :] = p  # the prompt at the right end, padding before it
    left_pad = torch.tensor([longest - len(p) for p in prompts], device=idx.device)  # (B,)
    return idx, left_pad  # (B, T), (B,)


def _window(
    out: torch.Tensor, left_pad: torch.Tensor | None, context_length: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The last ``context_length`` columns of ``out`` and the padding left in each row."""
    crop = max(out.shape[1] - context_length, 0)  # columns that slid out of the window
    pad = None if left_pad is None else (left_pad - crop).clamp(min=0)  # padding goes first
    return out[:, crop:], pad  # (B, <= context_length), (B,) or None


def _step(
    model: nn.Module, idx: torch.Tensor, left_pad: torch.Tensor | None, cache: KVCache | None
) -> torch.Tensor:
    """The next-token logits ``(B, V)`` after ``idx`` (checked by the caller), growing ``cache``."""
    return model(idx, cache=cache, left_pad=left_pad, last_only=True, validate=False)


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """One token per row of ``logits`` ``(B, V)``: greedy, or sampled with temperature / top-k.

    ``temperature=0`` is the argmax, and so is a temperature too small for the
    logits' dtype (below its smallest normal number: below the smallest
    subnormal it rounds to 0 there, and the best logit divided by it is 0/0,
    NaN): the limit of sampling as the temperature falls. ``top_k`` keeps the
    ``k`` largest logits per row before sampling, and any tied with the ``k``-th
    largest (more than ``k`` tokens can then be drawn).

    Args:
        logits: floating-point, shape ``(B, V)`` with ``V >= 1``; finite numbers or
            ``-inf`` (a token that cannot be drawn), at least one finite per row.
        temperature: ``>= 0``.
        top_k: ``None`` (all tokens) or an int in ``[1, V]``.
        generator: the random number generator of the sampling, or ``None``.

    Returns:
        Token ids of shape ``(B, 1)``.

    Raises:
        ValueError: for logits of another shape or dtype, logits holding NaN or
            ``+inf`` or a row of only ``-inf`` (which have no distribution to
            draw from: ``argmax`` would take a NaN for the largest logit), or a
            ``temperature`` or ``top_k`` out of range.
    """
    if not (isinstance(logits, torch.Tensor) and logits.ndim == 2 and logits.is_floating_point()):
        got = (
            f"shape {shape_str(logits)}, {logits.dtype}"
            if isinstance(logits, torch.Tensor)
            else (type(logits).__name__)
        )
        raise ValueError(f"logits must be a floating-point tensor of shape (B, V), got {got}")
    if logits.shape[1] == 0:
        raise ValueError(f"logits must have shape (B, V) with V >= 1, got {shape_str(logits)}")
    temperature = check_number(temperature, "temperature", 0.0, math.inf)
    if top_k is not None:
        check_int(top_k, "top_k", maximum=logits.shape[-1], meaning="or None; at most V")
    if logits.numel():
        no_nan_or_inf = (logits < math.inf).all()  # NaN compares False
        some_finite = (logits.amax(dim=-1) > -math.inf).all()  # every row can be drawn from
        ok = torch.stack((no_nan_or_inf, some_finite)).tolist()  # one read-back
        if not ok[0]:
            raise ValueError(
                "logits must hold finite numbers or -inf, but they contain NaN or +inf: there "
                "is no distribution to draw from (the model's weights or input hold NaN?)"
            )
        if not ok[1]:
            raise ValueError(
                "logits must have at least one finite value per row, got a row of only -inf: "
                "no token can be drawn from it"
            )
    return _sample(logits, temperature, top_k, generator)


def _sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """:func:`sample_next` on checked arguments (:func:`generate` checks its logits itself)."""
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1), the k-th largest
        logits = logits.masked_fill(logits < kth, -math.inf)  # (B, V), the rest cannot be drawn
    if temperature < torch.finfo(logits.dtype).tiny:  # 0, or a limit the dtype cannot divide by
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    logits = logits - logits.amax(dim=-1, keepdim=True)  # (B, V), max 0: no overflow at tiny T
    probs = torch.softmax(logits / temperature, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)
