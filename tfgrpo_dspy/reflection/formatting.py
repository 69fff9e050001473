"""The text a reflection prompt is given: references, answers, trajectories, outcomes, attempts and the library.

Everything here formats, nothing calls an LM. A trajectory longer than the call's budget loses its middle
(`clip_middle`): its start says what the attempt set out to do, its end where it failed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import dspy

from tfgrpo_dspy.inference.outputs import answer_text
from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.reflection.records import RolloutSummary

NO_REFERENCE = "unknown: there is no ground truth; rewards measure agreement with the group's majority answer"
EMPTY_LIBRARY = "(the library is empty)"
SUCCESS = 1.0 - 1e-9  # a reward at least this high is "judged correct"


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def render_library(library: ExperienceLibrary, *, records: bool = False) -> str:
    text = library.render_with_records() if records else library.render()
    return text or EMPTY_LIBRARY


def clip_middle(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters by dropping its middle: the start says what the attempt set
    out to do, the end holds its last steps, its answer and where it failed."""
    if limit is None or len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters omitted ...]\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 5
    return text[:head] + marker + text[len(text) - (keep - head):]


def format_reference(example: dspy.Example, reference_fields: Sequence[str] | None) -> str:
    """The example's reference fields as ``name: value`` lines; None = no ground truth."""
    if reference_fields is None:
        return NO_REFERENCE
    labels = example.labels()
    lines = [f"{name}: {as_text(labels[name])}" for name in reference_fields if name in labels]
    return "\n".join(lines) or "not given"


def format_answer(outputs: dict[str, Any] | None, reference_fields: Sequence[str] | None) -> str:
    """The program's outputs written as `format_reference` writes a reference (the reference fields it
    answered), so the two compare; all final outputs when it answered none of them."""
    if not outputs:
        return "(no answer)"
    lines = [f"{name}: {as_text(outputs[name])}" for name in reference_fields or () if name in outputs]
    return "\n".join(lines) or answer_text(outputs)


def format_trajectory(rollout: Rollout) -> str:
    if not rollout.trace and rollout.error:
        return f"The program failed before producing any step: {rollout.error}"
    parts = []
    for number, step in enumerate(rollout.trace, start=1):
        lines = [f"## Step {number}: {step['predictor']}"]
        lines += [f"input {key}: {as_text(value)}" for key, value in step["inputs"].items()
                  if key != "experiences"]  # the lessons are shown once, as the library
        lines += [f"output {key}: {as_text(value)}" for key, value in (step["outputs"] or {}).items()]
        parts.append("\n".join(lines))
    if rollout.error:
        parts.append(f"## The program then failed: {rollout.error}")
    return "\n\n".join(parts)


def format_outcome(rollout: Rollout) -> str:
    if not rollout.scored:
        return f"the attempt was not scored: {rollout.error or rollout.metric_error}"
    verdict = "yes" if rollout.score >= SUCCESS else "no"
    lines = [f"judged correct: {verdict} (reward {rollout.score:.2f})"]
    if rollout.feedback:
        lines.append(f"feedback: {rollout.feedback}")
    return "\n".join(lines)


def format_attempts(group: GroupOutcome, summaries: dict[int, RolloutSummary], max_chars: int | None = None) -> str:
    """Each scored attempt's summary, or its trajectory when it has none; trajectories share ``max_chars``."""
    scored = [(r, a) for r, a in zip(group.rollouts, group.advantages, strict=True) if a is not None]
    per_attempt = None if max_chars is None else max_chars // max(len(scored), 1)
    blocks = []
    for rollout, advantage in scored:
        summary = summaries.get(rollout.sample_index)
        head = f"### Attempt {rollout.sample_index + 1}: reward {rollout.score:.2f}, advantage {advantage:+.2f}"
        if summary is None or summary.error:  # summaries off, or this one failed: show what it did
            body = clip_middle(format_trajectory(rollout), per_attempt)
        else:
            used = ", ".join(f"E{i}" for i in summary.experiences_used) or "none"
            body = f"{summary.summary}\nlessons applied: {used}\nfirst divergence: {summary.first_divergence}"
        if rollout.feedback:
            body += f"\ngrader feedback: {rollout.feedback}"
        blocks.append(f"{head}\n{body}")
    return "\n\n".join(blocks)

