"""Tests of the translation task and the encoder-decoder transformer (chapter 12).

The task: alignments agree with the generator's rules, held-out splits are
disjoint from training (and the long one longer), seeds reproduce. The model:
masks, cached and recomputed generation agree (greedy and beam), greedy is the
argmax of teacher forcing, beam search finds a target at least as likely,
attention weights are distributions that ignore padding, bad input raises
``ValueError`` naming the argument, and ``train`` takes the task.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnbook import (
    EncoderDecoder,
    EncoderDecoderConfig,
    TrainConfig,
    TranslationTask,
    train,
    translation_task,
)
from attnbook.data import IGNORE_INDEX
from attnbook.training import evaluate, exact_match, per_example_accuracy


@pytest.fixture(scope="module")
def task() -> TranslationTask:
    return translation_task(n_train=600, n_test=100, n_test_long=80, max_train_len=10, seed=3)


def _rows(x: torch.Tensor) -> set[tuple[int, ...]]:
    return {tuple(r) for r in x.tolist()}


# ------------------------------------------------------------------------------ the task


def test_splits_are_disjoint_and_the_long_one_is_longer(task: TranslationTask) -> None:
    train_rows, test_rows = _rows(task.train.src), _rows(task.test.src)
    assert len(train_rows) == 600  # no sentence twice in a split
    assert len(test_rows) == 100
    assert not train_rows & test_rows
    assert int(task.train.src_lengths.max()) <= 10
    assert int(task.test.src_lengths.max()) <= 10
    assert int(task.test_long.src_lengths.min()) > int(task.train.src_lengths.max())
    assert task.test_long.src.shape[0] == 80


def test_same_seed_same_task_other_seed_other_task() -> None:
    a = translation_task(n_train=200, n_test=20, n_test_long=20, seed=5)
    b = translation_task(n_train=200, n_test=20, n_test_long=20, seed=5)
    c = translation_task(n_train=200, n_test=20, n_test_long=20, seed=6)
    for name in ("train", "test", "test_long"):
        for field in ("src", "tgt", "alignment"):
            assert torch.equal(getattr(a.split(name), field), getattr(b.split(name), field))
    assert not torch.equal(a.train.src, c.train.src)


def test_layout_bos_eos_padding(task: TranslationTask) -> None:
    for name in ("train", "test", "test_long"):
        s = task.split(name)
        assert (s.tgt[:, 0] == task.bos_id).all()
        n = s.tgt_mask.sum(1)  # <bos> words <eos>
        assert (s.tgt[torch.arange(len(n)), n - 1] == task.eos_id).all()
        for mask in (s.src_mask, s.tgt_mask):  # padding only at the end
            assert (mask.cummin(1).values == mask).all()
        assert not s.alignment[:, 0].any()  # <bos> has no source word
        assert not s.alignment[torch.arange(len(n)), n - 1].any()  # nor <eos>
        assert not (s.alignment & ~s.src_mask[:, None, :]).any()  # never padding
        words = s.tgt_mask.clone()
        words[:, 0] = False
        words[torch.arange(len(n)), n - 1] = False
        assert torch.equal(s.alignment.any(-1), words)  # every target word has a source


def test_alignments_follow_the_rules(task: TranslationTask) -> None:
    """Each aligned pair is a dictionary entry; the task has crossings, 1-to-2 and 2-to-1."""
    from attnbook import data

    pairs = {("and", "e")}
    pairs |= {(s, t) for s, ts in data._T_NOUNS.items() for t in ts}
    pairs |= set(data._T_ADJECTIVES.items()) | set(data._T_ADVERBS.items())
    for verbs in (data._T_TRANSITIVE, data._T_INTRANSITIVE):
        pairs |= {(s, t) for ws, t in verbs.items() for s in ws}
    crossing = one_to_two = two_to_one = 0
    for name in ("train", "test_long"):
        s = task.split(name)
        for i, alignment in enumerate(s.alignments()):
            src = task.decode(s.src[i], "src").split()
            tgt = task.decode(s.tgt[i]).split()[1:-1]
            assert len(alignment) == len(tgt)
            for word, positions in zip(tgt, alignment):
                assert all((src[p], word) in pairs for p in positions), (src, tgt, alignment)
            two_to_one += any(len(p) == 2 for p in alignment)
            one_to_two += len({p for p in alignment}) < len(alignment)
            firsts = [p[0] for p in alignment]
            crossing += firsts != sorted(firsts)
            assert "the" not in [src[p] for ps in alignment for p in ps]
    assert crossing > 100
    assert one_to_two > 50
    assert two_to_one > 50


def test_inputs_targets_are_teacher_forcing(task: TranslationTask) -> None:
    (src, tgt_in, src_mask), targets = task.batch("train", 32, torch.Generator().manual_seed(0))
    assert src.shape[0] == tgt_in.shape[0] == targets.shape[0] == 32
    assert torch.equal(src_mask, src != 0)
    assert tgt_in.shape == targets.shape
    assert torch.equal(
        targets[:, :-1].clamp(min=0), tgt_in[:, 1:].clamp(min=0) * (targets[:, :-1] >= 0)
    )
    assert (targets[tgt_in == 0] == IGNORE_INDEX).all()  # no loss after the end
    assert src_mask.any(0).all()  # trimmed
    assert (targets != IGNORE_INDEX).any(0).all()


def test_eval_data_is_the_whole_split_cut_to_its_longest_row(task: TranslationTask) -> None:
    """No real word is cut off, no target is padding: each row's targets are its words then
    <eos>, and everything after is IGNORE_INDEX."""
    for name in ("test", "test_long"):
        rows = task.split(name)
        (src, tgt_in, src_mask), targets = task.eval_data(name)
        n_src, n_tgt = int(rows.src_lengths.max()), int(rows.tgt_mask.sum(1).max())
        assert torch.equal(src, rows.src[:, :n_src])
        assert torch.equal(src_mask, rows.src_mask[:, :n_src])
        assert torch.equal(tgt_in, rows.tgt[:, : n_tgt - 1])
        expected = rows.tgt[:, 1:n_tgt].masked_fill(rows.tgt[:, 1:n_tgt] == 0, IGNORE_INDEX)
        assert torch.equal(targets, expected)
        assert not (targets == task.pad_id).any()
        assert (targets == task.eos_id).sum(1).eq(1).all()


def test_batches_draw_every_row_and_noun_phrases_have_distinct_adjectives() -> None:
    """batch draws from all of a split, its last row included; and no noun phrase repeats an
    adjective (the generator samples them without replacement: "the big big dog" never)."""
    task = translation_task(n_train=5, n_test=2, n_test_long=2, seed=0)
    (src, _, _), _ = task.batch("train", 100, torch.Generator().manual_seed(0))
    assert _rows(src) == _rows(task.train.src)
    big = translation_task(n_train=400, n_test=10, n_test_long=10, seed=0)
    adjectives = {big.src_vocab.index(a) for a in ("big", "small", "red", "old", "happy", "quiet")}
    src = big.train.src
    repeated = (src[:, 1:] == src[:, :-1]) & torch.isin(src[:, 1:], torch.tensor(list(adjectives)))
    assert torch.isin(src, torch.tensor(list(adjectives))).sum() > 200
    assert not repeated.any()


def test_split_lengths_reach_their_bounds_and_no_further() -> None:
    """Sentences of exactly max_train_len words go to train and test, never to test_long,
    which holds max_train_len + 1 to max_len words (here test_long fills last)."""
    task = translation_task(n_train=30, n_test=10, n_test_long=150, max_train_len=9, max_len=14)
    for rows in (task.train, task.test):
        assert int(rows.src_lengths.min()) >= 3
        assert int(rows.src_lengths.max()) <= 9
    assert int(task.train.src_lengths.max()) == 9
    assert int(task.test_long.src_lengths.min()) == 10
    assert int(task.test_long.src_lengths.max()) == 14


def test_trimming_cuts_padding_only(task: TranslationTask) -> None:
    """inputs_targets cuts the columns that are padding in every row, and no word."""
    rows = task.train
    (src, tgt_in, _), targets = task.eval_data("train")
    S, T = src.shape[1], tgt_in.shape[1] + 1
    assert torch.equal(src, rows.src[:, :S])
    assert not rows.src[:, S:].any()
    assert torch.equal(tgt_in, rows.tgt[:, : T - 1])
    assert not rows.tgt[:, T:].any()
    assert int((targets != IGNORE_INDEX).sum()) == int((rows.tgt[:, 1:] != 0).sum())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_train": 0}, "n_train"),
        ({"max_train_len": 2}, "max_train_len"),
        ({"max_len": 8, "max_train_len": 8}, "max_len"),
        ({"max_len": 50}, "max_len"),
        ({"seed": -1}, "seed"),
    ],
)
def test_task_rejects_bad_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        translation_task(**({"n_train": 50, "n_test": 5, "n_test_long": 5} | kwargs))


@pytest.mark.parametrize(
    ("src", "tgt", "says"),
    [
        (torch.ones(2, 3), torch.ones(2, 4, dtype=torch.int64), r"src .* got shape \(2, 3\) "),
        (torch.ones(2, 3, dtype=torch.int64), torch.ones(4, dtype=torch.int64), r"tgt .*\(4\)"),
        (torch.ones(2, 3, dtype=torch.int64), [[1, 2]], "tgt .* got list"),
        (
            torch.ones(3, 3, dtype=torch.int64),
            torch.ones(2, 4, dtype=torch.int64),
            r"same batch size, got \(3, 3\) and \(2, 4\)",
        ),
    ],
)
def test_inputs_targets_names_the_shape_and_dtype_it_got(
    task: TranslationTask, src: object, tgt: object, says: str
) -> None:
    """The message says the shape and dtype it got, not the tensor's values."""
    with pytest.raises(ValueError, match=says) as info:
        task.inputs_targets(src, tgt)
    assert "tensor(" not in str(info.value)


