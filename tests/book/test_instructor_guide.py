"""The instructor guide (`instructors.md`) describes the chapters as they are.

- its generated parts (assignment sets, the Colab cell, times and exercise tables) are what
  `python -m tools.exercise_inventory --write` makes from `chapters/*.ipynb` today;
- every exercise of every chapter has a label, a difficulty and a kind, and an auto-checked
  exercise calls a checker that `attnbook.exercises` really has;
- every exercise or chapter the guide points at exists;
- and these checks can fail: a chapter changed without regenerating the guide, an exercise
  without a kind, a guide edited by hand inside a generated part are all reported.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path
from typing import NamedTuple

import nbformat
import pytest

from tools import course
from tools import exercise_inventory as inventory

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "instructors.md"
CHAPTERS = ROOT / "chapters"


def test_guide_is_in_sync_with_the_chapters() -> None:
    found = inventory.find_out_of_sync()
    assert not found, "\n".join(found)


def test_every_exercise_has_a_label_difficulty_and_kind() -> None:
    chapters = inventory.read_chapters()
    assert chapters, "chapters/ has no notebook"
    for chapter in chapters:
        assert chapter.exercises, f"{chapter.stem} has no exercise"
        for ex in chapter.exercises:
            where = f"{chapter.stem}: {ex.label or ex.title}"
            assert re.fullmatch(r"ex-[a-z0-9-]+", ex.label), f"{where}: label {ex.label!r}"
            assert ex.difficulty in inventory.DIFFICULTIES, f"{where}: no difficulty"
            assert ex.kind in inventory.KINDS, f"{where}: no kind"
            assert (ex.kind == "auto-checked") == bool(ex.checker), where


def test_checkers_of_auto_checked_exercises_exist() -> None:
    import attnbook.exercises

    named = {
        ex.label: ex.checker
        for chapter in inventory.read_chapters()
        for ex in chapter.exercises
        if ex.checker
    }
    assert named, "no auto-checked exercise found: the checker detection is broken"
    missing = {label: c for label, c in named.items() if not hasattr(attnbook.exercises, c)}
    assert not missing, f"checkers not in attnbook.exercises: {missing}"


def test_kinds_are_read_as_the_chapters_say() -> None:
    # Known exercises of chapter 2, one of each way of telling the kind.
    chapter = inventory.read_chapter(CHAPTERS / "02_softmax.ipynb")
    kinds = {ex.label: (ex.kind, ex.checker, ex.difficulty) for ex in chapter.exercises}
    assert kinds["ex-ch02-stable-softmax"] == ("auto-checked", "check_softmax", "easy")
    assert kinds["ex-ch02-sigmoid"] == ("pen-and-paper", "", "easy")
    assert kinds["ex-ch02-cross-entropy"][2] == "harder"
    assert len(chapter.objectives) == 5  # the five bullets of its Learning objectives
    assert chapter.objectives[0].startswith("define softmax, explain why its outputs lie")


def test_guide_points_only_at_existing_exercises_and_chapters() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    labels = {ex.label for c in inventory.read_chapters() for ex in c.exercises}
    referenced = set(re.findall(r"\{(?:ref|numref)\}`(?:[^`<]*<)?(ex-[\w-]+)>?`", text))
    assert referenced, "the guide references no exercise"
    assert referenced <= labels, f"unknown exercise labels: {sorted(referenced - labels)}"
    docs = set(re.findall(r"\{doc\}`(?:[^`<]*<)?([\w/.-]+)>?`", text))
    missing = [d for d in docs if not any((ROOT / f"{d}{s}").is_file() for s in (".ipynb", ".md"))]
    assert not missing, f"the guide links to missing pages: {missing}"


def test_every_chapter_has_a_section_in_the_guide() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for path in sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb")):
        assert f"{{doc}}`Open the chapter <chapters/{path.stem}>`" in text, path.stem


# --- the checks can fail ------------------------------------------------------------------------


class Copy(NamedTuple):
    guide: Path
    chapters: Path
    baseline: set[str]  # what is reported before the test breaks anything


@pytest.fixture
def copy(tmp_path: Path) -> Copy:
    """A copy of chapters/ and a guide regenerated for it, to break on purpose.

    Its baseline is what is already reported for the copy (nothing, unless a chapter being
    written has a problem of its own): each test looks only at what its change adds.
    """
    chapters = tmp_path / "chapters"
    shutil.copytree(CHAPTERS, chapters, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    guide = tmp_path / "instructors.md"
    text = GUIDE.read_text(encoding="utf-8")
    guide.write_text(inventory.render_guide(text, inventory.read_chapters(chapters)), "utf-8")
    baseline = set(inventory.find_out_of_sync(guide, chapters))
    assert not any("out of date" in line for line in baseline), baseline
    return Copy(guide, chapters, baseline)


def _new(copy: Copy) -> list[str]:
    """What find_out_of_sync reports for the copy beyond its baseline."""
    found = inventory.find_out_of_sync(copy.guide, copy.chapters)
    return [line for line in found if line not in copy.baseline]


def _edit_markdown(path: Path, old: str, new: str) -> None:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "markdown" and old in c.source]
    assert cells, f"{old!r} not found in {path.name}"
    cells[0].source = cells[0].source.replace(old, new, 1)
    nbformat.write(nb, path)


def test_a_changed_difficulty_puts_the_guide_out_of_sync(copy: Copy) -> None:
    _edit_markdown(
        copy.chapters / "01_scores.ipynb", "The score matrix (easy)", "The score matrix (medium)"
    )
    found = _new(copy)
    assert any("out of date" in line for line in found), found


def test_check_exits_1_on_a_stale_guide(
    copy: Copy, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(inventory, "GUIDE", copy.guide)
    argv = ["--check", "--chapters", str(copy.chapters)]
    assert inventory.main(argv) == (1 if copy.baseline else 0)
    _edit_markdown(
        copy.chapters / "01_scores.ipynb", "The score matrix (easy)", "The score matrix (medium)"
    )
    assert inventory.main(argv) == 1
    assert "out of date" in capsys.readouterr().out


def test_a_new_exercise_puts_the_guide_out_of_sync(copy: Copy) -> None:
    _edit_markdown(
        copy.chapters / "01_scores.ipynb",
        "## Exercises\n",
        "## Exercises\n\n:::{exercise} A new one (easy)\n:label: ex-ch01-new\n"
        ":class: open\nThink.\n:::\n",
    )
    found = _new(copy)
    assert any("out of date" in line for line in found), found


@pytest.mark.parametrize("kind", ["", ":class: auto-checked\n"])  # no class, or one naming no kind
def test_an_exercise_without_a_kind_is_reported(copy: Copy, kind: str) -> None:
    _edit_markdown(
        copy.chapters / "02_softmax.ipynb",
        ":label: ex-ch02-sigmoid\n:class: pen-and-paper\n",
        f":label: ex-ch02-sigmoid\n{kind}",
    )
    found = _new(copy)
    assert any("ex-ch02-sigmoid" in line and "pen-and-paper" in line for line in found), found


def test_a_checked_exercise_marked_pen_and_paper_is_reported(
    copy: Copy,
) -> None:
    _edit_markdown(
        copy.chapters / "02_softmax.ipynb",
        ":label: ex-ch02-stable-softmax\n",
        ":label: ex-ch02-stable-softmax\n:class: pen-and-paper\n",
    )
    found = _new(copy)
    assert any("ex-ch02-stable-softmax" in line and "check_" in line for line in found), found


def test_an_exercise_without_a_label_is_reported(copy: Copy) -> None:
    _edit_markdown(copy.chapters / "01_scores.ipynb", ":label: ex-ch01-cosine\n", "")
    found = _new(copy)
    assert "01_scores.ipynb: exercise 'Cosine similarity (easy)' has no :label:" in found, found


@pytest.mark.parametrize("title", ["Cosine similarity", "Cosine similarity (hard)"])
def test_a_title_without_difficulty_is_reported(copy: Copy, title: str) -> None:
    _edit_markdown(copy.chapters / "01_scores.ipynb", "Cosine similarity (easy)", title)
    found = _new(copy)
    assert any("ex-ch01-cosine" in line and "(easy)" in line for line in found), found


def test_a_new_chapter_without_prerequisites_is_reported(copy: Copy) -> None:
    shutil.copy(copy.chapters / "01_scores.ipynb", copy.chapters / "99_appendix.ipynb")
    found = _new(copy)
    assert any("99_appendix" in line and "course.yml" in line for line in found), found
    assert any("used twice" in line for line in found), found  # its labels repeat chapter 1's
    assert any("out of date" in line for line in found), found


def test_a_hand_edit_of_a_generated_part_is_reported(copy: Copy) -> None:
    text = copy.guide.read_text(encoding="utf-8")
    copy.guide.write_text(text.replace("| easy | pen and paper |", "| harder | pen and paper |", 1))
    found = _new(copy)
    assert any("out of date" in line for line in found), found


def test_missing_markers_are_reported(copy: Copy) -> None:
    text = copy.guide.read_text(encoding="utf-8")
    copy.guide.write_text(text.replace(inventory.END, ""))
    found = _new(copy)
    assert any(inventory.END in line for line in found), found


def test_write_makes_it_in_sync_again(copy: Copy) -> None:
    _edit_markdown(
        copy.chapters / "01_scores.ipynb", "The score matrix (easy)", "The score matrix (medium)"
    )
    text = copy.guide.read_text(encoding="utf-8")
    new = inventory.render_guide(text, inventory.read_chapters(copy.chapters))
    assert "| {ref}`The score matrix <ex-ch01-score-matrix>` | medium |" in new
    assert inventory.read_measured(new) == inventory.read_measured(text)  # timings kept
    copy.guide.write_text(new, encoding="utf-8")
    assert _new(copy) == []


def test_measured_times_are_shown_and_kept() -> None:
    chapters = [inventory.read_chapter(CHAPTERS / "01_scores.ipynb")]
    timing = {"wall": 9.4, "cpu": 6.6, "load": 1.2}
    measured = {"machine": "2 CPU cores", "chapters": {"01_scores": timing}}
    text = inventory.render(chapters, measured)
    assert "| 7 s / 9 s (load 1) |" in text
    assert "needs 7 s of CPU time and ran in 9 s" in text
    assert inventory.read_measured(text) == measured
    assert "not measured yet" in inventory.render(chapters, {})


def test_a_first_reading_skips_collapsed_blocks_but_not_one_shown_as_code() -> None:
    tangent = ":::{admonition} Going deeper\n:class: dropdown\nthree hidden words\n:::"
    assert inventory._first_reading_words(f"Two words.\n\n{tangent}\n\nAnd after.") == 4
    # An example of how to write one, in a code block, is shown open, word for word, even
    # one whose closing fence is left out: the block after it is collapsed still.
    example = "Write it so:\n\n````markdown\n" + tangent + "\n````"
    assert inventory._first_reading_words(example) == len(example.split())
    opening = "Write it so:\n\n````markdown\n" + "\n".join(tangent.splitlines()[:2]) + "\n````"
    text = f"{opening}\n\n{tangent}\n\nAnd after."
    assert inventory._first_reading_words(text) == len(opening.split()) + 2


def test_objectives_are_the_bullets_of_the_admonition_with_that_title_exactly() -> None:
    cells = [
        "```{admonition}\nLearning objectives\n- no title: its body's first line\n```",
        ":::{admonition} Learning objectives of the last chapter\n- another title\n:::",
        "Write it so:\n````markdown\n:::{admonition} Learning objectives\n- an example\n:::\n````",
        ":::{admonition} Learning objectives\n:class: tip\n- the first\n  on two lines\n- two\n"
        "::::\nAfter it: a longer fence closes it, as in MyST.\n:::",
    ]
    assert inventory._objectives(cells) == ["the first on two lines", "two"]
    assert inventory._objectives(cells[:3]) == []


def test_the_title_is_the_first_level_one_heading_outside_code() -> None:
    cells = [
        "Colab.\n```python\n# a comment\n```",
        "## Not it\n#No space\n  # The title #\n# Later",
    ]
    assert inventory.title(cells) == "The title"
    assert inventory.title(cells[:1]) == ""


def test_a_block_is_collapsed_by_the_class_dropdown_and_ends_at_a_fence_as_long() -> None:
    shown = ":::{admonition} Aside\n:class: no-dropdown tip\nthree shown words\n:::"
    assert inventory._first_reading_words(shown) == len(shown.split())
    hidden = ":::{admonition} Going deeper\n:class: tip dropdown\nhidden words\n::::"
    assert inventory._first_reading_words(f"{hidden}\nShown after.\n\n:::{{note}}\n:::") == 4
    # fenced with backticks: its code block's end, not a line of colons in its body, ends it
    ticks = "````{admonition} Deeper\n:class: dropdown\n:::\n:::{note}\nhidden\n:::\n````"
    assert inventory._first_reading_words(f"{ticks}\nShown.") == 1


def test_chapter_text_is_relinked_for_the_guide() -> None:
    # The guide sits at the book's root and has no bibliography of its own.
    text = inventory._relink(
        "rollout {footcite:p}`Abnar2020`, as {footcite:t}`Vaswani2017` did; see {doc}`02_softmax`"
    )
    assert text == "rollout, as Vaswani et al. (2017) did; see {doc}`chapters/02_softmax`"


def test_assignment_sets_name_real_exercises() -> None:
    chapters = [inventory.read_chapter(CHAPTERS / "01_scores.ipynb")]
    sets = [
        ("ok", [("Week", ("01_scores",), ("ex-ch01-cosine",))]),
        ("lost label", [("Week", ("01_scores",), ("ex-ch01-gone",))]),
        ("not written yet", [("Week", ("14_efficient_attention",), ("ex-ch14-x",))]),
    ]
    registry = dataclasses.replace(
        course.load(),
        assignment_sets=tuple(
            course.AssignmentSet(title, "", tuple(course.SetPart(*part) for part in parts))
            for title, parts in sets
        ),
        points={"ex-ch01-cosine": 2, "ex-ch01-lost": 3, "ex-ch01-symmetric": 1},
    )
    found = inventory.problems(chapters, registry)
    assert any("'lost label'" in line and "ex-ch01-gone" in line for line in found), found
    assert any("points" in line and "ex-ch01-lost" in line for line in found), found
    # the grader never uses the points of an exercise it does not check
    assert (
        "course.yml: points: exercise 'ex-ch01-symmetric' is pen and paper, not auto-checked: "
        "the grader gives points to auto-checked exercises only"
    ) in found
    assert not any("not written yet" in line for line in found), found
    assert not any("ex-ch01-cosine" in line for line in found), found
    text = inventory.render_sets(chapters, registry)
    assert "### ok" in text
    assert "{ref}`Cosine similarity <ex-ch01-cosine>`" in text
    assert "not written yet" not in text  # its chapter is not there: left out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--measure", "no-such-chapter.ipynb"], "--measure: no notebook 'no-such-chapter.ipynb'"),
        (["--measure", "--repeat", "0"], "--repeat: must be a whole number >= 1, got '0'"),
        (["--chapters", "no-such-folder"], "--chapters: no folder 'no-such-folder'"),
    ],
)
def test_bad_arguments_are_usage_errors_that_leave_the_guide_alone(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing notebook was 'not measured', then the guide's old figures got today's date."""
    before = GUIDE.read_text(encoding="utf-8")
    with pytest.raises(SystemExit) as exit_:
        inventory.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert GUIDE.read_text(encoding="utf-8") == before


def test_a_measure_that_measured_nothing_keeps_the_guide_and_its_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guide = tmp_path / "instructors.md"
    guide.write_text(GUIDE.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(inventory, "GUIDE", guide)
    monkeypatch.setattr(inventory, "measure", lambda paths, repeat: {})  # every run failed
    assert inventory.main(["--measure", str(CHAPTERS / "01_scores.ipynb")]) == 1
    assert guide.read_text(encoding="utf-8") == GUIDE.read_text(encoding="utf-8")
