"""Shared by every test: the scripts of `tools/` import as modules (`import sync_repo_url`).

`tools/` is a folder of scripts, not a package; with it on `sys.path` each test
imports a tool by name, once, as the tools import each other.
"""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS = str(Path(__file__).resolve().parent.parent / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)
