"""The harness of tools/learner_path.py (the step "learner" of `make test`) can fail.

The step itself builds a clean environment and runs every chapter (minutes); these tests
check its parts in seconds: the Colab requirement pointed at a local clone, the check of
the wheel's contents, that a notebook which reads a file of the repository, raises, or
prints other than what is stored is reported with the cell that did it (each chapter runs
under nbval), and that a kernel that dies at start is started once more, and only once,
with the reason it gave. Those notebooks run in the kernel of the Python running the tests
(.venv), whose attnbook is the editable one: the harness must see that too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement

from tools import learner_path, notebooks, sync_repo_url

ROOT = Path(__file__).resolve().parents[2]


URL = sync_repo_url.repository_url(ROOT)
REF = sync_repo_url.package_ref(ROOT)


def test_colab_requirement_pointed_at_a_local_clone(tmp_path: Path) -> None:
    cell = sync_repo_url.colab_cell_source(URL, "13_inside_attention")
    requirement = learner_path.colab_requirement(cell)
    assert requirement == f"attnbook[pretrained] @ git+{URL}@{REF}"
    local = Requirement(learner_path.local_requirement(requirement, URL, tmp_path, REF))
    assert (local.name, local.extras) == ("attnbook", {"pretrained"})
    assert local.url == f"git+file://localhost{tmp_path.resolve().as_posix()}@{REF}"


def test_local_requirement_refuses_another_url_or_ref(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="requirement"):
        learner_path.local_requirement(
            f"attnbook @ git+https://github.com/someone/else@{REF}", URL, tmp_path, REF
        )
    with pytest.raises(ValueError, match="requirement"):
        learner_path.local_requirement(f"attnbook @ git+{URL}@main", URL, tmp_path, REF)
    with pytest.raises(ValueError, match="cell_source"):
        learner_path.colab_requirement("import sys\n")


def test_the_snapshot_is_tagged_with_the_ref(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    subprocess.run(["git", "init", "-q", "."], cwd=source, check=True)
    (source / "a.txt").write_text("a\n", encoding="utf-8")
    repo = learner_path.snapshot(source, tmp_path / "repo", "v9.9.9")
    tags = subprocess.run(
        ["git", "tag", "--points-at", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tags == ["v9.9.9"]
    assert (repo / "a.txt").read_text(encoding="utf-8") == "a\n"


def test_missing_from_wheel_names_a_left_out_file(tmp_path: Path) -> None:
    package = tmp_path / "src" / "attnbook"
    (package / "__pycache__").mkdir(parents=True)
    for name in ("__init__.py", "py.typed", "__pycache__/x.cpython-311.pyc"):
        (package / name).write_text("", encoding="utf-8")
    wheel = tmp_path / "attnbook-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("attnbook/__init__.py", "")
    assert learner_path.missing_from_wheel(wheel, package) == ["attnbook/py.typed"]
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("attnbook/py.typed", "")
    assert learner_path.missing_from_wheel(wheel, package) == []


def _run(
    tmp_path: Path, *cells: str | nbformat.NotebookNode, launcher: str | None = None
) -> learner_path.ChapterResult:
    """Run a notebook of these code cells (or sources) through the harness, in .venv's kernel.

    With `launcher`, the kernel spec's program is that Python code instead of the harness's.
    """
    chapter = tmp_path / "99_probe.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(cell) if isinstance(cell, str) else cell for cell in cells
    ]
    nbformat.write(nb, chapter)
    work = tmp_path / "work"
    work.mkdir()
    python = Path(sys.executable)
    env = {
        **learner_path.kernel_env(python, work / "hf_home"),
        **learner_path.write_kernelspec(python, work / "jupyter"),
    }
    if launcher is not None:
        spec_file = work / "jupyter" / "kernels" / learner_path.KERNEL_NAME / "kernel.json"
        spec = json.loads(spec_file.read_text(encoding="utf-8"))
        spec["argv"][spec["argv"].index(learner_path.LAUNCHER)] = launcher
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
    return learner_path.run_chapter(chapter, env, work)


def test_a_chapter_that_reads_a_repository_file_fails(tmp_path: Path) -> None:
    readme = str(ROOT / "README.md")
    result = _run(tmp_path, "x = 1", f"text = open({readme!r}).read()")
    assert not result.ok
    assert "final check" in result.error
    assert "read files of the repository" in result.error
    assert "README.md" in result.error


def test_a_failing_cell_is_named_and_its_kernel_shut_down(tmp_path: Path) -> None:
    pid_file = tmp_path / "kernel.pid"
    first = f"import os\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))"
    result = _run(tmp_path, first, "# the second cell\ny = 1 / 0", "z = 2")
    assert not result.ok
    assert result.error.startswith("code cell 2 (`# the second cell`)"), result.error
    assert "ZeroDivisionError" in result.error
    with pytest.raises(ProcessLookupError):  # no kernel is left running
        os.kill(int(pid_file.read_text()), 0)


def _printed(source: str, stored: str, count: int) -> nbformat.NotebookNode:
    """A code cell run as number `count`, stored with `stored` on its standard output."""
    cell = nbformat.v4.new_code_cell(source, execution_count=count)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
    return cell


def test_an_output_unlike_the_stored_one_fails_and_is_shown(tmp_path: Path) -> None:
    result = _run(tmp_path, _printed("print(1 + 1)", "2\n", 1), _printed("print(2 + 1)", "4\n", 2))
    assert not result.ok
    assert result.error.startswith("code cell 2 (`print(2 + 1)`)"), result.error
    assert "- 3" in result.error, result.error  # what the cell printed
    assert "+ 4" in result.error, result.error  # what is stored
    assert result.passed == 1  # the first cell printed what is stored


def test_kernels_run_side_by_side_share_the_cores() -> None:
    assert learner_path.threads_env(1) == {}  # one at a time: PyTorch's own choice
    shared = learner_path.threads_env(2)
    assert shared["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert shared["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_kernels_keep_the_bytecode_they_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clean environment has no bytecode: without this, each chapter compiled torch anew."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    env = learner_path.kernel_env(Path(sys.executable), tmp_path / "hf_home")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert "PYTHONPATH" not in env  # what the kernel must not see is still dropped


def test_a_kernel_that_cannot_bind_its_port_says_why_in_its_log(tmp_path: Path) -> None:
    """The harness's kernel program keeps the kernel's stderr, which nbval throws away.

    The failure made on purpose is the known cause of a kernel's death at start (see
    tools/learner_path.py): a port that Jupyter chose for the kernel is taken by someone else
    before the kernel binds it.
    """
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = {name: taken.getsockname()[1] for name in ("shell_port", "iopub_port")}
        connection = tmp_path / "kernel.json"
        connection.write_text(
            json.dumps({**ports, "ip": "127.0.0.1", "transport": "tcp", "key": ""}),
            encoding="utf-8",
        )
        log = tmp_path / "kernel.log"
        env = {**os.environ, learner_path.KERNEL_LOG_VAR: str(log)}
        started = subprocess.run(
            [sys.executable, "-c", learner_path.LAUNCHER, "-f", str(connection)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert started.returncode != 0
    assert "Address already in use" in log.read_text(encoding="utf-8")
    assert "Address already in use" not in started.stderr  # it went to the log


def _dies_first(mark: Path, times: int) -> str:
    """A kernel program that dies at start the first `times` times, as a kernel whose port was
    taken dies, and then starts the harness's kernel."""
    return (
        "import os, pathlib, sys\n"
        f"mark = pathlib.Path({str(mark)!r})\n"
        "mark.write_text(mark.read_text() + 'x' if mark.exists() else 'x')\n"
        f"if len(mark.read_text()) <= {times}:\n"
        f"    with open(os.environ[{learner_path.KERNEL_LOG_VAR!r}], 'a') as log:\n"
        "        log.write('zmq.error.ZMQError: Address already in use (on purpose)\\n')\n"
        "    sys.exit(1)\n"
    ) + learner_path.LAUNCHER


