"""Tests of attnbook.rnn: the GRU encoder-decoders of chapter 12.

The attention variants' weights are distributions that ignore padding and
use the package's scores (the additive decoder's shortcut equals
``AdditiveScorer``); padding never changes a real output; greedy generation is
the argmax of teacher forcing; bad input raises ``ValueError`` by name; a
short training run learns.
"""

from __future__ import annotations

import pytest
import torch

from attnbook import RNNConfig, RNNEncoderDecoder, TrainConfig, train, translation_task
from attnbook.masking import softmax_with_mask
from attnbook.rnn import DECODERS
from attnbook.scores import score_matrix
from attnbook.training import evaluate

VARIANTS = sorted(DECODERS)


def _model(attention: str, seed: int = 0) -> RNNEncoderDecoder:
    torch.manual_seed(seed)
    config = RNNConfig(30, 20, 16, attention=attention, d_embed=8, d_hidden=12)
    return RNNEncoderDecoder(config).eval()


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 30, (4, 7), generator=g)
    mask = torch.arange(7)[None] < torch.tensor([7, 3, 5, 1])[:, None]
    tgt = torch.randint(3, 20, (4, 6), generator=g)
    return src.masked_fill(~mask, 0), mask, tgt


@pytest.mark.parametrize("attention", VARIANTS)
def test_shapes_weights_and_padding(attention: str) -> None:
    model = _model(attention)
    src, mask, tgt = _batch()
    logits, weights = model(src, tgt, mask, need_weights=True)
    assert logits.shape == (4, 6, 20)
    if attention == "none":
        assert weights is None
    else:
        assert weights.shape == (4, 6, 7)
        torch.testing.assert_close(weights.sum(-1), torch.ones(4, 6))
        assert (weights.masked_select(~mask[:, None, :]) == 0).all()
    for b in range(4):  # padding changes nothing real, whatever stands there
        n = int(mask[b].sum())
        alone = model(src[b : b + 1, :n], tgt[b : b + 1])
        torch.testing.assert_close(logits[b : b + 1], alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(src.masked_fill(~mask, 9), tgt, mask), logits)


def test_skipping_the_checks_keeps_the_default_mask() -> None:
    """validate=False skips the checks, not the meaning of src_mask=None (every word real)."""
    model = _model("dot")
    src, _, tgt = _batch()
    memory, state = model.encode(src)
    unchecked_memory, unchecked_state = model.encode(src, validate=False)
    torch.testing.assert_close(unchecked_memory, memory)
    torch.testing.assert_close(unchecked_state, state)
    torch.testing.assert_close(model(src, tgt, validate=False), model(src, tgt))


def test_the_additive_shortcut_equals_the_package_scorer() -> None:
    """Projecting the keys once per sentence computes AdditiveScorer's scores."""
    model = _model("additive")
    src, mask, tgt = _batch()
    decoder = model.decoder
    memory, state = model.encode(src, mask)
    y = model.tgt_emb(tgt)
    _, weights, _ = decoder(y[:, :1], state, memory, mask)  # first step: query = state
    expected = softmax_with_mask(decoder.scorer(state[-1][:, None], memory), mask[:, None])
    torch.testing.assert_close(weights, expected)


def test_the_dot_decoder_scores_by_dot_products() -> None:
    model = _model("dot")
    src, mask, tgt = _batch()
    memory, state = model.encode(src, mask)
    h, _ = model.decoder.gru(model.tgt_emb(tgt), state)
    _, weights, _ = model.decoder(model.tgt_emb(tgt), state, memory, mask)
    expected = torch.softmax((h @ memory.transpose(1, 2)).masked_fill(~mask[:, None], -1e9), -1)
    torch.testing.assert_close(weights, expected)


