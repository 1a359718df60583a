"""Generation with and without the key-value cache, and the cache's memory (chapter 14).

Usage:
    python benchmarks/kv_cache.py [--new-tokens 32 128 256 480] [--rounds 3]
        [--threads 1] [--device auto]

Part 1, time: ``GPT.generate(prompt, N, temperature=0, use_cache=True)``
against ``use_cache=False`` (the peer: one forward pass over the whole window
per token), for several generated lengths ``N``, on a randomly initialised
GPT (4 layers, 4 heads, width 128, context 512, vocabulary 65, learned
positions), one prompt of 16 tokens. Each round runs both, interleaved; the
speed-up is ``time without / time with`` within a round, median over rounds.
The tokens of the two are compared (they must be identical). A last row
generates 128 tokens with a context of 64: the first 48 fill the context
with cheap decode steps, then the window slides and the cache is rebuilt by
a full forward pass every step (see ``GPT.generate``), so the speed-up shrinks.

Part 2, memory: the same model with ``n_kv_heads`` = 4 (multi-head), 2
(grouped-query) and 1 (multi-query): ``KVCache.nbytes`` after prefilling the
full context for a batch of 8, checked against the formula
``2 * n_layers * B * H_kv * S * Dh * bytes_per_element``, and the median time
of one ``decode`` step at that length.

A benchmark, not a test: it prints figures and the machine, asserts nothing
about speed (only that the tokens agree and that the formula holds).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _common import describe, load_average

import attnbook
from attnbook.runtime import synchronize

BASE = {"vocab_size": 65, "d_model": 128, "n_heads": 4, "n_layers": 4}
PROMPT_LEN = 16


def make_model(context_length: int, device: torch.device, n_kv_heads: int | None = None):
    torch.manual_seed(0)
    config = attnbook.GPTConfig(**BASE, context_length=context_length, n_kv_heads=n_kv_heads)
    return attnbook.GPT(config).to(device).eval()


def timed(fn, device: torch.device) -> tuple[float, object]:
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - start, result


def generation_row(
    model: attnbook.GPT, n_new: int, rounds: int, device: torch.device, label: str
) -> None:
    prompt = torch.randint(0, 65, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    with_cache, without, ratios = [], [], []
    for _ in range(rounds):
        t_with, tokens_with = timed(
            lambda: model.generate(prompt, n_new, temperature=0, use_cache=True), device
        )
        t_without, tokens_without = timed(
            lambda: model.generate(prompt, n_new, temperature=0, use_cache=False), device
        )
        if not torch.equal(tokens_with, tokens_without):
            raise SystemExit(f"tokens differ with and without the cache at N = {n_new}")
        with_cache.append(t_with)
        without.append(t_without)
        ratios.append(t_without / t_with)
    print(
        f"{label:<12} {n_new:>6} {statistics.median(with_cache) * 1e3:>12.1f} "
        f"{statistics.median(without) * 1e3:>14.1f} "
        f"{n_new / statistics.median(with_cache):>10.0f} {statistics.median(ratios):>9.2f}x   yes",
        flush=True,
    )


def memory_rows(context_length: int, rounds: int, device: torch.device) -> None:
    batch = 8
    prompt = torch.randint(0, 65, (batch, context_length - 1), generator=torch.Generator())
    prompt = prompt.to(device)
    print(
        f"\nKV cache after prefilling {context_length - 1} positions, batch {batch}, then one "
        "decode step (cache length = context):"
    )
    print(
        f"{'n_kv_heads':>10} {'kind':<12} {'cache MiB':>10} {'formula MiB':>12} "
        f"{'bytes/token':>12} {'decode ms':>10} {'params':>9}"
    )
    for n_kv_heads, kind in ((4, "multi-head"), (2, "grouped"), (1, "multi-query")):
        model = make_model(context_length, device, n_kv_heads)
        c = model.config
        steps = []
        for _ in range(rounds):
            _, cache = model.prefill(prompt)
            step, _ = timed(lambda m=model, kv=cache: m.decode(prompt[:, :1], kv), device)
            steps.append(step)
        d_head = c.d_model // c.n_heads
        formula = 2 * c.n_layers * batch * n_kv_heads * cache.length * d_head * 4  # float32
        if cache.nbytes != formula:
            raise SystemExit(f"nbytes {cache.nbytes} != formula {formula}")
        per_token = cache.nbytes // (batch * cache.length)
        print(
            f"{n_kv_heads:>10} {kind:<12} {cache.nbytes / 2**20:>10.2f} {formula / 2**20:>12.2f} "
            f"{per_token:>12} {statistics.median(steps) * 1e3:>10.2f} "
            f"{model.num_parameters():>9}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[32, 128, 256, 480])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (CPU); 0 = default")
    parser.add_argument("--device", default="auto", help="auto (attnbook.get_device()), cpu, cuda")
    args = parser.parse_args(argv)
    device = attnbook.get_device() if args.device == "auto" else torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe(device))
    context = 512
    model = make_model(context, device)
    print(
        f"GPT {BASE}, context {context}, {model.num_parameters()} parameters, float32; "
        f"prompt {PROMPT_LEN} tokens, greedy; median over {args.rounds} interleaved rounds"
    )
    print()
    print(
        f"{'setting':<12} {'N':>6} {'cache ms':>12} {'no-cache ms':>14} {'tokens/s':>10} "
        f"{'speed-up':>10} same tokens"
    )
    for n_new in args.new_tokens:
        if PROMPT_LEN + n_new > context:
            raise SystemExit(f"--new-tokens {n_new}: prompt + N must fit the context {context}")
        generation_row(model, n_new, args.rounds, device, "context 512")
    generation_row(make_model(64, device), 128, args.rounds, device, "context 64")
    memory_rows(context, args.rounds, device)
    print(f"\nload average (1, 5, 15 min) after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
