"""What changed between two libraries, matched by lesson id: added, removed and rewritten lessons.

A diff is for people (``str``) and for the run log (``to_dict``); `ExperienceLibrary.diff` makes one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfgrpo_dspy.library.file import Experience


@dataclass(frozen=True)
class LibraryDiff:
    """What changed between two libraries, matched by id."""

    added: tuple[Experience, ...] = ()
    removed: tuple[Experience, ...] = ()
    modified: tuple[tuple[Experience, Experience], ...] = ()
    unchanged: int = 0

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)

    def __str__(self) -> str:
        lines = [f"- [{e.label}] {e.text}" for e in self.removed]
        for old, new in self.modified:
            lines += [f"~ [{old.label}] {old.text}", f"  -> {new.text}"]
        lines += [f"+ [{e.label}] {e.text}" for e in self.added]
        lines.append(
            f"({len(self.added)} added, {len(self.removed)} removed, "
            f"{len(self.modified)} modified, {self.unchanged} unchanged)"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "added": [e.to_dict() for e in self.added],
            "removed": [e.to_dict() for e in self.removed],
            "modified": [{"old": o.to_dict(), "new": n.to_dict()} for o, n in self.modified],
            "unchanged": self.unchanged,
        }

    @classmethod
    def between(cls, old: Sequence[Experience], new: Sequence[Experience]) -> LibraryDiff:
        """What changed going from the lessons ``old`` to the lessons ``new``."""
        mine = {e.id: e for e in old}
        theirs = {e.id: e for e in new}
        return cls(
            added=tuple(e for e in new if e.id not in mine),
            removed=tuple(e for e in old if e.id not in theirs),
            modified=tuple(
                (mine[i], theirs[i]) for i in mine if i in theirs and mine[i].text != theirs[i].text
            ),
            unchanged=sum(1 for i in mine if i in theirs and mine[i].text == theirs[i].text),
        )
