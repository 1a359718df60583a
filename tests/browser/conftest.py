"""Fixtures of the browser test: the built book, served locally, in headless Chromium.

- The browser is the system's Chromium (`/usr/bin/chromium`, or `$ATTNBOOK_CHROMIUM`),
  driven by Playwright; Playwright never downloads a browser here. Without one,
  every browser test is skipped with one line saying so.
- `_build/html` (or `$ATTNBOOK_BOOK_HTML`, a build made elsewhere) is served by
  `tools.pages_server` on 127.0.0.1 (a free port) from a thread, from the server's root
  (a missing file answers 404, with the book's 404.html). Every request to any other host
  is aborted and recorded, so a page that needs the network (a CDN's MathJax, a web font)
  fails the tests.
- Each page is opened once, in a fresh browser context of a typical desktop
  window (`VIEWPORT`); what the tests need to know about it is gathered into a
  `PageReport` and shared by all of them: the text facts, then (every dropdown
  opened) the code blocks' widths, bertviz's drawings, the favicon, and last
  axe-core's accessibility audit (`assets/vendor/axe.min.js`, from `make assets`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tools.page_checks import CHROMIUM, MATHJAX_DONE_JS, page_js
from tools.pages_server import serve

ROOT = Path(__file__).resolve().parents[2]
# The built book under test: `_build/html`, or `$ATTNBOOK_BOOK_HTML` (a build made elsewhere,
# e.g. `jupyter-book build . --path-output ../book` -> ../book/_build/html).
BUILD = Path(os.environ.get("ATTNBOOK_BOOK_HTML") or ROOT / "_build" / "html")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SKIPPED_PARTS = {"_sources", "_static", "_images"}
# 404.html too: its URLs start from the site's path on GitHub Pages (/<repo>/, see _ext), not
# from this server's root; test_the_not_found_page_works_at_any_depth serves it as Pages does.
SKIPPED_PAGES = {"genindex.html", "search.html", "404.html"}
TIMEOUT_MS = 30_000  # loading one page, MathJax included
# A typical desktop window: 1440 px is a common laptop width (and the theme's page stops
# growing at 90rem = 1440 px, so every wider window lays the article out the same way).
VIEWPORT = {"width": 1440, "height": 900}
# Code blocks are measured at these window widths (px): the typical desktop, and the two most
# common laptop widths below it (a 1366 x 768 and a 1280 x 800 screen).
CODE_WIDTHS = (1440, 1366, 1280)
# A phone (an iPhone 12 to 15 is 390 x 844 CSS px), emulated as one: touch, a mobile viewport.
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
PHONE_WIDTH = PHONE["viewport"]["width"]
AXE = ROOT / "assets" / "vendor" / "axe.min.js"  # `make assets` copies it from node_modules
AXE_IMPACTS = {"serious", "critical"}  # what fails; "minor" and "moderate" findings do not
BERTVIZ_TIMEOUT_MS = 15_000  # require.js, d3 and jQuery load, then each view draws
NO_BUILD = "<no _build/html>"  # the page id used when there is nothing to test

BOOK_TITLE = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["title"]

# Console messages of type "error" that are expected and harmless: (regex, why).
# Keep it empty unless a real need appears, and explain each entry precisely.
ALLOWED_CONSOLE_ERRORS: list[tuple[str, str]] = []


_REDIRECT = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)"', re.IGNORECASE)


def _html_files() -> dict[str, str | None]:
    """Every HTML file of the build that a reader can open, with its redirect target.

    Maps the path relative to `_build/html` to None for a page, or to the page it
    sends the reader to for a redirect stub (Jupyter Book writes `index.html` as
    one when the root document is not called `index`).
    """
    files: dict[str, str | None] = {}
    for path in sorted(BUILD.rglob("*.html")) if BUILD.is_dir() else []:
        rel = path.relative_to(BUILD)
        if not SKIPPED_PARTS.isdisjoint(rel.parts[:-1]) or rel.as_posix() in SKIPPED_PAGES:
            continue
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
        match = _REDIRECT.search(head) if "<article" not in head else None
        files[rel.as_posix()] = match[1] if match else None
    return files


def built_pages() -> list[str]:
    """Every page of the built book (not redirect stubs), relative to `_build/html`."""
    return [name for name, target in _html_files().items() if target is None] or [NO_BUILD]


def redirects() -> list[tuple[str, str]]:
    """`(stub, target)` for every redirect stub of the build."""
    return [(name, target) for name, target in _html_files().items() if target is not None]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes `page_name` runs once per built page, named after it."""
    if "page_name" in metafunc.fixturenames:
        metafunc.parametrize("page_name", built_pages())
    if "code_width" in metafunc.fixturenames:
        metafunc.parametrize("code_width", CODE_WIDTHS, ids=[f"{w}px" for w in CODE_WIDTHS])
    if "redirect" in metafunc.fixturenames:
        found = redirects()
        metafunc.parametrize("redirect", found, ids=[stub for stub, _ in found])


