"""Run a submission's code in a sandbox: bubblewrap, limits, and the two programs run inside.

The grader (:mod:`attnbook.exercises.grade`) starts two sandboxed processes
per notebook, each ``python -m attnbook.exercises.sandbox <task>`` in a
private folder that holds a fresh copy of the submission and nothing else:

1. ``execute``: runs the notebook top to bottom in a fresh Jupyter kernel, as
   "Restart and run all" would (every cell, a time limit per cell), and writes
   the executed notebook back into the private folder. The grader reads only
   which cells raised and why the run stopped early (for a kernel that died:
   the cell it was running and how its process ended, its exit code or
   signal), for its messages: nothing in it decides a grade.
2. ``evaluate``: for each exercise, in a child process of its own (``fork``),
   replaces ``sys.setprofile`` and ``sys.settrace`` by *tripwires* (functions
   that record that they were called and raise: the checkers' guards watch the
   answer's calls with those hooks, through references of their own), refuses
   what would run code that no static reading sees or another program (loading
   a pickle, a new process: ``REFUSED_EVENTS``, with an audit hook;
   ``typing``'s evaluation of annotations: ``CODE_ROUTES``, tripwires too),
   draws the cases' inputs and computes the reference's gradients on them (for
   a differentiable answer) before anything of the answer's runs, then
   runs the answer's extracted program (:mod:`attnbook.exercises.extract`),
   replaces the exercise's library equivalents by tripwires too, runs the
   answer on the cases the grader wrote (``job.pkl``) under the checker's
   guards (a library equivalent that the program bound to a name before its
   tripwire was in place is still that function, and its guard knows it; a
   function of the chapter's own cells that computes the answer, which no
   module holds, is known to its guard by name), turns what came back into
   arrays (copies) under those guards too, since what converts it may be the
   answer's own code (an ``__array__``), fails an answer that rebound an
   attribute of the modules that the grader's own code reads there
   (``torch.Tensor``: :data:`_READ_BY_THE_GRADER`) or that write the results
   (:data:`_WRITE_THE_RESULTS`, put back before they are written), and writes
   the arrays (``<exercise>.npz``, read with ``allow_pickle=False``) and a
   small JSON file. Only the files of a child that finished, for its own
   exercise, are kept; ``ended.json`` says how each child ended (finished,
   stopped at the time limit, its exit code or signal), for the grader's
   messages. No process that an answer started outlives it to write over these
   files: each child ends every such process before it writes its results, and
   the evaluation after each child, before it reads them (the supervising
   process outside the sandbox sees only how the whole sandbox ended, so it
   cannot write these records itself). The grader compares the results with
   the package's reference itself.

The sandbox is bubblewrap (``bwrap``, Debian package ``bubblewrap``):

- a new user, PID, network, IPC and UTS namespace (``--unshare-all``) and no
  capabilities (``--cap-drop ALL``): no network at all, and the sandbox sees
  only its own processes in ``/proc``;
- a file system of the system's read-only program folders (``/usr``, ``/lib``,
  ...), the Python installation and the ``attnbook`` package read-only, an
  empty ``/tmp`` (a file system in memory, capped at ``Limits.tmp_bytes`` in all
  where bubblewrap can cap it: 0.7 and later, not setuid), and the private
  folder, the only place it can write: no other submission, no output file of
  the grader, no home folder (only the
  Hugging Face model cache, ``hub/``, read-only when there is one, so that a
  submission that loads a model offline finds what this machine has cached;
  never the token beside it). The private folder is a file system in memory
  too, capped at ``Limits.folder_bytes`` as ``/tmp`` is, holding the grader's
  files (the submission, the job) read-only; only the files the task writes
  back (the executed notebook, each exercise's two result files, in an
  ``out/`` that cannot be renamed) are files of the grader's folder on disk,
  bound in, each under the file-size limit: many small files fill the memory
  cap (``No space left on device``), not the grader's disk;
- an environment built from nothing (``--clearenv``): ``PATH``, ``HOME``,
  ``LANG``, ``MPLBACKEND``, ``HF_HUB_OFFLINE`` and a few more, so no variable
  of the grader (a token, a password) reaches the submission;
- ``--die-with-parent`` and ``--new-session``: when the grader stops the
  sandbox (time limit) or dies, every process the submission started dies
  with it (the PID namespace ends with its first process);
- limits set before it starts (``setrlimit``): address space (``--memory``),
  CPU seconds, file size, no core files; and a wall-clock limit per task.
  There is no limit on the number of processes (``RLIMIT_NPROC`` counts a
  user's processes machine-wide): a fork bomb is stopped by the time limit,
  when the PID namespace ends.

Without ``bwrap`` the grader refuses to run (:class:`SandboxUnavailable`);
``unsafe=True`` (``--unsafe-no-sandbox``) runs the same programs as plain
processes with the cleared environment, the limits and the private folder,
but with the grader's view of files, processes and network.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import json
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Limits", "SandboxResult", "SandboxUnavailable", "bwrap_available", "run_sandboxed"]

INSIDE = "/sandbox"  # where the private folder appears inside the sandbox
_ETC = ("ld.so.cache", "alternatives", "localtime", "fonts", "mime.types", "nsswitch.conf")
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is not installed, and running without a sandbox was not asked for."""


