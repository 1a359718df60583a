"""What the benchmarks share: the machine they describe, and the nanoGPT-style peer.

A figure means little without its machine: each script in `benchmarks/` prints
the CPU model, torch's version and threads, and the load average (how busy the
machine was with other work). How they time and what they allocate is measured
with the package's own helpers, the ones chapter 14 uses:
`attnbook.runtime.seconds_per_call`, `synchronize` and `largest_allocation`;
where a table compares several functions with each other, `interleaved_rounds`
times them in rounds, one call of each per round, and keeps every figure;
`rotated_builds` does so for models, built in a balanced order; `quartiles` and
`ratio_summary` sum the figures up. The command-line options are checked by
the argparse types `positive_int`, `int_at_least`, `positive_float`,
`folder_option` and `device_option`: a bad value gets argparse's usage error, not a traceback;
`DefaultsHelp`, their `formatter_class`, shows each option's default in `--help`. Every
script's timed repetitions are `--rounds` (`add_rounds_option`; `--repeats`, as six of
them said before, still works).
`NanoGPT` is the minimal GPT that `train_throughput.py` and `shakespeare.py`
compare `attnbook.GPT` with, written once here. The scripts import this file
as `_common` (the folder of a script run as `python benchmarks/x.py` is on
`sys.path`).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import nn

import attnbook
from attnbook._validation import check_device
from attnbook.runtime import synchronize

if TYPE_CHECKING:
    from attnbook import GPTConfig


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """The system's load averages, to judge how busy the machine was (other programs' work)."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "unknown"


def describe(device: str | torch.device) -> str:
    """The lines a benchmark prints first: device, CPU, threads, versions, GPU, load.

    ``device`` is a ``torch.device`` or its name (``"cpu"``, ``"cuda:0"``).
    """
    device = check_device(device, "device")
    lines = [
        f"device {device}; CPU {cpu_model()} ({os.cpu_count()} logical CPUs, "
        f"{platform.machine()}); torch threads {torch.get_num_threads()}; "
        f"torch {torch.__version__}; Python {platform.python_version()}"
    ]
    if device.type == "cuda":
        lines.append(f"GPU {torch.cuda.get_device_name(device)}")
    lines.append(f"load average (1, 5, 15 min) before: {load_average()}")
    return "\n".join(lines)


# ------------------------------------------------------------------ command-line options


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=``: a whole number ``>= minimum``, else argparse's usage error.

    ``parser.add_argument("--threads", type=int_at_least(0))`` refuses ``-1``
    (and ``two``) with ``argument --threads: must be a whole number >= 0, got '-1'``.
    """

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value

    return whole_number


def positive_int(text: str) -> int:
    """An argparse ``type=``: a whole number >= 1 (rounds, threads, sizes)."""
    return int_at_least(1)(text)


def positive_float(text: str) -> float:
    """An argparse ``type=``: a finite number > 0 (seconds), else argparse's usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


class DefaultsHelp(argparse.HelpFormatter):
    """The scripts' ``formatter_class``: each option's help ends with its default, unless the
    help says it already or there is none to say (``None``, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or any(action.default is x for x in (None, False, argparse.SUPPRESS)):
            return text
        if not action.option_strings:
            return text
        default = action.default
        shown = " ".join(map(str, default)) if isinstance(default, list) else "%(default)s"
        return f"{text} (default: {shown})".lstrip()


def add_rounds_option(
    parser: argparse.ArgumentParser,
    default: int,
    help: str,
    type: Callable[[str], int] = positive_int,
) -> None:
    """Give ``parser`` the scripts' ``--rounds`` option: how many timed repetitions.

    ``--repeats``, its name in some scripts before, is a hidden alias (not in ``--help``), so
    that commands written with it still run; ``args.rounds`` holds either.
    """
    parser.add_argument("--rounds", type=type, default=default, help=help)
    parser.add_argument(
        "--repeats", dest="rounds", type=type, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def folder_option(text: str) -> Path:
    """An argparse ``type=`` for a folder to write into (``--out DIR``), made if missing.

    A path where a file stands (itself or a parent) gets argparse's usage error before the
    benchmark runs, not a ``FileExistsError`` once its figures are computed.
    """
    path = Path(text)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            raise argparse.ArgumentTypeError(f"{str(part)!r} is a file, not a folder")
    return path


DEVICE_TYPES = ("cpu", "cuda", "mps")


def device_option(text: str) -> torch.device:
    """An argparse ``type=`` for ``--device``: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

    ``auto`` is :func:`attnbook.get_device` (the fastest device there is, or
    the one ``ATTNBOOK_DEVICE`` names). A name that is no device, or a GPU
    this machine does not have, gets argparse's usage error; what
    ``attnbook``'s ``check_device`` says about it is the message.

    Returns:
        The ``torch.device``.
    """
    try:
        if text == "auto":
            return attnbook.get_device()  # refuses an ATTNBOOK_DEVICE this machine lacks
        try:
            device_type = torch.device(text).type
        except (RuntimeError, ValueError):  # a name torch does not know
            device_type = None
        if device_type not in DEVICE_TYPES:
            raise ValueError(f"must be auto, cpu, cuda, cuda:N or mps, got {text!r}")
        return check_device(text, "device", available=True, advice="use 'cpu' or 'auto'")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_device_option(parser: argparse.ArgumentParser, default: str = "auto") -> None:
    """Give ``parser`` the scripts' ``--device`` option, checked by :func:`device_option`."""
    parser.add_argument(
        "--device",
        type=device_option,
        default=default,
        help="auto (attnbook.get_device()), cpu, cuda, cuda:N or mps",
    )


