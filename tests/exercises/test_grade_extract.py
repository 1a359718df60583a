"""Taking answers out of a notebook's source, the static check, and the grader's catalog.

No sandbox here: these are the pieces the grader runs in its own process.
"""

from __future__ import annotations

import ast
import enum
import importlib.metadata
import importlib.util
import operator
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_notebook
from test_notebook_solutions import solution_blocks

import attnbook.exercises as exercises
from attnbook.exercises import catalog, extract, notebooks, sandbox
from attnbook.exercises._framework import ANSWER_MODULES

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
IMPORTS = (
    "import math\n\nimport numpy as np\nimport torch\nimport torch.nn.functional as F\n"
    "from torch import nn\n"
)


def _nb(*cells: str) -> nbformat.NotebookNode:
    return new_notebook(cells=[new_code_cell(c) for c in cells])


def _one(*cells: str) -> extract.Extracted:
    (found,) = extract.extract(_nb(*cells))
    return found


def test_the_answer_takes_only_what_it_needs_from_the_cells_before() -> None:
    found = _one(
        "import numpy as np\nimport matplotlib.pyplot as plt",
        "SCALE = 2.0\nx = np.ones(3)\nplt.plot(x)\nprint('hello')",
        "def helper(z):\n    return z * SCALE\n\ndef unused():\n    return 1",
        "def my_softmax(x):\n    y = helper(x)  # its own x, not the global one\n    return np.exp(y)\n"
        "\ncheck_softmax(my_softmax)",
    )
    program = found.program
    assert "SCALE = 2.0" in program
    assert "def helper" in program
    assert "import numpy as np" in program
    for left_out in ("plt", "print", "unused", "x = np.ones", "check_softmax"):
        assert left_out not in program, left_out
    assert program.endswith("__attnbook_answer__ = my_softmax")
    assert found.problems == ()


def test_what_changes_a_name_the_answer_reads_is_taken_with_it() -> None:
    # A right softmax whose settings are filled in after the dict is made: it passed in the
    # notebook and raised KeyError in the grader, which took only `SETTINGS = {}`
    found = _one(
        "import functools\nimport numpy as np",
        "SETTINGS = {}\nSETTINGS['axis'] = -1\nSETTINGS.update(keep=True)\nprint(SETTINGS)\n"
        "np.random.seed(0)\nOTHER = {}\nOTHER['axis'] = 0",
        "@functools.singledispatch\ndef shift(x):\n    raise TypeError(type(x))\n\n"
        "@shift.register(np.ndarray)\ndef _(x):\n    return x - x.max(axis=-1, keepdims=True)",
        "def my_softmax(x):\n    e = np.exp(shift(x))\n"
        "    return e / e.sum(axis=SETTINGS['axis'], keepdims=SETTINGS['keep'])\n\n"
        "check_softmax(my_softmax)",
    )
    program = found.program
    for taken in ("SETTINGS['axis'] = -1", "SETTINGS.update(keep=True)", "@shift.register"):
        assert taken in program, taken
    for left_out in ("print", "np.random.seed", "OTHER"):  # nor a module's: np.random.seed
        assert left_out not in program, left_out
    assert found.problems == ()
    namespace: dict = {}
    exec(program, namespace)
    weights = namespace["__attnbook_answer__"](np.array([[1.0, 2.0, 3.0]]))
    assert np.allclose(weights, np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())


def test_a_name_read_when_a_statement_runs_is_the_one_it_read_in_the_notebook() -> None:
    # A right softmax that stores a helper in a dict, then redefines the helper: the notebook's
    # dict holds the first; the grader took only the last, after the store (NameError)
    found = _one(
        "import numpy as np",
        "def _norm(e):\n    return e / e.sum(axis=-1, keepdims=True)\n\n"
        "STEPS = {}\nSTEPS['norm'] = _norm\nlater = lambda: _norm\n\n"
        "def _norm(e):\n    return e",
        "def my_softmax(x):\n    assert later()(1) == 1\n"
        "    return STEPS['norm'](np.exp(x - x.max(axis=-1, keepdims=True)))\n\n"
        "check_softmax(my_softmax)",
    )
    program = found.program
    assert program.count("def _norm") == 2  # each, where the notebook defined it
    namespace: dict = {}
    exec(program, namespace)
    weights = namespace["__attnbook_answer__"](np.array([[1.0, 2.0, 3.0]]))
    assert np.allclose(weights, np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())