def test_a_kernel_that_died_before_the_first_cell_is_started_again(tmp_path: Path) -> None:
    mark = tmp_path / "starts"
    result = _run(tmp_path, _printed("print(1 + 1)", "2\n", 1), launcher=_dies_first(mark, 1))
    # The chapter's cell ran as stored; the final check fails only because .venv's attnbook
    # is the editable one, in the repository (see the module's docstring).
    assert (result.passed, result.failed) == (1, 1), result.error
    assert result.error.startswith("the harness's final check"), result.error
    assert mark.read_text() == "xx"  # two kernels were started
    assert "Kernel died before replying to kernel_info" in result.restarted, result.restarted
    assert "Address already in use (on purpose)" in result.restarted, result.restarted


def test_a_kernel_that_dies_at_start_twice_fails_the_chapter_and_says_why(
    tmp_path: Path,
) -> None:
    mark = tmp_path / "starts"
    result = _run(tmp_path, _printed("print(1 + 1)", "2\n", 1), launcher=_dies_first(mark, 2))
    assert not result.ok
    assert mark.read_text() == "xx"  # not a third time
    assert result.error.startswith("the kernel died before the chapter's first cell, twice")
    assert result.error.count("Address already in use (on purpose)") == 2, result.error
    assert "Sets future time" not in result.error  # jupyter_client's docstring, not the reason


