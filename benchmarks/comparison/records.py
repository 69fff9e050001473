"""The typed records a comparison passes between its stages and keeps in its run directory.

Every record reads and writes the JSON layout of the run directory (``<method>-seed<N>.json``): the
files written before these records were typed load unchanged, key for key. What a compile produced besides its
program (its ``details``) is `comparison.compile_details`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from comparison.compile_details import CompileDetails
from tfgrpo_dspy.inference.evaluation import EvalReport
from tfgrpo_dspy.stats import flip_rate
from tfgrpo_dspy.usage import Usage

REPORTED_ROLES = ("policy", "reflection", "selection")  # TrainingFreeGRPO's own accounting


@dataclass(frozen=True)
class ProblemResult:
    """One held-out problem under one method: what the paired statistics and the flip rate are computed from."""

    index: int  # position in the held-out list (the same for every method)
    score: float  # mean over the k samples
    answers: tuple[str | None, ...]  # one per sample
    error: str | None = None  # the first program error among the samples

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "score": self.score, "answers": list(self.answers), "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemResult:
        return cls(data["index"], data["score"], tuple(data["answers"]), data.get("error"))


def problem_results(report: EvalReport) -> tuple[ProblemResult, ...]:
    return tuple(ProblemResult(index=e.index, score=e.mean_score, answers=tuple(s.answer for s in e.samples),
                               error=next((s.error for s in e.samples if s.error), None))
                 for e in report.examples)


@dataclass(frozen=True)
class RepeatEval:
    """A second evaluation of the same program with DSPy's cache off: how much greedy decoding itself moves.

    ``flip_rate`` is the share of problems whose answers differ from the first pass; a method's gain over
    ``none`` means little unless it is well above what this pass changes by chance.
    """

    score: float | None
    flip_rate: float | None
    flips: int | None
    eval_seconds: float
    usage: Usage
    per_problem: tuple[ProblemResult, ...] = ()
    error: str | None = None

    @classmethod
    def of(cls, first: Sequence[ProblemResult], second: Sequence[ProblemResult], seconds: float,
           usage: Usage) -> RepeatEval:
        before, after = [p.answers for p in first], [p.answers for p in second]
        return cls(score=statistics.fmean(p.score for p in second), flip_rate=flip_rate(before, after),
                   flips=sum(a != b for a, b in zip(before, after, strict=True)), eval_seconds=round(seconds, 2),
                   usage=usage, per_problem=tuple(second))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = self.usage.to_dict()
        data["per_problem"] = [p.to_dict() for p in self.per_problem]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepeatEval:
        values = {f.name: data.get(f.name) for f in fields(cls)}
        values["usage"] = Usage.from_dict(data.get("usage"))
        values["per_problem"] = tuple(ProblemResult.from_dict(p) for p in data.get("per_problem") or [])
        return cls(**values)


@dataclass(frozen=True)
class SeedRun:
    """One method, one seed: the record a run directory keeps (after the compile, then after the evaluation)."""

    seed: int
    score: float | None
    pass_at_k: float | None
    score_stderr: float | None  # standard error of the mean over held-out examples
    compile_seconds: float
    eval_seconds: float | None
    usage: dict[str, Usage]  # role -> usage ("task", "reflection", "evaluation")
    engine_failures: int
    added_prompt_tokens: int | None  # approx, rendered static prompt vs the base program
    eval_prompt_tokens_per_call: float | None  # the model's own count per held-out request (a parse retry is one more)
    program_errors: int | None
    error: str | None = None
    details: CompileDetails = field(default_factory=lambda: CompileDetails({}))
    per_problem: tuple[ProblemResult, ...] = ()
    repeat: RepeatEval | None = None
    code: str | None = None  # the commit the compile ran from (a resumed record may predate this run)
    prompts_digest: str | None = None  # of the prompts it sends on the held-out rows (`comparison.prompts`)
    evaluation_of: str | None = None  # "method seed N" whose evaluation this reuses: the same prompts, greedy

    @property
    def evaluated(self) -> bool:
        return bool(self.per_problem)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = {role: usage.to_dict() for role, usage in self.usage.items()}
        data["details"] = self.details.to_dict()
        data["per_problem"] = [p.to_dict() for p in self.per_problem]
        data["repeat"] = self.repeat.to_dict() if self.repeat else None
        for name in ("prompts_digest", "evaluation_of"):  # absent from records written before they existed
            if data[name] is None:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeedRun:
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["usage"] = {role: Usage.from_dict(usage) for role, usage in data.get("usage", {}).items()}
        values["details"] = CompileDetails.from_dict(data.get("details") or {})
        values["per_problem"] = tuple(ProblemResult.from_dict(p) for p in data.get("per_problem") or [])
        values["repeat"] = RepeatEval.from_dict(data["repeat"]) if data.get("repeat") else None
        return cls(**values)


@dataclass(frozen=True)
class MethodResult:
    """A method over all seeds."""

    method: str
    kind: str  # "method" or "ablation"
    runs: tuple[SeedRun, ...]

    @property
    def ok_runs(self) -> list[SeedRun]:
        return [r for r in self.runs if r.error is None]

    @property
    def error(self) -> str | None:
        errors = [r.error for r in self.runs if r.error]
        return errors[0] if errors else None

    def mean(self, value: Callable[[SeedRun], float | None]) -> float | None:
        values = [v for v in (value(r) for r in self.ok_runs) if v is not None]
        return statistics.fmean(values) if values else None

    @property
    def score(self) -> float | None:
        return self.mean(lambda r: r.score)

    @property
    def score_seed_std(self) -> float | None:
        scores = [r.score for r in self.ok_runs if r.score is not None]
        return statistics.stdev(scores) if len(scores) > 1 else None

    @property
    def evaluated_seeds(self) -> list[int]:
        return [r.seed for r in self.ok_runs if r.evaluated]

    def problem_scores(self, seeds: Sequence[int] | None = None) -> list[float] | None:
        """Each held-out problem's score averaged over the evaluated seeds (only ``seeds``, when given): what
        the paired statistics compare. Pair two methods over the seeds both evaluated, so a row never pairs
        one method's compiles with another set of the other's."""
        runs = [r for r in self.ok_runs if r.evaluated and (seeds is None or r.seed in seeds)]
        if not runs or len({len(r.per_problem) for r in runs}) != 1:
            return None
        return [statistics.fmean(r.per_problem[i].score for r in runs) for i in range(len(runs[0].per_problem))]

    def role_usage(self, role: str) -> Usage:
        """Mean usage of one role per seed (integer division keeps it a Usage)."""
        return mean_usage([r.usage.get(role, Usage()) for r in self.ok_runs])

    def self_reported_usage(self) -> dict[str, Usage] | None:
        """TrainingFreeGRPO's own accounting per seed (policy = rollouts, reflection, selection), if it ran."""
        reported = [r.details.tfgrpo.self_reported_usage for r in self.ok_runs if r.details.tfgrpo is not None]
        if not reported:
            return None
        return {role: mean_usage([entry.get(role, Usage()) for entry in reported]) for role in REPORTED_ROLES}

    @property
    def optimization_tokens(self) -> int:
        return self.role_usage("task").total_tokens + self.role_usage("reflection").total_tokens

    def to_dict(self) -> dict[str, Any]:
        reported = self.self_reported_usage()
        return {
            "method": self.method,
            "kind": self.kind,
            "status": "ok" if self.ok_runs else "failed",
            "error": self.error,
            "score_mean_at_k": self.score,
            "score_seed_std": self.score_seed_std,
            "score_stderr_examples": self.mean(lambda r: r.score_stderr),
            "pass_at_k": self.mean(lambda r: r.pass_at_k),
            "compile_seconds": self.mean(lambda r: r.compile_seconds),
            "eval_seconds": self.mean(lambda r: r.eval_seconds),
            "usage_per_seed": {role: self.role_usage(role).to_dict() for role in ("task", "reflection", "evaluation")},
            "self_reported_usage_per_seed": ({role: u.to_dict() for role, u in reported.items()}
                                             if reported else None),
            "optimization_tokens": self.optimization_tokens,
            "added_prompt_tokens": self.mean(lambda r: r.added_prompt_tokens),
            "eval_prompt_tokens_per_call": self.mean(lambda r: r.eval_prompt_tokens_per_call),
            "problem_scores": self.problem_scores(),
            "runs": [r.to_dict() for r in self.runs],
        }


def mean_usage(usages: Sequence[Usage]) -> Usage:
    if not usages:
        return Usage()
    total, n = Usage.total(usages), len(usages)
    return Usage(calls=round(total.calls / n), prompt_tokens=round(total.prompt_tokens / n),
                 completion_tokens=round(total.completion_tokens / n), cost=total.cost / n)