def _no_chromium() -> str | None:
    """Why the browser test cannot run here, or None if it can."""
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return None
    return (
        f"browser test skipped: no Chromium at {CHROMIUM} "
        "(apt-get install chromium, or set ATTNBOOK_CHROMIUM)"
    )


@pytest.hookimpl(trylast=True)  # after `-m` has deselected what it deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without Chromium, report one skipped test with one line, not one per page and check."""
    reason = _no_chromium()
    browser_items = [item for item in items if item.get_closest_marker("browser")]
    if reason is None or not browser_items:
        return
    first, rest = browser_items[0], browser_items[1:]
    first.add_marker(pytest.mark.skip(reason=f"{reason}; {len(browser_items)} tests not run"))
    if rest:
        config.hook.pytest_deselected(items=rest)
        items[:] = [item for item in items if item not in rest]


@pytest.fixture(scope="session")
def build_dir() -> Path:
    """The built book under test (BUILD): where a page's images are read from."""
    return BUILD


@pytest.fixture(scope="session")
def book_title() -> str:
    return BOOK_TITLE


@pytest.fixture(scope="session")
def book_pages() -> list[str]:
    """Every page of the built book, as `page_name` takes them."""
    return built_pages()


@pytest.fixture(scope="session")
def page_source() -> Callable[[str], str]:
    """`page_source(name)`: the HTML file of a built page, as the server sends it."""
    return lambda name: (BUILD / name).read_text(encoding="utf-8")


# One round trip gathers everything the tests check. It runs after MathJax has
# finished typesetting (or was found missing). The "article" is the page's main
# text (sphinx-book-theme's <article class="bd-article">, else <main>, else <body>).
COLLECT_JS = page_js(r"""
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
      || document.body;
  const snippet = (s) => s.replace(/\s+/g, " ").trim().slice(0, 80);

  const images = [...article.querySelectorAll("img")];
  await loadImages(images, 10000);  // 10 s at most
  const maths = mathsIn(article);
  const untypeset = maths.filter((m) => !isTypeset(m));

  return {
    title: document.title,
    h1: [...article.querySelectorAll("h1")].map((h) => snippet(h.textContent)),
    mathCount: maths.length,
    untypeset: untypeset.map((m) => m.tagName.toLowerCase() + ": " + snippet(m.textContent)),
    prose: proseIn(article),
    images: images.map((img) => ({
      src: img.getAttribute("src"),
      loaded: imageLoaded(img),
      alt: (img.getAttribute("alt") || "").trim(),
    })),
    // The smallest character MathJax drew (a script of a script), and its formula.
    smallestMath: [...article.querySelectorAll("mjx-container mjx-c")]
      .map((c) => ({
        px: parseFloat(getComputedStyle(c).fontSize),
        formula: snippet((c.closest("mjx-container").querySelector("mjx-assistive-mml")
            || c.closest("mjx-container")).textContent),
      }))
      .reduce((small, c) => (small && small.px <= c.px ? small : c), null),
    figures: [...article.querySelectorAll("figure")].map((f) => ({
      id: f.id || (f.querySelector("img") || {}).src || "(no id)",
      caption: snippet((f.querySelector("figcaption") || {}).textContent || ""),
    })),
  };
""")

