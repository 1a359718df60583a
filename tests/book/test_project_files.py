"""The project's files keep the promises of README.md and CONTRIBUTING.md.

- the repository URL of `_config.yml` is the one shown everywhere (`make sync-url`);
- `requirements.txt` pins every package exactly (torch to 2.13.0), covers
  `requirements.in`, and agrees with `environment.yml`;
- the book renders stored outputs and never tolerates errors;
- the table of contents and `chapters/` list the same chapters;
- references.bib prints as written: a sentence after `?` or `!` in a title keeps its
  capital, a year agrees with the one its proceedings name, and an entry gives one address;
- every chapter has the anatomy of CONTRIBUTING.md: the Colab cell first, cells
  run in order without errors, objectives, exercises with a checker and hidden
  solutions, key takeaways, references, and figures with captions and alt text;
- no maths puts a macro inside `\\text{}`, whose argument MathJax prints as it is;
- few cells escape nbval's comparison of outputs.

Notebook checks are parametrized by chapter, so a failure names the chapter.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools import run_tests, sync_repo_url

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
TORCH_PIN = "torch==2.13.0"
IGNORE_LIMIT = 0.05  # share of code cells whose output nbval may skip
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")


def _pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a requirements file."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", line.strip())
        if match:
            pins[canonicalize_name(match[1])] = match[2]
    return pins


# --- repository URL, pins, configuration --------------------------------------------------------


def test_repository_url_is_in_sync() -> None:
    found = sync_repo_url.find_out_of_sync(ROOT)
    listing = "\n".join(f"  {p.path.relative_to(ROOT)}: {p.reason}" for p in found)
    assert not found, f"these files disagree with repository.url of _config.yml:\n{listing}\n" + (
        "run `make sync-url`"
    )


def test_the_placeholder_url_is_recognised() -> None:
    placeholder = "https://github.com/your-org/attention-from-scratch"
    assert sync_repo_url.is_placeholder(placeholder)
    assert sync_repo_url.is_placeholder(placeholder + "/")
    notice = sync_repo_url.placeholder_notice(placeholder)
    assert notice
    assert "_config.yml" in notice
    assert "make sync-url" in notice
    for real in (
        "https://github.com/someone/attention-from-scratch",
        "https://github.com/your-org-2/attention-from-scratch",
        "https://gitlab.com/teach/your-org",
    ):
        assert not sync_repo_url.is_placeholder(real), real
        assert sync_repo_url.placeholder_notice(real) is None


def test_sync_points_the_documented_install_and_grading_commands_at_the_url_and_tag(
    tmp_path: Path,
) -> None:
    """The pip commands of README.md and instructors.md (the grader's `attnbook[grade] @
    git+...@tag`) follow `repository: url:` and `package_ref:` of _config.yml, as the Colab
    cells do; run on a copy with another URL and tag (no chapters: only the text files)."""
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    url, ref = sync_repo_url.repository_url(ROOT), sync_repo_url.package_ref(ROOT)
    config = config.replace(f"url: {url}", "url: https://github.com/someone/course")
    (tmp_path / "_config.yml").write_text(
        config.replace(f"package_ref: {ref}", "package_ref: course-2026"), encoding="utf-8"
    )
    for name in ("README.md", "instructors.md"):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    fixed = {p.path.name for p in sync_repo_url.sync(tmp_path)}
    assert fixed == {"README.md", "instructors.md"}
    grade = '"attnbook[grade] @ git+https://github.com/someone/course@course-2026"'
    for name in ("README.md", "instructors.md"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert f"pip install {grade}" in text, name
        assert not re.findall(r"git\+https://(?!github\.com/someone/course@course-2026\b)", text)
    assert not sync_repo_url.find_out_of_sync(tmp_path)


# --- the Makefile's logic, read with `make -n` (nothing is run) ---------------------------------

MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _make_n(tmp_path: Path, *args: str, uid: int = 1000) -> str:
    """What `make -n ARGS` would run, as a user whose `id -u` says `uid` (a fake `id`)."""
    bin_dir = tmp_path / f"bin-{uid}"
    bin_dir.mkdir(exist_ok=True)
    fake_id = bin_dir / "id"
    fake_id.write_text(f"#!/bin/sh\necho {uid}\n", encoding="utf-8")
    fake_id.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MAKEFLAGS", None)
    result = subprocess.run(
        [MAKE, "-n", "--no-print-directory", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _lab_command(output: str) -> str:
    joined = output.replace("\\\n", " ")
    (line,) = [line for line in joined.splitlines() if "jupyter lab" in line]
    return line


@needs_make
def test_make_lab_allows_root_only_as_root_and_passes_lab_args(tmp_path: Path) -> None:
    as_root = _lab_command(_make_n(tmp_path, "lab", uid=0))
    as_user = _lab_command(_make_n(tmp_path, "lab", uid=1000))
    assert "--allow-root" in as_root.split()
    assert "--allow-root" not in as_user.split()
    headless = _lab_command(_make_n(tmp_path, "lab", "LAB_ARGS=--no-browser --ip=127.0.0.1"))
    assert headless.split()[-2:] == ["--no-browser", "--ip=127.0.0.1"]


@needs_make
def test_make_student_refuses_the_placeholder_unless_allowed(tmp_path: Path) -> None:
    def student(output: str) -> list[str]:
        return next(line.split() for line in output.splitlines() if "tools.make_student" in line)

    assert "--allow-placeholder-url" not in student(_make_n(tmp_path, "student"))
    allowed = student(_make_n(tmp_path, "student", "ALLOW_PLACEHOLDER_URL=1"))
    assert allowed[-1] == "--allow-placeholder-url"
    # The test runner builds the student edition of this repository, which has the placeholder.
    (step,) = [step for step in run_tests.steps() if step.key == "student"]
    assert "--allow-placeholder-url" in step.command


@needs_make
def test_make_book_prints_the_placeholder_notice_first(tmp_path: Path) -> None:
    lines = _make_n(tmp_path, "book").splitlines()
    book = [i for i, line in enumerate(lines) if "jupyter-book build" in line]
    notice = [i for i, line in enumerate(lines) if "tools.sync_repo_url --notice" in line]
    assert notice
    assert book
    assert notice[0] < book[0]


def test_torch_is_pinned() -> None:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert TORCH_PIN in [line.strip() for line in lines], f"requirements.txt must pin {TORCH_PIN}"


def test_every_requirement_is_an_exact_pin() -> None:
    loose = []
    for number, line in enumerate((ROOT / "requirements.txt").read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#") or text.startswith(("--index-url", "--extra-index")):
            continue  # comments, and where to find packages (e.g. torch's CPU index)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?==[^\s=<>!~;,]+", text):
            loose.append(f"line {number}: {text}")
    assert not loose, "requirements.txt must pin every package as name==version:\n" + "\n".join(
        loose
    )


def test_requirements_in_is_pinned_in_requirements_txt() -> None:
    pins = _pins(ROOT / "requirements.txt")
    problems = []
    for line in (ROOT / "requirements.in").read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):
            continue
        requirement = Requirement(text)
        version = pins.get(canonicalize_name(requirement.name))
        if version is None:
            problems.append(f"{requirement.name} is not pinned")
        elif not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement.name}=={version} does not satisfy {requirement}")
    assert not problems, "requirements.txt vs requirements.in (run `make lock`):\n" + "\n".join(
        problems
    )


def test_environment_yml_agrees_with_requirements_txt() -> None:
    path = ROOT / "environment.yml"
    if not path.is_file():
        pytest.skip("no environment.yml")
    pins = _pins(ROOT / "requirements.txt")
    conda = {}
    for entry in yaml.safe_load(path.read_text(encoding="utf-8"))["dependencies"]:
        if isinstance(entry, str):
            match = re.fullmatch(r"([A-Za-z0-9._-]+)\s*=+\s*([^\s=<>]+)", entry)
            if match:
                conda[canonicalize_name(match[1])] = match[2]
    problems = [
        f"{name} is not pinned" for name in ("numpy", "scipy", "matplotlib") if name not in conda
    ]
    problems += [
        f"{name}: environment.yml has {version}, requirements.txt has {pins[name]}"
        for name, version in sorted(conda.items())
        if name in pins and pins[name] != version
    ]
    assert not problems, "environment.yml vs requirements.txt:\n" + "\n".join(problems)


def _find_key(node: object, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(_find_key(value, key) for value in node.values())
    if isinstance(node, list):
        return any(_find_key(value, key) for value in node)
    return False


def test_book_renders_stored_outputs_and_allows_no_errors() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    for key in ("allow_errors", "nb_execution_allow_errors", "execution_allow_errors"):
        assert not _find_key(config, key), f"_config.yml must not set {key}"
    mode = (config.get("execute") or {}).get("execute_notebooks")
    assert mode == "off", (
        f'_config.yml: execute.execute_notebooks must be "off" (quoted), got {mode!r}; '
        "notebooks are committed executed and checked by nbval"
    )


def _toc_files(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["file"]] if "file" in node else []
        return found + [f for value in node.values() for f in _toc_files(value)]
    if isinstance(node, list):
        return [f for value in node for f in _toc_files(value)]
    return []


def test_table_of_contents_lists_every_chapter() -> None:
    on_disk = {p.with_suffix("").relative_to(ROOT).as_posix() for p in CHAPTERS}
    on_disk |= {p.with_suffix("").relative_to(ROOT).as_posix() for p in ROOT.glob("chapters/*.md")}
    assert len(on_disk) >= 12, f"chapters/ holds {len(on_disk)} chapters, the book has 12"
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    listed = {re.sub(r"\.(ipynb|md)$", "", f) for f in _toc_files(toc)}
    listed_chapters = {f for f in listed if f.startswith("chapters/")}
    assert not on_disk - listed_chapters, f"not in _toc.yml: {sorted(on_disk - listed_chapters)}"
    assert not listed_chapters - on_disk, (
        f"_toc.yml lists missing chapters: {sorted(listed_chapters - on_disk)}"
    )


# --- references.bib, as the pages print it ------------------------------------------------------


def _bibliography() -> dict[str, dict[str, str]]:
    """Each entry of references.bib: key -> its fields, as written (no LaTeX decoded)."""
    from pybtex.database import parse_file  # sphinxcontrib-bibtex's parser

    entries = parse_file(ROOT / "references.bib").entries
    return {
        key: {name.lower(): value for name, value in e.fields.items()} for key, e in entries.items()
    }


def test_a_sentence_inside_a_reference_title_keeps_its_capital() -> None:
    """The book's style (plain) lowercases every letter of a title but the first and the braced
    ones, so "Homemaker? Debiasing" was printed "homemaker? debiasing": the first letter of a
    sentence after `?` or `!` in a title must be braced ("Homemaker? {D}ebiasing")."""
    unbraced = [
        f"{key}: {match.group(0)!r}"
        for key, fields in _bibliography().items()
        if (match := re.search(r"[?!]\s+[A-Za-z]\w*", fields.get("title", "")))
    ]
    assert not unbraced, "titles whose next sentence would start in lowercase: " + ", ".join(
        unbraced
    )


def test_a_reference_s_year_is_the_one_its_proceedings_name() -> None:
    """A booktitle such as "..., ICLR 2024" printed beside a `year` of 2023 contradicts itself."""
    wrong = []
    for key, fields in _bibliography().items():
        named = set(re.findall(r"\b(?:19|20)\d\d\b", fields.get("booktitle", "")))
        if named and fields.get("year") not in named:
            wrong.append(f"{key}: year {fields.get('year')}, booktitle {fields['booktitle']!r}")
    assert not wrong, "\n".join(wrong)


def test_a_reference_gives_its_address_once() -> None:
    """The style prints every address an entry has: `url`, `doi` and an arXiv `eprint` each
    as a link, so an entry with two of them sent the reader to the same paper twice ("URL:
    https://arxiv.org/abs/1607.06520, arXiv:1607.06520")."""
    twice = [
        f"{key}: {', '.join(sorted(addresses))}"
        for key, fields in _bibliography().items()
        if len(addresses := {"url", "doi", "eprint"} & fields.keys()) > 1
    ]
    assert not twice, "entries with more than one address: " + "; ".join(twice)


# --- the anatomy of a chapter -------------------------------------------------------------------

chapter = pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _markdown(nb: nbformat.NotebookNode) -> str:
    return "\n\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")


def _code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def _directives(markdown: str, name: str) -> list[list[str]]:
    """The option lines (`:key: value`) of every `{name}` directive, fenced by ::: or ```."""
    lines = markdown.splitlines()
    found = []
    for i, line in enumerate(lines):
        if re.match(rf"^\s*(:{{3,}}|`{{3,}})\{{{name}\}}", line):
            options = []
            for option in lines[i + 1 :]:
                if not re.match(r"^\s*:[\w-]+:", option):
                    break
                options.append(option.strip())
            found.append(options)
    return found


@chapter
def test_first_code_cell_is_the_colab_cell(path: Path) -> None:
    cells = _code_cells(_read(path))
    wanted = sync_repo_url.colab_cell_source(sync_repo_url.repository_url(ROOT), path.stem)
    assert cells, f"{path.name} has no code cell"
    assert cells[0].source == wanted, (
        f"{path.name}: the first code cell must be the Colab cell of CONTRIBUTING.md "
        "(`make sync-url` rewrites it)"
    )


@chapter
def test_cells_ran_in_order(path: Path) -> None:
    cells = _code_cells(_read(path))
    counts = [cell.execution_count for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts are {counts}, not 1..{len(cells)}: "
        "run `make execute` (or Restart and run all), then commit"
    )


@chapter
def test_outputs_are_stored_as_make_execute_writes_them(path: Path) -> None:
    split = [
        f"code cell {i}"
        for i, cell in enumerate(_code_cells(_read(path)), start=1)
        for a, b in itertools.pairwise(cell.outputs)
        if a.output_type == b.output_type == "stream" and a.name == b.name
    ]
    assert not split, (
        f"{path.name}: printed text split into several outputs in {', '.join(split)}; "
        "run `make execute`, which merges them, so that re-running changes nothing"
    )


@chapter
def test_no_stored_errors(path: Path) -> None:
    errors = [
        f"code cell {i}: {output.get('ename')}: {output.get('evalue')}"
        for i, cell in enumerate(_code_cells(_read(path)), start=1)
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors, f"{path.name} stores errors:\n" + "\n".join(errors)


@chapter
def test_chapter_has_the_required_sections(path: Path) -> None:
    markdown = _markdown(_read(path))
    missing = []
    if not re.search(r"^\s*(:{3,}|`{3,})\{admonition\}\s+Learning objectives", markdown, re.M):
        missing.append("a `{admonition} Learning objectives`")
    for heading in ("## Exercises", "## Key takeaways", "## References"):
        if not re.search(rf"^{re.escape(heading)}\s*$", markdown, re.MULTILINE):
            missing.append(f"a heading `{heading}`")
    assert not missing, f"{path.name} lacks " + ", ".join(missing)
    sections = re.findall(r"^## (.+?)\s*$", markdown, re.MULTILINE)
    assert sections[-1] == "References", (
        f"{path.name}: `## References` must be the last section, found `## {sections[-1]}` after it"
    )
    references = markdown[markdown.rindex("## References") :]
    assert re.search(r"^\s*(:{3,}|`{3,})\{footbibliography\}", references, re.MULTILINE), (
        f"{path.name}: the References section needs a {{footbibliography}} directive"
    )


@chapter
def test_at_least_three_exercises(path: Path) -> None:
    exercises = _directives(_markdown(_read(path)), "exercise")
    assert len(exercises) >= 3, f"{path.name} has {len(exercises)} {{exercise}} directives, needs 3"


@chapter
def test_solutions_are_hidden(path: Path) -> None:
    markdown = _markdown(_read(path))
    solutions = _directives(markdown, "solution") + _directives(markdown, "solution-start")
    shown = [
        i
        for i, options in enumerate(solutions, start=1)
        if not any(re.fullmatch(r":class:.*\bdropdown\b.*", option) for option in options)
    ]
    assert not shown, f"{path.name}: solutions number {shown} lack `:class: dropdown`"


@chapter
def test_a_code_exercise_calls_a_checker(path: Path) -> None:
    checkers = {name for name in dir(_exercises()) if name.startswith("check_")}
    called = {
        name
        for cell in _code_cells(_read(path))
        for name in re.findall(r"\b(check_\w+)\s*\(", cell.source)
        if name in checkers
    }
    assert called, f"{path.name}: no code cell calls a checker of attnbook.exercises"


def _exercises() -> ModuleType:
    import attnbook.exercises

    return attnbook.exercises


@chapter
def test_figures_have_a_caption_and_alt_text(path: Path) -> None:
    problems = []
    for i, cell in enumerate(_code_cells(_read(path)), start=1):
        if not any(
            kind in output.get("data", {}) for output in cell.outputs for kind in IMAGE_TYPES
        ):
            continue
        mystnb = cell.metadata.get("mystnb", {})
        if not str(mystnb.get("figure", {}).get("caption", "")).strip():
            problems.append(f"code cell {i}: no metadata mystnb.figure.caption")
        if not str(mystnb.get("image", {}).get("alt", "")).strip():
            problems.append(f"code cell {i}: no metadata mystnb.image.alt")
    assert not problems, f"{path.name}, figures (see CONTRIBUTING.md):\n" + "\n".join(problems)


# MathJax prints the argument of \text{...} (and \mbox, \textrm, ...) as it is, without its macros:
# $n_\text{kv\_heads}$ showed "kv\_heads", backslash included. Inside math, \mathrm{kv\_heads}
# prints "kv_heads". Maths nested in the text ($...$) may use macros, so it is not matched.
_MACRO_IN_TEXT = re.compile(r"\\(?:text|textrm|textit|textbf|textsf|texttt|mbox)\{[^{}$]*\\")


@pytest.mark.parametrize(
    "path", [*CHAPTERS, ROOT / "intro.md", ROOT / "instructors.md"], ids=lambda p: p.stem
)
def test_no_macro_inside_text_in_the_maths(path: Path) -> None:
    if path.suffix == ".ipynb":
        nb = _read(path)
        captions = [
            str(cell.metadata.get("mystnb", {}).get("figure", {}).get("caption", ""))
            for cell in _code_cells(nb)
        ]
        text = _markdown(nb) + "\n\n" + "\n\n".join(captions)
    else:
        text = path.read_text(encoding="utf-8")
    found = sorted({match.group(0) for match in _MACRO_IN_TEXT.finditer(text)})
    assert not found, f"{path.name}: MathJax would print these backslashes: {found}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_nbval_comment_shows_in_the_code(path: Path) -> None:
    """nbval's markers are cell tags, never comments that the rendered book would show."""
    nb = nbformat.read(path, as_version=4)
    marked = [
        f"code cell {i}"
        for i, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1)
        if re.search(r"^\s*#\s*NBVAL_", cell.source, re.MULTILINE)
    ]
    assert not marked, f"{path.name}: use the tag nbval-ignore-output instead in " + ", ".join(
        marked
    )


