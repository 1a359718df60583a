"""List every exercise of the chapters and keep the instructor guide's generated parts in sync.

Usage:
    python -m tools.exercise_inventory                  # print the inventory, one line per exercise
    python -m tools.exercise_inventory --json           # the same, as JSON
    python -m tools.exercise_inventory --write          # rewrite the generated part of instructors.md
    python -m tools.exercise_inventory --check          # change nothing; exit 1 if it is out of date
    python -m tools.exercise_inventory --measure [NB..] # time chapters in a fresh kernel, then --write

What it reads, for each `chapters/NN_*.ipynb`: the title (the first `# ` heading outside code
blocks), the bullets of the `Learning objectives` admonition (that title exactly), the size of
the prose and code, and every `{exercise}` directive (as `tools.notebooks` parses it): its
label, its title, its difficulty (`(easy)`, `(medium)` or `(harder)` at the end of the title)
and its kind. What the notebooks do not say (prerequisites, assignment sets) comes from the
course registry, `course.yml`.

The kind of an exercise, the convention of the book:

- **auto-checked**: the first code cell after the exercise (before the next exercise)
  calls a checker `check_*` of `attnbook.exercises`. Nothing to write: the code says it.
- **pen-and-paper**: the directive carries `:class: pen-and-paper`. A derivation or a
  calculation with one right answer, which its solution gives; no computer needed.
- **open**: the directive carries `:class: open`. An experiment to run or change in the
  notebook, code that no checker tests, or a question to argue; read by a person.

An exercise without a checker and without one of the two classes, one with a checker and a
class, or a title without a difficulty is a problem: `--write` and `--check` list it and exit 1.

The guide `instructors.md` has three generated parts, each between two markers:

- `<!-- sets:start -->` ... `<!-- sets:end -->`: the suggested assignment sets
  (`assignment_sets` of course.yml, chosen by hand) with each exercise's kind and the
  estimated times;
- `<!-- colab-cell:start -->` ... `<!-- colab-cell:end -->`: the chapters' Colab cell, as
  `tools/sync_repo_url.py` writes it;
- `<!-- inventory:start -->` ... `<!-- inventory:end -->`: the time per chapter, then per
  chapter its objectives, prerequisites (`prerequisites` of course.yml, written by hand),
  time and table of exercises.

Run times are measured by `--measure` (`--repeat N`: the best of N runs): each chapter runs
top to bottom in a fresh kernel, nothing is written back to the notebook, and the CPU time of
its kernel and the wall-clock time are kept in a comment of the generated part, so that
`--write` and `--check` reuse them without running anything. A notebook that does not run to
its end is not measured; when none is, the guide is left as it was (with the date of its
figures) and the exit status is 1. `--chapters DIR` reads the
chapters from another folder. `tests/book/test_instructor_guide.py` calls `find_out_of_sync()`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from tools import course, sync_repo_url
from tools.notebooks import (
    KERNEL_NAME,
    OPTION_LINE,
    TIMEOUT_S,
    code_blocks,
    exercises,
    run_notebook,
    strip_solutions,
    title,
)

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "instructors.md"
START, END = "<!-- inventory:start -->", "<!-- inventory:end -->"
SETS_START, SETS_END = "<!-- sets:start -->", "<!-- sets:end -->"
COLAB_START, COLAB_END = "<!-- colab-cell:start -->", "<!-- colab-cell:end -->"
MEASURED = re.compile(r"<!-- measured: (\{.*?\}) -->", re.DOTALL)

DIFFICULTIES = ("easy", "medium", "harder")
KINDS = ("auto-checked", "pen-and-paper", "open")  # the last two are `:class:` values
KIND_NAMES = {
    "auto-checked": "auto-checked code",
    "pen-and-paper": "pen and paper",
    "open": "open",
    "": "no kind",  # a problem, reported; shown so that --write can still describe it
}

# Study-time estimate (not measured with students; the guide says so): reading speed of
# prose with maths, minutes per code cell (read it, run it, look at the output), and
# minutes per exercise by difficulty.
WORDS_PER_MINUTE = 100
MINUTES_PER_CODE_CELL = 1.0
MINUTES_PER_EXERCISE = {"easy": 10, "medium": 25, "harder": 45}


@dataclass(frozen=True)
class Exercise:
    """One `{exercise}` directive of a chapter."""

    chapter: str  # chapter stem, e.g. "01_scores"
    label: str  # the `:label:`, e.g. "ex-ch01-cosine"
    title: str  # the title without its difficulty
    difficulty: str  # one of DIFFICULTIES, or "" when the title has none
    kind: str  # one of KINDS, or "" when it cannot be told
    checker: str  # the checker's name for an auto-checked exercise, else ""
    classes: tuple[str, ...] = ()  # the directive's `:class:` values


@dataclass
class Chapter:
    """What the guide says about one chapter notebook."""

    stem: str
    title: str
    objectives: list[str]
    prose_words: int  # words of the markdown cells, solutions left out
    code_cells: int  # code cells a learner reads and runs (checks cells left out)
    first_words: int = 0  # prose words of a first reading: collapsed blocks left out too
    first_code_cells: int = 0  # code cells a first reading of the book shows open
    exercises: list[Exercise] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def number(self) -> int:
        return int(self.stem.split("_", 1)[0])


_DIFFICULTY = re.compile(r"\s*\((easy|medium|harder)\)\s*$")
# The opening line of an admonition, e.g. ":::{admonition} Learning objectives": its fence and
# its title, on that line only.
_ADMONITION = re.compile(r"^(?P<fence>:{3,}|`{3,})\{admonition\}(?:[ \t]+(?P<title>.*?))?[ \t]*$")
OBJECTIVES_TITLE = "Learning objectives"


@dataclass(frozen=True)
class _Admonition:
    title: str
    options: dict[str, str]
    first: int  # line of the opening fence (from 0)
    end: int  # line of the closing fence, or the number of lines if it is never closed
    body: list[str]  # the lines after the options


def _admonitions(text: str) -> list[_Admonition]:
    """The admonitions of a markdown text outside its code blocks, as the directive parser
    reads the code blocks (`code_blocks`: an example of how to write one is code), in order.

    One fenced with colons closes, as MyST's colon fence does, at the first line made only
    of colons, at least as many as its opening fence; one fenced with backticks where its
    code block ends (CommonMark). One never closed runs to the end of the text. An
    admonition inside the body of another is part of that body, not read on its own.
    """
    lines = text.splitlines()
    blocks = dict(code_blocks(text))  # opening fence -> closing fence
    code = {i for first, last in blocks.items() for i in range(first + 1, last)}
    found, i = [], 0
    while i < len(lines):
        match = _ADMONITION.match(lines[i])
        if i in code or not match:
            i += 1
            continue
        fence = match["fence"]
        options, j = {}, i + 1
        while j < len(lines) and (option := OPTION_LINE.match(lines[j])):
            options[option["key"]] = option["value"]
            j += 1
        if fence[0] == "`":
            end = blocks[i]
        else:
            closing = re.compile(rf"[ \t]*:{{{len(fence)},}}[ \t]*")
            end = next((k for k in range(j, len(lines)) if closing.fullmatch(lines[k])), len(lines))
        found.append(_Admonition(match["title"] or "", options, i, end, lines[j:end]))
        i = end + 1
    return found


def _objectives(cells: list[str]) -> list[str]:
    """The bullets of the chapter's `Learning objectives` admonition (the first admonition
    with that title exactly, in the markdown cells `cells`), each on one line."""
    admonition = next(
        (
            admonition
            for source in cells
            for admonition in _admonitions(source)
            if admonition.title == OBJECTIVES_TITLE
        ),
        None,
    )
    bullets: list[str] = []
    for line in admonition.body if admonition else []:
        if line.startswith("- "):
            bullets.append(line[2:].strip())
        elif bullets and line.strip():
            bullets[-1] += " " + line.strip()
    return bullets


def _prose_words(source: str) -> int:
    """Words of a markdown cell outside `{solution}` blocks (what a learner reads first)."""
    return len(re.findall(r"\S+", strip_solutions(source)[0]))


def _first_reading_words(source: str) -> int:
    """Words of a markdown cell that a first reading meets: no solutions, no collapsed blocks.

    A collapsed block is an admonition with the class `dropdown` (the book's "Going deeper"
    blocks): its fence, title, options, body and closing fence are left out. One in a code
    block, as the directive parser reads them (`code_blocks`), is code that the page shows.
    """
    lines = strip_solutions(source)[0].splitlines()
    hidden = {
        i
        for admonition in _admonitions("\n".join(lines))
        if "dropdown" in admonition.options.get("class", "").split()
        for i in range(admonition.first, admonition.end + 1)
    }
    return sum(len(re.findall(r"\S+", line)) for i, line in enumerate(lines) if i not in hidden)


# Cells the book does not show open: removed (the Colab cell, the checks cells that assert
# the numbers the prose quotes) or collapsed behind a toggle (tangents of "Going deeper").
CHECKS_TAG = "remove-input"  # a checks cell: only asserts, no output (a test enforces it)
HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-cell"}


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def read_chapter(path: Path) -> Chapter:
    """Parse one chapter notebook into a `Chapter` (problems are collected, not raised)."""
    nb = nbformat.read(path, as_version=4)
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    chapter = Chapter(
        stem=path.stem,
        title=title(markdown) or path.stem,
        objectives=_objectives(markdown),
        prose_words=sum(_prose_words(c.source) for c in nb.cells if c.cell_type == "markdown"),
        code_cells=sum(
            c.cell_type == "code" and not _tags(c) & {CHECKS_TAG, "remove-cell"} for c in nb.cells
        ),
        first_words=sum(
            _first_reading_words(c.source) for c in nb.cells if c.cell_type == "markdown"
        ),
        first_code_cells=sum(
            c.cell_type == "code" and not _tags(c) & HIDDEN_TAGS for c in nb.cells
        ),
    )
    if not chapter.objectives:
        chapter.problems.append(f"{path.name}: no bullets in a `Learning objectives` admonition")

    for exercise in exercises(nb):
        argument, options = exercise.block.argument, exercise.block.options
        checkers = list(exercise.checkers)
        label = options.get("label", "")
        classes = tuple(options.get("class", "").split())
        marked = [c for c in classes if c in KINDS[1:]]
        match = _DIFFICULTY.search(argument)
        difficulty = match[1] if match else ""
        where = f"{path.name}: exercise {label or argument!r}"
        if not label:
            chapter.problems.append(f"{where} has no :label:")
        if not difficulty:
            chapter.problems.append(
                f"{where}: its title must end with (easy), (medium) or (harder)"
            )
        if checkers and marked:
            chapter.problems.append(
                f"{where} calls {checkers[0]} in its code cell but is marked "
                f"`:class: {marked[0]}`: remove the class (auto-checked is read from the code)"
            )
        if not checkers and len(marked) != 1:
            chapter.problems.append(
                f"{where} has no checker call in the code cell after it: give the directive "
                "exactly one of `:class: pen-and-paper` or `:class: open`"
            )
        kind = "auto-checked" if checkers else (marked[0] if len(marked) == 1 else "")
        chapter.exercises.append(
            Exercise(
                chapter=path.stem,
                label=label,
                title=_DIFFICULTY.sub("", argument).strip(),
                difficulty=difficulty,
                kind=kind,
                checker=checkers[0] if checkers else "",
                classes=classes,
            )
        )
    return chapter


def read_chapters(chapters_dir: Path = ROOT / "chapters") -> list[Chapter]:
    """Every `NN_*.ipynb` of `chapters_dir`, in order."""
    return [read_chapter(p) for p in sorted(chapters_dir.glob("[0-9][0-9]_*.ipynb"))]


# --- the generated markdown -------------------------------------------------------------------


def format_minutes(value: float) -> str:
    """A duration in minutes, rounded to 5 minutes, as `1 h 15 min` or `40 min`.

    Also what the book's chapter pages show (_ext/attnbook_book.py).
    """
    total = max(5, round(value / 5.0) * 5)
    hours, minutes = divmod(total, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes:02d} min" if minutes else "")


def reading_minutes(chapter: Chapter) -> float:
    """Estimated minutes to read the chapter and run its cells (see the constants above)."""
    return chapter.prose_words / WORDS_PER_MINUTE + MINUTES_PER_CODE_CELL * chapter.code_cells


def first_reading_minutes(chapter: Chapter) -> float:
    """The same estimate for a first reading of the book: collapsed blocks and cells skipped."""
    return chapter.first_words / WORDS_PER_MINUTE + MINUTES_PER_CODE_CELL * chapter.first_code_cells


def exercise_minutes(chapter: Chapter) -> float:
    """Estimated minutes for all of the chapter's exercises."""
    return sum(MINUTES_PER_EXERCISE.get(e.difficulty, 0) for e in chapter.exercises)