@dataclass(frozen=True)
class Limits:
    """What one sandboxed task may use."""

    wall_s: float = 600.0  # wall-clock seconds, then every process of the sandbox is killed
    memory_bytes: int = 6 * 2**30  # address space per process (torch alone maps about 2 GiB)
    file_bytes: int = 256 * 2**20  # the largest file it may write
    # all of /tmp together: it lives in memory, where the address-space limit does not reach
    tmp_bytes: int = 2**30
    # all of the private folder together, in memory as /tmp is, but for the files it writes
    # back (the executed notebook, each exercise's results), on disk, each under file_bytes
    folder_bytes: int = 2**30


@dataclass(frozen=True)
class SandboxResult:
    """How a sandboxed task ended (its files are in the private folder)."""

    returncode: int | None  # None: killed at the wall-clock limit
    seconds: float
    log: str  # the last lines of its stdout and stderr (the submission's own text: untrusted)


def bwrap_available() -> bool:
    """Whether bubblewrap is installed and can make a sandbox here (user namespaces allowed)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    probe = [bwrap, "--unshare-all", "--ro-bind", "/", "/", "--", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _python_dirs() -> list[str]:
    """The folders the sandboxed Python needs, read-only: its installation, its packages."""
    import attnbook

    dirs = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        str(Path(sys.executable).resolve().parents[1]),
    }
    dirs |= {p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    dirs.add(str(Path(attnbook.__file__).resolve().parent))
    found = sorted(d for d in dirs if Path(d).is_dir())
    return [d for d in found if not any(d != o and d.startswith(o + os.sep) for o in found)]


def _hf_cache() -> str | None:
    """The Hugging Face cache (models loaded before, offline), shared read-only when there is one."""
    cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
    )
    return cache if os.path.isdir(cache) else None


def _environment(inside: str) -> dict[str, str]:
    import attnbook

    package_parent = str(Path(attnbook.__file__).resolve().parents[1])
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": f"{inside}/home",
        "TMPDIR": "/tmp" if inside == INSIDE else f"{inside}/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": f"{inside}/home/.matplotlib",
        "PYTHONPATH": package_parent,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "JUPYTER_PLATFORM_DIRS": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(min(4, os.cpu_count() or 1))),
    }
    if _hf_cache():
        env["HF_HUB_CACHE"] = _hf_cache() or ""
    return env


@functools.cache
def _bwrap_sizes_tmpfs() -> bool:
    """Whether this bubblewrap takes ``--size`` for a tmpfs: tried once, not read off its
    version (the option came in 0.7.0, and a setuid bubblewrap refuses it)."""
    probe = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--size", str(2**20)]
    probe += ["--tmpfs", "/tmp", "--", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_OUTPUT_FOLDER_BYTES = 2**20  # out/ holds the results' files, on disk, and nothing else


def _outputs(task: str, folder: Path) -> list[str]:
    """The files that ``task`` writes back into ``folder``, relative to it: the executed
    notebook, or each exercise's results (named in the grader's job file, read before the
    sandbox starts)."""
    if task == "execute":
        return ["executed.ipynb"]
    if task == "evaluate":
        jobs = pickle.loads((folder / "job.pkl").read_bytes())  # written by the grader, trusted
        results = [f"out/{job['exercise']}.{ext}" for job in jobs for ext in ("npz", "json")]
        return [*results, f"out/{ENDED}"]
    return []


def _bwrap_argv(
    folder: Path,
    argv: list[str],
    env: dict[str, str],
    limits: Limits = Limits(),
    outputs: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """bubblewrap's command line: the private folder appears at ``INSIDE`` as a file system in
    memory, capped at ``limits.folder_bytes`` as ``/tmp`` is at ``limits.tmp_bytes``, that holds
    the folder's files read-only and its ``outputs`` (each folder of them a file system of its
    own, which cannot be renamed) as the only files written back to the folder on disk."""
    sized = _bwrap_sizes_tmpfs()  # else /tmp and the folder are bounded by the machine's memory
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    cmd += [*(["--size", str(limits.tmp_bytes)] if sized else []), "--tmpfs", "/tmp"]
    for path in _SYSTEM:
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    for name in _ETC:
        cmd += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for path in _python_dirs():
        cmd += ["--ro-bind", path, path]
    if _hf_cache():
        cmd += ["--ro-bind", _hf_cache() or "", _hf_cache() or ""]
    cmd += [*(["--size", str(limits.folder_bytes)] if sized else []), "--tmpfs", INSIDE]
    cmd += ["--dir", f"{INSIDE}/home"]
    for path in sorted(folder.iterdir()):  # the inputs: the submission, the job, the settings
        if path.is_file() and not path.is_symlink() and path.name not in outputs:
            cmd += ["--ro-bind", str(path), f"{INSIDE}/{path.name}"]
    for parent in sorted({str(Path(name).parent) for name in outputs} - {"."}):
        cmd += [*(["--size", str(_OUTPUT_FOLDER_BYTES)] if sized else []), "--tmpfs"]
        cmd += [f"{INSIDE}/{parent}"]
    for name in outputs:
        cmd += ["--bind", str(folder / name), f"{INSIDE}/{name}"]
    cmd += ["--chdir", INSIDE, "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--", *argv]


def _limit(limits: Limits) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        cpu = int(limits.wall_s * (os.cpu_count() or 1)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_sandboxed(
    task: str, folder: Path, limits: Limits, *, unsafe: bool = False
) -> SandboxResult:
    """Run ``python -m attnbook.exercises.sandbox <task>`` on ``folder``, sandboxed.

    Args:
        task: ``"execute"`` or ``"evaluate"``.
        folder: the private folder (it must hold what the task reads).
        limits: time, memory and file-size limits.
        unsafe: run without bubblewrap (a plain process, same environment rules).

    Raises:
        SandboxUnavailable: bwrap is missing and ``unsafe`` is false.
    """
    (folder / "home").mkdir(exist_ok=True)
    (folder / "tmp").mkdir(exist_ok=True)
    outputs: list[str] = []  # the files bound into the sandbox, to be written back
    if unsafe:
        env = _environment(str(folder))
        argv = [sys.executable, "-m", "attnbook.exercises.sandbox", task, str(folder)]
        cwd = str(folder)
    else:
        if shutil.which("bwrap") is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, and the grader runs submissions only "
                "inside it: install it (Debian/Ubuntu: apt-get install bubblewrap), or pass "
                "--unsafe-no-sandbox to run them as plain processes of your user"
            )
        env = _environment(INSIDE)
        inner = [sys.executable, "-m", "attnbook.exercises.sandbox", task, INSIDE]
        outputs = _outputs(task, folder)
        for name in outputs:  # bound into the sandbox: they must exist
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).touch()
        argv, cwd = _bwrap_argv(folder, inner, env, limits, outputs), None
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # bwrap's own: it clears it
    log_path = folder / f"{task}.log"
    start = time.perf_counter()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_limit(limits),
            start_new_session=True,
        )
        try:
            code: int | None = process.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError):  # the sandbox, and all it started
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if not unsafe:
        for name in outputs:  # what a task that failed left, and what no task wrote: nothing
            with contextlib.suppress(OSError):
                if code != 0 or (folder / name).stat().st_size == 0:
                    (folder / name).unlink()
    tail = log_path.read_bytes()[-4000:].decode("utf-8", errors="replace")
    return SandboxResult(code, time.perf_counter() - start, tail)


# ------------------------------------------------------------------ inside the sandbox


def _execute(folder: Path, timeout: float) -> None:
    """Run ``submission.ipynb`` in a fresh kernel on this interpreter; write ``executed.ipynb``."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient.exceptions import DeadKernelError

    from attnbook.exercises import notebooks

    class ThisInterpreter(KernelSpecManager):
        def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                display_name="Python (sandboxed)",
                language="python",
            )

    nb = nbformat.read(folder / "submission.ipynb", as_version=4)
    client = notebooks.notebook_client(
        nb,
        timeout=timeout,
        cwd=folder,
        km=AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisInterpreter()),
        allow_errors=True,
        interrupt_on_timeout=True,
        client_class=_client_class(),
    )
    run: dict[str, Any] = {"stopped": ""}
    try:
        client.execute(cleanup_kc=True, env=dict(os.environ))
    except Exception as exc:  # a dead kernel, a cell that ignored the interrupt
        run["stopped"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        before = client.running_cell is None and "Kernel died" in str(exc)  # jupyter_client's
        if isinstance(exc, DeadKernelError) or before:
            # which cell was running (None: none yet) and how the kernel's process ended
            # (None: not known), for the grader to say in words of its own
            kernel = client.kernel_process
            code = kernel.poll() if kernel is not None else None
            run["kernel_died"] = {"cell": client.running_cell, "returncode": code}
    nb.metadata["attnbook_run"] = run
    nbformat.write(nb, folder / "executed.ipynb")


def _client_class() -> type:
    """nbclient's ``NotebookClient``, made to stop the run when a cell ignores an interrupt.

    nbclient interrupts a cell that runs past the timeout, then waits for it again, as often
    as it takes. A cell that ignores the interrupt (a long loop inside one C call, such as
    ``sum(range(10**15))``) then held the run until the whole run's limit, the timeout
    times the number of cells. Here its second timeout raises ``CellTimeoutError``: the run
    stops there (the grades come from the source, not from the run).

    It also keeps what explains a kernel that died: the index of the cell it ran last
    (``running_cell``) and the kernel's process (``kernel_process``, whose exit status
    nbclient's ``DeadKernelError`` does not tell).
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    class InterruptOnce(NotebookClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.interrupted_cells: set[int] = set()
            self.running_cell: int | None = None  # the index of the cell run last
            self.kernel_process: subprocess.Popen | None = None  # kept past its clean-up

        async def async_start_new_kernel(self, **kwargs: Any) -> None:
            await super().async_start_new_kernel(**kwargs)
            provisioner = getattr(self.km, "provisioner", None)
            self.kernel_process = getattr(provisioner, "process", None)

        async def async_execute_cell(
            self, cell: Any, cell_index: int, *args: Any, **kw: Any
        ) -> Any:
            self.running_cell = cell_index
            return await super().async_execute_cell(cell, cell_index, *args, **kw)

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            if id(cell) in self.interrupted_cells:
                number = next((i + 1 for i, c in enumerate(self.nb.cells) if c is cell), "?")
                # A kernel that ignored the interrupt ignores a shutdown request too: killed
                # now, not after the graceful shutdown's wait (2.5 s, then SIGTERM).
                self.shutdown_kernel = "immediate"
                raise CellTimeoutError(
                    f"cell {number} ran on {timeout:g} s after the kernel's interrupt "
                    "(a long loop inside one C call?): the run stopped there"
                )
            self.interrupted_cells.add(id(cell))
            return await super()._async_handle_timeout(timeout, cell)

    return InterruptOnce


def _to_arrays(value: object) -> tuple[str, list[Any]]:
    """A returned value as ``(kind, arrays)``: kind "value" or "tuple" with plain arrays,
    "none" for ``None``, or ``"other:<type>"``."""
    import numpy as np
    import torch

    def one(x: object) -> Any:
        # copies: a view would share its numbers with the answer's tensor, which its code
        # could still change afterwards, when no guard watches
        if isinstance(x, torch.Tensor):
            x = x.detach().to("cpu")
            return np.array(x.numpy() if x.dtype != torch.bfloat16 else x.float().numpy())
        array = np.array(x)
        if array.dtype == object:
            raise TypeError(type(x).__name__)
        return array

    if value is None:
        return "none", []
    try:
        if isinstance(value, tuple | list):
            return "tuple", [one(x) for x in value]
        return "value", [one(value)]
    except (TypeError, ValueError, RuntimeError):
        return f"other:{type(value).__name__}", []


MAX_RESULT_BYTES = 50 * 2**20  # the largest result file kept and read back
# out/ENDED: how each exercise's child ended, written by the evaluation (not by an answer)
# when no child is left, so that the grader can say why an exercise gave no result
ENDED = "ended.json"


class ForbiddenCall(Exception):
    """Raised by a tripwire: the answer called its exercise's library equivalent."""


# What switches off the guards' watch on an answer's calls (the checkers keep their own
# references to these, :mod:`attnbook.exercises._framework`): tripwires before the answer's
# program runs, so that no name it binds holds the real ones.
WATCH_HOOKS = ("sys.setprofile", "sys.settrace")


def _tripwire(label: str, tripped: list[str]) -> Any:
    """A function that records ``label`` in ``tripped`` when called, then raises."""

    def wire(*args: object, **kwargs: object) -> object:
        tripped.append(label)
        raise ForbiddenCall(f"{label} is not allowed in this exercise")

    return wire


# Events of Python's audit hooks that an answer has no use for: loading a pickle, which
# imports and calls any function by its name, and running another program (a new process,
# or one in this process's place). Refused in each exercise's child before the answer's
# program runs, whatever route the program took there, which the static check cannot list
# (np.load with allow_pickle passed as **{...}, a library's own unpickler, found through a
# class's mro(); torch.utils.collect_env.run, which runs a shell command: a script that
# imports the package); an audit hook cannot be removed.
REFUSED_EVENTS = (
    "pickle.find_class",
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.spawn",
    "pty.spawn",
)
# ... and what runs a string as code, or starts a process, without such an event: typing's
# forward references and inspect's annotations evaluated (functools.singledispatch's
# register, or inspect.signature(..., eval_str=True) that torch.cuda.memory holds, evaluates
# the annotations of a class that dataclasses.make_dataclass or typing.NamedTuple made from
# strings), the function under subprocess that starts a process, and a dataclass's field
# with a dunder name: its generated methods read that attribute by the name, written in a
# string (make_dataclass's fields), where the static check sees no dunder; __eq__ handed
# the builtins that functools.update_wrapper had copied from a module, by name too; and
# functools.update_wrapper copying other attributes than its defaults, or a module's (its
# __dict__, builtins and all: a learner's __setstate__ got them from copy.copy). Tripwires
# before the program runs, wherever a module holds the function; inspect.get_annotations only
# when asked to evaluate (eval_str=True), since inspect.signature calls it for every
# signature, a field only with a dunder name (or no plain name), update_wrapper only for
# those copies; and dataclasses' processing of a class whose bases' fields are no plain Field
# objects with plain names (a Field's name can be set after its class was made, and a
# subclass's generated __eq__ then ran "a if 0 else exec(...)"). And
# enum.global_enum, which writes an enum's members into the module that its __module__ names,
# any module (the functional API takes module=...): into the grader's own, a member with a
# __call__ in place of a function that the grader calls (its tripwires', its guard's watch).
CODE_ROUTES = (
    "typing.get_type_hints",
    "typing.ForwardRef._evaluate",
    "inspect.get_annotations",
    "dataclasses._get_field",
    "dataclasses._process_class",
    "functools.update_wrapper",
    "enum.global_enum",
    "_posixsubprocess.fork_exec",
    "subprocess._fork_exec",
)


def _wire_watch_hooks(tripped: list[str]) -> None:
    for label in WATCH_HOOKS:
        setattr(sys, label.removeprefix("sys."), _tripwire(label, tripped))


def _wire_code_routes(tripped: list[str]) -> None:
    """Refuse :data:`REFUSED_EVENTS` with an audit hook, and replace each of
    :data:`CODE_ROUTES` (those of them that this Python has) by a tripwire; both record what
    was refused in ``tripped``, then raise."""
    refused = frozenset(REFUSED_EVENTS)

    def hook(event: str, args: tuple) -> None:
        if event in refused:
            tripped.append(event)
            raise ForbiddenCall(f"{event} is not allowed in an answer")

    sys.addaudithook(hook)
    wired: dict[int, tuple[Any, Any]] = {}  # id of the function replaced -> it, its wire
    for label in CODE_ROUTES:
        owner_path, attr = label.rsplit(".", 1)
        top, *rest = owner_path.split(".")
        owner = sys.modules.get(top)
        for part in rest:  # typing.ForwardRef
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, attr):
            original, wire = getattr(owner, attr), _tripwire(label, tripped)
            if label == "inspect.get_annotations":
                wire = _unless_evaluated(original, wire)
            elif label == "dataclasses._get_field":
                wire = _unless_dunder(original, wire)
            elif label == "dataclasses._process_class":
                wire = _only_plain_fields(original, wire)
            elif label == "functools.update_wrapper":
                wire = _only_what_wraps_copies(original, wire)
            setattr(owner, attr, wire)
            wired[id(original)] = (original, wire)  # kept alive: its id stays its own
    # ... under every other name that a loaded module holds it by (from typing import ...)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            original, wire = wired.get(id(value), (None, None))
            if value is original:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(module, name, wire)


