"""Every page of the built book, opened offline in headless Chromium.

For each page of `_build/html` (not the generated index and search pages, nor
`_static`, `_sources` and `_images`):

- its <title> names the book, and its article has an <h1>;
- every formula (display and inline) was typeset by MathJax, and no raw TeX
  (`$$`, `\\[`, `\\begin{`) is left in the article's text outside code, nor any `$`
  (KNOWN_STRAY_DOLLARS lists a page whose fix is waiting, as an expected failure);
- MathJax draws no character under MATHS_FLOOR_PX (11 px: a script of a script);
- every image in the article loaded and has alt text; every figure has a caption, numbered
  only in a chapter;
- the browser logged no error and the page threw none;
- nothing was requested from the network: the book is served from 127.0.0.1
  and every other request is aborted, so the pages must use the vendored
  MathJax and fonts (`make assets`); a script, stylesheet or font fetched
  from elsewhere is named in the failure;
- axe-core finds no "serious" or "critical" accessibility violation (rule, impact
  and CSS selector of each are named), every dropdown opened (and, on one chapter in the
  dark theme, no text without enough contrast); and the icon buttons keep
  their names when FontAwesome draws the icons before attnbook.js runs (forced once);
- every code block (cell input, output, code in the prose) fits the column of a
  1440, 1366 and 1280 px wide window: no horizontal scroll bar (no tolerance);
- on an emulated phone (390 px), the page does not pan sideways, no cell output wraps
  its lines (it scrolls inside itself), no word of inline code in a table is broken (the
  table scrolls), the title takes three lines at most, and tapping the chapter-list button
  opens a list of every page (the contents button, the page's sections); a diagram drawn a
  second time for phones (images/NAME_narrow.svg: the chapter map, figure 4.1) is shown in
  that version, and every figure shows its smallest text at PHONE_FLOOR_PX (10 px) or more
  (the others keep a width in a box that scrolls sideways); every figure of a cell output is
  a link to its image file, named by its alt text, with a cue to enlarge shown (on a phone
  only);
- every bertviz view has drawn its SVG (tokens and attention lines), offline, no wider
  than the column; on a phone, the model view (970 px) keeps labels of PHONE_FLOOR_PX or
  more in a box that scrolls sideways, under a hint;
- the page's <link rel="icon"> files load;
- the checkers' symbols (⏳, ✅, ❌) are drawn with an emoji font, not as empty boxes;
- a chapter shows its reading and exercise times, what it builds on, and Colab and
  download buttons under its title; the start page, "Start with chapter 1" and the rest.

Also: `404.html`, sent for a URL three folders deep under the site's path as GitHub Pages
sends it, loads all it needs and leads to the start page; `index.html` (a redirect stub)
leads to a page, the search page finds a word offline (its summaries' and titles' formulas typeset), on a
desktop the chapter-list button hides and shows the sidebar, and the exercise's name in a
solution's header opens the solution. Without Chromium all of this is one skipped test.

Run with `pytest tests -m browser` after building the book (`make test` does both).
"""

from __future__ import annotations

import contextlib
import re
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml
from conftest import (
    AXE,
    AXE_IMPACTS,
    AXE_WRAPPER,
    BUILD,
    FONTAWESOME_DONE_JS,
    PHONE_WIDTH,
    ROOT,
    VIEWPORT,
    PageReport,
    _audit,
    _offline_page,
    _wait_for_bertviz,
)

from attnbook.viz import SMALLEST_TEXT_KEY, png_text, svg_smallest_text
from tools.build_pdf import CUT_JS, FIT_JS
from tools.figure_text import FLOOR_PX, PHONE_FLOOR_PX
from tools.page_checks import MATHJAX_DONE_JS, RAW_TEX, page_js
from tools.pages_server import serve

pytestmark = pytest.mark.browser

# Every test taking `page_name` runs once per built page (conftest.pytest_generate_tests).
OFFLINE_CRITICAL = {"script", "stylesheet", "font"}  # what makes a page break without a network
SEARCH_WORD = "attention"  # a word of intro.md, so the search must find at least one page


def _problems(title: str, items: list[str], limit: int = 8) -> str:
    shown = "\n".join(f"  - {item}" for item in items[:limit])
    more = f"\n  ... and {len(items) - limit} more" if len(items) > limit else ""
    return f"{title}:\n{shown}{more}"


def test_title_names_the_book(visit, page_name: str, book_title: str) -> None:
    title = visit(page_name).facts["title"].strip()
    assert title, f"{page_name}: the <title> is empty"
    assert book_title in title, f"{page_name}: the <title> {title!r} does not name {book_title!r}"


def test_has_a_heading(visit, page_name: str) -> None:
    assert visit(page_name).facts["h1"], f"{page_name}: the article has no <h1>"


def test_maths_is_typeset(visit, page_name: str) -> None:
    report = visit(page_name)
    untypeset = report.facts["untypeset"]
    if untypeset:
        why = f" ({report.mathjax_problem})" if report.mathjax_problem else ""
        pytest.fail(
            _problems(
                f"{page_name}: {len(untypeset)} of {report.facts['mathCount']} formulas "
                f"were not typeset by MathJax{why}",
                untypeset,
            ),
            pytrace=False,
        )


# A script of a script (the s' of e^{z_{s'}}) beside 16 px text: MathJax drew it at half the
# formula's size, 8.7 to 10.2 px depending on the fonts it matches; attnbook.js sets MathML's
# scriptminsize to this (SCRIPT_MIN_SIZE there).
MATHS_FLOOR_PX = 11.0


def test_maths_scripts_are_legible(visit, page_name: str) -> None:
    smallest = visit(page_name).facts["smallestMath"]
    if smallest and smallest["px"] < MATHS_FLOOR_PX - 0.05:  # rounding of em to px
        pytest.fail(
            f"{page_name}: MathJax drew a character at {smallest['px']:.1f} px "
            f"< {MATHS_FLOOR_PX:g} px, in {smallest['formula']!r}",
            pytrace=False,
        )


