"""Every typical wrong answer fails its checker, and the hint names the mistake.

Issue 7, section 6: hints are written per mistake (what it looks like, what to
look at). Each wrong answer below is written the way a learner would write it;
the checker must reject it and its verdict must name that mistake. The guards
(no Python loops, no call to the function the exercise asks for) must reject
every disguise of the forbidden thing and accept every correct vectorised
answer, however it is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnbook
from attnbook.exercises import (
    check_hard_lookup,
    check_masked_attention,
    check_masked_softmax,
    check_padding_mask,
    check_scaled_dot_product_attention,
    check_score_matrix,
    check_soft_lookup,
    check_softmax,
    check_softmax_temperature,
)


def _rejects(verdict: attnbook.exercises.Verdict, *phrases: str) -> None:
    assert not verdict, verdict.message
    assert verdict.attempted
    assert "Hint:" in verdict.message
    assert "Traceback" not in verdict.message
    for phrase in phrases:
        assert phrase in verdict.message, verdict.message


def _np_softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


# ------------------------------------------------------------ inputs changed in place


def test_an_answer_that_changes_its_input_in_place_is_rejected() -> None:
    """The right weights, but the caller's scores are overwritten on the way (x -= ...)."""

    def shifted_in_place(x):
        x -= x.max(axis=-1, keepdims=True)
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)

    assert np.allclose(shifted_in_place(np.array([1.0, 2.0])), _np_softmax(np.array([1.0, 2.0])))
    _rejects(check_softmax(shifted_in_place), "case 1/", "changed its argument `x` in place")
    # the same answer on a copy passes, and so does one returning its input unchanged
    assert check_softmax(lambda x: shifted_in_place(np.array(x, dtype=float)))
    assert check_hard_lookup(lambda q, K, V: V[int(np.argmax(K @ q))])


# ------------------------------------------------------------ the checkers' own functions


def test_the_checkers_own_functions_are_off_limits_however_they_are_reached() -> None:
    """exercises.softmax holds a right softmax (_stable, the temperature checker's reference);
    reached by name, wrapped, or handed in as it is, it fails the exercise."""
    import functools
    import pkgutil

    stable = pkgutil.resolve_name("attnbook.exercises.softmax:_stable")
    assert np.allclose(stable(np.array([1.0, 2.0])), _np_softmax(np.array([1.0, 2.0])))
    for answer in (lambda x: stable(x), stable, functools.partial(stable)):
        _rejects(check_softmax(answer), "case 1/", "attnbook.exercises.softmax._stable")
    # the sub-layers a case hands to the answer are the checker's too, and may be called
    assert attnbook.exercises.check_pre_ln_block(
        lambda x, attention, ffn, n1, n2: (h := x + attention(n1(x))) + ffn(n2(h))
    )


# ------------------------------------------------------------ softmax: the shift


def _shifted(shift: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def answer(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            e = np.exp(x - shift(x))
            return e / e.sum(axis=-1, keepdims=True)

    return answer


@pytest.mark.parametrize(
    ("shift", "named", "row"),
    [
        (lambda x: x.mean(axis=-1, keepdims=True), "each row's mean instead of", [0.0, 2000.0]),
        (lambda x: np.min(x, axis=-1)[..., None], "each row's minimum instead of", [-1000.0, 0.0]),
    ],
    ids=["mean", "minimum"],
)
def test_softmax_shifted_by_another_statistic_than_the_maximum_is_named(
    shift: Callable, named: str, row: list[float]
) -> None:
    """Both pass the scores near 1000 and -1000 (one shift suits a row whose scores are
    close) and return NaN on the batch of size 1e4: the verdict names which shift, and says
    why the maximum's works, on the row its hint quotes, which overflows with that shift and
    not with the maximum (nor, for the minimum's, with no shift at all)."""
    verdict = check_softmax(_shifted(shift))
    _rejects(verdict, "case 6/6", f"NaN or inf is what subtracting {named} its maximum")
    _rejects(verdict, "exp(0) = 1", "the sum is at least 1", f"[{row[0]:.0f}, {row[1]:.0f}]")
    x = np.array(row)
    assert np.isnan(_shifted(shift)(x)).any()
    np.testing.assert_array_equal(_np_softmax(x), [0.0, 1.0])
    if named.startswith("each row's minimum"):
        np.testing.assert_array_equal(_shifted(lambda x: 0.0)(x), [0.0, 1.0])


@pytest.mark.parametrize(
    "answer",
    [
        _shifted(lambda x: np.max(x, axis=-1)[..., None]),
        _shifted(lambda x: np.amax(x, axis=-1, keepdims=True) - 3.0),  # largest exponent 3: safe
        lambda x: np.exp(
            (y := x - x.max(axis=-1, keepdims=True)) - np.log(np.exp(y).sum(axis=-1, keepdims=True))
        ),
    ],
    ids=["max then [..., None]", "max minus a constant", "log-sum-exp"],
)
def test_unusual_correct_softmaxes_still_pass(answer: Callable) -> None:
    assert check_softmax(answer), check_softmax(answer).message


def test_softmax_shifted_by_the_whole_arrays_maximum_keeps_the_per_row_hint() -> None:
    """One maximum for the whole batch is right for a single row and wrong where another row
    lies far below it (0 / 0): no shift mistake is named, the case says to take it per row."""
    verdict = check_softmax(_shifted(lambda x: x.max()))
    _rejects(verdict, "case 6/6", "Hint: Take the maximum along the last axis only, per row")
    assert "subtracting" not in verdict.message, verdict.message


# ------------------------------------------------------------ temperature softmax


def _says_the_advice_once(verdict: attnbook.exercises.Verdict) -> None:
    """Dividing by τ first is matched on NaN alone, on the case built to catch it: the verdict
    names it and gives the advice to subtract the maximum first once, without adding the
    case's own hint, which says the same ("If that is not what you wrote: ...")."""
    hint = verdict.message.split("Hint:", 1)[1]
    assert "If that is not what you wrote" not in hint, hint
    assert hint.count("first") == 1, hint
    assert hint.count("inf - inf = NaN") == 1, hint


def test_temperature_softmax_divided_before_the_maximum_is_named() -> None:
    with np.errstate(all="ignore"):
        verdict = check_softmax_temperature(lambda x, t: _np_softmax(x / t))
    _rejects(verdict, "1e307", "dividing by τ before subtracting the maximum", "NaN")
    _says_the_advice_once(verdict)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda x, t: _np_softmax(x * t), "multiplying by τ instead of dividing"),
        (lambda x, t: _np_softmax(x) / t, "dividing the weights by τ after the softmax"),
        (
            lambda x, t: (e := np.exp((x - x.max(axis=-1, keepdims=True)) / t)) / e.sum(),
            "normalising by the sum of the whole array, not of each row",
        ),
    ],
)
def test_temperature_softmax_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_softmax_temperature(wrong), mistake)


def test_temperature_softmax_without_the_maximum_trick_gives_its_advice_once() -> None:
    """Scores of size 10 at τ = 0.01: the bare softmax returns NaN there, matched on NaN alone;
    the verdict names it and says "maximum first" once, not again after "If that is not what
    you wrote" with the case's own hint."""
    with np.errstate(all="ignore"):
        verdict = check_softmax_temperature(
            lambda x, t: np.exp(x / t) / np.exp(x / t).sum(axis=-1, keepdims=True)
        )
    _rejects(verdict, "case 4/5", "the softmax without the maximum trick", "NaN")
    hint = verdict.message.split("Hint:", 1)[1]
    assert "If that is not what you wrote" not in hint, hint
    assert hint.count("maximum") == 2, hint  # the mistake's name, then the advice once
    assert hint.count("first") == 1, hint