# Second round trip, after COLLECT_JS: opens every dropdown (solutions, hidden cells) so
# that their code is measured and audited too, then looks at bertviz's views and the icons.
LAYOUT_JS = page_js(r"""
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
      || document.body;
  openDropdowns();
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));

  // bertviz's views: the root <div id="bertviz-..."> and what its script drew.
  const bertviz = [...article.querySelectorAll('div[id^="bertviz-"]')].map((view) => ({
    id: view.id,
    kind: view.querySelector("select#layer") ? "head_view" : "model_view",
    svgs: view.querySelectorAll("svg").length,
    texts: view.querySelectorAll("svg text").length,
    lines: view.querySelectorAll("svg line").length,
    width: Math.round((view.querySelector("svg") || {getBoundingClientRect: () => ({})})
        .getBoundingClientRect().width || 0),
    // The widest of its drawings against the column it sits in (the article's width).
    widest: Math.round(Math.max(0, ...[...view.querySelectorAll("svg")]
        .map((svg) => svg.getBoundingClientRect().width))),
    column: Math.round(article.getBoundingClientRect().width
        - parseFloat(getComputedStyle(article).paddingLeft)
        - parseFloat(getComputedStyle(article).paddingRight)),
  }));

  // <link rel="icon">: fetched again from the local server, to see that it loads.
  const icons = [];
  for (const link of document.querySelectorAll('link[rel~="icon"]')) {
    let status = 0, type = "";
    try {
      const response = await fetch(link.href);
      status = response.status;
      type = response.headers.get("content-type") || "";
      if (response.ok && (await response.arrayBuffer()).byteLength === 0) status = -1;
    } catch (error) { status = 0; }
    icons.push({href: link.getAttribute("href"), status, type});
  }
  // The front door (_ext/attnbook_book.py): a chapter's facts under its title, the start
  // page's buttons; each local link to a page or a notebook fetched, to see that it is
  // there (not the PDF and the zip, which only the Pages workflow puts beside the HTML).
  const facts = article.querySelector(".attnbook-chapter-facts");
  const links = [...article.querySelectorAll(".attnbook-chapter-facts a, .attnbook-start a")];
  const frontDoor = {
    facts: facts ? facts.textContent.replace(/\s+/g, " ").trim() : null,
    factsAfterTitle: !!(facts && facts.previousElementSibling
        && facts.previousElementSibling.tagName === "H1"),
    start: !!article.querySelector(".attnbook-start"),
    links: [],
    // The chapter map's boxes (an SVG in the page, see _ext): their links and names.
    mapLinks: [...article.querySelectorAll(".attnbook-chapter-map a")].map((a) => ({
      href: a.getAttribute("href"), name: a.getAttribute("aria-label") || "",
    })),
    // A link around the map (where a tap between its boxes would lead), if any.
    mapInLink: [...article.querySelectorAll(".attnbook-chapter-map")]
        .map((map) => map.parentElement.closest("a[href]")).filter((a) => a)
        .map((a) => a.getAttribute("href")),
  };
  for (const link of links) {
    let status = null;
    if (link.href.startsWith(location.origin) && /\.(html|ipynb)$/.test(link.pathname)) {
      try { status = (await fetch(link.href, {method: "HEAD"})).status; } catch (e) { status = 0; }
    }
    frontDoor.links.push({text: link.textContent.trim(), href: link.getAttribute("href"), status});
  }
  // The text a link around a cell output's image shows (the phone's cue to enlarge: none here).
  const figureLinkText = [...article.querySelectorAll(".cell_output a[href] img")]
      .map((img) => img.closest("a").innerText.replace(/\s+/g, " ").trim()).filter((t) => t);
  return {bertviz, icons, frontDoor, figureLinkText};
""")

# Every code block (cell inputs, outputs, code in the prose), every dropdown open: its width
# and its longest line. Run once per width of CODE_WIDTHS, the window resized in between.
# Every figure of the article as drawn: images (their file, pixel and rendered widths) and the
# chapter map, which the page holds as an inline SVG (its file's name, its width in pt and
# smallest text, from the data attributes _ext writes; of its wide and narrow versions, the one
# shown). test_figure_text_is_legible reads the rest from the files.
FIGURES_JS = r"""
async () => {
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
      || document.body;
  const images = [...article.querySelectorAll("img")].filter((image) => image.offsetParent)
      .map((image) => ({
        kind: "img", src: image.currentSrc || image.src, alt: (image.alt || "").slice(0, 60),
        naturalWidth: image.naturalWidth, width: image.getBoundingClientRect().width,
      }));
  const maps = [...article.querySelectorAll("svg[data-smallest-text-pt]")]
      .filter((svg) => svg.getBoundingClientRect().width > 0).map((svg) => ({
    kind: "svg", src: svg.dataset.figure || "", alt: svg.getAttribute("aria-label") || "",
    widthPt: parseFloat(svg.getAttribute("width")), width: svg.getBoundingClientRect().width,
    smallestPt: parseFloat(svg.dataset.smallestTextPt),
  }));
  return images.concat(maps);
}
"""

CODE_BLOCKS_JS = r"""
async () => {
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
      || document.body;
  return [...article.querySelectorAll("pre")]
    .filter((pre) => pre.getClientRects().length > 0)
    .map((pre) => {
      const lines = pre.textContent.replace(/\n$/, "").split("\n");
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
      return {
        kind: pre.closest(".cell_output") ? "output" : pre.closest(".cell_input") ? "input"
            : "code block",
        cell: (pre.closest(".cell") || {}).id || "",
        section: ((pre.closest("section") || {}).id) || "",
        scrollWidth: pre.scrollWidth,
        clientWidth: pre.clientWidth,
        fontSize: parseFloat(getComputedStyle(pre).fontSize),
        longest: longest.length,
        line: longest.trim().slice(0, 60),
      };
    });
}
"""

