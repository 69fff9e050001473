"""Lessons the run finds from failures and keeps only when a re-run proves them (issue 27), on scripted LMs.

The scripted policy routes "refund" questions to "payments" only when a lesson it is shown says so, and sends
everything to "payments" when shown a lesson that says "every input"; otherwise it answers "general". So a true
rule fixes the refund questions, and the spurious one fixes them too but breaks every other question.
"""

from __future__ import annotations

import dspy
import pytest
from scripted import Call, default_reflection, scripted_lm

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO
from tfgrpo_dspy.inference.injection import BLOCK_START
from tfgrpo_dspy.run.accounting import Ledger
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.run.verification import CandidateLesson, Verifier
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings

GOOD = "When the question asks for a refund, answer payments."
SPURIOUS = "When every input arrives, answer payments."


def exact(example, prediction, trace=None):
    return float(str(prediction.answer).strip() == example.answer)


def questions(start: int, refunds: int, others: int) -> list[dspy.Example]:
    rows = [(f"Route this: I want a refund for order {start + i}.", "payments") for i in range(refunds)]
    rows += [(f"Route this: a question about opening hours {start + i}.", "general") for i in range(others)]
    return [dspy.Example(question=q, answer=a).with_inputs("question") for q, a in rows]


def shown_lessons(call: Call) -> str:
    return call.system.split(BLOCK_START, 1)[1] if BLOCK_START in call.system else ""


class Router:
    """The scripted LM: policy as described above; reflection proposes the spurious rule per group and the
    induction over several failures writes the true one."""

    def __init__(self) -> None:
        self.inductions: list[str] = []

    def __call__(self, call: Call):
        if call.kind == "extract":
            return {"difference": "all answered general", "lessons": [
                {"condition": "every input arrives", "action": "answer payments", "replaces": None}],
                "misleading": [], "useful": []}
        if call.kind == "induce":
            self.inductions.append(call.inputs["failures"])
            return {"condition": "the question asks for a refund", "action": "answer payments"}
        reply = default_reflection(call)
        if reply is not None:
            return reply
        lessons = shown_lessons(call)
        if "every input" in lessons:
            return {"answer": "payments"}
        if "refund" in lessons and "refund" in call.inputs["question"]:
            return {"answer": "payments"}
        return {"answer": "general"}


def compile_router(router: Router, trainset: list[dspy.Example], valset: list[dspy.Example] | None = None,
                   **settings):
    options = dict(metric=exact, group_size=2, epochs=1, num_threads=1, progress=False, verify_batch=8)
    options.update(settings)
    optimizer = TrainingFreeGRPO(**options)
    with dspy.context(lm=scripted_lm(router)):
        compiled = optimizer.compile(dspy.Predict("question -> answer"), trainset=trainset, valset=valset)
    return compiled, optimizer


def test_all_failed_groups_reach_the_reflection_and_the_induction():
    router = Router()
    compiled, _ = compile_router(router, questions(0, 4, 4), valset=questions(100, 2, 2))
    (step,) = compiled.tfgrpo_result.steps
    assert step.informative_groups == 0 and step.failed_groups == 4  # the refund groups: every rollout wrong
    assert step.reflected_groups == 4 and step.lessons_proposed == 4  # each got its per-group comparison
    (shown,) = set(router.inductions)  # one set of the four failures sharing their reference, 3 draws
    assert len(router.inductions) == 3 and shown.count("### Input") == 4
    assert "\n\nCorrect answer for each of these inputs: answer: payments" in shown
    assert "general" not in shown  # the program's wrong answers are not shown (they drew rules to the program)


def test_the_papers_filter_keeps_all_failed_groups_out_of_the_per_group_reflection():
    compiled, _ = compile_router(Router(), questions(0, 4, 4), valset=questions(100, 2, 2), failed_groups=False)
    (step,) = compiled.tfgrpo_result.steps
    assert step.failed_groups == 4 and step.reflected_groups == 0 and step.lessons_proposed == 0


