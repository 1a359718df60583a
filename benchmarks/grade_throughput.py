"""Seconds per notebook for ``python -m attnbook.grade``, chapter by chapter.

Usage:
    python benchmarks/grade_throughput.py [--chapters 02 06 10] [--skip-run] [--unsafe-no-sandbox]

``--chapters`` takes chapter numbers, ``2`` or ``02`` alike (default: 01 02 06 09 14).

For each chapter, a submission that answers every auto-checked exercise with
the book's own solution (the chapter notebook, each exercise's code cell
replaced by the code of its ``{solution}`` block) is graded as an instructor
would: the notebook run in its sandbox (skipped with ``--skip-run``), then
the answers evaluated in a second sandbox on the grader's own cases. Every
exercise must pass (the script exits 1 otherwise: a grader that fails the
book's solutions is broken). It prints the machine, then one line per
chapter: exercises, seconds for the whole notebook, and the seconds without
the notebook run (the evaluation alone), measured in a second grading with
``--skip-run``'s setting, and how the notebook run ended (it must run every
cell without an error, or the figure would not be the chapter's: exit 1). A
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import _common
import nbformat
import torch

from attnbook.exercises import grade, notebooks, sandbox

ROOT = Path(__file__).resolve().parent.parent
_CODE = re.compile(r"^```(?:python|\{code-cell\}[^\n]*)\n(?P<code>.*?)^```", re.M | re.S)


def solution_notebook(path: Path) -> nbformat.NotebookNode:
    """The chapter with each checked exercise's code cell replaced by its solution's code."""
    nb = nbformat.read(path, as_version=4)
    codes = {}
    for block in notebooks.solutions(nb):
        for match in _CODE.finditer(block.body + "\n"):
            if "check_" in match["code"]:
                codes[block.label] = match["code"]
    for exercise in notebooks.exercises(nb):
        if not exercise.checkers or exercise.label not in codes:
            continue
        for cell in nb.cells[exercise.block.cell + 1 :]:
            if cell.cell_type == "code" and set(exercise.checkers) <= set(
                notebooks.checker_calls(cell.source)
            ):
                cell.source = codes[exercise.label]
                break
    return nb


def chapter(text: str) -> str:
    """An argparse ``type=``: a chapter's number (``"2"`` or ``"02"``) as its two digits.

    A number without a notebook gets argparse's usage error, naming the chapters there are.
    """
    numbers = sorted(p.name[:2] for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    prefix = f"{int(text):02d}" if text.isascii() and text.isdigit() else None
    if prefix not in numbers:
        raise argparse.ArgumentTypeError(
            f"no chapter {text!r}: the chapters are {' '.join(numbers)} (give 2 or 02 alike)"
        )
    return prefix


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=_common.DefaultsHelp
    )
    parser.add_argument(
        "--chapters",
        type=chapter,
        nargs="+",
        default=["01", "02", "06", "09", "14"],
        help="chapter numbers, e.g. 2 or 02",
    )
    parser.add_argument("--skip-run", action="store_true", help="time the evaluation only")
    parser.add_argument(
        "--unsafe-no-sandbox", action="store_true", help="grade without bubblewrap (as the grader)"
    )
    args = parser.parse_args()
    if not args.unsafe_no_sandbox and not sandbox.bwrap_available():
        print("bubblewrap is missing: install it, or pass --unsafe-no-sandbox", file=sys.stderr)
        return 1
    print(_common.describe(torch.device("cpu")))
    print(f"sandbox: {'none (unsafe)' if args.unsafe_no_sandbox else 'bubblewrap'}")
    print(f"{'chapter':<34} {'exercises':>9} {'s/notebook':>11} {'s, evaluation only':>19}")
    ok = True
    for prefix in args.chapters:
        (path,) = sorted((ROOT / "chapters").glob(f"{prefix}_*.ipynb"))
        with tempfile.TemporaryDirectory() as tmp:
            submission = Path(tmp) / path.name
            nbformat.write(solution_notebook(path), submission)
            timings, runs = [], []
            for run in ([] if args.skip_run else [True]) + [False]:
                settings = grade.Settings(
                    run_notebook=run, unsafe=args.unsafe_no_sandbox, seed=12345
                )
                start = time.perf_counter()
                records = grade.grade_notebook(submission, settings=settings, on_run=runs.append)
                timings.append(time.perf_counter() - start)
                bad = [r for r in records if r.status != "passed"]
                for r in bad:
                    ok = False
                    print(f"  NOT PASSED {r.exercise}: {r.status}: {r.message}")
        full = f"{timings[0]:.1f}" if not args.skip_run else "-"
        print(f"{path.stem:<34} {len(records):>9} {full:>11} {timings[-1]:>19.1f}")
        if not args.skip_run:
            (outcome,) = runs  # the grading with --skip-run's setting has no notebook run
            print(f"  notebook run: {outcome.summary()}")
            ok = ok and outcome.ok
    print(f"load average (1, 5, 15 min) after: {_common.load_average()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