def test_temperature_softmax_without_the_maximum_trick_is_told_truly_on_both_cases() -> None:
    """The bare softmax is named on the case of size 10 (scores / τ of 1000) and also on the
    1e307 case, by an answer that survives the first (one in extended precision, say) and
    returns the bare softmax's NaN there. On both, the hint's numbers hold (scores / τ pass
    709.78, beyond which exp overflows; not "reach 1000", which the 1e307 case does not say)
    and the advice to subtract the maximum first comes once, not again after "If that is not
    what you wrote" with the 1e307 case's own hint."""
    from attnbook.exercises._framework import checker_spec, compare_outputs, mistake_hint

    spec = checker_spec(check_softmax_temperature, lambda x, t: x)
    (bare,) = [m for m in spec.mistakes if m.name == "the softmax without the maximum trick"]
    named = []
    for number, case in enumerate(spec.cases, start=1):
        x, t = case.make_args()
        expected = spec.reference_fn(x, t)
        with np.errstate(all="ignore"):
            got = bare.answer(x, t)
            if compare_outputs(got, expected, spec.rtol, spec.atol) is None:
                continue  # the case cannot tell the bare softmax from the right answer
            hint = mistake_hint(
                got, expected, (x, t), spec.mistakes, spec.rtol, spec.atol, case.hint
            )
        named.append(number)
        assert hint.startswith("the NaN or inf is what the softmax without the maximum"), hint
        with np.errstate(over="ignore"):
            assert np.max(x / t) > 709.78  # ln of float64's largest number: exp overflows
        assert "pass 709.78" in hint, hint
        assert "1000" not in hint, hint
        assert "If that is not what you wrote" not in hint, hint
        assert hint.count("first") == 1, hint
    assert named == [4, 5]


@pytest.mark.skipif(
    np.finfo(np.longdouble).max <= np.finfo(np.float64).max,
    reason="long double is float64 on this platform",
)
def test_a_bare_softmax_in_extended_precision_is_named_on_the_1e307_case() -> None:
    """exp(1000) is finite in x86's long double, so this answer passes the case of size 10
    and fails the 1e307 one as the bare softmax does: the verdict of the test above."""

    def wide(x, t):
        e = np.exp(np.asarray(x, dtype=np.longdouble) / t)
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float64)

    with np.errstate(all="ignore"):
        verdict = check_softmax_temperature(wide)
    _rejects(verdict, "case 5/5", "the softmax without the maximum trick", "pass 709.78")
    assert "If that is not what you wrote" not in verdict.message, verdict.message


def _entropy_with_nan(a: torch.Tensor) -> torch.Tensor:
    return -(a * a.log()).sum(-1).mean(-1)


def _softmax_then_renormalise(q, k, v, m):
    weights = torch.softmax(_scores(q, k), dim=-1) * m
    return weights / weights.sum(dim=-1, keepdim=True) @ v  # 0 / 0 where every kept weight is 0


@pytest.mark.parametrize(
    ("checker", "wrong", "mistake"),
    [
        ("check_head_entropy", _entropy_with_nan, "0 ln 0 computed as NaN"),
        (
            "check_masked_softmax",
            lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1),
            "a plain softmax of -inf scores",
        ),
        (
            "check_masked_attention",
            _softmax_then_renormalise,
            "a softmax first, then zeroing the blocked weights and renormalising",
        ),
        (
            "check_masked_softmax",
            lambda s, m: torch.softmax(
                s + torch.zeros_like(s).masked_fill(~m, -math.inf), -1
            ).nan_to_num(0.0),
            "an additive -inf mask, then nan_to_num",
        ),
    ],
)
def test_a_mistake_matched_on_nan_alone_gives_its_cases_advice_once(
    checker: str, wrong: Callable, mistake: str
) -> None:
    """On the case built to catch it, each of these mistakes is matched on NaN alone; its hint
    holds the case's, so the verdict does not add "If that is not what you wrote:" and the
    same advice again (found by building every checker's verdict for every case and mistake)."""
    verdict = getattr(attnbook.exercises, checker)(wrong)
    _rejects(verdict, mistake, "NaN")
    assert "If that is not what you wrote" not in verdict.message, verdict.message


def test_soft_lookup_divided_before_the_maximum_is_named() -> None:
    with np.errstate(all="ignore"):
        verdict = check_soft_lookup(lambda q, k, v, t: _np_softmax(q @ k.T / t) @ v)
    _rejects(verdict, "dividing by τ before subtracting the maximum")
    _says_the_advice_once(verdict)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _lookup(scores: np.ndarray, values: np.ndarray, t: float) -> np.ndarray:
    return _np_softmax((scores - scores.max(axis=-1, keepdims=True)) / t) @ values


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (
            lambda q, k, v, t: _lookup(_unit(q) @ _unit(k).T, v, t),
            "cosine similarities as the scores",
        ),
        (
            lambda q, k, v, t: _lookup(q @ k.T / math.sqrt(q.shape[-1]), v, t),
            "scores divided by sqrt(d) as well as by the temperature",
        ),
    ],
)
def test_soft_lookup_mistakes(wrong: Callable, mistake: str) -> None:
    """Both got the first case's general hint, "Score the query against every key (dot
    products), softmax the scores, then ...", which does not say what is off."""
    _rejects(check_soft_lookup(wrong), f"this looks like {mistake}")


def test_soft_lookup_without_the_temperature_is_not_called_a_sqrt_d_scale() -> None:
    """With d = 4 and τ = 0.5 (case 2), leaving τ out gives the same weights as dividing by
    sqrt(d) and τ: the verdict said "scores divided by sqrt(d) as well as by the
    temperature" to a learner who had divided by nothing."""
    verdict = check_soft_lookup(lambda q, k, v, t: _lookup(q @ k.T, v, 1.0))
    _rejects(verdict, "case 2/", "this looks like the temperature left out")
    assert "sqrt" not in verdict.message, verdict.message


# ---------------------------------------------------------------- hard lookup


def test_hard_lookup_with_cosine_similarity_is_named() -> None:
    def cosine_lookup(query: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        cos = keys @ query / (np.linalg.norm(keys, axis=1) * np.linalg.norm(query))
        return values[np.argmax(cos)]

    _rejects(
        check_hard_lookup(cosine_lookup),
        "a long key beats a short",
        "cosine similarity instead of the dot product",
    )


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda q, k, v: v[np.argmin(k @ q)], "the arg-min instead of the arg-max"),
        (lambda q, k, v: v[np.argmax(np.abs(k @ q))], "the largest score in absolute value"),
        (lambda q, k, v: k[np.argmax(k @ q)], "returning the best key instead of its value"),
    ],
)
def test_hard_lookup_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_hard_lookup(wrong), mistake)