def test_no_raw_tex_in_the_text(visit, page_name: str) -> None:
    prose = visit(page_name).facts["prose"]
    found = []
    for marker in RAW_TEX:
        for match in re.finditer(re.escape(marker), prose):
            start = max(match.start() - 30, 0)
            found.append(f"{marker!r} in ...{' '.join(prose[start : match.end() + 40].split())}...")
    if found:
        pytest.fail(
            _problems(f"{page_name}: raw TeX is visible in the article", found), pytrace=False
        )


# Pages with a stray `$` whose fix is known and waiting in a chapter notebook: page -> where
# and what. The test of such a page is an expected failure while the `$` is there, and fails
# as soon as it is gone, so that the entry is removed with the fix.
KNOWN_STRAY_DOLLARS: dict[str, str] = {}


def test_no_stray_dollar(visit, page_name: str) -> None:
    """No `$` outside code and maths: one there is TeX that was never typeset (a formula in
    a place MyST does not look for one, or a `.bib` entry's maths)."""
    prose = visit(page_name).facts["prose"]
    found = [
        "..." + " ".join(prose[max(match.start() - 40, 0) : match.end() + 40].split()) + "..."
        for match in re.finditer(re.escape("$"), prose)
    ]
    known = KNOWN_STRAY_DOLLARS.get(page_name)
    if known and found:
        pytest.xfail(f"known, fix reported: {known}")
    if known:
        pytest.fail(
            f"{page_name} has no stray $ any more: remove it from KNOWN_STRAY_DOLLARS",
            pytrace=False,
        )
    if found:
        pytest.fail(
            _problems(f"{page_name}: {len(found)} `$` outside code and maths", found),
            pytrace=False,
        )


def test_images_load_and_have_alt_text(visit, page_name: str) -> None:
    problems = []
    for image in visit(page_name).facts["images"]:
        if not image["loaded"]:
            problems.append(f"{image['src']} did not load")
        if not image["alt"] or image["alt"] == image["src"]:
            # Sphinx writes the file's path as the alt text when none is given.
            problems.append(f"{image['src']} has no alt text")
    if problems:
        pytest.fail(_problems(f"{page_name}: images", problems), pytrace=False)


def test_figures_have_captions(visit, page_name: str) -> None:
    """Every figure has a caption; outside the chapters, which cite their figures by number
    ("Fig. 4.1"), a caption has no number (the start page's map was "Fig. 1": _ext)."""
    figures = visit(page_name).facts["figures"]
    problems = [f"no caption: {figure['id']}" for figure in figures if not figure["caption"]]
    if not page_name.startswith("chapters/"):
        problems += [
            f"numbered, outside the chapters: {figure['caption']!r}"
            for figure in figures
            if re.match(r"Fig\. [0-9]", figure["caption"])
        ]
    if problems:
        pytest.fail(_problems(f"{page_name}: figures", problems), pytrace=False)


def test_no_errors_in_the_browser(visit, page_name: str) -> None:
    errors = visit(page_name).errors()
    if errors:
        pytest.fail(_problems(f"{page_name}: errors in the browser", errors), pytrace=False)


def test_nothing_is_loaded_from_the_network(visit, page_name: str) -> None:
    blocked = visit(page_name).blocked
    critical = [url for kind, url in blocked if kind in OFFLINE_CRITICAL]
    if critical:
        pytest.fail(
            _problems(
                f"{page_name}: scripts, stylesheets or fonts requested from the network "
                "(is MathJax vendored? run `make assets`, then rebuild the book)",
                critical,
            ),
            pytrace=False,
        )
    if blocked:
        pytest.fail(
            _problems(
                f"{page_name}: requests to the network (blocked; the page must work offline)",
                [f"{kind}: {url}" for kind, url in blocked],
            ),
            pytrace=False,
        )


def test_redirect_leads_to_a_page(open_page, redirect: tuple[str, str]) -> None:
    stub, target = redirect
    landed = {}

    def follow(page, report):
        page.wait_for_url(f"**/{target}")
        landed["title"] = page.title()

    report = open_page(stub, follow)
    assert landed["title"].strip(), f"{stub} redirects to {target}, which has no <title>"
    if report.errors():
        pytest.fail(_problems(f"{stub} -> {target}: errors", report.errors()), pytrace=False)


def test_search_works_offline(open_page) -> None:
    def wait_for_results(page, report):
        page.wait_for_selector("#search-results ul.search li", timeout=20_000)

    report = open_page(f"search.html?q={SEARCH_WORD}", wait_for_results)
    problems = report.errors() + [f"network: {url}" for _kind, url in report.blocked]
    if problems:
        pytest.fail(_problems(f"search.html?q={SEARCH_WORD}", problems), pytrace=False)


MATHS_WORD = "softmax"  # its results quote formulas: T x S (chapter 14), sqrt(d_k) (chapter 4)
SUMMARIES_JS = r"""
() => [...document.querySelectorAll("#search-results p.context")].map((summary) => ({
  text: summary.textContent.replace(/\s+/g, " ").slice(0, 100),
  typeset: summary.querySelectorAll("mjx-container").length,
  raw: /\\\([^]*?\\\)/.test(summary.textContent),
}))
"""


def _search_results(open_page, query: str, read_js: str) -> tuple[list[dict], PageReport]:
    """Open the search page for ``query`` (already URL-quoted), wait until the search has
    finished and MathJax has typeset the results, and return what ``read_js`` reads from them
    with the page's report."""
    results: list[dict] = []

    def wait_and_read(page, report):
        page.wait_for_function(
            "() => /Search finished/.test(document.getElementById('search-results').textContent)",
            timeout=30_000,
        )
        page.evaluate(MATHJAX_DONE_JS)
        page.wait_for_timeout(500)
        results.extend(page.evaluate(read_js))

    report = open_page(f"search.html?q={query}", wait_and_read)
    return results, report


def test_search_summaries_show_typeset_maths(open_page) -> None:
    """The search results' summaries show a formula typeset, not as raw TeX (\\(T \\times
    S\\)), and do not start with the page header's download menu (".pdf"): attnbook.js, with
    MathJax loaded on the search page by _ext."""

    summaries, report = _search_results(open_page, MATHS_WORD, SUMMARIES_JS)
    problems = [f"raw TeX: {s['text']}" for s in summaries if s["raw"]]
    problems += [f"the header's menu: {s['text']}" for s in summaries if ".pdf" in s["text"]]
    if not any(s["typeset"] for s in summaries):
        problems.append(f"no formula typeset in {len(summaries)} summaries")
    problems += report.errors()
    if problems:
        pytest.fail(_problems(f"search.html?q={MATHS_WORD}", problems), pytrace=False)


