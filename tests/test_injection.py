import dspy
import pytest

from tfgrpo_dspy import ExperienceLibrary, with_experiences
from tfgrpo_dspy.inference.injection import BLOCK_END, BLOCK_START, library_of


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


def test_a_library_of_two_lessons_shows_each_input_its_own():
    """Okapi's idf is zero for a word in one of two lessons: the first lesson used to win every input."""
    refund, login = "When a refund is asked for, answer payments.", "When a login fails, answer accounts."
    program = with_experiences(dspy.Predict("question -> answer"), lib(refund, login))
    system, _ = messages_of(program, question="My login fails every morning.")
    assert login in system and refund not in system
    system, _ = messages_of(program, question="I want a refund for my order.")
    assert refund in system and login not in system


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
    from tfgrpo_dspy.inference.injection import placement_of

    program = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS), placement="input", top_k=3)
    program.save(tmp_path / "p.json")
    fresh = with_experiences(dspy.Predict("question -> answer"), lib("placeholder"))
    fresh.load(tmp_path / "p.json")
    assert placement_of(fresh) == ("input", 3)
    assert [e.text for e in library_of(fresh)] == list(FOUR_LESSONS)


# -- a saved program keeps its lessons when it is loaded -------------------------------------------------------
TRAIN_QUESTION = "A train travels 120 km at a speed of 60 km per hour. What time?"
MONEY_QUESTION = "Four people share 20 dollars of money equally."


def prompts(program, *questions):
    """The messages the program sends for each question, on a scripted LM that answers every field."""
    sent = []
    for question in questions:
        with dspy.context(lm=dspy.utils.DummyLM([{"reasoning": "r", "draft": "d", "answer": "ok"}] * 4)):
            program(question=question)
            sent.append([m["content"] for m in dspy.settings.lm.history[-1]["messages"]])
    return sent


@pytest.mark.parametrize(("kind", "options"), [
    ("predict", {}),  # top_k=1 of four lessons: the lessons are not in the saved instructions
    ("cot", {"top_k": 2}),
    ("cot", {"placement": "input"}),
    ("multi", {"predictors": ["polish"], "placement": "both", "top_k": 1}),
])
def test_a_program_loaded_the_dspy_way_sends_the_prompts_it_was_trained_with(tmp_path, kind, options):
    trained = with_experiences(PROGRAMS[kind](), lib(*FOUR_LESSONS), **options)
    trained.save(tmp_path / "p.json")
    loaded = PROGRAMS[kind]()  # a plain program of the same shape, as in a serving process
    loaded.load(tmp_path / "p.json")
    assert prompts(loaded, TRAIN_QUESTION, MONEY_QUESTION) == prompts(trained, TRAIN_QUESTION, MONEY_QUESTION)
    shown = " ".join(prompts(loaded, TRAIN_QUESTION)[0])
    # top_k retrieval, not the whole library
    assert FOUR_LESSONS[1] in shown and sum(lesson in shown for lesson in FOUR_LESSONS) == options.get("top_k", 1)


def test_without_the_carrier_the_retrieved_lessons_would_be_missing(tmp_path):
    """What the load guards against: the saved instructions alone carry no lesson when top_k < library size."""
    import json

    trained = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS))
    trained.save(tmp_path / "p.json")
    saved = json.loads((tmp_path / "p.json").read_text())
    assert not any(lesson in saved["signature"]["instructions"] for lesson in FOUR_LESSONS)
    assert [e["text"] for e in saved["tfgrpo_experiences"]["library"]["experiences"]] == list(FOUR_LESSONS)
    assert saved["tfgrpo_experiences"]["retrieval"] == "bm25-lucene-idf"


def test_a_saved_evaluation_of_a_program_under_another_retrieval_is_not_reused(monkeypatch):
    from tfgrpo_dspy.inference import injection
    from tfgrpo_dspy.inference.evaluation import fingerprint

    program = with_experiences(dspy.Predict("question -> answer"), lib(*FOUR_LESSONS))
    before = fingerprint(program)
    monkeypatch.setattr(injection, "RETRIEVAL", "another-retrieval")
    assert fingerprint(program) != before


def test_load_program_is_the_explicit_call_and_names_a_predictor_that_cannot_carry(tmp_path):
    from tfgrpo_dspy import load_program
    from tfgrpo_dspy.inference.injection import ExperiencePredict

    trained = with_experiences(TwoStep(), lib(*FOUR_LESSONS), predictors=["polish"])
    trained.save(tmp_path / "p.json")
    loaded = load_program(TwoStep(), tmp_path / "p.json")
    assert isinstance(loaded.polish, ExperiencePredict) and not isinstance(loaded.draft.predict, ExperiencePredict)
    assert (loaded.polish.placement, loaded.polish.top_k) == ("instructions", 1)

    class OwnPredict(dspy.Predict):
        pass

    class Custom(dspy.Module):
        def __init__(self):
            super().__init__()
            self.predict = OwnPredict("question -> answer")

        def forward(self, question):
            return self.predict(question=question)

    with_experiences(Custom(), lib(*FOUR_LESSONS)).save(tmp_path / "custom.json")
    with pytest.warns(UserWarning, match="does not show the lessons"):
        Custom().load(tmp_path / "custom.json")
    with pytest.warns(UserWarning), pytest.raises(ValueError, match=r"\['predict'\].*with_experiences"):
        load_program(Custom(), tmp_path / "custom.json")


def test_dspy_load_of_a_whole_program_save_keeps_the_lessons(tmp_path):
    trained = with_experiences(dspy.ChainOfThought("question -> answer"), lib(*FOUR_LESSONS), top_k=2)
    trained.save(str(tmp_path / "whole"), save_program=True)
    loaded = dspy.load(str(tmp_path / "whole"), allow_pickle=True)
    assert prompts(loaded, TRAIN_QUESTION, MONEY_QUESTION) == prompts(trained, TRAIN_QUESTION, MONEY_QUESTION)


def test_a_compiled_program_loads_with_its_lessons_as_compiled(tmp_path):
    """The real path: TrainingFreeGRPO.compile on a scripted LM, compiled.save, a fresh program's load."""
    from scripted import scripted_lm
    from test_selection import GOOD, LessonSensitivePolicy, exact, questions

    from tfgrpo_dspy import TrainingFreeGRPO

    start = lib(*FOUR_LESSONS)  # more lessons than top_k=1: only the state, not the instructions, has them
    with dspy.context(lm=scripted_lm(LessonSensitivePolicy({0: GOOD}))):
        compiled = TrainingFreeGRPO(metric=exact, group_size=2, num_threads=1, progress=False, max_words=40,
                                    initial_library=start).compile(dspy.Predict("question -> answer"),
                                                                   trainset=questions(0, 2), valset=questions(10, 6))
    assert len(compiled.experience_library) > 1
    compiled.save(tmp_path / "p.json")
    loaded = dspy.Predict("question -> answer")
    loaded.load(tmp_path / "p.json")
    assert library_of(loaded).texts == compiled.experience_library.texts
    assert prompts(loaded, TRAIN_QUESTION, MONEY_QUESTION) == prompts(compiled, TRAIN_QUESTION, MONEY_QUESTION)
