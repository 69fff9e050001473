"""What a compile returns and records: per-step statistics, the libraries considered, the estimate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.usage import Usage

_USAGE_FIELDS = ("policy_usage", "reflection_usage", "verification_usage", "selection_usage")


@dataclass(frozen=True)
class Candidate:
    """One library scored on the selection set: the initial one, a step's edits, or one edit tried alone."""

    step: int  # 0 = the initial library
    label: str  # "initial", "step 2", "step 2, edit 1 alone"
    score: float | None  # mean selection score; None when there is no selection set
    accepted: bool
    size: int
    tokens: int
    fingerprint: str
    net_wins: int | None = None  # against the library it was compared with
    wins: int | None = None
    losses: int | None = None
    # The one-sided sign test that it beats that library, as quoted in ``reason`` (stats.PairedComparison's
    # p_value is the two-sided test; records that called this "p_value" mixed the two and are not read back).
    p_one_sided: float | None = None
    reason: str = ""
    compared_with: str | None = None  # the fingerprint of the library it was compared with (None: not compared)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}})


def shipped_library(best_step: int | None, candidates: Sequence[Candidate]) -> str:
    """Which library a compile returned, in words, from its best step and the candidates scored on the way: a
    step that changed nothing ships the starting lessons. The result and the run report both say it this way."""
    if best_step is None:
        return "the last step's library (no selection set)"
    if best_step == 0:
        return "the initial library"
    if not any(c.accepted for c in candidates if 0 < c.step <= best_step):
        return "the initial library (no step changed it)"
    return f"the library after step {best_step}"


@dataclass(frozen=True)
class StepStats:
    """What one library update step did and cost."""

    step: int
    epoch: int
    examples: int
    rollouts: int
    mean_reward: float
    groups: int
    informative_groups: int
    rollout_errors: int
    metric_errors: int
    reflection_errors: int
    lessons_proposed: int  # by the extraction, before the guard
    lessons_dropped: int  # by the guard (restated their example, or too long)
    proposal_clusters: int  # distinct lessons after clustering near-duplicates (the update's input)
    ops_applied: int
    ops_refused: int
    gate: str  # "accepted", "rejected", "partly accepted", "no change", "not gated"
    pruned: int
    library_size: int
    library_tokens: int
    tool_calls: int
    policy_usage: Usage
    reflection_usage: Usage
    selection_usage: Usage
    wall_time_s: float
    candidates: tuple[Candidate, ...] = ()
    failed_groups: int = 0  # groups whose scored rollouts all failed
    reflected_groups: int = 0  # groups that went to the per-group reflection
    inductions: int = 0  # induction draws (sets of failures x num_candidates)
    induced_lessons: int = 0  # draws that gave a lesson the guard passed
    induced_dropped: int = 0  # draws whose lesson the guard dropped
    lessons_checked: int = 0  # distinct candidates verified on training examples
    lessons_verified: int = 0  # ... that fixed more than they broke, by the margin
    verification_usage: Usage = field(default_factory=Usage)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # rollouts, reflection, verification, selection

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _USAGE_FIELDS:
            data[name] = data[name].to_dict()
        data["candidates"] = [c.to_dict() for c in self.candidates]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepStats:
        known = {k: v for k, v in data.items() if k in {f.name for f in fields(cls)}}
        known.update({name: Usage.from_dict(data.get(name)) for name in _USAGE_FIELDS})
        known["candidates"] = tuple(Candidate.from_dict(c) for c in data.get("candidates", []))
        return cls(**known)


@dataclass(frozen=True)
class TrainingFreeGRPOResult:
    """The outcome of a compile: the shipped library, every library considered, per-step statistics."""

    library: ExperienceLibrary
    steps: tuple[StepStats, ...]
    candidates: tuple[Candidate, ...] = ()
    best_step: int | None = None  # the step whose library is shipped (0 = the initial library)
    selection_size: int = 0
    stopped_reason: str | None = None
    log_dir: str | None = None
    initial_usage: Usage = field(default_factory=Usage)  # scoring the initial library

    @property
    def shipped(self) -> str:
        """Which library compile returned, in words (`shipped_library`)."""
        return shipped_library(self.best_step, self.candidates)

    @property
    def policy_usage(self) -> Usage:
        return Usage.total(s.policy_usage for s in self.steps)

    @property
    def reflection_usage(self) -> Usage:
        return Usage.total(s.reflection_usage for s in self.steps)

    @property
    def selection_usage(self) -> Usage:
        return self.initial_usage + Usage.total(s.selection_usage for s in self.steps)

    @property
    def verification_usage(self) -> Usage:
        return Usage.total(s.verification_usage for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "library": self.library.to_dict(include_audit=False),
            "best_step": self.best_step,
            "selection_size": self.selection_size,
            "candidates": [c.to_dict() for c in self.candidates],
            "steps": [s.to_dict() for s in self.steps],
            "stopped_reason": self.stopped_reason,
            "log_dir": self.log_dir,
            "policy_usage": self.policy_usage.to_dict(),
            "reflection_usage": self.reflection_usage.to_dict(),
            "verification_usage": self.verification_usage.to_dict(),
            "selection_usage": self.selection_usage.to_dict(),
        }


@dataclass(frozen=True)
class RunEstimate:
    """Upper bounds on the work of a run, computed before spending anything (retries not counted)."""

    steps: int
    rollouts: int
    policy_calls_min: int
    max_summary_calls: int
    max_extraction_calls: int
    max_update_calls: int
    max_rewrite_calls: int  # generalize and shorten, for proposals and update texts
    max_selection_calls: int
    max_induction_calls: int = 0
    max_verification_calls: int = 0  # training examples re-run greedily to verify candidate lessons

    @property
    def max_reflection_calls(self) -> int:
        return (self.max_summary_calls + self.max_extraction_calls + self.max_induction_calls + self.max_update_calls
                + self.max_rewrite_calls)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "max_reflection_calls": self.max_reflection_calls}

    def __str__(self) -> str:
        return (
            f"{self.steps} steps, {self.rollouts} rollouts (>= {self.policy_calls_min} policy LM calls; "
            "more for multi-step programs such as ReAct), at most "
            f"{self.max_reflection_calls} reflection calls ({self.max_summary_calls} summaries, "
            f"{self.max_extraction_calls} extractions, {self.max_induction_calls} inductions, {self.max_update_calls} "
            f"updates, {self.max_rewrite_calls} rewrites), {self.max_verification_calls} verification runs of "
            f"training examples and {self.max_selection_calls} selection-set program runs; retries not counted"
        )
