"""Run every check of the book, in order, and print one summary: what `make test` runs.

Usage: python -m tools.run_tests [STEP ...]    (--help: this text)
       (default: every step but nbval; e.g. `python -m tools.run_tests unit book`)

Steps, each timed; a failing step does not stop the ones after it. Two pairs run side by
side, their outputs printed one after the other once both are done: the student edition
beside the book (two single-threaded Sphinx builds, one core each), and the browser test
beside the learner step (Chromium keeps about one core busy, and the learner step leaves a
core idle while it installs packages):

  lint      ruff check .
  format    ruff format --check .
  unit      pytest tests -m "not browser" -n 2 --dist loadscope
                                                 the package, the solutions, project files
            (pytest-xdist: two workers, each module's tests on one of them)
  nbval     pytest --nbval chapters/ -n 2        nbval on every chapter in .venv's kernel, in
            place: not run by default (the learner step compares every output); the quicker
            loop while writing a chapter (`python -m tools.run_tests nbval`)
  book      jupyter-book build into an emptied _build/html (warnings are errors,
            nitpicky, every page re-read)
  student   python -m tools.make_student --allow-placeholder-url
                                                 the student edition in _build/student/
            (notebooks, zip, book); fails if any solution text reaches a
            student notebook, page, _sources file or the search index
  learner   python -m tools.learner_path         nbval on every chapter, in the learner's
            environment: attnbook's wheel in a clean venv with only its runtime
            dependencies, each chapter run alone in an empty folder (two at a time) and every
            output compared with the stored one; then the Colab cell's
            `attnbook[extra] @ git+...` from a local clone, and the chapters that need the extra
  browser   pytest tests/browser -m browser      the built book in headless Chromium

Each pytest step writes a JUnit XML report to .test-reports/ (the learner step one per
chapter, in .test-reports/learner/). The last line is

  summary: N passed, M failed, K skipped

where N, M and K add up the pytest tests of every step (of the learner step: the chapters'
code cells, not the harness's), plus one per step that is not pytest (ruff check, ruff
format, the book build, the student edition). Failed includes errors. The exit status is 0
only if nothing failed. pytest's "no tests collected" (exit status 5) is a failure for the
unit tests and nbval, and for
the browser test only where Chromium is installed. Finally the share of code
cells whose output nbval does not compare (tag `nbval-ignore-output`) must stay
below 5%; after that count, a line names the CPU (AVX2, AVX-512) and the PyTorch kernels the
notebooks asked for (tools/notebooks.py: cpu_line), since a CPU of another kind prints other
digits. Before the last line, the browser test's page weight (a first visit of the landing
page, the built book's size) is printed.

Every program is taken from the environment of the Python running this script
(`.venv/bin/` under `make test`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tools import learner_path
from tools.notebooks import book_kernel_env, cpu_line
from tools.page_checks import CHROMIUM

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the virtual environment's bin/, not resolved on purpose
REPORTS = ROOT / ".test-reports"
IGNORE_LIMIT = 0.05  # at most this share of code cells may skip nbval's comparison
PYTEST_NO_TESTS = 5  # pytest's exit status when it collected nothing
# Written by the browser test (tests/browser/test_interactive_figures.py): what a first visit
# of the landing page weighs and how big the built book is; printed before the summary.
PAGE_WEIGHT = REPORTS / "page-weight.json"

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
# As tools/execute_notebooks.py: no downloads, no progress bars, the stored outputs' CPU kernels.
NBVAL_ENV = book_kernel_env({})


@dataclass
class Step:
    key: str  # the name to run it alone: `python -m tools.run_tests nbval`
    title: str  # its row in the summary
    command: list[str]
    junit: str | None = None  # the report's file name, for pytest steps
    env: dict[str, str] | None = None
    empty_is_failure: bool = True  # for pytest: is "no tests collected" a failure?
    default: bool = True  # run when no step is named
    # The learner step's reports: a folder of them, one per chapter (see learner_path).
    junit_dir: str | None = None
    # The key of a step to run at the same time as, when both are run, this one right after
    # it (see run_side_by_side).
    beside: str | None = None
    # Filled in by run():
    returncode: int | None = None
    seconds: float = 0.0
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def ok(self) -> bool:
        if self.returncode == PYTEST_NO_TESTS and self.junit:
            return not self.empty_is_failure
        return self.returncode == 0


def steps() -> list[Step]:
    return [
        Step("lint", "ruff check", [str(BIN / "ruff"), "check", "."]),
        Step("format", "ruff format --check", [str(BIN / "ruff"), "format", "--check", "."]),
        # Two workers (pytest-xdist): on the 2-core machine of CI, 108 s against 157 s. By
        # module (loadscope): a module's tests share a worker, so a module-scoped fixture is
        # made once, not once on each worker (the grader's runs in test_grade.py take 15-25 s
        # each). On the 2-core machine: 204 s and 209 s, against 239-264 s in three runs of
        # the default (by test). `--dist loadgroup` with xdist_group marks would group fewer
        # tests, but pytest 9.2 silently ignores the marks (pytest-xdist issue 1386). Modules in
        # the order collected, not by number of tests: tests/conftest.py puts the longest first.
        Step(
            "unit",
            "pytest (not browser)",
            [
                *PYTEST,
                "tests",
                "-m",
                "not browser",
                "-n",
                "2",
                "--dist",
                "loadscope",
                "--no-loadscope-reorder",
            ],
            "unit.xml",
        ),
        Step(
            "nbval",
            "nbval (chapters, .venv)",
            [
                *PYTEST,
                "--nbval",
                "--nbval-kernel-name",
                "attnbook",  # the kernel of .venv that `make venv` registers
                "--nbval-sanitize-with",
                "tests/nbval_sanitize.cfg",
                # A notebook's cells run in order in one kernel: all of a file to one worker.
                "-n",
                "2",
                "--dist",
                "loadfile",
                "chapters/",
            ],
            "nbval.xml",
            # Two kernels at once, the cores shared out as in the learner step.
            env={**NBVAL_ENV, **learner_path.threads_env(2)},
            default=False,
        ),
        Step(
            "book",
            "jupyter-book build",
            # --all: re-read every page, so warnings of unchanged pages are not skipped.
            [
                str(BIN / "jupyter-book"),
                "build",
                ".",
                "--warningiserror",
                "--nitpick",
                "--keep-going",
                "--all",
            ],
        ),
        # The book again, from the student notebooks, into _build/student/ (not _build/html).
        # This repository keeps the placeholder URL, which `make student` refuses by default.
        # Beside the book's build: each is one Sphinx process that keeps one core busy, and
        # they share no file. On the 2-core machine, 78 s one after the other, 36 s at once.
        Step(
            "student",
            "make student",
            [sys.executable, "-m", "tools.make_student", "--allow-placeholder-url"],
            beside="book",
        ),
        Step(
            "learner",
            "nbval, learner's path",
            # Two chapters at a time, one core each: on the 2-core machine of CI the chapters
            # took 347 s one at a time, 235 s two at a time (PyTorch gains little from a
            # second thread here); the whole step, nbval's comparison included, 271 s.
            [
                sys.executable,
                "-m",
                "tools.learner_path",
                "--jobs",
                "2",
                "--junit-dir",
                str(REPORTS / "learner"),
            ],
            junit_dir="learner",
        ),
        Step(
            "browser",
            "pytest (browser)",
            # Only tests/browser is collected: collecting all of tests/ (the package's tests
            # import torch) cost 14 s of the step's 178 s, measured on the 2-core machine.
            [*PYTEST, "tests/browser", "-m", "browser"],
            "browser.xml",
            empty_is_failure=CHROMIUM.exists(),
            # Beside the learner step. Alone, this step keeps 1.3 of the 2 cores busy (Chromium's
            # renderer runs a page's scripts on one thread), and the learner step keeps one core
            # idle for about a minute: making its clean environment, installing the Colab form
            # and removing its folder run on one core. On the 2-core
            # machine, the same day: 253 s and 222 s one after the other, 415 s and 435 s side
            # by side in two runs (each step slower, the two together 40-60 s sooner). The
            # chapters run with fixed thread counts, so their outputs do not depend on it.
            beside="learner",
        ),
    ]


def junit_counts(path: Path) -> tuple[int, int, int]:
    """(passed, failed, skipped) of a pytest JUnit XML report; errors count as failed."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    tests = failed = skipped = 0
    for suite in suites:
        tests += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return tests - failed - skipped, failed, skipped


