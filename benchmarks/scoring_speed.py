"""How much faster is dot-product scoring than additive (Bahdanau) scoring? (chapter 5)

Usage:
    python benchmarks/scoring_speed.py [--seq-len 512] [--dim 64] [--rounds 20] [--threads N]
        [--device auto]

Every row is timed on the same inputs in the same run, and reported against its
dot-product peer:

- ``scores`` group: ``T = S = --seq-len`` queries and keys of width ``--dim``,
  both projected to ``d_a = --dim`` with the same ``W_q`` and ``W_k``; then either
  a dot product ``(q W_q)(k W_k)ᵀ / sqrt(d_a)`` (the peer) or the additive score
  ``tanh(q W_q + k W_k) · v`` of ``attnbook.additive_scores``, which builds a
  ``(T, S, d_a)`` intermediate tensor.
- ``attention`` group: ``attnbook.scaled_dot_product_attention`` with
  ``need_weights=True`` (explicit scores, softmax and weights: the peer) and with
  ``need_weights=False`` (PyTorch's fused kernel, which never stores the
  ``(T, S)`` weights).

Each row reports the median of ``--rounds`` timed calls, after warm-up calls
that are not timed and with the rows' calls interleaved (the order rotating from
round to round, so that no row always runs first); on a GPU every call is
followed by a synchronisation so that the clock measures the work, not the
launch. Timings depend on the machine, its load and the thread count (printed
first, with the load average before and after), which is why this is a
benchmark and not a test: it asserts nothing about speed and exits 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

import torch
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    int_at_least,
    interleaved_rounds,
    load_average,
    positive_int,
)

import attnbook

WARMUP = 3  # untimed calls before timing: first-call allocations, lazy initialisation


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument("--seq-len", type=positive_int, default=512, help="T = S, queries and keys")
    parser.add_argument("--dim", type=positive_int, default=64, help="input width d and d_a")
    add_rounds_option(parser, 20, "timed calls per row")
    parser.add_argument(
        "--threads", type=int_at_least(0), default=0, help="CPU threads (0: torch's default)"
    )
    add_device_option(parser, default="auto")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe(device))
    T = S = args.seq_len
    d = d_a = args.dim

    attnbook.set_seed(0)
    queries = torch.randn(T, d, device=device)  # (T, d)
    keys = torch.randn(S, d, device=device)  # (S, d)
    values = torch.randn(S, d, device=device)  # (S, d)
    W_q = torch.randn(d, d_a, device=device) / math.sqrt(d)  # (d, d_a)
    W_k = torch.randn(d, d_a, device=device) / math.sqrt(d)  # (d, d_a)
    v = torch.randn(d_a, device=device) / math.sqrt(d_a)  # (d_a,)

    def dot_scores() -> torch.Tensor:
        # (T, d) @ (d, d_a) -> (T, d_a); (T, d_a) @ (d_a, S) -> (T, S)
        return (queries @ W_q) @ (keys @ W_k).T / math.sqrt(d_a)

    def additive() -> torch.Tensor:
        return attnbook.additive_scores(queries, keys, W_q, W_k, v)  # (T, S), via (T, S, d_a)

    def attention_explicit() -> torch.Tensor:
        return attnbook.scaled_dot_product_attention(queries, keys, values, need_weights=True)[0]

    def attention_fused() -> torch.Tensor:
        return attnbook.scaled_dot_product_attention(queries, keys, values, need_weights=False)[0]

    rows = [  # (group, name, function, is the peer of its group)
        ("scores", "dot product (peer)", dot_scores, True),
        ("scores", "additive", additive, False),
        ("attention", "need_weights=True (peer)", attention_explicit, True),
        ("attention", "need_weights=False (fused)", attention_fused, False),
    ]
    with torch.inference_mode():
        times = interleaved_rounds([fn for _, _, fn, _ in rows], args.rounds, device, warmup=WARMUP)
    medians = [statistics.median(fn_times) for fn_times in times]
    timed = [
        (group, name, seconds, is_peer) for (group, name, _, is_peer), seconds in zip(rows, medians)
    ]

    print(
        f"T = S = {T}, d = d_a = {d}; median of {args.rounds} interleaved calls after "
        f"{WARMUP} warm-up calls"
    )
    hidden_mib = T * S * d_a * queries.element_size() / 2**20
    scores_mib = T * S * queries.element_size() / 2**20
    print(
        f"additive's (T, S, d_a) intermediate: {hidden_mib:.1f} MiB; "
        f"the (T, S) scores: {scores_mib:.2f} MiB"
    )
    print()
    print(f"{'group':<10} {'method':<28} {'median (ms)':>12} {'vs peer':>9}")
    peers = {group: seconds for group, _, seconds, is_peer in timed if is_peer}
    for group, name, seconds, _ in timed:
        ratio = seconds / peers[group]
        print(f"{group:<10} {name:<28} {seconds * 1e3:>12.3f} {ratio:>8.2f}x")
    print(f"\nload average (1, 5, 15 min) after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