def _timing(measured: dict, stem: str) -> dict | None:
    value = measured.get("chapters", {}).get(stem)
    return value if isinstance(value, dict) and "wall" in value else None


def _seconds(measured: dict, stem: str) -> str:
    value = _timing(measured, stem)
    if value is None:
        return "not measured yet"
    load = value.get("load")
    busy = f" (load {load:.0f})" if isinstance(load, (int, float)) else ""
    return f"{value['cpu']:.0f} s / {value['wall']:.0f} s{busy}"


def _run_time(measured: dict, stem: str) -> str:
    value = _timing(measured, stem)
    if value is None:
        return "Run time not measured yet (`--measure`)"
    return (
        f"The notebook needs {value['cpu']:.0f} s of CPU time and ran in {value['wall']:.0f} s "
        "(measured)"
    )


def _authors_year(key: str) -> str:
    """`Abnar and Zuidema (2020)` for a key of references.bib (the key itself if not found)."""
    bib = ROOT / "references.bib"
    text = bib.read_text(encoding="utf-8") if bib.is_file() else ""
    entry = re.search(rf"@\w+\{{{re.escape(key)},(.*?)\n\}}", text, re.S)
    if not entry:
        return key
    authors = re.search(r"author\s*=\s*\{(.*?)\},?\s*\n", entry[1], re.S)
    year = re.search(r"year\s*=\s*\{?(\d{4})", entry[1])
    if not authors or not year:
        return key
    names = [a.split(",")[0].strip(" {}") for a in re.split(r"\s+and\s+", authors[1])]
    who = names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else ""
    return f"{who or names[0] + ' et al.'} ({year[1]})"


