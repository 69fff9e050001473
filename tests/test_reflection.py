"""Reflection a small model can do: references, one structured lesson or none, the guard, the update rules."""

import json

import dspy
import pytest
from scripted import default_reflection, scripted_lm
from tfgrpo_dspy.signatures import ExtractLessonLines

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO
from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.reflection.guard import LessonGuard
from tfgrpo_dspy.reflection.lessons import (
    ExampleMaterial,
    Vocabulary,
    cluster_lessons,
    render_lesson,
    restated_details,
    vague_condition,
)
from tfgrpo_dspy.reflection.reflection import (
    RawLesson,
    ReflectionSignatures,
    Reflector,
    clip_middle,
    format_attempts,
    format_outcome,
    parse_lesson_lines,
)

# Problems and lessons from real runs of the embedded 1.5B model (benchmarks/results, the demo, issue #11).
COFFEE = ("A coffee maker costs $116. During a sale its price is reduced by 50%. After the sale, the store raises "
          "the sale price by 50%. What is the final price of the coffee maker in dollars?")
BUTTONS = ("Maya has 20 buttons. Priya has 3 times as many buttons as Maya, and Ravi has 28 fewer buttons than "
           "Priya. How many more buttons does Ravi have than Maya?")
GUITAR = "A guitar costs $248. It is sold at a 50% discount, then a $20 case is added. What is paid in total?"
TERESE = "Terese runs 4.2 miles on Monday and the same distance on Tuesday. How far does she run in the two days?"


def material(task, answers=(), worked=""):
    return ExampleMaterial(task, tuple(answers), worked)


def test_restatements_of_numbers_names_answers_and_intermediate_values_are_flagged():
    coffee = "When the coffee maker is initially priced at $116, reduce the price by 50% before the sale."
    assert restated_details(coffee, material(COFFEE)) == "it repeats the example's numbers 50, 116"
    # $124 is no number of the problem's text: an intermediate value of its solution and attempts.
    guitar = "When the guitar is sold at a 50% discount, the price is reduced to $124."
    assert "124" in restated_details(guitar, material(GUITAR, ["144"], "248 / 2 = 124; 124 + 20 = 144"))
    assert "terese" in restated_details("When Terese runs on Monday, she runs the same on Tuesday.",
                                        material(TERESE))
    assert "maya, priya" in restated_details("When Priya has 3 times as many buttons as Maya, subtract carefully.",
                                             material(BUTTONS))
    assert "copies" in restated_details("When a child has 3 times as many buttons as a friend, multiply.",
                                        material(BUTTONS))
    assert restated_details("When counting, 87 is the answer.", material(COFFEE, ["87"])) is not None
    for general in ("When a price is cut by a percentage and then raised by the same percentage, apply each "
                    "change to the price of that moment; the result is not the original price.",
                    "When a problem says 'times as many', multiply before comparing quantities.",
                    "When a quantity is given in dozens, convert it to units (12 each) before adding."):
        assert restated_details(general, material(COFFEE + " " + BUTTONS, ["87"], "116 / 2 = 58")) is None, general


def test_words_common_across_the_training_set_are_vocabulary_not_details():
    # A routing rule names a queue that is also the example's answer, and a plan that is in its text.
    tickets = [material(f"Plan: Enterprise | Region: EU\nTicket {i}: please reset my password.", ["enterprise-desk"])
               for i in range(10)]
    vocabulary = Vocabulary.of(tickets)
    rule = "When an Enterprise customer cannot log in, route it to enterprise-desk."
    assert restated_details(rule, tickets[0], vocabulary) is None
    assert restated_details(rule, tickets[0]) is not None  # without the training set it looks like a restatement


def test_metadata_never_reaches_the_reflection_or_the_restatement_check():
    """The README's own lesson was flagged as stating the answer 'dozens' (a wordproblems family label)."""
    from tfgrpo_dspy.reflection.reflection import format_reference
    from tfgrpo_dspy.run.context import example_material

    example = dspy.Example(question="A box holds 2 dozen eggs; 5 break. How many are left?", answer="19",
                           family="dozens", difficulty="hard").with_inputs("question")
    assert format_reference(example, ("answer",)) == "answer: 19"
    material = example_material(example, ("answer",))
    assert restated_details("When a quantity is given in dozens, convert it to units before subtracting.",
                            material) is None
    assert restated_details("When a fact is hard to find, open the site map first.", material) is None


