"""Generation with and without the key-value cache; the cache of grouped-query attention (chapter 14).

Usage:
    python benchmarks/generation_cache.py [--threads 1] [--repeats 2] [--device auto]
        [--new-tokens 16 32 64 128 256] [--out DIR]

1. ``GPT.generate(prompt, N, temperature=0, use_cache=True / False)`` for an
   untrained GPT (4 layers, 8 heads, width 128, context 512) from a 16-token
   prompt: the time of the whole call (fastest of ``--repeats`` after one
   warm-up), the measured speed-up, and the ratio of the positions the model
   reads without and with the cache (``sum(P + i)`` against ``P + N - 1``),
   which bounds it. (Figure ``fig-ch14-kv-cache``.)
2. The cache of the same model shape with 8, 4, 2 and 1 key/value heads
   after a 64-token prompt: ``KVCache.nbytes`` and the formula
   ``2 * n_layers * B * n_kv_heads * S * d_head * 4`` (exact, not a timing).

The machine (CPU model, torch version, threads, device) is printed first.
With ``--out DIR`` the figure is written there. A benchmark, not a test: it
asserts nothing about speed and exits 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from _common import describe

import attnbook
from attnbook import GPT, GPTConfig
from attnbook.runtime import seconds_per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per point")
    parser.add_argument("--device", default="auto", help="auto (attnbook.get_device), cpu, cuda")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--out", type=Path, help="write the figure as a PNG file into this folder")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = attnbook.get_device() if args.device == "auto" else torch.device(args.device)
    print(describe(device))

    P = 16
    attnbook.set_seed(0)
    config = GPTConfig(vocab_size=64, context_length=512, d_model=128, n_heads=8, n_layers=4)
    model = GPT(config).to(device).eval()
    prompt = torch.randint(0, 64, (1, P), device=device)
    print(f"\n1. generate from a {P}-token prompt, {config}")
    seconds: dict[str, list[float]] = {"with the cache": [], "without the cache": []}
    read_plain, read_cached = [], []
    for N in args.new_tokens:
        if config.context_length < P + N:
            raise SystemExit(f"--new-tokens {N}: prompt + new tokens exceed the context 512")
        for (_, times), cached in zip(seconds.items(), (True, False)):
            times.append(
                seconds_per_call(
                    lambda N=N, cached=cached: model.generate(
                        prompt, N, temperature=0, use_cache=cached
                    ),
                    args.repeats,
                    device,
                )
            )
        read_plain.append(sum(P + i for i in range(N)))
        read_cached.append(P + N - 1)
        plain, cached = seconds["without the cache"][-1], seconds["with the cache"][-1]
        print(
            f"{N:4d} new tokens: {plain * 1e3:8.1f} ms without, {cached * 1e3:7.1f} ms with the "
            f"cache: {plain / cached:5.1f}x (positions read: {read_plain[-1] / read_cached[-1]:5.1f}x)"
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
        speedup = np.array(seconds["without the cache"]) / np.array(seconds["with the cache"])
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


if __name__ == "__main__":
    main()
