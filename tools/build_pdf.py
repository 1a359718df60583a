"""Print the book to one PDF with the system's Chromium (no TeX needed): what `make pdf` runs.

Usage: python -m tools.build_pdf [--html DIR] [--out FILE]

`make pdf` first builds the whole book as one page (`jupyter-book build . --builder
singlehtml`, into _build/singlehtml); this script then serves that page on 127.0.0.1,
opens it offline in headless Chromium (Playwright, as the browser test does), waits for
MathJax and bertviz's views, opens every dropdown (solutions), and checks the page before
printing it:

- every formula was typeset by MathJax and no raw TeX is left in the text;
- every image loaded; nothing was requested from the network; no error was logged;
- nothing is cut off at the edge of the printed column (paper cannot scroll): display
  formulas and tables wider than it are first set smaller until they fit, then every box
  that still clips what it holds, and every image past the edge, is named.

It prints A4 pages with page numbers, a tagged PDF with bookmarks from the headings, to
_build/pdf/attention-from-scratch.pdf, and checks the file: a PDF, with at least one page
per chapter, and a bookmark named word for word as each chapter's title (and the book's and
the instructor guide's). Any failed check is named and the exit status is 1.
"""

from __future__ import annotations

import argparse
import codecs
import functools
import http.server
import re
import sys
import threading
import time
from pathlib import Path