def test_reference_fields_default_to_the_program_outputs_and_kits_can_add_the_solution():
    example = dspy.Example(question="q", answer="4", solution="2 + 2 = 4", index=7).with_inputs("question")
    optimizer = TrainingFreeGRPO(lambda e, p, t=None: 1.0)
    program = dspy.ChainOfThought("question -> answer")
    assert optimizer._reference_fields(program, [example]) == ("answer",)
    with_solution = TrainingFreeGRPO(lambda e, p, t=None: 1.0, reference_fields=["answer", "solution"])
    assert with_solution._reference_fields(program, [example]) == ("answer", "solution")
    with pytest.raises(ValueError, match="reference_fields"):
        TrainingFreeGRPO(lambda e, p, t=None: 1.0, reference_fields=["hint"])._reference_fields(program, [example])


def test_render_lesson_and_clustering():
    assert render_lesson("When a price is per item.", "Multiply by the count.") == \
        "When a price is per item, multiply by the count."
    assert render_lesson("", "do x") == ""
    # A capitalized function word after "When" is lowered; a name is kept, so the guard still sees it.
    assert render_lesson("The inputs ask for a refund", "answer X") == "When the inputs ask for a refund, answer X."
    assert render_lesson("Sarah buys apples", "add them") == "When Sarah buys apples, add them."
    ticket = material("The customer was billed twice for the loyalty app. Which queue?")
    assert restated_details(render_lesson("The customer was charged twice", "answer queue: billing"), ticket) is None
    clusters = cluster_lessons([
        ("When a price is given per item, multiply it by the number of items.", 1),
        ("When a price is given per item, multiply by the number of items first.", 2),
        ("When the question asks what is left, subtract what was used.", 3),
    ])
    assert [c.support for c in clusters] == [2, 1] and clusters[0].sources == (1, 2)


def rollouts(scores, error_at=None):
    return tuple(Rollout(0, i, rollout_id=i, inputs={"question": COFFEE}, outputs={"answer": str(s)}, trace=[],
                         score=s, error="TimeoutError" if i == error_at else None) for i, s in enumerate(scores))


def test_failed_rollouts_do_not_count_in_a_group():
    group = GroupOutcome(0, rollouts([1.0, 1.0, 0.0], error_at=2))  # the 0.0 is a crash, not a wrong answer
    assert not group.informative and group.rewards == [1.0, 1.0]
    assert group.advantages == [0.0, 0.0, None]
    mixed = GroupOutcome(0, rollouts([1.0, 0.0, 0.0], error_at=2))
    assert mixed.informative and mixed.advantages == [1.0, -1.0, None]
    assert "Attempt 3" not in format_attempts(mixed, {})


def test_the_summary_sees_the_reference_and_whether_the_attempt_was_right():
    seen = []

    def script(call):
        seen.append(call)
        return default_reflection(call)

    rollout = rollouts([0.0])[0]
    Reflector(scripted_lm(script)).summarize(rollout, "answer: 87\nsolution: 116 / 2 = 58; 58 * 1.5 = 87",
                                             ExperienceLibrary())
    assert "judged correct: no" in seen[0].inputs["outcome"]
    assert "58 * 1.5 = 87" in seen[0].inputs["reference"]
    assert format_outcome(rollouts([1.0])[0]).startswith("judged correct: yes")


def _extract(lessons, *, misleading=(), generalized=None):
    def script(call):
        if call.kind == "extract":
            return {"difference": "d", "lessons": lessons, "misleading": list(misleading), "useful": []}
        if call.kind == "generalize":
            return {"general_lesson": generalized}
        return default_reflection(call)

    lm = scripted_lm(script)
    library = ExperienceLibrary.from_texts(["When a, do b."], max_words=32)
    reflector = Reflector(lm)
    group = GroupOutcome(0, rollouts([1.0, 0.0]))
    extraction, error, _ = reflector.extract(COFFEE, "answer: 87", group, {}, library, max_lessons=1, max_words=32)
    guard = LessonGuard(reflector, Vocabulary(), max_words=32)
    texts = [render_lesson(raw.condition, raw.action) for raw in extraction.lessons]
    verdicts = [guard.check(text, [material(COFFEE, ["87"])]) for text in texts]
    return extraction, verdicts, lm._engine_spec.kinds()


