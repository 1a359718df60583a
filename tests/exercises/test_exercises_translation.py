"""The checkers of chapter 12 accept correct answers and reject, and name, typical wrong ones."""

from __future__ import annotations

import torch
from checker_asserts import assert_refuses_cut_answers, assert_rejects, stub

from attnbook.exercises import _framework, check_additive_step, check_beam_step
from attnbook.masking import softmax_with_mask
from attnbook.scores import additive_scores

# ------------------------------------------------------------------ one additive attention step


def _step(state, memory, src_mask, W_q, W_k, v):  # a correct answer
    scores = torch.tanh((state @ W_q)[:, None, :] + memory @ W_k) @ v  # (B, S)
    return torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)


def test_additive_step_checker_accepts_correct_answers() -> None:
    verdict = check_additive_step(_step)
    assert verdict, verdict.message
    assert "all 3 hidden cases pass" in verdict.message

    def with_einsum(state, memory, src_mask, W_q, W_k, v):
        hidden = torch.tanh(torch.einsum("bh,ha->ba", state, W_q)[:, None] + memory @ W_k)
        scores = torch.einsum("bsa,a->bs", hidden, v)
        weights = (scores - scores.max(-1, keepdim=True).values).exp() * src_mask
        return weights / weights.sum(-1, keepdim=True)

    assert check_additive_step(with_einsum)
    assert not check_additive_step(stub).attempted


def test_additive_step_checker_refuses_an_answer_cut_from_autograd() -> None:
    """The translation model trains through these weights: the right weights from a detached
    memory, or copied out of the graph, are refused."""
    assert_refuses_cut_answers(check_additive_step, _step, 1, "memory", "B = 2 sentences")


def test_additive_step_agrees_with_the_package() -> None:
    g = torch.Generator().manual_seed(0)
    state, memory = torch.randn(3, 4, generator=g), torch.randn(3, 6, 4, generator=g)
    W_q, W_k, v = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g), torch.randn(5)
    mask = torch.arange(6)[None] < torch.tensor([6, 2, 4])[:, None]
    scores = additive_scores(state[:, None], memory, W_q, W_k, v)  # (3, 1, 6)
    expected = softmax_with_mask(scores, mask[:, None])[:, 0]
    torch.testing.assert_close(_step(state, memory, mask, W_q, W_k, v), expected)


def test_additive_step_checker_names_typical_mistakes() -> None:
    def no_mask(state, memory, src_mask, W_q, W_k, v):
        return torch.softmax(torch.tanh((state @ W_q)[:, None] + memory @ W_k) @ v, dim=-1)

    def zero(state, memory, src_mask, W_q, W_k, v):
        scores = torch.tanh((state @ W_q)[:, None] + memory @ W_k) @ v
        return torch.softmax(scores * src_mask, dim=-1)

    def no_tanh(state, memory, src_mask, W_q, W_k, v):
        scores = ((state @ W_q)[:, None] + memory @ W_k) @ v
        return torch.softmax(scores.masked_fill(~src_mask, float("-inf")), dim=-1)

    def swapped(state, memory, src_mask, W_q, W_k, v):
        return _step(state, memory, src_mask, W_k, W_q, v)

    def inverted(state, memory, src_mask, W_q, W_k, v):  # True read as "padding"
        scores = torch.tanh((state @ W_q)[:, None] + memory @ W_k) @ v
        return torch.softmax(scores.masked_fill(src_mask, float("-inf")), dim=-1)

    padded = "padded to 6"
    first = "no padding"
    for wrong, case, mistake in [
        (no_mask, padded, "no padding mask"),
        (zero, padded, "padding given score 0"),
        (no_tanh, first, "the score without tanh"),
        (swapped, first, "W_q applied to the source states"),
        (inverted, first, "an inverted mask"),
    ]:
        assert_rejects(check_additive_step(wrong), case, mistake)


def test_additive_step_checker_forbids_the_package_answer() -> None:
    def library(state, memory, src_mask, W_q, W_k, v):
        return softmax_with_mask(
            additive_scores(state[:, None], memory, W_q, W_k, v), src_mask[:, None]
        )[:, 0]

    verdict = check_additive_step(library)
    assert not verdict
    assert "additive_scores" in verdict.message or "softmax_with_mask" in verdict.message


# ------------------------------------------------------------------ one beam-search step


def _beam(scores, log_probs):  # a correct answer
    B, K, V = log_probs.shape
    total = (scores[:, :, None] + log_probs).reshape(B, K * V)
    new, pick = total.topk(K, dim=-1)
    return new, pick // V, pick % V


