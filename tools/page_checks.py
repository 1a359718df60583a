"""What the browser test and the PDF printer check in a built page, as JavaScript: one copy.

Both open the built book in headless Chromium and check a page the same way: the browser
test (tests/browser/conftest.py) one page of `_build/html` at a time, tools/build_pdf.py the
whole book as one page before printing it. Neither runs Python in the page: they hand
Playwright's `page.evaluate` a JavaScript function. The pieces they share are here:

- `page_js(body)`: an `async () => {...}` function running `body` with the helpers of
  `HELPERS_JS` in scope, so that one round trip still gathers everything:
  `mathJaxDone()`, `openDropdowns()`, `loadImages(images, timeoutMs)`, `imageLoaded(img)`,
  `mathsIn(root)`, `isTypeset(math)` and `proseIn(root)`;
- `MATHJAX_DONE_JS`: waits until MathJax has typeset the page (if it is there at all);
- `CHROMIUM`: the browser (`/usr/bin/chromium`, or `$ATTNBOOK_CHROMIUM`);
- `RAW_TEX`: what raw TeX left in `proseIn`'s text starts with (it was never typeset).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# The system's Chromium, which both drive through Playwright (it never downloads a browser).
CHROMIUM = Path(os.environ.get("ATTNBOOK_CHROMIUM", "/usr/bin/chromium"))
# The maths Sphinx writes for MathJax: inline and display roles, and `math` blocks.
MATHS_SELECTOR = ".math.notranslate.nohighlight, div.math"
# Where TeX-like text is expected, or already typeset: code, scripts, MathJax's output.
NOT_PROSE_SELECTOR = "pre, code, script, style, textarea, mjx-container, .highlight"
# Raw TeX in the prose: display maths and environments that MathJax left untypeset.
RAW_TEX = [r"$$", r"\[", r"\begin{"]

_HELPERS_JS = r"""
  // The helpers of tools/page_checks.py.
  const MATHS_SELECTOR = __MATHS__;
  const NOT_PROSE_SELECTOR = __NOT_PROSE__;
  // Resolves once MathJax has typeset the page; at once if the page has no MathJax.
  const mathJaxDone = async () => {
    if (window.MathJax && window.MathJax.startup) await window.MathJax.startup.promise;
  };
  // Every dropdown open (solutions, hidden cells): their content is shown, printed, audited.
  const openDropdowns = () => {
    document.querySelectorAll(".toggle-hidden").forEach((e) => e.classList.remove("toggle-hidden"));
    document.querySelectorAll("details").forEach((d) => { d.open = true; });
  };
  // Load `images` now (lazy ones too) and wait until each has loaded or failed, or for
  // `timeoutMs` at most (null: as long as it takes).
  const loadImages = async (images, timeoutMs) => {
    images.forEach((img) => { if (img.loading === "lazy") img.loading = "eager"; });
    const settled = Promise.all(images.map((img) => img.complete ? null : new Promise((done) => {
      img.addEventListener("load", done); img.addEventListener("error", done);
    })));
    await (timeoutMs === null ? settled
        : Promise.race([settled, new Promise((done) => setTimeout(done, timeoutMs))]));
  };
  const imageLoaded = (img) => img.complete && img.naturalWidth > 0;
  const mathsIn = (root) => [...root.querySelectorAll(MATHS_SELECTOR)];
  const isTypeset = (math) => !!math.querySelector("mjx-container");
  // The text of `root` outside code, scripts and typeset maths (closed dropdowns included):
  // raw TeX there was never typeset.
  const proseIn = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    const prose = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.parentElement.closest(NOT_PROSE_SELECTOR)) prose.push(node.textContent);
    }
    return prose.join(" ");
  };
"""
HELPERS_JS = _HELPERS_JS.replace("__MATHS__", json.dumps(MATHS_SELECTOR)).replace(
    "__NOT_PROSE__", json.dumps(NOT_PROSE_SELECTOR)
)


def page_js(body: str) -> str:
    """`async () => {...}` for `page.evaluate`: `body`, with `HELPERS_JS` defined before it."""
    return "async () => {\n" + HELPERS_JS + body.strip("\n") + "\n}\n"


# Waits until MathJax has typeset the page (at once if the page has no MathJax).
MATHJAX_DONE_JS = page_js("  await mathJaxDone();")
