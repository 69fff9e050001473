"""Edit operations on an experience library and the audit record of what happened to each.

`EditOp` is what the reflection LM writes (a pydantic model, so DSPy parses it from the LM's JSON) and
what the optimizer passes to `ExperienceLibrary.apply`; `AuditEntry` records each op's fate.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

OP_KINDS = ("add", "modify", "delete", "merge", "keep")
# Removals first, so a batch that deletes two lessons and adds two fits under a full cap.
APPLY_ORDER = {"delete": 0, "merge": 1, "modify": 2, "add": 3, "keep": 4}
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


class EditOp(BaseModel):
    """One edit of the library, as the reflection LM writes it or the optimizer derives it."""

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

    @property
    def targets(self) -> list[int]:
        """The existing lessons this edit changes or removes."""
        if self.op in ("modify", "delete"):
            return [self.id] if self.id is not None else []
        return list(self.ids or []) if self.op == "merge" else []

    def describe(self) -> str:
        """One line for prompts and logs: ``modify E3: When ...``."""
        target = ", ".join(f"E{t}" for t in self.targets)
        return f"{self.op}{' ' + target if target else ''}{': ' + self.text if self.text else ''}"


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
        known = {key: value for key, value in data.items() if key in cls.__dataclass_fields__}
        if known.get("ids") is not None:
            known["ids"] = tuple(known["ids"])
        return cls(**known)


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
