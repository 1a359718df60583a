"""Recurrent encoder-decoders: the bottleneck, and the attention that removed it.

Introduced in chapter 12 (``chapters/12_translation.ipynb``). A GRU encoder
reads the source into one state per word; a GRU decoder writes the target
word by word. The three decoders differ only in what they read of the source:

- :class:`BottleneckDecoder`: the encoder's last state only, one fixed vector
  for the whole sentence (Sutskever et al. 2014; Cho et al. 2014). Long
  sentences do not fit through it.
- :class:`AdditiveDecoder`: before each word, its previous state scores every
  source state with the additive score of chapter 5
  (:class:`~attnbook.scores.AdditiveScorer`) and reads their weighted average
  (Bahdanau et al. 2015).
- :class:`DotDecoder`: after each word, its new state scores every source
  state by a dot product (:func:`~attnbook.scores.score_matrix`, as in chapter
  1) and mixes the average into its output (Luong et al. 2015, "global dot").

Each is one small class in :data:`DECODERS`; a reader adds a variant by writing
one more. The weights use the package's one masked softmax
(:func:`~attnbook.masking.softmax_with_mask`, ``True`` = may attend), so padded
source words get weight 0.

Shape legend used in this module:
    ``B`` batch, ``S`` source positions, ``T`` target positions, ``E`` embedding
    width, ``Hd`` GRU state width, ``V`` target vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnbook._validation import (
    check_bool,
    check_int,
    check_logits,
    check_token_ids,
    is_prefix,
    plain_numbers,
    shape_str,
)
from attnbook.masking import softmax_with_mask
from attnbook.scores import AdditiveScorer, score_matrix

__all__ = [
    "DECODERS",
    "AdditiveDecoder",
    "BottleneckDecoder",
    "DotDecoder",
    "RNNConfig",
    "RNNEncoderDecoder",
]


@dataclass(frozen=True)
class RNNConfig:
    """The hyperparameters of an :class:`RNNEncoderDecoder`; frozen. Invalid values raise ``ValueError``."""

    src_vocab_size: int  # V_src, source ids 0 .. V_src - 1
    tgt_vocab_size: int  # V, target ids 0 .. V - 1
    context_length: int  # longest source and target sequence the model accepts
    attention: str = "additive"  # a key of DECODERS: "none", "additive" or "dot"
    d_embed: int = 32  # E, width of the word embeddings (both sides)
    d_hidden: int = 64  # Hd, width of every GRU state

    def __post_init__(self) -> None:
        plain_numbers(self)  # NumPy ints and floats, as Python's
        for name in ("src_vocab_size", "tgt_vocab_size", "context_length", "d_embed", "d_hidden"):
            check_int(getattr(self, name), name)
        if not isinstance(self.attention, str) or self.attention not in DECODERS:
            raise ValueError(f"attention must be one of {sorted(DECODERS)}, got {self.attention!r}")


class BottleneckDecoder(nn.Module):
    """A GRU decoder that sees the source only through the encoder's last state.

    That one vector ``c`` is its first state and is fed again at every step
    (Cho et al. 2014), so the decoder cannot forget it; it still must hold the
    whole sentence, which gets harder the longer the sentence.
    """

    def __init__(self, config: RNNConfig) -> None:
        super().__init__()
        E, Hd = config.d_embed, config.d_hidden
        self.gru = nn.GRU(E + Hd, Hd, batch_first=True)
        self.out = nn.Linear(2 * Hd, Hd)  # features: [state; c]

    def forward(
        self, y: torch.Tensor, state: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, None, torch.Tensor]:
        """Decode ``T`` steps: ``(features (B, T, Hd), None, state (1, B, Hd))``.

        Args:
            y: embedded target inputs ``(B, T, E)``.
            state: the decoder's state ``(1, B, Hd)`` before the first step.
            memory: the encoder's states ``(B, S, Hd)`` (only the last real one is read).
            src_mask: ``(B, S)`` bool, ``True`` at real source words.
        """
        last = src_mask.sum(1) - 1  # (B,), the position of each last source word
        c = memory[torch.arange(memory.shape[0]), last]  # (B, Hd), the fixed-size summary
        c = c[:, None].expand(-1, y.shape[1], -1)  # (B, T, Hd)
        h, state = self.gru(torch.cat([y, c], dim=-1), state)  # (B, T, Hd), (1, B, Hd)
        return torch.tanh(self.out(torch.cat([h, c], dim=-1))), None, state


class AdditiveDecoder(nn.Module):
    """Bahdanau attention: the previous state asks, additive scores answer, then the GRU steps.

    At step ``t`` the query is the state ``s_{t-1}``, so the context ``c_t``
    can shape the new state; the cost is a loop over the target positions.
    The keys' half of the additive score, ``h W_k``, does not depend on the
    step, so it is computed once per sentence (as Bahdanau et al. did); each
    step adds its query's half, ``s W_q``. The result equals
    ``self.scorer(query, memory)`` (:class:`~attnbook.scores.AdditiveScorer`, tested).
    """

    def __init__(self, config: RNNConfig) -> None:
        super().__init__()
        E, Hd = config.d_embed, config.d_hidden
        self.scorer = AdditiveScorer(Hd, Hd, Hd)  # v . tanh(s W_q + h W_k), chapter 5
        self.gru = nn.GRU(E + Hd, Hd, batch_first=True)
        self.out = nn.Linear(2 * Hd, Hd)  # features: [state; c]

    def forward(
        self, y: torch.Tensor, state: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode ``T`` steps: ``(features (B, T, Hd), weights (B, T, S), state (1, B, Hd))``."""
        features, all_weights = [], []
        keys = self.scorer.W_k(memory)  # (B, S, Hd) @ (Hd, d_a) -> (B, S, d_a), once
        for t in range(y.shape[1]):
            query = self.scorer.W_q(state[-1])[:, None]  # (B, Hd) @ (Hd, d_a) -> (B, 1, d_a)
            scores = self.scorer.v(torch.tanh(query + keys))[..., 0][:, None]  # (B, 1, S)
            weights = softmax_with_mask(scores, src_mask[:, None])  # (B, 1, S)
            c = weights @ memory  # (B, 1, S) @ (B, S, Hd) -> (B, 1, Hd)
            h, state = self.gru(torch.cat([y[:, t : t + 1], c], dim=-1), state)  # (B, 1, Hd)
            features.append(torch.tanh(self.out(torch.cat([h, c], dim=-1))))
            all_weights.append(weights)
        return torch.cat(features, 1), torch.cat(all_weights, 1), state


