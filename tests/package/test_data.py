"""Tests of attnbook.data: generated tasks, their splits and targets; characters and text.

Invariants (answers are what the task says, held-out rows never occur in
training, no row twice in a split, the loss sees answer positions only,
windows are the text shifted by one), determinism of the seeds, and bad input.
"""

from __future__ import annotations

import itertools
import math
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from attnbook import GPTConfig, data
from attnbook.data import (
    IGNORE_INDEX,
    CharTokenizer,
    SequenceTask,
    TextDataset,
    TokenDataset,
    TranslationTask,
    associative_recall_task,
    check_task_fits,
    grammar_corpus,
    load_text,
    reverse_task,
    sort_task,
    translation_task,
)


def _rows(x: torch.Tensor) -> set[tuple[int, ...]]:
    return {tuple(r) for r in x.tolist()}


def _small_tasks() -> list[SequenceTask]:
    return [
        reverse_task(length=5, n_symbols=4, n_train=600, n_test=100, seed=1),
        sort_task(length=5, n_symbols=4, n_train=600, n_test=100, seed=2),
        associative_recall_task(n_pairs=3, n_keys=4, n_values=3, n_train=600, n_test=100, seed=3),
    ]


@pytest.mark.parametrize("task", _small_tasks(), ids=lambda t: t.name)
def test_splits_are_disjoint_and_unique(task: SequenceTask) -> None:
    train, test = _rows(task.train), _rows(task.test)
    assert len(train) == task.train.shape[0] == 600  # no row twice in training
    assert len(test) == task.test.shape[0] == 100
    assert not train & test  # nothing held out was seen in training


@pytest.mark.parametrize("task", _small_tasks(), ids=lambda t: t.name)
def test_layout_and_vocabulary(task: SequenceTask) -> None:
    for rows in (task.train, task.test):
        assert rows.dtype == torch.int64
        assert rows.shape[1] == task.seq_len == task.prompt_len + 1 + task.answer_len
        assert (rows[:, task.prompt_len] == task.separator).all()
        others = torch.cat([rows[:, : task.prompt_len], rows[:, task.prompt_len + 1 :]], 1)
        assert (others >= 0).all()
        assert (others < task.separator).all()


def test_answers_are_correct() -> None:
    rev, srt, rec = _small_tasks()
    p = rev.prompt_len
    assert torch.equal(rev.train[:, p + 1 :], rev.train[:, :p].flip(1))
    assert torch.equal(srt.test[:, p + 1 :], srt.test[:, :p].sort(1).values)
    assert not torch.equal(srt.test[:, p + 1 :], srt.test[:, :p])  # it really sorts something
    for row in rec.train[:200].tolist():
        pairs = dict(zip(row[0 : rec.prompt_len - 1 : 2], row[1 : rec.prompt_len - 1 : 2]))
        assert len(pairs) == 3  # distinct keys
        assert row[-1] == pairs[row[rec.prompt_len - 1]]  # the query's value
        assert all(k < 4 for k in pairs)
        assert all(4 <= v < 7 for v in pairs.values())


def test_same_seed_same_task_other_seed_other_task() -> None:
    a, b = (
        reverse_task(n_train=100, n_test=10, seed=5),
        reverse_task(n_train=100, n_test=10, seed=5),
    )
    c = reverse_task(n_train=100, n_test=10, seed=6)
    assert torch.equal(a.train, b.train)
    assert torch.equal(a.test, b.test)
    assert not torch.equal(a.train, c.train)


def test_targets_count_the_answer_only() -> None:
    task = reverse_task(length=4, n_symbols=5, n_train=50, n_test=10)
    inputs, targets = task.inputs_targets(task.train[:7])
    assert inputs.shape == targets.shape == (7, task.input_len) == (7, 8)
    assert torch.equal(inputs, task.train[:7, :-1])
    assert (targets[:, :4] == IGNORE_INDEX).all()
    assert torch.equal(targets[:, 4:], task.train[:7, 5:])  # the answer, one step ahead
    # the last input position the loss reads is the separator's: it predicts the first answer token
    assert (inputs[:, 4] == task.separator).all()


