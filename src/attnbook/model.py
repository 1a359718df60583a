"""A whole model assembled from blocks: the decoder-only language model (GPT).

Introduced in chapter 9 (``chapters/09_transformer_block.ipynb``) and trained
in chapter 10. It and the encoder-decoder of :mod:`attnbook.encoder_decoder`
are the same few parts:

- token embeddings plus position information (learned or sinusoidal vectors
  added to the embeddings, or rotary / ALiBi positions inside attention, see
  :mod:`attnbook.positional`);
- a stack of pre-LN blocks from :mod:`attnbook.block`;
- a final LayerNorm and a linear head whose weight *is* the token embedding
  matrix (weight tying: the same vector represents a token going in and
  scores it coming out, which saves ``vocab_size * d_model`` parameters).

The defaults are GPT-2's block with exact GELU; ``GPTConfig`` also chooses the
norm (``norm="rms"``), the feed-forward network (``ffn="gelu_tanh"``,
``"swiglu"``), biases, tying and grouped-query attention, and its presets
:meth:`GPTConfig.gpt2` and :meth:`GPTConfig.llama` name the two families.
:meth:`GPT.from_hf` copies a Hugging Face GPT-2 or Llama model into a ``GPT``
(see :mod:`attnbook.pretrained`).

Inputs are checked once, at the model's boundary (:meth:`GPT.forward`);
inside, the blocks run with ``validate=False`` and ``is_causal=True``, so
that PyTorch's fused causal kernel applies.

Generation (:meth:`GPT.generate`, with a key-value cache, chapter 14) lives
in :mod:`attnbook.generation`, the encoder-decoder in
:mod:`attnbook.encoder_decoder` (both re-exported from ``attnbook``).
Position information is one pluggable object (:mod:`attnbook.positional`'s
``POSITIONAL_ENCODINGS``) whose hooks the model calls.

Shape legend used in this module:
    ``B`` batch, ``T`` (target) positions, ``S`` source positions (or cached
    positions), ``D`` = ``d_model``, ``H`` heads, ``H_kv`` key/value heads,
    ``Dh`` head width, ``V`` vocabulary size, ``T_max`` context length.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import nn

from attnbook import generation
from attnbook._validation import (
    check_bool,
    check_int,
    check_left_pad,
    check_token_ids,
    plain_numbers,
)
from attnbook.block import BlockConfig, EncoderBlock, SwiGLU
from attnbook.generation import KVCache
from attnbook.multihead import AttentionConfig
from attnbook.positional import POSITIONAL_ENCODINGS, RotaryPositions

__all__ = ["GPT", "GPTConfig", "KVCache"]


def check_model_widths(config: object, *, n_kv_heads: int | None = None) -> None:
    """The checks every model config shares; fills in ``d_ff`` (frozen: ``object.__setattr__``).

    ``context_length``, ``d_model``, ``n_heads`` (with its divisibility and
    ``n_kv_heads``', stated once in :class:`~attnbook.multihead.AttentionConfig`),
    ``d_ff`` and ``dropout``.
    """
    check_int(config.context_length, "context_length")
    AttentionConfig(config.d_model, config.n_heads, config.dropout, n_kv_heads=n_kv_heads)
    if config.d_ff is None:
        object.__setattr__(config, "d_ff", 4 * config.d_model)
    check_int(config.d_ff, "d_ff")


@dataclass(frozen=True, repr=False)
class GPTConfig:
    """The hyperparameters of a :class:`GPT`; frozen, so a model's config never drifts.

    Example: ``GPTConfig(vocab_size=65, context_length=64, d_model=128,
    n_heads=4, n_layers=4)``. Invalid values raise ``ValueError`` naming the field.
    The defaults are the book's GPT (pre-LN, exact GELU, learned positions,
    biases, tied embeddings); :meth:`gpt2` and :meth:`llama` name two families.
    The printed form (and :meth:`to_dict`) leaves out ``n_kv_heads`` and the
    fields after it while they hold their defaults.
    """

    vocab_size: int  # V, number of distinct token ids (ids are 0 .. V - 1)
    context_length: int  # T_max, the longest sequence the model accepts
    d_model: int  # D, width of every token's vector (the residual stream)
    n_heads: int  # H, attention heads per layer; must divide d_model
    n_layers: int  # number of transformer blocks
    d_ff: int | None = None  # feed-forward hidden width; None -> 4 * d_model (SwiGLU: ~8/3 d_model)
    dropout: float = 0.0  # dropout probability everywhere (embeddings, attention, residuals)
    positional: str = (
        "learned"  # a key of POSITIONAL_ENCODINGS: "learned", "sinusoidal", "rope", "alibi"
    )
    # Key/value heads per layer (grouped-query attention, chapter 14): must divide n_heads;
    # None -> n_heads (ordinary multi-head attention), 1 -> multi-query attention.
    n_kv_heads: int | None = None
    norm: str = "layer"  # a key of attnbook.block.NORMS: "layer" (LayerNorm) or "rms" (RMSNorm)
    ffn: str = "gelu"  # a key of attnbook.block.FEED_FORWARDS: "gelu", "gelu_tanh", "swiglu"
    bias: bool = True  # biases in every Linear (not the head) and every LayerNorm
    tie_embeddings: bool = True  # the head's weight is the token embedding matrix
    norm_eps: float = 1e-5  # eps of every norm
    rope_base: float = 10000.0  # base of the rotary frequencies (positional="rope" only)

    def __post_init__(self) -> None:
        plain_numbers(self)  # NumPy ints and floats, as Python's
        check_int(self.vocab_size, "vocab_size")
        check_int(self.n_layers, "n_layers")
        if self.ffn == "swiglu" and self.d_ff is None:  # 8/3 d_model: a GELU network's parameters
            object.__setattr__(self, "d_ff", SwiGLU.default_d_ff(self.d_model))
        check_model_widths(self, n_kv_heads=self.n_kv_heads)
        check_bool(self.bias, "bias")
        check_bool(self.tie_embeddings, "tie_embeddings")
        RotaryPositions.check_base(self.rope_base, "rope_base")  # used with positional="rope"
        self.block_config()  # checks norm, ffn and norm_eps
        if not isinstance(self.positional, str) or self.positional not in POSITIONAL_ENCODINGS:
            raise ValueError(
                f"positional must be one of {tuple(POSITIONAL_ENCODINGS)}, got {self.positional!r}"
            )
        POSITIONAL_ENCODINGS[self.positional].check_config(self)

    def block_config(self) -> BlockConfig:
        """The settings every block of the model shares (pre-LN; rotary positions come apart)."""
        attention = AttentionConfig(
            self.d_model, self.n_heads, self.dropout, bias=self.bias, n_kv_heads=self.n_kv_heads
        )
        return BlockConfig(
            attention,
            self.d_ff,
            norm_first=True,
            norm=self.norm,
            ffn=self.ffn,
            norm_eps=self.norm_eps,
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, leaving out ``n_kv_heads`` and later fields at their defaults.

        So the printed form and saved checkpoints of a model built without
        them read as they did before they existed.
        """
        values = asdict(self)
        names = [f.name for f in fields(self)]
        for f in fields(self)[names.index("n_kv_heads") :]:
            if values[f.name] == f.default:
                del values[f.name]
        return values

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.to_dict().items())
        return f"GPTConfig({shown})"

    @classmethod
    def gpt2(
        cls,
        vocab_size: int,
        context_length: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        **overrides: Any,
    ) -> GPTConfig:
        """A GPT-2-style model (Radford et al. 2019), as OpenAI's released checkpoints are built.

        - pre-LN blocks with LayerNorm (eps ``1e-5``), as GPT-2 moved the norm
          in front of each sub-layer (GPT-1 and the original Transformer had it after);
        - GELU with the tanh approximation (``ffn="gelu_tanh"``, GPT-2's
          ``gelu_new``), hidden width ``4 * d_model``;
        - learned absolute positions (``positional="learned"``), so no position
          beyond ``context_length`` (1024 in GPT-2);
        - biases in every linear map and norm (``bias=True``);
        - the head tied to the token embedding (``tie_embeddings=True``).

        GPT-2 small is ``GPTConfig.gpt2(50257, 1024, 768, 12, 12)``.
        ``overrides`` replace any field, e.g. ``dropout=0.1``.
        """
        settings = dict(
            positional="learned", norm="layer", ffn="gelu_tanh", bias=True, tie_embeddings=True
        )
        settings.update(overrides)
        return cls(vocab_size, context_length, d_model, n_heads, n_layers, **settings)

    @classmethod
    def llama(
        cls,
        vocab_size: int,
        context_length: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        n_kv_heads: int | None = None,
        **overrides: Any,
    ) -> GPTConfig:
        """A Llama-style model (Touvron et al. 2023): the block most open models use today.

        - pre-norm blocks with :class:`~attnbook.block.RMSNorm` (``norm="rms"``,
          eps ``1e-5`` as Llama 2 and 3; Llama 1 used ``1e-6``, pass ``norm_eps``);
        - the gated :class:`~attnbook.block.SwiGLU` feed-forward network
          (``ffn="swiglu"``), hidden width about ``8/3 * d_model`` unless ``d_ff`` is given;
        - rotary positions inside attention (``positional="rope"``, base
          ``rope_base=10000``; Llama 3 uses 500000), nothing added to the embeddings;
        - no biases anywhere (``bias=False``);
        - a head separate from the token embedding (``tie_embeddings=False``);
        - grouped-query attention when ``n_kv_heads`` < ``n_heads`` (Llama 2 34B and 70B, Llama 3).

        ``overrides`` replace any field, e.g. ``rope_base=500000.0``.
        """
        settings = dict(
            positional="rope",
            norm="rms",
            ffn="swiglu",
            bias=False,
            tie_embeddings=False,
            n_kv_heads=n_kv_heads,
        )
        settings.update(overrides)
        return cls(vocab_size, context_length, d_model, n_heads, n_layers, **settings)