TITLE_QUERY = "why divide by"  # chapter 4's section "Why divide by $\sqrt{d_k}$?"
TITLE_LINKS_JS = r"""
() => [...document.querySelectorAll("#search-results ul.search li > a")].map((link) => ({
  text: link.textContent.replace(/\s+/g, " ").slice(0, 100),
  typeset: link.querySelectorAll("mjx-container").length,
}))
"""


def test_search_results_show_titles_with_typeset_maths(open_page) -> None:
    """A result found by a section's title whose text holds a formula links it with the formula
    typeset, not as the raw TeX the search index stores ("Why divide by \\sqrt{d_k}?"):
    attnbook.js, with the map of such titles that _ext writes for the search page."""

    query = urllib.parse.quote(TITLE_QUERY)
    links, report = _search_results(open_page, query, TITLE_LINKS_JS)
    titled = [link for link in links if "divide by" in link["text"].lower()]
    problems = [f"raw TeX: {link['text']}" for link in titled if "\\" in link["text"]]
    problems += [f"no formula typeset: {link['text']}" for link in titled if not link["typeset"]]
    if not titled:
        problems.append(f"no result links the section 'Why divide by ...' ({len(links)} links)")
    problems += report.errors()
    if problems:
        pytest.fail(_problems(f"search.html?q={query}", problems), pytrace=False)


def test_no_serious_accessibility_violations(visit, page_name: str) -> None:
    report = visit(page_name)
    if report.axe is None:
        pytest.fail("assets/vendor/axe.min.js is missing: run `make assets`", pytrace=False)
    serious = [v for v in report.axe if v["impact"] in AXE_IMPACTS]
    if serious:
        pytest.fail(
            _problems(
                f"{page_name}: {len(serious)} serious or critical accessibility violations "
                "(axe-core)",
                [f"{v['rule']} ({v['impact']}) at {v['target']}: {v['summary']}" for v in serious],
                limit=12,
            ),
            pytrace=False,
        )


DARK_PAGE = "chapters/04_scaled_dot_product_attention.html"  # facts links, exercises, a table
CONTRAST_JS = page_js(r"""
  openDropdowns();
  await mathJaxDone();
  const result = await axe.run(document, {runOnly: ["color-contrast"]});
  const summary = (node) => (node.failureSummary || "").replace(/\s+/g, " ").slice(0, 160);
  return result.violations.flatMap((rule) => rule.nodes.map((node) =>
      `${node.target.join(" ")}: ${summary(node)}`));
""")


def test_text_has_contrast_in_dark_mode(chromium, book_url: str) -> None:
    """The audit above sees the light theme only. In the dark one (a reader whose system is
    dark, `default_mode: auto`), the text of a chapter page, its facts line, exercises and
    table included, has WCAG AA's contrast (axe-core's color-contrast rule): the facts line's
    links and buttons had 4.0 there (attnbook.css now lightens them)."""
    if not AXE.is_file():
        pytest.fail("assets/vendor/axe.min.js is missing: run `make assets`", pytrace=False)
    report = PageReport(DARK_PAGE)
    with _offline_page(chromium, book_url, report, viewport=VIEWPORT, color_scheme="dark") as page:
        page.goto(book_url + DARK_PAGE, wait_until="load")
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        page.wait_for_function(FONTAWESOME_DONE_JS, timeout=15_000)
        page.add_script_tag(content=AXE_WRAPPER.format(source=AXE.read_text(encoding="utf-8")))
        found = page.evaluate(CONTRAST_JS)
    if found:
        pytest.fail(
            _problems(f"{DARK_PAGE} in dark mode: too little contrast", found), pytrace=False
        )


def test_the_audit_keeps_a_lasting_violation_and_drops_a_passing_state(chromium) -> None:
    if not AXE.is_file():
        pytest.fail("assets/vendor/axe.min.js is missing: run `make assets`", pytrace=False)
    page = chromium.new_page()
    try:
        # a button whose text is not in its accessible name; the second one loses its text
        # 600 ms after the page opens, as a script that is still setting up would
        page.set_content(
            '<html lang="en"><title>t</title><main><button aria-label="Mode">Light</button>'
            '<button id="swap" aria-label="Colour">Dark</button>'
            "<script>setTimeout(() => { document.getElementById('swap').textContent = ''; }, 600)"
            "</script></main></html>"
        )
        page.add_script_tag(content=AXE_WRAPPER.format(source=AXE.read_text(encoding="utf-8")))
        found = _audit(page)
    finally:
        page.close()
    serious = {(v["rule"], v["target"]) for v in found if v["impact"] in AXE_IMPACTS}
    assert serious == {("label-content-name-mismatch", 'button[aria-label="Mode"]')}, found


# The icons inside buttons that have an aria-label, and how many of them FontAwesome's <svg>
# gives a <title> or leaves visible to assistive technology.
LOUD_ICONS_JS = """() => [...document.querySelectorAll(
  "button[aria-label] svg, .search-button-field svg")].filter(
  (icon) => icon.querySelector("title") || icon.getAttribute("aria-hidden") !== "true").length
"""
REDRAW_JS = """async () => {
  const button = document.querySelector(".theme-switch-button");
  button.insertAdjacentHTML("beforeend",
      '<svg aria-labelledby="t" role="img"><title id="t">Light</title></svg>');
  await new Promise((resolve) => setTimeout(resolve, 0));
}"""


