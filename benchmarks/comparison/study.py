"""A study's result files: where they go, what they were measured under, and how they are written.

Every study beside compare.py writes ``results/<stem>.json`` (its report, with a ``setup`` record) and
``results/<stem>.md`` (its tables), and prints the markdown. Absolute times on this machine vary up to 5x
between days, so the setup keeps the commit, the day, the model's speed and the load average beside the
figures, and every markdown opens with the sentence `setup_sentence` writes from it.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provenance import git_revision

from tfgrpo_dspy.library.jsonio import write_json_atomic

RESULTS = Path(__file__).resolve().parent.parent / "results"
NOT_MEASURED = "not measured (not the embedded model)"


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded: how busy the machine was besides the study."""
    return [round(x, 2) for x in os.getloadavg()]


def study_setup(speed: Any, *, argv: bool = True, unmeasured: str | None = None, **fields: Any) -> dict[str, Any]:
    """The setup record at a study's start: commit, date, (the command's arguments), the model's speed (``speed``,
    `tfgrpo_dspy.demo.machine_speed`'s answer, or ``unmeasured`` when there is none), the study's own ``fields``,
    then the load average. ``load_average_at_end`` is added by the study when it finishes."""
    setup: dict[str, Any] = {"commit": git_revision(), "date": time.strftime("%Y-%m-%d")}
    if argv:
        setup["argv"] = sys.argv[1:]
    setup.update(speed=str(speed) if speed else unmeasured, speed_at_start=asdict(speed) if speed else None,
                 **fields)
    setup["load_average_at_start"] = load_average()
    return setup


def setup_sentence(setup: dict[str, Any]) -> str:
    """"Commit X, date; machine at the start: ...; load average ... at the start, ... at the end" (no full stop:
    a study may go on with its own conditions)."""
    return (f"Commit {setup['commit']}, {setup['date']}; machine at the start: {setup['speed']}; load average "
            f"{setup['load_average_at_start']} at the start, {setup.get('load_average_at_end')} at the end")


def write_study(path: Path, report: dict[str, Any], markdown: str) -> int:
    """``report`` as JSON at ``path`` (atomically) and ``markdown`` beside it (``.md``), printed; returns 0."""
    write_json_atomic(path, report)
    path.with_suffix(".md").write_text(markdown)
    print(markdown)
    return 0
