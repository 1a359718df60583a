"""Tests of attnbook.training and GPT.generate.

The schedule's shape, the optimiser's parameter groups, that training
learns (loss falls, a small reverse task is solved), that it is
reproducible bit for bit, that exact-match under teacher forcing equals
greedy decoding, checkpoints round-trip and refuse mismatched weights, the
plot, sampling, and bad input.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle

import matplotlib
import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from attnbook import (
    GPT,
    EncoderDecoder,
    EncoderDecoderConfig,
    GPTConfig,
    RNNConfig,
    RNNEncoderDecoder,
    set_seed,
)
from attnbook.data import TextDataset, grammar_corpus, reverse_task, translation_task
from attnbook.training import (
    TrainConfig,
    TrainingDiverged,
    amp_dtype,
    evaluate,
    exact_match,
    lr_at,
    make_optimizer,
    per_example_accuracy,
    reverse_recipe,
    train,
)

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _one_thread() -> object:
    """One thread: these tiny models gain nothing from more, and lose much on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TASK = reverse_task(length=4, n_symbols=6, n_train=800, n_test=200, seed=0)  # T = 8, V = 7


def _model(seed: int = 0, **overrides: object) -> GPT:
    fields = {"vocab_size": 7, "context_length": 8, "d_model": 32, "n_heads": 2, "n_layers": 1}
    set_seed(seed)
    return GPT(GPTConfig(**(fields | overrides)))


def _config(**overrides: object) -> TrainConfig:
    fields = {"steps": 20, "batch_size": 32, "lr": 3e-3, "warmup_steps": 5, "eval_every": 10}
    return TrainConfig(**(fields | {"device": "cpu", "progress": False} | overrides))


# ------------------------------------------------------------------ schedule and optimiser


