"""Sphinx glue for the book: offline front-end files, accessibility, the instructors' build.

- If ``make assets`` has copied MathJax, require.js, d3, jQuery and Noto Emoji into
  ``assets/vendor/``, serve them from the book itself so every page renders
  without a network; otherwise keep the CDN defaults and say so in one line.
- bertviz's views (chapter 13) load require.js, d3 and jQuery from cdnjs; on the
  pages that hold one, those URLs are rewritten to the vendored copies
  (``offline_bertviz``), page-relative, so the views draw offline too.
- attnbook.interactive's Plotly figures (chapters 2 and 4) load plotly.js from Plotly's
  CDN; the book serves the copy inside the installed plotly pip package instead
  (``offline_plotly``), so they draw offline too. ``make pdf`` shows their static PNG
  (``nb_mime_priority_overrides`` in _config.yml).
- ``static/attnbook.css`` and ``static/attnbook.js``: the sidebar buttons work (phones
  included), code fits the column from 1280 px on, no page pans sideways on a phone, link
  contrast in admonitions, names of the theme's icon buttons (the browser test checks
  every page); the favicon's PNG fallback for browsers without SVG icons.
- ``ATTNBOOK_HIDE_SOLUTIONS=1`` (``make book HIDE_SOLUTIONS=1``) removes every
  ``{solution}`` block, and every notebook cell tagged ``solution``, for an edition
  handed to students before a deadline.
- The front door: under each chapter's title a line with its reading and exercise times
  (the estimates of instructors.md, computed by tools/exercise_inventory.py), what it
  builds on (course.yml) and buttons to open it on Colab and download the notebook; on the
  start page, where intro.md leaves an empty ``<div class="attnbook-start">``, buttons to
  start with chapter 1, open it on Colab, and download the PDF and the student notebooks
  (which the Pages workflow publishes beside the HTML); the chapter map's boxes link their
  chapters (the SVG is put in the page, where links work).
- Narrow diagrams: a diagram of ``images/`` drawn twice, ``NAME.svg`` and ``NAME_narrow.svg``
  (tools/draw_*.py), shows the narrow one on a phone (``NARROW_MEDIA``), where the wide one's
  text would shrink below 10 px: the chapter map as a second SVG in the page, which
  attnbook.css shows instead of the first; any other as an HTML <picture>.
- Figures on a phone: each image that links its own file (Sphinx links every image shown
  smaller than its file, the notebooks' figures included) holds a cue, "Tap to enlarge", that
  attnbook.css shows on a phone's screen only (``enlarge_cues``); a figure whose file records
  its smallest text keeps the width at which that text measures 10 px there, in its link,
  which scrolls sideways (``phone_widths``).
- Figure numbers: only the chapters, which cite their figures by number, show them
  (``unnumbered_figures``: the start page's chapter map was "Fig. 1").
- ``404.html``, the page GitHub Pages sends for a missing URL at any depth: "Page not found",
  links to the start page, the search page and every chapter, all its URLs (styles, scripts,
  favicon, links) absolute from the site's path (``site_path``: ``/<repo>/`` of the
  repository's URL, or ``attnbook_site_path``); in no table of contents, not in the search
  index (`python -m tools.pages_server` serves a build as Pages does).

The folder is deliberately not called ``_static``: Jupyter Book injects every
script found in a ``_static`` folder into every page.
"""

from __future__ import annotations

import functools
import html as html_text
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
STATIC = Path(__file__).resolve().parent / "static"  # our CSS and JS, served from _static/
FAVICON_PNG = ROOT / "images" / "favicon.png"  # beside html_favicon (the SVG), for old browsers
MATHJAX = "vendor/mathjax/tex-mml-chtml.js"  # relative to the built book's _static/
# Noto Emoji (monochrome, SIL OFL), split by Unicode range: a page downloads only the parts
# holding a character that no font before it in attnbook.css's font lists has (the
# checkers' ⏳, ✅ and ❌ on a system without an emoji font showed as empty boxes).
EMOJI_CSS = "vendor/noto-emoji/noto-emoji.css"

# bertviz's HTML and JavaScript name these cdnjs files (any version): require.js in a
# <script src>, d3 and jQuery as require.js paths, without ".js". Each maps to the vendored
# copy, relative to _static/ and written the same way (require paths keep no ".js").
_CDNJS = r"https://cdnjs\.cloudflare\.com/ajax/libs"
BERTVIZ_CDN = {
    re.compile(_CDNJS + r"/require\.js/[0-9.]+/require(?:\.min)?\.js"): "vendor/require.js",
    re.compile(_CDNJS + r"/d3/[0-9.]+/d3(?:\.min)?(?:\.js)?(?=['\"])"): "vendor/d3.min",
    re.compile(_CDNJS + r"/jquery/[0-9.]+/jquery(?:\.min)?(?:\.js)?(?=['\"])"): "vendor/jquery.min",
}
# What only a bertviz view holds: its root <div id="bertviz-<hex>"> or the parameter naming it.
BERTVIZ_VIEW = re.compile(r"""id=["']bertviz-[0-9a-f]+["']|["']root_div_id["']\s*:""")
# bertviz's drop-down lists have a text before them ("Layer:") but no <label>: named here.
BERTVIZ_SELECTS = {"layer": "Layer", "filter": "Attention"}


