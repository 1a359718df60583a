"""What the benchmarks share: the machine they describe, how they time, what they allocate.

A figure means little without its machine: each script in `benchmarks/` prints
the CPU model, torch's version and threads, and the load average (how busy the
machine was with other work), then times its runs with `synchronize` so that a
GPU's queued work is counted. Memory is measured exactly, not sampled: a torch
dispatch hook sees every tensor each operation returns. The scripts import this
file as `_common` (the folder of a script run as `python benchmarks/x.py` is on
`sys.path`).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode


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


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished its queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def describe(device: torch.device) -> str:
    """The lines a benchmark prints first: device, CPU, threads, versions, GPU, load."""
    lines = [
        f"device {device}; CPU {cpu_model()} ({os.cpu_count()} logical CPUs, "
        f"{platform.machine()}); torch threads {torch.get_num_threads()}; "
        f"torch {torch.__version__}; Python {platform.python_version()}"
    ]
    if device.type == "cuda":
        lines.append(f"GPU {torch.cuda.get_device_name(device)}")
    lines.append(f"load average (1, 5, 15 min) before: {load_average()}")
    return "\n".join(lines)


def seconds_per_call(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """The fastest of ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def _tensors(values: object) -> Iterator[torch.Tensor]:
    if isinstance(values, torch.Tensor):
        yield values
    elif isinstance(values, (tuple, list)):
        for value in values:
            yield from _tensors(value)


class LargestAllocation(TorchDispatchMode):
    """The largest storage an operation returns that is not one of its inputs' (no views)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in _tensors(args)}
        for t in _tensors(out):
            if t.untyped_storage().data_ptr() not in given:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def largest_allocation(fn: Callable[[], object]) -> int:
    """Bytes of the largest new tensor storage that any operation makes while ``fn`` runs."""
    with LargestAllocation() as recorder:
        fn()
    return recorder.largest
