"""Grade submitted exercise notebooks: ``python -m attnbook.grade SUBMISSION...``.

It lives beside the checkers whose verdicts it collects;
``python -m attnbook.exercises.grade`` is the same command.

An instructor collects the learners' notebooks (the student edition of any
chapter, with the stubs filled in) and runs::

    python -m attnbook.grade submissions/ --json grades.json --csv grades.csv

Each notebook runs top to bottom in a fresh Jupyter kernel, as "Restart and
run all" would, with a time limit per cell. Every ``check_<name>`` call a cell
makes returns a :class:`~attnbook.exercises.Verdict`; the kernel runs with
``$ATTNBOOK_VERDICTS`` set, so each verdict is also written to a file that
this module reads after each cell. The result is one record per notebook and
exercise, with a ``status``:

- ``passed``: the checker accepted the learner's function on every hidden case;
- ``failed``: the checker rejected it (its message says on which case, and why);
- ``not_attempted``: the stub still raises ``NotImplementedError``;
- ``error``: no verdict, because the cell raised before its checker returned
  (a ``SyntaxError``, a ``NameError``...), ran past the time limit, or never
  ran (the kernel died, or could not be started), or the notebook could not
  be read. The message says which.

The exercises a notebook *should* report are the ``check_*(...)`` calls in its
code cells, so an exercise whose cell breaks still gets a record. A learner's
error in one exercise does not stop the others: like a person who reads past
an error message, the grader runs every cell (``allow_errors``), and a cell
past the time limit is interrupted, as the stop button would, before the next
one runs. One broken notebook never stops the grading of the next one.

This is deliberately much smaller than nbgrader or otter-grader: no database,
no cell metadata, no point values, no containers. The checkers already hold
the hidden tests; this module only runs notebooks and collects what they say.
Like any autograder that executes submitted code, it trusts that code: a
submission can do anything the grader's user can (including writing fake
verdicts), so grade untrusted work inside a container or a throwaway machine.

The exit status is 0 when grading completed, whatever the learners' results;
2 for a usage error (no notebook found, an unknown ``--kernel``, a bad
option), 1 when the grading tools are missing: they are an optional extra,
``pip install "attnbook[grade]"`` (nbclient, nbformat, ipykernel).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from attnbook.exercises import notebooks
from attnbook.exercises._framework import VERDICTS_ENV

__all__ = [
    "FIELDS",
    "STATUSES",
    "GradeRecord",
    "checker_calls",
    "find_notebooks",
    "format_table",
    "grade",
    "grade_notebook",
    "main",
    "write_csv",
    "write_json",
]

STATUSES = ("passed", "failed", "not_attempted", "error")
DEFAULT_TIMEOUT_S = 120.0  # per cell; chapter 10's training cell needs about 30 s on 2 cores
_PROBE_TIMEOUT_S = 15.0  # after an interrupt, how long the kernel may take to answer again
_INSTALL_HINT = 'pip install "attnbook[grade]"'


@dataclasses.dataclass(frozen=True)
class GradeRecord:
    """The grade of one exercise in one submitted notebook (one row of the JSON/CSV output)."""

    notebook: str  # the notebook's path, as found on the command line or in a folder
    chapter: str  # the notebook's title (its first "# " heading), "" if it has none
    exercise: str  # the checker's name without "check_", e.g. "softmax"; "" for the notebook
    status: str  # one of STATUSES
    message: str  # the checker's message, or what went wrong


FIELDS = tuple(field.name for field in dataclasses.fields(GradeRecord))


# ------------------------------------------------------------------ finding the work


def find_notebooks(paths: Iterable[str | Path]) -> list[Path]:
    """Expand the command line's submissions into a list of notebook files.

    A file is taken as it is (whatever its suffix, so a misnamed submission is
    still graded, or reported as unreadable); a folder is searched recursively
    for ``*.ipynb``, skipping hidden folders and ``.ipynb_checkpoints``, in
    sorted order so that reports are stable.

    Args:
        paths: files and folders, as given on the command line.

    Returns:
        The notebooks to grade, each once, in the order given.

    Raises:
        ValueError: a path does not exist, or no notebook was found at all.
    """
    found: list[Path] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            found += sorted(
                p
                for p in entry.rglob("*.ipynb")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(entry).parts)
            )
        elif entry.exists():
            found.append(entry)
        else:
            raise ValueError(f"submission {str(entry)!r} does not exist")
    unique = list(dict.fromkeys(found))
    if not unique:
        raise ValueError("no notebook (*.ipynb) found in the submissions given")
    return unique


def checker_calls(source: str) -> list[str]:
    """Names of the exercises a code cell checks: ``check_softmax(f)`` -> ``"softmax"``.

    The book's one parser (:func:`attnbook.exercises.notebooks.checker_calls`)
    finds the calls: a checker named only in a comment, a string or an import
    does not count, and a cell that does not parse (a learner's syntax error)
    is scanned as text, which is exactly when the grader must still know what
    the cell was meant to check.

    Args:
        source: the cell's code.

    Returns:
        Exercise names in order of first call, each once.
    """
    return [name.removeprefix("check_") for name in notebooks.checker_calls(source)]


def _title(nb: Any) -> str:
    """The notebook's first level-1 heading, which names the chapter even if the file is renamed."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


# ------------------------------------------------------------------ running one notebook


def _require_grading_tools() -> None:
    """Fail with an install hint when the optional grading dependencies are missing."""
    import importlib.util

    missing = [m for m in ("nbformat", "nbclient", "ipykernel") if not importlib.util.find_spec(m)]
    if missing:
        raise ImportError(
            f"grading notebooks needs {', '.join(missing)}, which attnbook does not install "
            f"by default: {_INSTALL_HINT}"
        )


def _kernel_manager(kernel: str | None) -> Any:
    """A manager for a fresh kernel: ``kernel`` by name, or else this very interpreter.

    The default runs ``sys.executable -m ipykernel_launcher``, so the kernel
    imports the same ``attnbook`` (and torch) as the grader, whatever kernels
    happen to be registered on the machine.
    """
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    if kernel is not None:
        return AsyncKernelManager(kernel_name=kernel)

    class ThisInterpreter(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                display_name="Python (the grader's interpreter)",
                language="python",
            )

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisInterpreter())


