"""Held-out loss of chapter 11's GPT-2 and Llama blocks over several seeds (its CPU setting).

Usage:
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python benchmarks/shakespeare_seeds.py [--seeds 0 1 2 3 4] [--threads 1] \\
        [--swap-positions]

Chapter 11 (``chapters/11_language_model.ipynb``, ``SCALE = "cpu"``) trains two
models of the same parameter count on Shakespeare's 33 training plays and
compares their held-out loss after the same 400 steps, with seed 0. One seed
cannot tell a lead from the spread between seeds, so this script repeats the
chapter's training for several seeds and prints, for each seed, both models'
held-out loss (nats per token, the chapter's ``history.last("test_loss")``,
and bits per character) and their difference.

Everything is the chapter's: the BPE tokenizer (vocabulary 1024) trained on the
training plays, ``TokenDataset`` with context 128, ``GPTConfig.gpt2`` and
``GPTConfig.llama`` (tied head, SwiGLU width solved for the GPT-2 model's
count) with 2 layers, 4 heads, width 64, no dropout, and
:func:`attnbook.training.train` with 400 steps of 16 windows, learning rate
5e-3, 40 warmup steps, evaluation every 40 steps, one torch thread. Seed ``s``
means ``attnbook.set_seed(s)`` before each model is built (its initial weights)
and ``TrainConfig(seed=s)`` (its batches): seed 0 is the chapter's run, and on
a CPU that runs the same PyTorch kernels as the book's runs (x86-64, AVX2:
the environment variables above ask for them on a CPU that also has AVX-512)
it prints the chapter's stored figures, 4.401 (GPT-2) and 4.243 (Llama).

With ``--swap-positions`` it also trains, for each seed, the two crossed
variants: the GPT-2 block with rotary positions (``positional="rope"``, nothing
else changed) and the Llama block with learned positions (``positional="learned"``,
the same SwiGLU width), and prints all four models' loss with the per-seed
differences that separate the positions from the rest of the block: GPT-2 rope -
GPT-2 learned and Llama learned - Llama rope (the positions, in each block), and
GPT-2 rope - Llama rope (the rest of the block, positions equal). The crossed
variants' widths are not solved again: the learned table has ``context_length *
d_model`` = 8,192 parameters, so the rope models have that many fewer than the
learned ones, and the script prints each model's count. Without the option the
output is the two-model one above, unchanged.

A benchmark, not a test: it exits 0 and prints its figures, with the machine,
the kernels PyTorch chose and the load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from collections.abc import Callable

import torch
from _common import DefaultsHelp, describe, int_at_least, load_average, positive_int

import attnbook
from attnbook import GPT, BPETokenizer, GPTConfig
from attnbook.data import TokenDataset, shakespeare
from attnbook.training import TrainConfig, train

VOCAB_SIZE = 1024  # the chapter's cells, SCALE = "cpu"
SIZES = dict(context_length=128, d_model=64, n_heads=4, n_layers=2)
STORED = {"GPT-2": 4.401, "Llama": 4.243}  # the chapter's stored outputs, seed 0


def configs() -> dict[str, GPTConfig]:
    """The chapter's two configs: the Llama model's SwiGLU width solved for the GPT-2 count."""
    gpt2 = GPTConfig.gpt2(VOCAB_SIZE, **SIZES, dropout=0.0)
    n_gpt2 = GPT(gpt2).num_parameters()

    def llama(d_ff: int) -> GPTConfig:
        return GPTConfig.llama(VOCAB_SIZE, **SIZES, d_ff=d_ff, tie_embeddings=True, dropout=0.0)

    base = GPT(llama(8)).num_parameters()
    per_unit = 3 * SIZES["d_model"] * SIZES["n_layers"]
    return {"GPT-2": gpt2, "Llama": llama(8 + round((n_gpt2 - base) / per_unit))}


def swapped(models: dict[str, GPTConfig]) -> dict[str, GPTConfig]:
    """The two crossed variants: each block with the other's positions, all else the same."""
    return {
        "GPT-2 rope": dataclasses.replace(models["GPT-2"], positional="rope"),
        "Llama learned": dataclasses.replace(models["Llama"], positional="learned"),
    }


