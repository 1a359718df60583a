"""Input checks shared by the package's public functions.

Every public function validates its arguments up front and raises a
``ValueError`` that names the argument, what it got and what it needs, instead
of failing three calls deeper or silently returning NaN from valid input.
Values are scanned for NaN and infinities only where they would otherwise
vanish or pick an arbitrary answer (softmax, lookups, cosine similarity,
sampling, attention statistics, checkpoints); the tensor operations of the hot
paths (scores, attention, RoPE, norms, the models) do not scan, which would
read every input back from the device, so a NaN or an infinity in their input
gives NaN in their output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

Array = np.ndarray | torch.Tensor
"""A NumPy array or a torch tensor: most functions accept either and return the same kind."""


def shape_str(x: Array) -> str:
    """Format a shape as ``(2, 3)`` for error messages."""
    return "(" + ", ".join(str(int(d)) for d in x.shape) + ")"


def as_float_array(x: object, name: str) -> Array:
    """Return ``x`` as a floating-point NumPy array or torch tensor.

    Lists and tuples become NumPy arrays. Integer and boolean inputs are
    rejected: the functions that call this compute ratios and exponentials,
    where silently truncated integers give wrong answers.
    """
    if isinstance(x, torch.Tensor):
        if not torch.is_floating_point(x):
            raise ValueError(
                f"{name} must be a floating-point tensor, got dtype {x.dtype}; "
                f"convert it first, e.g. {name}.float()"
            )
        return x
    if isinstance(x, np.ndarray):
        arr = x
    elif isinstance(x, (list, tuple, float, int, np.floating, np.integer)) and not isinstance(
        x, bool
    ):
        try:
            arr = np.asarray(x)
        except ValueError:  # NumPy's "setting an array element with a sequence", unnamed
            raise ValueError(
                f"{name} must be a NumPy array, a torch tensor or a list of numbers of one "
                f"rectangular shape, got a {type(x).__name__} whose rows have unlike lengths"
            ) from None
    else:
        raise ValueError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(
            f"{name} must hold floating-point numbers, got dtype {arr.dtype}; "
            f"convert it first, e.g. np.asarray({name}, dtype=float)"
        )
    return arr


def compute_dtype(x: Array) -> object:
    """The dtype to compute in: 16-bit (and 8-bit) floats are widened to float32.

    PyTorch's own softmax does the same; it keeps small constants (an ``eps`` of
    ``1e-8`` is 0 in float16) and sums of many terms from underflowing or
    overflowing. Cast the result back to the input's dtype.
    """
    if isinstance(x, torch.Tensor):
        return torch.float32 if torch.finfo(x.dtype).bits < 32 else x.dtype
    return np.float32 if x.dtype.itemsize < 4 else x.dtype


def check_finite(x: Array, name: str) -> None:
    """Raise if ``x`` holds NaN or infinite values."""
    bad = (
        bool((~torch.isfinite(x)).any())
        if isinstance(x, torch.Tensor)
        else bool((~np.isfinite(x)).any())
    )
    if bad:
        raise ValueError(f"{name} must be finite, but it contains NaN or infinite values")


def check_no_nan(x: Array, name: str) -> None:
    """Raise if ``x`` holds NaN values (infinities are allowed)."""
    bad = bool(torch.isnan(x).any()) if isinstance(x, torch.Tensor) else bool(np.isnan(x).any())
    if bad:
        raise ValueError(f"{name} contains NaN values")


def check_logits(logits: torch.Tensor, step: int) -> None:
    """Raise if one decoding step's logits hold NaN: ``argmax`` and ``topk`` take a NaN for
    the largest value, so greedy decoding and beam search would go on with arbitrary tokens."""
    if bool(torch.isnan(logits).any()):
        raise ValueError(
            f"model gave NaN logits at decoding step {step}: its weights or its input hold NaN "
            "(a checkpoint saved after the training diverged?)"
        )


def normalize_axis(axis: object, ndim: int, name: str = "axis") -> int:
    """Return ``axis`` as a non-negative index into a tensor of ``ndim`` dimensions."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {type(axis).__name__}")
    if ndim == 0:
        raise ValueError(
            f"{name}={axis} is invalid for a 0-dimensional input; pass at least a 1-D array"
        )
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{name} must be in [{-ndim}, {ndim - 1}] for a {ndim}-D input, got {axis}"
        )
    return int(axis) % ndim


