"""Read the course registry, `course.yml`: chapters, prerequisites, assignment sets, points.

`load()` reads and checks it: a missing field, a field it does not know, a chapter
named somewhere that the registry does not list, or a wrong type is a `CourseError`
(a `ValueError`) that says where. Whether it agrees with `_toc.yml` and with the
chapters on disk is `tests/book/test_course.py`'s job. The format is described at the
top of `course.yml`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "course.yml"
AUTO_CHECKED = "auto-checked"  # `exercises:` of a part: every auto-checked exercise it reads


class CourseError(ValueError):
    """`course.yml` is not what the tools expect."""


@dataclass(frozen=True)
class Chapter:
    file: str  # as _toc.yml names it: "chapters/01_scores"
    title: str
    part: str
    map_label: str
    requires: tuple[str, ...]  # stems of the earlier chapters it builds on
    background: str  # the maths and Python it assumes
    colab_extra: str | None = None

    @property
    def stem(self) -> str:
        return self.file.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class SetPart:
    title: str
    chapters: tuple[str, ...]  # stems; () reads every chapter
    exercises: tuple[str, ...] | None  # labels; None: every auto-checked exercise


@dataclass(frozen=True)
class AssignmentSet:
    title: str
    purpose: str
    parts: tuple[SetPart, ...]


@dataclass(frozen=True)
class Course:
    chapters: tuple[Chapter, ...]
    assignment_sets: tuple[AssignmentSet, ...]
    default_points: float = 1
    points: Mapping[str, float] = field(default_factory=dict)  # label -> points

    @property
    def stems(self) -> list[str]:
        return [chapter.stem for chapter in self.chapters]

    def chapter(self, stem: str) -> Chapter:
        for chapter in self.chapters:
            if chapter.stem == stem:
                return chapter
        raise KeyError(stem)

    @property
    def colab_extras(self) -> dict[str, str]:
        """Chapter stem -> the extra its Colab cell installs, for the chapters that need one."""
        return {c.stem: c.colab_extra for c in self.chapters if c.colab_extra}

    @property
    def parts(self) -> list[tuple[str, list[Chapter]]]:
        """(part, its chapters) in reading order."""
        out: list[tuple[str, list[Chapter]]] = []
        for chapter in self.chapters:
            if not out or out[-1][0] != chapter.part:
                out.append((chapter.part, []))
            out[-1][1].append(chapter)
        return out

    def points_for(self, label: str) -> float:
        """What the exercise labelled `label` is worth."""
        return self.points.get(label, self.default_points)


def _fields(
    node: Any, where: str, required: set[str], optional: frozenset[str] = frozenset()
) -> dict:
    if not isinstance(node, dict):
        raise CourseError(f"{where}: expected a mapping with {sorted(required)}, got {node!r}")
    missing = required - node.keys()
    if missing:
        raise CourseError(f"{where}: missing {', '.join(sorted(missing))}")
    unknown = node.keys() - required - optional
    if unknown:
        raise CourseError(
            f"{where}: unknown field {', '.join(sorted(map(str, unknown)))} "
            f"(known: {', '.join(sorted(required | optional))})"
        )
    return node


def _text(node: Any, where: str) -> str:
    if not isinstance(node, str) or not node.strip():
        raise CourseError(f"{where}: expected a non-empty string, got {node!r}")
    return node


def _names(node: Any, where: str) -> tuple[str, ...]:
    if node is None:
        return ()
    if not isinstance(node, list) or not all(isinstance(x, str) and x for x in node):
        raise CourseError(f"{where}: expected a list of names, got {node!r}")
    return tuple(node)


def _number(node: Any, where: str) -> float:
    if isinstance(node, bool) or not isinstance(node, int | float) or node < 0:
        raise CourseError(f"{where}: expected a number >= 0, got {node!r}")
    return node


def parse(data: Any, source: str = "course.yml") -> Course:
    """Check the registry's data (as `yaml.safe_load` gives it) and return it as a `Course`."""
    data = _fields(data, source, {"chapters", "assignment_sets", "points"})
    if not isinstance(data["chapters"], list) or not data["chapters"]:
        raise CourseError(f"{source}: chapters: expected a non-empty list")
    chapters = []
    for i, node in enumerate(data["chapters"]):
        where = f"{source}: chapters[{i}]"
        if isinstance(node, dict) and isinstance(node.get("file"), str):
            where = f"{source}: chapter {node['file']!r}"
        node = _fields(
            node, where, {"file", "title", "part", "map_label", "prerequisites"}, {"colab_extra"}
        )
        where = f"{source}: chapter {node['file']!r}"
        needs = _fields(
            node["prerequisites"], f"{where}: prerequisites", {"chapters", "background"}
        )
        extra = node.get("colab_extra")
        chapters.append(
            Chapter(
                file=_text(node["file"], f"{where}: file"),
                title=_text(node["title"], f"{where}: title"),
                part=_text(node["part"], f"{where}: part"),
                map_label=_text(node["map_label"], f"{where}: map_label"),
                requires=_names(needs["chapters"], f"{where}: prerequisites: chapters"),
                background=_text(needs["background"], f"{where}: prerequisites: background"),
                colab_extra=None if extra is None else _text(extra, f"{where}: colab_extra"),
            )
        )
    stems = [c.stem for c in chapters]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise CourseError(f"{source}: chapters listed twice: {', '.join(twice)}")
    for chapter in chapters:
        earlier = stems[: stems.index(chapter.stem)]
        for stem in chapter.requires:
            if stem not in earlier:
                raise CourseError(
                    f"{source}: chapter {chapter.file!r}: prerequisite {stem!r} is not an "
                    f"earlier chapter of the registry"
                )

    if not isinstance(data["assignment_sets"], list):
        raise CourseError(f"{source}: assignment_sets: expected a list")
    sets = []
    for i, node in enumerate(data["assignment_sets"]):
        node = _fields(node, f"{source}: assignment_sets[{i}]", {"title", "purpose", "parts"})
        where = f"{source}: assignment set {node['title']!r}"
        if not isinstance(node["parts"], list) or not node["parts"]:
            raise CourseError(f"{where}: parts: expected a non-empty list")
        parts = []
        for j, part in enumerate(node["parts"]):
            part = _fields(part, f"{where}: parts[{j}]", {"title", "exercises"}, {"chapters"})
            read = _names(part.get("chapters"), f"{where}: {part['title']!r}: chapters")
            unknown = [stem for stem in read if stem not in stems]
            if unknown:
                raise CourseError(
                    f"{where}: part {part['title']!r} reads {', '.join(unknown)}, "
                    "not a chapter of the registry"
                )
            chosen = part["exercises"]
            parts.append(
                SetPart(
                    title=_text(part["title"], f"{where}: parts[{j}]: title"),
                    chapters=read,
                    exercises=None
                    if chosen == AUTO_CHECKED
                    else _names(chosen, f"{where}: {part['title']!r}: exercises"),
                )
            )
        sets.append(
            AssignmentSet(
                title=_text(node["title"], f"{where}: title"),
                purpose=_text(node["purpose"], f"{where}: purpose"),
                parts=tuple(parts),
            )
        )

    points = _fields(data["points"], f"{source}: points", {"default"}, {"exercises"})
    overrides = points.get("exercises") or {}
    if not isinstance(overrides, dict):
        raise CourseError(f"{source}: points: exercises: expected label: points pairs")
    return Course(
        chapters=tuple(chapters),
        assignment_sets=tuple(sets),
        default_points=_number(points["default"], f"{source}: points: default"),
        points={
            str(label): _number(value, f"{source}: points: {label}")
            for label, value in overrides.items()
        },
    )


def load(path: Path = REGISTRY) -> Course:
    """Read and check the registry at `path` (`course.yml` next to `_toc.yml`)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise CourseError(f"{Path(path).name}: not valid YAML: {error}") from None
    return parse(data, Path(path).name)