def offline_bertviz(html: str, static: str) -> str:
    """Point bertviz's cdnjs URLs in `html` at the vendored files under `static`; name its lists.

    Args:
        html: the body of one page.
        static: the page-relative URL of the built book's ``_static/`` folder, ending in
            "/" (``"../_static/"`` for ``chapters/13_inside_attention.html``).

    Returns:
        `html` with require.js's <script src> and the d3 and jQuery require paths
        replaced by ``static + "vendor/..."``, require.js's load timeout switched off
        (``waitSeconds: 0``: the files are local, and a long page still busy typesetting
        must not make it give up after its default 7 s), model views drawn in light
        mode as head views are (``display_mode``: a black block beside a white one was
        the default), and an ``aria-label`` on each of the views' <select> lists (layer,
        attention kind); unchanged if the page holds no bertviz view (another page's link
        to cdnjs stays as written).
    """
    if not BERTVIZ_VIEW.search(html):
        return html
    for pattern, vendored in BERTVIZ_CDN.items():
        html = pattern.sub(static + vendored, html)
    html = re.sub(
        r"require\.config\(\{(?!\s*waitSeconds)", "require.config({ waitSeconds: 0,", html
    )
    # model_view draws on black by default, head_view on white: both on white, as the page.
    html = html.replace('"display_mode": "dark"', '"display_mode": "light"')
    for select_id, label in BERTVIZ_SELECTS.items():
        html = html.replace(
            f'<select id="{select_id}">', f'<select id="{select_id}" aria-label="{label}">'
        )
    return html


# attnbook.interactive's figures load plotly.js from Plotly's CDN (so they draw on Colab and in
# Jupyter); the book serves the copy that the installed plotly package ships instead, as
# _static/plotly.min.js, and rewrites the URL on the pages that hold one (`offline_plotly`).
PLOTLY_CDN = re.compile(r"https://cdn\.plot\.ly/plotly-([0-9][0-9A-Za-z.+-]*?)\.min\.js")
PLOTLY_JS = "plotly.min.js"  # relative to the built book's _static/


@functools.cache
def _plotly_js() -> tuple[Path, str] | None:
    """The installed plotly package's plotly.min.js and its version, or None without plotly."""
    try:
        import plotly
        from plotly.offline import get_plotlyjs_version
    except ImportError:
        return None
    path = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    return (path, get_plotlyjs_version()) if path.is_file() else None


def offline_plotly(html: str, static: str) -> tuple[str, set[str]]:
    """Point the Plotly CDN URLs in `html` at the book's own copy under `static`.

    Args:
        html: the body of one page.
        static: the page-relative URL of the built book's ``_static/`` folder, ending in "/".

    Returns:
        `html` with every ``https://cdn.plot.ly/plotly-<version>.min.js`` replaced by
        ``static + "plotly.min.js"``, and the set of versions the page asked for (empty:
        the page is unchanged).
    """
    versions = set(PLOTLY_CDN.findall(html))
    return PLOTLY_CDN.sub(static + PLOTLY_JS, html), versions


def _vendored() -> bool:
    """Whether `make assets` has filled assets/vendor/ (then it is served as _static/)."""
    return (ASSETS / MATHJAX).is_file()


def _configure(app: Sphinx, config: Config) -> None:
    config.html_static_path = [*config.html_static_path, str(STATIC)]
    if FAVICON_PNG.is_file():
        config.html_static_path.append(str(FAVICON_PNG))
    # The browser test's axe-core is vendored for the test, not served by the book.
    config.exclude_patterns = [*config.exclude_patterns, "vendor/axe.min.js"]
    if _vendored():
        config.html_static_path = [*config.html_static_path, str(ASSETS)]
        config.mathjax_path = MATHJAX
        if (ASSETS / EMOJI_CSS).is_file():
            app.add_css_file(EMOJI_CSS)
        logger.info(
            "attnbook: MathJax, require.js, d3 and jQuery are served from the book (offline-ready)"
        )
    else:
        logger.info(
            "attnbook: assets/vendor/ not found (npm missing?): MathJax loads from its CDN, "
            "so pages need a network to typeset maths"
        )
    plotly_js = _plotly_js()
    if plotly_js is not None:
        config.html_static_path.append(str(plotly_js[0]))
        logger.info(f"attnbook: plotly.js {plotly_js[1]} is served from the book (offline-ready)")
    else:
        logger.info(
            "attnbook: plotly is not installed: interactive figures load plotly.js from its CDN"
        )
    if os.environ.get("ATTNBOOK_HIDE_SOLUTIONS", "0") not in ("", "0"):
        config.hide_solutions = True
        logger.info("attnbook: solutions are hidden (instructors' build)")


def _drop_duplicate_inline_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object
) -> None:
    """Keep one copy of each inline script of the page.

    Sphinx 7.4 lists an inline script twice when an extension adds it after the
    builder started (once with filename None, once with ""): sphinx-thebe's
    `const THEBE_JS_URL = ...` then runs twice and every page throws
    "Identifier 'THEBE_JS_URL' has already been declared" (the browser test sees it).
    """
    seen, unique = set(), []
    for js in context.get("script_files", []):
        attributes = tuple(sorted((key, str(value)) for key, value in js.attributes.items()))
        key = (js.filename or "", js.priority, attributes)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"][:] = unique


