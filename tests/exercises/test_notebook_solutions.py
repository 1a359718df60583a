"""Every code solution shown in the book passes the checker it calls.

The solutions live in ``{solution}`` dropdowns of the chapters' markdown. This
test runs each solution's Python block with only ``np``, ``torch``, ``math``,
``nn``, ``F`` and the checkers in scope, records every verdict, and asserts
each one passed: a solution that drifts from its checker fails here.
"""

from __future__ import annotations

import math
import re
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