def _relink(text: str) -> str:
    """A chapter's text made to work from the book's root, where the guide lives.

    `{doc}` paths gain `chapters/`; citations, which the guide has no bibliography for, become
    plain text: `{footcite:t}` the authors and year, `{footcite:p}` nothing.
    """
    text = re.sub(r"\{doc\}`(?:\./)?(\d\d_\w+)`", r"{doc}`chapters/\1`", text)
    text = re.sub(r"\s*\{footcite:?p?\}`[^`]*`", "", text)
    return re.sub(
        r"\{footcite:t\}`([^`]*)`",
        lambda m: ", ".join(_authors_year(k.strip()) for k in m[1].split(",")),
        text,
    )


def _link(exercise: Exercise) -> str:
    """A `{ref}` to the exercise, titled with its title as plain text.

    A role's text cannot hold backticks, and maths would show as raw `$...$`: both are dropped
    (`Scaling by $1/d_k$` -> `Scaling by 1/d_k`), and `|` is escaped for tables.
    """
    text = re.sub(r"[`$]", "", exercise.title).replace("|", "\\|")
    return f"{{ref}}`{text} <{exercise.label}>`"


def render(chapters: list[Chapter], measured: dict, registry: course.Course | None = None) -> str:
    """The generated part of the guide, without its markers."""
    registry = registry or course.load()
    prerequisites = {c.stem: (c.requires, c.background) for c in registry.chapters}
    out = [
        "<!-- Generated by `python -m tools.exercise_inventory --write` from chapters/*.ipynb: "
        "do not edit by hand. -->",
        f"<!-- measured: {json.dumps(measured, sort_keys=True)} -->",
        "",
        "### Time per chapter",
        "",
        "| chapter | run time, CPU / wall clock (measured) | first reading (estimate) | "
        "reading, all (estimate) | exercises (estimate) | exercises: easy / medium / harder |",
        "|---|---|---|---|---|---|",
    ]
    for chapter in chapters:
        counts = [sum(e.difficulty == d for e in chapter.exercises) for d in DIFFICULTIES]
        out.append(
            f"| {chapter.number}. {{doc}}`chapters/{chapter.stem}` | "
            f"{_seconds(measured, chapter.stem)} | "
            f"{format_minutes(first_reading_minutes(chapter))} | "
            f"{format_minutes(reading_minutes(chapter))} | "
            f"{format_minutes(exercise_minutes(chapter))} | {' / '.join(map(str, counts))} |"
        )
    total_first = sum(first_reading_minutes(c) for c in chapters)
    total_reading = sum(reading_minutes(c) for c in chapters)
    total_exercises = sum(exercise_minutes(c) for c in chapters)
    n_exercises = sum(len(c.exercises) for c in chapters)
    by_kind = {k: sum(e.kind == k for c in chapters for e in c.exercises) for k in KINDS}
    where = measured.get("machine", "")
    out += [
        "",
        f"In all: {len(chapters)} chapters, about {format_minutes(total_first)} of a first "
        f"reading ({format_minutes(total_reading)} with every collapsed block) and "
        f"{format_minutes(total_exercises)} of exercises (estimates), and {n_exercises} exercises: "
        + ", ".join(f"{n} {KIND_NAMES[k]}" for k, n in by_kind.items())
        + ".",
        "",
        "*Run time* is measured: the CPU time the kernel used to run the whole notebook top "
        "to bottom in a fresh kernel with no GPU, then the wall-clock time of that run"
        + (f" ({where})" if where else "")
        + ", and in brackets the machine's load at the end of the run (its 1-minute load "
        "average: the number of processes that wanted a core). A load above the number of "
        "cores means other work shared the machine: the wall-clock time is then longer "
        "than on a quiet machine, and so is the CPU time of a chapter whose PyTorch threads "
        "wait for each other (chapter 10 trains with two)"
        + ". *Reading* and *exercises* are estimates from a formula, not timings of students: "
        f"{WORDS_PER_MINUTE} words of prose per minute plus "
        f"{MINUTES_PER_CODE_CELL:g} minute per code cell, and "
        + ", ".join(f"{m} minutes per {d} exercise" for d, m in MINUTES_PER_EXERCISE.items())
        + '. A *first reading* leaves out what the book shows collapsed: the "Going deeper" '
        "blocks and the code cells behind a toggle; *reading, all* counts them, and both leave "
        "out the solutions, the hidden cells that check the numbers the prose quotes and the "
        "Colab install cell" + ".",
    ]
    for chapter in chapters:
        earlier, background = prerequisites.get(chapter.stem, ((), ""))
        out += [
            "",
            f"### {chapter.number}. {chapter.title}",
            "",
            f"{{doc}}`Open the chapter <chapters/{chapter.stem}>`. After it, a learner can:",
            "",
        ]
        out += [f"- {_relink(bullet)}" for bullet in chapter.objectives]
        needs = ", ".join(f"{{doc}}`chapters/{stem}`" for stem in earlier) if earlier else "none"
        out += [
            "",
            f"**Prerequisites.** Chapters: {needs}. {background}".rstrip(),
            "",
            f"**Time.** {_run_time(measured, chapter.stem)}; about "
            f"{format_minutes(first_reading_minutes(chapter))} for a first reading "
            f"(about {round(chapter.first_words, -2):,} words of prose, "
            f"{chapter.first_code_cells} code cells), "
            f"{format_minutes(reading_minutes(chapter))} to read and run all of it "
            f"(about {round(chapter.prose_words, -2):,} words, {chapter.code_cells} code "
            "cells) and "
            f"{format_minutes(exercise_minutes(chapter))} for all the exercises (estimates).",
            "",
            "| exercise | difficulty | kind | checker |",
            "|---|---|---|---|",
        ]
        for ex in chapter.exercises:
            checker = f"`{ex.checker}`" if ex.checker else "–"
            out.append(
                f"| {_link(ex)} | {ex.difficulty} | "
                f"{KIND_NAMES.get(ex.kind, 'no kind')} | {checker} |"
            )
    return "\n".join(out) + "\n"