def test_lr_warmup_then_cosine() -> None:
    config = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    lrs = [lr_at(s, config) for s in range(100)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])  # linear warmup
    assert lrs[9] == pytest.approx(1.0)  # the peak at the end of warmup
    assert lrs[-1] == pytest.approx(0.1)  # the floor at the last step
    assert all(a >= b for a, b in itertools.pairwise(lrs[9:]))  # decreasing after warmup
    middle = 10 + (89 // 2)  # half way through the decay: cos = 0
    assert lrs[middle] == pytest.approx(0.55, abs=0.01)
    assert lr_at(0, TrainConfig(steps=5, lr=2.0, warmup_steps=0)) == pytest.approx(2.0)


@pytest.mark.parametrize("warmup", [0, 1, 7])
def test_lr_one_step_after_the_warmup_is_the_minimum(warmup: int) -> None:
    config = TrainConfig(steps=warmup + 1, lr=2.0, warmup_steps=warmup, min_lr_ratio=0.1)
    lrs = [lr_at(s, config) for s in range(config.steps)]
    assert lrs[-1] == pytest.approx(0.2)  # the last step reaches min_lr_ratio * lr
    assert lrs[:warmup] == pytest.approx([2.0 * (s + 1) / warmup for s in range(warmup)])
    two = TrainConfig(steps=warmup + 2, lr=2.0, warmup_steps=warmup, min_lr_ratio=0.1)
    assert [lr_at(s, two) for s in range(warmup, warmup + 2)] == pytest.approx([2.0, 0.2])


def test_the_exercise_checker_agrees_with_lr_at() -> None:
    from attnbook.exercises.training import _schedule

    for steps, warmup in [(1, 0), (2, 1), (5, 4), (9, 3), (100, 10), (20, 0)]:
        config = TrainConfig(steps=steps, lr=1.5, warmup_steps=warmup, min_lr_ratio=0.2)
        for step in range(steps):
            assert _schedule(step, 1.5, 0.3, warmup, steps) == pytest.approx(lr_at(step, config))


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ((7, 5), torch.float16),
        ((7, 0), torch.float16),
        ((8, 0), torch.bfloat16),
        ((9, 0), torch.bfloat16),
    ],
)
def test_amp_dtype_is_bf16_only_where_it_is_native(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: torch.dtype
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert amp_dtype("cuda") == expected  # a T4 (7.5) or V100 (7.0): fp16; an A100 (8.0): bf16
    assert amp_dtype("cpu") is None
    assert amp_dtype(torch.device("mps")) is None


def test_the_scaler_runs_only_with_fp16(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the loop still goes through the (disabled) scaler: the same numbers as plain AdamW."""
    made = []
    real = torch.amp.GradScaler

    def spy(*args: object, **kwargs: object) -> object:
        made.append(kwargs.get("enabled"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.amp, "GradScaler", spy)
    history = train(_model(), TASK, _config(steps=3, warmup_steps=1))
    assert made == [False]
    assert len(history.train_loss) == 3


@pytest.mark.parametrize("step", [-1, 100, 1.5, True])
def test_lr_at_bad_step(step: object) -> None:
    with pytest.raises(ValueError, match="step"):
        lr_at(step, TrainConfig(steps=100))


def test_lr_at_and_make_optimizer_bad_config_or_model() -> None:
    with pytest.raises(ValueError, match="config must be a TrainConfig, got NoneType"):
        lr_at(0, None)
    with pytest.raises(ValueError, match="config must be a TrainConfig, got dict"):
        lr_at(0, {"steps": 10})
    with pytest.raises(ValueError, match=r"model must be a torch\.nn\.Module, got NoneType"):
        make_optimizer(None, _config())
    with pytest.raises(ValueError, match="config must be a TrainConfig, got NoneType"):
        make_optimizer(_model(), None)


def test_optimizer_decays_weight_matrices_only() -> None:
    model = _model()
    decay, rest = make_optimizer(model, _config()).param_groups
    assert decay["weight_decay"] == 0.1
    assert rest["weight_decay"] == 0.0
    ids = lambda group: {id(p) for p in group["params"]}  # noqa: E731
    assert not ids(decay) & ids(rest)
    assert ids(decay) | ids(rest) == {id(p) for p in model.parameters()}  # each once
    assert id(model.tok_emb.weight) in ids(rest)  # embedding (and the tied head)
    assert id(model.pos_emb.weight) in ids(rest)
    assert id(model.blocks[0].norm1.weight) in ids(rest)
    assert id(model.blocks[0].ffn.linear1.bias) in ids(rest)
    assert id(model.blocks[0].ffn.linear1.weight) in ids(decay)
    assert id(model.blocks[0].self_attn.in_proj.weight) in ids(decay)  # W_Q, W_K, W_V stacked


def test_optimizer_on_the_cpu_steps_as_pytorchs_default_bit_for_bit() -> None:
    """``foreach`` on the CPU: the chapters' stored runs, made with the default loop, still hold."""
    model = _model()
    optimizer = make_optimizer(model, _config())
    assert optimizer.defaults["foreach"] is True
    assert not optimizer.defaults["fused"]
    twin = _model()
    groups = [
        {"params": [dict(twin.named_parameters())[n] for n in names], "weight_decay": decay}
        for names, decay in _group_names(model, optimizer)
    ]
    plain = torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.99))  # PyTorch's default on the CPU
    assert plain.defaults["foreach"] is None
    assert plain.defaults["fused"] is None
    draws = torch.Generator().manual_seed(0)
    for _ in range(5):
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            p.grad = torch.randn(p.shape, generator=draws)
            q.grad = p.grad.clone()
        optimizer.step()
        plain.step()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q), name


