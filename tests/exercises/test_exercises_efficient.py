"""The checkers of chapter 14 accept correct answers and reject, and name, typical wrong ones."""

from __future__ import annotations

import math

import numpy as np
import torch
from checker_asserts import assert_rejects, stub

import attnbook
from attnbook.exercises import (
    check_kv_cache_bytes,
    check_online_softmax_update,
    check_sliding_window_mask,
)
from attnbook.exercises._framework import compare_outputs

# ------------------------------------------------------------------ online softmax update


def _update(m, l, acc, scores, values):  # noqa: E741 (a correct answer)
    m_new = torch.maximum(m, scores.max(dim=-1, keepdim=True).values)
    c = torch.exp(m - m_new)
    p = torch.exp(scores - m_new)
    return m_new, c * l + p.sum(dim=-1, keepdim=True), c * acc + p @ values


def test_online_softmax_checker_accepts_correct_answers() -> None:
    verdict = check_online_softmax_update(_update)
    assert verdict, verdict.message
    assert "all 6 hidden cases pass" in verdict.message

    def flat_state(m, l, acc, scores, values):  # noqa: E741  m and l as (T,) vectors
        m_new, l_new, acc_new = _update(m, l, acc, scores, values)
        return m_new[:, 0], l_new[:, 0], acc_new

    assert check_online_softmax_update(flat_state)
    verdict = check_online_softmax_update(stub)
    assert not verdict
    assert not verdict.attempted


def test_online_softmax_update_walks_to_the_packages_output() -> None:
    """Folding the checked step over the key blocks gives attnbook.tiled_attention's output."""
    attnbook.set_seed(0)
    q, k, v = torch.randn(7, 4).double(), torch.randn(10, 4).double(), torch.randn(10, 3).double()
    scores = q @ k.T / math.sqrt(4)
    m, l, acc = torch.full((7, 1), -math.inf).double(), torch.zeros(7, 1).double(), 0 * q[:, :3]  # noqa: E741
    for start in range(0, 10, 3):
        m, l, acc = _update(m, l, acc, scores[:, start : start + 3], v[start : start + 3])  # noqa: E741
    torch.testing.assert_close(acc / l, attnbook.tiled_attention(q, k, v, block_size=3))
    torch.testing.assert_close(acc / l, torch.softmax(scores, -1) @ v)


def test_online_softmax_checker_names_typical_mistakes() -> None:
    moves_up = "the maximum moves up"

    def no_rescale_acc(m, l, acc, scores, values):  # noqa: E741
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        return m_new, torch.exp(m - m_new) * l + p.sum(-1, keepdim=True), acc + p @ values

    def no_rescale_l(m, l, acc, scores, values):  # noqa: E741
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        return m_new, l + p.sum(-1, keepdim=True), torch.exp(m - m_new) * acc + p @ values

    def upside_down(m, l, acc, scores, values):  # noqa: E741
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        c = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(m_new - m))
        p = torch.exp(scores - m_new)
        return m_new, c * l + p.sum(-1, keepdim=True), c * acc + p @ values

    def block_max(m, l, acc, scores, values):  # noqa: E741
        b = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - b)
        return (
            b,
            torch.exp(m - b) * l + p.sum(-1, keepdim=True),
            torch.exp(m - b) * acc + p @ values,
        )

    def per_block_softmax(m, l, acc, scores, values):  # noqa: E741
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        return m_new, l + 1, acc + torch.softmax(scores, -1) @ values

    def divided(m, l, acc, scores, values):  # noqa: E741  the output, not the numerator
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        c, p = torch.exp(m - m_new), torch.exp(scores - m_new)
        l_new = c * l + p.sum(-1, keepdim=True)
        return m_new, l_new, (c * acc + p @ values) / l_new

    def raw_exp(m, l, acc, scores, values):  # noqa: E741
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores)
        return m_new, l + p.sum(-1, keepdim=True), acc + p @ values

    for wrong, case, mistake in [
        (no_rescale_acc, moves_up, "rescaling ell but not acc"),
        (no_rescale_l, moves_up, "rescaling acc but not ell"),
        (upside_down, moves_up, "the correction upside down"),
        (block_max, "the maximum stays", "the block's own maximum"),
        (per_block_softmax, "the first block", "a softmax of each block on its own"),
        (raw_exp, "the first block", "exp of the raw scores"),
        (divided, "the first block", "acc divided by ell"),
    ]:
        assert_rejects(check_online_softmax_update(wrong), case, mistake)


