"""Tests of attnbook.runtime: seeding, device choice, print options, import hygiene, measuring."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import attnbook


def test_set_seed_makes_python_numpy_and_torch_repeat() -> None:
    def draw() -> tuple[float, float, float]:
        # NumPy's legacy global state: set_seed must seed it too
        numpy_draw = np.random.rand()  # noqa: NPY002
        return random.random(), numpy_draw, torch.rand(1).item()

    attnbook.set_seed(123)
    first = draw()
    attnbook.set_seed(123)
    again = draw()
    attnbook.set_seed(124)
    other = draw()
    for source, a, b, c in zip(("random", "numpy", "torch"), first, again, other, strict=True):
        assert a == b, f"{source} did not repeat"
        assert a != c, f"{source} did not change with the seed"


@pytest.mark.parametrize(
    ("seed", "match"),
    [
        (-1, r"in \[0, 4294967295\] \(below 2\*\*32"),
        (2**32, r"in \[0, 4294967295\] \(below 2\*\*32"),
        (1.5, "must be an int"),
        (True, "must be an int"),
    ],
)
def test_set_seed_rejects_bad_seeds(seed: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        attnbook.set_seed(seed)  # type: ignore[arg-type]


def test_get_device_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNBOOK_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert attnbook.get_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert attnbook.get_device() == torch.device("cuda")
    monkeypatch.setenv("ATTNBOOK_DEVICE", "")  # empty: as if unset
    assert attnbook.get_device() == torch.device("cuda")


def test_get_device_chooses_mps_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNBOOK_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert attnbook.get_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # CUDA first
    assert attnbook.get_device() == torch.device("cuda")


def test_attnbook_device_overrides_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the notebook tools set: stored outputs are the CPU's, on a machine with a GPU too.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setenv("ATTNBOOK_DEVICE", "cpu")
    assert attnbook.get_device() == torch.device("cpu")


def test_attnbook_device_must_name_a_device_this_machine_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setenv("ATTNBOOK_DEVICE", "gpu")
    with pytest.raises(ValueError, match=r"ATTNBOOK_DEVICE must be a device such as 'cpu'"):
        attnbook.get_device()
    for name in ("cuda", "mps"):
        monkeypatch.setenv("ATTNBOOK_DEVICE", name)
        with pytest.raises(ValueError, match=rf"ATTNBOOK_DEVICE='{name}' asks for .* unset it"):
            attnbook.get_device()


def test_print_options_round_numbers() -> None:
    old_np, old_torch = np.get_printoptions(), torch._tensor_str.PRINT_OPTS.precision
    try:
        attnbook.set_print_options(3)
        assert repr(np.array([1 / 3])) == "array([0.333])"
        assert "0.333" in repr(torch.tensor([1 / 3]))
        # small next to large numbers: fixed-point, not scientific notation, in both libraries
        assert "e" not in repr(np.array([1e-5, 123.0])).removeprefix("array")
        assert "e" not in repr(torch.tensor([1e-5, 123.0])).removeprefix("tensor")
        with pytest.raises(ValueError, match=r"precision must be an int in \[1, 16\]"):
            attnbook.set_print_options(0)
    finally:
        np.set_printoptions(**old_np)
        torch.set_printoptions(precision=old_torch)


def test_import_has_no_side_effects() -> None:
    code = (
        "import sys, numpy as np, torch, random\n"
        "before = (np.get_printoptions()['precision'], torch.initial_seed())\n"
        "import attnbook, attnbook.exercises, attnbook.viz\n"
        "after = (np.get_printoptions()['precision'], torch.initial_seed())\n"
        "assert before == after, (before, after)\n"
        "import matplotlib\n"
        "assert matplotlib.rcParams['figure.dpi'] == matplotlib.rcParamsDefault['figure.dpi']\n"
        "assert 'matplotlib.pyplot' not in sys.modules or not __import__('matplotlib.pyplot').pyplot.get_fignums()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_is_light() -> None:
    """``import attnbook`` loads neither pyplot, transformers nor plotly (nor the module that
    uses it); ``attnbook.plot_history`` loads pyplot."""
    code = (
        "import sys, attnbook\n"
        "heavy = ('matplotlib.pyplot', 'transformers', 'plotly', 'attnbook.interactive')\n"
        "assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]\n"
        "attnbook.plot_history\n"
        "assert 'matplotlib.pyplot' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- measuring


def test_seconds_per_call_is_the_fastest_timed_call_after_a_warm_up() -> None:
    calls = []
    pauses = iter([0.0, 0.2, 0.05, 0.1])  # the warm-up call, then three timed ones

    def fn() -> None:
        calls.append(1)
        time.sleep(next(pauses))

    seconds = attnbook.runtime.seconds_per_call(fn, repeats=3, device="cpu")
    assert len(calls) == 4
    assert 0.05 <= seconds < 0.1  # the fastest timed call, not the warm-up's 0 s
    with pytest.raises(ValueError, match="repeats"):
        attnbook.runtime.seconds_per_call(fn, repeats=0)
    with pytest.raises(ValueError, match="fn"):
        attnbook.runtime.seconds_per_call(1.0)  # type: ignore[arg-type]


def test_seconds_per_call_synchronizes_around_each_timed_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a GPU the clock must start after the queued work is done and stop after fn's own
    work is: synchronize, fn, synchronize, on get_device() when no device is given."""
    events = []
    monkeypatch.setattr(attnbook.runtime, "synchronize", lambda d: events.append(("sync", d)))
    monkeypatch.setattr(attnbook.runtime, "get_device", lambda: torch.device("cuda"))
    attnbook.runtime.seconds_per_call(lambda: events.append("fn"), repeats=2)
    cuda = ("sync", torch.device("cuda"))
    assert events == ["fn", cuda, "fn", cuda, cuda, "fn", cuda]