def test_hard_lookup_off_by_one_is_not_called_an_arg_min() -> None:
    """The key before the best one: on the first case's old keys it was also the arg-min's,
    and the verdict named that mistake."""
    verdict = check_hard_lookup(lambda q, k, v: v[np.argmax(k @ q) - 1])
    _rejects(verdict, "one query, 4 keys")
    assert "arg-min" not in verdict.message


# ------------------------------------------------------------- masked attention


def _fill(q, k, v, m, value):
    return torch.softmax(_scores(q, k).masked_fill(~m, value), dim=-1) @ v


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda q, k, v, m: _fill(q, k, v, m, -1e9), "a large finite number (-1e9)"),
        (
            lambda q, k, v, m: torch.softmax(_scores(q, k) + (1 - m.double()) * -10000, -1) @ v,
            "a finite penalty ((1 - mask) * -10000)",
        ),
        (
            lambda q, k, v, m: (
                (lambda w: w / w.sum(-1, keepdim=True))(torch.softmax(_scores(q, k), -1) * m) @ v
            ),
            "a softmax first, then zeroing the blocked weights and renormalising",
        ),
        (
            lambda q, k, v, m: torch.softmax(_scores(q, k), -1).masked_fill(~m, 0.0) @ v,
            "without renormalising",
        ),
        (lambda q, k, v, m: _fill(q, k, v, ~m, float("-inf")), "an inverted mask"),
        (lambda q, k, v, m: _fill(q, k, v, m, 0.0), "filling blocked scores with 0"),
        (
            lambda q, k, v, m: torch.softmax((q @ k.mT).masked_fill(~m, -math.inf), -1) @ v,
            "a missing scale",
        ),
        (
            lambda q, k, v, m: (
                torch.softmax((q @ k.mT / q.shape[-1]).masked_fill(~m, -math.inf), -1) @ v
            ),
            "dividing by d_k instead of sqrt(d_k)",
        ),
        (
            lambda q, k, v, m: torch.softmax(_scores(q, k).masked_fill(~m, -math.inf), -2) @ v,
            "a softmax over the queries (dim=-2)",
        ),
        (
            lambda q, k, v, m: torch.softmax(_scores(q, k).masked_fill(~m, -math.inf), 0) @ v,
            "a softmax over the queries (dim=-2)",
        ),
    ],
)
def test_masked_attention_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_masked_attention(wrong), mistake)


@pytest.mark.parametrize("count", [lambda q, k: q.shape[-2], lambda q, k: k.shape[-2]])
def test_masked_attention_scaled_by_a_number_of_tokens_is_named(count: Callable) -> None:
    """Scaling by sqrt(T) or sqrt(S) got the first case's hint about blocking with -inf,
    which sends a learner whose mask is right to look at the mask."""
    verdict = check_masked_attention(
        lambda q, k, v, m: (
            torch.softmax((q @ k.mT / math.sqrt(count(q, k))).masked_fill(~m, -math.inf), -1) @ v
        )
    )
    _rejects(verdict, "case 1/", "this looks like a scale of sqrt(T) or sqrt(S)")
    assert "-inf" not in verdict.message.split("Hint:")[1], verdict.message


def test_masked_attention_tells_a_minus_1e9_fill_from_a_finite_penalty() -> None:
    """A fill replaces the blocked scores, a penalty lowers them: each gets its own hint."""
    filled = check_masked_attention(lambda q, k, v, m: _fill(q, k, v, m, -1e9))
    _rejects(filled, "a large finite number (-1e9)", "score below -1e9")
    assert "pushes a blocked score down" not in filled.message
    penalised = check_masked_attention(
        lambda q, k, v, m: torch.softmax(_scores(q, k) + (1 - m.double()) * -10000, -1) @ v
    )
    _rejects(penalised, "a finite penalty", "pushes a blocked score down")
    assert "score below -1e9" not in penalised.message


def _fill_additive(q, k, v, additive):
    return torch.softmax(_scores(q, k) + additive, -1) @ v


def test_masked_attention_accepts_minus_infinity_written_several_ways() -> None:
    assert check_masked_attention(lambda q, k, v, m: _fill(q, k, v, m, float("-inf")))
    assert check_masked_attention(lambda q, k, v, m: _fill(q, k, v, m, -math.inf))
    additive = lambda m: torch.where(m, 0.0, -math.inf)  # noqa: E731
    assert check_masked_attention(lambda q, k, v, m: _fill_additive(q, k, v, additive(m)))
    # The package's own helper gives the same numbers, but the grader runs answers without
    # the package, so the notebook's checker says so already:
    verdict = check_masked_attention(
        lambda q, k, v, m: _fill_additive(q, k, v, attnbook.mask_to_additive(m, q.dtype))
    )
    assert not verdict
    assert "uses the package: attnbook (the name `attnbook` in your code)" in verdict.message
    # Right numbers, but the exercise is to apply the mask by hand (issue 18, P2):
    _rejects(
        check_masked_attention(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m)),
        "calls F.scaled_dot_product_attention",
    )


# ------------------------------------------------ scaled dot-product attention


def _by_hand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(_scores(q, k), dim=-1) @ v


def test_sdpa_accepts_answers_written_by_hand() -> None:
    assert check_scaled_dot_product_attention(_by_hand)
    assert check_scaled_dot_product_attention(
        lambda q, k, v: (
            F.softmax(torch.einsum("...td,...sd->...ts", q, k) / q.shape[-1] ** 0.5, -1) @ v
        )
    )
    # using the library *after* writing it, e.g. to compare, is fine outside the checker
    torch.testing.assert_close(
        _by_hand(*(torch.randn(3, 4) for _ in range(3))).shape, torch.Size([3, 4])
    )


def _helper_calling_torch(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


_sdpa_alias = F.scaled_dot_product_attention
_ours_alias = attnbook.scaled_dot_product_attention


@pytest.mark.parametrize(
    ("wrong", "name"),
    [
        (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), "F.scaled_dot_product_attention"),
        (lambda q, k, v: _sdpa_alias(q, k, v), "F.scaled_dot_product_attention"),
        (lambda q, k, v: _helper_calling_torch(q, k, v), "F.scaled_dot_product_attention"),
        (
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=None),
            "F.scaled_dot_product_attention",
        ),
        (lambda q, k, v: _ours_alias(q, k, v)[0], "attnbook.scaled_dot_product_attention"),
        (
            lambda q, k, v: attnbook.scaled_dot_product_attention(q, k, v, need_weights=False)[0],
            "attnbook.scaled_dot_product_attention",
        ),
    ],
)
def test_sdpa_that_calls_the_library_fails(wrong: Callable, name: str) -> None:
    _rejects(check_scaled_dot_product_attention(wrong), f"calls {name}", "write the three steps")


def test_sdpa_returning_output_and_weights_is_told_to_return_the_output_alone() -> None:
    """The package's attention returns (output, weights); an answer that did the same was
    told to "join the pieces with torch.stack or torch.cat", which would make it worse."""

    def with_weights(q, k, v):
        weights = torch.softmax(_scores(q, k), dim=-1)
        return weights @ v, weights

    verdict = check_scaled_dot_product_attention(with_weights)
    _rejects(verdict, "a tuple of 2 tensors", "value 1 of them has that shape", "weights")
    assert "torch.stack" not in verdict.message
    verdict = check_soft_lookup(
        lambda q, k, v, t: (_lookup(q @ k.T, v, t), _np_softmax(q @ k.T / t))
    )
    _rejects(verdict, "a tuple of 2 arrays", "value 1 of them has that shape")
    # the right numbers as a list, or a vector as a list of numbers, still pass
    assert check_softmax(lambda x: list(_np_softmax(x)))
    assert check_softmax(lambda x: _np_softmax(x).tolist())


