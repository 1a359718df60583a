"""Reproducibility, hardware and measuring helpers.

Introduced in the introduction (``intro.md``) and used from chapter 1 on
(``set_seed``, ``get_device``, ``set_print_options``). Chapter 14
(``chapters/14_efficient_attention.ipynb``) and the scripts in
``benchmarks/`` measure with the same helpers: :func:`seconds_per_call` for
time, :class:`OpRecorder` and :func:`largest_allocation` for the operations a
call runs and the largest tensor it makes.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnbook._validation import check_device, check_int

__all__ = [
    "OpRecorder",
    "get_device",
    "largest_allocation",
    "seconds_per_call",
    "set_print_options",
    "set_seed",
    "synchronize",
]

DEVICE_VARIABLE = "ATTNBOOK_DEVICE"  # overrides get_device()'s choice, e.g. "cpu"


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's random number generators.

    Every stochastic demo in the book calls this first, so that re-running a
    notebook reproduces the stored outputs exactly (nbval checks that it does).

    Args:
        seed: a non-negative integer below 2**32.

    Raises:
        ValueError: if ``seed`` is not an integer in ``[0, 2**32)``.
    """
    seed = check_int(
        seed, "seed", minimum=0, maximum=2**32 - 1, meaning="below 2**32, as NumPy needs"
    )
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (learners and published examples use it)
    torch.manual_seed(seed)  # also seeds every CUDA device


def get_device() -> torch.device:
    """Return the fastest available device: CUDA, then Apple's MPS, then the CPU.

    Chapters never hard-code ``.cuda()``: they move tensors to ``get_device()``
    so the same notebook runs on a laptop, on Colab, or on a GPU server.

    The environment variable ``ATTNBOOK_DEVICE`` overrides the choice, e.g.
    ``ATTNBOOK_DEVICE=cpu`` (unset or empty: the fastest device). The book's
    tools run every notebook with ``ATTNBOOK_DEVICE=cpu``, where the stored
    outputs were made: on a GPU a tensor prints with ``device='cuda:0'`` and
    draws other random numbers, so nbval would fail on any machine with a GPU.

    Returns:
        A ``torch.device``.

    Raises:
        ValueError: if ``ATTNBOOK_DEVICE`` names no device, or one this machine
            does not have.
    """
    chosen = os.environ.get(DEVICE_VARIABLE, "")
    if chosen:
        return check_device(
            chosen,
            DEVICE_VARIABLE,
            available=True,
            advice="set it to 'cpu', or unset it for the fastest device there is",
        )
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def set_print_options(precision: int = 4) -> None:
    """Print NumPy arrays and torch tensors rounded to ``precision`` decimals.

    Rounded printing keeps the stored notebook outputs independent of the last
    bits of a particular BLAS build, so they re-run identically elsewhere.

    Args:
        precision: number of decimals, between 1 and 16.

    Raises:
        ValueError: if ``precision`` is not an int in ``[1, 16]``.
    """
    check_int(precision, "precision", maximum=16, meaning="decimals")
    np.set_printoptions(precision=precision, suppress=True)
    torch.set_printoptions(precision=precision, sci_mode=False)


# --------------------------------------------------------------------------- measuring