def test_icon_buttons_keep_their_names_when_the_icons_are_drawn_first(
    chromium, book_url: str, book_pages: list[str]
) -> None:
    """attnbook.js quiets the icons of the colour-mode button whichever deferred script runs
    first. When attnbook.js arrives after FontAwesome has drawn the icons, each <svg> carries
    its icon's title ("Light", ...) as text that the label "Color mode" leaves out (axe-core's
    label-content-name-mismatch): a `make test` on a busy machine met that order by chance.
    Here it is forced: attnbook.js is held back until FontAwesome is done, then run."""
    page_name = next((name for name in book_pages if name.startswith("chapters/")), book_pages[0])
    script = (BUILD / "_static" / "attnbook.js").read_text(encoding="utf-8")
    report = PageReport(page_name)
    with _offline_page(chromium, book_url, report, viewport=VIEWPORT) as page:
        page.route("**/_static/attnbook.js*", lambda route: route.fulfill(body="", status=200))
        page.goto(book_url + page_name, wait_until="load")
        page.wait_for_function(FONTAWESOME_DONE_JS, timeout=15_000)
        drawn_first = page.evaluate(LOUD_ICONS_JS)
        page.add_script_tag(content=script)
        after = page.evaluate(LOUD_ICONS_JS)
        page.evaluate(REDRAW_JS)  # FontAwesome draws an icon again, titled
        redrawn = page.evaluate(LOUD_ICONS_JS)
        page.add_script_tag(content=AXE_WRAPPER.format(source=AXE.read_text(encoding="utf-8")))
        found = _audit(page)
    assert drawn_first > 0, (
        f"{page_name}: with attnbook.js held back, FontAwesome drew no titled icon in a "
        "labelled button: the test no longer forces the order it is about"
    )
    assert after == 0, f"{page_name}: {after} icons keep a title once attnbook.js has run"
    assert redrawn == 0, f"{page_name}: an icon drawn again after attnbook.js kept its title"
    mismatch = [v for v in found if v["rule"] == "label-content-name-mismatch"]
    assert not mismatch, mismatch
    assert not report.errors(), report.errors()


def test_code_fits_the_column(visit, page_name: str, code_width: int) -> None:
    width = code_width  # each of conftest.CODE_WIDTHS
    blocks = visit(page_name).code[width]
    wide = [block for block in blocks if block["scrollWidth"] > block["clientWidth"]]
    if wide:
        pytest.fail(
            _problems(
                f"{page_name}: {len(wide)} of {len(blocks)} code blocks scroll sideways "
                f"in a {width} px window",
                [
                    f"{b['kind']} in #{b['section']}: {b['longest']} characters at "
                    f"{b['fontSize']:.1f} px, {b['scrollWidth']} px > {b['clientWidth']} px: "
                    f"{b['line']!r}"
                    for b in wide
                ],
                limit=12,
            ),
            pytrace=False,
        )


def _smallest_text_px(figure: dict, build: Path) -> tuple[float | None, str]:
    """The rendered height (CSS px) of a figure's smallest text, and what it was read from."""
    if figure["kind"] == "svg":  # the chapter map, inline
        return figure["smallestPt"] * figure["width"] / figure["widthPt"], "inline SVG"
    path = build / urllib.parse.unquote(urllib.parse.urlsplit(figure["src"]).path).lstrip("/")
    if path.suffix == ".png":
        recorded = png_text(path.read_bytes()).get(SMALLEST_TEXT_KEY)
        if recorded is None:
            return None, f"{path.name} records no smallest text (drawn without course_style)"
        return float(recorded) * figure["width"] / figure["naturalWidth"], path.name
    if path.suffix == ".svg":
        recorded = svg_smallest_text(path.read_text(encoding="utf-8"))
        if recorded is None:
            return None, f"{path.name} records no smallest text (viz.svg_metadata)"
        smallest_pt, width_pt = recorded
        return smallest_pt * figure["width"] / width_pt, path.name
    return None, f"{path.name}: a {path.suffix} figure, which the test cannot measure"


def test_figure_text_is_legible(visit, page_name: str, code_width: int, build_dir: Path) -> None:
    """The smallest text of every figure renders at FLOOR_PX or more (tools/figure_text.py says
    why 9 px) at the laptop and desktop widths (phones: test_figure_text_is_legible_on_a_phone)."""
    problems = []
    for figure in visit(page_name).figures[code_width]:
        if figure["kind"] == "img" and "/_images/" not in figure["src"]:
            continue  # the theme's logos and buttons
        px, where = _smallest_text_px(figure, build_dir)
        if px is None:
            problems.append(f"{where}: {figure['alt']!r}")
        elif px < FLOOR_PX:
            problems.append(
                f"{where}: smallest text {px:.1f} px < {FLOOR_PX:g} px, shown "
                f"{figure['width']:.0f} px wide: {figure['alt']!r}"
            )
    if problems:
        pytest.fail(
            _problems(f"{page_name}: figure text too small in a {code_width} px window", problems),
            pytrace=False,
        )


def test_figure_text_is_legible_on_a_phone(
    visit_on_a_phone, page_name: str, build_dir: Path
) -> None:
    """Every figure shows its smallest text at PHONE_FLOOR_PX or more on a phone: a diagram
    drawn again for phones (images/NAME_narrow.svg) in that version, any other at the width
    _ext gives it there, in a box that scrolls sideways (attnbook.css)."""
    problems = []
    for figure in visit_on_a_phone(page_name).figures[PHONE_WIDTH]:
        if figure["kind"] == "img" and "/_images/" not in figure["src"]:
            continue  # the theme's logos and buttons
        px, where = _smallest_text_px(figure, build_dir)
        if px is None or px < PHONE_FLOOR_PX:
            problems.append(
                f"{where}: smallest text {px or 0:.1f} px < {PHONE_FLOOR_PX:g} px, shown "
                f"{figure['width']:.0f} px wide: {figure['alt'][:60]!r}"
            )
    if problems:
        pytest.fail(
            _problems(f"{page_name}: figure text too small on a {PHONE_WIDTH} px phone", problems),
            pytrace=False,
        )


def test_every_narrow_diagram_is_shown_on_a_phone(visit_on_a_phone, book_pages: list[str]) -> None:
    """Each images/NAME_narrow.svg is what some page shows on a phone (the wide version is not
    shown instead: attnbook.css, the <picture> of _ext/attnbook_book.py)."""
    names = {path.name for path in (ROOT / "images").glob("*_narrow.svg")}
    shown = {
        urllib.parse.unquote(figure["src"]).rsplit("/", 1)[-1]
        for name in book_pages
        for figure in visit_on_a_phone(name).figures[PHONE_WIDTH]
    }
    if names - shown:
        pytest.fail(
            f"never shown on a phone: {sorted(names - shown)} "
            f"(the diagrams shown: {sorted(name for name in shown if name.endswith('.svg'))})",
            pytrace=False,
        )


