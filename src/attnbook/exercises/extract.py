"""Take a learner's answer out of a submitted notebook, and read how it computes.

The grader does not trust what a submission's kernel says. It reads the
notebook's *source* instead: for each ``check_<name>(answer)`` call, the
function handed to the checker (a name, a ``lambda``, any expression), and
the definitions that expression needs, gathered from the cells before the
call: imports, and top-level ``def``, ``class`` and assignments, each the last
one before the call (for a name that a statement reads when it runs, the last
one before that statement), with the statements after it that change what it
binds (``d["k"] = v``, ``d.update(...)``, ``@f.register(...)``; not a module's),
following names from definition to definition
(:mod:`symtable` tells a function's own variables from the globals it reads).
The statements of a ``try`` body (and its ``else`` and ``finally``), of a
``with`` body and of an ``if`` whose condition is fixed before it runs count
as top-level, as the notebook ran them (:func:`_ran`); what an ``except``
branch, a loop or an ``if`` on the notebook's values defines is not taken, and
the :class:`Extracted` answer notes it when the answer needs that name. The
grader runs the program without its annotations, so a ``@f.register`` that
takes its type from a plain dotted annotation (``x: np.ndarray``) is written as
``@f.register(np.ndarray)`` (:func:`_registered`; any other is noted).
Nothing else of the notebook is taken: prints, plots, training runs and any
statement that calls a checker stay out. :func:`extract` returns that
program, which the grader runs in a clean sandbox.

The same program is read statically, before it runs (:func:`forbidden_uses`).
It may import only NumPy, PyTorch, SciPy, ``math`` and a few modules
of Python's own that hold no way to run a string as code or to reach an
object by its name (``ANSWER_MODULES`` of :mod:`attnbook.exercises._framework`:
``functools``, ``collections``, ``typing``, ...; ``timeit``, ``logging.config``,
``unittest.mock`` and many more can), and it may not use

- the package itself (``attnbook``: its functions are the answers);
- the exercise's library equivalents (:data:`LIBRARY_EQUIVALENTS`, e.g. any
  ``softmax``, ``log_softmax`` or ``logsumexp`` for the softmax exercise,
  however imported or aliased: the attribute or imported name is what counts);
- the exercise's chapter equivalents (:data:`CHAPTER_EQUIVALENTS`): the
  functions that the chapter's own cells define before the exercise and that
  compute its answer (chapter 7's ``multi_head_batched`` for multi-head
  attention), read as a global name anywhere in the program;
- a private name (``torch._C``, ``F._softmax``, ``t._softmax``; only
  ``self._x`` and ``cls._x`` of the learner's own classes), ``torch.ops``;
- the ways around a static reading: ``__import__``, ``eval``, ``exec``,
  ``compile``, ``getattr``/``setattr`` with a computed name or passed on as
  a value (a written name is read as the attribute it names: ``getattr(torch,
  "sys")`` as ``torch.sys``), ``globals``, ``vars``, ``__dict__`` and other
  dunder attributes and names (``__annotations__``, whose keys ``dataclasses``
  writes into code),
  annotations written as strings (``typing.get_type_hints`` runs them),
  ``sys``/``os``/``builtins``/``gc``/``inspect`` where a library holds them
  (``torch.sys``, ``np.os``, and under other names: ``enum.bltns``), the parts of the array libraries that run a
  string as code, reach an object by its name or load native code
  (``torch.jit``, ``torch.fx``, ``torch.hub``, ``torch.utils.benchmark``,
  ``torch.overrides``, ``cpp_extension``, ``numpy.ctypeslib``, ...), a
  generator's frame or code (``gi_frame.f_builtins``, ``gi_code``), loading
  pickles (``allow_pickle``, ``weights_only`` other than the safe default),
  and ``sys.setprofile``/``sys.settrace``, which the checkers watch calls
  with;
- threads and processes (``threading``, ``multiprocessing``).

A correct answer needs none of these (the book's solutions are checked
against this list by the tests). The same equivalents are also replaced by
tripwires in the process that runs the answer
(:mod:`attnbook.exercises.sandbox`), which catches what a static reading
misses, and every checker refuses them in the learner's notebook too
(:func:`attnbook.exercises._framework.library_guard`); the chapter
equivalents, which live in the notebook and in no module, are refused there
(and in the sandbox) by :func:`attnbook.exercises._framework.chapter_guard`.
"""

from __future__ import annotations

import ast
import copy
import re
import symtable
from collections.abc import Iterable
from dataclasses import dataclass

from attnbook.exercises import notebooks
from attnbook.exercises._framework import ANSWER_MODULES

__all__ = [
    "CHAPTER_EQUIVALENTS",
    "LIBRARY_EQUIVALENTS",
    "ChapterEquivalents",
    "Extracted",
    "extract",
    "forbidden_uses",
]

