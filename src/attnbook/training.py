"""Training a GPT: the optimiser, the learning-rate schedule, the loop, evaluation.

Introduced in chapter 10 (``chapters/10_training.ipynb``). One compact loop,
:func:`train`, does everything the chapter needs and nothing else:

- AdamW (Loshchilov & Hutter 2019) with weight decay on the weight matrices
  only (:func:`make_optimizer`), stepped by PyTorch's fused kernel on CUDA and its
  ``foreach`` one on the CPU;
- a learning rate that rises linearly for ``warmup_steps`` and then follows a
  cosine down to ``min_lr_ratio * lr`` (:func:`lr_at`);
- gradient clipping, mixed precision on CUDA (bf16 where the GPU has native
  bf16, compute capability 8.0 and up; fp16 with a gradient scaler on older
  GPUs: :func:`amp_dtype`), an optional ``torch.compile``;
- held-out evaluation every ``eval_every`` steps (loss, and exact-match for
  sequence tasks: :func:`exact_match`);
- a ``tqdm`` progress bar (a widget in Jupyter);
- data parallelism when ``torch.distributed`` is initialised (``torchrun``,
  see ``python -m attnbook train`` in :mod:`attnbook.__main__`): every process takes its share of each global
  batch and DistributedDataParallel averages the gradients.

Runs are reproducible: :func:`train` seeds everything from ``config.seed``
and draws batches from its own generator, so the same call on the same
machine gives the same numbers.

Shape legend used in this module:
    ``B`` batch, ``T`` input length, ``V`` vocabulary size, ``M`` evaluation examples.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnbook._validation import check_bool, check_device, check_int, check_number, plain_numbers
from attnbook.data import (
    IGNORE_INDEX,
    SequenceTask,
    TokenDataset,
    TranslationTask,
    check_task_fits,
    reverse_task,
)
from attnbook.encoder_decoder import EncoderDecoder
from attnbook.model import GPT, GPTConfig
from attnbook.rnn import RNNEncoderDecoder
from attnbook.runtime import get_device, set_seed

__all__ = [
    "History",
    "TrainConfig",
    "TrainingDiverged",
    "amp_dtype",
    "evaluate",
    "exact_match",
    "lr_at",
    "make_optimizer",
    "per_example_accuracy",
    "reverse_recipe",
    "train",
]


@dataclass(frozen=True)
class TrainConfig:
    """The hyperparameters of :func:`train`; frozen. Invalid values raise ``ValueError``."""

    steps: int = 1000  # optimiser steps (one batch each)
    batch_size: int = 64  # B, the global batch: sequences per step, over all processes
    lr: float = 1e-3  # peak learning rate, reached at the end of the warmup
    warmup_steps: int = 50  # steps of linear warmup from lr / warmup_steps up to lr
    min_lr_ratio: float = 0.1  # the cosine decays to min_lr_ratio * lr at the last step
    weight_decay: float = 0.1  # AdamW's decoupled decay, on weight matrices only
    beta1: float = 0.9  # AdamW's momentum of the gradient
    beta2: float = 0.99  # AdamW's momentum of the squared gradient
    grad_clip: float | None = 1.0  # clip the global gradient norm to this; None: no clipping
    eval_every: int = 100  # evaluate on held-out data every this many steps (and at the end)
    target_exact_match: float | None = None  # stop once held-out exact-match >= this (tasks)
    seed: int = 0  # seeds the weights' dropout, the batches, everything random in train()
    device: str | None = None  # "cpu", "cuda", "mps" (or a torch.device); None: get_device()
    compile: bool = False  # torch.compile the model (faster on GPUs after a slow first step)
    amp: bool = True  # mixed precision on CUDA: bf16 on sm_80+, else fp16 + GradScaler
    progress: bool = True  # show a tqdm progress bar (on the first process only)

    def __post_init__(self) -> None:
        plain_numbers(self)  # NumPy ints and floats, as Python's
        for name in ("steps", "batch_size", "eval_every"):
            check_int(getattr(self, name), name)
        default_warmup = type(self).__dataclass_fields__["warmup_steps"].default
        if self.warmup_steps == default_warmup and self.steps < default_warmup:
            raise ValueError(
                f"warmup_steps is {default_warmup} (the default), more than steps = {self.steps}: "
                f"pass a warmup no longer than the run, e.g. warmup_steps={self.steps // 10}"
            )
        check_int(
            self.warmup_steps, "warmup_steps", minimum=0, maximum=self.steps, meaning="<= steps"
        )
        check_number(self.lr, "lr", 0.0, math.inf, low_open=True)
        check_number(self.min_lr_ratio, "min_lr_ratio", 0.0, 1.0)
        check_number(self.weight_decay, "weight_decay", 0.0, math.inf)
        check_number(self.beta1, "beta1", 0.0, 1.0, high_open=True)
        check_number(self.beta2, "beta2", 0.0, 1.0, high_open=True)
        if self.grad_clip is not None:
            check_number(self.grad_clip, "grad_clip", 0.0, math.inf, low_open=True)
        if self.target_exact_match is not None:
            check_number(self.target_exact_match, "target_exact_match", 0.0, 1.0)
        check_int(
            self.seed, "seed", minimum=0, maximum=2**32 - 1, meaning="below 2**32, as NumPy needs"
        )
        if isinstance(self.device, torch.device):  # e.g. attnbook.get_device()
            object.__setattr__(self, "device", str(self.device))
        if self.device is not None and not isinstance(self.device, str):
            raise ValueError(
                f"device must be None, a str such as 'cpu' or a torch.device, got {self.device!r}"
            )
        if self.device is not None:  # a valid name; whether this machine has it: in train()
            check_device(self.device, "device")
        for name in ("compile", "amp", "progress"):
            check_bool(getattr(self, name), name)


def lr_at(step: int, config: TrainConfig) -> float:
    """The learning rate of step ``step`` (0-based): linear warmup, then cosine decay.

    During warmup the rate climbs from ``lr / warmup_steps`` to ``lr``: Adam's
    first updates rest on noisy estimates of the gradient's scale, and
    large steps then can throw a freshly initialised transformer into a bad
    region. Afterwards it follows half a cosine from ``lr`` down to
    ``min_lr_ratio * lr`` at the last step: large steps while far from a
    minimum, small ones to settle into it. The last step gets the minimum
    whenever a step follows the warmup, also a single one; with
    ``warmup_steps == steps`` there is no decay, and the last step gets ``lr``.

    Args:
        step: in ``[0, config.steps)``.
        config: the :class:`TrainConfig` (``lr``, ``warmup_steps``, ``steps``, ``min_lr_ratio``).

    Returns:
        The learning rate, a float.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    check_int(step, "step", minimum=0, maximum=config.steps - 1, meaning="0-based, < steps")
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = config.steps - config.warmup_steps
    # 0 ... 1; a single step after the warmup is the last one and gets min_lr
    progress = 1.0 if decay_steps == 1 else (step - config.warmup_steps) / (decay_steps - 1)
    min_lr = config.min_lr_ratio * config.lr
    return min_lr + 0.5 * (config.lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on weight matrices, none on biases, LayerNorms and embeddings.

    Weight decay shrinks every decayed parameter a little each step, which
    keeps the weight matrices' scale in check. Biases and LayerNorm gains set
    scales and offsets rather than capacity, so decaying them only fights the
    optimiser; an embedding row is updated only when its token occurs, so
    decay would shrink rare tokens' vectors between their occurrences. This is
    the split of GPT-style training code (e.g. Karpathy's minGPT); the tied
    output head shares the embedding matrix and so is not decayed either.

    Args:
        model: the model (its parameters with ``requires_grad``).
        config: ``lr``, ``weight_decay``, ``beta1`` and ``beta2`` are used.

    Returns:
        A ``torch.optim.AdamW`` with two parameter groups (decayed first), fused on CUDA
        and ``foreach`` on the CPU.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    no_decay = set()
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.LayerNorm)):
            no_decay |= {id(p) for p in module.parameters(recurse=False)}
    decay, rest = [], []
    for p in model.parameters():  # a tied tensor is yielded once
        if not p.requires_grad:
            continue
        (rest if p.ndim < 2 or id(p) in no_decay else decay).append(p)
    if not decay and not rest:
        raise ValueError(
            "model has no trainable parameters: requires_grad is False for all of them "
            "(model.requires_grad_(True) unfreezes them)"
        )
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=config.lr, betas=(config.beta1, config.beta2), **_adamw_kernel(decay + rest)
    )