def test_a_lesson_that_fixes_is_kept_and_one_that_breaks_more_than_it_fixes_is_dropped(tmp_path):
    compiled, _ = compile_router(Router(), questions(0, 4, 4), valset=questions(100, 2, 2), log_dir=tmp_path)
    (step,) = compiled.tfgrpo_result.steps
    assert step.lessons_checked == 2 and step.lessons_verified == 1
    assert compiled.experience_library.texts == [GOOD]
    checks = {c["text"]: c for c in RunLog(tmp_path).load(1, "checks", "lessons")["checks"]}
    good, spurious = checks[GOOD], checks[SPURIOUS]
    assert good["kept"] and good["fixes"] == [0, 1, 2, 3] and good["breaks"] == [] and good["origin"] == "induction"
    assert not spurious["kept"] and spurious["fixes"] == [0, 1, 2, 3] and spurious["breaks"] == [4, 5, 6, 7]
    assert "needs +2 and fewer breaks than fixes" in spurious["reason"]
    # The kept lesson's add says why, and the gate then judged the step's library on the selection set.
    (add,) = [e for e in compiled.experience_library.audit_log if e.op == "add"]
    assert add.reason.startswith("verified: 4 fixed / 0 broken") and step.gate == "accepted"


def test_a_candidate_that_fixes_none_of_its_sources_costs_no_batch():
    class Stubborn(Router):
        def __call__(self, call):
            if call.kind == "induce":
                return {"condition": "the weather is fine", "action": "answer sunshine"}
            reply = super().__call__(call)
            return {"answer": "general"} if "answer" in reply else reply

    compiled, _ = compile_router(Stubborn(), questions(0, 4, 4), valset=questions(100, 2, 2), verify_batch=4,
                                 failed_groups=False)
    (step,) = compiled.tfgrpo_result.steps
    assert step.lessons_checked == 1 and step.lessons_verified == 0
    # 8 baseline runs, then the 4 sources only: the batch is never run for a lesson that fixes none of them.
    assert step.verification_usage.calls == 8 + 4


def test_a_fix_counts_only_where_retrieval_showed_the_lesson():
    trainset = questions(0, 3, 0) + [dspy.Example(question=f"Route this: my login fails {i}.", answer="accounts")
                                     .with_inputs("question") for i in range(3)]
    library = ExperienceLibrary.from_texts(["When a login fails, answer accounts."])
    settings = TrainingFreeGRPOSettings(top_k=1, verify_batch=6, num_threads=1, progress=False)

    def policy(call):
        lessons = shown_lessons(call)
        if "login" in lessons and "login" in call.inputs["question"]:
            return {"answer": "accounts"}
        return {"answer": "payments" if "refund" in lessons else "general"}

    ledger = Ledger()
    verifier = Verifier(dspy.Predict("question -> answer"), trainset, exact, settings, RunLog(None), ledger,
                        reference=lambda i: trainset[i].answer)
    with dspy.context(lm=scripted_lm(policy)):
        (check,) = verifier.check([CandidateLesson(GOOD, "induction", (0, 1))], library)
    # Retrieval shows the refund lesson to the refund questions only; the login ones keep the login lesson, so
    # they are neither fixed nor broken by the candidate although they were run.
    assert check.tried == (0, 1, 2, 3, 4, 5) and check.shown == (0, 1, 2)
    assert check.fixes == (0, 1, 2) and check.breaks == () and check.kept
    assert ledger.by_role["verification"].calls == 6 + 6  # the library alone on all 6, then the candidate


def test_verification_is_budgeted_and_a_resumed_run_pays_for_nothing_again(tmp_path):
    router = Router()
    estimate = TrainingFreeGRPO(metric=exact, group_size=2, epochs=1, verify_batch=8).estimate(
        dspy.Predict("question -> answer"), questions(0, 4, 4), questions(100, 2, 2))
    assert estimate.max_verification_calls >= 8 and "verification runs" in str(estimate)
    compiled, _ = compile_router(router, questions(0, 4, 4), valset=questions(100, 2, 2), log_dir=tmp_path)
    spent = compiled.tfgrpo_result.verification_usage.calls
    assert 0 < spent <= estimate.max_verification_calls
    engine_calls = []

    class Counting(Router):
        def __call__(self, call):
            engine_calls.append(call.kind)
            return super().__call__(call)

    again, _ = compile_router(Counting(), questions(0, 4, 4), valset=questions(100, 2, 2), log_dir=tmp_path)
    assert engine_calls == [] and again.experience_library.texts == [GOOD]
    assert again.tfgrpo_result.verification_usage.calls == spent  # counted, from the log


