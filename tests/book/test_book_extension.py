"""The book's Sphinx glue (_ext/attnbook_book.py).

- The instructors' build hides solutions: a two-paragraph Sphinx project with
  sphinx-exercise and our extension, built once as students see it and once with
  ATTNBOOK_HIDE_SOLUTIONS=1.
- bertviz's views load require.js, d3 and jQuery from the book, not from cdnjs
  (`offline_bertviz`, on a string and in a built page), and only on their pages.
- attnbook.interactive's Plotly figures load plotly.js from the book (`offline_plotly`),
  and the PDF shows their PNG; `make assets` copies only the parts of MathJax the pages use.
- Every page links the favicon (SVG and PNG), the book's CSS and JS; the favicon
  files are what tools/draw_favicon.py draws.
- 404.html, the page a reader meets at a missing URL: it says so and links the start page,
  it is in no table of contents and not in the search index, and every URL it names
  resolves when a GitHub-Pages-like server (tools/pages_server.py) sends it for a missing
  URL three folders deep under the site's path (/<repo>/, from repository.url).
- A diagram drawn twice, wide and narrow (images/NAME_narrow.svg), shows its narrow version
  on a phone: the chapter map as a second SVG with ids of its own, which attnbook.css shows
  under the same media query; any other as a <picture>, its narrow file in _images/.
- A figure that links its own image file holds a cue to enlarge it (shown on phones only,
  which the browser test checks), after the image, inside the link; a figure whose file
  records its smallest text gets the width at which that text is legible on a phone.
- Only the chapters number their figures (not the start page's map).
- The search page loads a map of the titles holding a formula, from the text the search
  index stores to the title with its formulas marked for MathJax (`math_titles`).
"""

from __future__ import annotations

import base64
import json
import math
import re
import sys
from pathlib import Path

import pytest
from sphinx.application import Sphinx

from tools.figure_text import PHONE_FLOOR_PX

ROOT = Path(__file__).resolve().parents[2]

PAGE = """\
Demo
====

.. exercise:: Add two numbers
   :label: ex-demo

   What is 2 + 2?

.. solution:: ex-demo
   :class: dropdown

   SECRET-ANSWER-FOUR

.. container:: cell tag_solution

   SECRET-CELL-NUMBERS

.. container:: cell tag_remove-input

   KEPT-CHECK-CELL
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
    assert "SECRET-CELL-NUMBERS" in html  # a notebook cell tagged solution, as myst-nb marks it


@pytest.mark.parametrize("flag", ["0", ""])
def test_a_false_flag_keeps_solutions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    assert "SECRET-ANSWER-FOUR" in _build(tmp_path, monkeypatch, hide=flag)


def test_instructors_build_hides_solutions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    html = _build(tmp_path, monkeypatch, hide="1")
    assert "What is 2 + 2?" in html
    assert "SECRET-ANSWER-FOUR" not in html
    assert "SECRET-CELL-NUMBERS" not in html  # the cells tagged solution go too
    assert "KEPT-CHECK-CELL" in html  # ... and only those


# bertviz's output as a notebook stores it (abridged): require.js from cdnjs, the view's
# root <div>, and a script configuring require.js paths to cdnjs's d3 and jQuery.
BERTVIZ_HTML = """\
<script src="https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js"></script>
<div id="bertviz-0123456789abcdef0123456789abcdef" style="font-family:'Helvetica Neue';">
  <span style="user-select:none">Layer: <select id="layer"></select></span>
  <div id='vis'></div>