def test_an_import_is_cut_to_the_names_the_answer_uses() -> None:
    """Chapter 4's set-up imports the exercise's answer beside softmax: an answer that uses
    softmax is told about softmax, not about the name it never touched."""
    found = _one(
        "import torch\nfrom attnbook import scaled_dot_product_attention, softmax",
        "def my_attention(q, k, v):\n    return softmax(q @ k.T) @ v\n\n"
        "check_scaled_dot_product_attention(my_attention)",
    )
    assert "from attnbook import softmax" in found.program
    assert "scaled_dot_product_attention," not in found.program
    assert found.problems == (
        "imports attnbook.softmax, which the grader does not allow in an answer",
    )


def test_the_chapters_device_is_the_cpu_in_the_answers_program() -> None:
    """`device = attnbook.get_device()` is the set-up of every chapter, not a use of the
    package: an answer that makes a tensor on `device` runs, on the CPU."""
    found = _one(
        "import attnbook\nimport torch\n\ndevice = attnbook.get_device()",
        "def my_causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool, device=device).tril()"
        "\n\ncheck_causal_mask(my_causal_mask)",
    )
    assert found.problems == ()
    assert "device = torch.device('cpu')" in found.program
    assert "attnbook" not in found.program.replace("__attnbook_answer__", "")
    namespace: dict = {}
    exec(found.program, namespace)
    assert namespace["__attnbook_answer__"](3).sum() == 6
    other = _one(  # a tensor's own get_device() is not the chapter's set-up
        "import torch\nx = torch.ones(1)\nwhere = x.get_device()",
        "check_causal_mask(lambda T: torch.ones(T, T, device=where).bool().tril())",
    )
    assert "where = x.get_device()" in other.program


def test_the_last_definition_before_the_call_counts() -> None:
    found = _one(
        "def f(x):\n    return 1",
        "def f(x):\n    return 2\n\ncheck_softmax(f)\n\ndef f(x):\n    return 3",
    )
    assert "return 2" in found.program
    assert "return 1" not in found.program
    assert "return 3" not in found.program


_RIGHT = (
    "def f(x):\n    e = np.exp(x - x.max(axis=-1, keepdims=True))\n"
    "    return e / e.sum(axis=-1, keepdims=True)"
)


def _softmax_of(program: str) -> np.ndarray:
    namespace: dict = {}
    exec(program, namespace)
    return namespace["__attnbook_answer__"](np.array([1.0, 2.0, 3.0]))


@pytest.mark.parametrize(
    "opening",
    ["try:", "with np.errstate(all='ignore'):", "if True:", "if __name__ == '__main__':"],
)
def test_a_definition_in_a_try_with_or_constant_if_body_is_taken_as_the_notebook_ran_it(
    opening: str,
) -> None:
    """Only top-level statements were taken: a right softmax defined in a `try` after a wrong
    one was graded failed, on the wrong one, though the notebook ran the right one."""
    indented = "\n".join("    " + line for line in _RIGHT.splitlines())
    rest = "\nexcept NameError:\n    def f(x):\n        return x" if opening == "try:" else ""
    found = _one(
        "import numpy as np",
        "def f(x):\n    return x",
        f"{opening}\n{indented}{rest}",
        "check_softmax(f)",
    )
    assert found.program.count("def f") == 1, found.program
    assert np.allclose(_softmax_of(found.program), np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())
    assert found.problems == ()
    assert found.notes == ()


def test_a_checker_called_in_a_try_body_reads_the_definitions_before_it_there() -> None:
    indented = "\n".join("    " + line for line in _RIGHT.splitlines())
    found = _one(
        "import numpy as np",
        f"try:\n{indented}\n    check_softmax(f)\nexcept Exception as e:\n    print(e)",
    )
    assert found.program.endswith("__attnbook_answer__ = f"), found.program
    assert "print" not in found.program
    assert "check_softmax" not in found.program
    assert np.allclose(_softmax_of(found.program), np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())


def test_what_a_try_body_imports_is_read_as_any_import_is() -> None:
    found = _one(
        "try:\n    from scipy.special import softmax as f\nexcept ImportError:\n    f = None",
        "check_softmax(f)",
    )
    assert found.program.startswith("from scipy.special import softmax as f"), found.program
    assert found.problems, found.program
    assert "softmax" in found.problems[0], found.problems