ENLARGE_WORD = "enlarge"  # what the cue under a figure says on a phone ("Tap to enlarge")


def test_figures_open_full_size_on_a_phone(visit, visit_on_a_phone, page_name: str) -> None:
    """On a phone every figure of a cell output (its text scaled to 5 to 10 px in the column) is
    a link to its own image file, which the phone's browser shows full size, to zoom in; the
    keyboard reaches the link, its accessible name is the figure's alt text followed by the
    words it shows, and it shows a cue to enlarge (_ext/attnbook_book.py, attnbook.css). On a
    desktop, where the figures are legible, the link shows nothing but the figure."""
    problems = []
    for figure in visit_on_a_phone(page_name).figure_links:
        where = f"{figure['src'].rsplit('/', 1)[-1][:16]} ({figure['alt'][:40]!r})"
        if figure["href"] != figure["src"]:
            problems.append(f"{where}: not in a link to its own file (link: {figure['href']})")
            continue
        if not figure["focusable"]:
            problems.append(f"{where}: its link is out of the keyboard's reach")
        if not figure["alt"] or not (figure["name"] or "").startswith(figure["alt"]):
            problems.append(f"{where}: its link is named {figure['name']!r}, not by its alt text")
        if ENLARGE_WORD not in figure["shown"].lower():
            problems.append(
                f"{where}: no cue to enlarge shown (the link shows {figure['shown']!r})"
            )
        elif not (figure["name"] or "").endswith(figure["shown"]):
            problems.append(f"{where}: the cue {figure['shown']!r} is not in the link's name")
    problems += [
        f"on a desktop a figure's link shows {text!r}"
        for text in visit(page_name).layout["figureLinkText"]
    ]
    if problems:
        pytest.fail(_problems(f"{page_name}: figures on a phone", problems), pytrace=False)


def test_a_figure_wider_than_a_phone_says_it_scrolls(visit_on_a_phone, page_name: str) -> None:
    """On a phone a figure kept at the width where its text is legible scrolls sideways in its
    link (attnbook.css), and its cue then starts by saying so; on the same page turned into a
    tablet (768 px, the widest screen with the phone's rules), where some figures fit the column,
    those say nothing of it (attnbook.js marks the links that scroll, again when they resize)."""
    report = visit_on_a_phone(page_name)
    problems = []
    for screen, figures in (("phone", report.figure_links), ("tablet", report.tablet_figures)):
        for figure in figures:
            where = f"{screen}: {figure['src'].rsplit('/', 1)[-1][:16]} ({figure['alt'][:40]!r})"
            if figure["scrolls"] and not figure["swipe"]:
                problems.append(f"{where}: scrolls sideways, and nothing says so")
            elif figure["swipe"] and not figure["scrolls"]:
                problems.append(f"{where}: fits the column, and its cue says to swipe sideways")
    if problems:
        pytest.fail(_problems(f"{page_name}: wide figures on a phone", problems), pytrace=False)


def test_no_sideways_pan_on_a_phone(visit_on_a_phone, page_name: str) -> None:
    pan = visit_on_a_phone(page_name).pan
    if pan["scrollWidth"] > pan["width"]:
        pytest.fail(
            _problems(
                f"{page_name}: on a {pan['width']} px phone the page is {pan['scrollWidth']} px "
                "wide and pans sideways; what sticks out",
                pan["culprits"] or ["(nothing found: a fixed or transformed element?)"],
            ),
            pytrace=False,
        )


def test_outputs_keep_their_lines_on_a_phone(visit_on_a_phone, page_name: str) -> None:
    """An output wider than a phone scrolls inside itself (attnbook.css) instead of wrapping,
    which broke the rows of printed tables and tensors across lines."""
    wrapped = visit_on_a_phone(page_name).wrapped_outputs
    if wrapped:
        pytest.fail(
            _problems(f"{page_name}: on a phone these outputs wrap their lines", wrapped),
            pytrace=False,
        )


def test_table_code_keeps_its_words_on_a_phone(visit_on_a_phone, page_name: str) -> None:
    """Inline code in a table breaks only between its words on a phone (attnbook.css): the
    table scrolls in its own box instead of breaking a name such as EFFICIENT_ATTENTION."""
    broken = visit_on_a_phone(page_name).broken_table_code
    if broken:
        pytest.fail(
            _problems(f"{page_name}: on a phone, code in a table broken inside a word", broken),
            pytrace=False,
        )


PHONE_TITLE_LINES = 3  # the most lines a page's title may take on a phone


def test_titles_leave_room_on_a_phone(visit_on_a_phone, page_name: str) -> None:
    """On a phone a page's title takes PHONE_TITLE_LINES lines at most (attnbook.css sets the
    headings smaller there): at the theme's 42 px, the titles of chapters 1, 5 and 12 took
    four, half of the first screen."""
    lines = visit_on_a_phone(page_name).title_lines
    if lines > PHONE_TITLE_LINES:
        pytest.fail(f"{page_name}: on a phone its title takes {lines} lines", pytrace=False)


def test_phone_navigation_opens(visit_on_a_phone, page_name: str, book_pages: list[str]) -> None:
    """Tapping the chapter-list button opens a list of every page; the contents button, the
    page's sections. Both are what a phone has instead of the two sidebars."""
    report = visit_on_a_phone(page_name)
    problems = []
    chapters = report.dialogs.get("chapter list")
    if chapters is None:
        problems.append("no chapter-list button (.primary-toggle) in the article header")
    elif not chapters["open"] or not chapters["pages"]:
        problems.append(f"tapping the chapter-list button opened nothing on screen: {chapters}")
    else:
        listed = {link.rsplit("/", 1)[-1] for link in chapters["pages"]}
        missing = [name for name in book_pages if name.rsplit("/", 1)[-1] not in listed]
        if missing:
            problems.append(f"the chapter list leaves out {missing}")
    contents = report.dialogs.get("page contents")
    if contents is not None and (not contents["open"] or contents["anchors"] == 0):
        problems.append(f"tapping the contents button showed no section of the page: {contents}")
    problems += report.errors()
    if problems:
        pytest.fail(_problems(f"{page_name} on a phone", problems), pytrace=False)


