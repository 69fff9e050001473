"""Rewards for web question answering: an LLM judge, and a cheap token-overlap fallback.

Both return ``dspy.Prediction(score=..., feedback=...)`` so they work as plain metrics
and as feedback metrics. The judge never raises on a failed judge call: it scores 0
and puts the error in the feedback, so one bad call does not end a training run.
"""

from __future__ import annotations

import logging
import re
import string
import unicodedata
from collections import Counter
from typing import Any, Literal

import dspy

logger = logging.getLogger(__name__)


class JudgeAnswer(dspy.Signature):
    """Judge whether the student's answer to the question is correct, using the gold answer as the reference.
    Ignore differences in phrasing, formatting, word order and language. Extra information in the student
    answer is fine unless it contradicts the gold answer. The answer is INCORRECT if it misses or gets wrong
    any fact the gold answer requires, contradicts it, or does not answer the question.
    Explain briefly, then grade."""

    question: str = dspy.InputField()
    gold_answer: str = dspy.InputField()
    student_answer: str = dspy.InputField()
    explanation: str = dspy.OutputField(desc="one or two sentences comparing the student and gold answers")
    grade: Literal["CORRECT", "INCORRECT"] = dspy.OutputField()


class WebAnswerJudge:
    """LLM-judge metric: 1.0 if the judge grades the answer CORRECT, else 0.0.

    Args:
        judge_lm: the LM that grades; it may differ from the policy LM. None means the
            LM configured at call time (``dspy.settings.lm``).
        answer_field: the prediction field holding the student's answer.
    """

    def __init__(self, judge_lm: Any | None = None, answer_field: str = "answer"):
        self.judge_lm = judge_lm
        self.answer_field = answer_field
        self.grader = dspy.Predict(JudgeAnswer)

    def __call__(
        self,
        example: dspy.Example,
        prediction: dspy.Prediction,
        trace: Any = None,
        pred_name: str | None = None,
        pred_trace: Any = None,
    ) -> dspy.Prediction:
        student = str(prediction.get(self.answer_field, "") or "").strip()
        if not student:
            return dspy.Prediction(score=0.0, feedback="No answer was given.")
        lm = self.judge_lm or dspy.settings.lm
        if lm is None:
            return dspy.Prediction(score=0.0, feedback="Judge failed: no judge LM given and none configured.")
        try:
            with dspy.context(lm=lm):
                verdict = self.grader(
                    question=example.question, gold_answer=example.answer, student_answer=student
                )
        except Exception as err:  # a judge failure is a zero reward with a reason, not a crashed run
            logger.warning("judge call failed: %s: %s", type(err).__name__, err)
            return dspy.Prediction(score=0.0, feedback=f"Judge failed ({type(err).__name__}): {err}")
        score = 1.0 if verdict.grade == "CORRECT" else 0.0
        feedback = f"{verdict.grade}: {verdict.explanation} Gold answer: {example.answer}"
        return dspy.Prediction(score=score, feedback=feedback)


def make_judge_metric(judge_lm: Any | None = None) -> WebAnswerJudge:
    """The task's metric factory: an LLM judge on ``judge_lm`` (None = the configured LM)."""
    return WebAnswerJudge(judge_lm)


# --- cheap overlap metric (no judge) -------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation) | set("，。、：；？！“”‘’（）《》【】")


def normalize_answer(text: str) -> str:
    """Lowercase, NFKC, drop punctuation and English articles, collapse spaces."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(" " if ch in _PUNCTUATION else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    """Tokens of the normalized answer; CJK characters count one token each (no spaces in Chinese)."""
    tokens: list[str] = []
    for word in normalize_answer(text).split():
        buffer = ""
        for ch in word:
            if _is_cjk(ch):
                if buffer:
                    tokens.append(buffer)
                    buffer = ""
                tokens.append(ch)
            else:
                buffer += ch
        if buffer:
            tokens.append(buffer)
    return tokens


_CJK_RANGES = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF))  # kana, Han, Hangul


def _is_cjk(ch: str) -> bool:
    return any(low <= ord(ch) <= high for low, high in _CJK_RANGES)


def token_f1(gold: str, predicted: str) -> float:
    """SQuAD-style token F1 between two answers (1.0 when both are empty)."""
    gold_tokens, predicted_tokens = answer_tokens(gold), answer_tokens(predicted)
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    common = sum((Counter(gold_tokens) & Counter(predicted_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def overlap_metric(
    example: dspy.Example,
    prediction: dspy.Prediction,
    trace: Any = None,
    pred_name: str | None = None,
    pred_trace: Any = None,
) -> dspy.Prediction:
    """No-judge metric: 1.0 on a normalized exact match, else the token F1 with the gold answer."""
    student = str(prediction.get("answer", "") or "")
    if normalize_answer(student) == normalize_answer(example.answer) and normalize_answer(student):
        return dspy.Prediction(score=1.0, feedback="Exact match with the gold answer.")
    score = token_f1(example.answer, student)
    return dspy.Prediction(
        score=score, feedback=f"Token F1 {score:.2f} against the gold answer: {example.answer}"
    )