def test_batch_draws_from_its_split_and_follows_the_generator() -> None:
    task = reverse_task(length=4, n_symbols=5, n_train=50, n_test=10)
    x1, y1 = task.batch("test", 32, torch.Generator().manual_seed(0))
    x2, y2 = task.batch("test", 32, torch.Generator().manual_seed(0))
    assert torch.equal(x1, x2)
    assert torch.equal(y1, y2)
    whole = torch.cat([x1, y1[:, -1:]], 1)  # the sequences back (last target = last token)
    assert _rows(whole) <= _rows(task.test)
    x3, _ = task.batch("train", 32, torch.Generator().manual_seed(0))
    assert not _rows(torch.cat([x3, x3[:, :1]], 1)) & _rows(task.test)


def test_batch_can_draw_every_example_and_checks_its_generator() -> None:
    task = reverse_task(length=4, n_symbols=5, n_train=5, n_test=3)
    x, y = task.batch("train", 200, torch.Generator().manual_seed(0))
    assert _rows(torch.cat([x, y[:, -1:]], 1)) == _rows(task.train)  # the last row too
    with pytest.raises(ValueError, match=r"generator must be a torch\.Generator or None"):
        task.batch("train", 4, generator=0)


def test_eval_data_holds_every_example_of_its_split() -> None:
    task = reverse_task(length=4, n_symbols=5, n_train=20, n_test=6)
    for split, rows in (("train", task.train), ("test", task.test)):
        inputs, targets = task.eval_data(split)
        expected = task.inputs_targets(rows)
        assert torch.equal(inputs, expected[0])
        assert torch.equal(targets, expected[1])
    assert torch.equal(task.eval_data()[0], task.eval_data("test")[0])


def test_check_task_fits() -> None:
    task = reverse_task(length=6, n_symbols=10, n_train=50, n_test=10)  # T = 12, V = 11
    check_task_fits(
        task, GPTConfig(vocab_size=11, context_length=12, d_model=8, n_heads=2, n_layers=1)
    )
    with pytest.raises(ValueError, match="context_length"):
        check_task_fits(
            task, GPTConfig(vocab_size=11, context_length=11, d_model=8, n_heads=2, n_layers=1)
        )
    with pytest.raises(ValueError, match="vocab_size"):
        check_task_fits(
            task, GPTConfig(vocab_size=10, context_length=12, d_model=8, n_heads=2, n_layers=1)
        )


