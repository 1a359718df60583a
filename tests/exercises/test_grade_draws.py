"""The grader's inputs (``_framework.seeded_args``): new for every case, of the case's kind.

The hidden cases ship inside the package, so a learner could paste a table of their
answers into a notebook. The grader asks for inputs drawn from a seed it keeps: floats
perturbed, and, for a case whose inputs are integers (sizes, counts, ids), which no
perturbation of floats changes, inputs its ``draw`` function makes. These tests check
that no case is left as it ships (but the two that admit one input) and that a drawn
case keeps its point: each known mistake fails on the same case, and is named the same,
on drawn inputs as on the shipped ones.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import attnbook.exercises as exercises
from attnbook.exercises import _framework

fingerprint = _framework._fingerprint  # what the grader compares a draw with the shipped inputs by
CHECKERS = sorted(name for name in dir(exercises) if name.startswith("check_"))
SEEDS = range(25)

# Cases whose kind admits a single input: the grader asks for the shipped one.
ONE_INPUT = {("causal_mask", 2): "seq_len = 1", ("padding_mask", 4): "lengths [1], max_len = 1"}


def _spec(name: str) -> _framework.CheckSpec:
    return _framework.checker_spec(getattr(exercises, name), lambda *args: None)


@pytest.mark.parametrize("name", CHECKERS)
def test_every_case_gets_inputs_no_table_of_the_shipped_ones_holds(name: str) -> None:
    """A table of the shipped cases' answers, the attack, fails in the grader on every case
    (the ones that admit one input aside): its inputs are never the shipped ones, even where
    a case draws from a small range of sizes that holds them."""
    spec = _spec(name)
    for i, case in enumerate(spec.cases, start=1):
        if (spec.exercise, i) in ONE_INPUT:
            assert ONE_INPUT[spec.exercise, i] in case.name
            assert fingerprint(_framework.seeded_args(case, 0)) == fingerprint(case.make_args())
            continue
        shipped = fingerprint(case.make_args())
        repeats = sum(
            fingerprint(_framework.seeded_args(case, seed, spec)) == shipped for seed in SEEDS
        )
        assert repeats == 0, f"{name} case {i} ({case.name}): the shipped inputs {repeats} times"


def _outcome(
    spec: _framework.CheckSpec,
    mistake: _framework.Mistake,
    cases: list[tuple],
    expected: list[object],
) -> tuple[int, str | None] | None:
    """Where ``mistake`` first fails among ``cases`` (inputs per case, the reference's results
    ``expected``), and what the checker calls it there; ``None`` if it passes them all."""
    for i, (args, want) in enumerate(zip(cases, expected, strict=True)):
        try:
            with np.errstate(all="ignore"):
                got = mistake.answer(*copy.deepcopy(args))
        except Exception:
            return i, None  # raised: the case's own hint
        if _framework.compare_outputs(got, want, spec.rtol, spec.atol) is not None:
            found = _framework.diagnose_mistake(
                got, want, copy.deepcopy(args), spec.mistakes, spec.rtol, spec.atol
            )
            return i, None if found is None else found[0].name
    return None


@pytest.mark.parametrize(
    "name",
    [n for n in CHECKERS if _spec(n).mistakes and any(case.draw for case in _spec(n).cases)],
)
def test_drawn_cases_tell_the_mistakes_apart_as_the_shipped_ones_do(name: str) -> None:
    """On every drawn case, the reference and the known mistakes fall into the same groups of
    equal results as on the shipped case: no two mistakes that the shipped case tells apart
    give the same result on a draw (the first count draws had the position table's c * d
    equal to the biases' 9 * d * L when c = 9 * L, and named one for the other)."""
    spec = _spec(name)
    for i, case in enumerate(spec.cases):
        if case.draw is None:
            continue
        want = _framework.results_alike(spec, case.make_args())
        for seed in SEEDS:
            drawn = _framework.seeded_args(case, 1000 * seed + i, spec)
            alike = _framework.results_alike(spec, drawn)
            assert alike == want, f"{name} case {i + 1}, seed {seed}: {drawn}"


@pytest.mark.parametrize(
    "name",
    [n for n in CHECKERS if _spec(n).mistakes and any(case.draw for case in _spec(n).cases)],
)
def test_drawn_cases_keep_their_point(name: str) -> None:
    """Each known mistake fails on the same case, and is named the same, on the grader's
    drawn inputs as on the shipped ones: a draw keeps what its case tests."""
    spec = _spec(name)

    def results(cases: list[tuple]) -> list[object]:  # the reference once per case
        return [spec.reference_fn(*copy.deepcopy(args)) for args in cases]

    shipped = [case.make_args() for case in spec.cases]
    expected = results(shipped)
    wants = [_outcome(spec, mistake, shipped, expected) for mistake in spec.mistakes]
    for mistake, want in zip(spec.mistakes, wants, strict=True):
        assert want is not None, f"{name}: {mistake.name} passes the shipped cases"
    for seed in SEEDS:
        drawn = [
            _framework.seeded_args(case, 1000 * seed + i, spec) for i, case in enumerate(spec.cases)
        ]
        expected = results(drawn)
        for mistake, want in zip(spec.mistakes, wants, strict=True):
            got = _outcome(spec, mistake, drawn, expected)
            assert got == want, (
                f"{name}, seed {seed}: {mistake.name}: {got} on drawn, {want} shipped"
            )


def test_a_table_of_the_shipped_counts_passes_the_notebook_and_fails_the_grader() -> None:
    """The attack on an exercise whose inputs are all integers: the parameter count, read off
    the package for the three shipped cases. The notebook's checker cannot tell (its cases
    are fixed); the grader's drawn sizes can."""
    spec = _spec("check_gpt_num_parameters")
    table = {case.make_args(): spec.reference_fn(*case.make_args()) for case in spec.cases}

    def memorised(*args: int) -> int:
        return table.get(args, 0)

    assert exercises.check_gpt_num_parameters(memorised)
    for i, case in enumerate(spec.cases):
        drawn = _framework.seeded_args(case, 7 + i, spec)
        problem = _framework.compare_outputs(
            memorised(*drawn), spec.reference_fn(*drawn), spec.rtol, spec.atol
        )
        assert problem is not None, f"case {i + 1}: {drawn}"
