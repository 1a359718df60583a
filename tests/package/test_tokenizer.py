"""Tests of attnbook.tokenizer: byte-level BPE, trained here and loaded from GPT-2's format.

- training learns exactly the merges of a slow, obvious reference (recount every
  pair after every merge), ties included, and lays out the ids as documented;
- encoding and decoding round-trip any Unicode string exactly, with and without
  special tokens, which are never split and never merged across;
- ``from_gpt2_files`` on a vocabulary and merges that the ``tokenizers`` library
  trains here gives the same ids as that library on many strings;
- save/load, and bad input raising ValueError that names the argument.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import regex
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import BPETokenizer
from attnbook.tokenizer import GPT2_PATTERN, merge_pair

CORPUS = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy "
    "to the people.\n\nAll:\nWe know't, we know't.\n\n"
    "Naïve café, 1234567 ducats; 日本語のテキスト; emoji 🤖🤖 and tabs\t\tand   spaces.\n"
) * 3
SPECIALS = ("<|endoftext|>", "<|sep|>")


def reference_train(text: str, vocab_size: int) -> list[tuple[bytes, bytes]]:
    """BPE the slow way: after every merge, count every pair of every word again."""
    words = [[bytes([b]) for b in w.encode()] for w in regex.findall(GPT2_PATTERN, text)]
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = Counter(p for w in words for p in pairwise(w))
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))  # ties: the greater pair of bytes
        merges.append(best)
        words = [merge_pair(w, best, best[0] + best[1]) for w in words]
    return merges


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(CORPUS, 256 + len(SPECIALS) + 120, special_tokens=SPECIALS)


# --- one merge ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "pair", "expected"),
    [
        ([1, 2, 3, 1, 2], (1, 2), [9, 3, 9]),  # every occurrence
        ([1, 1, 1], (1, 1), [9, 1]),  # left to right, no overlap
        ([1, 1, 1, 1], (1, 1), [9, 9]),
        ([2, 1, 2], (1, 2), [2, 9]),  # the order of the pair matters
        ([2, 1], (1, 2), [2, 1]),
        ([], (1, 2), []),
        ([1], (1, 2), [1]),
    ],
)
def test_merge_pair_replaces_every_occurrence_left_to_right(
    ids: list[int], pair: tuple[int, int], expected: list[int]
) -> None:
    before = list(ids)
    assert merge_pair(ids, pair, 9) == expected
    assert ids == before  # a new list: the input is not changed


# --- training --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "vocab_size"),
    [
        (CORPUS, 300),
        (CORPUS, 500),
        ("aaaa aaa aa a bbbb abab baba", 270),
        ("the cat sat on the mat; the hat is flat. " * 5 + "1 22 333 4444", 330),
    ],
)
def test_training_learns_the_reference_merges(text: str, vocab_size: int) -> None:
    tok = BPETokenizer.train(text, vocab_size)
    assert tok.merges == reference_train(text, vocab_size)


def test_ties_merge_the_lexicographically_greater_pair() -> None:
    # " ab", " cd" and "ef" pairs all occur once: (b"e", b"f") is the greatest pair.
    tok = BPETokenizer.train("ef ab cd", 257)
    assert tok.merges == [(b"e", b"f")]


def test_ids_are_bytes_then_specials_then_merges(tokenizer: BPETokenizer) -> None:
    assert [tokenizer.vocab[b] for b in range(256)] == [bytes([b]) for b in range(256)]
    for offset, token in enumerate(SPECIALS):
        assert tokenizer.vocab[256 + offset] == token.encode()
        assert tokenizer.special_tokens[token] == 256 + offset
    first = 256 + len(SPECIALS)
    for k, (a, b) in enumerate(tokenizer.merges):
        assert tokenizer.vocab[first + k] == a + b
    assert tokenizer.vocab_size == 256 + len(SPECIALS) + len(tokenizer.merges) == first + 120
    assert sorted(tokenizer.vocab) == list(range(tokenizer.vocab_size))


def test_training_is_deterministic() -> None:
    one = BPETokenizer.train(CORPUS, 400)
    two = BPETokenizer.train(CORPUS, 400)
    assert one.merges == two.merges
    assert one.vocab == two.vocab


def test_training_stops_when_nothing_is_left_to_merge() -> None:
    tok = BPETokenizer.train("ab ab", 1000)
    assert tok.merges == [(b"a", b"b"), (b" ", b"ab")]
    assert tok.vocab_size == 258


def test_merges_never_cross_a_word_or_a_special_token() -> None:
    tok = BPETokenizer.train("ab<|s|>" * 50, 400, special_tokens=["<|s|>"])
    assert tok.merges == [(b"a", b"b")]  # "<", "|", "s" come only from the special token
    plain = BPETokenizer.train("ab<|s|>" * 50, 400)
    assert len(plain.merges) > 1  # without it, the same text has more to learn


# --- encoding --------------------------------------------------------------------------


def test_encoding_is_shorter_than_bytes_on_the_training_text(tokenizer: BPETokenizer) -> None:
    ids = tokenizer.encode(CORPUS)
    assert len(ids) < 0.6 * len(CORPUS.encode())
    assert tokenizer.decode(ids) == CORPUS


def test_a_word_encodes_by_replaying_the_merges_in_order() -> None:
    tok = BPETokenizer.train("aaaa aaaa aaaa", 260)
    assert tok.merges == [(b"a", b"a"), (b"aa", b"aa"), (b" ", b"aaaa")]
    assert tok.encode("aaa") == [256, ord("a")]  # non-overlapping, left to right
    assert tok.encode(" aaaaaa") == [258, 256]


def test_special_tokens_are_never_split(tokenizer: BPETokenizer) -> None:
    left, right = "Speak, speak.", " You are all resolved"
    ids = tokenizer.encode(left + "<|endoftext|>" + right + "<|sep|><|sep|>")
    assert ids == [
        *tokenizer.encode(left),
        256,
        *tokenizer.encode(right),
        257,
        257,
    ]


def test_the_longest_special_token_wins() -> None:
    tok = BPETokenizer.train("some text", 300, special_tokens=["<a>", "<a><b>"])
    assert tok.encode("x<a><b><a>") == [ord("x"), 257, 256]


text_with_specials = st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(SPECIALS)), max_size=8
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_round_trip_on_any_text(tokenizer: BPETokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert all(isinstance(i, int) and 0 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(text_with_specials)
def test_round_trip_with_special_tokens(tokenizer: BPETokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert ids.count(256) == text.count("<|endoftext|>")
    assert ids.count(257) == text.count("<|sep|>")


def test_decode_of_half_a_character_gives_the_replacement_character(
    tokenizer: BPETokenizer,
) -> None:
    ids = tokenizer.encode("ж")  # not in CORPUS: its two UTF-8 bytes, unmerged
    assert ids == [0xD0, 0xB6]
    assert tokenizer.decode(ids[:1]) == "\ufffd"


# --- files -----------------------------------------------------------------------------


def test_save_and_load_give_the_same_tokenizer(tokenizer: BPETokenizer, tmp_path: Path) -> None:
    path = tmp_path / "tok.json"
    tokenizer.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "attnbook.BPETokenizer"
    assert data["version"] == 1
    loaded = BPETokenizer.load(path)
    assert loaded.vocab == tokenizer.vocab
    assert loaded.merges == tokenizer.merges
    assert loaded.special_tokens == tokenizer.special_tokens
    assert loaded.encode(CORPUS) == tokenizer.encode(CORPUS)


def test_save_refuses_a_folder(tokenizer: BPETokenizer, tmp_path: Path) -> None:
    """Before: IsADirectoryError from pathlib's write_text."""
    with pytest.raises(ValueError, match=r"path must name the JSON file to write, got the folder"):
        tokenizer.save(tmp_path)


