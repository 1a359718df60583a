"""The one notebook-directive parser (`attnbook.exercises.notebooks`, which
`tools.notebooks` re-exports): what it reads in small texts, what it refuses, and exactly what it
finds in the book, so that a parser that stopped matching fails here rather than letting
the student edition, the inventory or the solution tests pass on nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from attnbook.exercises import notebooks
from attnbook.exercises.notebooks import checker_calls, directive_blocks, exercises, solutions

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))

# What the book holds today: solutions per chapter (one per exercise), and the checkers of
# every auto-checked exercise. A new exercise or checker updates this table.
SOLUTIONS = {
    "01_scores": 5,
    "02_softmax": 6,
    "03_soft_lookup": 5,
    "04_scaled_dot_product_attention": 5,
    "05_qkv_projections": 4,
    "06_masking": 7,
    "07_multi_head_attention": 6,
    "08_positional_encoding": 5,
    "09_transformer_block": 5,
    "10_training": 5,
    "11_language_model": 3,
    "12_translation": 3,
    "13_inside_attention": 4,
    "14_efficient_attention": 5,
}
CHECKERS = {
    "ex-ch01-score-matrix": ("check_score_matrix",),
    "ex-ch01-cosine": ("check_cosine_similarity",),
    "ex-ch02-stable-softmax": ("check_softmax",),
    "ex-ch02-temperature": ("check_softmax_temperature",),
    "ex-ch03-soft-lookup": ("check_soft_lookup",),
    "ex-ch03-hard-lookup": ("check_hard_lookup",),
    "ex-ch04-sdpa": ("check_scaled_dot_product_attention",),
    "ex-ch05-self-attention": ("check_self_attention",),
    "ex-ch05-cross-attention": ("check_cross_attention",),
    "ex-ch06-causal-mask": ("check_causal_mask",),
    "ex-ch06-padding-mask": ("check_padding_mask",),
    "ex-ch06-masked-attention": ("check_masked_attention",),
    "ex-ch06-masked-softmax": ("check_masked_softmax",),
    "ex-ch07-split-heads": ("check_split_heads",),
    "ex-ch07-merge-heads": ("check_merge_heads",),
    "ex-ch07-mha": ("check_multi_head_attention",),
    "ex-ch08-sinusoidal": ("check_sinusoidal_positional_encoding",),
    "ex-ch08-rope": ("check_apply_rope",),
    "ex-ch09-ffn": ("check_feed_forward",),
    "ex-ch09-pre-ln": ("check_pre_ln_block",),
    "ex-ch09-count": ("check_gpt_num_parameters",),
    "ex-ch10-lr": ("check_lr_schedule",),
    "ex-ch10-answer-loss": ("check_answer_loss",),
    "ex-ch11-rmsnorm": ("check_rms_norm",),
    "ex-ch11-bpe-merge": ("check_bpe_merge",),
    "ex-ch12-additive-step": ("check_additive_step",),
    "ex-ch12-beam-step": ("check_beam_step",),
    "ex-ch13-entropy": ("check_head_entropy",),
    "ex-ch13-rollout": ("check_attention_rollout",),
    "ex-ch14-online-softmax": ("check_online_softmax_update",),
    "ex-ch14-window": ("check_sliding_window_mask",),
    "ex-ch14-kv-memory": ("check_kv_cache_bytes",),
}


def test_the_parser_finds_every_solution_of_the_book() -> None:
    found = {path.stem: len(solutions(path)) for path in CHAPTERS}
    assert found == SOLUTIONS
    assert sum(found.values()) == 68


def test_every_exercise_has_one_solution_with_its_label() -> None:
    for path in CHAPTERS:
        labels = [exercise.label for exercise in exercises(path)]
        assert labels, path.name
        assert all(labels), path.name
        assert [block.label for block in solutions(path)] == labels, path.name


def test_the_parser_finds_every_checker_call_of_the_book() -> None:
    found = {e.label: e.checkers for path in CHAPTERS for e in exercises(path) if e.checkers}
    assert found == CHECKERS
    n_exercises = sum(len(exercises(path)) for path in CHAPTERS)
    assert n_exercises == 68


STUB_LINE = "raise NotImplementedError  # replace this line with your code"


def test_every_stub_says_which_line_to_replace_in_the_same_words() -> None:
    """The student edition's stubs read alike (`tools/make_student.py` describes them so):
    one `raise NotImplementedError` per stub, with the same comment."""
    stubs = []
    for path in CHAPTERS:
        for cell in nbformat.read(path, as_version=4).cells:
            raises = [
                line.strip()
                for line in cell.source.splitlines()
                if line.strip().startswith("raise NotImplementedError")
            ]
            if cell.cell_type == "code" and raises:
                assert raises == [STUB_LINE], f"{path.name}: {raises}"
                stubs.append(path.stem)
    assert len(stubs) == len(CHECKERS), stubs


def test_a_block_has_its_argument_options_body_and_place() -> None:
    text = (
        "Intro.\n\n:::{exercise} Add (easy)\n:label: ex-add\n:class: open\nWrite it.\n:::\n\n"
        "::::{solution} ex-add\n:class: dropdown\nProse.\n:::{note}\nnested\n:::\n::::\nAfter."
    )
    exercise, solution = directive_blocks(text, cell=4)
    assert exercise.name == "exercise"
    assert exercise.argument == "Add (easy)"
    assert dict(exercise.options) == {"label": "ex-add", "class": "open"}
    assert exercise.label == "ex-add"
    assert exercise.body == "Write it."
    assert (exercise.cell, exercise.first, exercise.last) == (4, 2, 6)
    assert solution.label == "ex-add"  # a solution is labelled by its exercise
    assert solution.body == "Prose.\n:::{note}\nnested\n:::"  # a shorter fence does not close it
    assert solution.text.startswith("::::{solution}")
    assert solution.text.endswith("::::")
    kept, removed = notebooks.strip_solutions(text + "\n", cell=4)
    assert removed == [solution]
    assert kept == text.split("::::{solution}")[0] + "After.\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (":::{exercise} Add\n:label: ex-add\nnever closed", "never closed"),
        ("::::{solution} ex-add\n:::\nclosed by a shorter fence only", "never closed"),
        ("```{solution} ex-add\nbackticks\n```", "colon fence"),
        ("````{exercise} Add\n````", "colon fence"),
        # MyST reads a directive in a code fence of tildes, or after a space, as well
        ("~~~{solution} ex-add\ntildes\n~~~", "not backticks or tildes"),
        ("``` {exercise} Add\n```", "colon fence"),
    ],
)
def test_a_broken_directive_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        directive_blocks(text)


def test_other_directives_and_code_are_not_blocks() -> None:
    assert (
        directive_blocks(
            ":::{note}\n:::\n:::{hint} Hint\n:::\n```python\nx = 1\n```\n{solution} in prose"
        )
        == []
    )


def test_every_solution_of_a_cell_is_cut_out_however_it_is_written() -> None:
    text = (
        "Intro.\n"
        "- In a list item:\n"
        "  :::{solution} ex-one\n"
        "  SECRET indented\n"
        "  :::\n"
        "Between.\n"
        ":::{solution}\n"
        "SECRET without an argument\n"
        ":::\n"
        "::::{solution} ex-three\n"
        "SECRET closed by a longer fence\n"
        ":::::\n"
        "After.\n"
    )
    kept, removed = notebooks.strip_solutions(text)
    assert [block.argument for block in removed] == ["ex-one", "", "ex-three"]
    assert "SECRET" not in kept
    assert "{solution}" not in kept
    assert kept == "Intro.\n- In a list item:\nBetween.\nAfter.\n"


def test_a_directive_shown_in_a_fenced_code_block_is_code() -> None:
    """An author's example of how to write an exercise, in a code block, is neither read
    nor cut out: the block ends at a fence of its character, at least as long, that has
    no info string (CommonMark), and may be indented up to three spaces."""
    text = (
        "Write an exercise so:\n"
        "```markdown\n"
        ":::{exercise} Title (easy)\n"  # an opening line alone: no unclosed directive
        ":label: ex-example\n"
        "```\n"
        "~~~\n"
        ":::{solution} ex-tilde\n"
        ":::\n"
        "~~~\n"
        "   ````md\n"
        "```\n"  # shorter: code inside the example
        ":::{solution} ex-shorter\n"
        ":::\n"
        "```` python\n"  # an info string: no closing fence
        ":::{solution} ex-info\n"
        ":::\n"
        "~~~~\n"  # another character
        ":::{solution} ex-other\n"
        ":::\n"
        "  `````  \n"
        ":::{solution} ex-real\n"
        "SECRET\n"
        ":::\n"
    )
    kept, removed = notebooks.strip_solutions(text)
    assert [(block.label, block.first, block.last) for block in removed] == [("ex-real", 20, 22)]
    assert kept == text.split(":::{solution} ex-real")[0]
    # the code blocks as the parser read them, for the tools that read the same markdown
    assert notebooks.code_blocks(text) == [(1, 4), (5, 8), (9, 19)]


@pytest.mark.parametrize(
    "fence",
    [
        "``` a`b",  # backticks in the info string of a backtick fence: inline code, no block
        "    ```",  # indented four spaces: no fence
        "``",  # too short
    ],
)
def test_a_line_that_opens_no_code_block_hides_no_directive(fence: str) -> None:
    text = f"{fence}\n:::{{solution}} ex-add\nSECRET\n:::\n```\n"
    assert [block.label for block in directive_blocks(text)] == ["ex-add"]


def test_a_code_block_never_closed_is_code_to_the_end_but_may_not_hide_a_directive() -> None:
    assert directive_blocks("```\nx\n````python\n") == []  # code to the end: nothing to read
    assert notebooks.code_blocks("```\nx\n````python\n") == [(0, 3)]
    with pytest.raises(ValueError, match=r"line 2: the code block opened with ``` is never"):
        directive_blocks("Text.\n  ```python\nx = 1\n  ````x\n::::{solution} ex-add\n::::\n")


@pytest.mark.parametrize(
    ("text", "line", "outer", "inner"),
    [
        # the answer inside its exercise: read as one exercise, it stayed in the student edition
        (
            ":::{exercise} Add\n:label: ex-add\n\n::::{solution} ex-add\nSECRET\n::::\n:::\n",
            4,
            "exercise",
            "solution",
        ),
        (
            "::::{solution} ex-add\nProse.\n:::{exercise} Next\n:::\n::::\n",
            3,
            "solution",
            "exercise",
        ),
        (
            "- Item:\n  ::::{exercise} Add\n  ```\n  x\n  ```\n  :::{solution} ex-add\n  :::\n  ::::\n",
            6,
            "exercise",
            "solution",
        ),
    ],
)
def test_a_directive_opened_inside_another_is_an_error(
    text: str, line: int, outer: str, inner: str
) -> None:
    message = (
        f"cell 3, line {line}: a {{{inner}}} directive is opened inside the {{{outer}}} "
        f"directive of line .*; close the {{{outer}}} first, then open the {{{inner}}} after it"
    )
    with pytest.raises(ValueError, match=message):
        notebooks.strip_solutions(text, cell=3)


@pytest.mark.parametrize(
    ("text", "line", "outer", "inner", "opened"),
    [
        ("```{note}\n:::{solution} ex-add\nSECRET\n:::\n```\n", 2, "note", "solution", 1),
        (  # past a code block of the body, one fenced with tildes, and a title
            "Intro.\n~~~~{admonition} Try it\n```python\nx = 1\n```\n:::{exercise} Add\n:::\n~~~~",
            6,
            "admonition",
            "exercise",
            2,
        ),
        (  # a dropdown in a note: the inner one names itself
            "`````{note}\n````{dropdown} Answer\n:::{solution} ex-add\n:::\n````\n`````\n",
            3,
            "dropdown",
            "solution",
            2,
        ),
        (  # in a list item, and in the body of a solution
            "::::{solution} ex-add\n- Item:\n  ``` {tip}\n  :::{solution} ex-b\n  :::\n  ```\n::::",
            4,
            "tip",
            "solution",
            3,
        ),
        ("```{figure} x.svg\n:::{solution} ex-add\n:::\n", 2, "figure", "solution", 1),  # open
    ],
)
def test_a_directive_opened_in_a_backtick_fenced_directive_with_a_markdown_body_is_an_error(
    text: str, line: int, outer: str, inner: str, opened: int
) -> None:
    """MyST reads the body of a ```{note} as markdown, where the parser, seeing a code
    block, would overlook the solution in it; the student edition would keep it."""
    message = (
        f"cell 3, line {line}: a {{{inner}}} directive is opened inside the {{{outer}}} "
        f"directive of line {opened}, which is fenced with backticks or tildes, where the "
        f"tools would overlook it; open the {{{inner}}} outside the {{{outer}}}, or fence "
        f"the {{{outer}}} with colons \\(':::\\{{{outer}\\}}'\\)$"
    )
    with pytest.raises(ValueError, match=message):
        notebooks.strip_solutions(text, cell=3)


@pytest.mark.parametrize(
    ("text", "line", "name"),
    [
        ("Prose.\n\n> :::{solution} ex-add\n> SECRET\n> :::\n", 3, "solution"),
        (">:::{exercise} Add\n>:::\n", 1, "exercise"),  # no space after the >
        ("> Quoted.\n>\n> > ::::{exercise} Add\n> > ::::\n", 3, "exercise"),  # nested
        ("- Item:\n\n  > :::{solution} ex-add\n  > :::\n", 3, "solution"),  # in a list item
        (  # in the body of a solution, past a quoted code block
            "::::{solution} ex-add\n> ```\n> x\n> ```\n> :::{solution} ex-b\n> :::\n::::\n",
            5,
            "solution",
        ),
    ],
    ids=["quote", "no-space", "nested", "list-item", "in-a-body"],
)
def test_a_directive_opened_inside_a_block_quote_is_an_error(
    text: str, line: int, name: str
) -> None:
    """MyST renders a directive in a block quote, but the parser reads no quote: the
    solution was skipped, and the student edition kept it."""
    message = (
        f"cell 3, line {line}: a {{{name}}} directive is opened inside a block quote "
        f"\\('>'\\), where the tools would overlook it; open the {{{name}}} outside the quote$"
    )
    with pytest.raises(ValueError, match=message):
        notebooks.strip_solutions(text, cell=3)


def test_a_quote_may_show_a_directive_in_its_code_or_hold_other_directives() -> None:
    """The quote's own markdown is read as the text outside it: an example in its code block
    and a note are no exercise or solution (they are not refused), and the code blocks the
    tools skip are those outside quotes, as before."""
    text = (
        "> Write it so:\n> ```markdown\n> :::{solution} ex-example\n> ```\n"
        "> :::{note}\n> A note.\n> :::\n\n:::{solution} ex-add\n:::\n"
    )
    assert [block.label for block in directive_blocks(text)] == ["ex-add"]
    assert notebooks.code_blocks(text) == []


def test_a_directive_in_a_literal_directive_or_a_code_block_of_a_note_is_code() -> None:
    text = (
        "```{code-block} markdown\n:::{solution} ex-example\n:::\n```\n"
        "````{note}\nWrite it so:\n```markdown\n:::{exercise} Title\n```\n````\n"
        "~~~{math}\n:::{solution}\n~~~\n"
        "```{figure} x.svg\nA caption.\n```\n"
        "- Item:\n  ````{note}\n     ```markdown\n  :::{solution} ex-list\n     ```\n  ````\n"
    )  # the last code block is three spaces past its note's indentation: a fence
    assert directive_blocks(text) == []
    assert notebooks.code_blocks(text) == [(0, 3), (4, 9), (10, 12), (13, 15), (17, 21)]


def test_a_directive_shown_in_a_code_block_of_a_body_is_not_nested() -> None:
    text = (
        "  ::::{exercise} Write a solution (easy)\n"
        "  :label: ex-write\n"
        "     ~~~markdown\n"  # three spaces past the directive's: a fence of its body
        "  :::{solution} ex-other\n"
        "  :::\n"
        "  ~~~\n"
        "  ::::\n"
    )
    [block] = directive_blocks(text)
    assert (block.name, block.first, block.last) == ("exercise", 0, 6)
    assert notebooks.code_blocks(text) == [(2, 5)]  # found in the body, as the parser does


@pytest.mark.parametrize(
    ("text", "blocks"),
    [
        # a fence on the item's first line, closed as far in as the item's text
        ("2. ```python\n   x = 1\n   ```\n   Prose after.\n", [(0, 2)]),
        ("* ```\n  x\n  ```\n", [(0, 2)]),
        ("+ ```\n  x\n  ```\n", [(0, 2)]),
        ("1) ~~~\n   x\n   ~~~\n", [(0, 2)]),
        # up to three spaces past the item's text, which starts after its marker's spaces
        ("10) Step:\n\n       ```\n     x\n       ```\n", [(2, 4)]),
        ("- Outer\n  1. Inner:\n\n        ```python\n        x\n        ```\n", [(3, 5)]),
        ("- 1. ```\n     x\n     ```\n", [(0, 2)]),  # two items opened on one line
        # a lazy continuation line keeps the item open
        ("1. Item text\nlazy line\n    ```\n    x\n    ```\n", [(2, 4)]),
        # a line indented less than the item's text ends the item and its code block
        ("- ```\n  x\nafter\n```\n", [(0, 2), (3, 4)]),
        ("1. ```\n   x\n2. ```\n   y\n   ```\n", [(0, 2), (2, 4)]),
        # no list item: no marker's space, a thematic break, a number that does not
        # interrupt a paragraph; and an item's text of indented code (five spaces)
        ("-x\n    ```\n", []),
        ("* * *\n    ```\n", []),
        ("the year\n2024. was good\n      ```\n", []),
        ("-     ```\n", []),
        ("10.\n\n    ```\n", []),  # an item without text ends at a blank line
    ],
    ids=[
        "on-the-marker-line",
        "star",
        "plus",
        "paren-tildes",
        "indented-in-item",
        "nested",
        "two-markers",
        "lazy-line",
        "item-ends",
        "next-item",
        "no-space",
        "thematic-break",
        "number-in-paragraph",
        "indented-code",
        "empty-item",
    ],
)
def test_a_fence_in_a_list_item_is_read_as_commonmark_does(
    text: str, blocks: list[tuple[int, int]]
) -> None:
    """A list item's text starts past its marker and the spaces after it, and a code block
    in it is fenced up to three spaces further in (chapter 8's solution of
    ex-ch08-rope-cache opens one on an item's first line, ``2. ```python``)."""
    assert notebooks.code_blocks(text) == blocks