def test_sdpa_through_nn_multihead_attention_fails() -> None:
    def via_mha(q, k, v):
        d = q.shape[-1]
        mha = nn.MultiheadAttention(d, 1, bias=False, batch_first=True).double()
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.eye(d).repeat(3, 1))
            mha.out_proj.weight.copy_(torch.eye(d))
        return mha(q, k, v, need_weights=False)[0]

    _rejects(check_scaled_dot_product_attention(via_mha), "calls ")


def test_a_library_class_only_built_is_told_as_built_not_called() -> None:
    """Building nn.MultiheadAttention counts as using the library's answer even where the
    answer never calls it (its __init__ is watched, as its forward is); the verdict said it
    "calls" the class."""

    def builds_mha(q, k, v):
        nn.MultiheadAttention(q.shape[-1], 1, batch_first=True)  # built, never called
        return _by_hand(q, k, v)

    verdict = check_scaled_dot_product_attention(builds_mha)
    _rejects(verdict, "builds torch.nn.MultiheadAttention, which this exercise asks you to")
    assert "calls" not in verdict.message, verdict.message


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v, "a missing scale"),
        (
            lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1], -1) @ v,
            "dividing by d_k instead of sqrt(d_k)",
        ),
        (lambda q, k, v: torch.softmax(_scores(q, k), -2) @ v, "a softmax over the queries"),
        (
            lambda q, k, v: torch.softmax(q @ k.mT * math.sqrt(q.shape[-1]), -1) @ v,
            "this looks like multiplying the scores by sqrt(d_k) instead of dividing",
        ),
        (
            lambda q, k, v: torch.softmax(q @ k.mT, -1) / math.sqrt(q.shape[-1]) @ v,
            "this looks like dividing the weights by sqrt(d_k) after the softmax",
        ),
        (
            lambda q, k, v: torch.softmax(q @ k.mT / math.sqrt(v.shape[-1]), -1) @ v,
            "this looks like a scale of sqrt(d_v), the width of a value",
        ),
    ],
)
def test_sdpa_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_scaled_dot_product_attention(wrong), mistake)


def _scaled_by(count: Callable) -> Callable:
    """An attention answer right but for its scale, sqrt(count(query, key))."""
    return lambda q, k, v: torch.softmax(q @ k.mT / math.sqrt(count(q, k)), -1) @ v


@pytest.mark.parametrize(
    "count",
    [lambda q, k: len(q), lambda q, k: q.shape[0], lambda q, k: k.size(0), lambda q, k: q.shape[1]],
    ids=["len(query)", "query.shape[0]", "key.size(0)", "query.shape[1]"],
)
def test_sdpa_scaled_by_the_number_of_tokens_is_named(count: Callable) -> None:
    """d_k read off the wrong axis (a count of tokens, or of sequences in the batch case): the
    verdict gave the worked example's generic hint, "Three steps: ...", which the answer
    follows."""
    verdict = check_scaled_dot_product_attention(_scaled_by(count))
    _rejects(verdict, "this looks like a scale of sqrt(T), the number of tokens", "shape[-1]")
    assert "Three steps" not in verdict.message


# ----------------------------------------------------------------- score matrix


