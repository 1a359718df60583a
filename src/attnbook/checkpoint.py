"""Checkpoints: a trained GPT saved to a folder and rebuilt from it.

Introduced in chapter 10 (``chapters/10_training.ipynb``). A checkpoint is a
folder with two files: ``model.safetensors`` holds the weights (tensors
only, no pickled code, so loading one runs nothing) and ``config.json``
holds the :class:`~attnbook.GPTConfig` that rebuilds the architecture, with
any JSON-serialisable ``extra`` the caller wants kept beside it (the
tokenizer's characters, the training config).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from pathlib import Path

import torch
from torch import nn

from attnbook._validation import check_device, check_path
from attnbook.model import GPT, GPTConfig

__all__ = ["load_checkpoint", "read_checkpoint_extra", "save_checkpoint"]

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def _unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without the second name of a tied tensor (safetensors stores each once)."""
    seen, state = set(), {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        state[name] = tensor.detach().cpu().contiguous()
    return state


def save_checkpoint(path: str | Path, model: GPT, extra: dict | None = None) -> Path:
    """Save a GPT to the folder ``path``: ``model.safetensors`` and ``config.json``.

    safetensors stores tensors only (no pickled code, so loading runs
    nothing); the JSON file holds the :class:`~attnbook.GPTConfig` that
    rebuilds the architecture, and ``extra`` (anything JSON can hold, e.g. the
    tokenizer's characters or the training config).

    Args:
        path: a folder (created if missing).
        model: the :class:`~attnbook.GPT`.
        extra: optional JSON-serialisable dict, saved under ``"extra"``.

    Returns:
        The folder, as a ``Path``.
    """
    from safetensors.torch import save_file

    if not isinstance(model, GPT):
        raise ValueError(f"model must be an attnbook.GPT, got {type(model).__name__}")
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"extra must be None or a dict, got {type(extra).__name__}")
    path = check_path(path, "path", "a folder, created if missing")
    state = _unique_state(model)
    broken = _not_finite(state)
    if broken:  # load_checkpoint would refuse it: say so now, not when it is read back
        raise ValueError(
            f"model's weights hold NaN or inf ({broken[:5]}), saved from a run whose loss "
            "diverged? load_checkpoint refuses such weights, so they are not written"
        )
    config = model.config.to_dict()  # leaves out n_kv_heads and later fields at their defaults,
    # so checkpoints of plain models read as they did before those fields existed
    document = {"gpt_config": config, "extra": extra or {}}
    try:  # before anything is written: a failed save leaves no empty folder behind
        text = json.dumps(document, indent=2, sort_keys=True, allow_nan=False)
        if json.loads(text)["extra"] != document["extra"]:  # int keys, tuples: changed
            raise ValueError("it would load back changed (int keys as str, tuples as lists)")
    except (TypeError, ValueError) as error:
        raise ValueError(
            "extra must be JSON-serialisable (dicts with str keys, lists, str, finite numbers, "
            f"bools, None): {error}"
        ) from None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        file = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        raise ValueError(
            f"path must be a folder (created if missing), but {str(file)!r} is a file"
        ) from None
    save_file(state, str(path / WEIGHTS_FILE))
    (path / CONFIG_FILE).write_text(text + "\n")
    return path


def _not_finite(state: dict[str, torch.Tensor]) -> list[str]:
    """The names of the tensors of ``state`` that hold NaN or inf, sorted."""
    return sorted(k for k, v in state.items() if not bool(torch.isfinite(v).all()))


def read_checkpoint_extra(path: str | Path) -> dict:
    """The ``extra`` dict saved with a checkpoint (``{}`` if none).

    Raises:
        ValueError: if a file is missing, or ``config.json`` is invalid (its
            ``"extra"``, if there, must be a JSON object).
    """
    path = check_path(path, "path", "a checkpoint folder")
    extra = _read_document(path).get("extra", {})
    if not isinstance(extra, dict):
        raise ValueError(
            f"{CONFIG_FILE} in {str(path)!r}: 'extra' must be a JSON object (a dict), "
            f"got {type(extra).__name__}"
        )
    return extra


