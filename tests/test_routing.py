"""Lessons routed by the training examples they were verified on (``route_by="example"``), on scripted LMs.

A routed library holds, besides its lessons, one route per training input: the lessons shown to an input
nearest to it (none for most). A call is shown its nearest route's lessons; a training example is routed by
its nearest OTHER input, so a lesson is judged where a new input would see it.
"""

from __future__ import annotations

import json

import dspy
import pytest
from scripted import default_reflection, scripted_lm
from test_verification import GOOD, SPURIOUS, exact, questions, shown_lessons

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, library_of
from tfgrpo_dspy.inference.injection import leaving_out, routed_lessons, with_experiences
from tfgrpo_dspy.library.file import LibraryFileError, Route
from tfgrpo_dspy.report import write_report
from tfgrpo_dspy.run.accounting import Ledger
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.run.verification import CandidateLesson, Verifier
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings

REFUND = "I want a refund for my order"
HOURS = "a question about opening hours"


def routed_library() -> ExperienceLibrary:
    library = ExperienceLibrary.from_texts([GOOD, "When the shop is closed, say so."])
    library.route(1, [REFUND], everyone=[REFUND, HOURS, "my parcel never arrived"])
    return library


def test_routes_are_saved_read_back_and_follow_deletes_and_merges(tmp_path):
    library = routed_library()
    assert library.routes == [Route(REFUND, (1,)), Route(HOURS), Route("my parcel never arrived")]
    library.route(2, [REFUND, HOURS])
    assert library.routes[:2] == [Route(REFUND, (1, 2)), Route(HOURS, (2,))]
    data = json.loads(json.dumps(library.to_dict()))
    assert data["version"] == 3 and data["routes"][0] == {"input": REFUND, "lessons": [1, 2]}
    assert ExperienceLibrary.load(library.save(tmp_path / "lib.json")).routes == library.routes

    merged = library.copy()
    merged.apply([{"op": "merge", "ids": [2, 1], "text": "When a refund is asked for, answer payments."}])
    assert merged.routes[:2] == [Route(REFUND, (2,)), Route(HOURS, (2,))]
    library.apply([{"op": "delete", "id": 1}])
    assert library.routes[:2] == [Route(REFUND, (2,)), Route(HOURS, (2,))]
    with pytest.raises(KeyError, match="E9"):
        library.route(9, [REFUND])


def test_a_route_to_an_unknown_lesson_is_refused_by_field():
    data = routed_library().to_dict()
    data["routes"][1]["lessons"] = [7]
    with pytest.raises(LibraryFileError, match=r"routes\[1\]\.lessons: unknown id\(s\) E7"):
        ExperienceLibrary.from_dict(data, origin="lib.json")
    data["routes"][1] = {"input": "", "lessons": []}
    with pytest.raises(LibraryFileError, match=r"routes\[1\]\.input: must be a non-empty string"):
        ExperienceLibrary.from_dict(data, origin="lib.json")


def test_a_call_is_shown_the_lessons_of_its_nearest_training_input_and_never_its_own():
    library = routed_library()
    assert routed_lessons(library, "Refund please, the order was wrong", 1).texts == [GOOD]
    assert routed_lessons(library, "what are your opening hours", 1).texts == []  # nearest route has no lesson
    assert routed_lessons(library, "xyz", 1).texts == []  # no route shares a word
    with leaving_out(REFUND):  # the training example REFUND is routed by the others: none of them has a lesson
        assert routed_lessons(library, REFUND, 1).texts == []
    assert routed_lessons(library, REFUND, 1).texts == [GOOD]


def test_of_a_routes_lessons_a_call_is_shown_the_one_its_input_is_about():
    # Routed by answer, one route holds every lesson of its queue: top_k=1 picks by the call's words, so a rule
    # kept after the first one of its queue is still shown where it applies.
    chargeback = 'When the input contains "chargeback", answer with queue: trust-safety.'
    data = 'When the input contains "data" and "EU", answer with queue: trust-safety.'
    library = ExperienceLibrary.from_texts([chargeback, data])
    library.route(1, [REFUND], everyone=[REFUND, HOURS])
    library.route(2, [REFUND])
    assert routed_lessons(library, "a refund and a chargeback on my order", 1).texts == [chargeback]
    assert routed_lessons(library, "delete my data, I am in the EU; refund my order", 1).texts == [data]
    assert routed_lessons(library, "a refund for my order", 2).texts == [chargeback, data]


