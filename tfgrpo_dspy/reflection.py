"""The semantic advantage: summarize rollouts, extract lessons per group, decide the library edits.

Each call runs the matching Signature on a private copy of the reflection LM (for exact usage
under threads). Malformed output is retried with a fresh sample; when it still fails, the call
returns an error instead of raising, so one bad reflection never corrupts the library.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from tfgrpo_dspy.library import EditOp, ExperienceLibrary, normalize_text, word_count
from tfgrpo_dspy.parallel import call_with_timeout
from tfgrpo_dspy.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.signatures import (
    ExtractLessons,
    GeneralizeLesson,
    ShortenLesson,
    SummarizeRollout,
    UpdateLibrary,
)
from tfgrpo_dspy.usage import Usage, UsageRecord, usage_of

logger = logging.getLogger(__name__)

NO_REFERENCE = "unknown: there is no ground truth; rewards measure agreement with the group's majority answer"
EMPTY_LIBRARY = "(the library is empty)"


@dataclass(frozen=True)
class RolloutSummary(UsageRecord):
    example_index: int
    sample_index: int
    summary: str = ""
    experiences_used: list[str] = field(default_factory=list)
    where_it_went_wrong: str = ""
    error: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class Proposal(UsageRecord):
    """The edits proposed from one informative group."""

    example_index: int
    ops: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # lessons that only restated their input


@dataclass(frozen=True)
class UpdateDecision(UsageRecord):
    """The final edits of one step, as decided by the update call."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    usage: Usage = field(default_factory=Usage)


# -- prompt material ----------------------------------------------------------------------------
def render_library(library: ExperienceLibrary) -> str:
    return library.render() or EMPTY_LIBRARY