def test_a_budget_stops_the_run_inside_verification():
    compiled, _ = compile_router(Router(), questions(0, 4, 4), valset=questions(100, 2, 2), max_lm_calls=20)
    result = compiled.tfgrpo_result
    assert result.stopped_reason and "max_lm_calls" in result.stopped_reason
    assert result.steps == ()


@pytest.mark.parametrize("setting, value", [("verify_margin", 0), ("num_candidates", -1), ("induction_examples", 2)])
def test_bad_verification_settings_are_refused_by_name(setting, value):
    with pytest.raises(ValueError, match=setting):
        TrainingFreeGRPO(metric=exact, **{setting: value})


def test_induction_sets_group_shared_references_then_neighbours_by_input():
    from tfgrpo_dspy.reflection.induction import Failure, induction_sets

    texts = {0: "refund order", 1: "refund parcel", 2: "refund box", 3: "refund card", 4: "refund crate",
             5: "train leaves at noon, how far", 6: "train leaves at one, how far", 7: "a train at two, how far",
             8: "bake twelve cakes"}
    failures = [Failure(i, "answer: payments", "answer: general") for i in range(5)]
    failures += [Failure(i, f"answer: {i * 10}", "answer: 1") for i in range(5, 9)]
    sets = induction_sets(failures, texts.__getitem__, size=4)
    shared = [s for s in sets if s.shared]
    # Five failures with one reference: two even sets would be of 3 and 2, so one set of four is made...
    assert [s.sources for s in shared] == [(0, 1, 2, 3)]
    # ...and the rest are grouped by their words: the three train questions; the refund left over and the cake
    # question share no word with enough others.
    assert [s.sources for s in sets if not s.shared] == [(5, 6, 7)]
    assert induction_sets(failures, texts.__getitem__, size=4, neighbours=False) == shared


def test_routed_by_answer_failures_that_share_no_reference_are_not_induced_on():
    """A neighbour set's lesson has no target, so routed by answer it is never induced (unless asked for); routed
    by example it is, and the manifest records which."""
    assert TrainingFreeGRPOSettings().induction_neighbours is True
    assert TrainingFreeGRPOSettings(route_by="answer").manifest()["induction_neighbours"] is False
    assert TrainingFreeGRPOSettings(route_by="answer", induction_neighbours=True).induction_neighbours is True
    # Every answer is wrong and every reference differs: the refunds share words, not an answer, so they (and the
    # opening-hours questions) form neighbour sets only.
    trainset = [dspy.Example(question=f"Route this: I want a refund for order {i}.", answer=f"payments-{i}")
                .with_inputs("question") for i in range(3)]
    trainset += [dspy.Example(question=f"Route this: a question about opening hours {i}.", answer=f"general-{i}")
                 .with_inputs("question") for i in range(3, 7)]
    induced = {}
    for route_by in ("example", "answer"):
        router = Router()
        compile_router(router, trainset, extraction=False, route_by=route_by, num_candidates=1)
        induced[route_by] = router.inductions
    assert any("Correct answer: answer: payments-0" in shown for shown in induced["example"])
    assert induced["answer"] == []


def test_each_candidate_is_verified_on_top_of_the_ones_kept_before_it():
    """A second refund lesson helps the empty library as much as the first, but nothing once the first is kept:
    with retrieval it only takes the first one's place. Judged on the library it would join, it is dropped."""
    other = "When a refund is requested by the customer, answer payments."
    trainset = questions(0, 4, 4)
    settings = TrainingFreeGRPOSettings(top_k=1, verify_batch=8, num_threads=1, progress=False)

    def policy(call):
        refund = "refund" in shown_lessons(call) and "refund" in call.inputs["question"]
        return {"answer": "payments" if refund else "general"}

    verifier = Verifier(dspy.Predict("question -> answer"), trainset, exact, settings, RunLog(None), Ledger(),
                        reference=lambda i: trainset[i].answer)
    candidates = [CandidateLesson(GOOD, "induction", (0, 1, 2)), CandidateLesson(other, "induction", (1, 2, 3))]
    with dspy.context(lm=scripted_lm(policy)):
        first, second = verifier.check(candidates, ExperienceLibrary())
        (alone,) = verifier.check(candidates[1:], ExperienceLibrary())
    assert first.kept and first.fixes == (0, 1, 2, 3)
    assert alone.kept  # on the empty library it would have been kept too...
    assert not second.kept and second.fixes == () and "fixed none" in second.reason  # ...but not on top of GOOD