def test_a_definition_that_only_running_decides_is_not_taken_and_is_named() -> None:
    """An `if` on the notebook's values (a loop, an `except` branch) may or may not have
    run: what it defines is not taken, and the grade's message says so."""
    indented = "\n".join("    " + line for line in _RIGHT.splitlines())
    found = _one(
        "import numpy as np\nFAST = np.ones(1).sum() > 0",
        "def f(x):\n    return x",
        f"if FAST:\n{indented}",
        "check_softmax(f)",
    )
    assert "return x\n" in found.program
    assert "np.exp" not in found.program
    (note,) = found.notes
    assert note.startswith("a definition of `f` inside an `if` whose condition only running")
    found = _one("for n in range(2):\n    def g(x):\n        return x * n", "check_softmax(g)")
    assert found.notes == (
        "a definition of `g` inside a `for` loop was not taken: the grader takes only "
        "definitions that run whatever the notebook's values (at the top level of a cell, or "
        "in a `try` or `with` body); define it there",
    )


def test_a_type_registered_from_an_annotation_is_written_into_register() -> None:
    """`@shift.register` on `def _(x: np.ndarray)` reads the type from the annotation, which
    the grader removes before it runs the program: graded `error` (None is not a class). A
    plain dotted name is written into the call; any other annotation is named in a note."""
    dispatch = (
        "@functools.singledispatch\ndef shift(x):\n    raise TypeError(type(x))\n\n"
        "@shift.register\ndef _(x: np.ndarray):\n    return x - x.max(axis=-1, keepdims=True)"
    )
    answer = (
        "def my_softmax(x):\n    e = np.exp(shift(x))\n"
        "    return e / e.sum(axis=-1, keepdims=True)\n\ncheck_softmax(my_softmax)"
    )
    found = _one("import functools\nimport numpy as np", dispatch, answer)
    assert "@shift.register(np.ndarray)\ndef _(x: np.ndarray):" in found.program, found.program
    assert found.problems == ()
    assert found.notes == ()
    namespace: dict = {}
    program = sandbox._without_annotations(ast.parse(found.program))  # as the sandbox runs it
    exec(compile(program, "<answer>", "exec", dont_inherit=True), namespace)
    weights = namespace["__attnbook_answer__"](np.array([1.0, 2.0, 3.0]))
    assert np.allclose(weights, np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())
    union = dispatch.replace("x: np.ndarray", "x: np.ndarray | float")
    found = _one("import functools\nimport numpy as np", union, answer)
    assert "@shift.register\n" in found.program
    assert found.notes == (
        "`@shift.register` on `_` takes its type from the annotation `np.ndarray | float` of "
        "its first parameter, which the grader does not evaluate (it runs answers without "
        "their annotations); write the type in the call: `@shift.register(np.ndarray)`",
    )


def test_an_exercise_checked_twice_is_taken_from_its_last_call() -> None:
    found = _one(
        "def first(x):\n    return 1\n\ncheck_softmax(first)",
        "def second(x):\n    return 2\n\ncheck_softmax(second)",
    )
    assert found.cell == 1
    assert found.program.endswith("__attnbook_answer__ = second")
    assert "first" not in found.program


def test_a_statement_that_calls_a_checker_is_no_definition_of_the_answer() -> None:
    # the learner keeps the checker's verdict under the answer's name: the function
    # defined before is the answer, and the program neither runs a checker nor imports one
    found = _one(
        "from attnbook.exercises import check_softmax\n\ndef f(x):\n    return x",
        "f = check_softmax(f) and f",
        "check_softmax(f)",
    )
    assert found.program == "def f(x):\n    return x\n__attnbook_answer__ = f"
    assert found.problems == ()


def test_a_checker_called_without_a_function_is_that_exercises_error_alone() -> None:
    softmax, temperature = extract.extract(
        _nb("check_softmax()", "check_softmax_temperature(lambda x, t: x)")
    )
    assert softmax.error == "cell 1 calls check_softmax() without a function"
    assert softmax.program == ""
    assert temperature.error == ""
    assert temperature.program.endswith("__attnbook_answer__ = lambda x, t: x")


def test_a_lambda_and_magics_are_handled() -> None:
    found = _one("%matplotlib inline\nimport numpy as np", "check_softmax(lambda x: np.exp(x))")
    assert "import numpy as np" in found.program
    assert "__attnbook_answer__ = lambda x: np.exp(x)" in found.program


