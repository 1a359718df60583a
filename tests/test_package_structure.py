"""The package's shape: documented, typed, layered.

- every public function and class has a docstring and type hints;
- each layer only looks down: nothing imports ``attnbook.exercises``, and
  ``attnbook.viz`` draws what it is given without importing any module that
  computes scores or attention.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import attnbook

SRC = Path(attnbook.__file__).resolve().parent
MODULES = sorted(p for p in SRC.rglob("*.py"))


def _attnbook_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnbook"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("attnbook")}
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_has_a_docstring(path: Path) -> None:
    assert ast.get_docstring(ast.parse(path.read_text())), f"{path.name} needs a module docstring"


@pytest.mark.parametrize(
    "path", [p for p in MODULES if "exercises" not in p.parts], ids=lambda p: p.name
)
def test_nothing_outside_exercises_imports_exercises(path: Path) -> None:
    assert not any(m.startswith("attnbook.exercises") for m in _attnbook_imports(path))


def test_viz_computes_nothing() -> None:
    assert _attnbook_imports(SRC / "viz.py") <= {"attnbook._validation"}


@pytest.mark.parametrize("name", attnbook.__all__)
def test_public_api_is_documented_and_typed(name: str) -> None:
    obj = getattr(attnbook, name)
    assert inspect.getdoc(obj), f"attnbook.{name} needs a docstring"
    target = obj.forward if inspect.isclass(obj) and hasattr(obj, "forward") else obj
    if inspect.isclass(obj) and not hasattr(obj, "forward"):
        return
    hints = inspect.get_annotations(target)
    params = [
        p for p in inspect.signature(target).parameters if p not in ("self", "args", "kwargs")
    ]
    missing = [p for p in params if p not in hints]
    assert not missing, f"attnbook.{name}: parameters without type hints: {missing}"
    assert "return" in hints, f"attnbook.{name} needs a return type hint"
