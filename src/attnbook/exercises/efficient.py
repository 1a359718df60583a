"""Checkers for the exercises of chapter 14 (efficient attention).

- :func:`check_online_softmax_update`: one step of FlashAttention's online
  softmax (the recurrence inside :func:`attnbook.tiled_attention`);
- :func:`check_sliding_window_mask`: the local causal mask of
  :func:`attnbook.sliding_window_mask`;
- :func:`check_kv_cache_bytes`: the memory of a key-value cache, by formula.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from attnbook.exercises._framework import (
    Case,
    Mistake,
    RefusedResult,
    Verdict,
    all_of,
    no_python_loops,
    randint,
    randn,
    returns_tensor,
    run_cases,
)
from attnbook.masking import sliding_window_mask

__all__ = ["check_kv_cache_bytes", "check_online_softmax_update", "check_sliding_window_mask"]

State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
UpdateFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], State]


# ------------------------------------------------------------------ online softmax update


def _update(
    m: torch.Tensor,
    l: torch.Tensor,  # noqa: E741 (the paper's name)
    acc: torch.Tensor,
    scores: torch.Tensor,
    values: torch.Tensor,
) -> State:
    """The reference step: (T, 1), (T, 1), (T, d_v), (T, Sb), (Sb, d_v) -> new (m, l, acc)."""
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (T, 1)
    correction = torch.exp(m - m_new)  # (T, 1); exp(-inf) = 0 for the empty state
    p = torch.exp(scores - m_new)  # (T, Sb)
    return m_new, correction * l + p.sum(-1, keepdim=True), correction * acc + p @ values


def _empty_state(n_queries: int, d_v: int) -> State:
    m = torch.full((n_queries, 1), -math.inf, dtype=torch.float64)
    return m, torch.zeros(n_queries, 1, dtype=torch.float64), torch.zeros(n_queries, d_v).double()


def _state_after(scores: torch.Tensor, values: torch.Tensor) -> State:
    """The state after one block, computed by the reference: the start of a later case."""
    return _update(*_empty_state(scores.shape[0], values.shape[1]), scores, values)


def _first_block() -> tuple:
    return (*_empty_state(3, 2), randn(1201, 3, 4), randn(1202, 4, 2))


def _first_block_negative() -> tuple:
    return (*_empty_state(3, 2), randn(1219, 3, 4) - 1e3, randn(1220, 4, 2))


def _max_moves_up() -> tuple:
    state = _state_after(randn(1203, 3, 4), randn(1204, 4, 2))
    return (*state, randn(1205, 3, 5) + 4.0, randn(1206, 5, 2))  # every new score is larger


def _max_stays() -> tuple:
    state = _state_after(randn(1207, 3, 4) + 4.0, randn(1208, 4, 2))
    return (*state, randn(1209, 3, 2) - 3.0, randn(1210, 2, 2))  # every new score is smaller


def _mixed_rows() -> tuple:
    state = _state_after(randn(1211, 4, 3, scale=2.0), randn(1212, 3, 3))
    return (*state, randn(1213, 4, 3, scale=2.0), randn(1214, 3, 3))


def _large_scores() -> tuple:
    state = _state_after(randn(1215, 2, 3, scale=1e3) + 1e4, randn(1216, 3, 2))
    return (*state, randn(1217, 2, 3, scale=1e3) + 1e4, randn(1218, 3, 2))


class OnlineState(NamedTuple):
    """The state an online-softmax step returns; a verdict names the part that is wrong."""

    m: torch.Tensor  # (T, 1)
    ell: torch.Tensor  # (T, 1)
    acc: torch.Tensor  # (T, d_v)


def _as_state(fn: UpdateFn) -> Callable[..., OnlineState]:
    """Call ``fn`` and return its state as an :class:`OnlineState` of float64 tensors, ``m``
    and ``ell`` as ``(T, 1)`` columns (a ``(T,)`` vector is accepted)."""

    @functools.wraps(fn)  # its parameters' names, for the verdict
    def run(*args: torch.Tensor) -> OnlineState | None:
        result = fn(*args)
        if result is None:
            return None  # the framework asks "did you forget `return`?"
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            what = (
                f"{len(result)} values"
                if isinstance(result, (tuple, list))
                else f"a value of type {type(result).__name__}"
            )
            raise RefusedResult(
                f"returned {what}, where the new state is asked for, as a tuple (m, ell, acc)"
            )
        m, l, acc = (torch.as_tensor(x, dtype=torch.float64) for x in result)  # noqa: E741
        n_queries = args[3].shape[0]
        try:
            m, l = m.reshape(n_queries, 1), l.reshape(n_queries, 1)  # noqa: E741
        except RuntimeError:
            raise RefusedResult(
                f"returned m and ell of shapes {tuple(m.shape)} and {tuple(l.shape)}: each must "
                f"hold one number per query row, shape (T, 1) = ({n_queries}, 1)"
            ) from None
        return OnlineState(m, l, acc)

    return run


def _no_rescale_acc(m, l, acc, scores, values):  # noqa: E741
    m_new, l_new, _ = _update(m, l, acc, scores, values)
    return m_new, l_new, acc + torch.exp(scores - m_new) @ values


def _no_rescale_l(m, l, acc, scores, values):  # noqa: E741
    m_new, _, acc_new = _update(m, l, acc, scores, values)
    return m_new, l + torch.exp(scores - m_new).sum(-1, keepdim=True), acc_new


def _inverted_correction(m, l, acc, scores, values):  # noqa: E741
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    correction = torch.exp(m_new - m).nan_to_num(posinf=0.0)
    p = torch.exp(scores - m_new)
    return m_new, correction * l + p.sum(-1, keepdim=True), correction * acc + p @ values


def _block_max_only(m, l, acc, scores, values):  # noqa: E741
    block_max = scores.amax(dim=-1, keepdim=True)  # forgets the running max
    p = torch.exp(scores - block_max)
    correction = torch.exp(m - block_max)
    return block_max, correction * l + p.sum(-1, keepdim=True), correction * acc + p @ values


def _normalised_blocks(m, l, acc, scores, values):  # noqa: E741
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    return m_new, l + 1.0, acc + torch.softmax(scores, dim=-1) @ values


def _divided_acc(m, l, acc, scores, values):  # noqa: E741
    m_new, l_new, acc_new = _update(m, l, acc, scores, values)
    return m_new, l_new, acc_new / l_new  # the output so far, not the numerator


def _no_max(m, l, acc, scores, values):  # noqa: E741
    p = torch.exp(scores)
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    return m_new, l + p.sum(-1, keepdim=True), acc + p @ values


_ONLINE_CASES = [
    Case(
        "the first block, from the empty state m = -inf, ell = 0, acc = 0 (T = 3, 4 keys)",
        _first_block,
        "From the empty state nothing has been summed yet, so the new state describes this "
        "block alone: its largest score, then the softmax's denominator and numerator over its "
        "keys, as the three running quantities of chapter 14's section 'FlashAttention's "
        "algorithm: the online softmax' define them. The empty state needs no special case "
        "in the section's update: check that your correction of the old sums is 0 when "
        "m = -inf, and that acc_new / ell_new is the softmax of this block's scores applied "
        "to its values.",
    ),
    Case(
        "a second block whose scores are all larger than before (the maximum moves up)",
        _max_moves_up,
        "When the maximum moves up, everything summed so far was computed under the old "
        "maximum: correct both ell and acc to the new one, with the section's correction "
        "factor, before adding the new block.",
    ),
    Case(
        "a second block whose scores are all smaller (the maximum stays)",
        _max_stays,
        "The new maximum is the largest score seen so far, the old maximum included: here it "
        "stays the old one, and the correction of the old sums is 1.",
    ),
    Case(
        "4 query rows, some of whose maxima move and some not",
        _mixed_rows,
        "Work row by row: every quantity has one entry per query row (keepdim=True keeps "
        "the (T, 1) shape so it broadcasts).",
    ),
    Case(
        "scores around 1e4",
        _large_scores,
        "exp(1e4) overflows: subtract the running maximum m_new inside every exp.",
    ),
    Case(
        "the first block from the empty state, every score around -1e3",
        _first_block_negative,
        "m starts at -inf, not 0: the new maximum is then the block's own even when every "
        "score is negative, and the correction of the empty sums, exp(-inf) = 0, needs no "
        "special case.",
    ),
]

_ONLINE_MISTAKES = [
    Mistake(
        "rescaling ell but not acc",
        _as_state(_no_rescale_acc),
        "acc was summed under the old maximum too: multiply it by exp(m - m_new) like ell.",
    ),
    Mistake(
        "rescaling acc but not ell",
        _as_state(_no_rescale_l),
        "ell was summed under the old maximum too: multiply it by exp(m - m_new) like acc.",
    ),
    Mistake(
        "the correction upside down, exp(m_new - m)",
        _as_state(_inverted_correction),
        "The old terms are exp(score - m) and must become exp(score - m_new): multiply by "
        "exp(m - m_new), which is <= 1.",
    ),
    Mistake(
        "the block's own maximum instead of the running maximum",
        _as_state(_block_max_only),
        "The new maximum is the largest of everything seen so far, the running m included, "
        "not only of this block's scores.",
    ),
    Mistake(
        "a softmax of each block on its own, summed",
        _as_state(_normalised_blocks),
        "Blocks cannot be normalised separately: their weights must share one denominator. "
        "Keep unnormalised sums (ell and acc) and divide once, at the end.",
    ),
    Mistake(
        "acc divided by ell: the output so far instead of the running numerator",
        _as_state(_divided_acc),
        "acc is the numerator, the sum of exp(score - m) * value over the keys seen so far, "
        "not yet divided by ell: the state carries the two sums, and the division happens "
        "once, after the last block.",
    ),
    Mistake(
        "exp of the raw scores, without subtracting the maximum",
        _as_state(_no_max),
        "Subtract the running maximum m_new inside every exp, or large scores overflow.",
    ),
]


def check_online_softmax_update(fn: UpdateFn) -> Verdict:
    """Check ``fn(m, ell, acc, scores, values) -> (m_new, ell_new, acc_new)``, one online-softmax step.

    Shapes: ``m`` and ``ell`` (the denominator, ``l`` in
    :func:`attnbook.tiled_attention`) ``(T, 1)``, ``acc`` ``(T, d_v)``, ``scores``
    ``(T, Sb)`` (one block of keys, already scaled), ``values`` ``(Sb, d_v)``.
    The returned state must equal the recurrence of :func:`attnbook.tiled_attention`.
    """
    if not callable(fn):
        return run_cases("online_softmax_update", fn, _as_state(_update), _ONLINE_CASES)
    return run_cases(
        "online_softmax_update",
        _as_state(fn),
        _as_state(_update),
        _ONLINE_CASES,
        rtol=1e-7,
        atol=1e-9,
        mistakes=_ONLINE_MISTAKES,
    )


# ------------------------------------------------------------------ sliding-window mask


def _window_reference(seq_len: int, window: int) -> torch.Tensor:
    return sliding_window_mask(seq_len, window)


def _distances(seq_len: int) -> torch.Tensor:
    positions = torch.arange(seq_len)
    return positions[:, None] - positions[None, :]  # (T, T): t - s


_WINDOW_CASES = [
    Case(
        "seq_len = 4, window = 2",
        lambda: (4, 2),
        "Query t may attend to keys t - window + 1 .. t: itself and the window - 1 before it, "
        "never the future; return a boolean (T, T) tensor.",
        draw=lambda rng: (randint(rng, 4, 7), randint(rng, 2, 3)),
    ),
    Case(
        "seq_len = 5, window = 1",
        lambda: (5, 1),
        "A window of 1 key is the query itself: the diagonal only.",
        draw=lambda rng: (randint(rng, 3, 9), 1),
    ),
    Case(
        "seq_len = 8, window = 3",
        lambda: (8, 3),
        "Each row has min(t + 1, window) True entries, ending on the diagonal.",
        draw=lambda rng: (randint(rng, 8, 12), randint(rng, 3, 5)),
    ),
    Case(
        "seq_len = 4, window = 10 (wider than the sequence)",
        lambda: (4, 10),
        "A window wider than the sequence is the plain causal mask.",
        draw=lambda rng: (randint(rng, 2, 6), randint(rng, 7, 16)),
    ),
]

_WINDOW_MISTAKES = [
    Mistake(
        "a window of window + 1 keys (t - s <= window)",
        lambda n, w: (_distances(n) >= 0) & (_distances(n) <= w),
        "The window counts the query itself: keys with 0 <= t - s < window, that is window "
        "keys in all.",
    ),
    Mistake(
        "a band around the diagonal that also sees the future (|t - s| < window)",
        lambda n, w: _distances(n).abs() < w,
        "A decoder's window looks back only: require s <= t as well.",
    ),
    Mistake(
        "the mask transposed: each query sees itself and the window - 1 keys after it",
        lambda n, w: sliding_window_mask(n, w).T,
        "Rows are queries and columns keys, and t - s is the query's position minus the "
        "key's: a decoder's window looks back, to keys s <= t, never to the future.",
    ),
    Mistake(
        "an inverted mask (True where attention is blocked)",
        lambda n, w: ~sliding_window_mask(n, w),
        "In this book True means 'may attend'.",
    ),
    Mistake(
        "a window that leaves out the query itself (1 <= t - s <= window)",
        lambda n, w: (_distances(n) >= 1) & (_distances(n) <= w),
        "The query may attend to its own key: the diagonal is True.",
    ),
]


# As chapter 6's mask exercises: the exercise asks for a boolean tensor, which the attention
# it goes into takes; a NumPy array of the right values is refused, naming its type.
_MASK_TENSOR = "a torch tensor of dtype torch.bool"
_MASK_TENSOR_HINT = (
    "the exercise asks for a boolean torch tensor: the masked attention it goes into takes a "
    "tensor. Build the mask with torch operations, not NumPy."
)


def check_sliding_window_mask(fn: Callable[[int, int], torch.Tensor]) -> Verdict:
    """Check ``fn(seq_len, window) -> mask``: a ``(T, T)`` boolean tensor, ``True`` where
    ``0 <= t - s < window``. A NumPy array fails, even with the right values."""
    return run_cases(
        "sliding_window_mask",
        fn,
        _window_reference,
        _WINDOW_CASES,
        mistakes=_WINDOW_MISTAKES,
        guard=all_of(
            no_python_loops(
                "build the whole mask at once: the distances t - s of a column of positions and "
                "a row of positions, (T, 1) - (1, T), then two comparisons.",
            ),
            returns_tensor(_MASK_TENSOR, _MASK_TENSOR_HINT),
        ),
    )


# ------------------------------------------------------------------ KV-cache memory


def _kv_cache_bytes(
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    d_model: int,
    seq_len: int,
    batch_size: int,
    bytes_per_element: int,
) -> int:
    """Keys and values, of every layer, batch row, key/value head and position: ``2 L B H_kv S Dh e``."""
    d_head = d_model // n_heads
    return 2 * n_layers * batch_size * n_kv_heads * seq_len * d_head * bytes_per_element


def _draw_kv(rng, case: str) -> tuple[int, ...]:
    """The grader's cache of each case's kind: ``"mha"`` (8-bit, as many key/value heads as
    heads, 16 or 32 of them, one sequence), ``"gqa"`` (16-bit, heads / key/value heads >= 3) or ``"mqa"`` (16-bit,
    one key/value head, a batch of 3 or more). Each mistake of ``_KV_MISTAKES`` then gives a
    factor of its own on the first case it fails, as on the shipped cases."""
    if case == "mha":
        heads = int(rng.choice([16, 32]))  # not 8: d_model per head would be the bits' x8
        d_model = heads * int(rng.choice([4, 8, 16, 32, 64]))
        return (randint(rng, 3, 12), heads, heads, d_model, randint(rng, 16, 4096), 1, 1)
    if case == "gqa":
        heads = int(rng.choice([16, 24, 28, 32, 64]))
        kv_heads = int(rng.choice([n for n in (2, 4, 8) if heads % n == 0 and heads // n >= 3]))
        d_model = heads * int(rng.choice([64, 128]))
        return (randint(rng, 2, 40), heads, kv_heads, d_model, randint(rng, 512, 16384), 1, 2)
    batch = randint(rng, 3, 16)
    layers = int(rng.choice([n for n in range(2, 25) if n != batch]))  # 1/L is not 1/B
    heads = int(rng.choice([8, 12, 16]))
    d_model = heads * int(rng.choice([32, 64]))
    return (layers, heads, 1, d_model, randint(rng, 128, 2048), batch, 2)


_KV_CASES = [
    # 1 byte, and 16 heads: each mistake below multiplies this case by its own factor (with 8
    # heads, d_model per head and the answer in bits would both be 8 times the bytes)
    Case(
        "3 layers, 16 heads, 16 key/value heads, d_model 64, 100 positions, batch 1, "
        "1 byte (an 8-bit cache)",
        lambda: (3, 16, 16, 64, 100, 1, 1),
        "Each layer stores one key and one value vector of d_head = d_model / n_heads numbers "
        "per key/value head and position, each number bytes_per_element bytes.",
        draw=lambda rng: _draw_kv(rng, "mha"),
    ),
    Case(  # not the pen-and-paper part's numbers: a wrong answer's verdict would print them
        "28 layers, 28 heads, 4 key/value heads, d_model 3584, 8192 positions, batch 1, 2 bytes",
        lambda: (28, 28, 4, 3584, 8192, 1, 2),
        "With grouped-query attention only the n_kv_heads key/value heads are cached.",
        draw=lambda rng: _draw_kv(rng, "gqa"),
    ),
    Case(
        "12 layers, 12 heads, 1 key/value head, d_model 768, 1024 positions, batch 8, 2 bytes",
        lambda: (12, 12, 1, 768, 1024, 8, 2),
        "Every sequence of the batch has its own cache.",
        draw=lambda rng: _draw_kv(rng, "mqa"),
    ),
]

_KV_MISTAKES = [
    Mistake(  # before the keys only: on a 2-byte case the two halve the bytes alike
        "the number of elements, not of bytes (bytes_per_element left out)",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, b, 1),
        "Each number takes bytes_per_element bytes: multiply by it.",
    ),
    Mistake(
        "bytes_per_element fixed at 2 (16-bit numbers)",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, b, 2),
        "Use the bytes_per_element argument: the same cache takes half as much memory in 8 "
        "bits as in 16, and twice as much in float32.",
    ),
    Mistake(
        "bytes_per_element fixed at 4 (float32)",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, b, 4),
        "Use the bytes_per_element argument: the same cache takes half as much memory in 16 "
        "bits as in float32.",
    ),
    Mistake(
        "the keys only (no factor 2 for the values)",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, b, e) // 2,
        "The cache holds keys and values: two tensors per layer.",
    ),
    Mistake(  # d_model / n_kv_heads as d_head gives the same number: 2 L B S d_model e
        "n_heads instead of n_kv_heads (or d_head taken as d_model / n_kv_heads)",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_h, d, s, b, e),
        "Under grouped-query attention the query heads share n_kv_heads key/value heads; "
        "only those are computed and cached. Each is as wide as a query head, d_head = "
        "d_model / n_heads, so a layer caches n_kv_heads * d_head numbers per position for "
        "the keys: d_model only when n_kv_heads = n_heads.",
    ),
    Mistake(
        "d_model per key/value head instead of d_head",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, b, e) * n_h,
        "Each head's key is d_head = d_model / n_heads numbers wide.",
    ),
    Mistake(
        "the size in bits instead of bytes (times 8)",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, b, e) * 8,
        "bytes_per_element already counts bytes, and the exercise asks for bytes: a factor 8 "
        "turns them into bits. Leave it out.",
    ),
    Mistake(
        "one layer's cache instead of all layers'",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(1, n_h, n_kv, d, s, b, e),
        "Every layer attends, so every layer keeps its own keys and values.",
    ),
    Mistake(
        "the batch size left out",
        lambda n_l, n_h, n_kv, d, s, b, e: _kv_cache_bytes(n_l, n_h, n_kv, d, s, 1, e),
        "Every sequence of the batch has its own cache.",
    ),
]


def check_kv_cache_bytes(fn: Callable[..., int]) -> Verdict:
    """Check ``fn(n_layers, n_heads, n_kv_heads, d_model, seq_len, batch_size, bytes_per_element)``.

    The answer is the number of bytes of a key-value cache holding ``seq_len``
    positions of every sequence of the batch, with grouped-query attention's
    ``n_kv_heads`` key/value heads of width ``d_head = d_model // n_heads`` and
    ``bytes_per_element`` bytes a number. The checker names the usual slips (the values,
    the layers, the batch or the bytes left out, ``n_heads`` for ``n_kv_heads``).
    """
    return run_cases(
        "kv_cache_bytes", fn, _kv_cache_bytes, _KV_CASES, rtol=0.0, atol=0.5, mistakes=_KV_MISTAKES
    )
