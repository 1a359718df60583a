"""Data-parallel training (``torchrun`` + DistributedDataParallel) equals one process.

Two CPU processes with the gloo backend, each taking half of every global
batch, must record the same loss curve as one process with the whole batch.
They are not bit-identical: the gradient is summed in another order (each
process averages its half, then the all-reduce averages the two halves), so
float32 rounding differs in the last bits and AdamW carries the difference
on. Measured over 20 steps: relative differences up to about 1e-7 (a float32
ulp); the test allows 1e-5, a hundred times that and still far below what a
real mistake produces: both processes taking the same half of the batch
changed the losses by up to 2e-2 (measured), and so would a missing
all-reduce or gradients summed instead of averaged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnbook
from attnbook import GPT, GPTConfig, set_seed
from attnbook.data import reverse_task
from attnbook.training import TrainConfig, train

ARGS = {"length": 6, "steps": 20, "warmup_steps": 4, "d_model": 32, "n_layers": 1, "seed": 3}
TOLERANCE = 1e-5  # relative; measured differences are about 1e-7


def _env() -> dict[str, str]:
    """The children's environment: one thread each, and the attnbook this test imported first.

    The children run ``python -m attnbook`` in a temporary folder, where a
    relative ``PYTHONPATH=src`` (a checkout run without installing) finds nothing.
    """
    here = str(Path(attnbook.__file__).resolve().parents[1])  # the folder holding attnbook/
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    return os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _single_process() -> list[float]:
    """The same run as the command line's, in this process, with the whole batch."""
    task = reverse_task(length=ARGS["length"], seed=ARGS["seed"])
    set_seed(ARGS["seed"])
    model = GPT(
        GPTConfig(
            vocab_size=task.vocab_size,
            context_length=task.input_len,
            d_model=ARGS["d_model"],
            n_heads=4,
            n_layers=ARGS["n_layers"],
        )
    )
    config = TrainConfig(
        steps=ARGS["steps"],
        batch_size=64,
        lr=3e-3,
        warmup_steps=ARGS["warmup_steps"],
        eval_every=25,
        seed=ARGS["seed"],
        device="cpu",
        progress=False,
    )
    return train(model, task, config).train_loss


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is missing")
def test_two_processes_match_one(tmp_path: object) -> None:
    out = tmp_path / "history.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    cmd += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}"]
    cmd += ["-m", "attnbook", "train", "--task", "reverse", "--no-progress", "--device", "cpu"]
    for name, value in ARGS.items():
        cmd += [f"--{name.replace('_', '-')}", str(value)]
    cmd += ["--batch-size", "64", "--lr", "3e-3", "--eval-every", "25", "--history-json", str(out)]
    env = _env()
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "on 2 process(es)" in done.stdout  # it really ran data-parallel
    parallel = json.loads(out.read_text())["train_loss"]
    single = _single_process()
    assert len(parallel) == len(single) == ARGS["steps"]
    assert single[-1] < single[0]  # it trains
    worst = max(abs(p - s) / abs(s) for p, s in zip(parallel, single))
    print(f"largest relative difference over {len(single)} steps: {worst:.2e}")
    assert worst <= TOLERANCE