def test_split_name_is_checked(task: TranslationTask) -> None:
    with pytest.raises(ValueError, match="split"):
        task.split("valid")


# ------------------------------------------------------------------------------ the model


def _model(task: TranslationTask | None = None, seed: int = 0) -> EncoderDecoder:
    torch.manual_seed(seed)
    v_src, v_tgt, c = (
        (40, 30, 24)
        if task is None
        else (
            task.src_vocab_size,
            task.tgt_vocab_size,
            task.input_len,
        )
    )
    model = EncoderDecoder(EncoderDecoderConfig(v_src, v_tgt, c, 32, 4, 2, 2)).eval()
    with torch.no_grad():  # larger random weights: varied, confident outputs to test search on
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.3)
    return model


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (6, 9), generator=g)
    lengths = torch.tensor([9, 4, 7, 1, 9, 5])
    mask = torch.arange(9)[None] < lengths[:, None]
    return src.masked_fill(~mask, 0), mask


def test_padding_never_changes_real_outputs() -> None:
    model = _model()
    src, mask = _batch()
    tgt = torch.randint(0, 30, (6, 7))
    tgt_mask = torch.arange(7)[None] < torch.tensor([7, 3, 5, 2, 7, 4])[:, None]
    full = model(src, tgt, mask, tgt_mask)
    for b in range(6):
        s, t = int(mask[b].sum()), int(tgt_mask[b].sum())
        alone = model(src[b : b + 1, :s], tgt[b : b + 1, :t])
        torch.testing.assert_close(full[b : b + 1, :t], alone, atol=1e-5, rtol=1e-5)
    other = src.masked_fill(~mask, 17)  # what stands at the padding does not matter
    torch.testing.assert_close(model(other, tgt, mask), model(src, tgt, mask))