_SOFTMAX = frozenset(
    {
        "softmax",
        "log_softmax",
        "softmin",
        "Softmax",
        "LogSoftmax",
        "Softmin",
        "logsumexp",
        "logcumsumexp",  # its last entry is the logsumexp
        "logaddexp",  # np.logaddexp.reduce(x, axis=-1) is the logsumexp
        "logaddexp2",  # ... and its base-2 twin, of x / ln 2, times ln 2
        # the gradient of the cross-entropy with respect to the logits is the softmax less
        # the one-hot target (its log-softmax runs in C++, where no tripwire is)
        "cross_entropy",
        "CrossEntropyLoss",
    }
)
_ATTENTION = frozenset(
    {
        "scaled_dot_product_attention",
        "flex_attention",  # torch.nn.attention.flex_attention, which runs eagerly too
        "MultiheadAttention",
        "multi_head_attention_forward",
        "attend",  # attnbook.attention's unchecked core, and its fused twin
        "attend_fused",
        "TransformerEncoderLayer",
        "TransformerDecoderLayer",
        "TransformerEncoder",
        "TransformerDecoder",
        "Transformer",
    }
)

# exercise -> the names (a library function's, a method's, a class's) that compute its answer
LIBRARY_EQUIVALENTS: dict[str, frozenset[str]] = {
    "score_matrix": frozenset({"score_matrix"}),
    "cosine_similarity": frozenset({"cosine_similarity", "CosineSimilarity", "cosine"}),
    # an attention's weights are a softmax: with the identity as keys and values, its output
    "softmax": _SOFTMAX | _ATTENTION,
    "softmax_temperature": _SOFTMAX | _ATTENTION,
    "soft_lookup": _ATTENTION | {"soft_lookup"},
    "hard_lookup": frozenset({"hard_lookup"}),
    "scaled_dot_product_attention": _ATTENTION,
    "self_attention": _ATTENTION | {"self_attention"},
    "cross_attention": _ATTENTION | {"cross_attention"},
    "causal_mask": frozenset({"causal_mask", "generate_square_subsequent_mask"}),
    "padding_mask": frozenset({"padding_mask"}),
    "masked_attention": _ATTENTION | {"masked_attention"},
    "masked_softmax": _ATTENTION | {"masked_softmax"},
    "split_heads": frozenset({"split_heads"}),
    "merge_heads": frozenset({"merge_heads"}),
    "multi_head_attention": _ATTENTION | {"multi_head_attention", "MultiHeadAttention"},
    "sinusoidal_positional_encoding": frozenset({"sinusoidal_positional_encoding"}),
    "apply_rope": frozenset({"apply_rope", "apply_rotary_pos_emb"}),
    "feed_forward": _ATTENTION | {"feed_forward", "FeedForward"},
    "pre_ln_block": frozenset(
        {"pre_ln_block", "TransformerEncoderLayer", "TransformerDecoderLayer"}
    ),
    "gpt_num_parameters": _ATTENTION | {"gpt_num_parameters", "parameters", "GPT"},
    "lr_schedule": frozenset(
        {"lr_at", "LambdaLR", "CosineAnnealingLR", "OneCycleLR", "LinearLR", "SequentialLR"}
    ),
    "answer_loss": frozenset({"answer_loss"}),
    "additive_step": frozenset(
        {
            "additive_step",
            "additive_scores",
            "AdditiveScorer",
            "softmax_with_mask",
            "masked_softmax",
        }
    ),
    "beam_step": frozenset({"beam_step", "generate"}),
    "head_entropy": frozenset({"head_entropy", "entropy", "entr", "Categorical"}),
    "attention_rollout": frozenset({"attention_rollout"}),
    "online_softmax_update": _ATTENTION | {"online_softmax_update", "tiled_attention"},
    "sliding_window_mask": frozenset({"sliding_window_mask"}),
    "kv_cache_bytes": frozenset({"kv_cache_bytes", "KVCache"}),
    "rms_norm": frozenset({"rms_norm", "RMSNorm", "layer_norm", "LayerNorm", "normalize"}),
    "bpe_merge": frozenset({"bpe_merge", "merge_pair", "BPETokenizer"}),
}