def init_gpt2(module: nn.Module, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, zero biases, residual outputs scaled down.

    The two linear maps that write into the residual stream in each block
    (attention's ``out_proj`` and the feed-forward ``linear2`` or ``down``) get standard
    deviation ``0.02 / sqrt(2 * n_layers)``: the stream is a sum of ``2 *
    n_layers`` such writes, so its variance at initialisation does not grow
    with the depth. The GPT-2 report (Radford et al. 2019) scales residual
    layers by ``1/sqrt(N)``, ``N`` the number of residual layers; ``N = 2 *
    n_layers`` is nanoGPT's and Hugging Face's reading (OpenAI's released code
    scales nothing). The variance does grow with the width: after the last
    block it is about 1.5 times the embeddings' variance at ``d_model = 64``
    and about 100 times at 768, for 2 layers as for 12.
    """
    for name, p in module.named_parameters():
        if p.ndim == 1:
            continue  # LayerNorm weights stay 1, biases are zeroed below
        std = 0.02
        if name.endswith(("out_proj.weight", "linear2.weight", "down.weight")):
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
    ``sqrt(d_model)`` (as in the original Transformer); with GPT-2's
    initialisation the positions still start larger than the tokens (see
    :class:`~attnbook.positional.SinusoidalPositions`). With ``positional="rope"`` the blocks rotate queries and keys;
    with ``"alibi"`` a per-head distance penalty is added to the scores (built
    once per forward pass and shared by every layer). The encoding is one
    object, ``pos_emb`` (see :class:`~attnbook.positional.PositionalEncoding`),
    whose hooks the model calls. ``config.norm``, ``config.ffn``, ``config.bias``
    and ``config.tie_embeddings`` swap in RMSNorm, GPT-2's tanh GELU or SwiGLU,
    drop the biases or untie the head (:meth:`GPTConfig.llama` does all of it);
    the defaults build the model described above.

    Args:
        config: a :class:`GPTConfig`.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)  # weight (V, D)
        self.pos_emb = POSITIONAL_ENCODINGS[c.positional].from_config(c)  # the position hooks
        self.dropout = nn.Dropout(c.dropout)
        rotary = self.pos_emb if self.pos_emb.rotates else None  # turns q and k in attention
        blocks = c.block_config()  # norm, feed-forward kind, biases: the same in every block
        self.blocks = nn.ModuleList(
            EncoderBlock.from_config(blocks, positional=rotary) for _ in range(c.n_layers)
        )
        self.norm = blocks.make_norm()  # the final norm, before the head
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)  # weight (V, D)
        init_gpt2(self, c.n_layers)
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight  # tied: one (V, D) matrix, in and out

    @classmethod
    def from_hf(cls, model: Any) -> GPT:
        """A ``GPT`` computing what a Hugging Face ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` computes.

        The weights are copied (the two models share nothing); the result is in
        ``eval()`` mode, in the dtype of ``model``'s weights. See
        :func:`attnbook.pretrained.from_hf` for how each weight maps and what is
        not supported (``ValueError`` naming the setting).

        Args:
            model: a ``transformers`` ``GPT2LMHeadModel`` or ``LlamaForCausalLM``, any size.

        Returns:
            The :class:`GPT`.
        """
        from attnbook.pretrained import from_hf

        return from_hf(model)

    @classmethod
    def from_pretrained(cls, name: str) -> GPT:
        """Download a GPT-2 or Llama checkpoint from the Hugging Face Hub and copy it into a ``GPT``.

        Needs ``transformers`` and a network (or a filled Hugging Face cache),
        e.g. ``GPT.from_pretrained("gpt2")`` for GPT-2 small (124M
        parameters, about 550 MB). See :func:`attnbook.pretrained.from_pretrained`.

        Args:
            name: a model id on the Hub (``"gpt2"``, ``"gpt2-medium"``, ...) or a local folder.

        Returns:
            The :class:`GPT`, in ``eval()`` mode.

        Raises:
            ValueError: for a GPT-2 that is none of its sizes (``"gpt2-small"``), before any
                download.
            OSError: where ``transformers`` cannot load the model: an unknown id, no network,
                or offline (``HF_HUB_OFFLINE=1``) without the model in the Hugging Face cache.
        """
        from attnbook.pretrained import from_pretrained

        return from_pretrained(name)

    def num_parameters(self, *, include_embeddings: bool = True) -> int:
        """Count the trainable parameters once each (the tied head is not counted twice).

        Args:
            include_embeddings: if ``False``, leave out the token and learned
                position embeddings (the count scaling laws usually quote).

        Returns:
            The number of scalar parameters.
        """
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a tied tensor once
        if not check_bool(include_embeddings, "include_embeddings"):
            n -= self.tok_emb.weight.numel()
            n -= sum(p.numel() for p in self.pos_emb.parameters())
        return n

    def forward(
        self,
        idx: torch.Tensor,
        *,
        cache: KVCache | None = None,
        left_pad: torch.Tensor | None = None,
        last_only: bool = False,
        validate: bool = True,
    ) -> torch.Tensor:
        """Next-token logits for every position of a batch of token sequences.

        Args:
            idx: token ids, shape ``(B, T)``, dtype ``torch.int64``, values in
                ``[0, vocab_size)``, with ``1 <= T <= context_length``.
            cache: a :class:`~attnbook.generation.KVCache` of earlier positions
                (generation, chapter 14): ``idx`` then holds the ``T`` new tokens,
                at positions ``cache.length..``, and their keys and values are
                appended to ``cache``.
            left_pad: ``None``, or for a batch of sequences of different lengths
                padded on the left (:func:`attnbook.generation.pad_left`), the
                number of padding tokens at the start of each row, ``(B,)``
                int64 in ``[0, T - 1]``. Each row's first real token is then
                at position 0, and no position attends to padding. Given to the
                first call with a cache (the prefill), which keeps it for the
                calls that follow.
            last_only: return only the last position's logits ``(B, V)`` (what
                generation needs; the head then runs on one position).
            validate: ``False`` skips the checks of ``idx`` (for a caller that
                has checked it, e.g. the generation loop).

        Returns:
            Logits of shape ``(B, T, vocab_size)``: ``logits[b, t]`` scores the
            token that follows ``idx[b, :t + 1]`` (apply a softmax for probabilities);
            ``(B, vocab_size)`` with ``last_only=True``.
        """
        if validate:
            c = self.config
            check_bool(validate, "validate")
            check_bool(last_only, "last_only")
            idx = check_token_ids(idx, "idx", c.vocab_size, c.context_length)
            if cache is not None:
                generation.check_cache(self, cache, idx.shape[0])
            if cache is not None and cache.length + idx.shape[1] > c.context_length:
                raise ValueError(
                    f"idx must fit the context after the cache's {cache.length} positions: "
                    f"cache.length + T <= context_length = {c.context_length}, got T = {idx.shape[1]}"
                )
            if left_pad is not None:
                if cache is not None and cache.length:
                    raise ValueError(
                        "left_pad must be None once the cache holds positions: give it to the "
                        "first call with the cache (the prefill), which keeps it in cache.left_pad"
                    )
                left_pad = check_left_pad(left_pad, idx)
        if cache is not None:
            if cache.length:
                left_pad = cache.left_pad  # the padding of the prefill, still in the cache
            else:
                cache.left_pad = left_pad
        x, _ = self._hidden(idx, cache, need_weights=False, left_pad=left_pad)  # (B, T, D)
        if last_only:
            x = x[:, -1]  # (B, D)
        return self.lm_head(self.norm(x))  # (..., D) @ (D, V) -> (..., V)

    def _hidden(
        self,
        idx: torch.Tensor,
        cache: KVCache | None,
        need_weights: bool,
        left_pad: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """The residual stream after the last block ``(B, T, D)``, and each layer's weights."""
        start = 0 if cache is None else cache.length  # S_past, positions already cached
        # In a left-padded batch each row counts positions from its first real token.
        first = start if left_pad is None else start - left_pad[:, None]  # int, or (B, 1)
        x = self.pos_emb.embed(self.tok_emb(idx), first)  # (B, T) -> (B, T, D)
        if self.training and self.config.dropout > 0:
            x = self.dropout(x)
        T = idx.shape[1]
        bias = self.pos_emb.bias(T, start + T, device=x.device, dtype=x.dtype)  # (H, T, S) or None
        mask = bias
        if left_pad is not None:  # no query attends to padding: mask those keys' columns
            is_token = torch.arange(start + T, device=x.device) >= left_pad[:, None]  # (B, S)
            is_token = is_token[:, None, None, :]  # (B, 1, 1, S): for every head and query
            mask = is_token if bias is None else bias.masked_fill(~is_token, float("-inf"))
        all_weights = []
        for i, block in enumerate(self.blocks):
            out = block(
                x,
                mask,  # None, the bias (H, T, S), the padding (B, 1, 1, S) or both (B, H, T, S)
                is_causal=bias is None,  # a bias already holds the causal -inf
                need_weights=need_weights,
                cache=None if cache is None else cache.layer(i),
                validate=False,
            )
            x, weights = out if need_weights else (out, None)  # (B, T, D), (B, H, T, S)
            all_weights.append(weights)
        return x, all_weights

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
        idx = check_token_ids(idx, "idx", c.vocab_size, c.context_length)
        with torch.no_grad():
            _, weights = self._hidden(idx, None, need_weights=True)
        return weights

    def prefill(
        self, idx: torch.Tensor, *, left_pad: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, KVCache]:
        """Read a prompt once and keep every layer's keys and values: generation's first step.

        The work is done by :func:`attnbook.generation.prefill` (``model=self``),
        whose docstring gives the arguments, the shapes and the result.
        """
        return generation.prefill(self, idx, left_pad=left_pad)

    def decode(self, next_idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One generation step with the cache: run one new token per sequence, append to ``cache``.

        The work is done by :func:`attnbook.generation.decode` (``model=self``),
        whose docstring gives the arguments, the shapes and the result.
        """
        return generation.decode(self, next_idx, cache)

    def generate(
        self,
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

        The work is done by :func:`attnbook.generation.generate` (``model=self``),
        whose docstring gives the arguments, the shapes and the result.
        """
        return generation.generate(
            self,
            idx,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            generator=generator,
            use_cache=use_cache,
            left_pad=left_pad,
        )
