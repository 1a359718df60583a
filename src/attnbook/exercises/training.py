"""Checkers for the exercises of chapter 10 (training a small transformer).

Two exercises, each with the typical wrong answers it recognises and names:

- ``check_lr_schedule``: linear warmup then cosine decay to ``min_lr``
  (no warmup, a warmup off by one step, a decay to zero instead of ``min_lr``,
  a cosine whose clock starts at step 0, ...);
- ``check_answer_loss``: the cross-entropy of the answer tokens only, each
  predicted from the position before it (every position averaged, the shift by
  one forgotten, the mask not shifted with the targets, a mean per sequence, a
  sum, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from attnbook.exercises._framework import (
    Case,
    Mistake,
    RefusedResult,
    Verdict,
    differentiable,
    randint,
    run_cases,
)

__all__ = ["check_answer_loss", "check_lr_schedule"]


# ------------------------------------------------------------------ learning-rate schedule


def _schedule(step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int):
    """The reference, as :func:`attnbook.training.lr_at`: warmup, then cosine to ``min_lr``."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps  # steps 0 .. warmup - 1 reach max_lr
    decay_steps = total_steps - warmup_steps
    # 0 -> 1; a single step after the warmup is the last one and gets min_lr
    progress = 1.0 if decay_steps == 1 else (step - warmup_steps) / (decay_steps - 1)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def _no_warmup(step, max_lr, min_lr, warmup_steps, total_steps):
    return _schedule(step, max_lr, min_lr, 0, total_steps)


def _warmup_from_zero(step, max_lr, min_lr, warmup_steps, total_steps):
    if step < warmup_steps:
        return max_lr * step / warmup_steps  # step 0 has learning rate 0: a wasted step
    return _schedule(step, max_lr, min_lr, warmup_steps, total_steps)


def _to_zero(step, max_lr, min_lr, warmup_steps, total_steps):
    return _schedule(step, max_lr, 0.0, warmup_steps, total_steps)


def _cosine_from_start(step, max_lr, min_lr, warmup_steps, total_steps):
    """The warmup is right, but the cosine's clock starts at step 0, not after the warmup."""
    if step < warmup_steps:
        return _schedule(step, max_lr, min_lr, warmup_steps, total_steps)
    progress = step / (total_steps - 1)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def _full_period(step, max_lr, min_lr, warmup_steps, total_steps):
    """cos(2 pi progress): the learning rate comes back up to max_lr at the end."""
    if step < warmup_steps:
        return _schedule(step, max_lr, min_lr, warmup_steps, total_steps)
    progress = (step - warmup_steps) / (total_steps - warmup_steps - 1)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(2 * math.pi * progress))


def _late_floor(step, max_lr, min_lr, warmup_steps, total_steps):
    """progress divided by (total - warmup): min_lr would come one step after the last one."""
    if step < warmup_steps:
        return _schedule(step, max_lr, min_lr, warmup_steps, total_steps)
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def _warmup_one_step_long(step, max_lr, min_lr, warmup_steps, total_steps):
    """step <= warmup_steps: step warmup_steps rises past max_lr, to max_lr * (w + 1) / w."""
    if step <= warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    return _schedule(step, max_lr, min_lr, warmup_steps, total_steps)


def _amplitude_max_lr(step, max_lr, min_lr, warmup_steps, total_steps):
    """min_lr + 0.5 * max_lr * (1 + cos): the cosine starts at max_lr + min_lr."""
    if step < warmup_steps:
        return _schedule(step, max_lr, min_lr, warmup_steps, total_steps)
    progress = (step - warmup_steps) / (total_steps - warmup_steps - 1)
    return min_lr + 0.5 * max_lr * (1.0 + math.cos(math.pi * progress))


def _lr_args(max_lr: float, min_lr: float, warmup: int, total: int) -> tuple:
    return (max_lr, min_lr, warmup, total)


def _curve(fn: Callable) -> Callable:
    """Turn ``fn(step, max_lr, min_lr, warmup_steps, total_steps)`` into the whole curve."""

    def curve(max_lr, min_lr, warmup_steps, total_steps):
        rates = [fn(step, max_lr, min_lr, warmup_steps, total_steps) for step in range(total_steps)]
        if any(rate is None for rate in rates):
            return None  # the framework asks "did you forget `return`?"
        shaped = next((rate for rate in rates if np.ndim(rate) != 0), None)
        if shaped is not None:  # float() would take a (1,) array, and raise on a longer one
            raise RefusedResult(
                f"returned an array of shape {tuple(np.shape(shaped))} for one step, expected "
                "a single number, shape (): the learning rate of that step"
            )
        return np.array([float(rate) for rate in rates])

    return curve