def test_beam_step_checker_accepts_correct_answers() -> None:
    verdict = check_beam_step(_beam)
    assert verdict, verdict.message
    assert "all 3 hidden cases pass" in verdict.message

    def with_sort(scores, log_probs):
        B, K, V = log_probs.shape
        total = (scores[:, :, None] + log_probs).reshape(B, K * V)
        order = total.argsort(dim=-1, descending=True)[:, :K]
        return total.gather(1, order), torch.div(order, V, rounding_mode="floor"), order % V

    assert check_beam_step(with_sort)
    assert not check_beam_step(stub).attempted


def test_beam_step_checker_names_typical_mistakes() -> None:
    def per_beam(scores, log_probs):
        best, tokens = log_probs.max(-1)
        new = scores + best
        order = new.argsort(dim=-1, descending=True)
        return new.gather(1, order), order, tokens.gather(1, order)

    def no_history(scores, log_probs):
        return _beam(torch.zeros_like(scores), log_probs)

    def products(scores, log_probs):
        B, K, V = log_probs.shape
        total = (scores.exp()[:, :, None] * log_probs.exp()).reshape(B, K * V)
        new, pick = total.topk(K, dim=-1)
        return new, pick // V, pick % V

    def unsorted(scores, log_probs):  # on the CPU, torch 2.13 leaves case 2's K = 3 unsorted
        B, K, V = log_probs.shape
        total = (scores[:, :, None] + log_probs).reshape(B, K * V)
        new, pick = total.topk(K, dim=-1, sorted=False)
        return new, pick // V, pick % V

    def first_beam(scores, log_probs):
        new, tokens = (scores[:, :1, None] + log_probs[:, :1]).squeeze(1).topk(scores.shape[1])
        return new, torch.zeros_like(tokens), tokens

    wrongs = [
        (per_beam, "the best word of each beam"),
        (first_beam, "only the first beam extended"),
        (no_history, "the new word's log-probability without"),
        (products, "probabilities multiplied"),
    ]
    for case in _framework.checker_spec(check_beam_step, _beam).cases:  # as the docstring says
        scores, _ = case.make_args()
        assert torch.equal(scores, scores.sort(-1, descending=True).values)  # best first
    case_2 = _framework.checker_spec(check_beam_step, _beam).cases[1].make_args()
    if not torch.equal(unsorted(*case_2)[0], _beam(*case_2)[0]):  # another torch may sort
        wrongs.append((unsorted, "the right K extensions, not in order best first"))
    for wrong, mistake in wrongs:
        verdict = check_beam_step(wrong)
        assert not verdict, verdict.message
        assert f"this looks like {mistake}" in verdict.message, verdict.message

    verdict = check_beam_step(lambda scores, log_probs: scores)  # not three tensors
    assert not verdict
    assert verdict.attempted
    verdict = check_beam_step(lambda scores, log_probs: (scores, scores))  # two, not three
    assert not verdict
    assert "returned 2 values, expected 3" in verdict.message, verdict.message


def test_beam_step_checker_names_a_position_left_whole_or_split_by_k() -> None:
    """A parent left as the position among the K * V sums, or split by the number of beams,
    got the first case's general hint; both are the slips of the one line the exercise
    leaves to think about."""

    def topk(scores, log_probs):
        B, K, V = log_probs.shape
        return (scores[:, :, None] + log_probs).reshape(B, K * V).topk(K, dim=-1)

    def whole(scores, log_probs):
        new, pick = topk(scores, log_probs)
        return new, pick, pick % log_probs.shape[-1]

    def by_k(scores, log_probs):
        new, pick = topk(scores, log_probs)
        return new, pick // scores.shape[1], pick % scores.shape[1]

    for wrong, mistake in [
        (whole, "the position among all K * V extensions returned as the beam"),
        (by_k, "the position among the K * V split by K"),
    ]:
        assert_rejects(check_beam_step(wrong), "case 1/3", mistake)


def test_beam_step_checker_names_the_beam_and_the_word_swapped() -> None:
    """The right survivors returned as (scores, words, beams) got the first case's general
    hint, which sends a learner back to the arithmetic that was right."""

    def swapped(scores, log_probs):
        new, parents, words = _beam(scores, log_probs)
        return new, words, parents

    assert_rejects(
        check_beam_step(swapped), "case 1/3", "the beam and the word swapped", named="order"
    )


def test_beam_step_checker_accepts_a_list_of_the_three_tensors() -> None:
    """ "Return three (B, K) tensors": a list of them is as right as a tuple."""
    verdict = check_beam_step(lambda scores, log_probs: list(_beam(scores, log_probs)))
    assert verdict, verdict.message


def test_beam_step_checker_refuses_parents_and_words_as_floats() -> None:
    """The right numbers, but parents and words that cannot index the next step's tensors; the
    message names the value at fault."""

    def as_floats(scores, log_probs):
        new, parents, words = _beam(scores, log_probs)
        return new, parents.float(), words.float()

    verdict = check_beam_step(as_floats)
    assert not verdict, verdict.message
    assert "for parents (value 2 of 3), floating-point numbers, expected integers" in (
        verdict.message
    )
