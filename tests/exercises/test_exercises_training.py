"""The checkers of chapter 10 accept correct answers and reject, and name, typical wrong ones."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from checker_asserts import assert_rejects, stub

from attnbook.exercises import check_answer_loss, check_lr_schedule

# ------------------------------------------------------------------ learning-rate schedule


def _lr(step, max_lr, min_lr, warmup_steps, total_steps):  # a correct answer
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / (total_steps - warmup_steps - 1)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def test_lr_schedule_checker_accepts_correct_answers() -> None:
    verdict = check_lr_schedule(_lr)
    assert verdict, verdict.message
    assert "all 3 hidden cases pass" in verdict.message

    def with_torch(step, max_lr, min_lr, warmup_steps, total_steps):  # returns 0-d tensors
        if step < warmup_steps:
            return torch.tensor(max_lr * (step + 1) / warmup_steps)
        p = torch.tensor((step - warmup_steps) / (total_steps - warmup_steps - 1))
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + torch.cos(math.pi * p))

    assert check_lr_schedule(with_torch)
    assert not check_lr_schedule(stub).attempted


def test_lr_schedule_checker_agrees_with_the_package() -> None:
    from attnbook.training import TrainConfig, lr_at

    config = TrainConfig(steps=50, lr=2e-3, warmup_steps=7, min_lr_ratio=0.25)
    for step in range(config.steps):
        assert math.isclose(_lr(step, 2e-3, 5e-4, 7, 50), lr_at(step, config), rel_tol=1e-12)


def test_lr_schedule_checker_names_typical_mistakes() -> None:
    first = "warmup_steps = 4, total_steps = 20"

    def no_warmup(step, max_lr, min_lr, warmup_steps, total_steps):
        return _lr(step, max_lr, min_lr, 0, total_steps)

    def from_zero(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        return _lr(step, max_lr, min_lr, warmup_steps, total_steps)

    def to_zero(step, max_lr, min_lr, warmup_steps, total_steps):
        return _lr(step, max_lr, 0.0, warmup_steps, total_steps)

    def clock_from_zero(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        progress = step / (total_steps - 1)
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))

    def full_period(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        progress = (step - warmup_steps) / (total_steps - warmup_steps - 1)
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(2 * math.pi * progress))

    def late_floor(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))

    def warmup_too_long(step, max_lr, min_lr, warmup_steps, total_steps):
        if step <= warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        return _lr(step, max_lr, min_lr, warmup_steps, total_steps)

    def amplitude_max_lr(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        progress = (step - warmup_steps) / (total_steps - warmup_steps - 1)
        return min_lr + 0.5 * max_lr * (1 + math.cos(math.pi * progress))

    for wrong, mistake in [
        (no_warmup, "no warmup"),
        (warmup_too_long, "a warmup one step too long"),
        (amplitude_max_lr, "a cosine scaled by max_lr instead of by max_lr - min_lr"),
        (from_zero, "a warmup that starts at 0"),
        (to_zero, "a cosine that decays to zero instead of min_lr"),
        (clock_from_zero, "a cosine whose progress counts from step 0"),
        (full_period, "a full cosine period"),
        (late_floor, "a cosine that reaches min_lr one step after the last step"),
    ]:
        assert_rejects(check_lr_schedule(wrong), first, mistake)
    # a wrong answer that is none of the named mistakes still fails, with the case's hint
    verdict = check_lr_schedule(lambda step, max_lr, min_lr, w, n: max_lr)
    assert_rejects(verdict, first)
    assert "this looks like" not in verdict.message

    def linear_decay(step, max_lr, min_lr, warmup_steps, total_steps):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        progress = (step - warmup_steps) / (total_steps - warmup_steps - 1)
        return max_lr - (max_lr - min_lr) * progress

    assert_rejects(check_lr_schedule(linear_decay), first)
    # a division by zero when warmup_steps = 0 fails on the third case
    assert_rejects(
        check_lr_schedule(
            lambda s, hi, lo, w, n: (
                hi * min(1.0, (s + 1) / w) if s < w or w == 0 else _lr(s, hi, lo, w, n)
            )
        ),
        "no warmup: warmup_steps = 0",
    )


# ------------------------------------------------------------------ loss on the answer


def _loss(logits, tokens, is_answer):  # a correct answer
    per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
    return per_token[is_answer[:, 1:]].mean()


def test_answer_loss_checker_accepts_correct_answers() -> None:
    verdict = check_answer_loss(_loss)
    assert verdict, verdict.message
    assert "all 3 hidden cases pass" in verdict.message

    def with_ignore_index(logits, tokens, is_answer):  # the -100 idiom of F.cross_entropy
        targets = tokens[:, 1:].masked_fill(~is_answer[:, 1:], -100)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)

    assert check_answer_loss(with_ignore_index)
    assert not check_answer_loss(stub).attempted


def test_answer_loss_checker_names_typical_mistakes() -> None:
    first = "the last 3 tokens are the answer"

    def all_positions(logits, tokens, is_answer):
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())

    def no_shift(logits, tokens, is_answer):
        return F.cross_entropy(logits[is_answer], tokens[is_answer])

    def mask_not_shifted(logits, tokens, is_answer):
        per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        return per_token[is_answer[:, :-1]].mean()

    def per_sequence(logits, tokens, is_answer):
        per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        mask = is_answer[:, 1:].double()
        return ((per_token * mask).sum(1) / mask.sum(1)).mean()

    def summed(logits, tokens, is_answer):
        per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        return per_token[is_answer[:, 1:]].sum()

    def probability(logits, tokens, is_answer):
        p = logits[:, :-1].softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
        return -p[is_answer[:, 1:]].mean()

    def raw_logit(logits, tokens, is_answer):
        chosen = logits[:, :-1].gather(-1, tokens[:, 1:, None]).squeeze(-1)
        return -chosen[is_answer[:, 1:]].mean()

    for wrong, case, mistake in [
        (raw_logit, first, "minus the target's logit, without the log-softmax"),
        (all_positions, first, "the average over every position"),
        (no_shift, first, "forgetting the shift by one"),
        (mask_not_shifted, first, "shifting the targets but not the mask"),
        (per_sequence, "answers of different lengths", "a mean per sequence"),
        (summed, first, "a sum instead of a mean"),
        (probability, first, "minus the probability"),
    ]:
        assert_rejects(check_answer_loss(wrong), case, mistake)
    # the shift in the wrong direction is none of those, and still fails
    verdict = check_answer_loss(
        lambda logits, tokens, m: F.cross_entropy(
            logits[:, 1:][m[:, :-1]], tokens[:, :-1][m[:, :-1]]
        )
    )
    assert_rejects(verdict, first)


def test_answer_loss_averaging_the_masked_zeros_is_named() -> None:
    """(losses * mask).mean() divides by every position, not by the answer tokens; it got the
    first case's hint about the shift by one, which this answer gets right."""

    def zeros_averaged(logits, tokens, is_answer):
        per_token = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        return (per_token * is_answer[:, 1:]).mean()

    assert_rejects(
        check_answer_loss(zeros_averaged),
        "the last 3 tokens are the answer",
        "the masked losses averaged over every position",
        named="number of answer targets",
    )