def test_a_routed_program_saved_and_loaded_the_dspy_way_shows_what_it_was_compiled_with(tmp_path):
    program = with_experiences(dspy.Predict("question -> answer"), routed_library())
    program.save(tmp_path / "p.json")
    loaded = dspy.Predict("question -> answer")
    loaded.load(tmp_path / "p.json")
    assert library_of(loaded).routes == routed_library().routes
    seen: dict[str, str] = {}

    def policy(call):
        seen[call.inputs["question"].splitlines()[0]] = shown_lessons(call)
        return {"answer": "general"}

    with dspy.context(lm=scripted_lm(policy)):
        loaded(question="refund for my order please")
        loaded(question="opening hours on sunday?")
    assert GOOD in seen["refund for my order please"] and seen["opening hours on sunday?"] == ""


def verifier(trainset: list[dspy.Example], **settings) -> Verifier:
    options = dict(route_by="example", verify_batch=8, num_threads=1, progress=False)
    return Verifier(dspy.Predict("question -> answer"), trainset, exact,
                    TrainingFreeGRPOSettings(**{**options, **settings}), RunLog(None), Ledger(),
                    reference=lambda i: trainset[i].answer)


def says_payments(call):
    """A policy that answers payments whenever it is shown any lesson that names payments."""
    return {"answer": "payments" if "payments" in shown_lessons(call) else "general"}


def test_a_routed_candidate_is_credited_only_where_its_sources_route_it():
    trainset = questions(0, 4, 4)
    with dspy.context(lm=scripted_lm(says_payments)):
        good, spurious = verifier(trainset).check([CandidateLesson(GOOD, "induction", (0, 1)),
                                                   CandidateLesson(SPURIOUS, "induction", (2, 3))],
                                                  ExperienceLibrary())
    # Each refund question's nearest other training input is a refund question, each hours question's an hours
    # question: routed, the lesson reaches the refund questions only, whatever its text says.
    assert good.shown == (0, 1, 2, 3) and good.fixes == (0, 1, 2, 3) and good.breaks == () and good.kept
    # The second is tried on top of the first (kept, and routed to the four it fixed): nothing left to fix.
    assert not spurious.kept and spurious.fixes == ()


def test_a_source_whose_only_neighbour_is_itself_is_not_fixed_by_its_own_route():
    trainset = questions(0, 0, 4) + [dspy.Example(question="My parcel is lost.", answer="payments")
                                     .with_inputs("question")]
    with dspy.context(lm=scripted_lm(says_payments)):
        (check,) = verifier(trainset).check([CandidateLesson(GOOD, "induction", (4,))], ExperienceLibrary())
    assert check.fixes == () and check.shown == () and not check.kept and "needs +2" in check.reason


def test_a_routed_candidate_its_sources_never_see_is_judged_where_it_reaches():
    """Left out of its own route, a lone source never sees the lesson routed to it; the inputs whose nearest
    training input it is do, and they are the evidence (once it was dropped for 'fixing none of its sources')."""
    trainset = questions(0, 4, 4)
    with dspy.context(lm=scripted_lm(says_payments)):
        (check,) = verifier(trainset).check([CandidateLesson(GOOD, "induction", (0,))], ExperienceLibrary())
    assert 0 not in check.shown and len(check.shown) >= 2 and all(i in (1, 2, 3) for i in check.shown)
    assert check.fixes == check.shown and check.kept


