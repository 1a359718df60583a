"""The checks `make pdf` applies to the printed book (tools/build_pdf.py), on hand-made PDFs.

The printing itself needs Chromium and a singlehtml build; `make pdf` runs it.
"""

from __future__ import annotations

from pathlib import Path

from tools import build_pdf

ROOT = Path(__file__).resolve().parents[2]


def _pdf(pages: int, titles: list[str]) -> bytes:
    """A skeleton of a PDF as Chromium writes it: page objects and an outline of UTF-16 titles."""
    parts = [b"%PDF-1.4\n", b"1 0 obj\n<< /Type /Pages /Count %d >>\nendobj\n" % pages]
    parts += [
        b"%d 0 obj\n<< /Type /Page /Parent 1 0 R >>\nendobj\n" % (i + 2) for i in range(pages)
    ]
    for title in titles:
        hex_title = ("FEFF" + title.encode("utf-16-be").hex().upper()).encode()
        parts.append(b"<< /Title <" + hex_title + b"> /Parent 9 0 R >>\n")
    parts.append(b"<< /Title (Plain \\(literal\\) title) >>\n%%EOF\n")
    return b"".join(parts)


CHAPTERS = ["1. Scores: how similar are two vectors?", "2. Softmax — from scores to weights"]


def test_pages_and_bookmarks_are_read() -> None:
    data = _pdf(5, CHAPTERS)
    assert build_pdf.pdf_page_count(data) == 5  # /Type /Pages is not a page
    assert build_pdf.pdf_outline_titles(data) == [*CHAPTERS, "Plain (literal) title"]
    assert build_pdf.check_pdf(data, CHAPTERS) == []


def test_a_missing_chapter_too_few_pages_or_no_pdf_fail() -> None:
    assert build_pdf.check_pdf(_pdf(5, CHAPTERS[:1]), CHAPTERS) == [
        f"chapters without a bookmark: {CHAPTERS[1:]}"
    ]
    assert build_pdf.check_pdf(_pdf(1, CHAPTERS), CHAPTERS) == ["1 pages for 2 chapters"]
    assert build_pdf.check_pdf(b"<html></html>", CHAPTERS) == ["the file is not a PDF"]
