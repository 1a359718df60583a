"""``python -m attnbook.grade ...``: runs the grader, :mod:`attnbook.exercises.grade`.

The grader lives beside the exercises whose verdicts it collects; this file
keeps the short command working. It imports nothing (the package's layers
stay as they are: nothing outside ``attnbook.exercises`` imports it) and
only runs that module as the main program.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("attnbook.exercises.grade", run_name="__main__", alter_sys=True)
