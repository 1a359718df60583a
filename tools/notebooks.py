"""The notebook-directive parser and runner of `attnbook.exercises.notebooks`, for the tools.

The parser lives in the package, since the grader uses it where this repository
is not; the tools import it from here, with the book's own kernel settings.
"""

from __future__ import annotations

from attnbook.exercises.notebooks import (
    KERNEL_ENV,
    OPTION_LINE,
    Block,
    Exercise,
    checker_calls,
    directive_blocks,
    exercises,
    kernel_env,
    notebook_blocks,
    notebook_client,
    read_notebook,
    run_notebook,
    solutions,
    strip_solutions,
)

__all__ = [
    "KERNEL_ENV",
    "KERNEL_NAME",
    "OPTION_LINE",
    "TIMEOUT_S",
    "Block",
    "Exercise",
    "checker_calls",
    "directive_blocks",
    "exercises",
    "kernel_env",
    "notebook_blocks",
    "notebook_client",
    "read_notebook",
    "run_notebook",
    "solutions",
    "strip_solutions",
]

KERNEL_NAME = "attnbook"  # the kernel of .venv, registered by `make venv` (see the Makefile)
TIMEOUT_S = 600  # seconds per cell
