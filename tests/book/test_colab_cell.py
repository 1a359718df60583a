"""The Colab cell of every chapter does what CONTRIBUTING.md promises.

The first code cell of a chapter (`colab_cell_source` of tools/sync_repo_url.py) must
do nothing outside Colab and, on Colab, run pip exactly once, as `sys.executable -m pip
install`, for `attnbook` (or `attnbook[extra]` for a chapter with a `colab_extra` in
course.yml) from the repository URL of `_config.yml` at its `package_ref`; and when pip
fails, it must stop the notebook with a `RuntimeError` that quotes pip. The cell is run
here the way IPython runs it: through IPython's input transformer (which would turn a
`%pip ...` into `get_ipython().run_line_magic(...)`), then `exec` with a fake
`get_ipython()` that records every magic or shell command, and with `subprocess.run`
replaced by a fake pip that records its command and succeeds or fails as told; once
without and once with a fake `google.colab` module.

That the requirement really installs and imports (with its URL pointed at a local clone,
`git+file://`, tagged with the ref) is proven by tools/learner_path.py, the step "learner"
of `make test`.
"""

from __future__ import annotations

import subprocess
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

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
PACKAGE = "attnbook"


URL = sync_repo_url.repository_url(ROOT)
REF = sync_repo_url.package_ref(ROOT)
# Every chapter stem: the chapters present and those course.yml gives an extra (chapter 13 may
# come later than its entry there).
STEMS = sorted({path.stem for path in CHAPTERS} | set(course.load().colab_extras))
PIP_ERROR = "ERROR: Could not find a version that satisfies the requirement (simulated)"


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


@contextmanager
def fake_pip(returncode: int, commands: list[list[str]]) -> Iterator[None]:
    """Replace `subprocess.run` by a pip that records its command and exits with `returncode`."""

    def run(command, *args, **kwargs) -> subprocess.CompletedProcess:
        commands.append([str(part) for part in command])
        stderr = PIP_ERROR if returncode else ""
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr=stderr)

    real = subprocess.run
    subprocess.run = run
    try:
        yield
    finally:
        subprocess.run = real


def run_cell(
    source: str, *, colab: bool, pip_returncode: int = 0
) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """Run `source` as IPython would, on Colab or not.

    Returns the (magic, line) calls it made to the shell and the commands it gave
    `subprocess.run` (whose fake pip exits with `pip_returncode`).
    """
    shell = RecordingShell()
    commands: list[list[str]] = []
    python = TransformerManager().transform_cell(source)
    with on_colab(colab), fake_pip(pip_returncode, commands):
        exec(compile(python, "<colab cell>", "exec"), {"get_ipython": lambda: shell})
    return shell.calls, commands


def colab_cell_problems(source: str, url: str, extra: str | None, ref: str = REF) -> list[str]:
    """What is wrong with a Colab cell (empty: nothing) that should install attnbook[extra].

    Args:
        source: the cell's text, with IPython's `%` syntax.
        url: the repository URL of `_config.yml` (`https://github.com/OWNER/REPO`).
        extra: the extra of pyproject.toml the chapter needs, or None.
        ref: the tag or commit it should install (`package_ref` of `_config.yml`).
    """
    problems = []
    try:
        outside, inside = run_cell(source, colab=False), run_cell(source, colab=True)
    except Exception as error:
        return [f"the cell raises {type(error).__name__}: {error}"]
    if outside != ([], []):
        problems.append(f"outside Colab it runs {outside}; it must do nothing there")
    shell_calls, commands = inside
    if shell_calls:
        problems.append(f"on Colab it asks IPython to run {shell_calls}: pip's status is lost")
    if len(commands) != 1:
        return [*problems, f"on Colab it runs {commands}; it must run pip exactly once"]
    (command,) = commands
    if command[:4] != [sys.executable, "-m", "pip", "install"]:
        return [*problems, f"it runs {command}: expected `sys.executable -m pip install ...`"]
    positional = [word for word in command[4:] if not word.startswith("-")]
    if len(positional) != 1:
        return [*problems, f"it installs {positional}: expected one requirement"]
    try:
        requirement = Requirement(positional[0])
    except InvalidRequirement as error:
        return [*problems, f"{positional[0]!r} is not a PEP 508 requirement: {error}"]
    if requirement.name != PACKAGE:
        problems.append(f"it installs {requirement.name!r}, not {PACKAGE!r}")
    wanted_extras = {extra} if extra else set()
    if requirement.extras != wanted_extras:
        problems.append(f"extras {sorted(requirement.extras)}, expected {sorted(wanted_extras)}")
    if requirement.url != f"git+{url}@{ref}":
        problems.append(f"it installs from {requirement.url!r}, not 'git+{url}@{ref}'")
    if requirement.specifier or requirement.marker:
        problems.append(f"{requirement}: no version specifier or marker expected")
    try:
        run_cell(source, colab=True, pip_returncode=1)
    except RuntimeError as error:
        if PIP_ERROR not in str(error) or positional[0] not in str(error):
            problems.append(f"a failed install raises {error!r}: name the requirement, quote pip")
    except BaseException as error:  # SystemExit too
        problems.append(f"a failed install raises {type(error).__name__}, not RuntimeError")
    else:
        problems.append("a failed install does not stop the notebook")
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


