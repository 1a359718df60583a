"""Prove the learner's path: every chapter runs from the package as a learner installs it.

Usage: python -m tools.learner_path [--jobs N] [CHAPTER.ipynb ...]   (default: chapters/*.ipynb)

What `make test` runs as its step "learner". A learner does not have this
repository: they install `attnbook` (on Colab, the first cell of the chapter does
it) and open one notebook. So, in a temporary folder outside the repository:

1. Snapshot: the working tree's files (tracked, and untracked but not ignored) are
   copied into a new Git repository, with one commit. It stands for the public
   repository: the wheel is built from it, and pip clones it by `git+file://`.
2. The wheel: `pip wheel` builds attnbook from the snapshot; every file of
   `src/attnbook/` (py.typed included) must be inside it.
3. A clean virtual environment (no system site packages) gets ONLY the wheel,
   its runtime `dependencies` (versions constrained by requirements.txt, so torch
   is the pinned CPU build), and ipykernel to run a notebook in it.
4. Each chapter that needs no extra is copied ALONE into an empty folder and
   executed there, top to bottom, in that environment's kernel, under nbval: every
   output must match the stored one (tests/nbval_sanitize.cfg applies). This is the
   book's nbval check, in the environment a learner has (`make test` runs no other:
   `python -m tools.run_tests nbval` is the quicker loop in .venv while writing).
5. The Colab form: attnbook is reinstalled with the requirement of a chapter's
   own Colab cell (`attnbook[extra] @ git+https://...` from tools/sync_repo_url.py),
   its URL pointed at the snapshot (`git+file://...@package_ref`, the snapshot's commit
   tagged with the ref of _config.yml), the way Colab's pip installs it,
   extra and all. Then the chapters with a `colab_extra` in course.yml run, alone in empty folders.
   Without such a chapter, plain `attnbook @ git+file://...` is installed and imported.

A chapter may not read any file of the repository: it runs in an empty folder, its
copy starts with a cell that records (Python audit hook) every file it opens or lists
under the repository, and ends with a cell that fails if there was one, or if
`attnbook` was imported from anywhere but the environment's site-packages. These two
cells are the harness's, not the chapter's: a failure names the chapter's own code
cell (counted from 1, as nbval and the tests count them) and its error. nbval's JUnit report
of each chapter goes to `--junit-dir`, if given (`make test`: .test-reports/learner/).

A kernel that dies before the chapter's first cell (before the audit cell ran) is the one
failure that is not the chapter's. Its known cause: Jupyter picks a kernel's ports in one
process and the kernel binds them in another, a second or two later, and anything that
takes one of them in between (another kernel starting beside it, for one) kills the kernel
at start (jupyter_client issues 154 and 487; a Jupyter server restarts such a kernel by
itself, on new ports: jupyter_client's KernelRestarter, `random_ports_until_alive`). Such a
chapter is run once more, from the start, and the output says so, with the last lines the
dead kernel wrote to its stderr (nbval discards a kernel's stderr; the kernel spec written
here keeps it in a file). A second death fails the chapter. A chapter whose own code fails
is never run again.

Exit status 0 only if every chapter ran; a summary of times per stage comes last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import nbformat

from tools import course, exercise_inventory, sync_repo_url
from tools.notebooks import KERNEL_ENV, TIMEOUT_S, book_kernel_env

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "requirements.txt"
PACKAGE = "attnbook"
KERNEL_NAME = "attnbook-learner"  # only in the kernel folder this script writes
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"  # what nbval may ignore in an output
# What a notebook needs to run besides the package: a Jupyter kernel. Not a runtime
# dependency of attnbook: `import attnbook` works in any Python, and Colab, JupyterLab or
# VS Code bring their own kernel. The notebooks are driven by nbclient from the Python
# running this script (.venv), so the learner's environment needs nothing else.
KERNEL_REQUIREMENTS = ["ipykernel"]
# Variables that would let the kernel see .venv or the repository instead of the learner's
# environment (PYTHONPATH could put src/ first, for instance).
KERNEL_ENV_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONUSERBASE")

AUDIT_CELL = """\
# learner_path.py: record every file opened or listed under the repository.
import os as _lp_os
import sys as _lp_sys