# axe-core's audit of the whole page (theme included), after LAYOUT_JS opened the dropdowns.
# Each violating node is reported with its own impact and CSS selector.
AXE_JS = r"""
async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.flatMap((rule) => rule.nodes.map((node) => ({
    rule: rule.id,
    impact: node.impact || rule.impact,
    target: node.target.join(" "),
    help: rule.help,
    summary: (node.failureSummary || "").replace(/\s+/g, " ").slice(0, 200),
  })));
}
"""

# Hide require.js's `define` from axe.min.js while it loads: axe's bundle registers itself
# and some of its parts as AMD modules when it finds one, which makes require.js (on pages
# with bertviz views) throw "Mismatched anonymous define()". axe still sets `window.axe`.
AXE_WRAPPER = "(function (define, module, exports) {{\n{source}\n}})();"


@dataclass
class PageReport:
    """What one page looked like once loaded, for the tests to judge."""

    name: str
    facts: dict = field(default_factory=dict)  # the result of COLLECT_JS
    mathjax_problem: str | None = None  # why MathJax did not finish, if it did not
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    blocked: list[tuple[str, str]] = field(default_factory=list)  # (resource type, URL)
    failed_local: list[str] = field(default_factory=list)  # local URLs answered >= 400
    layout: dict = field(default_factory=dict)  # the result of LAYOUT_JS
    code: dict[int, list[dict]] = field(default_factory=dict)  # CODE_BLOCKS_JS, by width
    figures: dict[int, list[dict]] = field(default_factory=dict)  # FIGURES_JS, by width
    # For each element that shows one of EMOJI (at most EMOJI_PROBES): its text and the
    # fonts Chromium drew it with (DevTools' CSS.getPlatformFontsForNode).
    emoji: list[tuple[str, list[str]]] = field(default_factory=list)
    axe: list[dict] | None = None  # axe-core's violations (None: axe.min.js is missing)

    def errors(self) -> list[str]:
        """Console errors (less the allowed ones), uncaught exceptions, local HTTP errors."""
        allowed = [re.compile(pattern) for pattern, _why in ALLOWED_CONSOLE_ERRORS]
        found = [
            f"console: {text}"
            for text in self.console_errors
            if not any(pattern.search(text) for pattern in allowed)
        ]
        found += [f"uncaught: {text}" for text in self.page_errors]
        found += [f"HTTP {line}" for line in self.failed_local]
        return found


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    reason = _no_chromium()
    if reason:
        pytest.skip(reason)
    return CHROMIUM


@pytest.fixture(scope="session")
def book_url(chromium_path: Path) -> Iterator[str]:
    """Serve `_build/html` on 127.0.0.1 and yield its base URL (with a trailing slash)."""
    if not (BUILD / "index.html").is_file():
        pytest.fail(
            f"{BUILD} has no index.html: build the book first "
            "(`make book`, or `make test`, which builds it before this test)",
            pytrace=False,
        )
    with serve(BUILD) as url:  # from the server's root; a missing file answers 404
        yield url


@pytest.fixture(scope="session")
def chromium(chromium_path: Path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium_path), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def _offline_page(browser, base: str, report: PageReport, **options) -> Iterator:
    """A page in a fresh browser context (`options`) that can reach `base` and nothing else.

    What it logs, throws, is refused or fails to load is noted in `report`.
    """
    context = browser.new_context(service_workers="block", **options)
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)

        def on_request(route):  # the local server only; everything else is refused
            request = route.request
            if request.url.startswith(base):
                route.continue_()
            else:
                report.blocked.append((request.resource_type, request.url))
                route.abort()

        def on_console(message):
            if message.type == "error":
                report.console_errors.append(message.text)

        def on_response(response):
            if response.status >= 400 and response.url.startswith(base):
                report.failed_local.append(f"{response.status} {response.url}")

        page.route("**/*", on_request)
        page.on("console", on_console)
        page.on("pageerror", lambda error: report.page_errors.append(str(error)))
        page.on("response", on_response)
        yield page
    finally:
        context.close()


# The symbols the exercise checkers print (src/attnbook/exercises): not in the text fonts of
# many systems, so the book serves an emoji font for them (attnbook.css).
EMOJI = "⏳✅❌"
EMOJI_PROBES = 12  # elements looked at per page
# Marks the innermost elements whose own text holds one of EMOJI, for DevTools to find.
EMOJI_MARK_JS = r"""
([symbols, limit]) => {
  const walker = document.createTreeWalker(document.querySelector("article") || document.body,
      NodeFilter.SHOW_TEXT);
  const found = new Set();
  for (let node = walker.nextNode(); node && found.size < limit; node = walker.nextNode()) {
    if ([...symbols].some((s) => node.textContent.includes(s))
        && node.parentElement.getClientRects().length > 0) {
      found.add(node.parentElement);
    }
  }
  [...found].forEach((element) => element.setAttribute("data-emoji-probe", ""));
  return found.size;
}
"""