from tools.page_checks import CHROMIUM, RAW_TEX, page_js

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]
TIMEOUT_MS = 120_000  # the whole book is one page: loading and typesetting take a while
MARGIN_MM = {"top": 18, "bottom": 18, "left": 16, "right": 16}
# Chromium lays a printed page out as wide as the paper less its margins, in CSS px (96 an
# inch): A4 is 210 mm wide. The page is measured, and its wide parts fitted, at this width.
PRINT_WIDTH_PX = round((210 - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)

# Run in the page once loaded: typeset maths, open dropdowns, load every image, and report.
PREPARE_JS = page_js(r"""
  await mathJaxDone();
  openDropdowns();
  const main = document.querySelector("main") || document.body;
  const images = [...main.querySelectorAll("img")];
  await loadImages(images, null);  // the whole book: as long as it takes
  const maths = mathsIn(main);
  return {
    maths: maths.length,
    untypeset: maths.filter((m) => !isTypeset(m)).length,
    prose: proseIn(main),
    brokenImages: images.filter((img) => !imageLoaded(img)).map((img) => img.getAttribute("src")),
    // The book's title, and each chapter's and the instructor guide's: the one-page build
    // puts an empty span named after the document right before its section.
    titles: [...main.querySelectorAll('h1, span[id^="document-"] + section > h2')]
      .map((h) => h.textContent.replace(/[#¶]/g, "")
      .replace(/\s+/g, " ").trim()),
  };
""")


# Run at the printed width: what a screen scrolls sideways, paper cuts off at the box's edge.
# A display formula wider than the line (chapter 3's lookup(q), with its shapes) is set
# smaller until it fits; a table wider than the line (the instructor guide's times) gets a
# smaller text, down to 70 %, which its columns wrap. Returns how many were made smaller.
FIT_JS = r"""
() => {
  const main = document.querySelector("main") || document.body;
  const overflows = (box) => box.scrollWidth > box.clientWidth + 1;
  let fitted = 0;
  for (const box of main.querySelectorAll('mjx-container[display="true"]')) {
    for (let step = 0; step < 4 && overflows(box); step++) {
      const size = parseFloat(getComputedStyle(box).fontSize);
      box.style.fontSize = `${size * 0.98 * box.clientWidth / box.scrollWidth}px`;
      fitted += step === 0;
    }
  }
  for (const box of main.querySelectorAll(".pst-scrollable-table-container")) {
    const size = parseFloat(getComputedStyle(box).fontSize);
    for (let scale = 0.95; scale > 0.69 && overflows(box); scale -= 0.05) {
      box.style.fontSize = `${size * scale}px`;
      fitted += scale === 0.95;
    }
  }
  return fitted;
}
"""

# Chromium names a PDF bookmark after the text its heading prints, and a formula typeset by
# MathJax prints none ("4.4. Why divide by ?"). After each formula in a heading goes its
# plain text, read from MathJax's MathML ("√d_k"), printed invisible (transparent, 1 px, out
# of the flow): the bookmark reads "Why divide by √d_k?". Returns how many were named.
NAME_MATHS_JS = r"""
() => {
  const plain = (node) => {
    if (node.nodeType === Node.TEXT_NODE) return node.textContent.trim();
    const parts = [...node.childNodes].map(plain);
    if (node.localName === "msqrt") return `√${parts.join("")}`;
    if (node.localName === "msub") return `${parts[0]}_${parts[1]}`;
    if (node.localName === "msup") return `${parts[0]}^${parts[1]}`;
    return parts.join("");
  };
  const main = document.querySelector("main") || document.body;
  let named = 0;
  for (const heading of main.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
    for (const box of heading.querySelectorAll("mjx-container")) {
      const mathml = box.querySelector("mjx-assistive-mml math");
      if (!mathml) continue;
      const name = document.createElement("span");
      name.style.cssText = "position: absolute; color: transparent; font-size: 1px";
      name.textContent = plain(mathml);
      box.after(name);
      named++;
    }
  }
  return named;
}
"""

# Run at the printed width: every box whose content is wider than it and that clips it
# (paper cannot scroll: the rest is lost), and every image or drawing that reaches past the
# text's right edge (the page cuts it), each named with its chapter and section.
CUT_JS = r"""
() => {
  const main = document.querySelector("main") || document.body;
  const right = main.getBoundingClientRect().right;
  const where = (el) => {
    const section = el.closest("section[id]");
    let chapter = section;
    while (chapter && !(chapter.previousElementSibling || {id: ""}).id.startsWith("document-")) {
      chapter = chapter.parentElement.closest("section[id]");
    }
    const doc = chapter ? chapter.previousElementSibling.id.replace("document-", "") : "intro";
    return `${doc}#${section ? section.id : ""}`;
  };
  const cut = [];
  for (const el of main.querySelectorAll("*")) {
    const style = getComputedStyle(el);
    // Inline maths measures wider than its box by its glyphs' overhang, and MathJax's copy
    // for screen readers is clipped to nothing on purpose: neither is cut off on paper.
    if (style.display.startsWith("inline") || el.getClientRects().length === 0
        || el.closest("mjx-assistive-mml")) continue;
    const clips = ["auto", "scroll", "hidden", "clip"].includes(style.overflowX);
    const name = el.tagName.toLowerCase();
    if (clips && el.scrollWidth > el.clientWidth + 1) {
      cut.push(`${where(el)}: ${name} cuts off ${el.scrollWidth - el.clientWidth} px`
        + ` of ${el.scrollWidth}: ${el.textContent.replace(/\s+/g, " ").trim().slice(0, 40)}`);
    } else if (["img", "svg", "canvas", "iframe"].includes(name)
        && el.getBoundingClientRect().right > right + 1) {
      cut.push(`${where(el)}: ${name} reaches ${Math.round(el.getBoundingClientRect().right
        - right)} px past the text`);
    }
  }
  return cut;
}
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def pdf_page_count(data: bytes) -> int:
    """Number of page objects (``/Type /Page``, not ``/Pages``) in a PDF's bytes."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", data))


def _pdf_string(raw: bytes) -> str:
    """Decode one PDF string token: ``<FEFF...>`` (UTF-16 hex) or ``(literal)``."""
    if raw.startswith(b"<"):
        data = bytes.fromhex(raw[1:-1].decode("ascii"))
        if data.startswith(codecs.BOM_UTF16_BE):
            return data[2:].decode("utf-16-be")
        return data.decode("latin-1")
    body = raw[1:-1]
    body = re.sub(rb"\\([()\\])", rb"\1", body)
    if body.startswith(codecs.BOM_UTF16_BE):
        return body[2:].decode("utf-16-be", errors="replace")
    return body.decode("latin-1")


def pdf_outline_titles(data: bytes) -> list[str]:
    """The bookmark titles (``/Title`` strings) written uncompressed in a PDF's bytes."""
    tokens = re.findall(rb"/Title\s*(<[0-9A-Fa-f\s]*>|\((?:\\.|[^\\)])*\))", data)
    return [_pdf_string(re.sub(rb"\s", b"", token) if token.startswith(b"<") else token)
            for token in tokens]  # fmt: skip


def check_pdf(data: bytes, chapter_titles: list[str]) -> list[str]:
    """Problems of the printed PDF: not a PDF, too few pages, chapters without a bookmark."""
    if not data.startswith(b"%PDF-"):
        return ["the file is not a PDF"]
    problems = []
    pages = pdf_page_count(data)
    if pages < len(chapter_titles):
        problems.append(f"{pages} pages for {len(chapter_titles)} chapters")
    titles = {" ".join(title.split()) for title in pdf_outline_titles(data)}
    missing = [title for title in chapter_titles if title not in titles]
    if missing:
        problems.append(f"chapters without a bookmark: {missing}")
    return problems


def print_book(html: Path, out: Path) -> list[str]:
    """Print `html`/intro.html (a singlehtml build) to `out`; return the problems found."""
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems: list[str] = []
    page_name = next(p.name for p in sorted(html.glob("*.html")) if p.name != "index.html")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1200, "height": 1600})
            page.set_default_timeout(TIMEOUT_MS)

            def route(route):
                if route.request.url == base + "searchindex.js":
                    # The theme's page loads the search index, which the singlehtml builder
                    # does not write; a printed book needs no search: answer it empty.
                    route.fulfill(body="", content_type="application/javascript")
                elif route.request.url.startswith(base):
                    route.continue_()
                else:
                    problems.append(f"network request blocked: {route.request.url}")
                    route.abort()

            page.route("**/*", route)
            page.on(
                "console",
                lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
            page.on(
                "response",
                lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None,
            )
            page.goto(base + page_name, wait_until="load")
            page.emulate_media(media="print")
            facts = page.evaluate(PREPARE_JS)
            page.set_viewport_size({"width": PRINT_WIDTH_PX, "height": 1600})
            page.evaluate(FIT_JS)
            page.evaluate(NAME_MATHS_JS)
            problems += [f"cut off on paper: {cut}" for cut in page.evaluate(CUT_JS)]
            if facts["untypeset"]:
                problems.append(f"{facts['untypeset']} of {facts['maths']} formulas not typeset")
            for marker in RAW_TEX:
                if marker in facts["prose"]:
                    problems.append(f"raw TeX {marker!r} in the text")
            problems += [f"image did not load: {src}" for src in facts["brokenImages"]]
            out.parent.mkdir(parents=True, exist_ok=True)
            page.pdf(
                path=str(out),
                format="A4",
                print_background=True,
                margin={side: f"{mm}mm" for side, mm in MARGIN_MM.items()},
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=(
                    '<div style="font-size:8px;width:100%;text-align:center;color:#555">'
                    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
                ),
                outline=True,
                tagged=True,
            )
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    # The book's, every chapter's and the guide's title must be a bookmark, word for word:
    # Chromium names a bookmark after the heading's printed lines, and once doubled them
    # ("10. 10. Training a small transformerTraining a small transformer").
    problems += check_pdf(out.read_bytes(), facts["titles"])
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "singlehtml")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "_build" / "pdf" / "attention-from-scratch.pdf"
    )
    args = parser.parse_args(argv)
    if not (args.html / "index.html").is_file():
        print(f"{args.html} has no index.html: run `make pdf` (it builds it first)")
        return 1
    if not CHROMIUM.is_file():
        print(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set ATTNBOOK_CHROMIUM)")
        return 1
    start = time.perf_counter()
    problems = print_book(args.html, args.out)
    seconds = time.perf_counter() - start
    data = args.out.read_bytes() if args.out.is_file() else b""
    print(
        f"{args.out}: {pdf_page_count(data)} pages, {len(data) / 1e6:.1f} MB, "
        f"printed in {seconds:.0f} s"
    )
    for problem in problems:
        print(f"  - {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