def _adamw_kernel(params: list[torch.Tensor]) -> dict[str, bool]:
    """Which of PyTorch's AdamW implementations steps ``params``, as keyword arguments.

    On CUDA, the fused kernel (one launch for all the tensors), as nanoGPT uses
    there. On the CPU, ``foreach`` (each operation applied to the whole list
    of tensors at once): it gives bit for bit the results of PyTorch's default
    there, a loop over the tensors one by one, and takes 5-30% less time on the
    book's models; the fused CPU kernel is faster still but rounds differently,
    and the chapters' stored training runs were made with the default.
    Elsewhere, PyTorch's own choice.
    """
    devices = {p.device.type for p in params}
    if devices == {"cuda"}:
        return {"fused": True}
    if devices == {"cpu"}:
        return {"foreach": True}
    return {}


@dataclass
class History:
    """What :func:`train` measured, step by step and at every evaluation.

    ``train_loss[i]`` and ``lr[i]`` belong to step ``i``. ``eval_step[j]`` is
    the number of steps done at evaluation ``j``, ``eval_seconds[j]`` the
    training time until then (evaluations not counted), and
    ``eval_metrics[name][j]`` each metric: ``"test_loss"``, and for sequence
    tasks ``"test_exact_match"``.
    """

    train_loss: list[float] = field(default_factory=list)  # per step, mean over the global batch
    lr: list[float] = field(default_factory=list)  # per step
    eval_step: list[int] = field(default_factory=list)  # steps done at each evaluation
    eval_seconds: list[float] = field(default_factory=list)  # training seconds until each one
    eval_metrics: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0  # training time in all (evaluations excluded)

    def last(self, name: str) -> float:
        """The last value of eval metric ``name``, e.g. ``history.last("test_exact_match")``."""
        if not isinstance(name, str) or not self.eval_metrics.get(name):
            raise ValueError(f"name must be one of {sorted(self.eval_metrics)}, got {name!r}")
        return self.eval_metrics[name][-1]


