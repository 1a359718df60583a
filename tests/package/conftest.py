"""Helpers the unit tests of the package share, as fixtures.

- ``randn(seed, *shape, dtype=torch.float64)``: a standard-normal tensor from its
  own seeded generator, so a test's inputs do not depend on what ran before it;
- ``seeded(seed, cls, *args, **kwargs)``: a module built right after
  ``torch.manual_seed(seed)`` (so its initial weights are fixed), in float64,
  the precision the agreement tests compare in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _seeded(seed: int, cls: Callable[..., nn.Module], *args: Any, **kwargs: Any) -> nn.Module:
    torch.manual_seed(seed)
    return cls(*args, **kwargs).double()


@pytest.fixture
def randn() -> Callable[..., torch.Tensor]:
    """``randn(seed, *shape, dtype=torch.float64)``: seeded standard-normal values."""
    return _randn


@pytest.fixture
def seeded() -> Callable[..., nn.Module]:
    """``seeded(seed, cls, *args, **kwargs)``: ``cls(*args, **kwargs)`` built under ``seed``, float64."""
    return _seeded


@pytest.fixture
def make_mha() -> Callable[..., nn.Module]:
    """``make_mha(d_model, n_heads, seed, **kwargs)``: a seeded float64 ``MultiHeadAttention``, eval mode."""
    from attnbook import MultiHeadAttention

    def make(d_model: int, n_heads: int, seed: int, **kwargs: Any) -> nn.Module:
        return _seeded(seed, MultiHeadAttention, d_model, n_heads, **kwargs).eval()

    return make