_lp_repo = {root!r}
_lp_env = _lp_os.path.abspath(_lp_sys.prefix) + _lp_os.sep  # the environment's own files
_lp_reads = []


def _lp_audit(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        path = _lp_os.path.abspath(_lp_os.fsdecode(args[0]))
        if (path == _lp_repo or path.startswith(_lp_repo + _lp_os.sep)) and not path.startswith(
            _lp_env
        ):
            _lp_reads.append(path)


_lp_sys.addaudithook(_lp_audit)"""

# The kernel spec's program: ipykernel's launcher, its stderr first sent to the file that this
# variable names (run_chapter sets one per run), so that a kernel that dies at start says why.
KERNEL_LOG_VAR = "ATTNBOOK_LEARNER_KERNEL_LOG"
LAUNCHER = f"""\
import os, runpy
log = os.environ.pop({KERNEL_LOG_VAR!r}, None)
if log:
    os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644), 2)
runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)"""

VERDICT_CELL = """\
# learner_path.py: the chapter read no file of the repository and used the installed package.
import attnbook as _lp_attnbook

assert not _lp_reads, f"the chapter read files of the repository: {sorted(set(_lp_reads))}"
_lp_prefix = _lp_os.path.realpath(_lp_sys.prefix) + _lp_os.sep
assert _lp_os.path.realpath(_lp_attnbook.__file__).startswith(_lp_prefix), (
    f"attnbook was imported from {_lp_attnbook.__file__}, not from {_lp_sys.prefix}"
)"""


@dataclass
class ChapterResult:
    """How one chapter ran in the learner's environment."""

    name: str
    seconds: float
    error: str | None = None  # None: every cell ran and its output matched the stored one
    passed: int = 0  # the chapter's code cells whose output nbval found as stored
    failed: int = 0  # ... that raised or whose output differed (harness cells included)
    restarted: str | None = None  # why the first kernel died at start, if it was run again

    @property
    def ok(self) -> bool:
        return self.error is None


def run(command: Sequence[str | Path], **kwargs) -> None:
    """Run a command, raising with its output when it fails."""
    result = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, **kwargs
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(str(part) for part in command)}` failed ({result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )


def snapshot(root: Path, dest: Path, ref: str | None = None) -> Path:
    """Copy the working tree's files (tracked + untracked, not ignored) into a one-commit repo.

    With `ref`, the commit is tagged `ref` (the `package_ref` the Colab cells install); a ref
    that is a commit hash cannot be made, so the commit gets a tag of that name instead, which
    pip resolves the same way.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in sorted(set(filter(None, listed.split("\0")))):
        source = root / name
        if source.is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git = ["git", "-c", "user.name=learner-path", "-c", "user.email=learner-path@localhost"]
    run([*git, "-c", "init.defaultBranch=main", "init", "-q", "."], cwd=dest)
    run([*git, "add", "-A"], cwd=dest)
    run([*git, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "snapshot"], cwd=dest)
    if ref:
        run([*git, "tag", ref], cwd=dest)
    return dest


def build_wheel(source: Path, dist: Path) -> Path:
    """Build attnbook's wheel from `source` with .venv's hatchling; return its path."""
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet"]
    run([*pip, "--no-deps", "--no-build-isolation", "-w", dist, source])
    (wheel,) = dist.glob(f"{PACKAGE}-*.whl")
    return wheel


def missing_from_wheel(wheel: Path, package_dir: Path) -> list[str]:
    """Files of `package_dir` (e.g. src/attnbook) that the wheel lacks, as `attnbook/...`."""
    wanted = {
        f"{PACKAGE}/{path.relative_to(package_dir).as_posix()}"
        for path in package_dir.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    with zipfile.ZipFile(wheel) as archive:
        return sorted(wanted - set(archive.namelist()))


def make_venv(path: Path) -> Path:
    """A clean virtual environment (no system site packages) with pip; return its python."""
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(path)
    return path / "bin" / "python"


def pip_install(python: Path, requirements: Iterable[str]) -> None:
    """Install into the environment of `python`, versions constrained to requirements.txt."""
    # --no-compile: byte-compiling all of torch takes longer than the install itself; Python
    # compiles what a chapter imports when it imports it.
    pip = [python, "-m", "pip", "install", "--quiet", "--no-compile"]
    run([*pip, "-c", CONSTRAINTS, *requirements])


def colab_requirement(cell_source: str) -> str:
    """The requirement that a Colab cell installs: its one quoted `attnbook... @ git+...`."""
    found = re.findall(r'"(attnbook(?:\[[\w,]+\])? @ git\+[^"]+)"', cell_source)
    if len(found) != 1:
        raise ValueError(
            f"cell_source: expected one quoted requirement 'attnbook @ git+...', got {cell_source!r}"
        )
    return found[0]


def local_requirement(requirement: str, url: str, local: Path, ref: str | None = None) -> str:
    """`requirement` with `git+URL[@ref]` (the public repository) replaced by the local clone's.

    The clone must have `ref` (`snapshot(..., ref=...)` tags its commit with it).
    """
    public = f"git+{url}" + (f"@{ref}" if ref else "")
    if not requirement.endswith(f" @ {public}"):
        raise ValueError(f"requirement: expected 'NAME[extra] @ {public}', got {requirement!r}")
    # `file://localhost/...`, not `file:///...`: the pip that `python -m venv` brings (23.x)
    # rejects a URL without a host in a requirement; git reads both the same way.
    local_url = f"git+file://localhost{quote(local.resolve().as_posix())}"
    return requirement[: -len(public)] + local_url + (f"@{ref}" if ref else "")


