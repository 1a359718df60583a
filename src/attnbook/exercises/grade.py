"""Grade submitted exercise notebooks: ``python -m attnbook.grade SUBMISSION...``.

It lives beside the checkers whose cases it uses;
``python -m attnbook.exercises.grade`` is the same command. An instructor
collects the learners' notebooks (the student edition of any chapter, with the
stubs filled in), one folder per student or one file each, and runs::

    python -m attnbook.grade submissions/ --course course.yml \\
        --json grades.json --csv grades.csv --gradebook gradebook.csv

What it trusts, and what it does not
------------------------------------
A submission is code written by someone who may want free marks. Nothing
its own process says decides a grade. For each notebook, in order:

1. A private temporary folder receives a fresh copy of the submission, and
   the notebook runs there top to bottom in a fresh kernel inside a sandbox
   (:mod:`attnbook.exercises.sandbox`: bubblewrap, no network, no view of
   other files or processes, a cleared environment, memory, CPU and time
   limits, every process it started killed at the end). This is the
   learner's "Restart and run all"; the grader reads back only which cells
   raised, to explain a failure (``--skip-run`` leaves it out).
2. The answers are read from the notebook's *source*
   (:mod:`attnbook.exercises.extract`): for every ``check_<name>(answer)``
   call, the function handed to the checker (a name or a ``lambda``) and the
   imports and top-level definitions it needs from the cells before. That
   program is read statically for forbidden uses (the package's own
   answers, the library's equivalent such as any ``softmax`` for the softmax
   exercise, the chapter's own function that computes the answer such as
   chapter 7's ``multi_head_batched``, private library names, ``torch.ops``,
   ``importlib``, ``getattr`` with a computed name, threads...): one is a
   ``failed``.
3. The programs run in a second, clean sandbox, one forked process per
   exercise with the library equivalents replaced by tripwires, on inputs
   the grader draws for this submission from a seed it keeps
   (:func:`attnbook.exercises._framework.seeded_args`: the checker's hidden
   cases with new values, so memorised answers to the cases that ship in the
   package fail). Only plain arrays come back; the grader compares them with
   the package's reference, with the checker's tolerances and hints.

A record has a ``status``:

- ``passed``: every case matched the reference (full points);
- ``failed``: a case did not match, raised, returned what the checker refuses
  (float32 weights for float64 scores: "returned ..."), or the answer uses
  something the exercise forbids (the message says which case and why, with a
  hint);
- ``not_attempted``: the stub still raises ``NotImplementedError``;
- ``error``: the answer could not be run: its cell does not parse, its
  definitions raise, or it ran past the time limit;
- ``missing``: the chapter has this exercise but the notebook no longer
  calls its checker (the cell or the call was deleted): 0 points, listed.

The exercises a chapter should have come from
:data:`attnbook.exercises.catalog.CHAPTERS` (checked against the chapters by
the tests), found by the notebook's title, else its file name's ``NN_``
prefix, else the checkers it calls. Exercises without a checker (pen and
paper, open questions) are not graded.

Outputs, and a killed grader
----------------------------
Each notebook's records are appended, as soon as it is graded, to a state
file beside the outputs (``--state``, default ``<--json, --csv or --gradebook>.state.jsonl``:
one JSON line per notebook, keyed by the SHA-256 of the submitted file, after
a first line holding the grading seed). A second run with the same state
skips every notebook already graded; a killed grader loses at most the
notebook it was grading. ``--json`` (a list of records: ``student``,
``notebook``, ``chapter``, ``exercise``, ``label``, ``status``, ``points``,
``max_points``, ``message``), ``--csv`` (the same rows) and ``--gradebook``
(one row per student: points per exercise and the total) are rewritten after
every notebook. The student is the first folder under a folder given on the
command line (``submissions/alice/02_softmax.ipynb`` -> ``alice``), or the
file's name without suffix for a file given directly or lying at the top.
Points come from ``--course course.yml`` (``points: default`` and per
exercise label), else 1 per exercise. ``--set TITLE`` (and ``--part TITLE``)
grades for one of its ``assignment_sets``: every auto-checked exercise that
the set (or its part) does not hand in is worth 0 points, so it counts in no
maximum, and is left out of the printed table, ``--json``, ``--csv`` and
``--gradebook``; every one that it hands in counts in every student's maximum,
even if nobody handed in its chapter; and the set's exercises without a checker
are named, to be graded by hand.

The exit status is 0 when grading completed, whatever the learners' results;
2 for a usage error; 1 when the grading tools are missing (``pip install
"attnbook[grade]"``: SciPy, nbclient, nbformat, ipykernel, PyYAML) or bubblewrap
is (``--unsafe-no-sandbox`` runs without it, with a warning).
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import hashlib
import json
import os
import pickle
import secrets
import signal
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attnbook._validation import check_positive_number
from attnbook.exercises import catalog, extract, notebooks, sandbox
from attnbook.exercises._framework import (
    CheckSpec,
    checker_spec,
    explain_failure,
    seeded_args,
)

__all__ = [
    "FIELDS",
    "STATUSES",
    "GradeRecord",
    "NotebookRun",
    "Settings",
    "checker_calls",
    "find_notebooks",
    "format_table",
    "grade",
    "grade_notebook",
    "in_set",
    "load_assignment_set",
    "load_points",
    "main",
    "write_csv",
    "write_gradebook",
    "write_json",
]

STATUSES = ("passed", "failed", "not_attempted", "error", "missing")
DEFAULT_TIMEOUT_S = 120.0  # per cell of the notebook run; chapter 10's training cell needs ~30 s
_RUN_START_S = 60.0  # seconds the notebook run has to start its kernel, beyond its cells' limits
_INSTALL_HINT = (  # the name is not on PyPI: from the repository at the course's tag, or the wheel
    'pip install "attnbook[grade] @ git+<repository URL>@<tag>" (or the wheel of the student zip)'
)
_MAX_READ = sandbox.MAX_RESULT_BYTES  # the most bytes read back from a sandbox's file


@dataclasses.dataclass(frozen=True)
class GradeRecord:
    """The grade of one exercise of one submitted notebook (one row of the JSON/CSV output)."""

    student: str  # from the folder or file name
    notebook: str  # the notebook's path, as found on the command line or in a folder
    chapter: str  # the chapter's title ("" when unknown)
    exercise: str  # the checker's name without "check_", e.g. "softmax"; "" for the notebook
    label: str  # the exercise's label in the book, e.g. "ex-ch02-stable-softmax" ("" if none)
    status: str  # one of STATUSES
    points: float  # what it earned
    max_points: float  # what it is worth
    message: str  # what the grader found, with a hint


FIELDS = tuple(field.name for field in dataclasses.fields(GradeRecord))


@dataclasses.dataclass(frozen=True)
class NotebookRun:
    """How a submission's sandboxed notebook run ended ("Restart and run all").

    Read back from the executed notebook, which the submission could have
    written itself: it explains failures and never decides a grade.
    """

    errors: dict[int, str]  # cell index (from 0) -> the name of the error it raised
    stopped: str  # why the run ended before the last cell; "" if it did not

    @property
    def ok(self) -> bool:
        """Every cell ran, and none raised."""
        return not self.errors and not self.stopped

    def summary(self) -> str:
        """``"ok"``, or what went wrong: ``"cell 4 raised ValueError; <why it stopped>"``."""
        problems = [f"cell {i + 1} raised {name}" for i, name in sorted(self.errors.items())]
        return "; ".join(problems + ([self.stopped] if self.stopped else [])) or "ok"


@dataclasses.dataclass(frozen=True)
class Settings:
    """How to grade (the command line's options)."""

    cell_timeout: float = DEFAULT_TIMEOUT_S  # seconds per cell of the notebook run
    exercise_timeout: float = 60.0  # seconds for all cases of one exercise
    memory_bytes: int = 6 * 2**30  # address space per sandboxed process
    run_notebook: bool = True  # run the notebook itself first ("Restart and run all")
    unsafe: bool = False  # run without bubblewrap
    seed: int = 0  # the grader's secret: the cases' values derive from it
    points: dict[str, float] = dataclasses.field(default_factory=dict)  # label -> points
    default_points: float = 1.0


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
    return [path for path, _ in _find(paths)]


def _find(paths: Iterable[str | Path]) -> list[tuple[Path, str]]:
    """Notebooks with their student's name."""
    found: list[tuple[Path, str]] = []
    for entry in map(Path, paths):
        if entry.is_dir():
            for p in sorted(entry.rglob("*.ipynb")):
                parts = p.relative_to(entry).parts
                if p.is_file() and not any(part.startswith(".") for part in parts):
                    found.append((p, parts[0] if len(parts) > 1 else p.stem))
        elif entry.exists():
            found.append((entry, entry.stem))
        else:
            raise ValueError(f"submission {str(entry)!r} does not exist")
    unique = list(dict((p, (p, s)) for p, s in found).values())
    if not unique:
        raise ValueError("no notebook (*.ipynb) found in the submissions given")
    return unique


def _students_named_after_chapters(found: list[tuple[Path, str]]) -> list[str]:
    """The student names, one per notebook, that are a chapter's file name (``02_softmax``): given
    ``submissions/*`` or ``submissions/alice/``, the grader names the students after their
    notebooks, and merges every student's ``02_softmax.ipynb`` into one student."""
    prefixes = {chapter.stem[:3] for chapter in catalog.CHAPTERS}  # "02_"
    return [s for p, s in found if s == p.stem and s[:3] in prefixes]


def _clashing_outputs(outputs: dict[str, str | Path | None], notebooks: list[Path]) -> str | None:
    """What is wrong with the files the grader writes (option -> path), or ``None``: one that is
    a submitted notebook would overwrite it, two that are one file would overwrite each other."""
    submitted = {p.resolve() for p in notebooks}
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if not path:
            continue
        resolved = Path(path).resolve()
        if resolved in submitted:
            return (
                f"{option} {str(path)!r} is a submitted notebook, which writing the grades "
                "would overwrite: name another file"
            )
        if resolved in seen:
            return f"{seen[resolved]} and {option} both name {str(path)!r}: give each its own file"
        seen[resolved] = option
    return None


def checker_calls(source: str) -> list[str]:
    """Names of the exercises a code cell checks: ``check_softmax(f)`` -> ``"softmax"``.

    Args:
        source: the cell's code.

    Returns:
        Exercise names in order of first call, each once (see
        :func:`attnbook.exercises.notebooks.checker_calls`).
    """
    return [name.removeprefix("check_") for name in notebooks.checker_calls(source)]


def _title(nb: Any) -> str:
    """The submission's title, read as the inventory reads the chapters' (the catalog's)."""
    return notebooks.title([cell.source for cell in nb.cells if cell.cell_type == "markdown"])


# The `grade` extra, import name -> package name. SciPy is in it because an answer may import
# it (`extract.ANSWER_MODULES`): a grader without it called a right answer that does an
# `error` (ModuleNotFoundError in the sandbox). PyYAML reads --course.
_GRADING_MODULES = {
    "nbformat": "nbformat",
    "nbclient": "nbclient",
    "ipykernel": "ipykernel",
    "scipy": "SciPy",
    "yaml": "PyYAML",
}


def _require_grading_tools() -> None:
    import importlib.util

    missing = [name for m, name in _GRADING_MODULES.items() if not importlib.util.find_spec(m)]
    if missing:
        raise ImportError(
            f"grading notebooks needs {', '.join(missing)}, which attnbook does not install "
            f"by default: {_INSTALL_HINT}"
        )


def load_points(course: str | Path) -> tuple[float, dict[str, float]]:
    """The ``points:`` of a course registry (``course.yml``): the default and per-label values.

    A registry without ``points:`` (or without its ``default``) gives 1 point per exercise.

    Raises:
        ValueError: the file is not YAML, or not a mapping; ``points`` is not a mapping;
            ``points: default`` is not a number, or ``points: exercises`` is not a mapping of
            labels to numbers.
    """
    import yaml

    expected = f"{course}: expected `points: default: N` and `exercises: label: N`"
    try:
        data = yaml.safe_load(Path(course).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{course}: not a YAML file ({exc})") from None
    points = (data.get("points") or {}) if isinstance(data, dict) else None
    if not isinstance(points, dict):
        raise ValueError(expected)
    default = points.get("default", 1)
    overrides = points.get("exercises") or {}

    def number(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    if (
        not number(default)
        or not isinstance(overrides, dict)
        or not all(number(v) for v in overrides.values())
    ):
        raise ValueError(expected)
    return float(default), {str(k): float(v) for k, v in overrides.items()}


def load_assignment_set(
    course: str | Path, title: str, part: str | None = None
) -> tuple[frozenset[str], tuple[str, ...]]:
    """The exercises that an assignment set of a course registry hands in.

    A set's parts list their chapters (by file name, ``02_softmax``) and their exercise
    labels; ``exercises: auto-checked`` means every auto-checked exercise of the part's
    chapters, or of every chapter when the part names none.

    Args:
        course: the course registry (``course.yml``), with ``assignment_sets``.
        title: the set's title (case and surrounding spaces ignored).
        part: one part's title, the same way (default: every part of the set).

    Returns:
        ``(auto-checked labels, other labels)``: the labels that the grader grades, and the
        set's exercises without a checker (pen and paper, open ones), in the set's order.

    Raises:
        ValueError: no set (or part) has that title (the message lists those there are), or a
            part's ``exercises`` is neither a list of labels nor ``auto-checked``.
    """
    import yaml

    data = yaml.safe_load(Path(course).read_text(encoding="utf-8")) or {}
    sets = data.get("assignment_sets") or []

    def pick(items: list, wanted: str, what: str) -> dict:
        found = [item for item in items if _same_title(item.get("title"), wanted)]
        if not found:
            titles = "; ".join(repr(item.get("title")) for item in items) or "none"
            raise ValueError(f"{course}: no {what} is titled {wanted!r} (there are: {titles})")
        return found[0]

    chosen = pick(sets, title, "assignment set")
    parts = chosen.get("parts") or []
    if part is not None:
        parts = [pick(parts, part, f"part of {chosen.get('title')!r}")]
    by_chapter = {c.stem: [label for _, label in c.exercises] for c in catalog.CHAPTERS}
    graded = {label for labels in by_chapter.values() for label in labels}
    labels: list[str] = []
    for one in parts:
        exercises = one.get("exercises") or []
        if exercises == "auto-checked":
            chapters = one.get("chapters") or list(by_chapter)
            labels += [label for stem in chapters for label in by_chapter.get(stem, [])]
        elif isinstance(exercises, list):
            labels += [str(label) for label in exercises]
        else:
            raise ValueError(
                f"{course}: part {one.get('title')!r}: expected `exercises:` to be a list of "
                f"labels or `auto-checked`, got {exercises!r}"
            )
    labels = list(dict.fromkeys(labels))
    return (
        frozenset(label for label in labels if label in graded),
        tuple(label for label in labels if label not in graded),
    )


def _same_title(a: object, b: str) -> bool:
    return isinstance(a, str) and a.strip().casefold() == b.strip().casefold()


# ------------------------------------------------------------------ one notebook


def _derive(seed: int, *parts: object) -> int:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _cases(spec: CheckSpec, seed: int) -> tuple[list[tuple], list[Any], list[int]]:
    """The grader's inputs for each case: drawn from ``seed``, or the case's own where the
    reference rejects the drawn ones. Also what is sent to the sandbox (``None`` for inputs
    that cannot be pickled: the sandbox then draws them itself from the same seed)."""
    args, sent, seeds = [], [], []
    for i, case in enumerate(spec.cases):
        case_seed = _derive(seed, spec.exercise, i)
        drawn = seeded_args(case, case_seed, spec)
        try:
            spec.reference_fn(*copy.deepcopy(drawn))
        except Exception:  # the reference's own precondition: keep the case as it is
            drawn = case.make_args()
        args.append(drawn)
        seeds.append(case_seed)
        try:
            sent.append(pickle.dumps(drawn) and drawn)
        except Exception:  # closures (e.g. a block's sub-layers): drawn again inside
            sent.append(None)
    return args, sent, seeds


def _readable(path: Path, folder: Path) -> bool:
    """Whether a file the sandbox wrote may be read: a plain file inside its folder (not a
    link to a file of the grader's), of a sane size."""
    try:
        return (
            not path.is_symlink()
            and path.is_file()
            and path.resolve().is_relative_to(folder.resolve())
            and path.stat().st_size <= _MAX_READ
        )
    except OSError:
        return False


def _plain_size(path: Path, folder: Path) -> int | None:
    """The size of a plain file inside ``folder`` (not a link out of it); ``None`` otherwise."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        if not path.resolve().is_relative_to(folder.resolve()):
            return None
        return path.stat().st_size
    except OSError:
        return None


def _read_json(path: Path) -> Any:
    if not _readable(path, path.parent):
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _inputs_text(args: tuple, limit: int = 160) -> str:
    """A drawn case's inputs in brief, e.g. ``(70, 24, 96, 3, 384)``: they are this
    submission's own, so showing them gives nothing away."""
    import numpy as np
    import torch

    def plain(value: object) -> object:
        if isinstance(value, torch.Tensor | np.ndarray):
            return value.tolist()
        if isinstance(value, tuple | list):
            return type(value)(plain(v) for v in value)
        return value

    text = repr(tuple(plain(a) for a in args))
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """How the evaluation sandbox ended: what explains an exercise that gave no result."""

    result: sandbox.SandboxResult  # the sandbox's return code and log
    ended: dict[str, Any]  # exercise -> how its child ended (the sandbox's ``ended.json``)
    limits: sandbox.Limits  # the sandbox's limits (its wall clock, memory, file size)
    exercise_timeout: float  # seconds for all cases of one exercise (--exercise-timeout)


def _evaluate(jobs: list[dict], folder: Path, settings: Settings) -> Evaluation:
    """Run the exercises' ``jobs`` in the evaluation sandbox, in ``folder``."""
    (folder / "job.pkl").write_bytes(pickle.dumps(jobs))
    timeouts = {
        "cell_timeout": settings.cell_timeout,
        "exercise_timeout": settings.exercise_timeout,
    }
    (folder / "settings.json").write_text(json.dumps(timeouts))
    wall = settings.exercise_timeout * len(jobs) + 120
    limits = sandbox.Limits(memory_bytes=settings.memory_bytes, wall_s=wall)
    result = sandbox.run_sandboxed("evaluate", folder, limits, unsafe=settings.unsafe)
    ended = _read_json(folder / "out" / sandbox.ENDED)
    return Evaluation(
        result, ended if isinstance(ended, dict) else {}, limits, settings.exercise_timeout
    )


# what the errors of running out of memory say (Python, the C library, C++ (torch's
# std::bad_alloc), OpenBLAS)
_MEMORY_WORDS = (
    "MemoryError",
    "bad_alloc",
    "Cannot allocate memory",
    "can't allocate memory",
    "Memory allocation",
    "out of memory",
)


def _speaks_of_memory(text: str) -> bool:
    """Whether ``text`` (a log, an error) says that memory ran out, in any of their words."""
    lowered = text.lower()
    return any(word.lower() in lowered for word in _MEMORY_WORDS)


def _size(n: int) -> str:
    """A limit in bytes, in GiB, or in MiB below 1 GiB."""
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"


def _memory_limit(limits: sandbox.Limits) -> str:
    return (
        f"the memory limit is {_size(limits.memory_bytes)} of address space per process, --memory"
    )


def _log_end(log: str) -> str:
    """`` (its log ends: <its last line>)``, or "" for an empty log (the submission's text)."""
    lines = [line for line in log.splitlines() if line.strip()]
    return f" (its log ends: {lines[-1].strip()[:200]})" if lines else ""


def _signal_name(number: int) -> str:
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def _no_result(name: str, evaluation: Evaluation | None) -> str:
    """Why exercise ``name`` gave no result, as far as the sandbox can tell, and what to do."""
    head = f"⚠️ {name}: the answer gave no result: "
    if evaluation is None:
        return head + "the sandbox wrote none (a limit of time, memory or file size, or a crash)"
    how = evaluation.ended.get(name)
    result, limits = evaluation.result, evaluation.limits
    if not isinstance(how, dict):  # the evaluation itself did not finish
        whole = "the grader's evaluation of this notebook's answers"
        last = _log_end(result.log)
        if result.returncode is None:
            return head + (
                f"{whole} ran past its wall-clock limit of {limits.wall_s:g} s "
                f"({evaluation.exercise_timeout:g} s per exercise, --exercise-timeout, and time "
                "to start) and was stopped: look for an answer that never ends"
            )
        if _speaks_of_memory(result.log):
            return head + (
                f"{whole} ran out of memory ({_memory_limit(limits)}; torch alone needs "
                f"about 2 GiB): grade again with a larger --memory{last}"
            )
        # Which library meets a memory limit first, and in what words, varies (the loader's
        # "cannot allocate memory for thread-local data", OpenBLAS, torch): the limit is named.
        if result.returncode < 0:
            return head + (
                f"{whole} ended by {_signal_name(-result.returncode)}{last} "
                f"({_memory_limit(limits)})"
            )
        if result.returncode > 0:
            return head + (
                f"{whole} ended with exit status {result.returncode}{last} "
                f"({_memory_limit(limits)})"
            )
        return head + f"{whole} left no account of this exercise"
    kind = how.get("how")
    if kind == "timeout":
        return head + (
            f"it ran past the time limit of {evaluation.exercise_timeout:g} s per exercise "
            "(--exercise-timeout) and was stopped: look for a loop that never ends, or work "
            "far larger than the cases need"
        )
    if kind == "signal":
        number = how.get("signal")
        number = number if isinstance(number, int) else 0
        ended = f"its process ended by {_signal_name(number)}"
        if number == signal.SIGKILL:  # who sent it cannot be told
            return head + (
                f"{ended}, not at the time limit: from the system, e.g. when memory runs out "
                f"({_memory_limit(limits)}), or from the answer itself: look for a tensor "
                "too large"
            )
        if number in (signal.SIGABRT, signal.SIGBUS, signal.SIGSEGV):
            return head + (
                f"{ended}, a crash, often a library that could not allocate memory "
                f"({_memory_limit(limits)}): look for a tensor too large"
            )
        if number == signal.SIGXCPU:
            return head + f"{ended}: the CPU-time limit: look for a loop that never ends"
        if number == signal.SIGXFSZ:
            return head + (
                f"{ended}: the file-size limit of {_size(limits.file_bytes)}: look for a file "
                "too large that the answer writes"
            )
        return head + ended
    if kind == "exit":
        error = str(how.get("error") or "")[:300]
        if "File too large" in error:
            return head + (
                f"writing its results failed ({error}): they pass the file-size limit of "
                f"{_size(limits.file_bytes)}: does the answer return far more than the case asks?"
            )
        if _speaks_of_memory(error):
            return head + (
                f"writing its results failed ({error}) ({_memory_limit(limits)}): look for "
                "a tensor too large"
            )
        if error:
            return head + f"writing its results failed ({error})"
        return head + (
            f"its process ended with exit code {how.get('code')} before its results were "
            "written (os._exit, or a library that ends the process?): an answer returns its "
            "result, it does not end the process"
        )
    if kind == "too_large":
        size = how.get("bytes")
        size_text = f"{size / 2**20:.0f} MiB" if isinstance(size, int) else "too large"
        return head + (
            f"its results ({size_text}) are larger than the grader reads back "
            f"({sandbox.MAX_RESULT_BYTES // 2**20} MiB): does the answer return far more than "
            "the case asks?"
        )
    return head + "its results were not written back"


def _limit_note(message: str, evaluation: Evaluation | None) -> str:
    """What limit an error the answer raised may come from, where its message shows it."""
    if evaluation is None:
        return ""
    if _speaks_of_memory(message):
        return f" ({_memory_limit(evaluation.limits)}: look for a tensor too large)"
    if "File too large" in message:
        return f" (the file-size limit is {_size(evaluation.limits.file_bytes)})"
    return ""


def _judge(
    name: str,
    spec: CheckSpec,
    args: list[tuple],
    folder: Path,
    evaluation: Evaluation | None = None,
) -> tuple[str, str]:
    """(status, message) of one exercise from what the sandbox wrote, compared here;
    ``evaluation`` explains an exercise that gave no result."""
    import numpy as np

    n = len(spec.cases)
    report = _read_json(folder / "out" / f"{name}.json")
    npz = folder / "out" / f"{name}.npz"
    if not isinstance(report, dict) or not _readable(npz, folder):
        return "error", _no_result(name, evaluation)
    tripped = report.get("tripped") or []
    if tripped:  # before the set-up: a program may trip a wire while it defines the answer
        label = str(tripped[0])[:100]
        if label in sandbox.WATCH_HOOKS:
            why = "which switches off the grader's watch on the answer's calls"
        elif label in sandbox.CODE_ROUTES + sandbox.REFUSED_EVENTS:
            why = (
                "which runs code that the grader cannot read (a string, a pickle, an attribute "
                "named in a string) or another process: an answer computes with NumPy or "
                "PyTorch in its own code"
            )
        else:
            why = "the library's answer to this exercise, which it asks you to write yourself"
        return "failed", f"❌ {name}: calls {label}, {why}"
    setup = report.get("setup")
    if setup == "not_attempted":
        return (
            "not_attempted",
            f"⏳ {name}: not attempted yet (the stub raises NotImplementedError)",
        )
    if setup:
        return "error", f"⚠️ {name}: defining the answer raised {str(setup)[:300]}"
    try:
        with zipfile.ZipFile(npz) as archive:  # no zip bomb: the arrays' unpacked size first
            if sum(info.file_size for info in archive.infolist()) > _MAX_READ:
                raise ValueError("too large")
        with np.load(npz, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except Exception as exc:
        return "error", f"⚠️ {name}: the answer's results cannot be read ({type(exc).__name__})"
    entries = report.get("cases")
    if not isinstance(entries, list):
        return "error", f"⚠️ {name}: the answer's results cannot be read"
    deferred = None  # the first case whose gradients are wrong, told once all values pass
    for i, case in enumerate(spec.cases):
        where = f"case {i + 1}/{n} ({case.name})"
        if case.draw is not None:  # named by the notebook's inputs, run on the grader's own
            where = f"case {i + 1}/{n} ({case.name}; here on {_inputs_text(args[i])})"
        entry = entries[i] if i < len(entries) and isinstance(entries[i], dict) else None
        if entry is None:  # the results end before this case: written by the answer itself?
            return (
                "error",
                f"⚠️ {name}: {where} gave no result: the results written back end before it",
            )
        kind = str(entry.get("kind"))
        if kind == "not_attempted":
            return (
                "not_attempted",
                f"⏳ {name}: not attempted yet (the stub raises NotImplementedError)",
            )
        if kind == "raised":
            message = str(entry.get("message"))[:300]
            message += _limit_note(message, evaluation)
            return "failed", f"❌ {name}: {where} raised {message}\n   Hint: {case.hint}"
        if kind == "refused":  # the checker's wrapper refused what the answer returned
            message = str(entry.get("message"))[:500]
            if not message.startswith("returned"):
                message = f"returned what the checker refuses: {message}"
            return "failed", f"❌ {name}: {where} {message}\n   Hint: {case.hint}"
        if entry.get("misuse"):
            return "failed", f"❌ {name}: {where} {str(entry['misuse'])[:600]}"
        if kind == "none":
            got: Any = None
        elif kind in ("value", "tuple"):
            count = entry.get("n")
            keys = [f"c{i}_{j}" for j in range(count if isinstance(count, int) else 0)]
            if (
                not isinstance(count, int)
                or any(key not in arrays for key in keys)
                or (kind == "value" and count != 1)
            ):
                return "error", f"⚠️ {name}: {where}: the answer's result is incomplete"
            parts = [arrays[key] for key in keys]
            got = parts[0] if kind == "value" else tuple(parts)
        else:
            kind_name = kind.removeprefix("other:")[:40]
            return "failed", (
                f"❌ {name}: {where} returned a {kind_name}, expected an array of numbers\n"
                f"   Hint: {case.hint}"
            )
        expected = spec.reference_fn(*copy.deepcopy(args[i]))
        failure = explain_failure(
            spec.exercise,
            got,
            expected,
            copy.deepcopy(args[i]),
            spec.mistakes,
            spec.rtol,
            spec.atol,
            case.hint,
        )
        if failure is not None:
            problem, hint = failure
            return "failed", f"❌ {name}: {where} {problem}\n   Hint: {hint}"
        if entry.get("gradient") and deferred is None:
            deferred = f"❌ {name}: {where} {str(entry['gradient'])[:900]}"
    if deferred is not None:
        return "failed", deferred
    return "passed", f"✅ {name}: all {n} cases pass (inputs drawn by the grader)."


def _unfinished_run(
    result: sandbox.SandboxResult | None, limits: sandbox.Limits | None, cell_timeout: float
) -> str:
    """Why the notebook run left no executed notebook, as far as its sandbox can tell."""
    whole = "the notebook run did not finish"
    if result is None or limits is None:
        return f"{whole} (a limit of time or memory, or a crash)"
    last = _log_end(result.log)
    if result.returncode is None:
        return (
            f"{whole}: it ran past its wall-clock limit of {limits.wall_s:g} s "
            f"({cell_timeout:g} s per cell, --timeout, times the number of cells, and "
            f"{_RUN_START_S:g} s to start) and was stopped"
        )
    if _speaks_of_memory(result.log):
        return (
            f"{whole}: it ran out of memory ({_memory_limit(limits)}): grade again with a "
            f"larger --memory{last}"
        )
    # which library meets a memory limit first, and in what words, varies: the limit is named
    if result.returncode < 0:
        return (
            f"{whole}: it ended by {_signal_name(-result.returncode)}{last} "
            f"({_memory_limit(limits)})"
        )
    if result.returncode > 0:
        return (
            f"{whole}: it ended with exit status {result.returncode}{last} "
            f"({_memory_limit(limits)})"
        )
    return f"{whole}: it ended with exit status 0 but left no executed notebook{last}"


def _dead_kernel(
    died: dict[str, Any],
    result: sandbox.SandboxResult | None = None,
    limits: sandbox.Limits | None = None,
) -> str:
    """Why the notebook run stopped when its kernel died, in plain words: the cell it was
    running and how its process ended (``died``, from the executed notebook: untrusted,
    so only its numbers are used), with the memory limit, and the run's log where it says
    that memory ran out."""

    def number(value: object) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    cell, code = number(died.get("cell")), number(died.get("returncode"))
    where = (
        f"while cell {cell + 1} ran" if cell is not None and cell >= 0 else "before any cell ran"
    )
    if code is None:
        ended = "how its process ended is not known"
    elif code < 0:
        ended = f"its process ended by {_signal_name(-code)}"
    else:
        ended = f"its process ended with exit code {code}"
    limit = _memory_limit(limits) if limits is not None else "the memory limit is --memory"
    # the kernel's stderr is the run's log: the C library's, OpenBLAS's or torch's words
    said = [line.strip() for line in (result.log if result else "").splitlines()]
    said = [line[:200] for line in said if _speaks_of_memory(line)]
    if said:
        why = (
            f" after memory ran out ({limit}): look for a tensor too large, or grade again with "
            f"a larger --memory (its log says: {said[-1]})"
        )
    elif code is not None and -code == signal.SIGKILL:  # who sent it cannot be told
        why = f": from the system, e.g. when memory runs out ({limit}), or from a cell"
    elif code is not None and -code in (signal.SIGABRT, signal.SIGBUS, signal.SIGSEGV):
        why = f", a crash, often a library that could not allocate memory ({limit})"
    elif code is not None and -code == signal.SIGXCPU:
        why = ": the CPU-time limit"
    elif code is not None and -code == signal.SIGXFSZ and limits is not None:
        why = f": the file-size limit of {_size(limits.file_bytes)}"
    elif code is not None and code >= 0:
        why = f" (os._exit, or a library that ends the process, e.g. when memory runs out: {limit})"
    else:
        why = f" ({limit})"
    return f"the kernel died {where}: {ended}{why}"


def _read_run(
    folder: Path,
    result: sandbox.SandboxResult | None = None,
    limits: sandbox.Limits | None = None,
    cell_timeout: float = DEFAULT_TIMEOUT_S,
) -> NotebookRun:
    """How the sandboxed run ended, from the executed notebook it left (untrusted), and, when
    it left none, from how its sandbox ended (``result``, under ``limits``)."""
    path = folder / "executed.ipynb"
    if not _readable(path, folder):
        size = _plain_size(path, folder)
        if size is not None and size > _MAX_READ:  # it ended: its outputs are too large to read
            return NotebookRun(
                {},
                f"the executed notebook is too large to read back ({size / 2**20:.0f} MB: a "
                "cell printed a huge output?), so which cells raised is not known",
            )
        return NotebookRun({}, _unfinished_run(result, limits, cell_timeout))
    try:
        import nbformat

        nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        errors = {}
        for index, cell in enumerate(nb.cells):
            for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
                if output.get("output_type") == "error":
                    errors[index] = str(output.get("ename", "Error"))[:60]
        account = nb.metadata.get("attnbook_run", {})
        died = account.get("kernel_died")
        if isinstance(died, dict):
            return NotebookRun(errors, _dead_kernel(died, result, limits))
        return NotebookRun(errors, str(account.get("stopped", ""))[:200])
    except Exception:
        return NotebookRun({}, "the executed notebook cannot be read")


def grade_notebook(
    path: str | Path,
    *,
    student: str | None = None,
    settings: Settings | None = None,
    on_run: Callable[[NotebookRun], None] | None = None,
) -> list[GradeRecord]:
    """Grade one notebook in its own sandboxes (see the module's docstring).

    Never raises for a problem of the notebook: an unreadable file, a cell
    that errors, hangs or kills its process all become records.

    Args:
        path: the submitted notebook.
        student: the student's name (default: the file's name without suffix).
        settings: how to grade (default: :class:`Settings()`, with a fresh seed).
        on_run: called with how the notebook run ended (a :class:`NotebookRun`),
            once it has, when ``settings.run_notebook`` is on. The records
            only mention the run where it explains a failed exercise; this
            says whether the whole notebook ran, e.g. for a check that the
            book's own solutions run cleanly.

    Returns:
        One record per exercise of its chapter (``missing`` ones included),
        then any other exercise it checks; or one ``error`` record with
        ``exercise=""`` for a notebook that cannot be read or checks nothing.

    Raises:
        ImportError: nbformat is not installed.
        attnbook.exercises.sandbox.SandboxUnavailable: no bubblewrap, and not ``unsafe``.
    """
    import nbformat

    import attnbook.exercises as checkers

    settings = settings or Settings(seed=secrets.randbits(63))
    path = Path(path)
    who = student if student is not None else path.stem

    def record(chapter: str, name: str, label: str, status: str, message: str) -> GradeRecord:
        worth = settings.points.get(label, settings.default_points) if name else 0.0
        earned = worth if status == "passed" else 0.0
        return GradeRecord(who, str(path), chapter, name, label, status, earned, worth, message)

    try:
        data = path.read_bytes()
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        answers = extract.extract(nb)
    except Exception as exc:  # not JSON, not a notebook, unreadable: report it, go on
        return [
            record("", "", "", "error", f"cannot read this notebook: {type(exc).__name__}: {exc}")
        ]
    found = {answer.exercise: answer for answer in answers}
    chapter = catalog.chapter_for(_title(nb), path.name, set(found))
    expected = list(chapter.exercises) if chapter else []
    labels = dict(expected)
    names = [name for name, _ in expected] + [n for n in found if n not in labels]
    title = chapter.title if chapter else _title(nb)
    if not names:
        return [
            record(
                title, "", "", "error", "no exercise found: this notebook calls no check_* function"
            )
        ]
    seed = _derive(settings.seed, hashlib.sha256(data).hexdigest())
    results: dict[str, tuple[str, str]] = {}
    jobs, specs = [], {}
    for name in names:
        answer = found.get(name)
        checker = getattr(checkers, f"check_{name}", None)
        if answer is None:
            results[name] = (
                "missing",
                (
                    f"❔ {name}: the notebook no longer calls check_{name}(...): its cell or the "
                    "checker call was deleted"
                ),
            )
        elif checker is None:
            results[name] = ("error", f"⚠️ {name}: there is no checker check_{name}")
        elif answer.error:
            results[name] = ("error", f"⚠️ {name}: {answer.error}")
        elif answer.problems:
            results[name] = ("failed", f"❌ {name}: the answer {answer.problems[0]}.")
        else:
            spec = checker_spec(checker, lambda *args: None)
            args, sent, seeds = _cases(spec, _derive(seed, name))
            specs[name] = (spec, args)
            jobs.append({"exercise": name, "program": answer.program, "args": sent, "seeds": seeds})
    with tempfile.TemporaryDirectory(prefix="attnbook-grade-") as tmp:
        run = NotebookRun({}, "")
        limits = sandbox.Limits(memory_bytes=settings.memory_bytes)
        timeouts = {
            "cell_timeout": settings.cell_timeout,
            "exercise_timeout": settings.exercise_timeout,
        }
        if settings.run_notebook:
            run_dir = Path(tmp) / "run"
            run_dir.mkdir()
            (run_dir / "submission.ipynb").write_bytes(data)
            (run_dir / "settings.json").write_text(json.dumps(timeouts))
            run_limits = dataclasses.replace(
                limits, wall_s=settings.cell_timeout * max(1, len(nb.cells)) + _RUN_START_S
            )
            ran = sandbox.run_sandboxed("execute", run_dir, run_limits, unsafe=settings.unsafe)
            run = _read_run(run_dir, ran, run_limits, settings.cell_timeout)
            if on_run is not None:
                on_run(run)
        if jobs:
            eval_dir = Path(tmp) / "eval"
            eval_dir.mkdir()
            evaluation = _evaluate(jobs, eval_dir, settings)
            for job in jobs:
                spec, args = specs[job["exercise"]]
                results[job["exercise"]] = _judge(job["exercise"], spec, args, eval_dir, evaluation)
    records = []
    for name in names:
        status, message = results[name]
        answer = found.get(name)
        # The run explains a failure; an untouched stub needs no explaining (a note that the
        # run stopped early read as if the stub had been interrupted).
        if status in ("failed", "error") and answer is not None:
            for note in answer.notes:  # what the program could not take from the notebook
                message += f"\n   (Not taken from the notebook: {note}.)"
            if answer.cell in run.errors:
                message += (
                    f"\n   (In the notebook run, cell {answer.cell + 1} raised "
                    f"{run.errors[answer.cell]}.)"
                )
            elif run.stopped:
                message += f"\n   (The notebook run stopped early: {run.stopped})"
        records.append(record(title, name, labels.get(name, ""), status, message))
    return records


# ------------------------------------------------------------------ many notebooks, state


def _read_state(path: Path) -> tuple[int | None, dict[str, list[dict]]]:
    """The seed and the graded notebooks (hash -> records) of a state file; a torn last
    line (a grader killed while writing) is ignored."""
    seed, done = None, {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("kind") == "seed":
                seed = int(entry["seed"])
            elif entry.get("kind") == "notebook":
                done[entry["sha256"]] = entry["records"]
    return seed, done


def _append(path: Path, entry: dict) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        file.flush()
        os.fsync(file.fileno())


def _priced(record: GradeRecord, settings: Settings) -> GradeRecord:
    """A record of the state file, worth what the course's points say *now* (a course.yml
    changed since the first run changes the points, not the verdicts)."""
    worth = settings.points.get(record.label, settings.default_points) if record.exercise else 0.0
    earned = worth if record.status == "passed" else 0.0
    return dataclasses.replace(record, points=earned, max_points=worth)


def grade(
    paths: Iterable[str | Path],
    *,
    settings: Settings | None = None,
    state: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    on_notebook: Callable[[list[GradeRecord]], None] | None = None,
) -> list[GradeRecord]:
    """Grade every notebook in ``paths`` (files or folders), each in its own sandboxes.

    Args:
        paths: submitted notebooks and folders of notebooks.
        settings: how to grade; its ``seed`` is replaced by the state file's, if it has one.
        state: the append-only state file: notebooks graded before (same
            content, same path) are taken from it, not graded again; each
            notebook graded now is added as soon as it is done.
        progress: called with a line of text before each notebook (e.g. ``print``).
        on_notebook: called with all records so far after each notebook.

    Returns:
        All records, notebook after notebook.

    Raises:
        ValueError: a path does not exist, or no notebook was found.
        attnbook.exercises.sandbox.SandboxUnavailable: no bubblewrap, and not ``unsafe``.
    """
    settings = settings or Settings(seed=secrets.randbits(63))
    found = _find(paths)
    done: dict[str, list[dict]] = {}
    if state is not None:
        state = Path(state)
        seed, done = _read_state(state)
        if seed is None:
            _append(state, {"kind": "seed", "seed": settings.seed})
        else:
            settings = dataclasses.replace(settings, seed=seed)
    records: list[GradeRecord] = []
    for i, (notebook, student) in enumerate(found, start=1):
        try:
            digest = hashlib.sha256(notebook.read_bytes()).hexdigest()
        except OSError:
            digest = ""
        key = hashlib.sha256(f"{digest}:{notebook}:{student}".encode()).hexdigest()
        if key in done:
            if progress is not None:
                progress(f"[{i}/{len(found)}] {notebook}: graded before (state file)")
            records += [_priced(GradeRecord(**r), settings) for r in done[key]]
        else:
            if progress is not None:
                progress(f"[{i}/{len(found)}] grading {notebook}")
            graded = grade_notebook(notebook, student=student, settings=settings)
            if state is not None:
                rows = [dataclasses.asdict(r) for r in graded]
                _append(state, {"kind": "notebook", "sha256": key, "records": rows})
            records += graded
        if on_notebook is not None:
            on_notebook(records)
    return records


# ------------------------------------------------------------------ reports


def _short(record: GradeRecord, width: int = 60) -> str:
    lines = record.message.strip().splitlines()
    text = lines[0] if lines else ""
    prefix = f"{record.exercise}: "
    if record.exercise and prefix in text[: len(prefix) + 3]:
        text = text.split(prefix, 1)[1]
    if not record.exercise:  # a notebook's own record: the table has no notebook column
        text = f"{Path(record.notebook).name}: {text}"
    return text if len(text) <= width else text[: width - 1] + "…"


def in_set(
    records: Sequence[GradeRecord], expected: Mapping[str, float] | None = None
) -> list[GradeRecord]:
    """The records that ``--set`` grades: those of the exercises in ``expected`` (exercise
    name -> points), and every notebook's own record (one that cannot be read or checks
    nothing). An exercise outside the set is worth 0 points, and a row of "0/0" for it (a
    week-1 notebook handed in again while grading week 2) would read as a failure. Without
    ``expected``, every record.
    """
    if expected is None:
        return list(records)
    return [r for r in records if not r.exercise or r.exercise in expected]


def format_table(
    records: Sequence[GradeRecord], expected: Mapping[str, float] | None = None
) -> str:
    """The records as a plain-text table, then per-student totals and a one-line summary.

    Args:
        records: what :func:`grade` returned.
        expected: exercise name -> points of every exercise asked for (``--set``), handed
            in or not: each counts in every student's maximum (see :func:`_totals`). The
            table then lists only the records of the set (:func:`in_set`), and the summary
            says how many it left out; every student who handed in a notebook keeps a total.

    Returns:
        The text, ready to print.
    """
    shown = in_set(records, expected)
    rows = [("student", "exercise", "status", "points", "message")]
    rows += [
        (r.student, r.exercise or "-", r.status, f"{r.points:g}/{r.max_points:g}", _short(r))
        for r in shown
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4] for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 7)
    lines.append("")
    lines.append("student totals:")
    for student, (earned, worth, _) in _totals(records, expected).items():
        lines.append(f"  {student}: {earned:g} / {worth:g}")
    for student, files in _handed_in_twice(records).items():
        lines.append(
            f"  note: {student} handed in one exercise in several notebooks "
            f"({', '.join(files)}): each exercise counts once, with its best result"
        )
    counts = {status: sum(r.status == status for r in shown) for status in STATUSES}
    n_notebooks = len({r.notebook for r in records})
    summary = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in counts.items())
    lines.append(f"\n{n_notebooks} notebook(s), {len(shown)} record(s): {summary}")
    if left_out := len(records) - len(shown):
        lines.append(f"{left_out} record(s) of exercises outside the set left out")
    return "\n".join(line.rstrip() for line in lines)


def _totals(
    records: Sequence[GradeRecord], expected: Mapping[str, float] | None = None
) -> dict[str, tuple[float, float, dict[str, float]]]:
    """Per student: points earned, points possible, and the points of each exercise.

    An exercise counts once, with its best result, however many notebooks of a student hold
    it (a chapter handed in twice, as ``02_softmax.ipynb`` and ``02_softmax (1).ipynb``).
    The points possible are the same for every student: those of every exercise that anyone
    handed in, so a chapter a student did not hand in counts as 0 of its points, not as
    nothing asked; and those of every exercise in ``expected`` (exercise name -> points: what
    an assignment set asks for), so a chapter of the set that nobody handed in counts too.
    """
    earned: dict[str, dict[str, float]] = {}
    worth: dict[str, float] = dict(expected or {})
    for r in records:
        got = earned.setdefault(r.student, {})
        if r.exercise:  # not a notebook's own record (worth 0)
            got[r.exercise] = max(got.get(r.exercise, 0.0), r.points)
            worth[r.exercise] = max(worth.get(r.exercise, 0.0), r.max_points)
    possible = sum(worth.values())
    return {student: (sum(got.values()), possible, got) for student, got in earned.items()}


def _handed_in_twice(records: Sequence[GradeRecord]) -> dict[str, list[str]]:
    """Student -> the notebooks of theirs that hold an exercise another of theirs holds too."""
    where: dict[tuple[str, str], set[str]] = {}
    for r in records:
        if r.exercise:
            where.setdefault((r.student, r.exercise), set()).add(r.notebook)
    twice: dict[str, set[str]] = {}
    for (student, _), files in where.items():
        if len(files) > 1:
            twice.setdefault(student, set()).update(files)
    return {student: sorted(files) for student, files in twice.items()}


def _atomic_write(path: str | Path, text: str) -> None:
    """Write a whole file or nothing (a killed grader leaves the previous version)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8", newline="")
    os.replace(tmp, path)


def write_json(records: Sequence[GradeRecord], path: str | Path) -> None:
    """Write the records as a JSON list of objects with the keys :data:`FIELDS` (UTF-8)."""
    data = [dataclasses.asdict(r) for r in records]
    _atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_csv(records: Sequence[GradeRecord], path: str | Path) -> None:
    """Write the records as CSV with a header row :data:`FIELDS` (UTF-8; messages may span lines)."""
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS)
    writer.writeheader()
    writer.writerows(dataclasses.asdict(r) for r in records)
    _atomic_write(path, buffer.getvalue())


def write_gradebook(
    records: Sequence[GradeRecord],
    path: str | Path,
    expected: Mapping[str, float] | None = None,
) -> None:
    """Write one CSV row per student: the points of each exercise, the total and the maximum.

    ``expected`` (exercise name -> points: what ``--set`` asks for) makes the columns those
    exercises and no others, whether anyone handed them in or not, and adds their points to
    the maximum. Without it, every exercise handed in has a column.
    """
    import io

    if expected is None:
        exercises = list(dict.fromkeys(r.exercise for r in records if r.exercise))
    else:  # the exercises outside the set are worth 0: a column of 0s would read as a fail
        exercises = list(expected)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["student", *exercises, "total", "max_points"])
    for student, (earned, worth, per) in _totals(records, expected).items():
        writer.writerow(
            [student, *(f"{per.get(e, 0):g}" for e in exercises), f"{earned:g}", f"{worth:g}"]
        )
    _atomic_write(path, buffer.getvalue())


# ------------------------------------------------------------------ command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attnbook.grade",
        description=(
            "Grade submitted notebooks, each in its own sandbox: one record per student, "
            "notebook and exercise, status passed, failed, not_attempted, error or missing."
        ),
        epilog="Exit status: 0 when grading completed (whatever the grades), 2 for a usage "
        f"error, 1 when the grading tools ({_INSTALL_HINT}) or bubblewrap are missing.",
    )
    parser.add_argument("submissions", nargs="+", help="notebooks, or folders searched for *.ipynb")
    parser.add_argument("--json", metavar="FILE", help="write the records as a JSON list")
    parser.add_argument("--csv", metavar="FILE", help="write the records as CSV")
    parser.add_argument("--gradebook", metavar="FILE", help="write one CSV row per student")
    parser.add_argument("--course", metavar="YAML", help="course.yml: points per exercise label")
    parser.add_argument(
        "--set",
        metavar="TITLE",
        help="grade for this assignment set of --course: its other auto-checked exercises "
        "are worth 0 points",
    )
    parser.add_argument(
        "--part", metavar="TITLE", help="with --set: only this part of the set (e.g. 'Week 2')"
    )
    parser.add_argument(
        "--state",
        metavar="FILE",
        help="append-only state file (default: beside --json, --csv or --gradebook, .state.jsonl)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time limit per cell of the notebook run (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--exercise-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="time limit for all cases of one exercise (default 60)",
    )
    parser.add_argument(
        "--memory", type=float, default=6.0, metavar="GIB", help="memory per process (default 6)"
    )
    parser.add_argument(
        "--skip-run",
        action="store_true",
        help="do not run the notebooks themselves (grades do not depend on it; faster)",
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run submissions without bubblewrap, as plain processes of your user",
    )
    parser.add_argument(
        "--seed", type=int, help="the cases' seed (default: random, kept in the state)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: grade, print the table, write the outputs; return the exit status.

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).

    Returns:
        0 when grading completed, 2 for a usage error, 1 without the grading tools or bubblewrap.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    for option in ("timeout", "exercise_timeout", "memory"):
        try:  # inf too: --memory inf crashed with an OverflowError (int(inf * 2**30))
            check_positive_number(getattr(args, option), f"--{option.replace('_', '-')}")
        except ValueError as exc:
            parser.error(str(exc))
    try:
        _require_grading_tools()
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        found = _find(args.submissions)  # a usage error before anything runs
    except ValueError as exc:
        parser.error(str(exc))
    if chapter_named := _students_named_after_chapters(found):
        names = list(dict.fromkeys(chapter_named))
        print(
            f"warning: {len(chapter_named)} notebook(s) lie at the top of a folder given, or were "
            f"given themselves, so each is graded as a student named after its file "
            f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}). "
            "To name each student after their folder, and keep two students' notebooks of "
            "one chapter apart, give the folder that holds one folder per student "
            "(submissions/, not submissions/* or submissions/alice/)",
            file=sys.stderr,
        )
    if args.part and not args.set:
        parser.error("--part needs --set")
    if args.set and not args.course:
        parser.error("--set needs --course, the course.yml that holds the set")
    default_points, points = 1.0, {}
    expected: dict[str, float] | None = None  # with --set: every exercise it asks for
    if args.course:
        try:
            default_points, points = load_points(args.course)
        except (OSError, ValueError) as exc:
            parser.error(f"--course: {exc}")
        graded = {label for chapter in catalog.CHAPTERS for _, label in chapter.exercises}
        if unused := sorted(set(points) - graded):
            print(
                f"warning: --course: no auto-checked exercise is labelled {', '.join(unused)}: "
                "the grader never uses these points (a typo, or an exercise graded by hand?)",
                file=sys.stderr,
            )
    if args.set:
        try:
            assigned, by_hand = load_assignment_set(args.course, args.set, args.part)
        except (OSError, ValueError) as exc:
            parser.error(f"--set: {exc}")
        points |= {label: 0.0 for label in graded - assigned}  # counts in no maximum
        expected = {
            name: points.get(label, default_points)
            for chapter in catalog.CHAPTERS
            for name, label in chapter.exercises
            if label in assigned
        }
        print(
            f"--set: {len(assigned)} auto-checked exercise(s) graded: "
            f"{', '.join(sorted(assigned)) or 'none'}; every other one is worth 0 points",
            file=sys.stderr,
        )
        if by_hand:
            print(
                f"note: --set also hands in {', '.join(by_hand)}, which no checker grades "
                "(pen-and-paper or open exercises, or a label misspelt in --course): grade "
                "them by hand",
                file=sys.stderr,
            )
    if args.unsafe_no_sandbox:
        print(
            "warning: --unsafe-no-sandbox: submissions run as plain processes of your user, "
            "with your files, processes and network in reach",
            file=sys.stderr,
        )
    elif not sandbox.bwrap_available():
        print(
            "error: bubblewrap (bwrap) is missing or cannot create a sandbox here; the grader "
            "runs submissions only inside it. Install it (Debian/Ubuntu: apt-get install "
            "bubblewrap) or pass --unsafe-no-sandbox.",
            file=sys.stderr,
        )
        return 1
    settings = Settings(
        cell_timeout=args.timeout,
        exercise_timeout=args.exercise_timeout,
        memory_bytes=int(args.memory * 2**30),
        run_notebook=not args.skip_run,
        unsafe=args.unsafe_no_sandbox,
        seed=args.seed if args.seed is not None else secrets.randbits(63),
        points=points,
        default_points=default_points,
    )
    output = args.json or args.csv or args.gradebook
    state = args.state or (Path(output).with_suffix(".state.jsonl") if output else None)
    outputs = {"--json": args.json, "--csv": args.csv, "--gradebook": args.gradebook}
    if problem := _clashing_outputs({**outputs, "--state": state}, [p for p, _ in found]):
        parser.error(problem)
    for option, path in (outputs | {"--state": state}).items():
        if not path:
            continue
        if Path(path).is_dir():
            parser.error(f"{option} must name a file, got the folder {str(path)!r}")
        try:  # out/grades.json with no out/ yet: made now, not a crash after the grading
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder should be, no permission
            blocked = isinstance(exc, (FileExistsError, NotADirectoryError))
            why = "a file stands in its path" if blocked else exc.strerror
            parser.error(f"{option}: cannot make the folder of {str(path)!r}: {why}")
    if args.seed is not None and state is not None:
        kept, _ = _read_state(Path(state))
        if kept is not None and kept != args.seed:
            print(
                f"warning: --seed is ignored: the state file {state} keeps the seed of its "
                "first run (delete it, or name a new --state, to grade again with --seed)",
                file=sys.stderr,
            )

    def write(records: list[GradeRecord]) -> None:
        if args.json:
            write_json(in_set(records, expected), args.json)
        if args.csv:
            write_csv(in_set(records, expected), args.csv)
        if args.gradebook:
            write_gradebook(records, args.gradebook, expected)

    records = grade(
        args.submissions,
        settings=settings,
        state=state,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        on_notebook=write,
    )
    print(format_table(records, expected))
    write(records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