def test_a_cell_that_does_not_parse_is_an_error() -> None:
    found = _one("def f(x)\n    return x\ncheck_softmax(f)")
    assert found.program == ""
    assert "does not parse" in found.error


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("from attnbook import softmax\nf = lambda x: softmax(x)", "imports attnbook"),
        ("import attnbook as a\nf = lambda x: a.softmax(x)", "imports attnbook"),
        ("f = lambda x: torch.softmax(x, -1)", "uses softmax"),
        ("f = lambda x: F.log_softmax(x, -1).exp()", "uses log_softmax"),
        ("from torch.nn.functional import softmax as s\nf = lambda x: s(x, -1)", "imports torch"),
        ("import scipy.special as sp\nf = lambda x: sp.softmax(x)", "uses softmax"),
        ("f = lambda x: torch.logsumexp(x, -1)", "uses logsumexp"),
        # named, not called: the reading says "uses", which fits a call, a class and a name
        ("f = torch.softmax", "uses softmax (torch.softmax), the library's answer"),
        # these passed: the logsumexp by other names, and an attention whose weights are x's
        ("f = lambda x: np.exp(x - np.logaddexp.reduce(x, -1, keepdims=True))", "logaddexp"),
        ("f = lambda x: torch.exp(x - torch.logcumsumexp(x, -1)[..., -1:])", "logcumsumexp"),
        ("f = lambda q, k: F.scaled_dot_product_attention(q, k, k)", "scaled_dot_product_att"),
        ("f = lambda x: np.logaddexp2.reduce(x / np.log(2), -1) * np.log(2)", "logaddexp2"),
        ("from torch.nn.attention import flex_attention as a\nf = a.flex_attention", "flex_att"),
        # this passed too: the softmax less the one-hot target, as a gradient
        ("f = lambda x, t: F.cross_entropy(x, t, reduction='sum')", "uses cross_entropy"),
        ("f = lambda x, t: torch.nn.CrossEntropyLoss()(x, t)", "uses CrossEntropyLoss"),
        ("f = lambda x: torch._softmax(x, -1, False)", "private"),
        ("f = lambda x: torch.ops.aten.exp(x)", "torch.ops"),
        ("import importlib\nf = lambda x: importlib.import_module('torch')", "importlib"),
        ("f = lambda x: getattr(torch, 'soft' + 'max')(x, -1)", "computed name"),
        ("f = lambda x: getattr(torch, 'softmax')(x, -1)", "getattr"),
        ("f = lambda x: __import__('torch').softmax(x, -1)", "__import__"),
        ("f = lambda x: eval('torch.exp(x)')", "eval"),
        ("f = lambda x: exec('x = torch.softmax(x, -1)', {'x': x, 'torch': torch})", "uses exec"),
        ("f = lambda x: __builtins__['getattr'](torch, 'exp')(x)", "uses __builtins__"),
        ("f = lambda x: vars(torch)['exp'](x)", "vars"),
        ("f = lambda x: torch.__dict__['exp'](x)", "__dict__"),
        ("import threading\nf = lambda x: threading.Thread(target=print)", "threading"),
        (
            "from concurrent.futures import ThreadPoolExecutor as P\nf = lambda x: P().submit(abs, x)",
            "concurrent",
        ),
        ("import os\nf = lambda x: os.system('true')", "imports os"),
        ("import sys\nf = lambda x: sys.modules['attnbook']", "imports sys"),
        ("f = lambda x: torch.sys.modules['attnbook']", "uses torch.sys"),
        ("f = lambda x: [torch][0]._softmax(x, -1, False)", "[torch][0]._softmax"),
        ("t = torch\nf = lambda x: t._softmax(x, -1, False)", "t._softmax"),
        ("f = lambda x: np.os.system('true')", "uses np.os"),
        ("from torch import sys as s\nf = lambda x: s.setprofile(None)", "imports torch.sys"),
        ("import pkgutil\nf = pkgutil.resolve_name('torch:exp')", "imports pkgutil"),
        ("import pydoc\nf = pydoc.locate('torch.exp')", "imports pydoc"),
        (
            "from torch.package import sys_importer\nf = sys_importer.import_module('sys')",
            "imports torch.package.sys_importer",
        ),
        ("f = lambda x: torch.package.sys_importer", "uses torch.package.sys_importer"),
        ("f = lambda x: torch.utils.cpp_extension.load_inline", "cpp_extension"),
        ("f = lambda x: torch.load('m.pt', weights_only=False)", "weights_only"),
        ("f = lambda x: np.load('a.npy', allow_pickle=True)(x)", "allow_pickle"),
        (  # a string run as code by a module of Python's own
            "import timeit\n\ndef make():\n    d = {}\n"
            "    timeit.timeit(\"d['f'] = __import__('torch')._softmax\", globals={'d': d}, number=1)"
            "\n    return d\n\nf = make()['f']",
            "imports timeit, which the grader does not allow: an answer imports abc, bisect",
        ),
        ("from logging.config import dictConfig\nf = dictConfig", "imports logging.config"),
        ("import string\nf = string.Formatter().get_field('0._softmax', [torch], {})", "string"),
        ("from functools import reduce\nf = reduce(getattr, ['_softmax'], torch)", "getattr on"),
        # a written name is read as the attribute it names: the builtins' exec (this passed)
        ("f = getattr(torch, 'builtins').exec", "uses getattr(torch, 'builtins')"),
        ("f = lambda x: getattr(torch, 'sys').modules", "uses getattr(torch, 'sys')"),
        ("f = getattr(F, '__dict__')", "a dunder attribute"),
        ("import enum\nf = enum.bltns.exec", "uses enum.bltns"),  # this passed too
        # these passed too: operator's getter under torch's name took torch.ops.aten._softmax
        # by a string, and enum wrote members with a __call__ over the grader's functions
        (
            "import torch.autograd.profiler_util as pu\nf = pu.attrgetter('ops.aten._softmax')",
            "uses pu.attrgetter",
        ),
        ("from torch.autograd.profiler_util import methodcaller as m\nf = m", "imports torch"),
        ("import enum\nf = enum.global_enum(enum.Enum('E', ['a'], module='x'))", "global_enum"),
        (
            "from torch.utils.data import dataloader\nf = dataloader.python_multiprocessing",
            "uses dataloader.python_multiprocessing",
        ),
        ("f = lambda x: list(map(getattr, [torch], ['exp']))", "passes getattr on as a value"),
        ("f = torch.jit.CompilationUnit('')", "uses torch.jit"),
        ("f = torch.utils.benchmark.Timer('x')", "torch.utils.benchmark"),
        ("f = torch.overrides.get_testing_overrides()", "torch.overrides"),
        ("f = torch.hub.load('.', 'f', source='local')", "torch.hub"),
        ("from typing import ForwardRef\nf = ForwardRef('x')", "imports typing.ForwardRef"),
        ("def f(x: \"__import__('os')\") -> None:\n    pass", "annotation"),
        ("def f(x) -> list['x']:\n    pass", "annotation"),
        (  # dataclasses writes its __init__ as code from these keys
            "import dataclasses\n\nclass C:\n    __annotations__ = {'x=print()': int}\n\n"
            "f = dataclasses.dataclass(C)",
            "uses __annotations__, a dunder name",
        ),
        (  # the builtins, by name, from a generator's frame
            "g = (x for x in [0])\nf = g.gi_frame.f_builtins['getattr'](torch, '_softmax')",
            "uses g.gi_frame.f_builtins",
        ),
        ("f = type((x for x in [0]).gi_code)", "gi_code"),
        ("import typing\nf = typing.types.FunctionType", "typing.types"),
        ("from torch import *\nf = lambda x: exp(x)", "imports *"),
    ],
)
def test_every_route_to_a_forbidden_call_is_found(code: str, problem: str) -> None:
    found = _one(
        "import numpy as np\nimport torch\nimport torch.nn.functional as F",
        code,
        "check_softmax(f)",
    )
    assert found.problems, code
    assert problem in found.problems[0], found.problems


