"""What the reflection calls return: records of summaries, proposals and update decisions, and raw lessons.

The records (`RolloutSummary`, `Proposal`, `UpdateDecision`) are what the run log stores, JSON at that boundary
and objects inside; `RawLesson` and `Extraction` are a call's answer before the guard (`LessonGuard`) judges it,
and `Lesson` what a proposal keeps after it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tfgrpo_dspy.library.edits import EditOp
from tfgrpo_dspy.usage import Usage, UsageRecord


@dataclass(frozen=True)
class RolloutSummary(UsageRecord):
    """One rollout summarized: what it did, the lessons it applied, where it first went wrong."""

    example_index: int
    sample_index: int
    summary: str = ""
    experiences_used: list[int] = field(default_factory=list)
    first_divergence: str = ""
    error: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Lesson:
    """A proposed lesson after the guard: its text, the lesson it replaces, its source example."""

    text: str
    source: int
    replaces: int | None = None

    @property
    def op(self) -> EditOp:
        if self.replaces is not None:
            return EditOp(op="modify", id=self.replaces, text=self.text)
        return EditOp(op="add", text=self.text)


@dataclass(frozen=True)
class Proposal(UsageRecord):
    """What one informative group proposed: lessons, misleading and useful lesson ids, and what was dropped."""

    example_index: int
    difference: str = ""
    lessons: list[Lesson] = field(default_factory=list)
    misleading: list[int] = field(default_factory=list)
    useful: list[int] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # lessons the guard refused, with why
    raw_count: int = 0  # lessons the model proposed before the guard
    error: str | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        known = {k: v for k, v in data.items() if k in {f.name for f in fields(cls)}}
        return cls(**{**known, "lessons": [Lesson(**lesson) for lesson in data.get("lessons", [])],
                      "usage": Usage.from_dict(data.get("usage"))})


@dataclass(frozen=True)
class UpdateDecision(UsageRecord):
    """The edits one update call decided (after the guard), and those it refused."""

    ops: list[EditOp] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    usage: Usage = field(default_factory=Usage)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ops": [op.model_dump(exclude_none=True) for op in self.ops],
                "usage": self.usage.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UpdateDecision:
        return cls(ops=[EditOp.coerce(op) for op in data.get("ops", [])], refused=list(data.get("refused", [])),
                   error=data.get("error"), usage=Usage.from_dict(data.get("usage")))


@dataclass(frozen=True)
class RawLesson:
    """A lesson as the extraction wrote it, before the guard."""

    condition: str
    action: str
    replaces: int | None = None


@dataclass(frozen=True)
class Extraction:
    """What one group's extraction answered, read but not yet judged."""

    difference: str
    lessons: list[RawLesson]
    misleading: list[int]
    useful: list[int]
    unparsed: list[str] = field(default_factory=list)  # lesson lines not in the 'When <condition>, <action>.' form

