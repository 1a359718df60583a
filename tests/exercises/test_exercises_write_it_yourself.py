"""Chapters 1-3: an answer that calls the function the exercise asks for fails.

Issue 18 (P2): the chapters import the package's ``score_matrix``,
``cosine_similarity``, ``softmax``, ``soft_lookup`` and ``hard_lookup``, so
``check_softmax(lambda x: softmax(x))`` used to pass. The checkers now watch
the calls an answer makes (``forbid_calls``), so the package's function and a
library's equivalent fail, however they are imported or called, while an
answer written by hand still passes.
"""

from __future__ import annotations

import cProfile
import functools
import heapq
import math
import operator
import pstats
import sys
from collections.abc import Callable
from operator import truediv as _truediv

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnbook
from attnbook.exercises import (
    check_cosine_similarity,
    check_hard_lookup,
    check_scaled_dot_product_attention,
    check_score_matrix,
    check_soft_lookup,
    check_softmax,
    check_softmax_temperature,
)
from attnbook.exercises._framework import all_of, forbid_calls, library_softmaxes

scipy_special = pytest.importorskip("scipy.special")
scipy_distance = pytest.importorskip("scipy.spatial.distance")


def _rejects(verdict: attnbook.exercises.Verdict, name: str) -> None:
    assert not verdict, verdict.message
    assert verdict.attempted
    assert name in verdict.message, verdict.message
    assert "asks you to write yourself" in verdict.message
    assert "Hint:" in verdict.message


def _softmax(x: np.ndarray, t: float = 1.0) -> np.ndarray:
    e = np.exp((x - x.max(axis=-1, keepdims=True)) / t)
    return e / e.sum(axis=-1, keepdims=True)


def _torch(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=float))


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda x: attnbook.softmax(x), "attnbook.softmax"),
        (lambda x: scipy_special.softmax(x, axis=-1), "scipy.special.softmax"),
        (lambda x: np.exp(scipy_special.log_softmax(x, axis=-1)), "scipy.special.log_softmax"),
        (lambda x: torch.softmax(_torch(x), -1).numpy(), "torch.softmax"),
        (lambda x: F.softmax(_torch(x), dim=-1).numpy(), "torch.nn.functional.softmax"),
        (lambda x: _torch(x).softmax(-1).numpy(), "Tensor.softmax"),
        (lambda x: _torch(x).log_softmax(-1).exp().numpy(), "Tensor.log_softmax"),
        (lambda x: torch.special.softmax(_torch(x), -1).numpy(), "torch.special.softmax"),
    ],
)
def test_softmax_that_calls_a_library_fails(wrong: Callable, name: str) -> None:
    _rejects(check_softmax(wrong), name)


def test_softmax_temperature_that_calls_a_library_fails() -> None:
    _rejects(check_softmax_temperature(lambda x, t: attnbook.softmax(x, temperature=t)), "attnbook")
    shifted = lambda x, t: (x - x.max(axis=-1, keepdims=True)) / t  # noqa: E731
    _rejects(
        check_softmax_temperature(lambda x, t: scipy_special.softmax(shifted(x, t), axis=-1)),
        "scipy.special.softmax",
    )


def test_softmaxes_written_by_hand_pass() -> None:
    assert check_softmax(_softmax)
    assert check_softmax_temperature(_softmax)
    # Torch is allowed as long as the softmax itself is written out:
    assert check_softmax(
        lambda x: (lambda e: (e / e.sum(-1, keepdim=True)).numpy())(
            torch.exp(_torch(x) - _torch(x).amax(-1, keepdim=True))
        )
    )


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda q, k: attnbook.score_matrix(q, k), "attnbook.score_matrix"),
        (lambda q, k: attnbook.dot_product(q[:, None, :], k[None, :, :]), "attnbook.dot_product"),
    ],
)
def test_score_matrix_that_calls_the_package_fails(wrong: Callable, name: str) -> None:
    _rejects(check_score_matrix(wrong), name)


