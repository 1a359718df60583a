"""The student edition (`make student`, tools/make_student.py) holds no solution.

For every chapter: no line or sentence of a solution reaches the student notebook
(sources or outputs), and everything else does, unchanged. The solutions are
found by the one directive parser (`tools.notebooks`), whose own tests pin how
many it finds in the book; here, a chapter with more `{solution}` strings than
parsed blocks fails, so a block the parser overlooked cannot leak unseen. The
tool's own leak checks,
which guard every `make student` run (notebooks and built pages), are shown to
catch a solution that is left in. One student notebook is executed top to
bottom. The built book itself is scanned by `make student` (the "student" step
of tools/run_tests.py), with the checker tested here.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from tools import course, make_student, sync_repo_url
from tools.notebooks import notebook_blocks, run_notebook, strip_solutions

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
STUB = "raise NotImplementedError"
NOT_ATTEMPTED = "not attempted yet"
MIN_CHARS = 20  # shorter lines and sentences ("1.", "return out") say too little


def _blocks(nb: nbformat.NotebookNode, name: str) -> list[str]:
    """The whole text (fences included) of every `name` directive of the notebook."""
    return [block.text for block in notebook_blocks(nb) if block.name == name]


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _text(nb: nbformat.NotebookNode) -> str:
    """Every cell source and every textual output, whitespace squashed."""
    parts = []
    for cell in nb.cells:
        parts.append(cell.source)
        for output in cell.get("outputs", []):
            parts.append(str(output.get("text", "")) + str(output.get("evalue", "")))
            parts += [str(value) for key, value in output.get("data", {}).items() if "text" in key]
    return " ".join(" ".join(parts).split())


def _pieces(solution: str) -> set[str]:
    """The lines and the sentences of one solution block's body, whitespace squashed.

    No fence is read: each piece is a piece of the solution's text, however its code is
    fenced (backticks, tildes, in a list item, indented), so none can be missed by reading a
    fence wrongly. Which lines are code is the parser's reading (`code_blocks`), which the
    tool's own leak check uses; this test's check stays independent of it.
    """
    body = solution.splitlines()[1:-1]  # without the opening and closing fences
    lines = [" ".join(line.split()) for line in body]
    sentences = re.split(r"(?<=[.!?;:])\s+", " ".join(" ".join(body).split()))
    return {piece for piece in lines + sentences if len(piece) >= MIN_CHARS}


def _solution_only_pieces(source: nbformat.NotebookNode) -> set[str]:
    """Lines and sentences of the solutions that the rest of the chapter does not contain."""
    blocks = _blocks(source, "solution")
    rest = _text(_without_solutions(source))
    return {piece for block in blocks for piece in _pieces(block) if piece not in rest}


def _without_solutions(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with the solution blocks and the cells tagged solution cut out, empty
    cells dropped."""
    out = nbformat.from_dict(json.loads(json.dumps(nb)))
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = strip_solutions(cell.source)[0].strip("\n")
    out.cells = [
        c
        for c in out.cells
        if (c.cell_type != "markdown" or c.source.strip())
        and "solution" not in c.metadata.get("tags", [])
    ]
    return out


def _leaked(source: nbformat.NotebookNode, student: nbformat.NotebookNode) -> list[str]:
    text = _text(student)
    return sorted(piece for piece in _solution_only_pieces(source) if piece in text)


@pytest.fixture(scope="module", params=CHAPTERS, ids=lambda path: path.stem)
def chapter(request: pytest.FixtureRequest) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    source = _read(request.param)
    return source, make_student.student_notebook(source)


def test_every_solution_is_found_by_the_parser(chapter) -> None:
    source, _ = chapter
    text = "\n".join(cell.source for cell in source.cells)
    assert len(_blocks(source, "solution")) == text.count("{solution") > 0


def test_no_solution_text_reaches_the_student_notebook(chapter) -> None:
    source, student = chapter
    pieces = _solution_only_pieces(source)
    assert pieces, "a chapter with solutions must give lines to look for"
    assert _leaked(source, student) == []
    assert "{solution" not in _text(student)