def test_online_softmax_checker_rejects_other_wrong_answers() -> None:
    def forgets_the_new_max(m, l, acc, scores, values):  # noqa: E741  returns the old m
        _, l_new, acc_new = _update(m, l, acc, scores, values)
        return m, l_new, acc_new

    assert_rejects(check_online_softmax_update(forgets_the_new_max), "the first block")

    def a_list(m, l, acc, scores, values):  # noqa: E741  a list is fine
        return list(_update(m, l, acc, scores, values))

    assert check_online_softmax_update(a_list)

    def only_the_output(m, l, acc, scores, values):  # noqa: E741
        return _update(m, l, acc, scores, values)[2]

    verdict = check_online_softmax_update(only_the_output)
    assert_rejects(verdict, "the first block")
    # the checker's wrapper refuses what came back: told as returned, not as raised
    assert ") returned a value of type Tensor, where the new state is asked for, as a tuple " in (
        verdict.message
    )
    assert "raised" not in verdict.message

    def a_row_of_ell(m, l, acc, scores, values):  # noqa: E741  ell (T,) repeated: (2T,)
        m_new, l_new, acc_new = _update(m, l, acc, scores, values)
        return m_new, torch.cat([l_new, l_new]).ravel(), acc_new

    verdict = check_online_softmax_update(a_row_of_ell)
    assert_rejects(verdict, "the first block")
    assert ") returned m and ell of shapes" in verdict.message
    assert "raised" not in verdict.message

    def overflows(m, l, acc, scores, values):  # noqa: E741  right until the scores are large
        p = torch.exp(scores)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        c = torch.exp(m - m_new)
        return (
            m_new,
            c * l + p.sum(-1, keepdim=True) * torch.exp(-m_new),
            (c * acc + (p @ values) * torch.exp(-m_new)),
        )

    assert_rejects(check_online_softmax_update(overflows), "scores around 1e4")


# ------------------------------------------------------------------ sliding-window mask


def _window(seq_len, window):  # a correct answer
    t = torch.arange(seq_len)[:, None]
    s = torch.arange(seq_len)[None, :]
    return (s <= t) & (s > t - window)


def test_sliding_window_checker_accepts_correct_answers() -> None:
    verdict = check_sliding_window_mask(_window)
    assert verdict, verdict.message
    assert check_sliding_window_mask(
        lambda n, w: torch.ones(n, n, dtype=torch.bool).tril().triu(-(w - 1))
    )
    assert not check_sliding_window_mask(stub).attempted


def test_sliding_window_checker_names_typical_mistakes() -> None:
    first = "seq_len = 4, window = 2"

    def one_too_many(n, w):
        return _window(n, w + 1)

    def band(n, w):
        d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
        return d.abs() < w

    def inverted(n, w):
        return ~_window(n, w)

    def looks_ahead(n, w):  # the distance taken as s - t
        d = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        return (d >= 0) & (d < w)

    def without_self(n, w):
        return _window(n, w + 1) & ~torch.eye(n, dtype=torch.bool)

    for wrong, mistake in [
        (one_too_many, "a window of window + 1 keys"),
        (band, "a band around the diagonal"),
        (inverted, "an inverted mask"),
        (looks_ahead, "the mask transposed"),
        (without_self, "a window that leaves out the query itself"),
    ]:
        assert_rejects(check_sliding_window_mask(wrong), first, mistake)


def test_sliding_window_mask_must_be_a_tensor() -> None:
    """The exercise asks for a boolean tensor, as chapter 6's mask exercises do: the right
    values as a NumPy array are refused, with the type expected (they passed before)."""

    def in_numpy(n, w):
        distance = np.arange(n)[:, None] - np.arange(n)[None, :]
        return (distance >= 0) & (distance < w)

    np.testing.assert_array_equal(in_numpy(6, 3), _window(6, 3).numpy())
    verdict = check_sliding_window_mask(in_numpy)
    assert_rejects(verdict, "seq_len = 4, window = 2")
    assert "returned a NumPy array, expected a torch tensor of dtype torch.bool" in verdict.message