@pytest.mark.parametrize(
    "right",
    [lambda q, k: q @ k.T, lambda q, k: np.einsum("td,sd->ts", q, k), lambda q, k: np.inner(q, k)],
)
def test_score_matrix_written_by_hand_passes(right: Callable) -> None:
    assert check_score_matrix(right)


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda a, b: attnbook.cosine_similarity(a, b), "attnbook.cosine_similarity"),
        (lambda a, b: 1.0 - scipy_distance.cosine(a, b), "scipy.spatial.distance.cosine"),
        (
            lambda a, b: F.cosine_similarity(_torch(a), _torch(b), dim=0).item(),
            "cosine_similarity",
        ),
    ],
)
def test_cosine_similarity_that_calls_a_library_fails(wrong: Callable, name: str) -> None:
    _rejects(check_cosine_similarity(wrong), name)


def test_cosine_similarity_written_by_hand_passes() -> None:
    assert check_cosine_similarity(lambda a, b: a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert check_cosine_similarity(lambda a, b: a @ b / np.sqrt((a @ a) * (b @ b)))


def _soft_lookup(q: np.ndarray, k: np.ndarray, v: np.ndarray, t: float) -> np.ndarray:
    return _softmax(q @ k.T, t) @ v


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda q, k, v, t: attnbook.soft_lookup(q, k, v, temperature=t)[0], "soft_lookup"),
        (lambda q, k, v, t: attnbook.softmax(q @ k.T, temperature=t) @ v, "attnbook.softmax"),
        (
            lambda q, k, v, t: (
                scipy_special.softmax((q @ k.T - (q @ k.T).max(-1, keepdims=True)) / t, axis=-1) @ v
            ),
            "scipy.special.softmax",
        ),
    ],
)
def test_soft_lookup_that_calls_a_library_fails(wrong: Callable, name: str) -> None:
    _rejects(check_soft_lookup(wrong), name)


def test_lookups_written_by_hand_pass() -> None:
    assert check_soft_lookup(_soft_lookup)
    assert check_hard_lookup(lambda q, k, v: v[np.argmax(k @ q)])
    _rejects(
        check_hard_lookup(lambda q, k, v: attnbook.hard_lookup(q, k, v)), "attnbook.hard_lookup"
    )


def test_all_of_reports_the_first_guard_and_runs_the_answer_once() -> None:
    calls = []

    def answer() -> float:
        calls.append(1)
        return float(torch.softmax(torch.zeros(2), 0)[0])

    guard = all_of(
        forbid_calls({"torch.softmax": torch.softmax}, "first"),
        forbid_calls(library_softmaxes(), "second"),
    )
    result, problem = guard(answer)
    assert result == 0.5
    assert len(calls) == 1
    assert problem is not None
    assert "Hint: first" in problem
    assert all_of(forbid_calls({"torch.softmax": torch.softmax}, "x"))(lambda: 1) == (1, None)


def test_every_library_equivalent_fails_beside_the_checkers_own_list() -> None:
    # check_softmax names the softmaxes in its own hint; torch.logsumexp is on the grader's
    # list (extract.LIBRARY_EQUIVALENTS) only, and used to pass here while the grader failed it.
    through_logsumexp = lambda x: np.exp(  # noqa: E731
        x - torch.logsumexp(_torch(x), -1, keepdim=True).numpy()
    )
    verdict = check_softmax(through_logsumexp)
    assert not verdict
    assert "logsumexp" in verdict.message, verdict.message


def _switches_off(hook: Callable[[None], None], answer: Callable) -> Callable:
    def wrapped(*args: object) -> object:
        hook(None)
        return answer(*args)

    return wrapped


def _looped_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    return np.array([[float(a @ b) for b in k] for a in q])


@pytest.mark.parametrize(
    ("checker", "answer"),
    [
        # the profile hook watches for the library's softmax ...
        (check_softmax, _switches_off(sys.setprofile, lambda x: attnbook.softmax(x))),
        # ... and the trace hook for loops
        (check_score_matrix, _switches_off(sys.settrace, _looped_scores)),
    ],
    ids=["setprofile", "settrace"],
)
def test_an_answer_that_switches_off_the_checkers_watch_fails(
    checker: Callable, answer: Callable
) -> None:
    hooks = sys.getprofile(), sys.gettrace()
    verdict = checker(answer)
    assert (sys.getprofile(), sys.gettrace()) == hooks  # the checker put back what was there
    assert not verdict
    assert "switches off the checker's watch" in verdict.message, verdict.message


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def test_a_checker_called_under_cprofile_works_and_leaves_it_profiling() -> None:
    """Under cProfile (and %prun) every checker failed its answer with "'Profile' object is
    not callable": the guards called the profile hook set before them as a Python function,
    and set the profiler's object back as one. The guards pause it for the answer's call and
    enable it again after, with its settings (here: no builtins); they still watch."""
    profiler = cProfile.Profile(builtins=False)
    profiler.enable()
    try:
        right = check_softmax(_softmax)
        library = check_softmax(lambda x: attnbook.softmax(x))
        # a differentiable answer: its gradients are compared with the hooks paused
        attention = check_scaled_dot_product_attention(
            lambda q, k, v: torch.softmax(_scores(q, k), dim=-1) @ v
        )
        after = sys.getprofile()
        math.sqrt(2.0)  # a builtin, which this profiler leaves out
    finally:
        profiler.disable()
    assert right, right.message
    assert attention, attention.message
    assert not library
    assert "softmax" in library.message, library.message
    assert after is profiler
    recorded = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    assert any(name == "check_softmax" for _, _, name in recorded), sorted(recorded)[:30]
    assert not [key for key in recorded if key[0] == "~"]  # builtins=False was kept


