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