def check_positive_number(value: object, name: str) -> float:
    """Return ``value`` as a float, raising unless it is finite and strictly positive."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a positive number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


def same_kind(a: Array, b: Array, name_a: str, name_b: str) -> None:
    """Raise unless ``a`` and ``b`` are both NumPy arrays or both torch tensors."""
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        raise ValueError(
            f"{name_a} and {name_b} must both be NumPy arrays or both torch tensors, "
            f"got {type(a).__name__} and {type(b).__name__}"
        )


def same_dtype(a: Array, b: Array, name_a: str, name_b: str) -> None:
    """Raise unless ``b`` has ``a``'s dtype, where both are torch tensors. NumPy promotes mixed
    dtypes; torch's matrix product fails with "expected m1 and m2 to have the same dtype", and
    chapters that mix NumPy and torch meet it: ``torch.from_numpy`` gives float64 and
    ``torch.randn`` float32."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype:
        raise ValueError(
            f"{name_b} must have the dtype of {name_a} ({a.dtype}), got {b.dtype}; convert it, "
            f"e.g. {name_b}.to({name_a}.dtype)"
        )


def as_float_tensor(x: object, name: str, needed: str) -> torch.Tensor:
    """Return ``x`` if it is a floating-point torch tensor, else raise.

    ``needed`` is the shape the caller wants, e.g. ``"(..., T, d_k)"``; it is
    quoted in the message so the learner sees what to pass instead.
    """
    if isinstance(x, np.ndarray):
        raise ValueError(
            f"{name} must be a torch tensor of shape {needed}, got a NumPy array of shape "
            f"{shape_str(x)}; this function expects torch tensors: "
            f"convert with torch.as_tensor({name})"
        )
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch tensor of shape {needed}, got {type(x).__name__}; "
            "this function expects torch tensors"
        )
    if not torch.is_floating_point(x):
        raise ValueError(
            f"{name} must be a floating-point tensor of shape {needed}, got dtype {x.dtype} "
            f"(shape {shape_str(x)}); convert it first, e.g. {name}.float()"
        )
    return x


def check_rank(x: object, name: str, ndim: int, needed: str) -> torch.Tensor:
    """Return ``x`` if it is a torch tensor with ``ndim`` axes, else raise, quoting ``needed``.

    ``needed`` is the shape the caller wants, e.g. ``"(B, T, D)"``.
    """
    if isinstance(x, torch.Tensor) and x.ndim == ndim:
        return x
    got = f"shape {shape_str(x)}" if isinstance(x, (torch.Tensor, np.ndarray)) else type(x).__name__
    kind = "a NumPy array of " if isinstance(x, np.ndarray) else ""
    raise ValueError(f"{name} must be a torch tensor of shape {needed}, got {kind}{got}")


