"""attnbook: the companion package of *Attention, from scratch*.

Every chapter of the book imports what it needs from here. Importing the
package has no side effects: it plots nothing, trains nothing, downloads
nothing and seeds nothing.

Modules, named after the concept they hold (the chapter that introduces each
is in its docstring):

- :mod:`attnbook.runtime`: ``set_seed``, ``get_device``, ``set_print_options``
- :mod:`attnbook.scores`: dot products, cosine similarity, score matrices
- :mod:`attnbook.softmax`: a numerically stable softmax and its derivative
- :mod:`attnbook.viz`: the course's figures (heatmaps, bar charts)
- :mod:`attnbook.exercises`: checkers for the chapters' code exercises
"""

from importlib.metadata import version as _version

from attnbook.runtime import get_device, set_print_options, set_seed
from attnbook.scores import cosine_similarity, dot_product, score_matrix
from attnbook.softmax import log_softmax, softmax, softmax_jacobian

__version__ = _version("attnbook")

__all__ = [
    "cosine_similarity",
    "dot_product",
    "get_device",
    "log_softmax",
    "score_matrix",
    "set_print_options",
    "set_seed",
    "softmax",
    "softmax_jacobian",
]