class TrainingDiverged(FloatingPointError):
    """:func:`train` stopped: the loss of a step was NaN or infinite, or the held-out loss
    measured after it was NaN (the step's update wrote NaN into the weights).

    The gradient of such a loss is NaN too, and the step writes NaN into the
    weights, so the run stops at once instead of training on. Under float16
    autocast the ``GradScaler`` skips that step instead, but weights whose
    forward pass overflowed keep overflowing (a run at ``lr=1e6`` with the
    scaler on measured NaN at every later step), so the run stops there too.
    ``history`` holds what was measured up to and including that step;
    ``step`` is its index.
    """

    def __init__(self, history: History, step: int) -> None:
        self.history, self.step = history, step
        loss, lr = history.train_loss[step], history.lr[step]
        what = (
            f"the training loss is {loss} at step {step}"
            if not math.isfinite(loss)
            else f"the held-out loss is nan after step {step}"  # its update gave NaN weights
        )
        super().__init__(
            f"{what} (learning rate {lr:.3g}): the run "
            "diverged. Lower the learning rate (TrainConfig.lr), keep gradient clipping on "
            "(TrainConfig.grad_clip), and check the inputs; this error's .history holds the "
            "steps so far"
        )

    def __reduce__(self) -> tuple[type, tuple[History, int]]:  # pickle it with its history
        return type(self), (self.history, self.step)