def kernel_env(python: Path, hf_home: Path) -> dict[str, str]:
    """The kernel's environment: the learner's bin/ first, nothing pointing at .venv or src/.

    PyTorch's CPU kernels are the stored outputs' (tools/notebooks.py: CPU_KERNELS_ENV).
    """
    env = {key: value for key, value in os.environ.items() if key not in KERNEL_ENV_DROP}
    keep = [
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if entry and Path(entry).resolve() != Path(sys.executable).parent.resolve()
    ]
    env["PATH"] = os.pathsep.join([str(python.parent), *keep])
    env["HF_HOME"] = str(hf_home)  # an empty cache, as on a fresh Colab machine
    # The clean environment is installed without bytecode (pip_install: --no-compile), so
    # the kernels write the bytecode of what they import, once, as a learner's Python does.
    # Where PYTHONDONTWRITEBYTECODE is set (containers often set it), every kernel compiled
    # torch, IPython and the rest again: 8 short chapters, two at a time, took 58 s, against
    # 43 s with the bytecode kept.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**book_kernel_env(env), **KERNEL_ENV}  # the CPU kernels of the stored outputs


def write_kernelspec(python: Path, jupyter_path: Path) -> dict[str, str]:
    """A kernel spec for the learner's python, in a folder no other Jupyter looks at.

    The kernel is ipykernel's, started as `python -m ipykernel_launcher` starts it; only its
    stderr goes to the file named by KERNEL_LOG_VAR in its environment, where that is set.
    Returns the variable that makes Jupyter (nbval's kernel manager) find it: JUPYTER_PATH.
    """
    spec_dir = jupyter_path / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [str(python), "-c", LAUNCHER, "-f", "{connection_file}"],
        "display_name": "Python (learner)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return {"JUPYTER_PATH": str(jupyter_path)}


def harnessed(nb: nbformat.NotebookNode, root: Path) -> nbformat.NotebookNode:
    """A copy of `nb` between the audit cell and the verdict cell."""
    copy = nbformat.from_dict(nb)
    copy.cells = [
        nbformat.v4.new_code_cell(AUDIT_CELL.format(root=str(root.resolve()))),
        *copy.cells,
        nbformat.v4.new_code_cell(VERDICT_CELL),
    ]
    return copy


