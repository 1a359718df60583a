"""Checkers for the exercises of chapter 8 (positional encoding).

Besides the hidden cases, each checker knows the usual ways to get the
exercise wrong (sine and cosine swapped, a frequency exponent off by a factor,
the other pairing of features, a rotation the wrong way round). When a case
fails and the learner's answer matches one of those mistakes exactly, the
hint names that mistake instead of the case's general hint.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    differentiable,
    no_python_loops,
    randint,
    randn,
    run_cases,
)
from attnbook.positional import apply_rope, sinusoidal_positional_encoding

__all__ = ["check_apply_rope", "check_sinusoidal_positional_encoding"]

_RTOL, _ATOL = 1e-4, 1e-4  # a float32 answer is fine; every mistake below is off by O(1)


# ------------------------------------------------------ sinusoidal encoding


def _sinusoidal_variant(
    seq_len: int, d_model: int, *, swap: bool = False, exponent: str = "2i", split: bool = False
) -> torch.Tensor:
    """The encoding with one deliberate mistake (for the diagnosis of wrong answers)."""
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(d_model // 2, dtype=torch.float64)  # (d/2,) pair index
    powers = {"2i": -2 * i / d_model, "i": -i / d_model, "+2i": 2 * i / d_model}
    freqs = 10000.0 ** powers.get(exponent, -2 * i / d_model)  # (d/2,)
    first, second = (pos * freqs).sin(), (pos * freqs).cos()  # (T, d/2) each
    if exponent == "column":  # odd column 2i + 1 with exponent -(2i + 1)/d
        second = (pos * 10000.0 ** (-(2 * i + 1) / d_model)).cos()
    if swap:
        first, second = second, first
    if split:
        return torch.cat((first, second), dim=-1)  # (T, d): all sines, then all cosines
    return torch.stack((first, second), dim=-1).reshape(seq_len, d_model)  # (T, d)


_SINUSOIDAL_MISTAKES = [
    Mistake(
        "sine and cosine swapped",
        lambda t, d: _sinusoidal_variant(t, d, swap=True),
        "Even columns 2i hold sin(pos * w_i), odd columns 2i + 1 hold cos(pos * w_i).",
    ),
    Mistake(
        "all sines, then all cosines (concatenated)",
        lambda t, d: _sinusoidal_variant(t, d, split=True),
        "Here the two interleave: column 2i is sin(pos * w_i) and column 2i + 1 is cos(pos * w_i).",
    ),
    Mistake(
        "a frequency exponent missing its factor 2",
        lambda t, d: _sinusoidal_variant(t, d, exponent="i"),
        "Your frequencies fall too slowly from pair to pair: the exponent counts the columns "
        "before the pair, two for every pair, so that the slowest pair has a wavelength near "
        "2π·10000. Compare with the frequencies that chapter 8's section on sinusoidal "
        "encodings defines.",
    ),
    Mistake(
        "a frequency exponent with the wrong sign",
        lambda t, d: _sinusoidal_variant(t, d, exponent="+2i"),
        "The frequencies must fall from pair to pair, the first pair the fastest: check the "
        "sign of your exponent.",
    ),
    Mistake(
        "a frequency per column instead of per pair",
        lambda t, d: _sinusoidal_variant(t, d, exponent="column"),
        "The sine and the cosine of one pair must share one frequency: use the pair index i "
        "(the even column 2i) for both columns 2i and 2i + 1.",
    ),
]

_SINUSOIDAL_CASES = [
    Case(
        "seq_len = 4, d_model = 2",
        lambda: (4, 2),
        "With one pair, column 0 is sin(pos) and column 1 is cos(pos); row 0 is (0, 1).",
        draw=lambda rng: (randint(rng, 3, 8), 2),
    ),
    Case(
        "seq_len = 6, d_model = 8",
        lambda: (6, 8),
        "Pair i has its own frequency w_i, as chapter 8's section on sinusoidal encodings "
        "defines it: column 2i holds the sine of pos * w_i and column 2i + 1 its cosine.",
        draw=lambda rng: (randint(rng, 4, 10), 2 * randint(rng, 2, 6)),
    ),
    Case(
        "seq_len = 50, d_model = 16 (far positions, slow pairs)",
        lambda: (50, 16),
        "Compute pos * w_i for every position and pair at once by broadcasting "
        "(T, 1) * (1, d_model / 2), then interleave the sines and cosines.",
        draw=lambda rng: (randint(rng, 40, 80), 8 * randint(rng, 2, 4)),
    ),
]


def check_sinusoidal_positional_encoding(fn: Callable[[int, int], torch.Tensor]) -> Verdict:
    """Check ``fn(seq_len, d_model) -> pe``, the sinusoidal encoding ``(seq_len, d_model)``.

    The encoding of chapter 8's section on sinusoidal position encodings, as the exercise
    states it: sines in the even columns, cosines in the odd ones; ``d_model`` is even.
    """
    return run_cases(
        "sinusoidal_positional_encoding",
        fn,
        sinusoidal_positional_encoding,
        _SINUSOIDAL_CASES,
        rtol=_RTOL,
        atol=_ATOL,
        mistakes=_SINUSOIDAL_MISTAKES,
        guard=no_python_loops(
            "build the whole table at once: a column of positions (T, 1) times a row of "
            "frequencies (1, d/2) gives every angle; then sin and cos, interleaved.",
        ),
    )


# ------------------------------------------------------------------- RoPE


def _rope_variant(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    half_split: bool = False,
    sign: float = 1.0,
    exponent: str = "2i",
    halves_out: bool = False,
) -> torch.Tensor:
    """RoPE with one deliberate mistake (for the diagnosis of wrong answers); ``halves_out``
    pairs neighbours but writes the rotated pairs back as two halves."""
    d = x.shape[-1]
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    freqs = 10000.0 ** (-i / d if exponent == "i" else -2 * i / d)  # (d/2,)
    angles = sign * positions.to(torch.float64)[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if half_split:
        a, b = x[..., : d // 2], x[..., d // 2 :]  # feature i paired with i + d/2
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    if halves_out:  # all first components, then all second ones
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


_ROPE_MISTAKES = [
    Mistake(
        "the half split: feature i paired with feature i + d/2",
        lambda x, p: _rope_variant(x, p, half_split=True),
        "That is the pairing of GPT-NeoX and of the transformers port of LLaMA; this exercise "
        "pairs neighbours, as Meta's original LLaMA code does: (x[..., 2i], x[..., 2i + 1]).",
    ),
    Mistake(
        "the right pairs, but written back as two halves",
        lambda x, p: _rope_variant(x, p, halves_out=True),
        "You rotate the neighbours (x[..., 2i], x[..., 2i + 1]), but the result holds all the "
        "pairs' first components, then all their second ones. Put each rotated pair back in "
        "the two columns it came from, 2i and 2i + 1.",
    ),
    Mistake(
        "a rotation clockwise (by -θ)",
        lambda x, p: _rope_variant(x, p, sign=-1.0),
        "Your pairs turn the wrong way: counter-clockwise, a positive angle turns (1, 0) "
        "towards (0, 1). Compare the signs of your sines with the rotation matrix in the "
        "section on rotary embeddings.",
    ),
    Mistake(
        "a frequency exponent missing its factor 2",
        lambda x, p: _rope_variant(x, p, exponent="i"),
        "Your frequencies fall too slowly from pair to pair: the exponent of a pair's "
        "frequency counts the features before the pair, two for every pair. Compare your last "
        "pair's frequency with the one the section on rotary embeddings gives.",
    ),
    Mistake(
        "positions ignored: 0, 1, ..., T - 1 used instead",
        lambda x, p: _rope_variant(x, torch.arange(x.shape[-2])),
        "Rotate row t by positions[t], the position you are given.",
    ),
]


def _rope_case(seed: int, shape: tuple[int, ...], positions: list[int]) -> Callable[[], tuple]:
    return lambda: (randn(seed, *shape), torch.tensor(positions))


_ROPE_CASES = [
    Case(
        "x of shape (T, d) = (6, 4), positions 0..5",
        _rope_case(801, (6, 4), list(range(6))),
        "Each pair of row t turns by its own angle, which grows with the row's position: the "
        "angles and the 2 × 2 rotation are in chapter 8's section on rotary position "
        "embeddings. Check one pair by hand: at position 0 nothing turns, and a rotation keeps "
        "each pair's length.",
    ),
    Case(
        "x of shape (B, H, T, Dh) = (2, 3, 5, 8), positions 0..4",
        _rope_case(802, (2, 3, 5, 8), list(range(5))),
        "The leading axes are batch axes: take the pairs along the last axis only, whatever "
        "axes come before it, and let the angles (T, d/2) broadcast.",
    ),
    Case(
        "positions [3, 10, 11, 40, 41], not starting at 0",
        _rope_case(803, (5, 6), [3, 10, 11, 40, 41]),
        "Use the positions you are given, not 0..T-1.",
    ),
    Case(
        "d = 16, positions up to 100 (the slow pairs matter)",
        _rope_case(804, (4, 16), [0, 1, 50, 100]),
        "Every pair has its own frequency, the first pair the fastest and each pair after it "
        "slower, as the section on rotary embeddings defines them: with d = 16 and positions "
        "up to 100 the slow pairs turn visibly too.",
    ),
]


def check_apply_rope(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Verdict:
    """Check ``fn(x, positions) -> rotated``: rotary embeddings with base 10000.

    ``x`` has shape ``(..., T, d)`` (``d`` even, float64 in the hidden cases),
    ``positions`` is an int64 tensor ``(T,)``; pair ``(x[..., 2i], x[..., 2i + 1])``
    of row ``t`` turns counter-clockwise by the angle that chapter 8's section on rotary
    position embeddings gives position ``positions[t]`` and pair ``i``. The rotated
    queries and keys are trained through, so the result must be differentiable with
    respect to ``x``.
    """
    return run_cases(
        "apply_rope",
        differentiable(
            "apply_rope",
            fn,
            {"x": 0},
            why="RoPE rotates the queries and keys of a model that trains, and loss.backward() "
            "goes back through the rotation to them",
        ),
        lambda x, positions: apply_rope(x, positions),
        _ROPE_CASES,
        rtol=_RTOL,
        atol=_ATOL,
        mistakes=_ROPE_MISTAKES,
        guard=no_python_loops(
            "rotate every pair of every row at once: a (T, d/2) table of angles, the even "
            "and the odd features each taken as one tensor, and broadcasting.",
        ),
    )