def _only_what_wraps_copies(update_wrapper: Any, wire: Any) -> Any:
    """functools.update_wrapper, but ``wire`` when asked to copy other attributes than its
    own defaults, or to copy a module's (whose __dict__ holds its __builtins__)."""
    import functools
    from types import ModuleType

    usual = (frozenset(functools.WRAPPER_ASSIGNMENTS), frozenset(functools.WRAPPER_UPDATES))

    def update(
        wrapper: Any,
        wrapped: Any,
        assigned: Any = functools.WRAPPER_ASSIGNMENTS,
        updated: Any = functools.WRAPPER_UPDATES,
    ) -> Any:
        assigned, updated = tuple(assigned), tuple(updated)
        other = not set(assigned) <= usual[0] or not set(updated) <= usual[1]
        if other or isinstance(wrapped, ModuleType):
            return wire()
        return update_wrapper(wrapper, wrapped, assigned, updated)

    return update


def _plain_field_name(name: object) -> bool:
    """A name that dataclasses may write into the code it generates: an identifier, not a
    keyword, not a dunder."""
    import keyword

    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        return False
    return not (name.startswith("__") and name.endswith("__"))


def _unless_dunder(get_field: Any, wire: Any) -> Any:
    """dataclasses' _get_field, but ``wire`` for a field whose name is a dunder or no plain
    name (an annotation's key, from type(name, bases, {...}) say), or that comes back as
    another object than a plain Field (a subclass's name may change after it is read)."""
    import dataclasses

    def field(cls: type, name: str, *args: Any) -> Any:
        if not _plain_field_name(name):
            return wire()
        made = get_field(cls, name, *args)
        return made if type(made) is dataclasses.Field else wire()

    return field