def _draw_lr(rng, max_lr: tuple[float, float], warmup: tuple[int, int], total: tuple[int, int]):
    """The grader's ``(max_lr, min_lr, warmup_steps, total_steps)``: ``max_lr`` log-uniform in
    the range, ``min_lr`` 5% to 30% of it, the step counts in theirs."""
    top = float(10 ** rng.uniform(*np.log10(max_lr)))
    return _lr_args(
        top, top * float(rng.uniform(0.05, 0.3)), randint(rng, *warmup), randint(rng, *total)
    )


_LR_CASES = [
    Case(
        "max_lr = 1.0, min_lr = 0.1, warmup_steps = 4, total_steps = 20",
        lambda: _lr_args(1.0, 0.1, 4, 20),
        "Print your rates for this run next to the schedule of the chapter's training loop: "
        "they must rise in equal steps, step 0 already one step up from 0, to max_lr at step "
        "warmup_steps - 1; then fall along half a cosine, never rising again, to min_lr at the "
        "last step, total_steps - 1.",
        draw=lambda rng: _draw_lr(rng, (0.5, 2.0), (2, 6), (15, 30)),
    ),
    Case(
        "max_lr = 3e-3, min_lr = 3e-4, warmup_steps = 10, total_steps = 100",
        lambda: _lr_args(3e-3, 3e-4, 10, 100),
        "Scale the warmup by max_lr, and let the cosine run between max_lr and min_lr.",
        draw=lambda rng: _draw_lr(rng, (1e-4, 1e-2), (5, 20), (60, 150)),
    ),
    Case(
        "no warmup: warmup_steps = 0, total_steps = 10",
        lambda: _lr_args(1e-3, 1e-4, 0, 10),
        "With warmup_steps = 0 the cosine starts at step 0, at max_lr.",
        draw=lambda rng: _draw_lr(rng, (1e-4, 1e-2), (0, 0), (5, 15)),
    ),
]

_LR_MISTAKES = [
    Mistake(
        "no warmup",
        _curve(_no_warmup),
        "Your rate starts at max_lr: the first warmup_steps steps must rise in equal steps "
        "instead, step 0 already one step up from 0 and step warmup_steps - 1 at max_lr. "
        "Print the rates of the first few steps with warmup_steps = 4.",
    ),
    Mistake(
        "a warmup that starts at 0 (off by one step)",
        _curve(_warmup_from_zero),
        "Your step 0 has learning rate 0, a wasted step, and max_lr is only reached one step "
        "late. Check the two ends of the warmup: step 0 must already be one equal step above "
        "0, and step warmup_steps - 1 at max_lr itself.",
    ),
    Mistake(
        "a warmup one step too long (step <= warmup_steps)",
        _curve(_warmup_one_step_long),
        "The warmup is the steps 0 .. warmup_steps - 1 (step < warmup_steps): step "
        "warmup_steps already belongs to the cosine, at max_lr, instead of rising past it.",
    ),
    Mistake(
        "a cosine that decays to zero instead of min_lr",
        _curve(_to_zero),
        "Your last step gives 0: the cosine runs from max_lr down to min_lr, not to 0. "
        "Check that step total_steps - 1 returns min_lr exactly.",
    ),
    Mistake(
        "a cosine scaled by max_lr instead of by max_lr - min_lr",
        _curve(_amplitude_max_lr),
        "Your cosine starts at max_lr + min_lr, above the end of the warmup: the decay spans "
        "only the distance from max_lr down to min_lr. Check that step warmup_steps returns "
        "max_lr, the last step min_lr, and every step between them a rate between the two.",
    ),
    Mistake(
        "a cosine whose progress counts from step 0 instead of from the end of the warmup",
        _curve(_cosine_from_start),
        "Your decay has already begun when the warmup ends, so step warmup_steps is below "
        "max_lr: the decay starts at step warmup_steps, at max_lr, and ends at the last "
        "step, total_steps - 1, at min_lr.",
    ),
    Mistake(
        "a full cosine period (cos(2 pi progress)) instead of half of one",
        _curve(_full_period),
        "Your rate falls and then rises again, back to max_lr at the end: the schedule "
        "uses half a period of the cosine, which goes once from +1 to -1. Check that no "
        "rate after the warmup is above the one before it.",
    ),
    Mistake(
        "a cosine that reaches min_lr one step after the last step",
        _curve(_late_floor),
        "Your last step, total_steps - 1, is still above min_lr: count the steps of the "
        "decay from step warmup_steps to step total_steps - 1, so that its progress is 1 "
        "there and the last step uses min_lr.",
    ),
]


