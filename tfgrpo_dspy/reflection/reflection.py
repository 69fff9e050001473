"""The reflection calls: summarize a rollout, extract a group's lesson, decide a step's edits, repair a lesson.

Each call runs one Signature (see the top-level ``signatures/`` folder) on a private copy of the
reflection LM, for exact usage under threads, with its answer capped at ``max_tokens``. Malformed
output is retried with a fresh sample; when it still fails, the call returns an error instead of
raising, so one bad reflection never corrupts the library. Nothing here judges lessons: that is
`tfgrpo_dspy.reflection.guard`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import dspy
from dspy.utils.exceptions import ContextWindowExceededError

from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout, answer_text
from tfgrpo_dspy.library.edits import EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.parallel import call_with_timeout
from tfgrpo_dspy.signatures import (
    ExtractLesson,
    GeneralizeLesson,
    InduceLesson,
    ShortenLesson,
    SummarizeRollout,
    UpdateLibrary,
)
from tfgrpo_dspy.usage import Usage, UsageRecord, usage_of

logger = logging.getLogger(__name__)

NO_REFERENCE = "unknown: there is no ground truth; rewards measure agreement with the group's majority answer"
EMPTY_LIBRARY = "(the library is empty)"
SUCCESS = 1.0 - 1e-9  # a reward at least this high is "judged correct"


# -- records (JSON at the log boundary, objects inside) ------------------------------------------
@dataclass(frozen=True)
class RolloutSummary(UsageRecord):
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


# Fields a user's own Signature may leave out: the induction's contrast, added later, is then read with its
# failures (`Reflector.induce`).
OPTIONAL_FIELDS = {"induce": {"contrast"}}


@dataclass(frozen=True)
class ReflectionSignatures:
    """The Signature of each reflection step; pass your own with the same field names to change a prompt."""

    summarize: type[dspy.Signature] = SummarizeRollout
    extract: type[dspy.Signature] = ExtractLesson
    induce: type[dspy.Signature] = InduceLesson
    update: type[dspy.Signature] = UpdateLibrary
    generalize: type[dspy.Signature] = GeneralizeLesson
    shorten: type[dspy.Signature] = ShortenLesson

    @classmethod
    def with_overrides(cls, overrides: dict[str, type[dspy.Signature]] | None) -> ReflectionSignatures:
        """The defaults with ``overrides`` applied; a wrong step name or missing field is a clear error."""
        overrides = dict(overrides or {})
        defaults = cls()
        for step, signature in overrides.items():
            if step not in {f.name for f in fields(cls)}:
                raise ValueError(f"signatures: unknown step {step!r}; the steps are {[f.name for f in fields(cls)]}")
            if not (isinstance(signature, type) and issubclass(signature, dspy.Signature)):
                raise TypeError(f"signatures[{step!r}] must be a dspy.Signature class, got {signature!r}")
            expected = getattr(defaults, step)
            missing = sorted(set(expected.fields) - set(signature.fields) - OPTIONAL_FIELDS.get(step, set()))
            if missing:
                raise ValueError(f"signatures[{step!r}] lacks the fields {missing} that {expected.__name__} has")
        return cls(**overrides)


# -- prompt material ----------------------------------------------------------------------------
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


def parse_ids(values: Any, library: ExperienceLibrary) -> list[int]:
    """The lesson ids in ``values`` (3, "E3", "[E3]") that exist in ``library``, in order, once each."""
    ids = []
    for value in values or []:
        try:
            parsed = EditOp(op="delete", id=value).id
        except ValueError:
            continue
        if parsed in library and parsed not in ids:
            ids.append(parsed)
    return ids


# -- the calls ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RawLesson:
    """A lesson as the extraction wrote it, before the guard."""

    condition: str
    action: str
    replaces: int | None = None


@dataclass(frozen=True)
class Extraction:
    difference: str
    lessons: list[RawLesson]
    misleading: list[int]
    useful: list[int]
    unparsed: list[str] = field(default_factory=list)  # lesson lines not in the 'When <condition>, <action>.' form


# One lesson line of `ExtractLessonLines`: "When <condition>, <action>." with an optional "(replaces E3)",
# after any list bullet or number the model puts before it.
_LESSON_LINE = re.compile(r"^(?:[-*\u2022]|\d+[.)])?\s*when\s+(?P<condition>.+?),\s*(?P<action>.+?)\s*"
                          r"(?:\(\s*replaces\s+\[?(?P<replaces>E?\d+)\]?\s*\)\s*)?\.?$", re.IGNORECASE)
_NO_LESSON = {"", "none", "none.", "[]", "n/a"}


def parse_lesson_lines(text: str) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """The (condition, action, replaced id) of each 'When <condition>, <action>.' line, and the lines that
    are not of that form (the word none and blank lines are neither)."""
    lessons, unparsed = [], []
    for line in text.splitlines():
        line = line.strip()
        if line.lower() in _NO_LESSON:
            continue
        match = _LESSON_LINE.match(line)
        if match is None:
            unparsed.append(line)
        else:
            lessons.append((match["condition"].strip(), match["action"].strip().rstrip("."), match["replaces"]))
    return lessons, unparsed


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