def cell_results(report: Path) -> list[str | None]:
    """Per code cell of a harnessed notebook, in order: None if nbval passed it, else why not.

    Read from nbval's JUnit report (one test per code cell, named `...Cell N`): the failure's
    text, but for an error outside the cell (the kernel did not start) its one-line message,
    "failed on setup with ...", where the text is pytest's whole traceback.
    """
    results: dict[int, str | None] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        number = re.search(r"Cell (\d+)$", case.get("name", ""))
        if not number:
            continue
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is None:
            results[int(number[1])] = None
            continue
        message = problem.get("message") or ""
        results[int(number[1])] = (
            message
            if message.startswith("failed on setup")
            else problem.text or message or "failed"
        )
    return [results[number] for number in sorted(results)]


def chapter_counts(report: Path) -> tuple[int, int]:
    """(passed, failed) of the chapter's own code cells in nbval's report of its harnessed copy.

    The harness's two cells, the first and the last, are not counted.
    """
    cells = cell_results(report)[1:-1]
    return sum(why is None for why in cells), sum(why is not None for why in cells)


def threads_env(jobs: int) -> dict[str, str]:
    """Environment variables for `jobs` kernels at once: the cores shared out among them.

    A chapter that fixes its own thread count (torch.set_num_threads(2)) still asks for more
    threads than its share: idle threads must sleep, not spin (OpenMP's default spin-wait made
    such chapters several times slower beside another one).
    """
    if jobs <= 1:
        return {}
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OMP_WAIT_POLICY": "PASSIVE"}


def describe_failure(nb: nbformat.NotebookNode, code_cell: int, why: str) -> str:
    """Name code cell number `code_cell` of the harnessed `nb` (0: the audit cell) and why.

    The chapter's code cells are counted from 1, without the harness's cells; of nbval's
    report, the lines that say what was raised or what differed are kept.
    """
    cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    if code_cell == 0:
        where = "the harness's audit cell"
    elif code_cell == len(cells) - 1:
        where = "the harness's final check"
    else:
        first = next((line for line in cells[code_cell].source.splitlines() if line.strip()), "")
        where = f"code cell {code_cell} (`{first.strip()[:60]}`)"
    lines = [
        line.rstrip()[:400] + ("…" if len(line.rstrip()) > 400 else "")
        for line in re.sub(r"(?:\x1b|#x1B)\[[0-9;]*m", "", why).splitlines()
        if line.strip()
    ]
    keep = [
        line
        for line in lines
        if re.match(r"\s*(\w+(Error|Exception|Interrupt)\b|AssertionError|Timeout|[-+] )", line)
        or "mismatch" in line.lower()
        or "read files of the repository" in line
    ]
    return f"{where}: " + "\n    ".join((keep or lines)[:12])


def run_chapter(
    chapter: Path, env: dict[str, str], work: Path, root: Path = ROOT, junit: Path | None = None
) -> ChapterResult:
    """Copy `chapter` alone into an empty folder under `work`; run it there under nbval.

    `env` is the kernel's environment (kernel_env and write_kernelspec's JUPYTER_PATH); nbval
    itself runs in the Python running this script. With `junit`, nbval's report is kept there.
    """
    folder = Path(tempfile.mkdtemp(prefix=f"{chapter.stem}-", dir=work))
    nb = harnessed(nbformat.read(chapter, as_version=4), root)
    nbformat.write(nb, folder / chapter.name)
    report = junit or folder.with_suffix(".xml")
    # An empty ini file of its own: pytest looks for one upwards from the notebook, and must
    # find neither the repository's configuration nor anyone else's.
    ini = work / "pytest.ini"
    if not ini.exists():
        ini.write_text("[pytest]\n", encoding="utf-8")
    command = [
        # Not hypothesis's plugin nor xdist's: a second less to start, fourteen times.
        sys.executable, "-m", "pytest", "-c", ini, "-q",
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist",
        "--nbval", "--nbval-kernel-name", KERNEL_NAME, "--nbval-sanitize-with", SANITIZE,
        "--nbval-cell-timeout", str(TIMEOUT_S), "--color=no", f"--junitxml={report}", chapter.name,
    ]  # fmt: skip
    start = time.perf_counter()
    restarted = None
    for attempt in (1, 2):
        # Beside the chapter's folder, not in it: the chapter may list its own folder.
        log = work / f"{folder.name}.kernel-{attempt}.log"
        finished = subprocess.run(
            [str(part) for part in command],
            cwd=folder,
            env={**env, KERNEL_LOG_VAR: str(log)},
            capture_output=True,
            text=True,
            check=False,
        )
        results = cell_results(report) if report.is_file() else []
        died = did_not_start(results, log)
        if died is None:
            break
        if attempt == 2:
            error = (
                "the kernel died before the chapter's first cell, twice: "
                f"first {restarted}; then {died}"
            )
            return ChapterResult(
                chapter.name, time.perf_counter() - start, error, 0, len(results), restarted
            )
        restarted = died
    seconds = time.perf_counter() - start
    failed = [number for number, why in enumerate(results) if why is not None]
    passed = chapter_counts(report)[0] if results else 0
    if failed:
        error = describe_failure(nb, failed[0], results[failed[0]])
        if len(failed) > 1:
            error += f"\n    (and {len(failed) - 1} more cells: nbval's report has each)"
        return ChapterResult(chapter.name, seconds, error, passed, len(failed), restarted)
    if finished.returncode != 0 or not results:
        tail = " | ".join((finished.stdout + finished.stderr).strip().splitlines()[-5:])
        error = f"nbval exited with status {finished.returncode}: {tail}"
        return ChapterResult(chapter.name, seconds, error, 0, 1, restarted)
    return ChapterResult(chapter.name, seconds, None, passed, 0, restarted)


