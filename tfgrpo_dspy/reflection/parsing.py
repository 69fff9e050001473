"""Reading a reflection's answer: lesson ids that exist in the library, lesson lines in the 'When ..., ...' form.

A model writes ids as 3, "E3" or "[E3]" and may number or bullet its lesson lines; what cannot be read is
returned (or dropped) here, never raised, so one malformed answer costs only itself.
"""

from __future__ import annotations

import re
from typing import Any

from tfgrpo_dspy.library.edits import EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary


def parse_ids(values: Any, library: ExperienceLibrary) -> list[int]:
    """The lesson ids in ``values`` (3, "E3", "[E3]") that exist in ``library``, in order, once each."""
    ids = []
    for value in values or []:
        try:
            parsed = EditOp(op="delete", id=value).id
        except ValueError:
            continue
        if parsed in library and parsed not in ids:
            ids.append(parsed)
    return ids


# One lesson line of `ExtractLessonLines`: "When <condition>, <action>." with an optional "(replaces E3)",
# after any list bullet or number the model puts before it.
_LESSON_LINE = re.compile(r"^(?:[-*\u2022]|\d+[.)])?\s*when\s+(?P<condition>.+?),\s*(?P<action>.+?)\s*"
                          r"(?:\(\s*replaces\s+\[?(?P<replaces>E?\d+)\]?\s*\)\s*)?\.?$", re.IGNORECASE)
_NO_LESSON = {"", "none", "none.", "[]", "n/a"}


def parse_lesson_lines(text: str) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """The (condition, action, replaced id) of each 'When <condition>, <action>.' line, and the lines that
    are not of that form (the word none and blank lines are neither)."""
    lessons, unparsed = [], []
    for line in text.splitlines():
        line = line.strip()
        if line.lower() in _NO_LESSON:
            continue
        match = _LESSON_LINE.match(line)
        if match is None:
            unparsed.append(line)
        else:
            lessons.append((match["condition"].strip(), match["action"].strip().rstrip("."), match["replaces"]))
    return lessons, unparsed

