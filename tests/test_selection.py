"""Lessons earn their place: the selection gate, the best library returned, counters, pruning, warm start."""

import json
import re
import threading

import dspy
import pytest
from scripted import UPDATE_PIPELINE, default_reflection, scripted_lm

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, with_experiences
from tfgrpo_dspy.inference.injection import library_of

GOOD = "When adding two numbers, add them digit by digit."
BAD = "When adding two numbers, subtract the second from the first."


class LessonSensitivePolicy:
    """A policy whose greedy answers depend on the lessons in its prompt, like a model that follows them.

    Greedy (selection): with BAD in the prompt every answer is wrong; else with GOOD every answer is right;
    else only even questions are right. Sampled (training rollouts): right on every other attempt, so
    every group is mixed. The extraction proposes GOOD for even questions and BAD for odd ones (or the
    texts given), and the update adds every proposal.
    """

    def __init__(self, proposals=None):
        self.proposals = proposals or {0: GOOD, 1: BAD}
        self.lock = threading.Lock()
        self.attempts = {}

    def __call__(self, call):
        if call.kind == "extract":
            i = int(re.search(r"What is (\d+)", call.inputs["task_inputs"]).group(1))
            text = self.proposals[i % len(self.proposals)]
            if text is None:
                return {"difference": "none", "lessons": [], "misleading": [], "useful": []}
            condition, action = text.removeprefix("When ").rstrip(".").split(", ", 1)
            return {"difference": "d", "lessons": [{"condition": condition, "action": action}], "misleading": [],
                    "useful": []}
        reply = default_reflection(call)
        if reply is not None:
            return reply
        i = int(re.search(r"What is (\d+)", call.inputs["question"]).group(1))
        if call.temperature:  # a training rollout: alternate right and wrong per question
            with self.lock:
                attempt = self.attempts.get(i, 0)
                self.attempts[i] = attempt + 1
            right = attempt % 2 == 0
        elif BAD in call.system:
            right = False
        elif GOOD in call.system:
            right = True
        else:
            right = i % 2 == 0
        return {"answer": str(i + 2) if right else "wrong"}


def exact(example, prediction, trace=None):
    return float(str(prediction.answer).strip() == example.answer)


def questions(start, n):
    return [dspy.Example(question=f"What is {i} + 2?", answer=str(i + 2)).with_inputs("question")
            for i in range(start, start + n)]


def compile_with(policy, *, trainset=None, valset="default", **settings):
    lm = scripted_lm(policy)
    options = dict(metric=exact, group_size=2, epochs=1, num_threads=1, progress=False, max_words=40, **UPDATE_PIPELINE)
    options.update(settings)
    with dspy.context(lm=lm):
        compiled = TrainingFreeGRPO(**options).compile(dspy.Predict("question -> answer"),
                                                       trainset=trainset or questions(0, 2),
                                                       valset=questions(10, 6) if valset == "default" else valset)
    return compiled, lm


def test_a_helpful_lesson_is_kept():
    compiled, _ = compile_with(LessonSensitivePolicy({0: GOOD}))
    result = compiled.tfgrpo_result
    assert compiled.experience_library.texts == [GOOD]
    assert [(c.label, c.score, c.accepted) for c in result.candidates] == [("initial", 0.5, True),
                                                                            ("step 1", 1.0, True)]
    assert result.best_step == 1 and result.steps[0].gate == "accepted"
    assert result.shipped == "the library after step 1"
    step = result.candidates[1]  # its p-value is the one-sided test its reason names
    assert f"one-sided sign test p={step.p_one_sided:.3f}" in step.reason and step.p_one_sided < 0.5
    assert step.compared_with == result.candidates[0].fingerprint  # the initial library it was compared with


