"""Held-out bits per character after equal wall time: attnbook's GPT-2 and Llama blocks vs nanoGPT.

Usage:
    python benchmarks/shakespeare.py [--seconds S] [--device auto] [--scale cpu]
        [--threads N] [--tokenizer bpe|char]
    python benchmarks/shakespeare.py --write-corpus DIR      # prepare the data for another machine
    python benchmarks/shakespeare.py --scale gpu --corpus DIR  # there: torch and numpy suffice

Three models learn Shakespeare's 33 training plays (:func:`attnbook.data.shakespeare`),
tokenized with the book's :class:`attnbook.BPETokenizer` (or one token per
character, ``--tokenizer char``), and are scored on the 4 held-out plays:

- ``attnbook GPT-2``: :meth:`attnbook.GPTConfig.gpt2` (LayerNorm, GELU, learned
  positions, biases, tied head);
- ``attnbook Llama``: :meth:`attnbook.GPTConfig.llama` (RMSNorm, SwiGLU, RoPE, no
  biases), with the head tied to the embedding as in the small Llama 3.2 models,
  and the SwiGLU width chosen so that its parameter count is that of the GPT-2
  model (asserted within 2%);
- ``nanoGPT-style``: a minimal GPT in the style of nanoGPT's ``model.py``
  (``_common.NanoGPT``, with dropout and GPT-2's tanh GELU: one fused
  ``c_attn`` linear layer for queries, keys and values,
  ``F.scaled_dot_product_attention(is_causal=True)``, a GELU MLP, learned
  positions, biases, tied head), the same shape as the GPT-2 model.

Equal wall time: every model gets ``--seconds`` of training. The models take
turns one step at a time, the order rotating, so that a burst of load from
another program slows all three alike; each one's clock counts only its own
steps. All see the same batches in the same order (one seeded generator each,
same seed), use AdamW with the same settings (:func:`attnbook.training.make_optimizer`),
and follow the same learning-rate schedule, a warmup then a cosine, but driven
by the fraction of the time budget spent instead of the step count (nobody
knows the step count in advance). On CUDA all use bf16 autocast where the GPU
supports it.

Scored once at the end, with dropout off, on the same fixed windows of the
held-out plays: the mean cross-entropy in nats per token, and bits per
character = nats per token x tokens per character / ln 2, which compares
tokenizers fairly (a model of longer tokens has more to predict per token).
The target: attnbook's better model is at least as good as the nanoGPT-style
peer. A benchmark, not a test: it exits 0 and prints its figures, with the
machine and the load average.

Settings (``--scale``): ``cpu``, 2 layers, 4 heads, width 64, context 128,
batch 16, learning rate 5e-3, BPE vocabulary 1024 (the book's chapter 11
setting); ``gpu``, nanoGPT's Shakespeare model: 6 layers, 6 heads, width 384,
context 256, batch 64, learning rate 1e-3, dropout 0.2.

A GPU machine may have no network and no ``regex`` package (which the BPE
tokenizer needs): ``--write-corpus DIR`` writes the text of both splits and,
for the BPE tokenizer, its ids (``.npy``) and the tokenizer (JSON) into DIR;
``--corpus DIR`` reads them back, so that the run needs only torch and numpy.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _common import (
    DefaultsHelp,
    NanoGPT,
    add_device_option,
    describe,
    folder_option,
    load_average,
    positive_float,
    positive_int,
)
from torch import nn

import attnbook
from attnbook import GPT, GPTConfig
from attnbook.data import TokenDataset
from attnbook.runtime import synchronize
from attnbook.training import TrainConfig, amp_dtype, make_optimizer


@dataclass(frozen=True)
class Scale:
    """One size of the comparison."""

    n_layers: int
    n_heads: int
    d_model: int
    context: int
    batch: int
    lr: float
    dropout: float
    vocab: int  # BPE vocabulary (bytes + merges)
    seconds: float  # default training seconds per model
    eval_windows: int  # held-out windows scored at the end


SCALES = {
    "cpu": Scale(2, 4, 64, 128, 16, 5e-3, 0.0, 1024, 20.0, 256),
    "gpu": Scale(6, 6, 384, 256, 64, 1e-3, 0.2, 1024, 60.0, 1024),
}
WARMUP_FRACTION = 0.05  # of the time budget
MIN_LR_RATIO = 0.1


# ------------------------------------------------------------------ the models


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied tensor is counted once


def llama_matching(gpt2: GPTConfig, target: int) -> GPTConfig:
    """The Llama-style config (tied head) whose SwiGLU width brings its count nearest ``target``."""

    def config(d_ff: int) -> GPTConfig:
        c = gpt2
        return GPTConfig.llama(
            c.vocab_size,
            c.context_length,
            c.d_model,
            c.n_heads,
            c.n_layers,
            d_ff=d_ff,
            tie_embeddings=True,
            dropout=c.dropout,
        )

    # the count grows by 3 * d_model * n_layers per unit of d_ff: solve, then round
    base = n_params(GPT(config(8)))
    per_unit = 3 * gpt2.d_model * gpt2.n_layers
    return config(max(8, 8 + round((target - base) / per_unit)))


def build_models(scale: Scale, vocab_size: int) -> dict[str, nn.Module]:
    s = scale
    gpt2 = GPTConfig.gpt2(
        vocab_size, s.context, s.d_model, s.n_heads, s.n_layers, dropout=s.dropout
    )
    attnbook.set_seed(0)
    models: dict[str, nn.Module] = {"attnbook GPT-2": GPT(gpt2)}
    target = n_params(models["attnbook GPT-2"])
    llama = llama_matching(gpt2, target)
    attnbook.set_seed(0)
    models["attnbook Llama"] = GPT(llama)
    attnbook.set_seed(0)
    models["nanoGPT-style"] = NanoGPT(gpt2, dropout=True, gelu="tanh")
    for name, model in models.items():
        count = n_params(model)
        assert abs(count - target) <= 0.02 * target, f"{name}: {count:,} vs {target:,} parameters"
    print(f"Llama-style SwiGLU width {llama.d_ff} (GPT-2 MLP {gpt2.d_ff})")
    return models


# ------------------------------------------------------------------ data


def char_ids(train: str, heldout: str) -> tuple[np.ndarray, np.ndarray, int, list[bytes]]:
    """One token per character of the training text (held-out characters it lacks dropped)."""
    chars = sorted(set(train))
    index = {ch: i for i, ch in enumerate(chars)}
    unknown = set(heldout) - index.keys()
    if unknown:
        print(f"held-out characters not in training, dropped: {sorted(unknown)!r}")
    encode = [index[ch] for ch in train], [index[ch] for ch in heldout if ch in index]
    pieces = [ch.encode("utf-8") for ch in chars]
    return np.array(encode[0]), np.array(encode[1]), len(chars), pieces


def bpe_ids(train: str, heldout: str, vocab: int) -> tuple[np.ndarray, np.ndarray, object]:
    from attnbook import BPETokenizer

    started = time.perf_counter()
    tok = BPETokenizer.train(train, vocab)
    print(f"BPE tokenizer trained in {time.perf_counter() - started:.1f} s (vocabulary {vocab})")
    return np.array(tok.encode(train)), np.array(tok.encode(heldout)), tok


def write_corpus(folder: Path, vocab: int) -> None:
    """The text of both splits, and the BPE ids and tokenizer, for a machine without them."""
    from attnbook.data import shakespeare

    folder.mkdir(parents=True, exist_ok=True)
    train, heldout = shakespeare(split="train"), shakespeare(split="heldout")
    (folder / "train.txt").write_text(train, encoding="utf-8")
    (folder / "heldout.txt").write_text(heldout, encoding="utf-8")
    train_ids, heldout_ids, tok = bpe_ids(train, heldout, vocab)
    np.save(folder / f"train_bpe{vocab}.npy", train_ids.astype(np.int32))
    np.save(folder / f"heldout_bpe{vocab}.npy", heldout_ids.astype(np.int32))
    tok.save(folder / f"bpe{vocab}.json")
    print(f"wrote {sorted(p.name for p in folder.iterdir())}")


def load_data(args: argparse.Namespace, scale: Scale) -> tuple[TokenDataset, list[bytes], str]:
    """The dataset, each id's bytes (to count characters), and a description."""
    if args.corpus is not None:
        folder = Path(args.corpus)
        train = (folder / "train.txt").read_text(encoding="utf-8")
        heldout = (folder / "heldout.txt").read_text(encoding="utf-8")
    else:
        from attnbook.data import shakespeare

        train, heldout = shakespeare(split="train"), shakespeare(split="heldout")
    print(f"train {len(train):,} characters, held out {len(heldout):,}")
    if args.tokenizer == "char":
        train_ids, heldout_ids, vocab_size, pieces = char_ids(train, heldout)
        what = f"characters (vocabulary {vocab_size})"
    else:
        stored = None if args.corpus is None else Path(args.corpus) / f"bpe{scale.vocab}.json"
        if stored is not None and stored.is_file():
            import json

            data = json.loads(stored.read_text(encoding="utf-8"))
            vocab = {int(i): bytes.fromhex(h) for i, h in data["vocab"].items()}
            pieces = [vocab[i] for i in range(len(vocab))]
            train_ids = np.load(Path(args.corpus) / f"train_bpe{scale.vocab}.npy")
            heldout_ids = np.load(Path(args.corpus) / f"heldout_bpe{scale.vocab}.npy")
            what = f"BPE, vocabulary {len(vocab)}, ids read from {stored.name}"
        else:
            train_ids, heldout_ids, tok = bpe_ids(train, heldout, scale.vocab)
            pieces = [tok.vocab[i] for i in range(tok.vocab_size)]
            what = f"BPE, vocabulary {tok.vocab_size}, trained here"
    data = TokenDataset(
        torch.from_numpy(train_ids.astype(np.int64)),
        torch.from_numpy(heldout_ids.astype(np.int64)),
        scale.context,
        len(pieces),
    )
    return data, pieces, what