def _group_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list:
    names = {id(p): n for n, p in model.named_parameters()}
    return [
        ([names[id(p)] for p in group["params"]], group["weight_decay"])
        for group in optimizer.param_groups
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_optimizer_on_cuda_is_fused() -> None:
    optimizer = make_optimizer(_model().cuda(), _config())
    assert optimizer.defaults["fused"] is True


def test_optimizer_on_another_device_keeps_pytorchs_choice() -> None:
    optimizer = make_optimizer(_model().to("meta"), _config())
    assert optimizer.defaults["foreach"] is None
    assert optimizer.defaults["fused"] is None


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": 1.5}, "batch_size"),
        ({"warmup_steps": 30}, "warmup_steps"),
        ({"lr": 0.0}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"min_lr_ratio": 1.5}, "min_lr_ratio"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"beta2": 1.0}, "beta2"),
        ({"grad_clip": 0.0}, "grad_clip"),
        ({"target_exact_match": 2.0}, "target_exact_match"),
        ({"seed": -1}, "seed"),
        ({"compile": "yes"}, "compile"),
        ({"eval_every": 0}, "eval_every"),
        ({"device": 0}, "device"),
        ({"device": "gpu"}, "device must be .*, got 'gpu'"),
        ({"device": ""}, "device"),
        ({"device": "cuda:x"}, "device"),
    ],
)
def test_train_config_bad_fields(overrides: dict, match: str) -> None:
    """The message starts with the field's name (``lr`` is in ``min_lr_ratio`` too)."""
    with pytest.raises(ValueError, match="^" + match):
        _config(**overrides)


# ------------------------------------------------------------------------------ training


def test_training_solves_a_small_reverse_task() -> None:
    model = _model()
    assert exact_match(model, TASK) < 0.05  # untrained: no better than chance
    config = _config(steps=200, batch_size=64, eval_every=25, target_exact_match=0.99)
    history = train(model, TASK, config)
    assert history.last("test_exact_match") >= 0.99
    assert history.eval_step[-1] < 200  # stopped at the target
    assert exact_match(model, TASK) == history.last("test_exact_match")
    assert history.train_loss[-1] < 0.2 * history.train_loss[0]
    assert len(history.train_loss) == len(history.lr) == history.eval_step[-1]
    assert history.eval_seconds == sorted(history.eval_seconds)


def test_a_diverging_run_stops_at_its_first_nan_loss() -> None:
    """Before, a learning rate of 1e6 trained on for every step and reported a held-out loss of NaN."""
    config = _config(lr=1e6, warmup_steps=1, grad_clip=None)  # NaN at step 1, measured
    model = _model()
    with pytest.raises(
        TrainingDiverged, match=r"the training loss is nan at step \d+ \(learning rate"
    ) as caught:
        train(model, TASK, config)
    history, step = caught.value.history, caught.value.step
    assert not all(torch.isfinite(p).all() for p in model.parameters())  # as chapter 10 says
    assert isinstance(caught.value, FloatingPointError)
    assert len(history.train_loss) == len(history.lr) == step + 1 < config.steps
    assert not math.isfinite(history.train_loss[-1])
    assert all(math.isfinite(loss) for loss in history.train_loss[:-1])
    assert history.eval_step == []  # no evaluation of NaN weights
    again = pickle.loads(pickle.dumps(caught.value))  # e.g. sent back from a worker process
    assert (str(again), again.step, again.history.lr) == (str(caught.value), step, history.lr)


def test_a_last_step_that_writes_nan_into_the_weights_stops_the_run_too() -> None:
    """Its loss was measured before its update, so before, train returned as if all was well,
    with a held-out loss of NaN and exact-match 0.0 in the history and NaN weights."""
    config = _config(steps=1, lr=1e6, warmup_steps=1, grad_clip=None)
    with pytest.raises(
        TrainingDiverged, match=r"the held-out loss is nan after step 0 \(learning rate"
    ) as caught:
        train(_model(), TASK, config)
    history = caught.value.history
    assert math.isfinite(history.train_loss[0])
    assert history.eval_step == [1]
    assert math.isnan(history.eval_metrics["test_loss"][0])  # what was measured, kept