def _only_plain_fields(process_class: Any, wire: Any) -> Any:
    """dataclasses' _process_class, but ``wire`` for a class whose bases' fields are not plain
    Field objects with plain names (:func:`_plain_field_name`): a Field's name can be set
    after its class was made (dataclasses.fields(Base)[0].name = "a if 0 else exec(...)"),
    and a subclass's generated methods hold its bases' field names as code; nor may any class
    of its MRO have a metaclass that decides what its __dataclass_fields__ are when read."""
    import dataclasses
    import enum

    hooks = {"__getattribute__", "__getattr__", "__dataclass_fields__"}
    known = (type, object, enum.EnumType)  # enum's __getattr__ (3.11) refuses dunder names

    def process(cls: type, *args: Any, **kwargs: Any) -> Any:
        for base in cls.__mro__:
            meta = [m for m in type(base).__mro__ if m not in known]
            if any(hooks & set(vars(m)) for m in meta):
                return wire()
        for base in cls.__mro__[1:]:
            fields = getattr(base, "__dataclass_fields__", None)
            if fields is None:
                continue
            if type(fields) is not dict:
                return wire()
            for key, field in fields.items():
                plain = type(field) is dataclasses.Field and _plain_field_name(field.name)
                if not plain or field.name != key:
                    return wire()
        return process_class(cls, *args, **kwargs)

    return process