def _emoji_fonts(page) -> list[tuple[str, list[str]]]:
    """The fonts Chromium drew each element showing one of EMOJI with (see PageReport)."""
    if not page.evaluate(EMOJI_MARK_JS, [EMOJI, EMOJI_PROBES]):
        return []
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        found = []
        selector = {"nodeId": root, "selector": "[data-emoji-probe]"}
        for node in cdp.send("DOM.querySelectorAll", selector)["nodeIds"]:
            fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
            text = cdp.send("DOM.getOuterHTML", {"nodeId": node})["outerHTML"]
            symbols = "".join(symbol for symbol in EMOJI if symbol in text)
            found.append((symbols, [font["familyName"] for font in fonts]))
        return found
    finally:
        cdp.detach()


def _open(browser, base: str, name: str, settle: Callable) -> PageReport:
    """Open `name` offline, let it settle (`settle(page, report)`), and gather a report."""
    report = PageReport(name)
    with _offline_page(browser, base, report, viewport=VIEWPORT) as page:
        page.goto(base + name, wait_until="load")
        settle(page, report)
        _wait_for_bertviz(page)
        report.facts = page.evaluate(COLLECT_JS)
        report.layout = page.evaluate(LAYOUT_JS)
        report.emoji = _emoji_fonts(page)
        if AXE.is_file():
            page.add_script_tag(content=AXE_WRAPPER.format(source=AXE.read_text(encoding="utf-8")))
            report.axe = _audit(page)
        for width in CODE_WIDTHS:
            page.set_viewport_size({**VIEWPORT, "width": width})
            report.code[width] = page.evaluate(CODE_BLOCKS_JS)
            report.figures[width] = page.evaluate(FIGURES_JS)
    return report


# The theme's FontAwesome script swaps every <i> icon for an <svg> after the page has loaded;
# it marks <html> when it is done.
FONTAWESOME_DONE_JS = """
() => !document.querySelector("script[src*='fontawesome']")
  || document.documentElement.classList.contains("fontawesome-i2svg-complete")
"""


def _audit(page) -> list[dict]:
    """axe-core's violations once the theme's scripts have settled: after FontAwesome has
    swapped its icons, and, when the audit finds a violation that fails the test (impact
    in AXE_IMPACTS), only if a second audit a second later still finds it (a state the page
    passes through while it sets up is not one a reader stays in).

    The colour-mode button's label-content-name-mismatch that failed two fresh-clone runs
    (chapter 10's page in one, chapter 3's in another) was not such a passing state: it
    lasted, because FontAwesome had drawn the icons, with their titles, before attnbook.js
    ran. attnbook.js now quiets them in either order
    (test_icon_buttons_keep_their_names_when_the_icons_are_drawn_first)."""
    page.wait_for_function(FONTAWESOME_DONE_JS, timeout=15_000)
    found = page.evaluate(AXE_JS)
    if any(v["impact"] in AXE_IMPACTS for v in found):
        page.wait_for_timeout(1000)
        again = {(v["rule"], v["target"]) for v in page.evaluate(AXE_JS)}
        found = [
            v for v in found if v["impact"] not in AXE_IMPACTS or (v["rule"], v["target"]) in again
        ]
    return found


# On a phone: does the page pan sideways (is the document wider than the screen), and if so,
# which elements stick out past the right edge with no scrolling box around them (the
# innermost ones: the culprits, not the containers they widen).
PAN_JS = r"""
() => {
  const width = document.documentElement.clientWidth;
  const scrollWidth = document.documentElement.scrollWidth;
  const culprits = [];
  if (scrollWidth > width) {
    const free = (element) => {
      for (let a = element.parentElement; a && a !== document.body; a = a.parentElement) {
        if (getComputedStyle(a).overflowX !== "visible") return false;
      }
      return true;
    };
    const out = (element) => element.getBoundingClientRect().right > width + 0.5;
    for (const element of document.body.querySelectorAll("*")) {
      if (out(element) && free(element) && ![...element.children].some(out)) {
        const text = element.textContent.replace(/\s+/g, " ").trim().slice(0, 60);
        culprits.push(`<${element.tagName.toLowerCase()} class="${element.className}"> ` +
            `${Math.round(element.getBoundingClientRect().right)} px: ${text}`);
      }
    }
  }
  return {width, scrollWidth, culprits: culprits.slice(0, 8)};
}
"""