def test_a_nan_loss_stops_the_run_with_the_fp16_scaler_on_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scaler skips the NaN step and the weights stay finite, but they overflow from then on."""
    real = torch.amp.GradScaler
    monkeypatch.setattr(
        torch.amp, "GradScaler", lambda *a, **k: real(*a, **(k | {"enabled": True}))
    )
    model = _model()
    with pytest.raises(TrainingDiverged) as caught:
        train(model, TASK, _config(lr=1e6, warmup_steps=1, grad_clip=None))
    assert caught.value.step == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the step was skipped


def _step_gradient_norms(grad_clip: float | None) -> list[float]:
    """The global gradient norm at each optimiser step of a 3-step run."""
    norms = []

    def record(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))))

    handle = register_optimizer_step_pre_hook(record)
    try:
        train(_model(), TASK, _config(steps=3, warmup_steps=1, grad_clip=grad_clip))
    finally:
        handle.remove()
    return norms


def test_the_optimiser_steps_with_gradients_clipped_to_grad_clip() -> None:
    """Each step's global gradient norm is at most grad_clip; unclipped, the first is larger."""
    clipped = _step_gradient_norms(0.05)
    assert len(clipped) == 3
    assert max(clipped) <= 0.05 * (1 + 1e-6)
    assert _step_gradient_norms(None)[0] > 0.05  # the same weights and batch: clipping had work


def test_training_is_reproducible() -> None:
    a = train(_model(), TASK, _config())
    b = train(_model(), TASK, _config())
    c = train(_model(), TASK, _config(seed=1))
    assert a.train_loss == b.train_loss  # bit for bit
    assert a.eval_metrics == b.eval_metrics
    assert a.train_loss != c.train_loss  # the seed matters: another data order


def test_train_evaluates_at_the_last_step_and_seeds_the_dropout() -> None:
    """A run whose steps are no multiple of eval_every is evaluated at its end too; and train
    seeds the global generators (dropout) from config.seed, so what ran before it does not
    change its losses."""
    config = _config(steps=4, batch_size=8, eval_every=3, warmup_steps=1)
    a = train(_model(dropout=0.3), TASK, config)
    assert a.eval_step == [3, 4]
    model = _model(dropout=0.3)
    torch.rand(10)  # the global generator moves on
    assert train(model, TASK, config).train_loss == a.train_loss


def test_evaluation_counts_the_answer_only_and_keeps_the_mode() -> None:
    """evaluate's loss is the mean over the answer tokens (not the prompt's ignored positions),
    per_example_accuracy's token fraction too, and both leave a training model training."""
    model = _model()
    inputs, targets = TASK.eval_data("test")
    p = TASK.prompt_len
    with torch.no_grad():
        logits = model.eval()(inputs)[:, p:]  # (M, A): the positions that predict the answer
    answer = targets[:, p:]
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), answer.flatten())
    assert evaluate(model.train(), TASK)["loss"] == pytest.approx(float(loss), rel=1e-5)
    assert model.training
    exact, tokens = per_example_accuracy(model, TASK)
    assert model.training
    right = logits.argmax(-1) == answer  # (M, A)
    assert torch.equal(exact, right.all(1))
    torch.testing.assert_close(tokens, right.float().mean(1))


def test_training_on_text_lowers_the_held_out_loss() -> None:
    ds = TextDataset(grammar_corpus(300), seq_len=16)
    model = _model(vocab_size=ds.vocab_size, context_length=16)
    before = evaluate(model, ds)["loss"]
    assert before == pytest.approx(math.log(ds.vocab_size), rel=0.1)  # a near-uniform guess
    history = train(model, ds, _config(steps=40, lr=1e-2, eval_every=40))
    assert "test_exact_match" not in history.eval_metrics
    assert history.last("test_loss") < 0.7 * before


def test_training_on_any_tokenizers_ids_with_a_held_out_sequence() -> None:
    from attnbook.data import TokenDataset

    # a held-out sequence of its own: the same rule (id t + 1 follows id t, mod 11), new starts
    ds = TokenDataset(torch.arange(2000) % 11, (torch.arange(300) + 5) % 11, 16, vocab_size=11)
    model = _model(vocab_size=11, context_length=16)
    before = evaluate(model, ds)["loss"]
    history = train(model, ds, _config(steps=40, lr=1e-2, eval_every=40))
    assert history.last("test_loss") < 0.3 * before  # the rule carries over to held-out ids


