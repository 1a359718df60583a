"""The notebook-directive parser and runner of `attnbook.exercises.notebooks`, for the tools.

The parser lives in the package, since the grader uses it where this repository
is not; the tools import it from here, with the book's own kernel settings.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path

from attnbook.exercises.notebooks import (
    KERNEL_ENV,
    OPTION_LINE,
    Block,
    Exercise,
    checker_calls,
    code_blocks,
    directive_blocks,
    exercises,
    kernel_env,
    notebook_blocks,
    notebook_client,
    read_notebook,
    run_notebook,
    solutions,
    strip_solutions,
    title,
)

__all__ = [
    "CPU_KERNELS_ENV",
    "KERNEL_ENV",
    "KERNEL_NAME",
    "OPTION_LINE",
    "TIMEOUT_S",
    "Block",
    "Exercise",
    "book_kernel_env",
    "checker_calls",
    "code_blocks",
    "cpu_line",
    "directive_blocks",
    "exercises",
    "has_avx2",
    "kernel_env",
    "notebook_blocks",
    "notebook_client",
    "read_notebook",
    "run_notebook",
    "solutions",
    "strip_solutions",
    "title",
]

KERNEL_NAME = "attnbook"  # the kernel of .venv, registered by `make venv` (see the Makefile)
TIMEOUT_S = 600  # seconds per cell

# The kernels that PyTorch computes with on the CPU, for every run whose outputs are stored or
# compared (`make execute`, nbval, the learner step). PyTorch picks its vectorised kernels by
# what the CPU offers, AVX2 or AVX-512 on x86-64, and the two sum in different orders: their
# last bits differ, a training run drifts, and the printed accuracies and samples differ in
# their digits. Chapters 7 and 10-13 drifted so between two kinds of 2-core AMD EPYC machine
# (benchmarks/RESULTS.md, 6 December 2026); what the other kind ran was not recorded. The
# stored outputs are made with the AVX2 kernels; these variables ask for them on a CPU that
# has AVX-512 too. oneDNN, which runs some of PyTorch's CPU operators, picks its own kernels
# the same way. A learner's run needs none of this: its numbers may differ in the last
# digits, and the chapters' checks allow for that.
CPU_KERNELS_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _cpuinfo() -> str:
    """/proc/cpuinfo's text on x86-64 Linux, else "" (ARM, macOS, Windows)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _has_flag(cpuinfo: str, flag: str) -> bool:
    return re.search(rf"^flags\s*:.*\b{flag}\b", cpuinfo, flags=re.MULTILINE) is not None


def has_avx2(cpuinfo: str | None = None) -> bool:
    """Whether this x86-64 Linux machine's CPU has AVX2 (`cpuinfo`: /proc/cpuinfo's text).

    False elsewhere (ARM, macOS, Windows): there PyTorch has no AVX2 kernels to ask for, and
    ATEN_CPU_CAPABILITY=avx2 would print a warning into every chapter's first output.
    """
    return _has_flag(_cpuinfo() if cpuinfo is None else cpuinfo, "avx2")


def cpu_line(cpuinfo: str | None = None) -> str:
    """One line for `make test`'s summary: the CPU, and the kernels the notebooks asked for.

    Which machine a run's outputs came from is what tells a CPU effect from a bug
    (benchmarks/RESULTS.md, 6 December 2026), so the summary says it.
    """
    cpuinfo = _cpuinfo() if cpuinfo is None else cpuinfo
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, flags=re.MULTILINE)
    name = model[1].strip() if model else platform.machine() or "unknown"
    has = {
        label: _has_flag(cpuinfo, flag)
        for flag, label in (("avx2", "AVX2"), ("avx512f", "AVX-512"))
    }
    env = book_kernel_env(avx2=has["AVX2"])
    asked = ", ".join(f"{key}={env[key]}" for key in CPU_KERNELS_ENV if key in env)
    return (
        f"CPU: {name}, {os.cpu_count()} logical CPUs; "
        + ", ".join(f"{label} {'yes' if yes else 'no'}" for label, yes in has.items())
        + f"; the notebooks' kernels: {asked or 'as PyTorch chooses'}"
    )


def book_kernel_env(
    env: Mapping[str, str] | None = None, *, avx2: bool | None = None
) -> dict[str, str]:
    """The environment of a kernel whose outputs are stored or compared with stored ones.

    `env` (default: this process's) with KERNEL_ENV, and CPU_KERNELS_ENV where the CPU has
    AVX2 (`avx2`, default: this machine's), added where unset: a variable set by hand wins.
    """
    pins = CPU_KERNELS_ENV if (has_avx2() if avx2 is None else avx2) else {}
    return {**KERNEL_ENV, **pins, **(os.environ if env is None else env)}