@pytest.mark.parametrize(
    ("builder", "kwargs", "match"),
    [
        (reverse_task, {"length": 0}, "length"),
        (reverse_task, {"n_symbols": 1}, "n_symbols"),
        (reverse_task, {"length": 3, "n_symbols": 3, "n_train": 30}, "distinct"),  # 27 strings
        (sort_task, {"n_test": 0}, "n_test"),
        (sort_task, {"seed": -1}, "seed"),
        (associative_recall_task, {"n_pairs": 5, "n_keys": 4}, "n_keys"),
        (associative_recall_task, {"n_values": 1.5}, "n_values"),
        # the separator's id must be an int64
        (
            reverse_task,
            {"n_symbols": 2**63, "length": 1},
            r"n_symbols must be an int in \[2, 9223372036854775807\]",
        ),
        (
            sort_task,
            {"n_symbols": 2**64, "length": 1},
            r"n_symbols must be an int in \[2, 9223372036854775807\]",
        ),
        (
            associative_recall_task,
            {"n_keys": 2**63},
            r"n_keys must be an int in \[1, 9223372036854775806\]",
        ),
        (
            associative_recall_task,
            {"n_values": 2**63 - 8},
            r"n_values must be an int in \[1, 9223372036854775799\]",
        ),
    ],
)
def test_bad_task_arguments(builder: object, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        builder(**kwargs)


def _tasks_of_every_small_size() -> Iterator[SequenceTask]:
    """A task of each builder for each small size, down to the smallest each allows."""

    def split(n_possible: int) -> dict[str, int]:  # as many examples as the size allows
        n = int(n_possible / 1.25)  # at least 2: one to train on, one to hold out
        return {"n_train": n - 1, "n_test": 1}

    for length, n_symbols in itertools.product((1, 2, 3), (2, 3, 5)):
        if n_symbols**length >= 2.5:
            for builder in (reverse_task, sort_task):
                yield builder(length=length, n_symbols=n_symbols, **split(n_symbols**length))
    for n_pairs, extra_keys, n_values in itertools.product((1, 2, 3), (0, 1), (1, 2)):
        n_keys = n_pairs + extra_keys
        n_possible = math.perm(n_keys, n_pairs) * n_values**n_pairs * n_pairs
        if n_possible >= 2.5:
            yield associative_recall_task(n_pairs, n_keys, n_values, **split(n_possible))


def test_every_id_is_in_the_vocabulary_at_every_size() -> None:
    """By construction: symbols 0 .. V - 2 around the separator V - 1, at every small size
    (a task's own check refuses ids outside [0, V), not a symbol in the separator's place)."""
    tasks = list(_tasks_of_every_small_size())
    assert len(tasks) == 25
    for task in tasks:
        rows = torch.cat([task.train, task.test])
        P = task.prompt_len
        assert (rows[:, P] == task.vocab_size - 1).all(), task
        others = torch.cat([rows[:, :P], rows[:, P + 1 :]], 1)
        assert 0 <= others.min() <= others.max() < task.vocab_size - 1, task
        if task.name == "associative_recall":  # keys (and the query), then values
            keys, values = rows[:, 0:P:2], rows[:, 1:P:2]
            assert keys.max() < values.min(), task


def _check_recall_rows(task: SequenceTask, n_keys: int) -> None:
    rows = torch.cat([task.train, task.test])
    keys, query = rows[:, 0 : task.prompt_len - 1 : 2], rows[:, task.prompt_len - 1]
    assert 0 <= keys.min() <= keys.max() < n_keys
    assert (keys.sort(1).values.diff(dim=1) > 0).all()  # distinct within an example
    assert (keys == query[:, None]).sum(1).eq(1).all()  # the query is one of them


def test_recall_task_keeps_its_numbers_for_the_sizes_it_always_drew() -> None:
    """The default task (the command line's --task recall) is the one it always was, and
    drawing the keys in chunks of rows changes no number."""
    task = associative_recall_task()
    assert task.train[:2].tolist() == [
        [3, 10, 2, 8, 1, 9, 6, 12, 1, 16, 9],
        [3, 9, 5, 15, 7, 14, 0, 11, 3, 16, 9],
    ]
    assert task.test[:1].tolist() == [[1, 14, 5, 13, 2, 13, 0, 15, 5, 16, 13]]
    sizes = {"n_pairs": 3, "n_keys": 100, "n_train": 300, "n_test": 30, "seed": 4}
    whole = associative_recall_task(**sizes)
    drawn = []

    class Recorder:  # a generator that records the shape of each draw of uniform numbers
        def __init__(self, rng: np.random.Generator) -> None:
            self.rng = rng

        def random(self, shape: tuple[int, int]) -> np.ndarray:
            drawn.append(shape)
            return self.rng.random(shape)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data, "_KEY_DRAW_LIMIT", 1000)  # 10 rows of 100 keys a draw
        chunked = associative_recall_task(**sizes)
        keys = data._distinct_keys(Recorder(np.random.default_rng(5)), 25, 100, 3)
    assert torch.equal(whole.train, chunked.train)
    assert torch.equal(whole.test, chunked.test)
    assert drawn == [(10, 100), (10, 100), (5, 100)]
    one_draw = np.argsort(np.random.default_rng(5).random((25, 100)), axis=1)[:, :3]
    assert np.array_equal(keys, one_draw)