def test_code_that_works_out_a_solution_is_tagged_solution(chapter) -> None:
    """A code cell that checks or computes a solution's numbers would hand them to learners:
    the tag `solution` leaves it out of the student edition (and of HIDE_SOLUTIONS books)."""
    source, student = chapter
    untagged = [
        cell.source.splitlines()[0]
        for cell in source.cells
        if cell.cell_type == "code"
        and re.search(r"#.*\bsolution", cell.source, re.IGNORECASE)
        and "solution" not in cell.metadata.get("tags", [])
    ]
    assert untagged == [], "tag these cells `solution`"
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)


def test_everything_but_the_solutions_is_kept(chapter) -> None:
    """Same cells in the same order, same sources (less the solutions, up to blank lines),
    same outputs and execution counts."""
    source, student = chapter
    expected = _without_solutions(source)

    def cells(nb):
        return [
            (
                c.cell_type,
                re.sub(r"\n\s*\n", "\n\n", c.source).strip(),
                c.get("outputs"),
                c.get("execution_count"),
            )
            for c in nb.cells
        ]

    assert cells(student) == cells(expected)


def test_exercises_stubs_checkers_and_the_colab_cell_survive(chapter) -> None:
    source, student = chapter
    student_text = "\n".join(cell.source for cell in student.cells)
    exercises = _blocks(source, "exercise")
    assert exercises
    for exercise in exercises:
        assert exercise in student_text
    stubs = [c for c in source.cells if c.cell_type == "code" and STUB in c.source]
    kept = [c for c in student.cells if c.cell_type == "code" and STUB in c.source]
    assert [(c.source, c.outputs) for c in kept] == [(c.source, c.outputs) for c in stubs]
    for stub in kept:  # the stored output of an untouched stub gives nothing away
        assert re.search(r"\bcheck_\w+\(", stub.source)
        verdict = _text(nbformat.v4.new_notebook(cells=[stub]))
        assert NOT_ATTEMPTED in verdict, (
            f"stored output of an untouched stub (executed?): {verdict}"
        )
    first = student.cells[0]
    assert first.source == source.cells[0].source
    assert "google.colab" in first.source
    assert first.metadata.get("tags") == ["remove-cell"]


def test_the_student_notebook_is_valid(chapter) -> None:
    source, student = chapter
    nbformat.validate(student)
    assert student.metadata["kernelspec"] == source.metadata["kernelspec"]
    assert student.metadata["attnbook"] == {"edition": "student"}
    assert source.metadata.get("attnbook") is None, "the source notebook is not modified"
    assert make_student.student_notebook(student) == student  # nothing more to remove


# The checks must be able to fail.


def test_this_tests_leak_check_catches_a_solution_left_in() -> None:
    source = _read(CHAPTERS[0])
    assert len(_leaked(source, source)) == len(_solution_only_pieces(source)) > 5


def test_the_tools_leak_check_catches_solutions_in_sources_and_outputs() -> None:
    source = _read(CHAPTERS[0])
    student = make_student.student_notebook(source)
    assert make_student.notebook_leaks(source, student) == []
    assert make_student.notebook_leaks(source, source)  # nothing removed
    line = "return (a @ b) / (np.sqrt(a @ a) * np.sqrt(b @ b))"  # the cosine solution
    assert line in _solution_only_pieces(source)
    in_output = nbformat.from_dict(json.loads(json.dumps(student)))
    code = next(c for c in in_output.cells if c.cell_type == "code" and c.outputs)
    code.outputs.append(nbformat.v4.new_output("stream", text=f"    {line}\n"))
    assert make_student.notebook_leaks(source, in_output) == [line]


def _notebook(*cells: tuple[str, str]) -> nbformat.NotebookNode:
    new = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    return nbformat.v4.new_notebook(cells=[new[kind](text) for kind, text in cells])


EXERCISE_TEXT = ":::{exercise} Add (easy)\n:label: ex-add\nWrite `my_add(a, b)`.\n:::"