def test_answer_loss_that_autograd_cannot_differentiate_fails() -> None:
    """The right number as a Python float (.item()) or cut from the logits (.detach()) passed,
    though training calls loss.backward() on it."""
    for cut in (lambda loss: loss.item(), lambda loss: loss.detach()):
        verdict = check_answer_loss(
            lambda logits, tokens, m, cut=cut: cut(_loss(logits, tokens, m))
        )
        assert_rejects(verdict, "the last 3 tokens are the answer")
        assert "returned a loss that autograd cannot differentiate" in verdict.message
    with torch.no_grad():  # the checker asks for the gradient whatever the caller's mode
        assert check_answer_loss(_loss)


def test_answer_loss_copied_into_a_new_tensor_that_requires_a_gradient_fails() -> None:
    """A copy of the right loss made to require a gradient (torch.tensor(loss.item(),
    requires_grad=True)) has requires_grad set, but backward() would never reach the logits:
    it is refused, naming the argument the loss must depend on."""
    verdict = check_answer_loss(
        lambda logits, tokens, m: torch.tensor(_loss(logits, tokens, m).item(), requires_grad=True)
    )
    assert_rejects(verdict, "the last 3 tokens are the answer")
    assert "cannot differentiate with respect to `logits`" in verdict.message, verdict.message


def test_answer_loss_that_changes_the_logits_in_place_is_told_so() -> None:
    """The checker hands the answer a copy of the logits that requires a gradient: an
    in-place change of it is still reported as a change of the argument, not as autograd's
    complaint about a leaf."""

    def shifted_in_place(logits, tokens, is_answer):
        logits -= logits.amax(dim=-1, keepdim=True)  # the softmax does not change
        return _loss(logits, tokens, is_answer)

    verdict = check_answer_loss(shifted_in_place)
    assert not verdict
    assert "changed its argument `logits` in place" in verdict.message, verdict.message
