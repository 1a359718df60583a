"""The command line the figure scripts share (tools/draw_*.py): `--help`, and no arguments.

Each script's ``main`` calls ``parse_figure_args(__doc__, __file__, argv)`` before it draws:
`--help` prints the usage and the script's docstring and exits 0 without drawing; any
argument is a usage error, one line on stderr and exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn


class FigureParser(argparse.ArgumentParser):
    """argparse's parser whose usage error is one line on stderr (``prog: message``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help says what it draws)\n")


def figure_parser(doc: str | None, file: str) -> FigureParser:
    """The parser of the script at ``file`` (``python -m tools.<stem>``), described by ``doc``.

    ``--help`` shows the first line of ``doc`` as the description and the rest as written
    (its Usage line, the environment variables it reads) after the options.
    """
    summary, _, details = (doc or "").strip().partition("\n")
    return FigureParser(
        prog=f"python -m tools.{Path(file).stem}",
        description=summary,
        epilog=details.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parse_figure_args(
    doc: str | None, file: str, argv: list[str] | None = None
) -> argparse.Namespace:
    """The script's arguments (``sys.argv[1:]`` where ``argv`` is None), checked.

    Raises:
        SystemExit: 0 after printing ``--help``, 2 after a usage error.
    """
    return figure_parser(doc, file).parse_args(argv)