</div>
<script type="text/javascript">
require.config({
  paths: {
      d3: 'https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min',
    jquery: 'https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min',
  }
});
requirejs(['jquery', 'd3'], function ($, d3) {
  const params = {"display_mode": "dark", "root_div_id": "bertviz-0123456789abcdef0123456789abcdef"};
});
</script>
"""


def _extension():
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        import attnbook_book
    finally:
        sys.path.remove(str(ROOT / "_ext"))
    return attnbook_book


def test_bertviz_urls_point_at_the_vendored_files() -> None:
    html = _extension().offline_bertviz(BERTVIZ_HTML, "../_static/")
    assert "cdnjs" not in html
    assert '<script src="../_static/vendor/require.js"></script>' in html
    assert "d3: '../_static/vendor/d3.min'," in html  # require.js adds the ".js" itself
    assert "jquery: '../_static/vendor/jquery.min'," in html
    assert '<select id="layer" aria-label="Layer">' in html
    assert "require.config({ waitSeconds: 0," in html  # local files: no 7 s timeout
    assert '"display_mode": "light"' in html  # model_view's default is dark
    assert _extension().offline_bertviz(html, "../_static/") == html  # idempotent
    # Nothing else changed.
    assert html.count("\n") == BERTVIZ_HTML.count("\n")
    assert "requirejs(['jquery', 'd3']" in html


def test_bertviz_rewriting_takes_the_page_depth() -> None:
    html = _extension().offline_bertviz(BERTVIZ_HTML, "_static/")
    assert '<script src="_static/vendor/require.js">' in html
    assert "d3: '_static/vendor/d3.min'" in html


def test_other_versions_of_the_cdnjs_urls_are_rewritten() -> None:
    newer = BERTVIZ_HTML.replace("2.3.6", "2.3.7").replace("5.7.0", "7.9.0")
    newer = newer.replace("d3.min'", "d3.min.js'").replace("jquery.min'", "jquery.js'")
    html = _extension().offline_bertviz(newer, "../_static/")
    assert "cdnjs" not in html
    assert "d3: '../_static/vendor/d3.min'" in html
    assert "jquery: '../_static/vendor/jquery.min'" in html


def test_pages_without_bertviz_are_left_alone() -> None:
    page = '<p>See <a href="https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min.js">d3</a></p>'
    assert _extension().offline_bertviz(page, "../_static/") == page
    # The cdnjs <script> alone (no view) is not bertviz's: unchanged too.
    script = BERTVIZ_HTML.splitlines()[0]
    assert _extension().offline_bertviz(script, "../_static/") == script


def _build_pages(tmp_path: Path, pages: dict[str, str], conf: str = "") -> Path:
    """Build `pages` (name -> reST) with the extension, `conf` added to its conf.py; return the
    HTML output folder."""
    src, out = tmp_path / "src", tmp_path / "out"
    for name, text in pages.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    toc = "\n".join(f"   {name.removesuffix('.rst')}" for name in pages if name != "index.rst")
    (src / "index.rst").write_text(f"Home\n====\n\n.. toctree::\n\n{toc}\n")
    favicon = str(ROOT / "images" / "favicon.svg")
    (src / "conf.py").write_text(
        f"extensions = ['attnbook_book']\nhtml_favicon = {favicon!r}\n{conf}"
    )
    app = Sphinx(
        str(src), str(src), str(out), str(tmp_path / "doctrees"), "html",
        status=None, warning=sys.stderr, freshenv=True,
    )  # fmt: skip
    app.build()
    return out


def _raw_html(text: str) -> str:
    return ".. raw:: html\n\n" + "".join(f"   {line}\n" for line in text.splitlines())


@pytest.mark.skipif(
    not (ROOT / "assets" / "vendor" / "require.js").is_file(),
    reason="assets/vendor/ is empty (run `make assets`): the book keeps the CDN URLs then",
)
def test_a_built_bertviz_page_loads_nothing_from_cdnjs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "_ext"))
    pages = {
        "chapters/views.rst": "Views\n=====\n\n" + _raw_html(BERTVIZ_HTML),
        "chapters/other.rst": "Other\n=====\n\n"
        + _raw_html('<script src="https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min.js">'),
    }
    out = _build_pages(tmp_path, pages)
    views = (out / "chapters" / "views.html").read_text()
    assert "cdnjs" not in views
    assert '<script src="../_static/vendor/require.js"></script>' in views
    assert "d3: '../_static/vendor/d3.min'" in views
    for name in ("require.js", "d3.min.js", "jquery.min.js"):
        assert (out / "_static" / "vendor" / name).is_file(), name
    # A page without a view keeps what it says; axe-core is not published with the book.
    assert (
        "https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min.js"
        in (out / "chapters" / "other.html").read_text()
    )
    assert not (out / "_static" / "vendor" / "axe.min.js").exists()


SECTION_WITH_MATHS = """\
Scores
======

Why divide by :math:`\\sqrt{d_k}`?
----------------------------------

Text.

When :math:`a < b` & more
-------------------------

Plain words
-----------
"""


@pytest.fixture(scope="module")
def small_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain page and a page of titles with maths (SECTION_WITH_MATHS), built once with the
    extension: the HTML output folder."""
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        return _build_pages(
            tmp_path_factory.mktemp("small_book"),
            {
                "chapters/page.rst": "Page\n====\n\nText.\n",
                "chapters/scores.rst": SECTION_WITH_MATHS,
            },
        )
    finally:
        sys.path.remove(str(ROOT / "_ext"))