def _double_loop(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    scores = np.zeros((queries.shape[0], keys.shape[0]))
    for t in range(queries.shape[0]):
        for s in range(keys.shape[0]):
            scores[t, s] = queries[t] @ keys[s]
    return scores


def _row_loop(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return np.stack([keys @ q for q in queries])


def _while_loop(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    rows, t = [], 0
    while t < len(queries):
        rows.append(keys @ queries[t])
        t += 1
    return np.array(rows)


def _generator(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return np.array(list(keys @ q for q in queries))


def _mapped(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return np.array(list(map(lambda q: keys @ q, queries)))


def _vectorised_lambda(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    pair = np.vectorize(lambda t, s: queries[t] @ keys[s])
    return pair(*np.indices((len(queries), len(keys))))


@pytest.mark.parametrize(
    "looping", [_double_loop, _row_loop, _while_loop, _generator, _mapped, _vectorised_lambda]
)
def test_score_matrix_with_python_loops_fails(looping: Callable) -> None:
    np.testing.assert_allclose(  # the numbers are right: only the loop is wrong
        looping(np.eye(3)[:2], np.arange(12.0).reshape(4, 3)),
        np.eye(3)[:2] @ np.arange(12.0).reshape(4, 3).T,
    )
    # map's loop over two queries is told as what runs it (a Python loop run for the answer)
    _rejects(check_score_matrix(looping), "Python loop", "inner dimensions are both d")


def _formatted_over_lines(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    transposed = (
        keys
        .T
    )  # fmt: skip
    return (
        queries
        @ transposed
    )  # fmt: skip


def _with_a_helper(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    def as_2d(x: np.ndarray) -> np.ndarray:
        return np.atleast_2d(x)

    return as_2d(queries) @ as_2d(keys).T


@pytest.mark.parametrize(
    "vectorised",
    [
        lambda q, k: q @ k.T,
        lambda q, k: np.dot(q, k.T),
        lambda q, k: np.einsum("td,sd->ts", q, k),
        lambda q, k: np.matmul(q, k.swapaxes(0, 1)),
        lambda q, k: (q[:, None, :] * k[None, :, :]).sum(-1),
        _formatted_over_lines,
        _with_a_helper,
    ],
)
def test_score_matrix_accepts_every_vectorised_answer(vectorised: Callable) -> None:
    verdict = check_score_matrix(vectorised)
    assert verdict, verdict.message


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda q, k: k @ q.T, "keys @ queries.T"),
        (
            lambda q, k: (
                (q / np.linalg.norm(q, axis=1, keepdims=True))
                @ (k / np.linalg.norm(k, axis=1, keepdims=True)).T
            ),
            "cosine similarities instead of dot products",
        ),
        (lambda q, k: q @ k.T / math.sqrt(k.shape[1]), "scores divided by sqrt(d)"),
    ],
)
def test_score_matrix_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_score_matrix(wrong), mistake)


def test_score_matrix_without_fitting_the_operands_is_told_why_the_product_raised() -> None:
    """queries @ keys raises NumPy's gufunc error on the first case; its hint said what an
    entry is, but not why the product did not fit, and without giving the operand to turn."""
    verdict = check_score_matrix(lambda queries, keys: queries @ keys)
    _rejects(verdict, "case 1/5", "raised ValueError", "(n, k) array by a (k, m) one")


@pytest.mark.parametrize(
    "wrong",
    [
        lambda a, b: np.dot(a, b) / (np.dot(a, a) * np.dot(b, b)),
        lambda a, b: a @ b / (np.linalg.norm(a) ** 2 * np.linalg.norm(b) ** 2),
    ],
)
def test_cosine_similarity_without_the_square_root_is_named(wrong: Callable) -> None:
    """It got "Parallel vectors have cosine similarity 1", true but silent on the root."""
    _rejects(
        attnbook.exercises.check_cosine_similarity(wrong),
        "this looks like the squared lengths",
        "sqrt(a·a)",
    )


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


@pytest.mark.parametrize(
    ("wrong", "mistake", "hint"),
    [
        (lambda a, b: 1 - _cos(a, b), "the cosine distance", "parallel vectors give 1"),
        (lambda a, b: 1 - np.dot(a, b) / np.sqrt(a @ a * (b @ b)), "the cosine distance", "1 - cos θ"),
        (lambda a, b: np.arccos(_cos(a, b)), "the angle θ in radians", "π / 2 for orthogonal"),
        (lambda a, b: math.acos(max(-1.0, min(1.0, _cos(a, b)))), "the angle θ in radians", "orthogonal vectors give 0"),
        (lambda a, b: np.degrees(np.arccos(_cos(a, b))), "the angle θ in degrees", "90 for orthogonal"),
    ],
)  # fmt: skip
def test_cosine_distance_and_angle_are_named_each_with_its_hint(
    wrong: Callable, mistake: str, hint: str
) -> None:
    """Each got the case's hint, "Parallel vectors have cosine similarity 1", which does not
    say what it returned instead; parallel vectors give 0 for both, so the orthogonal case,
    where they differ, comes first."""
    verdict = attnbook.exercises.check_cosine_similarity(wrong)
    _rejects(verdict, "case 1/4 (two orthogonal vectors)", f"this looks like {mistake}", hint)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda a, b: np.dot(a, b), "the dot product a·b alone"),
        (lambda a, b: float(sum(x * y for x, y in zip(a, b))), "the dot product a·b alone"),
        (lambda a, b: a @ b / np.linalg.norm(a), "the dot product divided by one length only"),
        (lambda a, b: a @ b / math.sqrt(b @ b), "the dot product divided by the other length"),
    ],
)
def test_cosine_similarity_not_divided_by_both_lengths_is_named(wrong, mistake) -> None:
    """The raw dot product, or one divided by a single length, got only the parallel case's
    hint, "Parallel vectors have cosine similarity 1, whatever their lengths", which does not
    say what is missing (the expert read of chapter 1 found no named mistake for it)."""
    _rejects(
        attnbook.exercises.check_cosine_similarity(wrong),
        "case 2/4",
        f"this looks like {mistake}",
        "‖a‖ ‖b‖",
    )


@pytest.mark.parametrize(
    "wrong",
    [
        lambda a, b: np.dot(a, b) / np.linalg.norm(a) * np.linalg.norm(b),
        lambda a, b: a @ b / math.sqrt(a @ a) * math.sqrt(b @ b),
    ],
)
def test_cosine_similarity_divided_then_multiplied_is_named(wrong: Callable) -> None:
    """a·b / ‖a‖ * ‖b‖ multiplies by the second length (Python reads it left to right); it
    got the case's hint, "Parallel vectors have cosine similarity 1", silent on the cause."""
    _rejects(
        attnbook.exercises.check_cosine_similarity(wrong),
        "case 2/4",
        "this looks like dividing by ‖a‖, then multiplying by ‖b‖",
        "left to right",
    )


@pytest.mark.parametrize(
    "right",
    [
        lambda a, b: (a / np.linalg.norm(a)) @ (b / np.linalg.norm(b)),
        lambda a, b: float(np.dot(a, b) / math.sqrt(np.dot(a, a) * np.dot(b, b))),
        lambda a, b: np.sum(a * b) / np.sqrt(np.sum(a**2) * np.sum(b**2)),
    ],
)
def test_cosine_similarity_accepts_correct_answers(right: Callable) -> None:
    verdict = attnbook.exercises.check_cosine_similarity(right)
    assert verdict, verdict.message


# ------------------------------------------------------------------- causal mask


def _triangle(seq_len: int, upper: bool, diagonal: int) -> torch.Tensor:
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return ones.triu(diagonal) if upper else ones.tril(diagonal)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda n: _triangle(n, upper=True, diagonal=1), "an inverted mask (True marks the"),
        (lambda n: torch.arange(n)[None, :] < torch.arange(n)[:, None], "the diagonal left out"),
        (lambda n: _triangle(n, upper=False, diagonal=-1), "the diagonal left out"),
        (lambda n: _triangle(n, upper=True, diagonal=0), "the upper triangle"),
        (lambda n: torch.arange(n)[None, :] >= torch.arange(n)[:, None], "the upper triangle"),
    ],
)
def test_causal_mask_mistakes(wrong: Callable, mistake: str) -> None:
    """Each had only the case's hint, "True on and below the diagonal", which does not say
    that the answer's convention is inverted or which triangle or diagonal is off."""
    _rejects(attnbook.exercises.check_causal_mask(wrong), f"this looks like {mistake}")


@pytest.mark.parametrize(
    "right",
    [
        lambda n: _triangle(n, upper=False, diagonal=0),
        lambda n: ~_triangle(n, upper=True, diagonal=1),
        lambda n: torch.arange(n)[:, None] >= torch.arange(n),
        lambda n: torch.tril(torch.ones(n, n)).bool(),
    ],
)
def test_causal_mask_accepts_correct_answers(right: Callable) -> None:
    verdict = attnbook.exercises.check_causal_mask(right)
    assert verdict, verdict.message


# ------------------------------------------------------------------ padding mask


@pytest.mark.parametrize(
    "right",
    [
        lambda lengths, max_len: (torch.arange(max_len)[None, :] < lengths[:, None])[:, None, :],
        lambda lengths, max_len: torch.stack(
            [torch.arange(max_len) < n for n in lengths]
        ).unsqueeze(1),
    ],
)
def test_padding_mask_checker_accepts_correct_answers(right: Callable) -> None:
    verdict = check_padding_mask(right)
    assert verdict, verdict.message


def test_padding_mask_checker_rejects_the_packages_own_function() -> None:
    verdict = check_padding_mask(lambda lengths, max_len: attnbook.padding_mask(lengths, max_len))
    assert not verdict
    assert "calls attnbook" in verdict.message


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (
            lambda lengths, max_len: (torch.arange(max_len) <= lengths[:, None])[:, None, :],
            "an off-by-one",
        ),
        (
            lambda lengths, max_len: (torch.arange(max_len) >= lengths[:, None])[:, None, :],
            "an inverted mask (True marks the padding)",
        ),
        (
            lambda lengths, max_len: torch.arange(max_len) < lengths[:, None],
            "shape (B, S) without the query axis",
        ),
        (
            lambda lengths, max_len: (torch.arange(max_len) < lengths[:, None])[:, :, None],
            "the axis of size 1 in the wrong place",
        ),
    ],
)
def test_padding_mask_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_padding_mask(wrong), mistake)


def test_mask_and_lookup_hints_name_the_mistake_not_the_code() -> None:
    """These hints gave the line of the answer (torch.arange(max_len) < lengths[:, None],
    mask[:, None, :], torch.tril, np.argmax(keys @ query), torch.where(...) for empty rows);
    they now say what is wrong and what to check, as do the hints for calling the package."""
    from attnbook.exercises import lookup, masking

    mistakes = (
        masking._CAUSAL_MISTAKES
        + masking._PADDING_MISTAKES
        + masking._MASKED_MISTAKES
        + masking._MASKED_SOFTMAX_MISTAKES[:1]  # a plain softmax: NaN on an empty row
        + lookup._HARD_MISTAKES
    )
    hints = [mistake.hint for mistake in mistakes]
    hints += [
        check_padding_mask(
            lambda lengths, max_len: attnbook.padding_mask(lengths, max_len)
        ).message,
        attnbook.exercises.check_causal_mask(lambda n: attnbook.causal_mask(n)).message,
    ]
    code = ("torch.arange(", "torch.tril", "torch.triu", "[:, None", "masked_fill(", "torch.where(")
    for hint in hints:
        for piece in (*code, "np.argmax(", "np.argmin", "np.abs", ".any(dim"):
            assert piece not in hint, hint