@dataclass(frozen=True)
class ChapterEquivalents:
    """The functions that a chapter's own cells define before one of its exercises and that
    compute the exercise's answer: a learner's notebook holds them, ready to be called.

    No module holds them, so they are known by their names. A learner's function of another
    name passes, even with the chapter's code copied into it: the exercise is to write the
    steps, and starting from the chapter's is a way to learn them; only calling the
    chapter's ready-made answer does not count. A learner's own helper that has one of
    these names is told to rename it.
    """

    names: frozenset[str]  # the functions' names, as the chapter defines them
    asks: str  # how the exercise asks for the answer instead: "from its weight matrices"

    def problem(self, name: str) -> str:
        """What an answer that calls ``name`` is told: a clause, "calls ...", without a stop."""
        return (
            f"calls {name}, the chapter's ready-made answer, which this exercise asks you "
            f"to write yourself, {self.asks}"
        )

    def hint(self, name: str) -> str:
        """What to do instead: a clause, without a full stop."""
        return (
            f"write the steps in a function of your own; if {name} is a helper of yours, rename it"
        )


# Chapter 2's softmaxes, the naive one too: these exercises refuse every library softmax,
# stable or not, and softmax_divide_first calls stable_softmax.
_CH02_SOFTMAXES = frozenset(
    {"naive_softmax", "stable_softmax", "softmax_divide_first", "softmax_shift_first"}
)

# exercise -> the functions of its chapter's cells, before the exercise, that compute its answer
# (tests/exercises/test_grade_extract.py checks that the chapter defines each one there). Not
# listed: chapter 3's my_soft_lookup, which calls attnbook.softmax (refused already) and whose
# "my_" is the name a learner gives an answer; helpers that compute a part of an answer
# (chapter 9's gelu and layer_norm); functions of other notebooks, which a notebook lacks.
CHAPTER_EQUIVALENTS: dict[str, ChapterEquivalents] = {
    "score_matrix": ChapterEquivalents(
        frozenset({"score_matrix_loops", "score_matrix_rows", "score_matrix_matmul"}),
        "as one matrix product",
    ),
    "softmax": ChapterEquivalents(_CH02_SOFTMAXES, "with NumPy"),
    "softmax_temperature": ChapterEquivalents(_CH02_SOFTMAXES, "with NumPy"),
    "scaled_dot_product_attention": ChapterEquivalents(
        frozenset({"attention_loop", "attention_numpy", "attention_torch", "attention_einsum"}),
        "with PyTorch's operations",
    ),
    # multi_head_by_hand reads the weights of a module's projections, which an answer can
    # build from the four matrices
    "multi_head_attention": ChapterEquivalents(
        frozenset({"multi_head_loop", "multi_head_batched", "multi_head_by_hand"}),
        "from its weight matrices",
    ),
    "gpt_num_parameters": ChapterEquivalents(
        frozenset({"gpt_parameters"}), "from the architecture"
    ),
}

_BANNED_MODULES = frozenset(
    {
        "attnbook",
        "importlib",
        "builtins",
        "sys",
        "os",
        "gc",
        "inspect",
        "ctypes",
        "threading",
        "_thread",
        "multiprocessing",
        "concurrent",
        "subprocess",
        "signal",
        "socket",
        "pickle",
        "marshal",
        "operator",
        "code",
        "runpy",
        "shutil",
        "pathlib",
        "io",
        "pkgutil",
        "pydoc",
    }
)
# The banned modules as attributes of a library that imported them (torch.sys, np.os), but
# scipy.signal, a module of signal processing, not Python's signal.
_BANNED_ATTRIBUTES = _BANNED_MODULES - {"signal"}
# ... and the parts of the array libraries that run a string as code, reach an object by its
# name, hand out the library's functions in bulk, load native code, or switch off the
# checkers' watch on the calls (sys.setprofile, sys.settrace): as attributes and in imports.
_BANNED_ATTRIBUTES |= {
    "import_module",
    "resolve_name",
    "sys_importer",
    "setprofile",
    "settrace",
    "cpp_extension",
    "load_inline",
    "load_library",
    "jit",  # torch.jit.CompilationUnit compiles TorchScript from a string
    "fx",  # torch.fx builds and runs code from a graph of names
    "hub",  # torch.hub.load runs a hubconf.py
    "package",  # torch.package imports from an archive
    "benchmark",  # torch.utils.benchmark.Timer runs a string, like timeit
    "overrides",  # torch.overrides lists every torch function, private ones too
    "f2py",
    "ctypeslib",
    "extbuild",  # numpy.testing.extbuild compiles C from a string
    "LowLevelCallable",
    # the banned modules under the names some libraries import them as
    "bltns",  # enum's builtins (exec, eval, __import__)
    "mp",  # multiprocessing, in torch.cuda.tunable
    "python_multiprocessing",  # in torch.utils.data.dataloader
    "reducer",  # multiprocessing.reduction (a pickle's loads), in torch.multiprocessing
    # ... and what reaches an object by a name written in a string, or writes one into a
    # module by its name: operator's getters, which torch.autograd.profiler_util holds
    # (attrgetter("ops.aten._softmax")(torch)), and enum's global_enum, which writes an
    # enum's members into the module its __module__ names (the grader's own: a member that
    # the grader then calls in place of its function)
    "attrgetter",
    "methodcaller",
    "global_enum",
    "ForwardRef",  # typing evaluates a forward reference's string
    "get_type_hints",
    # a generator's or a traceback's frame holds the builtins (getattr, __import__, eval) by
    # name, and a code object can be rebuilt into any code: neither has a dunder name
    "gi_frame",
    "gi_code",
    "cr_frame",
    "cr_code",
    "ag_frame",
    "ag_code",
    "tb_frame",
    "f_globals",
    "f_builtins",
    "f_locals",
    "f_back",
    "f_code",
    "co_code",
    "types",  # typing.types.CodeType, FunctionType
    "CodeType",
    "FunctionType",
    "as_strided",  # a view of any memory, past the array's own
}
# keyword -> the only value allowed: a pickle can import any object by its name
_SAFE_KEYWORDS = {"allow_pickle": False, "weights_only": True}
_BANNED_CALLS = frozenset(
    {
        "__import__",
        "eval",
        "exec",
        "compile",
        "globals",
        "locals",
        "vars",
        "open",
        "breakpoint",
        "input",
        "setattr",
        "delattr",
        "exit",
        "quit",
        "memoryview",
        "get_ipython",
    }
)
_ALLOWED_DUNDERS = frozenset({"__name__", "__doc__", "__init__", "__call__"})
_ANSWER = "__attnbook_answer__"  # the name the extracted program binds the answer to
_MAGIC = re.compile(r"^\s*[%!]")


