"""The package's command line: ``python -m attnbook train ...``.

Introduced in chapter 10 (``chapters/10_training.ipynb``). ``train`` trains a
GPT on one process or data-parallel under ``torchrun``, with the same loop as
:func:`attnbook.training.train` (which holds the data-parallel logic); this
module only parses arguments, starts ``torch.distributed`` when ``torchrun``
launched it, and saves the results::

    python -m attnbook train --task reverse --steps 300
    torchrun --nproc_per_node=2 -m attnbook train --task reverse --steps 300

``python -m attnbook.distributed ...`` is the same as ``python -m attnbook train ...``.

Data parallelism: every process holds a full copy of the model, takes its
slice of each global batch, computes gradients on it, and
DistributedDataParallel averages the gradients over the processes (an
all-reduce) before every optimiser step, so the copies stay identical. The
backend is ``gloo`` on CPUs and ``nccl`` on CUDA GPUs; several machines run
the same command with ``--nnodes`` and a rendezvous address (see ``torchrun
--help``). Only process 0 prints, shows progress and writes files.

This module is not imported by ``import attnbook``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import torch

from attnbook._validation import check_device
from attnbook.checkpoint import save_checkpoint
from attnbook.data import (
    TextDataset,
    associative_recall_task,
    grammar_corpus,
    load_text,
    reverse_task,
    sort_task,
)
from attnbook.model import GPT, GPTConfig
from attnbook.runtime import set_seed
from attnbook.training import TrainConfig, TrainingDiverged, train

__all__ = ["main", "train_command"]

TASKS = ("reverse", "sort", "recall", "text")


TRAIN_HELP = "Train an attnbook.GPT on a generated task or a text (data-parallel under torchrun)."


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line's parser and its ``train`` command's (whose usage a bad argument shows)."""
    parser = argparse.ArgumentParser(
        prog="python -m attnbook", description="The command line of the attnbook package."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help=TRAIN_HELP, description=TRAIN_HELP)
    return parser, _train_arguments(train)


def _train_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument(
        "--task", choices=TASKS, default="reverse", help="what to learn (default: %(default)s)"
    )
    p.add_argument(
        "--length",
        type=int,
        default=16,
        help="reverse/sort: symbols per prompt (default: %(default)s)",
    )
    p.add_argument(
        "--n-train",
        type=int,
        default=20000,
        help="reverse/sort/recall: examples (default: %(default)s)",
    )
    p.add_argument(
        "--n-test",
        type=int,
        default=1000,
        help="reverse/sort/recall: held out (default: %(default)s)",
    )
    p.add_argument("--text", type=Path, help="text: a UTF-8 file (default: the grammar corpus)")
    p.add_argument(
        "--seq-len", type=int, default=64, help="text: characters per window (default: %(default)s)"
    )
    p.add_argument("--d-model", type=int, default=64, help="model width (default: %(default)s)")
    p.add_argument("--n-heads", type=int, default=4, help="attention heads (default: %(default)s)")
    p.add_argument(
        "--n-layers", type=int, default=2, help="transformer blocks (default: %(default)s)"
    )
    p.add_argument("--steps", type=int, default=300, help="optimiser steps (default: %(default)s)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="the global batch, in examples (default: %(default)s)",
    )
    p.add_argument(
        "--lr", type=float, default=3e-3, help="AdamW's peak learning rate (default: %(default)s)"
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=30,
        help="linear warmup, in steps (cut to --steps if longer; default: %(default)s)",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=25,
        help="steps between held-out evaluations (default: %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="data, weights and batches (default: %(default)s)"
    )
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: the fastest)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--save", type=Path, help="write a checkpoint folder here (process 0)")
    p.add_argument("--history-json", type=Path, help="write the History as JSON here (process 0)")
    return p


