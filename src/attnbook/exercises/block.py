"""Checkers for the exercises of chapter 9 (the transformer block).

Besides comparing with the package, these checkers recognise the typical
wrong answers (ReLU for GELU, a forgotten bias, post-LN for pre-LN, a missing
residual, a head counted twice, ...) and say which one they see.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnbook.exercises._framework import (
    Case,
    Mistake,
    Verdict,
    differentiable,
    randint,
    randn,
    run_cases,
)
from attnbook.model import GPT, GPTConfig
from attnbook.multihead import MultiHeadAttention

__all__ = ["check_feed_forward", "check_gpt_num_parameters", "check_pre_ln_block"]


# ------------------------------------------------------------------ feed-forward


def _ffn_args(seed: int, lead: tuple[int, ...], d_model: int, d_ff: int) -> tuple:
    x = randn(seed, *lead, d_model)
    w1 = randn(seed + 1, d_model, d_ff) / d_model**0.5
    b1 = randn(seed + 2, d_ff)
    w2 = randn(seed + 3, d_ff, d_model) / d_ff**0.5
    b2 = randn(seed + 4, d_model)
    return x, w1, b1, w2, b2


def _ffn(x, w1, b1, w2, b2, act=F.gelu):
    return act(x @ w1 + b1) @ w2 + b2  # (..., D) @ (D, F) -> (..., F) @ (F, D) -> (..., D)


_FFN_CASES = [
    Case(
        "one sequence: T = 5 positions, d_model = 4, d_ff = 16",
        lambda: _ffn_args(900, (5,), 4, 16),
        "Two linear maps, each with its bias, and the exact GELU between them, in the "
        "order of the exercise's formula: the hidden layer has d_ff features, the output "
        "d_model. Check the shapes on this x: (5, 4) in, (5, 16) in between, (5, 4) out.",
    ),
    Case(
        "a batch: x of shape (B, T, d_model) = (2, 3, 6), d_ff = 10",
        lambda: _ffn_args(910, (2, 3), 6, 10),
        "A matrix product with w1 works for any leading dimensions; the same weights act "
        "on every position.",
    ),
]

_FFN_MISTAKES = [
    Mistake(
        "ReLU instead of GELU",
        lambda *a: _ffn(*a, act=F.relu),
        "The activation is GELU, x * Phi(x) (F.gelu), not ReLU: GELU lets small negative "
        "values through, smoothly.",
    ),
    Mistake(
        "the tanh approximation of GELU",
        lambda *a: _ffn(*a, act=lambda h: F.gelu(h, approximate="tanh")),
        "Use the exact GELU, F.gelu's default, as "
        'torch.nn.TransformerEncoderLayer(..., activation="gelu") does.',
    ),
    Mistake(
        "forgetting the first bias b1",
        lambda x, w1, b1, w2, b2: _ffn(x, w1, 0 * b1, w2, b2),
        "b1 belongs to the first linear map: it is added to the hidden layer, before the "
        "activation.",
    ),
    Mistake(
        "forgetting the second bias b2",
        lambda x, w1, b1, w2, b2: _ffn(x, w1, b1, w2, 0 * b2),
        "b2 belongs to the second linear map: it is added to the output, after it.",
    ),
    Mistake(
        "the input added to the output (a residual connection inside the network)",
        lambda x, w1, b1, w2, b2: x + _ffn(x, w1, b1, w2, b2),
        "The residual connection belongs to the block, which adds the sub-layer's output to "
        "the stream; the feed-forward network itself returns only the two maps and the GELU.",
    ),
    Mistake(
        "no activation at all (a single linear map in disguise)",
        lambda *a: _ffn(*a, act=lambda h: h),
        "Apply GELU to the hidden layer; without it the two maps collapse into one linear map.",
    ),
]


def check_feed_forward(
    fn: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
    ],
) -> Verdict:
    """Check ``fn(x, w1, b1, w2, b2) -> output``, the position-wise FFN of the exercise.

    Shapes: ``x`` ``(..., d_model)``, ``w1`` ``(d_model, d_ff)``, ``b1``
    ``(d_ff,)``, ``w2`` ``(d_ff, d_model)``, ``b2`` ``(d_model,)``; output
    ``(..., d_model)``: two linear maps with their biases and the exact GELU between them,
    the exercise's formula. The checker names ReLU, GELU's tanh approximation, a bias or
    the activation left out. The blocks of the later chapters
    train through it, so the output must be differentiable with respect to every argument
    (:func:`~attnbook.exercises._framework.differentiable`): the right numbers cut from
    autograd (``.detach()``, NumPy, ``torch.no_grad()``) fail.
    """
    learner = differentiable(
        "feed_forward",
        fn,
        {"x": 0, "w1": 1, "b1": 2, "w2": 3, "b2": 4},
        why="every block of the later chapters trains its weights through it, and "
        "loss.backward() goes through it to the blocks below",
    )
    return run_cases("feed_forward", learner, _ffn, _FFN_CASES, mistakes=_FFN_MISTAKES)


# ------------------------------------------------------------------ pre-LN block


def _block_parts(seed: int, d_model: int, n_heads: int) -> tuple:
    """An attention, a feed-forward network and two LayerNorms, with non-trivial weights."""
    with torch.random.fork_rng(devices=[]):  # seeded, and the learner's RNG state is left alone
        torch.manual_seed(seed)
        mha = MultiHeadAttention(d_model, n_heads).double().eval()
        lin1 = nn.Linear(d_model, 3 * d_model).double()
        lin2 = nn.Linear(3 * d_model, d_model).double()
    norm1, norm2 = nn.LayerNorm(d_model).double(), nn.LayerNorm(d_model).double()
    with torch.no_grad():  # LayerNorms start as the identity map; give them weights that show
        for i, norm in enumerate((norm1, norm2)):
            norm.weight.copy_(1 + 0.5 * randn(seed + 10 + i, d_model))
            norm.bias.copy_(0.5 * randn(seed + 20 + i, d_model))

    def attention(h: torch.Tensor) -> torch.Tensor:
        return mha(h, h, h, is_causal=True)[0]  # causal self-attention, (B, T, D)

    def ffn(h: torch.Tensor) -> torch.Tensor:
        return lin2(F.gelu(lin1(h)))  # (B, T, D)

    return attention, ffn, norm1, norm2


def _block_args(seed: int, batch: int, seq_len: int, d_model: int, n_heads: int) -> tuple:
    return (randn(seed, batch, seq_len, d_model), *_block_parts(seed, d_model, n_heads))


def _pre_ln(x, attention, ffn, norm1, norm2):
    # with a graph (no torch.no_grad()): an answer's gradient is compared with this one's
    x = x + attention(norm1(x))  # (B, T, D)
    return x + ffn(norm2(x))


def _post_ln(x, attention, ffn, norm1, norm2):
    with torch.no_grad():
        x = norm1(x + attention(x))
        return norm2(x + ffn(x))


def _no_attention_residual(x, attention, ffn, norm1, norm2):
    with torch.no_grad():
        x = attention(norm1(x))
        return x + ffn(norm2(x))


def _no_ffn_residual(x, attention, ffn, norm1, norm2):
    with torch.no_grad():
        x = x + attention(norm1(x))
        return ffn(norm2(x))


def _residual_from_normalised(x, attention, ffn, norm1, norm2):
    with torch.no_grad():
        h = norm1(x)
        x = h + attention(h)
        h = norm2(x)
        return h + ffn(h)


def _ffn_on_input(x, attention, ffn, norm1, norm2):
    with torch.no_grad():  # both sub-layers read x: the feed-forward network misses the attention
        return x + attention(norm1(x)) + ffn(norm2(x))


def _one_norm(x, attention, ffn, norm1, norm2):
    return _pre_ln(x, attention, ffn, norm1, norm1)


def _norms_swapped(x, attention, ffn, norm1, norm2):
    with torch.no_grad():
        return _pre_ln(x, attention, ffn, norm2, norm1)


def _ffn_first(x, attention, ffn, norm1, norm2):
    with torch.no_grad():
        x = x + ffn(norm1(x))
        return x + attention(norm2(x))


_BLOCK_CASES = [
    Case(
        "B = 2 sequences of T = 5 positions, d_model = 8, 2 heads",
        lambda: _block_args(930, 2, 5, 8, 2),
        "In a pre-LN block each sub-layer, the attention first, reads a normalised copy of the "
        "stream and adds its output to the stream itself. A test to run: with an attention and "
        "a feed-forward network that return zeros (lambda h: 0 * h), the block returns x "
        "unchanged.",
    ),
    Case(
        "B = 1, T = 7, d_model = 12, 3 heads",
        lambda: _block_args(940, 1, 7, 12, 3),
        "Normalise the input of each sub-layer, and add the sub-layer's output to the "
        "un-normalised stream.",
    ),
]

_BLOCK_MISTAKES = [
    Mistake(
        "post-LN instead of pre-LN",
        _post_ln,
        "That is the original (post-LN) block, which normalises the stream after each "
        "addition. In a pre-LN block a LayerNorm only prepares a sub-layer's input; the stream "
        "itself is never normalised in the block, so with sub-layers that return zeros the "
        "block returns x unchanged.",
    ),
    Mistake(
        "a missing residual around the attention",
        _no_attention_residual,
        "The attention's output replaces the stream instead of being added to it, so the "
        "block's input is lost. Check: with an attention that returns zeros, the stream after "
        "the attention must still be x.",
    ),
    Mistake(
        "a missing residual around the feed-forward network",
        _no_ffn_residual,
        "Your block returns the feed-forward network's output alone, and the stream it read "
        "is lost: the second sub-layer needs its residual connection too. Check: with a "
        "feed-forward network that returns zeros, the block returns the stream after the "
        "attention.",
    ),
    Mistake(
        "adding the sub-layer's output to the normalised input",
        _residual_from_normalised,
        "Your stream continues from the normalised input, so the block's own input is lost "
        "at the first LayerNorm. The LayerNorm only prepares the sub-layer's input; the "
        "stream carries the un-normalised values. Check: with sub-layers that return zeros, "
        "the block returns x, not a normalised x.",
    ),
    Mistake(
        "the feed-forward network reading the block's input x, not the stream after the attention",
        _ffn_on_input,
        "Both sub-layers read the block's input, so the feed-forward network never sees what "
        "the attention gathered. The sub-layers run one after the other: the feed-forward "
        "network reads the stream as the attention left it.",
    ),
    Mistake(
        "using norm1 for both sub-layers",
        _one_norm,
        "Each sub-layer has its own LayerNorm: norm1 before the attention, norm2 before the "
        "feed-forward network.",
    ),
    Mistake(
        "norm1 and norm2 swapped",
        _norms_swapped,
        "The sub-layers and residuals are right, but each LayerNorm has learned its own weight "
        "and bias for one sub-layer: norm1 prepares the attention's input, norm2 the "
        "feed-forward network's.",
    ),
    Mistake(
        "the feed-forward network before the attention",
        _ffn_first,
        "Attention comes first (it mixes positions), then the feed-forward network.",
    ),
]


def check_pre_ln_block(
    fn: Callable[
        [torch.Tensor, Callable, Callable, Callable, Callable],
        torch.Tensor,
    ],
) -> Verdict:
    """Check ``fn(x, attention, ffn, norm1, norm2)``: one pre-LN transformer block.

    ``x`` has shape ``(B, T, d_model)``; ``attention`` and ``ffn`` map
    ``(B, T, d_model)`` to ``(B, T, d_model)`` (the attention is already causal
    self-attention); ``norm1`` and ``norm2`` are ``nn.LayerNorm(d_model)``.
    The checker compares the output with that of a pre-LN block without dropout and names
    post-LN, a missing residual, the sub-layers' order and the LayerNorms mixed up. The
    output must be differentiable with respect to ``x``: the GPT of chapter 10 trains
    through its blocks (:func:`~attnbook.exercises._framework.differentiable`).
    """

    learner = differentiable(
        "pre_ln_block",
        fn,
        {"x": 0},
        why="the GPT of chapter 10 trains through its blocks, and loss.backward() goes "
        "through each block to the ones below",
    )
    return run_cases("pre_ln_block", learner, _pre_ln, _BLOCK_CASES, mistakes=_BLOCK_MISTAKES)


# ------------------------------------------------------------------ parameter count


@functools.lru_cache(
    maxsize=64
)  # each known mistake adds to it: one build per case, not per mistake
def _gpt_count(vocab_size: int, context_length: int, d_model: int, n_layers: int, d_ff: int) -> int:
    config = GPTConfig(vocab_size, context_length, d_model, 1, n_layers, d_ff=d_ff)
    with torch.device("meta"):  # shapes only: no memory (building still takes about 0.1 s)
        return GPT(config).num_parameters()


def _off_by(per_layer: Callable, once: Callable) -> Callable:
    """A wrong count: the right one plus ``n_layers * per_layer(...) + once(...)``."""

    def count(v: int, c: int, d: int, n: int, f: int) -> int:
        return _gpt_count(v, c, d, n, f) + n * per_layer(v, c, d, f) + once(v, c, d, f)

    return count


def _zero(*_: int) -> int:
    return 0


def _draw_sizes(rng, *, d_ff_is_4d: bool, layers: tuple[int, int]) -> tuple[int, ...]:
    """The grader's ``(vocab_size, context_length, d_model, n_layers, d_ff)``, of a case's kind:
    ``d_ff = 4 * d_model`` or any other width, and ``n_layers`` in ``layers``."""
    d_model = 8 * randint(rng, 2, 16)
    if d_ff_is_4d:
        d_ff = 4 * d_model
    else:
        d_ff = int(rng.choice([f for f in range(d_model, 6 * d_model + 1) if f != 4 * d_model]))
    return randint(rng, 10, 300), randint(rng, 8, 256), d_model, randint(rng, *layers), d_ff


_COUNT_CASES = [
    Case(
        "vocab_size = 65, context_length = 64, d_model = 128, n_layers = 4, d_ff = 512",
        lambda: (65, 64, 128, 4, 512),
        "Go through one block and list every tensor it learns, in the attention, the "
        "feed-forward network and the LayerNorms, each linear map's bias included; then what "
        "the model holds once (the embeddings, the final LayerNorm). The head is tied to the "
        "token embedding.",
        draw=lambda rng: _draw_sizes(rng, d_ff_is_4d=True, layers=(2, 6)),
    ),
    Case(
        "vocab_size = 100, context_length = 32, d_model = 48, n_layers = 3, d_ff = 80",
        lambda: (100, 32, 48, 3, 80),
        "Use d_ff for the feed-forward width; it need not be 4 * d_model.",
        draw=lambda rng: _draw_sizes(rng, d_ff_is_4d=False, layers=(2, 5)),
    ),
    Case(
        "vocab_size = 10, context_length = 8, d_model = 16, n_layers = 1, d_ff = 64",
        lambda: (10, 8, 16, 1, 64),
        "Count one layer's parameters, then multiply by n_layers; the embeddings and the final "
        "LayerNorm are counted once.",
        draw=lambda rng: _draw_sizes(rng, d_ff_is_4d=True, layers=(1, 1)),
    ),
]

_COUNT_MISTAKES = [
    Mistake(
        "forgetting the biases of the linear maps",
        _off_by(lambda v, c, d, f: -(4 * d + f + d), _zero),
        "Each nn.Linear adds a bias, one number per output feature: count it for every linear "
        "map, in the attention and in the feed-forward network, in every layer.",
    ),
    Mistake(
        "forgetting the attention's biases (chapter 7's exercise had none)",
        _off_by(lambda v, c, d, f: -4 * d, _zero),
        "attnbook.GPT's attention gives each of its four linear maps, W_Q, W_K, W_V and W_O, "
        "a bias of d_model numbers, unlike the bias-free matrices of chapter 7's exercise.",
    ),
    Mistake(
        "counting the output head as a separate matrix",
        _off_by(_zero, lambda v, c, d, f: v * d),
        "The head is tied to the token embedding: one (vocab_size, d_model) matrix, counted once.",
    ),
    Mistake(
        "forgetting the LayerNorms",
        _off_by(lambda v, c, d, f: -4 * d, lambda v, c, d, f: -2 * d),
        "Each LayerNorm learns a weight and a bias, one number each per feature: count the "
        "LayerNorms of every block, and the final one.",
    ),
    Mistake(
        "forgetting the final LayerNorm",
        _off_by(_zero, lambda v, c, d, f: -2 * d),
        "Pre-LN models end with one more LayerNorm before the head, counted once, with a weight "
        "and a bias like the others.",
    ),
    Mistake(
        "one LayerNorm per block instead of two",
        _off_by(lambda v, c, d, f: -2 * d, _zero),
        "A pre-LN block normalises the input of each of its two sub-layers, so it holds two "
        "LayerNorms, each with a weight and a bias.",
    ),
    Mistake(
        "giving each LayerNorm a weight but no bias",
        _off_by(lambda v, c, d, f: -2 * d, lambda v, c, d, f: -d),
        "nn.LayerNorm has a weight (gain) and a bias, each of size d_model.",
    ),
    Mistake(
        "a bias in the output head",
        _off_by(_zero, lambda v, c, d, f: v),
        "The head is the token embedding, reused without a bias: it adds no parameters.",
    ),
    Mistake(
        "forgetting the position embeddings",
        _off_by(_zero, lambda v, c, d, f: -c * d),
        "Learned positions are a (context_length, d_model) table.",
    ),
    Mistake(
        "forgetting the attention's output projection W_O",
        _off_by(lambda v, c, d, f: -(d * d + d), _zero),
        "Attention has a fourth linear map besides W_Q, W_K and W_V: the output projection W_O, "
        "applied after the heads are merged, with its bias.",
    ),
]


def check_gpt_num_parameters(fn: Callable[[int, int, int, int, int], int]) -> Verdict:
    """Check ``fn(vocab_size, context_length, d_model, n_layers, d_ff) -> int``.

    The count is that of :class:`attnbook.GPT` with learned positions and biases:
    the head tied to the token embedding, every LayerNorm with a weight and a bias.
    """
    return run_cases(
        "gpt_num_parameters",
        fn,
        _gpt_count,
        _COUNT_CASES,
        mistakes=_COUNT_MISTAKES,
        rtol=0.0,
        atol=0.0,
    )
