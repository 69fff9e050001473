"""The reflection calls: summarize a rollout, extract a group's lesson, decide a step's edits, repair a lesson.

Each call runs one Signature (see the top-level ``signatures/`` folder) on a private copy of the
reflection LM, for exact usage under threads, with its answer capped at ``max_tokens``. Malformed
output is retried with a fresh sample; when it still fails, the call returns an error instead of
raising, so one bad reflection never corrupts the library. Nothing here judges lessons: that is
`tfgrpo_dspy.reflection.guard`. What the calls return is `tfgrpo_dspy.reflection.records`, the text they are
given `tfgrpo_dspy.reflection.formatting`, how their answers are read `tfgrpo_dspy.reflection.parsing`, and
which Signature each runs `tfgrpo_dspy.reflection.steps` (all re-exported here).
"""

from __future__ import annotations

import logging
from typing import Any

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.library.edits import EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.parallel import call_with_timeout
from tfgrpo_dspy.reflection.formatting import (
    EMPTY_LIBRARY,
    NO_REFERENCE,
    SUCCESS,
    as_text,
    clip_middle,
    format_answer,
    format_attempts,
    format_outcome,
    format_reference,
    format_trajectory,
    render_library,
)
from tfgrpo_dspy.reflection.parsing import parse_ids, parse_lesson_lines
from tfgrpo_dspy.reflection.records import Extraction, Lesson, Proposal, RawLesson, RolloutSummary, UpdateDecision
from tfgrpo_dspy.reflection.steps import OPTIONAL_FIELDS, ReflectionSignatures
from tfgrpo_dspy.usage import Usage, usage_of

logger = logging.getLogger(__name__)

# Re-exported: callers import these from here.
__all__ = [
    "EMPTY_LIBRARY", "NO_REFERENCE", "OPTIONAL_FIELDS", "SUCCESS", "Extraction", "Lesson", "Proposal", "RawLesson",
    "ReflectionSignatures", "Reflector", "RolloutSummary", "UpdateDecision", "as_text", "clip_middle",
    "format_answer", "format_attempts", "format_outcome", "format_reference", "format_trajectory", "parse_ids",
    "parse_lesson_lines", "render_library",
]