@dataclass(frozen=True)
class Extracted:
    """The answer to one exercise, taken from a notebook's source."""

    exercise: str  # "softmax"
    cell: int  # index of the cell that calls the checker
    program: str  # the definitions it needs, then `__attnbook_answer__ = <the expression>`
    problems: tuple[str, ...]  # forbidden uses found statically ("" program if it cannot run)
    error: str = ""  # why no program could be taken ("" when it could)
    # definitions of a name the answer needs that the program could not take (inside an
    # `if` whose condition only running it decides), for the grade's message
    notes: tuple[str, ...] = ()


def _parse(source: str) -> ast.Module:
    """A cell's code, IPython magics (``%``, ``!`` lines) blanked out."""
    return ast.parse("\n".join("" if _MAGIC.match(line) else line for line in source.splitlines()))


def _globals_read(node: ast.AST) -> set[str]:
    """The global names a statement or expression reads (its functions' locals left out)."""
    source = ast.unparse(node)
    try:
        table = symtable.symtable(source, "<answer>", "exec")
    except SyntaxError:  # e.g. a bare `return` would be caught earlier by ast.parse
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names: set[str] = set()

    def visit(t: symtable.SymbolTable, top: bool) -> None:
        for symbol in t.get_symbols():
            if symbol.is_referenced() and (top or symbol.is_global()):
                names.add(symbol.get_name())
        for child in t.get_children():
            visit(child, False)

    visit(table, True)
    return names


def _reads_split(node: ast.AST) -> tuple[set[str], set[str]]:
    """The global names a statement reads when it runs (its own scope's), and those that
    only a function, lambda or comprehension that it makes reads (their globals)."""
    source = ast.unparse(node)
    try:
        table = symtable.symtable(source, "<answer>", "exec")
    except SyntaxError:
        return set(), _globals_read(node)
    now = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    deferred: set[str] = set()

    def visit(t: symtable.SymbolTable) -> None:
        for symbol in t.get_symbols():
            if symbol.is_referenced() and symbol.is_global():
                deferred.add(symbol.get_name())
        for child in t.get_children():
            visit(child)

    for child in table.get_children():
        visit(child)
    return now, deferred


def _binds(statement: ast.stmt) -> set[str]:
    """The top-level names a definition statement binds; empty for any other statement."""
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {
            (alias.asname or alias.name).split(".")[0]
            for alias in statement.names
            if alias.name != "*"
        }
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {name for target in targets for name in _target_names(target)}
    return set()


def _changes(statement: ast.stmt) -> set[str]:
    """The top-level names whose object a statement changes without binding them: an item or
    attribute assigned (``d["k"] = v``, ``cfg.axis += 1``), a method called as a statement
    (``d.update(k=v)``, ``layer.eval()``), a definition registered by a decorator that is a
    method (``@dispatch.register(np.ndarray)``); empty for any other statement."""
    if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        parts = [t for target in targets for t in _target_parts(target)]
        return {r for t in parts if isinstance(t, ast.Attribute | ast.Subscript) if (r := _base(t))}
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        return {r} if isinstance(func, ast.Attribute) and (r := _base(func)) else set()
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        decorators = [d.func if isinstance(d, ast.Call) else d for d in statement.decorator_list]
        return {r for d in decorators if isinstance(d, ast.Attribute) if (r := _base(d))}
    return set()


