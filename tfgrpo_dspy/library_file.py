"""Reading a library file: every field checked, every problem one line that names the file and the field."""

from __future__ import annotations

from typing import Any

from tfgrpo_dspy.edits import AuditEntry
from tfgrpo_dspy.library import (
    FORMAT_NAME,
    MAX_TEXT_CHARS,
    READABLE_VERSIONS,
    Experience,
    ExperienceLibrary,
    LibraryFileError,
    normalize_text,
    word_count,
)


class LibraryReader:
    """Checks every field of a library dict and builds the library, or raises one `LibraryFileError` line."""

    def __init__(self, origin: str):
        self.origin = origin

    def fail(self, where: str, problem: str) -> LibraryFileError:
        return LibraryFileError(f"{self.origin}: {where}: {problem}")

    def read(self, data: Any) -> ExperienceLibrary:
        if not isinstance(data, dict) or not isinstance(data.get("experiences"), list):
            raise LibraryFileError(f"{self.origin}: not an experience library: expected a JSON object with an "
                                   "'experiences' list")
        if data.get("format", FORMAT_NAME) != FORMAT_NAME:
            raise self.fail("format", f"not an experience library: format is {data.get('format')!r}")
        version = data.get("version", 1)
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise self.fail("version", f"unknown format version {version!r}; this tfgrpo-dspy reads "
                            f"{', '.join(map(str, READABLE_VERSIONS))} (upgrade tfgrpo-dspy to read newer files)")
        caps = {name: self.optional_count(data, name) for name in ("max_experiences", "max_words")}
        experiences = [self.experience(item, f"experiences[{i}]", caps["max_words"])
                       for i, item in enumerate(data["experiences"])]
        ids = [e.id for e in experiences]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise self.fail("experiences", f"duplicate id(s) {duplicates}")
        next_id = data.get("next_id", max(ids, default=0) + 1)
        if not _is_count(next_id) or next_id < 1:
            raise self.fail("next_id", f"must be a positive integer, got {next_id!r}")
        if ids and next_id <= max(ids):
            raise self.fail("next_id", f"{next_id} is not above the largest id {max(ids)}")
        audit = data.get("audit_log", [])
        if not isinstance(audit, list) or not all(isinstance(a, dict) for a in audit):
            raise self.fail("audit_log", "must be a list of objects")
        try:
            entries = [AuditEntry.from_dict(a) for a in audit]
        except TypeError as exc:
            raise self.fail("audit_log", str(exc)) from exc
        return ExperienceLibrary(experiences, audit_log=entries, next_id=next_id, **caps)

    def optional_count(self, data: dict[str, Any], name: str) -> int | None:
        value = data.get(name)
        if value is not None and (not _is_count(value) or value < 1):
            raise self.fail(name, f"must be a positive integer or null, got {value!r}")
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
        text = normalize_text(text)
        if len(text) > MAX_TEXT_CHARS or (max_words is not None and word_count(text) > max_words):
            raise self.fail(f"{where}.text", f"has {word_count(text)} words ({len(text)} characters), over "
                            f"max_words={max_words}")
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


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