def _unless_evaluated(get_annotations: Any, wire: Any) -> Any:
    """inspect.get_annotations, but ``wire`` when asked to evaluate them (``eval_str``)."""

    def annotations(obj: object, *, eval_str: bool = False, **kwargs: Any) -> Any:
        return wire() if eval_str else get_annotations(obj, **kwargs)

    return annotations


def _install_tripwires(exercise: str, tripped: list[str]) -> None:
    """Replace every library equivalent of ``exercise`` (a function, method or class of that
    name in torch, NumPy, SciPy, scikit-learn, math or attnbook, loaded by then) and starting
    a thread by a tripwire. The rest of the package stays: a case's inputs may be package
    objects (chapter 9's block gets attnbook's attention as its sub-layer); the answer's own
    code may not import attnbook at all (:mod:`attnbook.exercises.extract`)."""
    import threading

    from attnbook.exercises.extract import LIBRARY_EQUIVALENTS

    names = LIBRARY_EQUIVALENTS.get(exercise, frozenset()) | {exercise}
    roots = ("torch", "numpy", "scipy", "sklearn", "attnbook", "math")
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in roots:
            continue
        for attr in [a for a in vars(module) if a in names]:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(module, attr, _tripwire(f"{module_name}.{attr}", tripped))
    import torch

    for attr in names:
        if hasattr(torch.Tensor, attr):
            setattr(torch.Tensor, attr, _tripwire(f"torch.Tensor.{attr}", tripped))
    threading.Thread.start = _tripwire("threading.Thread.start", tripped)  # type: ignore[method-assign]


