"""Build the student edition: every chapter without its solutions, a zip to hand out, the book.

Usage:
    python -m tools.make_student            # `make student`: notebooks, zip and book
    python -m tools.make_student --no-book  # the notebooks and the zip only (seconds)
    python -m tools.make_student --allow-placeholder-url   # build even with `your-org`

It writes only under `_build/student/` (never `_build/html`, the main book):

  notebooks/NN_name.ipynb   every chapter of chapters/, solutions removed
  attnbook-student.zip      those notebooks, the package's wheel and a README.txt for learners
  html/                     the book built from the student notebooks

While `repository: url:` of `_config.yml` is the placeholder (owner `your-org`), it
refuses to build (exit status 2, nothing written): every Colab cell and the README would
send learners to a repository that does not exist. `--allow-placeholder-url` (`make student
ALLOW_PLACEHOLDER_URL=1`) builds anyway, for the tests and CI of this repository. It
refuses too (exit status 2) while a chapter's Colab cell does not install from that URL at
`package_ref:` (`stale_colab_cells`): `_config.yml` was changed and `make sync-url` not run.

The zip holds the wheel of attnbook (`attnbook-VERSION-py3-none-any.whl`, built from this
working tree with SOURCE_DATE_EPOCH fixed, so it is the same bytes every run), so a learner
without GitHub installs the package with `pip install attnbook-*.whl` (on Colab, in chapters
11 to 13, with the `[pretrained]` extra their `colab_extra` names). The wheel must hold
the package and its metadata only (no chapter, no solution): `wheel_problems` checks it.

A student notebook (`student_notebook`) is the chapter with every `{solution}`
directive cut out of its markdown cells, as `tools.notebooks` finds them (a cell
left empty is dropped), and every code cell tagged `solution` dropped. Everything else is kept as it is: the exercise statements, the stubs
(`raise NotImplementedError  # replace this line with your code`), the hints,
the checker calls and the Colab cell that comes first. So are the stored outputs
and execution counts: the figures and printed values of the teaching cells are
half of each lesson, and on Colab a learner reads a chapter before running it;
the exercise cells are the committed, untouched stubs, so their only outputs
are the checkers' "not attempted yet". A fence that is never closed, a
solution fenced with backticks or tildes, or one opened inside its exercise, is
an error rather than a guess.

The book is built from a staging copy of the book's sources whose chapters are
the student notebooks, so the pages, the search index, the `_sources/` copies and
the page's download button (.ipynb) can only hold what the student notebooks
hold; `ATTNBOOK_HIDE_SOLUTIONS=1` is set as well. In that copy the launch buttons
(Colab, Binder) and the repository button are switched off, since they open the
repository's own notebooks, solutions included; a note on the start page tells
learners to download a chapter's notebook and open it on Colab instead.

Two checks guard every run and fail it on any hit: `notebook_leaks` looks for
each non-trivial code line and prose sentence of every solution (one that does
not also appear elsewhere in the chapter) in the student notebook, its outputs
included, and for the text `{solution}` outside the code blocks of its markdown
cells as the parser reads them (`has_solution_directive`: one in a code block is an
example of how a solution is written, kept in both editions); `PageChecker` (its
`scan`) looks for runs of eight consecutive words of any solution in every page and
`_sources` file of the built book, for words that only solutions use in its search
index, and for the text `{solution}` in its notebooks as `notebook_leaks` does. `tests/book/test_student_edition.py` tests both,
including that they catch a solution left in.
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import nbformat
import yaml

from tools import course
from tools.notebooks import code_blocks, directive_blocks
from tools.notebooks import strip_solutions as _strip
from tools.sync_repo_url import colab_cell_source, is_placeholder, package_ref, repository_url

ROOT = Path(__file__).resolve().parent.parent

OUT = ROOT / "_build" / "student"
ZIP_NAME = "attnbook-student.zip"
ZIP_FOLDER = "attnbook-student"  # the zip unpacks into one folder of this name
MIN_CHARS = 20  # shorter solution lines or sentences are too generic to count as a leak
SHINGLE = 8  # a run of this many words of a solution, found in a page, is a leak
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same zip
_WHEEL_EPOCH = "315532800"  # 1980-01-01 (UTC): SOURCE_DATE_EPOCH of the wheel's build
PACKAGE = "attnbook"

SOLUTION_TAG = "solution"  # a code cell of a solution (its numbers, checked): left out too

_ANY_SOLUTION = re.compile(r"\{solution\}")
# A backtick or tilde fence that opens a MyST directive ("```{note}"): the parser reads it as a
# code block, but MyST reads the body of a note as markdown, so a {solution} in it counts.
_DIRECTIVE_FENCE = re.compile(r"^\s*(`{3,}|~{3,})[ \t]*\{")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_WORD = re.compile(r"[a-z0-9]+")
_MARKUP = re.compile(r"\{[\w:-]+\}`[^`]*`")  # MyST roles, rendered differently in a page


def _split_solutions(cells: list[nbformat.NotebookNode]) -> Iterator[tuple[int, str, str, bool]]:
    """Per cell: (index, kept text, solution text, drop the cell?).

    The kept text of a markdown cell is the cell without its solution blocks, the
    solution text their bodies (fences and options left out); a code cell is kept,
    unless it is tagged `solution` (code that works out or checks a solution's numbers).
    """
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            tagged = SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])
            code = f"```python\n{cell.source}\n```" if tagged else ""  # its lines, as code
            yield index, ("" if tagged else cell.source), code, tagged
            continue
        kept, blocks = _strip(cell.source, index)
        removed = "\n".join(block.body for block in blocks)
        yield index, kept, removed, bool(blocks) and not kept.strip()


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return a copy of a chapter notebook without its solutions, ready for learners.

    Every `{solution}` block leaves its markdown cell (a cell with nothing else
    is dropped), every code cell tagged `solution` is dropped, and all the rest
    is kept unchanged: the
    exercises, stubs, hints, checkers, the Colab cell, the outputs. The copy's
    metadata records `attnbook: {edition: student}`.

    Args:
        nb: a notebook as `nbformat.read(path, as_version=4)` returns it; not modified.

    Returns:
        A new notebook that passes `nbformat.validate`.

    Raises:
        ValueError: a cell that `directive_blocks` refuses (a solution never closed,
            fenced with backticks or tildes, or opened inside its exercise).
    """
    student = copy.deepcopy(nb)
    cells = []
    for index, kept, _, drop in _split_solutions(nb.cells):
        cell = student.cells[index]
        if kept != cell.source and not drop:  # a markdown cell that held a solution and more
            cell.source = re.sub(r"\n{3,}", "\n\n", kept).strip("\n")  # one blank line where it was
        if not drop:
            cells.append(cell)
    student.cells = cells
    student.metadata["attnbook"] = {"edition": "student"}
    nbformat.validate(student)
    return student


def strip_solutions(markdown: str) -> str:
    """The text of one markdown page (a `.md` page of the book) without its solution blocks."""
    return _strip(markdown)[0]


def solution_texts(nb: nbformat.NotebookNode) -> list[str]:
    """The text of every solution of a notebook (its body): one string per cell that holds some."""
    return [removed for _, _, removed, _ in _split_solutions(nb.cells) if removed]


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """Everything a reader of the notebook file can see: cell sources, outputs, metadata."""
    parts = [json.dumps(nb.metadata)]
    for cell in nb.cells:
        parts += [cell.source, json.dumps(cell.get("metadata", {}))]
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            for mime, value in output.get("data", {}).items():
                if mime.startswith("image/") and not mime.endswith("svg+xml"):
                    continue  # base64 pixels
                parts.append(value if isinstance(value, str) else json.dumps(value))
            parts += [output.get("evalue", ""), "\n".join(output.get("traceback", []))]
    return "\n".join(parts)


def _squash(text: str) -> str:
    return " ".join(text.split())


def _solution_pieces(nb: nbformat.NotebookNode) -> Iterator[str]:
    """The code lines and prose sentences of every solution of `nb`, whitespace squashed.

    The code lines are those of a code cell tagged `solution`, and those of the code blocks
    in a `{solution}` block's body as the directive parser reads them (`code_blocks`); the
    rest of the body, but the fences of code blocks and of nested directives, is prose.
    """
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            if SOLUTION_TAG in cell.get("metadata", {}).get("tags", []):
                yield from (_squash(line) for line in cell.source.splitlines())
            continue
        lines = cell.source.splitlines()
        code: dict[int, bool] = {}  # line -> code (True) or a code block's fence (False)
        for first, last in code_blocks(cell.source, index):
            code.update({first: False, last: False})
            code.update(dict.fromkeys(range(first + 1, last), True))
        for block in directive_blocks(cell.source, index):
            if block.name != "solution":
                continue
            body = block.last - len(block.body.split("\n")) if block.body else block.last
            prose = []
            for i in range(body, block.last):
                if code.get(i):
                    yield _squash(lines[i])
                elif i not in code and set(lines[i].strip()) != {":"}:
                    prose.append(lines[i])
            yield from _SENTENCE_END.split(_squash(" ".join(prose)))


def fingerprints(nb: nbformat.NotebookNode) -> set[str]:
    """The lines and sentences that only the solutions of `nb` contain.

    A code line or prose sentence of a solution counts if it has at least
    `MIN_CHARS` characters and does not also appear in the rest of the chapter
    (a checker call that the stub makes too, a formula the chapter taught).
    """
    elsewhere = _squash(notebook_text(student_notebook(nb)))
    pieces = set(_solution_pieces(nb))
    return {piece for piece in pieces if len(piece) >= MIN_CHARS and piece not in elsewhere}


def _without_code(markdown: str) -> str:
    """A markdown cell without the lines of its code blocks, as the directive parser reads
    them (`code_blocks`), but with those fenced as a MyST directive; a cell the parser
    refuses is kept whole."""
    try:
        blocks = code_blocks(markdown)
    except ValueError:
        return markdown
    lines = markdown.splitlines()
    code = {
        i
        for first, last in blocks
        if not _DIRECTIVE_FENCE.match(lines[first])
        for i in range(first, last)
    }
    return "\n".join(line for i, line in enumerate(lines) if i not in code)


def has_solution_directive(nb: nbformat.NotebookNode) -> bool:
    """Does `nb` show the text `{solution}` outside the code blocks of its markdown cells?

    Anywhere else (prose, code cells, outputs, metadata) it is a solution directive the
    parser did not cut out, or a sign of one. In a code block, as the parser reads them, it
    is an example that the parser keeps in both editions (how a solution is written).
    """
    shown = copy.deepcopy(nb)
    for cell in shown.cells:
        if cell.cell_type == "markdown":
            cell.source = _without_code(cell.source)
    return _ANY_SOLUTION.search(notebook_text(shown)) is not None


def notebook_leaks(source: nbformat.NotebookNode, student: nbformat.NotebookNode) -> list[str]:
    """The solution lines and sentences of `source` that `student` still shows (should be [])."""
    text = _squash(notebook_text(student))
    found = sorted(piece for piece in fingerprints(source) if piece in text)
    if has_solution_directive(student):
        found.append("a {solution} directive")
    return found


def _words(text: str) -> list[str]:
    return _WORD.findall(html.unescape(text).lower())


def _shingles(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


def _telling(shingle: tuple[str, ...]) -> bool:
    """Does a run of words say something (three real words), unlike '0 0 0 1 0 0 1 1'?"""
    return sum(len(word) >= 3 and word.isalpha() for word in shingle) >= 3


class PageChecker:
    """Finds solution text in a built book: its pages, `_sources` and search index.

    Built from the *source* notebooks (with their solutions) and the text of every
    other page of the book, so it knows which word runs and which words only
    solutions use.
    """

    def __init__(self, sources: Iterable[nbformat.NotebookNode], other_text: str = "") -> None:
        solution_words, rest_words = [], _words(other_text)
        for nb in sources:
            for text in solution_texts(nb):
                solution_words.append(_words(_MARKUP.sub(" ", text)))
            rest_words += _words(notebook_text(student_notebook(nb)))
        rest = _shingles(rest_words)
        self.shingles = {
            s for words in solution_words for s in _shingles(words) if _telling(s)
        } - rest
        # Words of four letters or more that appear in solutions and nowhere else,
        # as Sphinx's English search index stores them (stemmed).
        from sphinx.search.en import SearchEnglish

        stem = SearchEnglish({}).stem
        rest_stems = {stem(word) for word in set(rest_words)}
        self.only_words = {
            stem(word)
            for words in solution_words
            for word in words
            if len(word) >= 4 and word.isalpha() and stem(word) not in rest_stems
        }

    def text_leaks(self, text: str) -> set[tuple[str, ...]]:
        """The solution word runs found in `text` (HTML or not)."""
        return _shingles(_words(re.sub(r"<[^>]+>", " ", text))) & self.shingles

    def index_leaks(self, searchindex_js: str) -> set[str]:
        """The solution-only words found in a Sphinx `searchindex.js`."""
        body = searchindex_js[searchindex_js.index("(") + 1 : searchindex_js.rindex(")")]
        index = json.loads(body)
        terms = set(index.get("terms", {})) | set(index.get("titleterms", {}))
        return terms & self.only_words

    def scan(self, html_dir: Path) -> list[str]:
        """One line per leak in the built book `html_dir`: 'file: what' (should be [])."""
        leaks = []
        for path in sorted(html_dir.rglob("*")):
            relative = path.relative_to(html_dir)
            if not path.is_file() or relative.parts[0] in ("_static", "_images"):
                continue  # theme files, vendored MathJax, images
            if path.name == "searchindex.js":
                found = sorted(self.index_leaks(path.read_text(encoding="utf-8")))
            elif path.suffix == ".ipynb":
                nb = nbformat.read(path, as_version=4)
                found = [" ".join(s) for s in self.text_leaks(notebook_text(nb))]
                found += ["a {solution} directive"] * has_solution_directive(nb)
            elif path.suffix in (".html", ".txt", ".md", ".js", ".json"):
                found = [" ".join(s) for s in self.text_leaks(path.read_text(encoding="utf-8"))]
            else:
                continue
            leaks += [f"{relative}: {item}" for item in sorted(found)[:3]]
        return leaks


def chapter_paths(root: Path = ROOT) -> list[Path]:
    """Every chapter notebook on disk, in order."""
    return sorted((root / "chapters").glob("*.ipynb"))


def write_notebooks(paths: list[Path], out: Path) -> list[str]:
    """Write the student notebook of each path into `out`; return the leaks found (or [])."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    leaks = []
    for path in paths:
        source = nbformat.read(path, as_version=4)
        student = student_notebook(source)
        leaks += [f"{path.name}: {leak}" for leak in notebook_leaks(source, student)]
        nbformat.write(student, out / path.name)
    return leaks


README = """\
Attention, from scratch: the student edition
============================================

One notebook per chapter, in reading order, with the exercises and without
their solutions. Each exercise that asks for code has a cell like

    def my_x(...):
        raise NotImplementedError  # replace this line with your code

    check_x(my_x)

Replace the `raise` line with your code and run the cell: the checker tries
your function on hidden cases and says whether it passed, what went wrong, or
that you have not attempted it yet. Run a notebook from the top, since the
exercises use what the chapter builds.

On Google Colab (nothing to install)
  Go to https://colab.research.google.com, choose File > Upload notebook and
  pick one of the .ipynb files. Run the first cell: on Colab it installs the
  course package `attnbook` (and what that chapter needs). Keep your work with
  File > Save a copy in Drive, or File > Download > Download .ipynb.

On your own machine (Python 3.10 or newer)
  python -m venv .venv
  .venv/bin/pip install "{requirement} @ git+{url}@{ref}" jupyterlab
  .venv/bin/jupyter lab
  (on Windows: .venv\\Scripts\\pip and .venv\\Scripts\\jupyter){extras}
{wheel_note}
Hand in the notebooks the way your instructor asks, with your code in the
exercise cells.
"""


WHEEL_NOTE = """
Without GitHub (a machine that cannot reach it)
  This folder holds the course package itself:
    {wheel}
  Install it from that file instead of from GitHub, in this folder:
  .venv/bin/pip install "./{wheel}{extras}" jupyterlab
  pip still fetches what attnbook needs (NumPy, PyTorch, Matplotlib, ...) from
  PyPI. On a machine with no network at all, install those first from where
  your instructor says, then  .venv/bin/pip install --no-deps ./{wheel}
  On Colab, if the first cell cannot install the package, upload the wheel
  (the Files pane on the left) and run, in a new cell:
    %pip install ./{wheel}{colab_extras}
"""

# For each extra, the chapters that need it, and the Colab install of the wheel with it.
COLAB_EXTRA_NOTE = (
    "\n  or, in the chapters that need its [{extra}] part,\n  {chapters}:"
    '\n    %pip install "./{wheel}[{extra}]"'
)


def readme(url: str, ref: str | None = None, wheel: str | None = None) -> str:
    """The README.txt of the zip: how to run the notebooks, with the package's URL and ref.

    `wheel` is the file name of the package's wheel in the zip (None: no wheel, no note).
    """
    colab_extras = course.load().colab_extras
    extras = sorted(set(colab_extras.values()))
    requirement = f"attnbook[{','.join(extras)}]" if extras else "attnbook"
    chapters = ", ".join(f"{stem}.ipynb" for stem in sorted(colab_extras))
    note = (
        f"\n  The [{','.join(extras)}] part is for {chapters}; the rest do without."
        if extras
        else ""
    )
    colab_notes = "".join(
        COLAB_EXTRA_NOTE.format(
            chapters=", ".join(
                f"{stem}.ipynb" for stem, name in sorted(colab_extras.items()) if name == extra
            ),
            extra=extra,
            wheel=wheel,
        )
        for extra in extras
    )
    wheel_note = WHEEL_NOTE.format(
        wheel=wheel,
        extras=f"[{','.join(extras)}]" if extras else "",
        colab_extras=colab_notes,
    )
    wheel_note = wheel_note if wheel else ""
    return README.format(
        url=url,
        ref=ref or package_ref(),
        requirement=requirement,
        extras=note,
        wheel_note=wheel_note,
    )


def build_wheel(dist: Path, root: Path = ROOT) -> Path:
    """Build attnbook's wheel from `root` into the empty folder `dist`; return its path.

    The build uses the hatchling of the running Python (no build isolation, no network) with
    SOURCE_DATE_EPOCH fixed, so the same sources give the same bytes.
    """
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    command += ["--no-build-isolation", "-w", str(dist), str(root)]
    environment = {**os.environ, "SOURCE_DATE_EPOCH": _WHEEL_EPOCH}
    result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building the wheel failed:\n{result.stdout}{result.stderr}")
    (wheel,) = dist.glob(f"{PACKAGE}-*.whl")
    return wheel


def wheel_problems(wheel: Path) -> list[str]:
    """What the wheel holds besides the package and its metadata (should be []).

    A chapter, a notebook or anything outside `attnbook/` and `attnbook-*.dist-info/` would
    reach learners through the zip.
    """
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    found = [
        f"{wheel.name}: {name}"
        for name in names
        if not (
            name.startswith(f"{PACKAGE}/")
            or (name.split("/")[0].startswith(f"{PACKAGE}-") and ".dist-info/" in name)
        )
        or name.endswith(".ipynb")
    ]
    if f"{PACKAGE}/__init__.py" not in names:
        found.append(f"{wheel.name}: no {PACKAGE}/__init__.py")
    return found


def write_zip(
    notebooks: list[Path],
    target: Path,
    url: str,
    wheel: Path | None = None,
    ref: str | None = None,
) -> None:
    """Zip the notebooks, the wheel and a README.txt into `target`.

    Byte for byte the same for the same input.
    """
    target.unlink(missing_ok=True)
    entries = [("README.txt", readme(url, ref, wheel.name if wheel else None).encode())]
    if wheel:
        entries.append((wheel.name, wheel.read_bytes()))
    entries += [(path.name, path.read_bytes()) for path in sorted(notebooks)]
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(f"{ZIP_FOLDER}/{name}", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)


STUDENT_NOTE = """\
:::{note}
This is the **student edition** of the book: the exercises are here, their
solutions are not. To run a chapter, download its notebook with the download
button at the top of its page (`.ipynb`) and open it in JupyterLab, or upload it
to Colab (File > Upload notebook): its first cell installs the course package
there. Your instructor may also hand out all the notebooks in one zip.
:::
"""


def _toc_files(toc: dict) -> Iterator[str]:
    """Every `file:` of a Jupyter Book `_toc.yml`, the root first."""
    yield toc["root"]
    stack = [toc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node is not toc and "file" in node:
                yield node["file"]
            stack.extend(reversed([v for v in node.values() if isinstance(v, list | dict)]))
        elif isinstance(node, list):
            stack.extend(reversed(node))


def _config_paths(config: object, root: Path) -> Iterator[str]:
    """The first part of every path that `_config.yml` names and that exists (references.bib)."""
    if isinstance(config, dict):  # exclude_patterns name what the book leaves out
        config = [value for key, value in config.items() if key != "exclude_patterns"]
    if isinstance(config, list):
        for value in config:
            yield from _config_paths(value, root)
    elif isinstance(config, str) and "://" not in config and config.strip():
        path = Path(config)
        if not path.is_absolute() and ".." not in path.parts and (root / path).exists():
            yield path.parts[0]


def stage_book(root: Path, stage: Path, notebooks: Path) -> None:
    """Copy the book's sources to `stage`, with the student notebooks as chapters."""
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    shutil.copy2(root / "_toc.yml", stage / "_toc.yml")
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = f"{config['title']} (student edition)"
    config.setdefault("html", {})["use_repository_button"] = False
    config["launch_buttons"] = {"binderhub_url": "", "colab_url": "", "jupyterhub_url": ""}
    config.setdefault("sphinx", {}).setdefault("config", {})["hide_solutions"] = True
    (stage / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for index, name in enumerate(_toc_files(toc)):
        matches = [root / f"{name}{suffix}" for suffix in ("", ".md", ".ipynb")]
        source = next(path for path in matches if path.is_file())
        target = stage / source.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".ipynb":
            student = notebooks / source.name
            if source.parent.name == "chapters" and student.is_file():
                shutil.copy2(student, target)
            else:
                nbformat.write(student_notebook(nbformat.read(source, as_version=4)), target)
        else:
            text = strip_solutions(source.read_text(encoding="utf-8"))
            if index == 0:  # the start page: say which edition this is, under its title
                title, _, rest = text.partition("\n")
                text = f"{title}\n\n{STUDENT_NOTE}\n{rest.lstrip()}"
            target.write_text(text, encoding="utf-8")
    # What the pages and the configuration use (figures, the bibliography, the
    # extension, a favicon): read, never written, so links save the copying.
    for name in sorted({"images", "assets", *_config_paths(config, root)}):
        if (root / name).exists() and not (stage / name).exists() and name != "_build":
            (stage / name).symlink_to(root / name)


def other_pages_text(root: Path) -> str:
    """The text of the book's pages that are not chapter notebooks, and of references.bib."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    parts = [(root / "references.bib").read_text(encoding="utf-8")]
    for name in _toc_files(toc):
        for suffix in ("", ".md"):
            path = root / f"{name}{suffix}"
            if path.is_file() and path.suffix == ".md":
                parts.append(strip_solutions(path.read_text(encoding="utf-8")))
    return "\n".join(parts) + STUDENT_NOTE


def build_book(root: Path, out: Path, notebooks: Path) -> bool:
    """Build the book from student sources into `out / "html"`; False if the build failed.

    Warnings are errors, as in `make book`. A failed build leaves no `html/`
    behind (only its staged sources in `out / "book-source"`, to look at).
    """
    stage = out / "book-source"
    shutil.rmtree(out / "html", ignore_errors=True)
    stage_book(root, stage, notebooks)
    command = [
        str(Path(sys.executable).parent / "jupyter-book"),
        *("build", str(stage), "--warningiserror", "--nitpick", "--keep-going"),
    ]
    environment = {**os.environ, "ATTNBOOK_HIDE_SOLUTIONS": "1"}
    if subprocess.run(command, cwd=root, env=environment, check=False).returncode != 0:
        return False
    shutil.move(stage / "_build" / "html", out / "html")
    shutil.rmtree(stage)
    return True


# The refusals name both ways to run each step, `make` and the module, as either may be
# how it was run.
PLACEHOLDER_REFUSAL = """\
refusing to build the student edition (make student, or python -m tools.make_student):
the repository URL in _config.yml is still the placeholder
    {url}
Every notebook's Colab cell and the zip's README would tell learners to install the
course package from there, which fails.
Set `repository: url:` (and `package_ref:`, the tag or commit learners install) in
_config.yml to your repository, run `make sync-url` (or python -m tools.sync_repo_url),
then build it again.
To build anyway (tests, CI, a look at the result): make student ALLOW_PLACEHOLDER_URL=1
(or, run without make, python -m tools.make_student --allow-placeholder-url)"""


STALE_REFUSAL = """\
refusing to build the student edition (make student, or python -m tools.make_student):
the Colab cell of {count} chapter(s) ({names}) does not install the course package from
    {url}@{ref}
as _config.yml says (`repository: url:` and `package_ref:`), so learners would install it
from elsewhere. Run `make sync-url` (or python -m tools.sync_repo_url: it rewrites those
cells), then build it again."""


def stale_colab_cells(paths: Iterable[Path], url: str, ref: str) -> list[Path]:
    """The chapters whose Colab cell does not install from `url` at `ref`: `_config.yml` was
    changed and `make sync-url` not run since (a handout built then would send learners to
    the old repository or tag)."""
    stale = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        first = next((cell for cell in nb.cells if cell.cell_type == "code"), None)
        if first is None or first.source != colab_cell_source(url, path.stem, ref):
            stale.append(path)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-book", action="store_true", help="notebooks and zip only")
    parser.add_argument(
        "--allow-placeholder-url",
        action="store_true",
        help="build even though _config.yml has the placeholder URL (tests, CI)",
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    url = repository_url()
    if is_placeholder(url):
        if not args.allow_placeholder_url:
            print(PLACEHOLDER_REFUSAL.format(url=url), file=sys.stderr)
            return 2
        print(f"warning: building with the placeholder URL {url}; not for learners")
    paths = chapter_paths()
    ref = package_ref()
    if stale := stale_colab_cells(paths, url, ref):
        names = ", ".join(path.stem for path in stale[:3]) + (", ..." if len(stale) > 3 else "")
        message = STALE_REFUSAL.format(count=len(stale), names=names, url=url, ref=ref)
        print(message, file=sys.stderr)
        return 2
    leaks = write_notebooks(paths, OUT / "notebooks")
    wheel = build_wheel(OUT / "dist")
    leaks += wheel_problems(wheel)
    write_zip(sorted((OUT / "notebooks").glob("*.ipynb")), OUT / ZIP_NAME, url, wheel)
    print(f"student notebooks: {len(paths)} in {OUT / 'notebooks'}; zip: {OUT / ZIP_NAME}")
    if not args.no_book:
        if not build_book(ROOT, OUT, OUT / "notebooks"):
            print("the student book did not build (see the warnings above)")
            return 1
        sources = [nbformat.read(path, as_version=4) for path in paths]
        leaks += PageChecker(sources, other_pages_text(ROOT)).scan(OUT / "html")
        print(f"student book: file://{OUT / 'html' / 'index.html'}")
    if leaks:
        print(f"SOLUTION TEXT LEAKS into the student edition ({len(leaks)}):")
        print("\n".join(f"  {leak}" for leak in leaks))
        return 1
    print(f"no solution text found in the student edition ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