def _target_parts(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [part for element in target.elts for part in _target_parts(element)]
    if isinstance(target, ast.Starred):
        return _target_parts(target.value)
    return [target]


def _base(node: ast.expr) -> str | None:
    """The name that an item or attribute chain starts from: ``d`` of ``d["k"].x``."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _target_names(target: ast.expr) -> set[str]:
    """Names an assignment target binds: ``x``, ``x, (y, *z)``; not ``np.x`` or ``d[k]``."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return {name for element in target.elts for name in _target_names(element)}
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def _calls_a_checker(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and (getattr(n.func, "id", "") or getattr(n.func, "attr", "")).startswith("check_")
        for n in ast.walk(node)
    )


def extract(nb: object) -> list[Extracted]:
    """The answer of every ``check_<name>(answer)`` call of a notebook, in order.

    An exercise checked twice is taken from its last call (the one a learner
    sees last). An answer whose cell does not parse, or whose checker is
    called without an argument, comes back with an ``error`` and no program.

    Args:
        nb: a notebook as nbformat reads it.

    Returns:
        One :class:`Extracted` per exercise.
    """
    statements: list[ast.stmt] = []  # every top-level statement of the cells that parse
    found: dict[str, Extracted] = {}
    for index, cell in enumerate(nb.cells):  # type: ignore[attr-defined]
        if cell.cell_type != "code":
            continue
        names = [c.removeprefix("check_") for c in notebooks.checker_calls(cell.source)]
        try:
            tree = _parse(cell.source)
        except SyntaxError as exc:
            for name in names:
                message = (
                    f"cell {index + 1} does not parse: SyntaxError: {exc.msg} (line {exc.lineno})"
                )
                found[name] = Extracted(name, index, "", (), message)
            continue
        for statement in (s for top in tree.body for s in _ran(top)):
            for call in (n for n in ast.walk(statement) if isinstance(n, ast.Call)):
                func = call.func
                checker = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if not checker.startswith("check_") or len(checker) == len("check_"):
                    continue
                name = checker.removeprefix("check_")
                if not call.args:
                    found[name] = Extracted(
                        name,
                        index,
                        "",
                        (),
                        f"cell {index + 1} calls {checker}() without a function",
                    )
                    continue
                found[name] = _program(name, index, call.args[0], statements)
            statements.append(statement)
    return list(found.values())


def _constant_test(test: ast.expr) -> bool | None:
    """The truth of an ``if``'s condition where it is fixed before the notebook runs: a
    constant (``if True:``, ``if 0:``) or ``__name__ == "__main__"`` (true in a notebook, as
    in the grader's program); ``None`` where only running it decides."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    main = ast.Compare(ast.Name("__name__", ast.Load()), [ast.Eq()], [ast.Constant("__main__")])
    return True if ast.dump(test) == ast.dump(main) else None


def _ran(statement: ast.stmt) -> list[ast.stmt]:
    """The statements that running a top-level ``statement`` runs, where that is decided
    before it runs: a ``try``'s body, ``else`` and ``finally`` (not its ``except``
    branches, which run only when the body fails), a ``with``'s body, the branch of an
    ``if`` whose condition is :func:`_constant_test`'s, each read the same way; any other
    statement (an ``if`` that only running decides, a loop) as it is, whole, so that
    nothing it binds is taken."""
    if isinstance(statement, ast.Try | ast.TryStar):
        parts = [*statement.body, *statement.orelse, *statement.finalbody]
    elif isinstance(statement, ast.With):
        parts = statement.body
    elif isinstance(statement, ast.If) and (truth := _constant_test(statement.test)) is not None:
        parts = statement.body if truth else statement.orelse
    else:
        return [statement]
    return [ran for part in parts for ran in _ran(part)]


_KEPT_WHOLE = {
    ast.If: "an `if` whose condition only running the notebook decides",
    ast.For: "a `for` loop",
    ast.While: "a `while` loop",
    ast.Match: "a `match`",
    ast.Try: "an `except` branch",
    ast.TryStar: "an `except` branch",
    ast.With: "a `with`",
}


def _untaken(statement: ast.stmt, name: str) -> str | None:
    """Where a statement that :func:`_ran` keeps whole (an ``if`` whose condition only
    running it decides, a loop) binds ``name`` in the notebook's namespace, which the
    program never takes from it: its kind (``"a `for` loop"``), else ``None``."""
    kind = next((k for t, k in _KEPT_WHOLE.items() if isinstance(statement, t)), None)
    if kind is None:
        return None
    blocks = [statement]
    while blocks:
        block = blocks.pop()
        if not isinstance(block, tuple(_KEPT_WHOLE)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for inner in getattr(block, field, []):
                if isinstance(inner, ast.ExceptHandler | ast.match_case):
                    blocks += inner.body
                elif name in _binds(inner):
                    return kind
                else:
                    blocks.append(inner)
    return None


def _is_get_device(statement: ast.stmt) -> bool:
    """``device = attnbook.get_device()`` (or ``get_device()``): a chapter's set-up line."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return False
    value = statement.value
    if not isinstance(statement.targets[0], ast.Name) or not isinstance(value, ast.Call):
        return False
    func = value.func
    named = isinstance(func, ast.Name) and func.id == "get_device"
    dotted = isinstance(func, ast.Attribute) and ast.unparse(func) in {
        "attnbook.get_device",
        "attnbook.runtime.get_device",
    }
    return (named or dotted) and not value.args and not value.keywords