def test_few_outputs_escape_nbval() -> None:
    code_cells, ignored = run_tests.code_cell_census()
    assert len(ignored) < IGNORE_LIMIT * code_cells, (
        f"{len(ignored)} of {code_cells} code cells are marked NBVAL_IGNORE_OUTPUT or "
        f"NBVAL_SKIP (limit: under {IGNORE_LIMIT:.0%}); mark only truly volatile outputs:\n"
        + "\n".join(ignored)
    )


# What the rendered column shows without a horizontal scroll bar at 1440 px (0.8rem code),
# measured by the browser test: 101 characters of a code cell, 92 of a solution's code block
# (narrower, inside its box). ruff formats cells at 100; solution blocks are markdown, so this
# test is their formatter. Cells tagged remove-cell (the Colab cell) are not rendered.
CELL_COLUMNS, SOLUTION_COLUMNS = 100, 92


def _solution_code_lines(markdown: str) -> list[str]:
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line)
    return lines


@chapter
def test_code_fits_the_rendered_column(path: Path) -> None:
    too_long = []
    for number, cell in enumerate(_read(path).cells):
        if "remove-cell" in cell.metadata.get("tags", []):
            continue
        if cell.cell_type == "code":
            limit, lines = CELL_COLUMNS, cell.source.splitlines()
        elif "{solution" in cell.source:
            limit, lines = SOLUTION_COLUMNS, _solution_code_lines(cell.source)
        else:
            continue
        too_long += [
            f"cell {number}: {len(line)} > {limit}: {line.strip()[:60]}"
            for line in lines
            if len(line) > limit
        ]
    assert not too_long, f"{path.name}: lines wider than the rendered column:\n" + "\n".join(
        too_long
    )