def check_probability(value: object, name: str) -> float:
    """Return ``value`` as a float, raising unless ``0 <= value < 1``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number in [0, 1), got {type(value).__name__}")
    value = float(value)
    if not 0.0 <= value < 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be a number in [0, 1), got {value}")
    return value


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The NumPy broadcast of ``shapes``, or ``None`` if they do not broadcast.

    Plain Python on tuples: ``torch.broadcast_shapes`` costs tens of
    microseconds a call, which adds up on a hot path that validates every call.
    """
    ndim = max(len(shape) for shape in shapes)
    result = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, size in enumerate(shape):
            current = result[offset + i]
            if current == 1:
                result[offset + i] = size
            elif size not in (1, current):
                return None
    return tuple(result)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True if an array of ``shape`` broadcasts to exactly ``target`` (not to something bigger).

    Stricter than mutual broadcasting: a mask of shape ``(B, 1, 1, S)`` must
    not silently turn ``(B, T, S)`` scores into ``(B, B, T, S)``.
    """
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def check_batch_broadcast(a: Array, b: Array, name_a: str, name_b: str, core_dims: int = 2) -> None:
    """Raise unless the leading dimensions of ``a`` and ``b`` broadcast.

    The last ``core_dims`` dimensions are the ones a function works on, e.g.
    ``(T, d)`` of a score matrix's queries; the rest are batch dimensions.
    """
    try:
        np.broadcast_shapes(tuple(a.shape[:-core_dims]), tuple(b.shape[:-core_dims]))
    except ValueError:
        raise ValueError(
            f"the batch dimensions of {name_a} {shape_str(a)} and {name_b} {shape_str(b)} "
            "do not broadcast"
        ) from None


def check_int(
    value: object, name: str, *, minimum: int = 1, maximum: int | None = None, meaning: str = ""
) -> int:
    """Return ``value`` as an int, raising unless it is an integer in ``[minimum, maximum]``.

    Without ``maximum`` the only bound is ``>= minimum``. ``True`` and
    ``False`` are refused (they are ints to Python, never a size or a
    count). ``meaning`` is a few words on what the number counts or where
    its bound comes from, quoted in the message, e.g. ``"keys per block"``.
    """
    is_int = not isinstance(value, bool) and isinstance(value, (int, np.integer))
    if is_int and minimum <= int(value) and (maximum is None or int(value) <= maximum):
        return int(value)
    why = f" ({meaning})" if meaning else ""
    needed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    raise ValueError(f"{name} must be an int {needed}{why}, got {value!r}")


def check_number(
    value: object,
    name: str,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float, raising unless it lies in the interval from ``low`` to ``high``.

    The interval is closed unless ``low_open`` / ``high_open`` say otherwise;
    an infinite ``high`` is always open. The message writes the interval in
    the usual notation, e.g. ``lr must be a number in (0.0, inf), got -1``.
    """
    left, right = "(" if low_open else "[", ")" if high_open or high == math.inf else "]"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(
            f"{name} must be a number in {left}{low}, {high}{right} (an int or a float), "
            f"got {type(value).__name__} {value!r}"
        )
    value = float(value)
    if not (low < value if low_open else low <= value) or not (
        value < high if high_open or high == math.inf else value <= high
    ):
        raise ValueError(f"{name} must be a number in {left}{low}, {high}{right}, got {value!r}")
    return value


def plain_numbers(config: object) -> None:
    """Turn the NumPy scalars among a dataclass's fields into Python ints and floats.

    ``vocab_size = ids.max() + 1`` of a NumPy array is an ``np.int64``: kept as
    it is, it fails later far from its cause (JSON cannot write it into a
    checkpoint). Called first in each config's ``__post_init__``; NumPy
    booleans are left for :func:`check_bool` to refuse.
    """
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, np.integer):
            object.__setattr__(config, field.name, int(value))
        elif isinstance(value, np.floating):
            object.__setattr__(config, field.name, float(value))


