"""The book's tools: build the student edition, keep the instructor guide in sync, draw figures.

Run one from the repository root as a module, e.g. `python -m tools.make_student`
(the Makefile does). Tests import them: `from tools import make_student`.
"""