class DotDecoder(nn.Module):
    """Luong attention: the GRU steps first, then its new state scores the source by dot products.

    The query is the current state ``s_t``, so the recurrence does not depend
    on the attention and all ``T`` steps of teacher forcing run as one GRU call.
    """

    def __init__(self, config: RNNConfig) -> None:
        super().__init__()
        E, Hd = config.d_embed, config.d_hidden
        self.gru = nn.GRU(E, Hd, batch_first=True)
        self.out = nn.Linear(2 * Hd, Hd)  # W_c of [c; s]

    def forward(
        self, y: torch.Tensor, state: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode ``T`` steps: ``(features (B, T, Hd), weights (B, T, S), state (1, B, Hd))``."""
        h, state = self.gru(y, state)  # (B, T, Hd), (1, B, Hd)
        scores = score_matrix(h, memory)  # (B, T, Hd) @ (B, Hd, S) -> (B, T, S)
        weights = softmax_with_mask(scores, src_mask[:, None])  # (B, T, S)
        c = weights @ memory  # (B, T, S) @ (B, S, Hd) -> (B, T, Hd)
        return torch.tanh(self.out(torch.cat([c, h], dim=-1))), weights, state


DECODERS: dict[str, type[nn.Module]] = {
    "none": BottleneckDecoder,
    "additive": AdditiveDecoder,
    "dot": DotDecoder,
}


class RNNEncoderDecoder(nn.Module):
    """A GRU encoder-decoder for translation, with or without attention.

    The encoder turns source words into states ``(B, S, Hd)``; the decoder
    (one of :data:`DECODERS`, chosen by ``config.attention``) starts from the
    encoder's last state and writes the target one word at a time. It has
    the same call as :class:`~attnbook.EncoderDecoder` (``model(src, tgt,
    src_mask)`` gives logits), so :func:`attnbook.train` trains both.

    Args:
        config: an :class:`RNNConfig`.
    """

    def __init__(self, config: RNNConfig) -> None:
        super().__init__()
        if not isinstance(config, RNNConfig):
            raise ValueError(f"config must be an RNNConfig, got {type(config).__name__}")
        self.config = c = config
        self.src_emb = nn.Embedding(c.src_vocab_size, c.d_embed)  # (V_src, E)
        self.tgt_emb = nn.Embedding(c.tgt_vocab_size, c.d_embed)  # (V, E)
        self.encoder = nn.GRU(c.d_embed, c.d_hidden, batch_first=True)
        self.decoder = DECODERS[c.attention](c)
        self.lm_head = nn.Linear(c.d_hidden, c.tgt_vocab_size)  # (V, Hd)

    def num_parameters(self) -> int:
        """The number of trainable scalar parameters."""
        return sum(p.numel() for p in self.parameters())

    def _check(
        self, src: object, tgt: object, src_mask: object, *, with_tgt: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        c = self.config
        src = check_token_ids(src, "src", c.src_vocab_size, c.context_length)
        if with_tgt:  # generate has no target
            tgt = check_token_ids(tgt, "tgt", c.tgt_vocab_size, c.context_length)
            if tgt.shape[0] != src.shape[0]:
                raise ValueError(
                    f"src (B, S) and tgt (B, T) must have the same batch size B, "
                    f"got {shape_str(src)} and {shape_str(tgt)}"
                )
        if src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool:
            raise ValueError("src_mask must be a boolean tensor of shape (B, S), True = real word")
        if src_mask.shape != src.shape:
            raise ValueError(
                f"src_mask must have shape (B, S) = {shape_str(src)} like src, "
                f"got {shape_str(src_mask)}"
            )
        # encode() reads the first state at position src_mask.sum(1) - 1, so each row must be
        # True on a prefix (the words) and False after it (the padding)
        if not is_prefix(src_mask):
            raise ValueError(
                "src_mask must be True on a prefix of each row (the words, at least one) and "
                "False after it (padding at the end), e.g. [True, True, False]; got a row with "
                "a False before a True or with no True"
            )
        return src, tgt, src_mask

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, *, validate: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's states ``(B, S, Hd)`` and the decoder's first state ``(1, B, Hd)``.

        Padding sits at the end of each row, after the real words, so the state
        at the last real word has read the whole sentence and nothing else.
        ``src_mask`` (``(B, S)``, ``True`` = a real word; default: no padding)
        must therefore be ``True`` on a prefix of each row. ``validate=False``
        skips the checks (``forward`` and ``generate`` have made them).
        """
        if validate:
            src, _, src_mask = self._check(src, None, src_mask, with_tgt=False)
        elif src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)  # every word real
        memory, _ = self.encoder(self.src_emb(src))  # (B, S, Hd)
        last = src_mask.sum(1) - 1  # (B,)
        state = memory[torch.arange(src.shape[0], device=src.device), last]  # (B, Hd)
        return memory, state[None].contiguous()  # (B, S, Hd), (1, B, Hd)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        validate: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: next-word logits of the target given the source.

        Args:
            src: source ids ``(B, S)``, int64, padding at the end of each row.
            tgt: target ids so far ``(B, T)`` (``<bos>`` first), int64.
            src_mask: ``(B, S)`` bool, ``True`` at real words (``None``: all real).
            need_weights: also return the attention weights.
            validate: ``False`` skips the checks of the ids and the mask (for a
                caller that has checked its data once, as :func:`attnbook.train` has).

        Returns:
            Logits ``(B, T, V)``; ``logits[b, t]`` scores the word after
            ``tgt[b, :t + 1]``. With ``need_weights=True`` the pair ``(logits,
            weights)``, ``weights`` ``(B, T, S)`` (row ``t``: where the decoder
            looked to write word ``t + 1``), ``None`` without attention.
        """
        if validate:
            src, tgt, src_mask = self._check(src, tgt, src_mask)
            need_weights = check_bool(need_weights, "need_weights")
        elif src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)  # every word real
        memory, state = self.encode(src, src_mask, validate=False)
        features, weights, _ = self.decoder(self.tgt_emb(tgt), state, memory, src_mask)
        logits = self.lm_head(features)  # (B, T, Hd) @ (Hd, V) -> (B, T, V)
        return (logits, weights) if need_weights else logits

    @torch.no_grad()
    def generate(
        self,
        src: torch.Tensor,
        max_new_tokens: int,
        *,
        bos_id: int,
        eos_id: int | None = None,
        src_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Greedy decoding: ``<bos>``, then the most likely word, fed back, one step at a time.

        Each step runs the decoder on one word, carrying its GRU state, so a
        step costs the same at every length. After a row writes ``eos_id`` it
        repeats ``eos_id``; decoding stops early once every row has.

        Args:
            src: source ids ``(B, S)``.
            max_new_tokens: ``N >= 0``, the most words to write, with ``1 + N <=
                context_length`` (the target :meth:`forward` takes).
            bos_id: the target id every output starts with.
            eos_id: the target id that ends a sentence, or ``None``.
            src_mask: ``(B, S)`` bool, ``True`` at real words.

        Returns:
            Target ids ``(B, 1 + n)``, ``n <= N``, starting with ``bos_id``.
        """
        src, _, src_mask = self._check(src, None, src_mask, with_tgt=False)
        max_new_tokens = check_int(
            max_new_tokens,
            "max_new_tokens",
            minimum=0,
            maximum=self.config.context_length - 1,
            meaning="context_length - 1: forward takes targets of at most context_length ids",
        )
        V = self.config.tgt_vocab_size
        check_int(bos_id, "bos_id", minimum=0, maximum=V - 1, meaning="a target token id")
        if eos_id is not None:
            check_int(eos_id, "eos_id", minimum=0, maximum=V - 1, meaning="a target token id")
        was_training = self.training
        self.eval()
        try:
            memory, state = self.encode(src, src_mask, validate=False)
            out = torch.full((src.shape[0], 1), bos_id, dtype=torch.int64, device=src.device)
            done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
            for step in range(max_new_tokens):
                y = self.tgt_emb(out[:, -1:])  # (B, 1, E)
                features, _, state = self.decoder(y, state, memory, src_mask)  # (B, 1, Hd)
                logits = self.lm_head(features[:, -1])  # (B, V)
                check_logits(logits, step)
                token = logits.argmax(-1)  # (B,)
                if eos_id is not None:
                    token = token.masked_fill(done, eos_id)
                    done = done | (token == eos_id)
                out = torch.cat([out, token[:, None]], dim=1)  # (B, t + 1)
                if eos_id is not None and bool(done.all()):
                    break
        finally:
            self.train(was_training)
        return out
