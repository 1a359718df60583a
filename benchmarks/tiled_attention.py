"""Peak memory and time of tiled attention against the naive path and PyTorch's kernel (chapter 14).

Usage:
    python benchmarks/tiled_attention.py [--lengths 256 512 1024 2048] [--rounds 5]
        [--threads 1] [--device auto] [--block-size 64]

Three ways to compute the same attention output ``softmax(Q Kᵀ / sqrt(d)) V``
for one sequence of ``T`` queries and ``T`` keys, ``H`` heads (shape
``(1, H, T, d)``), causal:

- ``naive``: ``attnbook.scaled_dot_product_attention(..., need_weights=True)``,
  which builds the ``(H, T, T)`` scores and weights (the peer of the others);
- ``tiled``: ``attnbook.tiled_attention(..., causal=True)``, FlashAttention's
  online softmax as a Python loop over key blocks: only ``(H, T, block)`` scores;
- ``fused``: ``F.scaled_dot_product_attention(..., is_causal=True)``, PyTorch's
  fused kernel (flash or memory-efficient on a GPU, a fused C++ loop on a CPU).

Memory, two figures per method and length:

- ``largest``: the largest tensor any operation creates, recorded by a
  ``TorchDispatchMode`` hook (exact, the same on every machine);
- ``peak``: the measured peak memory above what the inputs hold. On a GPU,
  ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; on a
  Linux CPU, the peak resident set size (``VmHWM``, reset through
  ``/proc/self/clear_refs``) of a fresh child process that creates the inputs,
  resets the peak and runs the method once (glibc's ``MALLOC_MMAP_THRESHOLD_``
  fixed at 64 KiB, so freed tensors leave the resident set). Elsewhere ``n/a``.

Time: each round calls every method once, interleaved (load from other
programs slows them alike), ratios are taken within a round and the table
shows medians over ``--rounds`` rounds. Each method's output is checked
against ``fused`` before timing. A benchmark, not a test: it prints figures
and the machine, and asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    int_at_least,
    load_average,
    positive_int,
)

import attnbook
from attnbook.runtime import largest_allocation, synchronize

HEADS, WIDTH = 4, 64  # H, d
METHODS = ("naive", "tiled", "fused")


def make_inputs(seq_len: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, HEADS, seq_len, WIDTH, generator=g).to(device) for _ in range(3))


def method(name: str, block_size: int) -> Callable[..., torch.Tensor]:
    """The function ``(q, k, v) -> output (1, H, T, d)`` of each method, causal."""
    if name == "naive":
        return lambda q, k, v: attnbook.scaled_dot_product_attention(q, k, v, is_causal=True)[0]
    if name == "tiled":
        return lambda q, k, v: attnbook.tiled_attention(q, k, v, block_size=block_size, causal=True)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def largest_tensor(name: str, seq_len: int, block_size: int) -> int:
    q, k, v = make_inputs(seq_len, torch.device("cpu"))
    with torch.no_grad():
        return largest_allocation(lambda: method(name, block_size)(q, k, v))


def _read_hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM")


def _read_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmRSS")


def child_peak(name: str, seq_len: int, block_size: int) -> None:
    """In a fresh process: print the peak RSS (bytes) above the inputs while ``name`` runs."""
    torch.set_num_threads(1)
    q, k, v = make_inputs(seq_len, torch.device("cpu"))
    fn = method(name, block_size)
    with torch.no_grad():
        fn(q[..., :8, :], k[..., :8, :], v[..., :8, :])  # load the kernels' code first
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size (VmHWM) to the current RSS
        before = _read_rss_bytes()
        output = fn(q, k, v)
        peak = _read_hwm_bytes()
    del output
    print(peak - before)


def measured_peak(name: str, seq_len: int, block_size: int, device: torch.device) -> int | None:
    """Peak bytes above the inputs while ``name`` runs once; ``None`` where it cannot be read."""
    if device.type == "cuda":
        q, k, v = make_inputs(seq_len, device)
        fn = method(name, block_size)
        with torch.no_grad():
            fn(q[..., :8, :], k[..., :8, :], v[..., :8, :])
            synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            output = fn(q, k, v)
            synchronize(device)
            peak = torch.cuda.max_memory_allocated(device) - before
        del output
        return peak
    if device.type != "cpu" or not os.path.exists("/proc/self/clear_refs"):
        return None
    args = [sys.executable, __file__, "--child", name, str(seq_len), str(block_size)]
    # A fixed mmap threshold makes glibc return every large freed block to the system at
    # once, so that the resident set follows the live tensors (no reuse of a grown heap).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        return None
    return int(result.stdout.strip().splitlines()[-1])


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child_peak(argv[1], int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--lengths", type=positive_int, nargs="+", default=[256, 512, 1024, 2048], help="T = S"
    )
    add_rounds_option(parser, 5, "interleaved timed rounds per length")
    parser.add_argument(
        "--threads",
        type=int_at_least(0),
        default=1,
        help="torch threads (CPU); 0: torch's own number",
    )
    add_device_option(parser, default="auto")
    parser.add_argument("--block-size", type=positive_int, default=64, help="keys per tile")
    args = parser.parse_args(argv)
    device = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    print(describe(device))
    print(
        f"causal attention, shape (1, H={HEADS}, T, d={WIDTH}) float32, T = S, "
        f"block_size {args.block_size}; time: median over {args.rounds} interleaved rounds"
    )
    print()
    print(
        f"{'T':>6} {'method':<6} {'largest MiB':>12} {'peak MiB':>10} {'ms/call':>10} "
        f"{'time / fused':>13} {'time / naive':>13}"
    )
    for seq_len in args.lengths:
        q, k, v = make_inputs(seq_len, device)
        fns = [method(name, args.block_size) for name in METHODS]
        with torch.no_grad():
            reference = fns[2](q, k, v)
            for fn in fns:  # the three compute the same output
                torch.testing.assert_close(fn(q, k, v), reference, rtol=1e-4, atol=1e-4)
            times: list[list[float]] = [[] for _ in METHODS]
            for _ in range(args.rounds):
                for i, fn in enumerate(fns):
                    synchronize(device)
                    start = time.perf_counter()
                    fn(q, k, v)
                    synchronize(device)
                    times[i].append(time.perf_counter() - start)
        del q, k, v, reference
        for i, name in enumerate(METHODS):
            vs_fused = statistics.median(a / b for a, b in zip(times[i], times[2], strict=True))
            vs_naive = statistics.median(a / b for a, b in zip(times[i], times[0], strict=True))
            print(
                f"{seq_len:>6} {name:<6} {mib(largest_tensor(name, seq_len, args.block_size)):>12} "
                f"{mib(measured_peak(name, seq_len, args.block_size, device)):>10} "
                f"{statistics.median(times[i]) * 1e3:>10.2f} {vs_fused:>12.2f}x {vs_naive:>12.2f}x",
                flush=True,
            )
    scores = HEADS * max(args.lengths) ** 2 * 4
    print(
        f"\none (H, T, T) float32 matrix at T = {max(args.lengths)}: {scores / 2**20:.1f} MiB; "
        f"one (H, T, block) tile: {HEADS * max(args.lengths) * args.block_size * 4 / 2**20:.2f} MiB"
    )
    print(f"load average (1, 5, 15 min) after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