# On a phone: each visible cell output whose lines the browser broke (more lines on screen than
# in its text: a table's or a tensor's rows scrambled), with its first line.
WRAPPED_OUTPUTS_JS = r"""
() => [...document.querySelectorAll(".cell_output pre")]
  .filter((pre) => pre.getClientRects().length > 0)
  .map((pre) => {
    const text = pre.textContent.replace(/\n$/, "");
    const range = document.createRange();
    range.selectNodeContents(pre);
    // One line box per distinct top (an emoji's box may sit a pixel or two off its line's).
    const tops = [...range.getClientRects()].filter((r) => r.width > 0).map((r) => r.top)
        .sort((a, b) => a - b);
    const shown = tops.filter((top, i) => i === 0 || top - tops[i - 1] > 4).length;
    return {lines: text.split("\n").length, shown, first: text.split("\n")[0]};
  })
  .filter((output) => output.shown > output.lines)
  .map((output) => `${output.lines} lines shown as ${output.shown}: ${output.first.slice(0, 60)}`)
"""

# The sidebars' buttons of the article header, and the dialog each opens on a narrow screen
# (pydata-sphinx-theme moves the sidebar's contents into it).
SIDEBAR_DIALOGS = {
    "chapter list": (".bd-header-article .primary-toggle", "pst-primary-sidebar-modal"),
    "page contents": (".bd-header-article .secondary-toggle", "pst-secondary-sidebar-modal"),
}

# Whether `dialog` is open, and the pages its links lead to that are fully on screen (a
# link scrolled below the fold counts: the dialog scrolls; one off to a side does not).
DIALOG_JS = r"""
(id) => {
  const dialog = document.getElementById(id);
  const width = document.documentElement.clientWidth;
  const shown = [...(dialog ? dialog.querySelectorAll("a[href]") : [])].filter((link) => {
    const box = link.getBoundingClientRect();
    return box.width > 0 && box.height > 0 && box.left >= 0 && box.right <= width + 0.5
        && getComputedStyle(link).visibility === "visible";
  });
  return {
    open: !!(dialog && dialog.open),
    pages: shown.map((link) => link.href.split("#")[0]),
    anchors: shown.filter((link) => link.getAttribute("href").startsWith("#")).length,
  };
}
"""


# On a phone: each bertviz view drawn at a fixed width (the model view, 970 px): its smallest
# label as shown (its font size times the drawing's scale), whether its right edge can be
# reached (it fits the screen, or a box around it scrolls sideways that far), and the text
# of the visible hint just before it, if any (attnbook.js, attnbook.css).
BERTVIZ_PHONE_JS = r"""
() => [...document.querySelectorAll('div[id^="bertviz-"]')].flatMap((view) => {
  const svg = [...view.querySelectorAll("svg")].find((s) => Number(s.getAttribute("width")) > 0);
  if (!svg) return [];
  const box = svg.getBoundingClientRect();
  const scale = box.width / Number(svg.getAttribute("width"));
  const sizes = [...svg.querySelectorAll("text")]
      .map((text) => parseFloat(getComputedStyle(text).fontSize));
  let reach = document.documentElement.clientWidth;
  for (let a = svg.parentElement; a && a !== document.body; a = a.parentElement) {
    if (["auto", "scroll"].includes(getComputedStyle(a).overflowX)) {
      reach = a.getBoundingClientRect().left + a.scrollWidth;
      break;
    }
  }
  const hint = view.previousElementSibling;
  return [{
    id: view.id,
    smallestPx: Math.round(Math.min(...sizes) * scale * 10) / 10,
    shown: Math.round(box.width),
    reachable: box.right <= reach + 1,
    hint: hint && hint.getClientRects().length ? hint.textContent.trim() : "",
  }];
})
"""


# On a phone: each word of inline code in a table cell (docutils puts each in a span.pre) that
# the browser broke across lines, with its table's first header.
BROKEN_TABLE_CODE_JS = r"""
() => [...document.querySelectorAll(".bd-article td code span.pre, .bd-article th code span.pre")]
  .filter((word) => new Set([...word.getClientRects()].filter((r) => r.width > 0)
      .map((r) => Math.round(r.top))).size > 1)
  .map((word) => `${word.textContent} (table "${
      (word.closest("table").querySelector("th") || {textContent: ""}).textContent.trim()}")`)
"""


# On a phone: the lines the page's title (the article's <h1>) takes, its text only.
TITLE_LINES_JS = r"""
() => {
  const title = document.querySelector("article.bd-article h1");
  if (!title) return 0;
  const tops = new Set();
  const walker = document.createTreeWalker(title, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest(".headerlink") || !node.textContent.trim()) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    [...range.getClientRects()].filter((r) => r.width > 0)
        .forEach((r) => tops.add(Math.round(r.top)));
  }
  return tops.size;
}
"""