def test_padding_mask_must_be_a_tensor() -> None:
    """The exercise asks for a boolean tensor, with PyTorch only: the right values as a
    NumPy array are refused, with the type expected."""
    verdict = check_padding_mask(
        lambda lengths, max_len: (np.arange(max_len) < lengths.numpy()[:, None])[:, None, :]
    )
    _rejects(verdict, "returned a NumPy array, expected a torch tensor of dtype torch.bool")


def test_padding_mask_must_be_boolean() -> None:
    verdict = check_padding_mask(
        lambda lengths, max_len: (torch.arange(max_len) < lengths[:, None])[:, None, :].float()
    )
    _rejects(verdict, "expected a boolean mask")


# ---------------------------------------------------------------- masked softmax


def _masked_softmax_where(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)


def _masked_softmax_guarded(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    top = scores.masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True)  # largest allowed
    top = torch.where(torch.isneginf(top), 0.0, top)  # an empty row: shift by 0
    e = torch.exp((scores - top).masked_fill(~mask, float("-inf")))
    total = e.sum(dim=-1, keepdim=True)
    return e / total.clamp_min(torch.finfo(scores.dtype).tiny)


def _unstable(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Right but for the shift: exp(1000) overflows."""
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def _shifted_by_a_blocked_score(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Shifts by the largest score of the row, blocked keys included: allowed weights underflow."""
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)).masked_fill(~mask, 0.0)
    total = e.sum(dim=-1, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


@pytest.mark.parametrize("wrong", [_unstable, _shifted_by_a_blocked_score])
def test_masked_softmax_checker_rejects_an_unstable_softmax(wrong: Callable) -> None:
    verdict = check_masked_softmax(wrong)
    _rejects(verdict, "scores near 1000", "largest *allowed* score")


@pytest.mark.parametrize("right", [_masked_softmax_where, _masked_softmax_guarded])
def test_masked_softmax_checker_accepts_correct_answers(right: Callable) -> None:
    verdict = check_masked_softmax(right)
    assert verdict, verdict.message


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (
            lambda s, m: torch.softmax(s.masked_fill(~m, float("-inf")), -1),
            "NaN on a fully masked row",
        ),
        (
            lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), -1),
            "spreads a fully masked row uniformly",
        ),
        (
            lambda s, m: torch.softmax(s.masked_fill(m, torch.finfo(s.dtype).min), -1),
            "an inverted mask",
        ),
        (lambda s, m: torch.softmax(s, -1) * m, "without renormalising"),
    ],
)
def test_masked_softmax_mistakes(wrong: Callable, mistake: str) -> None:
    _rejects(check_masked_softmax(wrong), mistake)


def _renormalised(weights: torch.Tensor) -> torch.Tensor:
    return weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-300)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (
            lambda s, m: _renormalised(torch.softmax(s, -1) * m),
            "a softmax over all keys, blocked ones included, then zeroing the blocked weights",
        ),
        (
            lambda s, m: _masked_softmax_where(s.float(), m).to(s.dtype),
            "computing in float32 (scores.float()) and converting back",
        ),
    ],
)
def test_masked_softmax_mistakes_named_beyond_the_cases_hint(wrong: Callable, mistake: str) -> None:
    """The first got the hint about shifting by the largest allowed score, the second the
    hint about finite fills (-1e4) although it fills with -inf: neither says what went wrong."""
    verdict = check_masked_softmax(wrong)
    _rejects(verdict, f"this looks like {mistake}")
    assert "A finite number is not below every score" not in verdict.message


def _zeroed_in_place(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    weights[torch.isnan(weights)] = 0.0  # right values, but softmax's output is edited
    return weights


@pytest.mark.parametrize(
    "in_place",
    [
        _zeroed_in_place,
        lambda s, m: torch.softmax(s.masked_fill(~m, -math.inf), -1).masked_fill_(
            ~m.any(-1, keepdim=True), 0.0
        ),
    ],
)
def test_masked_softmax_edited_in_place_is_told_why_the_backward_pass_fails(
    in_place: Callable,
) -> None:
    """PyTorch's error names a tensor "modified by an inplace operation"; the hint spoke only
    of NaN replaced afterwards, and recommended masked_fill, which the answer uses (in place)."""
    _rejects(check_masked_softmax(in_place), "the gradient", "edit no result in place")


def test_masked_softmax_accepts_a_float32_guard_that_keeps_float64() -> None:
    """Widening only narrower dtypes (float16 to float32) keeps float64 scores exact."""
    wide = lambda s: s.to(torch.promote_types(s.dtype, torch.float32))  # noqa: E731
    verdict = check_masked_softmax(lambda s, m: _masked_softmax_where(wide(s), m).to(s.dtype))
    assert verdict, verdict.message
    verdict = check_masked_softmax(
        lambda s, m: torch.softmax(s.masked_fill(~m, torch.finfo(s.dtype).min), -1) * m
    )
    assert verdict, verdict.message


@pytest.mark.parametrize(
    "odd",
    [lambda x: torch.empty(x.shape, device="meta"), lambda x: 10**400],
    ids=["meta tensor", "int past float64"],
)
def test_an_answer_numpy_cannot_read_gets_a_verdict_not_a_crash(odd: Callable) -> None:
    """Converting these raised NotImplementedError or OverflowError out of the checker."""
    verdict = check_softmax(odd)
    assert not verdict, verdict.message
    assert "expected an array of numbers" in verdict.message


# ------------------------------------------------------------ review of December 2026


def test_soft_lookup_shifted_by_the_whole_arrays_maximum_is_rejected() -> None:
    """Every query row shifted by one maximum: rows far below it underflow to 0 / 0."""

    def whole_array_max(q, k, v, t):
        s = q @ k.T
        e = np.exp((s - s.max()) / t)
        return e / e.sum(axis=-1, keepdims=True) @ v

    _rejects(check_soft_lookup(whole_array_max), "the last 100 times longer", "own maximum")


def test_a_result_in_another_precision_is_named_as_such() -> None:
    """float32 rounds the heads of a float64 input: the verdict says so, not only 'wrong'."""
    verdict = attnbook.exercises.check_split_heads(
        lambda x, h: x.float().view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)
    )
    _rejects(verdict, "Note: your result is float32, the answer float64")


def test_a_wrong_result_in_a_finer_precision_gets_no_note_on_rounding() -> None:
    """A float64 result cannot be wrong by rounding where the answer is float32: the note
    that told such a learner to compute in the inputs' dtype (the sinusoidal encoding's
    inputs are integers) is given only for a coarser dtype."""

    def cosines_first_in_float64(seq_len, d_model):
        angle = torch.arange(seq_len, dtype=torch.float64)[:, None] / 10000 ** (
            torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
        )
        return torch.stack([angle.cos(), angle.sin()], dim=-1).flatten(1)  # sin and cos swapped

    verdict = attnbook.exercises.check_sinusoidal_positional_encoding(cosines_first_in_float64)
    assert not verdict.passed
    assert "wrong values" in verdict.message
    assert "Note: your result is" not in verdict.message