def _new_verdicts(path: Path, offset: int) -> tuple[list[dict], int]:
    """The verdicts appended to ``path`` since byte ``offset``, and the new offset."""
    if not path.exists():
        return [], offset
    with path.open("rb") as file:
        file.seek(offset)
        data = file.read()
    verdicts = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            verdict = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(verdict, dict) and isinstance(verdict.get("exercise"), str):
            verdicts.append(verdict)
    return verdicts, offset + len(data)


def _status(verdict: dict) -> str:
    if verdict.get("passed"):
        return "passed"
    return "failed" if verdict.get("attempted", True) else "not_attempted"


def _cell_error(cell: Any) -> str | None:
    """``"NameError: name 'x' is not defined"`` for a cell that raised, else ``None``."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".rstrip(": ")
    return None


def grade_notebook(
    path: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S, kernel: str | None = None
) -> list[GradeRecord]:
    """Run one notebook in a fresh kernel and grade each exercise it checks.

    Never raises for a problem of the notebook: an unreadable file, a cell
    that errors, hangs or kills the kernel all become ``error`` records.

    Args:
        path: the submitted notebook.
        timeout: seconds each cell may run before it is interrupted (> 0).
        kernel: name of a registered Jupyter kernel; ``None`` (the default)
            runs a kernel on the interpreter that runs the grader.

    Returns:
        One record per exercise, in the order the notebook first checks them
        (exercises whose verdict came from an unexpected place last), or one
        ``error`` record with ``exercise=""`` for a notebook that cannot be
        read or checks no exercise.

    Raises:
        ValueError: ``timeout`` is not positive.
        ImportError: nbclient, nbformat or ipykernel is not installed.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    _require_grading_tools()
    import nbformat

    path = Path(path)
    try:
        nb = nbformat.read(path, as_version=4)
        chapter = _title(nb)
        expected = {  # cell index -> the exercises it checks
            i: checker_calls(cell.source)
            for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code"
        }
    except Exception as exc:  # not JSON, not a notebook, unreadable: report it, go on
        message = f"cannot read this notebook: {type(exc).__name__}: {exc}"
        return [GradeRecord(str(path), "", "", "error", message)]
    results: dict[str, tuple[str, str]] = {
        name: ("", "") for names in expected.values() for name in names
    }
    reason = _run_cells(nb, path, expected, results, timeout, kernel)
    if not results:
        message = "no exercise found: this notebook calls no check_* function"
        return [GradeRecord(str(path), chapter, "", "error", reason or message)]
    records = []
    for name, (status, message) in results.items():
        if not status:  # its cell never ran
            status, message = "error", f"not graded: {reason or 'its cell never ran'}"
        records.append(GradeRecord(str(path), chapter, name, status, message))
    return records


