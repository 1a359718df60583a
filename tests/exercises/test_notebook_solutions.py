"""Every code solution shown in the book passes the checker it calls, and names nothing that
its chapter does not define.

The solutions live in ``{solution}`` dropdowns of the chapters' markdown. This
test runs each solution's Python block with only ``np``, ``torch``, ``math``,
``nn``, ``F`` and the checkers in scope, records every verdict, and asserts
each one passed: a solution that drifts from its checker fails here. Every Python
block of a solution, whether it calls a checker or not, may use only names it binds itself,
Python's builtins and names the chapter's code cells bind: a learner pastes it below them.
"""

from __future__ import annotations

import ast
import builtins
import math
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnbook.exercises as exercises
from tools.notebooks import solutions

CHAPTERS = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))
_CODE = re.compile(r"```(?:python|ipython3?)\n(?P<code>.*?)```", re.DOTALL)


def solution_blocks(path: Path) -> list[tuple[str, str]]:
    """Return ``(label, code)`` for every Python block inside a ``{solution}`` directive."""
    return [
        (block.label, match["code"])
        for block in solutions(path)
        for match in _CODE.finditer(block.body + "\n")
    ]


CASES = [
    pytest.param(path, label, code, id=f"{path.stem}:{label}")
    for path in CHAPTERS
    for label, code in solution_blocks(path)
    if "check_" in code
]


def test_there_are_code_solutions_to_run() -> None:
    assert len(CASES) >= 20, f"only {len(CASES)} code solutions call a checker"


def run_solution(path: Path, label: str, code: str, answer=lambda fn: fn) -> list:
    """Run a solution's code, each checker it calls given ``answer(fn)`` for the solution's
    ``fn``, and return the checkers' verdicts in order."""
    verdicts = []

    def recording(checker):
        def wrapper(fn):
            verdict = checker(answer(fn))
            verdicts.append(verdict)
            return verdict

        return wrapper

    namespace = {"np": np, "torch": torch, "math": math, "nn": nn, "F": F}
    namespace |= {
        name: recording(getattr(exercises, name))
        for name in dir(exercises)
        if name.startswith("check_")
    }
    torch.manual_seed(0)
    exec(compile(code, f"{path.name}:{label}", "exec"), namespace)
    return verdicts


@pytest.mark.parametrize(("path", "label", "code"), CASES)
def test_solution_passes_its_checker(path: Path, label: str, code: str) -> None:
    verdicts = run_solution(path, label, code)
    assert verdicts, f"solution {label} in {path.name} calls no checker"
    for verdict in verdicts:
        assert verdict.passed, (
            f"solution {label} in {path.name} fails its checker:\n{verdict.message}"
        )


def bound_names(tree: ast.AST) -> set[str]:
    """Every name that `tree` binds anywhere (assignments, definitions, imports, arguments,
    loop and `with` targets...): generous, so that only a name bound nowhere is reported."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
    return names


def unbound_names(code: str, chapter_code: list[str]) -> set[str]:
    """The names `code` reads that neither it, Python's builtins nor `chapter_code` bind (an
    IPython line magic or shell line of a chapter cell is skipped)."""
    tree = ast.parse(textwrap.dedent(code))
    chapter = set()
    for source in chapter_code:
        lines = [
            "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
        ]
        chapter |= bound_names(ast.parse("\n".join(lines)))
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - bound_names(tree) - set(dir(builtins)) - chapter


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_solution_code_names_only_what_its_chapter_defines(path: Path) -> None:
    """A solution's code block that calls `math.log` in a chapter that never imports `math`
    fails with a NameError where the learner runs it (chapter 3's fair split did)."""
    code_cells = [
        cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"
    ]
    problems = [
        f"{label}: {sorted(unbound)}"
        for label, code in solution_blocks(path)
        if (unbound := unbound_names(code, code_cells))
    ]
    assert not problems, f"{path.name}: solution code reads names nothing defines: {problems}"


def test_a_name_the_chapter_never_binds_is_found() -> None:
    chapter = [
        "import numpy as np\nfrom torch import nn\n%matplotlib inline",
        "def f(x):\n    return x",
    ]
    assert unbound_names("  y = np.log(9) + f(1)\n  z = [i for i in range(y)]", chapter) == set()
    assert unbound_names("tau = 1.6 / math.log(9)", chapter) == {"math"}
    assert unbound_names("layer = nn.Linear(2, 2)\nout = g(layer)", chapter) == {"g"}


def test_the_extractor_finds_solution_code(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(
        nbformat.v4.new_markdown_cell(
            "::::{solution} ex-demo\n:class: dropdown\n```python\nx = 1\ncheck_softmax(f)\n```\n::::\n"
            "```python\nnot_in_a_solution()\n```"
        )
    )
    path = tmp_path / "demo.ipynb"
    nbformat.write(nb, path)
    assert solution_blocks(path) == [("ex-demo", "x = 1\ncheck_softmax(f)\n")]
