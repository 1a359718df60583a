"""The package's shape: documented, typed, layered.

- every public function and class has a docstring and type hints;
- each layer only looks down: a module imports only modules of its own or a
  lower layer of ``LAYERS``; nothing imports ``attnbook.exercises``, and
  ``attnbook.viz`` draws what it is given without importing any module that
  computes scores or attention;
- private names stay private: no ``from attnbook.x import _y`` across
  modules, and no ``obj._name`` on anything but ``self``, ``cls`` or ``super()``
  (no reaching into another module's or class's internals).
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


# The package's layers, lowest first. A module may import modules of its own layer or below,
# never above. A new module must be added here (the test names the one that is missing).
LAYERS: list[set[str]] = [
    {"_validation", "runtime"},
    {"scores", "softmax", "masking", "positional", "data", "interpret", "viz", "tokenizer"},
    {"lookup", "attention", "interactive"},
    {"multihead", "efficient"},
    {"block", "generation", "rnn"},
    {"model", "pretrained"},
    {"encoder_decoder"},
    {"training", "checkpoint"},
    {"distributed", "__main__", "grade"},
    {"exercises"},  # the checkers, imported by no other module
    {"__init__"},  # the package's re-exports
]


def _layer_name(path: Path) -> str:
    """``attnbook/exercises/x.py`` -> ``exercises``; ``attnbook/model.py`` -> ``model``."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def _layer_of(name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise AssertionError(f"module attnbook.{name} is in no layer: add it to LAYERS")


def _imported_layers(source: str) -> set[str]:
    """The attnbook modules ``source`` imports, by layer name (``from attnbook import x`` is ``x``)."""
    names = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "attnbook":
            names |= {a.name for a in node.names if (SRC / f"{a.name}.py").exists()}
            names |= {a.name for a in node.names if (SRC / a.name).is_dir()}
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnbook.")
        ):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[1] for a in node.names if a.name.startswith("attnbook.")}
    return names


def layer_violations(source: str, own: str) -> list[str]:
    """Imports in ``source``, the code of module ``own``, that go up the layers."""
    level = _layer_of(own)
    return [
        f"attnbook.{own} (layer {level}) imports attnbook.{name} (layer {_layer_of(name)})"
        for name in sorted(_imported_layers(source) - {own})
        if _layer_of(name) > level
    ]


# Documented standard-library names that start with an underscore: not private to anyone.
STDLIB_UNDERSCORED = {"os._exit"}

# Private names of a library that one module reads on purpose, by module. The checkers'
# framework copies an answer's result with the C methods of torch._C.TensorBase, an immutable
# type, because an answer can rebind the methods of torch.Tensor, a Python class.
LIBRARY_PRIVATE_ALLOWED = {"exercises/_framework.py": {"torch._C"}}


def private_reaches(source: str, allowed: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """``from attnbook.x import _y`` and ``obj._name`` (``obj`` not ``self``/``cls``/``super()``),
    except the names in ``allowed``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnbook"):
            found += [
                f"line {node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if ast.unparse(node) in STDLIB_UNDERSCORED | set(allowed):
                continue
            if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_look_down_the_layers(path: Path) -> None:
    assert not layer_violations(path.read_text(), _layer_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_private_name_crosses_a_module_or_class(path: Path) -> None:
    allowed = LIBRARY_PRIVATE_ALLOWED.get(str(path.relative_to(SRC)), set())
    assert not private_reaches(path.read_text(), allowed)


def test_the_structure_checks_can_fail() -> None:
    """Planted violations are found: an upward import, a private import, a private call."""
    assert private_reaches("from attnbook.attention import _validate\n")
    assert private_reaches("def f(block):\n    return block._forward(1)\n")
    assert private_reaches("import attnbook\nattnbook.attention._core\n")
    assert not private_reaches("class A:\n    def f(self):\n        return self._x, super()._y\n")
    assert private_reaches("import torch\ntorch._C.TensorBase\n")  # allowed only by name
    assert not private_reaches("import torch\ntorch._C.TensorBase\n", {"torch._C"})
    assert private_reaches("import torch\ntorch._C._get_tracing_state\n", {"torch._C"})
    source = (SRC / "multihead.py").read_text()
    assert not layer_violations(source, "multihead")
    assert layer_violations(source + "\nfrom attnbook.model import GPT\n", "multihead")
    assert layer_violations(source + "\nfrom attnbook import block\n", "multihead")
    with pytest.raises(AssertionError, match="in no layer"):
        layer_violations(source, "a_new_module")


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
    # a class's own docstring: inspect.getdoc would inherit nn.Module's, and @dataclass
    # writes "Name(field: type, ...)" where the class has none
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert doc, f"attnbook.{name} needs a docstring"
    assert not doc.startswith(f"{obj.__name__}("), f"attnbook.{name} needs a docstring"
    if inspect.isclass(obj):  # its constructor, and its forward where it has one
        targets = [vars(obj)[m] for m in ("__init__", "forward") if m in vars(obj)]
    else:
        targets = [obj]
    for target in targets:
        hints = inspect.get_annotations(target)
        params = [
            p for p in inspect.signature(target).parameters if p not in ("self", "args", "kwargs")
        ]
        missing = [p for p in params if p not in hints]
        where = f"attnbook.{name}" + (f".{target.__name__}" if target is not obj else "")
        assert not missing, f"{where}: parameters without type hints: {missing}"
        assert "return" in hints, f"{where} needs a return type hint"
