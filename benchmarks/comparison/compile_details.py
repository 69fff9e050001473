"""What a compile produced besides its program, as a run directory record keeps it (its ``details`` object).

`CompileDetails` holds the optimizer's settings, demos, library and, for TrainingFreeGRPO, its own record
(`TfgrpoRun`) and the gate's decisions scored on the held-out rows (`HeldOutCheck`). Each reads and writes the
flat keys the record files have always had, so committed run directories load unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tfgrpo_dspy.run.results import Candidate, TrainingFreeGRPOResult
from tfgrpo_dspy.usage import Usage


@dataclass(frozen=True)
class HeldOutCheck:
    """One library the gate decided on (or compared with), scored on the held-out rows, or why it was not."""

    label: str
    scores: tuple[float, ...] | None = None
    shipped: bool = False  # the method's own library: its held-out scores are the method's
    skipped: str | None = None
    eval_seconds: float | None = None
    usage: Usage | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"label": self.label}
        if self.scores is not None:
            data.update(scores=list(self.scores), eval_seconds=self.eval_seconds,
                        usage=(self.usage or Usage()).to_dict())
        if self.shipped:
            data["shipped"] = True
        if self.skipped is not None:
            data["skipped"] = self.skipped
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeldOutCheck:
        scores = data.get("scores")
        return cls(data["label"], tuple(scores) if scores is not None else None, bool(data.get("shipped")),
                   data.get("skipped"), data.get("eval_seconds"),
                   Usage.from_dict(data["usage"]) if data.get("usage") else None)


@dataclass(frozen=True)
class TfgrpoRun:
    """What a TrainingFreeGRPO compile decided and cost, by its own accounting (cross-checks the meters)."""

    best_step: int | None
    selection_size: int
    candidates: tuple[Candidate, ...]
    steps: int
    informative_groups: int
    stopped_reason: str | None
    self_reported_usage: Mapping[str, Usage]  # policy (rollouts), reflection, verification, selection

    @classmethod
    def of(cls, result: TrainingFreeGRPOResult) -> TfgrpoRun:
        return cls(result.best_step, result.selection_size, tuple(result.candidates), len(result.steps),
                   sum(s.informative_groups for s in result.steps), result.stopped_reason,
                   {"policy": result.policy_usage, "reflection": result.reflection_usage,
                    "verification": result.verification_usage, "selection": result.selection_usage})

    def to_dict(self) -> dict[str, Any]:
        return {"best_step": self.best_step, "selection_size": self.selection_size,
                "candidates": [c.to_dict() for c in self.candidates], "steps": self.steps,
                "informative_groups": self.informative_groups, "stopped_reason": self.stopped_reason,
                "self_reported_usage": {role: usage.to_dict() for role, usage in self.self_reported_usage.items()}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TfgrpoRun:
        return cls(data.get("best_step"), data.get("selection_size", 0),
                   tuple(Candidate.from_dict(c) for c in data.get("candidates") or []), data.get("steps", 0),
                   data.get("informative_groups", 0), data.get("stopped_reason"),
                   {role: Usage.from_dict(usage) for role, usage in (data.get("self_reported_usage") or {}).items()})


@dataclass(frozen=True)
class CompileDetails:
    """What a compile produced besides its program: its settings, demos, library, TF-GRPO record, gate checks.

    Kept in a record's ``details`` object with flat keys (``budget``, ``demos``, ``student``, ``library``,
    ``library_size``, the TrainingFreeGRPO keys of `TfgrpoRun`, ``held_out_candidates``).
    """

    settings: Mapping[str, Any] | str  # the optimizer's settings as passed ("budget" in the file)
    demos: int | None = None
    student: str | None = None  # what the method compiled on top of, when not the plain program
    library: tuple[str, ...] | None = None  # the lessons shipped, for methods that ship a library
    tfgrpo: TfgrpoRun | None = None
    held_out_checks: Mapping[str, HeldOutCheck] = field(default_factory=dict)  # by library fingerprint

    def with_check(self, fingerprint: str, check: HeldOutCheck) -> CompileDetails:
        return replace(self, held_out_checks={**self.held_out_checks, fingerprint: check})

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"budget": self.settings}
        if self.demos is not None:
            data["demos"] = self.demos
        if self.student is not None:
            data["student"] = self.student
        if self.library is not None:
            data.update(library_size=len(self.library), library=list(self.library))
        if self.tfgrpo is not None:
            data.update(self.tfgrpo.to_dict())
        if self.held_out_checks:
            data["held_out_candidates"] = {fp: check.to_dict() for fp, check in self.held_out_checks.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompileDetails:
        library = data.get("library")
        return cls(settings=data.get("budget", {}), demos=data.get("demos"), student=data.get("student"),
                   library=tuple(library) if library is not None else None,
                   tfgrpo=TfgrpoRun.from_dict(data) if "candidates" in data else None,
                   held_out_checks={fp: HeldOutCheck.from_dict(check)
                                    for fp, check in (data.get("held_out_candidates") or {}).items()})
