"""Reproducibility and hardware helpers used at the top of every chapter.

Introduced in the introduction (``intro.md``) and used from chapter 1 on.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["get_device", "set_print_options", "set_seed"]


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's random number generators.

    Every stochastic demo in the book calls this first, so that re-running a
    notebook reproduces the stored outputs exactly (nbval checks that it does).

    Args:
        seed: a non-negative integer below 2**32.

    Raises:
        ValueError: if ``seed`` is not an integer in ``[0, 2**32)``.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= int(seed) < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(int(seed))
    np.random.seed(int(seed))  # noqa: NPY002 (learners and published examples use it)
    torch.manual_seed(int(seed))  # also seeds every CUDA device


def get_device() -> torch.device:
    """Return the fastest available device: CUDA, then Apple's MPS, then the CPU.

    Chapters never hard-code ``.cuda()``: they move tensors to ``get_device()``
    so the same notebook runs on a laptop, on Colab, or on a GPU server.

    Returns:
        A ``torch.device``.
    """
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
    if isinstance(precision, bool) or not isinstance(precision, int):
        raise ValueError(f"precision must be an int, got {type(precision).__name__}")
    if not 1 <= precision <= 16:
        raise ValueError(f"precision must be in [1, 16], got {precision}")
    np.set_printoptions(precision=precision, suppress=True)
    torch.set_printoptions(precision=precision, sci_mode=False)
