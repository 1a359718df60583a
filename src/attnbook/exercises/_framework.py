"""The machinery behind every ``check_<name>`` function.

A checker runs a learner's function on hidden cases, compares each result
with the package's reference implementation, and returns a :class:`Verdict`
whose text is short: pass, or the first failing case with what was expected,
what came back and a hint. It never shows a traceback wall and never shows the
reference code.

Hints are written per *mistake*, not only per case: a checker lists the
typical wrong answers of its exercise as :class:`Mistake` objects (each one a
small function that makes that mistake), and when a case fails, the result is
compared with what each mistake returns on the same inputs; a match names the
mistake, says what it looks like and where to look. A result of the wrong shape that
no known mistake explains gets a hint about its shape instead (the shape asked for, in the
exercise's letters, and whether the numbers are right in another arrangement); only
otherwise does the case's own hint show. A *guard* checks *how* the answer
computes (e.g. no Python loop, no call to the library function the exercise
asks you to write), since such answers return the right numbers. Every
checker also gets :func:`library_guard`: no call to the exercise's library
equivalent (its list is the grader's,
``attnbook.exercises.extract.LIBRARY_EQUIVALENTS``), :func:`chapter_guard`: no
call to a function of the chapter's own cells that computes the answer
(``CHAPTER_EQUIVALENTS``, e.g. chapter 7's ``multi_head_batched``), and refuses
the checkers' own functions (:func:`no_checker_internals`), the package itself,
which the grader runs answers without (:func:`no_package`), and an answer
that changes its inputs in place (:func:`changed_inputs`), which can return
the right numbers too. The guards watch the answer's calls with ``sys``'s profile
and trace hooks; an answer that switches them off fails.

For graders: :func:`checker_spec` hands over what a checker passes to
:func:`run_cases` (reference, cases, tolerances, mistakes, guard) without
running it, and :func:`seeded_args` draws new values for a case;
``python -m attnbook.grade`` runs learners' answers on those in a sandbox and
compares the results itself. A :class:`Verdict` is a plain value: nothing a
checker says in a learner's kernel is read by the grader.
"""

from __future__ import annotations

import _lsprof
import contextlib
import contextvars
import copy
import dataclasses
import dis
import functools
import inspect
import itertools
import sys
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType, ModuleType

import numpy as np
import torch

__all__ = [
    "Case",
    "CheckSpec",
    "Mistake",
    "RefusedResult",
    "Verdict",
    "all_of",
    "changed_inputs",
    "chapter_guard",
    "checker_spec",
    "differentiable",
    "forbid_calls",
    "gradient_problem",
    "library_guard",
    "library_softmaxes",
    "no_checker_internals",
    "no_package",
    "no_python_loops",
    "prime_reference",
    "returns_tensor",
    "run_cases",
    "seeded_args",
    "share_primed",
    "snapshot",
]

_MAX_SHOWN = 24  # arrays with more entries are summarised, not printed


@dataclass(frozen=True)
class Case:
    """One hidden test case of an exercise."""

    name: str  # what the case exercises, shown when it fails, e.g. "large scores (1e4)"
    make_args: Callable[[], tuple]  # builds fresh inputs each time (learners may mutate them)
    hint: str  # one sentence shown when this case fails; points at the idea, not the code
    # The grader's inputs of the same kind, from its random generator (seeded_args). For cases
    # whose inputs are integers (sizes, counts, ids), which perturbing floats cannot change;
    # None: the grader perturbs make_args()'s floating-point values instead.
    draw: Callable[[np.random.Generator], tuple] | None = None


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer of an exercise, recognised by what it returns."""

    name: (
        str  # what the mistake is, e.g. "the arg-max of cosine similarity, not of the dot product"
    )
    answer: Callable  # a function that makes exactly this mistake (same signature as the exercise)
    hint: str  # what it looks like and what to look at instead


Guard = Callable[[Callable[[], object]], tuple[object, str | None]]
"""Runs a thunk that calls the learner's function; returns ``(result, problem or None)``."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of a checker: truthy when every hidden case passed."""

    exercise: str  # name of the exercise, e.g. "softmax"
    passed: bool  # every case passed
    attempted: bool  # False while the stub still raises NotImplementedError
    n_cases: int  # number of hidden cases
    message: str  # the text shown to the learner

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message

    __str__ = __repr__


class RefusedResult(ValueError):
    """What a checker's wrapper raises when it refuses what the answer *returned* (float32
    weights for float64 scores, a state of the wrong shape), once the answer's code is done:
    its message is a clause that starts with "returned", and the verdict tells it so, where an
    error that the answer's code raised is told as "raised ...". A ``ValueError``, for code
    that catches one."""


def randint(rng: np.random.Generator, low: int, high: int) -> int:
    """A whole number in ``[low, high]``, both ends included: for a case's ``draw``."""
    return int(rng.integers(low, high, endpoint=True))


def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Standard-normal float64 values of ``shape``, times ``scale``, drawn from a generator of
    their own seeded with ``seed`` (the global RNG is untouched): the hidden cases' inputs.

    These draws must never change: stored notebook outputs and the grader depend on them.
    """
    values = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return values if scale == 1.0 else scale * values


def _to_numpy(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=float)


def _show(x: np.ndarray, like: object = None) -> str:
    """``x`` printed to 4 decimals; as whole numbers where ``like``, the value it was read from,
    holds integers (a count reads 809856, not 809856.)."""
    if x.size > _MAX_SHOWN:
        return f"array of shape {x.shape} (too large to print)"
    if like is not None and _kind(like) in "iu" and np.all(np.abs(x) < 2**62):
        x = x.astype(np.int64)
    return np.array2string(x, precision=4, suppress_small=True, separator=", ")


def _a_type(value: object) -> str:
    """``value``'s type with its article: "a list", "an int", "an ndarray"."""
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' or name == 'ndarray' else 'a'} {name}"


def _fmt_shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _is_bool(x: object) -> bool:
    if isinstance(x, torch.Tensor):
        return x.dtype == torch.bool
    return isinstance(x, (np.ndarray, np.bool_)) and np.asarray(x).dtype == np.bool_


def _compare_bool(got: object, expected: object) -> str | None:
    """Masks are compared exactly, and must be boolean (``True`` = may attend)."""
    if not _is_bool(got):
        kind = f"dtype {got.dtype}" if hasattr(got, "dtype") else f"a {type(got).__name__}"
        return f"returned {kind}, expected a boolean mask (dtype bool, True = may attend)"
    g = got.detach().to("cpu").numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    e = expected.detach().to("cpu").numpy() if isinstance(expected, torch.Tensor) else expected
    e = np.asarray(e)
    if g.shape != e.shape:
        return f"returned shape {_fmt_shape(g.shape)}, expected shape {_fmt_shape(e.shape)}"
    if not np.array_equal(g, e):
        first = tuple(int(i) for i in np.argwhere(g != e)[0])
        return (
            f"returned the wrong mask (first difference at index {first}):\n"
            f"   expected {_show(e)}\n   got      {_show(g)}"
        )
    return None


def _is_text(x: object) -> bool:
    """Is ``x`` a string, or an array or list of strings?"""
    if isinstance(x, str | bytes):
        return True
    if isinstance(x, torch.Tensor):
        return False
    try:
        return np.asarray(x).dtype.kind in "US"
    # a ragged list, or an object NumPy cannot read: the comparison below says so
    except (TypeError, ValueError, RuntimeError, OverflowError, NotImplementedError):
        return False


def _kind(x: object) -> str:
    """NumPy's kind letter of ``x``'s numbers: "b" bool, "i" integer, "f" float, "c" complex."""
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bool:
            return "b"
        return "f" if x.dtype.is_floating_point else "c" if x.dtype.is_complex else "i"
    try:
        return np.asarray(x).dtype.kind
    except (TypeError, ValueError, RuntimeError, OverflowError, NotImplementedError):
        return "O"


def _floats_for_ids(got: object, expected: object) -> str | None:
    """Floats where the answer is an array of integers (ids, positions): the values may be
    right, but indexing with them fails. (NumPy answers to torch exercises are accepted, and
    so is a count returned as a float: only arrays of ids are refused.)"""
    if _kind(expected) not in "iu" or _kind(got) != "f":
        return None
    try:
        scalar = np.ndim(got) == 0
    except (TypeError, ValueError, RuntimeError):  # ragged: the comparison says so
        return None
    if scalar:
        return None
    return (
        "returned floating-point numbers, expected integers (ids and positions are whole "
        "numbers): keep them integers, e.g. with .long() or .astype(int)"
    )


def _float_max(dtype: object) -> float:
    """The largest finite number of a floating-point dtype, torch's or NumPy's."""
    return float(torch.finfo(dtype).max if isinstance(dtype, torch.dtype) else np.finfo(dtype).max)


def _float_eps(dtype: object) -> float:
    """The gap between 1 and the next number of a floating-point dtype, torch's or NumPy's."""
    return float(torch.finfo(dtype).eps if isinstance(dtype, torch.dtype) else np.finfo(dtype).eps)


def _precision_note(got: object, expected: object, *, overflow: bool = False) -> str:
    """When ``got`` is floating point of a coarser precision than ``expected``, a note saying
    so: the rounding may be what is wrong (a finer one, float64 against float32, cannot be).

    With ``overflow`` (``got`` holds NaN or inf where ``expected`` is finite), the note is
    given only when ``got``'s dtype holds smaller numbers, and says that it overflowed.
    """
    dtypes = [x.dtype for x in (got, expected) if isinstance(x, torch.Tensor | np.ndarray)]
    if len(dtypes) < 2 or _kind(got) != "f" or _kind(expected) != "f":
        return ""
    names = [str(d).removeprefix("torch.") for d in dtypes]
    if names[0] == names[1]:
        return ""
    if not overflow:
        if _float_eps(dtypes[0]) <= _float_eps(dtypes[1]):
            return ""
        return (
            f"\n   Note: your result is {names[0]}, the answer {names[1]}: {names[0]} rounds "
            f"every value more coarsely; compute in {names[1]} (a conversion such as .float() "
            "of float64 inputs loses digits)"
        )
    if _float_max(dtypes[0]) >= _float_max(dtypes[1]):
        return ""
    return (
        f"\n   Note: your result is {names[0]}, the answer {names[1]}: {names[0]} overflows to "
        f"inf past {_float_max(dtypes[0]):.3g}, where {names[1]} does not. Compute in the "
        "inputs' dtype (a conversion such as .float() narrows the range)"
    )


def _one_of_several(got: object, expected: object) -> str | None:
    """Where ``got`` is a tuple or list of several arrays and one of them has the answer's
    shape (an attention's ``(output, weights)``, as the package's functions return them),
    a note that only that one is asked for; ``None`` otherwise."""
    if not isinstance(got, list | tuple) or len(got) < 2:
        return None
    if not isinstance(expected, torch.Tensor | np.ndarray | np.generic | float | int):
        return None
    want = tuple(np.shape(expected))
    arrays = [isinstance(item, torch.Tensor | np.ndarray) for item in got]
    fits = [a and tuple(item.shape) == want for a, item in zip(arrays, got, strict=True)]
    if not any(fits) or not all(arrays):
        return None
    i = fits.index(True)
    kind = "tensors" if all(isinstance(item, torch.Tensor) for item in got) else "arrays"
    return (
        f"returned {_a_type(got)} of {len(got)} {kind}, expected one of shape "
        f"{_fmt_shape(want)}: value {i + 1} of them has that shape. Return only the result "
        "the exercise asks for, without the others (such as the attention weights)"
    )


