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