def check_bool(value: object, name: str) -> bool:
    """Return ``value``, raising unless it is ``True`` or ``False`` (not 0/1, not None)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _listed(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def check_dtype(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype, owner: str = "module"
) -> None:
    """Raise unless every tensor of ``tensors`` (name -> tensor) has ``dtype``, the ``owner``'s
    (a module's or a block's weights): else torch fails inside a matmul or a norm with
    "mat1 and mat2 must have the same dtype"."""
    if all(t.dtype == dtype for t in tensors.values()):
        return
    names = list(tensors)
    got = _listed([str(t.dtype) for t in tensors.values()])
    inputs = f"the input ({names[0]}.to(dtype))" if len(names) == 1 else "the inputs (x.to(dtype))"
    raise ValueError(
        f"{_listed(names)} must have the {owner}'s dtype {dtype}, got {got}; convert {inputs} "
        f"or the {owner} ({owner}.to(dtype))"
    )


def check_where(device: object) -> torch.device | None:
    """The ``device=`` argument of a tensor builder (a mask, a positional table): ``None``
    (the CPU) and a CPU ``torch.device`` pass as they are (the hot paths hand over a tensor's
    own device); anything else is checked like :func:`check_device` with ``available=True``,
    so ``"cuda"`` or ``torch.device("cuda")`` on a machine without CUDA gets a clear
    ValueError, not torch's "Torch not compiled with CUDA enabled"."""
    if device is None or (isinstance(device, torch.device) and device.type == "cpu"):
        return device
    return check_device(device, "device", available=True, none_means="the CPU")


def check_device(
    value: object,
    name: str = "device",
    *,
    available: bool = False,
    none_means: str = "the fastest device there is",
    advice: str | None = None,
) -> torch.device:
    """Return ``value`` (a string such as ``"cuda:1"`` or a ``torch.device``) as a ``torch.device``.

    With ``available=True`` a CUDA or MPS device that this machine does not
    have is refused too (other device types are left to PyTorch); the message
    ends with ``advice``, by default: use ``'cpu'``, or ``None`` for ``none_means``.
    """
    advice = f"use 'cpu', or None for {none_means}" if advice is None else advice
    parsed = value if isinstance(value, torch.device) else None
    if isinstance(value, str):
        with contextlib.suppress(RuntimeError):  # an unknown name: refused below
            parsed = torch.device(value)
    if parsed is None:
        raise ValueError(
            f"{name} must be a device such as 'cpu', 'cuda', 'cuda:1' or 'mps', got {value!r}"
        )
    if not available:
        return parsed
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"{name}={value!r} asks for a CUDA GPU, but CUDA is not available on this machine "
                f"(torch.cuda.is_available() is False); {advice}"
            )
        if parsed.index is not None and parsed.index >= count:
            raise ValueError(
                f"{name}={value!r} asks for CUDA GPU {parsed.index}, but GPU {parsed.index} is not "
                f"available: this machine has {count} (cuda:0 to cuda:{count - 1})"
            )
    elif parsed.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(
                f"{name}={value!r} asks for Apple's MPS, but MPS is not available on this "
                f"machine (torch.backends.mps.is_available() is False); {advice}"
            )
    return parsed


def check_path(path: object, name: str = "path", needed: str = "") -> Path:
    """``path`` as a ``Path``, raising unless it is a str or an ``os.PathLike`` (e.g. a ``Path``).

    ``needed`` says what the path must name (e.g. ``"a checkpoint folder"``),
    quoted in the message.
    """
    if isinstance(path, (str, os.PathLike)):
        try:
            return Path(path)
        except TypeError:  # an os.PathLike that gives bytes
            pass
    what = f" ({needed})" if needed else ""
    raise ValueError(f"{name} must be a str or a pathlib.Path{what}, got {type(path).__name__}")