def _decode_by_hand(
    model: RNNEncoderDecoder, src: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The decoders' equations written out from their submodules, one target step at a time."""
    dec, kind = model.decoder, model.config.attention
    memory, state = model.encode(src, mask)  # (B, S, Hd), (1, B, Hd)
    last = memory[torch.arange(len(src)), mask.sum(1) - 1]  # (B, Hd): the encoder's last state
    torch.testing.assert_close(state[0], last)
    features, weights = [], []
    for t in range(tgt.shape[1]):
        y = model.tgt_emb(tgt[:, t : t + 1])  # (B, 1, E)
        if kind == "none":  # the fixed summary is fed at every step and read by the output
            c = last[:, None]
            h, state = dec.gru(torch.cat([y, c], -1), state)
            features.append(torch.tanh(dec.out(torch.cat([h, c], -1))))
        elif kind == "additive":  # the previous state asks, then the GRU reads the context
            w = softmax_with_mask(dec.scorer(state[-1][:, None], memory), mask[:, None])
            c = w @ memory
            h, state = dec.gru(torch.cat([y, c], -1), state)
            features.append(torch.tanh(dec.out(torch.cat([h, c], -1))))
            weights.append(w)
        else:  # dot: the GRU steps, then its new state asks; W_c reads [c; s]
            h, state = dec.gru(y, state)
            w = softmax_with_mask(score_matrix(h, memory), mask[:, None])
            c = w @ memory
            features.append(torch.tanh(dec.out(torch.cat([c, h], -1))))
            weights.append(w)
    logits = model.lm_head(torch.cat(features, 1))
    return logits, (torch.cat(weights, 1) if weights else None)


@pytest.mark.parametrize("attention", VARIANTS)
def test_each_decoder_computes_its_equations(attention: str) -> None:
    """Teacher forcing equals the decoder's equations written out step by step: the bottleneck
    feeds the encoder's last state to the GRU and to the output at every step, the additive
    decoder's context enters the GRU and the output, the dot decoder's output reads [c; s]."""
    model = _model(attention, seed=2)
    src, mask, tgt = _batch()
    with torch.no_grad():
        logits, weights = model(src, tgt, mask, need_weights=True)
        expected, expected_weights = _decode_by_hand(model, src, mask, tgt)
    torch.testing.assert_close(logits, expected)
    if attention == "none":
        assert weights is None
    else:
        torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("attention", VARIANTS)
def test_greedy_generation_is_the_argmax_of_teacher_forcing(attention: str) -> None:
    model = _model(attention, seed=1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # varied outputs
    src, mask, _ = _batch()
    out = model.generate(src, 8, bos_id=1, src_mask=mask)
    assert out.shape == (4, 9)
    assert (out[:, 0] == 1).all()
    torch.testing.assert_close(model(src, out[:, :-1], mask).argmax(-1), out[:, 1:])
    eos = int(out[0, 2])
    ended = model.generate(src, 8, bos_id=1, eos_id=eos, src_mask=mask)
    assert any(eos not in row[1:] for row in ended.tolist())  # a row that never ends ...
    assert ended.shape == out.shape  # ... keeps decoding after another row has ended
    for row, full in zip(ended.tolist(), out.tolist(), strict=True):
        end = row.index(eos, 1) + 1 if eos in row[1:] else len(row)
        assert row[:end] == full[:end]  # the greedy words up to <eos>, then <eos> repeated
        assert set(row[end:]) <= {eos}


def test_generation_restores_the_models_mode() -> None:
    """generate decodes in eval() mode and hands the model back in the mode it found it."""
    model = _model("additive")
    src, mask, _ = _batch()
    model.generate(src, 3, bos_id=1, src_mask=mask)
    assert not model.training
    model.train().generate(src, 3, bos_id=1, src_mask=mask)
    assert model.training


def test_generation_stops_once_every_row_has_ended_and_not_before() -> None:
    """Each row is the free-running output up to its first eos, then eos; decoding stops at
    the step where the last row ends (eos 16 ends every row, eos 14 leaves row 1 running)."""
    model = _model("dot", seed=1)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # varied outputs
    src, mask, _ = _batch()
    free = model.generate(src, 8, bos_id=1, src_mask=mask).tolist()
    for eos, all_end in ((16, True), (14, False)):
        ended = model.generate(src, 8, bos_id=1, eos_id=eos, src_mask=mask)
        ends = [row.index(eos, 1) + 1 if eos in row[1:] else len(row) for row in free]
        assert (max(ends) < 9) == all_end
        assert ended.shape == (4, max(ends))
        for row, free_row, n in zip(ended.tolist(), free, ends, strict=True):
            assert row == free_row[:n] + [eos] * (max(ends) - n)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda m, s, k, t: m(s, t[:2], k), "batch size"),
        (lambda m, s, k, t: m(s, t, k[:, :3]), "src_mask"),
        (lambda m, s, k, t: m(s, t, k.int()), "src_mask"),
        (lambda m, s, k, t: m(s, t, ~k), "src_mask"),
        (lambda m, s, k, t: m(s + 40, t, k), "src"),
        (lambda m, s, k, t: m.generate(s, 4, bos_id=20, src_mask=k), "bos_id"),
        (lambda m, s, k, t: m.generate(s, 4, bos_id=1, eos_id=-2), "eos_id"),
        (lambda m, s, k, t: m.generate(s, -1, bos_id=1), "max_new_tokens"),
        (lambda m, s, k, t: m(s, None, k), "tgt must be a torch tensor"),
        (lambda m, s, k, t: m(s, t, k, need_weights="no"), "need_weights must be True or False"),
        (lambda m, s, k, t: m(s, t, k, need_weights=1), "need_weights must be True or False"),
    ],
)
def test_bad_input_names_the_argument(call: object, name: str) -> None:
    model = _model("additive")
    src, mask, tgt = _batch()
    with pytest.raises(ValueError, match=name):
        call(model, src, mask, tgt)


