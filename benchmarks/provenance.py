"""Which code a benchmark ran from: the one commit helper every script records in its results."""

from __future__ import annotations

import subprocess
from pathlib import Path

# A run writes its own records there; a second pass over the same run must not call its code modified.
RESULTS_PATHSPEC = ":(exclude)benchmarks/results"


def git_revision(root: Path | None = None) -> str | None:
    """The commit the benchmark ran from, with ``+dirty`` when tracked code had changes (None outside git).

    Changes under ``benchmarks/results/`` are results, not code, and do not count.
    """
    root = root or Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                RESULTS_PATHSPEC], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")
