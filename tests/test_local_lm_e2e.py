"""The real embedded Qwen2.5-Coder-1.5B through DSPy (slow: run with ``pytest -m e2e``)."""

from __future__ import annotations

import random
import threading

import dspy
import pytest

from tfgrpo_dspy.lm import local_lm

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    pytest.importorskip("xllamacpp")
    return local_lm(max_tokens=64)


def test_local_model_answers_a_simple_question(lm):
    uncached = lm.copy(cache=False)  # a response cached by an earlier run would prove nothing
    with dspy.context(lm=uncached), dspy.track_usage() as tracker:
        prediction = dspy.Predict("question -> answer")(question="What is 12 + 30? Reply with just the number.")
    assert prediction.answer.strip().rstrip(".") == "42"
    usage = tracker.get_total_tokens()["local/qwen2.5-coder-1.5b"]
    assert usage["prompt_tokens"] > 20 and usage["completion_tokens"] > 0
    assert uncached.history[-1]["usage"]["completion_tokens"] == usage["completion_tokens"]


def test_rollout_copies_are_sampled_separately_in_parallel(lm):
    # Fresh rollout ids each run, so DSPy's disk cache cannot answer for the model.
    first_id = random.SystemRandom().randrange(10**12)
    copies = [lm.copy(rollout_id=first_id + k, temperature=0.7, max_tokens=32) for k in range(2)]
    answers: dict[int, str] = {}

    def rollout(k: int) -> None:
        with dspy.context(lm=copies[k]):
            answers[k] = dspy.Predict("topic -> slogan")(topic="a bakery that opens at dawn").slogan

    threads = [threading.Thread(target=rollout, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [0, 1] and all(answers.values())
    for copy in copies:
        assert len(copy.history) == 1  # one entry per copy, each a real model call with its own usage
        assert copy.history[0]["usage"]["completion_tokens"] > 0
    assert copies[0].history[0]["uuid"] != copies[1].history[0]["uuid"]
