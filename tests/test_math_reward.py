"""Math reward: answer extraction, math-verify equivalence, threads, and the time bound."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from tfgrpo_dspy.kits.math.reward import AnswerVerifier, MathAnswerMetric, VerificationTimeout, extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("34", "34"),
        ("Answer: 34", "34"),
        ("Some work.\nAnswer: \\frac{3}{4}.", "\\frac{3}{4}"),
        ("so the result is \\boxed{\\frac{1}{2}} and done", "\\frac{1}{2}"),
        ("\\boxed{x^{2}} then \\boxed{7}", "7"),
        ("The total is 1,250 dollars after 3 weeks, so we get 1,300 dollars.", "1300"),
        ("$2\\sqrt{3}$", "2\\sqrt{3}"),
        ("", None),
        ("no digits in this sentence at all", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.fixture(scope="module")
def metric() -> MathAnswerMetric:
    verifier = AnswerVerifier(timeout_seconds=20)
    yield MathAnswerMetric(verifier)
    verifier.close()


def _gold(answer: str) -> dspy.Example:
    return dspy.Example(problem="p", answer=answer).with_inputs("problem")


@pytest.mark.parametrize(
    ("gold", "answer", "score"),
    [
        ("34", "34", 1.0),
        ("34", "Answer: 034", 1.0),
        ("0.75", "\\frac{3}{4}", 1.0),
        ("2\\sqrt{3}", "\\sqrt{12}", 1.0),
        ("\\frac{3}{4}", "0.75", 1.0),
        ("34", "35", 0.0),
        ("-3", "3", 0.0),
    ],
)
def test_metric_scores_equivalent_answers(metric: MathAnswerMetric, gold: str, answer: str, score: float) -> None:
    result = metric(_gold(gold), dspy.Prediction(reasoning="...", answer=answer))
    assert result.score == score
    assert repr(gold) in result.feedback


def test_metric_feedback_names_extracted_and_gold_answers(metric: MathAnswerMetric) -> None:
    result = metric(_gold("34"), dspy.Prediction(answer="I think \\boxed{35}"))
    assert result.score == 0.0
    assert "'35'" in result.feedback and "'34'" in result.feedback and result.feedback.startswith("Incorrect")


def test_metric_falls_back_to_reasoning_only_when_answer_is_empty(metric: MathAnswerMetric) -> None:
    assert metric(_gold("12"), dspy.Prediction(reasoning="So Answer: 12", answer="")).score == 1.0
    assert metric(_gold("12"), dspy.Prediction(reasoning="So Answer: 12", answer="thirteen")).score == 0.0
    result = metric(_gold("12"), dspy.Prediction(reasoning="", answer=""))
    assert result.score == 0.0 and "no final answer" in result.feedback


def test_metric_works_inside_dspy_evaluate_threads(metric: MathAnswerMetric) -> None:
    """math-verify's own signal-based timeouts fail off the main thread; ours must not."""
    answers = {f"q{i}": (str(i * 3), f"\\frac{{{i * 6}}}{{2}}" if i % 2 else str(i * 3 + 1)) for i in range(8)}

    class Lookup(dspy.Module):
        def forward(self, problem: str) -> dspy.Prediction:
            return dspy.Prediction(answer=answers[problem][1])

    devset = [dspy.Example(problem=q, answer=gold).with_inputs("problem") for q, (gold, _) in answers.items()]
    seen_threads: set[str] = set()

    def recording_metric(example, pred, trace=None):
        seen_threads.add(threading.current_thread().name)
        return metric(example, pred, trace)

    result = dspy.Evaluate(devset=devset, metric=recording_metric, num_threads=4, display_progress=False)(Lookup())
    assert result.score == 50.0  # the four odd i are fractions equal to the gold; the even ones are off by one
    assert threading.main_thread().name not in seen_threads


def test_verifier_times_out_kills_the_worker_and_recovers() -> None:
    verifier = AnswerVerifier(timeout_seconds=1.5)
    try:
        with pytest.raises(VerificationTimeout):
            verifier.equal("2", "9^{9^{9^{9}}}")  # sympy cannot finish this in 1.5 s
        assert verifier.equal("2", "2") is True  # a fresh worker serves the next check
    finally:
        verifier.close()


def test_metric_reports_a_timeout_as_incorrect_in_threads() -> None:
    verifier = AnswerVerifier(timeout_seconds=1.5)
    metric = MathAnswerMetric(verifier)
    try:
        with ThreadPoolExecutor(2) as pool:
            slow, fast = pool.map(
                lambda answer: metric(_gold("2"), dspy.Prediction(answer=answer)), ["9^{9^{9^{9}}}", "\\frac{4}{2}"]
            )
    finally:
        verifier.close()
    assert slow.score == 0.0 and "timed out" in slow.feedback
    assert fast.score == 1.0


def test_verifier_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_seconds"):
        AnswerVerifier(timeout_seconds=0)