def test_the_decoder_reads_target_embeddings_and_tgt_mask_hides_padded_keys() -> None:
    """The decoder's first block reads the target through tgt_emb (scaled, plus sinusoids),
    not the source table; with tgt_mask a padded position's output depends on no other
    padded token (without it, later positions read the first padded one)."""
    model = _model()
    src, mask = _batch()
    tgt = torch.randint(3, 30, (6, 7), generator=torch.Generator().manual_seed(1))
    seen = []
    model.decoder[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model(src, tgt, mask)
    torch.testing.assert_close(seen[0], model.pos_emb.embed(model.tgt_emb(tgt), 0))
    tgt_mask = torch.arange(7)[None] < 3  # (1, 7): three real tokens, then padding
    tgt_mask = tgt_mask.expand(6, 7)
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 30  # the first padded token
    with_mask = model(src, tgt, mask, tgt_mask), model(src, changed, mask, tgt_mask)
    torch.testing.assert_close(with_mask[0][:, 4:], with_mask[1][:, 4:])
    assert not torch.allclose(model(src, tgt, mask)[:, 4:], model(src, changed, mask)[:, 4:])


@pytest.mark.parametrize("beam_size", [1, 2, 4])
@pytest.mark.parametrize("eos_id", [None, 5])
def test_cached_generation_equals_recomputing(beam_size: int, eos_id: int | None) -> None:
    model = _model()
    src, mask = _batch()
    kwargs = {"bos_id": 1, "eos_id": eos_id, "src_mask": mask, "beam_size": beam_size}
    cached = model.generate(src, 15, **kwargs)
    recomputed = model.generate(src, 15, use_cache=False, **kwargs)
    assert torch.equal(cached, recomputed)
    assert (cached[:, 0] == 1).all()
    assert cached.shape[1] <= 16


def test_greedy_is_the_argmax_of_teacher_forcing() -> None:
    model = _model()
    src, mask = _batch(1)
    out = model.generate(src, 12, bos_id=1, src_mask=mask)
    assert out.shape == (6, 13)
    assert len({tuple(r) for r in out[:, 1:].tolist()}) > 1  # not a degenerate model
    torch.testing.assert_close(model(src, out[:, :-1], mask).argmax(-1), out[:, 1:])


def _log_prob(model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor, out: torch.Tensor):
    logp = torch.log_softmax(model(src, out[:, :-1], mask), -1)  # (B, T, V)
    return logp.gather(-1, out[:, 1:, None])[..., 0].sum(1)  # (B,)


def test_beam_search_finds_targets_at_least_as_likely_as_greedy() -> None:
    model = _model(seed=0)
    src, mask = _batch(0)
    greedy = model.generate(src, 10, bos_id=1, src_mask=mask)
    beam = model.generate(src, 10, bos_id=1, src_mask=mask, beam_size=4)
    assert beam.shape == greedy.shape
    better = _log_prob(model, src, mask, beam) - _log_prob(model, src, mask, greedy)
    assert (better > -1e-4).all()
    assert (better > 1e-3).any()  # and strictly better somewhere


def test_after_eos_a_row_repeats_eos_and_decoding_stops() -> None:
    model = _model()
    src, mask = _batch()
    free = model.generate(src, 15, bos_id=1, src_mask=mask)
    eos = int(free[0, 3])  # the token row 0 writes third: it ends row 0 there
    out = model.generate(src, 15, bos_id=1, eos_id=eos, src_mask=mask)
    for row in out.tolist():
        if eos in row[1:]:
            first = row.index(eos, 1)
            assert all(t == eos for t in row[first:])
    if (out[:, 1:] == eos).any(1).all():
        assert out.shape[1] < 16


def _varied_model() -> EncoderDecoder:
    """A random model (V_tgt = 8) whose head is not tied to its target embedding: a tied random
    model repeats its last token, this one writes varied targets, token 0 among them."""
    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(40, 8, 12, 32, 4, 2, 2)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.3)
    model.lm_head.weight = torch.nn.Parameter(0.3 * torch.randn(8, 32))
    return model