def test_a_prompt_the_kept_lesson_did_not_change_is_answered_by_the_cache():
    """After a lesson is kept, the next candidate's baseline is the new library's: only the inputs whose prompt
    changed cost a call; the rest repeat a prompt already sent (DSPy's cache answers it)."""
    login = "When a login fails, answer accounts."
    trainset = questions(0, 3, 0) + [dspy.Example(question=f"Route this: my login fails {i}.", answer="accounts")
                                     .with_inputs("question") for i in range(3)]
    settings = TrainingFreeGRPOSettings(top_k=1, verify_batch=6, num_threads=1, progress=False)
    sent = []

    def policy(call):
        sent.append(call.inputs["question"])
        lessons, question = shown_lessons(call), call.inputs["question"]
        if "login" in lessons and "login" in question:
            return {"answer": "accounts"}
        return {"answer": "payments" if "refund" in lessons and "refund" in question else "general"}

    verifier = Verifier(dspy.Predict("question -> answer"), trainset, exact, settings, RunLog(None), Ledger(),
                        reference=lambda i: trainset[i].answer)
    with dspy.context(lm=scripted_lm(policy, cache=True)):
        refund, logins = verifier.check([CandidateLesson(GOOD, "induction", (0, 1, 2)),
                                         CandidateLesson(login, "induction", (3, 4, 5))], ExperienceLibrary())
    assert refund.kept and logins.kept and logins.fixes == (3, 4, 5)
    # 6 with no library, 6 with the refund lesson (shown to all), then the login lesson changes the prompts of
    # the 3 login questions only: 15 prompts sent, although 6 + 6 + 6 + 6 trials were run.
    assert len(sent) == 15


def test_without_the_per_group_reflection_lessons_come_from_the_induction_only():
    kinds = []

    class Recording(Router):
        def __call__(self, call):
            kinds.append(call.kind)
            return super().__call__(call)

    compiled, optimizer = compile_router(Recording(), questions(0, 4, 4), valset=questions(100, 2, 2),
                                         extraction=False)
    (step,) = compiled.tfgrpo_result.steps
    assert "extract" not in kinds and "summary" not in kinds and "induce" in kinds
    assert step.reflected_groups == 0 and step.lessons_proposed == 0 and step.failed_groups == 4
    assert compiled.experience_library.texts == [GOOD]  # the induced rule, verified; the spurious one never came
    estimate = optimizer.estimate(dspy.Predict("question -> answer"), questions(0, 4, 4), questions(100, 2, 2))
    assert estimate.max_extraction_calls == 0 and estimate.max_summary_calls == 0


class VagueActions(Router):
    """The induction names the right condition but no answer; the policy answers payments only when a lesson
    it is shown names payments."""

    def __call__(self, call):
        if call.kind == "induce":
            return {"condition": "the question asks for a refund", "action": "route it to the right team"}
        reply = default_reflection(call)
        if reply is not None:
            return reply
        lessons = shown_lessons(call)
        return {"answer": "payments" if "payments" in lessons and "refund" in call.inputs["question"] else "general"}


@pytest.mark.parametrize("action, learned", [("model", []), ("reference", ["When the question asks for a refund, "
                                                                           "answer with answer: payments."])])
def test_with_the_reference_as_action_a_rule_names_the_answer_its_failures_share(action, learned):
    compiled, _ = compile_router(VagueActions(), questions(0, 4, 4), valset=questions(100, 2, 2), extraction=False,
                                 induction_action=action)
    assert compiled.experience_library.texts == learned


def test_the_reference_action_is_written_in_the_settings_wording():
    compiled, _ = compile_router(VagueActions(), questions(0, 4, 4), valset=questions(100, 2, 2), extraction=False,
                                 induction_action="reference", reference_action="route it to {answer}")
    assert compiled.experience_library.texts == ["When the question asks for a refund, route it to payments."]


@pytest.mark.parametrize("template", ["route it to the right team", "route it to {queue}", "answer {answer"])
def test_a_reference_action_must_name_the_reference_and_nothing_else(template):
    with pytest.raises(ValueError, match="reference_action"):
        TrainingFreeGRPOSettings(reference_action=template)


def test_induction_action_is_checked():
    with pytest.raises(ValueError, match="induction_action must be one of"):
        TrainingFreeGRPOSettings(induction_action="code")