def _run_cells(
    nb: Any,
    path: Path,
    expected: dict[int, list[str]],
    results: dict[str, tuple[str, str]],
    timeout: float,
    kernel: str | None,
) -> str | None:
    """Execute ``nb`` cell by cell, filling ``results``; return why it stopped early, if it did."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    client = notebooks.notebook_client(
        nb,
        timeout=timeout,
        cwd=path.resolve().parent,
        km=_kernel_manager(kernel),
        allow_errors=True,  # a learner's error in one exercise must not stop the others
        interrupt_on_timeout=False,  # we interrupt ourselves, to know which cell hung
    )
    with tempfile.TemporaryDirectory(prefix="attnbook-grade-") as tmp:
        verdicts_file = Path(tmp) / "verdicts.jsonl"
        env = dict(os.environ)
        env |= {VERDICTS_ENV: str(verdicts_file), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("MPLBACKEND", "Agg")
        offset = 0
        try:
            with client.setup_kernel(
                env=env, cleanup_kc=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ):
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    where = f"cell {index + 1}"
                    stop = None
                    try:
                        client.execute_cell(cell, index)
                        error = _cell_error(cell)
                        problem = (
                            f"{where} raised {error} before its checker returned" if error else ""
                        )
                    except DeadKernelError:
                        problem = f"the kernel died while running {where}"
                        stop = (
                            f"the kernel died in {where} (out of memory, or the code ended "
                            "the process), so the cells after it never ran"
                        )
                    except CellTimeoutError:
                        problem = (
                            f"{where} ran longer than the {timeout:g} s limit per cell "
                            "(an endless loop?) and was interrupted"
                        )
                        stop = _interrupt(client, index, timeout, where)
                    verdicts, offset = _new_verdicts(verdicts_file, offset)
                    _record(results, expected[index], verdicts, where, problem)
                    if stop:
                        return stop
        except Exception as exc:  # the kernel could not start, or the client broke down
            return f"the notebook could not be run: {type(exc).__name__}: {exc}"
    return None


def _interrupt(client: Any, index: int, timeout: float, where: str) -> str | None:
    """Interrupt a cell past its time limit, as the stop button would; ``None`` if the kernel
    answers again (the next cell may run), else why the rest of the notebook cannot run."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbclient.util import run_sync
    from nbformat.v4 import new_code_cell

    run_sync(client.km.interrupt_kernel)()
    client.timeout = _PROBE_TIMEOUT_S
    try:
        client.execute_cell(new_code_cell("pass"), index)  # answered once the kernel is free
    except (CellTimeoutError, DeadKernelError):
        return (
            f"{where} ran past the {timeout:g} s limit and the kernel did not stop when "
            "interrupted, so the cells after it never ran"
        )
    finally:
        client.timeout = timeout
    return None


def _record(
    results: dict[str, tuple[str, str]],
    names: list[str],
    verdicts: list[dict],
    where: str,
    problem: str,
) -> None:
    """Store a cell's verdicts, and an ``error`` for each exercise it should have checked but did not.

    ``problem`` says what went wrong in the cell, ``""`` if it ran to the end.
    """
    for verdict in verdicts:  # the last verdict of an exercise wins
        results[verdict["exercise"]] = (_status(verdict), str(verdict["message"]))
    answered = {verdict["exercise"] for verdict in verdicts}
    for name in names:
        if name not in answered:
            message = problem or f"{where} ran, but check_{name} returned no verdict"
            results[name] = ("error", message)