def read_measured(text: str) -> dict:
    """The measurements stored in a guide's generated part ({} if none)."""
    match = MEASURED.search(text)
    return json.loads(match[1]) if match else {}


def _written(stems: tuple[str, ...], present: dict | set) -> bool:
    """Whether every chapter a part of a set reads is in chapters/ (a part naming a chapter
    that is still being written is left out until it is there)."""
    return all(s in present for s in stems)


def render_sets(chapters: list[Chapter], registry: course.Course | None = None) -> str:
    """The suggested assignment sets of course.yml with their exercises and times."""
    registry = registry or course.load()
    by_stem = {c.stem: c for c in chapters}
    by_label = {e.label: e for c in chapters for e in c.exercises}
    out = [
        "<!-- Generated by `python -m tools.exercise_inventory --write` from course.yml "
        "and chapters/*.ipynb: do not edit by hand. -->",
    ]
    for assignment_set in registry.assignment_sets:
        title, purpose = assignment_set.title, assignment_set.purpose
        parts = [p for p in assignment_set.parts if _written(p.chapters, by_stem)]
        if not parts:
            continue
        out += ["", f"### {title}", "", purpose]
        reading = exercises_time = 0.0
        kinds = dict.fromkeys(KINDS, 0)
        for part, stems, labels in ((p.title, p.chapters, p.exercises) for p in parts):
            stems = stems or tuple(by_stem)
            read = [by_stem[s] for s in stems if s in by_stem]
            if labels is None:
                chosen = [e for c in read for e in c.exercises if e.kind == "auto-checked"]
            else:
                chosen = [by_label[x] for x in labels if x in by_label]
            reading += sum(reading_minutes(c) for c in read)
            exercises_time += sum(MINUTES_PER_EXERCISE.get(e.difficulty, 0) for e in chosen)
            for e in chosen:
                kinds[e.kind] = kinds.get(e.kind, 0) + 1
            chapter_links = ", ".join(f"{{doc}}`chapters/{c.stem}`" for c in read)
            out += ["", f"**{part}.** Read {chapter_links}. Hand in:", ""]
            out += [
                f"- {_link(e)} ({e.difficulty}, {KIND_NAMES.get(e.kind, 'no kind')})"
                for e in chosen
            ]
        counted = ", ".join(f"{n} {KIND_NAMES[k]}" for k, n in kinds.items() if n)
        out += [
            "",
            f"In all: {counted}; about {format_minutes(reading)} of reading and "
            f"{format_minutes(exercises_time)} of exercises (estimates).",
        ]
    return "\n".join(out) + "\n"


