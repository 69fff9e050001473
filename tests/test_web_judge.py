"""The LLM-judge reward (scripted judge LMs) and the token-overlap fallback."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from tfgrpo_dspy.kits.web.judge import (
    WebAnswerJudge,
    answer_tokens,
    normalize_answer,
    overlap_metric,
    token_f1,
)

EXAMPLE = dspy.Example(
    question="Who directs the Riverside Institute?", answer="Ada Lovelace", root_url="http://x/"
).with_inputs("question", "root_url")


def _grade(grade: str) -> DummyLM:
    return DummyLM([{"explanation": f"The student answer is {grade.lower()}.", "grade": grade}])


def test_correct_and_incorrect_grades():
    judged = WebAnswerJudge(_grade("CORRECT"))(EXAMPLE, dspy.Prediction(answer="It is Ada Lovelace."))
    assert judged.score == 1.0
    assert judged.feedback.startswith("CORRECT: The student answer is correct.")
    assert "Gold answer: Ada Lovelace" in judged.feedback
    judged = WebAnswerJudge(_grade("INCORRECT"))(EXAMPLE, dspy.Prediction(answer="Mary Anning"))
    assert judged.score == 0.0 and judged.feedback.startswith("INCORRECT")


def test_judge_sees_question_gold_and_student_answer():
    lm = _grade("CORRECT")
    WebAnswerJudge(lm)(EXAMPLE, dspy.Prediction(answer="Lovelace"))
    prompt = " ".join(str(m["content"]) for m in lm.history[-1]["messages"])
    assert "Who directs the Riverside Institute?" in prompt
    assert "Ada Lovelace" in prompt and "Lovelace" in prompt
    assert "extra information" in prompt.lower()


def test_judge_lm_can_differ_from_the_policy_lm():
    policy_lm, judge_lm = _grade("INCORRECT"), _grade("CORRECT")
    with dspy.context(lm=policy_lm):
        assert WebAnswerJudge(judge_lm)(EXAMPLE, dspy.Prediction(answer="Ada")).score == 1.0
        assert WebAnswerJudge()(EXAMPLE, dspy.Prediction(answer="Ada")).score == 0.0  # default: configured LM
    assert len(judge_lm.history) == 1 and len(policy_lm.history) == 1


class _DownEngine:
    """An LM engine whose every call fails, like an unreachable judge service."""

    def complete(self, request):
        raise RuntimeError("judge service unavailable")

    def stream(self, request):
        raise RuntimeError("judge service unavailable")

    def close(self):
        pass


def test_judge_failure_is_a_zero_with_the_error_not_an_exception():
    down = dspy.LM("openai/judge", engine=_DownEngine(), cache=False, num_retries=0)
    judged = WebAnswerJudge(down)(EXAMPLE, dspy.Prediction(answer="Ada Lovelace"))
    assert judged.score == 0.0
    assert "Judge failed" in judged.feedback and "judge service unavailable" in judged.feedback


def test_unparseable_grade_is_a_judge_failure():
    lm = DummyLM([{"explanation": "hmm", "grade": "PERHAPS"}] * 3)
    judged = WebAnswerJudge(lm)(EXAMPLE, dspy.Prediction(answer="Ada Lovelace"))
    assert judged.score == 0.0 and judged.feedback.startswith("Judge failed")


def test_empty_answer_or_missing_lm_scores_zero_without_a_call():
    lm = _grade("CORRECT")
    assert WebAnswerJudge(lm)(EXAMPLE, dspy.Prediction(answer="  ")).score == 0.0
    assert lm.history == []
    with dspy.context(lm=None):
        judged = WebAnswerJudge()(EXAMPLE, dspy.Prediction(answer="Ada"))
    assert judged.score == 0.0 and "no judge LM" in judged.feedback


def test_normalization_and_token_f1():
    assert normalize_answer("The  Riverside-Institute!") == "riverside institute"
    assert answer_tokens("北京大学 in Beijing") == ["北", "京", "大", "学", "in", "beijing"]
    assert token_f1("Ada Lovelace", "ada lovelace.") == 1.0
    assert token_f1("Ada Lovelace", "Mary Anning") == 0.0
    assert token_f1("14 September 2024", "14 September") == pytest.approx(0.8)
    assert token_f1("北京大学", "北京") == pytest.approx(2 * (1.0 * 0.5) / 1.5)


def test_overlap_metric():
    assert overlap_metric(EXAMPLE, dspy.Prediction(answer="ada lovelace")).score == 1.0
    partial = overlap_metric(EXAMPLE, dspy.Prediction(answer="Ada Byron"))
    assert partial.score == pytest.approx(0.5) and "Ada Lovelace" in partial.feedback
    assert overlap_metric(EXAMPLE, dspy.Prediction(answer="")).score == 0.0
