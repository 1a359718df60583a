"""The course registry (`course.yml`, read by `tools/course.py`) agrees with the book.

Its chapters are the notebooks of chapters/ and the chapters of `_toc.yml`, in the same
order and parts, with the titles the notebooks give themselves; and a registry with a
mistake in it (a field missing or misspelt, a chapter named that it does not list, a
negative number of points) is refused with a message that says where.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from attnbook.exercises import grade
from tools import course
from tools import exercise_inventory as inventory

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
REGISTRY = course.load()


def _toc_parts() -> list[tuple[str, list[str]]]:
    """(caption, chapter files) of each part of `_toc.yml` that holds chapters/."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    parts = []
    for part in toc["parts"]:
        files = [c["file"] for c in part["chapters"] if c["file"].startswith("chapters/")]
        if files:
            parts.append((part["caption"], files))
    return parts


def test_the_registry_lists_the_chapters_of_the_toc_in_order_and_parts() -> None:
    registry = [(part, [c.file for c in chapters]) for part, chapters in REGISTRY.parts]
    assert registry == _toc_parts()


def test_the_registry_lists_the_chapters_on_disk() -> None:
    assert len(CHAPTERS) == 14
    assert REGISTRY.stems == [path.stem for path in CHAPTERS]


def test_titles_are_the_notebooks_headings() -> None:
    for chapter in REGISTRY.chapters:
        nb = nbformat.read(ROOT / f"{chapter.file}.ipynb", as_version=4)
        markdown = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        heading = re.search(r"^# (.+)$", markdown, re.M)
        assert heading, chapter.file
        assert chapter.title == heading[1].strip(), chapter.file


def test_the_registry_holds_what_the_tools_read() -> None:
    assert REGISTRY.colab_extras == {
        "11_language_model": "pretrained",
        "12_translation": "pretrained",
        "13_inside_attention": "pretrained",
    }
    assert REGISTRY.chapter("02_softmax").requires == ("01_scores",)
    assert [s.title for s in REGISTRY.assignment_sets][-1] == "Every auto-checked exercise"
    assert REGISTRY.assignment_sets[-1].parts[0].exercises is None  # auto-checked: all of them
    assert REGISTRY.points_for("ex-ch01-cosine") == REGISTRY.default_points == 1


def _data() -> dict:
    return copy.deepcopy(yaml.safe_load((ROOT / "course.yml").read_text(encoding="utf-8")))


def _broken(change) -> dict:
    data = _data()
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["chapters"][0].pop("title"), r"chapter 'chapters/01_scores': missing title"),
        (lambda d: d["chapters"][0].update(titel="x"), r"unknown field titel"),
        (lambda d: d.pop("points"), r"missing points"),
        (
            lambda d: d["chapters"][1]["prerequisites"].update(chapters=["01_score"]),
            r"prerequisite '01_score' is not an earlier chapter",
        ),
        (
            lambda d: d["chapters"][0]["prerequisites"].update(chapters=["02_softmax"]),
            r"prerequisite '02_softmax' is not an earlier chapter",
        ),
        (
            lambda d: d["assignment_sets"][0]["parts"][0]["chapters"].append("13_nope"),
            r"reads 13_nope, not a chapter of the registry",
        ),
        (lambda d: d["assignment_sets"][0]["parts"][0].update(exercises="all"), r"list of names"),
        (lambda d: d["assignment_sets"][0].update(parts=[]), r"parts: expected a non-empty list"),
        (lambda d: d["chapters"].append(d["chapters"][0]), r"listed twice: 01_scores"),
        (
            lambda d: d["chapters"][1]["prerequisites"].update(chapters=["02_softmax"]),
            r"prerequisite '02_softmax' is not an earlier chapter",
        ),
        (lambda d: d["points"].update(default=-1), r"points: default: expected a number >= 0"),
        (lambda d: d["points"].update(default=True), r"points: default: expected a number >= 0"),
        (lambda d: d["points"].update(exercises={"ex-a": "two"}), r"points: ex-a"),
        (lambda d: d["chapters"][2].update(map_label=""), r"map_label: expected a non-empty"),
    ],
)
def test_a_mistake_in_the_registry_is_named(change, message: str) -> None:
    with pytest.raises(course.CourseError, match=message):
        course.parse(_broken(change))


def test_points_can_be_set_per_exercise(tmp_path: Path) -> None:
    data = _data()
    data["points"] = {"default": 2, "exercises": {"ex-ch10-fails": 5}}
    path = tmp_path / "course.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    registry = course.load(path)
    assert registry.points_for("ex-ch10-fails") == 5
    assert registry.points_for("ex-ch01-cosine") == 2


def test_invalid_yaml_is_named(tmp_path: Path) -> None:
    path = tmp_path / "course.yml"
    path.write_text("chapters: [\n", encoding="utf-8")
    with pytest.raises(course.CourseError, match=r"course\.yml: not valid YAML"):
        course.load(path)


def test_the_grader_reads_every_assignment_set_as_the_instructor_guide_does() -> None:
    """`python -m attnbook.grade --set` reads course.yml in the package (the grader runs where
    this repository is not); the guide's tables read it with tools/course.py and the chapters.
    For every set and part, the two must name the same exercises, each on the same side."""
    kinds = {ex.label: ex.kind for c in inventory.read_chapters() for ex in c.exercises}
    by_stem = {c.stem: c for c in inventory.read_chapters()}
    for assignment_set in REGISTRY.assignment_sets:
        for part in assignment_set.parts:
            if part.exercises is None:
                stems = part.chapters or tuple(by_stem)
                labels = [ex.label for s in stems for ex in by_stem[s].exercises]
                labels = [label for label in labels if kinds[label] == "auto-checked"]
            else:
                labels = list(part.exercises)
            graded, by_hand = grade.load_assignment_set(
                ROOT / "course.yml", assignment_set.title, part.title
            )
            where = f"{assignment_set.title} / {part.title}"
            assert graded == {x for x in labels if kinds[x] == "auto-checked"}, where
            assert by_hand == tuple(x for x in labels if kinds[x] != "auto-checked"), where
