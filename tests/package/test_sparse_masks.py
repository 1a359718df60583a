"""Sparse attention patterns as masks (chapter 14): sliding window and strided."""

from __future__ import annotations

import pytest
import torch

import attnbook
from attnbook import causal_mask, sliding_window_mask, strided_mask


def _window_by_loops(n_queries: int, window: int, n_keys: int) -> torch.Tensor:
    mask = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    for t in range(n_queries):
        position = t + n_keys - n_queries  # bottom-right alignment
        for s in range(n_keys):
            mask[t, s] = 0 <= position - s < window
    return mask


def _strided_by_loops(seq_len: int, stride: int) -> torch.Tensor:
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for t in range(seq_len):
        for s in range(t + 1):
            mask[t, s] = (t - s < stride) or ((t - s) % stride == 0)
    return mask


@pytest.mark.parametrize(
    ("n_queries", "window", "n_keys"),
    [(1, 1, None), (5, 2, None), (8, 3, None), (6, 10, None), (2, 2, 4), (3, 2, 7), (5, 3, 3)],
)
def test_sliding_window_matches_its_definition(n_queries, window, n_keys) -> None:
    mask = sliding_window_mask(n_queries, window, key_len=n_keys)
    expected = _window_by_loops(n_queries, window, n_queries if n_keys is None else n_keys)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected)


def test_sliding_window_docstring_example_and_counts() -> None:
    assert sliding_window_mask(5, 2).int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 1, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 1, 1],
    ]
    for seq_len, window in [(16, 4), (100, 7), (9, 9)]:
        # row t sees min(t + 1, window) keys: window * T - window * (window - 1) / 2 in all
        assert int(sliding_window_mask(seq_len, window).sum()) == (
            window * seq_len - window * (window - 1) // 2
        )


def test_sliding_window_is_causal_and_wide_windows_are_causal_masks() -> None:
    for seq_len, n_keys in [(7, None), (3, 8), (6, 6)]:
        causal = causal_mask(seq_len, n_keys)
        window = sliding_window_mask(seq_len, 3, key_len=n_keys)
        assert not bool((window & ~causal).any())  # never the future
        assert torch.equal(sliding_window_mask(seq_len, 100, key_len=n_keys), causal)
    assert torch.equal(sliding_window_mask(4, 1), torch.eye(4, dtype=torch.bool))


def test_sliding_window_last_rows_agree_with_a_cache() -> None:
    """The last T rows of a square mask equal the rectangular mask of T new queries."""
    full = sliding_window_mask(10, 4)
    assert torch.equal(sliding_window_mask(3, 4, key_len=10), full[-3:])


@pytest.mark.parametrize(("seq_len", "stride"), [(1, 1), (6, 2), (16, 4), (17, 3), (5, 9)])
def test_strided_matches_its_definition(seq_len, stride) -> None:
    mask = strided_mask(seq_len, stride)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, _strided_by_loops(seq_len, stride))


def test_strided_special_cases_and_two_hops() -> None:
    assert torch.equal(strided_mask(9, 1), causal_mask(9))  # every key is a multiple of 1
    assert torch.equal(strided_mask(5, 5), causal_mask(5))  # the local part covers everything
    for seq_len, stride in [(16, 4), (30, 5), (20, 3)]:
        mask = strided_mask(seq_len, stride)
        assert not bool((mask & ~causal_mask(seq_len)).any())
        assert int(mask.sum()) < int(causal_mask(seq_len).sum())
        reach = (mask.int() @ mask.int()) > 0  # two layers
        assert torch.equal(reach, causal_mask(seq_len))  # every earlier key is reachable
        # one layer of a sliding window of the same width does not reach that far
        window = sliding_window_mask(seq_len, stride).int()
        assert not torch.equal((window @ window) > 0, causal_mask(seq_len))


def test_masks_work_with_attention() -> None:
    attnbook.set_seed(0)
    q, k, v = torch.randn(3, 2, 12, 8).unbind(0)
    for mask in (sliding_window_mask(12, 3), strided_mask(12, 4)):
        output, weights = attnbook.scaled_dot_product_attention(q, k, v, mask)
        assert torch.all(weights[..., ~mask] == 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 12))
        fused, _ = attnbook.scaled_dot_product_attention(q, k, v, mask, need_weights=False)
        torch.testing.assert_close(fused, output)


def test_masks_on_a_device() -> None:
    assert sliding_window_mask(3, 2, device="cpu").device.type == "cpu"
    assert strided_mask(3, 2, device="cpu").device.type == "cpu"


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: sliding_window_mask(0, 2), "seq_len"),
        (lambda: sliding_window_mask(4, 0), "window"),
        (lambda: sliding_window_mask(4, 2.0), "window"),
        (lambda: sliding_window_mask(4, True), "window"),
        (lambda: sliding_window_mask(4, 2, key_len=0), "key_len"),
        (lambda: strided_mask(0, 2), "seq_len"),
        (lambda: strided_mask(4, 0), "stride"),
        (lambda: strided_mask(4, "2"), "stride"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, name) -> None:
    with pytest.raises(ValueError, match=rf"^{name} must be an int >= 1"):
        call()