def test_a_fence_in_a_list_item_of_a_solution_is_code() -> None:
    text = (
        "::::{solution} ex-add\n"
        "1. Prose.\n"
        "2. ```python\n"
        "   :::{exercise} Not a directive\n"
        "   ```\n"
        "   More prose.\n"
        "::::\n"
    )
    [block] = directive_blocks(text)
    assert (block.name, block.first, block.last) == ("solution", 0, 6)
    assert notebooks.code_blocks(text) == [(2, 4)]


def test_a_line_of_colons_in_a_code_block_of_a_body_closes_the_directive_as_in_myst() -> None:
    """MyST's colon fence ends at the first line of colons at least as long as its own,
    even one inside a code block of its body (it reads the body only once it has found
    the end): so does the parser, or the student edition would cut out more than the
    solution that the book shows."""
    text = '::::{solution} ex-add\n```python\ns = """\n::::\n"""\n```\n::::\n'
    [block] = directive_blocks(text)
    assert (block.first, block.last) == (0, 3)
    assert block.body == '```python\ns = """'
    # the code block of the body ends with it; the fence after it opens one to the end
    assert notebooks.code_blocks(text) == [(1, 3), (5, 7)]


def test_checker_calls_are_read_from_the_code() -> None:
    source = (
        "import attnbook.exercises as ex\n"
        "# check_nothing(f) in a comment\n"
        'print("check_string(f)")\n'
        "check_b(my_b)\n"
        "ex.check_a(my_a)\n"
        "check_b(again)\n"
    )
    assert checker_calls(source) == ["check_b", "check_a"]
    assert checker_calls("%time check_x(f)  # check_y(f)\n") == ["check_x"]  # not Python: text
    assert checker_calls("check_(f)\nrecheck_x(f)") == []
    # in the order of the lines, not of the syntax tree's levels
    assert checker_calls("for f in fs:\n    check_a(f)\ncheck_b(g)\n") == ["check_a", "check_b"]


