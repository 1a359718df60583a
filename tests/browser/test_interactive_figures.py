"""The interactive figures respond offline; what a first visit weighs.

- On every page with an interactive figure (attnbook.interactive: chapters 2 and 4), each
  figure is drawn by the book's own plotly.js (Plotly's SVG is there, nothing came from the
  network); on the softmax-temperature explorer, dragging the slider to its cold end moves the
  label to the first temperature and redraws the bars with that temperature's weights (their
  heights, read in the page, against the weights stored in it); on a heatmap, hovering over a
  cell shows its query, its key and its weight.
- The landing page's first visit (a fresh browser context: empty cache) is weighed: the
  bytes of every response, uncompressed as the test server sends them (and gzipped, as a web
  server would send them). It and the size of
  the built folder (and of its MathJax) are printed and written to
  `.test-reports/page-weight.json`, which `make test`'s summary prints; each must stay under
  a budget (WEIGHT_BUDGET), so that a change that doubles them is noticed.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from conftest import BUILD

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / ".test-reports" / "page-weight.json"
FIGURE = re.compile(r'var id = "(attnbook-[A-Za-z0-9_-]+)";\s*var figure = (\{.*?\});\n', re.S)
DRAW_TIMEOUT_MS = 15_000
# Budgets in bytes (measured November 2026: a first visit 4.0 MB, 1.36 MB gzipped; the folder
# 31 MB, of which plotly.js 4.9 MB and MathJax 4.5 MB): generous, to catch a regression.
WEIGHT_BUDGET = {"first_visit_gzip": 2_000_000, "folder": 40_000_000, "mathjax": 8_000_000}
LANDING = "index.html"  # what a visitor opens first: a redirect to the start page


def _figures(html: str) -> dict[str, dict]:
    """The interactive figures of a built page: element id -> the Plotly figure in it."""
    return {match[1]: json.loads(match[2]) for match in FIGURE.finditer(html)}


def _pages_with_figures() -> list[str]:
    """The pages that must have interactive figures: those whose notebook stores one.

    Read from the notebooks, not the build, so that a build which lost its figures fails
    here instead of leaving nothing to test.
    """
    return [
        f"chapters/{path.stem}.html"
        for path in sorted((ROOT / "chapters").glob("*.ipynb"))
        if 'class=\\"attnbook-interactive\\"' in path.read_text(encoding="utf-8")
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "figure_page" in metafunc.fixturenames:
        metafunc.parametrize("figure_page", _pages_with_figures())


def test_the_chapters_with_interactive_figures_are_found() -> None:
    assert _pages_with_figures() == [
        "chapters/02_softmax.html",
        "chapters/04_scaled_dot_product_attention.html",
    ]


# Bars of a figure's first bar trace: their heights (px) in the page; the slider's label.
BARS_JS = """(id) => {
  const root = document.getElementById(id);
  return {
    heights: [...root.querySelectorAll(".trace.bars .point path")]
        .map((path) => path.getBoundingClientRect().height),
    // The slider's current value: the text right in its group (its ticks' labels are deeper).
    label: (root.querySelector(".slider-group > text.slider-label") || {}).textContent || null,
  };
}"""


def _drag_slider_to_the_start(page, element: str) -> None:
    """Drag the slider's grip to the left end of its rail, as a reader would with a mouse."""
    grip = page.locator(f"#{element} .slider-grip-rect").first.bounding_box()
    rail = page.locator(f"#{element} .slider-rail-rect").first.bounding_box()
    page.mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
    page.mouse.down()
    page.mouse.move(rail["x"] + 20, rail["y"] + rail["height"] / 2, steps=8)
    page.mouse.move(rail["x"] + 1, rail["y"] + rail["height"] / 2, steps=2)
    page.mouse.up()


def _hover_cell(page, element: str, row: int, col: int, rows: int, cols: int) -> str:
    """Hover over cell (row, col) of a heatmap (row 0 at the top); return the hover label.

    The mouse leaves the plot first and the last cell's label must be gone before it moves in:
    Plotly throttles hover events, so reading the label right after a move from one cell to
    the next could return the label of the cell before.
    """
    area = page.locator(f"#{element} .nsewdrag").first.bounding_box()
    label = page.locator(f"#{element} .hoverlayer .hovertext")
    page.mouse.move(area["x"] - 5, area["y"] - 5)
    label.first.wait_for(state="detached", timeout=5_000)
    x = area["x"] + (col + 0.5) * area["width"] / cols
    y = area["y"] + (row + 0.5) * area["height"] / rows
    page.mouse.move(x, y)
    label.first.wait_for(timeout=5_000)
    return " ".join(label.first.text_content().split())