def test_a_chapter_whose_own_cell_fails_is_not_run_again(tmp_path: Path) -> None:
    mark = tmp_path / "starts"
    result = _run(tmp_path, "y = 1 / 0", launcher=_dies_first(mark, 0))
    assert not result.ok
    assert "ZeroDivisionError" in result.error
    assert result.restarted is None
    assert mark.read_text() == "x"  # one kernel


X86_FLAGS = "processor\t: 0\nflags\t\t: fpu sse sse2 avx fma {extra}\nbogomips\t: 4890\n"


def test_the_cpu_kernels_are_asked_for_only_where_the_cpu_has_avx2() -> None:
    assert notebooks.has_avx2(X86_FLAGS.format(extra="avx2 bmi2"))
    assert notebooks.has_avx2(X86_FLAGS.format(extra="avx2 avx512f avx512bw"))
    assert not notebooks.has_avx2(X86_FLAGS.format(extra="avx512_vnni"))  # no word avx2
    assert not notebooks.has_avx2("processor\t: 0\nFeatures\t: fp asimd avx2x\n")  # no flags
    assert not notebooks.has_avx2("model name\t: avx2 in a name\nflags\t\t: fpu sse\n")


def test_every_kernel_that_makes_or_compares_outputs_gets_the_same_cpu_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """make execute, nbval and the learner step: PyTorch's AVX2 kernels where there are any."""
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(notebooks, "has_avx2", lambda: True)
    pins = notebooks.CPU_KERNELS_ENV
    assert pins["ATEN_CPU_CAPABILITY"] == "avx2"
    learner = learner_path.kernel_env(Path(sys.executable), tmp_path / "hf_home")
    for env in (notebooks.book_kernel_env(), notebooks.book_kernel_env({}), learner):
        assert {key: env.get(key) for key in pins} == pins
        assert env["HF_HUB_OFFLINE"] == "1"  # KERNEL_ENV too
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # set by hand: it wins
    assert notebooks.book_kernel_env()["ATEN_CPU_CAPABILITY"] == "default"
    monkeypatch.setattr(notebooks, "has_avx2", lambda: False)  # ARM, macOS: nothing asked
    assert not set(pins) & set(notebooks.book_kernel_env({}))


@pytest.mark.skipif(not notebooks.has_avx2(), reason="the CPU has no AVX2 kernels to ask for")
def test_pytorch_takes_the_cpu_kernels_it_is_asked_for() -> None:
    """The variables' names and values are ones this PyTorch reads (a wrong one: a warning)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    for env, expected in (
        (notebooks.CPU_KERNELS_ENV, "AVX2"),
        ({"ATEN_CPU_CAPABILITY": "default"}, "DEFAULT"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        assert (done.stdout.strip(), done.stderr) == (expected, "")


def test_the_summary_names_the_cpu_and_the_kernels_the_notebooks_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CI log must say on which kind of machine its outputs were compared (RESULTS.md)."""
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    xeon = "model name\t: A Xeon\n" + X86_FLAGS.format(extra="avx2 avx512f avx512bw")
    line = notebooks.cpu_line(xeon)
    assert line.startswith("CPU: A Xeon, ")
    assert "AVX2 yes, AVX-512 yes" in line
    assert line.endswith("ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2")
    assert "AVX2 yes, AVX-512 no" in notebooks.cpu_line(X86_FLAGS.format(extra="avx2"))
    assert notebooks.cpu_line("").endswith("kernels: as PyTorch chooses")  # ARM, macOS
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")  # set by hand: what ran
    assert "ATEN_CPU_CAPABILITY=default," in notebooks.cpu_line(xeon)