def amp_dtype(device: torch.device | str) -> torch.dtype | None:
    """The autocast dtype :func:`train` uses on ``device``: bf16, fp16 or None (no autocast).

    bfloat16 keeps float32's exponent range, so it needs no loss scaling, but
    only GPUs of compute capability 8.0 and up (A100, RTX 30xx and later) run
    it natively; older ones (a T4 or V100) emulate it slowly. There float16
    runs on the tensor cores instead, with a ``torch.amp.GradScaler`` against
    gradients too small for its range. CPUs and MPS get no autocast.

    Args:
        device: the training device.

    Returns:
        ``torch.bfloat16``, ``torch.float16`` or ``None``.
    """
    device = check_device(device, "device")
    if device.type != "cuda":
        return None
    check_device(device, "device", available=True, advice="use 'cpu'")  # a GPU that is there
    major, _ = torch.cuda.get_device_capability(device)
    return torch.bfloat16 if major >= 8 else torch.float16


def _autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


Inputs = torch.Tensor | tuple[torch.Tensor, ...]  # a GPT's (B, T), or (src, tgt, src_mask)
Data = SequenceTask | TokenDataset | TranslationTask


def _run(model: nn.Module, inputs: Inputs, checked: bool = False) -> torch.Tensor:
    """The logits ``(B, T, V)``: ``model(idx)``, or ``model(src, tgt, src_mask)`` for translation.

    ``checked=True``: the ids come from a dataset that :func:`train` has matched
    to the model (every id was checked when the dataset was built), so the
    model skips its per-call checks, which on a GPU read the ids' range back
    to the CPU and so wait for the device on every step.
    """
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    return model(*args, validate=False) if checked else model(*args)


def _take(inputs: Inputs, rows: slice, device: torch.device) -> Inputs:
    """``inputs[rows]`` on ``device``, for one tensor or each tensor of a tuple."""
    if isinstance(inputs, tuple):
        return tuple(x[rows].to(device) for x in inputs)
    return inputs[rows].to(device)


def _loss(
    model: nn.Module,
    inputs: Inputs,
    targets: torch.Tensor,
    per: float | None = None,
    checked: bool = False,
) -> torch.Tensor:
    """Cross-entropy of the targets (IGNORE_INDEX not counted): their mean, or sum / ``per``."""
    logits = _run(model, inputs, checked)  # (B, T, V)
    flat = logits.flatten(0, 1).float(), targets.flatten()  # (B T, V), (B T)
    if per is None:
        return F.cross_entropy(*flat, ignore_index=IGNORE_INDEX)
    return F.cross_entropy(*flat, ignore_index=IGNORE_INDEX, reduction="sum") / per


def _check_model_data(model: object, data: object) -> None:
    if isinstance(data, TranslationTask):
        if not isinstance(model, (EncoderDecoder, RNNEncoderDecoder)):
            raise ValueError(
                "model must be an attnbook.EncoderDecoder or an attnbook.RNNEncoderDecoder for a "
                f"TranslationTask, got {type(model).__name__}"
            )
        c = model.config
        for side in ("src", "tgt"):
            need, have = getattr(data, f"{side}_vocab_size"), getattr(c, f"{side}_vocab_size")
            if need > have:
                raise ValueError(
                    f"the task's {side} ids go up to {need - 1} but the model's {side}_vocab_size "
                    f"is {have}: use {side}_vocab_size >= {need}"
                )
        if data.input_len > c.context_length:
            raise ValueError(
                f"the task's sequences have up to {data.input_len} tokens but the model's "
                f"context_length is {c.context_length}: use context_length >= {data.input_len}"
            )
        return
    if not isinstance(model, GPT):
        raise ValueError(f"model must be an attnbook.GPT, got {type(model).__name__}")
    if not isinstance(data, (SequenceTask, TokenDataset)):
        raise ValueError(
            "data must be a SequenceTask, a TokenDataset (e.g. a TextDataset) or a "
            "TranslationTask, "
            f"got {type(data).__name__}"
        )
    check_task_fits(data, model.config)


