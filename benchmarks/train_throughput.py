"""Training steps per second: attnbook.GPT against two peers written with PyTorch (chapter 10).

Usage:
    python benchmarks/train_throughput.py [--rounds 30] [--threads 1 2] [--device auto]
        [--batch 64] [--context 64] [--order rotate]
    python benchmarks/train_throughput.py --compare-ops [--batch 64] [--context 64]

Two peers, both with the same maths and initialisation as ``attnbook.GPT``
(pre-LN, GELU, learned positions, a final LayerNorm, a head tied to the token
embedding, biases in every linear layer and LayerNorm, GPT-2's N(0, 0.02)
initialisation with the residual projections scaled by ``1 / sqrt(2 *
n_layers)``):

- ``nn.TransformerEncoderLayer``: what one writes with PyTorch's own layers
  (``norm_first=True``, ``batch_first=True``, run with ``is_causal=True`` and
  a causal mask);
- nanoGPT-style: a minimal GPT in the style of nanoGPT's ``model.py``
  (``_common.NanoGPT``, shared with ``shakespeare.py``; here exact GELU and
  no dropout): one fused ``c_attn`` linear layer for queries, keys and
  values, ``F.scaled_dot_product_attention(is_causal=True)``, a GELU MLP.

The parameter counts are printed and asserted equal. The config is the
issue's: 4 layers, 4 heads, width 128, context 64, batch 64, vocabulary 65,
dropout 0. ``--batch 2 --context 16`` is a proxy for a launch-bound GPU
step: steps so small that each model's per-call Python and small-kernel work
is a large share of the time, as on a GPU at this model size (a large share,
not all: on the CPU the matrix multiplies still take about two thirds of the
forward pass, and where the weights sit in memory matters, see below).

One step is what :func:`attnbook.training.train` does: forward,
cross-entropy, backward, gradient clipping, an AdamW step; on a GPU under
autocast, as ``train`` does (bf16 where the GPU runs it natively, else fp16
with a gradient scaler), one pass instead of one per thread count.

For each thread count the three models run in interleaved rounds (one step
of each per round, after warm-up steps; the order rotating, or with
``--order random`` drawn afresh each round), so a burst of load from another
program slows all alike. The rounds come in three blocks of equal length
(``--rounds`` is rounded up to a multiple of 3, and the header says so), and
before each block all three models are built afresh (same seed), in an order
rotated by one, so that each is built first in one block, second in another
and last in the third. On the CPU at the proxy size, whichever model was built first ran
slowest in the same rounds: built first or built last, attnbook measured
0.967x or 1.005x the nanoGPT-style model (400 rounds each, on a 2-core
machine). With glibc's ``MALLOC_MMAP_THRESHOLD_`` set to a fixed value, the
first-built model's handicap shrank from 1-2% to 0-0.5% (and every step got
slower), so it seems to come from where the allocator puts the parameters.

The table reports each model's median step time over all blocks and, against
each peer, the median of the per-round ratio with a 95% confidence interval
for that median (``_common.ratio_summary``: distribution-free, from order
statistics) and its 25th and 75th percentiles; an interval that contains 1.0
means the run cannot tell the two apart. Then each block's attnbook /
nanoGPT-style median: a spread between blocks shows the effect of the
building order. A benchmark, not a test: it asserts only the equal parameter
counts and exits 0. The load average printed before and after says how busy
the machine was.

``--compare-ops`` times nothing: it records a few steps of each model with
``torch.profiler`` and prints, against each peer, the ATen operators whose
calls per step differ from attnbook's. Where the list is short, the two
models run the same kernels, and a speed ratio near 1.0 is what to expect.
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import (
    DefaultsHelp,
    NanoGPT,
    add_device_option,
    add_rounds_option,
    describe,
    init_like_attnbook,
    load_average,
    positive_int,
    quartiles,
    ratio_summary,
    rotated_builds,
    rounds_note,
)
from torch import nn

import attnbook
from attnbook import GPT, GPTConfig
from attnbook.training import amp_dtype

CONFIG = GPTConfig(vocab_size=65, context_length=64, d_model=128, n_heads=4, n_layers=4)
BATCH = 64
WARMUP = 5
SHORT = {
    "attnbook.GPT": "attnbook",
    "nn.TransformerEncoderLayer": "TEL",
    "nanoGPT-style": "nanoGPT",
}


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
        init_like_attnbook(self, c.n_layers, ("out_proj.weight", "linear2.weight"))
        self.lm_head.weight = self.tok_emb.weight  # tied
        mask = nn.Transformer.generate_square_subsequent_mask(c.context_length)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb.weight[:T]  # (B, T, D)
        x = self.encoder(x, mask=self.mask[:T, :T], is_causal=True)  # (B, T, D)
        return self.lm_head(self.norm(x))  # (B, T, V)


def make_step(
    model: nn.Module, device: torch.device, batch: int, context: int
) -> Callable[[], None]:
    """One training step of ``model`` on a fresh random batch, as a function of no arguments.

    ``attnbook.GPT`` is called as :func:`attnbook.training.train` calls it,
    ``model(idx, validate=False)``: ``train`` matches the dataset to the model
    once (every id was checked when the dataset was built), so it skips the
    per-call range check of the ids, which on a GPU waits for the device.
    """
    forward = functools.partial(model, validate=False) if isinstance(model, GPT) else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    generator = torch.Generator().manual_seed(0)
    dtype = amp_dtype(device)  # bf16 autocast on GPUs that run it natively, fp16 on older ones
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    def step() -> None:
        idx = torch.randint(0, CONFIG.vocab_size, (batch, context + 1), generator=generator)
        idx = idx.to(device)
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = forward(idx[:, :-1])  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), idx[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def op_counts(step: Callable[[], None], steps: int = 3) -> collections.Counter[str]:
    """Calls per training step of each ATen operator (forward, backward and optimizer)."""
    from torch.profiler import ProfilerActivity, profile  # only this mode needs it

    step()  # the first step allocates AdamW's state
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    return collections.Counter(
        {e.key: e.count // steps for e in events if e.key.startswith("aten::")}
    )


def compare_ops(builders: dict[str, Callable[[], Callable[[], None]]], ours: str) -> None:
    """Print, against each peer, the operators whose calls per step differ from ``ours``'s."""
    counts = {name: op_counts(build()) for name, build in builders.items()}
    mine = counts[ours]
    print(f"\nATen operator calls per training step (torch.profiler): {ours} {mine.total():,}")
    for peer, theirs in counts.items():
        if peer == ours:
            continue
        differ = sorted(op for op in mine.keys() | theirs.keys() if mine[op] != theirs[op])
        print(
            f"  {peer}: {theirs.total():,} calls; of {len(mine.keys() | theirs.keys())} "
            f"operators, {len(differ)} called a different number of times" + (":" if differ else "")
        )
        for op in differ:
            print(f"    {op:52s} {SHORT[ours]} {mine[op]:4d}  {SHORT[peer]} {theirs[op]:4d}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    add_rounds_option(
        parser, 30, "timed rounds per thread count (rounded up to a multiple of the 3 blocks)"
    )
    parser.add_argument(
        "--threads", type=positive_int, nargs="+", default=[1, 2], help="torch CPU threads"
    )
    add_device_option(parser, default="auto")
    parser.add_argument("--batch", type=positive_int, default=BATCH, help="sequences per step")
    parser.add_argument(
        "--context",
        type=positive_int,
        default=CONFIG.context_length,
        help=f"tokens per sequence, at most {CONFIG.context_length}",
    )
    parser.add_argument(
        "--order",
        choices=["rotate", "random"],
        default="rotate",
        help="the models' order within a round: rotating, or a fresh random one each round",
    )
    parser.add_argument(
        "--compare-ops",
        action="store_true",
        help="time nothing: print the ATen operators whose calls per step differ between models",
    )
    args = parser.parse_args()
    if args.context > CONFIG.context_length:
        parser.error(f"--context must be between 1 and {CONFIG.context_length}, got {args.context}")
    device = args.device
    # On a GPU the CPU thread count hardly matters: one pass with the default.
    thread_counts = args.threads if device.type == "cpu" else [torch.get_num_threads()]
    if not args.compare_ops:
        torch.set_num_threads(thread_counts[0])  # the machine line says the first pass's count
    print(describe(device))
    models = {"attnbook.GPT": GPT, "nn.TransformerEncoderLayer": TorchGPT, "nanoGPT-style": NanoGPT}
    counts = {}
    for name, cls in models.items():
        attnbook.set_seed(0)
        counts[name] = sum(p.numel() for p in cls(CONFIG).parameters())  # a tied tensor once
    print("parameters: " + ", ".join(f"{name} {n:,}" for name, n in counts.items()))
    assert len(set(counts.values())) == 1, "the three models must have the same parameters"
    ours, peers = "attnbook.GPT", [name for name in models if name != "attnbook.GPT"]

    def build(cls: type[nn.Module]) -> Callable[[], None]:
        attnbook.set_seed(0)
        model = cls(CONFIG).to(device).train()
        return make_step(model, device, args.batch, args.context)

    builders = {name: functools.partial(build, cls) for name, cls in models.items()}
    if args.compare_ops:
        compare_ops(builders, ours)
        return
    for threads in thread_counts:
        torch.set_num_threads(threads)
        times, blocks = rotated_builds(
            builders, args.rounds, device, warmup=WARMUP, order=args.order
        )
        print(
            f"\n{torch.get_num_threads()} torch thread(s), {rounds_note(args.rounds, len(blocks))} "
            f"in {len(blocks)} blocks ({args.order} order), batch {args.batch}, context "
            f"{args.context}; load average after: {load_average()}"
        )
        for name, ts in times.items():
            q1, med, q3 = quartiles(ts)
            print(
                f"  {name:28s} median {1e3 * med:7.1f} ms/step ({1 / med:6.2f} steps/s), "
                f"IQR {1e3 * q1:.1f}-{1e3 * q3:.1f} ms"
            )
        for peer in peers:
            ratios = [p / o for o, p in zip(times[ours], times[peer])]
            print(
                f"  speed ratio attnbook / {peer} (per round, >1 = attnbook faster): "
                f"{ratio_summary(ratios)}"
            )
        print("  attnbook / nanoGPT-style in each block (the models built in this order):")
        for built, ts in blocks:
            ratios = [p / o for o, p in zip(ts[ours], ts["nanoGPT-style"])]
            order = ", ".join(SHORT[name] for name in built)
            print(f"    {order:32s} median {statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