@pytest.mark.parametrize("attention", VARIANTS)
@pytest.mark.parametrize(
    "row",
    [
        [True, False, True, False, False, False, False],  # a hole: words at 0 and 2
        [True, False, True, True, True, True, True],
        [True, True, True, True, True, True, False][::-1],  # padding first
        [False] * 7,
    ],
)
def test_src_mask_must_be_true_on_a_prefix_of_each_row(attention: str, row: list[bool]) -> None:
    # The first state comes from position src_mask.sum(1) - 1: a mask with a hole was
    # read as a shorter sentence, silently.
    model = _model(attention)
    src, mask, tgt = _batch()
    mask = mask.clone()
    mask[1] = torch.tensor(row)
    with pytest.raises(ValueError, match="src_mask must be True on a prefix of each row"):
        model(src, tgt, mask)
    with pytest.raises(ValueError, match="src_mask must be True on a prefix of each row"):
        model.generate(src, 3, bos_id=1, src_mask=mask)


def test_config_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="attention"):
        RNNConfig(10, 10, 8, attention="multiplicative")
    for attention in (["dot"], None, 1):
        with pytest.raises(ValueError, match="attention must be one of"):
            RNNConfig(10, 10, 8, attention=attention)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="d_hidden"):
        RNNConfig(10, 10, 8, d_hidden=0)
    with pytest.raises(ValueError, match="config"):
        RNNEncoderDecoder({"attention": "dot"})


def test_train_runs_an_rnn_on_the_translation_task() -> None:
    task = translation_task(n_train=400, n_test=50, n_test_long=30, max_train_len=8, seed=1)
    torch.manual_seed(0)
    config = RNNConfig(task.src_vocab_size, task.tgt_vocab_size, task.input_len, "dot", 16, 32)
    model = RNNEncoderDecoder(config)
    before = evaluate(model, task)["loss"]
    history = train(
        model,
        task,
        TrainConfig(
            steps=30,
            batch_size=32,
            lr=1e-2,
            warmup_steps=3,
            eval_every=20,
            progress=False,
            device="cpu",
        ),
    )
    assert history.last("test_loss") < 0.9 * before


@pytest.mark.parametrize("attention", VARIANTS)
def test_generation_refuses_nan_logits(attention: str) -> None:
    model = _model(attention)
    src, mask, _ = _batch()
    with torch.no_grad():
        model.lm_head.weight[:, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN logits at decoding step 0"):
        model.generate(src, 5, bos_id=1, src_mask=mask)