def _plain_beam_search(
    model: EncoderDecoder, src: torch.Tensor, mask: torch.Tensor, n: int, eos: int | None, k: int
) -> torch.Tensor:
    """Beam search written out one source at a time, rerunning the model on whole targets:
    the k best targets by summed log-probability, an ended one kept at its score (it goes on
    with eos), a source done once its best target has ended; rows padded with eos."""
    rows = []
    for b in range(src.shape[0]):
        s = src[b : b + 1, : int(mask[b].sum())]  # its real words only: no mask
        beams = [(0.0, [1], False)]  # (score, tokens from bos = 1, ended), best first
        while len(beams[0][1]) <= n and not beams[0][2]:
            tgt = torch.tensor([tokens for _, tokens, _ in beams])  # (k, t)
            logp = torch.log_softmax(model(s.expand(len(tgt), -1), tgt)[:, -1], -1)  # (k, V)
            candidates = []
            for (score, tokens, ended), row in zip(beams, logp.tolist(), strict=True):
                if ended:
                    candidates.append((score, [*tokens, eos], True))
                else:
                    candidates += [(score + lp, [*tokens, v], v == eos) for v, lp in enumerate(row)]
            beams = sorted(candidates, key=lambda c: -c[0])[:k]
        rows.append(beams[0][1])
    width = max(map(len, rows))
    return torch.tensor([row + [eos] * (width - len(row)) for row in rows])