def test_no_library_that_an_answer_finds_loaded_holds_a_banned_module_or_getter_by_another_name() -> (
    None
):
    # enum's `import builtins as bltns` gave an answer exec through enum.bltns.exec. The
    # modules the sandbox has loaded when an answer runs: the checkers' and the answer's.
    import types
    import warnings

    for name in ANSWER_MODULES:
        importlib.import_module(name)
    # Python's signal as `signal` is allowed (scipy.signal), and torch.multiprocessing and
    # the modules under it are out of reach already: their path holds a banned name
    banned = extract._BANNED_MODULES - {"attnbook", "signal"}
    # ... nor a function of one that reaches an object by a name written in a string, or
    # writes one into a module by its name, under a name that is not banned
    by_name = (operator.attrgetter, operator.methodcaller, enum.global_enum)
    found = []
    for name, module in list(sys.modules.items()):
        parts = name.split(".")
        if module is None or parts[0] not in ANSWER_MODULES or any(p[0] == "_" for p in parts):
            continue
        if set(parts) & extract._BANNED_ATTRIBUTES:
            continue
        for attr, value in list(vars(module).items()):
            if attr[0] == "_" or attr in extract._BANNED_ATTRIBUTES:
                continue
            with warnings.catch_warnings():  # isinstance on a deprecated alias warns
                warnings.simplefilter("ignore", FutureWarning)
                is_module = isinstance(value, types.ModuleType)
            banned_module = is_module and value.__name__.split(".")[0] in banned
            if banned_module or any(value is f for f in by_name):  # profiler_util.attrgetter
                found.append(f"{name}.{attr} ({value.__name__})")
    assert found == []