@pytest.mark.parametrize("kind", ["cuda", "mps"])
def test_synchronize_waits_for_a_gpu(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    waited = []
    monkeypatch.setattr(attnbook.runtime, "check_device", lambda d, *a, **k: torch.device(d))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: waited.append(("cuda", d)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waited.append(("mps", None)))
    attnbook.runtime.synchronize(kind)
    assert waited == [(kind, torch.device("cuda") if kind == "cuda" else None)]
    attnbook.runtime.synchronize("cpu")  # nothing to wait for
    assert len(waited) == 1


def test_op_recorder_sees_the_operations_and_the_largest_new_result() -> None:
    q, k = torch.randn(2, 1, 2, 64, 8).unbind(0)  # (B, H, T, d_k)
    with attnbook.runtime.OpRecorder() as recorder:
        scores = q @ k.transpose(-2, -1)  # (1, 2, 64, 64): the largest result
        weights = scores.softmax(dim=-1)
        weights.view(-1)  # a view allocates nothing
    assert {"bmm", "_softmax"} <= recorder.ops
    assert recorder.largest == 1 * 2 * 64 * 64 * 4
    calls = recorder.calls  # in order, with repeats: the scores' product comes before the softmax
    assert calls.index("bmm") < calls.index("_softmax")
    assert set(calls) == recorder.ops


def test_op_recorder_keeps_the_order_and_the_repeats() -> None:
    x = torch.randn(4, 4)
    with attnbook.runtime.OpRecorder() as recorder:
        y = x.exp()
        y = y * 2
        y.exp()
    assert recorder.calls == ["exp", "mul.Tensor", "exp"]
    assert recorder.ops == {"exp", "mul.Tensor"}


def test_largest_allocation_counts_results_not_inputs_or_views() -> None:
    x = torch.randn(256, 256)  # 256 KiB, made outside: not counted
    assert attnbook.runtime.largest_allocation(lambda: x.t()) == 0
    assert attnbook.runtime.largest_allocation(lambda: x[:8] * 2) == 8 * 256 * 4
    assert attnbook.runtime.largest_allocation(lambda: x.add_(1.0)) == 0  # in place: same memory
    buffer = torch.empty_like(x)
    assert attnbook.runtime.largest_allocation(lambda: torch.mul(x, 2, out=buffer)) == 0
    with pytest.raises(ValueError, match="fn"):
        attnbook.runtime.largest_allocation(None)  # type: ignore[arg-type]


def test_largest_allocation_counts_a_sparse_result_by_its_indices_and_values() -> None:
    eye = torch.eye(64)  # 64 non-zeros
    coo = attnbook.runtime.largest_allocation(eye.to_sparse)
    assert coo == 2 * 64 * 8 + 64 * 4  # int64 indices (2, 64) and float32 values (64,)
    sparse = eye.to_sparse()
    assert attnbook.runtime.largest_allocation(sparse.to_dense) == 64 * 64 * 4  # a sparse input
    assert attnbook.runtime.largest_allocation(lambda: sparse.coalesce()) == 0  # already is


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_largest_allocation_counts_a_csr_result_by_its_row_column_and_value_storages() -> None:
    csr = torch.eye(64).to_sparse_csr()  # 64 non-zeros
    # a copy: int64 row pointers (65,) and column indices (64,), float32 values (64,)
    assert attnbook.runtime.largest_allocation(csr.clone) == 65 * 8 + 64 * 8 + 64 * 4
    # an input's parts are not new: its values, or the same tensor scaled in place
    assert attnbook.runtime.largest_allocation(csr.values) == 0
    assert attnbook.runtime.largest_allocation(lambda: csr.mul_(2.0)) == 0
    assert attnbook.runtime.largest_allocation(csr.to_dense) == 64 * 64 * 4


@pytest.mark.parametrize("device", ["gpu", None, 3])
def test_synchronize_refuses_what_is_not_a_device(device: object) -> None:
    with pytest.raises(ValueError, match="device must be a device"):
        attnbook.runtime.synchronize(device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_timing_on_a_gpu_this_machine_lacks_says_so() -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        attnbook.runtime.synchronize("cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        attnbook.runtime.seconds_per_call(lambda: None, device="cuda")
