"""How much does attnbook.MultiHeadAttention cost over the bare fused kernel? (chapters 7 and 9)

Usage:
    python benchmarks/attention_overhead.py [--rounds 30] [--threads N] [--device cpu]

The peer is what a minimal implementation writes: four ``nn.Linear(d_model,
d_model)`` maps around a bare ``F.scaled_dot_product_attention`` (with
``is_causal=True`` for the causal rows), holding the same weights as the module.
Against it:

- ``forward()``: ``MultiHeadAttention.forward(x, x, x, need_weights=False)``,
  the public call, which checks its inputs on every call;
- ``forward(validate=False)``: the same call with ``validate=False``, the
  same maths without the checks, which is what the transformer blocks call in
  every layer (a model checks its input once).

Shapes ``(B, T, d_model, heads)`` = ``(32, 64, 128, 4)`` and ``(8, 256, 256, 4)``,
self-attention, without and with the causal rule, timed as a forward pass in
``torch.no_grad()`` and as a forward plus backward pass (gradients of the
input and of every weight, as in training). The target is a ratio within 1.1x.

Every call of every row is timed in interleaved rounds (one call of each row
per round, after warm-up calls), so a burst of load from another program slows
all rows of a round alike. The table reports each row's median time and the
median of its per-round ratio to the peer of the same round, with the 25th and
75th percentiles of that ratio as its spread (``_common.quartiles``). Timings
depend on the machine, its load and the thread count, which is why this is a
benchmark and not a test:
it asserts nothing about speed and exits 0. The load average printed before and
after says how busy the machine was. On a machine shared with other programs,
``--threads 1`` gives steadier figures: with more threads than free cores, every
parallel operation waits for its slowest thread, which rewards whichever row
launches fewer operations (the module's single stacked Q/K/V multiply) far
more than an idle machine would.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    int_at_least,
    interleaved_rounds,
    load_average,
    quartiles,
)
from torch import nn

import attnbook

WARMUP = 5  # untimed calls per row before timing: allocations, lazy initialisation
SHAPES = [(32, 64, 128, 4), (8, 256, 256, 4)]  # (B, T, d_model, heads)


class BareAttention(nn.Module):
    """The peer: four linear maps around PyTorch's fused kernel, nothing else."""

    def __init__(self, mha: attnbook.MultiHeadAttention) -> None:
        super().__init__()
        self.n_heads = mha.n_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(mha.d_model, mha.d_model) for _ in range(4)
        )
        # The same weights as the module. Its W_Q, W_K, W_V are row blocks of one stacked
        # in_proj, so its state_dict has other keys; q_proj, k_proj, v_proj are views of them.
        ours = (self.q_proj, self.k_proj, self.v_proj, self.out_proj)
        theirs = (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj)
        with torch.no_grad():
            for linear, source in zip(ours, theirs):
                linear.weight.copy_(source.weight)  # (D, D)
                linear.bias.copy_(source.bias)  # (D,)

    def forward(self, x: torch.Tensor, is_causal: bool) -> torch.Tensor:
        B, T, D = x.shape
        H = self.n_heads
        q = self.q_proj(x).view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k_proj(x).view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        v = self.v_proj(x).view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # (B, H, T, Dh)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, D))  # (B, T, D)


Row = tuple[str, Callable[[], object]]


def make_rows(
    mha: attnbook.MultiHeadAttention,
    bare: BareAttention,
    x: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool,
) -> tuple[list[Row], list[Row]]:
    """The rows (peer, ``forward()``, ``forward(validate=False)``), as fwd and as fwd+bwd calls."""
    x_grad = x.clone().requires_grad_(True)  # (B, T, D); its gradient is computed, as in a model
    calls: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = [
        ("peer (4 Linear + F.sdpa)", lambda z: bare(z, is_causal)),
        ("forward()", lambda z: mha(z, z, z, need_weights=False, is_causal=is_causal)[0]),
        (
            "forward(validate=False)",
            lambda z: mha(z, z, z, is_causal=is_causal, validate=False)[0],
        ),
    ]

    def forward_of(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        return lambda: fn(x)

    def backward_of(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        def step() -> None:
            mha.zero_grad(set_to_none=True)
            bare.zero_grad(set_to_none=True)
            x_grad.grad = None
            fn(x_grad).backward(grad_out)

        return step

    forward_rows = [(name, forward_of(fn)) for name, fn in calls]
    backward_rows = [(name, backward_of(fn)) for name, fn in calls]
    return forward_rows, backward_rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    add_rounds_option(parser, 30, "timed rounds per table, at least 4", type=int_at_least(4))
    parser.add_argument(
        "--threads", type=int_at_least(0), default=0, help="CPU threads (0: torch's default)"
    )
    add_device_option(parser, default="cpu")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe(device))
    print(
        f"{args.rounds} interleaved rounds after {WARMUP} warm-up calls per row; "
        "ratio = time / peer's time in the same round: median [25th, 75th percentile]"
    )
    print()
    header = f"{'B, T, D, H':<16} {'causal':<7} {'pass':<9} {'row':<23} {'median ms':>10}"
    print(f"{header} {'ratio':>7}  spread")
    for B, T, D, H in SHAPES:
        attnbook.set_seed(0)
        mha = attnbook.MultiHeadAttention(D, H).to(device).eval()
        bare = BareAttention(mha).to(device).eval()
        x = torch.randn(B, T, D, device=device)  # (B, T, D)
        grad_out = torch.randn(B, T, D, device=device)  # (B, T, D)
        for is_causal in (False, True):
            with torch.no_grad():  # the peer computes the same function as the module
                torch.testing.assert_close(
                    bare(x, is_causal), mha(x, x, x, is_causal=is_causal)[0], rtol=1e-4, atol=1e-5
                )
            forward_rows, backward_rows = make_rows(mha, bare, x, grad_out, is_causal)
            for pass_name, rows in (("fwd", forward_rows), ("fwd+bwd", backward_rows)):
                fns = [fn for _, fn in rows]
                with torch.no_grad() if pass_name == "fwd" else contextlib.nullcontext():
                    times = interleaved_rounds(fns, args.rounds, device, warmup=WARMUP)
                for (name, _), row_times in zip(rows, times):
                    ratios = [t / p for t, p in zip(row_times, times[0])]
                    q1, q2, q3 = quartiles(ratios)
                    label = f"{B}, {T}, {D}, {H}"
                    line = f"{label:<16} {is_causal!s:<7} {pass_name:<9} {name:<23} "
                    line += f"{statistics.median(row_times) * 1e3:>10.3f}"
                    spread = "" if row_times is times[0] else f"[{q1:.2f}, {q3:.2f}]"
                    print(f"{line} {q2:>6.2f}x  {spread}")
        print()
    print(f"load average (1, 5, 15 min) after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
