"""Assertions shared by the checker tests (tests/test_exercises_*.py).

A checker test feeds a wrong answer and asserts that the verdict fails on the
expected hidden case, with a hint, without a traceback, and (where the checker
recognises the mistake) naming it.
"""

from __future__ import annotations

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
