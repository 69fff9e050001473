"""What a library file holds and how it is read: every field checked, every problem one line that names the file
and the field.

This module knows nothing of `tfgrpo_dspy.library.library`, which imports it (one way): it reads a file's dict into
`LibraryContents`, from which `ExperienceLibrary.from_dict` builds the library. Reading is linear in the size of
the file, and a file with more lessons than its own ``max_experiences`` is refused before any lesson is read.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from tfgrpo_dspy.library.edits import AuditEntry

FORMAT_NAME = "tfgrpo-experience-library"
FORMAT_VERSION = 3  # 2 added per-lesson counters and sources, 3 the routes; older files still load
READABLE_VERSIONS = (1, 2, 3)
MAX_TEXT_CHARS = 2000  # a lesson is a sentence; anything longer in a file is not one
_AUDIT_STATUSES = ("applied", "refused")

logger = logging.getLogger(__name__)


class LibraryFileError(ValueError):
    """A library file or dict that is not a valid library; the message names the file and the field."""


def normalize_text(text: str) -> str:
    """One line, single spaces, no lone surrogates (an LM may write them; no prompt or file can hold them):
    what is rendered is exactly what is stored."""
    return " ".join(str(text).encode("utf-8", "replace").decode("utf-8").split())


def word_count(text: str) -> int:
    return len(text.split())


@dataclass(frozen=True)
class Experience:
    """One lesson. ``id`` is assigned once and never reused or renumbered.

    ``sources`` are the training example indices whose groups proposed it; ``uses`` counts the
    rollouts that applied it, ``helpful`` / ``harmful`` those of them that scored above / below
    their group's mean.
    """

    id: int
    text: str
    added_step: int | None = None
    updated_step: int | None = None
    sources: tuple[int, ...] = ()
    uses: int = 0
    helpful: int = 0
    harmful: int = 0

    @property
    def label(self) -> str:
        return f"E{self.id}"

    @property
    def record(self) -> str:
        """The counters as the update step reads them."""
        return f"used {self.uses}x, helpful {self.helpful}, harmful {self.harmful}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["sources"] = list(self.sources)
        return {key: value for key, value in data.items() if value not in (None, [])}


@dataclass(frozen=True)
class Route:
    """One training input and the lessons an input nearest to it is shown (none: it is shown no lesson).

    A library with routes shows each call the lessons of the route whose input is most like the call's
    (`tfgrpo_dspy.inference.retrieval`), instead of the lessons most like the input; see the setting
    ``route_by``."""

    input: str
    lessons: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input, "lessons": list(self.lessons)}


@dataclass(frozen=True)
class LibraryContents:
    """A checked library dict: what `ExperienceLibrary` is built from."""

    experiences: list[Experience]
    audit_log: list[AuditEntry]
    next_id: int
    max_experiences: int | None
    max_words: int | None
    routes: tuple[Route, ...] = ()


class LibraryReader:
    """Checks every field of a library dict, or raises one `LibraryFileError` line."""

    def __init__(self, origin: str):
        self.origin = origin

    def fail(self, where: str, problem: str) -> LibraryFileError:
        return LibraryFileError(f"{self.origin}: {where}: {problem}")

    def read(self, data: Any) -> LibraryContents:
        if not isinstance(data, dict) or ("format" not in data and not isinstance(data.get("experiences"), list)):
            raise LibraryFileError(f"{self.origin}: not an experience library: expected a JSON object with an "
                                   "'experiences' list")
        if data.get("format", FORMAT_NAME) != FORMAT_NAME:
            raise self.fail("format", f"not an experience library: format is {data.get('format')!r}")
        self.check_version(data)  # before any field whose meaning a version may change
        if not isinstance(data.get("experiences"), list):
            found = type(data["experiences"]).__name__ if "experiences" in data else "nothing"
            raise self.fail("experiences", f"must be a list of lessons, got {found}")
        caps = {name: self.optional_count(data, name) for name in ("max_experiences", "max_words")}
        cap, count = caps["max_experiences"], len(data["experiences"])
        if cap is not None and count > cap:  # before reading a single lesson: a huge file costs nothing
            raise self.fail("experiences", f"{count} lessons, more than the file's max_experiences={cap}; delete "
                            "lessons or raise max_experiences in the file")
        experiences = [self.experience(item, f"experiences[{i}]", caps["max_words"])
                       for i, item in enumerate(data["experiences"])]
        ids = Counter(e.id for e in experiences)
        duplicates = sorted(i for i, n in ids.items() if n > 1)
        if duplicates:
            raise self.fail("experiences", f"duplicate id(s) {duplicates}")
        largest = max(ids, default=0)
        next_id = data.get("next_id", largest + 1)
        if not _is_count(next_id) or next_id < 1:
            raise self.fail("next_id", f"must be a positive integer, got {next_id!r}")
        if ids and next_id <= largest:
            raise self.fail("next_id", f"{next_id} is not above the largest id {largest}")
        audit = data.get("audit_log", [])
        if not isinstance(audit, list):
            raise self.fail("audit_log", "must be a list of objects")
        entries = [self.audit_entry(entry, f"audit_log[{i}]") for i, entry in enumerate(audit)]
        routes = data.get("routes", [])
        if not isinstance(routes, list):
            raise self.fail("routes", "must be a list of objects")
        known = set(ids)
        read = tuple(self.route(route, f"routes[{i}]", known) for i, route in enumerate(routes))
        return LibraryContents(experiences, entries, next_id, **caps, routes=read)

    def check_version(self, data: dict[str, Any]) -> int:
        """The file's format version, if this release reads it; otherwise one line, before any other field is read
        (a field a newer release added, or changed the meaning of, would be silently dropped or misread)."""
        reads = ", ".join(map(str, READABLE_VERSIONS))
        if "version" not in data:
            # Every release, from the first (format 1), wrote "version": a file without one was not written by
            # tfgrpo-dspy, so its version is unknown, and unknown versions are refused.
            raise LibraryFileError(f"{self.origin}: has no format version, which every tfgrpo-dspy release writes "
                                   f"(this release reads {reads}); if you wrote the file by hand, add "
                                   f'"version": {FORMAT_VERSION}')
        version = data["version"]
        if not _is_count(version) or version not in READABLE_VERSIONS:  # not 2.0 nor true: no release wrote those
            newer = "; if a newer tfgrpo-dspy wrote it, upgrade to read it" if (
                _is_count(version) and version > FORMAT_VERSION) else ""
            shown = json.dumps(version, ensure_ascii=True, default=repr)  # as the file spells it: "2", 2.0, true
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise LibraryFileError(f"{self.origin}: format version {shown} is not one this release reads "
                                   f"(reads {reads}){newer}")
        if version == 1:
            # Version 2 added the counters and sources, which a version-1 lesson starts without. Version 2 needs no
            # migration: it is what this release still writes for a library without routes (version 3).
            logger.info("%s: format version 1 migrated to version 2 as it was read: its lessons start with no "
                        "sources and zero uses, helpful and harmful counts (the file is unchanged)", self.origin)
        return version

    def route(self, item: Any, where: str, known: set[int]) -> Route:
        if not isinstance(item, dict):
            raise self.fail(where, f"must be an object, got {type(item).__name__}")
        text = item.get("input")
        if not isinstance(text, str) or not text.strip():
            raise self.fail(f"{where}.input", f"must be a non-empty string, got {text!r}")
        lessons = item.get("lessons", [])
        if not isinstance(lessons, list) or not all(_is_count(i) for i in lessons):
            raise self.fail(f"{where}.lessons", f"must be a list of experience ids, got {lessons!r}")
        unknown = [i for i in lessons if i not in known]
        if unknown:
            raise self.fail(f"{where}.lessons", "unknown id(s) " + ", ".join(f"E{i}" for i in unknown))
        return Route(self.text(text, f"{where}.input"), tuple(lessons))

    def optional_count(self, data: dict[str, Any], name: str) -> int | None:
        value = data.get(name)
        if value is not None and (not _is_count(value) or value < 1):
            raise self.fail(name, f"must be a positive integer or null, got {value!r}")
        return value

    def text(self, value: Any, where: str) -> str:
        """A string that is valid Unicode: a lone surrogate (JSON allows the escape) cannot be printed or saved."""
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self.fail(where, f"holds a lone surrogate (\\u{ord(value[exc.start]):04x}) at character "
                            f"{exc.start}, which is not text; remove it") from None
        return value

    def experience(self, item: Any, where: str, max_words: int | None) -> Experience:
        if not isinstance(item, dict):
            raise self.fail(where, f"must be an object, got {type(item).__name__}")
        if "id" not in item:
            raise self.fail(where, "has no 'id'")
        if not _is_count(item["id"]) or item["id"] < 1:
            raise self.fail(f"{where}.id", f"must be a positive integer, got {item['id']!r}")
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            raise self.fail(f"{where}.text", f"must be a non-empty string, got {text!r}")
        text = normalize_text(self.text(text, f"{where}.text"))
        if len(text) > MAX_TEXT_CHARS:
            raise self.fail(f"{where}.text", f"has {len(text)} characters, over the {MAX_TEXT_CHARS}-character "
                            "limit of a lesson")
        if max_words is not None and word_count(text) > max_words:
            raise self.fail(f"{where}.text", f"has {word_count(text)} words, over max_words={max_words}")
        counts = {}
        for name in ("added_step", "updated_step", "uses", "helpful", "harmful"):
            value = item.get(name)
            if value is not None and (not _is_count(value) or value < 0):
                raise self.fail(f"{where}.{name}", f"must be a non-negative integer, got {value!r}")
            counts[name] = value
        sources = item.get("sources", [])
        if not isinstance(sources, list) or not all(_is_count(s) and s >= 0 for s in sources):
            raise self.fail(f"{where}.sources", f"must be a list of example indices, got {sources!r}")
        return Experience(id=item["id"], text=text, added_step=counts["added_step"],
                          updated_step=counts["updated_step"], sources=tuple(sources), uses=counts["uses"] or 0,
                          helpful=counts["helpful"] or 0, harmful=counts["harmful"] or 0)

    def audit_entry(self, entry: Any, where: str) -> AuditEntry:
        """One audit entry, every field of its type: `tfgrpo show --audit` prints them."""
        if not isinstance(entry, dict):
            raise self.fail(where, f"must be an object, got {type(entry).__name__}")
        step, status = entry.get("step"), entry.get("status")
        if step is not None and (not _is_count(step) or step < 0):
            raise self.fail(f"{where}.step", f"must be a step number or null, got {step!r}")
        if status not in _AUDIT_STATUSES:
            raise self.fail(f"{where}.status", f"must be 'applied' or 'refused', got {status!r}")
        for name, required in (("op", True), ("detail", True), ("text", False), ("reason", False)):
            value = entry.get(name)
            if value is None and not required:
                continue
            if not isinstance(value, str):
                raise self.fail(f"{where}.{name}", f"must be a string, got {value!r}")
            self.text(value, f"{where}.{name}")
        for name in ("id", "result_id"):
            value = entry.get(name)
            if value is not None and not _is_count(value):
                raise self.fail(f"{where}.{name}", f"must be an experience id or null, got {value!r}")
        ids = entry.get("ids")
        if ids is not None and not (isinstance(ids, list) and all(_is_count(i) for i in ids)):
            raise self.fail(f"{where}.ids", f"must be a list of experience ids or null, got {ids!r}")
        return AuditEntry.from_dict(entry)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
