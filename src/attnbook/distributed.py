"""``python -m attnbook.distributed ...``: the same as ``python -m attnbook train ...``.

Kept so that commands written before the package had a ``train`` command
still run (also under ``torchrun -m attnbook.distributed``). The command line
is in :mod:`attnbook.__main__`; the data-parallel logic in
:mod:`attnbook.training`. This module is not imported by ``import attnbook``.
"""

from __future__ import annotations

from attnbook.__main__ import train_command

__all__ = ["train_command"]

if __name__ == "__main__":
    raise SystemExit(train_command())