# Whether a figure's link scrolls sideways (a figure kept wider than the column), and whether
# the cue's sentence that says so is drawn: a function for FIGURE_LINKS_JS and
# TABLET_FIGURES_JS.
SCROLLING_JS = r"""
  const scrolling = (link) => ({
    scrolls: !!link && link.scrollWidth > link.clientWidth + 1,
    swipe: !!link && [...link.querySelectorAll(".attnbook-swipe")]
      .some((hint) => hint.getClientRects().length > 0),
  });
"""

# On a phone, every dropdown opened (a solution's figures too): each image of a cell output (the
# notebooks' figures), the link around it if any (its target, whether the keyboard reaches it,
# the text it shows), marked for DevTools to read the link's accessible name (`_link_names`).
FIGURE_LINKS_JS = page_js(
    SCROLLING_JS
    + r"""
  openDropdowns();
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  return [...document.querySelectorAll("article.bd-article .cell_output img")].map((img, i) => {
    const link = img.closest("a[href]");
    if (link) link.setAttribute("data-figure-link-probe", String(i));
    return {
      src: img.currentSrc || img.src,
      alt: (img.getAttribute("alt") || "").trim(),
      href: link ? link.href : null,
      focusable: !!link && link.tabIndex >= 0,
      shown: link ? link.innerText.replace(/\s+/g, " ").trim() : "",
      ...scrolling(link),
      name: null,
    };
  });
"""
)

# The same page turned into a tablet (TABLET), after FIGURE_LINKS_JS opened the dropdowns: the
# widest screen where attnbook.css keeps a figure wide and shows the cue; there some figures fit
# the column and some do not. Two frames for the layout and attnbook.js's marks to follow.
TABLET = {"width": 768, "height": 1024}
TABLET_FIGURES_JS = page_js(
    SCROLLING_JS
    + r"""
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  return [...document.querySelectorAll("article.bd-article .cell_output img")].map((img) => ({
    src: img.currentSrc || img.src,
    alt: (img.getAttribute("alt") || "").trim(),
    ...scrolling(img.closest("a[href]")),
  }));
"""
)


def _link_names(page, figures: list[dict]) -> None:
    """Fill in each figure's `name`: its link's accessible name as Chromium computes it."""
    if not any(figure["href"] for figure in figures):
        return
    cdp = page.context.new_cdp_session(page)
    try:
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        selector = {"nodeId": root, "selector": "[data-figure-link-probe]"}
        for node in cdp.send("DOM.querySelectorAll", selector)["nodeIds"]:
            attributes = cdp.send("DOM.getAttributes", {"nodeId": node})["attributes"]
            index = int(dict(zip(attributes[::2], attributes[1::2]))["data-figure-link-probe"])
            tree = cdp.send(
                "Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False}
            )
            names = [n.get("name", {}).get("value", "") for n in tree["nodes"] if not n["ignored"]]
            figures[index]["name"] = names[0] if names else ""
    finally:
        cdp.detach()


@dataclass
class PhoneReport(PageReport):
    """One page on a phone: whether it pans, its figures (`figures[PHONE_WIDTH]`, FIGURES_JS),
    its bertviz views drawn at a fixed width (BERTVIZ_PHONE_JS), what tapping each sidebar
    button opened and, every dropdown open, the links around the cell outputs' images
    (FIGURE_LINKS_JS)."""

    pan: dict = field(default_factory=dict)  # the result of PAN_JS
    bertviz: list[dict] = field(default_factory=list)  # the result of BERTVIZ_PHONE_JS
    broken_table_code: list[str] = field(default_factory=list)  # BROKEN_TABLE_CODE_JS's
    title_lines: int = 0  # TITLE_LINES_JS's
    wrapped_outputs: list[str] = field(default_factory=list)  # WRAPPED_OUTPUTS_JS's result
    figure_links: list[dict] = field(default_factory=list)  # FIGURE_LINKS_JS's, names added
    tablet_figures: list[dict] = field(default_factory=list)  # TABLET_FIGURES_JS's, at TABLET
    # For each of SIDEBAR_DIALOGS: None if the page shows no such button, else DIALOG_JS's
    # result after the tap (`open` False if nothing opened within DIALOG_TIMEOUT_MS).
    dialogs: dict[str, dict | None] = field(default_factory=dict)


DIALOG_TIMEOUT_MS = 5_000  # the dialog opens at once; its content slides in over 0.2 s