def test_recall_task_with_a_large_key_alphabet_needs_the_memory_of_its_examples() -> None:
    """A permutation of all keys per example would need 2 x 25 x 10**6 float64s (400 MB),
    or for 10**12 keys more memory than there is."""
    tracemalloc.start()
    try:
        task = associative_recall_task(n_pairs=3, n_keys=10**6, n_train=20, n_test=5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak
    _check_recall_rows(task, 10**6)
    _check_recall_rows(associative_recall_task(n_keys=10**12, n_train=20, n_test=5), 10**12)


def test_recall_keys_drawn_the_second_way_are_uniform() -> None:
    """Forced onto the draw for large alphabets, 3 keys give each of the 6 ordered pairs
    with probability 1/6: independent draws, a third of them with a repeat redrawn."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data, "_KEY_DRAW_LIMIT", 0)
        patch.setattr(data, "_FEW_KEYS", 0)
        keys = data._distinct_keys(np.random.default_rng(0), 12000, 3, 2)
    assert keys.shape == (12000, 2)
    assert (keys[:, 0] != keys[:, 1]).all()
    counts = np.unique(keys[:, 0] * 3 + keys[:, 1], return_counts=True)[1]
    assert len(counts) == 6
    assert np.abs(counts / 12000 - 1 / 6).max() < 0.015, counts


def test_inputs_targets_and_batch_reject_bad_input() -> None:
    task = reverse_task(length=4, n_symbols=5, n_train=50, n_test=10)
    with pytest.raises(ValueError, match="shape"):
        task.inputs_targets(task.train[:, :-1])
    with pytest.raises(ValueError, match="int64"):
        task.inputs_targets(task.train.float())
    with pytest.raises(ValueError, match="split"):
        task.batch("validation", 4)
    with pytest.raises(ValueError, match="batch_size"):
        task.batch("train", 0)


# ----------------------------------------------------------------------------- text


def test_tokenizer_round_trip_and_vocabulary() -> None:
    tok = CharTokenizer("hello world")
    assert tok.chars == sorted(set("hello world"))
    assert tok.vocab_size == 8
    ids = tok.encode("world hello")
    assert ids.dtype == torch.int64
    assert ids.shape == (11,)
    assert tok.decode(ids) == "world hello"
    assert tok.decode(ids.tolist()) == "world hello"
    assert tok.encode(" ").item() == 0  # sorted: the space comes first


def test_tokenizer_bad_input() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer("")
    tok = CharTokenizer("abc")
    with pytest.raises(ValueError, match="outside"):
        tok.encode("abd")
    with pytest.raises(ValueError, match="ids"):
        tok.decode([0, 3])


def test_load_text(tmp_path: object) -> None:
    path = tmp_path / "t.txt"
    path.write_text("some text\n", encoding="utf-8")
    assert load_text(path) == "some text\n"
    with pytest.raises(ValueError, match="existing"):
        load_text(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_text(tmp_path / "empty.txt")


def test_grammar_corpus_agrees_and_is_seeded() -> None:
    text = grammar_corpus(300, seed=0)
    assert text == grammar_corpus(300, seed=0)
    assert text != grammar_corpus(300, seed=1)
    lines = text.splitlines()
    assert len(lines) == 300
    assert all(line[0].isupper() and line.endswith(".") for line in lines)
    # agreement: a plural subject never takes a singular verb, and the other way round
    assert "The cats runs" not in text
    assert "The cat run " not in text
    assert "The cats run" in text or "The cats sleep" in text or "The cats see" in text
    assert any(" that " in line for line in lines)  # relative clauses occur


def test_text_dataset_windows_and_split() -> None:
    text = grammar_corpus(200)
    ds = TextDataset(text, seq_len=16, test_fraction=0.2)
    assert ds.vocab_size == CharTokenizer(text).vocab_size
    assert ds.input_len == 16
    n = len(text)
    assert ds.train.numel() + ds.test.numel() == n
    assert ds.tokenizer.decode(ds.test) == text[ds.train.numel() :]  # the tail is held out
    x, y = ds.batch("train", 8, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    for row_x, row_y in zip(x, y):
        window = ds.tokenizer.decode(row_x) + ds.tokenizer.decode(row_y[-1:])
        assert window in text[: ds.train.numel()]
    ex, _ey = ds.eval_data("test", max_windows=10)
    assert ex.shape == (10, 16)
    assert torch.equal(ex, ds.eval_data("test", max_windows=10)[0])


def test_eval_data_ends_inside_a_split_of_more_than_2_to_the_24_tokens() -> None:
    """Past 2**24, float32 rounds the last start 2**24 + 3 up to 2**24 + 4, one too far."""
    seq_len = 8
    ids = torch.zeros(2**24 + 4 + seq_len, dtype=torch.int64)
    ds = TokenDataset(ids[:100], ids, seq_len=seq_len, vocab_size=2)
    x, y = ds.eval_data("test", max_windows=3)
    assert x.shape == y.shape == (3, seq_len)


def test_text_dataset_bad_input() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        TextDataset("abcdefgh" * 10, seq_len=0)
    with pytest.raises(ValueError, match="test_fraction"):
        TextDataset("abcdefgh" * 10, seq_len=4, test_fraction=1.0)
    with pytest.raises(ValueError, match="test split"):
        TextDataset("abcdefgh" * 10, seq_len=20, test_fraction=0.1)  # 8 test characters


def test_token_dataset_windows_of_any_ids() -> None:
    from attnbook.data import TokenDataset

    train_ids = torch.arange(100) % 7  # (N,)
    ds = TokenDataset(train_ids, [6, 5, 4, 3, 2, 1, 0] * 3, seq_len=8, vocab_size=7)
    assert ds.vocab_size == 7
    assert ds.input_len == 8
    assert repr(ds) == "TokenDataset(vocab_size=7, seq_len=8, train=100 tokens, test=21 tokens)"
    x, y = ds.batch("train", 5, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal((x[:, 1:] - x[:, :-1]) % 7, torch.ones(5, 7, dtype=torch.int64))
    ex, ey = ds.eval_data("test")
    assert ex.shape == (21 - 8, 8)  # every start position, fewer than max_windows
    assert torch.equal(ex[0], torch.tensor([6, 5, 4, 3, 2, 1, 0, 6]))
    assert torch.equal(ey[0], torch.tensor([5, 4, 3, 2, 1, 0, 6, 5]))
    # a TextDataset is a TokenDataset of a CharTokenizer's ids; train() accepts either
    assert isinstance(TextDataset(grammar_corpus(50), seq_len=8), TokenDataset)


def test_token_dataset_windows_reach_the_last_token() -> None:
    """Every window can be drawn, the last one too (torch.randint's high is exclusive), and the
    evenly spaced evaluation windows run from the split's first token to its last."""
    ds = TokenDataset(torch.arange(10), torch.arange(30), seq_len=8, vocab_size=30)
    x, _ = ds.batch("train", 64, torch.Generator().manual_seed(0))
    assert set(x[:, 0].tolist()) == {0, 1}  # 10 tokens hold two windows of 8 + 1
    ex, ey = ds.eval_data("test", max_windows=5)
    assert torch.equal(ex[:, 0], torch.tensor([0, 5, 10, 15, 21]))  # 22 starts, 5 spread
    assert ey[-1, -1] == 29  # the last target is the split's last token


def test_token_dataset_bad_input() -> None:
    from attnbook.data import TokenDataset

    good = list(range(10))
    with pytest.raises(ValueError, match="vocab_size"):
        TokenDataset(good, good, seq_len=4, vocab_size=0)
    with pytest.raises(ValueError, match=r"train must hold ids in \[0, vocab_size\)"):
        TokenDataset(good, good, seq_len=4, vocab_size=5)
    with pytest.raises(ValueError, match="test must be a 1-D integer tensor"):
        TokenDataset(good, torch.zeros(3, 4, dtype=torch.int64), seq_len=4, vocab_size=10)
    with pytest.raises(ValueError, match="test must be a 1-D integer tensor"):
        TokenDataset(good, torch.rand(20), seq_len=4, vocab_size=10)
    with pytest.raises(ValueError, match="the test split has 3 tokens"):
        TokenDataset(good, [1, 2, 3], seq_len=4, vocab_size=10)


# ------------------------------------------------------------ the grammar's exact statistics


def test_every_generated_sentence_parses_as_grammatical() -> None:
    from attnbook.data import grammar_corpus, parse_sentence

    for line in grammar_corpus(3000, seed=5).splitlines():
        parsed = parse_sentence(line)
        assert parsed is not None, line
        assert parsed.grammatical, line
        assert parsed.log_prob < 0


@pytest.mark.parametrize(
    ("sentence", "subject", "clause"),
    [
        ("The cats run.", True, True),
        ("The cat run.", False, True),
        ("The old dog that the cats see runs again.", True, True),
        ("The dog that the cats sees runs.", True, False),
        ("The happy mouse that the fox follows follow the child today.", False, True),
        ("The mice like the red fox quietly.", True, True),
    ],
)
def test_parse_sentence_names_the_failed_agreement(
    sentence: str, subject: bool, clause: bool
) -> None:
    from attnbook.data import parse_sentence

    parsed = parse_sentence(sentence)
    assert parsed is not None
    assert (parsed.subject_agrees, parsed.clause_agrees) == (subject, clause)
    assert parsed.grammatical == (subject and clause)
    assert (parsed.log_prob > -1e9) == parsed.grammatical


@pytest.mark.parametrize(
    "sentence",
    [
        "The cat cat.",
        "The mice see see see teachers.",
        "the cats run.",
        "The cats run",
        "",
        "The cats run today today.",
        "The dog that runs.",
        "The cat sees.",
        "The cat zebras.",
    ],
)
def test_parse_sentence_rejects_what_the_grammar_cannot_write(sentence: str) -> None:
    from attnbook.data import parse_sentence

    assert parse_sentence(sentence) is None
    with pytest.raises(ValueError, match="sentence"):
        parse_sentence(None)  # type: ignore[arg-type]


def test_the_exact_probability_of_one_sentence() -> None:
    """P("The cat runs.") by hand: singular, no adjective, 1 noun of 7, no clause, ..."""
    import math

    from attnbook.data import parse_sentence

    expected = 0.5 * (0.6 / 7) * 0.7 * (0.5 / 4) * (2 / 5)
    assert parse_sentence("The cat runs.").log_prob == pytest.approx(math.log(expected))


def test_grammar_entropy_matches_the_generator() -> None:
    """The exact entropy and mean length against 20,000 generated lines (within 4 standard errors).

    The mean of -ln p(line) over lines the generator writes estimates the entropy only if
    p is the generator's own distribution: counting the adverb "" once instead of twice
    moves it by 0.4 ln 2 = 0.28 nats, 10 standard errors.
    """
    import numpy as np

    from attnbook.data import grammar_corpus, grammar_entropy, parse_sentence

    lines = grammar_corpus(20000, seed=1).splitlines()
    surprise = np.array([-parse_sentence(line).log_prob for line in lines])
    lengths = np.array([len(line) + 1 for line in lines])
    exact = grammar_entropy()
    for values, target in (
        (surprise, exact.nats_per_sentence),
        (lengths, exact.chars_per_sentence),
    ):
        assert abs(values.mean() - target) < 4 * values.std() / np.sqrt(len(values))
    assert exact.nats_per_char == pytest.approx(exact.nats_per_sentence / exact.chars_per_sentence)
    assert round(exact.nats_per_char, 3) == 0.327


def test_grammar_char_nats_add_up_to_each_line_s_probability() -> None:
    """Character by character, a line costs what parse_sentence says the whole line costs.

    The two are computed apart: one parses words, the other follows the grammar one
    character at a time, summing over every way a prefix can go on.
    """
    import math

    from attnbook.data import grammar_char_nats, grammar_corpus, parse_sentence

    text = grammar_corpus(500, seed=2)
    nats = grammar_char_nats(text)
    assert len(nats) == len(text)
    assert nats[:3] == [0.0, 0.0, 0.0]  # every line begins "The"
    start = 0
    for line in text.splitlines(keepends=True):
        cost = sum(nats[start : start + len(line)])
        assert cost == pytest.approx(-parse_sentence(line[:-1]).log_prob, abs=1e-9), line
        start += len(line)
    # "The cat runs." by hand, as in test_the_exact_probability_of_one_sentence
    expected = 0.5 * (0.6 / 7) * 0.7 * (0.5 / 4) * (2 / 5)
    assert sum(grammar_char_nats("The cat runs.\n")) == pytest.approx(-math.log(expected))


def test_grammar_char_nats_average_to_the_entropy_over_whole_lines() -> None:
    import numpy as np

    from attnbook.data import grammar_char_nats, grammar_corpus, grammar_entropy

    text = grammar_corpus(20000, seed=1)
    per_line = np.add.reduceat(
        grammar_char_nats(text), np.r_[0, np.cumsum([len(x) + 1 for x in text.splitlines()])[:-1]]
    )
    exact = grammar_entropy().nats_per_char
    mean = per_line.sum() / len(text)
    error = per_line.std() / np.sqrt(len(per_line)) / grammar_entropy().chars_per_sentence
    assert abs(mean - exact) < 4 * error


def test_grammar_char_nats_cost_more_early_in_a_line() -> None:
    """The floor for a set of positions depends on where in their lines they are."""
    from attnbook.data import grammar_char_nats, grammar_corpus

    text = grammar_corpus(2000, seed=3)
    nats = grammar_char_nats(text)
    column = [len(text[: i + 1].rsplit("\n", 1)[-1]) for i in range(len(text))]
    early = [n for n, c in zip(nats, column, strict=True) if c <= 16]
    late = [n for n, c in zip(nats, column, strict=True) if c > 32]
    assert sum(early) / len(early) > 1.15 * sum(late) / len(late)  # 0.35 against 0.28


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("The cats runs.\n", 12),  # the verb's number
        ("the cat runs.\n", 0),  # no capital
        ("cat runs.\n", 0),  # not the start of a line
        ("The cat runs.\nThe dog.\n", 21),  # a second line without a verb
        ("The dog that the cats sees runs.\n", 25),  # the clause's verb
    ],
)
def test_grammar_char_nats_name_what_the_grammar_cannot_write(text: str, position: int) -> None:
    from attnbook.data import grammar_char_nats

    with pytest.raises(ValueError, match=f"cannot write {text[position]!r} at position {position}"):
        grammar_char_nats(text)
    with pytest.raises(ValueError, match="text must be a str"):
        grammar_char_nats(b"The cat runs.\n")  # type: ignore[arg-type]