def header(step: Step, number: int, total: int) -> str:
    return f"\n==> [{number}/{total}] {step.title}: {' '.join(step.command)}"


def run(step: Step, log: Path | None = None) -> None:
    """Run `step`, its output on this one's, or into the file `log` (nothing printed then)."""
    command = list(step.command)
    report = REPORTS / step.junit if step.junit else None
    if report:
        command.append(f"--junitxml={report}")
    if step.key == "book":
        # Start from an empty _build/html: pages left over from an earlier build
        # (a renamed chapter) would otherwise be checked by the browser test.
        shutil.rmtree(ROOT / "_build" / "html", ignore_errors=True)
    with open(log, "w", encoding="utf-8") if log else contextlib.nullcontext(sys.stdout) as out:
        start = time.perf_counter()
        try:
            step.returncode = subprocess.run(
                command,
                cwd=ROOT,
                env={**os.environ, **(step.env or {})},
                stdout=out if log else None,
                stderr=subprocess.STDOUT if log else None,
                check=False,
            ).returncode
        except FileNotFoundError as error:
            print(f"cannot run {command[0]}: {error}", file=out, flush=True)
            step.returncode = 127
        step.seconds = time.perf_counter() - start
        if step.returncode == PYTEST_NO_TESTS and report:
            print(f"{step.title}: no tests were collected", file=out)

    if report and report.is_file():
        step.passed, step.failed, step.skipped = junit_counts(report)
    elif step.junit_dir:
        for chapter in sorted((REPORTS / step.junit_dir).glob("*.xml")):
            passed, failed = learner_path.chapter_counts(chapter)
            step.passed += passed
            step.failed += failed
    elif not report:
        step.passed, step.failed = (1, 0) if step.ok else (0, 1)
    if not step.ok and step.failed == 0:
        step.failed = 1  # failed without a failing test: no tests, a crash, a usage error


