"""Read the exercises of a chapter notebook, and run a notebook in a kernel.

One parser for the book's two directives, used by the student edition, the
exercise inventory, the grader and the tests:

- an exercise is a colon-fenced ``{exercise}`` directive of a markdown cell, its
  title as argument and a ``:label:`` option::

      :::{exercise} Stable softmax (medium)
      :label: ex-ch02-stable-softmax
      Write ...
      :::

- its solution is a ``{solution}`` directive whose argument is that label, with a
  longer fence when it holds a code block::

      ::::{solution} ex-ch02-stable-softmax
      :class: dropdown
      ...
      ::::

A directive closes at the first line made only of its fence character, at least
as long as its opening fence, as MyST's colon fence does (even a line inside a
code block of its body). An unclosed directive, one of the two opened with
backticks or tildes (which this parser does not read), or one opened inside the
body of the other or of itself (a solution inside its exercise: the outer block
is read whole, so the student edition would keep the inner one) is a
``ValueError``: a block the parser overlooked would otherwise reach learners
unnoticed. So is one opened in the body of another directive fenced with
backticks or tildes (```` ```{note} ````, say), which this parser reads as a code
block but MyST reads as markdown, unless that directive's body is literal text
(``code-block``, ``math``, ``raw`` and the like, ``_LITERAL_DIRECTIVES``). Other
directives inside a body (a note in a solution) are welcome.

Outside the directives, and inside their bodies, the lines of a fenced code
block are code, not directives, so an example of how to write an exercise, in a
``markdown`` code block, stays in both editions. The fences are CommonMark's:
three or more backticks or tildes, indented up to three spaces past the start of
the content they are in (in a body, past the directive's own indentation; in a
list item, past the item's marker and the spaces after it, ``1. ```python``
or a line indented as far as the item's text), closed by a line of the same
character, at least as long, with no info string, indented the same way. A code
block in a list item also ends where the item does (a line indented less than
its text). A code block never closed is code to the end of the text (or of the
body), as in CommonMark, and a directive line it would hide is a
``ValueError``. A block quote's ``>`` is not read, so an exercise or solution
opened inside a quote (which MyST renders) is a ``ValueError`` too; the quote's
own code blocks are read only to tell an example from a directive, and are not
among ``code_blocks``. ``code_blocks`` gives the code blocks as the parser reads
them, for the tools that read the same markdown (the student edition's leak
check, the exercise inventory).

The checkers an exercise uses are the ``check_*`` calls of the first code cell
after it (before the next exercise). ``run_notebook`` executes a notebook with
nbclient, starting its kernel once more if the first dies at start
(``notebook_client`` sets one up for a caller that runs cells itself). nbformat
and nbclient are imported only when a function needs them, so ``import
attnbook`` needs neither.
"""

from __future__ import annotations

import ast
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "KERNEL_ENV",
    "OPTION_LINE",
    "Block",
    "Exercise",
    "checker_calls",
    "code_blocks",
    "directive_blocks",
    "exercises",
    "kernel_env",
    "notebook_blocks",
    "notebook_client",
    "read_notebook",
    "run_notebook",
    "solutions",
    "strip_solutions",
    "title",
]

