"""The machinery behind every ``check_<name>`` function.

A checker runs a learner's function on hidden cases, compares each result
with the package's reference implementation, and returns a :class:`Verdict`
whose text is short: pass, or the first failing case with what was expected,
what came back and a hint. It never shows a traceback wall and never shows the
reference code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Case", "Verdict", "run_cases"]

_MAX_SHOWN = 24  # arrays with more entries are summarised, not printed


@dataclass(frozen=True)
class Case:
    """One hidden test case of an exercise."""

    name: str  # what the case exercises, shown when it fails, e.g. "large scores (1e4)"
    make_args: Callable[[], tuple]  # builds fresh inputs each time (learners may mutate them)
    hint: str  # one sentence shown when this case fails; points at the idea, not the code


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


def _to_numpy(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=float)


def _show(x: np.ndarray) -> str:
    if x.size <= _MAX_SHOWN:
        return np.array2string(x, precision=4, suppress_small=True, separator=", ")
    return f"array of shape {x.shape} (too large to print)"


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


def _compare(got: object, expected: object, rtol: float, atol: float) -> str | None:
    """Return ``None`` if ``got`` matches ``expected``, else a short description of the difference."""
    if _is_bool(expected):
        return _compare_bool(got, expected)
    try:
        g = _to_numpy(got)
    except (TypeError, ValueError):
        return f"returned a {type(got).__name__}, expected an array of numbers"
    e = _to_numpy(expected)
    if g.shape != e.shape:
        return f"returned shape {_fmt_shape(g.shape)}, expected shape {_fmt_shape(e.shape)}"
    if not np.all(np.isfinite(g)) and np.all(np.isfinite(e)):
        return f"returned NaN or inf where the answer is finite:\n   got      {_show(g)}"
    if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
        worst = np.unravel_index(np.argmax(np.abs(g - e)), g.shape) if g.ndim else ()
        where = f" (largest difference at index {tuple(int(i) for i in worst)})" if g.ndim else ""
        return f"returned the wrong values{where}:\n   expected {_show(e)}\n   got      {_show(g)}"
    return None


def run_cases(
    exercise: str,
    learner_fn: Callable,
    reference_fn: Callable,
    cases: Sequence[Case],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
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

    Returns:
        A :class:`Verdict`; displaying it shows the learner what happened.
    """
    if not callable(learner_fn):
        raise ValueError(
            f"check_{exercise} needs your function itself, got {type(learner_fn).__name__}; "
            f"pass the function without calling it, e.g. check_{exercise}(my_function)"
        )
    for i, case in enumerate(cases, start=1):
        expected = reference_fn(*case.make_args())
        try:
            got = learner_fn(*case.make_args())
        except NotImplementedError:
            return Verdict(
                exercise,
                False,
                False,
                len(cases),
                f"⏳ {exercise}: not attempted yet. Replace `raise NotImplementedError` "
                "with your code and run this cell again.",
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
        problem = _compare(got, expected, rtol, atol)
        if problem is not None:
            return Verdict(
                exercise,
                False,
                True,
                len(cases),
                f"❌ {exercise}: case {i}/{len(cases)} ({case.name}) {problem}\n   Hint: {case.hint}",
            )
    return Verdict(
        exercise,
        True,
        True,
        len(cases),
        f"✅ {exercise}: all {len(cases)} hidden cases pass.",
    )
