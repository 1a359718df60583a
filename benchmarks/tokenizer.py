"""BPE training time and encoding speed: attnbook.BPETokenizer against Hugging Face's tokenizers.

Usage:
    python benchmarks/tokenizer.py [--vocab-sizes 1024 4096] [--rounds 3]

Needs the ``bench`` extra (``pip install -e ".[bench]"``, the ``tokenizers``
library) and Shakespeare's plays (:func:`attnbook.data.shakespeare`; the first
run downloads them into the cache).

For each vocabulary size, both tokenizers train on the 33 training plays
(4.3 million characters), with no special tokens: ``attnbook.BPETokenizer.train``
(pure Python, one process) on the text as one string, and the ``tokenizers``
library's ``ByteLevelBPETokenizer`` (Rust, all cores; GPT-2's pre-tokenizer, no
prefix space, the 256 bytes as its initial alphabet) on the text's lines, the
way its documentation feeds it (one string is slower for it: it cannot spread
one string over cores). Then both encode the held-out plays (0.5 MB) as a list
of lines: the book's tokenizer line by line, starting each repeat with an
empty word cache; the library with ``encode_batch`` (all cores), and also as
one string in one ``encode`` call. The book's tokenizer also loads the
library's own merges (``from_gpt2_files``) and encodes the same lines with
them: same merges, so the ids must be equal (checked), and the difference in
speed is the implementation's alone.

Figures are medians of ``--rounds`` runs. A benchmark, not a test: it exits
0 and prints its figures, with the machine and the load average.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _common import (
    DefaultsHelp,
    add_rounds_option,
    describe,
    int_at_least,
    load_average,
)

from attnbook import BPETokenizer
from attnbook.data import shakespeare


def median_seconds(fn: Callable[[], object], rounds: int) -> tuple[float, object]:
    """The median time of ``rounds`` calls, and the last call's result."""
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--vocab-sizes",
        type=int_at_least(256),
        nargs="+",
        default=[1024, 4096],
        help="vocabulary sizes to train, at least 256 (the bytes)",
    )
    add_rounds_option(parser, 3, "runs of each timing (the median)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from tokenizers import ByteLevelBPETokenizer, __version__
    except ImportError:
        print(
            'This benchmark needs the tokenizers library: pip install -e ".[bench]"',
            file=sys.stderr,
        )
        return 1
    print(describe(torch.device("cpu")))
    print(f"tokenizers {__version__}")
    train, heldout = shakespeare(split="train"), shakespeare(split="heldout")
    train_lines, heldout_lines = train.splitlines(True), heldout.splitlines(True)
    mb = len(heldout.encode("utf-8")) / 1e6
    print(f"train: {len(train):,} characters; held out (encoded): {mb:.2f} MB\n")

    rows = []
    for vocab_size in args.vocab_sizes:
        book_train, book = median_seconds(
            lambda v=vocab_size: BPETokenizer.train(train, v), args.rounds
        )

        def hf_trained(v: int = vocab_size) -> ByteLevelBPETokenizer:
            hf = ByteLevelBPETokenizer(add_prefix_space=False)
            hf.train_from_iterator(train_lines, vocab_size=v, min_frequency=1, show_progress=False)
            return hf

        hf_train, hf = median_seconds(hf_trained, args.rounds)

        def book_encode(tok: BPETokenizer) -> list[list[int]]:
            tok.clear_cache()  # every repeat a first encoding: no word is cached yet
            return [tok.encode(line) for line in heldout_lines]

        book_enc, book_ids = median_seconds(lambda t=book: book_encode(t), args.rounds)
        hf_enc, hf_out = median_seconds(lambda h=hf: h.encode_batch(heldout_lines), args.rounds)
        hf_one, _ = median_seconds(lambda h=hf: h.encode(heldout), args.rounds)
        with tempfile.TemporaryDirectory() as folder:
            hf.save_model(folder)
            same = BPETokenizer.from_gpt2_files(
                Path(folder) / "vocab.json", Path(folder) / "merges.txt"
            )
        same_enc, same_ids = median_seconds(lambda t=same: book_encode(t), args.rounds)
        assert same_ids == [e.ids for e in hf_out], "same merges must give the same ids"
        n_book, n_hf = sum(map(len, book_ids)), sum(len(e.ids) for e in hf_out)
        rows.append(
            (
                vocab_size,
                f"{book_train:.2f} s",
                f"{hf_train:.2f} s",
                f"{mb / book_enc:.2f} MB/s ({len(heldout) / n_book:.2f} chars/token)",
                f"{mb / hf_enc:.2f} MB/s ({len(heldout) / n_hf:.2f} chars/token)",
                f"{mb / hf_one:.2f} MB/s",
                f"{mb / same_enc:.2f} MB/s",
            )
        )
        print(f"vocab {vocab_size}: done", flush=True)

    print(
        "\n| vocab | attnbook train | tokenizers train | attnbook encode | tokenizers encode_batch "
        "| tokenizers encode (one string) | attnbook encode, tokenizers' merges |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    print(f"\nload average (1, 5, 15 min) after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