def _needed_only(statement: ast.stmt, needed: set[str]) -> list[ast.stmt]:
    """``statement`` as the program takes it: an import cut to the names the answer needs
    (so that what it is told names what it uses), a ``get_device()`` line bound to the CPU
    (the grader runs every answer there), anything else as it is."""
    if isinstance(statement, ast.Import | ast.ImportFrom):
        trimmed = [a for a in statement.names if (a.asname or a.name).split(".")[0] in needed]
        if isinstance(statement, ast.ImportFrom):
            return [ast.ImportFrom(statement.module, trimmed, statement.level)]
        return [ast.Import(trimmed)]
    if _is_get_device(statement):
        target = statement.targets[0].id  # type: ignore[attr-defined]
        return ast.parse(f"import torch\n{target} = torch.device('cpu')").body
    return [statement]


def _dotted_name(node: ast.expr | None) -> bool:
    """Whether ``node`` is a plain name or a chain of attributes of one (``np.ndarray``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _registered(statement: ast.stmt) -> tuple[ast.stmt, str | None]:
    """``statement`` with ``@f.register`` (no type given), on a function whose first
    parameter's annotation is a plain dotted name (``x: np.ndarray``), written as
    ``@f.register(np.ndarray)``: the program runs with its annotations removed (none is
    evaluated), and ``register`` would read the type from one. For any other annotation, a
    note for the grade's message saying to write the type in ``register(...)``."""
    if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        return statement, None
    bare = [
        i
        for i, d in enumerate(statement.decorator_list)
        if isinstance(d, ast.Attribute) and d.attr == "register"
    ]
    if not bare:
        return statement, None
    arguments = [*statement.args.posonlyargs, *statement.args.args]
    annotation = arguments[0].annotation if arguments else None
    if not _dotted_name(annotation):
        register = ast.unparse(statement.decorator_list[bare[0]])
        shown = "" if annotation is None else f" `{ast.unparse(annotation)}`"
        return statement, (
            f"`@{register}` on `{statement.name}` takes its type from the annotation"
            f"{shown} of its first parameter, which the grader does not evaluate (it runs "
            f"answers without their annotations); write the type in the call: "
            f"`@{register}(np.ndarray)`"
        )
    rewritten = copy.deepcopy(statement)
    for i in bare:
        decorator = rewritten.decorator_list[i]
        rewritten.decorator_list[i] = ast.Call(decorator, [copy.deepcopy(annotation)], [])
    return rewritten, None