def clip_middle(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters by dropping its middle: the start says what the attempt set
    out to do, the end holds its last steps, its answer and where it failed."""
    if limit is None or len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters omitted ...]\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 5
    return text[:head] + marker + text[len(text) - (keep - head):]


def format_trajectory(rollout: Rollout) -> str:
    if not rollout.trace and rollout.error:
        return f"The program failed before producing any step: {rollout.error}"
    parts = []
    for number, step in enumerate(rollout.trace, start=1):
        lines = [f"## Step {number}: {step['predictor']}"]
        lines += [f"input {key}: {_as_text(value)}" for key, value in step["inputs"].items()]
        lines += [f"output {key}: {_as_text(value)}" for key, value in (step["outputs"] or {}).items()]
        parts.append("\n".join(lines))
    if rollout.error:
        parts.append(f"## The program then failed: {rollout.error}")
    return "\n\n".join(parts)


def format_outcome(rollout: Rollout) -> str:
    lines = [f"reward: {rollout.score:.2f}"]
    if rollout.feedback:
        lines.append(f"feedback: {rollout.feedback}")
    if rollout.error:
        lines.append(f"the attempt crashed: {rollout.error}")
    if rollout.metric_error:
        lines.append(f"the grader failed: {rollout.metric_error}")
    return "\n".join(lines)


def format_attempts(
    group: GroupOutcome, summaries: dict[int, RolloutSummary], max_chars: int | None = None
) -> str:
    """Each attempt's summary, or its trajectory when it has none; trajectories share ``max_chars``."""
    blocks = []
    per_attempt = None if max_chars is None else max_chars // max(len(group.rollouts), 1)
    for rollout, advantage in zip(group.rollouts, group.advantages, strict=True):
        summary = summaries.get(rollout.sample_index)
        head = f"### Attempt {rollout.sample_index + 1}: reward {rollout.score:.2f}, advantage {advantage:+.2f}"
        if summary is None or summary.error:  # summaries off, or this one failed: show what it did
            body = clip_middle(format_trajectory(rollout), per_attempt)
        else:
            body = (f"{summary.summary}\nlessons applied: {', '.join(summary.experiences_used) or 'none'}\n"
                    f"where it went wrong: {summary.where_it_went_wrong}")
        if rollout.feedback:
            body += f"\ngrader feedback: {rollout.feedback}"
        blocks.append(f"{head}\n{body}")
    return "\n\n".join(blocks)


def format_proposals(proposals: list[Proposal]) -> str:
    lines = []
    for proposal in proposals:
        for op in proposal.ops:
            target = f" E{op['id']}" if op.get("id") is not None else ""
            text = f": {op['text']}" if op.get("text") else ""
            reason = f" (reason: {op['reason']})" if op.get("reason") else ""
            lines.append(f"- {op['op']}{target}{text}{reason}")
    return "\n".join(lines)


def format_reference(example: dspy.Example, use_ground_truth: bool) -> str:
    if not use_ground_truth:
        return NO_REFERENCE
    labels = example.labels().toDict()
    return "\n".join(f"{key}: {_as_text(value)}" for key, value in labels.items()) or "not given"


def _as_proposal(op: EditOp, library: ExperienceLibrary) -> EditOp | None:
    """A proposal is a suggestion for the update step: keep its intent, drop what cannot mean anything.

    Small models often write "modify" for a new lesson; a modify naming no existing lesson is an add.
    A delete of nothing, a keep, or an edit without text is no proposal at all.
    """
    if op.op == "modify" and op.id not in library:
        return EditOp(op="add", text=op.text, reason=op.reason) if op.text else None
    if op.op == "delete":
        return op if op.id in library else None
    if op.op == "keep" or not (op.text or "").strip():
        return None
    return op


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[a-z0-9']+")
MIN_SHARED_NUMBERS = 2  # one shared number is often a general constant ("60 minutes"); two rarely are
MIN_COPIED_WORDS = 6  # a copied clause, longer than the stock phrases lessons and tasks share
MIN_ANSWER_CHARS = 4  # shorter answers ("3", "yes", "no") also appear in general advice; numbers need 2 digits


def restated_details(lesson: str, task_text: str, answers: Sequence[str] = ()) -> str | None:
    """Why ``lesson`` looks tied to the one input ``task_text``, or None if it does not.

    Small reflection models often restate the problem ("When the coffee maker is priced at $116...")
    or its answer ("When the Riverside Institute was founded, it was in 1987.") instead of the
    strategy behind it. Three model-independent signs: the lesson states one of the example's
    ``answers`` (a label of MIN_ANSWER_CHARS characters or a 2-digit number), repeats two or more of the input's
    numbers, or copies a run of MIN_COPIED_WORDS of its words.
    """
    folded = lesson.casefold()
    for answer in answers:
        answer = normalize_text(answer)
        distinctive = len(answer) >= MIN_ANSWER_CHARS or (len(answer) >= 2 and answer.isdigit())
        if distinctive and re.search(rf"(?<!\w){re.escape(answer.casefold())}(?!\w)", folded):
            return f"it states the example's answer {answer!r}"
    numbers = {n.replace(",", "") for n in _NUMBER.findall(lesson)}
    shared = sorted(numbers & {n.replace(",", "") for n in _NUMBER.findall(task_text)}, key=lambda n: (len(n), n))
    if len(shared) >= MIN_SHARED_NUMBERS:
        return f"it repeats the input's numbers {', '.join(shared)}"
    lesson_words, input_words = _WORD.findall(lesson.lower()), _WORD.findall(task_text.lower())
    n = MIN_COPIED_WORDS
    input_runs = {tuple(input_words[i : i + n]) for i in range(len(input_words) - n + 1)}
    for i in range(len(lesson_words) - n + 1):
        if tuple(lesson_words[i : i + n]) in input_runs:
            return f"it copies {' '.join(lesson_words[i : i + n])!r} from the input"
    return None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


# -- the calls ----------------------------------------------------------------------------------
class Reflector:
    """Runs the three reflection signatures on the reflection LM, with retries on malformed output.

    Args:
        lm: the reflection LM; None means ``dspy.settings.lm`` at call time.
        max_retries: extra attempts after a failed or unparsable call.
        retry_temperature: sampling temperature of the retries, so a retry is a new sample.
        timeout: wall-clock seconds one attempt may take before it is abandoned and retried.
        generalize: give a proposed lesson that restates its input (`restated_details`) one
            rewrite, and drop it if the rewrite still does.
        max_trajectory_chars: the most characters of trajectory one call sees (a summary sees one
            trajectory, an extraction without summaries shares this among the group's attempts);
            longer ones lose their middle. None = no limit.
    """

    def __init__(
        self,
        lm: dspy.BaseLM | None = None,
        *,
        max_retries: int = 2,
        retry_temperature: float = 0.7,
        timeout: float | None = None,
        generalize: bool = True,
        max_trajectory_chars: int | None = None,
    ):
        self.lm = lm
        self.timeout = timeout
        self.generalize = generalize
        self.max_trajectory_chars = max_trajectory_chars
        self.max_retries = max_retries
        self.retry_temperature = retry_temperature

    def _run(self, signature: type[dspy.Signature], **inputs: Any) -> tuple[dspy.Prediction | None, str | None, Usage]:
        base = self.lm or dspy.settings.lm
        if base is None:
            return None, "no reflection LM: pass reflection_lm= or call dspy.configure(lm=...)", Usage()
        copies, last_error = [], None
        for attempt in range(self.max_retries + 1):
            # The first attempt may come from DSPy's cache (that is what makes resumed runs free);
            # a retry must be a new sample, hence its own rollout_id and a non-zero temperature.
            lm = base.copy() if attempt == 0 else base.copy(rollout_id=attempt, temperature=self.retry_temperature)
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

    def summarize(self, rollout: Rollout, library: ExperienceLibrary) -> RolloutSummary:
        prediction, error, usage = self._run(
            SummarizeRollout,
            task_inputs=_as_text(rollout.inputs),
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
            experiences_used=[str(x) for x in (prediction.experiences_used or [])],
            where_it_went_wrong=str(prediction.where_it_went_wrong),
            usage=usage,
        )

    def extract(
        self,
        example: dspy.Example,
        group: GroupOutcome,
        summaries: dict[int, RolloutSummary],
        library: ExperienceLibrary,
        *,
        use_ground_truth: bool,
        max_proposals: int,
    ) -> Proposal:
        prediction, error, usage = self._run(
            ExtractLessons,
            task_inputs=_as_text(example.inputs().toDict()),
            reference=format_reference(example, use_ground_truth),
            attempts=format_attempts(group, summaries, self.max_trajectory_chars),
            experience_library=render_library(library),
            max_proposals=max_proposals,
            max_words=library.max_words or 60,
        )
        if prediction is None:
            return Proposal(group.example_index, error=error, usage=usage)
        ops = [_as_proposal(EditOp.coerce(op), library) for op in (prediction.proposals or [])]
        kept = [op for op in ops if op is not None][:max_proposals]
        dropped: list[dict[str, Any]] = []
        if self.generalize:
            # Labels are checked only when the reflection may see them (not under ground_truth=False).
            answers = [_as_text(v) for v in example.labels().values()] if use_ground_truth else []
            kept, dropped, generalize_usage = self._generalize(kept, _as_text(example.inputs().toDict()), answers,
                                                               library.max_words or 60)
            usage = usage + generalize_usage
        if library.max_words is not None:
            kept, shorten_usage = self._fit_word_limit(kept, library.max_words)
            usage = usage + shorten_usage
        return Proposal(group.example_index, ops=[op.model_dump(exclude_none=True) for op in kept], usage=usage,
                        dropped=dropped)

    def _generalize(
        self, ops: list[EditOp], task_text: str, answers: Sequence[str], max_words: int
    ) -> tuple[list[EditOp], list[dict[str, Any]], Usage]:
        """Ask once to generalize each lesson that restates its input; drop one whose rewrite still does."""
        usage, kept, dropped = Usage(), [], []
        for op in ops:
            problem = restated_details(op.text, task_text, answers) if op.text else None
            if problem is None:
                kept.append(op)
                continue
            prediction, _, spent = self._run(GeneralizeLesson, lesson=op.text, task_input=task_text,
                                             problem=problem, max_words=max_words)
            usage = usage + spent
            rewritten = str(prediction.general_lesson).strip() if prediction is not None else ""
            if rewritten and restated_details(rewritten, task_text, answers) is None:
                kept.append(op.model_copy(update={"text": rewritten}))
                continue
            logger.info("dropped a proposed lesson that restates its input (%s): %s", problem, op.text)
            dropped.append({**op.model_dump(exclude_none=True), "dropped_because": problem})
        return kept, dropped, usage

    def _fit_word_limit(self, ops: list[EditOp], max_words: int) -> tuple[list[EditOp], Usage]:
        """Ask once to shorten each over-long lesson; one still too long is left for the library to refuse."""
        usage = Usage()
        fitted = []
        for op in ops:
            if op.text and word_count(normalize_text(op.text)) > max_words:
                prediction, _, spent = self._run(ShortenLesson, lesson=op.text, max_words=max_words)
                usage = usage + spent
                if prediction is not None and str(prediction.short_lesson).strip():
                    op = op.model_copy(update={"text": str(prediction.short_lesson)})
            fitted.append(op)
        return fitted, usage

    def decide(self, proposals: list[Proposal], library: ExperienceLibrary) -> UpdateDecision:
        prediction, error, usage = self._run(
            UpdateLibrary,
            experience_library=render_library(library),
            proposals=format_proposals(proposals),
            max_experiences=library.max_experiences or 50,
            max_words=library.max_words or 60,
        )
        if prediction is None:
            return UpdateDecision(error=error, usage=usage)
        ops = [EditOp.coerce(op) for op in (prediction.operations or [])]
        if library.max_words is not None:
            # The update step may merge proposals into a longer text; shorten it rather than lose it.
            ops, shorten_usage = self._fit_word_limit(ops, library.max_words)
            usage = usage + shorten_usage
        return UpdateDecision(ops=[op.model_dump(exclude_none=True) for op in ops], usage=usage)