def synchronize(device: str | torch.device) -> None:
    """Wait until ``device`` has finished its queued work (a no-op on the CPU).

    A GPU runs operations asynchronously: without this, a timer stopped right
    after a call measures only how long it took to *queue* the work.

    Args:
        device: the device whose work to wait for, e.g. ``get_device()``.

    Raises:
        ValueError: for a value that is not a device, or a GPU this machine does not have.
    """
    device = check_device(device, "device", available=True, advice="use 'cpu'")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def seconds_per_call(
    fn: Callable[[], object], repeats: int = 3, device: str | torch.device | None = None
) -> float:
    """The fastest of ``repeats`` timed calls of ``fn()``, after one untimed warm-up call.

    The minimum, not the mean: other programs on the machine only ever make a
    call slower, so the fastest call is the least disturbed estimate of what
    the call itself costs. Each call is bracketed by :func:`synchronize`, so
    a GPU's queued work is counted.

    Args:
        fn: a function of no arguments (wrap a call in a ``lambda``).
        repeats: how many timed calls, at least 1.
        device: the device ``fn`` computes on (default: :func:`get_device`).

    Returns:
        Seconds, as a float.

    Raises:
        ValueError: if ``fn`` is not callable, ``repeats`` is not an int >= 1, or
            ``device`` is not a device this machine has.
    """
    if not callable(fn):
        raise ValueError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    check_int(repeats, "repeats")
    device = get_device() if device is None else check_device(device, "device", available=True)
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def _tensors_in(values: object) -> Iterator[torch.Tensor]:
    """Every tensor in ``values``: a tensor, or tuples, lists and dicts of them, nested."""
    if isinstance(values, torch.Tensor):
        yield values
    elif isinstance(values, (tuple, list)):
        for value in values:
            yield from _tensors_in(value)
    elif isinstance(values, dict):
        yield from _tensors_in(list(values.values()))


# The tensors that hold a sparse tensor's numbers, by layout (a strided tensor holds its own).
_SPARSE_PARTS = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    """The memory ``t`` occupies: its storage, or a sparse tensor's index and value storages."""
    if t.layout == torch.strided:
        return [t.untyped_storage()]
    parts = _SPARSE_PARTS.get(t.layout, ())
    return [storage for part in parts for storage in _storages(getattr(t, part)())]


class OpRecorder(TorchDispatchMode):
    """Record every ATen operation run inside ``with OpRecorder() as r:``, and the largest result.

    PyTorch's dispatcher shows a ``TorchDispatchMode`` each operation that runs
    underneath a call, with its inputs and its results. The recorder keeps

    - ``ops``: the set of the operations' names (``"bmm"``, ``"_softmax"``, ...);
    - ``calls``: the same names as a list, one per call in the order they ran
      (a name repeats if its operation ran more than once): which kernel ran
      first, or what ran before it;
    - ``largest``: the bytes of the largest storage one operation allocates
      for its result. A result that is a view of, or the same memory as, one
      of the operation's inputs allocates nothing and is not counted. A
      sparse result counts the new storages of its indices and values together.

    What one fused operation allocates internally (a kernel's work buffers)
    is invisible here: only the tensors it returns are seen.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()  # names of the ATen operations that ran
        self.calls: list[str] = []  # the same names, in the order they ran, repeats included
        self.largest = 0  # bytes of the largest newly allocated result

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        """Run ``func`` and record its name and the size of each new result."""
        out = func(*args, **(kwargs or {}))
        name = str(func).removeprefix("aten.").removesuffix(".default")
        self.ops.add(name)
        self.calls.append(name)
        # an input's memory, and a buffer passed as out=, is not a new allocation
        inputs = _tensors_in((args, kwargs or {}))
        given = {storage.data_ptr() for t in inputs for storage in _storages(t)}
        for t in _tensors_in(out):
            new = [s for s in _storages(t) if s.data_ptr() not in given]
            self.largest = max(self.largest, sum(s.nbytes() for s in new))
        return out


def largest_allocation(fn: Callable[[], object]) -> int:
    """Bytes of the largest new tensor storage any single operation makes while ``fn()`` runs.

    The peak-memory question "does this method ever hold a ``(T, S)``
    matrix?" answered exactly, on any device, by :class:`OpRecorder`.

    Args:
        fn: a function of no arguments (wrap a call in a ``lambda``).

    Returns:
        Bytes, as an int (0 if no operation allocated a result).

    Raises:
        ValueError: if ``fn`` is not callable.
    """
    if not callable(fn):
        raise ValueError(f"fn must be a function of no arguments, got {type(fn).__name__}")
    with OpRecorder() as recorder:
        fn()
    return recorder.largest