# MyST-NB's toggle of a `hide-cell`/`hide-input` cell: its aria-label ("Toggle hidden content")
# hides the visible "Show code cell content" from assistive technology (axe-core reports the
# mismatch as serious); without the label, the visible text is the button's name.
HIDDEN_CELL_TOGGLE = '<summary aria-label="Toggle hidden content">'


def named_toggles(html: str) -> str:
    """Let the visible text of each hidden-cell toggle in `html` be its accessible name."""
    return html.replace(HIDDEN_CELL_TOGGLE, "<summary>")


# Sphinx links an image shown smaller than its file to the file itself (html_scaled_image_link):
# every figure of the notebooks, drawn at twice the size it is shown at (attnbook.viz), and the
# diagrams given a width. On a phone, scaled down to the column, a figure's text measures 5 to
# 10 px; the link opens the file, where the phone's browser fits it to the screen and the
# reader can zoom in. Nothing said so: each such link gets a cue, "Tap to enlarge", which
# attnbook.css shows on a phone's screen only (not on a desktop, not on paper). Inside the
# link, the cue's words follow the image's alt text in the link's accessible name. A figure kept
# wider than the screen (see phone_widths below) scrolls sideways in its link, which nothing
# showed: the cue starts with a sentence that says so, which attnbook.css shows only while
# attnbook.js finds the link scrolling (not where the figure fits, as on most tablets).
_IMAGE_LINK = re.compile(
    r'(<a class="reference internal image-reference(?: [^"]*)?" href="([^"]+)">\s*'
    r'<img [^>]*?\bsrc="\2"[^>]*>)(\s*</a>)'
)
ENLARGE_CUE = (
    '<span class="attnbook-enlarge"> '  # the space parts the alt text from the cue's words
    '<span class="attnbook-swipe">Wider than the screen: swipe sideways. </span>'
    '<i class="fa-solid fa-magnifying-glass-plus" aria-hidden="true"></i>Tap to enlarge</span>'
)


def enlarge_cues(html: str) -> str:
    """`html` with ENLARGE_CUE inside each link of an image to its own file, after the image."""
    return _IMAGE_LINK.sub(lambda match: match[1] + ENLARGE_CUE + match[3], html)


# On a phone the column is about 342 px wide, and a figure scaled down to it showed its smallest
# text at 5 to 9 px. Each figure whose file records its smallest text (attnbook.viz: the
# notebooks' PNGs, the diagrams of images/) gets the width at which that text measures
# PHONE_FLOOR_PX (tools/figure_text.py), at most the width a desktop shows it at, as a CSS
# variable on its <img>: attnbook.css keeps it at least that wide on a phone, in its link
# (to its own file, added where Sphinx has none), which scrolls sideways. A diagram with a
# narrow version (NARROW_MEDIA) is left alone: that version is legible there.
PHONE_FLOOR_PX = 10.0  # tools/figure_text.py's, which the browser test holds the figures to
PHONE_WIDTH_VAR = "--attnbook-phone-width"
WIDE_FIGURE_CLASS = "attnbook-wide-figure"  # on the link that scrolls
_FIGURE_IMG = re.compile(
    r'(?P<link><a class="reference internal image-reference" href="(?P<href>[^"]+)">\s*)?'
    r'<img (?P<attrs>[^>]*?\bsrc="(?P<src>(?:\.\./)*_images/(?P<name>[^"/]+\.(?:png|svg)))"'
    r"[^>]*?)\s*/?>"
)
_STYLE_WIDTH = re.compile(r'\bstyle="[^"]*?\bwidth:\s*([0-9.]+)px')
PX_PER_PT = 96 / 72


def text_scale(path: Path) -> tuple[float, float] | None:
    """(smallest text / width, natural width in CSS px) of the figure file `path`, from what
    attnbook.viz records in it; None if it records nothing (or is no PNG or SVG)."""
    from attnbook.viz import PIXEL_DENSITY, png_smallest_text, svg_smallest_text

    if path.suffix == ".png":
        recorded = png_smallest_text(path.read_bytes())
        return (recorded[0] / recorded[1], recorded[1] / PIXEL_DENSITY) if recorded else None
    if path.suffix == ".svg":
        recorded = svg_smallest_text(path.read_text(encoding="utf-8"))
        return (recorded[0] / recorded[1], recorded[1] * PX_PER_PT) if recorded else None
    return None


def phone_widths(html: str, files: dict[str, Path], floor_px: float) -> str:
    """`html` with PHONE_WIDTH_VAR on each figure <img> of `files` (name in _images/ -> file)
    that records its smallest text: the width in CSS px at which that text is `floor_px`, at
    most the width of its style (else its file's natural width); its link to its own file
    (added if it has none) gets WIDE_FIGURE_CLASS. Diagrams with a narrow version are left
    as they are."""

    def widen(match: re.Match) -> str:
        path = files.get(match["name"])
        if path is None or (path.suffix == ".svg" and narrow_version(path).is_file()):
            return match[0]
        if match["link"] and match["href"] != match["src"]:
            return match[0]
        scale = text_scale(path) if path.is_file() else None
        if scale is None:
            return match[0]
        styled = _STYLE_WIDTH.search(match["attrs"])
        shown = float(styled[1]) if styled else scale[1]
        width = min(shown, math.ceil(floor_px / scale[0]))
        variable = f"{PHONE_WIDTH_VAR}: {width:g}px;"
        attrs = match["attrs"]
        if 'style="' in attrs:
            attrs = attrs.replace('style="', f'style="{variable} ', 1)
        else:
            attrs += f' style="{variable}"'
        link = f'<a class="reference internal image-reference {WIDE_FIGURE_CLASS}" '
        if match["link"]:
            opening = match["link"].replace('<a class="reference internal image-reference" ', link)
            return f"{opening}<img {attrs} />"
        return f'{link}href="{match["src"]}"><img {attrs} /></a>'

    return _FIGURE_IMG.sub(widen, html)