# The modules whose attributes the grader's own code reads after the answer ran (the checkers'
# guards' isinstance(result, torch.Tensor), the conversion of a result into arrays): an answer
# that rebinds one (t = torch; t.Tensor = ..., which no static reading can tell from an
# attribute of the learner's own object) would change what the grader checks.
_READ_BY_THE_GRADER = ("torch", "torch.autograd", "numpy")
# ... and those that write the results (np.savez, json.dumps and Path.write_text, taken before
# the answer runs, call them): every attribute of theirs, private ones too (a function of the
# answer's may set self._x on a module handed to it), and of the classes they define. An
# answer that rebound np.lib.format.write_array wrote, after its cases, results of its own.
_WRITE_THE_RESULTS = (
    "numpy.lib.format",
    "numpy.lib._format_impl",
    "numpy.lib._npyio_impl",
    "zipfile",
    "json",
    "json.encoder",
    "pathlib",
    "os",
    "posixpath",
)


def _library_attributes() -> dict[tuple[str, str], tuple[Any, object]]:
    """Each attribute of :data:`_READ_BY_THE_GRADER` (public) and of
    :data:`_WRITE_THE_RESULTS` (all, and their classes'): (owner's name, attribute's name) ->
    (owner, value)."""
    found: dict[tuple[str, str], tuple[Any, object]] = {}
    for name in _READ_BY_THE_GRADER + _WRITE_THE_RESULTS:
        module = sys.modules.get(name)
        if module is None:
            continue
        owners = [(name, module)]
        if name in _WRITE_THE_RESULTS:
            owners += [
                (f"{name}.{value.__name__}", value)
                for value in list(vars(module).values())
                if isinstance(value, type) and value.__module__ == name
            ]
        for label, owner in owners:
            for key, value in list(vars(owner).items()):
                if name in _WRITE_THE_RESULTS or not key.startswith("_"):
                    found[label, key] = (owner, value)
    return found


def _rebound(before: dict[tuple[str, str], tuple[Any, object]]) -> list[str]:
    """The attributes of ``before`` that are now another object or gone ("torch.Tensor"); an
    attribute added since (a submodule imported) is not a change."""
    missing = object()
    return [
        f"{label}.{key}"
        for (label, key), (owner, value) in before.items()
        if vars(owner).get(key, missing) is not value
    ]


def _restore(before: dict[tuple[str, str], tuple[Any, object]]) -> list[str]:
    """Put back each attribute of ``before`` that was rebound (:func:`_rebound`); return them."""
    changed = _rebound(before)
    for label, key in [tuple(c.rsplit(".", 1)) for c in changed]:
        owner, value = before[label, key]
        with contextlib.suppress(Exception):
            setattr(owner, key, value)
    return changed


def _rebinding(attribute: str) -> str:
    """What an answer that rebound ``attribute`` is told."""
    return (
        f"changes {attribute}, which the grader's own code reads (a library's attribute): an "
        "answer computes with the libraries, it does not change them"
    )


def _running_processes() -> list[int]:
    """The processes that ``/proc`` lists (inside the sandbox: its own), less the zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):  # ended meanwhile
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry))
    return found


def _in_bubblewraps_pid_namespace() -> bool:
    """Whether this process runs in a PID namespace of bubblewrap's own, where bubblewrap is
    process 1 (outside one, process 1 is the machine's init): only there may
    :func:`_end_other_processes` run, since every other process there is the sandbox's."""
    try:
        return Path("/proc/1/comm").read_text().strip() == "bwrap"
    except OSError:
        return False


def _end_other_processes(keep: set[int], wait_s: float = 10.0) -> None:
    """Kill every process of the sandbox but its first (bubblewrap's, pid 1) and ``keep``, and
    wait until none of them runs: none can then write a file. Only inside the sandbox, whose
    PID namespace holds nothing else.

    A process that an answer started outlives the answer's own: it could write the
    answer's results after they were written, or ``ended.json`` after the evaluation wrote
    it, and the grader would read its files (a wrong answer that passes, a message of its
    choosing). The supervising process outside the sandbox cannot write those records: it
    sees only how the whole sandbox ended, not each exercise's child.

    Raises:
        RuntimeError: one still runs after ``wait_s`` seconds (the evaluation then fails,
            and the grader keeps no result).
    """
    deadline = time.monotonic() + wait_s
    while others := [pid for pid in _running_processes() if pid != 1 and pid not in keep]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(others)} process(es) an answer started did not end")
        for pid in others:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


