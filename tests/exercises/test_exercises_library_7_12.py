"""Chapters 7-12: an answer that calls the library's equivalent of the exercise fails.

Issue 19: every exercise that has a library equivalent forbids it, as those of
chapters 1-6 do. The checkers of chapters 7-12 have no guard of their own, so
:func:`attnbook.exercises._framework.library_guard` watches the calls an answer
makes: the package's function, PyTorch's or SciPy's, its unchecked core
(``attnbook.attention.attend``), and a class whose ``__init__`` or ``forward``
computes the answer (``attnbook.FeedForward``, ``attnbook.GPT``,
``torch.distributions.Categorical``). Answers written by hand, which may build
plain ``nn.Linear`` layers, still pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from checker_asserts import assert_rejects
from torch import nn

import attnbook
from attnbook import exercises as ex
from attnbook.attention import attend
from attnbook.generation import KVCache
from attnbook.interpret import attention_rollout, head_entropy
from attnbook.positional import SinusoidalPositions
from attnbook.training import TrainConfig, lr_at

scipy_stats = pytest.importorskip("scipy.stats")


def _split(x: torch.Tensor, h: int) -> torch.Tensor:
    return x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)  # (B, H, T, Dh)


def _merge(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)  # (B, T, D)


def _mha_module(xq, xc, w_q, w_k, w_v, w_o, n_heads):
    module = attnbook.MultiHeadAttention(xq.shape[-1], n_heads, bias=False).double()
    with torch.no_grad():
        for linear, w in zip(
            (module.q_proj, module.k_proj, module.v_proj, module.out_proj), (w_q, w_k, w_v, w_o)
        ):
            linear.weight.copy_(w.T)
        return module(xq, xc, xc)[0]


def _mha_torch(xq, xc, w_q, w_k, w_v, w_o, n_heads):
    module = nn.MultiheadAttention(xq.shape[-1], n_heads, bias=False, batch_first=True).double()
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))
        module.out_proj.weight.copy_(w_o.T)
        return module(xq, xc, xc, need_weights=False)[0]


def _mha_core(core):
    def answer(xq, xc, w_q, w_k, w_v, w_o, n_heads):
        q, k, v = _split(xq @ w_q, n_heads), _split(xc @ w_k, n_heads), _split(xc @ w_v, n_heads)
        out = core(q, k, v)
        return _merge(out[0] if isinstance(out, tuple) else out) @ w_o

    return answer


def _ffn_module(x, w1, b1, w2, b2):
    module = attnbook.FeedForward(w1.shape[0], w1.shape[1]).double()
    with torch.no_grad():
        module.linear1.weight.copy_(w1.T)
        module.linear1.bias.copy_(b1)
        module.linear2.weight.copy_(w2.T)
        module.linear2.bias.copy_(b2)
    return module(x)


def _gpt(V, C, d, L, d_ff):
    return attnbook.GPT(attnbook.GPTConfig(V, C, d, 1, L, d_ff=d_ff))


@pytest.mark.parametrize(
    ("checker", "wrong", "name"),
    [
        (ex.check_multi_head_attention, _mha_module, "builds attnbook.MultiHeadAttention"),
        (ex.check_multi_head_attention, _mha_torch, "builds torch.nn.MultiheadAttention"),
        (ex.check_multi_head_attention, _mha_core(attend), ".attend"),
        (ex.check_multi_head_attention, _mha_core(F.scaled_dot_product_attention), "scaled_dot_product_attention"),
        (ex.check_multi_head_attention, _mha_core(attnbook.scaled_dot_product_attention), "attnbook.scaled_dot_product_attention"),
        (ex.check_sinusoidal_positional_encoding, lambda T, d: attnbook.sinusoidal_positional_encoding(T, d).double(), "sinusoidal_positional_encoding"),
        (ex.check_sinusoidal_positional_encoding, lambda T, d: SinusoidalPositions(T, d).table.double(), "sinusoidal_positional_encoding"),
        (ex.check_apply_rope, lambda x, p: attnbook.apply_rope(x, p), "attnbook.apply_rope"),
        (ex.check_feed_forward, _ffn_module, "builds attnbook.FeedForward"),
        (ex.check_gpt_num_parameters, lambda *a: _gpt(*a).num_parameters(), "builds attnbook.GPT"),
        (ex.check_gpt_num_parameters, lambda *a: sum(p.numel() for p in _gpt(*a).parameters()), "builds attnbook.GPT"),
        (ex.check_lr_schedule, lambda s, hi, lo, w, n: lr_at(s, TrainConfig(lr=hi, min_lr_ratio=lo / hi, warmup_steps=w, steps=n)), "lr_at"),
        (ex.check_head_entropy, lambda w: head_entropy(w), "attnbook.head_entropy"),
        (ex.check_head_entropy, lambda w: torch.distributions.Categorical(probs=w).entropy().mean(-1), "builds torch.distributions.Categorical"),
        (ex.check_head_entropy, lambda w: torch.from_numpy(scipy_stats.entropy(w.numpy(), axis=-1)).mean(-1), "scipy.stats.entropy"),
        (ex.check_head_entropy, lambda w: torch.special.entr(w).sum(-1).mean(-1), "entr"),
        (ex.check_attention_rollout, lambda w, r: attention_rollout(list(w), residual=r), "attention_rollout"),
        (ex.check_sliding_window_mask, lambda T, w: attnbook.sliding_window_mask(T, w), "sliding_window_mask"),
        (ex.check_kv_cache_bytes, lambda *a: KVCache(a[0]).nbytes, "builds attnbook.KVCache"),
    ],
)  # fmt: skip
def test_calling_the_library_fails(checker: Callable, wrong: Callable, name: str) -> None:
    verdict = checker(wrong)
    assert_rejects(verdict, "case 1/")
    assert "asks you to write yourself" in verdict.message, verdict.message
    told = verdict.message.split("which this exercise")[0]
    assert name in told, verdict.message
    # a class is built before it runs: the verdict says so, and "calls" for a function
    assert ("builds " in told) == name.startswith("builds "), verdict.message
    assert ("calls " in told) != name.startswith("builds "), verdict.message


def test_answers_that_build_plain_layers_pass() -> None:
    # nn.Module.__init__ and nn.Linear are building blocks, not the exercise's answer. (The
    # layers run with the given weights, not copies of them: copies made under no_grad would
    # cut the weights from autograd, which the checker refuses.)
    def ffn_with_linear_layers(x, w1, b1, w2, b2):
        first, second = nn.Linear(*w1.shape).double(), nn.Linear(*w2.shape).double()
        hidden = torch.func.functional_call(first, {"weight": w1.T, "bias": b1}, (x,))
        return torch.func.functional_call(second, {"weight": w2.T, "bias": b2}, (F.gelu(hidden),))

    assert ex.check_feed_forward(ffn_with_linear_layers)

    def mha_by_hand(xq, xc, w_q, w_k, w_v, w_o, n_heads):
        q, k, v = _split(xq @ w_q, n_heads), _split(xc @ w_k, n_heads), _split(xc @ w_v, n_heads)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return _merge(weights @ v) @ w_o

    assert ex.check_multi_head_attention(mha_by_hand)
    entropy = lambda w: -(w * torch.log(w.clamp_min(1e-300))).sum(-1).mean(-1)  # noqa: E731
    assert ex.check_head_entropy(entropy)
