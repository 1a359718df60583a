"""What every test shares: under pytest-xdist, the workers share the cores out, and the
longest modules start first.

The unit step runs two workers side by side (``-n 2``) on the 2-core machine of CI. Each
worker's PyTorch started one thread per core, and OpenMP's idle threads spin-wait: four busy
threads on two cores. Two copies of test_kv_cache's generation tests side by side took 11.5 s
and 16.8 s each that way, 2.7 s and 2.9 s with one thread each (OMP_NUM_THREADS=1), 3.7 s
and 4.6 s with passive waiting alone. So each worker gets its share of the cores, and idle
threads sleep: what tools/learner_path.py's threads_env gives chapters run side by side.

Set here, before any test module imports torch (OpenMP reads these when it loads); a value
already in the environment is kept. Subprocesses the tests start (kernels, the grader's
sandbox, torchrun) inherit it, as they should: they run beside the other worker too.
"""

from __future__ import annotations

import os

_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    _threads = str(max(1, (os.cpu_count() or 1) // _workers))
    for _key, _value in (
        ("OMP_NUM_THREADS", _threads),
        ("MKL_NUM_THREADS", _threads),
        ("OMP_WAIT_POLICY", "PASSIVE"),
    ):
        os.environ.setdefault(_key, _value)

# With `--dist loadscope --no-loadscope-reorder` (the unit step) the workers take the modules in
# the order collected: these first, longest first (seconds of test time on the 2-core machine),
# so that the grader's module does not start late and end alone while the other worker idles.
LONGEST_FIRST = (
    "tests/exercises/test_grade.py",  # 143 s: notebooks graded in sandboxes
    "tests/learner/test_learner_path.py",  # 50 s
    "tests/exercises/test_grade_draws.py",  # 26 s
    "tests/package/test_distributed.py",  # 25 s
)


def pytest_collection_modifyitems(items: list) -> None:
    if _workers > 1:
        rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