def test_every_solution_is_removed() -> None:
    nb = _notebook(
        ("markdown", f"{EXERCISE_TEXT}\n\n::::{{solution}} ex-add\n:class: dropdown\n"
         "```python\nSECRET_CODE = 1\n```\n::::\n\nText after."),
        ("markdown", "::::{solution} ex-add\nSECRET_ALONE\n:::{note}\ninner\n:::\n::::"),
        ("code", "def my_add(a, b):\n    raise NotImplementedError\n\n\ncheck_add(my_add)"),
    )  # fmt: skip
    student = make_student.student_notebook(nb)
    text = _text(student)
    assert "SECRET" not in text
    assert "inner" not in text  # a directive nested in a solution goes with it
    assert "{solution" not in text
    for kept in (EXERCISE_TEXT, "Text after.", "check_add(my_add)"):
        assert kept in "\n".join(cell.source for cell in student.cells)
    assert len(student.cells) == 2  # the cell that held only a solution is gone
    nbformat.validate(student)
    assert "SECRET_ALONE" in _text(nb), "the input is not modified"


@pytest.mark.parametrize(
    "markdown",
    [
        "::::{solution} ex-add\nnever closed",
        "````{solution} ex-add\n:class: dropdown\nbackticks\n````",
    ],
)
def test_a_broken_solution_is_an_error_not_a_guess(markdown: str) -> None:
    with pytest.raises(ValueError, match="solution"):
        make_student.student_notebook(_notebook(("markdown", markdown)))


# The built pages: the checker that `make student` runs on _build/student/html.


def _page_checker(source: nbformat.NotebookNode):
    return make_student.PageChecker([source], other_text=(ROOT / "references.bib").read_text())


def _write_pages(folder: Path, source, notebook, page_text: str, terms: list[str]) -> Path:
    (folder / "_sources" / "chapters").mkdir(parents=True)
    nbformat.write(notebook, folder / "_sources" / "chapters" / "01_scores.ipynb")
    page = "".join(f"<p>{html.escape(line)}</p>\n" for line in page_text.splitlines())
    (folder / "chapters").mkdir()
    (folder / "chapters" / "01_scores.html").write_text(f"<html><body>{page}</body></html>")
    index = {"docnames": ["chapters/01_scores"], "terms": dict.fromkeys(terms, 0)}
    (folder / "searchindex.js").write_text(f"Search.setIndex({json.dumps(index)})")
    return folder


def test_the_page_checker_passes_pages_built_from_student_notebooks(tmp_path: Path) -> None:
    source = _read(CHAPTERS[0])
    student = make_student.student_notebook(source)
    pages = _write_pages(tmp_path, source, student, _text(student), ["score", "queri"])
    assert _page_checker(source).scan(pages) == []


def test_the_page_checker_finds_solutions_in_pages_sources_and_the_search_index(
    tmp_path: Path,
) -> None:
    source = _read(CHAPTERS[0])
    student = make_student.student_notebook(source)
    checker = _page_checker(source)
    assert "hull" in checker.only_words  # "convex hull" is only in a solution of chapter 1
    solution = make_student.solution_texts(source)[0]
    pages = _write_pages(tmp_path, source, source, _text(student) + solution, ["score", "hull"])
    leaks = checker.scan(pages)
    assert any(leak.startswith("chapters/01_scores.html: ") for leak in leaks)
    assert any(leak.startswith("_sources/chapters/01_scores.ipynb: ") for leak in leaks)
    assert "searchindex.js: hull" in leaks


def test_the_student_book_is_staged_without_solutions_or_launch_buttons(tmp_path: Path) -> None:
    notebooks = tmp_path / "notebooks"
    make_student.write_notebooks(CHAPTERS[:1], notebooks)
    stage = tmp_path / "stage"
    make_student.stage_book(ROOT, stage, notebooks)
    config = (stage / "_config.yml").read_text()
    assert "hide_solutions: true" in config
    assert "colab_url: ''" in config
    assert "binderhub_url: ''" in config
    assert "use_repository_button: false" in config
    for path in stage.rglob("*.ipynb"):
        assert "{solution" not in path.read_text(), path
    assert "student edition" in next(stage.glob("intro.md")).read_text()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """attnbook's wheel, built as `make student` builds it (a few seconds)."""
    return make_student.build_wheel(tmp_path_factory.mktemp("dist"))