@pytest.mark.parametrize("options", [{"induction": False}, {"ground_truth": False}])
def test_turning_off_the_per_group_reflection_needs_the_induction(options):
    with pytest.raises(ValueError, match="extraction=False"):
        TrainingFreeGRPO(metric=exact, extraction=False, **options)


# -- every changed answer counts, and a lesson must beat its shift (issue 40) ----------------------------------
SHIFT = "When a customer writes, answer payments."


def three_queues() -> list[dspy.Example]:
    """Refund, login and opening-hours questions; the scripted policy below answers all of them 'other'."""
    rows = [(f"Route this: I want a refund for order {i}.", "payments") for i in range(4)]
    rows += [(f"Route this: my login fails on device {i}.", "accounts") for i in range(4)]
    rows += [(f"Route this: a question about opening hours {i}.", "general") for i in range(4)]
    return [dspy.Example(question=q, answer=a).with_inputs("question") for q, a in rows]


def low_base_policy(call: Call) -> dict[str, str]:
    """Nothing right without a lesson (a low base accuracy: nothing can break); the shift lesson moves every
    answer to payments, the precise one only the refund questions."""
    lessons, question = shown_lessons(call), call.inputs["question"]
    if "customer writes" in lessons or ("refund" in lessons and "refund" in question):
        return {"answer": "payments"}
    return {"answer": "other"}


def verify_on_three_queues(candidate: str, **settings) -> tuple:
    trainset = three_queues()
    options = dict(verify_batch=9, num_threads=1, progress=False)
    options.update(settings)
    verifier = Verifier(dspy.Predict("question -> answer"), trainset, exact, TrainingFreeGRPOSettings(**options),
                        RunLog(None), Ledger(), reference=lambda i: trainset[i].answer)
    with dspy.context(lm=scripted_lm(low_base_policy)):
        (check,) = verifier.check([CandidateLesson(candidate, "induction", (0, 1, 2))], ExperienceLibrary())
    return check


def test_a_shift_lesson_is_dropped_though_it_fixes_and_breaks_nothing():
    check = verify_on_three_queues(SHIFT)
    # Counting fixes and breaks only, it would pass: 4 fixed, 0 broken, net +4 against a margin of 2...
    assert check.fixes == (0, 1, 2, 3) and check.breaks == () and check.net == 4
    # ...but it moved 8 other answers from one wrong queue to another: precision 4 / 12.
    assert len(check.changes) == 8 and check.precision == pytest.approx(1 / 3)
    assert check.target == "answer: payments" and not check.kept
    assert "precision below 0.60" in check.reason and "8 other changes" in check.reason


def test_a_shift_lesson_is_dropped_by_its_shift_when_precision_is_not_asked_for():
    check = verify_on_three_queues(SHIFT, verify_precision=0.0)
    # Answering payments to every example it was shown to is right on the same 4 and moves the same 8 wrong.
    assert check.lesson_right == 4 and check.shift_right == 4 and check.shift_misses == 8
    assert check.beats_shift is False and not check.kept and "no better than its shift" in check.reason
    # Without the shift test, nothing stops it: the rule this issue replaces.
    assert verify_on_three_queues(SHIFT, verify_precision=0.0, verify_shift=False).kept


def test_a_precise_lesson_is_kept():
    check = verify_on_three_queues(GOOD)
    assert check.fixes == (0, 1, 2, 3) and check.breaks == () and check.changes == ()
    assert check.precision == 1.0 and check.shift_right == 4 and check.shift_misses == 8
    assert check.beats_shift is True and check.kept
    assert check.reason.startswith("4 fixed / 0 broken / 0 other changes where shown")


def test_the_check_record_keeps_what_the_report_shows():
    check = verify_on_three_queues(SHIFT)
    record = check.to_dict()
    assert record["precision"] == 0.333 and record["target"] == "answer: payments" and len(record["changes"]) == 8
    from tfgrpo_dspy.run.judgement import LessonCheck

    assert LessonCheck.from_dict(record) == check
    old = LessonCheck.from_dict({"text": GOOD, "sources": [0], "fixes": [0], "kept": True})  # before issue 40
    assert old.changes == () and old.shift_right is None and old.beats_shift is None


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_verify_precision_outside_zero_to_one_is_refused_by_name(value):
    with pytest.raises(ValueError, match="verify_precision"):
        TrainingFreeGRPO(metric=exact, verify_precision=value)