def test_sliding_window_checker_rejects_other_wrong_answers() -> None:
    assert_rejects(check_sliding_window_mask(lambda n, w: _window(n, w).int()), "window = 2")
    assert_rejects(
        check_sliding_window_mask(lambda n, w: torch.ones(n, n, dtype=torch.bool).tril()),
        "window = 2",
    )  # the causal mask, whatever the window

    def clipped(n, w):  # forgets that a window wider than the sequence is the causal mask
        return _window(n, min(w, n - 1))

    assert_rejects(check_sliding_window_mask(clipped), "wider than the sequence")


# ------------------------------------------------------------------ KV-cache memory


def _bytes(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch_size, bytes_per_element):
    return (
        2
        * n_layers
        * batch_size
        * n_kv_heads
        * seq_len
        * (d_model // n_heads)
        * (bytes_per_element)
    )


def test_kv_cache_checker_accepts_correct_answers() -> None:
    verdict = check_kv_cache_bytes(_bytes)
    assert verdict, verdict.message
    assert check_kv_cache_bytes(
        lambda n_l, n_h, n_kv, d, s, b, e: torch.tensor(float(_bytes(n_l, n_h, n_kv, d, s, b, e)))
    )
    assert not check_kv_cache_bytes(stub).attempted
    # the pen-and-paper example of the chapter: 32 layers, 32 heads of 128, 4096 tokens, 2 bytes
    assert _bytes(32, 32, 32, 4096, 4096, 1, 2) == 2 * 1024**3
    assert _bytes(32, 32, 8, 4096, 4096, 1, 2) == 512 * 1024**2


def test_kv_cache_checker_names_typical_mistakes() -> None:
    first = "3 layers, 16 heads"

    def keys_only(n_l, n_h, n_kv, d, s, b, e):
        return _bytes(n_l, n_h, n_kv, d, s, b, e) // 2

    def all_heads(n_l, n_h, n_kv, d, s, b, e):
        return _bytes(n_l, n_h, n_h, d, s, b, e)

    def kv_heads_as_wide_as_d_model(n_l, n_h, n_kv, d, s, b, e):  # d_head = d / n_kv
        return 2 * n_l * b * n_kv * s * (d // n_kv) * e

    def d_model_wide(n_l, n_h, n_kv, d, s, b, e):
        return 2 * n_l * b * n_kv * s * d * e

    def in_bits(n_l, n_h, n_kv, d, s, b, e):
        return _bytes(n_l, n_h, n_kv, d, s, b, e) * 8

    def one_layer(n_l, n_h, n_kv, d, s, b, e):
        return _bytes(1, n_h, n_kv, d, s, b, e)

    def no_batch(n_l, n_h, n_kv, d, s, b, e):
        return _bytes(n_l, n_h, n_kv, d, s, 1, e)

    def fixed(size):  # bytes_per_element ignored for a constant
        return lambda n_l, n_h, n_kv, d, s, b, e: _bytes(n_l, n_h, n_kv, d, s, b, size)

    for wrong, case, mistake in [
        (keys_only, first, "the keys only"),
        (all_heads, "4 key/value heads", "n_heads instead of n_kv_heads"),
        (d_model_wide, first, "d_model per key/value head"),
        (in_bits, first, "the size in bits instead of bytes"),
        (one_layer, first, "one layer's cache"),
        (no_batch, "batch 8", "the batch size left out"),
        (fixed(2), first, "bytes_per_element fixed at 2"),
        (fixed(4), first, "bytes_per_element fixed at 4"),
        (fixed(1), "28 layers", "the number of elements, not of bytes"),
    ]:
        assert_rejects(check_kv_cache_bytes(wrong), case, mistake)
    # the same number as n_heads key/value heads: named with it, and its hint says why
    verdict = check_kv_cache_bytes(kv_heads_as_wide_as_d_model)
    assert_rejects(verdict, "4 key/value heads", "n_heads instead of n_kv_heads")
    assert "(or d_head taken as d_model / n_kv_heads)" in verdict.message, verdict.message
    assert "d_head = d_model / n_heads" in verdict.message.split("Hint:")[1], verdict.message


def test_kv_cache_bits_and_d_model_per_head_are_told_apart() -> None:
    """On a case with 8 heads and 1 byte, both slips give 8 times the bytes, and the answer in
    bits was named "d_model per key/value head"; the first case has 16 heads now."""

    def in_bits(n_l, n_h, n_kv, d, s, b, e):
        return 8 * _bytes(n_l, n_h, n_kv, d, s, b, e)

    def d_model_wide(n_l, n_h, n_kv, d, s, b, e):
        return 2 * n_l * b * n_kv * s * d * e

    for wrong, named, not_named in [
        (in_bits, "the size in bits instead of bytes", "d_model per key/value head"),
        (d_model_wide, "d_model per key/value head", "in bits"),
    ]:
        verdict = check_kv_cache_bytes(wrong)
        assert_rejects(verdict, "case 1/3", named)
        assert not_named not in verdict.message, verdict.message


def test_kv_cache_checker_rejects_other_wrong_answers() -> None:
    def in_mib(n_l, n_h, n_kv, d, s, b, e):
        return _bytes(n_l, n_h, n_kv, d, s, b, e) / 2**20

    assert_rejects(check_kv_cache_bytes(in_mib), "3 layers")


def test_online_softmax_checker_rejects_an_empty_state_started_at_zero() -> None:
    """m = -inf replaced by 0: right while a block's scores reach above 0, wrong below."""

    def from_zero(m, l, acc, scores, values):  # noqa: E741
        return _update(torch.nan_to_num(m, neginf=0.0), l, acc, scores, values)

    assert_rejects(check_online_softmax_update(from_zero), "every score around -1e3")


def test_sliding_window_checker_rejects_python_loops() -> None:
    """The exercise says "Use no Python loop"; a double loop gets the numbers right."""

    def looped(seq_len, window):
        mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
        for t in range(seq_len):
            for s in range(max(0, t - window + 1), t + 1):
                mask[t, s] = True
        return mask

    verdict = check_sliding_window_mask(looped)
    assert_rejects(verdict, "case 1/", named="distances")
    assert "runs a Python loop" in verdict.message


def test_online_softmax_verdict_names_the_part_of_the_state_that_is_wrong() -> None:
    def ell_off_by_half(m, l, acc, scores, values):  # noqa: E741
        m_new, l_new, acc_new = _update(m, l, acc, scores, values)
        return m_new, l_new + 0.5, acc_new

    def acc_cut(m, l, acc, scores, values):  # noqa: E741
        m_new, l_new, acc_new = _update(m, l, acc, scores, values)
        return m_new, l_new, acc_new[:, :1]

    message = check_online_softmax_update(ell_off_by_half).message
    assert "returned, for ell (value 2 of 3), the wrong values (largest difference 0.5" in message
    message = check_online_softmax_update(acc_cut).message
    assert "returned, for acc (value 3 of 3), shape (3, 1), expected shape (3, 2)" in message


def test_a_tuple_is_compared_part_by_part() -> None:
    expected = (np.zeros(2), np.ones(3))
    assert compare_outputs((np.zeros(2), np.ones(3)), expected, 1e-7, 0) is None
    assert compare_outputs([np.zeros(2), np.ones(3)], expected, 1e-7, 0) is None
    assert compare_outputs(np.zeros(2), expected, 1e-7, 0) == (
        "returned an ndarray, expected a tuple of 2 values"
    )
    assert compare_outputs((np.zeros(2),), expected, 1e-7, 0) == "returned 1 value, expected 2"
    problem = compare_outputs((np.zeros(2), np.zeros(3)), expected, 1e-7, 0)
    assert problem.startswith("returned, for value 2 of 2, the wrong values"), problem


def test_nan_where_the_answer_is_infinite_is_described_not_raised() -> None:
    # every difference is NaN: np.nanargmax used to raise "All-NaN slice encountered"
    problem = compare_outputs(np.array([np.nan, np.nan]), np.array([np.inf, 1.0]), 1e-7, 0)
    assert problem.startswith("returned the wrong values (largest difference inf at index (0,))")


def test_no_hidden_kv_case_hands_out_the_pen_and_paper_answer() -> None:
    """A wrong answer's verdict prints the expected bytes of the case it failed."""
    from attnbook.exercises.efficient import _KV_CASES

    paper = {(32, 32, 32, 4096, 4096, 1, 2), (32, 32, 8, 4096, 4096, 1, 2)}
    assert not paper & {tuple(case.make_args()) for case in _KV_CASES}
