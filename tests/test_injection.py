import dspy
import pytest

from tfgrpo_dspy import ExperienceLibrary, with_experiences
from tfgrpo_dspy.injection import BLOCK_END, BLOCK_START, library_of


def lib(*texts):
    return ExperienceLibrary.from_texts(list(texts))


class TwoStep(dspy.Module):
    def __init__(self):
        super().__init__()
        self.draft = dspy.ChainOfThought("question -> draft")
        self.polish = dspy.Predict("question, draft -> answer")

    def forward(self, question):
        draft = self.draft(question=question).draft
        return self.polish(question=question, draft=draft)


def search(query: str) -> str:
    """Search the web."""
    return "result"


PROGRAMS = {
    "predict": lambda: dspy.Predict("question -> answer"),
    "cot": lambda: dspy.ChainOfThought("question -> answer"),
    "multi": TwoStep,
    "react": lambda: dspy.ReAct("question -> answer", tools=[search]),
}


@pytest.mark.parametrize("kind", sorted(PROGRAMS))
def test_injection_into_every_predictor_keeps_own_instructions_and_original(kind):
    program = PROGRAMS[kind]()
    original = {n: p.signature.instructions for n, p in program.named_predictors()}
    injected = with_experiences(program, lib("When a, do b.", "When c, do d."), top_k=None)  # the static block
    for name, predictor in injected.named_predictors():
        text = predictor.signature.instructions
        assert text.startswith(original[name])
        assert text.count(BLOCK_START) == 1 and "[E2] When c, do d." in text and text.endswith(BLOCK_END)
    assert {n: p.signature.instructions for n, p in program.named_predictors()} == original


def test_reinjection_replaces_the_block_and_empty_library_removes_it():
    program = dspy.ChainOfThought("question -> answer")
    first = with_experiences(program, lib("When a, do b."))
    second = with_experiences(first, lib("When x, do y."))
    text = second.predict.signature.instructions
    assert text.count(BLOCK_START) == 1 and "When a" not in text and "When x, do y." in text
    cleared = with_experiences(second, ExperienceLibrary())
    assert cleared.predict.signature.instructions == program.predict.signature.instructions


def test_selected_predictors_only_and_unknown_names_rejected():
    program = TwoStep()
    injected = with_experiences(program, lib("When a, do b."), predictors=["polish"])
    assert BLOCK_START in injected.polish.signature.instructions
    assert BLOCK_START not in injected.draft.predict.signature.instructions
    with pytest.raises(ValueError, match="unknown predictor name"):
        with_experiences(program, lib("x"), predictors=["nope"])


def test_the_library_reaches_the_prompt():
    program = with_experiences(dspy.Predict("question -> answer"), lib("When asked twice, answer once."))
    with dspy.context(lm=dspy.utils.DummyLM([{"answer": "ok"}])):
        program(question="hi")
        history = dspy.settings.lm.history
    assert "When asked twice, answer once." in str(history[-1]["messages"])


def test_save_then_load_into_fresh_instance_restores_library(tmp_path):
    program = TwoStep()
    library = lib("When a, do b.", "When c, do d.")
    library.apply([{"op": "delete", "id": 1}, {"op": "add", "text": "When e, do f."}])
    injected = with_experiences(program, library, top_k=None)
    injected.save(tmp_path / "p.json")

    fresh = TwoStep()
    assert library_of(fresh) is None
    fresh.load(tmp_path / "p.json")
    restored = library_of(fresh)
    assert [(e.id, e.text) for e in restored] == [(2, "When c, do d."), (3, "When e, do f.")]
    assert "[E3] When e, do f." in fresh.polish.signature.instructions


def test_with_experiences_type_errors():
    with pytest.raises(TypeError, match="dspy.Module"):
        with_experiences("not a program", lib("x"))
    with pytest.raises(TypeError, match="ExperienceLibrary"):
        with_experiences(dspy.Predict("q -> a"), ["x"])


FOUR_LESSONS = ("When a price is per item, multiply by the number of items.",
                "When a train travels, divide the distance by the speed to get the time.",
                "When a recipe is scaled, scale every ingredient by the same factor.",
                "When money is shared equally, divide the total by the number of people.")


def messages_of(program, **inputs):
    with dspy.context(lm=dspy.utils.DummyLM([{"answer": "ok"}] * 4)):
        program(**inputs)
        messages = dspy.settings.lm.history[-1]["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    user = " ".join(m["content"] for m in messages if m["role"] == "user")
    return system, user


def test_by_default_each_call_sees_its_most_relevant_lesson():
    program = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS))
    system, _ = messages_of(program, question="A train travels 120 km at a speed of 60 km per hour. What time?")
    assert [lesson in system for lesson in FOUR_LESSONS] == [False, True, False, False]
    system, _ = messages_of(program, question="Four people share 20 dollars of money equally.")
    assert [lesson in system for lesson in FOUR_LESSONS] == [False, False, False, True]
    two = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS), top_k=2)
    system, _ = messages_of(two, question="A train travels 120 km at a speed of 60 km per hour. What time?")
    assert FOUR_LESSONS[1] in system and sum(lesson in system for lesson in FOUR_LESSONS) == 2


def test_top_k_none_shows_every_lesson_in_the_saved_instructions():
    program = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS), top_k=None)
    assert all(lesson in program.signature.instructions for lesson in FOUR_LESSONS)
    system, _ = messages_of(program, question="A train travels 120 km.")
    assert all(lesson in system for lesson in FOUR_LESSONS)


@pytest.mark.parametrize(("placement", "in_system", "in_user"),
                         [("instructions", True, False), ("input", False, True), ("both", True, True)])
def test_placement_puts_the_lessons_in_the_system_or_the_user_message(placement, in_system, in_user):
    program = with_experiences(dspy.Predict("question -> answer"), lib("When asked twice, answer once."),
                               placement=placement)
    system, user = messages_of(program, question="hi")
    assert ("When asked twice, answer once." in system) is in_system
    assert ("When asked twice, answer once." in user) is in_user


def test_save_and_load_keep_the_placement_and_top_k(tmp_path):
    from tfgrpo_dspy.injection import placement_of

    program = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS), placement="input", top_k=3)
    program.save(tmp_path / "p.json")
    fresh = with_experiences(dspy.Predict("question -> answer"), lib("placeholder"))
    fresh.load(tmp_path / "p.json")
    assert placement_of(fresh) == ("input", 3)
    assert [e.text for e in library_of(fresh)] == list(FOUR_LESSONS)
