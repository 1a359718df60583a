"""Copy the repository URL from _config.yml to every place that shows it.

Usage:
    python -m tools.sync_repo_url           # rewrite what is out of date (`make sync-url`)
    python -m tools.sync_repo_url --check   # change nothing; exit 1 and list what is out of date
    python -m tools.sync_repo_url --notice  # say so if the URL is still the placeholder (`make book`)

The URL lives only in `_config.yml` (`repository: url:`), and so does the tag or commit
that learners install (`repository: package_ref:`, a release tag such as `v0.1.0` by
default). This script writes them to:

- the first code cell of every `chapters/*.ipynb`, the Colab install cell, whose
  whole source is rewritten to the canonical text of CONTRIBUTING.md (outputs,
  execution count and metadata are kept); it installs
  `attnbook @ git+URL@package_ref` and stops the notebook if pip fails;
- README.md, between `<!-- repo-url:start -->` and `<!-- repo-url:end -->`: every
  `https://github.com/OWNER/REPO` there (the badges and links) becomes the URL;
- README.md and instructors.md, anywhere: every pip requirement
  `attnbook @ git+URL@REF` (with an extra or not, as in the grading commands) becomes
  `attnbook @ git+url@package_ref`;
- CITATION.cff, the `repository-code:` line;
- pyproject.toml, the `Homepage` line of `[project.urls]`.

A file or marker that is absent is skipped. `tests/book/test_project_files.py` calls
`find_out_of_sync()` so that a URL edited by hand in one place fails the tests.

While the URL's owner is the placeholder `your-org`, `make student` refuses to build a
handout (`tools/make_student.py`) and `make book` prints a notice (`--notice`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

import nbformat
import yaml

from tools import course

ROOT = Path(__file__).resolve().parent.parent

# The Colab cell of CONTRIBUTING.md; `{requirement}` is `attnbook`, or `attnbook[extra]` for a
# chapter whose `colab_extra` in course.yml names one of the package's extras (chapters 11
# to 13: transformers, bertviz and the offline MiniLM), `{url}` the repository URL, `{ref}` the
# tag or commit the course pins (`repository: package_ref:` of _config.yml) and `{wheel_install}`
# the command that installs the course zip's wheel, with that extra if any. pip runs as a
# subprocess, not as `%pip`, so that a failed install stops the notebook here with pip's own
# words, instead of the next cell failing with "No module named 'attnbook'". The requirement
# is alone in a list with a trailing comma so that ruff formats the cell the same way
# whatever the URL's length.
COLAB_CELL = """\
# On Colab, install the course package attnbook, at the version the course pins. Elsewhere
# this does nothing: `make venv` has already installed it into .venv.
import sys

