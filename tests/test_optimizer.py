import json
import re
import threading
from collections import Counter
from pathlib import Path

import dspy
import pytest
from scripted import UPDATE_PIPELINE, Call, default_reflection, scripted_lm

from tfgrpo_dspy import ExperienceLibrary, TrainingAborted, TrainingFreeGRPO
from tfgrpo_dspy.inference.injection import BLOCK_START, library_of


def exact(example, prediction, trace=None):
    return float(str(prediction.answer).strip() == example.answer)


def trainset(n=3, start=0):
    return [dspy.Example(question=f"What is {i} + 2?", answer=str(i + 2)).with_inputs("question")
            for i in range(start, start + n)]


def selection_set(n=2):
    """Questions of the trainset's form that no trainset() holds (a valset must be disjoint from it)."""
    return trainset(n, start=100)


class Alternating:
    """Reflection from the script; the policy is right on every other attempt at each question (mixed groups)."""

    def __init__(self):
        self.seen = Counter()
        self.lock = threading.Lock()

    def __call__(self, call: Call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        question = call.inputs.get("question", "0")
        with self.lock:
            attempt = self.seen[question]
            self.seen[question] += 1
        i = int(re.search(r"What is (\d+)", question).group(1))
        return {"reasoning": "add", "answer": str(i + 2) if attempt % 2 == 0 else "wrong"}


@pytest.fixture
def lm():
    lm = scripted_lm(Alternating())
    with dspy.context(lm=lm):
        yield lm


def optimizer(**kwargs):
    settings = dict(metric=exact, group_size=4, epochs=2, num_threads=4, progress=False, **UPDATE_PIPELINE)
    return TrainingFreeGRPO(**{**settings, **kwargs})


def test_compile_chain_of_thought_learns_and_leaves_student_unchanged(lm):
    student = dspy.ChainOfThought("question -> answer")
    before = student.predict.signature.instructions
    compiled = optimizer().compile(student, trainset=trainset())

    assert student.predict.signature.instructions == before
    assert len(compiled.experience_library) >= 1
    assert BLOCK_START in compiled.predict.signature.instructions
    result = compiled.tfgrpo_result
    assert [s.step for s in result.steps] == [1, 2]
    first = result.steps[0]
    assert first.rollouts == 12 and first.informative_groups == 3 and first.mean_reward == 0.5
    assert first.policy_usage.calls == 12 and first.reflection_usage.calls == 12 + 3 + 1
    assert first.policy_usage.prompt_tokens > 0 and first.reflection_usage.completion_tokens > 0
    assert result.steps[1].library_size == len(compiled.experience_library)
    assert json.loads(json.dumps(result.to_dict()))["steps"][0]["ops_applied"] == first.ops_applied


def test_rollouts_are_distinct_calls_with_unique_ids(tmp_path):
    lm = scripted_lm(Alternating(), cache=True)  # with DSPy's cache on, only rollout_id keeps them apart
    with dspy.context(lm=lm):
        optimizer(epochs=1, log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=trainset())
    assert lm._engine_spec.kinds().count("policy") == 12
    records = [json.loads(p.read_text()) for p in (tmp_path / "steps" / "0001" / "rollouts").glob("*.json")]
    assert len({r["rollout_id"] for r in records}) == 12
    assert all(r["trace"] and r["trace"][0]["predictor"] == "self" for r in records)


def test_later_steps_see_the_library_in_the_prompt(lm):
    optimizer().compile(dspy.Predict("question -> answer"), trainset=trainset())
    policy_systems = [c.system for c in lm._engine_spec.calls if c.kind == "policy"]
    assert BLOCK_START not in policy_systems[0]
    assert BLOCK_START in policy_systems[-1]


def test_non_informative_groups_are_skipped():
    def always_right(call):
        reply = default_reflection(call)
        return reply if reply is not None else {"answer": "4"}

    lm = scripted_lm(always_right)
    data = [dspy.Example(question="2+2", answer="4").with_inputs("question")]
    with dspy.context(lm=lm):
        compiled = optimizer(epochs=1).compile(dspy.Predict("question -> answer"), trainset=data)
    assert set(lm._engine_spec.kinds()) == {"policy"}  # no summary, extraction or update call
    assert compiled.tfgrpo_result.steps[0].informative_groups == 0
    assert len(compiled.experience_library) == 0


def test_failing_rollout_is_recorded_and_scored_not_fatal(tmp_path):
    alternating = Alternating()

    def flaky(call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        if call.number % 4 == 1:
            return RuntimeError("server exploded")
        return alternating(call)

    lm = scripted_lm(flaky)
    with dspy.context(lm=lm):
        compiled = optimizer(epochs=1, log_dir=tmp_path, failure_score=-1.0).compile(
            dspy.Predict("question -> answer"), trainset=trainset()
        )
    records = [json.loads(p.read_text()) for p in (tmp_path / "steps" / "0001" / "rollouts").glob("*.json")]
    failed = [r for r in records if r["error"]]
    assert failed and all("server exploded" in r["error"] and r["score"] == -1.0 for r in failed)
    assert compiled.tfgrpo_result.steps[0].rollout_errors == len(failed)


def test_metric_that_raises_or_returns_nan_is_recorded(lm, tmp_path):
    def broken(example, prediction, trace=None):
        if example.answer == "2":
            raise KeyError("boom")
        return float("nan") if example.answer == "3" else 1.0

    compiled = optimizer(metric=broken, epochs=1, log_dir=tmp_path).compile(
        dspy.Predict("question -> answer"), trainset=trainset()
    )
    records = [json.loads(p.read_text()) for p in (tmp_path / "steps" / "0001" / "rollouts").glob("*.json")]
    errors = {r["metric_error"] for r in records if r["metric_error"]}
    assert any("KeyError" in e for e in errors) and any("nan" in e for e in errors)
    assert compiled.tfgrpo_result.steps[0].metric_errors == 8


def test_feedback_metric_reaches_the_summary(lm):
    def with_feedback(example, prediction, trace=None):
        ok = str(prediction.answer) == example.answer
        return dspy.Prediction(score=float(ok), feedback=f"expected {example.answer}")

    optimizer(metric=with_feedback, epochs=1).compile(dspy.Predict("question -> answer"), trainset=trainset(1))
    summaries = [c for c in lm._engine_spec.calls if c.kind == "summary"]
    assert summaries and all("feedback: expected 2" in c.inputs["outcome"] for c in summaries)


def test_majority_vote_mode_uses_no_labels():
    def votes(call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        return {"answer": "7" if call.number % 4 else "8"}  # 3 of 4 say 7

    lm = scripted_lm(votes)
    data = [dspy.Example(question="secret question", answer="SECRET-GOLD").with_inputs("question")]
    with dspy.context(lm=lm):
        compiled = TrainingFreeGRPO(ground_truth=False, group_size=4, epochs=1, progress=False).compile(
            dspy.Predict("question -> answer"), trainset=data
        )
    assert compiled.tfgrpo_result.steps[0].mean_reward == 0.75
    reflection = [c for c in lm._engine_spec.calls if c.kind != "policy"]
    assert reflection and not any("SECRET-GOLD" in str(c.inputs) for c in reflection)
    extract = next(c for c in reflection if c.kind == "extract")
    assert "no ground truth" in extract.inputs["reference"]


def search(query: str) -> str:
    """Look something up."""
    return "found"


def test_compile_react_program_counts_tool_calls(tmp_path):
    def react_script(call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        if call.kind == "react":
            if "observation_0" in call.inputs:  # the trajectory so far already holds one search
                return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
            return {"next_thought": "search", "next_tool_name": "search", "next_tool_args": {"query": "x"}}
        return {"reasoning": "r", "answer": "2" if call.seed % 2 else "no"}  # per-rollout seed: mixed groups

    lm = scripted_lm(react_script)
    agent = dspy.ReAct("question -> answer", tools=[search], max_iters=3)
    with dspy.context(lm=lm):
        compiled = optimizer(epochs=1, log_dir=tmp_path, seed_rollouts=True).compile(agent, trainset=trainset(1))
    step = compiled.tfgrpo_result.steps[0]
    assert step.tool_calls == 4
    assert BLOCK_START in compiled.react.signature.instructions
    assert BLOCK_START in compiled.extract.predict.signature.instructions
    record = json.loads(next((tmp_path / "steps" / "0001" / "rollouts").glob("*.json")).read_text())
    assert [t["predictor"] for t in record["trace"]][:2] == ["react", "react"]
    assert record["outputs"]["trajectory"]["tool_name_0"] == "search"


def test_compiled_program_save_load_round_trip(lm, tmp_path):
    compiled = optimizer(epochs=1).compile(dspy.ChainOfThought("question -> answer"), trainset=trainset())
    compiled.save(tmp_path / "p.json")
    fresh = dspy.ChainOfThought("question -> answer")
    fresh.load(tmp_path / "p.json")
    assert library_of(fresh).render() == compiled.experience_library.render()
    assert fresh.predict.signature.instructions == compiled.predict.signature.instructions


def test_budget_stops_cleanly_with_last_completed_library(lm, tmp_path):
    compiled = optimizer(epochs=3, max_lm_calls=40, log_dir=tmp_path).compile(
        dspy.Predict("question -> answer"), trainset=trainset()
    )
    result = compiled.tfgrpo_result
    assert result.stopped_reason and "max_lm_calls=40" in result.stopped_reason
    assert len(result.steps) == 1  # step 1 used 28 calls; step 2 stopped mid-way
    assert compiled.experience_library.render() == ExperienceLibrary.load(tmp_path / "library.json").render()
    assert json.loads((tmp_path / "state.json").read_text())["stopped"].startswith("max_lm_calls")


def test_estimate_spends_nothing(lm):
    estimate = optimizer(epochs=3, batch_size=2).estimate(dspy.Predict("question -> answer"), trainset(5))
    assert (estimate.steps, estimate.rollouts, estimate.max_update_calls) == (9, 60, 9)
    # summaries + extractions + updates + a generalize and a shorten per proposal and per update text
    assert estimate.max_reflection_calls == 60 + 15 + 9 + 2 * 15 + 2 * 40 * 9
    assert estimate.max_selection_calls == 0  # 5 examples: too few to hold out a selection set
    with_selection = optimizer(epochs=1).estimate(dspy.Predict("question -> answer"), trainset(5), selection_set(2))
    assert with_selection.max_selection_calls == 2 * (1 + 1 * (2 + 2 * 3))
    assert not lm._engine_spec.calls


def test_systematic_failure_aborts_early_with_the_cause(tmp_path):
    lm = scripted_lm(lambda call: PermissionError("invalid API key"))
    with dspy.context(lm=lm), pytest.raises(TrainingAborted, match="invalid API key"):
        optimizer(min_errors=5, num_threads=1, log_dir=tmp_path).compile(
            dspy.Predict("question -> answer"), trainset=trainset()
        )
    # DSPy's ChatAdapter retries a failed call once through its JSON fallback (2 calls per rollout), and
    # one rollout may be in flight when the fifth failure aborts the run.
    assert len(lm._engine_spec.calls) <= 2 * (5 + 1)
    assert json.loads((tmp_path / "state.json").read_text())["stopped"].startswith("aborted")


def test_malformed_reflection_is_retried_then_skipped_without_corrupting():
    alternating = Alternating()

    def garbage_updates(call):
        if call.kind == "update":
            return "I refuse to follow the format."
        return alternating(call)

    bad = scripted_lm(garbage_updates)
    with dspy.context(lm=bad):
        compiled = optimizer(epochs=1, reflection_retries=1).compile(
            dspy.Predict("question -> answer"), trainset=trainset()
        )
    step = compiled.tfgrpo_result.steps[0]
    assert step.reflection_errors == 1 and step.library_size == 0
    assert bad._engine_spec.kinds().count("update") >= 2


BAD_INPUTS = [
    (dict(metric=42), TypeError, "metric"),
    (dict(metric=lambda: 1), TypeError, "metric"),
    (dict(group_size=0), ValueError, "group_size"),
    (dict(temperature=3.0), ValueError, "temperature"),
    (dict(reflection_lm="gpt-4o"), TypeError, "reflection_lm"),
    (dict(max_words=0), ValueError, "max_words"),
    (dict(metric=None), ValueError, "metric is required"),
]


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_INPUTS)
def test_bad_settings_are_rejected_early(kwargs, error, match):
    with pytest.raises(error, match=match):
        optimizer(**kwargs)


def test_bad_compile_inputs_are_rejected_before_any_call(lm):
    opt = optimizer()
    program = dspy.Predict("question -> answer")
    with pytest.raises(ValueError, match="trainset must be a non-empty list"):
        opt.compile(program, trainset=[])
    with pytest.raises(ValueError, match="with_inputs"):
        opt.compile(program, trainset=[dspy.Example(question="q", answer="a")])
    with pytest.raises(TypeError, match="dspy.Example"):
        opt.compile(program, trainset=[{"question": "q"}])
    with pytest.raises(ValueError, match="no predictors"):
        opt.compile(dspy.Module(), trainset=trainset())
    with pytest.raises(ValueError, match="answer_field"):
        TrainingFreeGRPO(ground_truth=False, answer_field="label").compile(program, trainset=trainset())
    train = trainset()
    relabeled = dspy.Example(**{**train[1].toDict(), "answer": "another label"}).with_inputs(*train[1]._input_keys)
    with pytest.raises(ValueError, match=r"valset shares 1 of its 2 examples' inputs with the trainset "
                                         r"\(valset\[1\] is trainset\[1\]\)"):
        opt.compile(program, trainset=train, valset=[dspy.Example(question="a new one", answer="x").with_inputs(
            "question"), relabeled])
    assert not lm._engine_spec.calls


def test_log_dir_of_a_different_run_is_refused(lm, tmp_path):
    optimizer(epochs=1, log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=trainset())
    with pytest.raises(ValueError, match=r"different settings, LMs or data \(settings.group_size: 4 -> 3\)"):
        optimizer(epochs=1, group_size=3, log_dir=tmp_path).compile(
            dspy.Predict("question -> answer"), trainset=trainset()
        )
    with pytest.raises(ValueError, match="trainset"):
        optimizer(epochs=1, log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=trainset(2))


def test_log_dir_files_are_readable_json(lm, tmp_path):
    optimizer(epochs=1, log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=trainset())
    step_dir = Path(tmp_path) / "steps" / "0001"
    for name in ("step.json", "library.json", "updates/chunk01.json"):
        json.loads((step_dir / name).read_text())
    assert len(list((step_dir / "summaries").glob("*.json"))) == 12
    assert len(list((step_dir / "proposals").glob("*.json"))) == 3
    assert "audit" in json.loads((step_dir / "step.json").read_text())


def test_without_summaries_extraction_reads_the_trajectories(lm):
    compiled = optimizer(epochs=1, summarize=False).compile(dspy.Predict("question -> answer"), trainset=trainset())
    kinds = lm._engine_spec.kinds()
    assert "summary" not in kinds and kinds.count("extract") == 3
    extract = next(c for c in lm._engine_spec.calls if c.kind == "extract")
    assert "## Step 1: self" in extract.inputs["attempts"] and "output answer:" in extract.inputs["attempts"]
    assert len(compiled.experience_library) >= 1


def test_valset_selects_the_shipped_library_and_every_candidate_is_listed(lm, tmp_path):
    compiled = optimizer(epochs=1, gate_margin=0, log_dir=tmp_path).compile(
        dspy.Predict("question -> answer"), trainset=trainset(), valset=selection_set(2)
    )
    result = compiled.tfgrpo_result
    assert [c.label for c in result.candidates] == ["initial", "step 1"]
    assert all(0.0 <= c.score <= 1.0 for c in result.candidates)
    assert result.selection_size == 2 and result.best_step in (0, 1)
    assert len(list((tmp_path / "selection").glob("*.json"))) == 2
    assert result.to_dict()["candidates"][0]["label"] == "initial"


def test_long_trajectories_are_clipped_to_the_reflection_budget():
    """A ReAct run can produce pages of trajectory; a 4k-token reflection model must still get a prompt it can read."""
    long_reasoning = "step " + "x" * 3_800  # stored traces keep 4,000 characters per value

    def verbose(call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        i = int(re.search(r"What is (\d+)", call.inputs["question"]).group(1))
        return {"reasoning": long_reasoning, "answer": str(i + 2) if call.number % 2 else "wrong"}

    lm = scripted_lm(verbose)
    with dspy.context(lm=lm):
        # One thread: the script alternates right and wrong by call number, so each group is mixed.
        optimizer(epochs=1, group_size=2, summarize=False, max_trajectory_chars=3000, num_threads=1).compile(
            dspy.ChainOfThought("question -> answer"), trainset=trainset(2))
        optimizer(epochs=1, group_size=2, max_trajectory_chars=3000, num_threads=1).compile(
            dspy.ChainOfThought("question -> answer"), trainset=trainset(2))
    extracts = [c for c in lm._engine_spec.calls if c.kind == "extract"]
    summaries = [c for c in lm._engine_spec.calls if c.kind == "summary"]
    assert extracts and summaries
    for call in extracts[:2]:  # the summarize=False run: both attempts' trajectories share the budget
        attempts = call.inputs["attempts"]
        assert len(attempts) < 3000 + 400 and attempts.count("characters omitted") == 2
        assert attempts.count("output answer:") == 2 and attempts.count("## Step 1: predict") == 2  # both ends kept
    for call in summaries:
        assert len(call.inputs["trajectory"]) <= 3000 and "output answer:" in call.inputs["trajectory"]
    with pytest.raises(ValueError, match="max_trajectory_chars"):
        optimizer(max_trajectory_chars=0)


def test_a_prompt_too_long_for_the_context_is_not_retried():
    from dspy import lm15

    from tfgrpo_dspy.reflection.reflection import Reflector

    def overflow(call):  # what the embedded engine raises for llama.cpp's exceed_context_size_error
        return lm15.ContextLengthError("request (9859 tokens) exceeds the available context size (4096 tokens)",
                                       provider="local")

    lm = scripted_lm(overflow)
    prediction, error, usage = Reflector(lm, max_retries=2).run(dspy.Signature("text -> summary"), text="long")
    assert prediction is None and "ContextWindowExceeded" in error
    assert len(lm._engine_spec.calls) == 1


def test_a_run_from_before_a_new_setting_existed_resumes(lm, tmp_path):
    compiled = optimizer(epochs=1, log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=trainset())
    manifest_path = Path(tmp_path) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["program"] == "Predict"  # the user's class, not the carrier it runs as
    del manifest["settings"]["max_trajectory_chars"]  # as written by the version before that setting
    manifest["program"] = "ExperiencePredict"  # ... and by versions that named a Predict student by its carrier
    manifest_path.write_text(json.dumps(manifest))
    calls = len(lm._engine_spec.calls)
    resumed = optimizer(epochs=1, log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=trainset())
    assert len(lm._engine_spec.calls) == calls  # everything was reused
    assert [e.text for e in resumed.experience_library] == [e.text for e in compiled.experience_library]
    assert json.loads(manifest_path.read_text())["settings"]["max_trajectory_chars"] == 8000
    assert json.loads(manifest_path.read_text())["program"] == "Predict"
    with pytest.raises(ValueError, match="different settings"):  # a changed setting is still refused
        optimizer(epochs=1, log_dir=tmp_path, max_trajectory_chars=100).compile(
            dspy.Predict("question -> answer"), trainset=trainset())


def test_an_update_that_merges_ids_it_invented_still_adds_its_lesson():
    """The 1.5B update model numbered the step's proposals E1-E7 itself and merged them in an empty library
    (benchmarks/results/replay_reflection_rule.json); refusing the op lost every lesson the guard had passed."""
    alternating = Alternating()
    merged = "When a question mixes units, convert them to one unit before adding."

    def invented_ids(call):
        if call.kind == "update":
            return {"operations": [{"op": "merge", "ids": ["E1", "E2", "E3"], "text": merged, "reason": "same"}]}
        return alternating(call)

    with dspy.context(lm=scripted_lm(invented_ids)):
        compiled = optimizer(epochs=1, val_fraction=0).compile(dspy.Predict("question -> answer"),
                                                               trainset=trainset())
    library = compiled.experience_library
    assert [e.text for e in library] == [merged]
    entry = next(e for e in library.audit_log if e.status == "applied" and e.op == "add")
    assert entry.reason == "same (merge named E1, E2, E3, not in the library)"


def test_retarget_keeps_the_known_ids_of_an_edit():
    from tfgrpo_dspy.library.edits import EditOp
    from tfgrpo_dspy.run.update import retarget

    library = ExperienceLibrary.from_texts(["When a, do b.", "When c, do d."])
    one, two = (e.id for e in library)
    merge = EditOp(op="merge", ids=[one, two, 9], text="When a or c, do b.")
    assert retarget(merge, library).ids == [one, two] and retarget(merge, library).op == "merge"
    partial = retarget(EditOp(op="merge", ids=[two, 9], text="When c, do e."), library)
    assert (partial.op, partial.id, partial.reason) == ("modify", two, "merge named E9, not in the library")
    assert retarget(EditOp(op="modify", id=7, text="When x, do y."), library).op == "add"
    known = EditOp(op="modify", id=one, text="When a, do c.")
    assert retarget(known, library) is known
    delete = EditOp(op="delete", id=9)
    assert retarget(delete, library) is delete  # an unknown delete is still refused by the library, with its id
