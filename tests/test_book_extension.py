"""The book's Sphinx glue (_ext/attnbook_book.py): the instructors' build hides solutions.

Builds a two-paragraph Sphinx project with sphinx-exercise and our extension,
once as students see it and once with ATTNBOOK_HIDE_SOLUTIONS=1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parent.parent

PAGE = """\
Demo
====

.. exercise:: Add two numbers
   :label: ex-demo

   What is 2 + 2?

.. solution:: ex-demo
   :class: dropdown

   SECRET-ANSWER-FOUR
"""


def _build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hide: str | None) -> str:
    if hide is None:
        monkeypatch.delenv("ATTNBOOK_HIDE_SOLUTIONS", raising=False)
    else:
        monkeypatch.setenv("ATTNBOOK_HIDE_SOLUTIONS", hide)
    monkeypatch.syspath_prepend(str(ROOT / "_ext"))
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['sphinx_exercise', 'attnbook_book']\n")
    (src / "index.rst").write_text(PAGE)
    app = Sphinx(
        str(src),
        str(src),
        str(out),
        str(tmp_path / "doctrees"),
        "html",
        status=None,
        warning=sys.stderr,
        freshenv=True,
    )
    app.build()
    return (out / "index.html").read_text()


def test_solutions_are_shown_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    html = _build(tmp_path, monkeypatch, hide=None)
    assert "What is 2 + 2?" in html
    assert "SECRET-ANSWER-FOUR" in html


@pytest.mark.parametrize("flag", ["0", ""])
def test_a_false_flag_keeps_solutions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    assert "SECRET-ANSWER-FOUR" in _build(tmp_path, monkeypatch, hide=flag)


def test_instructors_build_hides_solutions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    html = _build(tmp_path, monkeypatch, hide="1")
    assert "What is 2 + 2?" in html
    assert "SECRET-ANSWER-FOUR" not in html
