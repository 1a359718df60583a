"""Sphinx glue for the book: offline front-end files and the instructors' build.

- If ``make assets`` has copied MathJax, require.js, d3 and jQuery into
  ``assets/vendor/``, serve them from the book itself so every page renders
  without a network; otherwise keep the CDN defaults and say so in one line.
- ``ATTNBOOK_HIDE_SOLUTIONS=1`` (``make book HIDE_SOLUTIONS=1``) removes every
  ``{solution}`` block, for an edition handed to students before a deadline.

The folder is deliberately not called ``_static``: Jupyter Book injects every
script found in a ``_static`` folder into every page.
"""

from __future__ import annotations

import os
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
MATHJAX = "vendor/mathjax/tex-mml-chtml.js"  # relative to the built book's _static/


def _configure(app: Sphinx, config: Config) -> None:
    if (ASSETS / MATHJAX).is_file():
        config.html_static_path = [*config.html_static_path, str(ASSETS)]
        config.mathjax_path = MATHJAX
        logger.info(
            "attnbook: MathJax, require.js, d3 and jQuery are served from the book (offline-ready)"
        )
    else:
        logger.info(
            "attnbook: assets/vendor/ not found (npm missing?): MathJax loads from its CDN, "
            "so pages need a network to typeset maths"
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


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("config-inited", _configure)
    app.connect("html-page-context", _drop_duplicate_inline_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