def test_load_rejects_other_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path"):
        BPETokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="path"):
        BPETokenizer.load(bad)


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """A vocab.json and merges.txt in GPT-2's format, trained here by the tokenizers library."""
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.ByteLevelBPETokenizer(add_prefix_space=False)
    hf.train_from_iterator(
        [CORPUS], vocab_size=500, min_frequency=1, show_progress=False, special_tokens=["<|eot|>"]
    )
    folder = tmp_path_factory.mktemp("gpt2")
    hf.save_model(str(folder))
    return folder / "vocab.json", folder / "merges.txt", hf


def test_gpt2_files_have_gpt2_layout(gpt2_files: tuple[Path, Path, object]) -> None:
    vocab_json, merges_txt, _ = gpt2_files
    tok = BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    table = json.loads(vocab_json.read_text())
    assert tok.vocab_size == len(table)
    assert tok.special_tokens == {"<|eot|>": table["<|eot|>"]}
    assert tok.vocab[table["Ġ"]] == b" "  # GPT-2's stand-in for the space
    assert len(tok.merges) == len(merges_txt.read_text().splitlines()) - 1  # minus "#version"


@pytest.mark.parametrize(
    "text",
    [
        CORPUS,
        "Hello  world!\n\n  x 123 4567 don't I'll ÉÀ 日本語 🤖<|eot|>after",
        "\x1c\x1d \u00a0 a\u2028b\u3000c \u0085 d\r\n\t",
        "",
        "   ",
        "'s 's's ''",
    ],
)
def test_gpt2_files_encode_as_the_tokenizers_library(
    gpt2_files: tuple[Path, Path, object], text: str
) -> None:
    vocab_json, merges_txt, hf = gpt2_files
    tok = BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    assert tok.encode(text) == hf.encode(text).ids
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=100), st.text(alphabet="ab <|eot>'sé\n", max_size=60)))
def test_gpt2_files_encode_as_the_tokenizers_library_on_any_text(
    gpt2_files: tuple[Path, Path, object], text: str
) -> None:
    vocab_json, merges_txt, hf = gpt2_files
    tok = BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    assert tok.encode(text) == hf.encode(text).ids