def test_train_rejects_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="context_length"):
        train(_model(context_length=7), TASK, _config())
    with pytest.raises(ValueError, match="TrainConfig"):
        train(_model(), TASK, {"steps": 3})
    with pytest.raises(ValueError, match="data"):
        train(_model(), TASK.train, _config())


def test_train_matches_data_and_model_once_not_at_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The training steps skip GPT's per-call range check of the ids, which on a GPU waits for it.

    Before, every step called ``model(idx)``: an extra read-back to the CPU per
    step. The ids were checked when the task was built, and ``train`` checks the
    task against the model before its first step.
    """
    seen = []
    forward = GPT.forward

    def spy(self: GPT, idx: torch.Tensor, **kwargs: object) -> torch.Tensor:
        seen.append((self.training, kwargs.get("validate", True)))
        return forward(self, idx, **kwargs)

    monkeypatch.setattr(GPT, "forward", spy)
    train(_model(), TASK, _config(steps=3, warmup_steps=1, eval_every=3))
    assert [validate for training, validate in seen if training] == [False] * 3
    with pytest.raises(ValueError, match="vocab_size"):  # what the skipped check would catch
        train(_model(vocab_size=TASK.vocab_size - 1), TASK, _config())


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_train_checks_a_translation_task_once_too(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The encoder-decoders' steps skip the per-call checks of src, tgt and the masks as well."""
    task = translation_task(n_train=100, n_test=20, n_test_long=10, seed=0)
    if kind == "transformer":
        cls, config = (
            EncoderDecoder,
            EncoderDecoderConfig(
                task.src_vocab_size, task.tgt_vocab_size, task.input_len, 16, 2, 1, 1
            ),
        )
    else:
        cls, config = (
            RNNEncoderDecoder,
            RNNConfig(task.src_vocab_size, task.tgt_vocab_size, task.input_len, "dot", 8, 16),
        )
    seen = []
    forward = cls.forward

    def spy(self: nn.Module, *args: torch.Tensor, **kwargs: object) -> torch.Tensor:
        seen.append((self.training, kwargs.get("validate", True)))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(cls, "forward", spy)
    set_seed(0)
    model = cls(config)
    history = train(model, task, _config(steps=3, warmup_steps=1, eval_every=3))
    assert [validate for training, validate in seen if training] == [False] * 3
    assert all(math.isfinite(loss) for loss in history.train_loss)
    (src, tgt, src_mask), _ = task.eval_data("test")
    model.eval()
    with torch.no_grad():  # unchecked, the same logits; no mask means every word is real
        assert torch.equal(model(src, tgt, src_mask, validate=False), model(src, tgt, src_mask))
        assert torch.equal(model(src, tgt, validate=False), model(src, tgt))


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "mps"])
def test_train_refuses_a_device_this_machine_lacks(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    config = _config(
        steps=1, warmup_steps=0, device=device
    )  # a valid name: the config may be used elsewhere
    with pytest.raises(ValueError, match=f"device={device!r} .* not available"):
        train(_model(), TASK, config)


@pytest.mark.parametrize("evaluation", [exact_match, evaluate, per_example_accuracy])
@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True, None])
def test_evaluation_bad_batch_size(evaluation: object, batch_size: object) -> None:
    with pytest.raises(ValueError, match=f"batch_size must be an int >= 1, got {batch_size!r}"):
        evaluation(_model(), TASK, batch_size=batch_size)


@pytest.mark.parametrize("evaluation", [exact_match, per_example_accuracy])
@pytest.mark.parametrize("task", ["reverse", None, TextDataset("abcd" * 20, seq_len=4)])
def test_exact_match_names_its_task_argument(evaluation: object, task: object) -> None:
    """Before, a str or None was refused as 'data must be a SequenceTask, a TokenDataset
    ...', naming evaluate's argument, which exact_match does not have."""
    with pytest.raises(ValueError, match=r"^task must be a SequenceTask or a TranslationTask"):
        evaluation(_model(), task)