def test_pages_link_the_favicon_and_the_book_css(small_book: Path) -> None:
    out = small_book
    page = (out / "chapters" / "page.html").read_text()
    assert '<link rel="icon" href="../_static/favicon.svg"/>' in page
    assert (
        '<link rel="icon" type="image/png" sizes="180x180" href="../_static/favicon.png">' in page
    )
    assert 'href="../_static/attnbook.css' in page
    assert 'src="../_static/attnbook.js' in page
    for name in ("favicon.svg", "favicon.png", "attnbook.css", "attnbook.js"):
        assert (out / "_static" / name).is_file(), name


def test_the_favicon_is_what_its_script_draws(tmp_path: Path) -> None:
    from tools import draw_favicon

    assert (ROOT / "images" / "favicon.svg").read_text(encoding="utf-8") == draw_favicon.svg_text()
    png = tmp_path / "favicon.png"
    draw_favicon.draw_png(png)
    assert png.read_bytes() == (ROOT / "images" / "favicon.png").read_bytes()


def test_hidden_cell_toggles_are_named_by_their_visible_text() -> None:
    toggle = (
        '<details class="admonition hide above-input">\n<summary aria-label="Toggle hidden content">'
        '\n<p class="collapsed admonition-title">Show code cell content</p>\n</summary>'
    )
    html = _extension().named_toggles(toggle)
    assert "aria-label" not in html
    assert "<summary>\n<p" in html
    assert _extension().named_toggles(html) == html  # idempotent


def test_exercise_titles_show_their_level_without_nested_parentheses() -> None:
    title = (
        '<p class="admonition-title"><span class="caption-number">Exercise 6.5 </span> '
        "(Talking to <code>nn.MultiheadAttention</code> (medium))</p>"
    )
    html = _extension().exercise_levels(title)
    assert html.endswith("(Talking to <code>nn.MultiheadAttention</code> · medium)</p>")
    assert _extension().exercise_levels(html) == html
    prose = "the softmax (easy) and (the score (medium) one)"  # not a title: kept
    assert _extension().exercise_levels(prose) == prose


