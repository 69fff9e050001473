"""The majority baseline: the most frequent training answer, scored on held-out examples from the labels."""

import dspy

from tfgrpo_dspy.inference.majority import majority_baseline, most_frequent_answer


def examples(*answers):
    return [dspy.Example(question=f"q{i}", label=a).with_inputs("question") for i, a in enumerate(answers)]


def exact(example, prediction, trace=None):
    return float(example.label == prediction.label)


def test_labels_give_the_most_frequent_answer_scored_on_the_held_out_examples():
    baseline = majority_baseline(examples("a", "b", "a", "b", "a"), examples("a", "b", "a"), exact, "label")
    assert (baseline.answer, baseline.frequency, baseline.training_count) == ("a", 3, 5)
    assert baseline.scores == (1.0, 0.0, 1.0) and round(baseline.mean, 3) == 0.667


def test_feedback_metrics_are_scored_by_their_score():
    def feedback(example, prediction, trace=None, pred_name=None, pred_trace=None):
        return dspy.Prediction(score=exact(example, prediction), feedback="...")

    assert majority_baseline(examples("a", "a", "b", "a"), examples("b", "a"), feedback, "label").scores == (0.0, 1.0)


def test_open_answers_and_metrics_that_need_more_than_the_answer_have_no_baseline():
    assert most_frequent_answer(examples("12", "7", "31", "7", "5"), "label") is None  # 4 distinct of 5: open
    assert most_frequent_answer(examples("a", "b"), "label") is None  # nothing repeats
    assert most_frequent_answer(examples("a", "a"), "answer") is None  # no such field

    def needs_reasoning(example, prediction, trace=None):
        return float(prediction.reasoning.endswith(example.label))

    assert majority_baseline(examples("a", "a", "b", "a"), examples("a"), needs_reasoning, "label") is None