def _data(args: argparse.Namespace) -> object:
    sizes = {"n_train": args.n_train, "n_test": args.n_test, "seed": args.seed}
    if args.task == "reverse":
        return reverse_task(length=args.length, **sizes)
    if args.task == "sort":
        return sort_task(length=args.length, **sizes)
    if args.task == "recall":
        return associative_recall_task(**sizes)
    text = load_text(args.text) if args.text is not None else grammar_corpus(4000, args.seed)
    return TextDataset(text, args.seq_len)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m attnbook COMMAND ...``; the only command is ``train``.

    Args:
        argv: the command-line arguments (default: ``sys.argv[1:]``), the command first.

    Returns:
        The exit status, 0.
    """
    parser, train_parser = _parsers()
    return _train(parser.parse_args(argv), train_parser)


def train_command(argv: list[str] | None = None) -> int:
    """Run ``train``'s arguments alone (``python -m attnbook.distributed ...``).

    Args:
        argv: the arguments after ``train`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status, 0.
    """
    parser = argparse.ArgumentParser(prog="python -m attnbook.distributed", description=TRAIN_HELP)
    return _train(_train_arguments(parser).parse_args(argv), parser)


# The arguments of the functions `train` calls, by the option that sets each: their errors
# name the argument ("n_test must be an int >= 1"), which a user of the command knows by its
# option. Words that are also plain English (steps, length, seed, path) are renamed only at
# the start of a message, where they name the argument.
_OPTIONS = {
    name: "--" + name.replace("_", "-")
    for name in (
        *("n_train", "n_test", "seq_len", "d_model", "n_heads", "n_layers"),
        *("batch_size", "warmup_steps", "eval_every"),
    )
}
_LEADING = {"length": "--length", "steps": "--steps", "lr": "--lr", "seed": "--seed"}


def _as_options(message: str, args: argparse.Namespace) -> str:
    """``message`` with the arguments it names written as the options that set them."""
    leading = _LEADING | ({"path": "--text"} if args.text is not None else {})
    first, _, rest = message.partition(" ")
    message = f"{leading.get(first, first)} {rest}" if rest else message
    return re.sub(r"\b[a-z]+(?:_[a-z]+)+\b", lambda m: _OPTIONS.get(m[0], m[0]), message)


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse ``--save`` and ``--history-json`` paths that could not be written after training."""
    if args.save is not None and args.save.exists() and not args.save.is_dir():
        raise ValueError(f"--save must name a checkpoint folder, got the file {str(args.save)!r}")
    if args.history_json is not None:
        if args.history_json.is_dir():
            raise ValueError(
                f"--history-json must name a file, got the folder {str(args.history_json)!r}"
            )
        if not args.history_json.parent.is_dir():
            raise ValueError(
                "--history-json must name a file in an existing folder, got "
                f"{str(args.history_json)!r}"
            )


def _train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Train as ``args`` say, and save what was asked for (process 0).

    A bad argument (a ``ValueError`` while the data and configs are built)
    ends in ``parser.error``: the usage and the message, exit status 2, no
    traceback. Errors once training has started keep their traceback.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = args.device
    if world > 1:  # launched by torchrun: one process per rank
        dist = torch.distributed
        use_cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            device = "cuda"
        else:
            device = "cpu"
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank = int(os.environ.get("RANK", "0"))
    try:
        try:
            _check_outputs(args)  # before training: a bad path must not waste the run
            if device is not None:
                check_device(device, "device", available=True, advice="leave --device out")
            data = _data(args)
            config = GPTConfig(
                vocab_size=data.vocab_size,
                context_length=data.input_len,
                d_model=args.d_model,
                n_heads=args.n_heads,
                n_layers=args.n_layers,
            )
            train_config = TrainConfig(
                steps=args.steps,
                batch_size=args.batch_size,
                lr=args.lr,
                warmup_steps=min(args.warmup_steps, args.steps),  # --steps 20: a 20-step warmup
                eval_every=args.eval_every,
                seed=args.seed,
                device=device,
                compile=args.compile,
                progress=not args.no_progress,
            )
        except ValueError as error:  # e.g. --d-model 30 --n-heads 4
            parser.error(_as_options(str(error), args))
        set_seed(args.seed)  # the same initial weights on every process
        model = GPT(config)
        try:
            history = train(model, data, train_config)
        except TrainingDiverged as error:  # not a bug to trace: say what happened, exit 1
            raise SystemExit(f"{parser.prog}: {error}") from None
        if rank == 0:
            last = {k: round(v[-1], 4) for k, v in history.eval_metrics.items()}
            print(
                f"{len(history.train_loss)} steps in {history.seconds:.1f} s on {world} "
                f"process(es); held-out: {last}"
            )
            if args.save is not None:
                extra = {"task": args.task, "train_config": vars(train_config)}
                if isinstance(data, TextDataset):
                    extra["chars"] = data.tokenizer.chars
                save_checkpoint(args.save, model, extra)
            if args.history_json is not None:
                record = {k: getattr(history, k) for k in history.__dataclass_fields__}
                args.history_json.write_text(json.dumps(record))
    finally:
        if world > 1:
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