def test_a_tokenizer_read_from_gpt2_files_saves_and_loads(
    gpt2_files: tuple[Path, Path, object], tmp_path: Path
) -> None:
    vocab_json, merges_txt, hf = gpt2_files
    tok = BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    tok.save(tmp_path / "gpt2.json")
    loaded = BPETokenizer.load(tmp_path / "gpt2.json")
    text = "Speak, speak.<|eot|> 日本語 1234567"
    assert loaded.encode(text) == tok.encode(text) == hf.encode(text).ids  # GPT-2's ids kept


def test_gpt2_files_must_be_gpt2_files(
    gpt2_files: tuple[Path, Path, object], tmp_path: Path
) -> None:
    vocab_json, merges_txt, _ = gpt2_files
    with pytest.raises(ValueError, match="vocab_json"):
        BPETokenizer.from_gpt2_files(tmp_path / "none.json", merges_txt)
    with pytest.raises(ValueError, match="merges_txt"):
        BPETokenizer.from_gpt2_files(vocab_json, tmp_path / "none.txt")
    bad = tmp_path / "merges.txt"
    bad.write_text("#version: 0.2\nĠ t h\n")
    with pytest.raises(ValueError, match="merges_txt line 2"):
        BPETokenizer.from_gpt2_files(vocab_json, bad)
    table = json.loads(vocab_json.read_text())
    del table["Ġ"]
    small = tmp_path / "vocab.json"
    small.write_text(json.dumps(table))
    with pytest.raises(ValueError, match="256 single bytes"):
        BPETokenizer.from_gpt2_files(small, merges_txt)


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize("vocab_size", [255, 256 + len(SPECIALS) - 1, 300.0, True, "512"])
def test_train_rejects_a_bad_vocab_size(vocab_size: object) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train(CORPUS, vocab_size, special_tokens=SPECIALS)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", None, b"bytes", ["a list"]])
def test_train_rejects_a_bad_text(text: object) -> None:
    with pytest.raises(ValueError, match="text"):
        BPETokenizer.train(text, 300)  # type: ignore[arg-type]


@pytest.mark.parametrize("special_tokens", ["<|eot|>", ["a", "a"], [""], [1]])
def test_train_rejects_bad_special_tokens(special_tokens: object) -> None:
    with pytest.raises(ValueError, match="special_tokens"):
        BPETokenizer.train(CORPUS, 300, special_tokens=special_tokens)  # type: ignore[arg-type]


def test_encode_rejects_what_is_not_text(tokenizer: BPETokenizer) -> None:
    with pytest.raises(ValueError, match="text"):
        tokenizer.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="text"):
        tokenizer.encode("a lone surrogate \ud800")


@pytest.mark.parametrize("ids", [[-1], [10_000], [1.0], [True], "abc", 3, [0, None]])
def test_decode_rejects_bad_ids(tokenizer: BPETokenizer, ids: object) -> None:
    with pytest.raises(ValueError, match="ids"):
        tokenizer.decode(ids)  # type: ignore[arg-type]


def test_the_package_imports_without_regex_and_the_tokenizer_says_what_it_needs() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['regex'] = None\n"  # as if regex were not installed
        "import attnbook\n"
        "try:\n"
        "    attnbook.BPETokenizer.train('some text', 260)\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "BPETokenizer needs the `regex` package" in out.stdout


def test_clear_cache_forgets_the_words_and_changes_no_id(tokenizer: BPETokenizer) -> None:
    ids = tokenizer.encode(CORPUS)
    assert tokenizer._cache  # the words just encoded are remembered
    tokenizer.clear_cache()
    assert not tokenizer._cache
    assert tokenizer.encode(CORPUS) == ids  # computed again, the same ids


# --- bad files and constructor arguments (fuzzing report B) ---------------------------