def test_a_solution_title_s_link_starts_with_the_exercise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sphinx-exercise writes 'Solution to<a ...> Exercise 1 (...)</a>': the link, and its
    underline, started with a space. The built page has the space before the link."""
    titles = re.findall(
        r'<p class="admonition-title">Solution to.*?</p>', _build(tmp_path, monkeypatch, None)
    )
    assert titles, "the demo page has a solution"
    for title in titles:
        assert re.match(r'<p class="admonition-title">Solution to <a [^>]*>Exercise', title), title
    kept = '<p class="admonition-title">Note <a class="reference internal" href="#x">x</a></p>'
    assert _extension().solution_links(kept) == kept


# The front door: the chapter pages' facts and the start page's buttons.
THEME = {
    "repository_url": "https://github.com/some-org/attention-from-scratch",
    "repository_branch": "main",
    "path_to_docs": "",
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
}


def test_colab_url_is_the_launch_buttons() -> None:
    url = _extension().colab_url(THEME, "chapters/07_multi_head_attention")
    assert url == (
        "https://colab.research.google.com/github/some-org/attention-from-scratch/blob/main/"
        "chapters/07_multi_head_attention.ipynb"
    )
    assert (
        _extension()
        .colab_url({**THEME, "path_to_docs": "book/"}, "intro")
        .endswith("/blob/main/book/intro.ipynb")
    )
    # The student edition has no Colab launch URL; a repository elsewhere has no Colab link.
    assert _extension().colab_url({**THEME, "launch_buttons": {"colab_url": ""}}, "x") is None
    assert _extension().colab_url({**THEME, "repository_url": "https://example.org/r"}, "x") is None


def test_chapter_facts_are_the_guides_estimates() -> None:
    """The times under a chapter's title are instructors.md's, from the same functions."""
    from tools import course, exercise_inventory

    facts = _extension()._course_facts()
    assert list(facts) == [c.stem for c in course.load().chapters if c.stem in facts]
    guide = (ROOT / "instructors.md").read_text(encoding="utf-8")
    for stem, fact in facts.items():
        chapter = exercise_inventory.read_chapter(ROOT / "chapters" / f"{stem}.ipynb")
        row = f"| {fact['first_reading']} | {fact['reading']} | {fact['exercises']} |"
        assert row in guide, f"{stem}: {row} is not in instructors.md's table"
        assert fact["n_exercises"] == len(chapter.exercises)


def test_chapter_facts_html() -> None:
    fact = {
        "stem": "02_softmax",
        "title": "Softmax",
        "requires": [("01_scores", "Scores & <friends>")],
        "background": "The `exp` function.",
        "first_reading": "30 min",
        "reading": "40 min",
        "exercises": "1 h 05 min",
        "n_exercises": 5,
    }
    html = _extension().chapter_facts_html(
        fact, lambda name, resource=0: f"../{name}.html", "https://colab/x.ipynb"
    )
    assert "<strong>30 min</strong> to read and run (40 min with what it shows collapsed)" in html
    same = _extension().chapter_facts_html(
        {**fact, "first_reading": "40 min"}, lambda name, resource=0: name, None
    )
    assert "<strong>40 min</strong> to read and run, " in same
    assert "<strong>1 h 05 min</strong> for its 5 exercises" in html
    assert '<a href="../chapters/01_scores.html">Scores &amp; &lt;friends&gt;</a>' in html
    assert "Assumes: The <code>exp</code> function." in html
    assert 'href="https://colab/x.ipynb">Open in Colab</a>' in html
    assert "download>Download the notebook</a>" in html
    without_colab = _extension().chapter_facts_html(fact, lambda name, resource=0: name, None)
    assert "Colab" not in without_colab


def test_chapter_facts_typeset_apostrophes_as_the_prose_does() -> None:
    """course.yml writes "chapter 10's"; the page's prose shows ’ (smartquotes), and so does the
    facts line, outside code only."""
    fact = {
        "stem": "12_translation",
        "requires": [],
        "background": "A network's state; `d['x']` and chapter 10's loop.",
        "reading": "40 min",
        "exercises": "1 h",
        "n_exercises": 3,
    }
    html = _extension().chapter_facts_html(fact, lambda name, resource=0: name, None)
    assert (
        "A network\u2019s state; <code>d[&#x27;x&#x27;]</code> and chapter 10\u2019s loop." in html
    )


def test_the_start_page_links_the_pdf_and_the_zip_only_where_they_are_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Pages workflow puts both files beside the HTML before building it; a local build
    has neither, and its start page showed two buttons that led nowhere."""
    monkeypatch.syspath_prepend(str(ROOT / "_ext"))
    ext = _extension()
    pages = {"start.rst": "Start\n=====\n\n" + _raw_html(ext.START_MARK)}
    local = (_build_pages(tmp_path / "local", pages) / "start.html").read_text()
    assert "Start with chapter 1" in local
    assert ext.PDF_NAME not in local
    assert ext.STUDENT_ZIP not in local
    (tmp_path / "published" / "out").mkdir(parents=True)
    (tmp_path / "published" / "out" / ext.PDF_NAME).write_bytes(b"%PDF-1.7\n")
    published = (_build_pages(tmp_path / "published", pages) / "start.html").read_text()
    assert f'href="{ext.PDF_NAME}">The book as a PDF</a>' in published
    assert ext.STUDENT_ZIP not in published


def test_the_chapter_map_is_put_in_the_page_with_its_links() -> None:
    svg = (ROOT / "images" / "chapter_map.svg").read_text(encoding="utf-8")
    body = '<p>Map:</p>\n<img alt="A map &amp; more" src="_images/chapter_map.svg" style="width: 100%;" />'
    html = _extension().inline_chapter_map(body, svg)
    assert "<img" not in html
    assert html.startswith("<p>Map:</p>\n<svg ")
    assert '<svg class="attnbook-chapter-map" role="group" aria-label="A map &amp; more" ' in html
    for left_out in ("<?xml", "DOCTYPE", "<metadata>"):
        assert left_out not in html
    # Every chapter in chapters/ is a named link, in the same tab.
    from tools import course

    for chapter in course.load().chapters:
        if (ROOT / f"{chapter.file}.ipynb").is_file():
            assert f'href="{chapter.file}.html" aria-label="Chapter ' in html, chapter.stem
    assert "_blank" not in html
    assert _extension().inline_chapter_map("<p>no map</p>", svg) == "<p>no map</p>"
    # Sphinx's link of the image to its file (the map is shown at a width) goes with the image.
    linked = body.replace("<img", '<a class="reference internal image-reference" href="_images/'
                          'chapter_map.svg"><img').replace("/>", "/>\n</a>")  # fmt: skip
    assert _extension().inline_chapter_map(linked, svg) == html