def check_lr_schedule(fn: Callable[[int, float, float, int, int], float]) -> Verdict:
    """Check ``fn(step, max_lr, min_lr, warmup_steps, total_steps) -> learning rate``.

    The schedule of :func:`attnbook.training.lr_at`, as the exercise states it: a linear
    warmup in equal steps over the steps ``step < warmup_steps``, in which step 0 already
    moves and step ``warmup_steps - 1`` reaches ``max_lr``; then half a cosine from ``max_lr``
    at step ``warmup_steps`` to ``min_lr`` at the last step, ``total_steps - 1``.
    Steps count from 0. The checker asks for every step of a few runs, and names the usual
    slips of the warmup and of the cosine.
    """
    if not callable(fn):
        return run_cases("lr_schedule", fn, _curve(_schedule), _LR_CASES)
    return run_cases("lr_schedule", _curve(fn), _curve(_schedule), _LR_CASES, mistakes=_LR_MISTAKES)


# ------------------------------------------------------------------ loss on the answer


def _loss_args(seed: int, lengths: list[int], seq_len: int, vocab_size: int) -> tuple:
    """Random logits and tokens; ``is_answer`` is True on the last ``lengths[b]`` tokens of row b."""
    g = torch.Generator().manual_seed(seed)
    batch = len(lengths)
    logits = 2.0 * torch.randn(batch, seq_len, vocab_size, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, vocab_size, (batch, seq_len), generator=g)
    positions = torch.arange(seq_len)
    is_answer = positions >= seq_len - torch.tensor(lengths)[:, None]  # (B, T)
    return logits, tokens, is_answer


def _random_mask_args(seed: int) -> tuple:
    """Answer tokens scattered anywhere but position 0 (which no logit predicts)."""
    logits, tokens, _ = _loss_args(seed, [0, 0, 0], 9, 6)
    g = torch.Generator().manual_seed(seed + 1)
    is_answer = torch.rand(3, 9, generator=g) < 0.5
    is_answer[:, 0] = False
    is_answer[:, -1] = True
    return logits, tokens, is_answer


def _answer_loss(logits: torch.Tensor, tokens: torch.Tensor, is_answer: torch.Tensor):
    """Mean over answer tokens of -log p(token | everything before it)."""
    per_token = F.cross_entropy(
        logits[:, :-1].flatten(0, 1),  # (B * (T - 1), V): the logits at t predict token t + 1
        tokens[:, 1:].flatten(),  # (B * (T - 1),)
        reduction="none",
    )
    return per_token[is_answer[:, 1:].flatten()].mean()


def _all_positions(logits, tokens, is_answer):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def _no_shift(logits, tokens, is_answer):
    per_token = F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="none")
    return per_token[is_answer.flatten()].mean()


def _mask_not_shifted(logits, tokens, is_answer):
    per_token = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
    )
    return per_token[is_answer[:, :-1].flatten()].mean()


def _mean_per_sequence(logits, tokens, is_answer):
    per_token = F.cross_entropy(
        logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # (B, T - 1)
    mask = is_answer[:, 1:].to(per_token.dtype)
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def _zeros_averaged(logits, tokens, is_answer):
    per_token = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
    )
    return (per_token * is_answer[:, 1:].flatten()).mean()  # divides by B * (T - 1)


def _summed(logits, tokens, is_answer):
    per_token = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
    )
    return per_token[is_answer[:, 1:].flatten()].sum()


def _probability_not_log(logits, tokens, is_answer):
    probs = logits[:, :-1].softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]  # (B, T - 1)
    return -probs[is_answer[:, 1:]].mean()


def _raw_logit(logits, tokens, is_answer):
    chosen = logits[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]  # (B, T - 1), no softmax
    return -chosen[is_answer[:, 1:]].mean()