def test_nan_from_a_narrower_dtype_is_named_as_such() -> None:
    """A soft lookup in float32, right in its order of operations: the scores of 1e308 do not
    fit in float32. The verdict said only what dividing by τ first gives (NaN), a mistake the
    answer does not make; it now says that float32 overflowed."""

    def in_float32(q, k, v, t):
        q, k, v = (a.astype(np.float32) for a in (q, k, v))
        s = q @ k.T
        e = np.exp((s - s.max(axis=-1, keepdims=True)) / t)
        return e / e.sum(axis=-1, keepdims=True) @ v

    with np.errstate(all="ignore"):
        verdict = check_soft_lookup(in_float32)
    _rejects(verdict, "scores of 1e308", "NaN or inf", "float32 overflows to inf past 3.4e+38")
    # a NaN in the answer's own dtype gets no note about the dtype
    with np.errstate(all="ignore"):
        verdict = check_soft_lookup(lambda q, k, v, t: _np_softmax(q @ k.T / t) @ v)
    assert "Note: your result is" not in verdict.message


def test_a_match_on_nan_alone_is_offered_with_the_cases_own_hint() -> None:
    """An inverted src_mask on the first case's unpadded sentences blocks every key: NaN
    everywhere, which any answer whose softmax sees only -inf returns, so NaN is all that
    names the mistake. The verdict offers it as what the NaN is and then, since the case's
    own hint gives other advice (how to build the score), that hint too. (Found by building,
    for every checker, case and known mistake, the verdict that the mistake's answer gets.)"""

    def inverted(state, memory, src_mask, w_q, w_k, v):
        scores = torch.tanh((state @ w_q)[:, None, :] + memory @ w_k) @ v  # (B, S)
        return torch.softmax(scores.masked_fill(src_mask, -math.inf), dim=-1)

    verdict = attnbook.exercises.check_additive_step(inverted)
    _rejects(
        verdict,
        "case 1/3",
        "the NaN or inf is what an inverted mask",
        "If that is not what you wrote: Project the state",
    )
    assert "this looks like" not in verdict.message


def _cross(scale: Callable, dim: int = -1) -> Callable:
    """A cross-attention answer, projections right, with its own scale and softmax axis."""

    def answer(x_query, x_context, w_q, w_k, w_v):
        q, k, v = x_query @ w_q, x_context @ w_k, x_context @ w_v
        return torch.softmax(q @ k.transpose(-2, -1) / scale(q, x_context), dim=dim) @ v

    return answer


def _cross_value_width(x_query, x_context, w_q, w_k, w_v):
    q, k, v = x_query @ w_q, x_context @ w_k, x_context @ w_v
    return torch.softmax(q @ k.mT / math.sqrt(w_v.shape[-1]), dim=-1) @ v


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (_cross(lambda q, c: 1.0), "a missing scale"),
        (_cross(lambda q, c: math.sqrt(c.shape[-1])), "a scale of sqrt(D_ctx)"),
        (_cross(lambda q, c: math.sqrt(q.shape[-1]), dim=-2), "a softmax over the queries"),
        (_cross(lambda q, c: math.sqrt(len(q))), "a scale of sqrt(T), the number of queries"),
        (_cross_value_width, "a scale of sqrt(T), the number of queries, or sqrt(d_v)"),
        (_cross(lambda q, c: math.sqrt(len(c))), "a scale of sqrt(S), the number of context"),
    ],
)
def test_cross_attention_checker_names_typical_mistakes(wrong: Callable, named: str) -> None:
    """It had no list of mistakes: every wrong answer got the case's hint about the inputs."""
    _rejects(attnbook.exercises.check_cross_attention(wrong), f"this looks like {named}")


def test_cross_attention_scaled_by_the_query_inputs_width_is_named() -> None:
    """sqrt(d_model) of x_query, the scale the self-attention exercise warns against: the
    verdict said "Queries come from x_query; keys and values both come from x_context",
    which the answer does right."""

    def query_width(x_query, x_context, w_q, w_k, w_v):
        q, k, v = x_query @ w_q, x_context @ w_k, x_context @ w_v
        scores = q @ k.transpose(-2, -1) / math.sqrt(x_query.shape[-1])
        return torch.softmax(scores, dim=-1) @ v

    verdict = attnbook.exercises.check_cross_attention(query_width)
    _rejects(verdict, "this looks like a scale of sqrt(d_model), x_query's width")
    assert "Queries come from x_query" not in verdict.message


def _self(scale: Callable | None = None, *, dim: int = -1, values: bool = True) -> Callable:
    """A self-attention answer, projections right (values unprojected if not ``values``),
    scaled by ``scale(x, q)`` (default sqrt(d_k)), softmax over ``dim``."""

    def answer(x, w_q, w_k, w_v):
        q, k = x @ w_q, x @ w_k
        v = x @ w_v if values else x
        width = math.sqrt(q.shape[-1]) if scale is None else scale(x, q)
        return torch.softmax(q @ k.transpose(-2, -1) / width, dim=dim) @ v

    return answer


def _self_value_width(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.mT / math.sqrt(w_v.shape[-1]), dim=-1) @ v


def _self_transposed(x, w_q, w_k, w_v):
    return _self()(x, w_q.T, w_k.T, w_v.T)


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (_self(lambda x, q: 1.0), "a missing scale"),
        (_self(lambda x, q: q.shape[-1]), "dividing by d_k instead of sqrt(d_k)"),
        (_self(dim=-2), "a softmax over the queries"),
        (_self(lambda x, q: math.sqrt(x.shape[-1])), "a scale of sqrt(d_model), the input's"),
        (_self(values=False), "averaging x itself instead of the projected values"),
        (_self_transposed, "the transposed weight matrices"),
        (_self(lambda x, q: math.sqrt(len(x))), "a scale of sqrt(T), the number of tokens"),
        (_self_value_width, "a scale of sqrt(d_v), the width of a value"),
    ],
)
def test_self_attention_checker_names_typical_mistakes(wrong: Callable, named: str) -> None:
    """It had no list of mistakes: a missing scale got the first case's hint, "Project first:
    Q = x @ W_Q, ...", about the projections the answer does right."""
    verdict = attnbook.exercises.check_self_attention(wrong)
    _rejects(verdict, f"this looks like {named}")
    assert "Project first" not in verdict.message


def test_self_attention_with_swapped_projections_gets_a_self_attention_hint() -> None:
    """W_q and W_k swapped give the transposed scores, which in self-attention keep their
    (T, T) shape: the hint said to check the shape "with T = 2 queries and S = 5 keys",
    which an answer that takes one sequence cannot do."""

    def swapped(x, w_q, w_k, w_v):
        return _self()(x, w_k, w_q, w_v)

    verdict = attnbook.exercises.check_self_attention(swapped)
    _rejects(verdict, "this looks like key @ queryᵀ, the transposed scores")
    assert "S = 5 keys" not in verdict.message
    assert "same (T, T) shape" in verdict.message


