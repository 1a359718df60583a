"""Checkpoints (``attnbook.checkpoint``): a GPT saved to a folder comes back the same, or refuses.

A round trip keeps the config, the tied head and every output bit; a
config that does not fit the saved weights, or a missing file, is refused
with a ValueError that says what does not match.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import attnbook
from attnbook import GPT, GPTConfig, set_seed
from attnbook.checkpoint import load_checkpoint, read_checkpoint_extra, save_checkpoint
from attnbook.data import reverse_task
from attnbook.training import TrainConfig, train

TASK = reverse_task(length=4, n_symbols=6, n_train=800, n_test=200, seed=0)  # T = 8, V = 7


def _model(**overrides: object) -> GPT:
    fields = {"vocab_size": TASK.vocab_size, "context_length": TASK.input_len, "d_model": 32}
    set_seed(0)
    return GPT(GPTConfig(**(fields | {"n_heads": 2, "n_layers": 1} | overrides)))


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    model = _model(positional="rope")
    config = TrainConfig(
        steps=5, batch_size=32, warmup_steps=1, eval_every=5, device="cpu", progress=False
    )
    train(model, TASK, config)
    save_checkpoint(tmp_path / "ckpt", model, extra={"note": "hi"})
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.config == model.config
    assert not loaded.training
    assert loaded.lm_head.weight is loaded.tok_emb.weight  # still tied
    model.eval()
    torch.testing.assert_close(loaded(TASK.test[:, :-1]), model(TASK.test[:, :-1]), rtol=0, atol=0)
    assert read_checkpoint_extra(tmp_path / "ckpt") == {"note": "hi"}


def test_checkpoint_mismatch_is_refused(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "ckpt", _model())
    document = json.loads((path / "config.json").read_text())
    document["gpt_config"]["d_model"] = 16  # the weights are 32 wide
    (path / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="do not match"):
        load_checkpoint(path)
    document["gpt_config"]["d_model"] = 32
    document["gpt_config"]["n_layers"] = 2  # a block's weights are missing
    (path / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="missing"):
        load_checkpoint(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="missing"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="extra"):
        save_checkpoint(tmp_path / "other", _model(), extra=[1])


def test_the_package_re_exports_the_checkpoint_functions() -> None:
    assert attnbook.save_checkpoint is save_checkpoint
    assert attnbook.load_checkpoint is load_checkpoint
