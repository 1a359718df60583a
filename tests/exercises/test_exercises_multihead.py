"""The checkers of chapter 7 accept correct answers and reject typical wrong ones."""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from checker_asserts import assert_refuses_cut_answers, assert_rejects, stub

from attnbook import merge_heads, scaled_dot_product_attention, split_heads
from attnbook.exercises import check_merge_heads, check_multi_head_attention, check_split_heads
from attnbook.exercises.multihead import (
    _MERGE_CASES,
    _MERGE_MISTAKES,
    _MHA_CASES,
    _MHA_MISTAKES,
    _SPLIT_CASES,
    _SPLIT_MISTAKES,
    _mha_reference,
)

# ------------------------------------------------------- learners' answers


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d: int) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v


def _learner_split(x, h):  # a learner's own answer: the package's function is forbidden
    B, T, width = x.shape
    return x.view(B, T, h, width // h).transpose(1, 2)


def _learner_merge(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)


def _mha(
    xq,
    xc,
    w_q,
    w_k,
    w_v,
    w_o,
    n_heads,
    *,
    split=_learner_split,
    scale_width=None,
    merge=_learner_merge,
    out=True,
):
    q, k, v = split(xq @ w_q, n_heads), split(xc @ w_k, n_heads), split(xc @ w_v, n_heads)
    heads = _attend(q, k, v, scale_width or q.shape[-1])
    merged = merge(heads)
    return merged @ w_o if out else merged


# ------------------------------------------------------------------ split heads


@pytest.mark.parametrize(
    ("checker", "right", "position", "name", "failing_case"),
    [
        (check_split_heads, _learner_split, 0, "x", "'she likes coffee'"),
        (check_merge_heads, _learner_merge, 0, "heads", "B = 1, 2 heads"),
        (check_multi_head_attention, _mha, 5, "W_O", "one head"),
    ],
)
def test_multi_head_checkers_refuse_answers_cut_from_autograd(
    checker, right, position: int, name: str, failing_case: str
) -> None:
    """Every later model trains through multi-head attention and its two reshapes: the right
    numbers computed from a detached input, or copied out of the graph, are refused."""
    assert_refuses_cut_answers(checker, right, position, name, failing_case)


def test_split_and_merge_checkers_reject_the_package_functions() -> None:
    assert_rejects(check_split_heads(split_heads), "split_heads")
    assert_rejects(check_merge_heads(merge_heads), "merge_heads")


def test_split_heads_checker_accepts_correct_answers() -> None:
    verdict = check_split_heads(_learner_split)
    assert verdict, verdict.message
    assert "all 4 hidden cases pass" in verdict.message
    # reshape + permute, and einops-style unflatten, are just as right
    assert check_split_heads(lambda x, h: x.reshape(*x.shape[:2], h, -1).permute(0, 2, 1, 3))
    assert check_split_heads(lambda x, h: x.unflatten(-1, (h, -1)).transpose(1, 2))
    assert not check_split_heads(stub).attempted


@pytest.mark.parametrize(
    ("wrong", "failing_case", "mistake", "hint"),
    [
        # a plain view in memory order: no transpose
        (lambda x, h: x.view(x.shape[0], h, x.shape[1], x.shape[2] // h), "she likes coffee", "x read in memory order", "a head's rows are no longer the positions"),
        # interleaved heads: head h gets every n_heads-th feature
        (lambda x, h: x.view(*x.shape[:2], x.shape[2] // h, h).permute(0, 3, 1, 2), "she likes coffee", "every n_heads-th feature", "starting at h * d_head"),
        # transposing the wrong axes: (B, T, H, Dh) -> (B, T, Dh, H)
        (lambda x, h: x.view(*x.shape[:2], h, x.shape[2] // h).transpose(2, 3), "she likes coffee", "the head and feature axes", "(B, n_heads, T, d_head)"),
        # the right split, but the batch and head axes swapped
        (lambda x, h: x.view(*x.shape[:2], h, x.shape[2] // h).permute(2, 0, 1, 3), "she likes coffee", "the batch and head axes", "the batch axis stays first"),
        # forgetting the split altogether
        (lambda x, h: x, "she likes coffee", "x returned without a head axis", "still has x's shape"),
    ],
)  # fmt: skip
def test_split_heads_checker_names_typical_mistakes(
    wrong, failing_case: str, mistake: str, hint: str
) -> None:
    verdict = check_split_heads(wrong)
    assert_rejects(verdict, failing_case, mistake, named=hint)


def test_split_heads_checker_hints_at_the_property_when_no_mistake_is_known() -> None:
    # heads 0 and 1 exchanged: no named mistake, the case's hint says what to compare
    verdict = check_split_heads(lambda x, h: _learner_split(x, h).flip(1))
    assert_rejects(
        verdict, "she likes coffee", named="heads[0, h, t] must equal x[0, t, h * d_head"
    )


def test_the_split_and_merge_hints_name_the_mistake_not_the_code() -> None:
    """A hint names what is wrong and what to check (a shape, a comparison, a checker to
    run), not the line to write: none of the hints of chapter 7's three checkers spells out
    the reshapes of the answer."""
    hints = [case.hint for case in _SPLIT_CASES + _MERGE_CASES + _MHA_CASES]
    hints += [mistake.hint for mistake in _SPLIT_MISTAKES + _MERGE_MISTAKES + _MHA_MISTAKES]
    for hint in hints:
        for code in (".transpose(", ".view(B", ".permute(", "unsqueeze", "view x as"):
            assert code not in hint, hint


def test_split_heads_square_case_catches_what_hides_in_the_shape() -> None:
    # Right on every case where the shapes differ; the interleaved order only on the square one.
    def sneaky(x, h):
        if x.shape[1] == h == x.shape[2] // h:
            return x.view(*x.shape[:2], x.shape[2] // h, h).permute(0, 3, 1, 2)
        return _learner_split(x, h)

    assert_rejects(check_split_heads(sneaky), "square")


def test_split_heads_checker_refuses_a_list_of_tensors() -> None:
    # The right numbers, one (n_heads, T, d_head) tensor per sequence: NumPy would stack them
    # into the expected array, but merge_heads and the attention after it need one tensor.
    def per_sequence(x, h):
        return [_learner_split(x, h)[b] for b in range(x.shape[0])]

    verdict = check_split_heads(per_sequence)
    assert_rejects(verdict, "she likes coffee")
    assert "returned a list of 1 tensor, expected one tensor of shape (1, 2, 3, 2)" in (
        verdict.message
    )
    # A tuple of the heads, as torch.unbind gives, too.
    assert not check_split_heads(lambda x, h: _learner_split(x, h).unbind(0))


# ------------------------------------------------------------------ merge heads


def test_merge_heads_checker_accepts_correct_answers() -> None:
    verdict = check_merge_heads(_learner_merge)
    assert verdict, verdict.message
    assert check_merge_heads(lambda x: x.permute(0, 2, 1, 3).flatten(2))
    assert check_merge_heads(lambda x: torch.cat(list(x.unbind(1)), dim=-1))
    assert not check_merge_heads(stub).attempted


@pytest.mark.parametrize(
    ("wrong", "failing_case", "hint"),
    [
        # reshaping without moving the head axis first
        (lambda x: x.reshape(x.shape[0], x.shape[2], -1), "B = 1, 2 heads", "this looks like the heads read in memory order"),
        # averaging the heads instead of concatenating them
        (lambda x: x.mean(dim=1), "B = 1, 2 heads", "this looks like the heads averaged"),
        # summing them
        (lambda x: x.sum(dim=1), "B = 1, 2 heads", "this looks like the heads summed"),
        # concatenating along the positions
        (lambda x: torch.cat(list(x.unbind(1)), dim=1), "B = 1, 2 heads", "along the positions instead of the features"),
        # the heads in reverse order: no named mistake, the case's hint
        (lambda x: _learner_merge(x.flip(1)), "B = 1, 2 heads", "must equal heads[0, h, t]"),
        # .view after the transpose: it raises on a contiguous input (case 1's comes from a
        # split, so transposing it back happens to be contiguous)
        (lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1), "B = 2, 3 heads", ".contiguous().view"),
    ],
)  # fmt: skip
def test_merge_heads_checker_rejects_typical_mistakes(wrong, failing_case: str, hint: str) -> None:
    verdict = check_merge_heads(wrong)
    assert_rejects(verdict, failing_case)
    assert hint in verdict.message


def test_merge_heads_square_case() -> None:
    def sneaky(x):
        if x.shape[1] == x.shape[2] == x.shape[3]:
            return x.reshape(x.shape[0], x.shape[2], -1)
        return _learner_merge(x)

    assert_rejects(check_merge_heads(sneaky), "square")


# ------------------------------------------------------- multi-head attention


def test_multi_head_attention_checker_accepts_correct_answers() -> None:
    verdict = check_multi_head_attention(_mha)
    assert verdict, verdict.message
    assert "all 4 hidden cases pass" in verdict.message

    def as_a_sum_over_heads(xq, xc, w_q, w_k, w_v, w_o, n_heads):
        d_head = xq.shape[-1] // n_heads
        output = 0
        for h in range(n_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            head = _attend(xq @ w_q[:, cols], xc @ w_k[:, cols], xc @ w_v[:, cols], d_head)
            output = output + head @ w_o[cols, :]  # (B, T, Dh) @ (Dh, D)
        return output

    assert check_multi_head_attention(as_a_sum_over_heads)
    assert not check_multi_head_attention(stub).attempted


CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "07_multi_head_attention.ipynb"


def _chapter_functions(prefix: str = "") -> dict[str, Callable]:
    """Chapter 7's multi_head_loop and multi_head_batched, defined from the notebook's source
    in a namespace of their own, as a cell of the learner's kernel defines them; with a
    ``prefix`` before each name, a learner's copy of them under other names."""
    nb = nbformat.read(CHAPTER, as_version=4)
    wanted = {"multi_head_loop", "multi_head_batched"}
    namespace = {
        "math": math,
        "torch": torch,
        "scaled_dot_product_attention": scaled_dot_product_attention,
    }
    for cell in nb.cells:
        if cell.cell_type != "code" or "def multi_head_" not in cell.source:
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name in wanted:
                node.name = prefix + node.name
                exec(compile(ast.unparse(node), CHAPTER.name, "exec"), namespace)
    found = {name: namespace[prefix + name] for name in wanted}
    assert all(f.__code__.co_filename == CHAPTER.name for f in found.values())
    return found


@pytest.mark.parametrize("name", ["multi_head_batched", "multi_head_loop"])
def test_multi_head_attention_checker_refuses_the_chapters_own_functions(name: str) -> None:
    """The chapter's multi_head_batched computes the exercise's answer with PyTorch alone:
    calling it passed. Called in any way, it fails; the same code in a function of the
    learner's with another name passes."""
    chapters = _chapter_functions()[name]

    def my_multi_head_attention(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads):
        return chapters(x_query, x_context, W_Q, W_K, W_V, W_O, n_heads)

    aliased = chapters
    for answer in (my_multi_head_attention, chapters, lambda *a: aliased(*a)):
        verdict = check_multi_head_attention(answer)
        assert not verdict
        assert (
            f"case 1/4 (one head (n_heads = 1): chapter 5's attention, then W_O) calls {name}, "
            "the chapter's ready-made answer, which this exercise asks you to write yourself, "
            "from its weight matrices.\n   Hint: write the steps in a function of your own; "
            f"if {name} is a helper of yours, rename it."
        ) in verdict.message, verdict.message
    # multi_head_loop's copy still calls the package's attention: only the batched one passes
    copied = _chapter_functions(prefix="my_")["multi_head_batched"]
    verdict = check_multi_head_attention(functools.partial(copied))
    assert verdict, verdict.message


def _softmax_axis(dim: int):
    def attend(q, k, v, d):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=dim) @ v

    return attend


def _mha_with(attend, xq, xc, w_q, w_k, w_v, w_o, n_heads):
    """A learner's multi-head attention around their own attention step ``attend(q, k, v, d)``."""
    d_head = xq.shape[-1] // n_heads
    q, k, v = (_learner_split(t, n_heads) for t in (xq @ w_q, xc @ w_k, xc @ w_v))
    return _learner_merge(attend(q, k, v, d_head)) @ w_o


def _causal_attend(q, k, v, d):
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, T, S)
    blocked = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)  # key after the query
    return torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1) @ v


_no_view = lambda x, h: x.view(x.shape[0], h, x.shape[1], -1)  # noqa: E731
_no_view_merge = lambda x: x.reshape(x.shape[0], x.shape[2], -1)  # noqa: E731


@pytest.mark.parametrize(
    ("wrong", "failing_case", "mistake"),
    [
        # forgetting the output projection
        (lambda *a: _mha(*a, out=False), "one head", "forgetting the output projection W_O"),
        # no 1 / sqrt(d_head) at all
        (lambda *a: _mha_with(lambda q, k, v, d: torch.softmax(q @ k.transpose(-2, -1), -1) @ v, *a), "one head", "scores without the 1 / sqrt(d_head) scale"),
        # scaling by sqrt(d_model) instead of sqrt(d_head)
        (lambda *a: _mha(*a, scale_width=a[0].shape[-1]), "she likes coffee", "scaling by sqrt(d_model) instead of sqrt(d_head)"),
        # the softmax over the queries' axis
        (lambda *a: _mha_with(_softmax_axis(-2), *a), "one head", "the softmax over the wrong axis"),
        # splitting with a plain view, no transpose (and merging back the same way)
        (lambda *a: _mha(*a, split=_no_view, merge=_no_view_merge), "she likes coffee", "splitting (and merging) the heads without a transpose"),
        # only the split without a transpose, the merge right; and the other way round
        (lambda *a: _mha(*a, split=_no_view), "she likes coffee", "splitting the heads without a transpose (the merge is right)"),
        (lambda *a: _mha(*a, merge=_no_view_merge), "she likes coffee", "merging the heads without a transpose (the split is right)"),
        # nn.Linear's convention: F.linear(x, W) is x @ W.T
        (lambda xq, xc, w_q, w_k, w_v, w_o, h: F.linear(_learner_merge(_attend(*(_learner_split(F.linear(x, w), h) for x, w in ((xq, w_q), (xc, w_k), (xc, w_v))), xq.shape[-1] // h)), w_o), "one head", "the weight matrices used transposed"),
        # chapter 6's causal mask, which the exercise does not have
        (lambda *a: _mha_with(_causal_attend, *a), "one head", "a causal mask, which this exercise does not ask for"),
        # keys and values from the queries' input
        (lambda xq, xc, *rest: _mha(xq, xq, *rest), "cross-attention", "keys and values from x_query instead of x_context"),
    ],
)  # fmt: skip
def test_multi_head_attention_checker_names_each_known_mistake(
    wrong, failing_case: str, mistake: str
) -> None:
    verdict = check_multi_head_attention(wrong)
    assert_rejects(verdict, failing_case, mistake)
    assert "Did you forget W_O" not in verdict.message  # the old catch-all hint is gone


def test_multi_head_attention_scaled_by_the_number_of_queries_is_named() -> None:
    """Q.shape[2] after the split is T, not d_head; the first case's hint (chapter 5's
    attention, then W_O) did not say that the scale was off."""
    verdict = check_multi_head_attention(lambda *a: _mha(*a, scale_width=a[0].shape[1]))
    assert_rejects(verdict, "one head", "a scale of sqrt(T), the number of queries")


@pytest.mark.parametrize(
    ("wrong", "failing_case", "hint"),
    [
        # averaging the heads instead of concatenating them (then W_O does not fit: an error)
        (lambda *a: _mha(*a, merge=lambda x: x.mean(dim=1)), "she likes coffee", "instead of averaging"),
        # values from x_query (T != S: the shapes do not fit, an error with the hint)
        (lambda xq, xc, w_q, w_k, w_v, w_o, h: _learner_merge(_attend(_learner_split(xq @ w_q, h), _learner_split(xc @ w_k, h), _learner_split(xq @ w_v, h), xq.shape[-1] // h)) @ w_o, "cross-attention", "keys and values both"),
    ],
)  # fmt: skip
def test_multi_head_attention_checker_rejects_answers_that_raise(
    wrong, failing_case: str, hint: str
) -> None:
    verdict = check_multi_head_attention(wrong)
    assert_rejects(verdict, failing_case)
    assert hint in verdict.message


def test_each_known_mistake_differs_from_the_answer_on_some_case() -> None:
    # A mistake that equals the reference on every case could never be named.
    for mistake in _MHA_MISTAKES:
        differs = False
        for case in _MHA_CASES:
            args = case.make_args()
            if not torch.allclose(mistake.answer(*args), _mha_reference(*args)):
                differs = True
        assert differs, mistake.name


def test_scale_mistake_is_caught_on_the_wide_case_too() -> None:
    # Right everywhere except the wide case, where it scales by sqrt(d_model).
    def sneaky(*a):
        return _mha(*a, scale_width=a[0].shape[-1] if a[0].shape[-1] == 32 else None)

    assert_rejects(check_multi_head_attention(sneaky), "wide heads")


def test_reference_agrees_with_the_package_attention_per_head() -> None:
    # The reference's heads are the package's attention of column blocks of the projections.
    for case in _MHA_CASES:
        xq, xc, w_q, w_k, w_v, w_o, n_heads = case.make_args()
        d_head = xq.shape[-1] // n_heads
        heads = [
            scaled_dot_product_attention(
                xq @ w_q[:, h * d_head : (h + 1) * d_head],
                xc @ w_k[:, h * d_head : (h + 1) * d_head],
                xc @ w_v[:, h * d_head : (h + 1) * d_head],
            )[0]
            for h in range(n_heads)
        ]  # n_heads x (B, T, Dh)
        expected = torch.cat(heads, dim=-1) @ w_o
        torch.testing.assert_close(_mha_reference(xq, xc, w_q, w_k, w_v, w_o, n_heads), expected)


def test_reference_agrees_with_nn_multihead_attention() -> None:
    for case in _MHA_CASES:
        xq, xc, w_q, w_k, w_v, w_o, n_heads = case.make_args()
        D = xq.shape[-1]
        mha = torch.nn.MultiheadAttention(D, n_heads, bias=False, batch_first=True).double()
        with torch.no_grad():  # nn.Linear-style weights hold the transposes
            mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))
            mha.out_proj.weight.copy_(w_o.T)
            expected, _ = mha(xq, xc, xc, need_weights=False)
        torch.testing.assert_close(_mha_reference(xq, xc, w_q, w_k, w_v, w_o, n_heads), expected)
