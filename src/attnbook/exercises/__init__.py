"""Auto-checkers for the chapters' code exercises.

Each ``check_<name>(your_function)`` runs hidden cases against the package's
reference implementation and returns a short :class:`Verdict`. Display it (make
it the last line of a cell) to read it; it is truthy when every case passes.

This subpackage imports the rest of ``attnbook``; nothing imports it back.
"""

from attnbook.exercises._framework import Verdict
from attnbook.exercises.scores import check_cosine_similarity, check_score_matrix
from attnbook.exercises.softmax import check_softmax, check_softmax_temperature

__all__ = [
    "Verdict",
    "check_cosine_similarity",
    "check_score_matrix",
    "check_softmax",
    "check_softmax_temperature",
]