def test_an_exercise_gets_the_checkers_of_the_next_code_cell_only() -> None:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(
        cells=[
            md(":::{exercise} One\n:label: ex-one\n:::"),
            nbformat.v4.new_raw_cell("check_raw(f)"),  # a raw cell is no code cell
            code("check_one(f)"),
            md(
                ":::{exercise} Two\n:label: ex-two\n:::\n\n:::{exercise} Three\n:label: ex-three\n:::"
            ),
            code("check_three(f)"),
            md(":::{exercise} Four\n:label: ex-four\n:::"),
        ]
    )
    found = {e.label: e.checkers for e in exercises(nb)}
    assert found == {
        "ex-one": ("check_one",),
        "ex-two": (),
        "ex-three": ("check_three",),
        "ex-four": (),
    }


def test_importing_the_parser_needs_neither_nbformat_nor_nbclient() -> None:
    code = (
        "import sys, attnbook.exercises.notebooks;"
        "print(sorted(m for m in ('nbformat', 'nbclient') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_notebook_runs_in_the_folder_and_environment_given(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import os\n"
                "print(os.getcwd(), os.environ['HF_HUB_OFFLINE'], os.environ['ATTNBOOK_DEVICE'])"
            )
        ]
    )
    out = notebooks.run_notebook(nb, timeout=120, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert out is nb
    # ATTNBOOK_DEVICE=cpu: attnbook.get_device() is the CPU, where the stored outputs were made
    assert nb.cells[0].outputs[0]["text"].split() == [str(tmp_path), "1", "cpu"]
    assert "execution" not in nb.cells[0].metadata  # no timings recorded
    with pytest.raises(ValueError, match="timeout"):
        notebooks.run_notebook(nb, timeout=0)


def _kernel_dying_at_start(folder: Path, times: int) -> str:
    """The name of a kernel, installed under `folder` (on JUPYTER_PATH), that dies at start the
    first `times` times (as a kernel whose port another program took dies), then starts."""
    program = (
        "import pathlib, runpy, sys\n"
        f"mark = pathlib.Path({str(folder / 'starts')!r})\n"
        "mark.write_text(mark.read_text() + 'x' if mark.exists() else 'x')\n"
        f"if len(mark.read_text()) <= {times}:\n"
        "    sys.exit('zmq.error.ZMQError: Address already in use (on purpose)')\n"
        "runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)\n"
    )
    spec = {
        "argv": [sys.executable, "-c", program, "-f", "{connection_file}"],
        "display_name": "Python (dies at start)",
        "language": "python",
    }
    (folder / "kernels" / "dies-first").mkdir(parents=True)
    (folder / "kernels" / "dies-first" / "kernel.json").write_text(json.dumps(spec))
    return "dies-first"


@pytest.fixture
def dying_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], str]:
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return lambda times: _kernel_dying_at_start(tmp_path / "jupyter", times)


