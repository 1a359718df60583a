"""Serve a built book as GitHub Pages does: under its site path, 404.html for what is missing.

GitHub Pages publishes a project's book at ``https://<owner>.github.io/<repo>/`` and answers
every URL that has no file with the site's ``404.html`` (status 404), whatever the depth:
``/<repo>/a/b/c`` included. `serve` does the same on 127.0.0.1, so that the page-not-found
page (_ext/attnbook_book.py) can be checked as a reader meets it: the tests use it, and

    python -m tools.pages_server [--root /attention-from-scratch/] [--port 8000] [FOLDER]

previews the built book (default ``_build/html``) at the path it is published under (default:
the one the build wrote into 404.html) until Ctrl+C.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import io
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
NOT_FOUND = "404.html"
# 404.html names the site's path on its <html> element (Sphinx's data-content_root).
_CONTENT_ROOT = re.compile(r'<html[^>]*\sdata-content_root="(/[^"]*)"')


def site_root_of(folder: Path) -> str:
    """The site path that `folder`'s 404.html was built for ("/" without one)."""
    page = folder / NOT_FOUND
    match = _CONTENT_ROOT.search(page.read_text(encoding="utf-8")) if page.is_file() else None
    return match[1] if match else "/"


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files of `directory` under `site_root`; anything else: 404 with 404.html's content."""

    site_root = "/"

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the callers report what matters

    def translate_path(self, path: str) -> str:
        """The file behind `path`, a URL path under `site_root` (http.server's own for "/")."""
        return super().translate_path("/" + urlsplit(path).path[len(self.site_root) :])

    def send_head(self) -> io.BytesIO | object | None:
        if urlsplit(self.path).path.startswith(self.site_root):
            file = Path(self.translate_path(self.path))
            if file.is_file() or (file / "index.html").is_file():
                return super().send_head()
        page = Path(self.directory) / NOT_FOUND
        body = page.read_bytes() if page.is_file() else b"Not found"
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


@contextlib.contextmanager
def serve(folder: Path, site_root: str = "/", port: int = 0) -> Iterator[str]:
    """Serve `folder` under `site_root` (a path with a slash at either end) from a thread, on
    `port` (0: a free one); yield the site's URL (``http://127.0.0.1:<port><site_root>``)."""
    if not (site_root.startswith("/") and site_root.endswith("/")):
        raise ValueError(f"site_root must start and end with '/', got {site_root!r}")
    handler = type("Handler", (_Handler,), {"site_root": site_root})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", port), functools.partial(handler, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{site_root}"
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--root", help="the site path (default: the one 404.html was built for)")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    with serve(args.folder, args.root or site_root_of(args.folder), args.port) as url:
        print(f"The book as GitHub Pages serves it: {url} (Ctrl+C stops)")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