def _replace_block(text: str, start: str, end: str, body: str) -> str:
    if start not in text or end not in text or text.index(start) > text.index(end):
        raise ValueError(f"the guide needs the markers {start} and {end}, in this order")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}{end}{tail}"


def render_colab_cell() -> str:
    """The Colab cell of the chapters, as `make sync-url` writes it, in a code block."""
    source = sync_repo_url.colab_cell_source(sync_repo_url.repository_url(ROOT))
    return f"```ipython3\n{source}\n```\n"


def render_guide(
    text: str,
    chapters: list[Chapter],
    measured: dict | None = None,
    registry: course.Course | None = None,
) -> str:
    """`text` (the guide) with its generated parts rewritten (measurements kept if None)."""
    registry = registry or course.load()
    if measured is None:
        measured = read_measured(text)
    text = _replace_block(text, COLAB_START, COLAB_END, render_colab_cell())
    text = _replace_block(text, SETS_START, SETS_END, render_sets(chapters, registry))
    return _replace_block(text, START, END, render(chapters, measured, registry))


def problems(chapters: list[Chapter], registry: course.Course | None = None) -> list[str]:
    """Every problem found in the chapters (missing kinds, difficulties, labels, ...)."""
    registry = registry or course.load()
    found = [p for c in chapters for p in c.problems]
    found += [
        f"{c.stem}.ipynb: add the chapter to course.yml (title, part, prerequisites, ...)"
        for c in chapters
        if c.stem not in registry.stems
    ]
    labels = [e.label for c in chapters for e in c.exercises if e.label]
    found += [
        f"exercise label {x!r} is used twice" for x in sorted(set(labels)) if labels.count(x) > 1
    ]
    stems = {c.stem for c in chapters}
    for assignment_set in registry.assignment_sets:
        for part in assignment_set.parts:
            if _written(part.chapters, stems):
                found += [
                    f"course.yml: assignment set {assignment_set.title!r}: no exercise "
                    f"labelled {x!r}"
                    for x in part.exercises or ()
                    if x not in labels
                ]
    found += [
        f"course.yml: points: no exercise labelled {x!r}"
        for x in registry.points
        if x not in labels
    ]
    kinds = {e.label: e.kind for c in chapters for e in c.exercises if e.label}
    found += [
        f"course.yml: points: exercise {x!r} is {KIND_NAMES[kinds[x]]}, not auto-checked: "
        "the grader gives points to auto-checked exercises only"
        for x in registry.points
        if kinds.get(x, "auto-checked") != "auto-checked"
    ]
    return found


