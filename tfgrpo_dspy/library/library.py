"""The experience library: ordered lessons with stable ids, edited by audited operations.

Everything the method promises about the library is enforced here, in code, not in a prompt:
ids are never renumbered, texts are capped at ``max_words``, the library at ``max_experiences``,
exact duplicates are not added, unknown ids are refused, and every applied or refused edit lands in
an audit log with its step and reason. Each lesson also carries its provenance (the step and the
training examples it came from) and ACE-style counters (uses, helpful, harmful) that the optimizer
fills from rollouts; they are shown to the update step and to people, never to the policy. A library may
also carry routes (training inputs, each with the lessons shown to the inputs nearest it; see `Route`), kept
in step with deletes and merges.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tfgrpo_dspy.library.diff import LibraryDiff
from tfgrpo_dspy.library.edits import APPLY_ORDER, OP_KINDS, ApplyReport, AuditEntry, EditOp, parse_experience_id
from tfgrpo_dspy.library.file import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_TEXT_CHARS,
    READABLE_VERSIONS,
    Experience,
    LibraryFileError,
    LibraryReader,
    Route,
    normalize_text,
    word_count,
)
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic
from tfgrpo_dspy.library.routing import rerouted, routes_with

logger = logging.getLogger(__name__)


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
    routes: list[Route] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("max_experiences", "max_words"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        given, self.experiences = list(self.experiences), []
        if self.max_experiences is not None and len(given) > self.max_experiences:
            raise ValueError(f"{len(given)} lessons, more than max_experiences={self.max_experiences}")
        seen: set[int] = set()
        for item in given:
            exp = item if isinstance(item, Experience) else Experience(id=self.next_id, text=normalize_text(item))
            if exp.id in seen:
                raise ValueError(f"duplicate experience id {exp.id}")
            seen.add(exp.id)
            self.experiences.append(exp)
            self.next_id = max(self.next_id, exp.id + 1)

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.experiences)

    def __bool__(self) -> bool:
        # An empty library is still a library (its next_id matters): never let `lib or default` drop it.
        return True

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

    @property
    def texts(self) -> list[str]:
        return [e.text for e in self.experiences]

    def render(self) -> str:
        """The lessons as the model sees them: one ``[E<id>] text`` line each; empty when there are none."""
        return "\n".join(f"[{e.label}] {e.text}" for e in self.experiences)

    def render_with_records(self) -> str:
        """The lessons with their counters, for the update step (never for the policy)."""
        return "\n".join(f"[{e.label}] {e.text} ({e.record})" for e in self.experiences)

    def approx_tokens(self) -> int:
        """Rough token count of `render()` (4 characters a token): what the library adds to every call."""
        return math.ceil(len(self.render()) / 4)

    def diff(self, other: ExperienceLibrary) -> LibraryDiff:
        """What changed going from this library to ``other``."""
        return LibraryDiff.between(self.experiences, other.experiences)

    def copy(self) -> ExperienceLibrary:
        return ExperienceLibrary.from_dict(self.to_dict())

    def same_lessons(self, other: ExperienceLibrary) -> bool:
        """True when both hold the same ids with the same texts and routes (counters and audit aside)."""
        return [(e.id, e.text) for e in self] == [(e.id, e.text) for e in other] and self.routes == other.routes

    def route(self, lesson_id: int, inputs: Iterable[str], *, everyone: Iterable[str] = ()) -> None:
        """Show lesson ``lesson_id`` to the inputs nearest to ``inputs`` (training inputs), and give every input
        of ``everyone`` a route of its own (to no lesson, unless it has one): an input nearest to a training
        input no lesson is routed to is shown nothing."""
        if lesson_id not in self:
            raise KeyError(f"no experience E{lesson_id} to route to")
        self.routes = routes_with(self.routes, lesson_id, inputs, everyone)

    # -- editing -------------------------------------------------------------------------------
    def apply(
        self,
        ops: Iterable[EditOp | dict[str, Any]],
        *,
        step: int | None = None,
        sources: Sequence[int] = (),
    ) -> ApplyReport:
        """Apply edit operations in place and return what happened to each.

        Operations are applied removals first (delete, merge, modify, add, keep), each checked on
        its own: an op naming an unknown id, breaking a cap or repeating a lesson is refused with a
        recorded reason while the others still apply. ``sources`` (training example indices) are
        recorded on the lessons the ops write.
        """
        parsed: list[EditOp] = []
        entries: list[AuditEntry] = []
        for raw in ops:
            try:
                parsed.append(EditOp.coerce(raw))
            except (ValueError, TypeError) as exc:
                op_name = str(raw.get("op", "?")) if isinstance(raw, dict) else "?"
                entries.append(AuditEntry(step, op_name, "refused", f"malformed operation: {exc}"))
        for op in sorted(parsed, key=lambda o: APPLY_ORDER[o.op]):
            entries.append(self._apply_one(op, step, tuple(sources)))
        for entry in entries:
            if entry.status == "refused":  # expected with LM-written edits: the audit log keeps them
                logger.info("refused %s (step %s): %s", entry.op, step, entry.detail)
        self.audit_log.extend(entries)
        return ApplyReport(tuple(entries))

    def _apply_one(self, op: EditOp, step: int | None, sources: tuple[int, ...]) -> AuditEntry:
        def done(status: Literal["applied", "refused"], detail: str, result_id: int | None = None) -> AuditEntry:
            return AuditEntry(step=step, op=op.op, status=status, detail=detail, id=op.id,
                              ids=tuple(op.ids) if op.ids else None, text=op.text, reason=op.reason,
                              result_id=result_id)

        if op.op == "keep":
            return done("applied", "library kept as is")
        targets = op.targets
        if op.op in ("modify", "delete") and op.id is None:
            return done("refused", f"{op.op} needs an id")
        if op.op == "merge" and len(set(targets)) < 2:
            return done("refused", "merge needs at least two distinct ids")
        unknown = [t for t in targets if t not in self]
        if unknown:
            return done("refused", "unknown id(s): " + ", ".join(f"E{t}" for t in unknown))
        if op.op == "delete":
            self.experiences = [e for e in self.experiences if e.id != op.id]
            self.routes = rerouted(self.routes, [op.id])
            return done("applied", f"deleted E{op.id}", op.id)

        text = normalize_text(op.text or "")
        problem = self._text_problem(text, exclude=targets)
        if problem:
            return done("refused", problem)
        if op.op == "add":
            if self.max_experiences is not None and len(self) >= self.max_experiences:
                return done("refused", f"library is full (max_experiences={self.max_experiences})")
            new = Experience(id=self.next_id, text=text, added_step=step, updated_step=step, sources=sources)
            self.next_id += 1
            self.experiences.append(new)
            return done("applied", f"added E{new.id}", new.id)

        keep_id = targets[0]  # modify: the id itself; merge: the first id keeps its place
        old = self[keep_id]
        merged = [self[t] for t in targets]
        # A rewritten lesson is a new claim: its counters restart, its provenance accumulates.
        all_sources = sorted({s for e in merged for s in e.sources} | set(sources))
        rewritten = replace(old, text=text, updated_step=step, sources=tuple(all_sources),
                            uses=0, helpful=0, harmful=0)
        self.experiences = [rewritten if e.id == keep_id else e for e in self.experiences if e.id not in targets[1:]]
        self.routes = rerouted(self.routes, targets[1:], into=keep_id)
        if op.op == "modify":
            return done("applied", f"modified E{keep_id} (was: {old.text})", keep_id)
        return done("applied", "merged " + ", ".join(f"E{t}" for t in targets) + f" into E{keep_id}", keep_id)

    def _text_problem(self, text: str, exclude: Sequence[int]) -> str | None:
        if not text:
            return "the edit needs a non-empty text"
        if len(text) > MAX_TEXT_CHARS:  # the file could not be read back
            return f"text has {len(text)} characters, more than the {MAX_TEXT_CHARS}-character limit of a lesson"
        if self.max_words is not None and word_count(text) > self.max_words:
            return f"text has {word_count(text)} words, more than max_words={self.max_words}"
        duplicate = next((e for e in self.experiences if e.text.casefold() == text.casefold()
                          and e.id not in exclude), None)
        return f"duplicate of E{duplicate.id}" if duplicate is not None else None

    def credit(self, outcomes: Iterable[tuple[int, float]]) -> None:
        """Count each (lesson id, advantage) of a rollout that applied the lesson: helpful above its
        group's mean, harmful below it. Unknown ids are ignored (the lesson may be gone)."""
        by_id = {e.id: e for e in self.experiences}
        for experience_id, advantage in outcomes:
            exp = by_id.get(experience_id)
            if exp is None:
                continue
            by_id[experience_id] = replace(exp, uses=exp.uses + 1, helpful=exp.helpful + (advantage > 0),
                                           harmful=exp.harmful + (advantage < 0))
        self.experiences = [by_id[e.id] for e in self.experiences]

    def prune(self, *, margin: int, min_uses: int, step: int | None = None) -> ApplyReport:
        """Delete, in code, every lesson whose harmful count exceeds its helpful count by ``margin``
        after at least ``min_uses`` uses; each deletion is audited with the counts."""
        entries = []
        for exp in list(self.experiences):
            if exp.uses >= min_uses and exp.harmful - exp.helpful >= margin:
                self.experiences = [e for e in self.experiences if e.id != exp.id]
                self.routes = rerouted(self.routes, [exp.id])
                entries.append(AuditEntry(step, "delete", "applied", f"pruned E{exp.id}: {exp.record}",
                                          id=exp.id, text=exp.text, reason="harmful record", result_id=exp.id))
        self.audit_log.extend(entries)
        return ApplyReport(tuple(entries))

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self, *, include_audit: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FORMAT_NAME,
            # Without routes the file is a version-2 file: older releases read it, and a program's saved state
            # (what evaluation fingerprints hash) is unchanged by this release.
            "version": FORMAT_VERSION if self.routes else 2,
            "max_experiences": self.max_experiences,
            "max_words": self.max_words,
            "next_id": self.next_id,
            "experiences": [e.to_dict() for e in self.experiences],
        }
        if self.routes:
            data["routes"] = [r.to_dict() for r in self.routes]
        if include_audit:
            data["audit_log"] = [entry.to_dict() for entry in self.audit_log]
        return data

    @classmethod
    def from_dict(cls, data: Any, *, origin: str = "library") -> ExperienceLibrary:
        """Validate and load a library dict; errors name ``origin`` (a file) and the field."""
        contents = LibraryReader(origin).read(data)
        return cls(contents.experiences, max_experiences=contents.max_experiences, max_words=contents.max_words,
                   audit_log=contents.audit_log, next_id=contents.next_id, routes=list(contents.routes))

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
        return cls.from_dict(read_json(path), origin=str(path))

    @classmethod
    def from_texts(cls, texts: Sequence[str], **caps: Any) -> ExperienceLibrary:
        return cls(list(texts), **caps)


__all__ = ["APPLY_ORDER", "FORMAT_NAME", "FORMAT_VERSION", "MAX_TEXT_CHARS", "OP_KINDS", "READABLE_VERSIONS",
           "ApplyReport", "AuditEntry", "EditOp", "Experience", "ExperienceLibrary", "LibraryDiff", "LibraryFileError",
           "Route", "normalize_text", "parse_experience_id", "read_json", "word_count", "write_json_atomic"]
