"""An encoder-decoder transformer, the original architecture (Vaswani et al. 2017).

Introduced in chapter 9 (``chapters/09_transformer_block.ipynb``): an encoder
of :class:`~attnbook.block.EncoderBlock` reads the source, a decoder of
:class:`~attnbook.block.DecoderBlock` writes the target, reading the
encoder's output through cross-attention. Inputs are checked once, at the
model's boundary; the blocks then run with ``validate=False``.

Shape legend used in this module:
    ``B`` batch, ``S`` source positions, ``T`` target positions, ``D`` =
    ``d_model``, ``V_src`` / ``V_tgt`` the two vocabulary sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnbook._validation import check_int, check_token_ids, shape_str
from attnbook.block import DecoderBlock, EncoderBlock
from attnbook.model import check_model_widths, init_gpt2
from attnbook.positional import sinusoidal_positional_encoding

__all__ = ["EncoderDecoder", "EncoderDecoderConfig"]


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
        check_int(self.src_vocab_size, "src_vocab_size")
        check_int(self.tgt_vocab_size, "tgt_vocab_size")
        check_int(self.n_encoder_layers, "n_encoder_layers")
        check_int(self.n_decoder_layers, "n_decoder_layers")
        check_model_widths(self)
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
        init_gpt2(self, c.n_encoder_layers)  # encoder blocks: 2 writes each, 0.02 / sqrt(2 L_enc)
        residual_std = 0.02 / math.sqrt(3 * c.n_decoder_layers)  # 3 writes per decoder block
        for name, p in self.decoder.named_parameters():
            if name.endswith(("out_proj.weight", "linear2.weight")):  # incl. cross_attn.out_proj
                nn.init.normal_(p, mean=0.0, std=residual_std)
        self.lm_head.weight = self.tgt_emb.weight  # tied

    def num_parameters(self) -> int:
        """The number of trainable scalar parameters (the tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def _embed(self, idx: torch.Tensor, table: nn.Embedding) -> torch.Tensor:
        pe = self.pos_table[: idx.shape[1]].to(table.weight.dtype)  # (T, D)
        x = table(idx) * self.embed_scale + pe  # (B, T, D), scaled as SinusoidalPositions explains
        return self.dropout(x) if self.training and self.config.dropout > 0 else x

    def _check_src_mask(self, src_mask: object, src: torch.Tensor) -> None:
        if src_mask is None:
            return
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
            raise ValueError("src_mask must be a boolean tensor of shape (B, S), True = real token")
        if src_mask.shape != src.shape:
            raise ValueError(
                f"src_mask must have shape (B, S) = {shape_str(src)} like src, "
                f"got {shape_str(src_mask)}"
            )

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, *, validate: bool = True
    ) -> torch.Tensor:
        """Read the source: token ids ``(B, S)`` -> the context ``(B, S, D)``.

        Args:
            src: source token ids, shape ``(B, S)``, int64 in ``[0, src_vocab_size)``.
            src_mask: optional boolean ``(B, S)``, ``True`` at real tokens and
                ``False`` at padding (no position attends to padding).
            validate: ``False`` skips the checks (:meth:`forward` has made them).

        Returns:
            The encoder's output, shape ``(B, S, D)``.
        """
        if validate:
            c = self.config
            src = check_token_ids(src, "src", c.src_vocab_size, c.context_length)
            self._check_src_mask(src_mask, src)
        key_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(src, self.src_emb)  # (B, S, D)
        for block in self.encoder:
            x = block(x, key_mask, validate=False)  # (B, S, D)
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
        src = check_token_ids(src, "src", c.src_vocab_size, c.context_length)
        tgt = check_token_ids(tgt, "tgt", c.tgt_vocab_size, c.context_length)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src (B, S) and tgt (B, T) must have the same batch size B, "
                f"got {shape_str(src)} and {shape_str(tgt)}"
            )
        self._check_src_mask(src_mask, src)
        context = self.encode(src, src_mask, validate=False)  # (B, S, D)
        key_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(tgt, self.tgt_emb)  # (B, T, D)
        for block in self.decoder:
            x = block(x, context, None, key_mask, validate=False)  # (B, T, D)
        return self.lm_head(self.decoder_norm(x))  # (B, T, V_tgt)
