"""Masks: which keys each query may attend to.

Introduced in chapter 6 (``chapters/06_masking.ipynb``) and used by every later
chapter. A mask removes (query, key) pairs *before* the softmax, so the removed
keys get weight exactly 0 and the remaining weights still sum to 1.

**The convention of this package: ``True`` means *may attend*.** A boolean
mask ``mask[..., t, s]`` is ``True`` when query ``t`` may look at key ``s``.
PyTorch's ``F.scaled_dot_product_attention`` uses the same convention, but
``nn.MultiheadAttention`` (and ``nn.Transformer*``) read a boolean
``attn_mask`` or ``key_padding_mask`` the *opposite* way: there ``True`` means
*blocked*. :func:`to_mha_mask` converts ours to theirs.

A mask may also be *additive*: a float tensor added to the scores, ``0`` where
attention is allowed and ``-inf`` where it is blocked (:func:`mask_to_additive`
turns a boolean mask into one). Both kinds mean the same thing to
:func:`apply_mask`, :func:`masked_softmax` and
:func:`attnbook.scaled_dot_product_attention`.

**A query that may attend to nothing** (a row with no ``True``, or only
``-inf``) has no well-defined softmax (``0 / 0``). Here its weights are all 0,
so its attention output is a zero vector, never NaN. This happens for padded
*query* positions, whose outputs are thrown away anyway.

Shape legend used in this module:
    ``B`` batch, ``H`` heads, ``T`` query positions, ``S`` key positions,
    ``...`` any leading batch dimensions. A mask needs only to *broadcast* to
    the scores' shape ``(..., T, S)``: a ``(T, S)`` mask is shared by the whole
    batch, a ``(B, 1, S)`` mask by all queries of one sequence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from attnbook._validation import check_bool, check_int, check_mask, check_where, shape_str

__all__ = [
    "apply_mask",
    "causal_mask",
    "combine_masks",
    "mask_to_additive",
    "masked_softmax",
    "padding_mask",
    "sliding_window_mask",
    "strided_mask",
    "to_mha_mask",
]


def _check_bool_mask(mask: object, name: str = "mask") -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        kind = "a NumPy array" if isinstance(mask, np.ndarray) else type(mask).__name__
        raise ValueError(
            f"{name} must be a boolean torch tensor (True = may attend), got {kind}; "
            "this function expects torch tensors"
        )
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype} "
            f"(shape {shape_str(mask)}); for a 0/1 tensor use {name}.bool()"
        )
    return mask


def causal_mask(
    seq_len: int, key_len: int | None = None, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The mask of a left-to-right model: each query may attend to its own and earlier positions.

    A language model predicts token ``t + 1`` from tokens ``0..t``; if position
    ``t`` could look at later positions it would copy the answer instead of
    learning to predict it.

    With ``key_len = S`` different from ``seq_len = T`` the mask is *rectangular*
    and aligned **bottom-right**: the ``T`` queries are the *last* ``T``
    positions of the ``S`` keys, so query ``t`` sits at position ``t + S - T``
    and may attend to keys ``0..t + S - T``; the last query sees every key.
    This is what generation with a key-value cache needs: ``T`` new tokens
    attend to the ``S - T`` cached ones and to each other, causally. (PyTorch's
    own ``F.scaled_dot_product_attention(..., is_causal=True)`` aligns the
    other way, top-left, when ``T != S``: its query ``t`` sees keys ``0..t``.
    Both agree when ``T == S``.) If ``T > S``, the first ``T - S`` queries may
    attend to nothing; :func:`masked_softmax` gives them all-zero weights.

    Example, ``causal_mask(2, 4)`` (two new queries after two cached keys)::

        [[ True,  True,  True, False],
         [ True,  True,  True,  True]]

    Args:
        seq_len: ``T``, the number of queries.
        key_len: ``S``, the number of keys (default: ``T``, a square mask).
        device: where to create the mask (default: the CPU).

    Returns:
        Boolean tensor of shape ``(T, S)``, ``True`` where ``s <= t + S - T``
        (on and below the diagonal when ``T == S``). It broadcasts against
        scores ``(..., T, S)``.
    """
    seq_len = check_int(seq_len, "seq_len")
    key_len = seq_len if key_len is None else check_int(key_len, "key_len")
    device = check_where(device)
    ones = torch.ones(seq_len, key_len, dtype=torch.bool, device=device)  # (T, S)
    return ones.tril(diagonal=key_len - seq_len)  # (T, S), True where s <= t + S - T