def side_by_side(chosen: list[Step]) -> list[list[tuple[int, Step]]]:
    """`chosen`, numbered from 1, in groups to run at once: a step joins the one before it
    when that is the step it is `beside`; every other step is a group of its own."""
    batches: list[list[tuple[int, Step]]] = []
    for number, step in enumerate(chosen, start=1):
        if batches and step.beside == batches[-1][0][1].key:
            batches[-1].append((number, step))
        else:
            batches.append([(number, step)])
    return batches


def run_side_by_side(batch: list[tuple[int, Step]], total: int) -> None:
    """Run the numbered steps of `batch` at the same time.

    The first prints as it goes; each other step's output is kept in a file and printed
    under its own header once all of them have ended, so the log reads one step at a time.
    """
    (number, first), *beside = batch
    print(header(first, number, total), flush=True)
    if not beside:
        run(first)
        return
    with tempfile.TemporaryDirectory(prefix="attnbook-steps-") as folder:
        logs = [Path(folder) / f"{step.key}.log" for _, step in beside]
        for other, step in beside:
            print(f"    and beside it, step {other}: {step.title} (its output comes after)")
        print(flush=True)
        with ThreadPoolExecutor(max_workers=len(beside)) as pool:
            running = [pool.submit(run, step, log) for (_, step), log in zip(beside, logs)]
            run(first)
            for future in running:
                future.result()
        for (other, step), log in zip(beside, logs, strict=True):
            print(f"{header(step, other, total)}\n    (ran beside step {number})", flush=True)
            print(log.read_text(encoding="utf-8"), end="", flush=True)


def code_cell_census() -> tuple[int, list[str]]:
    """(number of code cells, "notebook: cell N" for each cell nbval does not compare)."""
    code_cells, ignored = 0, []
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cells = [cell for cell in nb.cells if cell.cell_type == "code"]
        code_cells += len(cells)
        ignored += [
            f"{path.name}: code cell {i}"
            for i, cell in enumerate(cells, start=1)
            if is_output_ignored(cell)
        ]
    return code_cells, ignored