@pytest.mark.parametrize("evaluation", [exact_match, evaluate, per_example_accuracy])
def test_evaluation_refuses_a_model_with_nan_logits(evaluation: object) -> None:
    """Before, argmax took the NaN logits for the largest and the scores counted arbitrary
    tokens (exact_match 0.0, some rows of per_example_accuracy right), and the loss was NaN."""
    model = _model()
    with torch.no_grad():
        model.norm.weight[0] = math.nan  # the final norm: every logit is NaN
    with pytest.raises(ValueError, match=r"model gave NaN logits on the 'test' split"):
        evaluation(model, TASK)


def test_exact_match_is_greedy_decoding() -> None:
    model = _model()
    train(
        model, TASK, _config(steps=50, batch_size=64)
    )  # partly trained: some answers right, some wrong
    em = exact_match(model, TASK)
    assert 0.05 < em < 0.95
    p = TASK.prompt_len + 1
    generated = model.generate(TASK.test[:, :p], TASK.answer_len, temperature=0)
    greedy = (generated[:, p:] == TASK.test[:, p:]).all(dim=1).float().mean().item()
    assert em == pytest.approx(greedy)


def test_recipes_fit() -> None:
    for scale in ("cpu", "gpu"):
        task, model_config, config = reverse_recipe(scale)
        assert model_config.context_length == task.input_len
        assert model_config.vocab_size == task.vocab_size
        assert isinstance(config, TrainConfig)
    with pytest.raises(ValueError, match="scale"):
        reverse_recipe("tpu")


# ------------------------------------------------------------------------------- generate


def test_generate_greedy_is_the_argmax_loop() -> None:
    model = _model(context_length=8)
    model.train()
    prompt = TASK.test[:3, :5]
    out = model.generate(prompt, 6, temperature=0)  # 11 tokens: past the context of 8
    assert out.shape == (3, 11)
    assert torch.equal(out[:, :5], prompt)
    assert model.training  # training mode restored
    model.eval()
    expected = prompt
    for _ in range(6):
        logits = model(expected[:, -8:])[:, -1]  # crop to the context
        expected = torch.cat([expected, logits.argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, expected)
    assert torch.equal(model.generate(prompt, 6, temperature=1.0, top_k=1), expected)


def test_generate_turns_dropout_off_while_it_samples() -> None:
    """generate runs in eval() mode: a model left in training mode, with dropout, generates
    the greedy tokens it generates in eval() mode (and is in training mode again after)."""
    model = _model(dropout=0.5)
    prompt = TASK.test[:4, :5]
    expected = model.eval().generate(prompt, 3, temperature=0)
    for use_cache in (True, False):
        out = model.train().generate(prompt, 3, temperature=0, use_cache=use_cache)
        assert torch.equal(out, expected)
        assert model.training


def test_generate_samples_reproducibly_from_the_top_k() -> None:
    model = _model(vocab_size=7)
    prompt = torch.zeros(200, 1, dtype=torch.int64)
    a = model.generate(prompt, 1, temperature=5.0, generator=torch.Generator().manual_seed(0))
    b = model.generate(prompt, 1, temperature=5.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    assert len(set(a[:, 1].tolist())) > 2  # hot sampling explores
    top2 = set(model(prompt[:1]).topk(2, dim=-1).indices[0, -1].tolist())
    c = model.generate(prompt, 1, temperature=5.0, top_k=2)
    assert set(c[:, 1].tolist()) == top2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": 2.0}, "max_new_tokens"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 8}, "top_k"),
        ({"generator": 3}, "generator"),
    ],
)
def test_generate_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"max_new_tokens": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        _model().generate(torch.zeros(1, 2, dtype=torch.int64), **args)


def test_generate_bad_prompt() -> None:
    model = _model()
    with pytest.raises(ValueError, match="int64"):
        model.generate(torch.zeros(1, 2), 2)
    with pytest.raises(ValueError, match="vocab_size"):
        model.generate(torch.full((1, 2), 7), 2)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model.generate(torch.zeros(2, dtype=torch.int64), 2)


def test_dataclass_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _config().steps = 3  # type: ignore[misc]
