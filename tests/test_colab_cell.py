"""The Colab cell of every chapter does what CONTRIBUTING.md promises.

The first code cell of a chapter (`colab_cell_source` of tools/sync_repo_url.py) must
do nothing outside Colab and, on Colab, run exactly one `%pip install` of `attnbook`
(or `attnbook[extra]` for a chapter with a `colab_extra` in course.yml) from the repository URL of
`_config.yml`. The cell is run here the way IPython runs it: through IPython's input
transformer (which turns `%pip ...` into `get_ipython().run_line_magic("pip", ...)`),
then `exec` with a fake `get_ipython()` that records every magic or shell command it is
asked to run, once without and once with a fake `google.colab` module.

That the requirement really installs and imports (with its URL pointed at a local clone,
`git+file://`) is proven by tools/learner_path.py, the step "learner" of `make test`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from packaging.requirements import InvalidRequirement, Requirement

from tools import course, sync_repo_url

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
PACKAGE = "attnbook"


URL = sync_repo_url.repository_url(ROOT)
# Every chapter stem: the chapters present and those course.yml gives an extra (chapter 11 may
# come later than its entry there).
STEMS = sorted({path.stem for path in CHAPTERS} | set(course.load().colab_extras))


class RecordingShell:
    """A stand-in for IPython's shell: records what the cell asks it to run, runs nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> None:
        self.calls.append((f"%{name}", line))

    def run_cell_magic(self, name: str, line: str, cell: str) -> None:
        self.calls.append((f"%%{name}", f"{line}\n{cell}"))

    def system(self, command: str) -> None:  # `!pip install ...`
        self.calls.append(("!", command))

    getoutput = system  # `x = !cmd`


@contextmanager
def on_colab(colab: bool) -> Iterator[None]:
    """Make `"google.colab" in sys.modules` true (a fake module) or false, then restore it."""
    saved = sys.modules.get("google.colab")
    if colab:
        sys.modules["google.colab"] = ModuleType("google.colab")
    else:
        sys.modules.pop("google.colab", None)
    try:
        yield
    finally:
        sys.modules.pop("google.colab", None)
        if saved is not None:
            sys.modules["google.colab"] = saved


def run_cell(source: str, *, colab: bool) -> list[tuple[str, str]]:
    """Run `source` as IPython would, on Colab or not; return the (magic, line) calls it made."""
    shell = RecordingShell()
    python = TransformerManager().transform_cell(source)
    with on_colab(colab):
        exec(compile(python, "<colab cell>", "exec"), {"get_ipython": lambda: shell})
    return shell.calls


def colab_cell_problems(source: str, url: str, extra: str | None) -> list[str]:
    """What is wrong with a Colab cell (empty: nothing) that should install attnbook[extra].

    Args:
        source: the cell's text, with IPython's `%` syntax.
        url: the repository URL of `_config.yml` (`https://github.com/OWNER/REPO`).
        extra: the extra of pyproject.toml the chapter needs, or None.
    """
    problems = []
    try:
        outside, inside = run_cell(source, colab=False), run_cell(source, colab=True)
    except Exception as error:
        return [f"the cell raises {type(error).__name__}: {error}"]
    if outside:
        problems.append(f"outside Colab it runs {outside}; it must do nothing there")
    pips = [line for magic, line in inside if magic == "%pip"]
    if len(inside) != 1 or len(pips) != 1:
        return [*problems, f"on Colab it runs {inside}; it must run exactly one %pip"]
    words = shlex.split(pips[0])
    positional = [word for word in words[1:] if not word.startswith("-")]
    if words[:1] != ["install"] or len(positional) != 1:
        return [*problems, f"%pip {pips[0]}: expected `install [options] REQUIREMENT`"]
    try:
        requirement = Requirement(positional[0])
    except InvalidRequirement as error:
        return [*problems, f"{positional[0]!r} is not a PEP 508 requirement: {error}"]
    if requirement.name != PACKAGE:
        problems.append(f"it installs {requirement.name!r}, not {PACKAGE!r}")
    wanted_extras = {extra} if extra else set()
    if requirement.extras != wanted_extras:
        problems.append(f"extras {sorted(requirement.extras)}, expected {sorted(wanted_extras)}")
    if requirement.url != f"git+{url}":
        problems.append(f"it installs from {requirement.url!r}, not 'git+{url}'")
    if requirement.specifier or requirement.marker:
        problems.append(f"{requirement}: no version specifier or marker expected")
    return problems