def test_a_harmful_lesson_is_rejected_and_absent_from_the_compiled_program():
    compiled, _ = compile_with(LessonSensitivePolicy({0: BAD}))
    result = compiled.tfgrpo_result
    assert len(compiled.experience_library) == 0 and library_of(compiled).texts == []
    assert BAD not in compiled.signature.instructions
    assert result.steps[0].gate == "rejected"  # the library kept after step 1: the initial lessons, and the audit
    assert result.best_step == 1 and result.shipped == "the initial library (no step changed it)"
    rejected = [e for e in result.library.audit_log if "rejected by the selection gate" in e.detail]
    assert rejected and rejected[0].text == BAD and "0 won / 3 lost" in rejected[0].detail


def test_in_a_mixed_step_the_good_edit_survives_and_the_bad_one_does_not():
    compiled, _ = compile_with(LessonSensitivePolicy({0: GOOD, 1: BAD}))
    result = compiled.tfgrpo_result
    assert compiled.experience_library.texts == [GOOD]
    labels = [(c.label, c.accepted) for c in result.candidates]
    assert labels[:2] == [("initial", True), ("step 1", False)]  # both edits together: BAD wins, all wrong
    assert ("step 1, edit 1 alone", True) in labels or ("step 1, edit 2 alone", True) in labels
    assert result.steps[0].gate == "partly accepted"
    assert compiled.experience_library.experiences[0].sources == (0,)  # provenance survives a single-edit trial


def test_the_empty_library_wins_when_every_candidate_is_worse():
    compiled, _ = compile_with(LessonSensitivePolicy({0: BAD}), trainset=questions(0, 4), epochs=2, gate=False)
    result = compiled.tfgrpo_result
    # gate=False keeps every edit (the paper's recipe), but the shipped library is the best one scored.
    assert result.steps[0].gate == "accepted" and result.best_step == 0 and result.shipped == "the initial library"
    assert len(compiled.experience_library) == 0


def test_ties_go_to_the_smaller_library():
    # A lesson that changes nothing: the candidate ties with the empty library and is not shipped.
    neutral = "When a question is short, read it twice."
    compiled, _ = compile_with(LessonSensitivePolicy({0: neutral}), gate=False)
    assert compiled.tfgrpo_result.best_step == 0 and len(compiled.experience_library) == 0


def test_gate_margin_zero_accepts_a_candidate_that_is_not_worse():
    neutral = "When a question is short, read it twice."
    compiled, _ = compile_with(LessonSensitivePolicy({0: neutral}), gate_margin=0)
    assert compiled.tfgrpo_result.steps[0].gate == "accepted"


def test_a_trainset_of_eight_or_more_holds_out_a_selection_set():
    lm = scripted_lm(LessonSensitivePolicy({0: GOOD}))
    with dspy.context(lm=lm):
        compiled = TrainingFreeGRPO(metric=exact, group_size=2, epochs=1, num_threads=1, progress=False,
                                    max_words=40).compile(dspy.Predict("question -> answer"), trainset=questions(0, 8))
    result = compiled.tfgrpo_result
    assert result.selection_size == 2 and result.candidates[0].label == "initial"
    assert result.steps[0].examples == 6


def test_no_selection_set_is_the_papers_recipe(caplog):
    with caplog.at_level("INFO"):
        compiled, _ = compile_with(LessonSensitivePolicy({0: BAD}), valset=None)
    assert compiled.experience_library.texts == [BAD] and compiled.tfgrpo_result.best_step is None
    assert compiled.tfgrpo_result.shipped == "the last step's library (no selection set)"
    assert any("no selection set" in r.message for r in caplog.records)


def test_selection_calls_are_their_own_role_and_resume_reuses_scores(tmp_path):
    compiled, lm = compile_with(LessonSensitivePolicy({0: GOOD}), log_dir=tmp_path)
    usage = compiled.tfgrpo_result.selection_usage
    assert usage.calls == 6 * 2  # the initial library and the candidate, 6 selection examples each
    assert compiled.tfgrpo_result.steps[0].selection_usage.calls == 6
    calls = len(lm._engine_spec.calls)
    again, lm2 = compile_with(LessonSensitivePolicy({0: GOOD}), log_dir=tmp_path)
    assert len(lm2._engine_spec.calls) == 0 and again.experience_library.texts == [GOOD]
    assert calls > 0


