"""An encoder-decoder transformer, the original architecture (Vaswani et al. 2017).

Introduced in chapter 9 (``chapters/09_transformer_block.ipynb``): an encoder
of :class:`~attnbook.block.EncoderBlock` reads the source, a decoder of
:class:`~attnbook.block.DecoderBlock` writes the target, reading the
encoder's output through cross-attention. Inputs are checked once, at the
model's boundary; the blocks then run with ``validate=False``.

Chapter 12 (``chapters/12_translation.ipynb``) trains it on a translation task:
padding masks on both sides, :meth:`EncoderDecoder.generate` (greedy and beam
search, with the decoder's keys and values cached and the source's projected
once), and :meth:`EncoderDecoder.attention_weights` to read the alignment it learned.

Shape legend used in this module:
    ``B`` batch, ``S`` source positions, ``T`` target positions, ``D`` =
    ``d_model``, ``V_src`` / ``V_tgt`` the two vocabulary sizes, ``H`` heads,
    ``K`` beams, ``L`` decoder layers, ``T_max`` context length (the longest
    source and the longest target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnbook._validation import (
    check_bool,
    check_int,
    check_logits,
    check_token_ids,
    plain_numbers,
    shape_str,
)
from attnbook.block import DecoderBlock, EncoderBlock
from attnbook.generation import KVCache
from attnbook.model import check_model_widths, init_gpt2
from attnbook.positional import SinusoidalPositions

__all__ = ["EncoderDecoder", "EncoderDecoderConfig"]


@dataclass(frozen=True)
class EncoderDecoderConfig:
    """The hyperparameters of an :class:`EncoderDecoder`; frozen. Invalid values raise ``ValueError``."""

    src_vocab_size: int  # V_src, token ids of the source (encoder) side are 0 .. V_src - 1
    tgt_vocab_size: int  # V_tgt, token ids of the target (decoder) side are 0 .. V_tgt - 1
    context_length: int  # T_max, longest source and longest target sequence
    d_model: int  # D, width of the residual stream (encoder and decoder alike)
    n_heads: int  # H, heads of every attention; must divide d_model
    n_encoder_layers: int  # number of encoder blocks
    n_decoder_layers: int  # number of decoder blocks
    d_ff: int | None = None  # feed-forward hidden width; None -> 4 * d_model
    dropout: float = 0.0  # dropout probability everywhere

    def __post_init__(self) -> None:
        plain_numbers(self)  # NumPy ints and floats, as Python's
        check_int(self.src_vocab_size, "src_vocab_size")
        check_int(self.tgt_vocab_size, "tgt_vocab_size")
        check_int(self.n_encoder_layers, "n_encoder_layers")
        check_int(self.n_decoder_layers, "n_decoder_layers")
        check_model_widths(self)
        SinusoidalPositions.check_config(self)  # an even d_model


class EncoderDecoder(nn.Module):
    """An encoder-decoder transformer (the original architecture), pre-LN.

    The encoder reads the whole source sequence with unmasked self-attention
    (a padding mask aside); the decoder generates the target left to right,
    reading the target so far causally and the encoder's output through
    cross-attention. Positions are the fixed sinusoids of the original paper;
    each side has its own token embedding, the decoder's tied to its output head.

    Initialisation: GPT-2's (:func:`~attnbook.model.init_gpt2`), whose maps
    into the residual stream get ``0.02 / sqrt(2 L_enc)`` in the encoder and
    ``0.02 / sqrt(3 L_dec)`` in the decoder, whose blocks write three times
    (self-attention, cross-attention, feed-forward). The token embeddings
    (N(0, 0.02)) are scaled by ``sqrt(d_model)`` as they enter, as in the
    original Transformer; the sinusoids then start ``35 / sqrt(d_model)``
    times larger than the tokens (6.2x at ``d_model = 32``), for the reason
    :class:`~attnbook.positional.SinusoidalPositions` gives.

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
        self.pos_emb = SinusoidalPositions(c.context_length, c.d_model)  # both sides' positions
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
        init_gpt2(self, c.n_encoder_layers)  # encoder blocks: 2 writes each, 0.02 / sqrt(2 L_enc)
        residual_std = 0.02 / math.sqrt(3 * c.n_decoder_layers)  # 3 writes per decoder block
        for name, p in self.decoder.named_parameters():
            if name.endswith(("out_proj.weight", "linear2.weight")):  # incl. cross_attn.out_proj
                nn.init.normal_(p, mean=0.0, std=residual_std)
        self.lm_head.weight = self.tgt_emb.weight  # tied

    def num_parameters(self) -> int:
        """The number of trainable scalar parameters (the tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def _embed(self, idx: torch.Tensor, table: nn.Embedding, start: int = 0) -> torch.Tensor:
        x = self.pos_emb.embed(table(idx), start)  # (B, T, D): scaled tokens + sinusoids
        return self.dropout(x) if self.training and self.config.dropout > 0 else x

    def _check_src_mask(
        self, src_mask: object, src: torch.Tensor, name: str = "src_mask", legend: str = "(B, S)"
    ) -> None:
        if src_mask is None:
            return
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
            raise ValueError(
                f"{name} must be a boolean tensor of shape {legend}, True = real token"
            )
        if src_mask.shape != src.shape:
            raise ValueError(
                f"{name} must have shape {legend} = {shape_str(src)} like "
                f"{name.split('_')[0]}, got {shape_str(src_mask)}"
            )
        if src_mask.numel() and not bool(src_mask.any(1).all()):  # one read-back
            # an inverted mask (True at padding) leaves the rows without padding all False, and
            # a row with no real token attends to nothing: its outputs would be silently empty
            raise ValueError(
                f"{name} must be True at one position at least in each row of {legend} (True = "
                f"real token, False = padding), got a row of only False; is it inverted? "
                f"Build it as {name.split('_')[0]} != pad_id"
            )

    def _check_pair(
        self,
        src: object,
        tgt: object,
        src_mask: object,
        tgt_mask: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The boundary checks of a (source, target) batch; returns ``(src, tgt)``."""
        c = self.config
        src = check_token_ids(src, "src", c.src_vocab_size, c.context_length)
        tgt = check_token_ids(tgt, "tgt", c.tgt_vocab_size, c.context_length)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src (B, S) and tgt (B, T) must have the same batch size B, "
                f"got {shape_str(src)} and {shape_str(tgt)}"
            )
        self._check_src_mask(src_mask, src)
        self._check_src_mask(tgt_mask, tgt, "tgt_mask", "(B, T)")
        return src, tgt

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, *, validate: bool = True
    ) -> torch.Tensor:
        """Read the source: token ids ``(B, S)`` -> the context ``(B, S, D)``.

        Args:
            src: source token ids, shape ``(B, S)``, int64 in ``[0, src_vocab_size)``.
            src_mask: optional boolean ``(B, S)``, ``True`` at real tokens and
                ``False`` at padding (no position attends to padding); every row
                holds at least one real token.
            validate: ``False`` skips the checks (:meth:`forward` has made them).

        Returns:
            The encoder's output, shape ``(B, S, D)``.
        """
        if validate:
            c = self.config
            check_bool(validate, "validate")
            src = check_token_ids(src, "src", c.src_vocab_size, c.context_length)
            self._check_src_mask(src_mask, src)
        key_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(src, self.src_emb)  # (B, S, D)
        for block in self.encoder:
            x = block(x, key_mask, validate=False)  # (B, S, D)
        return self.encoder_norm(x)

    def _decode(
        self,
        tgt: torch.Tensor,
        context: torch.Tensor,
        key_mask: torch.Tensor | None,
        tgt_mask: torch.Tensor | None = None,
        *,
        cache: KVCache | None = None,
        context_cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """The decoder (unchecked): ``(logits (B, T, V_tgt), self weights, cross weights)``.

        With ``cache``, ``tgt`` holds only the new positions (after the
        ``cache.length`` cached ones); ``context_cache`` holds each layer's
        cross-attention keys and values, filled on the first call.
        """
        start = 0 if cache is None else cache.length
        self_mask = None if tgt_mask is None else tgt_mask[:, None, None, :]  # (B, 1, 1, T)
        x = self._embed(tgt, self.tgt_emb, start)  # (B, T, D)
        self_weights, cross_weights = [], []
        for i, block in enumerate(self.decoder):
            out = block(
                x,
                context,
                self_mask,
                key_mask,
                need_weights=need_weights,
                cache=None if cache is None else cache.layer(i),
                context_cache=None if context_cache is None else context_cache.layer(i),
                validate=False,
            )
            if need_weights:
                x, (w_self, w_cross) = out  # (B, T, D), (B, H, T, T), (B, H, T, S)
                self_weights.append(w_self)
                cross_weights.append(w_cross)
            else:
                x = out  # (B, T, D)
        return self.lm_head(self.decoder_norm(x)), self_weights, cross_weights  # (B, T, V_tgt)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        *,
        validate: bool = True,
    ) -> torch.Tensor:
        """Next-token logits of the target, given the source (teacher forcing).

        Args:
            src: source token ids, shape ``(B, S)``, int64 in ``[0, src_vocab_size)``.
            tgt: target token ids so far, shape ``(B, T)``, int64 in ``[0, tgt_vocab_size)``.
            src_mask: optional boolean ``(B, S)``, ``True`` at real source tokens
                (at least one per row).
            tgt_mask: optional boolean ``(B, T)``, ``True`` at real target tokens (at least
                one per row)
                (ANDed with the causal mask; with padding at the end of each row
                it changes no real position's output, only the padded ones').
            validate: ``False`` skips the checks of the ids and masks (for a
                caller that has checked its data once, as :func:`attnbook.train` has).

        Returns:
            Logits of shape ``(B, T, tgt_vocab_size)``: ``logits[b, t]`` scores
            the target token after ``tgt[b, :t + 1]``, given all of ``src[b]``.
        """
        if validate:
            src, tgt = self._check_pair(src, tgt, src_mask, tgt_mask)
        context = self.encode(src, src_mask, validate=False)  # (B, S, D)
        key_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, S)
        return self._decode(tgt, context, key_mask, tgt_mask)[0]  # (B, T, V_tgt)

    @torch.no_grad()
    def attention_weights(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> dict[str, list[torch.Tensor]]:
        """Every attention's weights for a batch, layer by layer: what the model looked at.

        Runs in ``eval()`` mode (no dropout), without gradients, and restores
        the training mode. Row ``t`` of a decoder's weights belongs to the query
        at target position ``t``, the one that predicts token ``t + 1``.

        Args:
            src, tgt, src_mask, tgt_mask: as for :meth:`forward`.

        Returns:
            ``{"encoder": [(B, H, S, S)] * n_encoder_layers, "decoder": [(B, H, T, T)]
            * n_decoder_layers, "cross": [(B, H, T, S)] * n_decoder_layers}``. Every
            cross row sums to 1 and is 0 at padded source positions.
        """
        src, tgt = self._check_pair(src, tgt, src_mask, tgt_mask)
        was_training = self.training
        self.eval()
        try:
            key_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, S)
            x = self._embed(src, self.src_emb)  # (B, S, D)
            encoder_weights = []
            for block in self.encoder:
                x, weights = block(x, key_mask, need_weights=True, validate=False)  # (B, H, S, S)
                encoder_weights.append(weights)
            context = self.encoder_norm(x)  # (B, S, D)
            _, self_weights, cross_weights = self._decode(
                tgt, context, key_mask, tgt_mask, need_weights=True
            )
        finally:
            self.train(was_training)
        return {"encoder": encoder_weights, "decoder": self_weights, "cross": cross_weights}

    @torch.no_grad()
    def generate(
        self,
        src: torch.Tensor,
        max_new_tokens: int,
        *,
        bos_id: int,
        eos_id: int | None = None,
        src_mask: torch.Tensor | None = None,
        beam_size: int = 1,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Translate: write the target token by token, greedily or by beam search.

        The source is encoded once. Greedy decoding (``beam_size=1``) appends
        the most likely token at each step; beam search keeps the
        ``beam_size`` most likely partial targets (summed log-probabilities),
        extends each by every token, and keeps the best ``beam_size`` of those,
        so a first word that looks worse can still win with what follows.
        A target ends at ``eos_id`` (its score then stays fixed); decoding stops
        when every source's best target has ended, or after ``max_new_tokens``.

        With ``use_cache=True`` each layer's cross-attention keys and values
        are computed once per source, and the decoder's self-attention keys
        and values once per position (a :class:`~attnbook.KVCache`, reordered
        when beams are); ``use_cache=False`` reruns the decoder over the whole
        target at each step. Both give the same tokens (tested).

        Args:
            src: source token ids ``(B, S)``.
            max_new_tokens: ``N >= 0`` tokens at most, ``1 + N <= context_length``.
            bos_id: the token every target starts with, in ``[0, tgt_vocab_size)``.
            eos_id: the token that ends a target, or ``None`` (always ``N`` tokens).
            src_mask: optional boolean ``(B, S)``, ``True`` at real source tokens
                (at least one per row).
            beam_size: ``K >= 1``, at most ``tgt_vocab_size``; 1 is greedy.
            use_cache: keep keys and values between steps (faster, same tokens).

        Returns:
            Token ids ``(B, 1 + n)``, ``n <= N``: ``bos_id``, then the best
            target of each source; after its ``eos_id`` a row repeats ``eos_id``.
        """
        c = self.config
        src = check_token_ids(src, "src", c.src_vocab_size, c.context_length)
        self._check_src_mask(src_mask, src)
        max_new_tokens = check_int(max_new_tokens, "max_new_tokens", minimum=0)
        if 1 + max_new_tokens > c.context_length:
            raise ValueError(
                f"max_new_tokens must be at most context_length - 1 = {c.context_length - 1} "
                f"(the target has no position beyond the context), got {max_new_tokens}"
            )
        V = c.tgt_vocab_size
        check_int(bos_id, "bos_id", minimum=0, maximum=V - 1, meaning="a target token id")
        if eos_id is not None:
            check_int(eos_id, "eos_id", minimum=0, maximum=V - 1, meaning="a target token id")
        K = check_int(beam_size, "beam_size", minimum=1)
        if K > V:
            raise ValueError(f"beam_size must be at most tgt_vocab_size = {V}, got {K}")
        check_bool(use_cache, "use_cache")
        if src.shape[0] == 0:  # no source sentence: an empty batch of targets
            return src.new_full((0, 1), bos_id)
        was_training = self.training
        self.eval()
        try:
            return self._search(src, src_mask, max_new_tokens, bos_id, eos_id, K, use_cache)
        finally:
            self.train(was_training)

    def _search(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None,
        max_new_tokens: int,
        bos_id: int,
        eos_id: int | None,
        K: int,
        use_cache: bool,
    ) -> torch.Tensor:
        """Beam search (greedy when ``K = 1``) over checked inputs; see :meth:`generate`."""
        B = src.shape[0]
        out = torch.full((B, 1), bos_id, dtype=torch.int64, device=src.device)  # (B, 1)
        if max_new_tokens == 0:
            return out
        context = self.encode(src, src_mask, validate=False)  # (B, S, D), once
        key_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, S)
        n_layers = len(self.decoder)
        cache = KVCache(n_layers) if use_cache else None
        cross = KVCache(n_layers) if use_cache else None
        logits = self._decode(out, context, key_mask, cache=cache, context_cache=cross)[0]
        check_logits(logits[:, -1], 0)
        scores, tokens = torch.log_softmax(logits[:, -1].float(), -1).topk(K, dim=-1)  # (B, K)
        # From here on every source has K rows (beams), kept together: row b * K + k.
        out = torch.cat([out.repeat_interleave(K, 0), tokens.reshape(B * K, 1)], dim=1)
        context = context.repeat_interleave(K, 0)  # (B K, S, D)
        key_mask = None if key_mask is None else key_mask.repeat_interleave(K, 0)
        if use_cache:
            for kv in (cache, cross):  # every layer's (B, H, ., Dh) -> (B K, H, ., Dh)
                kv.keys = [k.repeat_interleave(K, 0) for k in kv.keys]
                kv.values = [v.repeat_interleave(K, 0) for v in kv.values]
        no_eos = -1 if eos_id is None else eos_id  # no token id is -1: nothing ever ends
        ended = out[:, -1] == no_eos  # (B K,)
        for step in range(1, max_new_tokens):
            if bool(ended.view(B, K)[:, 0].all()):
                break  # every source's best target has ended: no other can overtake it
            new = out[:, -1:] if use_cache else out  # (B K, 1) or (B K, t)
            logits = self._decode(new, context, key_mask, cache=cache, context_cache=cross)[0]
            check_logits(logits[:, -1], step)
            logp = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B K, V)
            if eos_id is not None:  # an ended target continues with eos_id, at no cost
                logp[ended] = -math.inf
                logp[ended, eos_id] = 0.0
            V = logp.shape[-1]
            total = (scores.reshape(B * K, 1) + logp).view(B, K * V)  # (B, K V)
            scores, pick = total.topk(K, dim=-1)  # (B, K), best first
            beam, token = pick // V, pick % V  # (B, K) each
            rows = (torch.arange(B, device=src.device)[:, None] * K + beam).flatten()  # (B K,)
            out = torch.cat([out[rows], token.reshape(B * K, 1)], dim=1)  # (B K, t + 1)
            ended = ended[rows] | (out[:, -1] == no_eos)  # (B K,)
            if use_cache:  # the self-attention keys follow their beams; the cross ones are equal
                cache.keys = [k[rows] for k in cache.keys]
                cache.values = [v[rows] for v in cache.values]
        return out.view(B, K, -1)[:, 0]  # (B, 1 + n), the best beam of each source