@pytest.mark.parametrize(
    ("beam_size", "eos_id"), [(1, None), (1, 0), (1, 7), (3, None), (3, 7), (4, 3)]
)
def test_generate_is_the_plain_beam_search_written_out(beam_size: int, eos_id: int | None) -> None:
    """Token for token, and length for length: finished targets keep their score and repeat
    eos, decoding stops once every source's best target has ended (no sooner, no later), and
    with eos_id=None no token ends a target (token 0, which the model writes, included)."""
    model = _varied_model()
    src, mask = _batch(2)
    expected = _plain_beam_search(model, src, mask, 6, eos_id, beam_size)
    if eos_id is None:
        assert expected.shape == (6, 7)
        assert (expected[:, 1:] == 0).any()
    else:  # rows end at different steps (or not at all); with 0 and 3 all end, before step 6
        ends = {row.index(eos_id, 1) if eos_id in row[1:] else None for row in expected.tolist()}
        assert len(ends) >= 2
        assert (None not in ends) == (eos_id in (0, 3)) == (expected.shape[1] < 7)
    for use_cache in (True, False):
        out = model.generate(
            src, 6, bos_id=1, eos_id=eos_id, src_mask=mask, beam_size=beam_size, use_cache=use_cache
        )
        assert torch.equal(out, expected), (out, expected)


def test_attention_weights_shapes_rows_and_padding() -> None:
    model = _model()
    src, mask = _batch()
    tgt = torch.randint(0, 30, (6, 7))
    weights = model.attention_weights(src, tgt, mask)
    assert sorted(weights) == ["cross", "decoder", "encoder"]
    assert [tuple(w.shape) for w in weights["encoder"]] == [(6, 4, 9, 9)] * 2
    assert [tuple(w.shape) for w in weights["decoder"]] == [(6, 4, 7, 7)] * 2
    assert [tuple(w.shape) for w in weights["cross"]] == [(6, 4, 7, 9)] * 2
    for w in weights["cross"]:
        torch.testing.assert_close(w.sum(-1), torch.ones(6, 4, 7))
        assert (w.masked_select(~mask[:, None, None, :]) == 0).all()
    for w in weights["decoder"]:  # causal
        assert (w.triu(1) == 0).all()
    for w in weights["encoder"]:
        assert (w.masked_select(~mask[:, None, None, :]) == 0).all()