class Reflector:
    """Runs the reflection signatures on the reflection LM, with retries on malformed output.

    Args:
        lm: the reflection LM; None means ``dspy.settings.lm`` at call time.
        signatures: the Signature of each step.
        max_retries: extra attempts after a failed or unparsable call.
        retry_temperature: sampling temperature of the retries, so a retry is a new sample.
        timeout: wall-clock seconds one attempt may take before it is abandoned and retried.
        max_tokens: cap on one answer's tokens (None: the LM's own).
        max_trajectory_chars: the most characters of trajectory one call sees. None = no limit.
    """

    def __init__(
        self,
        lm: dspy.BaseLM | None = None,
        *,
        signatures: ReflectionSignatures | None = None,
        max_retries: int = 2,
        retry_temperature: float = 0.7,
        timeout: float | None = None,
        max_tokens: int | None = None,
        max_trajectory_chars: int | None = None,
    ):
        self.lm = lm
        self.signatures = signatures or ReflectionSignatures()
        self.max_retries = max_retries
        self.retry_temperature = retry_temperature
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.max_trajectory_chars = max_trajectory_chars

    def _lm_copy(self, base: dspy.BaseLM, attempt: int, sample: tuple[int, float] | None = None) -> dspy.BaseLM:
        settings: dict[str, Any] = {}
        own_cap = getattr(base, "kwargs", {}).get("max_tokens")
        if self.max_tokens is not None and (own_cap is None or own_cap > self.max_tokens):
            settings["max_tokens"] = self.max_tokens
        if sample is not None:
            # Draw number k of a sampled call: its own rollout_id, so draws differ and a rerun gets the same ones.
            number, temperature = sample
            settings.update(rollout_id=1000 * (number + 1) + attempt, temperature=temperature)
        elif attempt:
            # The first attempt may come from DSPy's cache (that is what makes resumed runs free);
            # a retry must be a new sample, hence its own rollout_id and a non-zero temperature.
            settings.update(rollout_id=attempt, temperature=self.retry_temperature)
        return base.copy(**settings)

    def run(self, signature: type[dspy.Signature], _sample: tuple[int, float] | None = None,
            **inputs: Any) -> tuple[dspy.Prediction | None, str | None, Usage]:
        """Run ``signature`` on ``inputs``; ``_sample=(k, temperature)`` makes it draw k of a sampled call."""
        base = self.lm or dspy.settings.lm
        if base is None:
            return None, "no reflection LM: pass reflection_lm= or call dspy.configure(lm=...)", Usage()
        copies, last_error = [], None
        for attempt in range(self.max_retries + 1):
            lm = self._lm_copy(base, attempt, _sample)
            copies.append(lm)
            predictor = dspy.Predict(signature)
            predictor.lm = lm
            try:
                with dspy.context(disable_history=False):
                    prediction = call_with_timeout(lambda: predictor(**inputs), self.timeout)  # noqa: B023
                return prediction, None, usage_of(copies)
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                logger.info("%s attempt %d failed: %s", signature.__name__, attempt + 1, last_error)
                if isinstance(exc, ContextWindowExceededError):
                    break  # the same prompt will not fit on a retry either
        logger.warning("%s failed after %d attempts: %s", signature.__name__, len(copies), last_error)
        return None, last_error, usage_of(copies)

    def summarize(self, rollout: Rollout, reference: str, library: ExperienceLibrary) -> RolloutSummary:
        prediction, error, usage = self.run(
            self.signatures.summarize,
            task_inputs=as_text(rollout.inputs),
            reference=reference,
            trajectory=clip_middle(format_trajectory(rollout), self.max_trajectory_chars),
            outcome=format_outcome(rollout),
            experience_library=render_library(library),
        )
        if prediction is None:
            return RolloutSummary(rollout.example_index, rollout.sample_index, error=error, usage=usage)
        return RolloutSummary(
            rollout.example_index,
            rollout.sample_index,
            summary=str(prediction.summary),
            experiences_used=parse_ids(prediction.experiences_used, library),
            first_divergence=str(prediction.first_divergence),
            usage=usage,
        )

    def extract(
        self,
        task_text: str,
        reference: str,
        group: GroupOutcome,
        summaries: dict[int, RolloutSummary],
        library: ExperienceLibrary,
        *,
        max_lessons: int,
        max_words: int,
    ) -> tuple[Extraction | None, str | None, Usage]:
        prediction, error, usage = self.run(
            self.signatures.extract,
            task_inputs=task_text,
            reference=reference,
            attempts=format_attempts(group, summaries, self.max_trajectory_chars),
            experience_library=render_library(library),
            max_lessons=max_lessons,
            max_words=max_words,
        )
        if prediction is None:
            return None, error, usage
        if isinstance(prediction.lessons, str):  # a line format such as ExtractLessonLines
            items, unparsed = parse_lesson_lines(prediction.lessons)
        else:
            items, unparsed = [], []
            for item in list(prediction.lessons or []):
                data = item.model_dump() if hasattr(item, "model_dump") else dict(item)
                items.append((str(data.get("condition") or ""), str(data.get("action") or ""), data.get("replaces")))
        lessons = []
        for condition, action, replaced in items[:max_lessons]:
            replaces = parse_ids([replaced], library) if replaced is not None else []
            lessons.append(RawLesson(condition, action, replaces[0] if replaces else None))
        return Extraction(str(prediction.difference or ""), lessons, parse_ids(prediction.misleading, library),
                          parse_ids(getattr(prediction, "useful", None), library), unparsed), None, usage

    def induce(self, failures_text: str, sample: int, temperature: float, contrast_text: str = ""
               ) -> tuple[RawLesson | None, str | None, Usage]:
        """One candidate rule for several failed inputs, told apart from the contrast inputs; ``sample`` numbers
        the draws of one induction, so each is a new sample at ``temperature`` (its own rollout id), not a
        cache hit of the first ("" = no contrast). A signature without a ``contrast`` field (a user's own) reads
        both in one."""
        signature = self.signatures.induce
        if "contrast" in signature.input_fields:
            inputs = {"failures": failures_text, "contrast": contrast_text or "(none)"}
        elif contrast_text:
            inputs = {"failures": f"{failures_text}\n\nInputs with other correct answers:\n{contrast_text}"}
        else:
            inputs = {"failures": failures_text}
        prediction, error, usage = self.run(signature, **inputs, _sample=(sample, temperature))
        if prediction is None:
            return None, error, usage
        return RawLesson(str(prediction.condition or ""), str(prediction.action or "")), None, usage

    def decide(self, proposals_text: str, library: ExperienceLibrary) -> tuple[list[EditOp], str | None, Usage]:
        prediction, error, usage = self.run(
            self.signatures.update,
            experience_library=render_library(library, records=True),
            proposals=proposals_text,
            max_experiences=library.max_experiences or 50,
            max_words=library.max_words or 60,
        )
        if prediction is None:
            return [], error, usage
        ops = []
        for raw in prediction.operations or []:
            try:
                ops.append(EditOp.coerce(raw))
            except (ValueError, TypeError) as exc:
                logger.info("ignoring a malformed update operation %r: %s", raw, exc)
        return ops, None, usage

    def generalize(self, lesson: str, task_text: str, problem: str, max_words: int) -> tuple[str, Usage]:
        prediction, _, usage = self.run(self.signatures.generalize, lesson=lesson, task_input=task_text,
                                        problem=problem, max_words=max_words)
        return (str(prediction.general_lesson).strip() if prediction is not None else ""), usage

    def shorten(self, lesson: str, max_words: int) -> tuple[str, Usage]:
        prediction, _, usage = self.run(self.signatures.shorten, lesson=lesson, max_words=max_words)
        return (str(prediction.short_lesson).strip() if prediction is not None else ""), usage
