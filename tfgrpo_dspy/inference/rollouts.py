"""Rollouts: run a program G times on one example, capture everything, score it.

Each rollout runs on a private copy of the program whose predictors use private LM copies
with a rollout_id unique to that rollout, so DSPy's cache never collapses a group, and the
copy's history gives the rollout's exact usage; a library with routes shows it what it would show a new
input (`leaving_out`). A failure inside a rollout (LM, tool, program
or metric) is recorded on the rollout and scored as a failure, never raised.
"""

from __future__ import annotations

import logging
import statistics
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dspy

from tfgrpo_dspy.inference.outputs import MAX_FIELD_CHARS, answer_text, count_tool_calls, final_outputs, jsonable
from tfgrpo_dspy.inference.retrieval import leaving_out, route_text
from tfgrpo_dspy.inference.scoring import (
    Score,
    majority_vote_scores,
    metric_call_arity,
    normalize_answer,
    score_prediction,
)
from tfgrpo_dspy.parallel import call_with_timeout
from tfgrpo_dspy.usage import Usage, UsageRecord, usage_of

logger = logging.getLogger(__name__)

# How a rollout is scored (`tfgrpo_dspy.inference.scoring`) and what it records of the outputs
# (`tfgrpo_dspy.inference.outputs`) live in modules of their own; their names are re-exported here.
__all__ = ["MAX_FIELD_CHARS", "GroupOutcome", "Rollout", "Score", "answer_text", "apply_majority_vote",
           "bind_rollout_lms", "count_tool_calls", "final_outputs", "jsonable", "majority_vote_scores",
           "metric_call_arity", "normalize_answer", "run_rollout", "score_prediction"]


@dataclass(frozen=True)
class Rollout(UsageRecord):
    """One sampled run of the program on one example, with its reward."""

    example_index: int
    sample_index: int
    rollout_id: int
    inputs: dict[str, Any]
    outputs: dict[str, Any] | None
    trace: list[dict[str, Any]]
    score: float
    feedback: str | None = None
    error: str | None = None
    metric_error: str | None = None
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def scored(self) -> bool:
        """The rollout ran and its metric answered: its reward is real signal, not infrastructure noise."""
        return self.error is None and self.metric_error is None

    def answer(self, answer_field: str) -> str | None:
        if self.outputs is None or self.outputs.get(answer_field) is None:
            return None
        return str(self.outputs[answer_field])


@dataclass(frozen=True)
class GroupOutcome:
    """The G rollouts of one example and the group-relative numbers GRPO is named for.

    Rollouts that crashed or could not be scored are kept for the record but left out of the
    group's mean, std and advantages: a timeout must not make a group look informative.
    """

    example_index: int
    rollouts: tuple[Rollout, ...]

    @property
    def rewards(self) -> list[float]:
        """The rewards of the scored rollouts."""
        return [r.score for r in self.rollouts if r.scored]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.rewards) if self.rewards else 0.0

    @property
    def std(self) -> float:
        return statistics.pstdev(self.rewards) if len(self.rewards) > 1 else 0.0

    @property
    def informative(self) -> bool:
        """Mixed rewards among the scored rollouts: some did better than others, so there is something to learn."""
        return self.std > 1e-9

    @property
    def advantages(self) -> list[float | None]:
        """(reward - mean) / std per rollout, in order; None for a rollout that was not scored."""
        std = self.std
        return [((r.score - self.mean) / std if std > 1e-9 else 0.0) if r.scored else None for r in self.rollouts]