def test_attention_weights_are_the_ones_each_layer_uses() -> None:
    """Layer i's weights are those of the model's own layer i, run as the forward pass runs it:
    the encoder over the masked source, the decoder reading the normalised encoder output; and
    the decoder's self-attention gives no weight to target padding (tgt_mask)."""
    model = _model()
    src, mask = _batch()
    tgt = torch.randint(0, 30, (6, 7), generator=torch.Generator().manual_seed(0))
    tgt_mask = torch.arange(7)[None] < torch.tensor([7, 3, 5, 2, 7, 4])[:, None]
    weights = model.attention_weights(src, tgt, mask, tgt_mask)
    key_mask = mask[:, None, None, :]  # (B, 1, 1, S)
    x = model.pos_emb.embed(model.src_emb(src), 0)
    for block, w in zip(model.encoder, weights["encoder"], strict=True):
        x, expected = block(x, key_mask, need_weights=True)
        torch.testing.assert_close(w, expected)
    context = model.encoder_norm(x)
    y = model.pos_emb.embed(model.tgt_emb(tgt), 0)
    for i, block in enumerate(model.decoder):
        y, (w_self, w_cross) = block(
            y, context, tgt_mask[:, None, None, :], key_mask, need_weights=True
        )
        torch.testing.assert_close(weights["decoder"][i], w_self)
        torch.testing.assert_close(weights["cross"][i], w_cross)
        assert (weights["decoder"][i].masked_select(~tgt_mask[:, None, None, :]) == 0).all()
    assert not torch.allclose(weights["cross"][0], weights["cross"][1])  # the layers differ


def test_generate_and_attention_weights_turn_dropout_off() -> None:
    """Both run in eval() mode: a model left training, with dropout, gives what it gives in
    eval() mode, and is training again after."""
    torch.manual_seed(0)
    model = EncoderDecoder(EncoderDecoderConfig(40, 30, 24, 32, 4, 2, 2, dropout=0.5))
    src, mask = _batch()
    tgt = torch.ones(6, 3, dtype=torch.int64)
    expected = model.eval().generate(src, 5, bos_id=1, src_mask=mask, beam_size=2)
    weights = model.attention_weights(src, tgt, mask)
    for _ in range(2):
        assert torch.equal(
            model.train().generate(src, 5, bos_id=1, src_mask=mask, beam_size=2), expected
        )
        assert model.training
        for name, ws in model.train().attention_weights(src, tgt, mask).items():
            for w, e in zip(ws, weights[name], strict=True):
                torch.testing.assert_close(w, e)