# The per-seed differences --swap-positions prints: (label, minuend, subtrahend).
CONTRASTS = (
    ("positions in GPT-2 block: GPT-2 rope - GPT-2", "GPT-2 rope", "GPT-2"),
    ("positions in Llama block: Llama learned - Llama", "Llama learned", "Llama"),
    ("rest of block, rope both: GPT-2 rope - Llama", "GPT-2 rope", "Llama"),
)


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"mean {mean:.3f}, sd {sd:.3f}, range {min(values):.3f} to {max(values):.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--seeds",
        type=int_at_least(0),
        nargs="+",
        default=[0, 1, 2, 3, 4],
        help="the seeds to train both models with (0 is the chapter's)",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads (the chapter's: 1)"
    )
    parser.add_argument(
        "--swap-positions",
        action="store_true",
        help="also train the GPT-2 block with rotary positions and the Llama block with "
        "learned positions, and print the differences that separate positions from block",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(describe("cpu"))
    print(f"PyTorch's CPU kernels: {torch.backends.cpu.get_cpu_capability()}")

    train_text, held_text = shakespeare(split="train"), shakespeare(split="heldout")
    tokenizer = BPETokenizer.train(train_text, VOCAB_SIZE)
    train_ids = torch.tensor(tokenizer.encode(train_text))
    held_ids = torch.tensor(tokenizer.encode(held_text))
    data = TokenDataset(train_ids, held_ids, seq_len=SIZES["context_length"], vocab_size=VOCAB_SIZE)
    _, y_eval = data.eval_data("test")  # the windows train() scores, as in the chapter
    chars_per_token = sum(len(tokenizer.vocab[i]) for i in y_eval.flatten().tolist()) / (
        y_eval.numel()
    )
    print(f"{data}; held-out windows: {chars_per_token:.3f} characters per target token")
    models = configs()
    if args.swap_positions:
        models |= swapped(models)
    counts = {name: GPT(config).num_parameters() for name, config in models.items()}
    for name, config in models.items():
        if args.swap_positions:
            print(
                f"{name}: {counts[name]:,} parameters, d_ff {config.d_ff}, "
                f"{config.positional} positions"
            )
        else:
            print(f"{name}: {counts[name]:,} parameters, d_ff {config.d_ff}")
    if args.swap_positions:
        table = SIZES["context_length"] * SIZES["d_model"]
        print(
            f"parameter counts differ: the learned position table is {table:,} parameters "
            "(context x width), which the rope models lack; widths are not re-solved"
        )

    rows: dict[int, dict[str, float]] = {}
    for seed in args.seeds:
        run = TrainConfig(
            steps=400,
            batch_size=16,
            lr=5e-3,
            warmup_steps=40,
            eval_every=40,
            progress=False,
            device="cpu",
            seed=seed,
        )
        rows[seed] = {}
        for name, config in models.items():
            attnbook.set_seed(seed)
            started = time.perf_counter()
            history = train(GPT(config), data, run)
            rows[seed][name] = history.last("test_loss")
            print(
                f"seed {seed} {name}: {rows[seed][name]:.3f} nats per token "
                f"({time.perf_counter() - started:.1f} s, load {load_average()})",
                flush=True,
            )

    def bits(nats: float) -> float:
        return nats / math.log(2) / chars_per_token

    print(f"\nload average after: {load_average()}")
    print(f"chapter 11's stored figures (seed 0): GPT-2 {STORED['GPT-2']}, Llama {STORED['Llama']}")
    if args.swap_positions:
        print_swapped(rows, counts, bits)
        return 0
    print(
        "\n| seed | GPT-2 nats/token | Llama nats/token | GPT-2 - Llama | "
        "GPT-2 bits/char | Llama bits/char |"
    )
    print("|---|---|---|---|---|---|")
    for seed, row in rows.items():
        g, m = row["GPT-2"], row["Llama"]
        print(f"| {seed} | {g:.3f} | {m:.3f} | {g - m:+.3f} | {bits(g):.3f} | {bits(m):.3f} |")
    gaps = [row["GPT-2"] - row["Llama"] for row in rows.values()]
    for name in models:
        print(f"{name}: {spread([row[name] for row in rows.values()])}")
    print(
        f"GPT-2 - Llama: {spread(gaps)}; Llama ahead at {sum(g > 0 for g in gaps)} of {len(gaps)}"
    )
    return 0


def print_swapped(
    rows: dict[int, dict[str, float]], counts: dict[str, int], bits: Callable[[float], float]
) -> None:
    """The four-model tables of --swap-positions, with the per-seed differences."""
    names = ("GPT-2", "GPT-2 rope", "Llama learned", "Llama")
    print(
        "\nnats per token (bits per character), held out; parameters: "
        + ", ".join(f"{name} {counts[name]:,}" for name in names)
    )
    print("\n| seed | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for seed, row in rows.items():
        cells = " | ".join(f"{row[n]:.3f} ({bits(row[n]):.3f})" for n in names)
        print(f"| {seed} | {cells} |")
    print("\n| seed | " + " | ".join(label.split(": ")[1] for label, _, _ in CONTRASTS) + " |")
    print("|---" * (len(CONTRASTS) + 1) + "|")
    for seed, row in rows.items():
        cells = " | ".join(f"{row[a] - row[b]:+.3f}" for _, a, b in CONTRASTS)
        print(f"| {seed} | {cells} |")
    print()
    for name in names:
        print(f"{name}: {spread([row[name] for row in rows.values()])}")
    for label, a, b in CONTRASTS:
        diffs = [row[a] - row[b] for row in rows.values()]
        print(
            f"{label}: {spread(diffs)}; negative (first lower) at "
            f"{sum(d < 0 for d in diffs)} of {len(diffs)}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