def did_not_start(results: Sequence[str | None], kernel_log: Path) -> str | None:
    """Why the kernel died before the harness's audit cell ran, or None if that cell ran.

    `results` are cell_results of the run; nbval starts the kernel in the first cell's set-up,
    so a kernel that never started fails that set-up ("failed on setup with ..."). The reason
    given is that message and the last lines the kernel wrote to its stderr (`kernel_log`).
    """
    if not results or not (results[0] or "").startswith("failed on setup"):
        return None
    why = (results[0] or "").removeprefix("failed on setup with ").strip().strip('"')
    text = kernel_log.read_text(encoding="utf-8", errors="replace") if kernel_log.is_file() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = " | ".join(lines[-3:])[-400:] if lines else "nothing"
    return f"{why} (the kernel's stderr: {said})"


def run_chapters(
    chapters: Sequence[Path], python: Path, work: Path, jobs: int, junit_dir: Path | None = None
) -> list[ChapterResult]:
    """Run `chapters` in the kernel of `python`, `jobs` at a time; print one line each.

    With several at a time, the cores are shared out (`OMP_NUM_THREADS`: PyTorch's threads
    per kernel) and the longest chapters (by the CPU times instructors.md records) start
    first, so that the last one to finish is a short one. Results come in `chapters`' order.
    """
    if not chapters:
        return []
    env = {
        **kernel_env(python, work / "hf_home"),
        **write_kernelspec(python, work / "jupyter"),
        **threads_env(jobs),
    }

    def one(chapter: Path) -> ChapterResult:
        junit = junit_dir / f"{chapter.stem}.xml" if junit_dir else None
        result = run_chapter(chapter, env, work, junit=junit)
        status = f"{result.passed} cells as stored" if result.ok else f"FAILED in {result.error}"
        if result.restarted and result.ok:  # the reason: in the summary at the end
            status += " (run twice: its first kernel died at start)"
        print(f"  {result.name:<40} {result.seconds:6.1f} s  {status}", flush=True)
        return result

    if jobs <= 1:
        return [one(chapter) for chapter in chapters]
    cpu = exercise_inventory.read_measured(
        exercise_inventory.GUIDE.read_text(encoding="utf-8")
    ).get("chapters", {})
    longest_first = sorted(chapters, key=lambda c: -cpu.get(c.stem, {}).get("cpu", 0.0))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip(longest_first, pool.map(one, longest_first), strict=True))
    return [done[chapter] for chapter in chapters]


def extra_of(chapter: Path) -> str | None:
    """The extra of pyproject.toml that `chapter`'s Colab cell installs, if any."""
    return course.load().colab_extras.get(chapter.stem)


