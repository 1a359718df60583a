"""Encoder-decoder speed: cached generation and training steps against torch.nn.Transformer (chapter 12).

Usage:
    python benchmarks/seq2seq.py [--rounds 10] [--threads 2] [--device auto]
    python benchmarks/seq2seq.py --quick   # a smoke run: seconds, not minutes

Two measurements of ``attnbook.EncoderDecoder`` (3 + 3 layers, width 128, 4
heads, vocabularies of 40, batch 32, sources of 32 tokens; ``--batch``,
``--source-len`` and ``--new-tokens`` change the sizes, not the model):

- decoding 47 new tokens (no end token, so every variant does the same
  number of steps) with ``generate``: greedy and beam 4, with the cache (the
  source's cross-attention keys and values projected once, the decoder's
  self-attention keys and values kept) and without it (the decoder reruns
  over the whole target each step, the source encoded once), against a naive
  loop that calls ``model(src, tgt)`` each step, encoding the source again;
- training steps (forward, cross-entropy, backward, clipping, AdamW) against
  a model built from ``torch.nn.Transformer`` with the same maths (pre-LN,
  GELU, sinusoidal positions scaled as ours, a tied head) and the same
  parameter count (asserted); its encoder is built with
  ``enable_nested_tensor=False`` (the fast path for padded batches, which
  PyTorch turns off for pre-LN layers anyway, with a warning). attnbook's
  model is called as :func:`attnbook.training.train` calls it,
  ``validate=False`` (the task's ids were checked once, when it was built).

Each timing is the median over interleaved rounds (one run of each variant
per round, the order rotating), so a burst of load from another program
slows all alike: ``--rounds`` rounds of decoding, ``3 x --rounds`` training
steps of each model (rounded up to an even number). The training steps come
in two blocks of equal rounds, each with both models built afresh,
attnbook's first in one and last in the other (``_common.rotated_builds``:
the model built first can run slower), and each block's ratio is printed
too. The load average printed before and after says how busy the machine
was. A benchmark, not a test: it asserts
only what makes the comparisons fair (equal tokens from cached and uncached
decoding, equal parameter counts) and exits 0.

``--quick`` is a smoke run of every path of the script, in seconds: one round,
batch 4, sources of 8 tokens, 8 new tokens, 1 thread (two threads on a busy
2-core machine wait for each other); an option given beside it overrides its
value. Its figures are too few and too small to compare anything; the figures
in RESULTS.md are the defaults'.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    interleaved_rounds,
    load_average,
    positive_int,
    ratio_summary,
    rotated_builds,
    rounds_note,
)
from torch import nn

import attnbook
from attnbook import EncoderDecoder, EncoderDecoderConfig
from attnbook.positional import sinusoidal_positional_encoding
from attnbook.training import amp_dtype

CONFIG = EncoderDecoderConfig(
    src_vocab_size=40,
    tgt_vocab_size=40,
    context_length=64,
    d_model=128,
    n_heads=4,
    n_encoder_layers=3,
    n_decoder_layers=3,
)
BATCH, SRC_LEN, NEW_TOKENS = 32, 32, 47  # the defaults of --batch, --source-len, --new-tokens
QUICK = {"rounds": 1, "batch": 4, "source_len": 8, "new_tokens": 8, "threads": 1}  # --quick


class TorchEncoderDecoder(nn.Module):
    """The same model from ``torch.nn.Transformer``: pre-LN, GELU, sinusoids, tied head."""

    def __init__(self, c: EncoderDecoderConfig) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_emb = nn.Embedding(c.tgt_vocab_size, c.d_model)
        layer = {"dropout": 0.0, "activation": "gelu", "batch_first": True, "norm_first": True}
        # nn.Transformer's own encoder, but without the nested-tensor fast path, which it
        # would turn off for norm_first layers with a warning: the same layers, the same
        # random draws in the same order, the same maths.
        encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(c.d_model, c.n_heads, 4 * c.d_model, **layer),
            c.n_encoder_layers,
            nn.LayerNorm(c.d_model),
            enable_nested_tensor=False,
        )
        self.transformer = nn.Transformer(
            c.d_model,
            c.n_heads,
            c.n_encoder_layers,
            c.n_decoder_layers,
            4 * c.d_model,
            custom_encoder=encoder,
            **layer,
        )  # its encoder and decoder end with a LayerNorm each, as ours do
        self.lm_head = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.lm_head.weight = self.tgt_emb.weight  # tied
        pe = sinusoidal_positional_encoding(c.context_length, c.d_model)
        self.register_buffer("pos_table", pe, persistent=False)
        self.scale = math.sqrt(c.d_model)
        causal = nn.Transformer.generate_square_subsequent_mask(c.context_length)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        S, T = src.shape[1], tgt.shape[1]
        x = self.src_emb(src) * self.scale + self.pos_table[:S]  # (B, S, D)
        y = self.tgt_emb(tgt) * self.scale + self.pos_table[:T]  # (B, T, D)
        out = self.transformer(x, y, tgt_mask=self.causal[:T, :T], tgt_is_causal=True)
        return self.lm_head(out)  # (B, T, V)


@torch.no_grad()
def naive_greedy(model: EncoderDecoder, src: torch.Tensor, n: int, bos_id: int) -> torch.Tensor:
    """Greedy decoding the obvious way: the whole model, source included, at every step."""
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.int64, device=src.device)
    for _ in range(n):
        token = model(src, out)[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        out = torch.cat([out, token], dim=1)
    return out


def decoding(device: torch.device, rounds: int, batch: int, src_len: int, new_tokens: int) -> None:
    attnbook.set_seed(0)
    model = EncoderDecoder(CONFIG).to(device).eval()
    with torch.no_grad():  # a model with varied outputs, so beams differ
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.1)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, CONFIG.src_vocab_size, (batch, src_len), generator=g).to(device)
    runs, outputs = {}, {}

    def variant(name: str, fn: Callable[[], torch.Tensor]) -> None:
        def run() -> None:
            outputs[name] = fn()  # kept, to check that the variants agree

        runs[name] = run

    for beam in (1, 4):
        for cache in (True, False):
            label = f"{'greedy' if beam == 1 else 'beam 4'}, {'cache' if cache else 'no cache'}"
            variant(
                label,
                lambda b=beam, c=cache: model.generate(
                    src, new_tokens, bos_id=1, beam_size=b, use_cache=c
                ),
            )
    variant("greedy, naive loop", lambda: naive_greedy(model, src, new_tokens, 1))
    times = dict(zip(runs, interleaved_rounds(list(runs.values()), rounds, device, warmup=1)))
    assert torch.equal(outputs["greedy, cache"], outputs["greedy, no cache"])
    assert torch.equal(outputs["greedy, cache"], outputs["greedy, naive loop"])
    assert torch.equal(outputs["beam 4, cache"], outputs["beam 4, no cache"])
    print(
        f"\ndecoding {new_tokens} tokens, batch {batch}, source {src_len} tokens, {rounds} "
        f"interleaved rounds; load average after: {load_average()}"
    )
    base = statistics.median(times["greedy, naive loop"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:22s} median {1e3 * med:8.1f} ms ({batch * new_tokens / med:8.0f} tokens/s), "
            f"{base / med:5.2f}x the naive loop's speed"
        )
    for beam in ("greedy", "beam 4"):
        ratios = [u / c for c, u in zip(times[f"{beam}, cache"], times[f"{beam}, no cache"])]
        print(f"  {beam}: the cache speeds decoding up {statistics.median(ratios):.2f}x")


def training(device: torch.device, rounds: int, batch: int, src_len: int) -> None:
    models = {"attnbook.EncoderDecoder": EncoderDecoder, "nn.Transformer": TorchEncoderDecoder}
    dtype = amp_dtype(device)

    def build(cls: type[nn.Module]) -> Callable[[], None]:
        attnbook.set_seed(0)
        model = cls(CONFIG).to(device).train()
        # As attnbook.train calls it: the task checked its ids once, when it was built.
        forward = functools.partial(model, validate=False) if cls is EncoderDecoder else model
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        g = torch.Generator().manual_seed(0)

        def step() -> None:
            src = torch.randint(3, 40, (batch, src_len), generator=g).to(device)
            tgt = torch.randint(3, 40, (batch, src_len + 1), generator=g).to(device)
            ctx = torch.autocast(device.type, dtype=dtype) if dtype else torch.enable_grad()
            with ctx:
                logits = forward(src, tgt[:, :-1])  # (B, T, V)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        return step

    counts = {}
    for name, cls in models.items():
        attnbook.set_seed(0)
        counts[name] = sum(p.numel() for p in cls(CONFIG).parameters())
    print("\nparameters: " + ", ".join(f"{name} {n:,}" for name, n in counts.items()))
    assert len(set(counts.values())) == 1, "the two models must have the same parameters"
    builders = {name: functools.partial(build, cls) for name, cls in models.items()}
    times, blocks = rotated_builds(builders, rounds, device, warmup=3)
    print(
        f"training steps, batch {batch}, source and target {src_len} tokens, "
        f"{rounds_note(rounds, len(blocks))} in {len(blocks)} blocks; "
        f"load average after: {load_average()}"
    )
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:24s} median {1e3 * med:7.1f} ms/step ({1 / med:6.2f} steps/s)")
    ratios = [t / o for o, t in zip(times["attnbook.EncoderDecoder"], times["nn.Transformer"])]
    print(
        f"  speed ratio attnbook / nn.Transformer (per round, >1 = attnbook faster): "
        f"{ratio_summary(ratios)}"
    )
    print("  the same in each block (the models built in this order):")
    for built, ts in blocks:
        ratios = [t / o for o, t in zip(ts["attnbook.EncoderDecoder"], ts["nn.Transformer"])]
        print(f"    {', '.join(built):40s} median {statistics.median(ratios):.3f}x")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run, seconds instead of minutes: "
        + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
        + " (an option given beside it wins); its figures compare nothing",
    )
    add_rounds_option(
        parser, 10, "rounds of decoding; training runs 3 x as many (rounded up to an even number)"
    )
    parser.add_argument("--batch", type=positive_int, default=BATCH, help="sequences per batch")
    parser.add_argument(
        "--source-len",
        type=positive_int,
        default=SRC_LEN,
        help=f"tokens per source (and training target), at most {CONFIG.context_length}",
    )
    parser.add_argument(
        "--new-tokens",
        type=positive_int,
        default=NEW_TOKENS,
        help=f"tokens each decoding writes, at most {CONFIG.context_length - 1}",
    )
    parser.add_argument("--threads", type=positive_int, default=2, help="torch CPU threads")
    add_device_option(parser, default="auto")
    args = parser.parse_args(argv)
    if args.quick:  # the preset's values as defaults: the options given still win
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    for option, value, most, why in (
        ("--source-len", args.source_len, CONFIG.context_length, "the model's context"),
        ("--new-tokens", args.new_tokens, CONFIG.context_length - 1, "its context after <bos>"),
    ):
        if value > most:
            parser.error(f"argument {option}: must be at most {most} ({why}), got {value}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = args.device
    print(describe(device))
    decoding(device, args.rounds, args.batch, args.source_len, args.new_tokens)
    training(device, 3 * args.rounds, args.batch, args.source_len)


if __name__ == "__main__":
    main()