_LOSS_CASES = [
    Case(
        "B = 2 sequences of T = 7 tokens, vocabulary 5, the last 3 tokens are the answer",
        lambda: _loss_args(1000, [3, 3], 7, 5),
        "The logits at position t predict token t + 1: pair each position's logits with "
        "the token after it, and keep the positions whose *target* is an answer token.",
    ),
    Case(
        "answers of different lengths (4, 1 and 2 tokens) in one batch",
        lambda: _loss_args(1010, [4, 1, 2], 8, 7),
        "Average over all answer tokens of the batch at once, so that every token counts the "
        "same (as F.cross_entropy with ignore_index does).",
    ),
    Case(
        "answer tokens scattered through the sequence",
        lambda: _random_mask_args(1020),
        "Select the targets with the mask shifted like the targets: is_answer says which "
        "tokens are answers, and each target is the token one position after its logits.",
    ),
]

_LOSS_MISTAKES = [
    Mistake(
        "the average over every position, prompt included",
        _all_positions,
        "Only the answer is graded: the prompt is random and cannot be predicted, so its loss "
        "would hide the answer's. Keep only the positions whose target is an answer token.",
    ),
    Mistake(
        "forgetting the shift by one",
        _no_shift,
        "logits[:, t] is the model's guess for the *next* token, tokens[:, t + 1], not for "
        "tokens[:, t] (which it has already seen).",
    ),
    Mistake(
        "shifting the targets but not the mask",
        _mask_not_shifted,
        "The mask belongs to the targets: shift it by one position, as you shifted the "
        "targets. Check on a batch whose answer is its last token alone: the loss must "
        "come from one prediction, the one made at the position before it.",
    ),
    Mistake(
        "a mean per sequence, then a mean over the batch",
        _mean_per_sequence,
        "Average over all answer tokens of the batch at once: with answers of different "
        "lengths a mean of means weighs the tokens of short answers more.",
    ),
    Mistake(
        "the masked losses averaged over every position, the zeros of the prompt included",
        _zeros_averaged,
        "Multiplying by the mask sets the prompt's losses to 0 but keeps them in the count: "
        "the mean then divides by every position of the batch, not by the number of answer "
        "tokens, and the loss shrinks as the prompt grows. Divide the sum by the number of "
        "answer targets.",
    ),
    Mistake(
        "a sum instead of a mean",
        _summed,
        "Take the mean over the answer tokens, so that the loss does not grow with the batch "
        "size and its value reads as nats per token.",
    ),
    Mistake(
        "minus the probability instead of minus the log-probability",
        _probability_not_log,
        "Cross-entropy is -log p(target), the logarithm of the probability taken: a "
        "right guess with probability 0.9 costs 0.105 nats, not -0.9.",
    ),
    Mistake(
        "minus the target's logit, without the log-softmax",
        _raw_logit,
        "Logits are scores, not log-probabilities: they do not sum to anything, and a model "
        "could lower such a loss by raising every logit. Cross-entropy is -log p(target), "
        "with p the softmax of the logits over the vocabulary.",
    ),
]


def _differentiable(fn: Callable) -> Callable:
    """``fn``'s loss, computed from logits that require a gradient; a loss that autograd
    cannot differentiate (a float, or a tensor cut from the logits) raises a ``ValueError``."""
    return differentiable(
        "answer_loss",
        fn,
        {"logits": 0},
        noun="a loss",
        why="training calls loss.backward(), which must reach the logits",
    )


def check_answer_loss(
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> Verdict:
    """Check ``fn(logits, tokens, is_answer) -> loss``: cross-entropy on the answer tokens only.

    Shapes: ``logits`` ``(B, T, V)`` (the model's output for ``tokens``),
    ``tokens`` ``(B, T)`` int64, ``is_answer`` ``(B, T)`` bool, ``True`` where
    ``tokens[b, t]`` belongs to the answer. The loss is the mean, over every
    answer token of the batch, of its cross-entropy given the logits at the position
    before it, from which each answer token is predicted. Returns a scalar
    tensor that autograd can differentiate with respect to the logits (training calls
    ``loss.backward()``): a Python float, or a loss cut from the logits, fails.
    """
    if not callable(fn):
        return run_cases("answer_loss", fn, _answer_loss, _LOSS_CASES)
    return run_cases(
        "answer_loss",
        _differentiable(fn),
        _differentiable(_answer_loss),
        _LOSS_CASES,
        mistakes=_LOSS_MISTAKES,
        rtol=1e-6,
    )