# A checks cell asserts the numbers that the prose quotes. The book removes its input
# (tag remove-input) and it has no output, so a reader sees only the code that teaches; a
# learner running the notebook still runs it, and nbval proves it passes. It may hold only
# asserts and `assert_*` calls (torch.testing.assert_close, np.testing.assert_allclose, ...),
# and comments: nothing that computes, so that hiding it hides no step of the chapter.
CHECKS_TAG = "remove-input"


def _is_check(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assert):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        function = statement.value.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        return name.startswith("assert")
    return False


@chapter
def test_checks_cells_only_assert(path: Path) -> None:
    problems = []
    for number, cell in enumerate(_read(path).cells):
        if CHECKS_TAG not in cell.metadata.get("tags", []):
            continue
        if cell.cell_type != "code":
            problems.append(f"cell {number}: a {cell.cell_type} cell tagged {CHECKS_TAG}")
            continue
        body = ast.parse(cell.source).body
        others = [ast.unparse(s).splitlines()[0][:70] for s in body if not _is_check(s)]
        if not body or others:
            problems.append(f"cell {number}: holds more than asserts: {others or 'nothing'}")
        if cell.outputs:
            problems.append(f"cell {number}: has an output, which the book would show")
    assert not problems, f"{path.name}, checks cells (tag {CHECKS_TAG}):\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "is_check"),
    [
        ("assert x == 1", True),
        ("torch.testing.assert_close(a, b)", True),
        ("np.testing.assert_allclose(a, b, atol=1e-6)", True),
        ("x = 1", False),
        ("print(x)", False),
        ("model.train()", False),
        ("for a in b:\n    assert a", False),
    ],
)
def test_a_checks_cell_is_told_from_code_that_computes(source: str, is_check: bool) -> None:
    assert all(_is_check(s) for s in ast.parse(source).body) is is_check