def test_attention_weights_keep_the_training_mode() -> None:
    model = _model().train()
    src, mask = _batch()
    model.attention_weights(src, torch.ones(6, 3, dtype=torch.int64), mask)
    assert model.training


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda m, s, k: m(s, torch.ones(5, 3, dtype=torch.int64), k), "batch size"),
        (lambda m, s, k: m(s, torch.ones(6, 3, dtype=torch.int64), k[:, :4]), "src_mask"),
        (lambda m, s, k: m(s, torch.ones(6, 3, dtype=torch.int64), k.long()), "src_mask"),
        # inverted (True at padding): a row without padding is all False, attends to nothing
        (lambda m, s, k: m(s, torch.ones(6, 3, dtype=torch.int64), ~k), "src_mask.*inverted"),
        (
            lambda m, s, k: m(
                s, torch.ones(6, 3, dtype=torch.int64), k, torch.zeros(6, 3, dtype=torch.bool)
            ),
            "tgt_mask.*only False",
        ),
        (lambda m, s, k: m.encode(s, ~k), "src_mask.*only False"),
        (lambda m, s, k: m.generate(s, 5, bos_id=1, src_mask=~k), "src_mask.*only False"),
        # one row of padding only (row 3), while every column holds a real token in some row
        (lambda m, s, k: m.encode(s, k & (torch.arange(6) != 3)[:, None]), "src_mask.*only False"),
        (
            lambda m, s, k: m(
                s, torch.ones(6, 3, dtype=torch.int64), k, torch.ones(6, 4, dtype=torch.bool)
            ),
            "tgt_mask",
        ),
        (lambda m, s, k: m.generate(s, 5, bos_id=1, src_mask=k, beam_size=0), "beam_size"),
        (lambda m, s, k: m.generate(s, 5, bos_id=30, src_mask=k), "bos_id"),
        (lambda m, s, k: m.generate(s, 5, bos_id=-1, src_mask=k), "bos_id"),
        (lambda m, s, k: m.generate(s, 5, bos_id=1, eos_id=99), "eos_id"),
        (lambda m, s, k: m.generate(s, 5, bos_id=1, src_mask=k[:3]), "src_mask"),
        (lambda m, s, k: m.generate(s, 50, bos_id=1), "max_new_tokens"),
        (lambda m, s, k: m.generate(s, 5, bos_id=1, beam_size=31), "beam_size"),
        (lambda m, s, k: m.generate(s, 5, bos_id=1, use_cache=1), "use_cache"),
        (lambda m, s, k: m.encode(s, k, validate="no"), "validate"),
        (
            lambda m, s, k: m.attention_weights(s, torch.ones(2, 3, dtype=torch.int64), k),
            "batch size",
        ),
    ],
)
def test_bad_input_names_the_argument(call: object, name: str) -> None:
    model = _model()
    src, mask = _batch()
    with pytest.raises(ValueError, match=name):
        call(model, src, mask)


def test_generate_takes_its_bounds_and_no_new_token() -> None:
    """The bounds are inclusive: 1 + max_new_tokens = context_length and beam_size =
    tgt_vocab_size are allowed; max_new_tokens = 0 gives bos alone."""
    model = _model()  # context_length 24, tgt_vocab_size 30
    src, mask = _batch()
    assert model.generate(src, 23, bos_id=1, src_mask=mask).shape == (6, 24)
    assert model.generate(src, 2, bos_id=1, src_mask=mask, beam_size=30).shape == (6, 3)
    for beam_size in (1, 3):
        out = model.generate(src, 0, bos_id=1, src_mask=mask, beam_size=beam_size)
        assert torch.equal(out, torch.ones(6, 1, dtype=torch.int64))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_generate_an_empty_batch(beam_size: int) -> None:
    """No source sentence: an empty batch of targets, as GPT.generate returns one."""
    out = _model().generate(torch.zeros(0, 4, dtype=torch.int64), 5, bos_id=1, beam_size=beam_size)
    assert out.shape == (0, 1)
    assert out.dtype == torch.int64


# ------------------------------------------------------------------------------ training


def _sources_shuffled(task: TranslationTask) -> TranslationTask:
    """``task`` with each test target paired with another sentence's source."""
    test = dataclasses.replace(task.test, src=task.test.src.roll(1, 0))
    return dataclasses.replace(task, test=test)


def test_train_takes_a_translation_task_and_learns(task: TranslationTask) -> None:
    """Training lowers the test loss, and by reading the source: a decoder that learned only
    the targets' own statistics would score the same with every source paired wrongly."""
    torch.manual_seed(0)
    config = EncoderDecoderConfig(
        task.src_vocab_size, task.tgt_vocab_size, task.input_len, 32, 4, 1, 1
    )
    model = EncoderDecoder(config)
    before = evaluate(model, task)["loss"]
    history = train(
        model,
        task,
        TrainConfig(
            steps=60,
            batch_size=32,
            lr=1e-2,
            warmup_steps=5,
            eval_every=40,
            progress=False,
            device="cpu",
        ),
    )
    assert history.eval_step == [40, 60]
    after = history.last("test_loss")
    assert after < 0.7 * before  # 3.47 -> 1.87 when written
    assert after == pytest.approx(evaluate(model, task)["loss"])
    assert evaluate(model, _sources_shuffled(task))["loss"] > after + 0.4  # 2.64 when written
    em = exact_match(model, task, "test")
    exact, tokens = per_example_accuracy(model, task, "test")
    assert exact.shape == tokens.shape == (100,)
    assert em == pytest.approx(float(exact.float().mean()))
    assert (tokens[exact] == 1).all()
    _, tokens_long = per_example_accuracy(model, task, "test_long")
    assert tokens_long.shape == (80,)