# The chapters cite their figures by number ({numref}: "Fig. 4.1", the chapter's number first).
# Sphinx numbers every figure with a caption, also outside the chapters: the start page's chapter
# map was "Fig. 1", which no text cites and which read as chapter 1's. There the number goes.
_FIGURE_NUMBER = re.compile(
    r'(<figcaption>\s*<p>)<span class="caption-number">Fig\. [0-9.]+ </span>'
)


def unnumbered_figures(html: str) -> str:
    """`html` without the number in any figure's caption (the caption's text stays)."""
    return _FIGURE_NUMBER.sub(r"\1", html)


# sphinx-exercise puts an exercise's title in parentheses, and each title ends with its level
# in parentheses: "Exercise 1.1 (The score matrix (easy))", and so does its solution's link.
_LEVEL_IN_TITLE = re.compile(r" \((easy|medium|harder)\)\)")


def exercise_levels(html: str) -> str:
    """`html` with each exercise title's level after a dot: "(The score matrix · easy)"."""
    return _LEVEL_IN_TITLE.sub(r" · \1)", html)


# sphinx-exercise titles a solution "Solution to" followed by a link whose text starts with a
# space ('Solution to<a ...> Exercise 1.1 (...)</a>'): the link's underline began under it.
_SOLUTION_LINK = re.compile(
    r'(<p class="admonition-title">[^<]*[^<\s])(<a class="reference internal" href="[^"]*">)\s+'
)


def solution_links(html: str) -> str:
    """`html` with the space before each solution title's link outside the link."""
    return _SOLUTION_LINK.sub(r"\1 \2", html)


# What the Pages workflow (.github/workflows/deploy-book.yml) puts beside the HTML, at the
# site's root, before it builds the HTML: `make pdf`'s book and `make student`'s zip. The
# start page links each only where the build's output folder has it (a local build does not).
PDF_NAME = "attention-from-scratch.pdf"
STUDENT_ZIP = "attnbook-student.zip"
START_MARK = '<div class="attnbook-start"></div>'  # in intro.md, where the buttons go
# The chapter map (tools/draw_chapter_map.py), whose boxes link their chapters: shown as an
# <img>, which follows no link, so the HTML of the start page holds the SVG itself. Sphinx
# links the <img> (shown at a width) to its file: that link goes too, or a tap on the map
# between its boxes opened the wide SVG file, also on a phone, which is shown the narrow map.
CHAPTER_MAP = ROOT / "images" / "chapter_map.svg"
_MAP_IMG = re.compile(
    r'(?P<link><a class="reference internal image-reference" href="[^"]*">\s*)?'
    r'<img alt="(?P<alt>[^"]*)" src="_images/chapter_map\.svg"[^>]*>(?(link)\s*</a>)'
)
# Where a phone shows a diagram's narrow version instead (attnbook.css says the same): below
# 720 px, the wide chapter map's 10.5 pt labels would render under 10 CSS px.
NARROW_MEDIA = "(max-width: 720px)"
NARROW = "_narrow"  # images/NAME_narrow.svg: the narrow version of images/NAME.svg


def narrow_version(path: Path) -> Path:
    """Where the narrow version of the diagram `path` (images/NAME.svg) would be."""
    return path.with_stem(path.stem + NARROW)


def inline_chapter_map(body: str, svg: str, narrow: str | None = None) -> str:
    """`body` with the chapter map's <img> replaced by `svg` itself (its links work there),
    named by the image's alt text, followed by the `narrow` map if there is one (which
    attnbook.css shows instead on a phone; its ids made its own), without the link to the
    image's file around it, if any; unchanged without an <img>.
    For a page at the book's root (the map's links are relative to it)."""
    match = _MAP_IMG.search(body)
    if not match:
        return body
    from attnbook.viz import svg_smallest_text

    maps = []
    for kind, text in (("wide", svg), ("narrow", narrow)):
        if text is None:
            continue
        text = text[text.index("<svg") :]  # no XML declaration or doctype inside HTML
        # The smallest text (viz.svg_metadata) stays readable for the browser test's floor.
        recorded = svg_smallest_text(text)
        text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
        data = f' data-smallest-text-pt="{recorded[0]:g}"' if recorded else ""
        name = CHAPTER_MAP.name if kind == "wide" else narrow_version(CHAPTER_MAP).name
        classes = "attnbook-chapter-map" + (f" attnbook-chapter-map--{kind}" if narrow else "")
        text = text.replace(
            "<svg ",
            f'<svg class="{classes}" role="group" aria-label="{match["alt"]}"{data} '
            f'data-figure="{name}" ',
            1,
        )
        maps.append(text.strip() if kind == "wide" else prefixed_ids(text.strip(), "narrow-"))
    return body[: match.start()] + "\n".join(maps) + body[match.end() :]