# Asserts a reader sees: at most this share of the visible code lines of a chapter (cells not
# tagged remove-input or remove-cell, comments and blank lines left out). The asserts that are
# the lesson ("ours equals PyTorch's") stay visible; those that pin quoted numbers go in
# checks cells. Before checks cells existed, 8-23% of the visible lines were asserts.
VISIBLE_ASSERT_SHARE = 0.05
_ASSERT_CALLS = ("assert_close", "assert_allclose", "assert_array_equal", "assert_equal")


def visible_assert_lines(nb: nbformat.NotebookNode) -> tuple[int, int]:
    """(lines of visible asserts, visible code lines) of a chapter."""
    asserts = code = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type != "code" or CHECKS_TAG in tags or "remove-cell" in tags:
            continue
        source = "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line
            for line in cell.source.splitlines()
        )
        code += sum(
            1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#")
        )
        for node in ast.walk(ast.parse(source)):
            call = node.func if isinstance(node, ast.Call) else None
            name = getattr(call, "attr", getattr(call, "id", "")) if call is not None else ""
            if isinstance(node, ast.Assert) or name in _ASSERT_CALLS:
                asserts += node.end_lineno - node.lineno + 1
    return asserts, code


@chapter
def test_few_visible_lines_are_asserts(path: Path) -> None:
    asserts, code = visible_assert_lines(_read(path))
    assert asserts <= VISIBLE_ASSERT_SHARE * code, (
        f"{path.name}: {asserts} of {code} visible code lines are asserts "
        f"({asserts / code:.1%} > {VISIBLE_ASSERT_SHARE:.0%}): move the ones that pin numbers "
        "the prose quotes into a checks cell (tag remove-input) after the cell"
    )