def _program(name: str, cell: int, answer: ast.expr, before: list[ast.stmt]) -> Extracted:
    """The definitions ``answer`` needs among the statements ``before`` it, and the answer.

    A name is looked for before the call, but a name that a statement of the program reads
    when it runs (``STEPS["norm"] = _norm``, not inside a function or lambda that it makes)
    is looked for before that statement: a definition of it further down, which the
    notebook ran afterwards, does not change what that statement did."""
    chosen: set[int] = set()
    notes: list[str] = []
    end = len(before)
    wanted = [(read, end) for read in _globals_read(answer)]  # (name, looked for before)
    seen: set[tuple[str, int]] = set()

    def reads(statement: ast.stmt, index: int) -> list[tuple[str, int]]:
        if not isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr):
            return [(read, end) for read in _globals_read(statement)]
        now, deferred = _reads_split(statement)
        return [(read, index) for read in now] + [(read, end) for read in deferred]

    while wanted:
        needed, limit = wanted.pop()
        if (needed, limit) in seen:
            continue
        seen.add((needed, limit))
        for i in range(limit - 1, -1, -1):  # the last definition before the call (or read)
            statement = before[i]
            if (where := _untaken(statement, needed)) is not None:
                note = (
                    f"a definition of `{needed}` inside {where} was not taken: the grader "
                    "takes only definitions that run whatever the notebook's values (at the "
                    "top level of a cell, or in a `try` or `with` body); define it there"
                )
                if note not in notes:
                    notes.append(note)
            if needed in _binds(statement) and not _calls_a_checker(statement):
                if i not in chosen:
                    chosen.add(i)
                    if not _is_get_device(statement):  # bound to the CPU: reads nothing
                        wanted += reads(statement, i)
                # ... and what changes it after that, before the call: SETTINGS["axis"] = -1
                # (not a module's: np.random.seed(0), torch.set_num_threads(1) stay out)
                imported = isinstance(statement, ast.Import | ast.ImportFrom)
                for j in range(i + 1, limit) if not imported else ():
                    later = before[j]
                    changes = needed in _changes(later) and not _calls_a_checker(later)
                    if changes and j not in chosen:
                        chosen.add(j)
                        wanted += reads(later, j)
                break
        else:  # a builtin, or a name a star import may bind: take those imports along
            chosen |= {
                i
                for i, statement in enumerate(before)
                if isinstance(statement, ast.ImportFrom)
                and any(alias.name == "*" for alias in statement.names)
            }
    names = {needed for needed, _ in seen} | {"*"}
    body = []
    for i in sorted(chosen):
        statement, note = _registered(before[i])
        if note is not None:
            notes.append(note)
        body += _needed_only(statement, names)
    assign = ast.Assign([ast.Name(_ANSWER, ast.Store())], answer, lineno=0)
    module = ast.Module([*body, assign], type_ignores=[])
    program = ast.unparse(ast.fix_missing_locations(module))
    return Extracted(name, cell, program, tuple(forbidden_uses(module, name)), "", tuple(notes))


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def forbidden_uses(tree: ast.AST, exercise: str) -> list[str]:
    """What ``tree`` (an extracted program) uses that the exercise forbids, each once, in order.

    Args:
        tree: the program's syntax tree.
        exercise: its exercise's name (a key of :data:`LIBRARY_EQUIVALENTS`; another name
            forbids only the general list).

    Returns:
        Short descriptions, e.g. ``"uses softmax (torch.softmax), the library's answer"``;
        a chapter equivalent first (``multi_head_loop`` also imports the package's attention:
        the chapter's function is what the answer should not have called).
    """
    equivalents = LIBRARY_EQUIVALENTS.get(exercise, frozenset()) | {exercise}
    found: list[str] = []
    chapter = CHAPTER_EQUIVALENTS.get(exercise)
    if chapter is not None:
        # a global name: the chapter's function, or an alias of it (f = multi_head_batched);
        # not a local variable, a parameter or a method of the learner's that has that name
        read = _globals_read(tree) & chapter.names
        # the last statements first: the answer comes last in the program, so the name it
        # calls is named before one that the chapter's function it calls reads in turn
        # (softmax_divide_first calls stable_softmax: the answer called the first)
        for statement in reversed(getattr(tree, "body", [tree])):
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and node.id in read:
                    found.append(f"{chapter.problem(node.id)}: {chapter.hint(node.id)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            base = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            for alias in node.names:
                full = f"{base}.{alias.name}".strip(".") if base else alias.name
                found += _import_problems(full, alias.name, equivalents, node)
    found += _string_annotations(tree)
    bound = _bound_names(tree)  # a builtin's name that the program binds is not the builtin
    named_getattr = {  # getattr(obj, "name") calls: their name is read below
        id(node.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"getattr", "hasattr"}
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _BANNED_CALLS | {"__builtins__"}:
            found.append(f"uses {node.id}, which the grader does not allow in an answer")
        elif (
            isinstance(node, ast.Name)
            and node.id.startswith("__")
            and node.id.endswith("__")
            and node.id not in _ALLOWED_DUNDERS | {_ANSWER}
        ):  # __annotations__ = {...} in a class body: dataclasses turns its keys into code
            found.append(f"uses {node.id}, a dunder name the grader does not allow")
        elif isinstance(node, ast.Name) and node.id in {"getattr", "hasattr"}:
            if id(node) not in named_getattr:  # reduce(getattr, names, torch), map(getattr, ...)
                found.append(f"passes {node.id} on as a value: call it with a written name")
        elif isinstance(node, ast.keyword) and node.arg in _SAFE_KEYWORDS:
            safe = _SAFE_KEYWORDS[node.arg]
            if not (isinstance(node.value, ast.Constant) and node.value.value is safe):
                found.append(f"passes {node.arg}=..., which loads pickles: only {safe} is allowed")
        elif isinstance(node, ast.Attribute):
            found += _attribute_problems(node.attr, _dotted(node), _root(node), equivalents)
        elif isinstance(node, ast.MatchClass):
            found += _class_pattern_problems(node, equivalents, bound)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"getattr", "hasattr"}:
            if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
                found.append(f"calls {node.func.id} with a computed name")  # type: ignore[attr-defined]
            else:  # the written name, read as the attribute it names: getattr(torch, "sys")
                attr = str(node.args[1].value)
                dotted = _dotted(node)
                problems = _attribute_problems(attr, dotted, _root(node.args[0]), equivalents)
                if attr.startswith("_"):  # getattr(self, "_w") too: write self._w
                    problems = problems or [f"calls {dotted}, a private or dunder name"]
                found += problems
    return list(dict.fromkeys(found))


def _attribute_problems(
    attr: str, dotted: str, root: str | None, equivalents: Iterable[str]
) -> list[str]:
    """What an attribute ``attr`` (written ``dotted``, read off the name ``root``) uses that
    the exercise forbids: the same for ``obj.attr`` as for ``getattr(obj, "attr")``."""
    if attr in _BANNED_ATTRIBUTES:
        return [f"uses {dotted}, which the grader does not allow in an answer"]
    if attr in equivalents:
        return [f"uses {attr} ({dotted}), the library's answer to this exercise"]
    if attr.startswith("__") and attr not in _ALLOWED_DUNDERS:
        return [f"uses {dotted}, a dunder attribute the grader does not allow"]
    # a private name of the learner's own class, self._w, is fine; any other
    # (torch._softmax, t._softmax with t = torch, [torch][0]._softmax) is not
    if attr == "ops" or (
        attr.startswith("_") and not attr.startswith("__") and root not in {"self", "cls"}
    ):
        return [f"uses {dotted}, a private or low-level name (only self._x is allowed)"]
    return []


# The classes whose pattern takes one positional pattern, matched against the subject itself
# (case int(n)), not an attribute of it
_SELF_MATCHING = frozenset(
    {
        "bool",
        "bytearray",
        "bytes",
        "dict",
        "float",
        "frozenset",
        "int",
        "list",
        "set",
        "str",
        "tuple",
    }
)


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name that ``tree`` binds anywhere: assigned, defined, imported, a parameter, a
    pattern's capture, an exception caught ``as`` a name."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.MatchAs | ast.MatchStar | ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _class_pattern_problems(
    node: ast.MatchClass, equivalents: Iterable[str], bound: set[str]
) -> list[str]:
    """What a class pattern reads off its subject (any object: a module too): each keyword
    pattern's attribute by its name, read as ``obj.attr`` is; each positional pattern's by
    the name that the class's ``__match_args__`` holds, a string that no static reading sees
    (a dataclass's field made from a string, in a class that any object is an instance of
    through its metaclass or ``abc``'s ``register``), so positional patterns are allowed only
    in the builtins' own (``case int(n)``), which match the subject itself."""
    cls = _dotted(node.cls)
    found = []
    for attr in node.kwd_attrs:
        found += _attribute_problems(attr, f"{cls}({attr}=...)", None, equivalents)
    builtin = isinstance(node.cls, ast.Name) and node.cls.id in _SELF_MATCHING - bound
    if node.patterns and not builtin:
        found.append(
            f"matches the class pattern {cls}(...) with a positional pattern, which reads an "
            "attribute named in a string (its __match_args__): name the attribute, "
            f"{cls}(name=...)"
        )
    return found