def find_out_of_sync(
    guide: Path = GUIDE,
    chapters_dir: Path = ROOT / "chapters",
    registry: course.Course | None = None,
) -> list[str]:
    """What is wrong: chapter problems, then a guide whose generated part is out of date."""
    registry = registry or course.load()
    chapters = read_chapters(chapters_dir)
    found = problems(chapters, registry)
    if not guide.is_file():
        return [*found, f"{guide.name} does not exist"]
    text = guide.read_text(encoding="utf-8")
    try:
        wanted = render_guide(text, chapters, registry=registry)
    except ValueError as error:
        return [*found, f"{guide.name}: {error}"]
    if wanted != text:
        found.append(
            f"{guide.name}: the exercise inventory is out of date: run "
            "`python -m tools.exercise_inventory --write`"
        )
    return found


# --- measuring run times ----------------------------------------------------------------------


def measure(paths: list[Path], repeat: int = 1) -> dict[str, dict[str, float]]:
    """Time each notebook top to bottom in a fresh kernel; nothing is written back.

    Returns, per chapter stem, the wall-clock seconds (the best of `repeat` runs: other work
    on the machine only ever adds time) and the CPU seconds the kernel used in that run,
    which depend much less on what else the machine is doing.
    """
    import psutil
    from jupyter_client.manager import AsyncKernelManager

    results: dict[str, dict[str, float]] = {}
    for path in paths:
        for _ in range(repeat):
            km = AsyncKernelManager(kernel_name=KERNEL_NAME)
            used = []  # the kernel's CPU times after each cell: the last one counts

            def after_cell(cell: object, cell_index: int, km=km, used=used) -> None:
                used.append(psutil.Process(km.provisioner.process.pid).cpu_times())

            start = time.perf_counter()
            try:
                run_notebook(
                    path, kernel_name=KERNEL_NAME, timeout=TIMEOUT_S, km=km,
                    on_cell_complete=after_cell,
                )  # fmt: skip
            except Exception as error:  # a cell failed or timed out: no figure for this run
                print(f"{path.stem}: not measured: {type(error).__name__}", flush=True)
                continue
            last = used[-1]
            cpu = last.user + last.system + last.children_user + last.children_system
            wall = time.perf_counter() - start
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            best = results.get(path.stem)
            if best is None or wall < best["wall"]:
                results[path.stem] = {
                    "wall": round(wall, 1),
                    "cpu": round(cpu, 1),
                    "load": round(load, 1),  # how busy the machine was: 1-minute load average
                }
        if path.stem in results:
            print(f"{path.stem}: {results[path.stem]}", flush=True)
    return results