def test_routed_by_answer_a_lesson_reaches_every_input_nearest_an_example_of_its_target():
    """One source is enough: the lesson goes to every training input whose reference is the answer its sources
    share, so each refund question (nearest other: a refund question) is shown it, and none of the others."""
    trainset = questions(0, 4, 4)
    with dspy.context(lm=scripted_lm(says_payments)):
        (by_example,) = verifier(trainset).check([CandidateLesson(GOOD, "induction", (0,))], ExperienceLibrary())
        answer = verifier(trainset, route_by="answer")
        (by_answer,) = answer.check([CandidateLesson(GOOD, "induction", (0,))], ExperienceLibrary())
    assert 0 not in by_example.shown
    assert by_answer.shown == (0, 1, 2, 3) and by_answer.fixes == (0, 1, 2, 3) and by_answer.kept
    library = ExperienceLibrary()
    answer.add_kept(library, [by_answer], step=1)
    assert [r.lessons for r in library.routes] == [(1,)] * 4 + [()] * 4
    # Sources with different answers (an open-answer task) share no target: the lesson keeps to them and its fixes.
    assert answer.routed_to((0, 5), fixes=(1,)) == [0, 5, 1]
    assert answer.routed_to((2,)) == [2, 0, 1, 2, 3]


def test_routed_by_answer_the_shift_check_is_off_unless_asked():
    """Routed by answer, a lesson the policy follows to the letter is right exactly where its shift is, so the
    shift check defaults off there (and stays on elsewhere); asked for, it is kept, and the manifest says which."""
    assert TrainingFreeGRPOSettings().verify_shift is True
    assert TrainingFreeGRPOSettings(route_by="example").verify_shift is True
    by_answer = TrainingFreeGRPOSettings(route_by="answer")
    assert by_answer.verify_shift is False and by_answer.manifest()["verify_shift"] is False
    assert TrainingFreeGRPOSettings(route_by="answer", verify_shift=True).verify_shift is True
    trainset = questions(0, 4, 4)
    assert verifier(trainset, route_by="answer").shift_score is None
    assert verifier(trainset, route_by="answer", verify_shift=True).shift_score is not None


def test_route_by_example_needs_verified_lessons():
    with pytest.raises(ValueError, match="route_by='example'.*verify=True"):
        TrainingFreeGRPOSettings(route_by="example", verify=False)
    with pytest.raises(ValueError, match="route_by='answer'.*ground_truth=True"):
        TrainingFreeGRPOSettings(route_by="answer", ground_truth=False)
    with pytest.raises(ValueError, match="route_by must be one of"):
        TrainingFreeGRPOSettings(route_by="nearest")


def test_a_compile_routed_by_example_ships_its_lesson_to_inputs_like_those_it_fixed(tmp_path):
    def respond(call):
        if call.kind == "extract":
            return {"difference": "all answered general", "lessons": [], "misleading": [], "useful": []}
        if call.kind == "induce":
            return {"condition": "the question asks for a refund", "action": "answer payments"}
        return default_reflection(call) or says_payments(call)

    optimizer = TrainingFreeGRPO(metric=exact, group_size=2, epochs=1, num_threads=1, progress=False,
                                 verify_batch=8, route_by="example", log_dir=tmp_path / "log")
    with dspy.context(lm=scripted_lm(respond)):
        compiled = optimizer.compile(dspy.Predict("question -> answer"), trainset=questions(0, 4, 4),
                                     valset=questions(100, 2, 2))
        refund, hours = (compiled(question=q).answer for q in ("Route this: I want a refund for order 7.",
                                                               "Route this: a question about opening hours 7."))
    library = compiled.experience_library
    assert library.texts == [GOOD] and compiled.tfgrpo_result.steps[0].gate == "accepted"
    assert [r.lessons for r in library.routes] == [(1,)] * 4 + [()] * 4  # the training inputs, in order
    assert (refund, hours) == ("payments", "general")
    # The report says how the shipped library routes, and how many training inputs each lesson is shown near.
    page = write_report(tmp_path / "log", tmp_path / "page.html")[0].read_text(encoding="utf-8")
    assert "Routed by example: each call is shown the lessons of the nearest of 8 training inputs (4 of them route " \
        "to no lesson)." in page and "shown to inputs nearest 4 training inputs" in page