def _dotted(node: ast.expr) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - ast.unparse handles every expression
        return getattr(node, "attr", "?")


def _string_annotations(tree: ast.AST) -> list[str]:
    """Type annotations written as strings: ``typing.get_type_hints`` (and
    ``functools.singledispatch``, which calls it) would run them as code."""
    annotations: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
    return [
        f"writes the annotation {part.value!r} as a string: write the type itself"
        for annotation in annotations
        if annotation is not None
        for part in ast.walk(annotation)
        if isinstance(part, ast.Constant) and isinstance(part.value, str)
    ]


def _import_problems(full: str, name: str, equivalents: Iterable[str], node: ast.stmt) -> list[str]:
    parts = full.split(".")
    if parts[0] in _BANNED_MODULES or set(parts[1:]) & _BANNED_ATTRIBUTES:
        return [f"imports {full}, which the grader does not allow in an answer"]
    if parts[0] not in ANSWER_MODULES:
        allowed = ", ".join(sorted(ANSWER_MODULES - {"__future__"}))
        return [f"imports {full}, which the grader does not allow: an answer imports {allowed}"]
    if name == "*":
        return [f"imports * from {full.rsplit('.', 1)[0]}: name what you import"]
    if any(p.startswith("_") for p in parts) or "ops" in parts:
        return [f"imports {full}, a library's private or low-level name"]
    if set(parts) & set(equivalents):
        return [f"imports {full}, the library's answer to this exercise"]
    return []