def compare_outputs(got: object, expected: object, rtol: float, atol: float) -> str | None:
    """Return ``None`` if ``got`` matches ``expected``, else a short description of the difference.

    A tuple of arrays is compared part by part, and the first part that differs is named
    (by its field, when ``expected`` is a named tuple).
    """
    if got is None:
        return "returned None: did you forget `return`?"
    if isinstance(expected, tuple):
        return _compare_parts(got, expected, rtol, atol)
    problem = _one_of_several(got, expected)
    if problem is not None:
        return problem
    if (
        isinstance(expected, torch.Tensor)
        and isinstance(got, list | tuple)
        and any(isinstance(item, torch.Tensor | np.ndarray) for item in got)
    ):
        # NumPy would stack a list of tensors into the right numbers, but the next step of
        # the model (a .transpose, a matrix product) needs one tensor. (A list of numbers is
        # read as an array, as a NumPy answer is.)
        return (
            f"returned {_a_type(got)} of {len(got)} "
            f"{'tensor' if len(got) == 1 else 'tensors'}, expected one tensor of shape "
            f"{_fmt_shape(expected.shape)}: build it with tensor operations (reshape, "
            "transpose), or join the pieces with torch.stack or torch.cat"
        )
    problem = _floats_for_ids(got, expected)
    if problem is not None:
        return problem
    if _is_bool(expected):
        return _compare_bool(got, expected)
    if _kind(got) == "c":  # reading them as floats would drop the imaginary parts, with a warning
        dtype = got.dtype if isinstance(got, torch.Tensor) else np.asarray(got).dtype
        return f"returned complex numbers ({dtype}), expected real numbers"
    if _is_text(got):  # np.asarray(["0.5"], dtype=float) would read the text as the number
        return f"returned text ({_show(np.asarray(got))}), expected an array of numbers"
    try:
        g = _to_numpy(got)
    # a ragged list, an object that is no array, a meta or nested tensor, an int past float64
    except (TypeError, ValueError, RuntimeError, OverflowError, NotImplementedError):
        return f"returned {_a_type(got)}, expected an array of numbers"
    e = _to_numpy(expected)
    if g.shape != e.shape:
        return f"returned shape {_fmt_shape(g.shape)}, expected shape {_fmt_shape(e.shape)}"
    if not np.all(np.isfinite(g)) and np.all(np.isfinite(e)):
        return f"returned NaN or inf where the answer is finite:\n   got      {_show(g)}" + (
            _precision_note(got, expected, overflow=True)
        )
    wrong = ~np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    if wrong.any():
        # The arrays are shown to 4 decimals: the size of the gap says what they may hide.
        return (
            f"returned the wrong values ({_largest_gap(g, e, wrong)}):\n"
            f"   expected {_show(e, expected)}\n   got      {_show(g, got)}"
            + _precision_note(got, expected)
        )
    return None


def _largest_gap(g: np.ndarray, e: np.ndarray, wrong: np.ndarray) -> str:
    """Where the entries marked ``wrong`` differ most, as ``largest difference 0.12 at index
    (1, 2)`` (a NaN or inf against a number counts as an infinite difference)."""
    with np.errstate(invalid="ignore"):  # inf - inf
        gap = np.where(wrong, np.nan_to_num(np.abs(g - e), nan=np.inf), 0.0)
    worst = np.unravel_index(np.argmax(gap), g.shape) if g.ndim else ()
    at = f" at index {tuple(int(i) for i in worst)}" if g.ndim else ""
    return f"largest difference {gap[worst]:.2g}{at}"


# Each exercise's result in the exercise's own letters, for the verdict on a result of the
# wrong shape: one form for every case; one per number of axes where the cases' results take
# two forms (one query or several); one per field where the result is a tuple whose parts
# differ. "()" is a single number.
_RESULT_SHAPES: dict[str, str | dict[int | str, str]] = {
    "additive_step": "(B, S)",
    "answer_loss": "()",
    "apply_rope": "(..., T, d)",
    "attention_rollout": "(B, T, T)",
    "beam_step": "(B, K)",
    "bpe_merge": "(n,)",
    "causal_mask": "(T, T)",
    "cosine_similarity": "()",
    "cross_attention": "(..., T, d_v)",
    "feed_forward": "(..., T, d_model)",
    "gpt_num_parameters": "()",
    "hard_lookup": "(d_v,)",
    "head_entropy": "(..., H)",
    "kv_cache_bytes": "()",
    "lr_schedule": "(total_steps,)",
    "masked_attention": "(..., T, d_v)",
    "masked_softmax": "(..., T, S)",
    "merge_heads": "(B, T, n_heads * d_head)",
    "multi_head_attention": "(B, T, d_model)",
    "online_softmax_update": {"m": "(T, 1)", "ell": "(T, 1)", "acc": "(T, d_v)"},
    "padding_mask": "(B, 1, S)",
    "pre_ln_block": "(B, T, d_model)",
    "rms_norm": "(..., d)",
    "scaled_dot_product_attention": "(..., T, d_v)",
    "score_matrix": "(T, S)",
    "self_attention": "(..., T, d_v)",
    "sinusoidal_positional_encoding": "(seq_len, d_model)",
    "sliding_window_mask": "(T, T)",
    "soft_lookup": {1: "(d_v,)", 2: "(T, d_v)"},
    "softmax": "x's shape",
    "softmax_temperature": "x's shape",
    "split_heads": "(B, n_heads, T, d_head)",
}


def _letters(exercise: str, expected: np.ndarray, field: str | None) -> str | None:
    """The expected shape in the exercise's letters (``_RESULT_SHAPES``), if known."""
    known = _RESULT_SHAPES.get(exercise)
    if isinstance(known, dict):
        known = known.get(field) if field in known else known.get(expected.ndim)
    if known == "()":
        return "a single number"
    return known


def _shape_parts(
    got: object, expected: object, rtol: float, atol: float
) -> tuple[np.ndarray, np.ndarray, str | None] | None:
    """The result (or, of a tuple, its first part that differs) and what was expected, as
    arrays, with the part's field name; ``None`` where they cannot be read as arrays."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple | list) or len(got) != len(expected):
            return None
        fields = getattr(expected, "_fields", None)
        for i, (part, want) in enumerate(zip(got, expected)):
            if compare_outputs(part, want, rtol, atol) is not None:
                found = _shape_parts(part, want, rtol, atol)
                if found is None:
                    return None
                return found[0], found[1], fields[i] if fields else None
        return None
    try:
        return _to_numpy(got), _to_numpy(expected), None
    except (TypeError, ValueError, RuntimeError, OverflowError, NotImplementedError):
        return None


def _rearranged(g: np.ndarray, e: np.ndarray, rtol: float, atol: float) -> str | None:
    """How ``g`` holds the entries of ``e`` in another shape: "transposed", "extra 1" (an
    axis of size 1 too many), "missing 1", "moved 1", "merged" (fewer axes, same order),
    "split" (more axes), "reshaped", "permuted"; ``None`` where its entries are not ``e``'s."""
    if g.size != e.size or g.size == 0:
        return None
    g, e = g.astype(float), e.astype(float)

    def same(x: np.ndarray) -> bool:
        return bool(np.allclose(x.reshape(e.shape), e, rtol=rtol, atol=atol, equal_nan=True))

    swapped = g.ndim == e.ndim >= 2 and g.shape == np.swapaxes(e, -1, -2).shape
    if swapped and same(np.swapaxes(g, -1, -2)):
        return "transposed"
    if same(g):
        if [n for n in g.shape if n != 1] == [n for n in e.shape if n != 1]:
            return "extra 1" if g.ndim > e.ndim else "missing 1" if g.ndim < e.ndim else "moved 1"
        return "merged" if g.ndim < e.ndim else "split" if g.ndim > e.ndim else "reshaped"
    if g.ndim <= 5:  # at most 120 orders of the axes
        for order in itertools.permutations(range(g.ndim)):
            if same(np.transpose(g, order)):
                return "permuted"
    return None


def _shape_hint(how: str | None, got_shape: str, asked: str, ndim_more: bool) -> str:
    """The hint for a result of shape ``got_shape`` where ``asked`` is asked."""
    right = "Your numbers are right, but "
    return {
        "transposed": f"{right}transposed: {got_shape} where {asked} is asked, its last two "
        "axes swapped. Put the axes in the asked order: swap the operands of the product, or "
        "drop the .T / .transpose that turns it.",
        "extra 1": f"{right}with an extra axis of size 1: {got_shape} where {asked} is asked. "
        "Do not add it ([None], unsqueeze, keepdim=True), or take it away with "
        ".squeeze(dim) at that axis.",
        "missing 1": f"{right}an axis of size 1 is missing: {got_shape} where {asked} is "
        "asked. Keep it (keepdim=True in the reduction, or [:, None] / unsqueeze); "
        ".squeeze() without a dim drops every axis of size 1.",
        "moved 1": f"{right}the axis of size 1 is in the wrong place: {got_shape} where "
        f"{asked} is asked.",
        "merged": f"{right}in fewer axes than asked: {got_shape} where {asked} is asked. Keep "
        "the axes apart: do not flatten or merge them.",
        "split": f"{right}in more axes than asked: {got_shape} where {asked} is asked. The "
        "last axes still have to be merged into one (with reshape, e.g. the heads back into "
        "the features).",
        "reshaped": f"{right}laid out as {got_shape} where {asked} is asked: reshape them.",
        "permuted": f"{right}with the axes in another order"
        f"{' and not yet merged' if ndim_more else ''}: {got_shape} where {asked} is asked. "
        "Put the axes back in order with transpose or permute before any reshape (a reshape "
        "never moves entries from one axis to another).",
    }.get(
        how,
        f"The shape is wrong: {got_shape} where {asked} is asked, so no value could be "
        "compared. Print the shape after each step of your code to find where it goes astray.",
    )


def explain_failure(
    exercise: str,
    got: object,
    expected: object,
    args: tuple,
    mistakes: Sequence[Mistake],
    rtol: float,
    atol: float,
    case_hint: str,
) -> tuple[str, str] | None:
    """``None`` where ``got`` matches ``expected``; else the verdict's problem and its hint.

    The hint is a known mistake's where the result is that mistake's (the most specific,
    e.g. a transposed score matrix named as such); else, for a result of the wrong shape,
    one that says so and names the shape asked for, in the exercise's letters where
    ``_RESULT_SHAPES`` knows them (and whether the numbers are right in another arrangement:
    transposed, an axis of size 1 too many or too few, axes merged or not merged); else the
    case's own.
    """
    problem = compare_outputs(got, expected, rtol, atol)
    if problem is None:
        return None
    # only a problem with the shapes is read again (reading a complex result would warn)
    found = _shape_parts(got, expected, rtol, atol) if "expected shape" in problem else None
    if found is not None:
        g, e, field = found
        shapes = f"shape {_fmt_shape(g.shape)}, expected shape {_fmt_shape(e.shape)}"
        if g.shape != e.shape and shapes in problem:
            letters = _letters(exercise, e, field)
            problem = problem.replace(shapes, f"{shapes}, that is {letters}" if letters else shapes)
            if e.ndim == 0:
                asked = "a single number, shape ()"
            else:
                asked = f"{letters} = {_fmt_shape(e.shape)}" if letters else _fmt_shape(e.shape)
            if field is not None:
                asked = f"{asked} for {field}"
            how = _rearranged(g, e, rtol, atol)
            hint = _shape_hint(how, _fmt_shape(g.shape), asked, g.ndim > e.ndim)
            case_hint = hint if how is not None else f"{hint} Then, for the values: {case_hint}"
    return problem, mistake_hint(got, expected, args, mistakes, rtol, atol, case_hint)


