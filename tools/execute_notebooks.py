"""Re-run chapter notebooks in place, top to bottom, each in a fresh kernel.

Usage: python -m tools.execute_notebooks chapters/01_scores.ipynb [...]
       python -m tools.execute_notebooks --kernelspec-only chapters/*.ipynb

This is what `make execute` runs after a chapter is edited, so that the stored
outputs are exactly what nbval will reproduce in `make test`. It records no
timings and no kernel-specific metadata, so an unchanged notebook re-executes
to an unchanged file.

The notebooks run in the kernel of .venv that `make venv` registers as
``attnbook`` (KERNEL_NAME), the one nbval and `make lab` use too. The stored
``kernelspec`` metadata is NOTEBOOK_KERNELSPEC, written on every run;
``--kernelspec-only`` writes just that metadata without executing anything
(idempotent). It names ``python3`` on purpose: Google Colab opens a notebook
whose kernelspec names any other kernel with an "Unrecognized runtime" warning,
while `make lab` offers only the ``attnbook`` kernel, which JupyterLab then
picks for these Python notebooks.

PyTorch computes with its AVX2 kernels, on any x86-64 CPU that has them (AVX-512 ones
included): tools/notebooks.py's CPU_KERNELS_ENV says why, and nbval asks for the same.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat

from tools.notebooks import KERNEL_NAME, TIMEOUT_S, book_kernel_env, run_notebook

NOTEBOOK_KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


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


def _set_notebook_metadata(nb: nbformat.NotebookNode) -> None:
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = dict(NOTEBOOK_KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}


def set_kernelspec(path: Path) -> bool:
    """Write the stored kernelspec metadata only; True if the file changed."""
    before = path.read_text(encoding="utf-8")
    nb = nbformat.reads(before, as_version=4)
    _set_notebook_metadata(nb)
    nbformat.validate(nb)
    after = nbformat.writes(nb)
    after += "" if after.endswith("\n") else "\n"  # as nbformat.write ends a file
    if after != before:
        path.write_text(after, encoding="utf-8")
    return after != before


def _check_kernel() -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    except NoSuchKernel:
        sys.exit(
            f"the Jupyter kernel {KERNEL_NAME!r} is not registered: run `make venv`, or "
            f"python -m ipykernel install --sys-prefix --name {KERNEL_NAME} "
            '--display-name "Python (attnbook)"'
        )


def execute(path: Path) -> None:
    nb = run_notebook(path, kernel_name=KERNEL_NAME, timeout=TIMEOUT_S, env=book_kernel_env())
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = _coalesce_streams(cell.outputs)
    _set_notebook_metadata(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)


def _usage_error(paths: list[str]) -> str | None:
    """What is wrong with the arguments before anything runs or is written, or None."""
    names = paths[1:] if paths[:1] == ["--kernelspec-only"] else paths
    if not names:
        return "no notebook given"
    for name in names:
        if name.startswith("-"):
            return f"unknown option {name!r} (--kernelspec-only must come first)"
        if not Path(name).is_file():
            return f"no notebook {name!r}"
    return None


def main(paths: list[str]) -> int:
    if {"-h", "--help"} & set(paths):
        print(__doc__)
        return 0
    if (error := _usage_error(paths)) is not None:
        print(f"python -m tools.execute_notebooks: {error}\n\n{__doc__}", file=sys.stderr)
        return 2
    if paths[:1] == ["--kernelspec-only"]:
        for name in paths[1:]:
            changed = set_kernelspec(Path(name))
            print(f"{'set' if changed else 'unchanged'}: kernelspec of {name}")
        return 0
    _check_kernel()
    for name in paths:
        path = Path(name)
        start = time.perf_counter()
        execute(path)
        print(f"executed {path} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
