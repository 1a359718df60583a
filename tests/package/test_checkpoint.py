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


def test_load_checkpoint_refuses_a_broken_checkpoint(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "ckpt", _model())
    config_text = (path / "config.json").read_text()
    document = json.loads(config_text)
    del document["gpt_config"]["d_model"]
    (path / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"gpt_config.*missing.*\['d_model'\]"):
        load_checkpoint(path)
    (path / "config.json").write_text(config_text)
    weights = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"model\.safetensors.*not a valid safetensors file"):
        load_checkpoint(path)
    (path / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # cut short
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        load_checkpoint(path)
    for bad in (None, 3):
        with pytest.raises(
            ValueError, match=f"path must be a str or a pathlib.Path.*, got {type(bad).__name__}"
        ):
            load_checkpoint(bad)
        with pytest.raises(ValueError, match="path must be a str"):
            read_checkpoint_extra(bad)


def test_read_checkpoint_extra_returns_a_dict_or_refuses(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "ckpt", _model())
    assert read_checkpoint_extra(path) == {}
    document = json.loads((path / "config.json").read_text())
    document["extra"] = [1, 2]
    (path / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"'extra' must be a JSON object .*, got list"):
        read_checkpoint_extra(path)


def test_load_checkpoint_refuses_weights_holding_nan(tmp_path: Path) -> None:
    """A safetensors file that reads, but whose weights are NaN: a model that writes NaN."""
    from safetensors.torch import load_file, save_file

    path = save_checkpoint(tmp_path / "ckpt", _model())
    state = load_file(str(path / "model.safetensors"))
    name = sorted(state)[0]
    state[name].view(-1)[-1] = float("nan")
    save_file(state, str(path / "model.safetensors"))
    with pytest.raises(ValueError, match=f"hold NaN or inf .*{name}"):
        load_checkpoint(path)


def test_save_refuses_nan_weights_and_load_refuses_unknown_config_fields(tmp_path: Path) -> None:
    """A model whose weights hold NaN is not saved (nothing is written); a config.json with a
    field GPTConfig does not have is refused with a ValueError that names it."""
    model = _model()
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or inf.*not written"):
        save_checkpoint(tmp_path / "nan", model)
    assert not (tmp_path / "nan").exists()
    path = save_checkpoint(tmp_path / "ckpt", _model())
    document = json.loads((path / "config.json").read_text())
    document["gpt_config"]["n_expert"] = 4
    (path / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"unknown GPTConfig fields \['n_expert'\]"):
        load_checkpoint(path)


def test_load_checkpoint_bad_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_checkpoint(tmp_path / "ckpt", _model())
    assert next(load_checkpoint(path, device=torch.device("cpu")).parameters()).device.type == "cpu"
    for bad in ("gpu", "", 0):
        with pytest.raises(ValueError, match=f"device must be .*, got {bad!r}"):
            load_checkpoint(path, device=bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    for device in ("cuda", torch.device("cuda", 0), "mps"):
        with pytest.raises(ValueError, match=r"device=.* not available"):
            load_checkpoint(path, device=device)


def test_save_checkpoint_refuses_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extra must be JSON-serialisable"):
        save_checkpoint(tmp_path / "ckpt", _model(), extra={"x": object()})
    assert not (tmp_path / "ckpt").exists()  # no empty folder left behind
    for changed in ({1: "a"}, {"shape": (2, 3)}, {"loss": float("nan")}):  # would load back
        with pytest.raises(ValueError, match="extra must be JSON-serialisable"):  # otherwise
            save_checkpoint(tmp_path / "ckpt", _model(), extra=changed)
    assert not (tmp_path / "ckpt").exists()
    circular: dict = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="extra must be JSON-serialisable"):
        save_checkpoint(tmp_path / "ckpt", _model(), extra=circular)
    assert not (tmp_path / "ckpt").exists()
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file", tmp_path / "file" / "ckpt"):
        with pytest.raises(ValueError, match=r"path must be a folder.* is a file"):
            save_checkpoint(path, _model())
    for bad in (None, 3):
        with pytest.raises(
            ValueError, match=f"path must be a str or a pathlib.Path.*, got {type(bad).__name__}"
        ):
            save_checkpoint(bad, _model())


def test_a_16_bit_checkpoint_loads_as_float32(tmp_path: Path) -> None:
    """As the docstring says: the weights are saved in their dtype and loaded upcast, losslessly."""
    model = _model().to(torch.bfloat16)
    loaded = load_checkpoint(save_checkpoint(tmp_path / "ckpt", model))
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.float())