def installed_from(python: Path) -> str:
    """Where pip says the environment's attnbook came from (PEP 610 direct_url.json URL)."""
    code = (
        "import importlib.metadata as m, json;"
        f"print(json.loads(m.distribution({PACKAGE!r}).read_text('direct_url.json'))['url'])"
    )
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", type=Path, help="default: chapters/*.ipynb")
    parser.add_argument("--jobs", type=int, default=1, help="chapters run at once (default 1)")
    parser.add_argument(
        "--junit-dir", type=Path, help="keep nbval's JUnit report of each chapter here"
    )
    args = parser.parse_args(argv)
    if args.junit_dir:
        shutil.rmtree(args.junit_dir, ignore_errors=True)
        args.junit_dir.mkdir(parents=True)
    chapters = sorted(args.chapters or (ROOT / "chapters").glob("*.ipynb"))
    base = [chapter for chapter in chapters if extra_of(chapter) is None]
    extras = sorted({extra for chapter in chapters if (extra := extra_of(chapter))})
    url, ref = sync_repo_url.repository_url(ROOT), sync_repo_url.package_ref(ROOT)

    times: list[tuple[str, float]] = []
    results: list[ChapterResult] = []
    problems: list[str] = []

    def stage(name: str, start: float) -> None:
        times.append((name, time.perf_counter() - start))
        print(f"{name}: {times[-1][1]:.1f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="attnbook-learner-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        repo = snapshot(ROOT, work / "repo", ref)
        wheel = build_wheel(repo, work / "dist")
        missing = missing_from_wheel(wheel, repo / "src" / PACKAGE)
        if missing:
            problems.append(f"the wheel lacks {', '.join(missing)}: see pyproject.toml")
        stage(f"snapshot + wheel ({wheel.name})", start)

        start = time.perf_counter()
        python = make_venv(work / "venv")
        pip_install(python, [str(wheel), *KERNEL_REQUIREMENTS])
        stage("clean venv + wheel + runtime dependencies + ipykernel", start)

        start = time.perf_counter()
        print(f"chapters that need only the runtime dependencies ({len(base)}):", flush=True)
        results += run_chapters(base, python, work, args.jobs, args.junit_dir)
        stage("those chapters", start)

        # The Colab form, with each extra the chapters need (one after the other, in the
        # same environment); with none, plain attnbook, to prove the Colab form installs.
        for extra in extras or [None]:
            users = [chapter for chapter in chapters if extra and extra_of(chapter) == extra]
            stem = users[0].stem if users else None
            requirement = colab_requirement(sync_repo_url.colab_cell_source(url, stem))
            local = local_requirement(requirement, url, repo, ref)
            start = time.perf_counter()
            run([python, "-m", "pip", "uninstall", "--quiet", "--yes", PACKAGE])
            pip_install(python, [local])
            source = installed_from(python)
            if not source.startswith("file://"):
                problems.append(f"{local!r} installed attnbook from {source}")
            run([python, "-c", f"import {PACKAGE}"], cwd=work)
            stage(f"Colab form: pip install {local!r}", start)
            if users:
                start = time.perf_counter()
                print(f"chapters that need {requirement.split(' @ ')[0]} ({len(users)}):")
                results += run_chapters(users, python, work, args.jobs, args.junit_dir)
                stage("those chapters", start)
        start = time.perf_counter()
    stage("removing the temporary folder", start)

    failed = [result for result in results if not result.ok]
    cells = sum(result.passed for result in results)
    print(
        f"\nlearner path: {len(results) - len(failed)} of {len(results)} chapters ran with "
        f"every output as stored ({cells} code cells compared by nbval)"
    )
    for result in results:
        if result.restarted:
            print(f"run again: {result.name}, its first kernel died at start: {result.restarted}")
    for result in failed:
        print(f"FAILED {result.name}: {result.error}")
    for problem in problems:
        print(f"FAILED {problem}")
    print(f"total: {sum(seconds for _, seconds in times):.1f} s")
    return 1 if failed or problems or not results else 0


if __name__ == "__main__":
    sys.exit(main())