def test_a_class_pattern_reads_what_it_matches_as_attributes_are_read() -> None:
    # Both passed: a class pattern read torch.ops and then aten._softmax off its subject, by
    # keyword or through a dataclass's fields made from strings (in a class that any object
    # is an instance of), and the private softmax that neither a tripwire nor a guard knows
    # passed with all 6 cases. A builtin's own pattern, or a keyword named, stays allowed.
    def problems(code: str) -> list[str]:
        return extract.forbidden_uses(ast.parse(f"import torch\n{code}"), "softmax")

    keyword = "match torch:\n    case object(ops=o):\n        f = o.aten"
    assert "uses object(ops=...), a private or low-level name" in problems(keyword)[0]
    assert "uses softmax" in problems("match torch:\n    case object(softmax=f):\n        pass")[0]
    positional = (
        "import dataclasses\n\nclass Meta(type):\n    def __instancecheck__(cls, obj):\n"
        "        return True\n\nclass Base(metaclass=Meta):\n    pass\n\n"
        "Ops = dataclasses.make_dataclass('Ops', ['o' + 'ps'], bases=(Base,))\n\n"
        "match torch:\n    case Ops(o):\n        f = o.aten"
    )
    assert "class pattern Ops(...) with a positional pattern" in problems(positional)[0]
    shadowed = "int = list\nmatch torch:\n    case int(o):\n        pass"
    assert "class pattern int(...) with a positional pattern" in problems(shadowed)[0]
    fine = (
        "def f(x):\n    match x:\n        case int(n) | float(n):\n            return n\n"
        "        case torch.Tensor(shape=(n,)):\n            return x\n"
    )
    assert problems(fine) == []


def test_an_equivalent_is_forbidden_only_in_its_own_exercise() -> None:
    tree = ast.parse("import torch\nf = lambda q, k, v: torch.softmax(q @ k.T, -1) @ v")
    assert extract.forbidden_uses(tree, "scaled_dot_product_attention") == []
    assert extract.forbidden_uses(tree, "softmax") != []
    sdpa = ast.parse("import torch.nn.functional as F\nf = F.scaled_dot_product_attention")
    assert extract.forbidden_uses(sdpa, "scaled_dot_product_attention") != []


# ------------------------------------------------------- the chapters' own answers

# exercise -> (a cell that calls a function of the chapter that computes the answer, its name)
CHAPTER_CHEATS = {
    "score_matrix": ("check_score_matrix(score_matrix_matmul)", "score_matrix_matmul"),
    "softmax": ("check_softmax(stable_softmax)", "stable_softmax"),
    "softmax_temperature": (  # which calls naive_softmax, another of the chapter's
        "def my_softmax_temperature(x, temperature):\n"
        "    return softmax_shift_first(x, temperature)\n\n\n"
        "check_softmax_temperature(my_softmax_temperature)",
        "softmax_shift_first",
    ),
    "scaled_dot_product_attention": (
        "check_scaled_dot_product_attention(lambda q, k, v: attention_torch(q, k, v)[0])",
        "attention_torch",
    ),
    "multi_head_attention": (
        "def my_multi_head_attention(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads):\n"
        "    return multi_head_batched(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads)\n\n\n"
        "check_multi_head_attention(my_multi_head_attention)",
        "multi_head_batched",
    ),
    "gpt_num_parameters": ("check_gpt_num_parameters(gpt_parameters)", "gpt_parameters"),
}


def _chapter_with(exercise: str, cell: str) -> tuple[nbformat.NotebookNode, int]:
    """The chapter of ``exercise`` with ``cell`` in place of the exercise's own code cell
    (the stub and the checker call), and that cell's index."""
    (chapter,) = [c for c in catalog.CHAPTERS if exercise in dict(c.exercises)]
    nb = nbformat.read(ROOT / "chapters" / f"{chapter.stem}.ipynb", as_version=4)
    (index,) = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and f"check_{exercise}" in notebooks.checker_calls(c.source)
    ]
    nb.cells[index].source = cell
    return nb, index


def test_every_chapter_equivalent_is_a_function_its_chapter_defines_before_the_exercise() -> None:
    assert set(CHAPTER_CHEATS) == set(extract.CHAPTER_EQUIVALENTS)
    for exercise, equivalents in extract.CHAPTER_EQUIVALENTS.items():
        nb, index = _chapter_with(exercise, "")
        defined = {
            node.name
            for cell in nb.cells[:index]
            if cell.cell_type == "code"
            for node in extract._parse(cell.source).body
            if isinstance(node, ast.FunctionDef)
        }
        assert equivalents.names <= defined, (exercise, sorted(equivalents.names - defined))