def test_counters_credit_lessons_and_a_harmful_record_prunes_in_code():
    library = ExperienceLibrary.from_texts(["When a, do b.", "When c, do d."])
    library.credit([(1, 1.0), (1, -0.5), (2, -1.0), (2, -1.0), (2, -1.0), (2, 1.0), (9, 1.0)])
    assert (library[1].uses, library[1].helpful, library[1].harmful) == (2, 1, 1)
    assert (library[2].uses, library[2].helpful, library[2].harmful) == (4, 1, 3)
    report = library.prune(margin=2, min_uses=4, step=3)
    assert library.ids == [1] and report.entries[0].detail == "pruned E2: used 4x, helpful 1, harmful 3"
    copy = ExperienceLibrary.from_dict(json.loads(json.dumps(library.to_dict())))
    assert copy[1].uses == 2 and "pruned E2" in copy.audit_log[-1].detail


def test_summaries_credit_the_lessons_the_attempts_applied():
    policy = LessonSensitivePolicy({0: None})

    def script(call):
        if call.kind == "summary":
            won = "reward 1.00" in call.inputs["outcome"]
            return {"summary": "s", "experiences_used": ["E1"], "first_divergence": "none" if won else "step 1"}
        return policy(call)

    start = ExperienceLibrary.from_texts([GOOD])
    compiled, _ = compile_with(script, initial_library=start, valset=None)
    lesson = compiled.experience_library[1]
    assert (lesson.uses, lesson.helpful, lesson.harmful) == (4, 2, 2)  # 2 groups of 2, one winner each


def test_warm_start_from_a_library_or_a_student_that_carries_one(tmp_path):
    start = ExperienceLibrary.from_texts(["When a, do b.", GOOD])
    start.apply([{"op": "delete", "id": 1}])
    path = start.save(tmp_path / "start.json")
    policy = LessonSensitivePolicy({0: None})
    compiled, lm = compile_with(policy, initial_library=str(path))
    assert [(e.id, e.text) for e in compiled.experience_library] == [(2, GOOD)]
    first_policy_call = next(c for c in lm._engine_spec.calls if c.kind == "policy")
    assert GOOD in first_policy_call.system
    student = with_experiences(dspy.Predict("question -> answer"), start)
    with dspy.context(lm=scripted_lm(LessonSensitivePolicy({0: None}))):
        carried = TrainingFreeGRPO(metric=exact, group_size=2, epochs=1, num_threads=1, progress=False).compile(
            student, trainset=questions(0, 2), valset=questions(10, 6))
    assert [(e.id, e.text) for e in carried.experience_library] == [(2, GOOD)]
    with pytest.raises(TypeError, match="initial_library"):
        TrainingFreeGRPO(metric=exact, initial_library=42)


def test_a_kill_during_gating_resumes_to_the_same_result(tmp_path):
    reference, _ = compile_with(LessonSensitivePolicy({0: GOOD, 1: BAD}), log_dir=tmp_path / "reference")

    class DiesInSelection(LessonSensitivePolicy):
        def __init__(self):
            super().__init__({0: GOOD, 1: BAD})
            self.greedy = 0

        def __call__(self, call):
            if call.kind == "policy" and not call.temperature:
                self.greedy += 1
                if self.greedy > 9:  # the initial library is scored (6), then a candidate is half scored
                    raise KeyboardInterrupt
            return super().__call__(call)

    with pytest.raises(KeyboardInterrupt):
        compile_with(DiesInSelection(), log_dir=tmp_path / "killed")
    resumed, _ = compile_with(LessonSensitivePolicy({0: GOOD, 1: BAD}), log_dir=tmp_path / "killed")
    assert resumed.experience_library.texts == reference.experience_library.texts == [GOOD]
    assert [(c.label, c.score, c.accepted) for c in resumed.tfgrpo_result.candidates] == [
        (c.label, c.score, c.accepted) for c in reference.tfgrpo_result.candidates]
