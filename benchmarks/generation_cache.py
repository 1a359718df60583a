"""Generation with and without the key-value cache; the cache of grouped-query attention (chapter 14).

Usage:
    python benchmarks/generation_cache.py [--threads 1] [--rounds 2] [--device auto]
        [--new-tokens 16 32 64 128 256] [--out DIR]

1. ``GPT.generate(prompt, N, temperature=0, use_cache=True / False)`` for an
   untrained GPT (4 layers, 8 heads, width 128, context 512) from a 16-token
   prompt: the time of the whole call, the measured speed-up, and the ratio
   of the positions the model reads without and with the cache (``sum(P +
   i)`` against ``P + N - 1``), which bounds it. After one untimed call of
   each, the two run in ``--rounds`` interleaved rounds, one call of each
   per round, the order rotating (``_common.interleaved_rounds``), so that a
   burst of load from another program slows both alike: the time is the
   fastest of a path's calls, the speed-up the median of the per-round
   ratios. The tokens of the two must agree. (Figure ``fig-ch14-kv-cache``.)
2. The cache of the same model shape with 8, 4, 2 and 1 key/value heads
   after a 64-token prompt: ``KVCache.nbytes`` and the formula
   ``2 * n_layers * B * n_kv_heads * S * d_head * 4`` (exact, not a timing).

The machine (CPU model, torch version, threads, device) is printed first.
With ``--out DIR`` the figure is written there. A benchmark, not a test: it
asserts nothing about speed and exits 0.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    folder_option,
    interleaved_rounds,
    keeping,
    load_average,
    positive_int,
)

import attnbook
from attnbook import GPT, GPTConfig

P = 16  # prompt tokens
CONTEXT = 512


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch CPU threads (default 1)"
    )
    add_rounds_option(parser, 2, "interleaved rounds (timed calls) per point")
    add_device_option(parser, default="auto")
    parser.add_argument(
        "--new-tokens",
        type=positive_int,
        nargs="+",
        default=[16, 32, 64, 128, 256],
        help=f"tokens to generate; prompt ({P}) + N must fit the context {CONTEXT}",
    )
    parser.add_argument(
        "--out", type=folder_option, help="write the figure as a PNG file into this folder"
    )
    args = parser.parse_args()
    too_long = [N for N in args.new_tokens if P + N > CONTEXT]
    if too_long:
        parser.error(
            f"--new-tokens must be at most {CONTEXT - P} (prompt {P} + N must fit the context "
            f"{CONTEXT}), got {too_long[0]}"
        )

    torch.set_num_threads(args.threads)
    device = args.device
    print(describe(device))

    attnbook.set_seed(0)
    config = GPTConfig(vocab_size=64, context_length=CONTEXT, d_model=128, n_heads=8, n_layers=4)
    model = GPT(config).to(device).eval()
    prompt = torch.randint(0, 64, (1, P), device=device)
    print(
        f"\n1. generate from a {P}-token prompt, {config}; {args.rounds} interleaved rounds "
        "(order rotating) after one untimed call of each"
    )
    seconds: dict[str, list[float]] = {"with the cache": [], "without the cache": []}
    speedups, read_plain, read_cached = [], [], []
    for N in args.new_tokens:
        outputs: list[torch.Tensor] = []  # every call's tokens, to compare
        calls = [
            keeping(
                lambda c=cached, n=N: model.generate(prompt, n, temperature=0, use_cache=c), outputs
            )
            for cached in (True, False)
        ]
        times = interleaved_rounds(calls, args.rounds, device, warmup=1)
        if not all(torch.equal(tokens, outputs[0]) for tokens in outputs):
            raise SystemExit(f"tokens differ with and without the cache at N = {N}")
        for ts, fastest in zip(times, seconds.values()):
            fastest.append(min(ts))
        speedups.append(statistics.median(u / c for c, u in zip(*times)))
        read_plain.append(sum(P + i for i in range(N)))
        read_cached.append(P + N - 1)
        plain, cached = seconds["without the cache"][-1], seconds["with the cache"][-1]
        print(
            f"{N:4d} new tokens: {plain * 1e3:8.1f} ms without, {cached * 1e3:7.1f} ms with the "
            f"cache: {speedups[-1]:5.1f}x (positions read: "
            f"{read_plain[-1] / read_cached[-1]:5.1f}x)"
        )

    print("\n2. the cache after a 64-token prompt, 8 query heads, 4 layers, width 128")
    for n_kv in (8, 4, 2, 1):
        attnbook.set_seed(0)
        cfg = GPTConfig(
            vocab_size=64, context_length=128, d_model=128, n_heads=8, n_layers=4, n_kv_heads=n_kv
        )
        gpt = GPT(cfg).to(device).eval()
        _, cache = gpt.prefill(torch.randint(0, 64, (1, 64), device=device))
        formula = 2 * cfg.n_layers * 1 * n_kv * 64 * (cfg.d_model // cfg.n_heads) * 4
        print(
            f"n_kv_heads = {n_kv}: KVCache.nbytes {cache.nbytes:8,d} (formula {formula:8,d}), "
            f"{gpt.num_parameters():,} parameters"
        )

    if args.out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from attnbook.viz import course_style

        args.out.mkdir(parents=True, exist_ok=True)
        lengths = args.new_tokens
        speedup = np.array(speedups)
        with course_style():
            fig, (ax_time, ax_ratio) = plt.subplots(1, 2, figsize=(11, 4))
            for (name, times), marker in zip(seconds.items(), "os"):
                ax_time.loglog(lengths, np.array(times) * 1e3, marker + "-", label=name)
            ax_time.set(xlabel="new tokens generated", ylabel="milliseconds", title="generate")
            ax_time.legend()
            ax_ratio.semilogx(lengths, speedup, "o-", label="measured speed-up")
            ax_ratio.semilogx(
                lengths, np.array(read_plain) / np.array(read_cached), "--", label="positions read"
            )
            ax_ratio.set_yscale("log")
            ax_ratio.set(xlabel="new tokens generated", ylabel="without / with the cache")
            ax_ratio.legend()
            for ax in (ax_time, ax_ratio):
                ax.set_xticks(lengths, [str(N) for N in lengths])
                ax.xaxis.set_minor_locator(plt.NullLocator())
            fig.tight_layout()
            fig.savefig(args.out / "fig-ch14-kv-cache.png", dpi=100)
        print(f"\nfigure written to {args.out}")
    print(f"\nload average (1, 5, 15 min) after: {load_average()}")


if __name__ == "__main__":
    main()