def _machine() -> str:
    """Where and when the timings were taken."""
    cores = os.cpu_count() or 0
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    return f"{cores} CPU cores, {platform.machine()}, {day}"


def _at_least_one(text: str) -> int:
    """An argparse ``type=``: a whole number >= 1, else argparse's usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print the inventory as JSON")
    group.add_argument("--write", action="store_true", help="rewrite the guide's generated part")
    group.add_argument("--check", action="store_true", help="exit 1 if the guide is out of date")
    group.add_argument("--measure", nargs="*", metavar="NOTEBOOK", help="time chapters, then write")
    parser.add_argument(
        "--repeat", type=_at_least_one, default=1, help="with --measure: best of N runs (default 1)"
    )
    parser.add_argument(
        "--chapters",
        type=Path,
        default=ROOT / "chapters",
        help="read the chapters from this folder instead of chapters/",
    )
    args = parser.parse_args(argv)
    if not args.chapters.is_dir():
        parser.error(f"--chapters: no folder {str(args.chapters)!r}")
    for name in args.measure or []:  # before any kernel starts, and before the guide is touched
        if not Path(name).is_file():
            parser.error(f"--measure: no notebook {name!r}")

    chapters = read_chapters(args.chapters)
    if not chapters:
        parser.error(f"--chapters: no chapter notebook (NN_*.ipynb) in {str(args.chapters)!r}")
    if args.check:
        found = find_out_of_sync(GUIDE, args.chapters)
        for line in found:
            print(line)
        return 1 if found else 0
    if args.write or args.measure is not None:
        found = problems(chapters)
        if found:
            print("\n".join(found))
            return 1
        measured = None  # None: keep the measurements the guide holds
        if args.measure is not None:
            paths = [Path(p) for p in args.measure] or [
                args.chapters / f"{c.stem}.ipynb" for c in chapters
            ]
            timings = measure(paths, repeat=args.repeat)  # minutes: read the guide afterwards
            if not timings:  # keep the guide's figures, and the date they were taken
                print(f"nothing was measured: {GUIDE.name} is unchanged", file=sys.stderr)
                return 1
            old = read_measured(GUIDE.read_text(encoding="utf-8")).get("chapters", {})
            measured = {"machine": _machine(), "chapters": {**old, **timings}}
        text = GUIDE.read_text(encoding="utf-8")
        new = render_guide(text, chapters, measured)
        if new != text:
            GUIDE.write_text(new, encoding="utf-8")
        print(f"{'updated' if new != text else 'unchanged'}: {GUIDE.name}")
        return 0
    exercises = [asdict(e) for c in chapters for e in c.exercises]
    if args.json:
        print(json.dumps(exercises, indent=1))
    else:
        for e in exercises:
            checker = e["checker"] or "-"
            print(
                f"{e['chapter']}\t{e['label']}\t{e['difficulty']}\t{e['kind']}\t{checker}\t{e['title']}"
            )
    for line in problems(chapters):
        print(f"problem: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