def _starts(tmp_path: Path) -> str:
    return (tmp_path / "jupyter" / "starts").read_text()


def test_run_notebook_starts_a_kernel_that_died_at_start_once_more(
    tmp_path: Path, dying_kernel: Callable[[int], str]
) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1 + 1)")])
    with pytest.warns(RuntimeWarning, match="died before replying.*started once more"):
        notebooks.run_notebook(nb, timeout=120, cwd=tmp_path, kernel_name=dying_kernel(1))
    assert _starts(tmp_path) == "xx"  # two kernels were started
    assert nb.cells[0].outputs[0]["text"] == "2\n"


def test_run_notebook_gives_up_on_a_kernel_that_dies_at_start_twice(
    tmp_path: Path, dying_kernel: Callable[[int], str]
) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1 + 1)")])
    with (
        pytest.warns(RuntimeWarning, match="started once more"),
        pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"),
    ):
        notebooks.run_notebook(nb, timeout=120, cwd=tmp_path, kernel_name=dying_kernel(2))
    assert _starts(tmp_path) == "xx"  # not a third time
    assert "outputs" not in nb.cells[0] or not nb.cells[0].outputs


def test_run_notebook_does_not_rerun_a_notebook_whose_cell_failed(
    tmp_path: Path, dying_kernel: Callable[[int], str]
) -> None:
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        notebooks.run_notebook(nb, timeout=120, cwd=tmp_path, kernel_name=dying_kernel(0))
    assert _starts(tmp_path) == "x"  # one kernel


def test_run_notebook_leaves_a_given_kernel_manager_to_its_caller(
    tmp_path: Path, dying_kernel: Callable[[int], str]
) -> None:
    from jupyter_client.manager import AsyncKernelManager

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1 + 1)")])
    km = AsyncKernelManager(kernel_name=dying_kernel(1))
    with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
        notebooks.run_notebook(nb, timeout=120, cwd=tmp_path, km=km)
    assert _starts(tmp_path) == "x"