# -- contrastive induction (issue 40) --------------------------------------------------------------------------
def test_the_induction_is_shown_the_examples_it_confuses_with_its_failures_first():
    """The refund failures were answered 'general': the hours questions (whose answer that is) are what the
    rule must tell them apart from, so they come first; then the nearest other inputs."""
    contrasts = []

    class Recording(Router):
        def __call__(self, call):
            if call.kind == "induce":
                contrasts.append(call.inputs["contrast"])
            return super().__call__(call)

    trainset = questions(0, 4, 3) + [dspy.Example(question=f"Route this: my login fails {i}.", answer="accounts")
                                     .with_inputs("question") for i in range(2)]
    compile_router(Recording(), trainset, valset=questions(100, 2, 2), induction_contrast=4)
    assert contrasts
    shown = contrasts[0]
    blocks = shown.split("### Other input ")[1:]
    assert len(blocks) == 4
    assert all("opening hours" in b and "Correct answer: answer: general" in b for b in blocks[:3])
    assert "login" in blocks[3] and "refund" not in shown  # no failure of the set is its own contrast


def test_contrast_of_puts_examples_the_program_answered_the_sets_answer_first():
    from tfgrpo_dspy.reflection.induction import Failure, InductionSet, contrast_of

    texts = {0: "refund for my order", 1: "refund for my parcel", 2: "refund for my box",
             3: "opening hours of the shop", 4: "my order never came", 5: "login fails"}
    refs = {0: "payments", 1: "payments", 2: "payments", 3: "general", 4: "delivery", 5: "accounts"}
    induction_set = InductionSet(tuple(Failure(i, "payments", "accounts") for i in range(3)), shared=True)
    # The program answered the delivery question 'payments' (the set's answer): confused, so first; the login
    # one is confused the other way (the set was answered 'accounts'); then the rest by words.
    answers = {4: {"payments"}, 3: {"general"}}
    contrast = contrast_of(induction_set, answers, refs.__getitem__, texts.__getitem__, range(6), size=3)
    assert set(contrast[:2]) == {4, 5} and contrast[2] == 3
    assert contrast_of(induction_set, answers, refs.__getitem__, texts.__getitem__, range(6), size=0) == ()


def test_a_custom_induce_signature_without_contrast_reads_it_in_its_failures():
    from tfgrpo_dspy.reflection.reflection import ReflectionSignatures, Reflector

    class OldInduce(dspy.Signature):
        """Find a rule."""

        failures: str = dspy.InputField()
        condition: str = dspy.OutputField()
        action: str = dspy.OutputField()

    seen = []

    def lm(call):
        seen.append(call.inputs)
        return {"condition": "a refund", "action": "answer payments"}

    reflector = Reflector(signatures=ReflectionSignatures.with_overrides({"induce": OldInduce}))
    with dspy.context(lm=scripted_lm(lm)):
        raw, error, _ = reflector.induce("### Input 1\nq", 0, 0.9, "### Other input 1\nr")
    assert error is None and raw.condition == "a refund"
    assert "Inputs with other correct answers:\n### Other input 1\nr" in seen[0]["failures"]


def test_a_lesson_followed_on_some_inputs_at_random_does_not_beat_its_shift():
    """As many right as its shift, with fewer answers moved to a wrong queue: what a lesson the model follows
    now and then does (seen on a dev run, where two such lessons shipped a program answering one queue to 87
    of 100 held-out tickets). Only a lesson that moved nothing to a wrong answer ties its way through."""
    from tfgrpo_dspy.run.judgement import LessonCheck, judge

    settings = TrainingFreeGRPOSettings(verify_precision=0.0)
    partial = LessonCheck("When X, answer payments.", "induction", (0,), tried=tuple(range(16)),
                          shown=tuple(range(16)), fixes=(0, 1, 2, 3), breaks=(4, 5), changes=(6,),
                          target="answer: payments", lesson_right=7, shift_right=7, shift_misses=8)
    assert partial.beats_shift is False and not judge(partial, settings).kept
    clean = LessonCheck("When X, answer payments.", "induction", (0,), tried=tuple(range(16)),
                        shown=tuple(range(16)), fixes=(0, 1, 2, 3), target="answer: payments", lesson_right=7,
                        shift_right=7, shift_misses=8)
    assert clean.beats_shift is True and judge(clean, settings).kept