# --- every chapter's cell is right ------------------------------------------------------


@pytest.mark.parametrize("stem", STEMS)
def test_canonical_cell_installs_attnbook_only_on_colab(stem: str) -> None:
    source = sync_repo_url.colab_cell_source(URL, stem)
    extra = course.load().colab_extras.get(stem)
    assert colab_cell_problems(source, URL, extra) == []


@pytest.mark.skipif(not CHAPTERS, reason="no chapter in chapters/")
@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_stored_colab_cell_runs_as_promised(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = next(cell for cell in nb.cells if cell.cell_type == "code")
    extra = course.load().colab_extras.get(path.stem)
    assert colab_cell_problems(first.source, URL, extra) == []


def test_chapter_11_installs_the_pretrained_extra() -> None:
    calls = run_cell(sync_repo_url.colab_cell_source(URL, "11_inside_attention"), colab=True)
    (requirement,) = [Requirement(shlex.split(line)[-1]) for _, line in calls]
    assert (requirement.name, requirement.extras) == (PACKAGE, {"pretrained"})
    assert requirement.url == f"git+{URL}"


def test_the_cell_is_run_through_ipythons_transformer() -> None:
    python = TransformerManager().transform_cell(sync_repo_url.colab_cell_source(URL, None))
    assert "%pip" not in python
    assert "get_ipython().run_line_magic('pip'" in python


def test_fake_colab_module_is_restored() -> None:
    before = "google.colab" in sys.modules
    run_cell(sync_repo_url.colab_cell_source(URL, None), colab=True)
    assert ("google.colab" in sys.modules) == before


# --- the checker rejects wrong cells ----------------------------------------------------

GOOD = sync_repo_url.colab_cell_source(URL, None)
GOOD_11 = sync_repo_url.colab_cell_source(URL, "11_inside_attention")
WRONG_CELLS = {
    "wrong package": (GOOD.replace('"attnbook @', '"attnbok @'), None, "not 'attnbook'"),
    "no guard": (f'%pip install --quiet "attnbook @ git+{URL}"', None, "outside Colab"),
    "inverted guard": (GOOD.replace(" in sys.modules", " not in sys.modules"), None, "outside"),
    "two installs": (GOOD + "\n    %pip install --quiet numpy", None, "exactly one %pip"),
    "shell pip": (GOOD.replace("%pip", "!pip"), None, "exactly one %pip"),
    "other repository": (
        GOOD.replace(URL, "https://github.com/someone/else"),
        None,
        "not 'git+",
    ),
    "not git": (GOOD.replace("git+", ""), None, "not 'git+"),
    "not PEP 508": (GOOD.replace(" @ ", " "), None, "not a PEP 508"),
    "broken requirement": (GOOD.replace(" @ git+", " @@ git+"), None, "not a PEP 508"),
    "pinned version": (GOOD.replace("attnbook @", "attnbook==0.1 @"), None, "not a PEP 508"),
    "extra missing": (GOOD, "pretrained", "extras []"),
    "extra not wanted": (GOOD_11, None, "extras ['pretrained']"),
    "uninstall": (GOOD.replace("install --quiet", "uninstall -y"), None, "expected `install"),
    "raises": (GOOD.replace("import sys", "import sys_"), None, "raises ModuleNotFoundError"),
}


@pytest.mark.parametrize("case", WRONG_CELLS, ids=str)
def test_checker_rejects_a_wrong_cell(case: str) -> None:
    source, extra, expected = WRONG_CELLS[case]
    problems = colab_cell_problems(source, URL, extra)
    assert problems, f"{case}: the checker accepted\n{source}"
    assert any(expected in problem for problem in problems), problems