_SVG_ID = re.compile(r'(\bid="|url\(#|href="#)([^"\)]+)')


def prefixed_ids(svg: str, prefix: str) -> str:
    """`svg` with every id, and every reference to one (url(#...), href="#..."), prefixed:
    two of matplotlib's SVGs in one page would otherwise share ids (figure_1, the glyphs)."""
    return _SVG_ID.sub(lambda match: match[1] + prefix + match[2], svg)


_SVG_IMG = re.compile(r'<img [^>]*?src="((?:\.\./)*_images/([^"/]+)\.svg)"[^>]*>')


def narrow_pictures(body: str, images: Path) -> str:
    """`body` with each <img> of an SVG diagram that has a narrow version in `images`
    wrapped in a <picture> that chooses the narrow one under NARROW_MEDIA (the build copies
    it beside the wide one in _images/)."""

    def picture(match: re.Match) -> str:
        if not narrow_version(images / f"{match[2]}.svg").is_file():
            return match[0]
        source = match[1].removesuffix(".svg") + NARROW + ".svg"
        return (
            f'<picture><source media="{NARROW_MEDIA}" srcset="{source}" '
            f'type="image/svg+xml">{match[0]}</picture>'
        )

    return _SVG_IMG.sub(picture, body)


@functools.cache
def _course_facts() -> dict[str, dict]:
    """Per chapter stem: its title, what it builds on, its reading and exercise times.

    The times are the estimates instructors.md shows, computed by the same functions
    (tools/exercise_inventory.py) from the notebooks in chapters/.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tools import course, exercise_inventory

    registry = course.load()
    facts = {}
    for chapter in registry.chapters:
        path = ROOT / f"{chapter.file}.ipynb"
        if not path.is_file():
            continue
        read = exercise_inventory.read_chapter(path)
        facts[chapter.stem] = {
            "title": chapter.title,
            "requires": [(stem, registry.chapter(stem).title) for stem in chapter.requires],
            "background": chapter.background,
            "first_reading": exercise_inventory.format_minutes(
                exercise_inventory.first_reading_minutes(read)
            ),
            "reading": exercise_inventory.format_minutes(exercise_inventory.reading_minutes(read)),
            "exercises": exercise_inventory.format_minutes(
                exercise_inventory.exercise_minutes(read)
            ),
            "n_exercises": len(read.exercises),
        }
    return facts


def colab_url(theme_options: dict, pagename: str) -> str | None:
    """The page's notebook on Colab, as sphinx-book-theme's launch button links it; None if
    the book has no Colab launch URL (the student edition) or no GitHub repository."""
    launch = theme_options.get("launch_buttons") or {}
    colab = (launch.get("colab_url") or "").strip("/")
    match = re.match(
        r"https://github\.com/([^/]+)/([^/]+?)/?$", theme_options.get("repository_url", "") or ""
    )
    if not colab or not match:
        return None
    branch = theme_options.get("repository_branch") or "main"
    book = (theme_options.get("path_to_docs") or "").strip("/")
    path = f"{book}/{pagename}.ipynb" if book else f"{pagename}.ipynb"
    return f"{colab}/github/{match[1]}/{match[2]}/blob/{branch}/{path}"


# An apostrophe inside a word of plain text ("chapter 10's"): typeset as the prose's are (’ by
# Sphinx's smartquotes); course.yml writes a plain one.
_APOSTROPHE = re.compile(r"(?<=\w)'(?=\w)")


def _inline(text: str) -> str:
    """Plain text with `code` spans, as course.yml writes it, as HTML (apostrophes in the
    text outside code typeset as the prose's: ’)."""
    parts = text.split("`")
    return "".join(
        f"<code>{html_text.escape(part)}</code>"
        if i % 2
        else html_text.escape(_APOSTROPHE.sub("\u2019", part))
        for i, part in enumerate(parts)
    )


def _button(href: str, text: str, *, primary: bool = False, download: bool = False) -> str:
    kind = "attnbook-button attnbook-button--primary" if primary else "attnbook-button"
    extra = " download" if download else ""
    return f'<a class="{kind}" href="{html_text.escape(href)}"{extra}>{text}</a>'


def chapter_facts_html(facts: dict, pathto, colab: str | None) -> str:
    """The line under a chapter's title: times, what it builds on, Colab and download."""
    stem = facts["stem"]
    builds_on = ", ".join(
        f'<a href="{pathto(f"chapters/{other}")}">{html_text.escape(title)}</a>'
        for other, title in facts["requires"]
    )
    everything = (
        f" ({facts['reading']} with what it shows collapsed)"
        if facts.get("first_reading", facts["reading"]) != facts["reading"]
        else ""
    )
    times = (
        f"About <strong>{facts.get('first_reading', facts['reading'])}</strong> to read and run"
        f"{everything}, "
        f"<strong>{facts['exercises']}</strong> for its {facts['n_exercises']} exercises"
    )
    buttons = [
        _button(colab, "Open in Colab") if colab else "",
        _button(pathto(f"_sources/chapters/{stem}.ipynb", 1), "Download the notebook",
                download=True),
    ]  # fmt: skip
    return (
        '<div class="attnbook-chapter-facts" role="note" aria-label="About this chapter">\n'
        f'<p class="attnbook-times">{times} (estimates).</p>\n'
        + (f"<p>Builds on: {builds_on}.</p>\n" if builds_on else "")
        + f"<p>Assumes: {_inline(facts['background'])}</p>\n"
        + f'<p class="attnbook-buttons">{" ".join(b for b in buttons if b)}</p>\n</div>\n'
    )


def start_html(pathto, colab: str | None, beside: Iterable[str]) -> str:
    """The start page's buttons: chapter 1, on Colab, and the PDF and the student notebooks
    where their files are `beside` the pages (names at the output folder's root)."""
    first = next(iter(_course_facts()), None)
    beside = set(beside)
    buttons = [
        _button(pathto(f"chapters/{first}"), "Start with chapter 1", primary=True) if first else "",
        _button(colab, "Open chapter 1 in Colab") if colab else "",
        _button(pathto(PDF_NAME, 1), "The book as a PDF") if PDF_NAME in beside else "",
        _button(pathto(STUDENT_ZIP, 1), "The notebooks without solutions (zip)")
        if STUDENT_ZIP in beside
        else "",
    ]
    return (
        '<div class="attnbook-start attnbook-buttons">'
        + " ".join(b for b in buttons if b)
        + "</div>"
    )


def _front_door(app: Sphinx, pagename: str, context: dict) -> None:
    """Add the chapter's facts under its title, or the start page's buttons and chapter map;
    let a phone show the narrow diagrams (HTML only)."""
    if app.builder.name != "html" or "body" not in context:
        return
    pathto = context["pathto"]
    options = app.config.html_theme_options or {}
    stem = pagename.removeprefix("chapters/")
    facts = _course_facts().get(stem) if pagename.startswith("chapters/") else None
    if facts is not None:
        block = chapter_facts_html({**facts, "stem": stem}, pathto, colab_url(options, pagename))
        context["body"] = context["body"].replace("</h1>", "</h1>\n" + block, 1)
    if "/" not in pagename and CHAPTER_MAP.is_file():
        narrow = narrow_version(CHAPTER_MAP)
        context["body"] = inline_chapter_map(
            context["body"],
            CHAPTER_MAP.read_text(encoding="utf-8"),
            narrow.read_text(encoding="utf-8") if narrow.is_file() else None,
        )
    context["body"] = narrow_pictures(context["body"], CHAPTER_MAP.parent)
    if facts is None and START_MARK in context["body"]:
        first = next(iter(_course_facts()), None)
        colab = colab_url(options, f"chapters/{first}") if first else None
        beside = [name for name in (PDF_NAME, STUDENT_ZIP) if (Path(app.outdir) / name).is_file()]
        context["body"] = context["body"].replace(START_MARK, start_html(pathto, colab, beside), 1)


def _figure_files(app: Sphinx) -> dict[str, Path]:
    """The images the build has copied or will copy to _images/: name there -> source file."""
    images = getattr(app.builder, "images", {})
    return {name: Path(app.srcdir) / source for source, name in images.items()}


def _page_assets(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object
) -> None:
    """Make bertviz views and Plotly figures offline on this page; name cell toggles; write
    exercise levels without nested parentheses and solution links without a leading space;
    put a cue to enlarge in each link of a figure to its file, and a width to keep on a phone;
    number figures in the chapters only; link the favicon's PNG."""
    pathto = context.get("pathto")
    if pathto is None:
        return
    if "body" in context:
        context["body"] = exercise_levels(solution_links(named_toggles(context["body"])))
    _front_door(app, pagename, context)
    if "body" in context and app.builder.name == "html":  # not the one page `make pdf` prints
        # After the front door: the chapter map, put in the page, is no longer an image.
        context["body"] = enlarge_cues(
            phone_widths(context["body"], _figure_files(app), PHONE_FLOOR_PX)
        )
        if not pagename.startswith("chapters/"):
            context["body"] = unnumbered_figures(context["body"])
    if _vendored() and "body" in context:
        context["body"] = offline_bertviz(context["body"], pathto("_static/", 1))
    plotly_js = _plotly_js()
    if plotly_js is not None and "body" in context:
        context["body"], versions = offline_plotly(context["body"], pathto("_static/", 1))
        if versions - {plotly_js[1]}:
            logger.warning(
                f"attnbook: {pagename} was executed with plotly.js {', '.join(sorted(versions))}, "
                f"the book serves {plotly_js[1]} (the installed plotly): re-execute the chapter"
            )
    if FAVICON_PNG.is_file():
        png = pathto("_static/" + FAVICON_PNG.name, 1)
        context["metatags"] = (
            context.get("metatags", "")
            + f'\n<link rel="icon" type="image/png" sizes="180x180" href="{png}">'
            + f'\n<link rel="apple-touch-icon" href="{png}">'
        )


def _search_page_math(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object
) -> None:
    """Load MathJax on the search page too, with the chapters' configuration, so that
    attnbook.js can typeset the formulas quoted in the results' summaries (shown as raw TeX,
    ``\\(T \\times S\\)``, before). Sphinx loads it only on pages that hold a formula. Write
    and load the map of the titles that hold a formula (SEARCH_TITLES_JS) for its links."""
    if pagename != "search" or app.builder.format != "html" or not app.config.mathjax_path:
        return
    builder = app.builder  # this page's scripts only (sphinx.ext.mathjax does the same)
    if app.config.mathjax3_config:
        builder.add_js_file("", body=f"window.MathJax = {json.dumps(app.config.mathjax3_config)}")
    builder.add_js_file(app.config.mathjax_path, defer="defer")
    _write_search_titles(app)  # before the page, whose script tag holds the file's checksum
    builder.add_js_file(SEARCH_TITLES_JS, defer="defer")


# The search page shows a section's title as its result's link text, the plain text that
# Sphinx's search index stores: "Why divide by \sqrt{d_k}?", raw TeX. This file, loaded on the
# search page only, maps each such title to the title with its formulas marked as the pages mark
# them, which attnbook.js swaps in and typesets. (Marking them in the index itself made its
# titles longer, and a query then matched fewer of them.)
SEARCH_TITLES_JS = "attnbook-search-titles.js"  # relative to the built book's _static/


def math_titles(doctree: nodes.Node) -> dict[str, str]:
    """Each title in `doctree` that holds a formula: its text as Sphinx's search index stores
    it (``title.astext()``) -> its HTML, each formula in ``\\(...\\)`` inside a
    ``span.math`` (as Sphinx writes inline maths, which MathJax typesets), the rest escaped."""

    def html(node: nodes.Node) -> str:
        if isinstance(node, nodes.math):
            tex = html_text.escape(node.astext(), quote=False)
            return f'<span class="math notranslate nohighlight">\\({tex}\\)</span>'
        if isinstance(node, nodes.Text):
            return html_text.escape(node.astext(), quote=False)
        return "".join(html(child) for child in node.children)

    return {
        title.astext(): html(title)
        for title in doctree.findall(nodes.title)
        if next(title.findall(nodes.math), None) is not None
    }


def _write_search_titles(app: Sphinx) -> None:
    """Write SEARCH_TITLES_JS: `math_titles` of every page, as ``window.attnbookSearchTitles``."""
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    found = {}
    for docname in sorted(app.env.found_docs):
        found.update(math_titles(app.env.get_doctree(docname)))
    text = json.dumps(found, ensure_ascii=False, sort_keys=True)
    (static / SEARCH_TITLES_JS).write_text(
        f"window.attnbookSearchTitles = {text};\n", encoding="utf-8"
    )


# The page a reader meets at a URL of the book that has no page (a stale link, a typo):
# 404.html at the site's root, which GitHub Pages sends for every missing URL below it,
# /<repo>/a/b/c included. The same file answers at any depth, so its stylesheets, scripts,
# favicon and links cannot be relative to the page: each is written from the site's root
# path instead (`site_path`), the folder of the URL the book is published at.
NOT_FOUND = "404"  # the page's name: _build/html/404.html
NOT_FOUND_TITLE = "Page not found"
# The Sphinx config value (_config.yml, sphinx: config:) that names the site's path where
# repository.url does not tell it: "/" for a custom domain, "/book/" elsewhere (`site_path`).
SITE_PATH_CONFIG = "attnbook_site_path"
_GITHUB_REPO = re.compile(r"https?://github\.com/[^/]+/([^/]+?)(?:\.git)?/?$")
# A URL attribute whose value is relative to the page: not absolute ("/..."), not with a
# scheme ("https:", "data:", "mailto:"), not a fragment of the page itself ("#...").
_RELATIVE_URL = re.compile(
    r"""(?P<before>\s(?:href|src|action|data-content_root)=)(?P<q>["'])"""
    r"""(?![a-zA-Z][a-zA-Z0-9+.-]*:|/|#)(?P<url>[^"']*)(?P=q)"""
)


def site_path(configured: str | None, baseurl: str | None, repository_url: str | None) -> str:
    """The path of the site's root on its server, with a slash at either end.

    Args:
        configured: the ``attnbook_site_path`` config value, a path starting with "/" ("" or
            None: not set).
        baseurl: Sphinx's ``html_baseurl`` (the book's published URL), or "".
        repository_url: the book's GitHub repository (``repository.url`` of _config.yml).

    Returns:
        `configured` if set; else the path of `baseurl` if set; else the GitHub Pages project
        path of the repository (``/<repo>/``; ``/`` for a ``<owner>.github.io`` repository,
        published at its host's root); else ``/``.
    """
    if configured and (not configured.startswith("/") or "//" in configured):
        raise ValueError(
            f"configured ({SITE_PATH_CONFIG}) must be a URL path such as '/' or '/book/', "
            f"without scheme or host, got {configured!r}"
        )
    if configured:
        path = configured
    elif baseurl:
        path = urlsplit(baseurl).path
    elif (match := _GITHUB_REPO.match(repository_url or "")) and not match[1].endswith(
        ".github.io"
    ):
        path = match[1]
    else:
        path = "/"
    return "/" + path.strip("/") + "/" if path.strip("/") else "/"


def rooted_urls(html: str, root: str) -> str:
    """`html` (a page at the site's root) with every page-relative URL of an ``href``, ``src``,
    ``action`` or ``data-content_root`` attribute made absolute from the site's `root` path:
    ``_static/x.css`` -> ``/<repo>/_static/x.css``, ``./`` -> ``/<repo>/``."""

    def root_it(match: re.Match) -> str:
        url = match["url"].removeprefix("./")
        return f"{match['before']}{match['q']}{root}{url}{match['q']}"

    return _RELATIVE_URL.sub(root_it, html)


def not_found_html(start: str, search: str, chapters: Iterable[tuple[str, str]]) -> str:
    """The body of the page-not-found page: what happened, and where to go from there.

    Args:
        start: the URL of the start page; search: of the search page.
        chapters: (URL, title) of each chapter, in the book's order (none: no list).
    """
    items = "".join(
        f'<li><a href="{html_text.escape(url)}">{html_text.escape(title)}</a></li>\n'
        for url, title in chapters
    )
    return (
        f'<section id="page-not-found">\n<h1>{NOT_FOUND_TITLE}</h1>\n'
        "<p>There is no page of the book at this address: the link that led here may be "
        "out of date, or the address mistyped.</p>\n"
        f'<p>Go to <a href="{html_text.escape(start)}">the start page</a> or '
        f'<a href="{html_text.escape(search)}">search the book</a>'
        + (
            f', or open a chapter:</p>\n<ol class="attnbook-not-found-chapters">\n{items}</ol>\n'
            if items
            else ".</p>\n"
        )
        + "</section>\n"
    )


def _not_found_page(app: Sphinx) -> Iterable[tuple[str, dict, str]]:
    """Have the HTML builder write 404.html (html-collect-pages): the theme's page template
    around `not_found_html`, its URLs relative to the site's root (the page's folder) until
    `_root_not_found_urls` roots them. Not a document: in no table of contents, not in the
    search index, no source to download."""
    if app.builder.name != "html":
        return
    uri = app.builder.get_target_uri
    chapters = [
        (uri(f"chapters/{stem}"), facts["title"])
        for stem, facts in _course_facts().items()
        if f"chapters/{stem}" in app.env.all_docs
    ]
    body = not_found_html(uri(app.config.root_doc), uri("search"), chapters)
    yield NOT_FOUND, {"title": NOT_FOUND_TITLE, "body": body}, "page.html"


def _copy_narrow_diagrams(app: Sphinx, exception: Exception | None) -> None:
    """Put each narrow diagram (see NARROW_MEDIA) beside its wide one in _images/, where
    the pages' <picture>s look for it; the wide one is there when a page shows it."""
    out = Path(app.outdir) / "_images"
    if exception is not None or app.builder.name != "html" or not out.is_dir():
        return
    for narrow in sorted(CHAPTER_MAP.parent.glob(f"*{NARROW}.svg")):
        if (out / f"{narrow.stem.removesuffix(NARROW)}.svg").is_file():
            shutil.copyfile(narrow, out / narrow.name)


def _root_not_found_urls(app: Sphinx, exception: Exception | None) -> None:
    """Make 404.html's URLs start from the site's root path (see NOT_FOUND)."""
    page = Path(app.outdir) / f"{NOT_FOUND}.html"
    if exception is not None or app.builder.name != "html" or not page.is_file():
        return
    root = site_path(
        app.config[SITE_PATH_CONFIG],
        app.config.html_baseurl,
        (app.config.html_theme_options or {}).get("repository_url"),
    )
    page.write_text(rooted_urls(page.read_text(encoding="utf-8"), root), encoding="utf-8")
    logger.info(f"attnbook: {NOT_FOUND}.html links from {root}")


def _singlehtml_knows_html_nodes(app: Sphinx) -> None:
    """Let the one-page builder (`make pdf`) write every node the HTML builder can.

    Sphinx looks up an extension's node writers by the builder's name and falls back to
    its format ("html") only when no extension registered any for that name. Some do for
    "singlehtml", so MyST-NB's hidden-cell toggle (registered for "html" only) stopped
    `make pdf` with "unknown node type: HideCodeCellNode". Missing writers are copied.
    """
    if app.builder.name != "singlehtml":
        return
    handlers = app.registry.translation_handlers
    single = handlers.setdefault("singlehtml", {})
    for node, writers in handlers.get("html", {}).items():
        single.setdefault(node, writers)


def drop_solution_cells(doctree: nodes.Node) -> int:
    """Remove the notebook cells tagged ``solution`` (code that works out or checks a
    solution's numbers; myst-nb marks them with the class ``tag_solution``); return how many."""
    cells = [
        node
        for node in doctree.findall(nodes.container)
        if {"tag_solution", "tag-solution"} & set(node.get("classes", []))  # rst: tag-solution
    ]
    for node in cells:
        node.parent.remove(node)
    return len(cells)


def _hide_solution_cells(app: Sphinx, doctree: nodes.document) -> None:
    if getattr(app.config, "hide_solutions", False):  # sphinx-exercise drops the blocks
        drop_solution_cells(doctree)


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("config-inited", _configure)
    app.connect("doctree-read", _hide_solution_cells)
    app.connect("builder-inited", _singlehtml_knows_html_nodes)
    app.add_css_file("attnbook.css")
    app.add_js_file("attnbook.js", loading_method="defer")
    app.connect("html-page-context", _page_assets)
    app.connect("html-page-context", _search_page_math)
    app.connect("html-page-context", _drop_duplicate_inline_scripts, priority=900)
    app.add_config_value(SITE_PATH_CONFIG, "", "html", types=[str])
    app.connect("html-collect-pages", _not_found_page)
    app.connect("build-finished", _root_not_found_urls)
    app.connect("build-finished", _copy_narrow_diagrams)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
