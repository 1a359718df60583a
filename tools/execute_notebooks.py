"""Re-run chapter notebooks in place, top to bottom, each in a fresh kernel.

Usage: python tools/execute_notebooks.py chapters/01_scores.ipynb [...]

This is what `make execute` runs after a chapter is edited, so that the stored
outputs are exactly what nbval will reproduce in `make test`. It records no
timings and no kernel-specific metadata, so an unchanged notebook re-executes
to an unchanged file.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TIMEOUT_S = 600  # per cell


def _coalesce_streams(outputs: list) -> list:
    """Merge consecutive stdout (or stderr) chunks into one output.

    How a kernel splits printed text into messages depends on timing; merged,
    the stored notebook is the same on every run.
    """
    merged: list = []
    for out in outputs:
        previous = merged[-1] if merged else None
        if (
            out.output_type == "stream"
            and previous is not None
            and previous.output_type == "stream"
            and previous.name == out.name
        ):
            previous.text += out.text
        else:
            merged.append(out)
    return merged


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    client.execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = _coalesce_streams(cell.outputs)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.validate(nb)
    nbformat.write(nb, path)


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    for name in paths:
        path = Path(name)
        start = time.perf_counter()
        execute(path)
        print(f"executed {path} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
