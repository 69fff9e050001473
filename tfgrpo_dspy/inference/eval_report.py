"""What an evaluation reports: Mean@k, unbiased Pass@k, errors and tool calls, per example and per sample.

`build_report` turns the rollouts of `evaluate_at_k` into an `EvalReport`; the report saves as JSON and says
itself in one line (`EvalReport.summary`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.inference.rollouts import Rollout
from tfgrpo_dspy.usage import Usage


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class SampleResult:
    """One sample of one example."""

    score: float
    correct: bool
    feedback: str | None = None
    error: str | None = None  # the program failed (LM, tool, parsing)
    metric_error: str | None = None  # the metric raised or returned no number
    tool_calls: int = 0
    answer: str | None = None


@dataclass(frozen=True)
class ExampleResult:
    """The k samples of one example."""

    index: int
    inputs: dict[str, Any]
    samples: tuple[SampleResult, ...]

    @property
    def num_correct(self) -> int:
        return sum(sample.correct for sample in self.samples)

    @property
    def mean_score(self) -> float:
        return sum(sample.score for sample in self.samples) / len(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "inputs": self.inputs,
            "num_correct": self.num_correct,
            "mean_score": self.mean_score,
            "samples": [asdict(sample) for sample in self.samples],
        }


@dataclass(frozen=True)
class EvalReport:
    """Result of `evaluate_at_k`.

    Attributes:
        mean_at_k: mean over examples of the mean score of their k samples (Mean@k).
        pass_at: unbiased pass@j for j in 1, 2, 4, ... and k (a sample is correct when its score
            reaches ``success_threshold``).
        mean_tool_calls: tool calls per sample, None when no sample ran a tool-using agent.
    """

    k: int
    temperature: float
    num_examples: int
    mean_at_k: float
    pass_at: dict[int, float]
    program_errors: int
    metric_errors: int
    mean_tool_calls: float | None
    usage: Usage
    elapsed_seconds: float
    library_size: int | None
    examples: tuple[ExampleResult, ...]

    @property
    def pass_at_k(self) -> float:
        return self.pass_at[self.k]

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "temperature": self.temperature,
            "num_examples": self.num_examples,
            "mean_at_k": self.mean_at_k,
            "pass_at_k": self.pass_at_k,
            "pass_at": {str(j): value for j, value in self.pass_at.items()},
            "program_errors": self.program_errors,
            "metric_errors": self.metric_errors,
            "mean_tool_calls": self.mean_tool_calls,
            "usage": self.usage.to_dict(),
            "elapsed_seconds": self.elapsed_seconds,
            "library_size": self.library_size,
            "examples": [example.to_dict() for example in self.examples],
        }

    def summary(self) -> str:
        parts = [f"Mean@{self.k} {self.mean_at_k:.3f}", f"Pass@{self.k} {self.pass_at_k:.3f}"]
        parts.append(f"errors program={self.program_errors} metric={self.metric_errors}")
        if self.mean_tool_calls is not None:
            parts.append(f"tool calls/sample {self.mean_tool_calls:.2f}")
        return f"{self.num_examples} examples x {self.k} samples: " + ", ".join(parts)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
        return path


def build_report(
    examples: list[dspy.Example],
    jobs: list[tuple[int, int]],
    rollouts: list[Any],
    k: int,
    temperature: float,
    answer_field: str,
    success_threshold: float,
    library: Any,
    elapsed: float,
) -> EvalReport:
    """The report of the rollouts of ``jobs`` ((example, sample) pairs, in order); a rollout that is not a
    `Rollout` (the rollout itself failed) counts as a program error."""
    samples: dict[int, list[SampleResult]] = {index: [] for index in range(len(examples))}
    used_tools = False
    usages = []
    for (index, _), rollout in zip(jobs, rollouts, strict=True):
        if not isinstance(rollout, Rollout):  # run_rollout itself failed: count as a program error
            samples[index].append(SampleResult(0.0, False, error=f"rollout failed: {rollout!r}"))
            continue
        used_tools = used_tools or "trajectory" in (rollout.outputs or {})
        usages.append(rollout.usage)
        samples[index].append(
            SampleResult(
                score=rollout.score,
                correct=rollout.error is None and rollout.score >= success_threshold,
                feedback=rollout.feedback,
                error=rollout.error,
                metric_error=rollout.metric_error,
                tool_calls=rollout.tool_calls,
                answer=rollout.answer(answer_field),
            )
        )
    results = tuple(
        ExampleResult(index, dict(examples[index].inputs().toDict()), tuple(samples[index]))
        for index in range(len(examples))
    )
    all_samples = [sample for result in results for sample in result.samples]
    ks = sorted({j for j in (2**p for p in range(k.bit_length())) if j <= k} | {k})
    pass_at = {j: sum(pass_at_k(k, r.num_correct, j) for r in results) / len(results) for j in ks}
    return EvalReport(
        k=k,
        temperature=float(temperature),
        num_examples=len(results),
        mean_at_k=sum(r.mean_score for r in results) / len(results),
        pass_at=pass_at,
        program_errors=sum(s.error is not None for s in all_samples),
        metric_errors=sum(s.metric_error is not None for s in all_samples),
        mean_tool_calls=sum(s.tool_calls for s in all_samples) / len(all_samples) if used_tools else None,
        usage=Usage.total(usages),
        elapsed_seconds=elapsed,
        library_size=None if library is None else len(library),
        examples=results,
    )
