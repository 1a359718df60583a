"""Training steps per second: attnbook.GPT against a GPT built from PyTorch's own layers (chapter 10).

Usage:
    python benchmarks/train_throughput.py [--rounds 30] [--threads N] [--device auto]

The peer is what one writes with ``torch.nn.TransformerEncoderLayer``
(``norm_first=True`` (pre-LN), GELU, ``batch_first=True``, run causally with
``is_causal=True`` and a causal mask), a learned position embedding, a final
LayerNorm and a head tied to the token embedding, initialised like
``attnbook.GPT`` (GPT-2's N(0, 0.02), residual projections scaled by
``1 / sqrt(2 * n_layers)``). Same architecture, same parameter count (both
printed). The config is the issue's: 4 layers, 4 heads, width 128, context
64, batch 64, vocabulary 65, dropout 0.

One step is what :func:`attnbook.training.train` does: forward, cross-entropy,
backward, gradient clipping, an AdamW step. Both models run in interleaved
rounds (one step of each per round, the order alternating, after warm-up
steps), so a burst of load from another program slows both alike; the table
reports each model's median step time and the median of the per-round ratio
with its 25th and 75th percentiles. A benchmark, not a test: it asserts
nothing and exits 0. The load average printed before and after says how
busy the machine was.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import attnbook
from attnbook import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=65, context_length=64, d_model=128, n_heads=4, n_layers=4)
BATCH = 64
WARMUP = 5


class TorchGPT(nn.Module):
    """A GPT from ``nn.TransformerEncoderLayer``: the same maths as ``attnbook.GPT``."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.context_length, c.d_model)
        layer = nn.TransformerEncoderLayer(
            c.d_model,
            c.n_heads,
            c.d_ff,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        for name, p in self.named_parameters():
            if p.ndim == 1:
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                continue
            std = 0.02
            if name.endswith(("out_proj.weight", "linear2.weight")):
                std = 0.02 / math.sqrt(2 * c.n_layers)
            nn.init.normal_(p, 0.0, std)
        self.lm_head.weight = self.tok_emb.weight  # tied
        mask = nn.Transformer.generate_square_subsequent_mask(c.context_length)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb.weight[:T]  # (B, T, D)
        x = self.encoder(x, mask=self.mask[:T, :T], is_causal=True)  # (B, T, D)
        return self.lm_head(self.norm(x))  # (B, T, V)


def make_step(model: nn.Module, device: torch.device) -> Callable[[], None]:
    """One training step of ``model`` on a fresh random batch, as a function of no arguments."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    generator = torch.Generator().manual_seed(0)

    def step() -> None:
        idx = torch.randint(
            0, CONFIG.vocab_size, (BATCH, CONFIG.context_length + 1), generator=generator
        )
        idx = idx.to(device)
        logits = model(idx[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = attnbook.get_device() if args.device == "auto" else torch.device(args.device)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} | {os.cpu_count()} CPUs, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads | device {device}"
    )
    if device.type == "cuda":
        print(f"GPU: {torch.cuda.get_device_name(device)}")
    print(f"load average before: {os.getloadavg()}")
    attnbook.set_seed(0)
    ours = GPT(CONFIG).to(device).train()
    attnbook.set_seed(0)
    peer = TorchGPT(CONFIG).to(device).train()
    n_ours = ours.num_parameters()
    n_peer = sum(p.numel() for p in peer.parameters())
    print(f"parameters: attnbook.GPT {n_ours:,}, TransformerEncoderLayer GPT {n_peer:,}")
    steps = {
        "attnbook.GPT": make_step(ours, device),
        "nn.TransformerEncoderLayer": make_step(peer, device),
    }
    for step in steps.values():
        for _ in range(WARMUP):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - start)
    print(f"load average after: {os.getloadavg()}")
    print(f"\n{args.rounds} interleaved rounds, batch {BATCH}, context {CONFIG.context_length}:")
    for name, ts in times.items():
        q1, med, q3 = statistics.quantiles(ts, n=4)
        print(
            f"  {name:28s} median {1e3 * med:7.1f} ms/step ({1 / med:6.2f} steps/s), "
            f"IQR {1e3 * q1:.1f}-{1e3 * q3:.1f} ms"
        )
    ratios = [p / o for o, p in zip(times["attnbook.GPT"], times["nn.TransformerEncoderLayer"])]
    q1, med, q3 = statistics.quantiles(ratios, n=4)
    print(
        f"speed ratio attnbook / PyTorch (per-round, >1 = attnbook faster): median {med:.3f}x, "
        f"IQR {q1:.3f}-{q3:.3f}x"
    )


if __name__ == "__main__":
    main()