def padding_mask(
    lengths: Sequence[int] | torch.Tensor | np.ndarray,
    max_len: int | None = None,
    *,
    per_head: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The mask of a padded batch: no query may attend to a padding key.

    Sequences of different lengths are padded to a common length ``S`` so they
    fit in one tensor; the padding is not data, so its keys must get weight 0.

    Args:
        lengths: shape ``(B,)``, the true length of each sequence, each in ``[0, max_len]``.
        max_len: ``S >= 1``, the padded length (default: the largest length, which
            must then be >= 1).
        per_head: return ``(B, 1, 1, S)`` instead of ``(B, 1, S)``, for scores
            with a head axis ``(B, H, T, S)``.
        device: where to create the mask (default: ``lengths``' device, else the CPU).

    Returns:
        Boolean tensor, ``True`` at real keys ``s < lengths[b]``, of shape
        ``(B, 1, S)``: it broadcasts against single-head scores ``(B, T, S)``
        (the ``1`` is shared by all ``T`` queries). For multi-head scores
        ``(B, H, T, S)`` pass ``per_head=True`` (or index ``[:, None]``) to get
        ``(B, 1, 1, S)``; aligning ``(B, 1, S)`` from the right against
        ``(B, H, T, S)`` would put ``B`` on the head axis: :func:`apply_mask`
        rejects that when ``H != B``, but when ``H == B`` it broadcasts without
        error and masks the wrong rows (chapter 6 shows it), so choose the
        shape deliberately.
    """
    device = check_where(device)
    if isinstance(lengths, torch.Tensor):
        device = lengths.device if device is None else device
        if (
            lengths.dtype.is_floating_point
            or lengths.dtype.is_complex
            or lengths.dtype == torch.bool
        ):
            raise ValueError(f"lengths must hold integers, got dtype {lengths.dtype}")
        lens = lengths.to(device=device, dtype=torch.long)
    else:
        try:
            arr = np.asarray(lengths)
        except (TypeError, ValueError):  # ragged: e.g. a list of token lists, not of lengths
            raise ValueError(
                "lengths must be a sequence of ints of shape (B,), one length per sequence, got "
                f"a {type(lengths).__name__} NumPy cannot make one array of (lists of tokens? "
                "pass [len(s) for s in sequences])"
            ) from None
        if arr.size == 0:  # np.asarray([]) is float64: say what is wrong, not the dtype
            raise ValueError(f"lengths must have shape (B,) with B >= 1, got shape {arr.shape}")
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"lengths must be a sequence of ints of shape (B,), got dtype {arr.dtype}"
            )
        lens = torch.as_tensor(arr, dtype=torch.long, device=device)
    if lens.ndim != 1 or lens.numel() == 0:
        raise ValueError(f"lengths must have shape (B,) with B >= 1, got shape {shape_str(lens)}")
    if bool((lens < 0).any()):
        raise ValueError(f"lengths must be >= 0, got {lens.tolist()}")
    if max_len is None:
        max_len = int(lens.max())
        if max_len == 0:  # say so: the message below would name a max_len nobody passed
            raise ValueError(
                f"lengths are all 0, got {lens.tolist()}, so the default max_len (the largest "
                "length) would be 0; pass max_len, the padded length S >= 1"
            )
    max_len = check_int(max_len, "max_len")
    if bool((lens > max_len).any()):
        raise ValueError(
            f"every length must be <= max_len = {max_len}, got lengths {lens.tolist()}"
        )
    positions = torch.arange(max_len, device=lens.device)  # (S,)
    mask = positions[None, :] < lens[:, None]  # (1, S) < (B, 1) -> (B, S)
    if check_bool(per_head, "per_head"):
        return mask[:, None, None, :]  # (B, 1, 1, S)
    return mask[:, None, :]  # (B, 1, S)


def combine_masks(*masks: torch.Tensor) -> torch.Tensor:
    """Combine boolean masks: a pair may be attended to only if *every* mask allows it.

    A decoder over a padded batch needs both rules at once: no peeking ahead
    (causal) and no looking at padding. With ``True`` = may attend, that is a
    logical AND.

    Args:
        *masks: one or more boolean tensors whose shapes broadcast, e.g. a causal
            ``(T, T)`` and a padding ``(B, 1, T)``.

    Returns:
        Boolean tensor of the broadcast shape, e.g. ``(B, T, T)``.
    """
    if not masks:
        raise ValueError("combine_masks needs at least one mask, got none")
    checked = [_check_bool_mask(m, f"masks[{i}]") for i, m in enumerate(masks)]
    try:
        torch.broadcast_shapes(*(m.shape for m in checked))
    except RuntimeError:
        shapes = ", ".join(shape_str(m) for m in checked)
        raise ValueError(
            f"masks of shapes {shapes} do not broadcast; align them from the right, with "
            "a 1 wherever a mask is shared (e.g. (T, S) and (B, 1, S))"
        ) from None
    combined = checked[0]
    for m in checked[1:]:
        combined = combined & m  # broadcasts, e.g. (T, S) & (B, 1, S) -> (B, T, S)
    return combined


def mask_to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Turn a boolean mask into an additive one: ``True -> 0``, ``False -> -inf``.

    Adding ``-inf`` to a score sends its ``exp`` to exactly 0; adding ``0``
    changes nothing. An additive mask can also carry soft biases (any finite
    number), which a boolean mask cannot.

    Args:
        mask: boolean tensor, ``True`` = may attend, any shape.
        dtype: the floating dtype of the result (use the scores' dtype).

    Returns:
        Float tensor of ``mask``'s shape holding ``0.0`` and ``-inf``.
    """
    mask = _check_bool_mask(mask)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def to_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """Convert a mask of this package (``True`` = may attend) to ``nn.MultiheadAttention``'s.

    ``nn.MultiheadAttention`` and ``nn.Transformer*`` read a boolean
    ``attn_mask`` or ``key_padding_mask`` the opposite way: ``True`` means
    *blocked*. Passing our mask unconverted silently attends to exactly the
    wrong keys. (``F.scaled_dot_product_attention`` shares our convention: do
    not convert for it.)

    Example::

        attn_mask = to_mha_mask(causal_mask(T))                    # (T, T)
        key_padding_mask = to_mha_mask(padding_mask(lengths, S)[:, 0])  # (B, S)
        mha(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask)

    Args:
        mask: boolean tensor, ``True`` = may attend, any shape.

    Returns:
        ``~mask``: boolean tensor of the same shape, ``True`` = blocked.
    """
    return ~_check_bool_mask(mask)


def apply_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Block the pairs a mask forbids by setting their scores to ``-inf``.

    Masking the *scores* (not the weights) is what keeps the softmax honest: the
    blocked keys get ``exp(-inf) = 0`` and the allowed ones still sum to 1.
    Setting a score to ``0`` instead would not block anything: ``exp(0) = 1``.

    Args:
        scores: shape ``(..., T, S)``, floating point.
        mask: ``None`` (no masking), a boolean tensor (``True`` = may attend) or an
            additive float tensor (added to the scores), broadcastable to ``(..., T, S)``.

    Returns:
        Masked scores of shape ``(..., T, S)`` and ``scores``' dtype.
    """
    if not isinstance(scores, torch.Tensor) or not torch.is_floating_point(scores):
        got = scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a floating-point torch tensor (..., T, S), got {got}")
    if scores.ndim < 2:
        raise ValueError(f"scores must have shape (..., T, S), got {shape_str(scores)}")
    if mask is None:
        return scores
    mask = check_mask(mask, tuple(scores.shape), dtype=scores.dtype)
    if mask.dtype == torch.bool:
        return scores.masked_fill(~mask, float("-inf"))  # (..., T, S)
    return scores + mask  # (..., T, S) + (broadcast to ..., T, S)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the keys after masking, with zero weights for a query that may attend to nothing.

    The plain softmax of a row that is entirely ``-inf`` is ``0 / 0 = NaN``, and
    one NaN spreads through every later layer. Here such a row gets weights 0
    (and so a zero attention output); every other row is the ordinary softmax.

    Args:
        scores: shape ``(..., T, S)``, floating point.
        mask: optional boolean (``True`` = may attend) or additive mask,
            broadcastable to ``(..., T, S)``. An additive mask is added in the
            scores' dtype, where a finite value below its lowest number
            (``-1e9`` in float16) becomes ``-inf`` and blocks.

    Returns:
        ``weights`` of shape ``(..., T, S)``: each row sums to 1, except rows
        with no allowed key, which are all 0. Blocked pairs get exactly 0.
    """
    scores = apply_mask(scores, mask)  # (..., T, S)
    if not bool((scores < math.inf).all()):  # one pass: NaN (it compares False) and +inf
        raise ValueError(
            "scores must hold finite numbers or -inf where the mask allows a key, but they "
            "contain NaN or +inf (a NaN would pass for a blocked key, and +inf has no softmax)"
        )
    return softmax_with_mask(scores, scores > -math.inf)  # a key is allowed if its score is finite


def empty_rows(mask: torch.Tensor) -> torch.Tensor | None:
    """``(..., T or 1, 1)``: True where a row of ``mask`` allows no key; ``None`` if none does.

    Unchecked, for the package's own use (:func:`softmax_with_mask`, the fused
    path of :mod:`attnbook.attention`). One reduction over the mask, not over
    the scores. Asking whether any row is empty is free on the CPU; on an
    accelerator it would wait for the device (a sync per call), so there the
    rows are always returned and the fix-up, cheap and correct either way,
    always runs.
    """
    if mask.dtype == torch.bool:
        allowed = mask.any(dim=-1, keepdim=True)  # (..., T or 1, 1)
    else:
        allowed = mask.amax(dim=-1, keepdim=True) > -math.inf  # (..., T or 1, 1)
    if allowed.device.type == "cpu" and bool(allowed.all()):
        return None
    return ~allowed


def softmax_with_mask(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The package's one masked softmax: blocked keys get weight 0, a row with no key all 0.

    Unchecked, for the package's own use: :func:`masked_softmax` checks its
    arguments and calls this, and so does attention. ``mask`` is ``None``, a
    boolean (``True`` = may attend) or an additive mask that broadcasts to
    ``scores`` ``(..., T, S)``. A row whose mask allows no key would be
    ``softmax(-inf, ..., -inf) = 0 / 0 = NaN``; its scores are set to 0 first
    (a uniform softmax, no NaN in the gradients either), then its weights to 0.
    16-bit scores are softmaxed in float32 and rounded once.
    """
    empty = None
    if mask is not None:
        empty = empty_rows(mask)  # (..., T or 1, 1), or None
        boolean = mask.dtype == torch.bool  # else additive: 0 keeps, -inf blocks
        scores = scores.masked_fill(~mask, -math.inf) if boolean else scores + mask  # (..., T, S)
        if empty is not None:
            scores = scores.masked_fill(empty, 0.0)  # no allowed key: a harmless uniform row
    if scores.element_size() < 4:
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    else:
        weights = torch.softmax(scores, dim=-1)  # (..., T, S), each row sums to 1
    return weights if empty is None else weights.masked_fill(empty, 0.0)


# --------------------------------------------------------------------- sparse patterns (chapter 14)


def sliding_window_mask(
    seq_len: int,
    window: int,
    *,
    key_len: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """A local causal mask: each query may attend to itself and the ``window - 1`` keys before it.

    Full attention scores ``T * S`` pairs; a sliding window scores at most
    ``T * window``, linear in the length (Longformer's local attention,
    Mistral's sliding window). Information from further back still arrives,
    through the layers: after ``L`` layers a position can depend on the
    ``L * (window - 1)`` positions before it (chapter 14 draws it).

    Aligned bottom-right like :func:`causal_mask`: with ``key_len = S``, query
    ``t`` sits at position ``p = t + S - T`` and may attend to keys
    ``max(0, p - window + 1) .. p``. ``window >= S`` gives the causal mask.

    Example, ``sliding_window_mask(5, 2)``::

        [[ True, False, False, False, False],
         [ True,  True, False, False, False],
         [False,  True,  True, False, False],
         [False, False,  True,  True, False],
         [False, False, False,  True,  True]]

    Args:
        seq_len: ``T``, the number of queries.
        window: how many keys each query may see, itself included (``>= 1``).
        key_len: ``S``, the number of keys (default: ``T``, a square mask).
        device: where to create the mask (default: the CPU).

    Returns:
        Boolean tensor of shape ``(T, S)``, ``True`` where
        ``0 <= t + S - T - s < window``.
    """
    seq_len = check_int(seq_len, "seq_len")
    window = check_int(window, "window")
    key_len = seq_len if key_len is None else check_int(key_len, "key_len")
    device = check_where(device)
    position = torch.arange(seq_len, device=device)[:, None] + (key_len - seq_len)  # (T, 1)
    distance = position - torch.arange(key_len, device=device)[None, :]  # (T, 1) - (1, S) -> (T, S)
    return (distance >= 0) & (distance < window)  # (T, S)


def strided_mask(
    seq_len: int, stride: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The strided sparse pattern of Child et al. (2019): local keys, plus every ``stride``-th one.

    Query ``t`` may attend to key ``s <= t`` when ``t - s < stride`` (the
    previous ``stride`` positions, itself included) or when ``(t - s)`` is a
    multiple of ``stride`` (one key per stride, back to the start). With
    ``stride`` near ``sqrt(T)`` query ``t`` scores about ``sqrt(T) + t / sqrt(T)``
    keys (up to ``2 sqrt(T)`` for the last one), about ``1.5 T sqrt(T)`` pairs in
    all instead of ``T (T + 1) / 2``, and two layers suffice for any position to reach any
    earlier one: a strided hop lands within ``stride`` of the target, a local
    hop covers the rest.

    Example, ``strided_mask(6, 2)``::

        [[ True, False, False, False, False, False],
         [ True,  True, False, False, False, False],
         [ True,  True,  True, False, False, False],
         [False,  True,  True,  True, False, False],
         [ True, False,  True,  True,  True, False],
         [False,  True, False,  True,  True,  True]]

    Args:
        seq_len: ``T``, the number of positions (queries and keys).
        stride: ``>= 1``; ``stride = 1`` gives the causal mask.
        device: where to create the mask (default: the CPU).

    Returns:
        Boolean tensor of shape ``(T, T)``, ``True`` where ``s <= t`` and
        (``t - s < stride`` or ``(t - s) % stride == 0``).
    """
    seq_len = check_int(seq_len, "seq_len")
    stride = check_int(stride, "stride")
    device = check_where(device)
    positions = torch.arange(seq_len, device=device)  # (T,)
    distance = positions[:, None] - positions[None, :]  # (T, 1) - (1, T) -> (T, T)
    local = distance < stride  # (T, T)
    every_stride = distance % stride == 0  # (T, T)
    return (distance >= 0) & (local | every_stride)  # (T, T)