DIRECTIVES = ("exercise", "solution")
_OPEN = re.compile(r"^\s*(?P<fence>:{3,})\{(?P<name>exercise|solution)\}[ \t]*(?P<arg>.*?)\s*$")
# The same two written as code fences ("```{solution}", "~~~ {solution}"), which MyST reads as
# directives too, but this parser does not.
_CODE_FENCED_OPEN = re.compile(r"^\s*(`{3,}|~{3,})[ \t]*\{(?P<name>exercise|solution)\}")
# The opening line of a fenced code block (CommonMark): three or more backticks or tildes,
# indented up to three spaces, then an info string (with no backtick after backticks).
_CODE_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# A list item's marker (CommonMark): a bullet ("-", "+", "*") or a number of up to nine digits
# with "." or ")", indented up to three spaces, then spaces or the end of the line.
_LIST_MARKER = re.compile(
    r"^ {0,3}(?P<marker>[-+*]|(?P<number>\d{1,9})[.)])(?P<space> *)(?P<rest>.*)$"
)
# A line that is not a list item although it may start like one ("* * *", "---").
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
# The other lines that start a block, and so end a paragraph: a heading, a quote, a colon fence.
_BLOCK_START = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|>|:{3,})")
# A line of a block quote (CommonMark): up to three spaces, ">", an optional space, its content.
_QUOTE = re.compile(r"^ {0,3}> ?")
# The directive a backtick or tilde fence opens ("```{note}", "~~~ {figure} x.svg"): MyST reads
# the body of most as markdown, as it does a colon fence's.
_FENCED_DIRECTIVE = re.compile(r"[ \t]*\{(?P<name>[^{}\s]+)\}")
# The directives whose body MyST does not read as markdown (code, math, raw text, a table's
# data, a diagram, a list of files, terms or references): a directive line in one is only text,
# as in a code block. Any other (note, tip, admonition, dropdown, figure, card, tab-item, ...)
# is taken to have a markdown body: one unknown here refuses an exercise line in its body
# rather than overlook it.
_LITERAL_DIRECTIVES = frozenset(
    [
        "code",
        "code-block",
        "sourcecode",
        "code-cell",
        "literalinclude",
        "include",
        "math",
        "raw",
        "eval-rst",
        "csv-table",
        "mermaid",
        "graphviz",
        "toctree",
        "glossary",
        "bibliography",
        "footbibliography",
    ]
)
# An option line of a MyST directive, e.g. ":label: ex-softmax" (key, value); used for every
# directive the tools read, exercises and solutions as well as admonitions.
OPTION_LINE = re.compile(r"^\s*:(?P<key>[\w-]+):[ \t]*(?P<value>.*?)\s*$")
_CHECK_CALL = re.compile(r"\b(check_\w+)\s*\(")

# Set in the kernel's environment unless the caller's environment says otherwise: no
# downloads from the Hugging Face hub (chapter 13's model is cached), no progress bars,
# no debugger warning about frozen modules, and the CPU for attnbook.get_device().
KERNEL_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    # where the stored outputs were made: a GPU's tensors print device='cuda:0' (nbval)
    "ATTNBOOK_DEVICE": "cpu",
}

# A kernel that dies before it answers its first request is started once more, as a Jupyter
# server's KernelRestarter does, on new ports: the known cause is another program taking a
# port Jupyter chose for the kernel before the kernel binds it (jupyter_client issues 154 and
# 487). A kernel that dies while running a cell is the notebook's failure, and is not retried.
KERNEL_STARTS = 2
DIED_AT_START = "Kernel died before replying to kernel_info"  # nbclient's RuntimeError


@dataclass(frozen=True)
class Block:
    """One ``{exercise}`` or ``{solution}`` directive of a markdown cell."""

    name: str  # "exercise" or "solution"
    argument: str  # an exercise's title; a solution's exercise label
    options: Mapping[str, str]  # ":label: x" -> {"label": "x"}
    body: str  # the lines after the options, without the closing fence
    text: str  # the whole block, both fences included
    cell: int  # index of its cell in the notebook (0 for a page's text)
    first: int  # line of the opening fence, within the cell (from 0)
    last: int  # line of the closing fence

    @property
    def label(self) -> str:
        """The exercise's label: an exercise's `:label:`, a solution's argument."""
        return self.options.get("label", "") if self.name == "exercise" else self.argument


@dataclass(frozen=True)
class Exercise:
    """An ``{exercise}`` block and the checkers the code cell after it calls."""

    block: Block
    checkers: tuple[str, ...] = field(default=())  # e.g. ("check_softmax",); () if none

    @property
    def label(self) -> str:
        return self.block.label


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _code_fence(line: str) -> str:
    """The fence (three or more backticks or tildes) opening a code block on this line, or ''."""
    match = _CODE_FENCE.match(line)
    if not match or (match["fence"][0] == "`" and "`" in match["info"]):
        return ""
    return match["fence"]


