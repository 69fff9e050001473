"""The majority baseline: a program that gives every input the most frequent training answer.

On a labeling task a weak model can be worse than that constant (the embedded 1.5B model answers field-ops to
most support tickets and scores 9%; answering self-service to all of them scores 20%), and then any lesson
that moves its answers toward a common label gains points without teaching a rule. Scoring the constant on
the same held-out examples, from the labels alone (the metric, no LM), tells the two apart. Open answers
(numbers, text) rarely repeat, and there is no such baseline.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dspy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MajorityBaseline:
    """``answer`` (the most frequent of ``training_count`` training answers) scored on each held-out example."""

    answer: str
    frequency: int  # how many training examples have this answer
    training_count: int
    scores: tuple[float, ...]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0

    def to_dict(self) -> dict:
        return {"answer": self.answer, "frequency": self.frequency, "training_count": self.training_count,
                "mean": self.mean, "scores": list(self.scores)}


def most_frequent_answer(examples: Sequence[dspy.Example], answer_field: str) -> tuple[str, int] | None:
    """The most frequent ``answer_field`` value and its count, when the answers are labels: the top one repeats
    and there are at most half as many distinct answers as examples (else the answers are open, and None)."""
    answers = [str(e[answer_field]) for e in examples if answer_field in e]
    if not answers:
        return None
    counts = Counter(answers)
    (answer, count), = counts.most_common(1)
    if count < 2 or len(counts) > len(answers) / 2:
        return None
    return answer, count


def constant_scores(examples: Sequence[dspy.Example], metric: Callable, answer_field: str, answer: str
                    ) -> list[float]:
    """The metric's score of each example for the prediction ``{answer_field: answer}`` (no LM)."""
    scores = []
    for example in examples:
        result = metric(example, dspy.Prediction(**{answer_field: answer}))
        scores.append(float(getattr(result, "score", result)))
    return scores


def majority_baseline(trainset: Sequence[dspy.Example], heldout: Sequence[dspy.Example], metric: Callable,
                      answer_field: str) -> MajorityBaseline | None:
    """The most frequent training answer scored on ``heldout``; None for open answers or a metric that cannot
    score a bare answer (one that needs other fields of a prediction, say)."""
    found = most_frequent_answer(trainset, answer_field)
    if found is None:
        return None
    answer, count = found
    try:
        scores = constant_scores(heldout, metric, answer_field, answer)
    except Exception as exc:  # the baseline is a courtesy; a metric that needs more than the answer has none
        logger.info("no majority baseline: the metric could not score the bare answer %r (%s)", answer, exc)
        return None
    return MajorityBaseline(answer, count, len(trainset), tuple(scores))
