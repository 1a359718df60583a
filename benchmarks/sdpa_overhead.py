"""What does attnbook.scaled_dot_product_attention cost over what it wraps? (chapters 4 and 6)

Usage:
    python benchmarks/sdpa_overhead.py [--threads 1] [--rounds 15] [--number 10] [--device cpu]

Two ratios per shape and kind of mask, on the same inputs in the same run:

- ``fused / bare``: the package's ``scaled_dot_product_attention(...,
  need_weights=False)`` (validation of every argument, the empty-row rule,
  ``is_causal`` aligned bottom-right) against a bare call of PyTorch's
  ``F.scaled_dot_product_attention`` with the same mask;
- ``weights / naive``: the package's ``need_weights=True`` path (which also
  returns the weights) against the naive lines it teaches::

      scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
      scores = scores.masked_fill(~mask, float("-inf"))     # when there is a mask
      weights = torch.softmax(scores, dim=-1); output = weights @ v

Kinds of mask: none; a boolean causal ``(T, T)`` mask; ``is_causal=True``
(bare: PyTorch's own flag); a key-padding mask ``(B, 1, 1, S)``; an additive
``(T, T)`` float mask.

Each round times every function once (``--number`` calls, interleaved, so a
burst of load from another program slows all of them alike; the order rotates
from round to round, so that no function always runs first) and records the
ratios of that round; the table shows their median over ``--rounds`` rounds,
with the 25th and 75th percentiles in brackets (``_common.quartiles``). On a
GPU every call is followed by a synchronisation. Timings depend on the machine,
its load and the thread count, printed first (with the load average before and
after): this is a benchmark, not a test, it asserts nothing about speed and
exits 0.
"""

from __future__ import annotations

import argparse
import math
import statistics

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
    positive_int,
    quartiles,
)

import attnbook

SHAPES = [(32, 4, 64, 32), (8, 4, 256, 64)]  # (B, H, T, d_k), T = S
WARMUP = 3  # untimed calls of each function first


def naive(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, S)
    if mask is not None:
        scores = (
            scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        )
    weights = torch.softmax(scores, dim=-1)  # (B, H, T, S)
    return weights @ v, weights  # (B, H, T, d_v)


def cases(
    shape: tuple[int, int, int, int], device: torch.device
) -> list[tuple[str, tuple, dict, dict]]:
    """(name, (q, k, v), keyword arguments of ours, of the bare kernel) for each kind of mask."""
    b, h, t, d = shape
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(b, h, t, d, generator=g).to(device) for _ in range(3))
    causal = attnbook.causal_mask(t, device=device)
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    padding = attnbook.padding_mask(lengths, t, per_head=True).to(device)  # (B, 1, 1, S)
    additive = attnbook.mask_to_additive(causal, q.dtype)
    return [
        ("no mask", (q, k, v), {}, {}),
        ("bool causal (T, T)", (q, k, v), {"mask": causal}, {"attn_mask": causal}),
        ("is_causal=True", (q, k, v), {"is_causal": True}, {"is_causal": True}),
        ("padding (B, 1, 1, S)", (q, k, v), {"mask": padding}, {"attn_mask": padding}),
        ("additive (T, T)", (q, k, v), {"mask": additive}, {"attn_mask": additive}),
    ]


def ratio_text(ratios: list[float]) -> str:
    """``"1.02x [0.98, 1.05]"``: the median of per-round ratios and their quartiles."""
    q1, q2, q3 = quartiles(ratios)
    return f"{q2:.2f}x [{q1:.2f}, {q3:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (CPU)")
    add_rounds_option(parser, 15, "timed rounds, at least 4", type=int_at_least(4))
    parser.add_argument("--number", type=positive_int, default=10, help="calls per timing")
    add_device_option(parser, default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = args.device
    print(describe(device))
    print(
        f"{args.rounds} interleaved rounds of {args.number} calls, after {WARMUP} warm-up calls; "
        "ratio: median of the per-round ratios [25th, 75th percentile]\n"
    )
    header = f"{'(B, H, T, d_k)':>18}  {'mask':<22}{'bare':>10}{'fused/bare':>24}"
    print(header + f"{'naive':>10}{'weights/naive':>24}")
    for shape in SHAPES:
        for name, (q, k, v), ours_kw, bare_kw in cases(shape, device):
            mask = ours_kw.get("mask")
            if ours_kw.get("is_causal"):
                mask = attnbook.causal_mask(q.shape[-2], device=device)
            fns = [
                lambda q=q, k=k, v=v, kw=bare_kw: F.scaled_dot_product_attention(q, k, v, **kw),
                lambda q=q, k=k, v=v, kw=ours_kw: attnbook.scaled_dot_product_attention(
                    q, k, v, need_weights=False, **kw
                ),
                lambda q=q, k=k, v=v, m=mask: naive(q, k, v, m),
                lambda q=q, k=k, v=v, kw=ours_kw: attnbook.scaled_dot_product_attention(
                    q, k, v, need_weights=True, **kw
                ),
            ]
            bare, fused, plain, weights = interleaved_rounds(
                fns, args.rounds, device, warmup=WARMUP, number=args.number
            )
            fused_ratio = ratio_text([f / b for f, b in zip(fused, bare, strict=True)])
            weights_ratio = ratio_text([w / p for w, p in zip(weights, plain, strict=True)])
            print(
                f"{shape!s:>18}  {name:<22}{statistics.median(bare) * 1e3:>8.2f}ms"
                f"{fused_ratio:>24}{statistics.median(plain) * 1e3:>8.2f}ms"
                f"{weights_ratio:>24}",
                flush=True,
            )
    print(f"\nload average (1, 5, 15 min) after: {load_average()}")


if __name__ == "__main__":
    main()