def test_a_package_function_that_raises_is_named_not_its_error() -> None:
    """attnbook.softmax called with torch's dim=: the TypeError hid the real problem."""

    def with_the_packages_softmax(q, k, v):
        return attnbook.softmax(_scores(q, k), dim=-1) @ v

    verdict = check_scaled_dot_product_attention(with_the_packages_softmax)
    _rejects(verdict, "uses the package: attnbook")
    assert "TypeError" not in verdict.message


def _closure_strings(fn: object, seen: set[int] | None = None) -> list[str]:
    """The strings a guard holds in its closure (its hint), through nested guards."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    found: list[str] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                found += _closure_strings(item, seen)
        elif callable(value):
            found += _closure_strings(value, seen)
    return found


# Pieces of an answer's code or formula that hints gave away: the learning-rate schedule's
# cosine, progress and warmup, RoPE's rotation and frequencies, rollout's layer matrix and
# product, the scores' product, masked_fill on ~mask, the FFN's and the pre-LN
# block's lines, the merge's loop, the beam's flat index, the answer loss's slices, ...
_ANSWER_CODE = (
    "min_lr + 0.5",
    "(1 + cos(",
    "progress = ",
    "(step + 1) / warmup_steps",
    "step / warmup_steps",
    "@ keys.T",
    "keys @ quer",
    "query @ key",
    ".transpose(-2, -1)",
    "math.sqrt(",
    "np.argmax",
    "values[best]",
    "weights @ value",
    "masked_fill(~",
    "~src_mask",
    "torch.where(weights",
    "promote_types(scores",
    "gelu(x @ w1",
    "@ w2 + b2",
    "x + attention(",
    "attention(norm1(",
    "ffn(norm2(",
    "@ W_O",
    "x @ W_",
    "x_context @ W",
    "state @ W_q",
    "memory @ W_k",
    "i += 2",
    "i < len(ids)",
    "tuple(pair)",
    "ids[i] == left",
    "index // V",
    "index % V",
    "scores[:, :, None]",
    "Flatten (B, K, V)",
    "logits[:, :-1]",
    "tokens[:, 1:]",
    "is_answer[:, 1:]",
    "F.log_softmax(logits",
    "x[..., 0::2]",
    "(x**2).mean(",
    "a @ b /",
    "softmax((x - max(x))",
    # the formulas that the hints of RoPE, the schedule and rollout stated, to type in
    "a cos θ - b sin θ",
    "10000^(-2i",
    "10000^(-i",
    "max_lr / warmup_steps",
    "half cosine, going from 1 to 0",
    "residual * i + (1 - residual)",
    "(1 - residual) * a",
    "a'_l ... a'_",
    "a'_l times",
    # the formulas that the hints of the cosine similarity, the online softmax, the head
    # entropy and RMSNorm stated
    "a·b / (‖a‖",
    "cos θ = a·b",
    "exp(scores - m_new)",
    "p @ values",
    "-sum over the keys of",
    "of a_ts ln a_ts",
    "mean of x**2, plus eps",
    "its square root; divide x",
    # and that other hints of RMSNorm and the online softmax still stated: the line of code,
    # the running maximum's update and where its correction goes
    "sqrt(mean(x**2) + eps)",
    "max(m, rowmax",
    "by exp(m - m_new) before",
    # the answer in words: which operand is transposed, or a count the exercise asks for
    "transpose the keys",
    "transpose of keys",
    "keys turned into",
    "4 biases",
    "* d_model in the",
    "d_ff + d_model",
    "* d_model more",
)

# A docstring says what is checked (the exercise's own statement), not the answer's code.
_DOCSTRING_CODE = (
    "gelu(x @ w1",
    "@ w2 + b2",
    "x + attention(",
    "attention(norm1(",
    "ffn(norm2(",
    "2 * n_layers",
    "-log softmax(logits",
    "x_query @ W_Q",
    "max_lr * (step + 1)",
    # the formulas that the docstrings of RoPE, the sinusoidal encoding, rollout, the head
    # entropy, the soft lookup, attention, self-attention, RMSNorm and the warmup stated, and
    # the order of the operations that the temperature's exercise asks the learner to find
    "10000^(-2i",
    "A'_L ... A'_1",
    "ln A_ts",
    "softmax(query · keys",
    "query @ key",
    "(x W_k)ᵀ",
    "sqrt(mean(x**2",
    "step 0 ``max_lr / warmup_steps",
    "before subtracting the maximum",
)


def test_no_hint_or_docstring_gives_the_answers_code() -> None:
    """Every checker's hints (its cases', its mistakes' and its guards') name what is wrong
    and what to check, and its docstring, which a learner reads with help(), says what is
    checked: none spells out the answer's code or a formula the exercise leaves to write
    (the schedule's cosine, the product of the scores, the masked_fill line, ...)."""
    from attnbook.exercises._framework import checker_spec

    checked = 0
    for name in attnbook.exercises.__all__:
        if not name.startswith("check_"):
            continue
        checker = getattr(attnbook.exercises, name)
        spec = checker_spec(checker, lambda *args: None)
        hints = [case.hint for case in spec.cases] + [m.hint for m in spec.mistakes]
        hints += _closure_strings(spec.guard)
        for hint in hints:
            for piece in _ANSWER_CODE:
                assert piece.lower() not in hint.lower(), f"{name}: {hint}"
        for piece in _DOCSTRING_CODE:
            assert piece not in checker.__doc__, f"{name}: {checker.__doc__}"
        checked += 1
    assert checked == 32


def test_no_exercise_stub_gives_the_answers_code() -> None:
    """The code cell a learner fills in holds a stub whose docstring or comment says what to
    return; like a checker's docstring, it does not spell out the answer's code or a formula
    the statement leaves to the chapter (the FFN's line, the masked scores' product, RoPE's
    angle, RMSNorm's line)."""
    from pathlib import Path

    import nbformat

    chapters = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))
    stubs = 0
    for path in chapters:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or "raise NotImplementedError" not in cell.source:
                continue
            stubs += 1
            for piece in _DOCSTRING_CODE:
                assert piece not in cell.source, f"{path.stem}: {cell.source}"
    assert stubs >= 32


# The formulas that the statements of RoPE, the schedule and rollout spelled out, in TeX or
# code: a statement names what to compute and where the chapter explains it.
_STATEMENT_FORMULAS = (
    "10000^{-2i/d}",
    "(step + 1) / warmup_steps",
    "(1 - r) \\bar A",
    "A'_L \\cdots",
)


def test_no_checked_exercises_statement_gives_the_formula_to_type_in() -> None:
    """The statement of an auto-checked exercise points at the idea and at the chapter's
    section; it does not hand over the answer's formula (RoPE's angle, the warmup's line,
    rollout's layer matrix and product), which an instructor assigning it wants written."""
    from pathlib import Path

    from attnbook.exercises.notebooks import exercises

    chapters = sorted((Path(__file__).resolve().parents[2] / "chapters").glob("*.ipynb"))
    checked = 0
    for path in chapters:
        for exercise in exercises(path):
            if not exercise.checkers:
                continue
            checked += 1
            for piece in _STATEMENT_FORMULAS:
                assert piece not in exercise.block.body, f"{path.stem}: {exercise.block.body}"
    assert checked == 32