def is_output_ignored(cell: nbformat.NotebookNode) -> bool:
    """Does nbval skip comparing this cell's output (by comment or by tag)?"""
    tags = {tag.lower() for tag in cell.get("metadata", {}).get("tags", [])}
    marked = re.search(r"^\s*#\s*NBVAL_(IGNORE_OUTPUT|SKIP)\b", cell.source, re.MULTILINE)
    return bool(marked) or bool(tags & {"nbval-ignore-output", "nbval-skip"})


def page_weight_line() -> str | None:
    """One line of what the browser test measured (PAGE_WEIGHT), or None if it did not run."""
    if not PAGE_WEIGHT.is_file():
        return None
    figures = json.loads(PAGE_WEIGHT.read_text(encoding="utf-8"))
    return (
        f"\npage weight: a first visit of the landing page loads "
        f"{figures['first_visit'] / 1e6:.2f} MB in {figures['requests']} responses "
        f"({figures['first_visit_gzip'] / 1e6:.2f} MB gzipped); the built book (_build/html) is "
        f"{figures['folder'] / 1e6:.1f} MB, of which MathJax {figures['mathjax'] / 1e6:.1f} MB"
    )


def main(selected: list[str]) -> int:
    if {"-h", "--help"} & set(selected):
        print(__doc__)
        return 0
    all_steps = steps()
    unknown = set(selected) - {step.key for step in all_steps}
    if unknown:
        keys = " ".join(step.key for step in all_steps)
        print(
            f"python -m tools.run_tests: unknown step(s): {', '.join(sorted(unknown))} "
            f"(the steps: {keys}; --help says what each runs)",
            file=sys.stderr,
        )
        return 2
    chosen = [step for step in all_steps if step.key in selected or (not selected and step.default)]

    REPORTS.mkdir(exist_ok=True)
    for step in chosen:
        if step.junit:
            (REPORTS / step.junit).unlink(missing_ok=True)
        if step.key == "browser":
            PAGE_WEIGHT.unlink(missing_ok=True)
    start = time.perf_counter()
    for batch in (batches := side_by_side(chosen)):
        run_side_by_side(batch, len(chosen))
    wall = time.perf_counter() - start

    print("\n" + "=" * 78)
    print(f"{'step':<24}{'result':<8}{'seconds':>9}   counts")
    for step in chosen:
        result = "ok" if step.ok else "FAILED"
        if step.ok and step.skipped and not step.passed:
            result = "skipped"
        counts = f"{step.passed} passed, {step.failed} failed, {step.skipped} skipped"
        print(f"{step.title:<24}{result:<8}{step.seconds:>9.1f}   {counts}")
    print(f"{'total':<32}{sum(step.seconds for step in chosen):>9.1f}")
    if any(len(batch) > 1 for batch in batches):
        print(f"{'wall clock':<32}{wall:>9.1f}   (steps run side by side counted once)")

    ignore_failed = False
    # Whichever compared the outputs: the learner step (make test), or nbval run alone.
    nbval = next((step for step in chosen if step.key in ("learner", "nbval")), None)
    if nbval:
        code_cells, ignored = code_cell_census()
        share = len(ignored) / code_cells if code_cells else 0.0
        ignore_failed = share >= IGNORE_LIMIT
        print(
            f"\nnotebooks: {code_cells} code cells; nbval validated {nbval.passed} "
            f"(failed {nbval.failed}); {len(ignored)} marked NBVAL_IGNORE_OUTPUT/SKIP "
            f"= {share:.1%} (limit: under {IGNORE_LIMIT:.0%})"
            + (" FAILED" if ignore_failed else "")
        )
        if ignore_failed:
            print("\n".join(f"  {cell}" for cell in ignored))
        print(cpu_line())

    weight = page_weight_line()
    if weight:
        print(weight)

    passed = sum(step.passed for step in chosen)
    failed = sum(step.failed for step in chosen)
    skipped = sum(step.skipped for step in chosen)
    print(f"summary: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or ignore_failed or not all(step.ok for step in chosen) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
