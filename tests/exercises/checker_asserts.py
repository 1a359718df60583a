"""Assertions shared by the checker tests (tests/test_exercises_*.py).

A checker test feeds a wrong answer and asserts that the verdict fails on the
expected hidden case, with a hint, without a traceback, and (where the checker
recognises the mistake) naming it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbook.exercises import Verdict


def assert_rejects(
    verdict: Verdict,
    failing_case: str,
    mistake: str | None = None,
    *,
    named: str | None = None,
) -> None:
    """Assert ``verdict`` rejects an attempted answer on ``failing_case``.

    Args:
        verdict: what the checker returned.
        failing_case: text of the case's name that the message must show.
        mistake: if given, the message must name it: ``this looks like <mistake>`` (the
            framework's wording for a recognised mistake), or, where the mistake differs
            from the right answer only by returning NaN or inf, ``is what <mistake> gives``.
        named: if given, this text must appear in the hint.
    """
    assert not verdict, verdict.message
    assert verdict.attempted, verdict.message
    assert failing_case in verdict.message, verdict.message
    assert "Hint:" in verdict.message, verdict.message
    assert "Traceback" not in verdict.message, verdict.message
    if mistake is not None:
        named_as = (f"this looks like {mistake}", f"is what {mistake}")
        assert any(phrase in verdict.message for phrase in named_as), verdict.message
    if named is not None:
        assert named in verdict.message.split("Hint:")[1], verdict.message


def stub(*args: object) -> object:
    """An exercise stub as learners receive it."""
    raise NotImplementedError


def cut_from_autograd(right: Callable, position: int) -> dict[str, Callable]:
    """Answers with ``right``'s values that autograd cannot differentiate with respect to
    argument ``position``: that argument detached first, the result detached, copied with
    ``torch.tensor(result.tolist())`` or taken through NumPy, and computed under
    ``torch.no_grad()``. Each is refused by a checker that applies the differentiability rule."""

    def input_detached(*args: object) -> object:
        args = list(args)
        args[position] = args[position].detach()
        return right(*args)

    def under_no_grad(*args: object) -> object:
        with torch.no_grad():
            return right(*args)

    def copied(*args: object) -> object:
        result = right(*args)
        return torch.tensor(result.tolist(), dtype=result.dtype)

    return {
        "x.detach()": input_detached,
        "result.detach()": lambda *args: right(*args).detach(),
        "torch.tensor(result.tolist())": copied,
        "numpy": lambda *args: torch.from_numpy(right(*args).numpy()),
        "torch.no_grad()": under_no_grad,
    }


def assert_refuses_cut_answers(
    checker: Callable[[Callable], Verdict],
    right: Callable,
    position: int,
    name: str,
    failing_case: str,
    only: tuple[str, ...] = (),
) -> None:
    """Assert ``checker`` passes ``right`` and refuses, on ``failing_case``, each of
    :func:`cut_from_autograd`'s copies of it (or ``only`` those named); the one that detaches
    argument ``position`` must be refused by that argument's ``name``."""
    verdict = checker(right)
    assert verdict, verdict.message
    for how, cut in cut_from_autograd(right, position).items():
        if only and how not in only:
            continue
        verdict = checker(cut)
        assert_rejects(verdict, failing_case)
        # the argument detached is named; a result cut whole names the first argument. A result
        # that the checker's wrapper refuses is told as returned; .numpy() of a tensor that
        # requires a gradient raises in the answer's own code
        which = name if how == "x.detach()" else ""
        if "requires a gradient to NumPy" in verdict.message:
            assert "raised ValueError" in verdict.message, (how, verdict.message)
        else:
            said = (") returned ", f"that autograd cannot differentiate with respect to `{which}")
            assert all(phrase in verdict.message for phrase in said), (how, verdict.message)
            assert "raised" not in verdict.message, (how, verdict.message)
