"""Sparse patterns and low rank: the figures of chapter 14's last sections, with the machine printed.

Usage:
    python benchmarks/sparse_low_rank.py [--threads 1] [--device auto] [--out DIR]

Exact figures (counts and errors, not timings), as chapter 14 computes them:

1. Sliding-window (``w = 4``), strided (``stride = 4``) and causal masks for
   16 positions and the number of pairs each scores; the share of the causal
   pairs a window of 256 and a stride of ``sqrt(T)`` score up to 65,536 tokens.
   (Figure ``fig-ch14-sparse-masks``.)
2. The receptive field: how many inputs the last of 64 tokens can depend on
   after 1 to 8 layers of each pattern. (Figure ``fig-ch14-receptive-field``.)
3. Linformer with pooling projections: the relative error against full
   attention as ``k`` grows, for random and for smooth keys and values.
   (Figure ``fig-ch14-linformer``.)
4. The reverse model of chapter 10, retrained with ``reverse_recipe("cpu")``:
   the singular values of its attention matrices on 64 held-out sequences,
   trained and untrained. (Figure ``fig-ch14-spectrum``.) Training takes
   seconds to a minute on two CPU cores.

With ``--out DIR`` the four figures are written there as PNG files.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace

import torch
from _common import (
    DefaultsHelp,
    add_device_option,
    describe,
    folder_option,
    load_average,
    positive_int,
)

import attnbook
from attnbook import (
    GPT,
    causal_mask,
    linformer_attention,
    scaled_dot_product_attention,
    sliding_window_mask,
    strided_mask,
)
from attnbook.training import exact_match, reverse_recipe, train


def strided_pairs(T: int, stride: int) -> int:
    """Pairs of ``strided_mask(T, stride)``: ``min(t + 1, stride) + t // stride`` per row."""
    t = torch.arange(T)
    return int((torch.clamp(t + 1, max=stride) + t // stride).sum())


def window_pairs(T: int, w: int) -> int:
    """Pairs of ``sliding_window_mask(T, w)``: ``min(t + 1, w)`` per row."""
    return w * T - w * (w - 1) // 2 if w <= T else T * (T + 1) // 2


def reach(mask: torch.Tensor, n_layers: int) -> torch.Tensor:
    """``reach[t, s]``: can input ``s`` influence output ``t`` after ``n_layers`` layers?"""
    seen = mask.clone()
    for _ in range(n_layers - 1):
        seen = (seen.int() @ mask.int()) > 0
    return seen


def pooling(k: int, S: int) -> torch.Tensor:
    """``(k, S)``: row ``j`` averages the ``j``-th of ``k`` equal segments."""
    return torch.kron(torch.eye(k), torch.full((1, S // k), k / S))


def smooth(*shape: int) -> torch.Tensor:
    """A standardised random walk along axis -2: neighbouring positions are alike."""
    x = torch.randn(*shape).cumsum(dim=-2)
    return (x - x.mean(-2, keepdim=True)) / x.std(-2, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch CPU threads (default 1)"
    )
    add_device_option(parser, default="auto")
    parser.add_argument(
        "--out", type=folder_option, help="write the figures as PNG files into this folder"
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = args.device
    print(describe(device))

    # 1. masks and pair counts
    masks = {
        "causal": causal_mask(16),
        "sliding window, w = 4": sliding_window_mask(16, 4),
        "strided, stride = 4": strided_mask(16, 4),
    }
    print("\n1. scored pairs of 256, for 16 positions")
    for name, mask in masks.items():
        print(f"   {name:22s} {int(mask.sum()):4d}")
    print("   share of the causal pairs: T, window 256, strided sqrt(T)")
    for T in (1024, 4096, 16384, 65536):
        full = T * (T + 1) // 2
        print(
            f"   {T:6d}  {window_pairs(T, 256) / full:7.2%}  "
            f"{strided_pairs(T, math.isqrt(T)) / full:7.2%}"
        )

    # 2. receptive field
    layers = list(range(1, 9))
    patterns = {
        "causal": causal_mask(64),
        "sliding window, w = 4": sliding_window_mask(64, 4),
        "strided, stride = 8": strided_mask(64, 8),
    }
    reachable = {n: [int(reach(m, L)[-1].sum()) for L in layers] for n, m in patterns.items()}
    print("\n2. inputs the last of 64 tokens reaches after 1..8 layers")
    for name, counts in reachable.items():
        print(f"   {name:22s} {counts}")

    # 3. Linformer error
    attnbook.set_seed(0)
    S, d = 256, 32
    queries = torch.randn(4, S, d)
    inputs = {
        "random keys and values": (torch.randn(4, S, d), torch.randn(4, S, d)),
        "smooth keys and values": (smooth(4, S, d), smooth(4, S, d)),
    }
    ranks = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    errors = {}
    print(f"\n3. Linformer (pooling), relative error for k = {ranks}")
    for name, (keys, vals) in inputs.items():
        full, _ = scaled_dot_product_attention(queries, keys, vals)
        errors[name] = [
            (
                (linformer_attention(queries, keys, vals, pooling(k, S)) - full).norm()
                / full.norm()
            ).item()
            for k in ranks
        ]
        print(f"   {name}: " + " ".join(f"{e:.3f}" for e in errors[name]))

    # 4. spectrum of the trained reverse model
    task, model_config, train_config = reverse_recipe("cpu")
    attnbook.set_seed(0)
    model = GPT(model_config).to(device)
    started = time.perf_counter()
    train(model, task, replace(train_config, progress=False))
    seconds = time.perf_counter() - started
    print(
        f"\n4. reverse model trained in {seconds:.1f} s, exact-match {exact_match(model, task):.1%}"
    )
    model.eval()
    attnbook.set_seed(0)
    untrained = GPT(model_config).to(device).eval()
    idx = task.test[:64, :-1].to(device)
    spectra = {}
    with torch.no_grad():
        pairs = zip(model.attention_weights(idx), untrained.attention_weights(idx))
        for layer, (w_trained, w_untrained) in enumerate(pairs):
            for label, w in (("trained", w_trained), ("untrained", w_untrained)):
                sigma = torch.linalg.svdvals(w.cpu().double())
                energy = (sigma**2).cumsum(-1) / (sigma**2).sum(-1, keepdim=True)
                rank90 = ((energy < 0.9).sum(-1) + 1).double().mean(0)
                spectra[f"layer {layer}, {label}"] = (sigma / sigma[..., :1]).mean(dim=(0, 1))
                print(f"   layer {layer} {label:9s}: 90% energy in {rank90.numpy().round(1)} of 32")

    print(f"\nload average (1, 5, 15 min) after: {load_average()}")
    if args.out is not None:
        _plot(args.out, masks, layers, reachable, ranks, errors, spectra)


def _plot(out, masks, layers, reachable, ranks, errors, spectra) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnbook.viz import course_style, plot_heatmap

    out.mkdir(parents=True, exist_ok=True)
    ticks = [0, 4, 8, 12, 15]
    with course_style():
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.3))
        for ax, (name, mask) in zip(axes, masks.items()):
            title = f"{name}: {int(mask.sum())} pairs"
            plot_heatmap(
                mask.float(), ax=ax, title=title, annotate=False, vmin=0, vmax=1, colorbar=False
            )
            ax.set_xticks(ticks, [str(i) for i in ticks])
            ax.set_yticks(ticks, [str(i) for i in ticks])
        fig.tight_layout()
        fig.savefig(out / "fig-ch14-sparse-masks.png", dpi=100)

        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [1, 1, 1.3]})
        small = strided_mask(24, 4)
        panels = [(small, "strided (24, 4): 1 layer"), (reach(small, 2), "after 2 layers")]
        for ax, (matrix, title) in zip(axes[:2], panels):
            plot_heatmap(
                matrix.float(), ax=ax, title=title, annotate=False, vmin=0, vmax=1, colorbar=False
            )
        for (name, counts), marker in zip(reachable.items(), "os^"):
            axes[2].plot(layers, counts, marker + "-", label=name)
        axes[2].set(xlabel="layers", ylabel="inputs the last of 64 tokens can reach")
        axes[2].legend()
        fig.tight_layout()
        fig.savefig(out / "fig-ch14-receptive-field.png", dpi=100)

        fig, ax = plt.subplots(figsize=(6.5, 4))
        for (name, errs), marker in zip(errors.items(), "os"):
            ax.plot(ranks[:-1], errs[:-1], marker + "-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="k (of S = 256)", ylabel="relative error of the output")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fig-ch14-linformer.png", dpi=100)

        fig, ax = plt.subplots(figsize=(7, 4))
        for (name, sigma), style in zip(spectra.items(), ["o-", "o--", "s-", "s--"]):
            ax.semilogy(range(1, len(sigma) + 1), sigma.numpy(), style, markersize=3, label=name)
        ax.set(xlabel="index i of the singular value", ylabel="sigma_i / sigma_1 (mean)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fig-ch14-spectrum.png", dpi=100)
    print(f"\nfigures written to {out}")


if __name__ == "__main__":
    main()
