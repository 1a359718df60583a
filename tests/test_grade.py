"""The grader (``python -m attnbook.grade``) and the verdict hook it relies on.

Two grading runs, each a module-scoped fixture, keep this file at a few
kernels in all:

- the command line on a *folder* of submissions: chapter 2's real student
  edition left untouched (every exercise ``not_attempted``), a submission whose
  cells are the book's own solutions (``passed``), and one with a typical wrong
  answer (``failed``, with the checker's message) and a syntax error (``error``);
- the Python API on submissions that go wrong: a cell that never ends (a short
  time limit interrupts it and the next cell still runs), a cell that kills the
  kernel, a file that is not a notebook, and then a good submission, which
  must still be graded.

The solutions are the ``{solution}`` blocks of ``chapters/02_softmax.ipynb``;
the student edition is ``tools/make_student.py``'s ``student_notebook``.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nbformat
import pytest
from checker_asserts import stub
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from test_notebook_solutions import solution_blocks

import attnbook.exercises as exercises
from attnbook.exercises import _framework, grade
from tools import make_student

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "chapters" / "02_softmax.ipynb"
EXERCISES = ["softmax", "softmax_temperature"]
IMPORTS = (  # what the solutions may use (as in tests/test_notebook_solutions.py)
    "import math\n\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n"
    "from torch import nn\n\n"
    "from attnbook.exercises import check_softmax, check_softmax_temperature"
)
WRONG_SOFTMAX = (  # the typical mistake: no max subtracted, so exp overflows on large scores
    "def my_softmax(x):\n"
    "    e = np.exp(x)\n"
    "    return e / e.sum(axis=-1, keepdims=True)\n\n\n"
    "check_softmax(my_softmax)"
)
BAD_SYNTAX = (  # a missing colon
    "def my_softmax_temperature(x, temperature)\n"
    "    return np.exp(x / temperature)\n\n\n"
    "check_softmax_temperature(my_softmax_temperature)"
)


def _student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return make_student.student_notebook(nb)


def _solutions() -> dict[str, str]:
    """Exercise name -> the code of its solution block in chapter 2."""
    found = {}
    for _, code in solution_blocks(CHAPTER):
        names = grade.checker_calls(code)
        if names:
            (name,) = names
            found[name] = code
    assert sorted(found) == EXERCISES
    return found


def _mini(path: Path, *cells: str) -> Path:
    """A small submission: a title, then one code cell per string."""
    nb = new_notebook(cells=[new_markdown_cell("# Softmax: from scores to weights")])
    nb.cells += [new_code_cell(source) for source in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _by_key(records: list) -> dict[tuple[str, str], object]:
    return {(Path(r.notebook).name, r.exercise): r for r in records}


# ------------------------------------------------------------------ run 1: the command line


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("submissions")
    student = _student_notebook(nbformat.read(CHAPTER, as_version=4))
    assert not any("{solution}" in c.source for c in student.cells)
    (folder / "alice").mkdir()
    nbformat.write(student, folder / "alice" / "02_softmax.ipynb")
    solutions = _solutions()
    _mini(folder / "bob" / "02_softmax.ipynb", IMPORTS, *solutions.values())
    _mini(folder / "carol" / "02_softmax.ipynb", IMPORTS, WRONG_SOFTMAX, BAD_SYNTAX)
    checkpoint = folder / "bob" / ".ipynb_checkpoints" / "02_softmax-checkpoint.ipynb"
    _mini(checkpoint, "raise SystemExit('a checkpoint must not be graded')")
    json_path, csv_path = folder.parent / "grades.json", folder.parent / "grades.csv"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = grade.main([str(folder), "--json", str(json_path), "--csv", str(csv_path)])
    return {
        "code": code,
        "stdout": out.getvalue(),
        "json": json.loads(json_path.read_text(encoding="utf-8")),
        "csv": list(csv.DictReader(csv_path.open(encoding="utf-8", newline=""))),
    }


def _records(run: dict) -> dict[tuple[str, str], dict]:
    return {(Path(r["notebook"]).parent.name, r["exercise"]): r for r in run["json"]}


def test_grading_completes_with_exit_status_0(cli_run: dict) -> None:
    assert cli_run["code"] == 0, cli_run["stdout"]


def test_an_untouched_student_notebook_is_not_attempted(cli_run: dict) -> None:
    records = _records(cli_run)
    for name in EXERCISES:
        record = records["alice", name]
        assert record["status"] == "not_attempted", record
        assert "not attempted yet" in record["message"]
        assert record["chapter"] == "Softmax: from scores to weights"


def test_the_books_solutions_pass(cli_run: dict) -> None:
    records = _records(cli_run)
    for name in EXERCISES:
        assert records["bob", name]["status"] == "passed", records["bob", name]
        assert "hidden cases pass" in records["bob", name]["message"]


def test_a_typical_wrong_answer_fails_with_the_checkers_message(cli_run: dict) -> None:
    record = _records(cli_run)["carol", "softmax"]
    assert record["status"] == "failed", record
    assert record["message"].startswith("❌ softmax: case")
    assert "Hint:" in record["message"]


def test_a_syntax_error_is_an_error_that_names_it(cli_run: dict) -> None:
    record = _records(cli_run)["carol", "softmax_temperature"]
    assert record["status"] == "error", record
    assert "SyntaxError" in record["message"]
    assert "before its checker returned" in record["message"]


def test_json_and_csv_have_one_record_per_notebook_and_exercise(cli_run: dict) -> None:
    expected = {(who, name) for who in ("alice", "bob", "carol") for name in EXERCISES}
    keys = [(Path(r["notebook"]).parent.name, r["exercise"]) for r in cli_run["json"]]
    assert sorted(keys) == sorted(expected)  # once each, and no checkpoint file
    assert cli_run["csv"] == cli_run["json"]  # the same records, the same fields, as text
    assert all(set(r) == set(grade.FIELDS) for r in cli_run["json"])
    assert {r["status"] for r in cli_run["json"]} <= set(grade.STATUSES)


def test_the_table_shows_every_record(cli_run: dict) -> None:
    lines = cli_run["stdout"].splitlines()
    assert lines[0].split() == ["notebook", "exercise", "status", "message"]
    assert len([line for line in lines if "02_softmax.ipynb" in line]) == 6
    assert "3 notebook(s), 6 record(s): 2 passed, 1 failed, 2 not attempted, 1 error" in lines[-1]


# ------------------------------------------------------------------ run 2: what goes wrong

TIMEOUT_S = 10.0  # long enough for the import cell on a busy machine, short for the endless one


@pytest.fixture(scope="module")
def trouble_run(tmp_path_factory: pytest.TempPathFactory) -> list:
    folder = tmp_path_factory.mktemp("trouble")
    solutions = _solutions()
    hangs = _mini(
        folder / "hangs.ipynb",
        IMPORTS,
        "def my_softmax(x):\n    while True:\n        pass\n\n\ncheck_softmax(my_softmax)",
        "def my_softmax_temperature(x, temperature):\n    raise NotImplementedError\n\n\n"
        "check_softmax_temperature(my_softmax_temperature)",
    )
    dies = _mini(
        folder / "dies.ipynb",
        IMPORTS,
        "import os\n\nos._exit(1)\ncheck_softmax(print)",
        solutions["softmax_temperature"],
    )
    broken = folder / "broken.ipynb"
    broken.write_text("{this is not a notebook", encoding="utf-8")
    good = _mini(folder / "good.ipynb", IMPORTS, *solutions.values())
    return grade.grade([hangs, dies, broken, good], timeout=TIMEOUT_S)


def test_a_cell_that_never_ends_is_interrupted_and_the_next_cell_runs(trouble_run: list) -> None:
    records = _by_key(trouble_run)
    hung = records["hangs.ipynb", "softmax"]
    assert hung.status == "error"
    assert f"longer than the {TIMEOUT_S:g} s limit" in hung.message
    assert records["hangs.ipynb", "softmax_temperature"].status == "not_attempted"


def test_a_dead_kernel_is_reported_for_its_cell_and_the_cells_after(trouble_run: list) -> None:
    records = _by_key(trouble_run)
    assert records["dies.ipynb", "softmax"].status == "error"
    assert "kernel died" in records["dies.ipynb", "softmax"].message
    later = records["dies.ipynb", "softmax_temperature"]
    assert later.status == "error"
    assert "never ran" in later.message


def test_an_unreadable_file_is_one_error_record(trouble_run: list) -> None:
    (record,) = [r for r in trouble_run if Path(r.notebook).name == "broken.ipynb"]
    assert (record.exercise, record.status) == ("", "error")
    assert "cannot read this notebook" in record.message


def test_the_notebooks_after_the_broken_ones_are_still_graded(trouble_run: list) -> None:
    records = _by_key(trouble_run)
    assert [records["good.ipynb", name].status for name in EXERCISES] == ["passed", "passed"]
    assert [Path(r.notebook).name for r in trouble_run][-2:] == ["good.ipynb"] * 2


# ------------------------------------------------------------------ pieces, no kernel


def test_checker_calls_reads_calls_not_imports_or_comments() -> None:
    cell = (
        "from attnbook.exercises import check_softmax, check_causal_mask\n"
        "# check_padding_mask(f) is the next exercise\n"
        "check_softmax(my_softmax)\n"
        "exercises.check_causal_mask(f)\n"
        "check_softmax(other)\n"
    )
    assert grade.checker_calls(cell) == ["softmax", "causal_mask"]
    broken = "def f(x)\n    return x\ncheck_softmax(f)  # check_masked_softmax(f)\n"
    assert grade.checker_calls(broken) == ["softmax"]
    assert grade.checker_calls("x = 1") == []


def test_find_notebooks_searches_folders_and_rejects_missing_paths(tmp_path: Path) -> None:
    a = _mini(tmp_path / "a" / "one.ipynb", "1")
    b = _mini(tmp_path / "b.ipynb", "2")
    _mini(tmp_path / "a" / ".ipynb_checkpoints" / "one-checkpoint.ipynb", "3")
    (tmp_path / "notes.txt").write_text("not a notebook")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a notebook")
    assert grade.find_notebooks([tmp_path]) == [a, b]
    assert grade.find_notebooks([b, tmp_path]) == [b, a]  # each notebook once
    with pytest.raises(ValueError, match="does not exist"):
        grade.find_notebooks([tmp_path / "missing.ipynb"])
    with pytest.raises(ValueError, match="no notebook"):
        grade.find_notebooks([tmp_path / "empty"])


def test_usage_errors_exit_with_status_2(tmp_path: Path) -> None:
    for argv in (
        [str(tmp_path / "missing")],
        [str(tmp_path), "--timeout", "0"],
        [str(tmp_path)],  # an empty folder
    ):
        with redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exit_info:
            grade.main(argv)
        assert exit_info.value.code == 2, argv
    with pytest.raises(ValueError, match="timeout"):
        grade.grade_notebook(tmp_path / "x.ipynb", timeout=-1)


def test_an_unknown_kernel_is_a_usage_error(tmp_path: Path) -> None:
    notebook = _mini(tmp_path / "a.ipynb", "1")
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        grade.main([str(notebook), "--kernel", "no-such-kernel-anywhere"])
    assert exit_info.value.code == 2
    assert "no Jupyter kernel named 'no-such-kernel-anywhere'" in err.getvalue()


def test_without_the_grading_tools_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "nbclient" else real_find_spec(name, *args),
    )
    err = io.StringIO()
    with redirect_stderr(err):
        code = grade.main([str(_mini(tmp_path / "a.ipynb", "1"))])
    assert code == 1
    assert "needs nbclient" in err.getvalue()
    assert 'pip install "attnbook[grade]"' in err.getvalue()


# ------------------------------------------------------------------ the verdict hook


def test_the_hook_writes_nothing_when_the_variable_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_framework.VERDICTS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    verdict = exercises.check_softmax(stub)
    assert not verdict.attempted
    assert list(tmp_path.iterdir()) == []


def test_the_hook_records_every_checker_under_its_own_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert grade.VERDICTS_ENV is _framework.VERDICTS_ENV  # one name, imported, not copied
    path = tmp_path / "verdicts.jsonl"
    monkeypatch.setenv(_framework.VERDICTS_ENV, str(path))
    names = sorted(n.removeprefix("check_") for n in dir(exercises) if n.startswith("check_"))
    for name in names:
        getattr(exercises, f"check_{name}")(stub)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["exercise"] for line in lines] == names  # the grader maps calls to verdicts
    assert all(
        set(line) == {"exercise", "passed", "attempted", "n_cases", "message"} for line in lines
    )
    assert not any(line["passed"] or line["attempted"] for line in lines)


def test_a_verdict_is_a_plain_value_that_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "verdicts.jsonl"
    monkeypatch.setenv(_framework.VERDICTS_ENV, str(path))
    verdict = _framework.Verdict("softmax", True, True, 3, "ok")
    assert not path.exists()  # only run_cases (and checkers refining a verdict) record
    assert _framework.record_for_grader(verdict) is verdict
    assert json.loads(path.read_text(encoding="utf-8"))["exercise"] == "softmax"


@pytest.mark.parametrize("module", ["attnbook.grade", "attnbook.exercises.grade"])
def test_both_commands_run_the_grader(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--json" in done.stdout


def test_importing_the_package_loads_no_grading_tool() -> None:
    code = "import sys, attnbook, attnbook.exercises; print(sorted(set(sys.modules) & NAMES))"
    names = {"attnbook.exercises.grade", "nbclient", "nbformat", "jupyter_client"}
    result = subprocess.run(
        [sys.executable, "-c", code.replace("NAMES", repr(names))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
