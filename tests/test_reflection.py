from tfgrpo_dspy import EditOp, ExperienceLibrary
from tfgrpo_dspy.reflection import _as_proposal


def test_proposals_keep_intent_and_drop_what_cannot_mean_anything():
    library = ExperienceLibrary.from_texts(["When a, do b."])
    assert _as_proposal(EditOp(op="modify", text="When c, do d."), library) == EditOp(op="add", text="When c, do d.")
    assert _as_proposal(EditOp(op="modify", id=1, text="When a, do B."), library).op == "modify"
    assert _as_proposal(EditOp(op="delete", id=9), library) is None
    assert _as_proposal(EditOp(op="delete", id=1), library).id == 1
    assert _as_proposal(EditOp(op="keep"), library) is None
    assert _as_proposal(EditOp(op="add", text="  "), library) is None


def test_over_long_proposals_are_shortened_by_one_call():
    from scripted import default_reflection, scripted_lm

    from tfgrpo_dspy.reflection import Reflector

    lm = scripted_lm(default_reflection)
    reflector = Reflector(lm)
    long_text = "When " + " ".join(["words"] * 40) + ", stop."
    fitted, usage = reflector._fit_word_limit(
        [EditOp(op="add", text=long_text), EditOp(op="add", text="When a, do b.")], max_words=10
    )
    assert [len(op.text.split()) for op in fitted] == [10, 4]
    assert usage.calls == 1 and lm._engine_spec.kinds() == ["shorten"]


def test_over_long_update_operations_are_shortened_too():
    from scripted import default_reflection, scripted_lm

    from tfgrpo_dspy.reflection import Proposal, Reflector

    long_text = "When " + " ".join(["merged"] * 30) + ", check units."

    def merging_update(call):
        if call.kind == "update":
            return {"operations": [{"op": "add", "text": long_text, "reason": "merged two proposals"},
                                   {"op": "delete", "id": 1, "reason": "superseded"}]}
        return default_reflection(call)

    lm = scripted_lm(merging_update)
    library = ExperienceLibrary.from_texts(["When a, do b."], max_words=12)
    decision = Reflector(lm).decide([Proposal(0, ops=[{"op": "add", "text": "When c, do d."}])], library)
    assert decision.ops[0]["op"] == "add" and len(decision.ops[0]["text"].split()) == 12
    assert decision.ops[1] == {"op": "delete", "id": 1, "reason": "superseded"}
    assert lm._engine_spec.kinds() == ["update", "shorten"] and decision.usage.calls == 2
    report = library.apply(decision.ops, step=1)
    assert [e.text for e in library] == [decision.ops[0]["text"]] and not report.refused


# Lessons the embedded 1.5B model wrote in real runs (benchmarks/results/compare_embedded.json, the demo),
# with the training problems they came from.
COFFEE = ("A coffee maker costs $116. During a sale its price is reduced by 50%. After the sale, the store raises "
          "the sale price by 50%. What is the final price of the coffee maker in dollars?")
BUTTONS = ("Maya has 20 buttons. Priya has 3 times as many buttons as Maya, and Ravi has 28 fewer buttons than "
           "Priya. How many more buttons does Ravi have than Maya?")


def test_restated_details_flags_lessons_that_restate_their_problem():
    from tfgrpo_dspy.reflection import restated_details

    coffee_lesson = ("When the coffee maker is initially priced at $116, reduce the price by 50% before the sale. "
                     "After the sale, raise the price by 50%.")
    assert restated_details(coffee_lesson, COFFEE) == "it repeats the input's numbers 50, 116"
    assert "copies" in restated_details(
        "When Priya has 3 times as many buttons as Maya, subtract carefully.", BUTTONS)
    assert restated_details(BUTTONS, BUTTONS) is not None  # the group1 ablation's "lesson" was the question
    # General lessons pass, even when they share a stock phrase or one number with the problem.
    for lesson in ("When a price is cut by a percentage and then raised by the same percentage, apply each "
                   "change to the price of that moment; the result is not the original price.",
                   "When a problem says 'times as many', multiply before comparing quantities.",
                   "When a percentage such as 50% changes a price, compute the new price before the next step."):
        assert restated_details(lesson, COFFEE + " " + BUTTONS) is None, lesson
    assert restated_details("When a total is 1,000 or more, check it.", "The answer is 1000.") is None


