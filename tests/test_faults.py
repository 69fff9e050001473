"""Fault injection: flaky, hanging and garbage-producing LMs never crash a run or lose finished work."""

import json
import time

import dspy
import pytest
from dspy.lm15 import RateLimitError
from scripted import UPDATE_PIPELINE, ScriptedEngine, default_reflection

from tfgrpo_dspy import TrainingFreeGRPO
from tfgrpo_dspy.run.accounting import TrainingAborted


def metric(example, prediction, trace=None):
    return float(prediction.answer == example.answer)


def data(n=2):
    return [dspy.Example(question=f"Say w{i}", answer=f"w{i}").with_inputs("question") for i in range(n)]


def policy(call):
    reply = default_reflection(call)
    if reply is not None:
        return reply
    return {"answer": call.inputs["question"].split()[1].split("\n")[0] if call.seed % 2 else "no"}


def optimizer(**kwargs):
    return TrainingFreeGRPO(metric=metric, group_size=2, epochs=1, num_threads=4, seed_rollouts=True,
                            progress=False, **{**UPDATE_PIPELINE, **kwargs})


def test_transient_rate_limits_are_retried_by_the_lm():
    def flaky(call):
        if call.kind == "policy" and call.number % 3 == 0:
            return RateLimitError("slow down", retry_after=0.01)
        return policy(call)

    engine = ScriptedEngine(flaky)
    lm = dspy.LM("scripted/model", engine=engine, cache=False, num_retries=3)
    with dspy.context(lm=lm):
        compiled = optimizer().compile(dspy.Predict("question -> answer"), trainset=data())
    step = compiled.tfgrpo_result.steps[0]
    assert step.rollout_errors == 0 and step.rollouts == 4
    assert engine.kinds().count("policy") > 4  # some calls were retried


def test_a_hanging_lm_call_is_abandoned_and_recorded(tmp_path):
    def hangs_once(call):
        if call.kind == "policy" and call.number == 0:
            time.sleep(5)
        return policy(call)

    lm = dspy.LM("scripted/model", engine=ScriptedEngine(hangs_once), cache=False, num_retries=0)
    started = time.monotonic()
    with dspy.context(lm=lm):
        compiled = optimizer(call_timeout=0.5, log_dir=tmp_path).compile(
            dspy.Predict("question -> answer"), trainset=data()
        )
    assert time.monotonic() - started < 4.5  # the run did not wait for the hung call
    records = [json.loads(p.read_text()) for p in (tmp_path / "steps" / "0001" / "rollouts").glob("*.json")]
    timed_out = [r for r in records if r["error"] and "no answer within 0.5 s" in r["error"]]
    assert len(timed_out) == 1 and timed_out[0]["score"] == 0.0
    assert compiled.tfgrpo_result.steps[0].rollout_errors == 1


def test_a_policy_that_only_answers_garbage_aborts_with_the_first_error(tmp_path):
    # Four calls, all failed: fewer than min_errors, yet the run must not end as a success with an empty library.
    def garbage(call):
        if call.kind == "policy":
            return "<<<%%% not the format at all"
        return policy(call)

    lm = dspy.LM("scripted/model", engine=ScriptedEngine(garbage), cache=False, num_retries=0)
    with dspy.context(lm=lm), pytest.raises(TrainingAborted) as aborted:
        optimizer(log_dir=tmp_path).compile(dspy.Predict("question -> answer"), trainset=data())
    message = str(aborted.value)
    assert message.startswith("all 4 calls in this session failed; the first: rollouts: AdapterParseError")
    assert "rerun with the same log_dir to resume" in message
    assert json.loads((tmp_path / "state.json").read_text())["stopped"].startswith("aborted: all 4 calls")


def test_garbage_extraction_output_is_retried_then_skipped():
    def bad_lessons(call):
        if call.kind == "extract":
            return {"lessons": "definitely not json"}
        return policy(call)

    engine = ScriptedEngine(bad_lessons)
    lm = dspy.LM("scripted/model", engine=engine, cache=False, num_retries=0)
    with dspy.context(lm=lm):
        compiled = optimizer(reflection_retries=1).compile(dspy.Predict("question -> answer"), trainset=data())
    # A step whose every extraction failed is not complete: the run stops, and a rerun redoes the reflection.
    result = compiled.tfgrpo_result
    assert result.steps == () and "every lesson extraction failed" in result.stopped_reason
    assert len(compiled.experience_library) == 0 and "update" not in engine.kinds()
    assert engine.kinds().count("extract") == 2 * 2  # two groups, one retry each


MISSING_KEY = ("AuthenticationError: litellm.AuthenticationError: OpenAIException - The api_key client option must "
               "be set either by passing api_key to the client or by setting the OPENAI_API_KEY environment "
               "variable; see the provider's documentation")


def test_an_abort_quotes_the_error_whole_or_cut_at_a_word():
    from tfgrpo_dspy.run.accounting import Ledger
    from tfgrpo_dspy.usage import Usage

    ledger = Ledger(min_errors=2)
    ledger.record("policy", Usage(), MISSING_KEY, "rollouts")
    with pytest.raises(TrainingAborted) as aborted:
        ledger.record("policy", Usage(), MISSING_KEY, "rollouts")
    assert MISSING_KEY in str(aborted.value)  # 230 characters: it was cut at 200, mid-word ("environm")
    ledger = Ledger(min_errors=1)
    with pytest.raises(TrainingAborted) as aborted:
        ledger.record("policy", Usage(), "word " * 200, "rollouts")
    assert "word word [...]" in str(aborted.value) and "wor " not in str(aborted.value)


def test_all_failed_is_judged_on_the_whole_session():
    from tfgrpo_dspy.run.accounting import Ledger
    from tfgrpo_dspy.usage import Usage

    ledger = Ledger()
    ledger.check_all_failed()  # no call yet: nothing to judge
    ledger.record("policy", Usage(), None, "rollouts")
    ledger.record("policy", Usage(), "ValueError: bad", "rollouts")
    ledger.check_all_failed()  # one call worked
    failing = Ledger()
    failing.record("policy", Usage(), "NotFoundError: no such model", "rollouts")
    failing.record("policy", Usage(), "TimeoutError: later", "rollouts")
    with pytest.raises(TrainingAborted, match="all 2 calls in this session failed; the first: rollouts: NotFound"):
        failing.check_all_failed()