def test_no_general_lesson_is_a_valid_answer_and_nothing_is_forced():
    extraction, verdicts, kinds = _extract([])
    assert extraction.lessons == [] and verdicts == [] and kinds == ["extract"]


def test_the_extraction_keeps_at_most_max_proposals_and_reads_misleading_ids():
    two = [{"condition": "a price is cut then raised", "action": "apply each change to the current price"},
           {"condition": "x", "action": "y"}]
    extraction, verdicts, _ = _extract(two, misleading=["E1", "9"])
    assert len(extraction.lessons) == 1 and extraction.misleading == [1]  # E9 does not exist
    assert verdicts[0].text == "When a price is cut then raised, apply each change to the current price."


def test_a_restating_lesson_is_rewritten_once_or_dropped():
    specific = [{"condition": "the coffee maker costs $116 and is cut by 50%", "action": "it costs $58"}]
    general = "When a price is reduced and then raised by a percentage, apply each change to the current price."
    _, verdicts, kinds = _extract(specific, generalized=general)
    assert kinds == ["extract", "generalize"] and verdicts[0].text == general
    _, verdicts, _ = _extract(specific, generalized="When the coffee maker costs $116, it costs $58.")
    assert verdicts[0].text is None and verdicts[0].reason.startswith("restates its example")


def test_a_lesson_that_echoes_the_prompts_own_example_is_dropped_without_a_rewrite():
    echo = [{"condition": "durations mix hours and minutes",
             "action": "turn every duration into minutes before adding"}]
    _, verdicts, kinds = _extract(echo)
    assert kinds == ["extract"]  # no generalize call: an echo has nothing to rewrite
    assert verdicts[0].text is None and verdicts[0].reason.startswith("copies the reflection prompt")
    own = [{"condition": "a total is split into equal shares", "action": "divide the total by the number of shares"}]
    assert _extract(own)[1][0].text == ("When a total is split into equal shares, divide the total by the number "
                                        "of shares.")


def test_a_lesson_whose_condition_names_only_the_programs_fields_is_dropped_without_a_rewrite():
    # Written by the 1.5B model on the tickets demo (benchmarks/results/replay_reflection_rule.json).
    fields = ("ticket", "queue", "support_queue")
    for vague in ("When queue, change queue to field-ops.", "When the ticket, set the queue to general.",
                  "If a support queue, confirm receipt.", "When , route it."):
        assert vague_condition(vague, fields).startswith("vague condition: ")
    for specific in ("When Plan: Starter | Region: LATAM, queue: tier2-payments.",
                     "When a ticket asks for a refund, route it to billing.",
                     "Always route outages to field-ops.",  # not in the When-form: not judged
                     "When queue, change queue to field-ops."):  # without field names, 'queue' is a word like any
        assert vague_condition(specific, fields if "LATAM" in specific or "refund" in specific else ()) is None
    reflector = Reflector(scripted_lm(default_reflection))
    guard = LessonGuard(reflector, Vocabulary(), max_words=32, field_names=fields)
    verdict = guard.check("When queue, change queue to field-ops.", [material("Plan: Pro | my card was charged")])
    assert verdict.text is None and verdict.reason.startswith("vague condition") and verdict.usage.calls == 0
    kept = guard.check("When a ticket asks for a refund, route it to billing.", [material("Plan: Pro | hi")])
    assert kept.text == "When a ticket asks for a refund, route it to billing."


def test_over_long_lessons_are_shortened_once_or_dropped():
    reflector = Reflector(scripted_lm(default_reflection))
    guard = LessonGuard(reflector, Vocabulary(), max_words=10)
    verdict = guard.check("When " + " ".join(["words"] * 40) + ", stop.", [material("q")])
    assert verdict.text is not None and len(verdict.text.split()) == 10 and verdict.usage.calls == 1


def test_a_custom_signature_replaces_a_step():
    class TerseExtract(ReflectionSignatures().extract):
        """Compare the attempts; write at most one lesson, or none."""

    assert ReflectionSignatures.with_overrides({"extract": TerseExtract}).extract is TerseExtract
    with pytest.raises(ValueError, match="unknown step 'extracts'"):
        ReflectionSignatures.with_overrides({"extracts": TerseExtract})
    with pytest.raises(ValueError, match="lacks the fields"):
        ReflectionSignatures.with_overrides({"extract": dspy.Signature("task_inputs -> lessons")})
    seen = []

    def script(call):
        seen.append(call.system)
        return default_reflection(call)

    lm = scripted_lm(script)
    reflector = Reflector(lm, signatures=ReflectionSignatures.with_overrides({"extract": TerseExtract}))
    reflector.extract("q", "answer: 1", GroupOutcome(0, rollouts([1.0, 0.0])), {}, ExperienceLibrary(),
                      max_lessons=1, max_words=32)
    assert "write at most one lesson, or none" in seen[0]


