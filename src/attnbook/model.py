"""Whole models assembled from blocks: a decoder-only language model (GPT) and an encoder-decoder.

Introduced in chapter 9 (``chapters/09_transformer_block.ipynb``) and trained
in chapter 10. Both models are the same few parts:

- token embeddings plus position information (learned or sinusoidal vectors
  added to the embeddings, or rotary / ALiBi positions inside attention, see
  :mod:`attnbook.positional`);
- a stack of pre-LN blocks from :mod:`attnbook.block`;
- a final LayerNorm and a linear head whose weight *is* the token embedding
  matrix (weight tying: the same vector represents a token going in and
  scores it coming out, which saves ``vocab_size * d_model`` parameters).

Inputs are checked once, at the model's boundary (:meth:`GPT.forward`,
:meth:`EncoderDecoder.forward`); inside, the blocks run their unchecked hot
path, with ``is_causal=True`` so that PyTorch's fused causal kernel applies.

Generation (:meth:`GPT.generate`) can keep a key-value cache
(:class:`KVCache`, chapter 12): :meth:`GPT.prefill` reads the prompt once and
:meth:`GPT.decode` then costs one position per new token.

Shape legend used in this module:
    ``B`` batch, ``T`` (target) positions, ``S`` source positions (or cached
    positions), ``D`` = ``d_model``, ``H`` heads, ``H_kv`` key/value heads,
    ``Dh`` head width, ``V`` vocabulary size, ``C`` context length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import nn

from attnbook._validation import check_probability, shape_str
from attnbook.block import DecoderBlock, EncoderBlock
from attnbook.positional import alibi_bias, sinusoidal_positional_encoding

__all__ = ["GPT", "EncoderDecoder", "EncoderDecoderConfig", "GPTConfig", "KVCache"]

POSITIONAL = ("learned", "sinusoidal", "rope", "alibi")
ROPE_BASE = 10000.0  # the base of the rotary frequencies (Su et al. 2021)

# _SINUSOID_NOTE: fixed sinusoids have entries of size about 1, while token embeddings start
# with entries of size 0.02; added as they are, the positions would drown the tokens. As in
# the original Transformer (Vaswani et al. 2017), token embeddings are multiplied by
# sqrt(d_model) before the sinusoids are added (the tied output head uses them unscaled).


def _check_int(value: object, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_common(config: GPTConfig | EncoderDecoderConfig) -> None:
    """Checks shared by both configs; fills in ``d_ff`` (frozen, hence ``object.__setattr__``)."""
    _check_int(config.context_length, "context_length")
    _check_int(config.d_model, "d_model")
    _check_int(config.n_heads, "n_heads")
    if config.d_model % config.n_heads:
        raise ValueError(
            f"n_heads must divide d_model (each head gets d_model / n_heads features), "
            f"got d_model = {config.d_model} and n_heads = {config.n_heads}"
        )
    if config.d_ff is None:
        object.__setattr__(config, "d_ff", 4 * config.d_model)
    _check_int(config.d_ff, "d_ff")
    check_probability(config.dropout, "dropout")


@dataclass(frozen=True, repr=False)
class GPTConfig:
    """The hyperparameters of a :class:`GPT`; frozen, so a model's config never drifts.

    Example: ``GPTConfig(vocab_size=65, context_length=64, d_model=128,
    n_heads=4, n_layers=4)``. Invalid values raise ``ValueError`` naming the field.
    The printed form leaves out ``n_kv_heads`` while it is ``None`` (the default).
    """

    vocab_size: int  # V, number of distinct token ids (ids are 0 .. V - 1)
    context_length: int  # C, the longest sequence the model accepts
    d_model: int  # D, width of every token's vector (the residual stream)
    n_heads: int  # H, attention heads per layer; must divide d_model
    n_layers: int  # number of transformer blocks
    d_ff: int | None = None  # hidden width of the feed-forward networks; None -> 4 * d_model
    dropout: float = 0.0  # dropout probability everywhere (embeddings, attention, residuals)
    positional: str = "learned"  # "learned", "sinusoidal", "rope" or "alibi"
    # Key/value heads per layer (grouped-query attention, chapter 12): must divide n_heads;
    # None -> n_heads (ordinary multi-head attention), 1 -> multi-query attention.
    n_kv_heads: int | None = None

    def __post_init__(self) -> None:
        _check_int(self.vocab_size, "vocab_size")
        _check_int(self.n_layers, "n_layers")
        _check_common(self)
        if self.n_kv_heads is not None:
            _check_int(self.n_kv_heads, "n_kv_heads")
            if self.n_heads % self.n_kv_heads:
                raise ValueError(
                    f"n_kv_heads must divide n_heads (each key/value head serves n_heads / "
                    f"n_kv_heads query heads), got n_heads = {self.n_heads} and "
                    f"n_kv_heads = {self.n_kv_heads}"
                )
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {POSITIONAL}, got {self.positional!r}")
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                "positional='rope' rotates pairs of features, so d_model / n_heads must be "
                f"even, got d_model = {self.d_model} and n_heads = {self.n_heads}"
            )
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                "positional='sinusoidal' pairs a sine and a cosine per frequency, so d_model "
                f"must be even, got d_model = {self.d_model}"
            )

    def __repr__(self) -> str:
        shown = [
            f for f in fields(self) if not (f.name == "n_kv_heads" and self.n_kv_heads is None)
        ]
        return f"GPTConfig({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in shown)})"


def _check_ids(idx: object, name: str, vocab_size: int, context_length: int) -> torch.Tensor:
    """The boundary check of token ids: ``(B, T)`` int64 in ``[0, V)``, ``1 <= T <= C``."""
    needed = "(B, T)"
    if not isinstance(idx, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch tensor of token ids with shape {needed} and dtype "
            f"torch.int64, got {type(idx).__name__}"
        )
    if idx.dtype != torch.int64:
        raise ValueError(
            f"{name} must hold token ids of dtype torch.int64 (torch.long), got {idx.dtype}; "
            f"convert with {name}.long()"
        )
    if idx.ndim != 2:
        raise ValueError(
            f"{name} must have shape {needed} (a batch of sequences), got {shape_str(idx)}; "
            f"for one sequence use {name}[None]"
        )
    if not 1 <= idx.shape[1] <= context_length:
        raise ValueError(
            f"{name} must have shape {needed} with 1 <= T <= context_length = {context_length}, "
            f"got {shape_str(idx)}"
        )
    # Under torch.compile the range check would break the graph (it reads values back to
    # Python); the compiled model (attnbook.training's compile=True) skips it.
    if idx.numel() and not getattr(torch.compiler, "is_compiling", lambda: False)():
        low, high = torch.aminmax(idx)
        low, high = int(low), int(high)
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} must hold token ids in [0, vocab_size) = [0, {vocab_size}), got ids "
                f"from {low} to {high}"
            )
    return idx


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
    :meth:`GPT.prefill`, grown in place by :meth:`GPT.decode`. Each step
    concatenates one position onto each tensor, which keeps the code short;
    serving systems instead preallocate the memory (or allocate it in pages).

    Attributes:
        keys: one tensor ``(B, H_kv, S, Dh)`` per layer (with rotary positions,
            already rotated), or ``None`` per layer while empty.
        values: one tensor ``(B, H_kv, S, Dh)`` per layer, or ``None``.
    """

    def __init__(self, n_layers: int) -> None:
        n_layers = _check_int(n_layers, "n_layers")
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

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

    def __repr__(self) -> str:
        if self.keys[0] is None:
            return f"KVCache(n_layers={self.n_layers}, empty)"
        B, H_kv, S, Dh = self.keys[0].shape
        return (
            f"KVCache(n_layers={self.n_layers}, batch_size={B}, n_kv_heads={H_kv}, "
            f"length={S}, d_head={Dh}, dtype={self.keys[0].dtype}, nbytes={self.nbytes})"
        )


