"""A rollout's reward: a DSPy metric called in any of its forms, or agreement with its group's majority answer.

A metric is user code: it may take (example, prediction, trace) or two arguments, and return a float, a bool,
or a Prediction or dict with ``score`` and ``feedback``. `score_prediction` accepts them all, and a metric that
raises or returns no number scores a failure with the reason recorded. Without ground truth, the answers of a
group vote (`majority_vote_scores`): self-consistency, no labels.
"""

from __future__ import annotations

import inspect
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy


def metric_call_arity(metric: Callable) -> int:
    """How many positional arguments to pass a DSPy metric: 3 (example, pred, trace) or 2.

    Raises TypeError for anything that cannot be called as a metric.
    """
    if not callable(metric):
        raise TypeError(f"metric must be callable as metric(example, prediction, trace=None), got {metric!r}")
    try:
        sig = inspect.signature(metric)
    except (TypeError, ValueError):
        return 3  # builtins and C callables: trust DSPy's convention
    for arity in (3, 2):
        try:
            sig.bind(*([None] * arity))
            return arity
        except TypeError:
            continue
    raise TypeError(
        f"metric {getattr(metric, '__name__', metric)!r} has signature {sig}; a DSPy metric takes "
        "(example, prediction, trace=None)"
    )


@dataclass(frozen=True)
class Score:
    value: float
    feedback: str | None = None
    error: str | None = None


def score_prediction(metric: Callable, example: dspy.Example, prediction: Any, failure_score: float) -> Score:
    """Call a DSPy metric and turn any of its return types into a float; a broken metric scores a failure."""
    try:
        args = (example, prediction, None)[: metric_call_arity(metric)]
        result = metric(*args)
    except Exception as exc:  # the metric is user code: record, don't crash the run
        return Score(failure_score, error=f"metric raised {type(exc).__name__}: {exc}")
    feedback = None
    value = result
    if isinstance(result, dict) and "score" in result:
        value, feedback = result["score"], result.get("feedback")
    elif not isinstance(result, (int, float)) and hasattr(result, "score"):
        value, feedback = result.score, getattr(result, "feedback", None)
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or math.isnan(value):
        return Score(failure_score, error=f"metric returned {value!r}, not a number")
    return Score(float(value), None if feedback is None else str(feedback))


# -- majority vote (no ground truth) -------------------------------------------------------------
def normalize_answer(answer: str | None) -> str | None:
    """Canonical form for voting: case, spacing, trailing dots, thousands commas and number formats."""
    if answer is None:
        return None
    text = " ".join(str(answer).strip().lower().split()).rstrip(".")
    number = re.fullmatch(r"[$]?\s*(-?[\d,]*\.?\d+)\s*%?", text)
    if number:
        try:
            value = float(number.group(1).replace(",", ""))
            return str(int(value)) if value.is_integer() else repr(value)
        except ValueError:
            pass
    return text or None


def majority_vote_scores(answers: Sequence[str | None]) -> tuple[list[float], str | None]:
    """1.0 for answers equal to the group's unique most common answer, else 0.0 (ties: no majority)."""
    normalized = [normalize_answer(a) for a in answers]
    counts = Counter(a for a in normalized if a is not None)
    if not counts:
        return [0.0] * len(answers), None
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return [0.0] * len(answers), None
    winner = ranked[0][0]
    return [1.0 if a == winner else 0.0 for a in normalized], winner