def test_the_narrow_chapter_map_follows_the_wide_one_with_ids_of_its_own() -> None:
    wide, narrow = (
        (ROOT / "images" / name).read_text(encoding="utf-8")
        for name in ("chapter_map.svg", "chapter_map_narrow.svg")
    )
    body = '<img alt="A map" src="_images/chapter_map.svg" style="width: 100%;" />'
    html = _extension().inline_chapter_map(body, wide, narrow)
    assert html.count("<svg ") == 2
    first, second = html.split("\n<svg ")
    assert first.startswith(
        '<svg class="attnbook-chapter-map attnbook-chapter-map--wide" role="group" '
        'aria-label="A map" data-smallest-text-pt="10.5" data-figure="chapter_map.svg" '
    )
    assert second.startswith(
        'class="attnbook-chapter-map attnbook-chapter-map--narrow" role="group" '
        'aria-label="A map" data-smallest-text-pt="10.5" data-figure="chapter_map_narrow.svg" '
    )
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "the two maps share ids"
    # Every reference of the narrow map (clip paths, glyphs) is to an id of its own.
    references = re.findall(r'(?:url\(#|href="#)([^"\)]+)', second)
    own = set(re.findall(r'\bid="([^"]+)"', second))
    assert references
    assert set(references) <= own
    for part in (first, second):  # each links every chapter, named
        assert part.count('aria-label="Chapter ') == len(re.findall(r"<a ", part)) >= 14
    # attnbook.css shows the narrow map instead, under NARROW_MEDIA.
    css = (ROOT / "_ext" / "static" / "attnbook.css").read_text(encoding="utf-8")
    rule = re.search(r"@media ([^{]+)\{\s*\.attnbook-chapter-map--wide \{\s*display: none;", css)
    assert rule, "attnbook.css hides no wide chapter map"
    assert rule[1].strip() == _extension().NARROW_MEDIA


def test_a_diagram_with_a_narrow_version_is_shown_as_a_picture() -> None:
    extension = _extension()
    body = (
        '<img alt="flow" src="../_images/sdpa_dataflow.svg" />\n'
        '<img alt="block" src="../_images/transformer_block.svg" />'
    )
    html = extension.narrow_pictures(body, ROOT / "images")
    assert html == (
        f'<picture><source media="{extension.NARROW_MEDIA}" '
        'srcset="../_images/sdpa_dataflow_narrow.svg" type="image/svg+xml">'
        '<img alt="flow" src="../_images/sdpa_dataflow.svg" /></picture>\n'
        '<img alt="block" src="../_images/transformer_block.svg" />'
    )


def test_a_figure_that_links_its_file_says_so_on_a_phone() -> None:
    """The cue goes inside a link of an image to its own file (Sphinx's link of an image shown
    smaller than its file), after the image; any other link or image is left alone."""
    extension = _extension()
    figure = (
        '<a class="reference internal image-reference" href="../_images/ab.png">'
        '<img alt="A heatmap" src="../_images/ab.png" style="width: 614px;" />\n</a>'
    )
    other = '<a class="reference internal image-reference" href="x.html"><img src="a.png" /></a>'
    plain = '<img alt="flow" src="../_images/sdpa_dataflow.svg" />'
    html = extension.enlarge_cues(f"{figure}\n{other}\n{plain}")
    assert html == (
        figure.replace("/>\n</a>", "/>" + extension.ENLARGE_CUE + "\n</a>") + f"\n{other}\n{plain}"
    )
    assert re.fullmatch(r'<span class="attnbook-enlarge"> <span class="attnbook-swipe">[^<]+'
                        r'</span><i [^>]*aria-hidden="true"></i>Tap to enlarge</span>',
                        extension.ENLARGE_CUE)  # fmt: skip