def check_mask(
    mask: object,
    scores_shape: tuple[int, ...],
    name: str = "mask",
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Validate a boolean or additive mask against scores of shape ``scores_shape``.

    Used by :func:`attnbook.apply_mask`, attention and multi-head attention.

    Args:
        mask: boolean (``True`` = may attend) or floating (additive, ``0`` or
            ``-inf``) tensor, broadcastable to ``scores_shape``. A floating mask of
            only 0s and 1s is refused: it is a "may attend" mask in the wrong dtype
            (``torch.tril(torch.ones(T, T))``), which as additive would block nothing.
        scores_shape: the shape ``(..., T, S)`` of the scores it will mask.
        name: the argument's name, for error messages.
        dtype: the scores' dtype, if known: an additive mask is cast to it, and
            a finite value too large for it (``7e4`` for float16) is refused,
            since it would turn into ``+inf`` there and the softmax into NaN. A
            finite value below its lowest number (``-1e9`` for float16) turns
            into ``-inf`` and blocks, which is what such a value is written for;
            a row of them is then fully masked (weights 0), where in float32 the
            same row would spread its weight evenly.

    Returns:
        ``mask``; an additive one in ``dtype`` when it is given.
    """
    scores_text = "(" + ", ".join(str(int(d)) for d in scores_shape) + ")"
    if not isinstance(mask, torch.Tensor):
        kind = "a NumPy array" if isinstance(mask, np.ndarray) else type(mask).__name__
        raise ValueError(
            f"{name} must be a torch tensor broadcastable to the scores' shape (..., T, S) = "
            f"{scores_text}, got {kind}; this function expects torch tensors"
        )
    if mask.dtype != torch.bool and not torch.is_floating_point(mask):
        raise ValueError(
            f"{name} must be boolean (True = may attend) or floating-point (additive: 0 keeps, "
            f"-inf blocks), got dtype {mask.dtype} (shape {shape_str(mask)}); "
            f"for a 0/1 tensor meaning 'may attend' use {name}.bool()"
        )
    if not broadcasts_to(tuple(mask.shape), tuple(scores_shape)):
        raise ValueError(
            f"{name} of shape {shape_str(mask)} does not broadcast to the scores' shape "
            f"(..., T, S) = {scores_text}; each of its dimensions, aligned from the right, "
            "must be 1 or equal the scores' (e.g. (T, S), (B, 1, S) or (B, 1, 1, S) for (B, H, T, S))"
        )
    if mask.dtype != torch.bool and not bool((mask < math.inf).all()):  # one pass: NaN, +inf
        raise ValueError(
            f"additive {name} must hold finite numbers or -inf, but it contains NaN or +inf"
        )
    if mask.dtype != torch.bool and bool(((mask == 0) | (mask == 1)).all() & (mask == 1).any()):
        # torch.tril(torch.ones(T, T)) meant as "may attend": read as additive, it adds 1 to the
        # allowed scores and blocks nothing
        raise ValueError(
            f"{name} holds only 0s and 1s but is floating-point ({mask.dtype}, shape "
            f"{shape_str(mask)}), so it would be read as additive and block nothing; for a "
            f"0/1 mask meaning 'may attend' use {name}.bool() (an additive mask holds 0 and -inf)"
        )
    if mask.dtype != torch.bool and dtype is not None and mask.dtype != dtype:
        mask = mask.to(dtype)
        if not bool((mask < math.inf).all()):
            raise ValueError(
                f"additive {name} holds values above the largest {dtype} number "
                f"({torch.finfo(dtype).max:.4g}), which become +inf in the scores' dtype; "
                "block with -inf, and keep a bias within that range"
            )
    return mask


def check_token_id_list(
    ids: object, name: str, vocab_size: int, needed: str = "(T,)", meaning: str = ""
) -> list[int]:
    """``ids`` as a list of token ids, checked: each an int in ``[0, vocab_size)``.

    Takes a 1-D integer tensor or NumPy array, or a sequence of ints (NumPy
    ints included); bools are refused (``True`` is not the id 1), as are
    floats. Used by the tokenizers' ``decode`` and ``TranslationTask.decode``;
    ``meaning`` says whose ids they are, quoted in the message.
    """
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        if isinstance(ids, torch.Tensor):
            integer = not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
        else:
            integer = np.issubdtype(ids.dtype, np.integer)
        if ids.ndim != 1 or not integer:
            raise ValueError(
                f"{name} must be a 1-D integer tensor or array of token ids {needed}, "
                f"got dtype {ids.dtype} and shape {tuple(ids.shape)}"
            )
        ids = ids.tolist()
    elif isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise ValueError(
            f"{name} must be a sequence of int token ids or a 1-D integer tensor or array "
            f"{needed}, got {type(ids).__name__}"
        )
    else:
        ids = list(ids)
    bad = [
        i
        for i in ids
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < vocab_size
    ]
    if bad:
        raise ValueError(f"{name} must be ints in [0, {vocab_size}){meaning}, got {bad[:5]!r}")
    return ids


def check_token_ids(
    idx: object, name: str, vocab_size: int, context_length: int | None
) -> torch.Tensor:
    """The boundary check of token ids: ``(B, T)`` int64 in ``[0, V)``, ``1 <= T <= T_max``.

    ``context_length=None``: no ``T_max`` (a dataset's rows, not a model's input).
    """
    needed = "(B, T)"
    if not isinstance(idx, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch tensor of token ids with shape {needed} and dtype "
            f"torch.int64, got {type(idx).__name__}"
        )
    if idx.dtype != torch.int64:
        raise ValueError(
            f"{name} must hold token ids of dtype torch.int64 (torch.long), got {idx.dtype}; "
            f"convert with {name}.long()"
        )
    if idx.ndim != 2:
        raise ValueError(
            f"{name} must have shape {needed} (a batch of sequences), got {shape_str(idx)}; "
            f"for one sequence use {name}[None]"
        )
    if context_length is None and idx.shape[1] < 1:
        raise ValueError(f"{name} must have shape {needed} with T >= 1, got {shape_str(idx)}")
    if context_length is not None and not 1 <= idx.shape[1] <= context_length:
        raise ValueError(
            f"{name} must have shape {needed} with 1 <= T <= context_length = {context_length}, "
            f"got {shape_str(idx)}"
        )
    # Under torch.compile the range check would break the graph (it reads values back to
    # Python); the compiled model (attnbook.training's compile=True) skips it.
    if idx.numel() and not getattr(torch.compiler, "is_compiling", lambda: False)():
        low, high = torch.stack(torch.aminmax(idx)).tolist()  # one read-back (a GPU waits once)
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{name} must hold token ids in [0, vocab_size) = [0, {vocab_size}), got ids "
                f"from {low} to {high}"
            )
    return idx


def is_prefix(mask: torch.Tensor, least: int = 1) -> bool:
    """Whether each row of a boolean ``(B, L)`` mask is words first, then padding only.

    That is, ``True`` on a prefix of at least ``least`` entries and ``False``
    after it.
    """
    lengths = mask.sum(1, keepdim=True)  # (B, 1)
    prefix = torch.arange(mask.shape[1], device=mask.device) < lengths  # (B, L)
    return bool(((mask == prefix).all(1) & (lengths[:, 0] >= least)).all())  # one read-back


def check_left_pad(left_pad: object, idx: torch.Tensor, name: str = "left_pad") -> torch.Tensor:
    """The boundary check of a left-padded batch's padding counts, ``(B,)`` int64 in ``[0, T - 1]``.

    ``left_pad[b]`` is the number of padding tokens at the start of row ``b``
    of ``idx`` ``(B, T)`` (checked already); every row keeps at least one
    real token, and the counts sit on ``idx``'s device.
    """
    needed = f"({idx.shape[0]},), one count per row of idx"
    if not isinstance(left_pad, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch tensor of shape {needed}, dtype torch.int64, or None, "
            f"got {type(left_pad).__name__}"
        )
    if left_pad.dtype != torch.int64:
        raise ValueError(f"{name} must have dtype torch.int64 (torch.long), got {left_pad.dtype}")
    if left_pad.shape != (idx.shape[0],):
        raise ValueError(f"{name} must have shape {needed}, got {shape_str(left_pad)}")
    if left_pad.device != idx.device:
        raise ValueError(f"{name} must be on idx's device {idx.device}, got {left_pad.device}")
    if left_pad.numel():
        low, high = (int(v) for v in torch.aminmax(left_pad))
        if low < 0 or high >= idx.shape[1]:
            raise ValueError(
                f"{name} must hold counts in [0, T - 1] = [0, {idx.shape[1] - 1}] (every row keeps "
                f"at least one real token), got counts from {low} to {high}"
            )
    return left_pad