def exact_match(
    model: nn.Module,
    task: SequenceTask | TranslationTask,
    split: str = "test",
    batch_size: int = 1024,
) -> float:
    """The fraction of examples whose whole answer the model gets right (greedy decoding).

    Computed with teacher forcing: one forward pass over each whole sequence,
    and an example counts if the argmax of the logits is the true token at
    *every* answer position. This equals greedy decoding token by token
    (``model.generate(prompt, A, temperature=0)``): if every argmax given the
    true prefix is right, greedy decoding feeds itself exactly that prefix;
    at the first wrong argmax, greedy decoding outputs that wrong token. One
    pass instead of ``A`` passes, same number (up to ties between logits).

    Args:
        model: a :class:`~attnbook.GPT` whose context fits the task (or, for a
            :class:`~attnbook.TranslationTask`, an encoder-decoder).
        task: a :class:`~attnbook.SequenceTask` or :class:`~attnbook.TranslationTask`.
        split: "test" (held out) or "train" (or a translation task's "test_long").
        batch_size: sequences per forward pass (memory only; the result is the same).

    Returns:
        A float in ``[0, 1]``.

    Raises:
        ValueError: if the model's logits hold NaN (its weights do): ``argmax``
            takes a NaN for the largest logit, which would count arbitrary tokens.
    """
    if not isinstance(task, (SequenceTask, TranslationTask)):  # first: the message names task
        raise ValueError(
            f"task must be a SequenceTask or a TranslationTask, got {type(task).__name__}"
        )
    _check_model_data(model, task)
    check_int(batch_size, "batch_size")
    return _evaluate(model, task, split, batch_size)["exact_match"]