def _compare_parts(got: object, expected: tuple, rtol: float, atol: float) -> str | None:
    n = len(expected)
    if not isinstance(got, tuple | list):
        return f"returned {_a_type(got)}, expected a tuple of {n} values"
    if len(got) != n:
        return f"returned {len(got)} value{'' if len(got) == 1 else 's'}, expected {n}"
    fields = getattr(expected, "_fields", None)  # a named tuple's
    for i, (part, want) in enumerate(zip(got, expected)):
        problem = compare_outputs(part, want, rtol, atol)
        if problem is not None:
            where = f"{fields[i]} (value {i + 1} of {n})" if fields else f"value {i + 1} of {n}"
            return problem.replace("returned", f"returned, for {where},", 1)
    return None


def snapshot(value: object) -> object:
    """A copy of the arrays and lists in ``value`` (a case's arguments), to tell afterwards
    whether the answer changed them; anything else (a module, a number) is kept as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list | tuple):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return value


def _unchanged(before: object, after: object) -> bool:
    if isinstance(before, torch.Tensor | np.ndarray):
        if type(after) is not type(before) or after.shape != before.shape:
            return False
        b, a = _to_numpy(before), _to_numpy(after)
        return bool(np.array_equal(b, a, equal_nan=b.dtype.kind in "fc"))
    if isinstance(before, list | tuple | dict):
        if type(after) is not type(before) or len(after) != len(before):
            return False
        if isinstance(before, dict):
            return before.keys() == after.keys() and all(
                _unchanged(before[k], after[k]) for k in before
            )
        return all(_unchanged(b, a) for b, a in zip(before, after))
    if isinstance(before, int | float | str | bool | None):
        return before == after or before != before  # NaN stays NaN
    return True  # modules, generators, ...: not compared


def changed_inputs(fn: Callable, before: tuple, args: tuple) -> str | None:
    """``None`` if the call ``fn(*args)`` left every argument as :func:`snapshot` saw it
    (``before``), else what the verdict says: which argument it changed in place."""
    for i, (b, a) in enumerate(zip(before, args)):
        if _unchanged(b, a):
            continue
        try:
            parameters = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            parameters = []
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names = [p.name for p in parameters if p.kind in positional]
        name = f"`{names[i]}`" if i < len(names) else f"number {i + 1}"
        return (
            f"changed its argument {name} in place.\n   Hint: return a new value and leave the "
            "inputs as they were (`x = x - m`, not `x -= m`; `ids = ids[:]` before editing a "
            "list): the caller may still need them, and autograd needs them unchanged."
        )
    return None


_CUT_FROM_AUTOGRAD = (
    ".detach(), .item(), .numpy(), .tolist(), a torch.tensor(...) copy or torch.no_grad()"
)


def _reached_leaves(result: object) -> set[int]:
    """The ids of the leaf tensors that autograd reaches from ``result`` (a tensor, or a tuple
    or list of them), by walking its graph backwards; no gradient is computed."""
    parts = result if isinstance(result, tuple | list) else (result,)
    stack = [p.grad_fn for p in parts if isinstance(p, torch.Tensor) and p.grad_fn is not None]
    seen: set[object] = set()
    leaves: set[int] = set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # an AccumulateGrad node: a leaf
        if variable is not None:
            leaves.add(id(variable))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def _same_values(a: object, b: object) -> bool:
    """Whether two results hold the same numbers (NaN equal to NaN), part by part."""
    if isinstance(a, tuple | list) and isinstance(b, tuple | list):
        return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
    try:
        x, y = _to_numpy(a), _to_numpy(b)
    except (TypeError, ValueError, RuntimeError, OverflowError, NotImplementedError):
        return a is b
    return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=True))


def _detached(result: object) -> object:
    """``result`` without its graph: a tensor detached, a tuple or list part by part."""
    if isinstance(result, torch.Tensor):
        return result.detach()
    if isinstance(result, tuple | list):
        parts = [_detached(p) for p in result]
        return type(result)(*parts) if hasattr(result, "_fields") else type(result)(parts)
    return result


@dataclass(frozen=True)
class _Differentiable:
    """What :func:`differentiable` was asked: for the wrapper that :func:`run_cases` builds
    again with the reference, to compare the two gradients."""

    exercise: str
    fn: Callable
    wrt: dict[str, int]
    noun: str
    why: str
    keep_graph: bool


def differentiable(
    exercise: str,
    fn: Callable,
    wrt: dict[str, int],
    *,
    noun: str = "an output",
    why: str,
    keep_graph: bool = False,
) -> Callable:
    """``fn``, called with the arguments named in ``wrt`` requiring a gradient, and refused with
    a ``ValueError`` when its result depends on one of them but autograd cannot differentiate
    it with respect to that argument: a number cut from the graph (``.detach()``, ``.item()``,
    a NumPy or list round trip, ``torch.tensor(...)``, ``torch.no_grad()``) is a wrong answer
    for a function that the book trains through, though its values are right.

    Each argument in ``wrt`` is handed to ``fn`` as a copy of a leaf that requires a gradient
    (a copy, so that an answer may still change it in place: the change is copied back to
    the argument, for :func:`changed_inputs` to report in its own words). When the result
    does not reach one of those leaves, ``fn`` runs once more with that argument's values
    moved: if the result moves too, it depends on the argument outside autograd, and is
    refused; if not, the answer does not read the argument at all (a wrong answer, such as
    a forgotten gain), and the comparison with the reference names that mistake.

    Reaching the leaves is not enough: ``values_from_numpy + query.sum() * 0`` reaches
    ``query`` with a gradient of zero. Handed to :func:`run_cases`, the function is
    wrapped again with the checker's reference (:func:`_against_reference`), and where its
    values agree with the reference's, its gradients must too: the vector-Jacobian product
    with a fixed random cotangent (seeded), with respect to each argument in ``wrt``, is
    compared with the reference's at the checker's tolerances (``atol`` scaled by the
    largest gradient entry, when that is above 1).

    Args:
        exercise: the exercise's name, e.g. ``"rms_norm"``, for the message.
        fn: the learner's function (or a reference, a mistake).
        wrt: the names of the arguments the result must be differentiable with respect to,
            as the exercise calls them, and their positions, e.g. ``{"x": 0, "weight": 1}``.
        noun: what ``fn`` returns, with its article, e.g. ``"a loss"``.
        why: why it must be differentiable, e.g. ``"training calls loss.backward()"``.
        keep_graph: return ``(result, leaves)``, the result with its graph and the leaves
            (in ``wrt``'s order), for a caller that computes a gradient; by default the
            result is returned detached.

    Returns:
        A function of the same arguments (and, for the verdict, the same parameter names).
    """

    if not callable(fn):
        return fn  # for run_cases to say that the checker needs the function itself
    return _differentiable_wrapper(_Differentiable(exercise, fn, wrt, noun, why, keep_graph))


class _Reference:
    """The reference of a checker whose answer is :func:`differentiable`, and the checker's
    tolerances: its results and gradients on the cases' inputs, computed before the answer
    runs under the guards' watch (:meth:`prime`), where the reference's own calls (the
    package's function that the exercise forbids) would be seen as the answer's."""

    def __init__(self, reference: Callable, rtol: float, atol: float) -> None:
        # A reference wrapped by differentiable itself (the loss of chapter 10): its function.
        spec, _ = _wrapped(reference)
        self.fn = reference if spec is None else spec.fn
        self.rtol, self.atol = rtol, atol
        self.primed: list[tuple[tuple, tuple[object, dict[str, torch.Tensor]]]] = []
        self.problem: str | None = None  # what the last call's gradients showed

    def prime(self, args: Sequence, wrt: dict[str, int]) -> None:
        """Compute the reference's result and gradients on ``args``, for the call of the
        answer on these very objects."""
        self.primed.append((tuple(args), self.gradients(args, wrt)))

    def on(self, args: Sequence, wrt: dict[str, int]) -> tuple[object, dict[str, torch.Tensor]]:
        """The reference's result (detached) and its gradient with respect to each argument
        of ``wrt`` that its graph reaches, on ``args``: primed, or computed now."""
        for primed, found in self.primed:
            if len(primed) == len(args) and all(a is b for a, b in zip(primed, args)):
                return found
        return self.gradients(args, wrt)

    def gradients(
        self, args: Sequence, wrt: dict[str, int]
    ) -> tuple[object, dict[str, torch.Tensor]]:
        args = list(copy.deepcopy(tuple(args)))
        leaves: dict[str, torch.Tensor] = {}
        for name, i in wrt.items():
            arg = args[i] if i < len(args) else None
            if isinstance(arg, torch.Tensor) and arg.is_floating_point():
                leaves[name] = args[i] = arg.detach().clone().requires_grad_(True)
        with torch.enable_grad(), np.errstate(all="ignore"):
            result = self.fn(*args)
            # only where the reference's own graph goes: a reference may run without one
            reached = _reached_leaves(result)
            leaves = {n: leaf for n, leaf in leaves.items() if id(leaf) in reached}
            grads = _vector_jacobian(result, leaves)
        return _detached(result), grads


def _float_parts(result: object) -> list[torch.Tensor]:
    """The floating-point tensors of a result (a tensor, or a tuple or list of them)."""
    parts = result if isinstance(result, tuple | list) else (result,)
    return [p for p in parts if isinstance(p, torch.Tensor) and p.is_floating_point()]


def _vector_jacobian(result: object, leaves: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The gradient of ``sum(v * result)`` with respect to each leaf that ``result``'s graph
    reaches, ``v`` standard-normal draws of a fixed seed, one array for each floating-point
    part of ``result``; a leaf not reached gets zeros."""
    parts = _float_parts(result)
    generator = torch.Generator().manual_seed(0)
    cotangents = [
        torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype) for p in parts
    ]
    traced = [(p, v) for p, v in zip(parts, cotangents) if p.requires_grad]
    names = list(leaves)
    grads: Sequence[torch.Tensor | None] = [None] * len(names)
    if traced and names:
        grads = torch.autograd.grad(
            [p for p, _ in traced],
            [leaves[n] for n in names],
            grad_outputs=[v for _, v in traced],
            allow_unused=True,
        )
    return {
        n: torch.zeros_like(leaves[n]) if g is None else g.detach() for n, g in zip(names, grads)
    }


def _gradient_gap(
    got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float
) -> str | None:
    """Where two gradients differ beyond the tolerances (``atol`` times the largest entry of
    ``expected`` when that is above 1), ``None`` where they agree."""
    g, e = _to_numpy(got), _to_numpy(expected)
    if g.shape != e.shape:
        return f"its shape is {_fmt_shape(g.shape)}, the reference's {_fmt_shape(e.shape)}"
    finite = np.abs(e[np.isfinite(e)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    wrong = ~np.isclose(g, e, rtol=rtol, atol=atol * scale, equal_nan=True)
    return _largest_gap(g, e, wrong) if wrong.any() else None


def _differentiable_wrapper(spec: _Differentiable, reference: _Reference | None = None) -> Callable:
    """The function :func:`differentiable` returns; with ``reference``, the one that also
    compares the answer's gradients with the reference's."""
    exercise, fn, wrt, noun, why = spec.exercise, spec.fn, spec.wrt, spec.noun, spec.why

    @functools.wraps(fn)
    def wrapper(*args: object) -> object:
        called_with = args
        if reference is not None:
            reference.problem = None
        args = list(args)
        originals: dict[str, torch.Tensor] = {}
        leaves: dict[str, torch.Tensor] = {}
        given: dict[str, torch.Tensor] = {}
        for name, i in wrt.items():
            arg = args[i] if i < len(args) else None
            if isinstance(arg, torch.Tensor) and arg.is_floating_point():
                originals[name] = arg
                leaves[name] = arg.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            for name, leaf in leaves.items():
                given[name] = leaf.clone()
                args[wrt[name]] = given[name]
            try:
                result = fn(*args)
            except RuntimeError as exc:  # .numpy() of a tensor that requires a gradient
                if "requires grad" not in str(exc):
                    raise
                raise ValueError(
                    f"{exercise} converted a tensor that requires a gradient to NumPy, which "
                    f"cuts the result from autograd: {why}. Build the result with torch "
                    "operations on the tensors you are given and return that tensor, without "
                    f"{_CUT_FROM_AUTOGRAD}"
                ) from None
        in_place = False
        for name, original in originals.items():
            changed = given[name].detach()
            if changed.shape == original.shape and not torch.equal(changed, original):
                in_place = True  # changed_inputs says so, in its own words
                with torch.no_grad():
                    original.copy_(changed)
        if result is None:
            return None  # the framework asks "did you forget `return`?"
        result = _pinned(result)
        reached = _reached_leaves(result)
        for name, leaf in leaves.items():
            if id(leaf) in reached or not _depends_on(fn, args, wrt[name], result):
                continue
            raise RefusedResult(
                f"returned {noun} that autograd cannot differentiate with respect "
                f"to `{name}`, though its values depend on `{name}`: {why}. Build the result "
                "with torch operations on the tensors you are given and return that tensor, "
                f"without {_CUT_FROM_AUTOGRAD}"
            )
        if spec.keep_graph:
            return result, tuple(leaves.values())
        if reference is not None and leaves and not in_place:
            problem, ran = _unwatched(
                lambda: _compare_gradients(spec, reference, called_with, result, leaves)
            )
            reference.problem = problem if not ran else _ran_unwatched(exercise, ran[0])
        return _detached(result)

    _WRAPPERS[wrapper] = (spec, None if reference is None else (reference, wrt))
    return wrapper


# What differentiable() knows of each function it returns, by the function's identity: its
# spec and, when it compares gradients, its reference and the arguments it differentiates by.
# Only plain functions are looked up: their hash and equality are their identity, so a lookup
# runs no code of a learner's.
_WRAPPERS: weakref.WeakKeyDictionary[
    Callable, tuple[_Differentiable, tuple[_Reference, dict[str, int]] | None]
] = weakref.WeakKeyDictionary()


def _wrapped(
    fn: object,
) -> tuple[_Differentiable | None, tuple[_Reference, dict[str, int]] | None]:
    """The spec and the reference of ``fn`` if :func:`differentiable` made it, else Nones."""
    if type(fn) is not types.FunctionType:
        return None, None
    return _WRAPPERS.get(fn, (None, None))


# The C methods of every tensor: torch._C.TensorBase is an immutable type, which no answer can
# change (torch.Tensor, a Python class, it can)
_AS_SUBCLASS, _CLONE = torch._C.TensorBase.as_subclass, torch._C.TensorBase.clone


def _pinned(result: object) -> object:
    """``result`` as a :func:`differentiable` answer's is read from then on: each tensor a plain
    ``torch.Tensor`` holding a copy of its numbers, its graph kept (a tuple or list part by
    part, anything else as it is). Made inside the answer's watched call: a tensor
    subclass's methods (its ``numpy``, its ``__torch_function__``) are the answer's own code,
    which would otherwise run when the gradients are compared, unwatched (Python loops
    there are seen by no guard), and could change the numbers compared, or returned after."""
    if isinstance(result, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass(), torch.enable_grad():
            return _CLONE(_AS_SUBCLASS(result, torch.Tensor))
    if isinstance(result, tuple | list):
        parts = [_pinned(part) for part in result]
        return tuple(parts) if isinstance(result, tuple) else parts
    return result


def _ran_unwatched(exercise: str, name: str) -> str:
    """What an answer is told when code of its own (``name``) ran while its gradients were
    compared with the reference's, where the checker's guards do not watch."""
    return (
        f"ran code of yours ({name}) while the checker compared its gradients with the "
        "reference's, where it cannot see how the code computes: a library function replaced "
        "by one of yours, a custom backward or a tensor hook.\n   Hint: compute "
        f"{exercise}'s result with torch's own operations on the tensors you are given, and "
        "leave the libraries' functions as they are."
    )


def _compare_gradients(
    spec: _Differentiable,
    reference: _Reference,
    args: Sequence,
    result: object,
    leaves: dict[str, torch.Tensor],
) -> str | None:
    """What is wrong with the gradients of a result whose values agree with the reference's on
    ``args``: one with respect to an argument of ``spec.wrt`` that differs from the
    reference's, or none that autograd can compute; ``None`` when they agree, or when the
    values do not (the comparison of values says so, and names the mistake)."""
    expected, expected_grads = reference.on(args, spec.wrt)
    got = _detached(result)
    if compare_outputs(got, expected, reference.rtol, reference.atol) is not None:
        return None
    if [p.shape for p in _float_parts(got)] != [p.shape for p in _float_parts(expected)]:
        return None
    try:
        with torch.enable_grad(), np.errstate(all="ignore"):
            grads = _vector_jacobian(result, leaves)
    except RuntimeError as exc:
        return (
            f"returned the right values, but autograd cannot compute their gradient "
            f"(backward() raised {str(exc)[:160]}).\n   Hint: {spec.why}. An operation in "
            "place on a tensor that autograd keeps for the backward pass (x *= ..., "
            "x[...] = ...) is the usual cause: build a new tensor instead."
        )
    for name, expected_grad in expected_grads.items():
        gap = _gradient_gap(grads[name], expected_grad, reference.rtol, reference.atol)
        if gap is None:
            continue
        return (
            f"returned the right values, but the gradient with respect to `{name}` differs "
            f"from the reference's ({gap}): a result computed outside autograd, or one that "
            f"reads `{name}` where another argument holds the same values?\n   Hint: "
            f"{spec.why}. Build the result with torch operations on the tensors you are "
            f"given, without {_CUT_FROM_AUTOGRAD}, and without a term such as "
            f"`{name}.sum() * 0`, which reaches `{name}` with a gradient of zero."
        )
    return None


def _against_reference(
    learner_fn: Callable, reference_fn: Callable, rtol: float, atol: float
) -> Callable:
    """``learner_fn`` as :func:`run_cases` runs it: a :func:`differentiable` answer wrapped
    again to compare its gradients with ``reference_fn``'s; any other function as it is."""
    spec, _ = _wrapped(learner_fn)
    if spec is None or spec.keep_graph or not callable(reference_fn):
        return learner_fn
    return _differentiable_wrapper(spec, _Reference(reference_fn, rtol, atol))


def prime_reference(learner_fn: Callable, args: Sequence) -> None:
    """Before ``learner_fn`` (as :func:`checker_spec` hands it over) runs on ``args`` under a
    guard or the grader's tripwires, compute what its reference gives on them: the
    gradients that a :func:`differentiable` answer's are compared with. Nothing for any
    other function."""
    _, found = _wrapped(learner_fn)
    if found is not None:
        reference, wrt = found
        reference.prime(args, wrt)


def share_primed(source_fn: Callable, learner_fn: Callable) -> None:
    """Hand the reference's results and gradients primed for ``source_fn`` (as
    :func:`checker_spec` hands it over, from the same checker) to ``learner_fn``: the grader
    primes them on a stand-in answer before the answer's program runs, so that nothing the
    program does when it is defined (a global forward hook of every module, a kernel of its
    own for a library operation) changes what the answer's gradients are compared with."""
    _, source = _wrapped(source_fn)
    _, found = _wrapped(learner_fn)
    if source is not None and found is not None:
        found[0].primed = list(source[0].primed)


def gradient_problem(learner_fn: Callable) -> str | None:
    """What the last call of ``learner_fn`` (as :func:`checker_spec` hands it over) showed of
    its gradients: for a :func:`differentiable` answer whose values were right, a gradient
    unlike the reference's, else ``None``. A checker and the grader report it only once every
    case's values have passed: a known mistake that returns the right values on one case
    (keys read from ``x_query`` where ``x_context`` holds the same values) is then named on
    the case where its values differ."""
    _, found = _wrapped(learner_fn)
    if found is None:
        return None
    problem, found[0].problem = found[0].problem, None
    return problem


def _depends_on(fn: Callable, args: list, i: int, result: object) -> bool:
    """Whether ``fn``'s result moves when argument ``i``'s values move (by seeded noise)."""
    moved = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    noise = torch.randn(
        moved[i].shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    moved[i] = moved[i] + noise.to(moved[i].dtype)
    try:
        with np.errstate(all="ignore"):
            other = fn(*moved)
    except Exception:  # an answer that fails on other values: it read them
        return True
    return not _same_values(_detached(result), _detached(other))


_SWITCHED_OFF = (
    "switches off the checker's watch on the calls it makes (sys.setprofile or "
    "sys.settrace), so the checker cannot see how it computes.\n   Hint: leave sys.setprofile "
    "and sys.settrace alone."
)


def _call_hooks() -> tuple[Callable, Callable, Callable]:
    """The two ways a guard watches an answer, each holding ``sys``'s hook setters in its
    closure: a sandbox may replace ``sys.setprofile`` and ``sys.settrace`` by tripwires
    before it runs an answer, and the guards keep working (a closure's cells are reached only
    through ``__closure__``, which the grader's static check refuses)."""
    set_profile, get_profile = sys.setprofile, sys.getprofile
    set_trace, get_trace = sys.settrace, sys.gettrace
    # cProfile's profiler (%prun's too): sys.getprofile() gives its object, which Python code
    # cannot call as a hook nor set again with sys.setprofile; its own enable() sets it again
    # (in the frame that paused it, so that the calls and returns it sees pair up)
    c_profiler, enable_c_profiler = _lsprof.Profiler, _lsprof.Profiler.enable

    def hooked(
        call: Callable[[], object], hook: Callable, set_hook: Callable, get_hook: Callable
    ) -> tuple[object, bool]:
        """``call()`` with ``hook`` set, and whether it was still set when ``call`` returned
        (``False``: the answer switched it off); the previous hook is put back after."""
        previous = get_hook()
        set_hook(hook)
        try:
            result = call()
            return result, get_hook() is hook
        finally:
            if set_hook is set_profile and isinstance(previous, c_profiler):
                enable_c_profiler(previous)  # with the settings it had
            else:
                set_hook(previous)

    def watching_calls(call: Callable[[], object], profile: Callable) -> tuple[object, bool]:
        """``call()`` with ``profile`` (a profile hook) watching every call it makes; a hook
        set before (an enclosing guard's, under :func:`all_of`) keeps watching too. A C
        profiler set before (cProfile's, ``%prun``'s) is paused for the call, and enabled
        again after: no Python code can pass it the events (it sees the call as time spent in
        its caller)."""
        previous = get_profile()
        chained = None if isinstance(previous, c_profiler) else previous

        def both(frame: FrameType, event: str, arg: object) -> None:
            if chained is not None:
                chained(frame, event, arg)
            profile(frame, event, arg)

        return hooked(call, both, set_profile, get_profile)

    def tracing(call: Callable[[], object], trace: Callable) -> tuple[object, bool]:
        """``call()`` under the trace function ``trace``."""
        return hooked(call, trace, set_trace, get_trace)

    def unwatched(call: Callable[[], object]) -> tuple[object, list[str]]:
        """``call()`` with neither guard's hook set, both put back after: the framework's own
        work inside the answer's call (comparing its gradients with the reference's), which
        would run slowly under every guard's hooks. Only the calls of the learner's code are
        watched there, which should not run at all (a library function the answer replaced by
        one of its own, a custom backward): returns ``call()``'s result and the names of
        those that ran."""
        profile, trace = get_profile(), get_trace()
        ran: list[str] = []
        learners: dict[str, bool] = {}  # file name -> whether it holds the learner's code

        def learner_calls(frame: FrameType, event: str, arg: object) -> None:
            filename = frame.f_code.co_filename
            if filename not in learners:
                learners[filename] = _is_learner_code(filename)
            if learners[filename]:
                ran.append(frame.f_code.co_name)

        set_profile(None)
        set_trace(learner_calls)
        try:
            return call(), ran
        finally:
            set_trace(trace)
            if isinstance(profile, c_profiler):
                enable_c_profiler(profile)
            else:
                set_profile(profile)

    return watching_calls, tracing, unwatched


_watching_calls, _tracing, _unwatched = _call_hooks()


def _first_seen(
    call: Callable[[], object], profile: Callable, seen: list[str], problem: Callable[[str], str]
) -> tuple[object, str | None]:
    """A guard's verdict: ``call()`` watched by ``profile``, which records what it sees in
    ``seen``; the problem with the first thing seen, or that the watch was switched off.

    When ``call()`` raises after something was seen, that is the verdict: the forbidden
    function explains the error (the package's ``softmax`` called with torch's ``dim=``)
    better than the error does. A stub's ``NotImplementedError`` is left alone.
    """
    try:
        result, watched = _watching_calls(call, profile)
    except NotImplementedError:
        raise
    except Exception:
        if not seen:
            raise
        return None, problem(seen[0])
    if not watched:
        return result, _SWITCHED_OFF
    return result, (problem(seen[0]) if seen else None)


def forbid_calls(forbidden: dict[str, object], hint: str) -> Guard:
    """A guard that fails an answer which calls any of ``forbidden`` (name shown -> function).

    It watches every call the answer makes (``sys.setprofile``), so it sees a
    forbidden function however it was imported or renamed, and however deep in
    the answer's helpers it is called. Python functions are recognised by
    their code object, built-in ones (such as ``F.scaled_dot_product_attention``)
    by identity. A class's ``__init__`` among them (:func:`library_guard` forbids building
    a library class such as ``nn.MultiheadAttention``, not only calling it) is told as
    "builds", the others as "calls".
    """
    codes = {getattr(f, "__code__", None): name for name, f in forbidden.items()}
    codes.pop(None, None)
    constructors = {name for name, f in forbidden.items() if _is_constructor(f)}
    builtins = {id(f): name for name, f in forbidden.items() if not hasattr(f, "__code__")}
    # A method of a built-in type (torch.Tensor.softmax) is called bound to an object
    # (x.softmax(-1)), a new object every time: recognise it by its name and owner type.
    methods = {
        (f.__name__, f.__objclass__): name
        for name, f in forbidden.items()
        if hasattr(f, "__objclass__") and not hasattr(f, "__code__")
    }

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        seen: list[str] = []

        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event == "call" and frame.f_code in codes:
                seen.append(codes[frame.f_code])
            elif event == "c_call":
                if id(arg) in builtins:
                    seen.append(builtins[id(arg)])
                elif methods:
                    owner = getattr(arg, "__self__", None)
                    for (method, cls), name in methods.items():
                        if getattr(arg, "__name__", None) == method and isinstance(owner, cls):
                            seen.append(name)

        return _first_seen(
            call,
            profile,
            seen,
            lambda name: (
                f"{'builds' if name in constructors else 'calls'} {name}, which this exercise "
                f"asks you to write yourself.\n   Hint: {hint}"
            ),
        )

    return guard


def _is_constructor(f: object) -> bool:
    """Whether ``f`` is a class's ``__init__`` written in Python (building the class runs it)."""
    code = getattr(f, "__code__", None)
    return code is not None and code.co_name == "__init__"


def library_softmaxes() -> dict[str, object]:
    """The softmax functions of PyTorch (and of SciPy, if installed), for :func:`forbid_calls`.

    An exercise that asks for a softmax written by hand forbids these, as well
    as the package's own function; log-softmax is included, since
    ``exp(log_softmax(x))`` is the same shortcut. NumPy has no softmax.
    """
    import torch.nn.functional as F

    found: dict[str, object] = {
        "torch.softmax": torch.softmax,
        "torch.nn.functional.softmax": F.softmax,
        "torch.special.softmax": torch.special.softmax,
        "Tensor.softmax": torch.Tensor.softmax,
        "torch.log_softmax": torch.log_softmax,
        "torch.nn.functional.log_softmax": F.log_softmax,
        "torch.special.log_softmax": torch.special.log_softmax,
        "Tensor.log_softmax": torch.Tensor.log_softmax,
    }
    try:
        import scipy.special
    except ImportError:  # SciPy is not a dependency of the package
        return found
    found["scipy.special.softmax"] = scipy.special.softmax
    found["scipy.special.log_softmax"] = scipy.special.log_softmax
    return found


def all_of(*guards: Guard) -> Guard:
    """A guard that runs the answer once under every one of ``guards`` and reports the first problem."""

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        problems: list[str] = []

        def wrap(inner: Callable[[], object], g: Guard) -> Callable[[], object]:
            def run() -> object:
                result, problem = g(inner)
                if problem is not None:
                    problems.append(problem)
                return result

            return run

        run = call
        for g in reversed(guards):  # the first guard is the outermost, and reports first
            run = wrap(run, g)
        result = run()
        return result, (problems[-1] if problems else None)

    return guard


def returns_tensor(expected: str, hint: str) -> Guard:
    """A guard that refuses a result that is not a torch tensor (a NumPy array, a list), for
    an exercise whose text asks for one: its values may be right, but the step after it in
    the book (a masked attention, ``masked_fill``) takes a tensor. The comparison itself
    reads any array, and the grader's sandbox hands results back as NumPy arrays, so the
    type is checked here, on the answer's own result.

    Args:
        expected: what the exercise asks for, e.g. ``"a torch tensor of dtype torch.bool"``.
        hint: the hint shown with it.
    """

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        result = call()
        if result is None or isinstance(result, torch.Tensor):
            return result, None  # None: the comparison asks "did you forget `return`?"
        kind = "a NumPy array" if isinstance(result, np.ndarray | np.generic) else _a_type(result)
        return result, f"returned {kind}, expected {expected}.\n   Hint: {hint}"

    return guard


def library_guard(exercise: str) -> Guard | None:
    """A :func:`forbid_calls` guard against the exercise's library equivalents, if it has any.

    The names are those of :data:`attnbook.exercises.extract.LIBRARY_EQUIVALENTS`
    (any ``softmax`` for the softmax exercise...), looked up as functions in
    the modules of torch, NumPy, SciPy and attnbook loaded at that moment.
    :func:`run_cases` adds it to every checker's guard,
    so the notebook forbids what the grader forbids (the grader also reads the
    source, which catches a method such as ``tensor.softmax()`` that a
    profile hook cannot tell apart).
    """
    from attnbook.exercises.extract import LIBRARY_EQUIVALENTS

    names = LIBRARY_EQUIVALENTS.get(exercise, frozenset()) | {exercise}
    found: dict[str, object] = {}
    for module_name, module in list(sys.modules.items()):
        root = module_name.split(".")[0]
        if module is None or root not in {"torch", "numpy", "scipy", "attnbook"}:
            continue
        if module_name.startswith("attnbook.exercises"):
            continue
        space = getattr(module, "__dict__", {})
        for name in names:
            value = space.get(name)
            if isinstance(value, type):
                # A class (attnbook.FeedForward, torch.distributions.Categorical): building it
                # or running it is the library's answer. Only what the class itself defines,
                # so that nn.Module.__init__ and object.__init__ stay allowed.
                for method in ("__init__", "forward", *sorted(names)):
                    f = value.__dict__.get(method)
                    if hasattr(f, "__code__"):
                        label = "" if method == "__init__" else f".{method}"
                        found[f"{module_name}.{name}{label}"] = f
            elif callable(value):
                found[f"{module_name}.{name}"] = value
    if not found:
        return None

    def public_and_short(item: tuple[str, object]) -> tuple[bool, int]:
        return not any(part.startswith("_") for part in item[0].split(".")), -len(item[0])

    # forbid_calls names a function by its last entry: the shortest public name
    return forbid_calls(
        dict(sorted(found.items(), key=public_and_short)),
        "this is the library's answer to the exercise; build it from array operations.",
    )


def chapter_guard(exercise: str) -> Guard | None:
    """A guard against the exercise's chapter equivalents, if it has any: the functions that
    the chapter's own cells define before the exercise and that compute its answer
    (:data:`attnbook.exercises.extract.CHAPTER_EQUIVALENTS`: chapter 7's
    ``multi_head_batched`` and ``multi_head_loop`` for multi-head attention).

    They live in the learner's notebook, where no module holds them and the learner may run
    the chapter's cells again (a new function each time), so they are known by their name:
    the answer fails when its code calls a function of the learner's code (a notebook cell,
    not a library) whose code object has one of those names, at the top level of its cell
    (its qualified name, from Python 3.11; before, its name), however it was aliased,
    wrapped or handed to the checker. A function of the learner's with another name passes,
    even with the chapter's code copied into it: only calling the chapter's ready-made
    answer does not count. The grader reads the same names in the program it takes from
    the notebook (:func:`attnbook.exercises.extract.forbidden_uses`).
    """
    from attnbook.exercises.extract import CHAPTER_EQUIVALENTS

    chapter = CHAPTER_EQUIVALENTS.get(exercise)
    if chapter is None:
        return None

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        seen: list[str] = []

        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event != "call":
                return
            code = frame.f_code
            name = getattr(code, "co_qualname", code.co_name)  # "f.<locals>.g" is not "g"
            if name in chapter.names and _is_learner_code(code.co_filename):
                seen.append(name)

        return _first_seen(
            call,
            profile,
            seen,
            lambda name: f"{chapter.problem(name)}.\n   Hint: {chapter.hint(name)}.",
        )

    return guard


# The only modules an answer may import (with their submodules), in the grader's static check
# (attnbook.exercises.extract) and in no_package's watch: the array libraries and the parts of
# Python's standard library that hold no way to run a string as code or to reach an
# object by its name. Too many other modules can (timeit, logging.config, unittest.mock,
# string.Formatter, IPython, ...) to list them all.
ANSWER_MODULES = frozenset(
    {
        "numpy",
        "torch",
        "scipy",
        "math",
        "cmath",
        "random",
        "statistics",
        "fractions",
        "decimal",
        "functools",
        "itertools",
        "collections",
        "heapq",
        "bisect",
        "copy",
        "dataclasses",
        "enum",
        "abc",
        "numbers",
        "typing",
        "re",
        "__future__",
    }
)

_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, Path(__file__).parents[1]}
)


def _is_learner_code(filename: str) -> bool:
    """Code of the learner (a notebook cell, a script), not of Python, a library or attnbook."""
    if filename.startswith("<frozen") or filename.startswith("<string"):
        return False
    try:
        resolved = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    return not resolved.startswith(_LIBRARY_DIRS)


# What runs a loop for an answer, element by element (or row by row), from C or from a library's
# Python code, which no_python_loops' watch on the learner's bytecode does not see: with a C
# function (math.sin) no code of the learner's runs at all. Not listed, since each calls its
# function once on whole arrays: np.fromfunction (one call on the index arrays: a vectorised
# way to build a table), np.apply_over_axes (one call per axis named, on the whole array) and
# np.piecewise (one call per piece, on all its elements; many pieces need a loop of the
# learner's to write them out).
_ELEMENTWISE: dict[object, str] = {
    map: "map",
    filter: "filter",
    itertools.starmap: "itertools.starmap",
    itertools.accumulate: "itertools.accumulate",
    functools.reduce: "functools.reduce",
    np.frompyfunc: "np.frompyfunc",
    np.vectorize: "np.vectorize",
    np.apply_along_axis: "np.apply_along_axis",
}
# ... and the attribute names that are theirs alone, read off anything (a tensor's apply_,
# map_ and map2_ call a Python function on every element), or written in a string
# (getattr(np, "frompyfunc")); map, filter and reduce are not, being common names of methods
# (np.add.reduce is a vectorised sum)
_ELEMENTWISE_NAMES: dict[str, str] = {
    "frompyfunc": "np.frompyfunc",
    "vectorize": "np.vectorize",
    "apply_along_axis": "np.apply_along_axis",
    "starmap": "itertools.starmap",
    "apply_": "Tensor.apply_",
    "map_": "Tensor.map_",
    "map2_": "Tensor.map2_",
}
_NOTHING = object()


_ELEMENTWISE_IDS = {id(f): name for f, name in _ELEMENTWISE.items()}
_MODULE_DICT = ModuleType.__dict__["__dict__"]  # a module's namespace, read without its class


def _elementwise(value: object, depth: int = 3) -> str | None:
    """The name of what runs a loop element by element that ``value`` is or holds (a function
    that np.frompyfunc or np.vectorize made, a functools.partial of one), else ``None``. It
    reads ``value`` by identity and its type, never through a method of it, which could be the
    learner's code (a ``__hash__``, a ``__class__``), run here where no guard watches."""
    kind = type(value)
    if id(value) in _ELEMENTWISE_IDS:
        return _ELEMENTWISE_IDS[id(value)]
    if issubclass(kind, np.vectorize):
        return "np.vectorize"
    if kind is np.ufunc and value.__name__.endswith("(vectorized)"):  # type: ignore[attr-defined]
        return "np.frompyfunc"  # a ufunc that np.frompyfunc made
    if kind is functools.partial and depth > 0:
        return _elementwise(value.func, depth - 1)  # type: ignore[attr-defined]
    return None


def _module_attribute(module: object, name: object) -> object:
    """``module.name`` from the module's namespace, or ``_NOTHING`` (not a module, not there)."""
    if not issubclass(type(module), ModuleType) or not isinstance(name, str):
        return _NOTHING
    namespace = _MODULE_DICT.__get__(module, ModuleType)
    return namespace.get(name, _NOTHING) if type(namespace) is dict else _NOTHING


def _codes_within(code: CodeType) -> Iterator[CodeType]:
    """``code`` and the code objects nested in it (its functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes_within(const)


def _elementwise_read(frame: FrameType) -> list[str]:
    """What runs a loop element by element that the code of ``frame`` (a learner's function, at
    its call) or a function nested in it reads: a global or builtin name bound to one, an
    attribute of a module read by name (``np.frompyfunc``, ``functools.reduce``, with the
    module imported in the function too), a name that only such a function has, or a value
    that the frame holds at its call (a default argument, a closure's cell)."""
    found: list[str] = []
    scope = frame.f_globals
    builtins_ = frame.f_builtins
    for code in _codes_within(frame.f_code):
        bound: dict[str, object] = {}  # local names bound to an import, in this code
        value: object = _NOTHING  # what the instruction just read, where it is known
        imported: object = _NOTHING  # the module of the last import, for its `from` names
        for instruction in dis.get_instructions(code):
            op, arg = instruction.opname, instruction.argval
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                value = scope.get(arg, builtins_.get(arg, _NOTHING))
            elif op in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF"):
                value = bound.get(arg, _NOTHING)
            elif op == "IMPORT_NAME":
                imported = value = sys.modules.get(str(arg).split(".")[0], _NOTHING)
            elif op == "IMPORT_FROM":
                value = _module_attribute(imported, arg)
            elif op in ("LOAD_ATTR", "LOAD_METHOD"):
                value = _module_attribute(value, arg)
            elif op.startswith("STORE_") and isinstance(arg, str):
                if value is not _NOTHING:
                    bound[arg] = value
                value = _NOTHING
            else:
                value = _NOTHING
            if op in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_CONST") and arg in _ELEMENTWISE_NAMES:
                found.append(_ELEMENTWISE_NAMES[arg])  # type: ignore[index]
            elif value is not _NOTHING and (name := _elementwise(value)) is not None:
                found.append(name)
    with contextlib.suppress(Exception):  # what the frame holds at its call
        for held in list(frame.f_locals.values()):
            if (name := _elementwise(held)) is not None:
                found.append(name)
    return found


def no_python_loops(hint: str, max_calls: int = 4) -> Guard:
    """A guard that fails an answer which loops in Python instead of using array operations.

    While the answer runs, it watches the bytecode executed in the learner's
    own code (``sys.settrace`` with opcode events; library code is not
    watched). Straight-line code executes each instruction of a call at most
    once; a loop of any kind (``for``, ``while``, a comprehension, a
    generator) jumps back and executes some instruction again. A helper of the
    learner called over and over (``map``, ``np.vectorize`` or
    ``np.apply_along_axis`` with a lambda) runs its code more than
    ``max_calls`` times. And a loop that runs for the answer, from C or from a
    library's Python code, calling a function element by element or row by
    row, is refused by what the learner's code reads, whatever it calls: with
    a C function (``np.frompyfunc(math.sin, 1, 1)``, ``map(math.sin, ...)``)
    none of the learner's code runs in it. When each of the learner's
    functions is first called, the names that it and the functions nested in
    it read are looked up (:func:`_elementwise_read`): ``map``, ``filter``,
    ``itertools.starmap``, ``itertools.accumulate``, ``functools.reduce``,
    ``np.frompyfunc``, ``np.vectorize`` (and what these two made),
    ``np.apply_along_axis`` and a tensor's ``apply_``, ``map_``, ``map2_``,
    even in a branch that does not run. ``np.fromfunction``,
    ``np.apply_over_axes`` and ``np.piecewise`` call their function once on
    whole arrays, and pass. A correct vectorised answer does none of this,
    however it is written or formatted.
    """

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        executed: Counter[tuple[int, int]] = Counter()  # (frame id, offset) -> times
        where: dict[tuple[int, int], int] = {}  # (frame id, offset) -> line number
        calls: Counter[object] = Counter()  # learner code object -> times called
        frames: list[FrameType] = []  # keeps watched frames alive, so their ids stay unique
        elementwise: list[str] = []  # what loops element by element, read by the learner's code

        def local(frame: FrameType, event: str, arg: object) -> Callable | None:
            if event == "opcode":
                key = (id(frame), frame.f_lasti)
                executed[key] += 1
                where[key] = frame.f_lineno
            return local

        def trace(frame: FrameType, event: str, arg: object) -> Callable | None:
            if event != "call" or not _is_learner_code(frame.f_code.co_filename):
                return None
            if not any(frame is f for f in frames):  # a resumed generator is not a new call
                frames.append(frame)
                if frame.f_code not in calls:
                    elementwise.extend(_elementwise_read(frame))
                calls[frame.f_code] += 1
            frame.f_trace_lines = False
            frame.f_trace_opcodes = True
            return local

        result, watched = _tracing(call, trace)
        if not watched:
            return result, _SWITCHED_OFF
        repeated = [(n, where[key]) for key, n in executed.items() if n > 1]
        if repeated:
            n, line = max(repeated)
            return result, (
                f"runs a Python loop: line {line} of your code ran {n} times in one call "
                "(any loop counts, even a generator in an input check).\n"
                f"   Hint: {hint}"
            )
        busy = [(n, code.co_name) for code, n in calls.items() if n > max_calls]
        if busy:
            n, name = max(busy)
            return result, (
                f"runs a Python loop: your function {name} was called {n} times in one call "
                f"(map, np.vectorize or similar).\n   Hint: {hint}"
            )
        if elementwise:
            return result, (
                f"applies a function element by element ({elementwise[0]}): a loop run for "
                "you, one call per element or row, is still a Python loop.\n"
                f"   Hint: {hint}"
            )
        return result, None

    return guard


def _checker_internals() -> dict[object, str]:
    """Code object -> name of every module-level function of the checkers' modules."""
    internals: dict[object, str] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith("attnbook.exercises"):
            continue
        for name, value in list(vars(module).items()):
            if inspect.isfunction(value) and value.__module__ == module_name:
                internals[value.__code__] = f"{module_name}.{name}"
    return internals


def _handed_in(answer: object, depth: int = 4) -> Iterator[object]:
    """The callables an answer is made of: itself, what it wraps (``__wrapped__``,
    ``functools.partial``) and the callables its closure holds (a checker's wrapper holds
    the learner's function)."""
    yield answer
    if depth == 0:
        return
    inner = [getattr(answer, "__wrapped__", None), getattr(answer, "func", None)]
    inner += [cell.cell_contents for cell in getattr(answer, "__closure__", None) or ()]
    for value in inner:
        with contextlib.suppress(ValueError):  # an empty closure cell
            if callable(value):
                yield from _handed_in(value, depth - 1)


def _in_package(module: str) -> bool:
    """Whether ``module`` is the package's, the checkers' (no_checker_internals' business) aside."""
    inside = module == "attnbook" or module.startswith("attnbook.")
    return inside and not module.startswith("attnbook.exercises")


def _package_part(value: object) -> str | None:
    """The package name that ``value`` is or belongs to ("attnbook.softmax", "an attnbook
    MultiHeadAttention", "a subclass of attnbook.FeedForward"), or ``None`` for anything
    else, the checkers included."""
    if isinstance(value, ModuleType):
        return value.__name__ if _in_package(value.__name__) else None
    if isinstance(value, type) or not (callable(value) and hasattr(value, "__qualname__")):
        cls = value if isinstance(value, type) else type(value)  # a class, or an object
        bases = [c for c in cls.__mro__ if _in_package(getattr(c, "__module__", "") or "")]
        if not bases:
            return None
        if bases[0] is not cls:
            return f"a subclass of attnbook.{bases[0].__name__}"
        return f"attnbook.{cls.__name__}" if cls is value else f"an attnbook {cls.__name__}"
    module = getattr(value, "__module__", None) or ""  # a function
    if not _in_package(module):
        return None
    import attnbook

    public = getattr(attnbook, value.__name__, None) is value  # type: ignore[attr-defined]
    return f"attnbook.{value.__name__}" if public else f"{module}.{value.__qualname__}"  # type: ignore[attr-defined]


def _refused_module(value: object) -> str | None:
    """The module of ``value`` (a module, function or class an answer reads) when the grader
    would refuse to import it in an answer (not in :data:`ANSWER_MODULES`), else ``None``.
    The learner's own functions and classes, the package's (``no_package``'s business) and
    plain objects (a tensor, a number) are ``None``."""
    if isinstance(value, ModuleType):
        module = value.__name__
    elif isinstance(value, type) or callable(value):
        code = getattr(value, "__code__", None)
        if code is not None and _is_learner_code(code.co_filename):
            return None  # the learner's own function: what it reads is watched when it runs
        module = getattr(value, "__module__", None)
        if not isinstance(module, str) or module == "__main__":
            return None
        defined_in = getattr(sys.modules.get(module), "__file__", None)
        if defined_in is not None and _is_learner_code(defined_in):
            return None  # a class or function of the learner's own script or test module
    else:
        return None
    top = module.split(".")[0]
    if top == "attnbook" or top.lstrip("_") in ANSWER_MODULES or top == "builtins":
        return None  # C parts of allowed modules carry an underscore: _functools, _heapq
    return module


def _globals_read(code: CodeType) -> list[str]:
    """The global names ``code`` reads (not the attributes it reads off them)."""
    loads = ("LOAD_GLOBAL", "LOAD_NAME")
    return list(dict.fromkeys(i.argval for i in dis.get_instructions(code) if i.opname in loads))


def no_package(answer: object = None) -> Guard:
    """A guard that fails an answer whose own code uses the package (``attnbook``).

    The grader runs every answer without the package (it refuses ``import
    attnbook`` in the program it takes from the notebook), so an answer that
    uses ``attnbook.softmax`` inside the attention exercise would pass here and
    fail there. This guard says so here first: it fails an answer that *is* a
    package function, or whose code (the answer and every helper of the
    learner it calls) reads a global name bound to the package, one of its
    functions or classes, or an object of one of its classes, or holds one
    (a default argument, a closure). Package objects that a case hands to the
    answer (chapter 9's block gets the package's attention as its sub-layer)
    are arguments, not globals, and stay allowed.

    For the same reason it fails an answer that reads a module, or a function or
    class of one, that the grader would not let it import (any but
    :data:`ANSWER_MODULES`: ``einops``, ``operator``, ``IPython``, ...), which
    the grader's static check refuses before the answer runs.
    """

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        seen: list[str] = []
        for f in _handed_in(answer):
            if part := _package_part(f):
                seen.append(f"{part} (handed to the checker)")
            code = getattr(f, "__code__", None)
            if code is None or not _is_learner_code(code.co_filename):
                continue
            # what the learner's function holds: its defaults and its closure
            held = [*(f.__defaults__ or ()), *(f.__kwdefaults__ or {}).values()]
            for cell in f.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    held.append(cell.cell_contents)
            seen += [
                f"{p} (held by your function {f.__name__})" for v in held if (p := _package_part(v))
            ]
            seen += [
                f"module {m} (held by your function {f.__name__})"
                for v in held
                if (m := _refused_module(v))
            ]
        read: set[CodeType] = set()

        def profile(frame: FrameType, event: str, arg: object) -> None:
            code = frame.f_code
            if event != "call" or code in read or not _is_learner_code(code.co_filename):
                return
            read.add(code)
            for name in _globals_read(code):
                value = frame.f_globals.get(name)
                if (part := _package_part(value)) is not None:
                    seen.append(f"{part} (the name `{name}` in your code)")
                elif (module := _refused_module(value)) is not None:
                    seen.append(f"module {module} (the name `{name}` in your code)")

        def problem(part: str) -> str:
            if part.startswith("module "):
                allowed = ", ".join(sorted(ANSWER_MODULES - {"__future__"}))
                return (
                    f"uses {part}, which the grader does not let an answer import, so this "
                    f"would fail there.\n   Hint: an answer may import {allowed}."
                )
            return (
                f"uses the package: {part}. The grader runs answers without attnbook, "
                "so this would fail there.\n   Hint: write it with NumPy or PyTorch (for example "
                "torch.softmax for a softmax)."
            )

        return _first_seen(call, profile, seen, problem)

    return guard


def no_checker_internals(answer: object = None) -> Guard:
    """A guard that fails an answer which uses a function of :mod:`attnbook.exercises`.

    Each checker's module holds its reference answer and its known mistakes as
    module-level functions, reachable by a name (``pkgutil.resolve_name``,
    ``importlib``, ``getattr``) that no list of forbidden library functions
    names. The answer fails when it *is* one of them (``answer``, the function
    handed to the checker, possibly wrapped), or when the learner's code calls
    one. The checkers' own wrappers call them freely, and the functions a case
    hands to the answer (a block's sub-layers) are closures, not module-level
    functions, so the answer may call those.
    """

    def guard(call: Callable[[], object]) -> tuple[object, str | None]:
        internals = _checker_internals()
        seen: list[str] = [
            internals[f.__code__]
            for f in _handed_in(answer)
            if getattr(f, "__code__", None) in internals
        ]

        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event == "call" and frame.f_code in internals:
                caller = frame.f_back
                if caller is not None and _is_learner_code(caller.f_code.co_filename):
                    seen.append(internals[frame.f_code])

        return _first_seen(
            call,
            profile,
            seen,
            lambda name: (
                f"uses {name}, the checker's own code (its reference answer or a known "
                "mistake).\n   Hint: write the answer yourself from array operations."
            ),
        )

    return guard


def diagnose_mistake(
    got: object,
    expected: object,
    args: tuple,
    mistakes: Sequence[Mistake],
    rtol: float,
    atol: float,
) -> tuple[Mistake, bool] | None:
    """The first known mistake whose answer on ``args`` is what the learner returned, and
    whether the match shows beyond NaN (``False``: the two agree, but the mistake differs
    from the right answer only where both return NaN or inf)."""
    for mistake in mistakes:
        try:
            with np.errstate(all="ignore"):
                wrong = mistake.answer(*args)
        except Exception:  # a mistake that raises on these inputs simply does not match
            continue
        if compare_outputs(wrong, expected, rtol, atol) is None:
            continue  # this case cannot tell the mistake from the right answer
        if compare_outputs(got, wrong, rtol, atol) is None:
            return mistake, _shows_beyond_nan(got, wrong, expected, rtol, atol)
    return None


def mistake_hint(
    got: object,
    expected: object,
    args: tuple,
    mistakes: Sequence[Mistake],
    rtol: float,
    atol: float,
    case_hint: str,
) -> str:
    """The hint of a failed case: the known mistake the answer matches, else ``case_hint``.

    A match on NaN alone is offered as a possibility, before the case's own hint: every
    unstable answer returns NaN there, whatever else it does. A mistake's hint that already
    holds the case's hint (a case built to catch that mistake gives the same advice) is not
    followed by it a second time.
    """
    found = diagnose_mistake(got, expected, args, mistakes, rtol, atol)
    if found is None:
        return case_hint
    mistake, certain = found
    if certain:
        return f"this looks like {mistake.name}. {mistake.hint}"
    if case_hint in mistake.hint:
        return f"the NaN or inf is what {mistake.name} gives here. {mistake.hint}"
    return (
        f"the NaN or inf is what {mistake.name} gives here. {mistake.hint} "
        f"If that is not what you wrote: {case_hint}"
    )


def _shows_beyond_nan(
    got: object, wrong: object, expected: object, rtol: float, atol: float
) -> bool:
    """Where ``got`` has NaN or inf in place of finite numbers, does ``wrong`` also differ from
    ``expected`` somewhere else? NaN on its own is no fingerprint: every unstable answer
    shares it, whatever its other mistake (e.g. a shift by the whole array's maximum)."""
    arrays = (got, wrong, expected)
    if not all(isinstance(x, torch.Tensor | np.ndarray) for x in arrays):
        return True
    g, w, e = (_to_numpy(x) for x in arrays)
    if not g.shape == w.shape == e.shape:
        return True
    finite = np.isfinite(g) & np.isfinite(e)
    if finite.all():
        return True
    return bool((finite & ~np.isclose(w, e, rtol=rtol, atol=atol)).any())


def run_cases(
    exercise: str,
    learner_fn: Callable,
    reference_fn: Callable,
    cases: Sequence[Case],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    mistakes: Sequence[Mistake] = (),
    guard: Guard | None = None,
) -> Verdict:
    """Run ``learner_fn`` and ``reference_fn`` on every case and compare the results.

    Args:
        exercise: the exercise's name, used in the verdict.
        learner_fn: the learner's function.
        reference_fn: the package's function it must agree with.
        cases: the hidden cases, tried in order; the first failure stops the run.
            When the reference returns a boolean array (a mask), the learner's
            result must be boolean too and is compared exactly.
        rtol: relative tolerance of the comparison.
        atol: absolute tolerance of the comparison.
        mistakes: typical wrong answers; when a case fails and the learner's
            result equals a mistake's, the verdict names that mistake and shows
            its hint instead of the case's.
        guard: wraps each call of the learner's function and reports a
            problem with *how* it computed (a forbidden call, a Python loop)
            even when the numbers are right. :func:`no_checker_internals`,
            the exercise's :func:`chapter_guard` and :func:`library_guard`, and
            :func:`no_package` are added to it.

    Returns:
        A :class:`Verdict`; displaying it shows the learner what happened.
    """
    # For every exercise: the checkers' own reference answers and mistakes, the chapter's own
    # answers (before the rest: chapter 7's multi_head_loop also calls the package's
    # attention, and that it is the chapter's answer is what the learner needs to hear), the
    # checker's own guard (its hint is the more specific one), the library equivalents that
    # the grader forbids, and the package, which the grader runs without.
    guards = (
        no_checker_internals(learner_fn),
        chapter_guard(exercise),
        guard,
        library_guard(exercise),
        no_package(learner_fn),
    )
    guard = all_of(*(g for g in guards if g is not None))
    learner_fn = _against_reference(learner_fn, reference_fn, rtol, atol)
    if _CAPTURE.get():  # checker_spec: hand the checker's settings over instead of running
        spec = CheckSpec(exercise, learner_fn, reference_fn, tuple(cases), rtol, atol)
        raise _Captured(dataclasses.replace(spec, mistakes=tuple(mistakes), guard=guard))
    return _judge(exercise, learner_fn, reference_fn, cases, rtol, atol, mistakes, guard)


def _returned(refused: RefusedResult) -> str:
    """A verdict's clause for what a checker's wrapper refused: "returned ...", as it says."""
    text = str(refused)
    return text if text.startswith("returned") else f"returned what the checker refuses: {text}"


def _judge(
    exercise: str,
    learner_fn: Callable,
    reference_fn: Callable,
    cases: Sequence[Case],
    rtol: float,
    atol: float,
    mistakes: Sequence[Mistake],
    guard: Guard | None,
) -> Verdict:
    """The first failing case's verdict, or a pass."""
    if not callable(learner_fn):
        raise ValueError(
            f"check_{exercise} needs your function itself, got {type(learner_fn).__name__}; "
            f"pass the function without calling it, e.g. check_{exercise}(my_function)"
        )
    deferred = None  # the first case whose gradients are wrong, told once all values pass
    for i, case in enumerate(cases, start=1):
        expected = reference_fn(*case.make_args())
        args = case.make_args()
        before = snapshot(args)
        try:
            prime_reference(learner_fn, args)
            # NumPy's overflow warnings would only repeat what the verdict explains.
            with np.errstate(all="ignore"):
                if guard is None:
                    got, misuse = learner_fn(*args), None
                else:
                    got, misuse = guard(lambda args=args: learner_fn(*args))
        except NotImplementedError:
            return Verdict(
                exercise,
                False,
                False,
                len(cases),
                f"⏳ {exercise}: not attempted yet. Replace `raise NotImplementedError` "
                "with your code and run this cell again.",
            )
        except RefusedResult as exc:  # the checker's wrapper refused what the answer returned
            return Verdict(
                exercise,
                False,
                True,
                len(cases),
                f"❌ {exercise}: case {i}/{len(cases)} ({case.name}) {_returned(exc)}\n"
                f"   Hint: {case.hint}",
            )
        except Exception as exc:
            return Verdict(
                exercise,
                False,
                True,
                len(cases),
                f"❌ {exercise}: case {i}/{len(cases)} ({case.name}) raised "
                f"{type(exc).__name__}: {exc}\n   Hint: {case.hint}",
            )
        if misuse is None:
            misuse = changed_inputs(learner_fn, before, args)
        gradient = gradient_problem(learner_fn)
        if gradient is not None and deferred is None:
            deferred = f"case {i}/{len(cases)} ({case.name}) {gradient}"
        if misuse is not None:
            return Verdict(
                exercise,
                False,
                True,
                len(cases),
                f"❌ {exercise}: case {i}/{len(cases)} ({case.name}) {misuse}",
            )
        failure = explain_failure(
            exercise, got, expected, case.make_args(), mistakes, rtol, atol, case.hint
        )
        if failure is not None:
            problem, hint = failure
            return Verdict(
                exercise,
                False,
                True,
                len(cases),
                f"❌ {exercise}: case {i}/{len(cases)} ({case.name}) {problem}\n   Hint: {hint}",
            )
    if deferred is not None:
        return Verdict(exercise, False, True, len(cases), f"❌ {exercise}: {deferred}")
    return Verdict(
        exercise,
        True,
        True,
        len(cases),
        f"✅ {exercise}: all {len(cases)} hidden cases pass.",
    )


# ------------------------------------------------------------------ for the grader


@dataclass(frozen=True)
class CheckSpec:
    """Everything a checker hands to :func:`run_cases`: what ``python -m attnbook.grade`` needs
    to run the same exercise itself, on its own cases, outside the learner's kernel."""

    exercise: str  # the exercise's name, e.g. "softmax"
    learner_fn: Callable  # the learner's function as the checker wraps it (e.g. under no_grad)
    reference_fn: Callable  # the package's answer
    cases: tuple[Case, ...]  # the hidden cases
    rtol: float  # the comparison's tolerances
    atol: float
    mistakes: tuple[Mistake, ...] = ()  # the known wrong answers, for hints
    guard: Guard | None = None  # how the answer must not compute (loops, forbidden calls)


class _Captured(Exception):
    """Raised by :func:`run_cases` under :func:`checker_spec`, carrying the checker's settings."""

    def __init__(self, spec: CheckSpec) -> None:
        super().__init__(spec.exercise)
        self.spec = spec


_CAPTURE = contextvars.ContextVar("attnbook_checker_spec", default=False)


def checker_spec(checker: Callable[[Callable], object], fn: Callable) -> CheckSpec:
    """What ``checker(fn)`` would pass to :func:`run_cases`, without running a single case.

    Every checker ends in :func:`run_cases`; called here, it stops there and
    hands over its exercise name, reference, cases, tolerances, mistakes and
    guard, with ``fn`` wrapped as the checker wraps it. The grader uses this
    to evaluate a learner's function on cases of its own in another process,
    and to compare the results itself.

    Args:
        checker: a ``check_<name>`` function of :mod:`attnbook.exercises`.
        fn: the function to check (any callable: the settings do not depend on it).

    Raises:
        ValueError: ``checker`` does not end in :func:`run_cases`.
    """
    token = _CAPTURE.set(True)
    try:
        checker(fn)
    except _Captured as captured:
        return captured.spec
    finally:
        _CAPTURE.reset(token)
    raise ValueError(f"{getattr(checker, '__name__', checker)!r} never calls run_cases")


def _rows_are_distributions(values: np.ndarray) -> bool:
    """Whether ``values`` is a matrix (or a stack of them) whose rows are probability
    distributions or all 0, one at least a distribution: attention weights, as the entropy
    and rollout exercises take them."""
    if values.ndim < 2 or values.shape[-1] < 2 or values.size == 0:
        return False
    if values.min() < 0 or values.max() > 1:
        return False
    sums = values.sum(axis=-1)
    ones = np.abs(sums - 1) < 1e-5
    return bool(np.all(ones | (sums == 0)) and np.any(ones))


def _renormalised(values: np.ndarray) -> np.ndarray:
    sums = values.sum(axis=-1, keepdims=True)
    return values / np.where(sums > 0, sums, 1)


def _perturb(value: object, rng: np.random.Generator) -> object:
    """``value`` with every floating-point array (also inside tuples, lists, dicts and a
    module's parameters) multiplied entrywise by ``1 + 0.1 * N(0, 1)``: signs, zeros, shapes,
    dtypes, masks and integers stay as they are, so the case keeps its point. An array whose
    rows are distributions (attention weights) is renormalised afterwards, so it stays one."""
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        out = value * (1 + 0.1 * rng.standard_normal(value.shape)).astype(value.dtype)
        return _renormalised(out) if _rows_are_distributions(value) else out
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        noise = torch.from_numpy(1 + 0.1 * rng.standard_normal(tuple(value.shape)))
        with torch.no_grad():
            out = value.detach() * noise.to(value.dtype)
            if _rows_are_distributions(_to_numpy(value)):
                out = torch.from_numpy(_renormalised(_to_numpy(out))).to(value.dtype)
        return out.requires_grad_(value.requires_grad)
    if isinstance(value, torch.nn.Module):
        module = copy.deepcopy(value)
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.mul_(
                    torch.from_numpy(1 + 0.1 * rng.standard_normal(parameter.shape)).to(
                        parameter.dtype
                    )
                )
        return module
    if isinstance(value, tuple):
        return tuple(_perturb(v, rng) for v in value)
    if isinstance(value, list):
        return [_perturb(v, rng) for v in value]
    if isinstance(value, dict):
        return {k: _perturb(v, rng) for k, v in value.items()}
    return value


def results_alike(spec: CheckSpec, args: tuple) -> list[int]:
    """On one case's inputs ``args``, for the reference's result and then each known mistake's,
    the index of the first of them that the checker cannot tell from it (``-1``: the mistake
    raises). Two mistakes with one result cannot be told apart, nor a mistake from the right
    answer where they agree."""
    outs: list[object] = [spec.reference_fn(*copy.deepcopy(args))]
    for mistake in spec.mistakes:
        try:
            with np.errstate(all="ignore"):
                outs.append(mistake.answer(*copy.deepcopy(args)))
        except Exception:  # a mistake that raises here is told apart by raising
            outs.append(None)
    alike = []
    for i, out in enumerate(outs):
        same = (
            j
            for j, other in enumerate(outs[: i + 1])
            if other is not None and compare_outputs(out, other, spec.rtol, spec.atol) is None
        )
        alike.append(-1 if out is None else next(same, i))
    return alike


def seeded_args(case: Case, seed: int, spec: CheckSpec | None = None) -> tuple:
    """A fresh variant of ``case``'s inputs, drawn from ``seed``: the values move, the case's
    kind (shapes, signs, zeros, masks, what the case tests) stays.

    The hidden cases ship inside the package, so their answers can be read and
    memorised; a grader that keeps ``seed`` to itself asks for values no
    submission has seen. The expected output is the reference's on the same
    variant. A case with a ``draw`` function (integer inputs: sizes, counts,
    token ids) gets what it draws, never the shipped inputs, and, given the
    checker's ``spec``, only inputs on which the reference and the known mistakes
    fall into the same groups of equal results as on the shipped ones
    (:func:`results_alike`): a mistake is then named on a draw as it is in the
    notebook, and never mistaken for another. Any other case gets its own inputs
    with every floating-point value perturbed (:func:`_perturb`).

    Args:
        case: a hidden case.
        seed: the grader's secret seed, combined with the case by the caller.
        spec: the checker's cases, reference and mistakes (``None``: draws are not
            compared with the mistakes).

    Returns:
        The case's arguments, drawn or perturbed.
    """
    rng = np.random.default_rng(seed)
    if case.draw is None:
        return _perturb(case.make_args(), rng)
    shipped = _fingerprint(case.make_args())
    want = None if spec is None else results_alike(spec, case.make_args())
    for _ in range(100):  # a small range of sizes may hold the shipped ones: draw again
        args = case.draw(rng)
        if _fingerprint(args) == shipped:
            continue
        if want is None or results_alike(spec, args) == want:
            return args
    raise ValueError(f"case {case.name!r}: its draw function keeps giving inputs unlike its own")


def _fingerprint(value: object) -> object:
    """A comparable form of a case's inputs: arrays by dtype, shape and bytes, a module by its
    parameters, numbers and text by value; any other object (a function, e.g. a block's
    sub-layer) by its type alone, not by a repr that holds its address."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), _to_numpy(value).tobytes())
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, torch.nn.Module):
        return ("module", tuple(_fingerprint(p) for p in value.parameters()))
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_fingerprint(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _fingerprint(v)) for k, v in value.items()))
    if isinstance(value, int | float | complex | str | bool) or value is None:
        return (type(value).__name__, repr(value))
    return type(value).__name__