def _edit_saved(tokenizer: BPETokenizer, tmp_path: Path, edit: str) -> Path:
    """Save ``tokenizer`` and break its file as ``edit`` says."""
    path = tmp_path / "tok.json"
    tokenizer.save(path)
    data = json.loads(path.read_text())
    last = tokenizer.vocab_size - 1
    if edit == "id too large":
        data["vocab"]["5000"] = data["vocab"].pop(str(last))
    elif edit == "negative id":
        data["vocab"]["-5"] = data["vocab"].pop(str(last))
    elif edit == "empty special token":
        data["special_tokens"][""] = last + 1
        data["vocab"][str(last + 1)] = ""
    elif edit == "a byte under two ids":
        data["vocab"][str(last + 1)] = b"t".hex()
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ("id too large", r"vocab ids must be 0 \.\. len\(vocab\) - 1"),
        ("negative id", r"vocab ids must be 0 \.\. len\(vocab\) - 1"),
        ("empty special token", "special_tokens must all be non-empty str"),
        ("a byte under two ids", r"vocab holds b't' under two ids"),
    ],
)
def test_load_rejects_files_whose_ids_break_the_layout(
    tokenizer: BPETokenizer, tmp_path: Path, edit: str, match: str
) -> None:
    path = _edit_saved(tokenizer, tmp_path, edit)
    with pytest.raises(ValueError, match=match) as error:
        BPETokenizer.load(path)
    assert str(path) in str(error.value)  # the file is named


@pytest.mark.parametrize(
    ("vocab_edit", "specials", "match"),
    [
        ({300: b"xy"}, {}, r"vocab ids must be 0 \.\. len\(vocab\) - 1"),
        ({-1: b"xy"}, {}, r"vocab ids must be 0 \.\. len\(vocab\) - 1"),
        ({256.0: b"xy"}, {}, r"vocab ids must be 0 \.\. len\(vocab\) - 1"),
        ({256: b"a"}, {}, r"vocab holds b'a' under two ids \(97 and 256\)"),
        ({256: b""}, {"": 256}, "special_tokens must all be non-empty str"),
        ({256: b"1"}, {1: 256}, "special_tokens must all be non-empty str"),
    ],
)
def test_the_constructor_checks_the_id_layout(vocab_edit: dict, specials: dict, match: str) -> None:
    vocab = {b: bytes([b]) for b in range(256)} | vocab_edit
    with pytest.raises(ValueError, match=match):
        BPETokenizer(vocab, [], specials)


BYTES = {b: bytes([b]) for b in range(256)}


@pytest.mark.parametrize(
    ("args", "match"),
    [  # before: dict()'s, bytes()' or unpacking's own errors, naming no argument
        (([BYTES[b] for b in range(256)], []), "vocab must be a dict id -> bytes, got list"),
        ((BYTES, None), "merges must be a list of .* pairs, got NoneType"),
        ((BYTES, [("a", "b")]), r"merges\[0\] must be a pair of bytes .* got \('a', 'b'\)"),
        ((BYTES, [(b"a",)]), r"merges\[0\] must be a pair of bytes"),
        ((BYTES, [], ["<e>"]), "special_tokens must be a dict token -> id, or None, got list"),
    ],
)
def test_the_constructor_names_an_argument_of_the_wrong_kind(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BPETokenizer(*args)


def test_the_constructor_reads_merges_given_as_an_iterator_once() -> None:
    merges = [(b"a", b"b")]
    tok = BPETokenizer(BYTES | {256: b"ab"}, iter(merges))
    assert tok.merges == merges  # not read empty by the check of its pairs
    assert tok.encode("ab") == [256]


def test_a_special_token_may_share_its_bytes_with_an_ordinary_token() -> None:
    tok = BPETokenizer.train("a b c", 257, special_tokens=["a"])
    assert tok.vocab[256] == tok.vocab[ord("a")] == b"a"
    assert tok.encode("ab") == [256, ord("b")]


def test_train_names_text_that_is_not_valid_unicode() -> None:
    with pytest.raises(ValueError, match=r"text must be valid Unicode.*'\\ud800'"):
        BPETokenizer.train("ab\ud800 cd", 260)


@pytest.mark.parametrize(
    "ids",
    [
        [116, 104],
        (116, 104),
        torch.tensor([116, 104]),
        torch.tensor([116, 104], dtype=torch.int32),
        np.array([116, 104]),
        [np.int64(116), 104],
    ],
)
def test_decode_takes_ids_in_any_container(tokenizer: BPETokenizer, ids: object) -> None:
    assert tokenizer.decode(ids) == "th"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (torch.tensor([True, False]), r"ids must be a 1-D integer tensor or array.*torch\.bool"),
        (torch.tensor([[116, 104]]), r"ids must be a 1-D integer tensor or array.*\(1, 2\)"),
        (torch.tensor([116.0]), r"ids must be a 1-D integer tensor or array.*float"),
        (np.array([116.0]), r"ids must be a 1-D integer tensor or array.*float64"),
        (torch.tensor([10_000]), r"ids must be ints in \[0, 378\)"),
        ([np.True_], r"ids must be ints in \[0, 378\)"),
    ],
)
def test_decode_says_what_it_needs(tokenizer: BPETokenizer, ids: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tokenizer.decode(ids)  # type: ignore[arg-type]