def test_chapter_13_installs_the_pretrained_extra() -> None:
    _, commands = run_cell(sync_repo_url.colab_cell_source(URL, "13_inside_attention"), colab=True)
    (requirement,) = [Requirement(command[-1]) for command in commands]
    assert (requirement.name, requirement.extras) == (PACKAGE, {"pretrained"})
    assert requirement.url == f"git+{URL}@{REF}"


def test_a_failed_install_stops_the_notebook_and_says_why() -> None:
    source = sync_repo_url.colab_cell_source(URL, None)
    with pytest.raises(RuntimeError, match="Could not install attnbook @ git") as raised:
        run_cell(source, colab=True, pip_returncode=1)
    message = str(raised.value)
    assert PIP_ERROR in message, "pip's own words are quoted"
    assert "exit status 1" in message
    assert "attnbook-*.whl" in message, "it says what to do instead"
    # Outside Colab nothing runs, so nothing can fail.
    assert run_cell(source, colab=False, pip_returncode=1) == ([], [])


@pytest.mark.parametrize("stem", STEMS)
def test_a_failed_install_gives_the_wheel_install_of_its_chapter(stem: str) -> None:
    """The fallback `%pip install` of the course zip's wheel adds the chapter's extra (chapters
    11 to 13: `"$(ls attnbook-*.whl)[pretrained]"`, the form pip was seen to accept from
    `%pip` with the wheel's extra dependencies); the other chapters install the bare wheel."""
    extra = course.load().colab_extras.get(stem)
    with pytest.raises(RuntimeError) as raised:
        run_cell(sync_repo_url.colab_cell_source(URL, stem), colab=True, pip_returncode=1)
    message = str(raised.value)
    if extra:
        assert f'`%pip install "$(ls attnbook-*.whl)[{extra}]"`' in message, message
        assert "`%pip install attnbook-*.whl`" not in message
    else:
        assert "`%pip install attnbook-*.whl`" in message, message
        assert "[" not in message.split("%pip install", 1)[1].split("`", 1)[0]


def test_the_ref_is_the_one_of_config_and_can_be_a_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    source = sync_repo_url.colab_cell_source(URL, None, ref=commit)
    assert colab_cell_problems(source, URL, None, ref=commit) == []
    assert colab_cell_problems(source, URL, None) != [], "a cell pinned elsewhere is out of date"
    for config in (
        "repository:\n  url: https://example.org/x\n",
        "repository:\n  package_ref: a b\n",
    ):
        (tmp_path / "_config.yml").write_text(config, encoding="utf-8")
        with pytest.raises(ValueError, match="package_ref"):
            sync_repo_url.package_ref(tmp_path)