def test_a_figure_keeps_a_legible_width_on_a_phone(tmp_path: Path) -> None:
    """Each figure whose file records its smallest text gets the width at which that text is
    the floor (at most the width it is shown at), in a link to its own file (added where there
    is none) that attnbook.css lets scroll on a phone; a diagram with a narrow version, a file
    that records nothing and an image of no file known are left alone."""
    from matplotlib.figure import Figure

    from attnbook.viz import SMALLEST_TEXT_KEY, figure_png, png_text, svg_smallest_text

    extension = _extension()
    fig = Figure(figsize=(4, 2), dpi=100)  # 400 CSS px wide, its PNG 800 px
    fig.add_subplot().set_title("8 pt", fontsize=8)
    fig.axes[0].tick_params(labelsize=12)
    png = tmp_path / "ab.png"
    png.write_bytes(base64.b64decode(figure_png(fig)[0]))
    (tmp_path / "plain.png").write_bytes(png.read_bytes()[:33] + b"\0\0\0\0IEND\xaeB`\x82")
    block, flow = ROOT / "images" / "transformer_block.svg", ROOT / "images" / "sdpa_dataflow.svg"
    files = {"ab.png": png, "plain.png": tmp_path / "plain.png", block.name: block, flow.name: flow}
    link = '<a class="reference internal image-reference" href="../_images/{0}">'
    shown = link.format("ab.png") + '<img alt="A" src="../_images/ab.png" style="width: {0}px;" />'
    left = [
        link.format("plain.png") + '<img alt="P" src="../_images/plain.png" style="width: 9px;" />',
        '<img alt="flow" src="../_images/sdpa_dataflow.svg" />',
        '<img alt="logo" src="../_images/logo.png" />',
    ]
    html = extension.phone_widths(
        "\n".join([shown.format(400), shown.format(300), *left]), files, 10
    )
    wide = link.format("ab.png").replace("image-reference", "image-reference attnbook-wide-figure")
    var = extension.PHONE_WIDTH_VAR
    recorded = float(png_text(png.read_bytes())[SMALLEST_TEXT_KEY])  # 8 pt at 200 dpi: 22.2
    legible = math.ceil(10 * int.from_bytes(png.read_bytes()[16:20], "big") / recorded)  # 350
    assert 300 < legible < 400
    assert html.split("\n") == [
        f'{wide}<img alt="A" src="../_images/ab.png" style="{var}: {legible}px; width: 400px;" />',
        f'{wide}<img alt="A" src="../_images/ab.png" style="{var}: 300px; width: 300px;" />',
        *left,
    ]
    smallest_pt, width_pt = svg_smallest_text(block.read_text(encoding="utf-8"))
    plain = '<img alt="block" src="../_images/transformer_block.svg" style="width: 100%;" />'
    assert extension.phone_widths(plain, files, 10.0) == (
        '<a class="reference internal image-reference attnbook-wide-figure" '
        'href="../_images/transformer_block.svg"><img alt="block" '
        f'src="../_images/transformer_block.svg" style="{var}: '
        f'{math.ceil(10 * width_pt / smallest_pt)}px; width: 100%;" /></a>'
    )
    assert extension.ENLARGE_CUE in extension.enlarge_cues(extension.phone_widths(plain, files, 10))
    assert extension.PHONE_FLOOR_PX == PHONE_FLOOR_PX


def test_a_figure_outside_the_chapters_has_no_number() -> None:
    """The start page's chapter map showed "Fig. 1", which no text cites (the chapters, which
    cite theirs, keep their numbers: the function is not called there)."""
    caption = (
        '<figcaption>\n<p><span class="caption-number">Fig. {0} </span>'
        '<span class="caption-text">Map</span></p>'
    )
    exercise = '<p class="admonition-title"><span class="caption-number">Exercise 6.5 </span>'
    html = _extension().unnumbered_figures(
        f"{caption.format(1)}\n{caption.format(4.12)}\n{exercise}"
    )
    assert html == ('<figcaption>\n<p><span class="caption-text">Map</span></p>\n' * 2 + exercise)


