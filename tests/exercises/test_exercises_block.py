"""The checkers of chapter 9 accept correct answers and reject, and name, typical wrong ones."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from checker_asserts import assert_refuses_cut_answers, assert_rejects, stub

from attnbook.exercises import check_feed_forward, check_gpt_num_parameters, check_pre_ln_block
from attnbook.exercises.block import _BLOCK_CASES, _BLOCK_MISTAKES

# ------------------------------------------------------------------ feed-forward


def test_feed_forward_checker_accepts_a_correct_answer() -> None:
    verdict = check_feed_forward(lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1) @ w2 + b2)
    assert verdict, verdict.message
    assert "all 2 hidden cases pass" in verdict.message
    assert not check_feed_forward(stub).attempted


def test_feed_forward_checker_refuses_an_answer_cut_from_autograd() -> None:
    """The blocks of the later chapters train through the feed-forward network: the right
    numbers computed from a detached x, or copied out of the graph, are refused."""

    def right(x, w1, b1, w2, b2):
        return F.gelu(x @ w1 + b1) @ w2 + b2

    assert_refuses_cut_answers(check_feed_forward, right, 0, "x", "one sequence")
    # a weight detached is refused too, by its name
    verdict = check_feed_forward(lambda x, w1, b1, w2, b2: right(x, w1, b1, w2.detach(), b2))
    assert "cannot differentiate with respect to `w2`" in verdict.message, verdict.message


def test_feed_forward_checker_names_typical_mistakes() -> None:
    one = "one sequence"
    cases = [
        (lambda x, w1, b1, w2, b2: F.relu(x @ w1 + b1) @ w2 + b2, "ReLU instead of GELU"),
        (
            lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2,
            "the tanh approximation of GELU",
        ),
        (lambda x, w1, b1, w2, b2: F.gelu(x @ w1) @ w2 + b2, "forgetting the first bias b1"),
        (lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1) @ w2, "forgetting the second bias b2"),
        (lambda x, w1, b1, w2, b2: (x @ w1 + b1) @ w2 + b2, "no activation at all"),
    ]
    for wrong, mistake in cases:
        assert_rejects(check_feed_forward(wrong), one, mistake)
    # a wrong answer that is none of the named mistakes still fails, with the case's hint
    verdict = check_feed_forward(lambda x, w1, b1, w2, b2: F.gelu(x @ w1 + b1) @ w2 + 2 * b2)
    assert_rejects(verdict, one)
    assert "this looks like" not in verdict.message
    # transposed weights fail loudly on the non-square shapes
    assert_rejects(
        check_feed_forward(lambda x, w1, b1, w2, b2: F.gelu(x @ w2.T + b1) @ w1.T + b2), one
    )


def test_feed_forward_with_the_blocks_residual_inside_is_named() -> None:
    """x + FFN(x), the residual of the block written into the network, got the case's hint
    listing the formula's steps, all of which such an answer has."""
    verdict = check_feed_forward(lambda x, w1, b1, w2, b2: x + F.gelu(x @ w1 + b1) @ w2 + b2)
    assert_rejects(verdict, "one sequence", "the input added to the output")


# ------------------------------------------------------------------ pre-LN block


def _pre_ln(x, attention, ffn, norm1, norm2):  # a correct answer
    x = x + attention(norm1(x))
    return x + ffn(norm2(x))


def test_pre_ln_block_checker_accepts_a_correct_answer() -> None:
    verdict = check_pre_ln_block(_pre_ln)
    assert verdict, verdict.message
    assert "all 2 hidden cases pass" in verdict.message
    assert not check_pre_ln_block(stub).attempted


def test_pre_ln_block_checker_refuses_an_answer_cut_from_autograd() -> None:
    """The GPT of chapter 10 trains through its blocks: a block computed from a detached x, or
    copied out of the graph, is refused (the checker ran answers under no_grad before), even
    though the sub-layers' own parameters still require a gradient."""
    assert_refuses_cut_answers(
        check_pre_ln_block, _pre_ln, 0, "x", "B = 2", only=("x.detach()", "torch.no_grad()")
    )


def test_pre_ln_block_checker_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_pre_ln_block(_pre_ln)
    torch.testing.assert_close(torch.rand(3), expected)


def test_pre_ln_block_checker_names_typical_mistakes() -> None:
    def post_ln(x, attention, ffn, norm1, norm2):
        x = norm1(x + attention(x))
        return norm2(x + ffn(x))

    def no_attention_residual(x, attention, ffn, norm1, norm2):
        x = attention(norm1(x))
        return x + ffn(norm2(x))

    def no_ffn_residual(x, attention, ffn, norm1, norm2):
        x = x + attention(norm1(x))
        return ffn(norm2(x))

    def from_normalised(x, attention, ffn, norm1, norm2):
        h = norm1(x)
        x = h + attention(h)
        h = norm2(x)
        return h + ffn(h)

    def ffn_on_input(x, attention, ffn, norm1, norm2):
        return x + attention(norm1(x)) + ffn(norm2(x))

    def one_norm(x, attention, ffn, norm1, norm2):
        x = x + attention(norm1(x))
        return x + ffn(norm1(x))

    def ffn_first(x, attention, ffn, norm1, norm2):
        x = x + ffn(norm1(x))
        return x + attention(norm2(x))

    first = "B = 2 sequences"
    for wrong, mistake in [
        (post_ln, "post-LN instead of pre-LN"),
        (no_attention_residual, "a missing residual around the attention"),
        (no_ffn_residual, "a missing residual around the feed-forward network"),
        (from_normalised, "adding the sub-layer's output to the normalised input"),
        (ffn_on_input, "the feed-forward network reading the block's input x"),
        (one_norm, "using norm1 for both sub-layers"),
        (ffn_first, "the feed-forward network before the attention"),
    ]:
        assert_rejects(check_pre_ln_block(wrong), first, mistake)
    # no normalisation at all is none of those, and still fails, with the case's hint: the
    # property to test, not the line to write
    verdict = check_pre_ln_block(lambda x, a, f, n1, n2: (x + a(x)) + f(x + a(x)))
    assert_rejects(verdict, first, named="the block returns x unchanged")
    verdict = check_pre_ln_block(ffn_on_input)
    assert_rejects(verdict, first, named="never sees what the attention gathered")


