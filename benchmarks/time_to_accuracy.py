"""Seconds of training until 99% held-out exact-match on the reverse task (chapter 10).

Usage:
    python benchmarks/time_to_accuracy.py [--scale cpu|gpu] [--rounds 3] [--threads N]
        [--device auto]

Trains ``attnbook.GPT`` with :func:`attnbook.training.reverse_recipe` (the
chapter's run: ``"cpu"``, or ``"gpu"`` for the bigger one), evaluating on the
held-out split every ``eval_every`` steps and stopping at the first
evaluation with at least 99% exact-match. The time is training time only
(evaluations excluded), measured at that evaluation, so it is rounded up to
a multiple of ``eval_every`` steps. The run is seeded: every repeat takes the
same steps, only the seconds vary with the machine's load (printed before and
after). Tokens per second count the model's input tokens; on CUDA the peak
GPU memory is printed too. A benchmark, not a test: it exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
from _common import (
    DefaultsHelp,
    add_device_option,
    add_rounds_option,
    describe,
    load_average,
    positive_int,
)

import attnbook
from attnbook import GPT
from attnbook.training import reverse_recipe, train


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=DefaultsHelp
    )
    parser.add_argument(
        "--scale", choices=("cpu", "gpu"), default="cpu", help="reverse_recipe's setting"
    )
    add_rounds_option(parser, 3, "training runs")
    parser.add_argument(
        "--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)"
    )
    add_device_option(parser)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    task, model_config, config = reverse_recipe(args.scale)
    config = dataclasses.replace(config, target_exact_match=0.99, progress=False, device=device)
    print(describe(device))
    print(f"task: reverse, length {task.prompt_len}, {task.vocab_size - 1} symbols; {model_config}")
    print(f"{config}")
    seconds, steps = [], []
    for r in range(args.rounds):
        attnbook.set_seed(config.seed)
        model = GPT(model_config)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        history = train(model, task, config)
        em = history.eval_metrics["test_exact_match"]
        reached = next((i for i, v in enumerate(em) if v >= 0.99), None)
        if reached is None:
            print(f"  run {r}: did not reach 99% in {config.steps} steps (last {em[-1]:.4f})")
            continue
        step, sec = history.eval_step[reached], history.eval_seconds[reached]
        tokens = step * config.batch_size * task.input_len
        line = (
            f"  run {r}: {em[reached]:.2%} held-out exact-match after {step} steps, "
            f"{sec:.1f} s of training ({tokens / sec:,.0f} tokens/s)"
        )
        if device.type == "cuda":
            line += f", peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB"
        print(line)
        seconds.append(sec)
        steps.append(step)
    print(f"load average (1, 5, 15 min) after: {load_average()}")
    if seconds:
        print(
            f"time to 99%: median {statistics.median(seconds):.1f} s "
            f"(min {min(seconds):.1f}, max {max(seconds):.1f}) over {len(seconds)} runs, "
            f"{steps[0]} steps"
        )


if __name__ == "__main__":
    main()