SIDEBAR_JS = """() => {
  const sidebar = document.getElementById("pst-primary-sidebar");
  const box = sidebar.getBoundingClientRect();
  return {shown: getComputedStyle(sidebar).visibility === "visible" && box.right > 0,
          article: Math.round(document.querySelector("article.bd-article")
              .getBoundingClientRect().width)};
}"""


def test_desktop_toggle_hides_and_shows_the_chapter_list(open_page, book_pages) -> None:
    """On a desktop the chapter-list button slides the sidebar out, and back in."""
    page_name = next((name for name in book_pages if name.startswith("chapters/")), book_pages[0])
    states = []

    def toggle_twice(page, report):
        states.append(page.evaluate(SIDEBAR_JS))
        for hidden in (True, False):
            page.click(".bd-header-article .primary-toggle")
            with contextlib.suppress(Exception):  # did not change: the asserts below say so
                page.wait_for_function(
                    f"() => ({SIDEBAR_JS})().shown === {str(not hidden).lower()}", timeout=5_000
                )
            page.wait_for_timeout(400)  # the slide (0.25 s) ends: the article's final width
            states.append(page.evaluate(SIDEBAR_JS))

    report = open_page(page_name, toggle_twice)
    assert [state["shown"] for state in states] == [True, False, True], (
        f"{page_name}: the sidebar shown before, after one and after two clicks on the "
        f"desktop toggle: {states}"
    )
    assert states[1]["article"] > states[0]["article"], (
        f"{page_name}: hiding the sidebar did not widen the article: {states}"
    )
    assert not report.errors(), report.errors()


SOLUTION_JS = """() => {
  const solution = document.querySelector(".solution.dropdown");
  return {shown: !solution.classList.contains("toggle-hidden"), hash: location.hash,
          top: Math.round(solution.getBoundingClientRect().top)};
}"""


def test_the_exercise_link_in_a_solution_header_opens_the_solution(
    open_page, book_pages, page_source
) -> None:
    """A solution's header names its exercise as a link; a click there opens the solution
    (as anywhere else on the header) instead of jumping up to the exercise."""
    page_name = next(
        (name for name in book_pages if 'class="solution dropdown' in page_source(name)), None
    )
    if page_name is None:
        pytest.skip("no page of this build has a solution in a dropdown")
    states = []

    def click_the_link(page, report):
        page.locator(".solution.dropdown .admonition-title a").first.scroll_into_view_if_needed()
        states.append(page.evaluate(SOLUTION_JS))
        page.locator(".solution.dropdown .admonition-title a").first.click()
        page.wait_for_timeout(300)
        states.append(page.evaluate(SOLUTION_JS))

    report = open_page(page_name, click_the_link)
    before, after = states
    assert not before["shown"], f"{page_name}: the first solution is shown before any click"
    assert after["shown"], f"{page_name}: a click on the exercise's name left the solution closed"
    assert after["hash"] == before["hash"], f"{page_name}: the click jumped to {after['hash']!r}"
    assert abs(after["top"] - before["top"]) < 5, f"{page_name}: the click moved the page: {states}"
    assert not report.errors(), report.errors()


def test_bertviz_views_draw(visit, page_name: str) -> None:
    problems = []
    for view in visit(page_name).layout["bertviz"]:
        if view["svgs"] == 0:
            problems.append(f"{view['kind']} {view['id']}: no SVG was drawn")
        elif view["texts"] == 0 or view["lines"] == 0:
            problems.append(
                f"{view['kind']} {view['id']}: the SVG has {view['texts']} labels and "
                f"{view['lines']} attention lines (expected some of each)"
            )
        elif view["width"] <= 0:
            problems.append(f"{view['kind']} {view['id']}: the SVG has no width")
        elif view["widest"] > view["column"] + 1:
            problems.append(
                f"{view['kind']} {view['id']}: {view['widest']} px wide, wider than the "
                f"{view['column']} px column (cut off)"
            )
    if problems:
        pytest.fail(_problems(f"{page_name}: bertviz views", problems), pytrace=False)


def test_bertviz_labels_are_legible_on_a_phone(visit_on_a_phone, page_name: str) -> None:
    """bertviz's model view, drawn 970 px wide, is not scaled down to a phone's column, where its
    labels measured about 5 px: it keeps labels of PHONE_FLOOR_PX or more in a box that scrolls
    sideways to its last head, under a visible hint that says so (attnbook.css, attnbook.js)."""
    problems = []
    for view in visit_on_a_phone(page_name).bertviz:
        where = f"{view['id']} (shown {view['shown']} px wide)"
        if view["smallestPx"] < PHONE_FLOOR_PX:
            problems.append(f"{where}: labels of {view['smallestPx']:g} px < {PHONE_FLOOR_PX:g}")
        if not view["reachable"]:
            problems.append(f"{where}: its right edge cannot be scrolled to")
        if view["shown"] > PHONE_WIDTH and "sideways" not in view["hint"]:
            problems.append(f"{where}: wider than the screen, with no hint: {view['hint']!r}")
    if problems:
        pytest.fail(_problems(f"{page_name}: bertviz on a phone", problems), pytrace=False)


PRINT_COLUMN = 673  # CSS px: an A4 page less the 16 mm margins of tools/build_pdf.py
PRINT_JS = r"""
() => [...document.querySelectorAll('div[id^="bertviz-"]')].map((view) => ({
  id: view.id,
  widest: Math.round(Math.max(0, ...[...view.querySelectorAll("svg")]
      .map((svg) => svg.getBoundingClientRect().width))),
  column: view.clientWidth,
  hint: [...document.querySelectorAll(".attnbook-bertviz-hint")]
      .some((hint) => hint.getClientRects().length > 0),
}))
"""