def test_the_launch_buttons_open_the_notebooks_of_the_installed_ref() -> None:
    """The book's Colab and Binder buttons open the notebooks at `repository: branch:`; the
    Colab cell installs the package at `package_ref:`. They must be the same ref: notebooks of
    a moving branch could call a checker that the pinned package does not have."""
    import yaml

    repository = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    assert str(repository.get("branch")) == REF, (repository.get("branch"), REF)


def test_the_cell_runs_no_ipython_magic() -> None:
    python = TransformerManager().transform_cell(sync_repo_url.colab_cell_source(URL, None))
    assert "get_ipython()" not in python, "a magic's failure would not stop the notebook"


def test_fake_colab_module_and_subprocess_are_restored() -> None:
    before = "google.colab" in sys.modules
    run = subprocess.run
    run_cell(sync_repo_url.colab_cell_source(URL, None), colab=True)
    with pytest.raises(RuntimeError):
        run_cell(sync_repo_url.colab_cell_source(URL, None), colab=True, pip_returncode=2)
    assert ("google.colab" in sys.modules) == before
    assert subprocess.run is run


# --- the checker rejects wrong cells ----------------------------------------------------

GOOD = sync_repo_url.colab_cell_source(URL, None)
GOOD_11 = sync_repo_url.colab_cell_source(URL, "13_inside_attention")
OLD_MAGIC = f'import sys\nif "google.colab" in sys.modules:\n    %pip install --quiet "attnbook @ git+{URL}@{REF}"'
WRONG_CELLS = {
    "wrong package": (GOOD.replace('"attnbook @', '"attnbok @'), None, "not 'attnbook'"),
    "no guard": (GOOD.replace('if "google.colab" in sys.modules:', "if True:"), None, "outside"),
    "inverted guard": (GOOD.replace(" in sys.modules", " not in sys.modules"), None, "outside"),
    "two installs": (
        GOOD + '\n    subprocess.run([sys.executable, "-m", "pip", "install", "numpy"])',
        None,
        "exactly once",
    ),
    "%pip magic": (OLD_MAGIC, None, "pip's status is lost"),
    "shell pip": (OLD_MAGIC.replace("%pip", "!pip"), None, "pip's status is lost"),
    "other python": (GOOD.replace("[sys.executable,", '["python3",'), None, "sys.executable"),
    "other repository": (
        GOOD.replace(URL, "https://github.com/someone/else"),
        None,
        "not 'git+",
    ),
    "not pinned": (GOOD.replace(f"@{REF}", ""), None, "not 'git+"),
    "other ref": (GOOD.replace(f"@{REF}", "@main"), None, "not 'git+"),
    "not git": (GOOD.replace("git+", ""), None, "not 'git+"),
    "not PEP 508": (GOOD.replace(" @ git", " git"), None, "not a PEP 508"),
    "broken requirement": (GOOD.replace(" @ git+", " @@ git+"), None, "not a PEP 508"),
    "pinned version": (GOOD.replace("attnbook @", "attnbook==0.1 @"), None, "not a PEP 508"),
    "extra missing": (GOOD, "pretrained", "extras []"),
    "extra not wanted": (GOOD_11, None, "extras ['pretrained']"),
    "uninstall": (GOOD.replace('"install", ', '"uninstall", "-y", '), None, "pip install"),
    "raises": (GOOD.replace("import sys", "import sys_"), None, "raises ModuleNotFoundError"),
    "failure ignored": (GOOD.replace("_pip.returncode != 0", "False"), None, "does not stop"),
    "failure silent": (
        GOOD.replace("+ (_pip.stdout + _pip.stderr)[-3000:]", ""),
        None,
        "quote pip",
    ),
    "failure exits": (
        GOOD.replace("raise RuntimeError(", "raise SystemExit("),
        None,
        "not RuntimeError",
    ),
}


@pytest.mark.parametrize("case", WRONG_CELLS, ids=str)
def test_checker_rejects_a_wrong_cell(case: str) -> None:
    source, extra, expected = WRONG_CELLS[case]
    assert source != GOOD or extra, f"{case}: the replacement changed nothing"
    problems = colab_cell_problems(source, URL, extra)
    assert problems, f"{case}: the checker accepted\n{source}"
    assert any(expected in problem for problem in problems), problems
