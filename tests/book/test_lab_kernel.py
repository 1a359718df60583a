"""The named Jupyter kernel of .venv (`make venv` registers it; `make lab` and nbval use it).

A chapter runs headless in that kernel, in this environment; the tools and the
Makefile agree on its name; the stored kernelspec stays the one Colab knows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from tools import execute_notebooks

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "01_scores.ipynb"


KERNEL = execute_notebooks.KERNEL_NAME


def test_the_tools_and_the_makefile_name_one_kernel() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(rf"^KERNEL := {KERNEL}$", makefile, re.M)
    assert "ipykernel install --sys-prefix --name $(KERNEL)" in makefile
    assert re.search(r"^lab: venv", makefile, re.M)
    assert "allowed_kernelspecs=$(KERNEL)" in makefile
    run_tests = (ROOT / "tools" / "run_tests.py").read_text(encoding="utf-8")
    assert f'"--nbval-kernel-name",\n                "{KERNEL}"' in run_tests
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make lab" in readme


def test_the_kernel_is_registered_in_this_environment() -> None:
    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        pytest.fail(f"the kernel {KERNEL!r} is not registered: run `make venv`")
    assert spec.language == "python"
    assert Path(spec.argv[0]).resolve().parent == Path(sys.executable).resolve().parent, (
        f"the kernel {KERNEL!r} runs {spec.argv[0]}, not this environment's Python "
        f"{sys.executable}: run `make venv`"
    )


def test_the_kernel_runs_a_chapter_headless(tmp_path: Path) -> None:
    """`jupyter nbconvert --execute` chapter 1 with the kernel, plus a cell that says where it ran."""
    nb = nbformat.read(CHAPTER, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys, attnbook\nprint(sys.prefix)"))
    source = tmp_path / CHAPTER.name
    nbformat.write(nb, source)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            f"--ExecutePreprocessor.kernel_name={KERNEL}",
            "--output-dir",
            str(tmp_path / "out"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=CHAPTER.parent,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ran = nbformat.read(tmp_path / "out" / CHAPTER.name, as_version=4)
    code = [cell for cell in ran.cells if cell.cell_type == "code"]
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors
    assert all(cell.execution_count for cell in code), "a code cell did not run"
    printed = "".join(o.get("text", "") for o in code[-1].outputs).strip()
    assert Path(printed).resolve() == Path(sys.prefix).resolve()


def test_kernelspec_only_is_idempotent_and_keeps_colabs_name(tmp_path: Path) -> None:
    path = tmp_path / "nb.ipynb"
    nb = nbformat.read(CHAPTER, as_version=4)
    nb.metadata["kernelspec"] = {"name": "some-env", "display_name": "x", "language": "python"}
    nbformat.write(nb, path)
    assert execute_notebooks.set_kernelspec(path) is True
    first = path.read_text(encoding="utf-8")
    assert json.loads(first)["metadata"]["kernelspec"]["name"] == "python3"
    assert execute_notebooks.set_kernelspec(path) is False
    assert path.read_text(encoding="utf-8") == first


def test_help_and_bad_arguments_run_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--help and a missing notebook were tracebacks (FileNotFoundError: '--help'), the
    latter after the notebooks before it had run."""
    assert execute_notebooks.main(["--help"]) == 0
    assert "Usage: python -m tools.execute_notebooks" in capsys.readouterr().out
    missing = str(tmp_path / "missing.ipynb")
    for argv, says in (
        ([str(CHAPTER), missing], f"no notebook {missing!r}"),
        ([str(CHAPTER), "--all"], "unknown option '--all'"),
        (["--kernelspec-only"], "no notebook given"),
    ):
        assert execute_notebooks.main(argv) == 2, argv
        assert f"python -m tools.execute_notebooks: {says}" in capsys.readouterr().err