@torch.no_grad()
def per_example_accuracy(
    model: nn.Module,
    task: SequenceTask | TranslationTask,
    split: str = "test",
    batch_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether each example's answer is right, and the fraction of its tokens that are.

    Teacher forcing, as :func:`exact_match`: a whole answer right equals
    greedy decoding getting it right; the token fraction counts the argmax
    predictions that are right given the true prefix.

    Args:
        model: a model that fits ``task`` (as for :func:`exact_match`).
        task: a :class:`~attnbook.SequenceTask` or :class:`~attnbook.TranslationTask`.
        split: a split of ``task``.
        batch_size: examples per forward pass.

    Returns:
        ``(exact, tokens)``: ``exact`` ``(M,)`` bool, ``tokens`` ``(M,)`` float in ``[0, 1]``.

    Raises:
        ValueError: if the model's logits hold NaN, as :func:`exact_match`.
    """
    if not isinstance(task, (SequenceTask, TranslationTask)):  # first: the message names task
        raise ValueError(
            f"task must be a SequenceTask or a TranslationTask, got {type(task).__name__}"
        )
    _check_model_data(model, task)
    check_int(batch_size, "batch_size")
    inputs, targets = task.eval_data(split)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    exact, tokens = [], []
    try:
        for start in range(0, targets.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            y = targets[rows].to(device)  # (b, T)
            logits = _run(model, _take(inputs, rows, device))  # (b, T, V)
            if bool(torch.isnan(logits).any()):  # one read-back per batch, as .cpu() below
                raise _nan_logits(split)
            predicted = logits.argmax(-1)  # (b, T)
            counted = y != IGNORE_INDEX  # (b, T)
            right = (predicted == y) & counted  # (b, T)
            exact.append((right | ~counted).all(1).cpu())
            tokens.append((right.sum(1) / counted.sum(1)).cpu())
    finally:
        model.train(was_training)
    return torch.cat(exact), torch.cat(tokens)


def _nan_logits(split: object) -> ValueError:
    """The error of an evaluation whose model gives NaN logits: ``argmax`` takes a NaN for the
    largest value, so an accuracy would count arbitrary tokens, and the loss would be NaN."""
    return ValueError(
        f"model gave NaN logits on the {split!r} split: its weights hold NaN (left by a run "
        "that diverged?), so there is no loss or accuracy to measure"
    )


@torch.no_grad()
def _evaluate(
    model: nn.Module, data: Data, split: str, batch_size: int, refuse_nan: bool = True
) -> dict:
    """Mean loss over the split's evaluation data and, for tasks, exact-match.

    ``refuse_nan``: raise if the model's logits hold NaN (:func:`train` passes ``False``:
    it records what it measured, then raises :class:`TrainingDiverged`).
    """
    inputs, targets = data.eval_data(split)  # (M, T) or a tuple of (M, .), (M, T)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum, n_targets, n_right = 0.0, 0, 0
    try:
        for start in range(0, targets.shape[0], batch_size):
            x = _take(inputs, slice(start, start + batch_size), device)  # (b, T) or a tuple
            y = targets[start : start + batch_size].to(device)  # (b, T)
            logits = _run(model, x).float()  # (b, T, V)
            counted = y != IGNORE_INDEX  # (b, T)
            batch_loss = float(
                F.cross_entropy(
                    logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
                )
            )
            if refuse_nan and math.isnan(batch_loss):  # NaN logits (or +inf) in a counted row
                raise _nan_logits(split)
            loss_sum += batch_loss
            n_targets += int(counted.sum())
            right = (logits.argmax(-1) == y) | ~counted  # (b, T)
            n_right += int(right.all(dim=1).sum())
    finally:
        model.train(was_training)
    metrics = {"loss": loss_sum / n_targets}
    if isinstance(data, (SequenceTask, TranslationTask)):
        metrics["exact_match"] = n_right / targets.shape[0]
    return metrics


def evaluate(
    model: nn.Module, data: Data, split: str = "test", batch_size: int = 1024
) -> dict[str, float]:
    """Held-out loss (and exact-match for a task), the numbers :func:`train` records.

    Args:
        model: a :class:`~attnbook.GPT` whose context fits ``data`` (for a
            :class:`~attnbook.TranslationTask`: an encoder-decoder).
        data: a :class:`~attnbook.SequenceTask` or :class:`~attnbook.TranslationTask`
            (all of ``split``) or a :class:`~attnbook.data.TokenDataset` such as a
            :class:`~attnbook.TextDataset` (fixed evenly spaced windows of ``split``).
        split: "test" or "train".
        batch_size: sequences per forward pass.

    Returns:
        ``{"loss": ...}``, plus ``"exact_match"`` for a task.

    Raises:
        ValueError: if the model's logits hold NaN (or ``+inf``), which make the loss NaN.
    """
    _check_model_data(model, data)
    check_int(batch_size, "batch_size")
    return _evaluate(model, data, split, batch_size)


def _distributed() -> tuple[int, int]:
    """``(rank, world_size)``: ``(0, 1)`` unless ``torch.distributed`` is initialised."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train(model: nn.Module, data: Data, config: TrainConfig) -> History:
    """Train ``model`` on ``data`` for ``config.steps`` steps; return what was measured.

    Each step draws a random batch of training examples, computes the mean
    cross-entropy over its targets (for a task, the answer tokens only),
    backpropagates, clips the gradient norm and takes an AdamW step at the
    learning rate :func:`lr_at` gives. Every ``eval_every`` steps and at the
    end, it evaluates on the held-out split (:func:`evaluate`). The data is
    matched to the model once, before the first step (vocabulary and
    context; the dataset checked its ids when it was built), so the steps
    call the model with ``validate=False``.

    Under ``torchrun`` (``torch.distributed`` initialised) every process
    draws the *same* global batch and keeps its own slice of it, the model is
    wrapped in DistributedDataParallel (which averages the gradients), and
    the loss recorded is the global batch's mean: the same numbers as one
    process with the whole batch, up to the order of floating-point sums. Each
    slice's loss is its sum over the global batch's number of targets (times
    the number of processes), so that a slice with more padding weighs less.

    A :class:`~attnbook.TranslationTask` trains an encoder-decoder
    (:class:`~attnbook.EncoderDecoder` or :class:`~attnbook.RNNEncoderDecoder`)
    the same way: its batches are ``(src, tgt[:, :-1], src_mask)`` and the
    targets ``tgt[:, 1:]`` (teacher forcing), padding not counted.

    Args:
        model: a :class:`~attnbook.GPT` (or, for a translation task, an
            encoder-decoder); trained in place (moved to the device).
        data: a :class:`~attnbook.SequenceTask`, :class:`~attnbook.data.TokenDataset`
            or :class:`~attnbook.TranslationTask` whose inputs fit the model's context.
        config: a :class:`TrainConfig`.

    Returns:
        A :class:`History`.

    Raises:
        TrainingDiverged: at the first step whose loss is NaN or infinite
            (e.g. a learning rate far too high), or whose evaluation measures a
            NaN held-out loss (its update gave NaN weights, at the last step
            too); its ``history`` holds the steps up to that one.
    """
    _check_model_data(model, data)
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if any(p.dtype == torch.float16 for p in model.parameters()):  # AdamW's state overflows
        raise ValueError(
            "model's parameters are torch.float16, which AdamW's state overflows (the loss is "
            "NaN at any learning rate): train a float32 model (TrainConfig's amp, on by default, "
            "computes in 16 bits on a GPU) and convert it afterwards"
        )
    if config.target_exact_match is not None and not isinstance(
        data, (SequenceTask, TranslationTask)
    ):
        raise ValueError(
            "target_exact_match needs a SequenceTask or a TranslationTask, which have answers to "
            f"match; data is a {type(data).__name__}, so leave it None"
        )
    rank, world = _distributed()
    if config.batch_size % world:
        raise ValueError(
            f"batch_size must be a multiple of the number of processes {world}, "
            f"got {config.batch_size}"
        )
    device = (
        check_device(config.device, "device", available=True)
        if config.device is not None
        else get_device()
    )
    if world > 1 and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    set_seed(config.seed)  # dropout and anything else drawn from the global generators
    batches = torch.Generator().manual_seed(config.seed)  # the data order, on the CPU
    model.to(device).train()
    optimizer = make_optimizer(model, config)
    dtype = amp_dtype(device) if config.amp else None
    # fp16 needs loss scaling; with bf16 or float32 the scaler is disabled and changes nothing
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    net: nn.Module = model
    if world > 1:
        ids = [device.index] if device.type == "cuda" else None
        net = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    if config.compile:
        net = torch.compile(net)
    shard = slice(rank * config.batch_size // world, (rank + 1) * config.batch_size // world)
    is_task = isinstance(data, (SequenceTask, TranslationTask))
    history = History()
    # Imported here, so that importing attnbook stays light. tqdm.auto (a widget in Jupyter)
    # only for a bar that is shown: in a kernel without ipywidgets, importing it prints a
    # warning, which a run with progress=False must not.
    shown = config.progress and rank == 0
    if shown:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm

    bar = tqdm(total=config.steps, disable=not shown, desc="training")
    trained_seconds = 0.0
    for step in range(config.steps):
        started = time.perf_counter()
        lr = lr_at(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = data.batch("train", config.batch_size, batches)  # (B, T) each
        # Under DDP, which averages the processes' gradients, each slice's loss is its sum
        # divided by the global batch's number of targets over the number of processes: the
        # average is then the gradient of the global batch's mean, also where the slices hold
        # different numbers of targets (a translation batch's padding is not counted).
        per = int((targets != IGNORE_INDEX).sum()) / world if world > 1 else None
        inputs, targets = _take(inputs, shard, device), targets[shard].to(device)
        with _autocast(device, dtype):
            loss = _loss(net, inputs, targets, per, checked=True)  # data and model matched
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # under DDP: gradients averaged over the processes here
        if config.grad_clip is not None:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        scaler.step(optimizer)  # skips the step if a scaled gradient overflowed
        scaler.update()
        loss = loss.detach()
        if world > 1:  # the global batch's mean: the slices' sums over its number of targets
            torch.distributed.all_reduce(loss)
            loss = loss / world
        history.train_loss.append(float(loss))
        history.lr.append(lr)
        trained_seconds += time.perf_counter() - started
        if not math.isfinite(history.train_loss[-1]):  # the run is lost: stop, and say so
            bar.close()
            history.seconds = trained_seconds
            raise TrainingDiverged(history, step)
        bar.update(1)
        done = step + 1
        if done % config.eval_every == 0 or done == config.steps:
            metrics = _evaluate(model, data, "test", max(config.batch_size, 256), False)
            history.eval_step.append(done)
            history.eval_seconds.append(trained_seconds)
            for name, value in metrics.items():
                history.eval_metrics.setdefault(f"test_{name}", []).append(value)
            bar.set_postfix({f"test_{k}": round(v, 4) for k, v in metrics.items()})
            if math.isnan(metrics["loss"]):  # this step's update wrote NaN into the weights
                bar.close()
                history.seconds = trained_seconds
                raise TrainingDiverged(history, step)
            target = config.target_exact_match
            if is_task and target is not None and metrics["exact_match"] >= target:
                break
    bar.close()
    history.seconds = trained_seconds
    return history


# ----------------------------------------------------------------------------- recipes


# The two sizes of chapter 10's run: the task, the model's widths, the training settings.
REVERSE_SCALES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {  # at least 99% held-out exact-match in well under a minute on 2 CPU cores
        "task": dict(length=16, n_symbols=10, n_train=20000, n_test=1000),
        "model": dict(d_model=64, n_heads=4, n_layers=2),
        "train": dict(steps=150, batch_size=64, lr=3e-3, warmup_steps=30, eval_every=25),
    },
    "gpu": {  # longer strings, a bigger model and more steps, for a machine with a GPU
        "task": dict(length=32, n_symbols=32, n_train=200000, n_test=2000),
        "model": dict(d_model=256, n_heads=8, n_layers=4),
        "train": dict(steps=2000, batch_size=256, lr=1e-3, warmup_steps=100, eval_every=100),
    },
}


def reverse_recipe(scale: str = "cpu") -> tuple[SequenceTask, GPTConfig, TrainConfig]:
    """The chapter's run: the reverse task, a model and a training config that reach 99%.

    ``"cpu"`` reaches at least 99% held-out exact-match in well under a
    minute of 2-core CPU training (measured in ``benchmarks/time_to_accuracy.py``);
    ``"gpu"`` is the same task with longer strings, a bigger model and more
    steps, for a machine with a GPU.

    Args:
        scale: "cpu" or "gpu".

    Returns:
        ``(task, model_config, train_config)``: build the model with ``GPT(model_config)``.
    """
    if scale not in REVERSE_SCALES:
        raise ValueError(f"scale must be one of {tuple(REVERSE_SCALES)}, got {scale!r}")
    sizes = REVERSE_SCALES[scale]
    task = reverse_task(**sizes["task"], seed=0)
    model = GPTConfig(vocab_size=task.vocab_size, context_length=task.input_len, **sizes["model"])
    return task, model, TrainConfig(**sizes["train"], seed=0)
