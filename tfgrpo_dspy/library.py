"""The experience library: ordered lessons with stable ids, edited by audited operations.

Everything the method promises about the library is enforced here, in code, not in a prompt:
ids are never renumbered, texts are capped at ``max_words``, the library at ``max_experiences``,
exact duplicates are not added, unknown ids are refused, and every applied or refused edit lands in
an audit log with its step and reason.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

logger = logging.getLogger(__name__)

FORMAT_NAME = "tfgrpo-experience-library"
FORMAT_VERSION = 1
OP_KINDS = ("add", "modify", "delete", "merge", "keep")
# Removals first, so a batch that deletes two lessons and adds two fits under a full cap.
_APPLY_ORDER = {"delete": 0, "merge": 1, "modify": 2, "add": 3, "keep": 4}
_ID_PATTERN = re.compile(r"^\s*\[?\s*[Ee]?\s*(\d+)\s*\]?\s*$")


def parse_experience_id(value: Any) -> int:
    """Accept 3, "3", "E3" or "[E3]" and return 3."""
    if isinstance(value, bool):
        raise ValueError(f"not an experience id: {value!r}")
    if isinstance(value, int):
        return value
    match = _ID_PATTERN.match(str(value))
    if not match:
        raise ValueError(f"not an experience id: {value!r} (expected a number such as 3 or 'E3')")
    return int(match.group(1))


def normalize_text(text: str) -> str:
    """One line, single spaces: what is rendered is exactly what is stored."""
    return " ".join(str(text).split())


def word_count(text: str) -> int:
    return len(text.split())


class EditOp(BaseModel):
    """One proposed edit of the library, as the reflection LM writes it."""

    op: Literal["add", "modify", "delete", "merge", "keep"] = Field(
        description="add a new lesson, modify one, delete one, merge several into one, or keep the library as is"
    )
    id: int | None = Field(default=None, description="the experience id for modify/delete, e.g. 3 for [E3]")
    ids: list[int] | None = Field(default=None, description="the experience ids merged into one, for merge")
    text: str | None = Field(default=None, description="the lesson text for add/modify/merge")
    reason: str | None = Field(default=None, description="why this edit helps, briefly")

    @field_validator("op", mode="before")
    @classmethod
    def _lower_op(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("id", mode="before")
    @classmethod
    def _parse_id(cls, value: Any) -> int | None:
        return None if value in (None, "") else parse_experience_id(value)

    @field_validator("ids", mode="before")
    @classmethod
    def _parse_ids(cls, value: Any) -> list[int] | None:
        if value in (None, ""):
            return None
        if isinstance(value, (str, int)):
            value = [value]
        return [parse_experience_id(v) for v in value]

    @classmethod
    def coerce(cls, op: EditOp | dict[str, Any]) -> EditOp:
        if isinstance(op, EditOp):
            return op
        if isinstance(op, dict):
            return cls.model_validate(op)
        if isinstance(op, BaseModel):
            return cls.model_validate(op.model_dump())
        raise TypeError(f"an edit operation must be an EditOp or a dict, got {type(op).__name__}")


@dataclass(frozen=True)
class Experience:
    """One lesson. ``id`` is assigned once and never reused or renumbered."""

    id: int
    text: str
    added_step: int | None = None
    updated_step: int | None = None

    @property
    def label(self) -> str:
        return f"E{self.id}"


@dataclass(frozen=True)
class AuditEntry:
    """What happened to one edit operation."""

    step: int | None
    op: str
    status: Literal["applied", "refused"]
    detail: str
    id: int | None = None
    ids: tuple[int, ...] | None = None
    text: str | None = None
    reason: str | None = None
    result_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ids"] = list(self.ids) if self.ids is not None else None
        return {key: value for key, value in data.items() if value is not None or key == "step"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditEntry:
        data = dict(data)
        if data.get("ids") is not None:
            data["ids"] = tuple(data["ids"])
        return cls(**data)


@dataclass(frozen=True)
class ApplyReport:
    """The audit entries of one `ExperienceLibrary.apply` call."""

    entries: tuple[AuditEntry, ...] = ()

    @property
    def applied(self) -> list[AuditEntry]:
        return [e for e in self.entries if e.status == "applied"]

    @property
    def refused(self) -> list[AuditEntry]:
        return [e for e in self.entries if e.status == "refused"]


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
            "added": [asdict(e) for e in self.added],
            "removed": [asdict(e) for e in self.removed],
            "modified": [{"old": asdict(o), "new": asdict(n)} for o, n in self.modified],
            "unchanged": self.unchanged,
        }


@dataclass
class ExperienceLibrary:
    """An ordered, capped, audited set of lessons.

    Args:
        experiences: initial lessons, as `Experience` objects or plain strings (ids assigned in order).
        max_experiences: the most lessons the library holds; an add beyond it is refused.
        max_words: the most words one lesson may have; a longer add/modify/merge is refused.
    """

    experiences: list[Experience] = field(default_factory=list)
    max_experiences: int | None = None
    max_words: int | None = None
    audit_log: list[AuditEntry] = field(default_factory=list)
    next_id: int = 1

    def __post_init__(self) -> None:
        if self.max_experiences is not None and (
            not isinstance(self.max_experiences, int) or self.max_experiences < 1
        ):
            raise ValueError(f"max_experiences must be a positive int or None, got {self.max_experiences!r}")
        if self.max_words is not None and (not isinstance(self.max_words, int) or self.max_words < 1):
            raise ValueError(f"max_words must be a positive int or None, got {self.max_words!r}")
        given, self.experiences = list(self.experiences), []
        for item in given:
            exp = item if isinstance(item, Experience) else Experience(id=self.next_id, text=normalize_text(item))
            if any(e.id == exp.id for e in self.experiences):
                raise ValueError(f"duplicate experience id {exp.id}")
            self.experiences.append(exp)
            self.next_id = max(self.next_id, exp.id + 1)

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.experiences)

    def __iter__(self) -> Iterator[Experience]:
        return iter(self.experiences)

    def __contains__(self, experience_id: object) -> bool:
        return any(e.id == experience_id for e in self.experiences)

    def __getitem__(self, experience_id: int) -> Experience:
        for exp in self.experiences:
            if exp.id == experience_id:
                return exp
        raise KeyError(f"no experience E{experience_id}")

    @property
    def ids(self) -> list[int]:
        return [e.id for e in self.experiences]

    def render(self) -> str:
        """The lessons as the model sees them: one ``[E<id>] text`` line each; empty when there are none."""
        return "\n".join(f"[{e.label}] {e.text}" for e in self.experiences)

    def approx_tokens(self) -> int:
        """Rough token count of `render()` (4 characters a token): what the library adds to every call."""
        return math.ceil(len(self.render()) / 4)

    def diff(self, other: ExperienceLibrary) -> LibraryDiff:
        """What changed going from this library to ``other``."""
        mine = {e.id: e for e in self.experiences}
        theirs = {e.id: e for e in other.experiences}
        return LibraryDiff(
            added=tuple(e for e in other.experiences if e.id not in mine),
            removed=tuple(e for e in self.experiences if e.id not in theirs),
            modified=tuple(
                (mine[i], theirs[i]) for i in mine if i in theirs and mine[i].text != theirs[i].text
            ),
            unchanged=sum(1 for i in mine if i in theirs and mine[i].text == theirs[i].text),
        )

    def copy(self) -> ExperienceLibrary:
        return ExperienceLibrary.from_dict(self.to_dict())

    # -- editing -------------------------------------------------------------------------------
    def apply(self, ops: Iterable[EditOp | dict[str, Any]], *, step: int | None = None) -> ApplyReport:
        """Apply edit operations in place and return what happened to each.

        Operations are applied removals first (delete, merge, modify, add, keep), each checked on
        its own: an op naming an unknown id, breaking a cap or repeating a lesson is refused with a
        recorded reason while the others still apply.
        """
        parsed: list[EditOp] = []
        entries: list[AuditEntry] = []
        for raw in ops:
            try:
                parsed.append(EditOp.coerce(raw))
            except (ValueError, TypeError) as exc:
                op_name = str(raw.get("op", "?")) if isinstance(raw, dict) else "?"
                entries.append(AuditEntry(step, op_name, "refused", f"malformed operation: {exc}"))
        for op in sorted(parsed, key=lambda o: _APPLY_ORDER[o.op]):
            entries.append(self._apply_one(op, step))
        for entry in entries:
            if entry.status == "refused":
                logger.warning("refused %s (step %s): %s", entry.op, step, entry.detail)
        self.audit_log.extend(entries)
        return ApplyReport(tuple(entries))

    def _apply_one(self, op: EditOp, step: int | None) -> AuditEntry:
        def done(status: Literal["applied", "refused"], detail: str, result_id: int | None = None) -> AuditEntry:
            return AuditEntry(step=step, op=op.op, status=status, detail=detail, id=op.id,
                              ids=tuple(op.ids) if op.ids else None, text=op.text, reason=op.reason,
                              result_id=result_id)

        if op.op == "keep":
            return done("applied", "library kept as is")

        targets = [op.id] if op.op in ("modify", "delete") else list(op.ids or [])
        if op.op in ("modify", "delete") and op.id is None:
            return done("refused", f"{op.op} needs an id")
        if op.op == "merge" and len(set(targets)) < 2:
            return done("refused", "merge needs at least two distinct ids")
        unknown = [t for t in targets if t not in self]
        if unknown:
            return done("refused", "unknown id(s): " + ", ".join(f"E{t}" for t in unknown))

        if op.op == "delete":
            self.experiences = [e for e in self.experiences if e.id != op.id]
            return done("applied", f"deleted E{op.id}", op.id)

        text = normalize_text(op.text or "")
        if not text:
            return done("refused", f"{op.op} needs a non-empty text")
        if self.max_words is not None and word_count(text) > self.max_words:
            return done("refused", f"text has {word_count(text)} words, more than max_words={self.max_words}")
        duplicate = next((e for e in self.experiences if e.text.casefold() == text.casefold()
                          and e.id not in targets), None)
        if duplicate is not None:
            return done("refused", f"duplicate of E{duplicate.id}")

        if op.op == "add":
            if self.max_experiences is not None and len(self) >= self.max_experiences:
                return done("refused", f"library is full (max_experiences={self.max_experiences})")
            new = Experience(id=self.next_id, text=text, added_step=step, updated_step=step)
            self.next_id += 1
            self.experiences.append(new)
            return done("applied", f"added E{new.id}", new.id)

        keep_id = targets[0]  # modify: the id itself; merge: the first id keeps its place
        old = self[keep_id]
        merged_away = set(targets[1:])
        self.experiences = [
            Experience(id=e.id, text=text, added_step=e.added_step, updated_step=step) if e.id == keep_id else e
            for e in self.experiences
            if e.id not in merged_away
        ]
        if op.op == "modify":
            return done("applied", f"modified E{keep_id} (was: {old.text})", keep_id)
        return done("applied", "merged " + ", ".join(f"E{t}" for t in targets) + f" into E{keep_id}", keep_id)

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self, *, include_audit: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "max_experiences": self.max_experiences,
            "max_words": self.max_words,
            "next_id": self.next_id,
            "experiences": [
                {key: value for key, value in asdict(e).items() if value is not None} for e in self.experiences
            ],
        }
        if include_audit:
            data["audit_log"] = [entry.to_dict() for entry in self.audit_log]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperienceLibrary:
        if not isinstance(data, dict) or "experiences" not in data:
            raise ValueError("not an experience library: expected a JSON object with an 'experiences' list")
        if data.get("format", FORMAT_NAME) != FORMAT_NAME:
            raise ValueError(f"not an experience library: format is {data.get('format')!r}")
        experiences = [
            Experience(id=int(e["id"]), text=normalize_text(e["text"]), added_step=e.get("added_step"),
                       updated_step=e.get("updated_step"))
            for e in data["experiences"]
        ]
        library = cls(experiences, max_experiences=data.get("max_experiences"), max_words=data.get("max_words"))
        library.next_id = max(library.next_id, int(data.get("next_id", 1)))
        library.audit_log = [AuditEntry.from_dict(a) for a in data.get("audit_log", [])]
        return library

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the library as indented JSON, atomically."""
        path = Path(path)
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ExperienceLibrary:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no experience library at {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def from_texts(cls, texts: Sequence[str], **caps: Any) -> ExperienceLibrary:
        return cls(list(texts), **caps)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temp file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