def test_interactive_figures_respond_offline(open_page, page_source, figure_page: str) -> None:
    figures = _figures(page_source(figure_page))
    assert figures, f"{figure_page}: an interactive figure without its script"
    seen: dict[str, dict] = {}

    def play(page, report) -> None:
        for element, figure in figures.items():
            state = seen.setdefault(element, {})
            page.locator(f"#{element} svg.main-svg").first.wait_for(timeout=DRAW_TIMEOUT_MS)
            page.locator(f"#{element}").scroll_into_view_if_needed()
            state["drawn"] = True
            trace = figure["data"][0]
            if trace["type"] == "bar":
                state["before"] = page.evaluate(BARS_JS, element)
                _drag_slider_to_the_start(page, element)
                page.wait_for_timeout(300)
                state["after"] = page.evaluate(BARS_JS, element)
            elif trace["type"] == "heatmap":
                rows, cols = len(trace["y"]), len(trace["x"])
                state["hover"] = [
                    (row, col, _hover_cell(page, element, row, col, rows, cols))
                    for row, col in ((0, 0), (rows - 1, cols - 1), (rows // 2, cols // 2))
                ]

    report = open_page(figure_page, play)
    problems = report.errors() + [f"network: {kind} {url}" for kind, url in report.blocked]
    for element, figure in figures.items():
        state = seen.get(element, {})
        trace = figure["data"][0]
        if not state.get("drawn"):
            problems.append(f"#{element}: Plotly drew nothing")
            continue
        if trace["type"] == "bar":
            slider = figure["layout"]["sliders"][0]
            before, after = state["before"], state["after"]
            first = slider["steps"][0]
            expected = first["args"][0]["y"][0]  # the weights at the first temperature
            if before["heights"] == after["heights"]:
                problems.append(f"#{element}: dragging the slider left the bars as they were")
            if not (after["label"] or "").endswith(first["label"]):
                problems.append(
                    f"#{element}: the slider shows {after['label']!r} at its left end, "
                    f"expected τ = {first['label']}"
                )
            top = max(after["heights"], default=0)
            drawn = [height / top for height in after["heights"]] if top else []
            wanted = [weight / max(expected) for weight in expected]
            if len(drawn) != len(wanted) or any(abs(a - b) > 0.02 for a, b in zip(drawn, wanted)):
                problems.append(
                    f"#{element}: bar heights {drawn} (relative) after the drag do not match "
                    f"the weights {wanted} at τ = {first['label']}"
                )
        if trace["type"] == "heatmap":
            for row, col, label in state["hover"]:
                query, key = trace["customdata"][row][col]  # the labels, repeats and all
                weight = trace["z"][row][col]
                for part in (f"query {query}", f"key {key}", f"weight {weight:.3f}"):
                    if part not in label:
                        problems.append(
                            f"#{element}: cell ({row}, {col}) hover {label!r}: no {part!r}"
                        )
    if problems:
        shown = "\n".join(f"  - {problem}" for problem in problems[:12])
        pytest.fail(f"{figure_page}: interactive figures\n{shown}", pytrace=False)


def _gzipped_bytes(url: str) -> int:
    """The size of the built file behind a local `url`, gzipped (what a web server such as
    GitHub Pages sends for text; fonts and images barely shrink)."""
    path = unquote(urlparse(url).path).lstrip("/")
    file = BUILD / (path + "index.html" if path.endswith("/") or not path else path)
    return len(gzip.compress(file.read_bytes(), compresslevel=6)) if file.is_file() else 0


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_page_weight_of_a_first_visit(chromium, book_url: str) -> None:
    """Weigh the landing page's first visit (every response, empty cache) and the folder."""
    sizes: dict[str, int] = {}
    failed: list[str] = []
    context = chromium.new_context(service_workers="block", viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        # The local server only, as every browser test; anything else is refused and noted.
        page.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith(book_url)
                else (failed.append(f"network: {route.request.url}"), route.abort())
            ),
        )

        def on_finished(request) -> None:
            response = request.response()
            if response is None or response.status >= 400:
                failed.append(f"HTTP {response.status if response else '?'} {request.url}")
            else:
                sizes[request.url] = request.sizes()["responseBodySize"]

        page.on("requestfinished", on_finished)
        page.goto(book_url + LANDING, wait_until="load")
        page.wait_for_url("**/intro.html")
        page.wait_for_load_state("networkidle")
        page.evaluate(
            "() => window.MathJax && window.MathJax.startup && window.MathJax.startup.promise"
            ".then(() => true)"
        )
        page.wait_for_load_state("networkidle")
    finally:
        context.close()
    figures = {
        "first_visit": sum(sizes.values()),
        "first_visit_gzip": sum(_gzipped_bytes(url) for url in sizes),
        "requests": len(sizes),
        "folder": _folder_bytes(BUILD),
        "mathjax": _folder_bytes(BUILD / "_static" / "vendor" / "mathjax"),
        "largest": sorted(sizes.items(), key=lambda item: -item[1])[:5],
    }
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    print(
        f"\nfirst visit of {LANDING}: {figures['first_visit'] / 1e6:.2f} MB in "
        f"{figures['requests']} responses ({figures['first_visit_gzip'] / 1e6:.2f} MB "
        f"gzipped); the built book: {figures['folder'] / 1e6:.1f} MB "
        f"(MathJax {figures['mathjax'] / 1e6:.1f} MB)"
    )
    assert not failed, failed
    over = {
        name: f"{figures[name]:,} bytes > {budget:,}"
        for name, budget in WEIGHT_BUDGET.items()
        if figures[name] > budget
    }
    assert not over, f"over budget: {over}; the largest responses: {figures['largest']}"