def test_the_wheel_is_the_same_bytes_every_build(wheel: Path, tmp_path: Path) -> None:
    again = make_student.build_wheel(tmp_path / "dist")
    assert again.name == wheel.name
    assert again.read_bytes() == wheel.read_bytes(), (
        "SOURCE_DATE_EPOCH makes the wheel reproducible"
    )


def test_the_wheel_holds_the_package_only(wheel: Path, tmp_path: Path) -> None:
    assert make_student.wheel_problems(wheel) == []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "attnbook/__init__.py" in names
    assert not [name for name in names if "chapters" in name or name.endswith(".ipynb")]
    # The check catches a wheel that would carry a chapter (and its solutions) to learners.
    bad = tmp_path / wheel.name
    shutil.copy(wheel, bad)
    with zipfile.ZipFile(bad, "a") as archive:
        archive.writestr("chapters/02_softmax.ipynb", "{}")
        archive.writestr("attnbook/02_softmax.ipynb", "{}")
    assert make_student.wheel_problems(bad) == [
        f"{wheel.name}: chapters/02_softmax.ipynb",
        f"{wheel.name}: attnbook/02_softmax.ipynb",
    ]


def test_the_zip_holds_a_readme_the_wheel_and_every_student_notebook(
    tmp_path: Path, wheel: Path
) -> None:
    notebooks = tmp_path / "notebooks"
    assert make_student.write_notebooks(CHAPTERS, notebooks) == []
    target = tmp_path / "student.zip"
    paths = sorted(notebooks.glob("*.ipynb"))
    make_student.write_zip(paths, target, "https://example.org/attnbook", wheel, "v9.9")
    first = target.read_bytes()
    make_student.write_zip(paths, target, "https://example.org/attnbook", wheel, "v9.9")
    assert target.read_bytes() == first, "the same notebooks give the same zip"
    with zipfile.ZipFile(target) as archive:
        names = archive.namelist()
        readme = archive.read("attnbook-student/README.txt").decode()
        assert names == [
            "attnbook-student/README.txt",
            f"attnbook-student/{wheel.name}",
            *[f"attnbook-student/{path.name}" for path in CHAPTERS],
        ]
        assert archive.read(f"attnbook-student/{wheel.name}") == wheel.read_bytes()
        for path in CHAPTERS:
            packed = nbformat.reads(archive.read(f"attnbook-student/{path.name}").decode(), 4)
            assert packed == make_student.student_notebook(_read(path))
    assert "Colab" in readme
    assert "git+https://example.org/attnbook@v9.9" in readme, "the pinned ref"
    assert f"pip install --no-deps ./{wheel.name}" in readme, "the offline install"
    assert STUB in readme


def test_the_readme_gives_the_colab_install_of_the_wheel_with_each_chapters_extra() -> None:
    """On Colab, chapters 11 to 13 need the wheel with their extra (`pretrained`): the README
    names them and gives the quoted `%pip install` with it, after the bare wheel's."""
    wheel = "attnbook-0.1.0-py3-none-any.whl"
    readme = make_student.readme("https://example.org/attnbook", "v9.9", wheel)
    colab = readme[readme.index("On Colab, if the first cell") :]
    assert f"%pip install ./{wheel}\n" in colab, "the bare wheel for the other chapters"
    colab_extras = course.load().colab_extras
    assert colab_extras, "course.yml gives chapters 11 to 13 an extra"
    for extra in set(colab_extras.values()):
        command = f'%pip install "./{wheel}[{extra}]"'
        assert command in colab, readme
        before = colab[: colab.index(command)]
        for stem, wanted in colab_extras.items():
            assert (f"{stem}.ipynb" in before) == (wanted == extra), (stem, readme)


def _assert_names_make_and_the_module(err: str) -> None:
    """A refusal of make_student reads right whether it was run by `make student` or as
    `python -m tools.make_student`: it names both, for itself and for `make sync-url`, and
    does not speak as if make had run it."""
    first = err.splitlines()[0]
    assert "make student" in first, first
    assert "python -m tools.make_student" in first, first
    assert "python -m tools.sync_repo_url" in err, err
    assert not err.startswith("make student:"), err
    assert "then `make student` again" not in err, err


