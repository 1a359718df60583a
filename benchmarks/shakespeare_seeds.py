"""Held-out loss of chapter 11's GPT-2 and Llama blocks over several seeds (its CPU setting).

Usage:
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python benchmarks/shakespeare_seeds.py [--seeds 0 1 2 3 4] [--threads 1]

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

A benchmark, not a test: it exits 0 and prints its figures, with the machine,
the kernels PyTorch chose and the load average.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

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
    for name, config in models.items():
        print(f"{name}: {GPT(config).num_parameters():,} parameters, d_ff {config.d_ff}")

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


if __name__ == "__main__":
    raise SystemExit(main())