# ------------------------------------------------------------ bad ids and files (fuzzing report B)


@pytest.mark.parametrize(
    "ids",
    [
        [0.5, 1.7, 2.9, 3.2] * 5,  # floats: int64 would truncate them to 0, 1, 2, 3
        np.array([0.5, 1.7] * 10),
        [np.float64(1.0)] * 20,
        [True, False] * 10,  # bools: they would become ids 1 and 0
        np.array([True, False] * 10),
    ],
    ids=["float-list", "float-array", "np-float-list", "bool-list", "bool-array"],
)
def test_token_dataset_rejects_floats_and_bools_in_any_container(ids: object) -> None:
    from attnbook.data import TokenDataset

    with pytest.raises(ValueError, match=r"train must be a 1-D integer tensor.*got dtype"):
        TokenDataset(ids, list(range(10)), seq_len=4, vocab_size=10)
    with pytest.raises(ValueError, match=r"test must be a 1-D integer tensor.*got dtype"):
        TokenDataset(list(range(10)), ids, seq_len=4, vocab_size=10)


def test_token_dataset_takes_ints_in_any_container() -> None:
    from attnbook.data import TokenDataset

    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    expected = torch.tensor(ids)
    for given in (ids, tuple(ids), np.array(ids), np.array(ids, dtype=np.int32), expected):
        ds = TokenDataset(given, given, seq_len=4, vocab_size=10)
        assert ds.train.dtype == ds.test.dtype == torch.int64
        assert torch.equal(ds.train, expected)
    with pytest.raises(ValueError, match="the train split has 0 tokens"):
        TokenDataset([], ids, seq_len=4, vocab_size=10)