def test_a_built_page_serves_the_narrow_diagram(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for name in ("sdpa_dataflow.svg", "transformer_block.svg"):
        (tmp_path / "src" / name).write_bytes((ROOT / "images" / name).read_bytes())
    page = "Flow\n====\n\n.. image:: sdpa_dataflow.svg\n\n.. image:: transformer_block.svg\n"
    out = _build_pages(tmp_path, {"chapters/flow.rst": page.replace(":: ", ":: ../")})
    html = (out / "chapters" / "flow.html").read_text()
    assert 'srcset="../_images/sdpa_dataflow_narrow.svg"' in html
    assert html.count("<picture>") == 1
    served = out / "_images" / "sdpa_dataflow_narrow.svg"
    assert served.read_bytes() == (ROOT / "images" / "sdpa_dataflow_narrow.svg").read_bytes()
    assert not (out / "_images" / "chapter_map_narrow.svg").exists()  # its page is not built


def test_plotly_urls_point_at_the_books_copy() -> None:
    """attnbook.interactive's figures name Plotly's CDN; the book serves its own copy."""
    page = (
        '<div id="attnbook-x"></div><script>var url = "https://cdn.plot.ly/plotly-3.7.0.min.js";'
        "</script>"
    )
    html, versions = _extension().offline_plotly(page, "../_static/")
    assert html == page.replace(
        "https://cdn.plot.ly/plotly-3.7.0.min.js", "../_static/plotly.min.js"
    )
    assert versions == {"3.7.0"}
    assert _extension().offline_plotly(html, "../_static/") == (html, set())  # idempotent
    assert _extension().offline_plotly("<p>no figure</p>", "_static/") == (
        "<p>no figure</p>",
        set(),
    )


def test_a_built_interactive_figure_loads_plotly_from_the_book(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interactive = pytest.importorskip("attnbook.interactive")
    pytest.importorskip("plotly")
    monkeypatch.syspath_prepend(str(ROOT / "_ext"))
    figure = interactive.attention_heatmap([[0.25, 0.75]], name="demo")
    out = _build_pages(
        tmp_path, {"chapters/figure.rst": "Figure\n======\n\n" + _raw_html(figure.html)}
    )
    page = (out / "chapters" / "figure.html").read_text()
    assert "cdn.plot.ly" not in page
    assert 'var url = "../_static/plotly.min.js";' in page
    served = out / "_static" / "plotly.min.js"
    assert served.is_file()
    assert served.stat().st_size > 1_000_000  # the whole plotly.js, from the pip package


def test_the_pdf_shows_the_static_png_of_an_interactive_figure() -> None:
    """`make pdf` (singlehtml) prefers an output's PNG to its HTML; the web book the HTML."""
    import yaml
    from myst_nb.core.render import get_mime_priority

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    overrides = [tuple(o) for o in config["sphinx"]["config"]["nb_mime_priority_overrides"]]
    pdf, web = get_mime_priority("singlehtml", overrides), get_mime_priority("html", overrides)
    assert pdf.index("image/png") < pdf.index("text/html")
    assert web.index("text/html") < web.index("image/png")
    assert "text/html" in pdf  # bertviz's views (HTML only) are still shown


def test_the_mathjax_parts_hold_what_the_pages_load() -> None:
    """`make assets` copies only MATHJAX_PARTS of MathJax: the entry point that _ext names is
    one, as are the fonts and the menu's components (the browser test fails on any 404)."""
    import re

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^MATHJAX_PARTS := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert match, "the Makefile has no MATHJAX_PARTS"
    parts = match[1].replace("\\\n", " ").split()
    entry = _extension().MATHJAX.removeprefix("vendor/mathjax/")
    for needed in (entry, "output/chtml/fonts/woff-v2", "a11y", "sre/mathmaps/en.json"):
        assert needed in parts, f"{needed} is not in MATHJAX_PARTS: {parts}"
    assert "$(VENDOR)/mathjax/$$part" in makefile  # the recipe copies the list
    assert "cp -R node_modules/mathjax/es5 " not in makefile  # and not the whole of MathJax


@pytest.mark.parametrize(
    ("configured", "baseurl", "repository", "path"),
    [
        ("", "", "https://github.com/your-org/attention-from-scratch", "/attention-from-scratch/"),
        ("", "", "https://github.com/someone/a-book.git", "/a-book/"),
        ("", "", "https://github.com/someone/someone.github.io", "/"),  # a user site: the root
        ("", "", None, "/"),  # no repository: served at a host's root
        ("", "https://book.example.org/course/", "https://github.com/someone/a-book", "/course/"),
        ("/book", "https://x.example.org/y/", "https://github.com/someone/a-book", "/book/"),
        ("/", "", "https://github.com/someone/a-book", "/"),  # a custom domain
    ],
)
def test_the_site_path_comes_from_the_configuration(
    configured: str, baseurl: str, repository: str | None, path: str
) -> None:
    assert _extension().site_path(configured, baseurl, repository) == path


@pytest.mark.parametrize("configured", ["book/", "https://x.example.org/book/", "//x.org/"])
def test_a_site_path_must_be_a_path(configured: str) -> None:
    with pytest.raises(ValueError, match=r"attnbook_site_path.*must be a URL path"):
        _extension().site_path(configured, "", None)


def test_rooted_urls_start_from_the_site_path() -> None:
    page = (
        '<html data-content_root="./"><link href="_static/a.css?v=1" rel="stylesheet" />'
        "<script src='_static/a.js'></script><form action=\"search.html\"></form>"
        '<a href="chapters/01.html">1</a> <a href="#main">skip</a> <a href="/x/">abs</a> '
        '<a href="https://github.com/o/r">repo</a> <img src="data:image/png;base64,AA"/>'
        '<a href="mailto:a@b.c">mail</a>'
    )
    assert _extension().rooted_urls(page, "/r/") == (
        '<html data-content_root="/r/"><link href="/r/_static/a.css?v=1" rel="stylesheet" />'
        "<script src='/r/_static/a.js'></script><form action=\"/r/search.html\"></form>"
        '<a href="/r/chapters/01.html">1</a> <a href="#main">skip</a> <a href="/x/">abs</a> '
        '<a href="https://github.com/o/r">repo</a> <img src="data:image/png;base64,AA"/>'
        '<a href="mailto:a@b.c">mail</a>'
    )


# Every URL an attribute of a page names (links, stylesheets, scripts, icons, forms).
_PAGE_URL = re.compile(r"""\s(?:href|src|action)=["']([^"']*)["']""")


def test_the_not_found_page_works_at_any_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.error
    import urllib.request
    from urllib.parse import urljoin, urlsplit

    from tools.pages_server import serve

    monkeypatch.syspath_prepend(str(ROOT / "_ext"))
    out = _build_pages(
        tmp_path,
        {"chapters/page.rst": "Page\n====\n\nText.\n"},
        conf="html_baseurl = 'https://someone.github.io/a-book/'\n",
    )
    page = (out / "404.html").read_text()
    assert "<title>Page not found" in page
    assert "<h1>Page not found</h1>" in page
    assert '<a href="/a-book/index.html">the start page</a>' in page
    # Not a document: in no table of contents, not in the search index.
    assert "404" not in (out / "index.html").read_text()
    assert "404" not in (out / "searchindex.js").read_text()

    with serve(out, "/a-book/") as site:
        missing = site + "chapters/no/such/page.html"
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(missing)
        assert answer.value.code == 404
        served = answer.value.read().decode()
        assert served == page  # what GitHub Pages sends for a missing URL
        local = {
            urljoin(missing, url).split("#")[0]
            for url in _PAGE_URL.findall(served)
            if not url.startswith("#")
            and urlsplit(urljoin(missing, url)).netloc == urlsplit(site).netloc
        }
        broken = []
        for url in sorted(local):
            try:
                urllib.request.urlopen(url).close()
            except urllib.error.HTTPError as error:
                broken.append(f"{error.code} {url}")
    assert not broken, f"404.html names URLs that are not there from {missing}: {broken}"
    kinds = [".css", ".js", "favicon.svg", "favicon.png", "/a-book/index.html", "search.html"]
    for kind in kinds:  # the check saw each kind of URL the page needs
        assert any(kind in url for url in local), (kind, sorted(local))


def test_titles_with_maths_map_to_titles_marked_for_mathjax() -> None:
    """The search page's results show a title as the plain text the search index stores (raw
    TeX): `math_titles` maps that text to the title with its formulas marked as on the pages."""
    from docutils.core import publish_doctree

    doctree = publish_doctree(SECTION_WITH_MATHS, settings_overrides={"report_level": 5})
    math = '<span class="math notranslate nohighlight">'
    assert _extension().math_titles(doctree) == {
        "Why divide by \\sqrt{d_k}?": f"Why divide by {math}\\(\\sqrt{{d_k}}\\)</span>?",
        "When a < b & more": f"When {math}\\(a &lt; b\\)</span> &amp; more",
    }


def test_the_search_page_loads_the_titles_of_the_index_with_their_maths(small_book: Path) -> None:
    """The map's keys are the titles as the built search index stores them; only the search
    page loads it."""
    out = small_book
    name = _extension().SEARCH_TITLES_JS
    script = (out / "_static" / name).read_text(encoding="utf-8")
    found = json.loads(script.removeprefix("window.attnbookSearchTitles = ").removesuffix(";\n"))
    index = (out / "searchindex.js").read_text(encoding="utf-8")
    assert set(found) == {"Why divide by \\sqrt{d_k}?", "When a < b & more"}
    for title in found:
        assert json.dumps(title) in index, title
    assert f'src="_static/{name}' in (out / "search.html").read_text(encoding="utf-8")
    assert name not in (out / "chapters" / "scores.html").read_text(encoding="utf-8")
