"""The checkers of chapter 8 accept correct answers and name typical wrong ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from checker_asserts import assert_refuses_cut_answers, assert_rejects

from attnbook.exercises import check_apply_rope, check_sinusoidal_positional_encoding
from attnbook.positional import sinusoidal_positional_encoding

# ------------------------------------------------------- learners' answers


def _pe(seq_len, d_model, *, swap=False, split=False, exponent="2i", dtype=torch.float32):
    """A learner's sinusoidal encoding, written as a learner would (float32 by default)."""
    pos = torch.arange(seq_len, dtype=dtype)[:, None]
    i = torch.arange(0, d_model // 2, dtype=dtype)
    if exponent == "2i":
        freqs = torch.exp(-math.log(10000.0) * 2 * i / d_model)
    elif exponent == "i":
        freqs = torch.exp(-math.log(10000.0) * i / d_model)
    else:  # "+2i"
        freqs = 10000.0 ** (2 * i / d_model)
    s, c = torch.sin(pos * freqs), torch.cos(pos * freqs)
    if swap:
        s, c = c, s
    if split:
        return torch.cat([s, c], dim=-1)
    pe = torch.zeros(seq_len, d_model, dtype=dtype)
    pe[:, 0::2], pe[:, 1::2] = s, c
    return pe


def _pe_per_column(seq_len, d_model):
    """Each column j uses 10000^(-j / d_model): the sine and cosine of a pair disagree."""
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angles = pos / 10000.0 ** (j / d_model)
    return torch.where(j.long() % 2 == 0, torch.sin(angles), torch.cos(angles))


def _rope(
    x,
    positions,
    *,
    half_split=False,
    sign=1.0,
    exponent="2i",
    ignore_positions=False,
    halves_out=False,
):
    """A learner's RoPE: interleaved pairs unless told otherwise."""
    d = x.shape[-1]
    if ignore_positions:
        positions = torch.arange(x.shape[-2])
    two_i = torch.arange(0, d, 2, dtype=torch.float32)
    freqs = 10000.0 ** (-two_i / d if exponent == "2i" else -two_i / 2 / d)
    theta = sign * positions[:, None].float() * freqs  # (T, d/2)
    cos, sin = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
    if half_split:
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    if halves_out:  # the right pairs, concatenated back instead of interleaved
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    out = torch.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


# ------------------------------------------------------------- sinusoidal


def test_sinusoidal_checker_accepts_float32_and_float64_answers() -> None:
    for answer in (_pe, lambda t, d: _pe(t, d, dtype=torch.float64)):
        verdict = check_sinusoidal_positional_encoding(answer)
        assert verdict, verdict.message
        assert "all 3 hidden cases pass" in verdict.message


def test_sinusoidal_checker_accepts_a_numpy_answer() -> None:
    assert check_sinusoidal_positional_encoding(lambda t, d: _pe(t, d).numpy())


@pytest.mark.parametrize(
    ("wrong", "failing_case", "named_mistake"),
    [
        (lambda t, d: _pe(t, d, swap=True), "seq_len = 4, d_model = 2", "sine and cosine swapped"),
        (lambda t, d: _pe(t, d, split=True), "seq_len = 6, d_model = 8", "all sines, then all cosines"),
        (lambda t, d: _pe(t, d, exponent="i"), "seq_len = 6, d_model = 8", "missing its factor 2"),
        (lambda t, d: _pe(t, d, exponent="+2i"), "seq_len = 6, d_model = 8", "with the wrong sign"),
        (_pe_per_column, "seq_len = 4, d_model = 2", "must share one frequency"),
    ],
)  # fmt: skip
def test_sinusoidal_checker_names_typical_mistakes(wrong, failing_case, named_mistake) -> None:
    assert_rejects(check_sinusoidal_positional_encoding(wrong), failing_case, named=named_mistake)


def test_sinusoidal_checker_keeps_the_case_hint_for_other_mistakes() -> None:
    verdict = check_sinusoidal_positional_encoding(lambda t, d: _pe(t, d) + 0.1)
    assert not verdict
    assert "Hint: With one pair, column 0 is sin(pos)" in verdict.message


def test_sinusoidal_checker_reports_a_stub_and_an_exception() -> None:
    def stub(t, d):
        raise NotImplementedError

    verdict = check_sinusoidal_positional_encoding(stub)
    assert not verdict
    assert not verdict.attempted
    assert "not attempted yet" in verdict.message
    verdict = check_sinusoidal_positional_encoding(lambda t, d: torch.zeros(t, d)[:, 1 / 0])
    assert verdict.attempted
    assert "ZeroDivisionError" in verdict.message


# ------------------------------------------------------------------- RoPE


def test_rope_checker_accepts_correct_answers() -> None:
    verdict = check_apply_rope(_rope)
    assert verdict, verdict.message
    assert "all 4 hidden cases pass" in verdict.message
    assert check_apply_rope(lambda x, p: _rope(x.float(), p).double())  # float32 inside


@pytest.mark.parametrize(
    ("wrong", "failing_case", "named_mistake"),
    [
        (lambda x, p: _rope(x, p, half_split=True), "(T, d) = (6, 4)", "half split"),
        (lambda x, p: _rope(x, p, halves_out=True), "(T, d) = (6, 4)", "two columns it came from"),
        (lambda x, p: _rope(x, p, sign=-1.0), "(T, d) = (6, 4)", "rotation clockwise"),
        (lambda x, p: _rope(x, p, exponent="i"), "(T, d) = (6, 4)", "missing its factor 2"),
        (lambda x, p: _rope(x, p, ignore_positions=True), "not starting at 0", "positions ignored"),
    ],
)  # fmt: skip
def test_rope_checker_names_typical_mistakes(wrong, failing_case, named_mistake) -> None:
    assert_rejects(check_apply_rope(wrong), failing_case, named=named_mistake)


def test_rope_checker_rejects_answers_without_a_named_mistake() -> None:
    # rotating the values of every row by the same angle, whatever the position
    verdict = check_apply_rope(lambda x, p: _rope(x, torch.ones_like(p)))
    assert not verdict
    assert "Hint: Each pair of row t turns by its own angle" in verdict.message
    # only 2-D inputs handled: the (B, H, T, Dh) case fails
    verdict = check_apply_rope(lambda x, p: _rope(x, p) if x.ndim == 2 else x)
    assert not verdict
    assert "(B, H, T, Dh)" in verdict.message


def test_rope_checker_refuses_an_answer_cut_from_autograd() -> None:
    """A model trains through the rotated queries and keys: the right rotation of a detached x,
    or one copied out of the graph, is refused."""
    assert_refuses_cut_answers(check_apply_rope, _rope, 0, "x", "(T, d) = (6, 4)")


def test_rope_checker_needs_a_function() -> None:
    with pytest.raises(ValueError, match="check_apply_rope needs your function"):
        check_apply_rope(_rope(torch.zeros(2, 4), torch.arange(2)))


def _pe_loop(seq_len, d_model):
    """The right numbers, one position and one pair at a time: the loop the text rules out."""
    pe = torch.zeros(seq_len, d_model)
    for pos in range(seq_len):
        for i in range(d_model // 2):
            angle = pos / 10000.0 ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def _rope_loop(x, positions):
    out = torch.empty_like(x)
    d = x.shape[-1]
    for t, pos in enumerate(positions.tolist()):
        for i in range(d // 2):
            theta = pos * 10000.0 ** (-2 * i / d)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = a * math.cos(theta) - b * math.sin(theta)
            out[..., t, 2 * i + 1] = a * math.sin(theta) + b * math.cos(theta)
    return out


def test_the_positional_checkers_reject_python_loops_as_their_texts_ask() -> None:
    """Chapter 8 asks for both without a Python loop; the loops give the right numbers."""
    assert_rejects(check_sinusoidal_positional_encoding(_pe_loop), "case 1/", named="column")
    assert "runs a Python loop" in check_sinusoidal_positional_encoding(_pe_loop).message
    verdict = check_apply_rope(_rope_loop)
    assert_rejects(verdict, "case 1/", named="broadcasting")
    assert "runs a Python loop" in verdict.message


def _angles(seq_len, d_model):
    """The (T, d/2) angles pos * w_i, as NumPy floats."""
    return np.arange(seq_len)[:, None] * 10000.0 ** (-np.arange(0, d_model, 2) / d_model)


def _interleaved(sines, cosines):
    pe = np.empty((sines.shape[0], 2 * sines.shape[1]))
    pe[:, 0::2], pe[:, 1::2] = sines, cosines
    return torch.tensor(pe, dtype=torch.float32)


def _pe_frompyfunc(seq_len, d_model):
    """math.sin called on every angle by NumPy's C loop: none of this code runs twice."""
    angles = _angles(seq_len, d_model)
    sin, cos = np.frompyfunc(math.sin, 1, 1), np.frompyfunc(math.cos, 1, 1)
    return _interleaved(sin(angles).astype(float), cos(angles).astype(float))


def _pe_map(seq_len, d_model):
    angles = _angles(seq_len, d_model)
    sines = np.array(list(map(math.sin, angles.ravel()))).reshape(angles.shape)
    cosines = np.array(list(map(math.cos, angles.ravel()))).reshape(angles.shape)
    return _interleaved(sines, cosines)


def _pe_reduce(seq_len, d_model):
    """functools.reduce, imported inside, folds math.sin's values one element at a time."""
    import functools as ft

    angles = _angles(seq_len, d_model)
    sines = ft.reduce(lambda acc, a: [*acc, math.sin(a)], angles.ravel(), [])
    return _interleaved(np.reshape(sines, angles.shape), np.cos(angles))


_SIN = np.frompyfunc(math.sin, 1, 1)


def _pe_held(seq_len, d_model, sin=_SIN):
    """The ufunc that np.frompyfunc made, held by a default argument."""
    angles = _angles(seq_len, d_model)
    return _interleaved(sin(angles).astype(float), np.cos(angles))


def _pe_apply(seq_len, d_model):
    """A tensor's apply_ calls math.sin on every element."""
    angles = torch.tensor(_angles(seq_len, d_model))
    return _interleaved(angles.clone().apply_(math.sin).numpy(), np.cos(angles.numpy()))


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        (_pe_frompyfunc, "np.frompyfunc"),
        (_pe_map, "map"),
        (_pe_reduce, "functools.reduce"),
        (_pe_held, "np.frompyfunc"),
        (_pe_apply, "Tensor.apply_"),
    ],
)
def test_a_loop_that_numpy_or_python_runs_element_by_element_fails(answer, named) -> None:
    """These loops run from C over C functions (math.sin), so no line of the answer runs twice:
    the right numbers, refused by what the answer's code reads (np.frompyfunc and map passed
    all three cases before)."""
    torch.testing.assert_close(answer(9, 6), sinusoidal_positional_encoding(9, 6))
    verdict = check_sinusoidal_positional_encoding(answer)
    assert_rejects(verdict, "case 1/", named="column")
    assert f"applies a function element by element ({named}): a loop run for you" in (
        verdict.message
    )


def _pe_fromfunction(seq_len, d_model):
    """np.fromfunction calls its function once, on whole index arrays: vectorised."""
    angles = np.fromfunction(
        lambda t, i: t * 10000.0 ** (-2 * i / d_model), (seq_len, d_model // 2)
    )
    return _interleaved(np.sin(angles), np.cos(angles))


def _pe_named_map(seq_len, d_model):
    """A local variable called map, and np.add.reduce (a vectorised sum), are no loops."""
    map = _angles(seq_len, d_model)
    zero = np.add.reduce(np.zeros(3))
    return _interleaved(np.sin(map) + zero, np.cos(map))


@pytest.mark.parametrize("answer", [_pe_fromfunction, _pe_named_map])
def test_vectorised_answers_with_names_like_those_loops_pass(answer) -> None:
    verdict = check_sinusoidal_positional_encoding(answer)
    assert verdict, verdict.message
