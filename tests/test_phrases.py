"""Contrast phrases (issue 40): a condition found in the training labels, proposed as a rule and verified."""

from __future__ import annotations

import dspy
import pytest
from scripted import default_reflection
from test_verification import Router, compile_router, shown_lessons

from tfgrpo_dspy import TrainingFreeGRPO
from tfgrpo_dspy.reflection.phrases import contrast_phrase, wilson_lower


def by_index(references: list[str]):
    return lambda i: references[i]


def test_the_phrase_the_failures_share_and_other_answers_lack_is_found():
    texts = [f"Plan: Pro\nA chargeback was opened on order {i}." for i in range(4)]
    texts += [f"Plan: Pro\nA question about order {i}." for i in range(6)]
    references = ["trust"] * 4 + ["general"] * 6
    found = contrast_phrase([0, 1, 2], "trust", texts, by_index(references))
    assert found is not None and found.phrases == ("chargeback",)
    assert (found.support, found.matches, found.covered) == (4, 4, 3)
    assert found.condition == 'the input contains "chargeback"'


def test_two_phrases_together_when_neither_alone_is_precise():
    # "cancel" alone: 4 of 8 (Starter cancellations go elsewhere); "Enterprise" alone: 4 of 8.
    texts = [f"Plan: Enterprise\ncancel {i}" for i in range(4)]
    texts += [f"Plan: Starter\ncancel {i}" for i in range(4)]
    texts += [f"Plan: Enterprise\ninvoice {i}" for i in range(4)]
    texts += [f"Plan: Pro\nopening hours {i}" for i in range(8)]
    references = ["retention"] * 4 + ["general"] * 16
    found = contrast_phrase([0, 1, 2, 3], "retention", texts, by_index(references))
    assert found is not None and set(found.phrases) == {"cancel", "Enterprise"}
    assert found.precision == 1.0 and found.covered == 4


def test_no_phrase_when_the_failures_share_only_what_every_answer_has():
    texts = [f"Ticket {i}: please help." for i in range(8)]
    references = ["a", "b"] * 4
    assert contrast_phrase([0, 2, 4], "a", texts, by_index(references)) is None


def test_a_name_in_three_inputs_ranks_below_a_phrase_in_eight():
    assert wilson_lower(3, 3) < wilson_lower(8, 8) and wilson_lower(7, 8) < wilson_lower(8, 8)


class VagueConditions(Router):
    """The induction writes a condition that holds for nothing in particular; the policy routes a refund to
    payments only when shown a lesson that quotes "refund"."""

    def __call__(self, call):
        if call.kind == "induce":
            return {"condition": "the inputs differ from the others", "action": "answer payments"}
        reply = default_reflection(call)
        if reply is not None:
            return reply
        lessons = shown_lessons(call)
        routed = '"refund"' in lessons and "refund" in call.inputs["question"]
        return {"answer": "payments" if routed else "general"}


def questions(start: int, refunds: int, others: int) -> list[dspy.Example]:
    # The telling word starts a line: the phrase is read from the text as written, not from JSON ("\\nrefund").
    rows = [(f"Route this, number {start + i}:\nrefund, I want one.", "payments") for i in range(refunds)]
    rows += [(f"Route this, number {start + i}:\nopening hours, I want one.", "general") for i in range(others)]
    return [dspy.Example(question=q, answer=a).with_inputs("question") for q, a in rows]


def test_a_phrase_rule_is_verified_and_kept_where_the_model_written_one_is_not():
    options = dict(valset=questions(100, 2, 2), extraction=False, induction_action="reference")
    without, _ = compile_router(VagueConditions(), questions(0, 4, 4), **options)
    with_phrases, _ = compile_router(VagueConditions(), questions(0, 4, 4), induction_phrases=True, **options)
    assert without.experience_library.texts == []
    assert with_phrases.experience_library.texts == ['When the input contains "refund", answer with answer: payments.']
    assert with_phrases.tfgrpo_result.steps[0].gate == "accepted"


def test_with_no_model_draws_the_phrase_rule_is_kept_and_no_induction_call_is_made():
    class CountingConditions(VagueConditions):
        def __call__(self, call):
            self.inductions += [call.kind] if call.kind == "induce" else []
            return super().__call__(call)

    router = CountingConditions()
    options = dict(valset=questions(100, 2, 2), extraction=False, induction_action="reference")
    compiled, _ = compile_router(router, questions(0, 4, 4), induction_phrases=True, num_candidates=0, **options)
    assert compiled.experience_library.texts == ['When the input contains "refund", answer with answer: payments.']
    assert router.inductions == []


def test_no_model_draws_without_phrases_is_refused_by_name():
    with pytest.raises(ValueError, match="num_candidates=0"):
        TrainingFreeGRPO(metric=lambda example, prediction, trace=None: 0.0, num_candidates=0)