def test_exact_match_of_padded_rows_counts_their_words_only(task: TranslationTask) -> None:
    """A model whose logits put each true next token first is exactly right on every row,
    however much padding it has; one wrong eos makes that row wrong, its token fraction
    (n - 1) / n for its n targets."""
    _, targets = task.eval_data("test")  # (100, T'), IGNORE_INDEX after each row's eos
    logits = 5.0 * torch.nn.functional.one_hot(targets.clamp(min=0), task.tgt_vocab_size).float()
    model = _model(task)
    model.forward = lambda *args, **kwargs: logits  # every row at once (one batch)
    exact, tokens = per_example_accuracy(model, task, "test")
    assert exact.all()
    assert (tokens == 1).all()
    assert exact_match(model, task, "test") == 1.0
    n = int((targets[0] != IGNORE_INDEX).sum())
    assert n < targets.shape[1]  # row 0 is padded
    logits[0, n - 1] = 5.0 * torch.nn.functional.one_hot(torch.tensor(3), task.tgt_vocab_size)
    exact, tokens = per_example_accuracy(model, task, "test")
    assert exact.tolist() == [False] + [True] * 99
    assert float(tokens[0]) == pytest.approx((n - 1) / n)
    assert exact_match(model, task, "test") == pytest.approx(0.99)


def test_train_refuses_a_model_too_small_for_the_task(task: TranslationTask) -> None:
    small = EncoderDecoder(
        EncoderDecoderConfig(10, task.tgt_vocab_size, task.input_len, 16, 2, 1, 1)
    )
    with pytest.raises(ValueError, match="src_vocab_size"):
        train(small, task, TrainConfig(steps=1, warmup_steps=0, progress=False))
    short = EncoderDecoder(
        EncoderDecoderConfig(task.src_vocab_size, task.tgt_vocab_size, 8, 16, 2, 1, 1)
    )
    with pytest.raises(ValueError, match="context_length"):
        train(short, task, TrainConfig(steps=1, warmup_steps=0, progress=False))


def test_both_sides_get_the_sinusoids_added_to_scaled_embeddings() -> None:
    """The encoder-decoder's positions are SinusoidalPositions: a fixed table, not saved."""
    from attnbook import sinusoidal_positional_encoding

    model = EncoderDecoder(EncoderDecoderConfig(9, 7, 12, 16, 2, 1, 1)).eval()
    torch.testing.assert_close(model.pos_emb.table, sinusoidal_positional_encoding(12, 16))
    assert not any(key.startswith("pos_emb") for key in model.state_dict())
    src = torch.tensor([[1, 2, 3]])
    expected = model.src_emb(src) * 16**0.5 + sinusoidal_positional_encoding(12, 16)[:3]
    torch.testing.assert_close(model.pos_emb.embed(model.src_emb(src), 0), expected)
    with pytest.raises(ValueError, match="d_model must be even"):
        EncoderDecoderConfig(9, 7, 12, 15, 3, 1, 1)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_generation_refuses_nan_logits(beam_size: int) -> None:
    model = _model()
    src, mask = _batch()
    with torch.no_grad():
        model.lm_head.weight[:, 0] = float("nan")  # every logit of every step
    with pytest.raises(ValueError, match="NaN logits at decoding step 0"):
        model.generate(src, 5, bos_id=1, src_mask=mask, beam_size=beam_size)