def _init_gpt2(module: nn.Module, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases, residual outputs scaled down.

    The two linear maps that write into the residual stream in each block
    (attention's ``out_proj`` and the feed-forward ``linear2``) get standard
    deviation ``0.02 / sqrt(2 * n_layers)``: the stream is a sum of ``2 *
    n_layers`` such writes, so its variance at initialisation stays near that
    of the embeddings, whatever the depth (Radford et al. 2019).
    """
    for name, p in module.named_parameters():
        if p.ndim == 1:
            continue  # LayerNorm weights stay 1, biases are zeroed below
        std = 0.02
        if name.endswith(("out_proj.weight", "linear2.weight")):
            std = 0.02 / math.sqrt(2 * n_layers)
        nn.init.normal_(p, mean=0.0, std=std)
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)


class GPT(nn.Module):
    """A decoder-only transformer language model: token ids in, next-token logits out.

    ``logits[b, t]`` scores every vocabulary entry as the token that follows
    ``idx[b, :t + 1]``; the causal mask guarantees that it depends on no later
    token. Architecture (pre-LN, as GPT-2): token embedding (+ learned or
    sinusoidal position vectors), dropout, ``n_layers`` :class:`~attnbook.block.EncoderBlock`
    run causally, a final LayerNorm, and a linear head tied to the token
    embedding. Sinusoidal positions are added to token embeddings scaled by
    ``sqrt(d_model)`` (as in the original Transformer), so that the fixed
    unit-size sinusoids do not drown them. With ``positional="rope"`` the blocks rotate queries and keys;
    with ``"alibi"`` a per-head distance penalty is added to the scores (built
    once per forward pass and shared by every layer).

    Args:
        config: a :class:`GPTConfig`.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)  # weight (V, D)
        self.pos_emb = (
            nn.Embedding(c.context_length, c.d_model) if c.positional == "learned" else None
        )
        if c.positional == "sinusoidal":  # fixed, so not a parameter (nor saved in state_dict)
            pe = sinusoidal_positional_encoding(c.context_length, c.d_model)  # (C, D)
            self.register_buffer("pos_table", pe, persistent=False)
        else:
            self.pos_table = None
        self.embed_scale = math.sqrt(c.d_model) if c.positional == "sinusoidal" else 1.0
        self.dropout = nn.Dropout(c.dropout)
        rope_base = ROPE_BASE if c.positional == "rope" else None
        self.blocks = nn.ModuleList(
            EncoderBlock(
                c.d_model,
                c.n_heads,
                c.d_ff,
                c.dropout,
                rope_base=rope_base,
                n_kv_heads=c.n_kv_heads,
            )
            for _ in range(c.n_layers)
        )
        self.norm = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)  # weight (V, D)
        _init_gpt2(self, c.n_layers)
        self.lm_head.weight = self.tok_emb.weight  # tied: one (V, D) matrix, in and out

    def num_parameters(self, *, include_embeddings: bool = True) -> int:
        """Count the trainable parameters once each (the tied head is not counted twice).

        Args:
            include_embeddings: if ``False``, leave out the token and learned
                position embeddings (the count scaling laws usually quote).

        Returns:
            The number of scalar parameters.
        """
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a tied tensor once
        if not include_embeddings:
            n -= self.tok_emb.weight.numel()
            if self.pos_emb is not None:
                n -= self.pos_emb.weight.numel()
        return n

    def _attention_bias(
        self, seq_len: int, device: torch.device, dtype: torch.dtype
    ) -> torch.Tensor | None:
        """ALiBi's additive mask ``(H, T, T)``: the distance penalty, ``-inf`` above the diagonal."""
        if self.config.positional != "alibi":
            return None
        return alibi_bias(self.config.n_heads, seq_len, device=device).to(dtype)  # (H, T, T)

    def _embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token embeddings ``(B, T, D)`` plus the position vectors of positions ``start..start+T-1``."""
        x = self.tok_emb(idx)  # (B, T) -> (B, T, D)
        stop = start + idx.shape[1]
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[start:stop]  # (B, T, D) + (T, D)
        elif self.pos_table is not None:  # scaled up as in Vaswani et al., see _SINUSOID_NOTE
            x = x * self.embed_scale + self.pos_table[start:stop].to(x.dtype)  # (B, T, D) + (T, D)
        return self.dropout(x) if self.training and self.config.dropout > 0 else x

    def _run(self, idx: torch.Tensor, need_weights: bool) -> tuple[torch.Tensor, list]:
        x = self._embed(idx)  # (B, T, D)
        bias = self._attention_bias(idx.shape[1], x.device, x.dtype)  # (H, T, T) or None
        # ALiBi's bias already holds the causal -inf: pass it as the mask, is_causal off.
        is_causal = bias is None
        all_weights = []
        for block in self.blocks:
            x, weights = block._forward(x, bias, is_causal, need_weights)  # (B, T, D)
            all_weights.append(weights)
        return x, all_weights

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits for every position of a batch of token sequences.

        Args:
            idx: token ids, shape ``(B, T)``, dtype ``torch.int64``, values in
                ``[0, vocab_size)``, with ``1 <= T <= context_length``.

        Returns:
            Logits of shape ``(B, T, vocab_size)``: ``logits[b, t]`` scores the
            token that follows ``idx[b, :t + 1]`` (apply a softmax for probabilities).
        """
        c = self.config
        idx = _check_ids(idx, "idx", c.vocab_size, c.context_length)
        x, _ = self._run(idx, need_weights=False)
        return self.lm_head(self.norm(x))  # (B, T, D) @ (D, V) -> (B, T, V)

    def attention_weights(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's attention weights for ``idx``, for inspection and figures.

        Runs one extra forward pass without gradients, asking each layer for its
        weights; the ordinary :meth:`forward` never computes them. Put the model
        in ``eval()`` mode first unless you want the weights after dropout.

        Args:
            idx: token ids as in :meth:`forward`, shape ``(B, T)``.

        Returns:
            A list of ``n_layers`` tensors, each of shape ``(B, n_heads, T, T)``;
            row ``t`` of a head holds the weights of query ``t`` over keys
            ``0..T-1`` (zero for ``s > t``), summing to 1.
        """
        c = self.config
        idx = _check_ids(idx, "idx", c.vocab_size, c.context_length)
        with torch.no_grad():
            _, weights = self._run(idx, need_weights=True)
        return weights

    def _next_logits(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of the token after each sequence: ``(B, T)`` -> ``(B, V)``, no checks.

        One full forward pass over the window; only the last position goes
        through the head. This is generation without a cache (``use_cache=False``).
        """
        x, _ = self._run(idx, need_weights=False)  # (B, T, D)
        return self.lm_head(self.norm(x[:, -1]))  # (B, D) @ (D, V) -> (B, V)

    def _run_cached(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run ``T`` new tokens ``(B, T)`` after the ``S_past`` cached ones; grow ``cache``; no checks.

        Positions continue where the cache ends: learned and sinusoidal vectors
        of positions ``S_past..S_past+T-1``, rotary angles of those positions
        (inside attention), ALiBi's bias rows of those queries over all
        ``S_past + T`` keys. Returns the logits of the token after the last
        one, ``(B, V)``.
        """
        n_past, seq_len = cache.length, idx.shape[1]
        x = self._embed(idx, n_past)  # (B, T, D)
        bias = None  # the causal rule, bottom-right aligned: new tokens see all cached ones
        if self.config.positional == "alibi":
            bias = alibi_bias(self.config.n_heads, seq_len, n_past + seq_len, device=x.device)
            bias = bias.to(x.dtype)  # (H, T, S_past + T), -inf above the diagonal
        for i, block in enumerate(self.blocks):
            x, cache.keys[i], cache.values[i] = block._forward_cached(
                x, cache.keys[i], cache.values[i], bias
            )  # (B, T, D), (B, H_kv, S_past + T, Dh) x 2
        return self.lm_head(self.norm(x[:, -1]))  # (B, D) @ (D, V) -> (B, V)

    def prefill(self, idx: torch.Tensor) -> tuple[torch.Tensor, KVCache]:
        """Read a prompt once and keep every layer's keys and values: generation's first step.

        Costs one ordinary forward pass over the prompt (all positions at once,
        in parallel); afterwards each new token costs one :meth:`decode` step
        over a single position. Runs without gradients, in the model's current
        mode (call ``model.eval()`` first for deterministic output).

        Args:
            idx: the prompts, token ids of shape ``(B, T)``, int64 in
                ``[0, vocab_size)``, ``1 <= T <= context_length``.

        Returns:
            ``(logits, cache)``: the logits of the token after each prompt,
            shape ``(B, V)`` (equal to ``self(idx)[:, -1]`` up to rounding),
            and a :class:`KVCache` holding ``T`` positions.
        """
        c = self.config
        idx = _check_ids(idx, "idx", c.vocab_size, c.context_length)
        cache = KVCache(c.n_layers)
        with torch.no_grad():
            logits = self._run_cached(idx, cache)  # (B, V)
        return logits, cache

    def decode(self, next_idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One generation step with the cache: run one new token per sequence, append to ``cache``.

        Only the new position is projected; its query attends to the ``S``
        cached keys and to itself. ``cache`` grows by one position, in place.
        The model has no position beyond ``context_length``: a full cache
        raises ``ValueError`` (:meth:`generate` then re-reads the last
        ``context_length`` tokens with :meth:`prefill`).

        Args:
            next_idx: the new tokens, shape ``(B, 1)``, int64 in ``[0, vocab_size)``,
                on the cache's device, ``B`` the cache's batch size.
            cache: a :class:`KVCache` from :meth:`prefill` of this model, with
                ``1 <= cache.length < context_length``.

        Returns:
            The logits of the token after ``next_idx``, shape ``(B, V)``, equal
            (up to rounding) to the last row of a full forward pass over all
            ``cache.length`` tokens (counted after the append).
        """
        c = self.config
        if not isinstance(cache, KVCache):
            raise ValueError(
                f"cache must be a KVCache from GPT.prefill, got {type(cache).__name__}"
            )
        if cache.n_layers != c.n_layers or cache.length == 0:
            raise ValueError(
                f"cache must come from this model's prefill: {c.n_layers} layers and at least "
                f"one position, got {cache!r}"
            )
        _, n_kv, _, d_head = cache.keys[0].shape
        if (n_kv, d_head) != (self.blocks[0].self_attn.n_kv_heads, c.d_model // c.n_heads):
            raise ValueError(
                "cache must hold keys of shape (B, H_kv, S, Dh) = (B, "
                f"{self.blocks[0].self_attn.n_kv_heads}, S, {c.d_model // c.n_heads}) "
                f"for this model, got {shape_str(cache.keys[0])}"
            )
        next_idx = _check_ids(next_idx, "next_idx", c.vocab_size, c.context_length)
        if next_idx.shape != (cache.batch_size, 1):
            raise ValueError(
                f"next_idx must have shape (B, 1) = ({cache.batch_size}, 1) (one new token per "
                f"cached sequence), got {shape_str(next_idx)}"
            )
        if next_idx.device != cache.keys[0].device:
            raise ValueError(
                f"next_idx must be on the cache's device {cache.keys[0].device}, "
                f"got {next_idx.device}"
            )
        if cache.length >= c.context_length:
            raise ValueError(
                f"cache is full: it holds {cache.length} positions = context_length, and the "
                "model has no position beyond its context; re-read the last context_length "
                "tokens with prefill (as generate does)"
            )
        with torch.no_grad():
            return self._run_cached(next_idx, cache)  # (B, V)

    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Continue token sequences autoregressively: sample a token, append it, repeat.

        Each step feeds the last ``context_length`` tokens (older ones are
        cropped: the model has no position beyond its context), divides the
        next-token logits by ``temperature`` and samples from their softmax.

        With ``use_cache=True`` (the default) the prompt is read once
        (:meth:`prefill`) and each new token costs one :meth:`decode` step
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
        the ``k`` most likely tokens before sampling. Runs in ``eval()`` mode
        without gradients and restores the model's training mode afterwards.

        Args:
            idx: the prompts, token ids of shape ``(B, T)``, int64 in
                ``[0, vocab_size)``, ``T >= 1`` (longer than ``context_length`` is fine).
            max_new_tokens: ``N >= 0``, the number of tokens to append.
            temperature: ``>= 0``; ``0`` means greedy.
            top_k: ``None`` (all tokens) or an int in ``[1, vocab_size]``.
            generator: the random number generator of the sampling (``None``:
                torch's global one); on the model's device.
            use_cache: keep a :class:`KVCache` between steps (faster, same tokens).

        Returns:
            Token ids of shape ``(B, T + N)``: the prompts followed by the new tokens.
        """
        c = self.config
        if isinstance(idx, torch.Tensor) and idx.ndim == 2:  # any length: cropped below
            _check_ids(idx, "idx", c.vocab_size, max(c.context_length, idx.shape[1]))
        else:
            _check_ids(idx, "idx", c.vocab_size, c.context_length)
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool):
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens}")
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0.0 <= temperature < math.inf
        ):
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
        if top_k is not None and (
            isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= c.vocab_size
        ):
            raise ValueError(
                f"top_k must be None or an int in [1, vocab_size] = [1, {c.vocab_size}], "
                f"got {top_k!r}"
            )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator or None, got {generator!r}")
        if not isinstance(use_cache, bool):
            raise ValueError(f"use_cache must be True or False, got {use_cache!r}")
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                out = idx
                if use_cache and max_new_tokens:
                    cache = KVCache(c.n_layers)
                    logits = self._run_cached(out[:, -c.context_length :], cache)  # (B, V)
                for step in range(max_new_tokens):
                    if not use_cache:
                        logits = self._next_logits(out[:, -c.context_length :])  # (B, V)
                    token = _sample(logits.float(), temperature, top_k, generator)  # (B, 1)
                    out = torch.cat([out, token], dim=1)
                    if use_cache and step + 1 < max_new_tokens:
                        if cache.length < c.context_length:
                            logits = self._run_cached(token, cache)  # decode one position
                        else:  # the window slides: rebuild the cache (see the docstring)
                            cache = KVCache(c.n_layers)
                            logits = self._run_cached(out[:, -c.context_length :], cache)
        finally:
            self.train(was_training)
        return out  # (B, T + N)


def _sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """One token per row of ``logits`` ``(B, V)``: greedy, or sampled with temperature / top-k."""
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1), the k-th largest
        logits = logits.masked_fill(logits < kth, -math.inf)  # (B, V), the rest cannot be drawn
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    probs = torch.softmax(logits / temperature, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


@dataclass(frozen=True)
class EncoderDecoderConfig:
    """The hyperparameters of an :class:`EncoderDecoder`; frozen. Invalid values raise ``ValueError``."""

    src_vocab_size: int  # V_src, token ids of the source (encoder) side are 0 .. V_src - 1
    tgt_vocab_size: int  # V_tgt, token ids of the target (decoder) side are 0 .. V_tgt - 1
    context_length: int  # C, longest source and longest target sequence
    d_model: int  # D, width of the residual stream (encoder and decoder alike)
    n_heads: int  # H, heads of every attention; must divide d_model
    n_encoder_layers: int  # number of encoder blocks
    n_decoder_layers: int  # number of decoder blocks
    d_ff: int | None = None  # feed-forward hidden width; None -> 4 * d_model
    dropout: float = 0.0  # dropout probability everywhere

    def __post_init__(self) -> None:
        _check_int(self.src_vocab_size, "src_vocab_size")
        _check_int(self.tgt_vocab_size, "tgt_vocab_size")
        _check_int(self.n_encoder_layers, "n_encoder_layers")
        _check_int(self.n_decoder_layers, "n_decoder_layers")
        _check_common(self)
        if self.d_model % 2:
            raise ValueError(
                "d_model must be even (the sinusoidal positions pair a sine and a cosine), "
                f"got d_model = {self.d_model}"
            )


class EncoderDecoder(nn.Module):
    """An encoder-decoder transformer (the original architecture), pre-LN.

    The encoder reads the whole source sequence with unmasked self-attention
    (a padding mask aside); the decoder generates the target left to right,
    reading the target so far causally and the encoder's output through
    cross-attention. Positions are the fixed sinusoids of the original paper;
    each side has its own token embedding, the decoder's tied to its output head.

    Args:
        config: an :class:`EncoderDecoderConfig`.
    """

    def __init__(self, config: EncoderDecoderConfig) -> None:
        super().__init__()
        if not isinstance(config, EncoderDecoderConfig):
            raise ValueError(f"config must be an EncoderDecoderConfig, got {type(config).__name__}")
        self.config = c = config
        self.src_emb = nn.Embedding(c.src_vocab_size, c.d_model)  # (V_src, D)
        self.tgt_emb = nn.Embedding(c.tgt_vocab_size, c.d_model)  # (V_tgt, D)
        pe = sinusoidal_positional_encoding(c.context_length, c.d_model)  # (C, D)
        self.register_buffer("pos_table", pe, persistent=False)
        self.embed_scale = math.sqrt(c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = nn.ModuleList(
            EncoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout) for _ in range(c.n_encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(c.d_model)
        self.decoder = nn.ModuleList(
            DecoderBlock(c.d_model, c.n_heads, c.d_ff, c.dropout) for _ in range(c.n_decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)  # (V_tgt, D)
        _init_gpt2(self, max(c.n_encoder_layers, c.n_decoder_layers))
        self.lm_head.weight = self.tgt_emb.weight  # tied

    def num_parameters(self) -> int:
        """The number of trainable scalar parameters (the tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def _embed(self, idx: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        pe = self.pos_table[: idx.shape[1]].to(table.weight.dtype)  # (T, D)
        x = table(idx) * self.embed_scale + pe  # (B, T, D), scaled: see _SINUSOID_NOTE
        return self.dropout(x) if self.training and self.config.dropout > 0 else x

    def _check_src_mask(self, src_mask: object, src: torch.Tensor) -> torch.Tensor | None:
        if src_mask is None:
            return None
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
            raise ValueError("src_mask must be a boolean tensor of shape (B, S), True = real token")
        if src_mask.shape != src.shape:
            raise ValueError(
                f"src_mask must have shape (B, S) = {shape_str(src)} like src, "
                f"got {shape_str(src_mask)}"
            )
        return src_mask[:, None, None, :]  # (B, 1, 1, S): broadcasts over heads and queries

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Read the source: token ids ``(B, S)`` -> the context ``(B, S, D)``.

        Args:
            src: source token ids, shape ``(B, S)``, int64 in ``[0, src_vocab_size)``.
            src_mask: optional boolean ``(B, S)``, ``True`` at real tokens and
                ``False`` at padding (no position attends to padding).

        Returns:
            The encoder's output, shape ``(B, S, D)``.
        """
        c = self.config
        src = _check_ids(src, "src", c.src_vocab_size, c.context_length)
        return self._encode(src, self._check_src_mask(src_mask, src))

    def _encode(self, src: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        x = self._embed(src, self.src_emb)  # (B, S, D)
        for block in self.encoder:
            x, _ = block._forward(x, key_mask, False, False)  # (B, S, D)
        return self.encoder_norm(x)

    def forward(
        self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Next-token logits of the target, given the source.

        Args:
            src: source token ids, shape ``(B, S)``, int64 in ``[0, src_vocab_size)``.
            tgt: target token ids so far, shape ``(B, T)``, int64 in ``[0, tgt_vocab_size)``.
            src_mask: optional boolean ``(B, S)``, ``True`` at real source tokens.

        Returns:
            Logits of shape ``(B, T, tgt_vocab_size)``: ``logits[b, t]`` scores
            the target token after ``tgt[b, :t + 1]``, given all of ``src[b]``.
        """
        c = self.config
        src = _check_ids(src, "src", c.src_vocab_size, c.context_length)
        tgt = _check_ids(tgt, "tgt", c.tgt_vocab_size, c.context_length)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src (B, S) and tgt (B, T) must have the same batch size B, "
                f"got {shape_str(src)} and {shape_str(tgt)}"
            )
        key_mask = self._check_src_mask(src_mask, src)  # (B, 1, 1, S) or None
        context = self._encode(src, key_mask)  # (B, S, D)
        x = self._embed(tgt, self.tgt_emb)  # (B, T, D)
        for block in self.decoder:
            x, _ = block._forward(x, context, None, key_mask, True, False)  # (B, T, D)
        return self.lm_head(self.decoder_norm(x))  # (B, T, V_tgt)