def _closes_code(line: str, fence: str) -> bool:
    """Does the line close a code block opened with `fence`? As CommonMark has it: the same
    character, at least as many, indented up to three spaces, nothing after them but spaces."""
    return re.match(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", line) is not None


def _list_marker(text: str, paragraph: bool) -> re.Match[str] | None:
    """The list item marker that starts `text`, or None. After a paragraph's line
    (`paragraph`) only an item with text, a bullet or the number 1, starts a list
    (CommonMark: another is the paragraph's text)."""
    match = None if _THEMATIC_BREAK.match(text) else _LIST_MARKER.match(text)
    if not match or (match["rest"] and not match["space"]):
        return None
    if paragraph and (not match["rest"] or match["number"] not in (None, "1")):
        return None
    return match


def _list_items(line: str, items: list[int], paragraph: bool) -> tuple[list[int], int | None]:
    """Read `line` with the list items open before it (`items`, the columns where their
    content starts, outermost first) and `paragraph` (the line before is a paragraph's).

    Returns the items the line is in, those it opens included, and the column where its
    own content starts, past their markers; None for a blank line (the items stay open)
    and for a lazy continuation of a paragraph (CommonMark: a line indented less than the
    item's text, that starts no block, continues the item's paragraph).
    """
    if not line.strip():
        return items, None
    indent = len(line) - len(line.lstrip(" "))
    inside = [column for column in items if indent >= column]
    column = inside[-1] if inside else 0
    text = line[column:]
    if len(inside) < len(items) and paragraph:
        starts_block = (
            _code_fence(text)
            or _list_marker(text, False)
            or _THEMATIC_BREAK.match(text)
            or _BLOCK_START.match(text)
        )
        if not starts_block:
            return items, None
    paragraph = paragraph and len(inside) == len(items)
    while match := _list_marker(text, paragraph):
        end = column + match.end("marker")
        # the item's text starts after the spaces, or one space past the marker when there
        # are more than four (its text is then an indented code block) or none
        spaces = len(match["space"])
        column = end + (spaces if match["rest"] and spaces <= 4 else 1)
        inside.append(column)
        text, paragraph = line[column:], False
        if not match["rest"]:
            break
    return inside, column


def _directive_name(line: str) -> str:
    """The directive an exercise or solution line opens ("solution"), however fenced, or ''."""
    match = _OPEN.match(line) or _CODE_FENCED_OPEN.match(line)
    return match["name"] if match else ""


def _next_directive(
    lines: list[str], start: int, stop: int, cell: int, code: list[tuple[int, int]]
) -> int:
    """The index of the first line of `lines[start:stop]` that opens an exercise or solution
    with a colon fence, outside fenced code blocks; `stop` if none does. The code blocks
    passed on the way are added to `code`, as `code_blocks` gives them.

    Raises:
        ValueError: a directive is fenced with backticks or tildes, or follows a code
            block that is never closed (it would be shown as code).
    """
    items: list[int] = []  # the list items open (the columns where their text starts)
    paragraph = False  # the line before is a paragraph's (a lazy continuation may follow)
    empty = False  # the line before opens a list item without text
    quoted = start  # the lines before it are in a block quote already read (or not quoted)
    i = start
    while i < stop:
        if code_fenced := _CODE_FENCED_OPEN.match(lines[i]):
            raise ValueError(
                f"cell {cell}, line {i + 1}: write the directive with a colon fence "
                f"(':::{{{code_fenced['name']}}}'), not backticks or tildes"
            )
        if _OPEN.match(lines[i]):
            return i
        if empty and not lines[i].strip():
            items = items[:-1]  # an item opened without text ends at a blank line
        items, column = _list_items(lines[i], items, paragraph)
        text = "" if column is None else lines[i][column:]
        empty = column is not None and not text.strip()  # an item opened without text
        if column is not None and i >= quoted and _QUOTE.match(text):
            quoted = _refuse_quoted_directive(lines, i, stop, cell, column)
        fence = _code_fence(text)
        if not fence:
            if column is not None:  # not a blank line, nor a lazy continuation
                indent = len(text) - len(text.lstrip(" "))
                paragraph = bool(text.strip()) and (paragraph or indent < 4)
                paragraph = paragraph and not _THEMATIC_BREAK.match(text)
                paragraph = paragraph and not _BLOCK_START.match(text)
            elif not lines[i].strip():
                paragraph = False
            i += 1
            continue
        assert column is not None
        close, ended = i + 1, False
        while close < stop:
            line = lines[close]
            # a line indented less than the list item's text ends the item, and its code block
            if ended := bool(line.strip()) and len(line) - len(line.lstrip(" ")) < column:
                break
            if _closes_code(line[column:], fence):
                break
            close += 1
        code.append((i, close))
        _refuse_hidden_directive(lines, i, close, cell, column)
        if close == stop:  # code to the end of the text, as in CommonMark
            for k in range(i + 1, stop):
                if name := _directive_name(lines[k]):
                    raise ValueError(
                        f"cell {cell}, line {i + 1}: the code block opened with {fence} is "
                        f"never closed, so the {{{name}}} directive of line {k + 1} is only "
                        "code; close the code block with the same fence"
                    )
        i = close if ended else close + 1  # the line that ends a list item is read again
        paragraph = False
    return stop


def _refuse_quoted_directive(
    lines: list[str], first: int, stop: int, cell: int, column: int
) -> int:
    """Raise a ValueError if the block quote whose first line is `first` (its ``>`` at
    `column`, past a list item's marker) opens an exercise or solution, in its own markdown
    (its code blocks and nested quotes read as in the text outside); return the line after
    its last ``>`` line. MyST renders a directive in a quote, but the tools read neither the
    quote's ``>`` nor a block written inside it, so the student edition would keep it."""
    last = first
    while last < stop and _QUOTE.match(lines[last][column:]):
        last += 1
    inside = [_QUOTE.sub("", line[column:], count=1) for line in lines[first:last]]
    body = lines[:first] + inside + lines[last:]  # the same line numbers
    if (inner := _next_directive(body, first, last, cell, [])) < last:
        name = _directive_name(body[inner])
        raise ValueError(
            f"cell {cell}, line {inner + 1}: a {{{name}}} directive is opened inside a block "
            f"quote ('>'), where the tools would overlook it; open the {{{name}}} outside "
            "the quote"
        )
    return last


def _refuse_hidden_directive(
    lines: list[str], first: int, close: int, cell: int, column: int = 0
) -> None:
    """Raise a ValueError if the backtick or tilde fence of line `first` (from its
    `column`, past a list item's marker), closed on line `close` (or open to the end),
    opens a MyST directive whose body is markdown and that body opens an exercise or
    solution: the parser reads that span as code, as `code_blocks` gives it, and would
    overlook it."""
    text = lines[first][column:]
    info = _CODE_FENCE.match(text)["info"]  # type: ignore[index]
    outer = _FENCED_DIRECTIVE.match(info)
    if not outer or outer["name"] in _LITERAL_DIRECTIVES:
        return
    indent = column + len(text) - len(text.lstrip(" "))
    body = lines[: first + 1] + [_dedent(line, indent) for line in lines[first + 1 : close]]
    if (inner := _next_directive(body, first + 1, close, cell, [])) < close:
        nested, name = _directive_name(body[inner]), outer["name"]
        raise ValueError(
            f"cell {cell}, line {inner + 1}: a {{{nested}}} directive is opened inside the "
            f"{{{name}}} directive of line {first + 1}, which is fenced with backticks or "
            f"tildes, where the tools would overlook it; open the {{{nested}}} outside the "
            f"{{{name}}}, or fence the {{{name}}} with colons (':::{{{name}}}')"
        )


def _dedent(line: str, indent: int) -> str:
    """The line without up to `indent` leading spaces."""
    return line[min(indent, len(line) - len(line.lstrip(" "))) :]


def _read(source: str, cell: int) -> tuple[list[Block], list[tuple[int, int]]]:
    """The directive blocks of one markdown text, and its code blocks (`code_blocks`)."""
    lines = source.splitlines()
    blocks: list[Block] = []
    code: list[tuple[int, int]] = []
    i = _next_directive(lines, 0, len(lines), cell, code)
    while i < len(lines):
        match = _OPEN.match(lines[i])
        assert match  # _next_directive stops at an opening line only
        fence, name = match["fence"], match["name"]
        options, j = {}, i + 1
        while j < len(lines) and (option := OPTION_LINE.match(lines[j])):
            options[option["key"]] = option["value"]
            j += 1
        end = j
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        if end == len(lines):
            raise ValueError(
                f"cell {cell}, line {i + 1}: the {{{name}}} directive opened with {fence} is "
                "never closed; close it with the same fence"
            )
        # Its body, which MyST reads as markdown of its own, without the directive's indentation.
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        body = lines[:j] + [_dedent(line, indent) for line in lines[j:end]]
        if (inner := _next_directive(body, j, end, cell, code)) < end:
            nested = _directive_name(lines[inner])
            raise ValueError(
                f"cell {cell}, line {inner + 1}: a {{{nested}}} directive is opened inside the "
                f"{{{name}}} directive of line {i + 1}, where the tools would overlook it; "
                f"close the {{{name}}} first, then open the {{{nested}}} after it"
            )
        blocks.append(
            Block(
                name=name,
                argument=match["arg"],
                options=options,
                body="\n".join(lines[j:end]),
                text="\n".join(lines[i : end + 1]),
                cell=cell,
                first=i,
                last=end,
            )
        )
        i = _next_directive(lines, end + 1, len(lines), cell, code)
    return blocks, code


def directive_blocks(source: str, cell: int = 0) -> list[Block]:
    """Every exercise and solution directive of one markdown text, in order.

    Lines of a fenced code block (an example of how to write an exercise, say) are
    code, not directives. An exercise or solution opened inside the body of another,
    or of a directive fenced with backticks or tildes whose body is markdown (a
    ```` ```{note} ````), or inside a block quote (``>``), is refused, not skipped.

    Args:
        source: a markdown cell's source or a markdown page.
        cell: the cell's index, recorded in each block and named in errors.

    Raises:
        ValueError: a directive is never closed, is fenced with backticks or
            tildes, is opened inside another, inside a backtick- or tilde-fenced
            directive with a markdown body or inside a block quote, or follows a
            code block that is never closed.
    """
    return _read(source, cell)[0]


# A level-1 heading (CommonMark's ATX heading: up to three spaces, "#", a space or tab, the
# text, an optional closing run of "#").
_TITLE = re.compile(r"^ {0,3}#[ \t]+(?P<title>.*?)(?:[ \t]+#+)?[ \t]*$")


def title(markdown: list[str]) -> str:
    """A notebook's title: the text of the first level-1 heading of its markdown cells
    (``markdown``, their sources in order), outside code blocks (a ``# comment`` in a code
    block is code); ``""`` if there is none. The inventory reads a chapter's title with it,
    and the grader a submission's."""
    for source in markdown:
        code = {i for first, last in code_blocks(source) for i in range(first + 1, last)}
        for i, line in enumerate(source.splitlines()):
            if i not in code and (match := _TITLE.match(line)) and match["title"]:
                return match["title"]
    return ""


def code_blocks(source: str, cell: int = 0) -> list[tuple[int, int]]:
    """Every fenced code block of one markdown text as ``directive_blocks`` reads it, in order.

    Each is a pair of line indices (from 0): its opening fence, and its closing
    fence, or, for a block never closed, the line just after the text (or after
    the body of the exercise or solution it is in), or, for one in a list item
    that ends first, the line that ends the item (not a fence). Its code is the
    lines between the two. The blocks in the bodies of exercises and solutions
    are included, found as the parser finds them (without the directive's
    indentation). A tool that reads the same markdown skips these lines as the
    parser does: a ``{solution}`` shown in a ``markdown`` code block is an
    example, not a solution. A backtick or tilde fence that opens a MyST directive
    (a ``{figure}``, say) is a code block here too, as it is to the parser (which
    refuses an exercise or solution in its body unless the body is literal text).

    Args and errors are those of ``directive_blocks``.
    """
    return _read(source, cell)[1]


def strip_solutions(source: str, cell: int = 0) -> tuple[str, list[Block]]:
    """The markdown text without its solution blocks, and those blocks.

    Each block's lines are cut out, the rest kept as it is (line endings included).
    `cell` and the errors are as in `directive_blocks`.
    """
    lines = source.splitlines(keepends=True)
    removed = [block for block in directive_blocks(source, cell) if block.name == "solution"]
    for block in reversed(removed):
        del lines[block.first : block.last + 1]
    return "".join(lines), removed


def read_notebook(path_or_nb: str | Path | Any) -> Any:
    """A notebook as nbformat reads it (version 4); a notebook object is returned as it is."""
    if isinstance(path_or_nb, str | Path):
        import nbformat

        return nbformat.read(path_or_nb, as_version=4)
    return path_or_nb


def notebook_blocks(path_or_nb: str | Path | Any) -> list[Block]:
    """Every exercise and solution directive of a notebook's markdown cells, in order."""
    nb = read_notebook(path_or_nb)
    return [
        block
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        for block in directive_blocks(cell.source, index)
    ]


def solutions(path_or_nb: str | Path | Any) -> list[Block]:
    """Every ``{solution}`` block of a notebook, in order."""
    return [block for block in notebook_blocks(path_or_nb) if block.name == "solution"]


def checker_calls(source: str) -> list[str]:
    """The checkers a code cell calls, in order of first call, each once: ``["check_softmax"]``.

    The cell is parsed when it is valid Python, so a checker named only in a
    comment, a string or an import does not count; a cell that does not parse
    (a syntax error, an IPython ``%magic``) is scanned as text, comments left out.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
        return list(dict.fromkeys(_CHECK_CALL.findall(code)))
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name.startswith("check_") and len(name) > len("check_"):
                calls.append((node.lineno, node.col_offset, name))
    return list(dict.fromkeys(name for *_, name in sorted(calls)))


def exercises(path_or_nb: str | Path | Any) -> list[Exercise]:
    """Every ``{exercise}`` of a notebook, with the checkers of the code cell that follows it.

    That cell is the first code cell after the exercise, provided no other
    exercise comes first; an exercise without one has no checkers.
    """
    nb = read_notebook(path_or_nb)
    events: list[Block | str] = []  # exercise blocks and code cell sources, in order
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            events += [b for b in directive_blocks(cell.source, index) if b.name == "exercise"]
        elif cell.cell_type == "code":
            events.append(cell.source)
    found = []
    for i, event in enumerate(events):
        if isinstance(event, Block):
            after = events[i + 1] if i + 1 < len(events) else None
            calls = checker_calls(after) if isinstance(after, str) else []
            found.append(Exercise(event, tuple(calls)))
    return found


def notebook_client(
    nb: Any,
    *,
    kernel_name: str = "python3",
    timeout: float = 600,
    cwd: str | Path | None = None,
    client_class: type | None = None,
    **client_options: Any,
) -> Any:
    """An ``nbclient.NotebookClient`` for `nb` with the book's settings, not started.

    For a caller that runs cells one by one (``client.setup_kernel()``, then
    ``client.execute_cell``); ``run_notebook`` runs them all.

    Args:
        nb: a notebook as nbformat reads it; executing it fills its outputs.
        kernel_name: the Jupyter kernel to start.
        timeout: seconds each cell may run (nbclient's CellTimeoutError after it).
        cwd: the kernel's working folder (default: the current one).
        client_class: a subclass of ``NotebookClient`` to make (default: that class).
        **client_options: more options of ``NotebookClient`` (``km``,
            ``allow_errors``, ``on_cell_start``, ...); ``record_timing`` is off
            unless given.

    Raises:
        ValueError: ``timeout`` is not positive.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    from nbclient import NotebookClient

    client_options.setdefault("record_timing", False)
    return (client_class or NotebookClient)(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(Path.cwd() if cwd is None else cwd)}},
        **client_options,
    )


