"""Generation with and without the key-value cache, and the cache's memory (chapter 14).

Usage:
    python benchmarks/kv_cache.py [--new-tokens 32 128 256 480] [--rounds 3]
        [--threads 1] [--device auto]

Part 1, time: ``GPT.generate(prompt, N, temperature=0, use_cache=True)``
against ``use_cache=False`` (the peer: one forward pass over the whole window
per token), for several generated lengths ``N``, on a randomly initialised
GPT (4 layers, 4 heads, width 128, context 512, vocabulary 65, learned
positions), one prompt of 16 tokens. After one untimed call of each (the
first call pays for allocations and lazy initialisation), the two run in
``--rounds`` interleaved rounds, one call of each per round, the order
rotating so that neither always runs first (``_common.interleaved_rounds``);
the speed-up is ``time without / time with`` within a round, median over
rounds. The tokens of every call are compared (they must be identical). A last row
generates 128 tokens with a context of 64: the first 48 fill the context
with cheap decode steps, then the window slides and the cache is rebuilt by
a full forward pass every step (see ``GPT.generate``), so the speed-up shrinks.

Part 2, memory: the same model with ``n_kv_heads`` = 4 (multi-head), 2
(grouped-query) and 1 (multi-query): ``KVCache.nbytes`` after prefilling the
full context for a batch of 8, checked against the formula
``2 * n_layers * B * H_kv * S * Dh * bytes_per_element``, and the median time
of one ``decode`` step at that length: each call appends to the same
prefilled cache, put back as it was before every call (the cache's lists of
tensors, not a copy: a step concatenates, it does not write into them), the
three models' steps timed in interleaved rounds like part 1.

A benchmark, not a test: it prints figures and the machine, asserts nothing
about speed (only that the tokens agree and that the formula holds).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    int_at_least,
    interleaved_rounds,
    keeping,
    load_average,
    positive_int,
)

import attnbook
from attnbook.generation import KVCache

BASE = {"vocab_size": 65, "d_model": 128, "n_heads": 4, "n_layers": 4}
PROMPT_LEN = 16
CONTEXT = 512
WARMUP = 1  # untimed calls of each function first


def make_model(context_length: int, device: torch.device, n_kv_heads: int | None = None):
    torch.manual_seed(0)
    config = attnbook.GPTConfig(**BASE, context_length=context_length, n_kv_heads=n_kv_heads)
    return attnbook.GPT(config).to(device).eval()


def generation_row(
    model: attnbook.GPT, n_new: int, rounds: int, device: torch.device, label: str
) -> None:
    prompt = torch.randint(0, 65, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    outputs: list[torch.Tensor] = []  # every call's tokens, with and without the cache
    calls = [
        keeping(lambda c=cached: model.generate(prompt, n_new, temperature=0, use_cache=c), outputs)
        for cached in (True, False)
    ]
    with_cache, without = interleaved_rounds(calls, rounds, device, warmup=WARMUP)
    if not all(torch.equal(t, outputs[0]) for t in outputs):
        raise SystemExit(f"tokens differ with and without the cache at N = {n_new}")
    ratios = [t_without / t_with for t_with, t_without in zip(with_cache, without)]
    print(
        f"{label:<12} {n_new:>6} {statistics.median(with_cache) * 1e3:>12.1f} "
        f"{statistics.median(without) * 1e3:>14.1f} "
        f"{n_new / statistics.median(with_cache):>10.0f} {statistics.median(ratios):>9.2f}x   yes",
        flush=True,
    )


def decode_step(model: attnbook.GPT, prompt: torch.Tensor) -> tuple[Callable[[], None], KVCache]:
    """One ``decode`` step after a prefill of ``prompt``, as a function, and the cache it grows.

    Before every call the cache is put back as the prefill left it: its lists
    of per-layer tensors are restored (a step concatenates onto them, so they
    are unchanged), which costs nothing next to the step.
    """
    _, cache = model.prefill(prompt)
    keys, values = list(cache.keys), list(cache.values)

    def step() -> None:
        cache.keys[:], cache.values[:] = keys, values
        model.decode(prompt[:, :1], cache)

    return step, cache


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
    kinds = ((4, "multi-head"), (2, "grouped"), (1, "multi-query"))
    models = [make_model(context_length, device, n_kv_heads) for n_kv_heads, _ in kinds]
    steps, caches = zip(*(decode_step(model, prompt) for model in models))
    times = interleaved_rounds(list(steps), rounds, device, warmup=WARMUP)
    for (n_kv_heads, kind), model, cache, step_times in zip(kinds, models, caches, times):
        c = model.config
        d_head = c.d_model // c.n_heads
        formula = 2 * c.n_layers * batch * n_kv_heads * cache.length * d_head * 4  # float32
        if cache.nbytes != formula:
            raise SystemExit(f"nbytes {cache.nbytes} != formula {formula}")
        per_token = cache.nbytes // (batch * cache.length)
        print(
            f"{n_kv_heads:>10} {kind:<12} {cache.nbytes / 2**20:>10.2f} {formula / 2**20:>12.2f} "
            f"{per_token:>12} {statistics.median(step_times) * 1e3:>10.2f} "
            f"{model.num_parameters():>9}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--new-tokens",
        type=positive_int,
        nargs="+",
        default=[32, 128, 256, 480],
        help=f"tokens to generate; prompt ({PROMPT_LEN}) + N must fit the context {CONTEXT}",
    )
    add_rounds_option(parser, 3, "interleaved timed rounds per row")
    parser.add_argument(
        "--threads",
        type=int_at_least(0),
        default=1,
        help="torch threads (CPU); 0: torch's own number",
    )
    add_device_option(parser, default="auto")
    args = parser.parse_args(argv)
    too_long = [n for n in args.new_tokens if PROMPT_LEN + n > CONTEXT]
    if too_long:
        parser.error(
            f"--new-tokens must be at most {CONTEXT - PROMPT_LEN} (prompt {PROMPT_LEN} + N must "
            f"fit the context {CONTEXT}), got {too_long[0]}"
        )
    device = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe(device))
    model = make_model(CONTEXT, device)
    print(
        f"GPT {BASE}, context {CONTEXT}, {model.num_parameters()} parameters, float32; "
        f"prompt {PROMPT_LEN} tokens, greedy; median over {args.rounds} interleaved rounds "
        f"(order rotating) after {WARMUP} untimed call(s) of each"
    )
    print()
    print(
        f"{'setting':<12} {'N':>6} {'cache ms':>12} {'no-cache ms':>14} {'tokens/s':>10} "
        f"{'speed-up':>10} same tokens"
    )
    for n_new in args.new_tokens:
        generation_row(model, n_new, args.rounds, device, f"context {CONTEXT}")
    generation_row(make_model(64, device), 128, args.rounds, device, "context 64")
    memory_rows(CONTEXT, args.rounds, device)
    print(f"\nload average (1, 5, 15 min) after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