def test_make_student_refuses_the_placeholder_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "student"
    monkeypatch.setattr(make_student, "OUT", out)
    placeholder = "https://github.com/your-org/attention-from-scratch"
    monkeypatch.setattr(make_student, "repository_url", lambda: placeholder)
    assert make_student.main(["--no-book"]) == 2
    err = capsys.readouterr().err
    assert placeholder in err
    assert "_config.yml" in err
    assert "make sync-url" in err
    assert "make student ALLOW_PLACEHOLDER_URL=1" in err
    assert "python -m tools.make_student --allow-placeholder-url" in err, "run without make"
    _assert_names_make_and_the_module(err)
    assert not out.exists(), "nothing is built"
    # `make student ALLOW_PLACEHOLDER_URL=1` (the tests, CI) builds, and says it is not for learners.
    assert make_student.main(["--no-book", "--allow-placeholder-url"]) == 0
    assert "placeholder" in capsys.readouterr().out
    with zipfile.ZipFile(out / make_student.ZIP_NAME) as archive:
        assert any(name.endswith(".whl") for name in archive.namelist())
        packed = [name for name in archive.namelist() if name.endswith(".ipynb")]
        assert len(packed) == len(CHAPTERS)
        for name in packed:  # the student notebooks, not the chapters
            assert "{solution" not in archive.read(name).decode(), name