class _DropAnnotations(ast.NodeTransformer):
    """Every annotation of a program made ``None``: a string (or a name bound to one) in an
    annotation is code that ``typing.get_type_hints`` runs, and ``functools.singledispatch``
    calls it when the program is defined, before the tripwires are set."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        return self.generic_visit(node)  # type: ignore[return-value]

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AsyncFunctionDef:
        node.returns = None
        return self.generic_visit(node)  # type: ignore[return-value]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AnnAssign:
        node.annotation = ast.Constant(None)  # a dataclass's field keeps its place
        return self.generic_visit(node)  # type: ignore[return-value]


def _without_annotations(tree: ast.Module) -> ast.Module:
    """The program with every annotation ``None`` (see :class:`_DropAnnotations`): no answer
    needs one to compute, and none can then run as code."""
    return ast.fix_missing_locations(_DropAnnotations().visit(tree))


def _stand_in(*args: object) -> object:
    """The answer that the checker's settings are taken with before the answer's own program
    runs (:func:`_evaluate_one`); never called."""
    raise NotImplementedError


def _evaluate_one(folder: Path, job: dict, alone: bool = False) -> None:
    """In a forked child: run one exercise's program and cases, write its results; with
    ``alone`` (in the sandbox), after ending every process the answer started."""
    import numpy as np

    import attnbook.exercises as checkers
    from attnbook.exercises._framework import (
        RefusedResult,
        changed_inputs,
        checker_spec,
        gradient_problem,
        prime_reference,
        seeded_args,
        share_primed,
        snapshot,
    )

    name = job["exercise"]
    report: dict[str, Any] = {"exercise": name, "cases": [], "tripped": []}
    arrays: dict[str, Any] = {}

    # The writers, taken before the answer runs: an answer that replaces np.savez or
    # json.dumps changes nothing that is written here.
    savez, dumps = np.savez, json.dumps

    def write() -> None:
        # Nothing of the answer's runs from here on (no collection, so no finalizer of its
        # objects), and what writes the results is put back as it was before the answer ran.
        gc.disable()
        changed = _restore(library)
        cases = report["cases"]
        if changed and cases and not cases[-1].get("misuse"):
            cases[-1]["misuse"] = _rebinding(changed[0])
        elif changed and not cases and not report.get("setup"):
            report["setup"] = _rebinding(changed[0])
        if alone:  # no process of the answer's is left to write over what this writes
            _end_other_processes({os.getpid(), os.getppid()})
        savez(folder / "out" / f"{name}.npz", **arrays)
        (folder / "out" / f"{name}.json").write_text(dumps(report), encoding="utf-8")

    namespace: dict[str, Any] = {"__name__": "__main__"}
    tripped: list[str] = report["tripped"]
    _wire_watch_hooks(tripped)
    _wire_code_routes(tripped)
    library = _library_attributes()
    check = getattr(checkers, f"check_{name}")
    # The cases' inputs, and the reference's results and gradients on them, before the
    # answer's program runs: what it does when it is defined (a forward hook on every
    # module, say) could change the reference's computation here, where the grader's own
    # comparison of values does not see it, and an answer computed outside autograd would
    # then be compared with nothing.
    try:
        stand_in = checker_spec(check, _stand_in)
        cases = [
            args if args is not None else seeded_args(stand_in.cases[i], job["seeds"][i], stand_in)
            for i, args in enumerate(job["args"])
        ]
        for args in cases:
            prime_reference(stand_in.learner_fn, args)
    except BaseException as exc:
        report["setup"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        return write()
    try:
        program = _without_annotations(ast.parse(job["program"]))
        # dont_inherit: not this module's `from __future__ import annotations`
        exec(compile(program, f"<{name}>", "exec", dont_inherit=True), namespace)
        answer = namespace["__attnbook_answer__"]
        spec = checker_spec(check, answer)
    except NotImplementedError:
        report["setup"] = "not_attempted"
        return write()
    except BaseException as exc:
        report["setup"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        return write()
    share_primed(stand_in.learner_fn, spec.learner_fn)
    rebound = _rebound(library)  # while the answer was defined, before the tripwires
    _install_tripwires(name, tripped)
    library = _library_attributes()
    for i, args in enumerate(cases):
        entry: dict[str, Any] = {}
        before = snapshot(args)
        converted: list[tuple[str, list[Any]]] = []

        def run(a: tuple = args, into: list = converted) -> object:
            # The result is made plain arrays here, inside the guard's watch: what converts
            # it may be the answer's own code (an __array__, a list's __iter__, a tensor
            # subclass's numpy), and it would otherwise run unwatched (a Python loop, say).
            value = spec.learner_fn(*a)
            into.append(_to_arrays(value))
            return value

        try:
            with np.errstate(all="ignore"):
                if spec.guard is None:
                    run()
                    misuse = None
                else:
                    misuse = spec.guard(run)[1]
            misuse = misuse or changed_inputs(spec.learner_fn, before, args)
            rebound = rebound or _rebound(library)
            if rebound and not misuse:
                misuse = _rebinding(rebound[0])
            if not converted:
                raise RuntimeError("the answer's result was not converted")
            kind, parts = converted[0]
            entry |= {"kind": kind, "n": len(parts), "misuse": misuse}
            gradient = gradient_problem(spec.learner_fn)
            if gradient is not None:  # told by the grader once every case's values pass
                entry["gradient"] = gradient
            for j, part in enumerate(parts):
                arrays[f"c{i}_{j}"] = part
        except NotImplementedError:
            entry = {"kind": "not_attempted"}
        except RefusedResult as exc:  # the checker's wrapper refused what the answer returned
            entry = {"kind": "refused", "message": str(exc)[:500]}
        except BaseException as exc:
            entry = {"kind": "raised", "message": f"{type(exc).__name__}: {str(exc)[:500]}"}
        report["cases"].append(entry)
        if (entry["kind"] != "value" and entry["kind"] != "tuple") or entry.get("misuse"):
            break
    return write()


def _evaluate(folder: Path, timeout: float) -> None:
    """Run every job of ``job.pkl``, each in a forked child with ``timeout`` seconds."""
    import attnbook.exercises  # noqa: F401 - import torch and the checkers once, before forking

    jobs = pickle.loads((folder / "job.pkl").read_bytes())  # written by the grader, trusted
    out = folder / "out"
    out.mkdir(exist_ok=True)
    # Each child's two files, read as soon as it ended well. A child can write any file of
    # out/: another exercise's results, or its own before it hangs or crashes. So only what a
    # child that finished wrote for its own exercise is kept, and written back at the end,
    # when no child is left. In the sandbox, no process that an answer started is left
    # either: each child ends them before it writes its results, and this process after
    # each child, before it reads them (a child stopped at the time limit ends none).
    # In the sandbox only: without it, the other processes are the machine's.
    alone = str(folder) == INSIDE and _in_bubblewraps_pid_namespace()
    kept: dict[str, bytes] = {}
    ended: dict[str, dict[str, Any]] = {}
    for job in jobs:
        # The child tells, through a pipe, what failed in the grader's own code around the
        # answer (writing its results: a file too large, no memory left).
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            code = 0
            try:
                _evaluate_one(folder, job, alone)
            except BaseException as exc:
                code = 1
                with contextlib.suppress(BaseException):
                    os.write(writer, f"{type(exc).__name__}: {exc}"[:300].encode())
            os._exit(code)
        os.close(writer)
        deadline, status = time.monotonic() + timeout, None
        while status is None:
            done, exit_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = exit_status
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -1
            else:
                time.sleep(0.02)
        if alone:
            _end_other_processes({os.getpid()})
        os.set_blocking(reader, False)
        try:
            error = os.read(reader, 400).decode("utf-8", errors="replace")
        except OSError:  # nothing written (a process the answer started may hold the pipe)
            error = ""
        os.close(reader)
        how: dict[str, Any] = {"how": "finished"}
        if status == -1:
            how = {"how": "timeout", "seconds": timeout}
        elif os.WIFSIGNALED(status):
            how = {"how": "signal", "signal": os.WTERMSIG(status)}
        elif os.WEXITSTATUS(status) != 0:
            how = {"how": "exit", "code": os.WEXITSTATUS(status), "error": error}
        else:
            for name in (f"{job['exercise']}.npz", f"{job['exercise']}.json"):
                path = out / name
                with contextlib.suppress(OSError):
                    plain = path.is_file() and not path.is_symlink()
                    if plain and path.stat().st_size <= MAX_RESULT_BYTES:
                        kept[name] = path.read_bytes()
                    elif plain:
                        how = {"how": "too_large", "bytes": path.stat().st_size}
        ended[job["exercise"]] = how
    # In the sandbox, out/ is a file system of its own and each result file is the grader's
    # file on disk: none of them can be removed or renamed, each is rewritten. Without the
    # sandbox, a child may have replaced out/ or its files by links. Anything else goes.
    # If this fails, the evaluation fails: the grader keeps no result.
    results = {f"{job['exercise']}.{ext}" for job in jobs for ext in ("npz", "json")} | {ENDED}
    kept[ENDED] = json.dumps(ended).encode()
    if out.is_symlink() or not out.is_dir():
        out.unlink()
        out.mkdir()
    for path in list(out.iterdir()):
        if path.name in results and path.is_file() and not path.is_symlink():
            path.write_bytes(b"")  # a child's, until what was kept is written below
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    for name in results:
        if name in kept:
            (out / name).write_bytes(kept[name])
        else:
            with contextlib.suppress(OSError):  # in the sandbox, it stays empty: no result
                (out / name).unlink()


def main(argv: list[str] | None = None) -> int:
    """``python -m attnbook.exercises.sandbox execute|evaluate FOLDER``: what runs inside."""
    task, folder = (argv or sys.argv[1:])[:2]
    settings = json.loads((Path(folder) / "settings.json").read_text(encoding="utf-8"))
    if task == "execute":
        _execute(Path(folder), float(settings["cell_timeout"]))
    elif task == "evaluate":
        _evaluate(Path(folder), float(settings["exercise_timeout"]))
    else:
        print(f"unknown task {task!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