@pytest.mark.parametrize("exercise", sorted(CHAPTER_CHEATS))
def test_the_chapters_own_answer_fails_and_a_renamed_copy_of_it_passes(exercise: str) -> None:
    """In the chapter itself: the grader's static check and the notebook's checker refuse a
    call to the chapter's function; its code, copied into functions of the learner's that
    have other names, passes both."""
    cell, name = CHAPTER_CHEATS[exercise]
    nb, _ = _chapter_with(exercise, cell)
    (answer,) = [a for a in extract.extract(nb) if a.exercise == exercise]
    told = f"calls {name}, the chapter's ready-made answer, which this exercise asks you to write"
    assert answer.problems, answer.program
    assert answer.problems[0].startswith(told), answer.problems
    assert f"write the steps in a function of your own; if {name} is" in answer.problems[0]
    checker = getattr(exercises, f"check_{exercise}")

    def verdict(program: str) -> object:  # the program run as a notebook's cells run
        namespace: dict = {"__name__": "__main__"}
        exec(compile(program, f"{exercise}.ipynb", "exec"), namespace)
        return checker(namespace["__attnbook_answer__"])

    refused = verdict(answer.program)
    assert not refused
    assert told in refused.message, refused.message
    copied = answer.program
    for chapters in extract.CHAPTER_EQUIVALENTS[exercise].names:
        copied = re.sub(rf"\b{chapters}\b", f"own_{chapters}", copied)
    assert copied != answer.program
    assert extract.forbidden_uses(ast.parse(copied), exercise) == []
    assert verdict(copied), copied


def test_chapter_7s_module_reading_answer_fails_through_weights_handed_to_it() -> None:
    """Chapter 7's multi_head_by_hand computes the batched multi-head attention from the
    projections of a module: an answer that handed it the four matrices as projections
    passed the checker and the grader."""
    cell = (
        "class Projections:\n    pass\n\n\n"
        "def my_multi_head_attention(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads):\n"
        "    mha = Projections()\n    mha.n_heads = n_heads\n"
        "    mha.q_proj, mha.k_proj = (lambda t: t @ W_Q), (lambda t: t @ W_K)\n"
        "    mha.v_proj, mha.out_proj = (lambda t: t @ W_V), (lambda t: t @ W_O)\n"
        "    return multi_head_by_hand(mha, x_query, x_context, x_context)[0]\n\n\n"
        "check_multi_head_attention(my_multi_head_attention)"
    )
    nb, _ = _chapter_with("multi_head_attention", cell)
    (answer,) = [a for a in extract.extract(nb) if a.exercise == "multi_head_attention"]
    told = "calls multi_head_by_hand, the chapter's ready-made answer"
    assert answer.problems, answer.program
    assert answer.problems[0].startswith(told), answer.problems
    namespace: dict = {"__name__": "__main__"}
    exec(compile(answer.program, "multi_head_attention.ipynb", "exec"), namespace)
    verdict = exercises.check_multi_head_attention(namespace["__attnbook_answer__"])
    assert not verdict
    assert told in verdict.message, verdict.message


def test_the_grader_names_the_chapters_function_that_the_answer_calls() -> None:
    """softmax_divide_first calls stable_softmax, and the grader named stable_softmax (the
    name its walk of the program met first), though the answer called softmax_divide_first:
    the notebook's checker named the right one, and "rename it" pointed at the wrong one."""
    cell = (
        "def my_softmax_temperature(x, temperature):\n"
        "    return softmax_divide_first(x, temperature)\n\n\n"
        "check_softmax_temperature(my_softmax_temperature)"
    )
    nb, _ = _chapter_with("softmax_temperature", cell)
    (answer,) = [a for a in extract.extract(nb) if a.exercise == "softmax_temperature"]
    assert "def stable_softmax" in answer.program  # the function it calls reads it
    assert answer.problems[0].startswith("calls softmax_divide_first, the chapter's"), (
        answer.problems
    )