def test_reflection_answers_are_capped():
    lm = scripted_lm(default_reflection)
    lm.kwargs["max_tokens"] = 4096
    reflector = Reflector(lm, max_tokens=256)
    assert reflector._lm_copy(lm, 0).kwargs["max_tokens"] == 256
    lm.kwargs["max_tokens"] = 128  # an LM with a smaller cap keeps it
    assert reflector._lm_copy(lm, 0).kwargs["max_tokens"] == 128


def test_clip_middle_keeps_both_ends_within_the_limit():
    text = "START " + "m" * 5000 + " END"
    clipped = clip_middle(text, 1000)
    assert len(clipped) == 1000 and clipped.startswith("START") and clipped.endswith(" END")
    assert "characters omitted" in clipped
    assert clip_middle("short", 1000) == "short" and clip_middle(text, None) == text


def test_lesson_lines_parse_into_conditions_actions_and_replaced_ids():
    text = ("1. When a price is given per item, multiply it by the count first.\n"
            "- when durations mix hours and minutes, convert them to minutes (replaces E3).\n"
            "When a total is split, divide it (replaces [E12])\n"
            "none\n\n"
            "Always check the units.")
    lessons, unparsed = parse_lesson_lines(text)
    assert lessons == [("a price is given per item", "multiply it by the count first", None),
                       ("durations mix hours and minutes", "convert them to minutes", "E3"),
                       ("a total is split", "divide it", "E12")]
    assert unparsed == ["Always check the units."]
    assert parse_lesson_lines("none") == ([], []) and parse_lesson_lines("") == ([], [])


def test_the_line_format_extraction_reads_lessons_and_keeps_what_it_could_not_read():
    seen = []

    def script(call):
        if call.kind == "extract":
            seen.append(call)
            return {"difference": "d", "lessons": "When a price is cut then raised, apply each change in turn "
                    "(replaces E1).\nCheck twice.", "misleading": [], "useful": ["E1"]}
        return default_reflection(call)

    library = ExperienceLibrary.from_texts(["When a, do b."], max_words=32)
    reflector = Reflector(scripted_lm(script), signatures=ReflectionSignatures(extract=ExtractLessonLines))
    extraction, error, _ = reflector.extract(COFFEE, "answer: 87", GroupOutcome(0, rollouts([1.0, 0.0])), {},
                                             library, max_lessons=1, max_words=32)
    assert error is None and extraction.useful == [1]
    assert extraction.lessons == [RawLesson("a price is cut then raised", "apply each change in turn", 1)]
    assert extraction.unparsed == ["Check twice."]
    assert "[[ ## lessons ## ]]\n{lessons}\n\n[[ ## misleading" in seen[0].system  # no JSON schema for the lessons


def test_a_compile_with_the_line_format_records_lines_it_could_not_read(tmp_path):
    def script(call):
        if call.kind == "extract":
            return {"difference": "d", "lessons": "When a question adds two numbers, add them.\nBe careful.",
                    "misleading": [], "useful": []}
        reply = default_reflection(call)
        if reply is not None:
            return reply
        return {"answer": "4" if call.number % 2 else "5"}

    trainset = [dspy.Example(question=f"What is {i} + 2?", answer="4").with_inputs("question") for i in range(2)]
    with dspy.context(lm=scripted_lm(script)):
        TrainingFreeGRPO(lambda e, p, t=None: float(p.answer == e.answer), group_size=4, epochs=1,
                         num_threads=1, progress=False, extraction=True, induction=False, verify=False,
                         log_dir=str(tmp_path), signatures={"extract": ExtractLessonLines}
                         ).compile(dspy.Predict("question -> answer"), trainset=trainset)
    proposals = [json.loads(p.read_text()) for p in (tmp_path / "steps" / "0001" / "proposals").glob("*.json")]
    assert proposals and all(p["raw_count"] == 2 for p in proposals)
    assert all(p["dropped"][0] == {"line": "Be careful.", "dropped_because": "not 'When <condition>, <action>.'"}
               for p in proposals)