def test_bertviz_views_fit_the_printed_page(chromium, book_url: str) -> None:
    """On paper (`make pdf` prints an A4 column about as wide as a small tablet's) a bertviz
    view stays scaled to the column, with no hint to swipe: the phone's scrolling box (see
    test_bertviz_labels_are_legible_on_a_phone) is for screens only."""
    name = "chapters/13_inside_attention.html"
    report = PageReport(name)
    viewport = {"width": PRINT_COLUMN, "height": 900}
    with _offline_page(chromium, book_url, report, viewport=viewport) as page:
        page.emulate_media(media="print")
        page.goto(book_url + name, wait_until="load")
        _wait_for_bertviz(page)
        views = page.evaluate(PRINT_JS)
    assert views, f"{name}: no bertviz view"
    problems = [f"{v['id']}: {v['widest']} px in a {v['column']} px column" for v in views
                if v["widest"] > v["column"] + 1]  # fmt: skip
    problems += ["a hint to swipe is shown on paper"] if any(v["hint"] for v in views) else []
    if problems:
        pytest.fail(_problems(f"{name} printed", problems), pytrace=False)


# Printed: each cell output wider than its box (cut off at the page's edge), the text that a
# link around a cell output's image shows (the phone's cue to enlarge: none on paper), the
# labels and chevrons of hidden cells and dropdowns still shown, and how many code blocks are
# kept whole on one page.
PRINTED_JS = r"""
() => ({
  cut: [...document.querySelectorAll(".cell_output pre")]
    .filter((pre) => pre.getClientRects().length > 0 && pre.scrollWidth > pre.clientWidth + 1)
    .map((pre) => `${pre.scrollWidth} px in ${pre.clientWidth} px: ${pre.textContent.slice(0, 50)}`),
  figureLinkText: [...document.querySelectorAll(".cell_output a[href] img")]
    .map((img) => img.closest("a").innerText.replace(/\s+/g, " ").trim()).filter((t) => t),
  labels: [...document.querySelectorAll("details.hide > summary, .toggle-button")]
    .filter((label) => label.getClientRects().length > 0)
    .map((label) => label.innerText.replace(/\s+/g, " ").trim() || label.className),
  unbroken: [...document.querySelectorAll(".cell div.highlight, .cell div[class*=highlight-]")]
    .filter((box) => getComputedStyle(box).breakInside !== "auto").length,
})
"""
PRINTED_CHAPTER = "chapters/14_efficient_attention.html"  # wide tables of timings, 7 figures


@pytest.fixture(scope="module")
def printed_chapter(chromium, book_url: str) -> dict:
    """PRINTED_JS's findings on PRINTED_CHAPTER, opened once with print media at the width of
    the printed A4 column."""
    report = PageReport(PRINTED_CHAPTER)
    viewport = {"width": PRINT_COLUMN, "height": 900}
    with _offline_page(chromium, book_url, report, viewport=viewport) as page:
        page.emulate_media(media="print")
        page.goto(book_url + PRINTED_CHAPTER, wait_until="load")
        return page.evaluate(PRINTED_JS)


def test_outputs_wrap_on_the_printed_page(printed_chapter: dict) -> None:
    """On paper a cell output wider than the column wraps (attnbook.css's print rules) instead
    of being cut off at the page's edge: the phone's rule that keeps an output's lines in a
    scrolling box matched the printed A4 column too."""
    if printed_chapter["cut"]:
        pytest.fail(
            _problems(f"{PRINTED_CHAPTER} printed: outputs cut off", printed_chapter["cut"]),
            pytrace=False,
        )


def test_figures_show_no_cue_on_the_printed_page(printed_chapter: dict) -> None:
    """On paper, as wide as a phone's rules reach, a figure shows no cue to tap it
    (test_figures_open_full_size_on_a_phone): attnbook.css shows it on screens only."""
    shown = printed_chapter["figureLinkText"]
    if shown:
        pytest.fail(_problems(f"{PRINTED_CHAPTER} printed: figures show", shown), pytrace=False)


WIDE_FORMULA_CHAPTER = "chapters/03_soft_lookup.html"  # lookup(q) and its shapes: 831 px


def test_nothing_to_click_and_no_empty_frames_on_the_printed_page(chromium, book_url: str) -> None:
    """On paper a hidden cell prints opened without its label ("Hide code cell content") and
    a dropdown without its chevron; and a cell's code or output may break across pages: kept
    whole (the themes' break-inside: avoid), one that did not fit moved to the next page and
    left its cell's frame behind, empty down to the foot of the page. Chapter 1 has hidden
    cells, dropdowns and code."""
    name = "chapters/01_scores.html"
    viewport = {"width": PRINT_COLUMN, "height": 900}
    with _offline_page(chromium, book_url, PageReport(name), viewport=viewport) as page:
        page.emulate_media(media="print")
        page.goto(book_url + name, wait_until="load")
        printed = page.evaluate(PRINTED_JS)
    problems = [f"a label is printed: {label!r}" for label in printed["labels"]]
    if printed["unbroken"]:
        problems.append(f"{printed['unbroken']} code blocks cannot break across pages")
    if problems:
        pytest.fail(_problems(f"{name} printed", problems), pytrace=False)


def test_wide_formulas_fit_the_printed_page(chromium, book_url: str) -> None:
    """On paper a display formula wider than the A4 column is cut off at its box's edge (a
    screen scrolls it): `make pdf` sets it smaller until it fits (tools/build_pdf.py's FIT_JS),
    and its check (CUT_JS) names any box that still cuts off what it holds."""
    report = PageReport(WIDE_FORMULA_CHAPTER)
    viewport = {"width": PRINT_COLUMN, "height": 900}
    with _offline_page(chromium, book_url, report, viewport=viewport) as page:
        page.emulate_media(media="print")
        page.goto(book_url + WIDE_FORMULA_CHAPTER, wait_until="load")
        page.evaluate(MATHJAX_DONE_JS)
        before = page.evaluate(CUT_JS)
        fitted = page.evaluate(FIT_JS)
        after = page.evaluate(CUT_JS)
    assert any("lookup(q)" in cut for cut in before), f"the check misses lookup(q): {before}"
    assert fitted >= 1, "no formula was made smaller"
    if after:
        pytest.fail(_problems(f"{WIDE_FORMULA_CHAPTER} printed: cut off", after), pytrace=False)