# ------------------------------------------------------------------ training and scoring


def lr_at_fraction(spent: float, peak: float) -> float:
    """Warmup over the first WARMUP_FRACTION of the time, then a cosine to MIN_LR_RATIO * peak."""
    if spent < WARMUP_FRACTION:
        return peak * max(spent, 0.01 * WARMUP_FRACTION) / WARMUP_FRACTION
    progress = min(1.0, (spent - WARMUP_FRACTION) / (1.0 - WARMUP_FRACTION))
    low = MIN_LR_RATIO * peak
    return low + 0.5 * (peak - low) * (1.0 + math.cos(math.pi * progress))


class Run:
    """One model's training state: its optimiser, its batches, its own clock."""

    def __init__(self, model: nn.Module, data: TokenDataset, scale: Scale, device: torch.device):
        self.model = model.to(device).train()
        self.data, self.scale, self.device = data, scale, device
        self.optimizer = make_optimizer(model, TrainConfig(lr=scale.lr, weight_decay=0.1))
        self.batches = torch.Generator().manual_seed(0)  # the same batches for every model
        self.dtype = amp_dtype(device) if device.type == "cuda" else None
        self.seconds, self.steps = 0.0, 0

    def step(self, budget: float) -> None:
        started = time.perf_counter()
        lr = lr_at_fraction(self.seconds / budget, self.scale.lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = self.data.batch("train", self.scale.batch, self.batches)  # (B, T) each
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            logits = self.model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        synchronize(self.device)  # a GPU's queued work belongs to this step's seconds
        self.seconds += time.perf_counter() - started
        self.steps += 1

    @torch.no_grad()
    def score(self, chars_of: torch.Tensor) -> tuple[float, float]:
        """Held-out (nats per token, bits per character) on fixed windows."""
        self.model.eval()
        x, y = self.data.eval_data("test", self.scale.eval_windows)  # (M, T) each
        total, n_tokens, n_chars = 0.0, 0, 0
        for start in range(0, x.shape[0], 64):
            xb, yb = x[start : start + 64].to(self.device), y[start : start + 64].to(self.device)
            with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                logits = self.model(xb)  # (b, T, V)
            total += float(
                F.cross_entropy(logits.flatten(0, 1).float(), yb.flatten(), reduction="sum")
            )
            n_tokens += yb.numel()
            n_chars += int(chars_of[yb.cpu()].sum())
        self.model.train()
        return total / n_tokens, total / n_chars / math.log(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--scale", choices=sorted(SCALES), default="cpu", help="the models' size and batch"
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=None,
        help="training seconds per model (default: the scale's, 20 on cpu, 60 on gpu)",
    )
    add_device_option(parser, default="auto")
    parser.add_argument(
        "--tokenizer", choices=("bpe", "char"), default="bpe", help="BPE (1024) or characters"
    )
    parser.add_argument(
        "--corpus", default=None, metavar="DIR", help="a folder written by --write-corpus"
    )
    parser.add_argument(
        "--write-corpus",
        type=folder_option,
        default=None,
        metavar="DIR",
        help="write the text, BPE ids and tokenizer here for --corpus, then exit",
    )
    parser.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads (CPU; default: torch's)"
    )
    args = parser.parse_args(argv)
    if args.corpus is not None:
        missing = [
            name
            for name in ("train.txt", "heldout.txt")
            if not (Path(args.corpus) / name).is_file()
        ]
        if not Path(args.corpus).is_dir():
            parser.error(f"--corpus: no folder {args.corpus!r}")
        if missing:  # a FileNotFoundError after the machine was described, before
            parser.error(
                f"--corpus: {args.corpus!r} holds no {' or '.join(missing)}: "
                "give a folder written by --write-corpus"
            )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scale = SCALES[args.scale]
    if args.write_corpus is not None:
        write_corpus(Path(args.write_corpus), scale.vocab)
        return 0
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = args.device
    budget = scale.seconds if args.seconds is None else args.seconds
    print(describe(device))
    data, pieces, what = load_data(args, scale)
    chars_of = torch.tensor([len(p.decode("utf-8", errors="replace")) for p in pieces])
    print(f"tokens: {what}; {data}")
    print(
        f"scale {args.scale}: {scale.n_layers} layers, {scale.n_heads} heads, width "
        f"{scale.d_model}, context {scale.context}, batch {scale.batch}, lr {scale.lr}, "
        f"dropout {scale.dropout}; {budget:g} s of training per model, interleaved"
    )
    models = build_models(scale, data.vocab_size)
    runs = {name: Run(model, data, scale, device) for name, model in models.items()}
    for run in runs.values():  # one untimed step each (kernels chosen, memory allocated)
        run.step(budget)
        run.seconds = 0.0  # its step still counts
    names = list(runs)
    rnd = 0
    while any(run.seconds < budget for run in runs.values()):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
            if runs[name].seconds < budget:
                runs[name].step(budget)
        rnd += 1
    print(f"load average after training: {load_average()}")
    print(
        "\n| model | parameters | steps | tokens/s | seconds | held-out nats/token "
        "| held-out bits/char |"
    )
    print("|---|---|---|---|---|---|---|")
    results = {}
    for name, run in runs.items():
        nats, bits = run.score(chars_of)
        results[name] = bits
        tokens_per_s = run.steps * scale.batch * scale.context / run.seconds
        print(
            f"| {name} | {n_params(run.model):,} | {run.steps} | {tokens_per_s:,.0f} | "
            f"{run.seconds:.1f} | {nats:.3f} | {bits:.3f} |"
        )
    best = min(results["attnbook GPT-2"], results["attnbook Llama"])
    peer = results["nanoGPT-style"]
    verdict = "met" if best <= peer else "NOT met"
    print(
        f"\ntarget (attnbook's best <= nanoGPT-style): {verdict}: {best:.3f} vs {peer:.3f} "
        f"bits per character"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
