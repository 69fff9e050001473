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
    injected = with_experiences(program, lib("When a, do b.", "When c, do d."))
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
    injected = with_experiences(program, library)
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