def test_the_assert_count_sees_asserts() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1\nassert x == 1\ntorch.testing.assert_close(\n  a, b\n)"),
        nbformat.v4.new_code_cell("assert x", metadata={"tags": [CHECKS_TAG]}),
    ]
    assert visible_assert_lines(nb) == (4, 5)


def test_run_tests_help_exits_0_and_an_unknown_step_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--help was 'unknown step(s): --help', exit 2; nothing runs for either."""
    assert run_tests.main(["--help"]) == 0
    assert "Usage: python -m tools.run_tests [STEP ...]" in capsys.readouterr().out
    assert run_tests.main(["unit", "bogus"]) == 2
    out, err = capsys.readouterr()
    assert "unknown step(s): bogus (the steps: lint format unit" in err
    assert out == ""


def test_make_test_compares_every_stored_output_once() -> None:
    """`make test` runs every chapter once under nbval: in the learner's step, not twice."""
    default = [step.key for step in run_tests.steps() if step.default]
    assert "learner" in default
    assert "nbval" not in default  # the same comparison in .venv: run by name only
    (learner,) = [step for step in run_tests.steps() if step.key == "learner"]
    assert "tools.learner_path" in learner.command
    assert learner.junit_dir  # its per-chapter nbval reports are counted in the summary


def test_the_unit_step_makes_each_module_scoped_fixture_once(tmp_path: Path) -> None:
    """With the unit step's pytest-xdist options, a module's tests run on one worker, so a
    module-scoped fixture (the grader's runs in tests/exercises/test_grade.py take 15-25 s
    each) is made once, not once on each worker. Run on two small modules of 8 tests each:
    with the default distribution (by test), each fixture is made twice."""
    (unit,) = [step for step in run_tests.steps() if step.key == "unit"]
    xdist = unit.command[unit.command.index("-n") :]
    made = tmp_path / "made.txt"
    for name in ("a", "b"):
        tests = "".join(f"def test_{i}(shared):\n    pass\n\n\n" for i in range(8))
        (tmp_path / f"test_{name}.py").write_text(
            "import os\n\nimport pytest\n\n\n@pytest.fixture(scope='module')\ndef shared():\n"
            f"    with open({str(made)!r}, 'a') as f:\n"
            f"        f.write('{name}:' + os.environ.get('PYTEST_XDIST_WORKER', '-') + ' ')"
            f"\n\n\n{tests}",
            encoding="utf-8",
        )
    # Without the plugins that these tests do not use: nbval imports nbformat, whose
    # jsonschema builds rfc3987-syntax's parsers at import (about 1.5 s of CPU), and
    # hypothesis 0.9 s, in the controller and in each worker (10-14 s against 1-2 s here).
    unused = ["-p", "no:nbval", "-p", "no:hypothesispytest"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *unused, "-q", *xdist, "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    made_by = [entry.split(":") for entry in made.read_text(encoding="utf-8").split()]
    assert sorted(name for name, _ in made_by) == ["a", "b"], made_by  # each made once
    assert all(worker.startswith("gw") for _, worker in made_by), made_by  # by xdist workers


def test_steps_side_by_side_both_run_and_their_logs_do_not_mix(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The student edition is built beside the book, the browser test runs beside the
    learner step (after the book it tests); a failure beside is still a failure."""
    everything = {step.key: step for step in run_tests.steps()}
    order = list(everything)
    assert everything["student"].beside == "book"
    assert order[order.index("student") - 1] == "book"
    assert everything["browser"].beside == "learner"
    assert order[order.index("browser") - 1] == "learner"
    assert order.index("book") < order.index("browser")  # the book is built before its test
    default = [step for step in run_tests.steps() if step.default]
    assert [[step.key for _, step in batch] for batch in run_tests.side_by_side(default)] == [
        ["lint"],
        ["format"],
        ["unit"],
        ["book", "student"],
        ["learner", "browser"],
    ]
    chosen = [everything[key] for key in ("unit", "book", "student", "browser")]
    assert [[n for n, _ in batch] for batch in run_tests.side_by_side(chosen)] == [[1], [2, 3], [4]]
    chosen = [everything[key] for key in ("learner", "student")]  # not beside the learner step
    assert [[n for n, _ in batch] for batch in run_tests.side_by_side(chosen)] == [[1], [2]]

    def step(key: str, mine: Path, theirs: Path, then: str) -> run_tests.Step:
        """A step that leaves `mine`, waits up to 60 s for `theirs` (left by the other step,
        so that it ends only if both ran at once), then runs `then`."""
        code = (
            "import pathlib, time\n"
            f"pathlib.Path({str(mine)!r}).touch()\n"
            "deadline = time.monotonic() + 60\n"
            f"while not pathlib.Path({str(theirs)!r}).exists():\n"
            "    if time.monotonic() > deadline:\n"
            "        raise SystemExit('the other step did not run at the same time')\n"
            "    time.sleep(0.01)\n"
            f"{then}\n"
        )
        return run_tests.Step(key, key, [sys.executable, "-c", code], beside="first")

    # print('x', 'y'): the words the test looks for are not in the command, which is printed.
    mark_first, mark_beside = tmp_path / "first", tmp_path / "beside"
    first = step(
        "first", mark_first, mark_beside, "print('first', 'starts'); print('first', 'ends')"
    )
    beside = step("beside", mark_beside, mark_first, "print('beside', 'says'); raise SystemExit(3)")
    run_tests.run_side_by_side([(1, first), (2, beside)], total=2)
    out = capfd.readouterr().out
    assert first.ok, out  # it saw the step beside it running
    assert "beside says" in out, out  # and that step saw it
    assert not beside.ok
    assert beside.failed == 1
    assert out.index("first starts") < out.index("first ends") < out.index("beside says")
    assert out.index("==> [2/2] beside") < out.index("beside says")