def _extracting(lesson: str, generalized: str):
    from scripted import default_reflection

    def script(call):
        if call.kind == "extract":
            return {"difference": "the winners applied each change in turn",
                    "proposals": [{"op": "add", "text": lesson, "reason": "winners did"}]}
        if call.kind == "generalize":
            return {"general_lesson": generalized}
        return default_reflection(call)

    return script


def _extract(script, generalize=True, use_ground_truth=True):
    import dspy
    from scripted import scripted_lm

    from tfgrpo_dspy.reflection import Reflector
    from tfgrpo_dspy.rollouts import GroupOutcome, Rollout

    lm = scripted_lm(script)
    example = dspy.Example(question=COFFEE, answer="87").with_inputs("question")
    rollouts = tuple(Rollout(0, i, rollout_id=i, inputs={"question": COFFEE}, outputs={"answer": a}, trace=[],
                             score=s) for i, (a, s) in enumerate([("87", 1.0), ("116", 0.0)]))
    group = GroupOutcome(0, rollouts)
    proposal = Reflector(lm, generalize=generalize).extract(
        example, group, {}, ExperienceLibrary(max_words=40), use_ground_truth=use_ground_truth, max_proposals=2)
    return proposal, lm._engine_spec.kinds()


def test_a_restating_lesson_is_rewritten_once_or_dropped():
    specific = "When the coffee maker costs $116 and is reduced by 50%, it then costs $58."
    general = "When a price is reduced and then raised by a percentage, apply each change to the current price."
    proposal, kinds = _extract(_extracting(specific, general))
    assert kinds == ["extract", "generalize"] and proposal.ops[0]["text"] == general and not proposal.dropped

    proposal, _ = _extract(_extracting(specific, "When the coffee maker costs $116, it costs $58 after 50% off."))
    assert proposal.ops == [] and proposal.dropped[0]["text"] == specific
    assert proposal.dropped[0]["dropped_because"] == "it repeats the input's numbers 50, 116"
    assert type(proposal).from_dict(proposal.to_dict()) == proposal  # the run log keeps what was dropped

    proposal, kinds = _extract(_extracting(specific, general), generalize=False)
    assert kinds == ["extract"] and proposal.ops[0]["text"] == specific


def test_clip_middle_keeps_both_ends_within_the_limit():
    from tfgrpo_dspy.reflection import clip_middle

    text = "START " + "m" * 5000 + " END"
    clipped = clip_middle(text, 1000)
    assert len(clipped) == 1000 and clipped.startswith("START") and clipped.endswith(" END")
    assert "characters omitted" in clipped
    assert clip_middle("short", 1000) == "short" and clip_middle(text, None) == text


def test_restated_details_flags_lessons_that_state_the_training_answer():
    from tfgrpo_dspy.reflection import restated_details

    # The two lessons the embedded model learned on the local web site (benchmarks/web_local_site.py).
    question = '{"question": "In which year was the Riverside Institute founded?", "root_url": "http://127.0.0.1:8765/"}'
    assert restated_details("When the Riverside Institute was founded, it was in 1987.", question, ["1987"]) == (
        "it states the example's answer '1987'")
    email = '{"question": "What email address can you write to in order to contact the Riverside Institute?"}'
    assert "office@riverside.test" in restated_details(
        "When you see the 'Contact' link on the page, write to office@riverside.test.", email,
        ["office@riverside.test"])
    # Strategies pass; short answers and numbers inside other numbers do not count as stating the answer.
    strategy = "When a question asks when an organisation was founded, open its About page first."
    assert restated_details(strategy, question, ["1987"]) is None
    assert restated_details("When the answer is yes or no, say so first.", "Is it open?", ["yes"]) is None
    assert restated_details("When a year like 19870 appears, check it.", "When?", ["1987"]) is None
    assert restated_details("When counting, recount: 42 is often off by one.", "How many?", ["42"]) is not None


def test_the_answer_check_needs_labels_the_reflection_may_see():
    leaky = "When a price is halved and then raised by half, the answer is 87."
    general = "When a price is reduced and then raised by a percentage, apply each change to the current price."
    proposal, kinds = _extract(_extracting(leaky, general))
    assert kinds == ["extract", "generalize"] and proposal.ops[0]["text"] == general
    proposal, kinds = _extract(_extracting(leaky, general), use_ground_truth=False)  # majority vote: no labels
    assert kinds == ["extract"] and proposal.ops[0]["text"] == leaky
