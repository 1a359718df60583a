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
from attnbook.exercises import extract
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


def chapter_names(path: Path) -> set[str]:
    """Every name the chapter's code cells bind, anywhere (the grader's reading: IPython magics
    left out): generous, so that only a name bound nowhere is reported."""
    cells = nbformat.read(path, as_version=4).cells
    return set().union(
        *(extract._bound_names(extract._parse(c.source)) for c in cells if c.cell_type == "code")
    )


def unbound_names(code: str, chapter: set[str]) -> set[str]:
    """The names `code` reads that neither it, Python's builtins nor the chapter bind."""
    tree = extract._parse(textwrap.dedent(code))
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return read - extract._bound_names(tree) - set(dir(builtins)) - chapter


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.stem)
def test_solution_code_names_only_what_its_chapter_defines(path: Path) -> None:
    """A solution's code block that calls `math.log` in a chapter that never imports `math`
    fails with a NameError where the learner runs it (chapter 3's fair split did)."""
    chapter = chapter_names(path)
    problems = [
        f"{label}: {sorted(unbound)}"
        for label, code in solution_blocks(path)
        if (unbound := unbound_names(code, chapter))
    ]
    assert not problems, f"{path.name}: solution code reads names nothing defines: {problems}"


def test_a_name_the_chapter_never_binds_is_found(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import numpy as np\nfrom torch import nn\n%matplotlib inline"),
        nbformat.v4.new_code_cell("def f(x):\n    return x"),
    ]
    nbformat.write(nb, tmp_path / "demo.ipynb")
    chapter = chapter_names(tmp_path / "demo.ipynb")
    assert unbound_names("  y = np.log(9) + f(1)\n  z = [i for i in range(y)]", chapter) == set()
    assert unbound_names("try:\n    f(1)\nexcept ValueError as e:\n    print(e)", chapter) == set()
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