def test_make_student_refuses_chapters_not_synced_to_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`repository: url:` changed in _config.yml but `make sync-url` not run: every Colab cell
    still installs from the old URL, so no handout is built."""
    out = tmp_path / "student"
    monkeypatch.setattr(make_student, "OUT", out)
    url = "https://github.com/acme-uni/attention-from-scratch"
    monkeypatch.setattr(make_student, "repository_url", lambda: url)
    assert make_student.main(["--no-book"]) == 2
    err = capsys.readouterr().err
    assert f"{url}@{make_student.package_ref()}" in err
    assert "make sync-url" in err
    _assert_names_make_and_the_module(err)
    assert not out.exists(), "nothing is built"
    ref = make_student.package_ref()
    assert make_student.stale_colab_cells(CHAPTERS, url, ref) == CHAPTERS
    assert make_student.stale_colab_cells(CHAPTERS, sync_repo_url.repository_url(), ref) == []


def test_a_student_notebook_runs_top_to_bottom_in_an_empty_folder(tmp_path: Path) -> None:
    """Chapter 1 (the quickest) as a learner gets it: no error, every exercise "not attempted"."""
    student = make_student.student_notebook(_read(CHAPTERS[0]))
    for cell in student.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    run_notebook(student, timeout=300, cwd=tmp_path)  # raises CellExecutionError on any error
    stubs = [c for c in student.cells if c.cell_type == "code" and STUB in c.source]
    assert len(stubs) >= 2
    for stub in stubs:
        verdict = _text(nbformat.v4.new_notebook(cells=[stub]))
        assert NOT_ATTEMPTED in verdict
    assert list(tmp_path.iterdir()) == [], "the chapter writes no file"


LEAK = "return the_secret_answer(a, b) * 2"  # the one code line of the solution below


def _leaky_sources() -> tuple[nbformat.NotebookNode, nbformat.NotebookNode]:
    source = _notebook(
        ("markdown", f"{EXERCISE_TEXT}\n\n:::{{solution}} ex-add\n```python\n{LEAK}\n```\n:::"),
        ("code", "def my_add(a, b):\n    raise NotImplementedError\n\n\ncheck_add(my_add)"),
    )
    return source, make_student.student_notebook(source)


@pytest.mark.parametrize(
    "output",
    [
        nbformat.v4.new_output("stream", text=f"{LEAK}\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": LEAK}, execution_count=1),
        nbformat.v4.new_output("display_data", data={"text/html": f"<pre>{LEAK}</pre>"}),
        nbformat.v4.new_output("error", ename="E", evalue="", traceback=[f"  {LEAK}"]),
    ],
    ids=["stream", "result", "html", "traceback"],
)
def test_the_leak_check_reads_every_kind_of_output(output: nbformat.NotebookNode) -> None:
    source, student = _leaky_sources()
    assert make_student.notebook_leaks(source, student) == []
    student.cells[-1].outputs.append(output)
    assert make_student.notebook_leaks(source, student) == [LEAK]


SECRET = "second = first * 2 + the_answer"
STUB_CELL = ("code", "def my_add(a, b):\n    raise NotImplementedError\n\n\ncheck_add(my_add)")


@pytest.mark.parametrize(
    "cells",
    [
        # a fence of the other character in a code block is code, and so is the line after it
        [
            (
                "markdown",
                f"{EXERCISE_TEXT}\n\n::::{{solution}} ex-add\nDouble the answer\n"
                f"~~~python\nfirst = the_answer_of(a, b)\n```\n{SECRET}\n~~~\n::::",
            ),
            STUB_CELL,
        ],
        # every line of a code cell tagged solution is code, a line of backticks too
        [
            ("markdown", EXERCISE_TEXT),
            STUB_CELL,
            ("code", f's = """\n```\n"""\n{SECRET}'),
        ],
        # a code block opened on a list item's first line, and prose after it in the item
        [
            (
                "markdown",
                f"{EXERCISE_TEXT}\n\n::::{{solution}} ex-add\n1. Double the answer.\n"
                f"2. ```python\n   first = the_answer_of(a, b)\n   {SECRET}\n   ```\n"
                "   Then return the second, which is twice the first.\n::::",
            ),
            STUB_CELL,
        ],
    ],
    ids=["code-block", "tagged-cell", "list-item"],
)
def test_the_leak_check_reads_code_as_the_parser_does(cells: list[tuple[str, str]]) -> None:
    source = _notebook(*cells)
    if len(source.cells) == 3:
        source.cells[2].metadata["tags"] = [make_student.SOLUTION_TAG]
    student = make_student.student_notebook(source)
    assert make_student.notebook_leaks(source, student) == []
    student.cells[1].outputs.append(nbformat.v4.new_output("stream", text=f"{SECRET}\n"))
    assert make_student.notebook_leaks(source, student) == [SECRET]


@pytest.mark.parametrize(
    "fenced",
    [
        "~~~python\n{line}\n~~~",
        "Like so:\n\n    {line}\n\nDone.",  # an indented code block
        '````python\ntext = """\n```\n"""\n{line}\n````',  # a shorter fence in the code
    ],
    ids=["tildes", "indented", "backticks-in-code"],
)
def test_this_tests_leak_check_finds_a_line_of_a_solution_however_it_is_fenced(
    fenced: str,
) -> None:
    line = "return torch.stack([a, b]).sum(dim=0)  # the sum, stacked"
    solution = f"::::{{solution}} ex-add\n:class: dropdown\n{fenced.format(line=line)}\n::::"
    source = _notebook(("markdown", EXERCISE_TEXT), STUB_CELL, ("markdown", solution))
    student = make_student.student_notebook(source)
    assert _leaked(source, student) == []
    student.cells[1].outputs.append(nbformat.v4.new_output("stream", text=f"{line}\n"))
    assert _leaked(source, student) == [" ".join(line.split())]


def test_the_leak_check_reads_a_code_cells_comment_and_metadata() -> None:
    source, student = _leaky_sources()
    student.cells[-1].source += f"\n# {LEAK}"
    assert make_student.notebook_leaks(source, student) == [LEAK]
    source, student = _leaky_sources()
    student.cells[-1].metadata["note"] = LEAK
    assert make_student.notebook_leaks(source, student) == [LEAK]


def test_a_solution_the_parser_does_not_cut_out_is_a_leak(tmp_path: Path) -> None:
    # A solution nested in an exercise was inside the exercise's block, and stayed in the
    # student edition: the parser refuses it now.
    nested = "::::{exercise} Add (easy)\n:label: ex-add\n:::{solution} ex-add\nx\n:::\n::::"
    with pytest.raises(ValueError, match=r"line 3: a \{solution\} directive is opened inside"):
        make_student.student_notebook(_notebook(("markdown", nested)))
    # A solution that a parser overlooks, too short to have a line or sentence of its own to
    # look for: the leak check names the directive it finds left in.
    source = _notebook(("markdown", f"{EXERCISE_TEXT}\n\n:::{{solution}} ex-add\nx\n:::"))
    student = source  # the student edition as such a parser would leave it
    assert make_student.notebook_leaks(source, student) == ["a {solution} directive"]
    nbformat.write(student, tmp_path / "page.ipynb")
    assert _page_checker(source).scan(tmp_path) == ["page.ipynb: a {solution} directive"]


# How a solution is written, shown in a code block: the parser keeps it in both editions.
EXAMPLE = "Write it so:\n\n````markdown\n:::{solution} ex-add\n:class: dropdown\nx\n:::\n````"


def test_a_solution_shown_in_a_code_block_is_no_leak(tmp_path: Path) -> None:
    source = _notebook(
        ("markdown", f"{EXERCISE_TEXT}\n\n{EXAMPLE}"),
        ("markdown", ":::{solution} ex-add\nx\n:::"),
    )
    student = make_student.student_notebook(source)
    assert [cell.source for cell in student.cells] == [f"{EXERCISE_TEXT}\n\n{EXAMPLE}"]
    assert make_student.notebook_leaks(source, student) == []
    nbformat.write(student, tmp_path / "page.ipynb")
    assert _page_checker(source).scan(tmp_path) == []


@pytest.mark.parametrize(
    "left_in",
    [
        f"{EXAMPLE}\n\n:::{{solution}} ex-add\nx\n:::",  # after the example's code block
        "```{note}\n:::{solution} ex-add\nx\n:::\n```",  # MyST reads a note's body as markdown
        "```\n:::{solution} ex-add\nx\n:::",  # hidden by a code block never closed: refused
    ],
    ids=["after-code", "in-note", "unclosed-code"],
)
def test_a_solution_outside_a_code_block_is_still_a_leak(tmp_path: Path, left_in: str) -> None:
    source = _notebook(("markdown", f"{EXERCISE_TEXT}\n\n:::{{solution}} ex-add\nx\n:::"))
    student = _notebook(("markdown", f"{EXERCISE_TEXT}\n\n{left_in}"))  # as a parser left it
    assert make_student.notebook_leaks(source, student) == ["a {solution} directive"]
    nbformat.write(student, tmp_path / "page.ipynb")
    assert _page_checker(source).scan(tmp_path) == ["page.ipynb: a {solution} directive"]


def test_the_page_checker_reads_text_sources_and_title_terms(tmp_path: Path) -> None:
    source = _read(CHAPTERS[0])
    (tmp_path / "_sources").mkdir()
    (tmp_path / "_sources" / "intro.md.txt").write_text(make_student.solution_texts(source)[0])
    index = {"docnames": ["intro"], "terms": {}, "titleterms": {"hull": 0}}
    (tmp_path / "searchindex.js").write_text(f"Search.setIndex({json.dumps(index)})")
    leaks = _page_checker(source).scan(tmp_path)
    assert any(leak.startswith("_sources/intro.md.txt: ") for leak in leaks)
    assert "searchindex.js: hull" in leaks


def test_a_page_of_the_staged_book_loses_its_solutions(tmp_path: Path) -> None:
    root = tmp_path / "book"
    root.mkdir()
    toc = "format: jb-book\nroot: intro\nchapters:\n  - file: notes\n"
    (root / "_toc.yml").write_text(toc)
    (root / "_config.yml").write_text("title: A book\n")
    (root / "intro.md").write_text("# A book\n\nWelcome.\n")
    solution = ":::{solution} ex-add\nSECRET_PAGE_ANSWER\n:::"
    (root / "notes.md").write_text(f"# Notes\n\n{EXERCISE_TEXT}\n\n{solution}\n\nAfter.\n")
    make_student.stage_book(root, tmp_path / "stage", tmp_path / "notebooks")
    notes = (tmp_path / "stage" / "notes.md").read_text()
    assert "SECRET_PAGE_ANSWER" not in notes
    assert EXERCISE_TEXT in notes
    assert "After." in notes
    assert "student edition" in (tmp_path / "stage" / "intro.md").read_text()