# ------------------------------------------------------------------ many notebooks, reports


def grade(
    paths: Iterable[str | Path],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    kernel: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[GradeRecord]:
    """Grade every notebook in ``paths`` (files or folders), one fresh kernel each.

    Args:
        paths: submitted notebooks and folders of notebooks.
        timeout: seconds each cell may run (> 0).
        kernel: a registered Jupyter kernel's name, or ``None`` for this interpreter.
        progress: called with a line of text before each notebook (e.g. ``print``).

    Returns:
        All records, notebook after notebook.

    Raises:
        ValueError: a path does not exist, no notebook was found, or ``timeout`` <= 0.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    notebooks = find_notebooks(paths)
    records: list[GradeRecord] = []
    for i, notebook in enumerate(notebooks, start=1):
        if progress is not None:
            progress(f"[{i}/{len(notebooks)}] grading {notebook}")
        records += grade_notebook(notebook, timeout=timeout, kernel=kernel)
    return records


def _short(record: GradeRecord, width: int = 64) -> str:
    """The message's first line, without the checker's "✅ softmax: " prefix, cut to ``width``."""
    lines = record.message.strip().splitlines()
    text = lines[0] if lines else ""
    prefix = f"{record.exercise}: "
    if record.exercise and prefix in text[: len(prefix) + 3]:
        text = text.split(prefix, 1)[1]
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(records: Sequence[GradeRecord]) -> str:
    """A plain-text table (notebook, exercise, status, short message) and a one-line summary.

    Args:
        records: what :func:`grade` returned.

    Returns:
        The table as one string, ready to print.
    """
    rows = [("notebook", "exercise", "status", "message")]
    rows += [(r.notebook, r.exercise or "-", r.status, _short(r)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3] for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 7)
    counts = {status: sum(r.status == status for r in records) for status in STATUSES}
    n_notebooks = len({r.notebook for r in records})
    summary = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.items())
    lines.append(f"\n{n_notebooks} notebook(s), {len(records)} record(s): {summary}")
    return "\n".join(line.rstrip() for line in lines)


def write_json(records: Sequence[GradeRecord], path: str | Path) -> None:
    """Write the records as a JSON list of objects with the keys :data:`FIELDS` (UTF-8)."""
    data = [dataclasses.asdict(r) for r in records]
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_csv(records: Sequence[GradeRecord], path: str | Path) -> None:
    """Write the records as CSV with a header row :data:`FIELDS` (UTF-8; messages may span lines)."""
    with Path(path).open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(dataclasses.asdict(r) for r in records)


# ------------------------------------------------------------------ command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grade",
        description=(
            "Run each submitted notebook in a fresh kernel and grade its exercises: one record "
            "per notebook and exercise, status passed, failed, not_attempted or error."
        ),
        epilog="Exit status: 0 when grading completed (whatever the grades), 2 for a usage "
        f"error, 1 when the grading tools are missing ({_INSTALL_HINT}).",
    )
    parser.add_argument("submissions", nargs="+", help="notebooks, or folders searched for *.ipynb")
    parser.add_argument("--json", metavar="FILE", help="write the records as a JSON list")
    parser.add_argument("--csv", metavar="FILE", help="write the records as CSV")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time limit per cell (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--kernel",
        metavar="NAME",
        help="a registered Jupyter kernel (default: a kernel on this Python interpreter)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: grade, print the table, write ``--json``/``--csv``; return the exit status.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).

    Returns:
        0 when grading completed, 2 for a usage error, 1 without the grading tools.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")
    try:
        _require_grading_tools()
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.kernel is not None:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        try:
            KernelSpecManager().get_kernel_spec(args.kernel)
        except NoSuchKernel:
            parser.error(f"no Jupyter kernel named {args.kernel!r} (see `jupyter kernelspec list`)")
    try:
        notebooks = find_notebooks(args.submissions)
    except ValueError as exc:
        parser.error(str(exc))
    records = grade(
        notebooks,
        timeout=args.timeout,
        kernel=args.kernel,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_table(records))
    if args.json:
        write_json(records, args.json)
    if args.csv:
        write_csv(records, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
