"""The gate's audit log: each edit of a rejected step is logged with its own status and its own trial."""

from tfgrpo_dspy.library.edits import EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.run.gate import Edit, StepGate
from tfgrpo_dspy.run.selection import LibraryScore, Selector
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings

HARMFUL = "When a number is even, halve it first."
BAD = "When adding, subtract instead."


class RuleSelector:
    """Six selection examples scored by rule: BAD in the library loses examples 0-3, HARMFUL loses 4-5.

    ``gate`` is the real Selector's, so the reasons are the ones a run writes.
    """

    gate = Selector.gate
    shift = Selector.shift

    def __init__(self) -> None:
        self.settings = TrainingFreeGRPOSettings.from_options({})
        self.labels: list[str] = []

    def score(self, library: ExperienceLibrary, label: str) -> LibraryScore:
        self.labels.append(label)
        texts = library.texts
        scores = tuple(0.0 if (BAD in texts and i < 4) or (HARMFUL in texts and i >= 4) else 1.0 for i in range(6))
        return LibraryScore(fingerprint="|".join(texts) or "empty", scores=scores, usage=None)


def step_with_a_good_delete_and_a_bad_add():
    current = ExperienceLibrary.from_texts([HARMFUL])
    edits = [Edit(EditOp(op="delete", id=1, reason="it misleads")), Edit(EditOp(op="add", text=BAD), (3,))]
    candidate = current.copy()
    candidate.apply([e.op for e in edits], step=1)
    return current, candidate, edits


def test_an_edit_kept_alone_is_not_also_refused_and_a_refusal_quotes_its_own_trial():
    current, candidate, edits = step_with_a_good_delete_and_a_bad_add()
    outcome = StepGate(TrainingFreeGRPOSettings.from_options({}), RuleSelector()).decide(1, current, candidate, edits)
    assert outcome.label == "partly accepted" and outcome.library.texts == []
    combined, delete_alone, add_alone = outcome.candidates
    assert (combined.accepted, delete_alone.accepted, add_alone.accepted) == (False, True, False)
    assert "2 won / 4 lost" in combined.reason and "0 won / 4 lost" in add_alone.reason

    log = [e for e in outcome.library.audit_log if e.step == 1]
    deletes = [(e.status, e.id) for e in log if e.op == "delete"]
    assert deletes == [("applied", 1)]  # kept when tried alone: logged once, as applied
    (refused,) = [e for e in log if e.status == "refused"]
    assert refused.op == "add" and refused.text == BAD
    assert "alone (step 1, edit 2 alone)" in refused.detail and "0 won / 4 lost" in refused.detail
    assert combined.reason not in refused.detail  # not the combined candidate's numbers


def test_edits_not_tried_alone_say_they_were_refused_with_the_others():
    current, candidate, edits = step_with_a_good_delete_and_a_bad_add()
    settings = TrainingFreeGRPOSettings.from_options({"gate_budget": 0})
    outcome = StepGate(settings, RuleSelector()).decide(1, current, candidate, edits)
    assert outcome.label == "rejected" and outcome.library.texts == [HARMFUL]
    refused = [e for e in outcome.library.audit_log if e.status == "refused"]
    assert [e.op for e in refused] == ["delete", "add"]
    for entry in refused:
        assert entry.detail.startswith("rejected by the selection gate with the step's other edits (not tried alone)")
        assert "2 won / 4 lost" in entry.detail


def test_each_candidate_names_the_library_it_was_compared_with():
    current, candidate, edits = step_with_a_good_delete_and_a_bad_add()
    outcome = StepGate(TrainingFreeGRPOSettings.from_options({}), RuleSelector()).decide(1, current, candidate, edits)
    combined, delete_alone, add_alone = outcome.candidates
    assert combined.compared_with == HARMFUL and delete_alone.compared_with == HARMFUL  # the current library
    assert add_alone.compared_with == "empty"  # the library kept after the delete, not the step's starting one


class ShiftSelector:
    """The real Selector's gate and shift on ten labelled selection examples, with no program to run."""

    gate = Selector.gate
    shift = Selector.shift

    def __init__(self, answers: list[str], **settings) -> None:
        import dspy

        self.settings = TrainingFreeGRPOSettings.from_options(settings)
        self.examples = [dspy.Example(question=f"q{i}", answer="payments" if i < 4 else "general").with_inputs(
            "question") for i in range(10)]
        self.metric = lambda example, prediction, trace=None: float(prediction.answer == example.answer)
        self.answers = answers

    def library_score(self, name: str) -> LibraryScore:
        outputs = tuple({"answer": a} for a in self.answers)
        scores = tuple(float(a == e.answer) for a, e in zip(self.answers, self.examples, strict=True))
        return LibraryScore(name, scores, None, outputs)


def test_a_library_that_only_moves_answers_to_one_label_is_refused_by_its_shift():
    # The current library gets nothing right; the candidate answers payments to 9 of 10 and so wins the 4
    # payments examples: +4 net, past the margin, but no better than answering payments to all ten.
    selector = ShiftSelector(["payments"] * 9 + ["general"])
    current = LibraryScore("current", (0.0,) * 10, None)
    decision = selector.gate(current, selector.library_score("candidate"))
    assert decision.comparison.net_wins == 5 and not decision.passed
    assert "against its shift (always 'answer: payments', right on 4): 1 won / 0 lost (net +1, needs +2)" in (
        decision.reason)
    assert selector.gate(current, selector.library_score("candidate")).passed is False
    assert ShiftSelector(["payments"] * 9 + ["general"], gate_shift=False).gate(
        current, selector.library_score("candidate")).passed


def test_a_library_that_tells_labels_apart_beats_its_shift():
    selector = ShiftSelector(["payments"] * 4 + ["general"] * 6)  # every answer right
    decision = selector.gate(LibraryScore("current", (0.0,) * 10, None), selector.library_score("candidate"))
    assert decision.passed and "always 'answer: general', right on 6): 4 won / 0 lost" in decision.reason