if "google.colab" in sys.modules:
    import subprocess

    _requirements = [
        "{requirement} @ git+{url}@{ref}",
    ]
    _pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", *_requirements],
        capture_output=True,
        text=True,
    )
    if _pip.returncode != 0:
        raise RuntimeError(
            f"Could not install {{_requirements[0]}} (pip exit status {{_pip.returncode}}), so the "
            "rest of this notebook cannot run. Check that the runtime is online (Runtime > "
            "Disconnect and delete runtime, then run this cell again) and tell your instructor; "
            "or upload the attnbook-*.whl file of the course zip (Files pane) and run "
            {wheel_install}
        )"""

# The end of the message of a failed install: the `%pip install` of the course zip's wheel,
# which a learner uploads to Colab. For a chapter with an extra, the wheel's name (a shell
# wildcard, expanded by `ls`) and the extra go together in double quotes, so the message's
# string is in single quotes, and ruff puts the `+` on the next line.
WHEEL_INSTALL = (
    '"`%pip install attnbook-*.whl`. What pip said:\\n" + (_pip.stdout + _pip.stderr)[-3000:]'
)
WHEEL_INSTALL_EXTRA = """\
'`%pip install "$(ls attnbook-*.whl)[{extra}]"`. What pip said:\\n'
            + (_pip.stdout + _pip.stderr)[-3000:]"""

PLACEHOLDER_OWNER = "your-org"  # the owner of the URL until the repository has its real home
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")

README_START, README_END = "<!-- repo-url:start -->", "<!-- repo-url:end -->"
_GITHUB_REPO = re.compile(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
# A pip requirement of the package from Git, as the documentation's install and grading
# commands write it: `attnbook[grade] @ git+https://github.com/OWNER/REPO@v0.1.0`. The tag
# or commit ends on a letter, digit or `_`, so that a full stop after it is not taken.
_GIT_REQUIREMENT = re.compile(
    r"(attnbook(?:\[[\w,-]+\])? @ git\+)https://[^\s\"'`@]+@"
    r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9_])?"
)
_CITATION_LINE = re.compile(r"^(repository-code:[ \t]*).*$", re.MULTILINE)
_HOMEPAGE_LINE = re.compile(r'^(Homepage[ \t]*=[ \t]*)"[^"\n]*"', re.MULTILINE)


class OutOfSync(NamedTuple):
    """A file whose copy of the URL disagrees with `_config.yml`."""

    path: Path
    reason: str
    fixable: bool = True  # False: the script cannot fix it, a person must


def _repository(root: Path) -> dict:
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    return config.get("repository") or {}


def repository_url(root: Path = ROOT) -> str:
    """Return `repository.url` of `_config.yml`, without a trailing slash."""
    url = str(_repository(root).get("url") or "").strip().rstrip("/")
    if not url.startswith("https://"):
        raise ValueError(f"_config.yml: repository.url must be an https:// URL, got {url!r}")
    return url


def package_ref(root: Path = ROOT) -> str:
    """Return `repository.package_ref` of `_config.yml`: the tag or commit learners install."""
    ref = str(_repository(root).get("package_ref") or "").strip()
    if not _REF.fullmatch(ref):
        raise ValueError(
            "_config.yml: repository.package_ref must name a tag or commit of the repository "
            f"(letters, digits, '.', '_', '-', '/'), got {ref!r}"
        )
    return ref


def is_placeholder(url: str) -> bool:
    """Is `url` still the placeholder repository (owner `your-org`) rather than a real one?"""
    return url.rstrip("/").split("/")[-2:-1] == [PLACEHOLDER_OWNER]


def placeholder_notice(url: str) -> str | None:
    """What to tell the person building the book while `url` is the placeholder (None: nothing)."""
    if not is_placeholder(url):
        return None
    return (
        f"Notice: the repository URL is still the placeholder {url}. The chapters' Colab cells "
        "and the student edition point learners there, where nothing can be installed: set "
        "`repository: url:` (and `package_ref:`) in _config.yml, then run `make sync-url`."
    )


# The Colab cell runs everywhere (nbval included) but is left out of the rendered
# book, where it would be the first thing a reader sees; Colab shows it.
COLAB_TAG = "remove-cell"


def colab_cell_source(url: str, chapter: str | None = None, ref: str | None = None) -> str:
    """The canonical source of the first code cell of the chapter named `chapter` (its stem).

    `ref` is the tag or commit to install, by default `package_ref` of `_config.yml`.
    """
    extra = course.load().colab_extras.get(chapter or "")
    requirement = f"attnbook[{extra}]" if extra else "attnbook"
    wheel_install = WHEEL_INSTALL_EXTRA.format(extra=extra) if extra else WHEEL_INSTALL
    return COLAB_CELL.format(
        url=url, requirement=requirement, ref=ref or package_ref(), wheel_install=wheel_install
    )


def _is_colab_cell(source: str) -> bool:
    return "google.colab" in source or re.search(r"attnbook(\[\w+\])? @ git\+", source) is not None


def _sync_notebook(path: Path, url: str, ref: str, write: bool) -> OutOfSync | None:
    """Say how `path` is out of sync (None if it is not); fix it when `write`."""
    nb = nbformat.read(path, as_version=4)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    if not code_cells or not _is_colab_cell(code_cells[0].source):
        # Never overwrite a cell that is not the Colab cell: it would lose real code.
        reason = "its first code cell is not the Colab cell: add it by hand (see CONTRIBUTING.md)"
        return OutOfSync(path, reason, fixable=False)
    first = code_cells[0]
    wanted = colab_cell_source(url, path.stem, ref)
    tags = first.metadata.get("tags", [])
    if first.source == wanted and COLAB_TAG in tags:
        return None
    if write:
        first.source = wanted
        if COLAB_TAG not in tags:
            first.metadata["tags"] = [*tags, COLAB_TAG]
        nbformat.write(nb, path)
    return OutOfSync(
        path, f"its Colab cell differs from the canonical text or lacks the tag {COLAB_TAG!r}"
    )


def _replace_in_readme(text: str, url: str) -> str:
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return text
    block = _GITHUB_REPO.sub(url, text[start:end])
    return text[:start] + block + text[end:]


def _replace_homepage(text: str, url: str) -> str:
    match = re.search(r"^\[project\.urls\][ \t]*$", text, re.MULTILINE)
    if not match:
        return text
    section_end = re.compile(r"^\[", re.MULTILINE).search(text, match.end())
    stop = section_end.start() if section_end else len(text)
    section = _HOMEPAGE_LINE.sub(lambda m: f'{m[1]}"{url}"', text[match.end() : stop], count=1)
    return text[: match.end()] + section + text[stop:]


def _replace_requirements(text: str, url: str, ref: str) -> str:
    """Every `attnbook @ git+URL@REF` in `text`, pointed at `url` and `ref`."""
    return _GIT_REQUIREMENT.sub(lambda m: f"{m[1]}{url}@{ref}", text)


def _text_rewrites(url: str, ref: str) -> dict[str, object]:
    return {
        "README.md": lambda text: _replace_requirements(_replace_in_readme(text, url), url, ref),
        "instructors.md": lambda text: _replace_requirements(text, url, ref),
        "CITATION.cff": lambda text: _CITATION_LINE.sub(lambda m: f'{m[1]}"{url}"', text, count=1),
        "pyproject.toml": lambda text: _replace_homepage(text, url),
    }


def sync(root: Path = ROOT, write: bool = True) -> list[OutOfSync]:
    """Bring every copy of the URL in line with `_config.yml`.

    Returns an `OutOfSync` for every file that was out of sync (and, unless it
    is not `fixable`, is fixed now). With `write=False` nothing is changed:
    this is `--check`, and what the tests call.
    """
    url, ref = repository_url(root), package_ref(root)
    found: list[OutOfSync] = []
    for path in sorted((root / "chapters").glob("*.ipynb")):
        problem = _sync_notebook(path, url, ref, write)
        if problem:
            found.append(problem)
    for name, rewrite in _text_rewrites(url, ref).items():
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            found.append(OutOfSync(path, f"does not show {url}"))
            if write:
                path.write_text(new, encoding="utf-8")
    return found


def find_out_of_sync(root: Path = ROOT) -> list[OutOfSync]:
    """Every file whose URL disagrees with `_config.yml`; changes nothing."""
    return sync(root, write=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if out of sync"
    )
    parser.add_argument(
        "--notice",
        action="store_true",
        help="change nothing; print a notice if the URL is the placeholder (exit 0)",
    )
    args = parser.parse_args(argv)
    url = repository_url(ROOT)
    if args.notice:
        notice = placeholder_notice(url)
        if notice:
            print(notice)
        return 0
    found = sync(ROOT, write=not args.check)
    for problem in found:
        print(f"{problem.path.relative_to(ROOT)}: {problem.reason}")
    if args.check:
        if found:
            print(f"{len(found)} file(s) out of sync with {url}: run `make sync-url`.")
            return 1
        print(f"every copy of the repository URL is {url}")
        return 0
    fixed = [problem for problem in found if problem.fixable]
    print(f"updated {len(fixed)} file(s) to {url}")
    return 0 if len(fixed) == len(found) else 1


if __name__ == "__main__":
    sys.exit(main())
