"""What the benchmarks share: the machine they describe.

A figure means little without its machine: each script in `benchmarks/` prints
the CPU model, torch's version and threads, and the load average (how busy the
machine was with other work). How they time and what they allocate is measured
with the package's own helpers, the ones chapter 14 uses:
`attnbook.runtime.seconds_per_call`, `synchronize` and `largest_allocation`.
The scripts import this file as `_common` (the folder of a script run as
`python benchmarks/x.py` is on `sys.path`).
"""

from __future__ import annotations

import os
import platform

import torch


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