# Two processes of a translation task: its batches are padded, so the two halves of a batch hold
# different numbers of targets (33 and 25 at the first step below). Averaging the halves' means
# gave a first loss of 3.48055 where one process has 3.47899 (measured); the halves' sums over
# the whole batch's count give it to the last bit.
TRANSLATION_SCRIPT = """
import json, os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
from attnbook import set_seed
from attnbook.data import translation_task
from attnbook.rnn import RNNConfig, RNNEncoderDecoder
from attnbook.training import IGNORE_INDEX, TrainConfig, train

CONFIG = dict(steps=3, batch_size=8, lr=1e-2, warmup_steps=0, seed=3, device="cpu", progress=False)


def run():
    task = translation_task(n_train=300, n_test=50, n_test_long=20, seed=1)
    set_seed(0)
    config = RNNConfig(task.src_vocab_size, task.tgt_vocab_size, task.input_len, attention="dot")
    return train(RNNEncoderDecoder(config), task, TrainConfig(**CONFIG)).train_loss


def worker(rank, port, queue):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    losses = run()
    if rank == 0:
        queue.put(losses)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    single = run()
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(int(sys.argv[1]), queue), nprocs=2)
    task = translation_task(n_train=300, n_test=50, n_test_long=20, seed=1)
    _, targets = task.batch("train", 8, torch.Generator().manual_seed(3))
    halves = [int((half != IGNORE_INDEX).sum()) for half in targets.split(4)]
    print(json.dumps({"single": single, "parallel": queue.get(), "halves": halves}))
"""


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is missing")
def test_two_processes_match_one_where_the_halves_hold_different_numbers_of_targets(
    tmp_path: object,
) -> None:
    script = tmp_path / "translation_ddp.py"
    script.write_text(TRANSLATION_SCRIPT)
    env = _env()
    done = subprocess.run(
        [sys.executable, str(script), str(_free_port())],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["halves"][0] != found["halves"][1]  # the case this test is for
    assert found["parallel"][0] == pytest.approx(found["single"][0], rel=1e-6)  # before any step
    worst = max(abs(p - s) / abs(s) for p, s in zip(found["parallel"], found["single"]))
    assert worst <= TOLERANCE


@pytest.mark.parametrize(
    ("module", "args"), [("attnbook", ["train", "--help"]), ("attnbook.distributed", ["--help"])]
)
def test_the_command_line_and_its_alias_take_the_same_arguments(
    module: str, args: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--task" in done.stdout
    assert "--history-json" in done.stdout


def test_importing_the_alias_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``python -m attnbook.distributed`` runs the command line; an import does not."""
    monkeypatch.setattr(sys, "argv", ["attnbook.distributed", "--no-such-option"])
    names = runpy.run_module("attnbook.distributed", run_name="attnbook.distributed")
    assert callable(names["train_command"])


def test_the_help_names_every_options_default() -> None:
    """--steps, --lr, --batch-size and the others had no help, so --help hid their defaults."""
    from attnbook.__main__ import _parsers

    _, train_parser = _parsers()
    text = " ".join(train_parser.format_help().split())  # argparse wraps the lines
    for action in train_parser._actions:
        if action.default not in (None, False, argparse.SUPPRESS):
            assert f"default: {action.default}" in text, action.option_strings
    assert "--lr LR AdamW's peak learning rate (default: 0.003)" in text


def test_the_command_line_needs_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attnbook"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "train" in done.stderr


def test_fewer_steps_than_the_default_warmup_run(tmp_path: object) -> None:
    """--steps 3 with the default --warmup-steps 30: the warmup is cut to the 3 steps."""
    from attnbook.__main__ import main

    out = tmp_path / "history.json"
    args = ["train", "--task", "reverse", "--length", "6", "--steps", "3", "--d-model", "16"]
    args += ["--n-layers", "1", "--batch-size", "8", "--no-progress", "--device", "cpu"]
    assert main([*args, "--history-json", str(out)]) == 0
    lrs = json.loads(out.read_text())["lr"]
    assert lrs == pytest.approx([1e-3, 2e-3, 3e-3])  # a 3-step warmup up to --lr 3e-3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--d-model", "30", "--n-heads", "4"], "--d-model must be a multiple of --n-heads"),
        (["--steps", "0"], "--steps must be an int >= 1, got 0"),
        (["--device", "gpu"], "device must be a device such as 'cpu'"),
        (["--length", "3"], r"--n-train \+ --n-test = 21000 distinct examples are asked for"),
        (["--n-test", "0"], "--n-test must be an int >= 1, got 0"),
        (["--task", "text", "--seq-len", "0"], "--seq-len must be an int >= 1, got 0"),
        (["--task", "text", "--text", "no-such-file.txt"], "--text must be an existing text"),
        (["--warmup-steps", "-1"], r"--warmup-steps must be an int in \[0, 300\]"),
        (["--history-json", "/no-such-folder-xyz/h.json"], "--history-json must name a file in"),
        (["--history-json", "."], "--history-json must name a file, got the folder"),
    ],
)
def test_a_bad_argument_is_a_usage_error_not_a_traceback(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnbook.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m attnbook train")
    assert re.search(rf"python -m attnbook train: error: {message}", err), err


def test_n_train_and_n_test_size_a_small_task(tmp_path: object) -> None:
    """--length 3 has about 1e3 distinct prompts: too few for the default 21 000 examples."""
    from attnbook.__main__ import main

    out = tmp_path / "history.json"
    args = ["train", "--length", "3", "--n-train", "400", "--n-test", "50", "--steps", "2"]
    args += ["--d-model", "16", "--n-layers", "1", "--batch-size", "8", "--no-progress"]
    assert main([*args, "--device", "cpu", "--history-json", str(out)]) == 0
    assert len(json.loads(out.read_text())["train_loss"]) == 2


def test_a_diverging_run_ends_with_a_message_not_a_traceback() -> None:
    from attnbook.__main__ import main

    args = ["train", "--length", "6", "--n-train", "400", "--n-test", "50", "--lr", "1e6"]
    args += ["--warmup-steps", "1", "--d-model", "16", "--n-layers", "1", "--batch-size", "8"]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--steps", "20", "--no-progress", "--device", "cpu"])
    assert re.match(
        r"python -m attnbook train: the training loss is nan at step \d+", exit_.value.code
    )


def test_paths_that_cannot_be_written_are_refused_before_training(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """They were found only after the run (a FileNotFoundError, or save_checkpoint's error)."""
    from attnbook.__main__ import main

    taken = tmp_path / "a-file"
    taken.write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--save", str(taken), "--device", "cpu", "--no-progress"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert "--save must name a checkpoint folder, got the file" in err
    assert "steps in" not in out  # nothing was trained


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_this_machine_lacks_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from attnbook.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--device", "cuda", "--no-progress"])
    assert exit_.value.code == 2
    assert "device='cuda' asks for a CUDA GPU" in capsys.readouterr().err