def kernel_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a kernel: `env` (default: this process's), plus KERNEL_ENV where unset."""
    return {**KERNEL_ENV, **(os.environ if env is None else env)}


def run_notebook(
    path_or_nb: str | Path | Any,
    *,
    kernel_name: str = "python3",
    timeout: float = 600,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    log: TextIO | None = None,
    **client_options: Any,
) -> Any:
    """Execute a notebook top to bottom in a fresh kernel; return it with its outputs.

    A notebook object is executed in place; a path is read, and not written back.

    Args:
        path_or_nb: a notebook file, or a notebook as nbformat reads it.
        kernel_name: the Jupyter kernel to start.
        timeout: seconds each cell may run.
        cwd: the kernel's working folder: by default the notebook's folder, or
            the current one for a notebook object.
        env: the kernel's environment, completed by ``kernel_env``.
        log: where the kernel process's own stdout and stderr go (default: here).
        **client_options: passed to ``notebook_client``.

    A kernel that dies before its first reply is started once more, with a
    ``RuntimeWarning`` (``KERNEL_STARTS``), unless a kernel manager is given
    (``km=``): that one's kernel is the caller's to restart.

    Raises:
        ValueError: ``timeout`` is not positive.
        nbclient.exceptions.CellExecutionError: a cell raised (unless
            ``allow_errors=True`` is given); CellTimeoutError, DeadKernelError.
    """
    if cwd is None and isinstance(path_or_nb, str | Path):
        cwd = Path(path_or_nb).resolve().parent
    nb = read_notebook(path_or_nb)
    streams = {} if log is None else {"stdout": log, "stderr": log}
    # A kernel manager given (km=) is the caller's: its dead kernel is not replaced here.
    starts = 1 if client_options.get("km") is not None else KERNEL_STARTS
    for start in range(1, starts + 1):
        client = notebook_client(
            nb, kernel_name=kernel_name, timeout=timeout, cwd=cwd, **client_options
        )
        if client.km is None:
            client.km = client.create_kernel_manager()
        try:  # started here, before execute(): a kernel that dies now has run no cell
            client.start_new_kernel(env=kernel_env(env), **streams)
            client.start_new_kernel_client()
        except RuntimeError as error:
            if not str(error).startswith(DIED_AT_START) or start == starts:
                raise
            warnings.warn(
                f"{error}: a new kernel was started once more (the dead one's stderr may say why)",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        # cleanup_kc: shut the kernel down afterwards, even one whose manager was given (km=).
        client.execute(cleanup_kc=True)
        return nb
    raise AssertionError("unreachable")  # pragma: no cover