# ------------------------------------------------------------------ timing rows against each other


def keeping(fn: Callable[[], object], results: list) -> Callable[[], None]:
    """``fn`` as a function to time that appends each of its results to ``results``, so that
    the timed calls' outputs can be compared afterwards (a cached path against a plain one)."""

    def call() -> None:
        results.append(fn())

    return call


def interleaved_rounds(
    fns: Sequence[Callable[[], object]],
    rounds: int,
    device: str | torch.device,
    *,
    warmup: int,
    number: int = 1,
    order: Literal["rotate", "random", "fixed"] = "rotate",
    seed: int = 0,
) -> list[list[float]]:
    """Seconds per call of each function in ``fns``, one figure per round, the rounds interleaved.

    Every function first gets ``warmup`` untimed calls (first-call allocations,
    lazy initialisation). Then each of ``rounds`` rounds times every function
    once (``number`` calls in a row), so that a burst of load from another
    program slows all the functions of a round alike instead of skewing one row
    of a table: the ratio of two functions in the same round is steadier than
    the ratio of figures measured one after the other. The ``order`` of the
    functions within a round: ``"rotate"`` starts round ``r`` at function
    ``r % len(fns)``, so that no function always runs first (after the
    previous round's last one, into caches it left cold); ``"random"`` draws
    a fresh order for every round (from ``seed``), so that no function
    follows another more often than chance (with three functions, rotating
    puts the first after the third in two rounds of three); ``"fixed"``
    keeps the order of ``fns``.

    Every timing ends with ``attnbook.runtime.synchronize(device)``: a GPU's
    queued work is counted, and it has finished before the next timing starts.
    Unlike ``attnbook.runtime.seconds_per_call`` (the fastest of a few calls of
    one function), every figure is kept: the scripts report medians, and ratios
    per round with their quartiles.

    Args:
        fns: functions of no arguments (the rows of a table).
        rounds: how many timed rounds.
        device: the device the functions compute on (nothing to wait for on the CPU).
        warmup: untimed calls of each function before the first round.
        number: calls per timing, for calls too short to time one by one; the
            figure is their mean.
        order: ``"rotate"``, ``"random"`` or ``"fixed"``, see above.
        seed: the seed of the random orders (``order="random"`` only).

    Returns:
        ``times[i][r]``: seconds per call of ``fns[i]`` in round ``r``, in the
        order of ``fns`` whatever order a round ran them in.
    """
    if order not in ("rotate", "random", "fixed"):
        raise ValueError(f"order must be 'rotate', 'random' or 'fixed', got {order!r}")
    for name, value, minimum in (
        ("rounds", rounds, 1),
        ("number", number, 1),
        ("warmup", warmup, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    for fn in fns:
        for _ in range(warmup):
            fn()
    synchronize(device)
    times: list[list[float]] = [[] for _ in fns]
    n = len(fns)
    draw = random.Random(seed)
    for r in range(rounds):
        first = r % n if order == "rotate" and n else 0
        indices = [*range(first, n), *range(first)]
        if order == "random":
            draw.shuffle(indices)
        for i in indices:
            start = time.perf_counter()
            for _ in range(number):
                fns[i]()
            synchronize(device)
            times[i].append((time.perf_counter() - start) / number)
    return times


def rotated_builds(
    builders: dict[str, Callable[[], Callable[[], object]]],
    rounds: int,
    device: str | torch.device,
    *,
    warmup: int,
    order: Literal["rotate", "random", "fixed"] = "rotate",
) -> tuple[dict[str, list[float]], list[tuple[list[str], dict[str, list[float]]]]]:
    """:func:`interleaved_rounds` of functions that own a model, the order of building balanced.

    Where several models are built in one process, the order of building can
    change their speed: on the CPU, at sizes where a training step is short,
    the model built first ran 1-2% slower than its twin built last, and
    swapping two models' places moved their ratio by 4% (``RESULTS.md``, run
    J, has the figures). So the rounds come in ``len(builders)`` blocks, and
    before each block every function is built afresh (the earlier block's are
    dropped first), in an order rotated by one: each is built first in one
    block, second in another, and so on.

    Args:
        builders: for each row of the table, a function of no arguments that
            builds a model (seeding it as the comparison needs) and returns
            the function to time.
        rounds: timed rounds in all, shared out equally between the blocks:
            a total that is not a multiple of ``len(builders)`` is rounded up
            to the next one (otherwise the pooled figures would lean towards
            the orders of the blocks with an extra round); :func:`rounds_note`
            says so in a table's header.
        device: as in :func:`interleaved_rounds`.
        warmup: untimed calls of each function in each block.
        order: the order within a round, as in :func:`interleaved_rounds`.

    Returns:
        ``(times, blocks)``: ``times[name]`` every round's seconds, all the
        blocks in turn; ``blocks`` each block's building order and its own
        ``times``.
    """
    names = list(builders)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    per_block = -(-rounds // len(names))  # rounded up: every block as many rounds
    times: dict[str, list[float]] = {name: [] for name in names}
    blocks = []
    for block in range(len(names)):
        built = names[block:] + names[:block]
        fns: dict[str, Callable[[], object]] = {}  # the last block's are released here
        for name in built:
            fns[name] = builders[name]()
        block_times = interleaved_rounds(
            [fns[name] for name in names], per_block, device, warmup=warmup, order=order, seed=block
        )
        blocks.append((built, dict(zip(names, block_times))))
        for name, ts in zip(names, block_times):
            times[name] += ts
    return times, blocks


def rounds_note(asked: int, blocks: int) -> str:
    """``"30 interleaved rounds"``, or what :func:`rotated_builds` made of ``asked`` rounds.

    ``"16 interleaved rounds (15 asked, rounded up to a multiple of the 2 blocks)"``.
    """
    done = -(-asked // blocks) * blocks
    if done == asked:
        return f"{done} interleaved rounds"
    return (
        f"{done} interleaved rounds ({asked} asked, rounded up to a multiple of the {blocks} "
        "blocks)"
    )


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of ``values``.

    The order statistics ``x_(j) <= x_(n+1-j)`` of ``n`` independent draws
    bracket the population's median unless at least ``n + 1 - j`` draws fall
    on one side of it, so the interval covers it with probability
    ``1 - 2 P(B <= j - 1)``, ``B ~ Binomial(n, 1/2)``; ``j`` is the largest
    index whose coverage is at least ``level``. It assumes nothing about the
    shape of the distribution (timings are skewed), only that rounds are
    independent draws. With too few values for ``level`` (fewer than 6 for
    95%) it is the whole range, whose coverage is then below ``level``.

    Args:
        values: one figure per round, e.g. the per-round speed ratios.
        level: the coverage asked for, in (0, 1).

    Returns:
        ``(low, high)``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = sorted(values)
    n = len(x)
    if n == 0:
        raise ValueError("values must not be empty")

    def coverage(j: int) -> float:  # of (x_(j), x_(n+1-j)): 1 - 2 P(B <= j - 1)
        return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2**n

    j = 1
    while 2 * (j + 1) <= n + 1 and coverage(j + 1) >= level:
        j += 1
    return x[j - 1], x[n - j]


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """The 25th, 50th and 75th percentiles of ``values`` (at least 2), within their range.

    ``statistics.quantiles(method="inclusive")``: the percentiles of the
    figures themselves, interpolated between them. The default method
    (``"exclusive"``) treats them as a sample and, for a handful of rounds,
    reaches outside the data: ``[1, 2]`` would give quartiles of 0.75 and 2.25.
    """
    if len(values) < 2:
        raise ValueError(f"values must hold at least 2 figures for quartiles, got {len(values)}")
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def ratio_summary(ratios: Sequence[float]) -> str:
    """``"median 1.012x (95% CI 0.998-1.020x), IQR 0.97-1.05x"``: per-round speed ratios in brief.

    The median of the ratios, its distribution-free 95% interval
    (:func:`median_interval`; fewer than 6 rounds cannot give one, and say
    so) and their 25th-75th percentiles (:func:`quartiles`).

    Raises:
        ValueError: for fewer than 2 ratios, or one that is not a finite
            number > 0 (a time of zero, or a NaN, measured nothing).
    """
    ratios = list(ratios)
    bad = [r for r in ratios if not (math.isfinite(r) and r > 0)]
    if bad:
        raise ValueError(
            f"ratios must be finite numbers > 0 (one speed ratio per round), got {bad[0]!r} "
            f"among {len(ratios)}"
        )
    if len(ratios) < 2:
        raise ValueError(f"ratios must hold at least 2 rounds' ratios, got {len(ratios)}")
    q1, med, q3 = quartiles(ratios)
    if len(ratios) < 6:
        interval = "too few rounds for a 95% CI"
    else:
        low, high = median_interval(ratios)
        interval = f"95% CI {low:.3f}-{high:.3f}x"
    return f"median {med:.3f}x ({interval}), IQR {q1:.3f}-{q3:.3f}x"


# ------------------------------------------------------------------ the nanoGPT-style peer


def init_like_attnbook(model: nn.Module, n_layers: int, residual: tuple[str, ...]) -> None:
    """GPT-2's initialisation, as ``attnbook.GPT`` (and nanoGPT) does it: N(0, 0.02), zero biases.

    The weights whose names end with one of ``residual`` (the maps that write
    into the residual stream) get ``0.02 / sqrt(2 * n_layers)``; norms keep
    their weights of 1.
    """
    for name, p in model.named_parameters():
        if p.ndim == 1:
            if name.endswith("bias"):
                nn.init.zeros_(p)
            continue
        std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(residual) else 0.02
        nn.init.normal_(p, 0.0, std)


class NanoAttention(nn.Module):
    """Causal self-attention with one fused projection to queries, keys and values."""

    def __init__(self, c: GPTConfig, *, dropout: bool) -> None:
        super().__init__()
        self.n_heads = c.n_heads
        self.c_attn = nn.Linear(c.d_model, 3 * c.d_model)  # W_q, W_k, W_v stacked: one matmul
        self.c_proj = nn.Linear(c.d_model, c.d_model)
        self.dropout = c.dropout if dropout else 0.0
        self.resid_dropout = nn.Dropout(c.dropout) if dropout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.c_attn(x).split(D, dim=2)  # 3 x (B, T, D)
        q = q.view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        k = k.view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        v = v.view(B, T, H, D // H).transpose(1, 2)  # (B, H, T, Dh)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, H, T, Dh)
        y = self.c_proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
        return y if self.resid_dropout is None else self.resid_dropout(y)


class NanoBlock(nn.Module):
    """Pre-LN block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, c: GPTConfig, *, dropout: bool, gelu: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d_model)
        self.attn = NanoAttention(c, dropout=dropout)
        self.ln_2 = nn.LayerNorm(c.d_model)
        mlp = [nn.Linear(c.d_model, c.d_ff), nn.GELU(approximate=gelu)]
        mlp += [nn.Linear(c.d_ff, c.d_model)] + ([nn.Dropout(c.dropout)] if dropout else [])
        self.mlp = nn.Sequential(*mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """A minimal GPT in the style of nanoGPT's ``model.py``, with ``attnbook.GPT``'s choices.

    One fused ``c_attn`` linear layer for queries, keys and values,
    ``F.scaled_dot_product_attention(is_causal=True)``, a GELU MLP, learned
    positions, biases in every linear layer and LayerNorm, a head tied to the
    token embedding, GPT-2's initialisation. The peer of ``train_throughput.py``
    and ``shakespeare.py``.

    Args:
        c: the model's shape (``attnbook.GPTConfig``: vocabulary, context,
            width, heads, layers, ``d_ff``, ``dropout``).
        dropout: ``True`` puts dropout of ``c.dropout`` where nanoGPT has it
            (embeddings, attention weights, both residual branches); ``False``
            builds no dropout at all (``train_throughput.py``'s dropout-free peer).
        gelu: ``"none"`` (exact GELU, as ``attnbook.GPT``'s default) or
            ``"tanh"`` (GPT-2's approximation, as ``GPTConfig.gpt2``).
    """

    def __init__(self, c: GPTConfig, *, dropout: bool = False, gelu: str = "none") -> None:
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.d_model)
        self.wpe = nn.Embedding(c.context_length, c.d_model)
        self.drop = nn.Dropout(c.dropout) if dropout else None
        self.h = nn.ModuleList(NanoBlock(c, dropout=dropout, gelu=gelu) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        init_like_attnbook(self, c.n_layers, ("c_proj.weight", "mlp.2.weight"))
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]  # (B, T, D)
        if self.drop is not None:
            x = self.drop(x)
        for block in self.h:
            x = block(x)  # (B, T, D)
        return self.lm_head(self.ln_f(x))  # (B, T, V)