def _read_document(path: Path) -> dict:
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (path / name).is_file():
            raise ValueError(
                f"path must be a checkpoint folder holding {WEIGHTS_FILE} and {CONFIG_FILE} "
                f"(written by save_checkpoint), but {str(path / name)!r} is missing"
            )
    try:
        document = json.loads((path / CONFIG_FILE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{CONFIG_FILE} in {str(path)!r} is not valid JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("gpt_config"), dict):
        raise ValueError(f"{CONFIG_FILE} in {str(path)!r} has no 'gpt_config' object")
    return document


def load_checkpoint(path: str | Path, device: str | torch.device | None = None) -> GPT:
    """Rebuild a GPT saved by :func:`save_checkpoint`, weights and all, in ``eval()`` mode.

    The model's parameters are float32 whatever dtype was saved: a
    checkpoint of a bfloat16 or float16 model (``save_checkpoint`` writes the
    tensors in their dtype) loads upcast to float32, which keeps every value
    but takes twice the memory; ``.to(torch.bfloat16)`` gives the saved dtype back.

    Args:
        path: the checkpoint folder.
        device: where to put the model (default: the CPU), e.g. ``"cuda"``;
            it must be available on this machine.

    Returns:
        The :class:`~attnbook.GPT`, float32, in ``eval()`` mode.

    Raises:
        ValueError: if ``path`` or ``device`` is invalid, a file is missing or
            corrupt, the config is invalid, or the saved weights do not match the
            config (missing, unexpected or differently shaped tensors, or NaN or inf).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = check_path(path, "path", "a checkpoint folder")
    device = check_device(
        "cpu" if device is None else device, "device", available=True, none_means="the CPU"
    )
    raw = _read_document(path)["gpt_config"]
    known = {f.name for f in fields(GPTConfig)}
    if set(raw) - known:
        raise ValueError(f"{CONFIG_FILE}: unknown GPTConfig fields {sorted(set(raw) - known)}")
    required = [
        f.name
        for f in fields(GPTConfig)
        if f.default is MISSING and f.default_factory is MISSING and f.name not in raw
    ]
    if required:
        raise ValueError(
            f"{CONFIG_FILE} in {str(path)!r}: 'gpt_config' is missing the required GPTConfig "
            f"fields {required}"
        )
    config = GPTConfig(**raw)  # raises ValueError on bad values
    model = GPT(config)
    expected = {k: tuple(v.shape) for k, v in _unique_state(model).items()}
    try:
        state = load_file(str(path / WEIGHTS_FILE))
    except SafetensorError as error:
        raise ValueError(
            f"{str(path / WEIGHTS_FILE)!r} is not a valid safetensors file (written by "
            f"save_checkpoint): {error}"
        ) from None
    found = {k: tuple(v.shape) for k, v in state.items()}
    if expected != found:
        missing = sorted(expected.keys() - found.keys())
        unexpected = sorted(found.keys() - expected.keys())
        shapes = [
            f"{k}: config needs {expected[k]}, file has {found[k]}"
            for k in sorted(expected.keys() & found.keys())
            if expected[k] != found[k]
        ]
        raise ValueError(
            f"the weights in {str(path / WEIGHTS_FILE)!r} do not match the config in "
            f"{CONFIG_FILE}: missing {missing[:5]}, unexpected {unexpected[:5]}, "
            f"different shapes {shapes[:5]}"
        )
    broken = _not_finite(state)
    if broken:
        raise ValueError(
            f"the weights in {str(path / WEIGHTS_FILE)!r} hold NaN or inf ({broken[:5]}): the "
            "file is damaged, or was saved from a run whose loss diverged"
        )
    model.load_state_dict(state, strict=False)  # the tied head's second name is not in the file
    return model.to(device).eval()