@pytest.mark.parametrize(
    "ids",
    [
        torch.tensor([True, False]),
        [True, False],
        [0, np.True_],
        None,
        3,
        "ab",
        torch.tensor([[0, 1]]),
        torch.tensor([0.0, 1.0]),
        np.array([0.0, 1.0]),
        np.array([[0, 1]]),
        [0, 2],
        [-1],
        [0, 1.0],
    ],
)
def test_char_tokenizer_decode_rejects_what_is_not_token_ids(ids: object) -> None:
    with pytest.raises(ValueError, match="ids must"):
        CharTokenizer("ab").decode(ids)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ids",
    [
        [1, 0],
        (1, 0),
        torch.tensor([1, 0]),
        torch.tensor([1, 0], dtype=torch.int32),
        np.array([1, 0]),
        np.array([1, 0], dtype=np.uint8),
        [np.int64(1), 0],
    ],
)
def test_char_tokenizer_decodes_ids_in_any_container(ids: object) -> None:
    assert CharTokenizer("ab").decode(ids) == "ba"  # type: ignore[arg-type]


def test_load_text_names_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("café au lait".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt.*UTF-8"):
        load_text(path)
    with pytest.raises(ValueError, match="path"):
        load_text(None)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small_translation() -> TranslationTask:
    return translation_task(n_train=50, n_test=10, n_test_long=10, seed=0)


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ([-1, -2], r"ids must be ints in \[0, 32\)"),  # would index the vocabulary from the end
        ([True, 3], r"ids must be ints in \[0, 32\)"),  # would read as <bos>
        ([10**6], r"ids must be ints in \[0, 32\)"),
        (torch.tensor([1.0, 3.0]), r"ids must be a 1-D integer .*\(L,\)"),
        (torch.tensor([[1, 3], [1, 4]]), r"ids must be a 1-D integer .*\(L,\).*\(2, 2\)"),
        (np.array([1.0, 3.0]), r"ids must be a 1-D integer .*\(L,\)"),
        (torch.tensor([True, False]), r"ids must be a 1-D integer"),
        (None, "ids must be"),
        (3, "ids must be"),
        ("abc", "ids must be"),
    ],
)
def test_translation_decode_rejects_what_is_not_token_ids(
    small_translation: TranslationTask, ids: object, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        small_translation.decode(ids)  # type: ignore[arg-type]


def test_translation_decode_checks_against_the_side_vocabulary(
    small_translation: TranslationTask,
) -> None:
    task = small_translation
    assert (task.src_vocab_size, task.tgt_vocab_size) == (34, 32)
    with pytest.raises(ValueError, match=r"\[0, 32\)"):
        task.decode([33])
    assert task.decode([33], "src") == task.src_vocab[33]
    row = task.train.tgt[0]
    words = task.decode(row)
    assert words.startswith("<bos> ")
    assert words.endswith(" <eos>")
    assert task.decode(row.tolist()) == task.decode(row.numpy()) == words


def test_translation_inputs_targets_rejects_an_empty_batch(
    small_translation: TranslationTask,
) -> None:
    task = small_translation
    with pytest.raises(ValueError, match=r"at least one example.*\(0, "):
        task.inputs_targets(task.train.src[:0], task.train.tgt[:0])
    (src, tgt_in, mask), targets = task.inputs_targets(task.train.src[:1], task.train.tgt[:1])
    assert src.shape[0] == tgt_in.shape[0] == mask.shape[0] == targets.shape[0] == 1


def test_text_dataset_takes_a_numpy_test_fraction() -> None:
    """np.float32(0.1) is "a number in (0, 1)", as the message it got said it must be."""
    text = "abcdefgh" * 40
    for fraction in (np.float32(0.25), np.float64(0.25)):
        ds = TextDataset(text, seq_len=4, test_fraction=fraction)
        assert (ds.train.numel(), ds.test.numel()) == (240, 80)
    with pytest.raises(ValueError, match="test_fraction"):
        TextDataset(text, seq_len=4, test_fraction=np.bool_(True))


def test_translation_task_refuses_a_max_train_len_no_longer_sentence_can_exceed() -> None:
    """The generator's longest sentence has 35 words (three clauses): with max_train_len = 35
    no sentence is long enough for test_long; say so at once, not after a million draws."""
    with pytest.raises(ValueError, match=r"max_train_len must be an int in \[3, 34\]"):
        translation_task(n_train=10, n_test=2, n_test_long=2, max_train_len=35, max_len=40)


def test_translation_task_refuses_more_sentences_than_there_are_at_once() -> None:
    """There are 24 sentences of three words ("the" + 8 nouns + 3 intransitive verbs) and 216
    of four. Before, asking for more drew 50 sentences per sentence asked before giving up:
    n_train=10**5 with max_train_len=3 took over two minutes to be refused."""
    task = translation_task(n_train=20, n_test=4, n_test_long=5, max_train_len=3, max_len=4)
    assert task.train.src.shape[0] + task.test.src.shape[0] == 24  # every one of them
    short = r"n_train \+ n_test = 25 distinct sentences of 3 to 3 words .* there are only 24:"
    with pytest.raises(ValueError, match=short):
        translation_task(n_train=21, n_test=4, n_test_long=5, max_train_len=3, max_len=4)
    with pytest.raises(ValueError, match=r"n_test_long = 217 distinct .* there are only 216:"):
        translation_task(n_train=20, n_test=4, n_test_long=217, max_train_len=3, max_len=4)
