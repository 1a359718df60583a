"""The grader (``python -m attnbook.grade``): grades, gradebook, state file, and attacks.

Every submission is chapter 2 (two exercises, ``softmax`` and
``softmax_temperature``), kept small so that the grading runs stay few:

- ``cli_run``: the command line on a folder of submissions graded without the
  notebook run (``--skip-run``; grades never depend on it): the untouched
  student edition (``not_attempted``), the book's solutions (``passed``), a
  typical wrong answer and a syntax error, a deleted exercise (``missing``),
  and one submission per class of attack on the answers (forged verdicts,
  monkeypatching, the library's answer by every route, memorised outputs);
- ``sandbox_run``: the command line *with* the notebook run, on a submission
  whose cells attack the machine (other submissions, the grader's outputs,
  background processes, ``/proc``, the environment, the network, killing every
  process it sees, exiting the kernel) beside a good one, with a secret in the
  grader's environment;
- a grader killed mid-way and run again (nothing lost, nothing graded twice).

The sandbox tests need bubblewrap (``bwrap``, installed by ``.ci/run``); they
are skipped, saying so, on a machine without it.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import functools
import hashlib
import io
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout, suppress
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from test_notebook_solutions import solution_blocks

import attnbook.exercises as exercises
from attnbook.exercises import _framework, catalog, grade, sandbox
from attnbook.exercises.softmax import _SOFTMAX_CASES
from tools import make_student

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "02_softmax.ipynb"
TITLE = "# Softmax: from scores to weights"
EXERCISES = ["softmax", "softmax_temperature"]
SECRET = "attnbook-test-secret-7f3a9c"  # in the grader's environment; must reach no output

needs_bwrap = pytest.mark.skipif(
    not sandbox.bwrap_available(), reason="bubblewrap (bwrap) is not installed (see .ci/run)"
)

IMPORTS = (
    "import math\n\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n"
    "from torch import nn\n\nimport attnbook\nfrom attnbook import softmax\n"
    "from attnbook.exercises import check_softmax, check_softmax_temperature"
)
WRONG_SOFTMAX = (  # the typical mistake: no max subtracted, so exp overflows on large scores
    "def my_softmax(x):\n    e = np.exp(x)\n    return e / e.sum(axis=-1, keepdims=True)\n\n\n"
    "check_softmax(my_softmax)"
)
BAD_SYNTAX = (
    "def my_softmax_temperature(x, temperature)\n    return np.exp(x / temperature)\n\n\n"
    "check_softmax_temperature(my_softmax_temperature)"
)
NO_RETURN = (
    "def my_softmax_temperature(x, temperature):\n    z = (x - x.max(axis=-1, keepdims=True))\n"
    "    z / temperature\n\n\ncheck_softmax_temperature(my_softmax_temperature)"
)


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
    """A small submission: the chapter's title, then one code cell per string."""
    nb = new_notebook(cells=[new_markdown_cell(TITLE)])
    nb.cells += [new_code_cell(source) for source in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _memorised_answer() -> str:
    """A softmax that returns the right output for each hidden case's input, from a table
    pasted into the notebook, and zeros for any other input."""
    table = {}
    for case in _SOFTMAX_CASES:
        (x,) = case.make_args()
        table[np.asarray(x, dtype=float).tobytes().hex()] = exercises.softmax.softmax(x).tolist()
    return (
        f"TABLE = {table!r}\n\n\ndef my_softmax(x):\n"
        "    key = np.asarray(x, dtype=float).tobytes().hex()\n"
        "    return np.array(TABLE[key]) if key in TABLE else np.zeros_like(x)\n\n\n"
        "check_softmax(my_softmax)"
    )


def _good_temperature() -> str:
    return _solutions()["softmax_temperature"]


_ANNOTATION_CODE = r"""
import functools

SEEN = []
PAYLOAD = (
    "exec(\"import attnbook, numpy\\n"
    "REF = attnbook.softmax\\n"
    "REAL = numpy.savez\\n"
    "def FAKE(path, **arrays):\\n"
    "    REAL(path, **{f'c{i}_0': REF(x) for i, x in enumerate(SEEN)})\\n"
    "numpy.savez = FAKE\\n\", globals()) or int"
)


def probe(x: PAYLOAD):
    return x


HOOK = functools.singledispatch(print).register(probe)


def my_softmax(x):
    SEEN.append(x)
    return np.zeros_like(x) if HOOK else x


check_softmax(my_softmax)
"""


# Code that makes the sandbox write the package's softmax of what the answer returns, in place
# of it: an attack that reaches a string run as code (exec) while the answer is defined
_PATCH = (
    "import sys\n"
    "ref = sys.modules['attnbook'].softmax\n"
    "for key in ('__main__', 'attnbook.exercises.sandbox'):\n"
    "    m = sys.modules.get(key)\n"
    "    if m is not None and hasattr(m, '_to_arrays'):\n"
    "        m._to_arrays = lambda v, old=m._to_arrays: old(ref(v))\n"
)
_PATCH_AS_TYPE = f"exec({_PATCH!r}, {{}}) or int"  # a type annotation that runs it
_COMMAND = (  # a shell command: the package's softmax of x.npy into y.npy, in the answer's folder
    "python -c \"import numpy as n, attnbook as a; n.save('y.npy', a.softmax(n.load('x.npy')))\""
)


# One submission per attack on the answers: (its cell, the softmax exercise's expected
# status, a text its message must hold). The temperature exercise is left out (missing),
# so that a submission caught by the static check needs no sandbox at all.
ATTACKS = {
    "forge_verdict": (
        "from attnbook.exercises import Verdict\n"
        "import os, json\n"
        "with open(os.environ.get('ATTNBOOK_VERDICTS', 'verdicts.jsonl'), 'a') as f:\n"
        "    f.write(json.dumps({'exercise': 'softmax', 'passed': True, 'attempted': True,"
        " 'n_cases': 6, 'message': 'ok'}) + '\\n')\n"
        "def my_softmax(x):\n    return x\n\n\n"
        "check_softmax = lambda fn: Verdict('softmax', True, True, 6, '✅ softmax: all pass')\n"
        "check_softmax(my_softmax)",
        "failed",
        "case 1/6",
    ),
    "patch_comparison": (
        "import attnbook.exercises._framework as fw\n"
        "fw.compare_outputs = lambda *args: None\nfw.run_cases = lambda *a, **k: True\n"
        "np.allclose = lambda *a, **k: True\n\n"
        "def my_softmax(x):\n    np.allclose = lambda *a, **k: True\n    return x\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "changes numpy.allclose, which the grader's own code reads",
    ),
    "package_function": (
        "def my_softmax(x):\n    return softmax(x)\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "imports attnbook",
    ),
    "package_alias": (
        "sm = attnbook.softmax\n\ncheck_softmax(lambda x: sm(x))",
        "failed",
        "attnbook",
    ),
    "torch_functional": (
        "def my_softmax(x):\n    return F.softmax(torch.as_tensor(x), dim=-1).numpy()\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "uses softmax (F.softmax)",
    ),
    "tensor_method": (
        "def my_softmax(x):\n    return torch.as_tensor(x).softmax(-1).numpy()\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "uses softmax",
    ),
    "scipy_alias": (
        "from scipy.special import softmax as normalise\n\n"
        "def my_softmax(x):\n    return normalise(x, axis=-1)\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "imports scipy.special.softmax",
    ),
    "private_helper": (
        "def my_softmax(x):\n    return torch._softmax(torch.as_tensor(x), -1, False).numpy()\n"
        "\n\ncheck_softmax(my_softmax)",
        "failed",
        "torch._softmax",
    ),
    "aten": (
        "def my_softmax(x):\n"
        "    return torch.ops.aten.special_softmax(torch.as_tensor(x), -1).numpy()\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "torch.ops",
    ),
    "importlib": (
        "import importlib\n\ndef my_softmax(x):\n"
        "    return importlib.import_module('attn' + 'book').softmax(x)\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "importlib",
    ),
    "getattr": (
        "def my_softmax(x):\n    return getattr(F, 'soft' + 'max')(torch.as_tensor(x), -1).numpy()"
        "\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "computed name",
    ),
    "dunder": (
        "def my_softmax(x):\n    f = F.__dict__['soft' + 'max']\n"
        "    return f(torch.as_tensor(x), -1).numpy()\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "__dict__",
    ),
    "thread": (
        "import threading\n\ndef my_softmax(x):\n    out = {}\n"
        "    t = threading.Thread(target=lambda: out.update(y=np.exp(x - x.max(-1, keepdims=True))))"
        "\n    t.start(); t.join()\n    return out['y'] / out['y'].sum(-1, keepdims=True)\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "threading",
    ),
    "memorised": (_memorised_answer(), "failed", "case 1/6"),
    "checker_internals": (  # a right softmax that the checker's own module holds
        "import pkgutil\n\nstable = pkgutil.resolve_name('attnbook.exercises.softmax:_stable')\n\n"
        "def my_softmax(x):\n    return stable(x)\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "imports pkgutil",  # and in the sandbox: test_the_checkers_own_code_is_caught_at_run_time
    ),
    "switch_off_the_watch": (  # passed before: the real softmax, the profile hook switched off
        "real = torch.sys.modules['operator'].attrgetter('soft' + 'max')(torch)\n"
        "quiet = torch.sys.setprofile\n\n"
        "def my_softmax(x):\n    quiet(None)\n    return real(torch.as_tensor(x), -1).numpy()\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "torch.sys",
    ),
    "string_run_as_code": (  # passed before: timeit ran a string that took torch._softmax
        "import timeit\n\ndef make():\n    d = {}\n"
        "    timeit.timeit(\"d['f'] = __import__('torch')._softmax\", globals={'d': d}, number=1)\n"
        "    return d\n\nholder = make()\n\n"
        "def my_softmax(x):\n    return holder['f'](torch.as_tensor(x), -1, False).numpy()\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "imports timeit",
    ),
    "in_place": (  # not an attack: a mistake that the numbers alone do not show
        "def my_softmax(x):\n    x -= x.max(axis=-1, keepdims=True)\n    e = np.exp(x)\n"
        "    return e / e.sum(axis=-1, keepdims=True)\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "changed its argument `x` in place",
    ),
    "none_returned": (
        "def my_softmax(x):\n    e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
        "    e / e.sum(axis=-1, keepdims=True)\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "did you forget `return`?",
    ),
    # An annotation that names a string, run as code by singledispatch's get_type_hints when
    # the program is defined, before the tripwires: it took the package's softmax and made
    # np.savez write its outputs for the answer's. It passed until the sandbox dropped the
    # program's annotations (and stopped writing with the answer's np.savez).
    "annotation_code": (_ANNOTATION_CODE, "error", "TypeError"),
    "savez_replaced": (  # the results are written with the np.savez taken before it ran
        "def my_softmax(x):\n    np.savez = lambda *a, **k: None\n    return x\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "case 1/6",
    ),
    # This passed, running _PATCH (which makes the sandbox write the package's softmax of
    # whatever the answer returns): a name written in getattr was not read as the attribute
    # it names (torch.builtins); the static check refuses it now.
    "getattr_written_name": (
        f"run = getattr(torch, 'builtins').exec\nHOOK = run({_PATCH!r})\n\n"
        "def my_softmax(x):\n    return x if HOOK is None else 0\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "uses getattr(torch, 'builtins')",
    ),
    # Annotations made of strings by make_dataclass, which the sandbox's dropping of the
    # program's annotations does not see: register evaluated them through get_type_hints
    # (running _PATCH, this passed), now a tripwire in the sandbox.
    "annotation_from_strings": (
        "import dataclasses\nimport functools\n\n"
        f"Box = dataclasses.make_dataclass('Box', [('a', {_PATCH_AS_TYPE!r}, "
        "dataclasses.field(default=0))])\n"
        "HOOK = functools.singledispatch(print).register(Box())\n\n"
        "def my_softmax(x):\n    return x if HOOK else 0\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "calls typing.get_type_hints, which runs code that the grader cannot read",
    ),
    # A shell command of torch's (a script that imports the package and writes its softmax
    # of the answer's input to a file that the answer returns; this passed): the sandbox
    # refuses a new process now (more routes: test_the_sandbox_refuses_every_route_...)
    "shell_command": (
        f"from torch.utils import collect_env\n\nCOMMAND = {_COMMAND!r}\n\n"
        "def my_softmax(x):\n    np.save('x.npy', x)\n    collect_env.run(COMMAND)\n"
        "    return np.load('y.npy')\n\n\ncheck_softmax(my_softmax)",
        "failed",
        "calls subprocess.Popen, which runs code that the grader cannot read",
    ),
    # operator's attrgetter, which torch.autograd.profiler_util holds, took torch's private
    # softmax by a string, which neither a tripwire nor the guard knows (this passed)
    "getter_by_another_name": (
        "import torch.autograd.profiler_util as pu\n\n"
        "OP = pu.attrgetter('ops.aten._softmax')(torch)\n\n"
        "def my_softmax(x):\n    return OP(torch.as_tensor(x), -1, False).numpy()\n\n\n"
        "check_softmax(my_softmax)",
        "failed",
        "uses pu.attrgetter",
    ),
    # enum.global_enum wrote members with a __call__ into the grader's modules, by their
    # names, in place of its guard's watch and its tripwires: a library's softmax passed
    "members_over_the_grader": (
        "import enum\n\nclass Calls:\n    def __call__(self, *args):\n"
        "        return (args[0](), True) if callable(args[0]) else None\n\n"
        "Watch = enum.Enum('Watch', [('_watching_calls', 1)], "
        "module='attnbook.exercises._framework', type=Calls)\n"
        "Wires = enum.Enum('Wires', [('_install_tripwires', 2)], module='__main__', type=Calls)\n"
        "HOOKS = [enum.global_enum(Watch), enum.global_enum(Wires)]\n\n"
        "def my_softmax(x):\n"
        "    return torch.distributions.Categorical(logits=torch.as_tensor(x)).probs.numpy()\n\n"
        "check_softmax(my_softmax if HOOKS else None)",
        "failed",
        "uses enum.global_enum",
    ),
}


# ------------------------------------------------------------------ run 1: the command line


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not sandbox.bwrap_available():
        pytest.skip("bubblewrap (bwrap) is not installed (see .ci/run)")
    folder = tmp_path_factory.mktemp("submissions")
    student = make_student.student_notebook(nbformat.read(CHAPTER, as_version=4))
    assert not any("{solution}" in c.source for c in student.cells)
    (folder / "alice").mkdir()
    nbformat.write(student, folder / "alice" / "02_softmax.ipynb")
    solutions = _solutions()
    _mini(folder / "bob" / "02_softmax.ipynb", IMPORTS, *solutions.values())
    _mini(folder / "carol" / "02_softmax.ipynb", IMPORTS, WRONG_SOFTMAX, BAD_SYNTAX)
    _mini(folder / "dave" / "02_softmax.ipynb", IMPORTS, NO_RETURN)  # softmax deleted
    for name, (cells, _, _) in ATTACKS.items():  # the other exercise deleted: missing
        _mini(folder / name / "02_softmax.ipynb", IMPORTS, cells)
    checkpoint = folder / "bob" / ".ipynb_checkpoints" / "02_softmax-checkpoint.ipynb"
    _mini(checkpoint, "raise SystemExit('a checkpoint must not be graded')")
    course = folder.parent / "course.yml"
    course.write_text("points:\n  default: 2\n  exercises:\n    ex-ch02-temperature: 3\n")
    out_dir = folder.parent
    paths = {kind: out_dir / f"grades.{kind}" for kind in ("json", "csv")}
    paths["gradebook"] = out_dir / "gradebook.csv"
    out, err = io.StringIO(), io.StringIO()
    argv = [str(folder)]
    argv += ["--skip-run", "--course", str(course)]
    argv += [f"--{kind}={path}" for kind, path in paths.items()]
    with redirect_stdout(out), redirect_stderr(err):
        code = grade.main(argv)
    return {
        "code": code,
        "stdout": out.getvalue(),
        "json": json.loads(paths["json"].read_text(encoding="utf-8")),
        "csv": list(csv.DictReader(paths["csv"].open(encoding="utf-8", newline=""))),
        "gradebook": list(csv.DictReader(paths["gradebook"].open(encoding="utf-8", newline=""))),
        "state": paths["json"].with_suffix(".state.jsonl"),
    }


def _records(run: dict) -> dict[tuple[str, str], dict]:
    return {(r["student"], r["exercise"]): r for r in run["json"]}


def test_grading_completes_with_exit_status_0(cli_run: dict) -> None:
    assert cli_run["code"] == 0, cli_run["stdout"]


def test_an_untouched_student_notebook_is_not_attempted(cli_run: dict) -> None:
    for name in EXERCISES:
        record = _records(cli_run)["alice", name]
        assert record["status"] == "not_attempted", record
        assert record["chapter"] == "Softmax: from scores to weights"
        assert record["points"] == 0


def test_the_books_solutions_pass_with_the_courses_points(cli_run: dict) -> None:
    records = _records(cli_run)
    assert records["bob", "softmax"]["status"] == "passed", records["bob", "softmax"]
    assert records["bob", "softmax_temperature"]["status"] == "passed"
    assert (records["bob", "softmax"]["points"], records["bob", "softmax"]["max_points"]) == (2, 2)
    assert records["bob", "softmax_temperature"]["points"] == 3  # the course.yml override
    assert records["bob", "softmax"]["label"] == "ex-ch02-stable-softmax"


def test_a_typical_wrong_answer_fails_with_the_checkers_hint(cli_run: dict) -> None:
    record = _records(cli_run)["carol", "softmax"]
    assert record["status"] == "failed", record
    assert record["message"].startswith("❌ softmax: case")
    assert "Hint:" in record["message"]


def test_a_syntax_error_is_an_error_that_names_it(cli_run: dict) -> None:
    record = _records(cli_run)["carol", "softmax_temperature"]
    assert record["status"] == "error", record
    assert "SyntaxError" in record["message"]


def test_a_deleted_exercise_is_missing_and_worth_0(cli_run: dict) -> None:
    record = _records(cli_run)["dave", "softmax"]
    assert (record["status"], record["points"], record["max_points"]) == ("missing", 0, 2)
    assert "deleted" in record["message"]


def test_a_function_without_return_is_asked_about_it(cli_run: dict) -> None:
    record = _records(cli_run)["dave", "softmax_temperature"]
    assert record["status"] == "failed"
    assert "did you forget `return`?" in record["message"]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_on_the_answer_fails_it(cli_run: dict, attack: str) -> None:
    _, status, text = ATTACKS[attack]
    record = _records(cli_run)[attack, "softmax"]
    assert record["status"] == status, record
    assert text in record["message"], record["message"]
    assert record["points"] == 0
    assert _records(cli_run)[attack, "softmax_temperature"]["status"] == "missing"


def test_the_memorised_table_is_a_real_attack_on_the_shipped_cases() -> None:
    namespace: dict = {"np": np, "check_softmax": exercises.check_softmax}
    exec(_memorised_answer().replace("check_softmax(my_softmax)", ""), namespace)
    assert exercises.check_softmax(namespace["my_softmax"]).passed  # it fools the checker


def test_json_csv_and_gradebook_agree(cli_run: dict) -> None:
    rows = cli_run["json"]
    assert all(set(r) == set(grade.FIELDS) for r in rows)
    assert {r["status"] for r in rows} <= set(grade.STATUSES)
    students = {"alice", "bob", "carol", "dave", *ATTACKS}
    assert {(r["student"], r["exercise"]) for r in rows} == {
        (s, e) for s in students for e in EXERCISES
    }  # once each: no checkpoint file, no exercise silently absent
    assert [
        dict(r, points=float(r["points"]), max_points=float(r["max_points"]))
        for r in cli_run["csv"]
    ] == rows
    book = {row["student"]: row for row in cli_run["gradebook"]}
    assert set(book) == students
    assert (book["bob"]["total"], book["bob"]["max_points"]) == ("5", "5")
    assert (book["alice"]["total"], book["dave"]["softmax"]) == ("0", "0")


def test_a_chapter_handed_in_twice_counts_each_exercise_once(tmp_path: Path) -> None:
    """02_softmax.ipynb and 02_softmax (1).ipynb: the best result of each exercise, once,
    and the summary says so."""

    def row(notebook: str, exercise: str, status: str, worth: float) -> grade.GradeRecord:
        earned = worth if status == "passed" else 0.0
        return grade.GradeRecord(
            "peggy", notebook, "Softmax", exercise, "", status, earned, worth, ""
        )

    records = [
        row("02_softmax.ipynb", "", "error", 0.0),  # a notebook's own record
        row("02_softmax.ipynb", "softmax", "passed", 1.0),
        row("02_softmax.ipynb", "softmax_temperature", "failed", 3.0),
        row("02_softmax (1).ipynb", "softmax", "passed", 1.0),
        row("02_softmax (1).ipynb", "softmax_temperature", "passed", 3.0),
    ]
    path = tmp_path / "gradebook.csv"
    grade.write_gradebook(records, path)
    (peggy,) = csv.DictReader(path.open(encoding="utf-8", newline=""))
    assert (peggy["softmax"], peggy["softmax_temperature"]) == ("1", "3")
    assert (peggy["total"], peggy["max_points"]) == ("4", "4")
    text = grade.format_table(records)
    assert "peggy: 4 / 4" in text
    assert "02_softmax (1).ipynb, 02_softmax.ipynb): each exercise counts once" in text


def test_every_student_is_graded_out_of_every_exercise_anyone_handed_in(tmp_path: Path) -> None:
    """A chapter a student did not hand in counts 0 of its points, not as nothing asked:
    otherwise skipping a chapter would raise a student's share."""

    def row(student: str, exercise: str, status: str) -> grade.GradeRecord:
        worth = {"softmax": 1.0, "causal_mask": 2.0}[exercise]
        earned = worth if status == "passed" else 0.0
        return grade.GradeRecord(student, "nb.ipynb", "", exercise, "", status, earned, worth, "")

    records = [
        row("quinn", "softmax", "passed"),
        row("quinn", "causal_mask", "failed"),
        row("ruth", "softmax", "passed"),  # handed in chapter 2 only
    ]
    path = tmp_path / "gradebook.csv"
    grade.write_gradebook(records, path)
    book = {row["student"]: row for row in csv.DictReader(path.open(encoding="utf-8"))}
    assert (book["quinn"]["total"], book["quinn"]["max_points"]) == ("1", "3")
    assert (book["ruth"]["causal_mask"], book["ruth"]["total"]) == ("0", "1")
    assert book["ruth"]["max_points"] == "3"  # not 1: 100% for skipping a chapter
    assert "ruth: 1 / 3" in grade.format_table(records)


def test_the_summary_table_shows_every_record_and_the_totals(cli_run: dict) -> None:
    lines = cli_run["stdout"].splitlines()
    assert lines[0].split() == ["student", "exercise", "status", "points", "message"]
    assert "  bob: 5 / 5" in lines
    assert f"{1 + len(ATTACKS)} missing" in lines[-1]


def test_the_table_names_the_file_of_a_notebook_that_could_not_be_graded() -> None:
    """The table has no notebook column: a notebook's own error record (exercise "-") starts
    its message with the file's name, so an instructor knows which file to ask for again."""
    record = grade.GradeRecord(
        "erin",
        "subs/erin/02_softmax (1).ipynb",
        "",
        "",
        "",
        "error",
        0.0,
        0.0,
        "cannot read this notebook: NotJSONError: Notebook does not appear to be JSON",
    )
    (row,) = [line for line in grade.format_table([record]).splitlines() if line.startswith("erin")]
    assert row.split("0/0", 1)[1].strip().startswith("02_softmax (1).ipynb: cannot read"), row


def test_the_state_file_holds_the_seed_and_every_notebook(cli_run: dict) -> None:
    lines = [json.loads(line) for line in cli_run["state"].read_text().splitlines()]
    assert lines[0]["kind"] == "seed"
    assert len(lines) == 1 + 4 + len(ATTACKS)


# ------------------------------------------------------------------ run 2: the machine

TAMPER = """
import glob, json, os, subprocess, sys, time
TARGETS = {targets!r}
report = {{}}
for target in TARGETS:
    try:
        with open(target, "a") as f:
            f.write("tampered")
        report[target] = "written"
    except OSError as exc:
        report[target] = type(exc).__name__
report["visible"] = sorted(set(glob.glob(os.path.dirname(TARGETS[0]) + "/*")))
report["env"] = sorted(k for k, v in os.environ.items() if "{secret}" in v)
leaks = []
for path in glob.glob("/proc/*/environ"):
    try:
        if b"{secret}" in open(path, "rb").read():
            leaks.append(path)
    except OSError:
        pass
report["proc"] = leaks
subprocess.Popen([sys.executable, "-c", {background!r}, "{marker}"], start_new_session=True)
print(json.dumps(report))
"""
BACKGROUND = (  # outlives its notebook, if it can: writes to the targets for a minute
    "import sys, time\n"
    "for _ in range(600):\n"
    "    for t in TARGETS:\n"
    "        try:\n            open(t, 'a').write('late')\n        except OSError:\n            pass\n"
    "    time.sleep(0.1)\n"
)
KILL_ALL = (
    "import os, signal\n"
    "print('✅ softmax: all 6 hidden cases pass.')\n"
    "for pid in sorted((int(p) for p in os.listdir('/proc') if p.isdigit()), reverse=True):\n"
    "    if pid != os.getpid():\n"
    "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
    "os._exit(0)"
)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def sandbox_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not sandbox.bwrap_available():
        pytest.skip("bubblewrap (bwrap) is not installed (see .ci/run)")
    folder = tmp_path_factory.mktemp("machine")
    solutions = _solutions()
    good = _mini(folder / "bob" / "02_softmax.ipynb", IMPORTS, *solutions.values())
    good_hash = hashlib.sha256(good.read_bytes()).hexdigest()
    out_dir = folder.parent / "out"
    out_dir.mkdir()
    json_path = out_dir / "grades.json"
    marker = f"attnbook-background-{os.getpid()}"
    targets = [str(good), str(json_path), str(json_path.with_suffix(".state.jsonl"))]
    background = f"TARGETS = {targets!r}\n" + BACKGROUND
    tamper = TAMPER.format(targets=targets, secret=SECRET, background=background, marker=marker)
    mallory = _mini(
        folder / "submissions" / "mallory" / "02_softmax.ipynb",
        IMPORTS,
        tamper,
        WRONG_SOFTMAX,  # wrong: must fail, whatever the notebook prints
        KILL_ALL,  # fakes a pass, then kills every process it can see, the kernel included
        solutions["softmax_temperature"],
    )
    env = dict(os.environ, ATTNBOOK_TEST_SECRET=SECRET, PYTHONPATH=os.pathsep.join(sys.path))
    command = [sys.executable, "-m", "attnbook.grade", str(mallory.parent.parent)]  # not bob
    command += ["--json", str(json_path), "--csv", str(out_dir / "grades.csv"), "--timeout", "60"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    time.sleep(0.5)  # a background process that survived would write now
    return {
        "done": done,
        "records": {(r["student"], r["exercise"]): r for r in json.loads(json_path.read_text())},
        "good": good,
        "good_hash": good_hash,
        "marker": marker,
        "outputs": [json_path, out_dir / "grades.csv", json_path.with_suffix(".state.jsonl")],
    }


@needs_bwrap
def test_the_grader_survives_a_submission_that_kills_every_process(sandbox_run: dict) -> None:
    assert sandbox_run["done"].returncode == 0, sandbox_run["done"].stderr[-3000:]
    record = sandbox_run["records"]["mallory", "softmax_temperature"]
    assert record["status"] == "passed", record  # graded from the source, whatever the run did


@needs_bwrap
def test_faking_a_pass_and_exiting_the_kernel_changes_nothing(sandbox_run: dict) -> None:
    record = sandbox_run["records"]["mallory", "softmax"]
    assert record["status"] == "failed"
    assert "returned NaN or inf" in record["message"]
    assert "The notebook run stopped early" in record["message"] or "raised" in record["message"]


@needs_bwrap
def test_other_submissions_and_the_outputs_are_out_of_reach(sandbox_run: dict) -> None:
    assert hashlib.sha256(sandbox_run["good"].read_bytes()).hexdigest() == sandbox_run["good_hash"]
    for path in sandbox_run["outputs"]:
        text = path.read_text(encoding="utf-8")
        assert "tampered" not in text
        assert "late" not in text.replace("latest", "")
    json.loads(sandbox_run["outputs"][0].read_text())  # still whole


@needs_bwrap
def test_no_process_of_a_submission_outlives_its_sandbox(sandbox_run: dict) -> None:
    assert _processes_with(sandbox_run["marker"]) == []


@needs_bwrap
def test_the_graders_environment_reaches_no_output(sandbox_run: dict) -> None:
    done = sandbox_run["done"]
    texts = [done.stdout, done.stderr] + [p.read_text() for p in sandbox_run["outputs"]]
    assert not any(SECRET in text for text in texts)


def _probe(program: str, folder: Path, limits: sandbox.Limits) -> str:
    """Evaluate ``program`` as the softmax exercise's answer, in the sandbox, on one case; the
    message of the error its ``answer`` raises (how a probe reports what it found)."""
    folder.mkdir()
    job = [{"exercise": "softmax", "program": program, "args": [(np.zeros(3),)], "seeds": [0]}]
    (folder / "job.pkl").write_bytes(__import__("pickle").dumps(job))
    (folder / "settings.json").write_text(json.dumps({"exercise_timeout": 60}))
    result = sandbox.run_sandboxed("evaluate", folder, limits)
    assert result.returncode == 0, result.log
    return json.loads((folder / "out" / "softmax.json").read_text())["cases"][0]["message"]


@needs_bwrap
def test_inside_the_sandbox_there_is_no_network_no_secret_and_nobody_else(tmp_path: Path) -> None:
    """The evaluation sandbox, driven directly with a program the static check never saw.

    The network is probed with a socket listening on this machine's loopback: a sandbox
    that shared the machine's network would reach it, whether or not the machine is online.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    other = tmp_path / "other.ipynb"
    other.write_text("a submission", encoding="utf-8")
    program = (
        "import glob, json, os, socket\n"
        "found = {'env': [k for k, v in os.environ.items() if '" + SECRET + "' in v]}\n"
        "found['proc'] = []\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n        data = open(path, 'rb').read()\n    except OSError:\n        continue\n"
        "    if b'" + SECRET + "' in data:\n        found['proc'].append(path)\n"
        "found['pids'] = len([p for p in os.listdir('/proc') if p.isdigit()])\n"
        f"found['other'] = os.path.exists({str(other)!r})\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    found['net'] = 'online'\n"
        "except OSError:\n    found['net'] = 'offline'\n"
        # the report leaves as an error message (an answer that reads `json` itself would be
        # refused before its error is reported: the grader does not let answers import it)
        "REPORT = json.dumps(found)\n"
        "def answer(x):\n    raise ValueError(REPORT)\n"
        "__attnbook_answer__ = answer\n"
    )
    os.environ["ATTNBOOK_TEST_SECRET"] = SECRET
    try:
        message = _probe(program, tmp_path / "eval", sandbox.Limits(wall_s=120))
    finally:
        del os.environ["ATTNBOOK_TEST_SECRET"]
        listener.close()
    found = json.loads(message.split(": ", 1)[1])
    assert found["env"] == []
    assert found["proc"] == []
    assert found["net"] == "offline"
    assert found["other"] is False
    assert found["pids"] <= 4  # bwrap's init, the evaluator and its child, nothing of ours


@needs_bwrap
def test_the_sandboxs_tmp_holds_no_more_than_its_limit_in_all(tmp_path: Path) -> None:
    """The sandbox's temporary folder (TMPDIR) lives in memory, which neither the address-space
    nor the file-size limit reaches: many files under the file-size limit could fill the
    machine's memory. Its total is capped (here at 8 MiB, written in files of 1 MiB)."""
    if not sandbox._bwrap_sizes_tmpfs():
        pytest.skip("this bubblewrap (before 0.7, or setuid) cannot cap a tmpfs")
    program = (
        "import os\n"
        "written = 0\n"
        "try:\n"
        "    for i in range(32):\n"
        "        with open(os.path.join(os.environ['TMPDIR'], f'block{i}'), 'wb') as f:\n"
        "            f.write(b'x' * 2**20)\n"
        "        written += 1\n"
        "except OSError as exc:\n"
        "    written = f'{written} MiB, then errno {exc.errno}'\n"
        "def answer(x):\n    raise ValueError(f'wrote {written}')\n"
        "__attnbook_answer__ = answer\n"
    )
    message = _probe(program, tmp_path / "eval", sandbox.Limits(wall_s=120, tmp_bytes=8 * 2**20))
    assert "MiB, then errno 28" in message, message  # ENOSPC: no space left on the device
    assert int(message.split("wrote ")[1].split(" MiB")[0]) <= 8, message


@needs_bwrap
def test_the_private_folder_holds_no_more_than_its_limit_in_all(tmp_path: Path) -> None:
    """Many small files, each under the file-size limit, written into the sandbox's private
    folder: it lives in memory, capped in all (here at 1 MiB, written in files of 64 KiB), its
    inputs read-only; only the files the task writes back reach the grader's disk."""
    if not sandbox._bwrap_sizes_tmpfs():
        pytest.skip("this bubblewrap (before 0.7, or setuid) cannot cap a tmpfs")
    folder = tmp_path / "eval"
    (folder / "out").mkdir(parents=True)
    (folder / "job.txt").write_text("the grader's input")
    (folder / "out" / "result.json").touch()  # run_sandboxed makes the files to write back
    program = (
        "import json\n"
        "report = {'input': open('job.txt').read()}\n"
        "try:\n    open('job.txt', 'w')\nexcept OSError as exc:\n    report['rewrite'] = str(exc)\n"
        "try:\n"
        "    for n in range(64):\n"
        "        with open(f'block{n}', 'wb') as f:\n            f.write(b'x' * 2**16)\n"
        "except OSError as exc:\n    report['stopped'] = [n, str(exc)]\n"
        "with open('out/result.json', 'w') as f:\n    json.dump(report, f)\n"
    )
    limits = sandbox.Limits(wall_s=30, folder_bytes=2**20)
    env = sandbox._environment(sandbox.INSIDE)
    argv = [sys.executable, "-I", "-c", program]
    argv = sandbox._bwrap_argv(folder, argv, env, limits, ["out/result.json"])
    done = subprocess.run(argv, capture_output=True, timeout=30, preexec_fn=sandbox._limit(limits))
    assert done.returncode == 0, done.stderr
    report = json.loads((folder / "out" / "result.json").read_text())
    assert report["input"] == "the grader's input"
    assert "Read-only file system" in report["rewrite"]
    written, message = report["stopped"]
    assert written <= 16, report  # 1 MiB in blocks of 64 KiB
    assert "No space left on device" in message, report
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == [
        "job.txt",
        "out",
        "out/result.json",
    ]


@needs_bwrap
@pytest.mark.parametrize(
    ("program", "kept"),
    [
        ("open('executed.ipynb', 'w').write('{}')", True),
        ("open('executed.ipynb', 'w').write('{}'); raise SystemExit(1)", False),
        ("pass", False),
    ],
    ids=["written", "then failed", "not written"],
)
def test_a_file_to_write_back_is_kept_only_if_written_by_a_task_that_ended_well(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: str, kept: bool
) -> None:
    """What run_sandboxed leaves of the executed notebook, the file it binds into the sandbox
    to be written back, with a short program in place of the task's own (no kernel starts)."""
    real = sandbox._bwrap_argv

    def short(folder: Path, argv: list[str], *args: object) -> list[str]:
        return real(folder, [sys.executable, "-I", "-c", program], *args)

    monkeypatch.setattr(sandbox, "_bwrap_argv", short)
    folder = tmp_path / "run"
    folder.mkdir()
    sandbox.run_sandboxed("execute", folder, sandbox.Limits(wall_s=30))
    assert (folder / "executed.ipynb").exists() == kept


def _evaluate_unchecked(
    program: str, folder: Path, *, more: dict[str, str] | None = None, timeout: float = 60
) -> tuple[dict, str, str]:
    """The softmax exercise's ``program`` evaluated in the sandbox as the grader would, but
    without the static check (what a route it misses would reach), on one case; then the
    programs of ``more`` (exercise -> program), each on the same input. Returns the softmax
    report as the grader reads it (empty if there is none), and the grader's status and
    message for it."""
    folder.mkdir()
    programs = {"softmax": program, **(more or {})}
    job = [
        {"exercise": name, "program": code, "args": [(np.ones(3),)], "seeds": [0]}
        for name, code in programs.items()
    ]
    (folder / "job.pkl").write_bytes(__import__("pickle").dumps(job))
    (folder / "settings.json").write_text(json.dumps({"exercise_timeout": timeout}))
    sandbox.run_sandboxed("evaluate", folder, sandbox.Limits(wall_s=120))
    result = folder / "out" / "softmax.json"
    report = json.loads(result.read_text()) if result.exists() else {}
    spec = _framework.checker_spec(exercises.check_softmax, print)
    one_case = dataclasses.replace(spec, cases=spec.cases[:1])
    return (report, *grade._judge("softmax", one_case, [(np.ones(3),)], folder))


@needs_bwrap
def test_the_grader_refuses_a_numpy_mask_as_the_checker_does(tmp_path: Path) -> None:
    """The sandbox hands every result back as a NumPy array, so the type the mask exercises
    ask for (a torch tensor) is checked on the answer's own result, by the checker's guard:
    a NumPy causal mask fails, a torch padding mask passes (one sandbox run for all three).
    Weights in float32 for float64 scores, which the masked-softmax checker's own wrapper
    refuses, are told as what the answer returned, not as an error it raised."""
    programs = {
        "masked_softmax": (
            "import torch\n"
            "def answer(scores, mask):\n"
            "    return torch.softmax(scores.float().masked_fill(~mask, -1e9), dim=-1)\n"
            "__attnbook_answer__ = answer\n"
        ),
        "causal_mask": "import numpy as np\n__attnbook_answer__ = lambda n: np.tri(n, dtype=bool)\n",
        "padding_mask": (
            "import torch\n"
            "__attnbook_answer__ = lambda lengths, s: (torch.arange(s) < lengths[:, None])[:, None]\n"
        ),
    }
    args = {"causal_mask": (4,), "padding_mask": (torch.tensor([3, 1, 4]), 4)}
    args["masked_softmax"] = _one_case("masked_softmax").cases[0].make_args()
    said = _evaluate_programs(programs, args, tmp_path)
    message = _said_failed(said, "masked_softmax", ") returned float32 weights for float64 scores")
    assert "raised" not in message, message
    _said_failed(
        said, "causal_mask", "returned a NumPy array, expected a torch tensor of dtype torch.bool"
    )
    assert said["padding_mask"][0] == "passed", said["padding_mask"][1]


_ZERO_WEIGHT = (  # attention's values through NumPy, tied to the graph by a term of weight 0
    "import numpy as np\nimport torch\n"
    "def attend(q, k, v):\n"
    "    Q, K, V = (t.detach().numpy() for t in (q, k, v))\n"
    "    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])\n"
    "    w = np.exp(s - s.max(axis=-1, keepdims=True))\n"
    "    out = torch.from_numpy(w / w.sum(axis=-1, keepdims=True) @ V)\n"
    "    return out + (q.sum() + k.sum() + v.sum()) * 0\n"
    "__attnbook_answer__ = attend\n"
)


# A pre-LN block computed without a graph, tied to x by a term of weight 0, whose program
# registers, when it is defined, a forward hook on every module that doubles what it returns,
# and removes it when the answer runs: the reference's gradients, primed after the program was
# defined, came from the doubled block, whose values differ from the answer's, so the
# comparison of gradients was skipped (graded passed).
_HOOKED_REFERENCE = (
    "import torch\n"
    "H = torch.nn.modules.module.register_module_forward_hook(\n"
    "    lambda m, i, o: o * 2 if isinstance(o, torch.Tensor) else o\n"
    ")\n"
    "def block(x, attention, ffn, norm1, norm2):\n"
    "    H.remove()\n"
    "    with torch.no_grad():\n"
    "        y = x + attention(norm1(x))\n"
    "        y = y + ffn(norm2(y))\n"
    "    return y + x.sum() * 0\n"
    "__attnbook_answer__ = block\n"
)


# RoPE by Python loops, in the numpy() of a tensor subclass that the answer returns: it ran
# when the gradients were compared, unwatched, and handed that comparison the zeros from before
# (nothing compared), then the grader read the numbers the loops wrote (graded passed)
_FILLED_LATER = (
    "import math\nimport torch\nPENDING = []\n"
    "class Lazy(torch.Tensor):\n"
    "    def numpy(self, *args, **kwargs):\n"
    "        if not PENDING:\n"
    "            return torch.Tensor.numpy(self, *args, **kwargs)\n"
    "        x, positions = PENDING.pop()\n"
    "        before, d = torch.Tensor.numpy(self).copy(), x.shape[-1]\n"
    "        for t in range(x.shape[-2]):\n"
    "            for i in range(d // 2):\n"
    "                angle = float(positions[t]) * 10000 ** (-2 * i / d)\n"
    "                a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]\n"
    "                self[..., t, 2 * i] = a * math.cos(angle) - b * math.sin(angle)\n"
    "                self[..., t, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)\n"
    "        return before\n"
    "def rope(x, positions):\n"
    "    PENDING.append((x.detach(), positions))\n"
    "    return (x * 0).as_subclass(Lazy)\n"
    "__attnbook_answer__ = rope\n"
)


@needs_bwrap
def test_values_computed_outside_autograd_fail_on_their_gradient_in_the_grader(
    tmp_path: Path,
) -> None:
    """An answer that computed attention's values with NumPy and reached the inputs' graph by
    adding `query.sum() * 0` was graded passed: the rule asked only that the graph reach the
    inputs. Its gradient is now compared with the reference's, computed in the sandbox before
    the answer's program runs (so a forward hook that it registers on every module changes
    nothing there) and before the exercise's library functions become tripwires; a right
    answer through einsum (in float32 inside) passes in the same sandbox run. A result that
    computes its numbers while the gradients are compared (a tensor subclass's numpy, by
    Python loops) fails too."""
    programs = {
        "apply_rope": _FILLED_LATER,
        "pre_ln_block": _HOOKED_REFERENCE,
        "scaled_dot_product_attention": _ZERO_WEIGHT,
        "self_attention": (
            "import torch\n"
            "def attend(x, W_q, W_k, W_v):\n"
            "    q, k, v = (x.float() @ W.float() for W in (W_q, W_k, W_v))\n"
            "    s = torch.einsum('...td,...sd->...ts', q, k) / q.shape[-1] ** 0.5\n"
            "    return torch.einsum('...ts,...sd->...td', s.softmax(-1), v)\n"
            "__attnbook_answer__ = attend\n"
        ),
    }
    args = {name: _one_case(name).cases[0].make_args() for name in programs}
    args["pre_ln_block"] = None  # its sub-layers are closures: drawn again in the sandbox
    said = _evaluate_programs(programs, args, tmp_path)
    differs = "the gradient with respect to `{}` differs from the reference's"
    _said_failed(said, "scaled_dot_product_attention", differs.format("query"))
    _said_failed(said, "pre_ln_block", differs.format("x"))
    assert said["apply_rope"][0] == "failed", said["apply_rope"][1]
    assert said["self_attention"][0] == "passed", said["self_attention"][1]


_LAZY_LOOPS = (  # a mask computed by Python loops when NumPy converts the answer's result
    "import numpy as np\n"
    "class Lazy:\n"
    "    def __init__(self, n, w):\n        self.n, self.w = n, w\n"
    "    def __array__(self, dtype=None, copy=None):\n"
    "        out = np.zeros((self.n, self.n), dtype=bool)\n"
    "        for t in range(self.n):\n"
    "            for s in range(self.n):\n"
    "                out[t, s] = 0 <= t - s < self.w\n"
    "        return out\n"
    "__attnbook_answer__ = lambda n, w: Lazy(n, w)\n"
)

_FROMPYFUNC_TABLE = (  # the right table, math.sin and math.cos called by NumPy on every angle
    "import math\nimport numpy as np\nimport torch\n"
    "def answer(n, d):\n"
    "    angles = np.arange(n)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)\n"
    "    pe = np.empty((n, d))\n"
    "    pe[:, 0::2] = np.frompyfunc(math.sin, 1, 1)(angles)\n"
    "    pe[:, 1::2] = np.frompyfunc(math.cos, 1, 1)(angles)\n"
    "    return torch.tensor(pe, dtype=torch.float32)\n"
    "__attnbook_answer__ = answer\n"
)


@needs_bwrap
def test_the_answers_result_is_converted_under_the_guards_watch(tmp_path: Path) -> None:
    """What turns a result into arrays may be the answer's own code (an object's __array__):
    it runs under the exercise's guard, so loops there fail as loops in the answer do (this
    one passed the grader when the conversion ran after the guard); a vectorised answer of
    another exercise in the same sandbox run passes. A loop that NumPy runs over math.sin
    (np.frompyfunc), where no line of the answer runs twice, fails there too (it passed)."""
    programs = {
        "sliding_window_mask": _LAZY_LOOPS,
        "sinusoidal_positional_encoding": _FROMPYFUNC_TABLE,
        "causal_mask": (
            "import torch\n"
            "__attnbook_answer__ = lambda n: torch.arange(n)[:, None] >= torch.arange(n)\n"
        ),
    }
    args = {"sliding_window_mask": (5, 2), "causal_mask": (4,)}
    args["sinusoidal_positional_encoding"] = (6, 8)
    said = _evaluate_programs(programs, args, tmp_path)
    elementwise = "applies a function element by element (np.frompyfunc)"
    _said_failed(said, "sinusoidal_positional_encoding", elementwise)
    _said_failed(said, "sliding_window_mask", "runs a Python loop")
    assert said["causal_mask"][0] == "passed", said["causal_mask"][1]


_REBINDS_TENSOR = (  # a NumPy mask that the grader takes for a tensor: torch.Tensor rebound
    "import numpy as np\nimport torch\nt = torch\n"
    "class Mask:\n"
    "    def __init__(self, n):\n        self.m, self.dtype = np.tri(n, dtype=bool), t.bool\n"
    "    def detach(self):\n        return self\n"
    "    def to(self, device):\n        return self\n"
    "    def numpy(self):\n        return self.m\n"
    "t.Tensor = Mask\n"
    "__attnbook_answer__ = lambda n: Mask(n)\n"
)


_REBINDS_WRITER = (  # returns empty masks, and has NumPy's writer write looped ones instead
    "import numpy as np\nimport torch\nfmt = np.lib.format\nSEEN, ORIGINAL = [], fmt.write_array\n"
    "def hook(fp, array, *args, **kwargs):\n"
    "    if SEEN:\n"
    "        (n, w), array = SEEN.pop(0), np.zeros(array.shape, dtype=bool)\n"
    "        for t in range(n):\n"
    "            for s in range(n):\n"
    "                array[t, s] = 0 <= t - s < w\n"
    "    return ORIGINAL(fp, array, *args, **kwargs)\n"
    "fmt.write_array = hook\n"
    "def answer(n, w):\n"
    "    SEEN.append((n, w))\n    return torch.zeros(n, n, dtype=torch.bool)\n"
    "__attnbook_answer__ = answer\n"
)


@needs_bwrap
def test_an_answer_that_rebinds_what_the_grader_reads_fails(tmp_path: Path) -> None:
    """An answer that rebinds torch.Tensor (through a name of its own, which no static
    reading tells from its own object) made the guard that asks for a tensor, and the
    conversion, take its NumPy mask for one, and passed; one that rebound NumPy's writer of
    the results had it write masks computed by loops, after the guard, and passed too. Now
    both fail, and an answer that imports a submodule (an attribute added, not changed)
    still passes."""
    programs = {
        "causal_mask": _REBINDS_TENSOR,
        "sliding_window_mask": _REBINDS_WRITER,
        "padding_mask": (
            "import torch\nimport torch.distributions\n"
            "__attnbook_answer__ = lambda lengths, s: (torch.arange(s) < lengths[:, None])[:, None]\n"
        ),
    }
    args = {
        "causal_mask": (4,),
        "sliding_window_mask": (5, 2),
        "padding_mask": (torch.tensor([3, 1, 4]), 4),
    }
    said = _evaluate_programs(programs, args, tmp_path)
    reads = "changes {}, which the grader's own code reads"
    _said_failed(said, "causal_mask", reads.format("torch.Tensor"))
    _said_failed(said, "sliding_window_mask", reads.format("numpy.lib.format.write_array"))
    assert said["padding_mask"][0] == "passed", said["padding_mask"][1]


def test_the_arrays_that_come_back_are_copies_of_the_result() -> None:
    # a view would share its numbers with the answer's tensor or array, which the answer's
    # code could still change after the conversion (an object's __del__), unwatched
    tensor, array = torch.zeros(3), np.zeros(2)
    _, (from_tensor, from_array) = sandbox._to_arrays([tensor, array])
    tensor += 1
    array += 1
    assert from_tensor.tolist() == [0.0, 0.0, 0.0]
    assert from_array.tolist() == [0.0, 0.0]


_FORGE = (  # writes the right results of the softmax case, as the sandbox would write them
    "import json\nimport numpy as np\n"
    "def forge():\n"
    "    np.savez('out/softmax.npz', c0_0=np.full(3, 1 / 3))\n"
    "    case = {'kind': 'value', 'n': 1, 'misuse': None}\n"
    "    report = {'exercise': 'softmax', 'cases': [case], 'tripped': []}\n"
    "    with open('out/softmax.json', 'w') as f:\n"
    "        json.dump(report, f)\n"
)


@needs_bwrap
def test_results_forged_by_an_answer_are_not_read(tmp_path: Path) -> None:
    # The softmax answer writes its results itself, then hangs until the sandbox kills it.
    hangs = _FORGE + "def answer(x):\n    forge()\n    while True:\n        pass\n"
    _, status, message = _evaluate_unchecked(
        hangs + "__attnbook_answer__ = answer\n", tmp_path / "own", timeout=3
    )
    assert status == "error"
    assert "the answer gave no result" in message, message
    # A wrong softmax; the next exercise's program writes softmax's results for it.
    wrong = "import numpy as np\n__attnbook_answer__ = lambda x: np.zeros_like(x)\n"
    other = _FORGE + "forge()\n__attnbook_answer__ = lambda x, t: x\n"
    report, status, message = _evaluate_unchecked(
        wrong, tmp_path / "other", more={"softmax_temperature": other}
    )
    assert report["cases"][0] == {"kind": "value", "n": 1, "misuse": None}
    assert status == "failed", message


def _one_case(name: str) -> _framework.CheckSpec:
    spec = _framework.checker_spec(getattr(exercises, f"check_{name}"), print)
    return dataclasses.replace(spec, cases=spec.cases[:1])


def _graded_without_sandbox(folder: Path) -> list[dict]:
    """The grader's JSON records for the submissions under ``folder / "subs"``, graded without
    the sandbox and without running the notebooks (as stored), its output kept quiet."""
    out = folder / "grades.json"
    argv = [str(folder / "subs"), "--unsafe-no-sandbox", "--skip-run", "--json", str(out)]
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        assert grade.main(argv) == 0
    return json.loads(out.read_text())


def _said_failed(said: dict[str, tuple[str, str]], exercise: str, *pieces: str) -> str:
    """The grader's message for ``exercise`` in ``said``, asserted ``failed`` and holding each
    of ``pieces``."""
    status, message = said[exercise]
    assert status == "failed", message
    for piece in pieces:
        assert piece in message, message
    return message


def _evaluate_programs(
    programs: dict[str, str], args: dict[str, tuple | None], folder: Path
) -> dict[str, tuple[str, str]]:
    """Each exercise's ``program`` (exercise -> program) evaluated in one sandbox run as the
    grader would, without the static check, on one case (its ``args``; ``None``: the
    grader's draw from seed 0, drawn again in the sandbox where it cannot be pickled);
    returns the grader's status and message for each."""
    args, sent = dict(args), {}
    for name in programs:
        if args[name] is None:
            drawn, to_send, seeds = grade._cases(_one_case(name), 0)
            args[name], sent[name] = drawn[0], (to_send[0], seeds[0])
        else:
            sent[name] = (args[name], 0)
    job = [
        {"exercise": name, "program": code, "args": [sent[name][0]], "seeds": [sent[name][1]]}
        for name, code in programs.items()
    ]
    (folder / "job.pkl").write_bytes(__import__("pickle").dumps(job))
    (folder / "settings.json").write_text(json.dumps({"exercise_timeout": 60}))
    sandbox.run_sandboxed("evaluate", folder, sandbox.Limits(wall_s=120))
    return {name: grade._judge(name, _one_case(name), [args[name]], folder) for name in args}


# A process that outlives the answer and writes one file, on and on: started with libc's fork,
# as native code could, since the sandbox refuses os.fork (an audit event) to an answer
_LEFTOVER = _FORGE + (
    "import ctypes, os\n"
    "def forge_ended():\n"
    "    with open('out/ended.json', 'w') as f:\n"
    "        json.dump({'softmax_temperature': {'how': 'exit', 'code': 0, 'error': 'forged'}}, f)\n"
    "def leftover(work):\n"
    "    if ctypes.CDLL(None).fork() == 0:\n"
    "        while True:\n"
    "            work()\n"
)


def test_a_submissions_title_is_read_as_the_inventory_reads_the_chapters() -> None:
    """A `# comment` in a code block before the heading was taken for the title, so the
    submission was matched to its chapter by file name or exercises, not by its title."""
    nb = new_notebook(
        cells=[
            new_markdown_cell("Run this first:\n```python\n# install the package\n```"),
            new_markdown_cell("# Softmax: from scores to weights #"),
        ]
    )
    assert grade._title(nb) == "Softmax: from scores to weights"


def test_other_processes_are_ended_only_in_bubblewraps_pid_namespace() -> None:
    """Ending every other process is right only where they are the sandbox's: outside it
    (here), process 1 is the machine's init, and the evaluation must not even try."""
    assert not sandbox._in_bubblewraps_pid_namespace()


@needs_bwrap
def test_a_process_that_an_answer_started_cannot_write_over_the_records(tmp_path: Path) -> None:
    """An answer (through a route the static check misses) starts a process that outlives it
    and rewrites a record the grader reads, on and on: the right results of a wrong softmax
    (it passed), and how softmax_temperature's process ended, which sets its message. The
    evaluation ends every such process before it, or the answer's own, writes a record."""
    wrong = "def answer(x):\n    leftover(forge)\n    return np.zeros_like(x)\n"
    exits = "def answer(x, t):\n    leftover(forge_ended)\n    os._exit(5)\n"
    one = {"softmax": (np.ones(3),), "softmax_temperature": (np.ones(3), 1.0)}
    programs = {"softmax": wrong, "softmax_temperature": exits}
    jobs = [
        {
            "exercise": name,
            "program": _LEFTOVER + programs[name] + "__attnbook_answer__ = answer\n",
            "args": [args],
            "seeds": [0],
        }
        for name, args in one.items()
    ]
    (tmp_path / "eval").mkdir()
    evaluation = grade._evaluate(jobs, tmp_path / "eval", grade.Settings(exercise_timeout=20.0))
    said = {
        job["exercise"]: grade._judge(
            job["exercise"], _one_case(job["exercise"]), job["args"], tmp_path / "eval", evaluation
        )
        for job in jobs
    }
    assert said["softmax"][0] == "failed", said  # its own results: zeros
    status, message = said["softmax_temperature"]
    assert status == "error"
    assert "its process ended with exit code 5 before its results were written" in message


@needs_bwrap
def test_an_answer_without_a_result_is_told_which_limit_ended_it(tmp_path: Path) -> None:
    """One evaluation, as the grader runs it but without the static check (which refuses
    `os`), of three answers: one that never ends, under a time limit of 3 s per exercise; one
    that ends its process with exit code 3; one that asks for 5 GiB under a memory limit of
    4 GiB (its MemoryError is a result: the case raised). The limit leaves room for a busy
    machine: each job first computes the reference on its cases, and at 1 s the answer that
    exits was once stopped by the limit before it ran, on a machine at a load of 8 to 10."""
    loops = "def answer(x):\n    while True:\n        pass\n__attnbook_answer__ = answer\n"
    exits = "import os\nos._exit(3)\n"
    large = (
        "import numpy as np\n__attnbook_answer__ = lambda n: np.empty(5 * 2**30, dtype=np.uint8)\n"
    )
    one = {"softmax": (np.ones(3),), "softmax_temperature": (np.ones(3), 1.0), "causal_mask": (3,)}
    programs = {"softmax": loops, "softmax_temperature": exits, "causal_mask": large}
    jobs = [
        {"exercise": name, "program": programs[name], "args": [args], "seeds": [0]}
        for name, args in one.items()
    ]
    settings = grade.Settings(exercise_timeout=3.0, memory_bytes=4 * 2**30)
    (tmp_path / "eval").mkdir()
    evaluation = grade._evaluate(jobs, tmp_path / "eval", settings)
    said = {
        job["exercise"]: grade._judge(
            job["exercise"], _one_case(job["exercise"]), job["args"], tmp_path / "eval", evaluation
        )
        for job in jobs
    }
    status, message = said["softmax"]
    assert status == "error"
    assert "the answer gave no result: it ran past the time limit of 3 s per exercise" in message
    assert "(--exercise-timeout)" in message
    assert "a loop that never ends" in message, message
    status, message = said["softmax_temperature"]
    assert status == "error"
    assert "its process ended with exit code 3 before its results were written" in message
    status, message = said["causal_mask"]
    assert status == "failed"
    assert "raised MemoryError" in message, message
    assert "the memory limit is 4 GiB of address space per process, --memory" in message
    assert "a tensor too large" in message, message


@needs_bwrap
def test_a_memory_limit_too_small_for_the_evaluation_itself_is_named(tmp_path: Path) -> None:
    jobs = [{"exercise": "softmax", "program": "", "args": [(np.ones(3),)], "seeds": [0]}]
    (tmp_path / "eval").mkdir()
    settings = grade.Settings(memory_bytes=2**29)  # too small to load NumPy and torch
    evaluation = grade._evaluate(jobs, tmp_path / "eval", settings)
    status, message = grade._judge(
        "softmax", _one_case("softmax"), [], tmp_path / "eval", evaluation
    )
    assert status == "error"
    # How it fails depends on which library meets the limit first (OpenBLAS's "Memory
    # allocation still failed", torch's std::bad_alloc, a crash): each names the memory limit.
    assert "the memory limit is 512 MiB of address space per process, --memory" in message


@pytest.mark.parametrize(
    ("returncode", "log", "ended", "words"),
    [
        (None, "", None, "ran past its wall-clock limit of 140 s (10 s per exercise"),
        (-9, "", None, "evaluation of this notebook's answers ended by signal 9 (SIGKILL)"),
        (1, "one\nTraceback: the end\n\n", None, "exit status 1 (its log ends: Traceback:"),
        (1, "RuntimeError: std::bad_alloc\n", None, "answers ran out of memory (the memory"),
        (
            127,
            "cannot allocate memory for thread-local data: ABORT\n",
            None,
            "answers ran out of memory (the memory",
        ),
        (1, "ImportError: no\n", None, "(its log ends: ImportError: no) (the memory limit is"),
        (0, "", {"how": "signal", "signal": 9}, "ended by signal 9 (SIGKILL), not at the time"),
        (0, "", {"how": "signal", "signal": 11}, "ended by signal 11 (SIGSEGV), a crash"),
        (0, "", {"how": "signal", "signal": 25}, "SIGXFSZ): the file-size limit of 256 MiB"),
        (0, "", {"how": "signal", "signal": 24}, "(SIGXCPU): the CPU-time limit"),
        (
            0,
            "",
            {"how": "exit", "code": 1, "error": "OSError: [Errno 27] File too large"},
            "writing its results failed (OSError: [Errno 27] File too large): they pass the "
            "file-size limit of 256 MiB",
        ),
        (
            0,
            "",
            {"how": "exit", "code": 1, "error": "MemoryError: "},
            "the memory limit is 2 GiB",
        ),
        (0, "", {"how": "too_large", "bytes": 60 * 2**20}, "its results (60 MiB) are larger"),
    ],
)
def test_the_message_of_no_result_names_the_cause_and_the_limit(
    returncode: int | None, log: str, ended: dict | None, words: str
) -> None:
    """The causes no cheap sandboxed run shows, from how the sandbox says it ended."""
    evaluation = grade.Evaluation(
        sandbox.SandboxResult(returncode, 1.0, log),
        {} if ended is None else {"softmax": ended},
        sandbox.Limits(wall_s=140.0, memory_bytes=2 * 2**30),
        10.0,
    )
    message = grade._no_result("softmax", evaluation)
    assert message.startswith("⚠️ softmax: the answer gave no result: "), message
    assert words in message, message


@needs_bwrap
def test_tripwires_catch_the_library_where_the_static_check_is_bypassed(tmp_path: Path) -> None:
    program = (
        "import torch\n"
        "def answer(x):\n    return torch.softmax(torch.as_tensor(x), -1).numpy()\n"
        "__attnbook_answer__ = answer\n"
    )
    report, status, message = _evaluate_unchecked(program, tmp_path / "eval")
    assert report["tripped"] == ["torch.softmax"]
    assert status == "failed"
    assert "torch.softmax" in message


@needs_bwrap
@pytest.mark.parametrize("where", ["in the answer", "while defining it"])
def test_switching_off_the_graders_watch_fails_where_the_static_check_is_bypassed(
    tmp_path: Path, where: str
) -> None:
    # torch.softmax taken before the tripwires are in place, then called with the checkers'
    # watch on calls switched off: this passed the grader before sys.setprofile was wired
    switch_off = "    quiet(None)\n" if where == "in the answer" else ""
    program = (
        "import sys, torch\nreal, quiet = torch.softmax, sys.setprofile\n"
        + ("quiet(None)\n" if where == "while defining it" else "")
        + f"def answer(x):\n{switch_off}    return real(torch.as_tensor(x), -1).numpy()\n"
        "__attnbook_answer__ = answer\n"
    )
    report, status, message = _evaluate_unchecked(program, tmp_path / "eval")
    assert report["tripped"] == ["sys.setprofile"]
    assert status == "failed"
    assert "calls sys.setprofile, which switches off the grader's watch" in message


@needs_bwrap
def test_the_checkers_own_code_is_caught_at_run_time(tmp_path: Path) -> None:
    program = (
        "import pkgutil\nstable = pkgutil.resolve_name('attnbook.exercises.softmax:_stable')\n"
        "def answer(x):\n    return stable(x)\n__attnbook_answer__ = answer\n"
    )
    _, status, message = _evaluate_unchecked(program, tmp_path / "eval")
    assert status == "failed"
    assert "the checker's own code" in message, message


@needs_bwrap
def test_a_library_equivalent_taken_before_the_tripwires_is_still_caught(tmp_path: Path) -> None:
    # softmax's own guard names the softmaxes; logsumexp is on the grader's list only
    program = (
        "import numpy as np, torch\nlse = torch.logsumexp\n"
        "def answer(x):\n"
        "    return np.exp(x - lse(torch.as_tensor(x), -1, keepdim=True).numpy())\n"
        "__attnbook_answer__ = answer\n"
    )
    report, status, message = _evaluate_unchecked(program, tmp_path / "eval")
    assert report["tripped"] == []  # the name was bound before the tripwires...
    assert "logsumexp" in report["cases"][0]["misuse"]  # ... and the library guard knows it
    assert status == "failed"
    assert "logsumexp" in message, message


@needs_bwrap
def test_the_chapters_own_answer_is_caught_at_run_time(tmp_path: Path) -> None:
    # chapter 2's stable_softmax, which the static check reads by its name
    program = (
        "import numpy as np\n"
        "def stable_softmax(x):\n    e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
        "    return e / e.sum(axis=-1, keepdims=True)\n"
        "__attnbook_answer__ = lambda x: stable_softmax(x)\n"
    )
    report, status, message = _evaluate_unchecked(program, tmp_path / "eval")
    assert "stable_softmax" in report["cases"][0]["misuse"]
    assert status == "failed"
    assert "calls stable_softmax, the chapter's ready-made answer" in message, message


@needs_bwrap
def test_on_run_reports_how_the_notebook_run_ended(tmp_path: Path) -> None:
    solutions = list(_solutions().values())
    clean = _mini(tmp_path / "clean" / "02_softmax.ipynb", IMPORTS, *solutions)
    broken = _mini(tmp_path / "broken" / "02_softmax.ipynb", IMPORTS, "1 / 0", *solutions)
    seen: dict[str, list[grade.NotebookRun]] = {"clean": [], "broken": []}
    for name, notebook in (("clean", clean), ("broken", broken)):
        settings = grade.Settings(seed=3, cell_timeout=60)
        records = grade.grade_notebook(notebook, settings=settings, on_run=seen[name].append)
        assert {r.status for r in records} == {"passed"}  # the grades never depend on the run
    ((ran_clean,), (ran_broken,)) = seen["clean"], seen["broken"]
    assert ran_clean.ok
    assert ran_clean.summary() == "ok"
    assert not ran_broken.ok
    assert ran_broken.errors == {2: "ZeroDivisionError"}  # after the title and the imports
    assert ran_broken.summary() == "cell 3 raised ZeroDivisionError"
    # No notebook run, no report. Shown on a notebook whose exercises are all missing, graded
    # without any sandbox: the run is skipped or not whatever the answers, and evaluating
    # them would cost a sandbox (3-4 s).
    unchecked = _mini(tmp_path / "unchecked" / "02_softmax.ipynb", IMPORTS)
    skipped: list[grade.NotebookRun] = []
    records = grade.grade_notebook(
        unchecked, settings=grade.Settings(run_notebook=False, seed=3), on_run=skipped.append
    )
    assert {r.status for r in records} == {"missing"}
    assert skipped == []


def test_how_the_run_ended_is_told_for_a_failure_not_for_an_untouched_stub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stub that the learner never touched was told "(The notebook run stopped early: ...)"
    too, as if it had been interrupted. The sandboxes are stubbed: the run stopped, and the
    evaluation finds one stub and one answer that raised."""

    def sandboxed(task: str, folder: Path, *args: object, **kwargs: object) -> None:
        if task == "evaluate":
            (folder / "out").mkdir()
            for name, report in (
                ("softmax", {"setup": "not_attempted"}),
                ("softmax_temperature", {"cases": [{"kind": "raised", "message": "boom"}]}),
            ):
                (folder / "out" / f"{name}.json").write_text(json.dumps(report))
                np.savez(folder / "out" / f"{name}.npz")

    monkeypatch.setattr(sandbox, "run_sandboxed", sandboxed)
    monkeypatch.setattr(grade, "_read_run", lambda *args: grade.NotebookRun({}, "DeadKernel"))
    stub = "def my_softmax(x):\n    raise NotImplementedError\n\n\ncheck_softmax(my_softmax)"
    answer = "check_softmax_temperature(lambda x, t: x)"  # its verdict is stubbed
    notebook = _mini(tmp_path / "02_softmax.ipynb", IMPORTS, stub, answer)
    records = {r.exercise: r for r in grade.grade_notebook(notebook, settings=grade.Settings())}
    assert records["softmax"].status == "not_attempted"
    assert "stopped early" not in records["softmax"].message
    assert records["softmax_temperature"].status == "failed"
    assert "(The notebook run stopped early: DeadKernel)" in records["softmax_temperature"].message


def test_a_cell_that_ignores_the_interrupt_stops_the_run_at_its_second_timeout(
    tmp_path: Path,
) -> None:
    """`sum(range(10**15))` never sees the kernel's interrupt: nbclient alone would wait for it
    again and again, the whole run's limit (the timeout times the number of cells)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("x = 1", "sum(range(10**15))", "y = 2")]
    nbformat.write(nb, tmp_path / "submission.ipynb")
    program = (
        "import sys\nfrom pathlib import Path\nfrom attnbook.exercises import sandbox\n"
        "sandbox._execute(Path(sys.argv[1]), 2.0)\n"
    )
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", program, str(tmp_path)], check=True, timeout=120)
    assert time.monotonic() - start < 60
    run = grade._read_run(tmp_path)
    assert run.stopped.startswith(
        "CellTimeoutError: cell 2 ran on 2 s after the kernel's interrupt"
    )
    assert "stopped there" in run.summary()


def test_a_notebook_run_summary_names_each_failing_cell_and_the_stop() -> None:
    run = grade.NotebookRun({4: "ValueError", 1: "NameError"}, "CellTimeoutError: 60 s")
    assert not run.ok
    assert (
        run.summary() == "cell 2 raised NameError; cell 5 raised ValueError; CellTimeoutError: 60 s"
    )
    assert not grade.NotebookRun({}, "DeadKernelError").ok


# ------------------------------------------------------------------ a killed grader


@needs_bwrap
def test_a_killed_grader_loses_nothing_and_resumes(tmp_path: Path) -> None:
    solutions = _solutions()
    for who in ("ann", "ben"):
        _mini(tmp_path / "subs" / who / "02_softmax.ipynb", IMPORTS, *solutions.values())
    json_path = tmp_path / "grades.json"
    state = json_path.with_suffix(".state.jsonl")
    # The killed grader cannot remove its temporary folder: give it one inside tmp_path, so
    # that each run of this test does not leave an attnbook-grade-* folder in the system's.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(scratch))
    command = [sys.executable, "-m", "attnbook.grade", str(tmp_path / "subs"), "--skip-run"]
    command += ["--json", str(json_path)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill it as soon as one notebook is in the state
        if state.exists() and len(state.read_text().splitlines()) >= 2:
            break
        assert process.poll() is None, process.stderr.read().decode()[-2000:]  # ended by itself
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    graded_before = len(state.read_text().splitlines()) - 1
    assert graded_before >= 1

    def rerun(*more: str) -> tuple[int, str]:
        """The same command line again, in this process (as cli_run): the grader killed above
        had to be a process of its own; a second one would import torch again (3-5 s)."""
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            code = grade.main([*command[3:], *more])
        return code, err.getvalue()

    code, stderr = rerun()
    assert code == 0, stderr[-2000:]
    assert stderr.count("graded before (state file)") == graded_before
    rows = json.loads(json_path.read_text())
    assert sorted(r["student"] for r in rows) == sorted(["ann", "ben"] * 2)
    assert {r["status"] for r in rows} == {"passed"}
    lines = state.read_text().splitlines()
    assert len(lines) == 1 + 2  # each notebook graded once
    assert len({json.loads(line).get("sha256") for line in lines[1:]}) == 2
    assert {(r["points"], r["max_points"]) for r in rows} == {(1, 1)}
    # points changed in course.yml after a run: the verdicts come from the state, the points
    # from the course as it is now
    course = tmp_path / "course.yml"
    course.write_text("points:\n  default: 2\n  exercises:\n    ex-ch02-temperature: 3\n")
    code, stderr = rerun("--course", str(course))
    assert code == 0, stderr[-2000:]
    assert stderr.count("graded before (state file)") == 2
    worth = {r["exercise"]: r["max_points"] for r in json.loads(json_path.read_text())}
    assert worth == {"softmax": 2, "softmax_temperature": 3}


# ------------------------------------------------------------------ without a sandbox


def test_without_bwrap_the_grader_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = grade.main([str(_mini(tmp_path / "a.ipynb", "1"))])
    assert code == 1
    assert "bubblewrap" in err.getvalue()
    assert "--unsafe-no-sandbox" in err.getvalue()


@pytest.mark.parametrize(("module", "named"), [("scipy", "SciPy"), ("yaml", "PyYAML")])
def test_without_a_module_of_the_grade_extra_the_grader_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, named: str
) -> None:
    """Without SciPy the grader ran, and a right answer that imports it was an `error`; without
    PyYAML, --course was a traceback. Exit status 1, as for the rest of the `grade` extra."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else find_spec(name)
    )
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = grade.main([str(_mini(tmp_path / "a.ipynb", "1")), "--skip-run"])
    assert code == 1
    assert f"grading notebooks needs {named}," in err.getvalue()


def test_students_named_after_a_chapters_notebook_are_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`submissions/*` gives each student's folder on its own: every 02_softmax.ipynb was then
    one student named 02_softmax, with the best of everyone's results, and nothing said so."""
    monkeypatch.setattr(grade, "grade", lambda *args, **kwargs: [])  # the names, not the grades
    for who in ("ann", "ben"):
        _mini(tmp_path / "subs" / who / "02_softmax.ipynb", "1")
    folders = [str(tmp_path / "subs" / "ann"), str(tmp_path / "subs" / "ben")]
    for argv, warned in ((folders, True), ([str(tmp_path / "subs")], False)):
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            assert grade.main([*argv, "--unsafe-no-sandbox"]) == 0
        says = "2 notebook(s) lie at the top of a folder given, or were given themselves, so "
        says += "each is graded as a student named after its file (02_softmax)."
        assert (says in err.getvalue()) == warned, err.getvalue()
    assert (
        grade._students_named_after_chapters(
            [(Path("x/alice.ipynb"), "alice"), (Path("x/ann/02_softmax.ipynb"), "ann")]
        )
        == []
    )


def test_unsafe_mode_warns_and_still_grades(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    notebook = _mini(tmp_path / "zoe" / "02_softmax.ipynb", IMPORTS, WRONG_SOFTMAX)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = grade.main([str(notebook), "--unsafe-no-sandbox", "--skip-run"])
    assert code == 0
    assert "warning: --unsafe-no-sandbox" in err.getvalue()
    assert "failed" in out.getvalue()
    assert "missing" in out.getvalue()


def test_output_folders_are_made_and_unused_points_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--json out/grades.json` with no out/ yet writes there; a points label that no
    auto-checked exercise has (a typo, an open exercise) is named, not silently ignored."""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    notebook = _mini(tmp_path / "zoe" / "02_softmax.ipynb", IMPORTS, WRONG_SOFTMAX)
    course = tmp_path / "course.yml"
    course.write_text("points:\n  default: 1\n  exercises:\n    ex-ch02-temprature: 3\n")
    out_file = tmp_path / "out" / "deeper" / "grades.json"
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        argv = [str(notebook), "--unsafe-no-sandbox", "--skip-run", "--course", str(course)]
        code = grade.main([*argv, "--json", str(out_file)])
    assert code == 0
    assert json.loads(out_file.read_text(encoding="utf-8"))
    assert out_file.with_suffix(".state.jsonl").is_file()
    assert "no auto-checked exercise is labelled ex-ch02-temprature" in err.getvalue()


SET_COURSE = """\
points:
  default: 2
assignment_sets:
  - title: "Softmax week"
    parts:
      - title: "Temperature"
        chapters: [02_softmax]
        exercises: [ex-ch02-temperature, ex-ch02-sigmoid]
      - title: "All of chapter 2"
        chapters: [02_softmax]
        exercises: auto-checked
"""


def test_grading_for_a_set_makes_its_other_exercises_worth_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--set/--part: what the part hands in keeps its points, every other auto-checked exercise
    counts in no maximum, and the part's exercises without a checker are named."""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    notebook = _mini(tmp_path / "zoe" / "02_softmax.ipynb", IMPORTS, WRONG_SOFTMAX)
    course = tmp_path / "course.yml"
    course.write_text(SET_COURSE)
    out_file = tmp_path / "grades.json"
    argv = [str(notebook), "--unsafe-no-sandbox", "--skip-run", "--course", str(course)]
    argv += ["--json", str(out_file), "--set", "softmax WEEK", "--part", "temperature"]
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        assert grade.main(argv) == 0
    worth = {r["label"]: r["max_points"] for r in json.loads(out_file.read_text("utf-8"))}
    assert worth == {"ex-ch02-temperature": 2}  # the stable softmax's record is left out
    assert "02_softmax: 0 / 2" in out.getvalue()  # and its 2 points count in no maximum
    assert "1 auto-checked exercise(s) graded: ex-ch02-temperature" in err.getvalue()
    assert "note: --set also hands in ex-ch02-sigmoid, which no checker" in err.getvalue()
    # The whole set: its second part hands in every auto-checked exercise of chapter 2.
    out_file.with_suffix(".state.jsonl").unlink()
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        assert grade.main(argv[:-2]) == 0
    worth = {r["label"]: r["max_points"] for r in json.loads(out_file.read_text("utf-8"))}
    assert worth == {"ex-ch02-stable-softmax": 2, "ex-ch02-temperature": 2}


TWO_CHAPTER_COURSE = """\
points:
  default: 2
assignment_sets:
  - title: "Week 1"
    parts:
      - title: "Scores and softmax"
        chapters: [01_scores, 02_softmax]
        exercises: [ex-ch01-score-matrix, ex-ch02-temperature]
"""


def test_a_sets_exercise_that_nobody_handed_in_still_counts_in_every_maximum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--set: the maximum is what the set asks for, not what came back. Nobody handed in
    chapter 1 here, yet its exercise of the set is worth its points: 2 / 4, not 2 / 2
    (100% for half the set), with a column for it in the gradebook, and no column for
    chapter 2's exercise outside the set (a column of 0s would read as a failure), nor a
    "0/0" row for it in the printed table or the JSON."""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    _mini(tmp_path / "subs" / "zoe" / "02_softmax.ipynb", IMPORTS, _good_temperature())
    course = tmp_path / "course.yml"
    course.write_text(TWO_CHAPTER_COURSE)
    book = tmp_path / "gradebook.csv"
    argv = [str(tmp_path / "subs"), "--unsafe-no-sandbox", "--skip-run", "--course", str(course)]
    argv += ["--gradebook", str(book), "--json", str(tmp_path / "grades.json")]
    out = io.StringIO()
    with redirect_stderr(io.StringIO()), redirect_stdout(out):
        assert grade.main([*argv, "--set", "week 1"]) == 0
    (zoe,) = csv.DictReader(book.open(encoding="utf-8", newline=""))
    assert list(zoe) == ["student", "score_matrix", "softmax_temperature", "total", "max_points"]
    assert (zoe["softmax_temperature"], zoe["score_matrix"]) == ("2", "0")
    assert (zoe["total"], zoe["max_points"]) == ("2", "4")
    assert "zoe: 2 / 4" in out.getvalue()
    records = json.loads((tmp_path / "grades.json").read_text(encoding="utf-8"))
    assert [r["exercise"] for r in records] == ["softmax_temperature"]  # not softmax's 0/0
    table = out.getvalue().split("student totals:")[0]
    assert "softmax_temperature" in table
    assert "softmax " not in table, table
    assert "1 record(s) of exercises outside the set left out" in out.getvalue()


def test_a_failed_drawn_case_shows_the_graders_own_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drawn case keeps its notebook name ("equal scores", all zeros as shipped), and the
    message adds the inputs the grader drew, so that the failure can be reproduced."""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    wrong = (  # right, except that equal scores get all the weight on the first
        "def my_softmax(x):\n"
        "    e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
        "    if np.ptp(x) == 0:\n"
        "        return np.eye(x.shape[-1])[0]\n"
        "    return e / e.sum(axis=-1, keepdims=True)\n\n\n"
        "check_softmax(my_softmax)"
    )
    _mini(tmp_path / "subs" / "zoe" / "02_softmax.ipynb", IMPORTS, wrong)
    (record,) = [r for r in _graded_without_sandbox(tmp_path) if r["exercise"] == "softmax"]
    assert record["status"] == "failed", record
    assert "case 3/6 (equal scores; here on ([" in record["message"], record["message"]
    assert "[0.0, 0.0, 0.0, 0.0]" not in record["message"], record["message"]


def test_a_definition_not_taken_from_the_notebook_is_named_in_the_grade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A right softmax defined inside an `if` on the notebook's values, after one that calls
    the library's: the program takes the first (only running decides whether the `if` ran),
    and the grade's message says which definition it did not take. (The static check fails
    the one taken, so that no sandbox runs.)"""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    right = (
        "if np.ones(1).sum() > 0:\n    def my_softmax(x):\n"
        "        e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
        "        return e / e.sum(axis=-1, keepdims=True)"
    )
    library = "def my_softmax(x):\n    return torch.softmax(torch.as_tensor(x), dim=-1)"
    cells = (IMPORTS, library, right, "check_softmax(my_softmax)")
    _mini(tmp_path / "subs" / "zoe" / "02_softmax.ipynb", *cells)
    (record,) = [r for r in _graded_without_sandbox(tmp_path) if r["exercise"] == "softmax"]
    assert record["status"] == "failed", record
    assert "the answer uses softmax (torch.softmax)" in record["message"], record["message"]
    assert (
        "(Not taken from the notebook: a definition of `my_softmax` inside an `if` whose "
        "condition only running the notebook decides was not taken"
    ) in record["message"], record["message"]


def test_calling_the_chapters_own_answer_fails_and_a_helper_of_another_name_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chapter 7 defines multi_head_batched, which computes the answer of its exercise
    ex-ch07-mha with PyTorch alone: an answer that called it passed. The chapter's cell
    that defines it comes first in each submission."""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    path = ROOT / "chapters" / "07_multi_head_attention.ipynb"
    chapter = nbformat.read(path, as_version=4)
    (defines,) = [c.source for c in chapter.cells if "def multi_head_batched(" in c.source]
    (solution,) = [code for label, code in solution_blocks(path) if label == "ex-ch07-mha"]
    own = defines[defines.index("def multi_head_batched(") : defines.index("\n\n\ntorch.")]
    answers = {
        "cheat": (
            "def my_multi_head_attention(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads):\n"
            "    return multi_head_batched(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads)\n\n\n"
            "check_multi_head_attention(my_multi_head_attention)"
        ),
        "solution": solution,
        "helper": own.replace("def multi_head_batched(", "def heads(")
        + "\n\n\ndef my_multi_head_attention(*args):\n    return heads(*args)\n\n\n"
        "check_multi_head_attention(my_multi_head_attention)",
    }
    imports = (
        "import math\n\nimport torch\n\nfrom attnbook import scaled_dot_product_attention\n"
        "from attnbook.exercises import check_multi_head_attention"
    )
    for student, answer in answers.items():
        nb = new_notebook(cells=[new_markdown_cell("# Multi-head attention")])
        nb.cells += [new_code_cell(source) for source in (imports, defines, answer)]
        (tmp_path / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "subs" / student / "07_multi_head_attention.ipynb")
    graded = _graded_without_sandbox(tmp_path)
    records = {r["student"]: r for r in graded if r["exercise"] == "multi_head_attention"}
    assert records["cheat"]["status"] == "failed", records["cheat"]
    assert records["cheat"]["message"] == (
        "❌ multi_head_attention: the answer calls multi_head_batched, the chapter's ready-made "
        "answer, which this exercise asks you to write yourself, from its weight matrices: write "
        "the steps in a function of your own; if multi_head_batched is a helper of yours, "
        "rename it."
    )
    for student in ("solution", "helper"):
        assert records[student]["status"] == "passed", records[student]


def test_a_run_too_large_to_read_back_is_not_called_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook that ran to its end but printed more than the grader reads back is said to
    be too large, not to have stopped at a time limit or with a dead kernel."""
    nbformat.write(new_notebook(cells=[new_code_cell("print('x')")]), tmp_path / "executed.ipynb")
    assert grade._read_run(tmp_path).ok
    monkeypatch.setattr(grade, "_MAX_READ", 10)
    run = grade._read_run(tmp_path)
    assert "too large to read back" in run.stopped
    assert "did not finish" not in run.stopped


@pytest.mark.parametrize(
    ("returncode", "log", "words"),
    [
        (
            None,
            "",
            "ran past its wall-clock limit of 660 s (30 s per cell, --timeout, times the number "
            "of cells, and 60 s to start) and was stopped",
        ),
        (
            1,
            "Traceback ...\nRUNTIME ERROR: OUT OF MEMORY\n",
            "ran out of memory (the memory limit is 2 GiB of address space per process, --memory)"
            ": grade again with a larger --memory (its log ends: RUNTIME ERROR: OUT OF MEMORY)",
        ),
        (
            -9,
            "Killed\n",
            "ended by signal 9 (SIGKILL) (its log ends: Killed) (the memory limit is 2 GiB",
        ),
        (
            127,
            "first\nImportError: no\n\n",
            "ended with exit status 127 (its log ends: ImportError: no) (the memory limit is 2 GiB",
        ),
        (0, "", "ended with exit status 0 but left no executed notebook"),
    ],
)
def test_a_run_that_left_no_notebook_is_told_how_its_sandbox_ended(
    tmp_path: Path, returncode: int | None, log: str, words: str
) -> None:
    """The notebook run's sandbox left no executed notebook: which limit, signal or exit
    status ended it is said, with the limit's value and option, not "time limit, or the kernel
    died" for all of them."""
    result = sandbox.SandboxResult(returncode, 1.0, log)
    limits = sandbox.Limits(wall_s=660.0, memory_bytes=2 * 2**30)
    run = grade._read_run(tmp_path, result, limits, 30.0)
    assert run.stopped.startswith("the notebook run did not finish: it "), run.stopped
    assert words in run.stopped, run.stopped
    unknown = grade._read_run(tmp_path).stopped  # no sandbox's account: it cannot tell
    assert unknown == "the notebook run did not finish (a limit of time or memory, or a crash)"


# A cell that ends the kernel's process, in two ways: os._exit and a crash (reading address
# 0), each as cell 3 of the notebook run. Running out of memory inside a library ends it
# too, but where and how depends on the machine's libraries: the unit test below has it.
_KERNEL_KILLERS = {
    "exit": (["x = 1", "import os\nos._exit(3)"], 6, "its process ended with exit code 3"),
    "crash": (["x = 1", "import ctypes\nctypes.string_at(0)"], 6, "by signal 11 (SIGSEGV)"),
}


@needs_bwrap
@pytest.mark.parametrize("cause", sorted(_KERNEL_KILLERS))
def test_a_kernel_that_dies_is_told_with_its_cell_and_how_it_ended(
    tmp_path: Path, cause: str
) -> None:
    """The run's message named nbclient's "DeadKernelError: Kernel died" and nothing else: it
    now says which cell was running and how the kernel's process ended."""
    cells, gib, words = _KERNEL_KILLERS[cause]
    _mini(tmp_path / "submission.ipynb", *cells, "y = 2")
    (tmp_path / "settings.json").write_text(json.dumps({"cell_timeout": 30}))
    limits = sandbox.Limits(wall_s=120.0, memory_bytes=gib * 2**30)
    result = sandbox.run_sandboxed("execute", tmp_path, limits)
    run = grade._read_run(tmp_path, result, limits, 30.0)
    assert run.stopped.startswith("the kernel died while cell 3 ran: its process ended "), run
    assert words in run.stopped, run.stopped
    assert "DeadKernelError" not in run.summary()


@pytest.mark.parametrize(
    ("died", "log", "words"),
    [
        (
            {"cell": 4, "returncode": -9},
            "",
            "the kernel died while cell 5 ran: its process ended by signal 9 (SIGKILL): from the "
            "system, e.g. when memory runs out (the memory limit is 2 GiB of address space per "
            "process, --memory), or from a cell",
        ),
        (
            {"cell": 2, "returncode": -6},
            "first\nterminate called after throwing an instance of 'std::bad_alloc'\nlast\n",
            "the kernel died while cell 3 ran: its process ended by signal 6 (SIGABRT) after "
            "memory ran out (the memory limit is 2 GiB of address space per process, --memory): "
            "look for a tensor too large, or grade again with a larger --memory (its log says: "
            "terminate called after throwing an instance of 'std::bad_alloc')",
        ),
        (
            {"cell": 1, "returncode": 0},
            "",
            "the kernel died while cell 2 ran: its process ended with exit code 0 (os._exit, or "
            "a library that ends the process, e.g. when memory runs out: the memory limit is",
        ),
        ({"cell": 0, "returncode": -25}, "", "(SIGXFSZ): the file-size limit of 256 MiB"),
        (
            {"cell": None, "returncode": -11},
            "",
            "the kernel died before any cell ran: its process ended by signal 11 (SIGSEGV), a "
            "crash, often a library that could not allocate memory (the memory limit is 2 GiB",
        ),
        (  # the executed notebook is the submission's to forge: only numbers are read
            {"cell": "3; see grades.json", "returncode": "0 (all passed)"},
            "",
            "the kernel died before any cell ran: how its process ended is not known (the "
            "memory limit is 2 GiB",
        ),
    ],
)
def test_how_the_kernel_died_is_told_from_the_runs_account(
    tmp_path: Path, died: dict, log: str, words: str
) -> None:
    """The causes no cheap sandboxed run shows, from the account the run leaves in the
    executed notebook (the cell it was running, the kernel's exit status) and its log."""
    nb = new_notebook(cells=[new_code_cell("x = 1")])
    nb.metadata["attnbook_run"] = {"stopped": "DeadKernelError: Kernel died", "kernel_died": died}
    nbformat.write(nb, tmp_path / "executed.ipynb")
    result = sandbox.SandboxResult(0, 1.0, log)
    run = grade._read_run(tmp_path, result, sandbox.Limits(memory_bytes=2 * 2**30), 30.0)
    assert words in run.stopped, run.stopped
    assert "DeadKernelError" not in run.stopped


def test_the_grader_tells_the_run_how_its_sandbox_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grade_notebook hands the run's SandboxResult and limits to the message (stubbed
    sandbox: it was killed at its wall clock and wrote nothing)."""
    seen: list[tuple[str, float]] = []

    def sandboxed(task: str, folder: Path, limits: sandbox.Limits, **kwargs: object) -> object:
        seen.append((task, limits.wall_s))
        return sandbox.SandboxResult(None, limits.wall_s, "")

    monkeypatch.setattr(sandbox, "run_sandboxed", sandboxed)
    runs: list[grade.NotebookRun] = []
    notebook = _mini(tmp_path / "02_softmax.ipynb", IMPORTS)
    grade.grade_notebook(notebook, settings=grade.Settings(cell_timeout=5.0), on_run=runs.append)
    assert seen == [("execute", 5.0 * 2 + 60)]  # two cells
    assert "wall-clock limit of 70 s (5 s per cell, --timeout" in runs[0].stopped, runs


def test_a_seed_that_the_state_file_overrides_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state file keeps the first run's seed; a different --seed later is not silently
    dropped."""
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: True)
    notebook = tmp_path / "broken.ipynb"  # unreadable: graded without any sandbox
    notebook.write_text("not a notebook", encoding="utf-8")
    argv = [str(notebook), "--json", str(tmp_path / "grades.json"), "--seed"]
    for seed, warned in (("1", False), ("1", False), ("2", True)):
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            assert grade.main([*argv, seed]) == 0
        assert ("--seed is ignored" in err.getvalue()) is warned, err.getvalue()


def test_set_options_without_what_they_need_are_usage_errors(tmp_path: Path) -> None:
    notebook = _mini(tmp_path / "02_softmax.ipynb", IMPORTS)
    course = tmp_path / "course.yml"
    course.write_text(SET_COURSE)
    for argv, says in (
        ([str(notebook), "--part", "Temperature"], "--part needs --set"),
        ([str(notebook), "--set", "Softmax week"], "--set needs --course"),
        ([str(notebook), "--course", str(course), "--set", "Week 9"], "'Softmax week'"),
    ):
        err = io.StringIO()
        with redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
            grade.main(argv)
        assert exit_info.value.code == 2, argv
        assert says in err.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--timeout", "0"), ("--exercise-timeout", "-5"), ("--memory", "nan"), ("--memory", "inf")],
)
def test_limits_must_be_finite_and_positive(tmp_path: Path, option: str, value: str) -> None:
    """--memory inf crashed with an OverflowError after the checks; now a usage error."""
    notebook = _mini(tmp_path / "02_softmax.ipynb", IMPORTS)
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        grade.main([str(notebook), option, value, "--unsafe-no-sandbox", "--skip-run"])
    assert exit_info.value.code == 2
    assert f"{option} must be a finite number > 0" in err.getvalue(), err.getvalue()


def test_an_output_that_is_a_submission_or_another_output_is_a_usage_error(
    tmp_path: Path,
) -> None:
    """--json naming the submitted notebook overwrote the learner's work with the grades."""
    notebook = _mini(tmp_path / "02_softmax.ipynb", IMPORTS)
    before = notebook.read_bytes()
    grades = str(tmp_path / "grades.json")
    for argv, says in (
        ([str(notebook), "--json", str(notebook)], "--json"),
        ([str(tmp_path), "--csv", str(notebook)], "--csv"),
        ([str(notebook), "--json", grades, "--gradebook", grades], "--json and --gradebook"),
        ([str(notebook), "--json", grades, "--state", grades], "--json and --state"),
    ):
        err = io.StringIO()
        with redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
            grade.main([*argv, "--unsafe-no-sandbox", "--skip-run"])
        assert exit_info.value.code == 2, argv
        assert says in err.getvalue(), err.getvalue()
    assert notebook.read_bytes() == before


# ------------------------------------------------------------------ pieces, no sandbox


def test_checker_calls_reads_calls_not_imports_or_comments() -> None:
    cell = (
        "from attnbook.exercises import check_softmax, check_causal_mask\n"
        "# check_padding_mask(f) is the next exercise\n"
        "check_softmax(my_softmax)\nexercises.check_causal_mask(f)\ncheck_softmax(other)\n"
    )
    assert grade.checker_calls(cell) == ["softmax", "causal_mask"]
    assert grade.checker_calls("x = 1") == []


def test_find_notebooks_searches_folders_and_rejects_missing_paths(tmp_path: Path) -> None:
    a = _mini(tmp_path / "a" / "one.ipynb", "1")
    b = _mini(tmp_path / "b.ipynb", "2")
    _mini(tmp_path / "a" / ".ipynb_checkpoints" / "one-checkpoint.ipynb", "3")
    (tmp_path / "empty").mkdir()
    assert grade.find_notebooks([tmp_path]) == [a, b]
    assert grade._find([tmp_path]) == [(a, "a"), (b, "b")]  # the folder, else the file's name
    assert grade.find_notebooks([b, tmp_path]) == [b, a]
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


def test_output_paths_that_cannot_work_are_usage_errors(tmp_path: Path) -> None:
    """An output naming a folder was a traceback, after the bubblewrap check; a file where an
    output's folder should be was one too."""
    notebook = _mini(tmp_path / "a.ipynb", "1")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for extra, says in (
        (["--state", str(tmp_path)], "--state must name a file, got the folder"),
        (["--json", str(tmp_path)], "--json must name a file, got the folder"),
        (["--csv", str(blocker / "g.csv")], "--csv: cannot make the folder of"),
    ):
        err = io.StringIO()
        with redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
            grade.main([str(notebook), "--unsafe-no-sandbox", "--skip-run", *extra])
        assert exit_info.value.code == 2, extra
        assert says in err.getvalue(), err.getvalue()


def test_an_unreadable_file_is_one_error_record(tmp_path: Path) -> None:
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{this is not a notebook", encoding="utf-8")
    (record,) = grade.grade_notebook(broken, settings=grade.Settings(run_notebook=False))
    assert (record.exercise, record.status) == ("", "error")
    assert "cannot read this notebook" in record.message


def test_the_course_registry_gives_the_points() -> None:
    default, points = grade.load_points(ROOT / "course.yml")
    assert default == 1
    labels = {label for c in catalog.CHAPTERS for _, label in c.exercises}
    assert set(points) <= labels


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("title: no points\n", (1.0, {})),  # no `points:`: 1 per exercise, as documented
        ("points:\n  default: 2\n  exercises:\n    ex-a: 3\n", (2.0, {"ex-a": 3.0})),
        ("points:\n  default: true\n", None),  # a bool is no number of points
        ("points:\n  default: many\n", None),
        ("points:\n  exercises:\n    ex-a: [1]\n", None),  # was a TypeError
        ("points: 3\n", None),  # was an AttributeError
        ("- a list\n", None),  # was an AttributeError
    ],
)
def test_load_points_reads_what_its_docstring_says(
    tmp_path: Path, text: str, expected: tuple | None
) -> None:
    course = tmp_path / "course.yml"
    course.write_text(text, encoding="utf-8")
    if expected is None:
        with pytest.raises(ValueError, match="expected `points: default: N`"):
            grade.load_points(course)
    else:
        assert grade.load_points(course) == expected


def test_load_points_refuses_a_file_that_is_not_yaml(tmp_path: Path) -> None:
    course = tmp_path / "course.yml"
    course.write_text("points: [unclosed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a YAML file"):
        grade.load_points(course)


def test_the_courses_assignment_sets_name_what_is_graded_and_what_by_hand() -> None:
    course = ROOT / "course.yml"
    graded, by_hand = grade.load_assignment_set(course, " A one-week INTRODUCTION ")
    assert graded == {
        "ex-ch01-score-matrix",
        "ex-ch02-stable-softmax",
        "ex-ch03-soft-lookup",
        "ex-ch04-sdpa",
    }
    assert by_hand == ("ex-ch02-sigmoid", "ex-ch04-variance")  # pen and paper
    week2, _ = grade.load_assignment_set(course, "Three weeks, through training a model", "Week 2")
    week3, _ = grade.load_assignment_set(course, "Three weeks, through training a model", "Week 3")
    whole, _ = grade.load_assignment_set(course, "Three weeks, through training a model")
    assert week2
    assert week3
    assert not week2 & week3
    assert week2 | week3 < whole  # week 1 hands in exercises of its own
    with pytest.raises(ValueError, match=r"no part of 'Three weeks.*is titled 'Week 9'.*'Week 1'"):
        grade.load_assignment_set(course, "Three weeks, through training a model", "Week 9")


def test_auto_checked_in_a_set_means_every_checked_exercise_of_its_chapters(
    tmp_path: Path,
) -> None:
    course = tmp_path / "course.yml"
    course.write_text(
        SET_COURSE.replace("chapters: [02_softmax]\n        exercises: auto", "exercises: auto")
    )
    everything, _ = grade.load_assignment_set(course, "Softmax week", "All of chapter 2")
    assert everything == {label for c in catalog.CHAPTERS for _, label in c.exercises}
    course.write_text(SET_COURSE)
    chapter2, _ = grade.load_assignment_set(course, "Softmax week", "All of chapter 2")
    assert chapter2 == {"ex-ch02-stable-softmax", "ex-ch02-temperature"}
    course.write_text(SET_COURSE.replace("exercises: auto-checked", "exercises: all of them"))
    with pytest.raises(ValueError, match="a list of labels or `auto-checked`, got 'all of them'"):
        grade.load_assignment_set(course, "Softmax week")


def test_seeded_cases_differ_from_the_shipped_ones_and_keep_their_kind() -> None:
    for case in _SOFTMAX_CASES:
        (shipped,) = case.make_args()
        (drawn,) = _framework.seeded_args(case, 7)
        (again,) = _framework.seeded_args(case, 7)
        assert drawn.shape == shipped.shape
        assert np.array_equal(drawn, again)
        if case.draw is not None:  # equal scores, all 0 as shipped: equal again, not 0
            assert np.ptp(drawn) == 0
            assert not np.array_equal(drawn, shipped)
            continue
        assert np.array_equal(np.sign(drawn), np.sign(shipped))
        if np.any(shipped != 0) and np.ptp(shipped) > 0:
            assert not np.allclose(drawn, shipped)


def test_the_reference_takes_every_drawn_case_so_none_falls_back_to_the_shipped_one() -> None:
    """The grader keeps a case's shipped inputs where the reference refuses the drawn ones,
    and those can be memorised. Attention weights are drawn as distributions again (rows
    renormalised), so the entropy and rollout exercises get new values too."""
    for name in sorted(n for n in dir(exercises) if n.startswith("check_")):
        spec = _framework.checker_spec(getattr(exercises, name), lambda *args: None)
        for i, case in enumerate(spec.cases):
            spec.reference_fn(*_framework.seeded_args(case, 7 + i))  # raises if refused
    for checker in (exercises.check_head_entropy, exercises.check_attention_rollout):
        for case in _framework.checker_spec(checker, lambda *args: None).cases:
            shipped, drawn = case.make_args()[0], _framework.seeded_args(case, 7)[0]
            assert not torch.allclose(drawn, shipped)
            sums = drawn.sum(-1)
            assert torch.all(((sums - 1).abs() < 1e-9) | (sums == 0))
            assert torch.equal(drawn == 0, shipped == 0)  # masked keys stay masked


def test_checker_spec_captures_without_running_a_case() -> None:
    calls = []
    spec = _framework.checker_spec(exercises.check_softmax, lambda x: calls.append(x))
    assert spec.exercise == "softmax"
    assert len(spec.cases) == 6
    assert calls == []
    names = sorted(n for n in dir(exercises) if n.startswith("check_"))
    for name in names:  # every checker can be run by the grader
        spec = _framework.checker_spec(getattr(exercises, name), print)
        assert spec.exercise == name.removeprefix("check_")


def test_every_checker_asks_a_function_returning_none_about_return() -> None:
    names = sorted(n for n in dir(exercises) if n.startswith("check_"))
    for name in names:
        verdict = getattr(exercises, name)(lambda *args, **kwargs: None)
        assert not verdict.passed, name
        assert verdict.attempted, name
        assert "did you forget `return`?" in verdict.message, (name, verdict.message)


@pytest.mark.parametrize("module", ["attnbook.grade", "attnbook.exercises.grade"])
def test_both_commands_run_the_grader(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--json" in done.stdout
    assert "--unsafe-no-sandbox" in done.stdout


def test_importing_the_package_loads_no_grading_tool() -> None:
    code = "import sys, attnbook, attnbook.exercises; print(sorted(set(sys.modules) & NAMES))"
    names = {"attnbook.exercises.grade", "nbclient", "nbformat", "jupyter_client", "yaml"}
    result = subprocess.run(
        [sys.executable, "-c", code.replace("NAMES", repr(names))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_a_result_file_linked_out_of_the_sandbox_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "grader_file.json"
    outside.write_text(json.dumps({"exercise": "softmax", "cases": [], "tripped": []}))
    (tmp_path / "eval" / "out").mkdir(parents=True)
    np.savez(tmp_path / "eval" / "out" / "softmax.npz")
    (tmp_path / "eval" / "out" / "softmax.json").symlink_to(outside)
    spec = _framework.checker_spec(exercises.check_softmax, print)
    status, message = grade._judge("softmax", spec, [], tmp_path / "eval")
    assert status == "error"
    assert "gave no result" in message


# ------------------------------------------------------------------ the verdict, from files alone


def _judge_written(
    folder: Path,
    cases: list[dict],
    values: dict[str, np.ndarray],
    checker: Callable = exercises.check_softmax,
    **report: object,
) -> tuple:
    """The grader's verdict on an exercise (softmax unless ``checker`` says) from result files
    written here, as a sandbox that finished would write them (no sandbox runs): ``cases`` are
    the report's entries, ``values`` its arrays, ``report`` its other keys; the inputs are the
    grader's own draws."""
    spec = _framework.checker_spec(checker, print)
    name = checker.__name__.removeprefix("check_")
    args, _, _ = grade._cases(spec, 11)
    (folder / "out").mkdir(parents=True)
    np.savez(folder / "out" / f"{name}.npz", **values)
    report = {"exercise": name, "cases": cases, "tripped": [], **report}
    (folder / "out" / f"{name}.json").write_text(json.dumps(report))
    return (*grade._judge(name, spec, args, folder), spec, args)


def _right_results(n: int | None = None) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The softmax exercise's right results on the grader's draws (seed 11), as written back."""
    spec = _framework.checker_spec(exercises.check_softmax, print)
    args, _, _ = grade._cases(spec, 11)
    values = {f"c{i}_0": np.asarray(spec.reference_fn(*a)) for i, a in enumerate(args)}
    cases = [{"kind": "value", "n": 1, "misuse": None} for _ in args]
    return cases[:n], values


def test_right_results_written_back_pass_and_each_flaw_in_them_is_not_passed(
    tmp_path: Path,
) -> None:
    cases, values = _right_results()
    status, message, spec, _ = _judge_written(tmp_path / "right", cases, values)
    assert status == "passed", message
    assert len(spec.cases) == len(cases) > 2
    # a result missing for the last case of results that finished (written by the answer
    # itself: the sandbox writes every case up to the first that fails) is no pass; no limit
    # explains it, so the message blames none
    status, message, *_ = _judge_written(tmp_path / "short", cases[:-1], values)
    assert status == "error"
    assert f"case {len(cases)}/{len(cases)}" in message
    assert "gave no result: the results written back end before it" in message, message
    assert "limit" not in message, message
    # a wrong value in the last case only is caught there
    wrong = dict(values, **{f"c{len(cases) - 1}_0": values[f"c{len(cases) - 1}_0"] * 2})
    status, message, *_ = _judge_written(tmp_path / "last", cases, wrong)
    assert status == "failed", message
    assert f"case {len(cases)}/{len(cases)}" in message, message
    # a value said to be one array but written as two is incomplete, not taken as its first
    two = [dict(cases[0], n=2), *cases[1:]]
    status, message, *_ = _judge_written(tmp_path / "two", two, dict(values, c0_1=values["c0_0"]))
    assert status == "error"
    assert "incomplete" in message, message


def test_every_part_of_a_returned_tuple_is_judged(tmp_path: Path) -> None:
    """An answer returning a tuple (the online softmax's running max, sum and output) passes
    only if every part is right: a right first part does not carry a wrong second or last."""
    checker = exercises.check_online_softmax_update
    spec = _framework.checker_spec(checker, print)
    args, _, _ = grade._cases(spec, 11)
    right = [[np.asarray(part) for part in spec.reference_fn(*a)] for a in args]
    assert all(len(parts) == 3 for parts in right)
    cases = [{"kind": "tuple", "n": 3, "misuse": None} for _ in args]
    values = {f"c{i}_{j}": part for i, parts in enumerate(right) for j, part in enumerate(parts)}
    status, message, *_ = _judge_written(tmp_path / "right", cases, values, checker)
    assert status == "passed", message
    for j, field in ((1, "ell (value 2 of 3)"), (2, "acc (value 3 of 3)")):
        wrong = dict(values, **{f"c0_{j}": values[f"c0_{j}"] + 1})
        status, message, *_ = _judge_written(tmp_path / f"wrong{j}", cases, wrong, checker)
        assert status == "failed", message
        assert f"case 1/{len(args)}" in message, message
        assert f"returned, for {field}, the wrong values" in message, message


@pytest.mark.parametrize(
    ("entry", "status", "words"),
    [
        ({"kind": "raised", "message": "ValueError: no"}, "failed", "raised ValueError: no"),
        # what the checker's wrapper refused, told as returned (no kind of the grader's before)
        ({"kind": "refused", "message": "returned m of shape (2,)"}, "failed", ") returned m of"),
        ({"kind": "not_attempted"}, "not_attempted", "not attempted yet"),
        ({"kind": "value", "n": 1, "misuse": "modifies its input"}, "failed", "modifies its"),
    ],
)
def test_a_raise_a_stub_or_a_misuse_in_any_case_is_not_passed(
    tmp_path: Path, entry: dict, status: str, words: str
) -> None:
    cases, values = _right_results()
    cases[-1] = entry  # the right values are still written for this case
    got, message, *_ = _judge_written(tmp_path, cases, values)
    assert got == status, message
    assert words in message, message


@pytest.mark.parametrize(
    ("report", "status", "words"),
    [
        ({"setup": "not_attempted"}, "not_attempted", "not attempted yet"),
        ({"setup": "NameError: x"}, "error", "defining the answer raised NameError: x"),
        ({"tripped": ["torch.softmax"]}, "failed", "calls torch.softmax, the library's answer"),
    ],
)
def test_a_stub_a_broken_definition_or_a_tripwire_overrides_right_results(
    tmp_path: Path, report: dict, status: str, words: str
) -> None:
    cases, values = _right_results()
    got, message, *_ = _judge_written(tmp_path, cases, values, **report)
    assert got == status, message
    assert words in message, message


def test_a_record_of_the_state_file_earns_its_new_points_only_if_it_passed() -> None:
    settings = grade.Settings(points={"ex-ch02-temperature": 3.0}, default_points=2.0)
    old = grade.GradeRecord(
        "a", "a.ipynb", "ch", "softmax_temperature", "ex-ch02-temperature", "passed", 1.0, 1.0, ""
    )
    assert grade._priced(old, settings) == dataclasses.replace(old, points=3.0, max_points=3.0)
    for status in ("failed", "not_attempted", "error", "missing"):
        record = dataclasses.replace(old, status=status, points=0.0)
        assert grade._priced(record, settings) == dataclasses.replace(record, max_points=3.0)
    other = dataclasses.replace(old, exercise="softmax", label="ex-ch02-stable-softmax")
    assert (grade._priced(other, settings).points, grade._priced(other, settings).max_points) == (
        2.0,
        2.0,
    )
    notebook = dataclasses.replace(old, exercise="", label="", status="error", points=0.0)
    assert grade._priced(notebook, settings).max_points == 0.0


def test_an_exercise_handed_in_twice_counts_with_its_best_result_in_either_order(
    tmp_path: Path,
) -> None:
    passed = grade.GradeRecord(
        "ann", "a.ipynb", "ch", "softmax", "ex-ch02-stable-softmax", "passed", 2.0, 2.0, ""
    )
    failed = dataclasses.replace(passed, notebook="a (1).ipynb", status="failed", points=0.0)
    other = dataclasses.replace(passed, student="bob", exercise="causal_mask", label="x")
    for records in ([passed, failed, other], [failed, passed, other]):
        totals = grade._totals(records)
        assert totals["ann"] == (2.0, 4.0, {"softmax": 2.0})
        assert totals["bob"] == (2.0, 4.0, {"causal_mask": 2.0})
        grade.write_gradebook(records, tmp_path / "book.csv")
        rows = list(csv.reader((tmp_path / "book.csv").open(encoding="utf-8")))
        assert rows == [
            ["student", "softmax", "causal_mask", "total", "max_points"],
            ["ann", "2", "0", "2", "4"],
            ["bob", "0", "2", "2", "4"],
        ]


def test_the_graders_seed_decides_the_drawn_inputs() -> None:
    spec = _framework.checker_spec(exercises.check_softmax, print)
    one, sent, seeds = grade._cases(spec, 1)
    again, _, _ = grade._cases(spec, 1)
    other, _, other_seeds = grade._cases(spec, 2)
    assert len(one) == len(spec.cases) == len(sent) == len(seeds)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(one, again))
    assert all(not np.array_equal(a[0], b[0]) for a, b in zip(one, other))
    assert set(seeds).isdisjoint(other_seeds)


def test_the_sandboxes_get_the_graders_limits_and_every_exercise_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []

    def fake_run(task: str, folder: Path, limits: sandbox.Limits, *, unsafe: bool = False):
        seen.append((task, limits, json.loads((folder / "settings.json").read_text()), unsafe))
        return sandbox.SandboxResult(0, 0.0, "")

    monkeypatch.setattr(sandbox, "run_sandboxed", fake_run)
    # chapter 2 with its softmax, and chapter 4's causal mask checked in it too
    path = _mini(
        tmp_path / "alice.ipynb",
        "import numpy as np\nfrom attnbook.exercises import check_softmax, check_causal_mask",
        "check_softmax(lambda x: x)",
        "check_causal_mask(lambda n: np.tril(np.ones((n, n))) > 0)",
    )
    settings = grade.Settings(
        cell_timeout=7.0, exercise_timeout=9.0, memory_bytes=3 * 2**30, seed=1, unsafe=True
    )
    records = grade.grade_notebook(path, settings=settings)
    assert [(r.exercise, r.status) for r in records] == [
        ("softmax", "error"),  # no result came back from the fake sandbox
        ("softmax_temperature", "missing"),
        ("causal_mask", "error"),
    ]
    assert [task for task, *_ in seen] == ["execute", "evaluate"]
    for _, limits, timeouts, unsafe in seen:
        assert limits.memory_bytes == 3 * 2**30
        assert timeouts == {"cell_timeout": 7.0, "exercise_timeout": 9.0}
        assert unsafe
    assert seen[0][1].wall_s == 7.0 * 4 + 60  # per cell of the notebook's 4
    assert seen[1][1].wall_s == 9.0 * 2 + 120  # per exercise of the 2 to run


def test_the_sandboxs_limits_are_set_before_it_starts() -> None:
    limits = sandbox.Limits(wall_s=2.0, memory_bytes=3 * 2**30, file_bytes=2**20)
    code = (
        "import resource as r\n"
        "print([r.getrlimit(getattr(r, k))[0] for k in "
        "('RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_CORE')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=sandbox._limit(limits),
    )
    cpu = int(2.0 * (os.cpu_count() or 1)) + 1
    assert json.loads(done.stdout) == [3 * 2**30, cpu, 2**20, 0]


def _tripped_in_a_child(work: Callable[[], list[str]]) -> list[str]:
    """What ``work`` returns (the tripwires it set off), run in a forked process of its own,
    as the sandbox's evaluating child runs each exercise: wires set there stay there."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        tripped = json.loads(pipe.read() or "null")
    assert os.waitpid(pid, 0)[1] == 0
    return tripped


def test_every_library_equivalent_of_the_exercise_is_a_tripwire_in_the_sandbox() -> None:
    def work() -> list[str]:  # in a process of its own, as in the sandbox's child
        tripped: list[str] = []
        sandbox._install_tripwires("softmax", tripped)
        x = torch.ones(3)
        for call in (
            lambda: torch.logsumexp(x, 0),
            lambda: torch.nn.functional.log_softmax(x, 0),
            lambda: x.softmax(0),
        ):
            with suppress(sandbox.ForbiddenCall):
                call()
        return tripped

    tripped = _tripped_in_a_child(work)
    assert tripped == ["torch.logsumexp", "torch.nn.functional.log_softmax", "torch.Tensor.softmax"]


def test_the_sandbox_refuses_every_route_to_code_it_cannot_read_and_to_a_new_process(
    tmp_path: Path,
) -> None:
    # Each of these let a wrong answer pass (the package's softmax, reached while the answer
    # was defined or while it ran): a pickle, loaded by np.load with allow_pickle in **{...}
    # or by a library's unpickler found through a class's mro(); a class's annotations made
    # of strings, evaluated by typing or inspect; a dataclass field named __builtins__, whose
    # __eq__ handed over the builtins that functools.update_wrapper had copied from numpy by
    # that name, and update_wrapper's copies of a module's attributes (under another module's
    # name too), that a learner's __setattr__ or __setstate__ got; a shell command of
    # torch's; enum.global_enum writing an enum's members into the grader's module; and any
    # other new process
    pickled = tmp_path / "p.pkl"
    pickled.write_bytes(pickle.dumps(os.getcwd))  # loading it imports os.getcwd by name

    def work() -> list[str]:  # in a process of its own, as in the sandbox's child
        tripped: list[str] = []
        sandbox._wire_code_routes(tripped)
        from torch.utils import collect_env, show_pickle

        box = dataclasses.make_dataclass("Box", [("a", "int", dataclasses.field(default=0))])

        def renamed(field: dataclasses.Field) -> None:
            field.name = "a if 0 else print()"

        for call in (
            lambda: np.load(pickled, **{"allow_pickle": True}),
            lambda: show_pickle.DumpUnpickler.mro()[1](pickled.open("rb")).load(),
            lambda: functools.singledispatch(print).register(box()),
            lambda: torch.cuda.memory.signature(box, eval_str=True),  # inspect.signature
            lambda: dataclasses.make_dataclass("H", ["__builtins__"]),  # read by its __eq__
            # a base's field renamed into code after its class was made: the subclass's
            # __eq__ holds that name as code (the base itself, made before, stays usable)
            lambda: renamed(dataclasses.fields(box)[0]),
            lambda: dataclasses.make_dataclass("Sub", [], bases=(box,)),
            # a field's name that is no identifier, from a class made by type(...)
            lambda: dataclasses.dataclass(type("T", (), {"__annotations__": {"a=0": int}})),
            # copied onto a learner's object, whose __setattr__ or __setstate__ gets them
            lambda: functools.update_wrapper(box(), np, assigned=("__builtins__",)),
            lambda: torch.distributions.utils.update_wrapper(box(), np),  # np.__dict__
            # its members written into the module named (the sandbox's, in place of a
            # function the grader calls): here a module of no one's
            lambda: enum.global_enum(enum.Enum("E", ["member"], module="no.such.module")),
            lambda: collect_env.run("true"),
            lambda: os.system("true"),
            lambda: os.execv("/bin/true", ["true"]),
            lambda: os.fork(),
        ):
            with suppress(Exception):  # np.load raises its own error, from the wire's
                call()
        tripped.append(str(torch.cuda.memory.signature(box)))  # not evaluated: as it was
        tripped.append(functools.wraps(print)(lambda: None).__name__)  # as a decorator: too
        return tripped

    tripped = _tripped_in_a_child(work)
    assert tripped == [
        "pickle.find_class",
        "pickle.find_class",
        "typing.get_type_hints",
        "inspect.get_annotations",
        "dataclasses._get_field",
        "dataclasses._process_class",
        "dataclasses._get_field",
        "functools.update_wrapper",
        "functools.update_wrapper",
        "enum.global_enum",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.fork",
        "(a: 'int' = 0) -> None",
        "print",
    ]


def test_every_part_of_a_returned_tuple_comes_back_from_the_sandbox() -> None:
    kind, parts = sandbox._to_arrays((torch.ones(2), np.zeros(3), 4))
    assert kind == "tuple"
    assert [p.tolist() for p in parts] == [[1.0, 1.0], [0.0, 0.0, 0.0], 4]
    assert sandbox._to_arrays(None) == ("none", [])
    assert sandbox._to_arrays({"a": 1})[0] == "other:dict"


def test_an_answer_that_edits_a_list_or_dict_it_was_given_is_caught() -> None:
    def answer(ids: list, table: dict) -> list:
        return ids

    for args in (([1, 2], {"a": [1]}), ([np.ones(2)], {})):
        before = _framework.snapshot(args)
        assert _framework.changed_inputs(answer, before, args) is None
    ids, table = [1, 2], {"a": [1]}
    before = _framework.snapshot((ids, table))
    ids[1] = 3
    assert "argument `ids` in place" in _framework.changed_inputs(answer, before, (ids, table))
    ids[1] = 2
    table["a"].append(2)
    assert "argument `table` in place" in _framework.changed_inputs(answer, before, (ids, table))