@pytest.mark.parametrize(
    "learners",
    [
        "def f(x, c, *w):\n    multi_head_batched = lambda *a: 0\n    return multi_head_batched()",
        "def f(x, c, *w):\n    def multi_head_batched():\n        return 0\n"
        "    return multi_head_batched()",
        "def f(x, multi_head_batched, *w):\n    return multi_head_batched",
        "class Heads:\n    def multi_head_batched(self):\n        return 0\n\n"
        "def f(*a):\n    return Heads().multi_head_batched()",
    ],
    ids=["local", "nested function", "parameter", "method"],
)
def test_only_a_global_name_of_the_chapters_function_counts(learners: str) -> None:
    chapter = "import torch\n\ndef multi_head_batched(*a):\n    return torch.zeros(1)"
    alias = _one(
        chapter, "mhb = multi_head_batched\ncheck_multi_head_attention(lambda *a: mhb(*a))"
    )
    assert alias.problems, alias.program
    assert "calls multi_head_batched" in alias.problems[0], alias.problems
    assert _one(chapter, learners, "check_multi_head_attention(f)").problems == ()


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_books_solutions_use_nothing_forbidden(path: Path) -> None:
    codes = [code for _, code in solution_blocks(path) if "check_" in code]
    answers = extract.extract(_nb(IMPORTS, *codes))
    assert answers, path
    for answer in answers:
        assert answer.error == ""
        assert answer.problems == (), (answer.exercise, answer.problems)


# ------------------------------------------------------------------ the catalog


def test_the_catalog_lists_every_chapters_checked_exercises() -> None:
    assert [c.stem for c in catalog.CHAPTERS] == [p.stem for p in CHAPTERS]
    for chapter, path in zip(catalog.CHAPTERS, CHAPTERS, strict=True):
        book = [
            (checker.removeprefix("check_"), exercise.label)
            for exercise in notebooks.exercises(path)
            for checker in exercise.checkers
        ]
        assert list(chapter.exercises) == book, path.stem


def test_the_catalogs_titles_are_the_course_registrys() -> None:
    course = yaml.safe_load((ROOT / "course.yml").read_text(encoding="utf-8"))
    titles = {c["file"].rsplit("/", 1)[-1]: c["title"] for c in course["chapters"]}
    assert {c.stem: c.title for c in catalog.CHAPTERS} == titles


def test_every_exercise_has_a_checker_and_a_list_of_equivalents() -> None:
    for chapter in catalog.CHAPTERS:
        for name, _ in chapter.exercises:
            assert callable(getattr(exercises, f"check_{name}", None)), name
            assert name in extract.LIBRARY_EQUIVALENTS, name


def test_a_chapter_is_found_by_title_then_file_name_then_checkers() -> None:
    softmax = catalog.CHAPTERS[1]
    assert catalog.chapter_for(softmax.title, "x.ipynb", set()) is softmax
    assert catalog.chapter_for("", "02_mine.ipynb", set()) is softmax
    assert catalog.chapter_for("", "homework.ipynb", {"softmax_temperature"}) is softmax
    assert catalog.chapter_for("", "homework.ipynb", set()) is None


def test_patching_a_module_does_not_hide_its_import() -> None:
    found = _one(
        "import numpy as np",
        "np.allclose = lambda *a, **k: True\nx, (y, *z) = 1, (2, 3)",
        "check_softmax(lambda v: np.exp(v) + x + y)",
    )
    assert "import numpy as np" in found.program
    assert "x, (y, *z) = (1, (2, 3))" in found.program  # as ast.unparse writes it


def test_a_private_name_of_the_learners_own_class_is_allowed() -> None:
    code = (
        "import torch\n\nclass Scaled:\n    def __init__(self, s):\n        self._s = s\n\n"
        "    def __call__(self, x):\n        return self._s * x\n\nf = Scaled(2.0)"
    )
    assert extract.forbidden_uses(ast.parse(code), "softmax") == []


def test_every_library_an_answer_may_import_comes_with_the_grader() -> None:
    # An allowed import that the grader's Python lacks turns a right answer into an `error`
    # (ModuleNotFoundError): einops was allowed, and nothing installed it.
    # attnbook's requirements as installed, with its extras: "scipy>=1.10; extra == 'grade'"
    specs = [
        spec
        for spec in importlib.metadata.requires("attnbook") or []
        if re.search(r"extra\s*==", spec) is None or re.search(r"extra\s*==\s*.grade.", spec)
    ]
    installed = {re.match(r"[A-Za-z0-9_.-]+", spec).group().lower() for spec in specs}
    libraries = {name for name in ANSWER_MODULES if name not in sys.stdlib_module_names}
    assert libraries == {"numpy", "torch", "scipy"}
    assert libraries <= installed, (
        f"allowed, not installed by attnbook[grade]: {libraries - installed}"
    )
    assert all(importlib.util.find_spec(name) is not None for name in libraries)
    (problem,) = extract.forbidden_uses(ast.parse("import einops"), "softmax")
    assert problem.startswith("imports einops, which the grader does not allow: an answer imports")