def test_front_door(visit, page_name: str, book_pages: list[str]) -> None:
    """A chapter shows its times, what it builds on and its buttons under its title; the
    start page has its buttons, and its chapter map a named link to every chapter and no link
    around it; every local link of them leads somewhere."""
    door = visit(page_name).layout["frontDoor"]
    problems = []
    if page_name.startswith("chapters/"):
        if not door["facts"] or not door["factsAfterTitle"]:
            problems.append(f"no facts line right under the title: {door['facts']!r}")
        elif not re.search(
            r"About \d.* to read and run\b.*, .* for its \d+ exercises", door["facts"]
        ):
            problems.append(f"the facts line gives no times: {door['facts']!r}")
        texts = [link["text"] for link in door["links"]]
        if "Download the notebook" not in texts:
            problems.append(f"no download button: {texts}")
    if page_name == "intro.html":
        texts = [link["text"] for link in door["links"]]
        if not door["start"] or "Start with chapter 1" not in texts:
            problems.append(f"no 'Start with chapter 1' button: {texts}")
        if door["mapInLink"]:
            problems.append(f"the chapter map is inside a link to {door['mapInLink'][0]}")
        linked = {link["href"] for link in door["mapLinks"] if link["name"]}
        chapters = {name for name in book_pages if name.startswith("chapters/")}
        if linked != chapters:
            problems.append(
                f"the chapter map's named links {sorted(linked)} are not the chapters' pages "
                f"{sorted(chapters)}"
            )
    for link in door["links"]:  # status None: not fetched (not a page or a notebook)
        if link["status"] not in (None, 200):
            problems.append(f"{link['text']!r} -> {link['href']}: HTTP {link['status']}")
    if problems:
        pytest.fail(_problems(f"{page_name}: the front door", problems), pytrace=False)


def test_emoji_have_a_font(visit, page_name: str) -> None:
    """The checkers' ⏳, ✅ and ❌ are drawn with an emoji font (installed, or the book's Noto
    Emoji), not as empty boxes: without one, Chromium draws them with the text font alone."""
    missing = [
        f"{symbols} drawn with {', '.join(fonts)}"
        for symbols, fonts in visit(page_name).emoji
        if not any("emoji" in font.lower() for font in fonts)
    ]
    if missing:
        pytest.fail(
            _problems(f"{page_name}: symbols without an emoji font (empty boxes)", missing),
            pytrace=False,
        )


def test_favicon_loads(visit, page_name: str) -> None:
    icons = visit(page_name).layout["icons"]
    assert icons, f'{page_name}: no <link rel="icon"> in the page'
    broken = [f"{icon['href']}: HTTP {icon['status']}" for icon in icons if icon["status"] != 200]
    if broken:
        pytest.fail(_problems(f"{page_name}: favicon", broken), pytrace=False)


def _site_root() -> str:
    """The path the book is published under, from _config.yml as the build takes it (_ext's
    site_path): /<repo>/ of repository.url on GitHub Pages, unless the config says otherwise."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    sys.path.insert(0, str(ROOT / "_ext"))
    try:
        from attnbook_book import site_path
    finally:
        sys.path.remove(str(ROOT / "_ext"))
    return site_path(
        (config.get("sphinx", {}).get("config") or {}).get("attnbook_site_path"),
        (config.get("html") or {}).get("baseurl"),
        config["repository"]["url"],
    )


NOT_FOUND_JS = r"""
async () => {
  const icons = [];
  for (const link of document.querySelectorAll('link[rel~="icon"]')) {
    let status = 0;  // 0: refused or unreachable
    try { status = (await fetch(link.href)).status; } catch (error) {}
    icons.push({href: link.href, status});
  }
  return {
    title: document.title,
    h1: [...document.querySelectorAll("article h1")].map((h) => h.textContent.trim()),
    styles: document.querySelectorAll('link[rel="stylesheet"]').length,
    scripts: document.querySelectorAll("script[src]").length,
    icons,
    start: [...document.querySelectorAll("article a")]
        .filter((a) => a.textContent.trim() === "the start page").map((a) => a.href),
  };
}
"""


def test_the_not_found_page_works_at_any_depth(chromium, book_title: str) -> None:
    """404.html as GitHub Pages sends it for a missing URL three folders deep under the site's
    path (tools/pages_server.py): it names the book and says the page was not found; its
    stylesheets, scripts and favicon load (nothing fails, nothing is refused, no error); its
    link to the start page opens the start page."""
    if not (BUILD / "404.html").is_file():
        pytest.fail(f"{BUILD} has no 404.html (_ext/attnbook_book.py writes it)", pytrace=False)
    report = PageReport("404.html")
    with (
        serve(BUILD, _site_root()) as site,
        _offline_page(chromium, site, report, viewport=VIEWPORT) as page,
    ):
        missing = site + "chapters/no/such/page.html"
        response = page.goto(missing, wait_until="load")
        facts = page.evaluate(NOT_FOUND_JS)
        assert response.status == 404
        assert book_title in facts["title"], facts["title"]
        assert "Page not found" in facts["title"], facts["title"]
        assert facts["h1"] == ["Page not found"]
        problems = [
            f"icon HTTP {icon['status']}: {icon['href']}"
            for icon in facts["icons"]
            if icon["status"] != 200
        ]
        # The page's own status, which Chromium logs as an error; anything else is a problem.
        with contextlib.suppress(ValueError):
            report.console_errors.remove(
                "Failed to load resource: the server responded with a status of 404 (Not Found)"
            )
        problems += [line for line in report.errors() if line != f"HTTP 404 {missing}"]
        problems += [f"refused ({kind}): {url}" for kind, url in report.blocked]
        if facts["start"] != [site + "intro.html"]:
            problems.append(f"'the start page' links {facts['start']}, not {site}intro.html")
        if problems:
            pytest.fail(_problems(f"404.html at {missing}", problems), pytrace=False)
        for kind in ("styles", "scripts", "icons"):  # the page loads each kind
            assert facts[kind], (kind, facts)
        page.get_by_role("link", name="the start page").click()
        page.wait_for_url(site + "intro.html", wait_until="commit", timeout=5_000)
