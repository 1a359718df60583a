"""Where attention's cost goes: memory and time against the sequence length (chapter 14).

Usage:
    python benchmarks/attention_scaling.py [--threads 1] [--rounds 3] [--device auto]
        [--lengths 128 256 512 1024] [--out DIR]

Two measurements, the two figures of chapter 14's first sections:

1. For ``T = S`` in ``--lengths`` (one sequence, 4 heads of width 64): the
   bytes of the weights ``A`` and of the output ``O`` (exact: number of
   elements times element size; their log-log slopes, 2 and 1, are printed),
   and the time per call of ``attnbook.scaled_dot_product_attention`` with
   ``need_weights=True``, with ``need_weights=False`` (PyTorch's fused
   kernel) and of ``attnbook.tiled_attention`` (the online-softmax loop).
   Times are the fastest of ``--rounds`` calls after one warm-up.
   (Figure ``fig-ch14-quadratic``.)
2. For 256 queries and ``S`` from 256 to 4096 keys: the largest block of
   memory any single PyTorch operation allocates for its result, watched
   with a ``TorchDispatchMode`` (exact, not a timing): the weights path
   grows with ``S``, the tiled loop does not. (Figure ``fig-ch14-tiled-memory``.)

The machine (CPU model, torch version, threads, device) is printed first.
With ``--out DIR`` both figures are written there as PNG files. Timings depend
on the machine, its load and the thread count: this is a benchmark, not a
test; it asserts nothing about speed and exits 0.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    folder_option,
    load_average,
    positive_int,
)

import attnbook
from attnbook.runtime import largest_allocation, seconds_per_call

MiB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch CPU threads (default 1)"
    )
    add_rounds_option(parser, 3, "timed calls per point")
    add_device_option(parser, default="auto")
    parser.add_argument(
        "--lengths", type=positive_int, nargs="+", default=[128, 256, 512, 1024], help="T = S"
    )
    parser.add_argument(
        "--out", type=folder_option, help="write the figures as PNG files into this folder"
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = args.device
    print(describe(device))

    # 1. memory and time against T = S
    B, H, d_k = 1, 4, 64
    lengths = args.lengths
    weights_bytes, output_bytes = [], []
    timings: dict[str, list[float]] = {
        "need_weights=True": [],
        "need_weights=False (fused)": [],
        "tiled_attention": [],
    }
    print(f"\n1. one sequence, {H} heads of width {d_k}; fastest of {args.rounds} calls")
    for T in lengths:
        attnbook.set_seed(0)
        q, k, v = torch.randn(3, B, H, T, d_k, device=device).unbind(0)
        output, weights = attnbook.scaled_dot_product_attention(q, k, v)
        weights_bytes.append(weights.numel() * weights.element_size())
        output_bytes.append(output.numel() * output.element_size())
        calls = [
            lambda q=q, k=k, v=v: attnbook.scaled_dot_product_attention(q, k, v),
            lambda q=q, k=k, v=v: attnbook.scaled_dot_product_attention(
                q, k, v, need_weights=False
            ),
            lambda q=q, k=k, v=v: attnbook.tiled_attention(q, k, v),
        ]
        for times, call in zip(timings.values(), calls):
            times.append(seconds_per_call(call, args.rounds, device))
        print(
            f"T = {T:5d}: weights {weights_bytes[-1] / MiB:8.2f} MiB, output "
            f"{output_bytes[-1] / MiB:6.2f} MiB | "
            + "  ".join(f"{name} {t[-1] * 1e3:8.2f} ms" for name, t in timings.items())
        )
    if len(lengths) > 1:
        slope_w = np.polyfit(np.log(lengths), np.log(weights_bytes), 1)[0]
        slope_o = np.polyfit(np.log(lengths), np.log(output_bytes), 1)[0]
        print(f"log-log slopes of the memory: weights {slope_w:.3f}, output {slope_o:.3f}")

    # 2. the largest allocation against S, T = 256 queries
    key_lengths, n_queries = [256, 512, 1024, 2048, 4096], 256
    largest: dict[str, list[int]] = {
        "need_weights=True": [],
        "tiled_attention (block 64)": [],
        "fused (output only)": [],
    }
    attnbook.set_seed(0)
    for S in key_lengths:
        q = torch.randn(1, H, n_queries, d_k, device=device)
        k, v = torch.randn(2, 1, H, S, d_k, device=device).unbind(0)
        calls = [
            lambda q=q, k=k, v=v: attnbook.scaled_dot_product_attention(q, k, v),
            lambda q=q, k=k, v=v: attnbook.tiled_attention(q, k, v, block_size=64),
            lambda q=q, k=k, v=v: attnbook.scaled_dot_product_attention(
                q, k, v, need_weights=False
            ),
        ]
        for sizes, call in zip(largest.values(), calls):
            sizes.append(largest_allocation(call))
    print(f"\n2. largest allocation (MiB), T = {n_queries} queries, S = {key_lengths}")
    for name, sizes in largest.items():
        print(f"{name:27s}", "  ".join(f"{b / MiB:6.2f}" for b in sizes))

    print(f"\nload average (1, 5, 15 min) after: {load_average()}")
    if args.out is not None:
        _plot(args.out, lengths, weights_bytes, output_bytes, timings, key_lengths, largest)


def _plot(out, lengths, weights_bytes, output_bytes, timings, key_lengths, largest) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnbook.viz import course_style

    out.mkdir(parents=True, exist_ok=True)
    with course_style():
        fig, (ax_mem, ax_time) = plt.subplots(1, 2, figsize=(11, 4))
        ax_mem.loglog(lengths, np.array(weights_bytes) / MiB, "o-", label="weights A (T x T)")
        ax_mem.loglog(lengths, np.array(output_bytes) / MiB, "s-", label="output O (T x d_v)")
        ax_mem.set(xlabel="sequence length T", ylabel="MiB", title="memory: slopes 2 and 1")
        for (name, times), marker in zip(timings.items(), "o^s"):
            ax_time.loglog(lengths, np.array(times) * 1e3, marker + "-", label=name)
        ax_time.set(xlabel="sequence length T", ylabel="milliseconds per call", title="time")
        for ax in (ax_mem, ax_time):
            ax.set_xticks(lengths, [str(T) for T in lengths])
            ax.xaxis.set_minor_locator(plt.NullLocator())
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fig-ch14-quadratic.png", dpi=100)

        fig, ax = plt.subplots(figsize=(6, 4))
        for (name, sizes), marker in zip(largest.items(), "o^s"):
            ax.loglog(key_lengths, np.array(sizes) / MiB, marker + "-", label=name)
        ax.set_xticks(key_lengths, [str(S) for S in key_lengths])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set(xlabel="number of keys S (T = 256 queries)", ylabel="largest tensor (MiB)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fig-ch14-tiled-memory.png", dpi=100)
    print(f"\nfigures written to {out}")


if __name__ == "__main__":
    main()