_package_softmax = attnbook.softmax  # a global the learner bound to the package
_package_attention = attnbook.MultiHeadAttention(4, 2)  # an object of the package


class _Attention(attnbook.MultiHeadAttention):  # a learner's class built on the package's
    pass


_subclassed = _Attention(4, 2)


def _helper_with_a_default(q, k, v, normalise=attnbook.softmax):
    return normalise(_scores(q, k)) @ v


def _scale_with_operator(q, k, v, divide=operator.truediv):  # a module the grader refuses
    return torch.softmax(divide(q @ k.transpose(-2, -1), math.sqrt(q.shape[-1])), -1) @ v


PACKAGE = "the package: "
REFUSED = "module _operator "  # operator.truediv is _operator's


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (lambda q, k, v: attnbook.softmax(_scores(q, k)) @ v, PACKAGE + "attnbook (the name"),
        (lambda q, k, v: _package_softmax(_scores(q, k)) @ v, PACKAGE + "attnbook.softmax (the"),
        (_helper_with_a_default, PACKAGE + "attnbook.softmax (held by your function _helper"),
        (
            lambda q, k, v: _package_attention.n_heads * 0 + torch.softmax(_scores(q, k), -1) @ v,
            PACKAGE + "an attnbook MultiHeadAttention (the name `_package_attention`",
        ),
        (
            lambda q, k, v: _subclassed.n_heads * 0 + torch.softmax(_scores(q, k), -1) @ v,
            PACKAGE + "a subclass of attnbook.MultiHeadAttention (the name `_subclassed`",
        ),
        # a module the grader's static check refuses (anything outside ANSWER_MODULES)
        (
            lambda q, k, v: torch.softmax(operator.mul(_scores(q, k), 1.0), -1) @ v,
            "module operator (the name `operator`",
        ),
        (
            lambda q, k, v: torch.softmax(_truediv(_scores(q, k), 1.0), -1) @ v,
            REFUSED + "(the name `_truediv`",
        ),
        (_scale_with_operator, REFUSED + "(held by your function _scale_with_operator"),
    ],
    ids=[
        "module",
        "function",
        "default",
        "object",
        "subclass",
        "refused module",
        "refused function",
        "refused default",
    ],
)
def test_what_the_grader_refuses_fails_in_the_notebook_too(answer: Callable, named: str) -> None:
    # attnbook.softmax is not the attention exercise's answer, but the grader runs answers
    # without the package, and lets them import only NumPy, PyTorch, SciPy and a few modules
    # of Python's own: the notebook's checker says so instead of passing.
    verdict = check_scaled_dot_product_attention(answer)
    assert not verdict
    assert f"uses {named}" in verdict.message, verdict.message
    assert "grader" in verdict.message
    assert check_scaled_dot_product_attention(lambda q, k, v: torch.softmax(_scores(q, k), -1) @ v)


def test_the_allowed_modules_pass_whatever_their_functions_are_written_in() -> None:
    # functools.reduce and heapq.nlargest are C functions of _functools and _heapq; a learner's
    # own helper (this test module) is watched, not refused.
    def answer(q, k, v):
        scores = functools.reduce(lambda a, b: a + b, [_scores(q, k)])
        one = heapq.nlargest(1, [1.0, 0.5])[0]
        return torch.softmax(scores * one, -1) @ v

    assert check_scaled_dot_product_attention(answer)