def _open_on_a_phone(browser, base: str, name: str) -> PhoneReport:
    """Open `name` offline on an emulated phone; measure the pan, tap each sidebar button."""
    report = PhoneReport(name)
    with _offline_page(browser, base, report, **PHONE) as page:
        page.goto(base + name, wait_until="load")
        report.pan = page.evaluate(PAN_JS)
        report.wrapped_outputs = page.evaluate(WRAPPED_OUTPUTS_JS)
        report.broken_table_code = page.evaluate(BROKEN_TABLE_CODE_JS)
        report.title_lines = page.evaluate(TITLE_LINES_JS)
        report.figures[PHONE_WIDTH] = page.evaluate(FIGURES_JS)
        _wait_for_bertviz(page)
        report.bertviz = page.evaluate(BERTVIZ_PHONE_JS)
        for what, (button, dialog) in SIDEBAR_DIALOGS.items():
            target = page.locator(button)
            if target.count() == 0 or not target.first.is_visible():
                report.dialogs[what] = None
                continue
            target.first.tap()
            with contextlib.suppress(Exception):  # not opened: the test says so
                page.wait_for_function(
                    f"() => ({DIALOG_JS})({dialog!r}).pages.length > 0",
                    timeout=DIALOG_TIMEOUT_MS,
                )
            report.dialogs[what] = page.evaluate(DIALOG_JS, dialog)
            page.keyboard.press("Escape")
            with contextlib.suppress(Exception):
                page.wait_for_function(
                    f"() => !document.getElementById({dialog!r}).open", timeout=DIALOG_TIMEOUT_MS
                )
        report.figure_links = page.evaluate(FIGURE_LINKS_JS)  # last: it opens the dropdowns
        _link_names(page, report.figure_links)
        page.set_viewport_size(TABLET)
        report.tablet_figures = page.evaluate(TABLET_FIGURES_JS)
    return report


def _wait_for_bertviz(page) -> None:
    """Give bertviz's views (if any) time to load their libraries and draw an SVG.

    A view that never draws is not an error here: the test of the views reports it.
    """
    with contextlib.suppress(Exception):  # a timeout: reported by test_bertviz_views_draw
        page.wait_for_function(
            """() => [...document.querySelectorAll('div[id^="bertviz-"]')]
                .every((view) => view.querySelector("svg line"))""",
            timeout=BERTVIZ_TIMEOUT_MS,
        )


def _wait_for_mathjax(page, report: PageReport) -> None:
    """Wait until MathJax has typeset the page; note in `report` if it never does."""
    if page.evaluate("() => !!window.MathJax && !window.MathJax.startup"):
        # MathJax's script is deferred, so by the load event it has run, or failed to load:
        # what is left is only the configuration object the page itself sets.
        report.mathjax_problem = (
            "MathJax's script did not load: was it blocked (a CDN) or missing? "
            "Run `make assets` before building the book"
        )
        return
    try:
        page.wait_for_function(
            "() => !window.MathJax || (window.MathJax.startup && window.MathJax.startup.promise)",
            timeout=15_000,
        )
        page.evaluate(MATHJAX_DONE_JS)
    except Exception as error:  # a timeout, or MathJax's own failure
        report.mathjax_problem = (
            f"MathJax never finished starting ({type(error).__name__}); "
            "was its script blocked or missing? Run `make assets` before building."
        )


@pytest.fixture(scope="session")
def visit(chromium, book_url: str) -> Callable[[str], PageReport]:
    """`visit(name)` opens a built page once and returns its (cached) `PageReport`."""
    cache: dict[str, PageReport | Exception] = {}

    def get(name: str) -> PageReport:
        if name == NO_BUILD:
            pytest.fail(f"nothing to test: {BUILD} has no pages; build the book first")
        if name not in cache:
            try:
                cache[name] = _open(chromium, book_url, name, _wait_for_mathjax)
            except Exception as error:  # remembered, so the other tests of the page fail fast
                cache[name] = error
        found = cache[name]
        if isinstance(found, Exception):
            pytest.fail(f"{name}: the page could not be opened: {found}", pytrace=False)
        return found

    return get


@pytest.fixture(scope="session")
def visit_on_a_phone(chromium, book_url: str) -> Callable[[str], PhoneReport]:
    """`visit_on_a_phone(name)`: the page on an emulated phone (`PHONE`), once, cached."""
    cache: dict[str, PhoneReport | Exception] = {}

    def get(name: str) -> PhoneReport:
        if name == NO_BUILD:
            pytest.fail(f"nothing to test: {BUILD} has no pages; build the book first")
        if name not in cache:
            try:
                cache[name] = _open_on_a_phone(chromium, book_url, name)
            except Exception as error:
                cache[name] = error
        found = cache[name]
        if isinstance(found, Exception):
            pytest.fail(f"{name} on a phone: the page could not be opened: {found}", pytrace=False)
        return found

    return get


@pytest.fixture(scope="session")
def open_page(chromium, book_url: str) -> Callable[[str, Callable], PageReport]:
    """`open_page(name, settle)`: like `visit`, uncached, with a custom wait."""
    return lambda name, settle: _open(chromium, book_url, name, settle)
