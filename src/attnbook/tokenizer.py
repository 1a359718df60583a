"""Byte-level byte-pair encoding (BPE): the tokenizer of GPT-2, written from scratch.

Introduced in the chapter "a language model on real text", where it turns
Shakespeare's plays (:func:`attnbook.data.shakespeare`) into the tokens a
:class:`~attnbook.GPT` is trained on.

A character-level tokenizer (:class:`attnbook.data.CharTokenizer`) makes one
token per character: a small vocabulary, but long sequences, and every word is
spelled out again each time it occurs. Byte-pair encoding starts from the same
place, one token per *byte* of the UTF-8 text (so any string can be encoded,
even one with characters never seen in training), and then *learns merges*:
it counts which two adjacent tokens occur together most often in the training
text, adds their concatenation to the vocabulary as a new token, replaces every
occurrence, and repeats until the vocabulary is as large as asked. Frequent
words end up as one token; rare words and numbers are spelled out in pieces.

The ids are laid out in three blocks::

    0 .. 255                  the 256 byte values (id b is the byte b)
    256 .. 256 + S - 1        the S special tokens, e.g. "<|endoftext|>"
    256 + S .. V - 1          the merges, in the order they were learned

Three rules make it GPT-2's algorithm:

- **Pre-tokenization.** The text is first cut into words with GPT-2's regular
  expression (:data:`GPT2_PATTERN`: contractions, a letter run with its leading
  space, a number run, a punctuation run, whitespace), and merges never cross
  a word boundary. Counting each distinct word once, with its frequency, is
  what makes training fast: the 4.3 million characters of Shakespeare's
  training plays hold only about 34 000 distinct words.
- **Ties.** When two pairs are equally frequent, the lexicographically greater
  pair of byte strings is merged, so that training is deterministic.
- **Special tokens** are cut out of the text before anything else: they are
  never split, never merged with their neighbours, and never learned from.

Encoding replays the merges: within each word, the adjacent pair that was
learned first is merged, again and again, until no learned pair is left.
:meth:`BPETokenizer.from_gpt2_files` reads GPT-2's published ``vocab.json`` and
``merges.txt``, so that the same code encodes exactly as GPT-2 does.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from itertools import pairwise
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from attnbook._validation import check_int, check_path, check_token_id_list

__all__ = ["GPT2_PATTERN", "BPETokenizer", "merge_pair"]

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""GPT-2's pre-tokenizer: the pieces of text that merges never cross.

In order of preference: an English contraction (``'s``, ``'ll``, ...); an optional
space followed by letters; an optional space followed by digits; an optional
space followed by other symbols; whitespace not followed by a non-space (so that
the last space before a word stays with the word); any other whitespace.
"""


@cache
def _regex() -> ModuleType:
    """The third-party ``regex`` module (GPT-2's pattern needs its ``\\p{L}`` classes).

    Imported on first use, so that ``import attnbook`` works where it is missing
    (e.g. a GPU machine that trains on ids encoded elsewhere).
    """
    try:
        import regex
    except ImportError as error:
        raise ImportError(
            "BPETokenizer needs the `regex` package (a dependency of attnbook): pip install regex"
        ) from error
    return regex


@cache
def _word_pattern() -> object:
    """:data:`GPT2_PATTERN`, compiled once."""
    return _regex().compile(GPT2_PATTERN)


FORMAT = "attnbook.BPETokenizer"  # the "format" field of the JSON files that save() writes
FORMAT_VERSION = 1

Pair = tuple[int, int]  # two adjacent token ids