def bind_rollout_lms(
    program: dspy.Module, rollout_id: int, temperature: float, sampling_seed: int | None = None
) -> tuple[list[dspy.BaseLM], dspy.BaseLM | None]:
    """Give every predictor of ``program`` (a private copy) a private LM copy for this rollout.

    A predictor's own LM wins over the global one, as in DSPy; one copy per distinct base LM,
    so history is not double counted. ``sampling_seed``, when given, is sent to the provider so
    the rollout can be regenerated exactly (OpenAI, vLLM, SGLang and llama.cpp honour it).
    Returns the copies and the copy of the context LM (``dspy.settings.lm``), which the rollout
    runs under so that predictors created inside ``forward()`` use this rollout's copy too.
    """
    settings: dict[str, Any] = {"temperature": temperature}
    if temperature:  # greedy samples are identical anyway, and DSPy warns about a rollout_id at temperature 0
        settings["rollout_id"] = rollout_id
    if sampling_seed is not None:
        settings["seed"] = sampling_seed
    copies: dict[int, dspy.BaseLM] = {}

    def copy_of(base: dspy.BaseLM) -> dspy.BaseLM:
        if id(base) not in copies:
            copies[id(base)] = base.copy(**settings)
        return copies[id(base)]

    context_lm = copy_of(dspy.settings.lm) if dspy.settings.lm is not None else None
    for name, predictor in program.named_predictors():
        base = predictor.lm or dspy.settings.lm
        if base is None:
            raise ValueError(f"predictor {name!r} has no LM: call dspy.configure(lm=...) or set predictor.lm")
        predictor.lm = copy_of(base)
    return list(copies.values()), context_lm


def run_rollout(
    program: dspy.Module,
    example: dspy.Example,
    *,
    example_index: int,
    sample_index: int,
    rollout_id: int,
    temperature: float,
    metric: Callable | None,
    failure_score: float = 0.0,
    sampling_seed: int | None = None,
    timeout: float | None = None,
) -> Rollout:
    """Run one rollout on a private copy of ``program``; never raises for LM, program or metric errors.

    With ``metric=None`` (no-ground-truth mode) the score is filled in later by the group's vote.
    A rollout that runs longer than ``timeout`` seconds is abandoned and recorded as failed.
    """
    local = program.deepcopy()
    lms, context_lm = bind_rollout_lms(local, rollout_id, temperature, sampling_seed)
    names = {id(p): n for n, p in local.named_predictors()}
    inputs = example.inputs().toDict()
    prediction, error = None, None
    # A training example is not routed by its own route (a no-op for other inputs): see `leaving_out`.
    with dspy.context(trace=[], disable_history=False, **({"lm": context_lm} if context_lm else {})), \
            leaving_out(route_text(inputs)):
        try:
            prediction = call_with_timeout(lambda: local(**inputs), timeout)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.debug("rollout %s failed:\n%s", rollout_id, traceback.format_exc())
        trace = [
            {"predictor": names.get(id(pred), type(pred).__name__), "inputs": jsonable(dict(pred_inputs)),
             "outputs": jsonable(dict(pred_outputs.items()) if hasattr(pred_outputs, "items") else pred_outputs)}
            for pred, pred_inputs, pred_outputs in (dspy.settings.trace or [])
        ]
    outputs = jsonable(dict(prediction.items())) if prediction is not None and hasattr(prediction, "items") else None
    if prediction is not None and outputs is None:
        error = f"program returned {type(prediction).__name__}, not a dspy.Prediction"
    score = Score(failure_score)
    if error is None and metric is not None:
        score = score_prediction(metric, example, prediction, failure_score)
    return Rollout(
        example_index=example_index,
        sample_index=sample_index,
        rollout_id=rollout_id,
        inputs=jsonable(inputs),
        outputs=outputs,
        trace=trace,
        score=score.value,
        feedback=score.feedback,
        error=error,
        metric_error=score.error,
        usage=usage_of(lms),
        tool_calls=count_tool_calls(outputs),
    )


def apply_majority_vote(rollouts: Sequence[Rollout], answer_field: str) -> list[Rollout]:
    """Score a group by agreement with its majority answer (self-consistency, no labels)."""
    scores, winner = majority_vote_scores([None if r.failed else r.answer(answer_field) for r in rollouts])
    feedback = f"majority answer: {winner}" if winner is not None else "no majority answer"
    return [replace(r, score=s, feedback=feedback) for r, s in zip(rollouts, scores, strict=True)]