def test_pre_ln_block_with_the_two_norms_swapped_is_named() -> None:
    """norm2 before the attention and norm1 before the feed-forward network got the case's
    hint about residuals, which such an answer gets right."""

    def swapped(x, attention, ffn, norm1, norm2):
        x = x + attention(norm2(x))
        return x + ffn(norm1(x))

    assert_rejects(check_pre_ln_block(swapped), "B = 2 sequences", "norm1 and norm2 swapped")


def test_the_pre_ln_block_hints_name_the_mistake_not_the_code() -> None:
    """A hint names what is wrong and a property to check (sub-layers that return zeros
    leave x unchanged), not the line to write: no hint spells out a sub-layer's residual
    update, as the hints once did (x = x + attention(norm1(x)))."""
    hints = [case.hint for case in _BLOCK_CASES] + [m.hint for m in _BLOCK_MISTAKES]
    for hint in hints:
        for code in ("(norm1(", "(norm2(", "sublayer(", "x = x +", "h + ffn"):
            assert code not in hint, hint


# ------------------------------------------------------------------ parameter count


def _count(v, c, d, n, f):  # a correct answer
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    norms = 2 * (2 * d)
    return v * d + c * d + n * (attention + ffn + norms) + 2 * d


def test_gpt_num_parameters_checker_accepts_a_correct_answer() -> None:
    verdict = check_gpt_num_parameters(_count)
    assert verdict, verdict.message
    assert "all 3 hidden cases pass" in verdict.message
    assert not check_gpt_num_parameters(stub).attempted


def test_a_wrong_count_is_shown_as_a_whole_number() -> None:
    """Not "expected 809856." (the comparison reads numbers as floats)."""
    message = check_gpt_num_parameters(lambda *sizes: 5).message
    assert "expected 809856\n" in message, message
    assert "got      5\n" in message, message
    assert "got      5.5\n" in check_gpt_num_parameters(lambda *sizes: 5.5).message


def test_gpt_num_parameters_checker_names_typical_mistakes() -> None:
    first = "vocab_size = 65"
    for wrong, mistake in [
        (
            lambda v, c, d, n, f: v * d + c * d + n * (4 * d * d + 2 * d * f + 4 * d) + 2 * d,
            "forgetting the biases of the linear maps",
        ),
        (lambda v, c, d, n, f: _count(v, c, d, n, f) + v * d, "counting the output head"),
        (
            lambda v, c, d, n, f: v * d + c * d + n * (4 * (d * d + d) + 2 * d * f + f + d),
            "forgetting the LayerNorms",
        ),
        (lambda v, c, d, n, f: _count(v, c, d, n, f) - 2 * d, "forgetting the final LayerNorm"),
        (
            lambda v, c, d, n, f: _count(v, c, d, n, f) - n * 2 * d - d,
            "giving each LayerNorm a weight but no bias",
        ),
        (lambda v, c, d, n, f: _count(v, c, d, n, f) + v, "a bias in the output head"),
        (lambda v, c, d, n, f: _count(v, c, d, n, f) - c * d, "forgetting the position embeddings"),
        (
            lambda v, c, d, n, f: _count(v, c, d, n, f) - n * (d * d + d),
            "forgetting the attention's output projection",
        ),
    ]:
        assert_rejects(check_gpt_num_parameters(wrong), first, mistake)
    # 4 * d_model for d_ff: right in the first case only
    assert_rejects(
        check_gpt_num_parameters(lambda v, c, d, n, f: _count(v, c, d, n, 4 * d)),
        "vocab_size = 100",
    )


def test_gpt_num_parameters_names_bias_free_attention_and_one_norm_per_block() -> None:
    """Both got the first case's general hint: attention without biases (as chapter 7's
    exercise wrote it) and one LayerNorm per block instead of two."""
    for wrong, mistake in [
        (lambda v, c, d, n, f: _count(v, c, d, n, f) - n * 4 * d, "forgetting the attention's"),
        (lambda v, c, d, n, f: _count(v, c, d, n, f) - n * 2 * d, "one LayerNorm per block"),
    ]:
        assert_rejects(check_gpt_num_parameters(wrong), "vocab_size = 65", mistake)


def test_pre_ln_block_checker_rejects_residuals_added_in_place() -> None:
    """x += ... overwrites the caller's tensor: the numbers are right, but a training step
    through it fails, since autograd needs the input it saw."""

    def in_place(x, attention, ffn, norm1, norm2):
        x += attention(norm1(x))
        x += ffn(norm2(x))
        return x

    verdict = check_pre_ln_block(in_place)
    assert_rejects(verdict, "case 1/", named="autograd")
    assert "changed its argument `x` in place" in verdict.message