class _Greater:
    """Wraps a pair of byte strings so that the *greater* pair sorts first in a min-heap."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[bytes, bytes]) -> None:
        self.key = key

    def __lt__(self, other: _Greater) -> bool:
        return self.key > other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Greater) and self.key == other.key

    __hash__ = None  # type: ignore[assignment]


def merge_pair(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """One merge of byte-pair encoding: every occurrence of ``pair`` in ``ids`` becomes ``new_id``.

    The step that :meth:`BPETokenizer.train` applies to every word holding the
    pair it learns, and that encoding replays merge by merge. The scan goes left
    to right and a match consumes both ids, so occurrences never overlap:
    ``(a, a)`` in ``a a a`` merges the first two only, giving ``new_id a``.

    Args:
        ids: the token ids of one word, e.g. ``[116, 104, 101]`` for ``"the"``.
        pair: ``(left, right)``, the two adjacent ids to merge.
        new_id: the id that replaces each occurrence.

    Returns:
        A new list, shorter by one for each occurrence merged (``ids`` is not changed).
    """
    try:
        a, b = pair
    except (TypeError, ValueError):  # not two items
        raise ValueError(f"pair must be two token ids (left, right), got {pair!r}") from None
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _check_special_tokens(special_tokens: object) -> list[str]:
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Iterable):
        raise ValueError(
            "special_tokens must be a sequence of non-empty str, e.g. ('<|endoftext|>',), "
            f"got {special_tokens!r}"
        )
    tokens = list(special_tokens)
    if not all(isinstance(t, str) and t for t in tokens):
        raise ValueError(f"special_tokens must all be non-empty str, got {tokens!r}")
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"special_tokens must be distinct, got {tokens!r}")
    return tokens


def _check_parts(
    vocab: object, merges: object, special_tokens: object
) -> list[tuple[bytes, bytes]]:
    """The constructor's arguments have the right kinds (their contents are checked after):
    else ``dict(...)`` and ``bytes(...)`` fail with messages that name none of them.
    Returns ``merges`` as a list (an iterator is read once, here)."""
    if not isinstance(vocab, Mapping):
        raise ValueError(f"vocab must be a dict id -> bytes, got {type(vocab).__name__}")
    if special_tokens is not None and not isinstance(special_tokens, Mapping):
        raise ValueError(
            f"special_tokens must be a dict token -> id, or None, got {type(special_tokens).__name__}"
        )
    if isinstance(merges, (str, bytes)) or not isinstance(merges, Iterable):
        raise ValueError(
            f"merges must be a list of (bytes, bytes) pairs, got {type(merges).__name__}"
        )
    merges = list(merges)
    for rank, pair in enumerate(merges):
        if not (
            isinstance(pair, Sequence)
            and len(pair) == 2
            and all(isinstance(part, (bytes, bytearray)) for part in pair)
        ):
            raise ValueError(f"merges[{rank}] must be a pair of bytes (left, right), got {pair!r}")
    return merges


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte, used in its vocab.json and merges.txt.

    GPT-2 stores tokens as text, so each byte needs a visible character: the
    printable Latin-1 bytes stand for themselves; the others (control
    characters, the space, ...) take the characters from U+0100 on, in byte
    order. The space, byte 32, is therefore written ``Ġ`` (U+0120).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class BPETokenizer:
    """A byte-level BPE tokenizer: text to a list of ids and back, exactly.

    Build one with :meth:`train` (learn merges from a text), :meth:`load` (a
    file written by :meth:`save`) or :meth:`from_gpt2_files` (GPT-2's published
    vocabulary). Calling the constructor directly is for those three.

    Args:
        vocab: id -> the bytes of that token (special tokens: their UTF-8 bytes).
        merges: the learned pairs of byte strings, in the order they were learned.
        special_tokens: special token -> its id.

    Attributes:
        vocab: ``dict[int, bytes]``, id -> bytes.
        merges: ``list[tuple[bytes, bytes]]``, in the order learned.
        special_tokens: ``dict[str, int]``, special token -> id.

    Raises:
        ValueError: unless the ids are exactly ``0 .. len(vocab) - 1``, the vocabulary
            holds all 256 bytes and no byte string under two ordinary ids, the special
            tokens are distinct non-empty str matching their ``vocab`` entries, and
            every merge's parts and result are in ``vocab``.
    """

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: list[tuple[bytes, bytes]],
        special_tokens: dict[str, int] | None = None,
    ) -> None:
        merges = _check_parts(vocab, merges, special_tokens)  # a list: read once
        special_tokens = dict(special_tokens or {})
        self.vocab = dict(vocab)
        self.merges = [(bytes(a), bytes(b)) for a, b in merges]
        self.special_tokens = special_tokens
        _check_special_tokens(special_tokens)
        ids_of = {}  # bytes -> id of the ordinary (non-special) tokens
        special_ids = set(special_tokens.values())
        for i, token in self.vocab.items():
            if i not in special_ids:
                if token in ids_of:
                    raise ValueError(
                        f"vocab holds {token!r} under two ids ({ids_of[token]} and {i}); "
                        "each ordinary token (not a special one) must have one id"
                    )
                ids_of[token] = i
        missing = [b for b in range(256) if bytes([b]) not in ids_of]
        if missing:
            raise ValueError(
                f"vocab must hold all 256 single bytes (byte-level BPE), missing {missing[:10]}"
            )
        # n distinct keys, all ints in [0, n) (type(...) is int: no bools): exactly 0 .. n - 1.
        n = len(self.vocab)
        odd = [i for i in self.vocab if type(i) is not int or not 0 <= i < n]
        if odd:
            raise ValueError(
                f"vocab ids must be 0 .. len(vocab) - 1 = 0 .. {n - 1}, each once (encode "
                f"promises ids in [0, vocab_size)), got {odd[:5]!r}"
            )
        for token, i in special_tokens.items():
            if self.vocab.get(i) != token.encode("utf-8"):
                raise ValueError(f"special_tokens: {token!r} -> {i} does not match vocab[{i}]")
        # The encoder's tables: the id of each byte, and for each mergeable pair of ids
        # (rank: the order it was learned, id of the merged token).
        self._byte_ids = [ids_of[bytes([b])] for b in range(256)]
        self._ranks: dict[Pair, tuple[int, int]] = {}
        for rank, (a, b) in enumerate(self.merges):
            if a not in ids_of or b not in ids_of or a + b not in ids_of:
                raise ValueError(
                    f"merges[{rank}] = {(a, b)!r}: both parts and their concatenation "
                    "must be in vocab"
                )
            self._ranks[(ids_of[a], ids_of[b])] = (rank, ids_of[a + b])
        # Special tokens are matched first, the longest first when one contains another.
        by_length = sorted(special_tokens, key=len, reverse=True)
        self._special_split = (
            _regex().compile("(" + "|".join(_regex().escape(t) for t in by_length) + ")")
            if by_length
            else None
        )
        self._cache: dict[str, list[int]] = {}  # word -> ids: words repeat a lot in real text

    # ------------------------------------------------------------------ training

    @classmethod
    def train(cls, text: str, vocab_size: int, special_tokens: Sequence[str] = ()) -> BPETokenizer:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from ``text``.

        Why it is fast: the text is cut into words once and each distinct word
        is kept with its count, so a pair's frequency is a sum over distinct
        words, not over the whole text. After each merge only the words that
        contain the merged pair are rewritten, and only the counts of the pairs
        that changed are updated; a heap keeps the most frequent pair at hand.

        Args:
            text: the training text (a non-empty str). Occurrences of the special
                tokens in it are cut out and not learned from.
            vocab_size: the size of the final vocabulary, at least
                ``256 + len(special_tokens)``. Training stops early if the text
                has no pair left to merge (every word is one token).
            special_tokens: strings that always encode as one token of their own,
                e.g. ``("<|endoftext|>",)``. Their ids follow the 256 bytes.

        Returns:
            The trained tokenizer.

        Raises:
            ValueError: if ``text`` is not a non-empty str, ``vocab_size`` is not an
                int large enough, or ``special_tokens`` is not a sequence of
                distinct non-empty strings.
        """
        if not isinstance(text, str) or not text:
            raise ValueError(
                f"text must be a non-empty str, got {type(text).__name__} {text!r:.40}"
            )
        specials = _check_special_tokens(special_tokens)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"text must be valid Unicode (UTF-8 encodable), it has {error.reason}: "
                f"{error.object[error.start : error.end]!r}"
            ) from None
        smallest = 256 + len(specials)
        check_int(
            vocab_size,
            "vocab_size",
            minimum=smallest,
            meaning=f"256 bytes + {len(specials)} special tokens",
        )
        vocab = {b: bytes([b]) for b in range(256)}
        for offset, token in enumerate(specials):
            vocab[256 + offset] = token.encode("utf-8")

        # 1. Distinct words and their counts (special tokens cut out first).
        chunks = [text]
        if specials:
            by_length = sorted(specials, key=len, reverse=True)
            chunks = _regex().split("|".join(_regex().escape(t) for t in by_length), text)
        word_counts: Counter[str] = Counter()
        for chunk in chunks:
            word_counts.update(_word_pattern().findall(chunk))
        words = [list(word.encode("utf-8")) for word in word_counts]  # each word as byte ids
        counts = list(word_counts.values())

        # 2. Pair counts over all words, and which words hold each pair.
        pair_counts: defaultdict[Pair, int] = defaultdict(int)
        where: defaultdict[Pair, set[int]] = defaultdict(set)
        for w, ids in enumerate(words):
            for pair in pairwise(ids):
                pair_counts[pair] += counts[w]
                where[pair].add(w)
        heap = [(-c, _Greater((vocab[a], vocab[b])), (a, b)) for (a, b), c in pair_counts.items()]
        heapq.heapify(heap)

        # 3. Merge the most frequent pair, again and again.
        merges: list[tuple[bytes, bytes]] = []
        next_id = smallest
        while next_id < vocab_size and heap:
            neg_count, _, pair = heapq.heappop(heap)
            if pair_counts.get(pair, 0) != -neg_count or neg_count == 0:
                continue  # a stale heap entry: the pair's count has changed since it was pushed
            a, b = pair
            vocab[next_id] = vocab[a] + vocab[b]
            merges.append((vocab[a], vocab[b]))
            # Rewrite the words that hold the pair; sum the change of every pair count.
            delta: defaultdict[Pair, int] = defaultdict(int)
            for w in where.pop(pair):
                old = words[w]
                new = merge_pair(old, pair, next_id)
                if len(new) == len(old):
                    continue  # the word no longer holds the pair (an earlier merge took it)
                words[w] = new
                c = counts[w]
                for p in pairwise(old):
                    delta[p] -= c
                for p in pairwise(new):
                    delta[p] += c
                    where[p].add(w)
            del pair_counts[pair]
            delta.pop(pair, None)
            for p, d in delta.items():
                if d:
                    c = pair_counts[p] + d
                    if c > 0:
                        pair_counts[p] = c
                        heapq.heappush(heap, (-c, _Greater((vocab[p[0]], vocab[p[1]])), p))
                    else:
                        del pair_counts[p]
            next_id += 1
        return cls(vocab, merges, {t: 256 + i for i, t in enumerate(specials)})

    # ------------------------------------------------------------------ encoding

    @property
    def vocab_size(self) -> int:
        """The number of ids: 256 bytes + special tokens + merges."""
        return len(self.vocab)

    def __repr__(self) -> str:
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={list(self.special_tokens)})"
        )

    def clear_cache(self) -> None:
        """Forget the ids of the words encoded so far (each is computed again when next met).

        :meth:`encode` keeps the ids of up to 100,000 words, since words repeat
        a lot in real text; clearing them makes the next encoding a first one,
        as a benchmark of encoding speed needs. The ids themselves never change.
        """
        self._cache.clear()

    def _encode_word(self, word: str) -> list[int]:
        """The ids of one pre-tokenized word: replay the merges, earliest learned first."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        ids = [self._byte_ids[b] for b in word.encode("utf-8")]
        ranks = self._ranks
        while len(ids) > 1:
            # The adjacent pair learned first (lowest rank); stop when no pair was learned.
            best, best_rank, best_id = None, len(ranks), -1
            for pair in pairwise(ids):
                found = ranks.get(pair)
                if found is not None and found[0] < best_rank:
                    best, (best_rank, best_id) = pair, found
            if best is None:
                break
            ids = merge_pair(ids, best, best_id)
        if len(self._cache) < 100_000:
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``.

        Special tokens in ``text`` become their own ids; the rest is cut into
        words with :data:`GPT2_PATTERN` and each word is encoded by replaying the
        merges.

        Args:
            text: any str.

        Returns:
            A list of ids, each in ``[0, vocab_size)``.

        Raises:
            ValueError: if ``text`` is not a str.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        pieces = self._special_split.split(text) if self._special_split else [text]
        ids: list[int] = []
        try:
            for k, piece in enumerate(pieces):
                if k % 2:  # the odd pieces of a split on a (captured) pattern are the matches
                    ids.append(self.special_tokens[piece])
                    continue
                for word in _word_pattern().findall(piece):
                    ids.extend(self._encode_word(word))
        except UnicodeEncodeError as error:
            raise ValueError(
                f"text must be valid Unicode (UTF-8 encodable), it has {error.reason}: "
                f"{error.object[error.start : error.end]!r}"
            ) from error
        return ids

    def decode(self, ids: Sequence[int] | torch.Tensor | np.ndarray) -> str:
        """The text of token ids: their bytes, joined, read as UTF-8.

        A list that ends in the middle of a character (e.g. the first of the
        two tokens of an ``é``) cannot be read exactly; its broken bytes become
        U+FFFD, the replacement character, as in GPT-2.

        Args:
            ids: a sequence of ints in ``[0, vocab_size)``, or a 1-D integer
                tensor or NumPy array of them.

        Returns:
            The text.

        Raises:
            ValueError: if ``ids`` holds anything but ints of the vocabulary.
        """
        ids = check_token_id_list(ids, "ids", self.vocab_size, meaning=" (ids of the vocabulary)")
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ files

    def save(self, path: str | Path) -> None:
        """Write the tokenizer to a JSON file that :meth:`load` reads.

        The format, one object: ``"format": "attnbook.BPETokenizer"``,
        ``"version": 1``; ``"vocab"``: id (as a string) -> the token's bytes in
        hexadecimal; ``"special_tokens"``: token -> id; ``"merges"``: a list of
        ``[hex, hex]`` pairs in the order learned. Bytes are written in hex
        because a token need not be valid UTF-8 (half a character).

        Args:
            path: the file to write (its folder must exist).
        """
        path = check_path(path, "path", "the JSON file to write")
        if not path.parent.is_dir():
            raise ValueError(f"path's folder {str(path.parent)!r} does not exist: create it first")
        if path.is_dir():  # else IsADirectoryError from deep inside pathlib
            raise ValueError(
                f"path must name the JSON file to write, got the folder {str(path)!r}: "
                "name a file in it, e.g. path / 'tokenizer.json'"
            )
        data = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "vocab": {str(i): token.hex() for i, token in sorted(self.vocab.items())},
            "special_tokens": self.special_tokens,
            "merges": [[a.hex(), b.hex()] for a, b in self.merges],
        }
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a tokenizer written by :meth:`save`.

        Args:
            path: the JSON file.

        Returns:
            The tokenizer, equal to the one saved.

        Raises:
            ValueError: if ``path`` is not such a file.
        """
        path = check_path(path, "path", "a file written by BPETokenizer.save")
        if not path.is_file():
            raise ValueError(f"path must be a file written by BPETokenizer.save, got {str(path)!r}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
                raise ValueError(f"format {data.get('format')!r} version {data.get('version')!r}")
            vocab = {int(i): bytes.fromhex(h) for i, h in data["vocab"].items()}
            merges = [(bytes.fromhex(a), bytes.fromhex(b)) for a, b in data["merges"]]
            specials = {str(t): int(i) for t, i in data["special_tokens"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                f"path {str(path)!r} is not an {FORMAT} file of version {FORMAT_VERSION}: {error}"
            ) from error
        try:
            return cls(vocab, merges, specials)
        except ValueError as error:
            raise ValueError(f"path {str(path)!r} holds an invalid tokenizer: {error}") from None

    @classmethod
    def from_gpt2_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> BPETokenizer:
        """Read GPT-2's published vocabulary (``vocab.json``) and merges (``merges.txt``).

        GPT-2 writes each token as text, with one stand-in character per byte
        (``Ġ`` for the space: see :func:`_bytes_to_unicode`). ``vocab.json``
        maps each token to its id; ``merges.txt`` lists the merges, one
        ``left right`` pair per line in the order learned, after a ``#version``
        line. GPT-2's ids are not laid out as :meth:`train` lays them out (its
        byte tokens are not ids 0-255), so the ids are taken as they are, and
        the encoder gives exactly GPT-2's ids. Entries of ``vocab.json`` that are
        neither a byte nor a merge (GPT-2 has one, ``<|endoftext|>``) become
        special tokens.

        Args:
            vocab_json: path of ``vocab.json``.
            merges_txt: path of ``merges.txt``.

        Returns:
            The tokenizer.

        Raises:
            ValueError: if a file is missing or not in GPT-2's format, or the
                vocabulary lacks a byte or a merged token.
        """
        decoder = {ch: b for b, ch in _bytes_to_unicode().items()}

        def as_bytes(token: str, where: str) -> bytes:
            try:
                return bytes(decoder[ch] for ch in token)
            except KeyError as error:
                raise ValueError(
                    f"{where}: {token!r} has a character outside GPT-2's byte map"
                ) from error

        paths = {
            "vocab_json": check_path(vocab_json, "vocab_json", "GPT-2's vocab.json"),
            "merges_txt": check_path(merges_txt, "merges_txt", "GPT-2's merges.txt"),
        }
        for name, path in paths.items():
            if not path.is_file():
                raise ValueError(f"{name} must be an existing file, got {str(path)!r}")
        try:
            table = json.loads(paths["vocab_json"].read_text(encoding="utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"vocab_json must be a UTF-8 text file: {error}") from error
        except json.JSONDecodeError as error:
            raise ValueError(f"vocab_json is not JSON: {error}") from error
        if not isinstance(table, dict) or not all(isinstance(i, int) for i in table.values()):
            raise ValueError("vocab_json must map each token (a str) to its id (an int)")
        merges = []
        try:
            merge_lines = paths["merges_txt"].read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as error:
            raise ValueError(f"merges_txt must be a UTF-8 text file: {error}") from error
        for number, line in enumerate(merge_lines, 1):
            if not line.strip() or (number == 1 and line.startswith("#version")):
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"merges_txt line {number}: expected 'left right', got {line!r}")
            merges.append(tuple(as_bytes(p, f"merges_txt line {number}") for p in parts))
        merged = {a + b for a, b in merges}
        vocab: dict[int, bytes] = {}
        specials: dict[str, int] = {}
        for token, i in table.items():
            if all(ch in decoder for ch in token):
                token_bytes = as_bytes(token, "vocab_json")
                if len(token_bytes) == 1 or token_bytes in merged:
                    vocab[i] = token_bytes
                    continue
            specials[token] = i  # neither a byte nor a merge: a special token
            vocab[i] = token.encode("utf-8")
        return cls(vocab, merges, specials)  # type: ignore[arg-type]
