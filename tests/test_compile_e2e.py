"""A tiny real compile on the embedded model (slow: run with ``pytest -m e2e``)."""

from __future__ import annotations

import json

import dspy
import pytest

from tfgrpo_dspy import TrainingFreeGRPO, with_experiences
from tfgrpo_dspy.kits.wordproblems.generator import generate_problems
from tfgrpo_dspy.kits.wordproblems.metric import numeric_match
from tfgrpo_dspy.kits.wordproblems.task import make_program

pytestmark = pytest.mark.e2e


def test_tiny_compile_on_the_embedded_model(tmp_path):
    pytest.importorskip("xllamacpp")
    from tfgrpo_dspy.lm import local_lm

    lm = local_lm(max_tokens=384)
    trainset = generate_problems(2, seed=11, split="train")
    program = make_program()
    optimizer = TrainingFreeGRPO(metric=numeric_match, group_size=2, epochs=1, num_threads=4, seed_rollouts=True,
                                 informative_only=False, max_experiences=8, log_dir=tmp_path, progress=False)
    with dspy.context(lm=lm):
        compiled = optimizer.compile(program, trainset=trainset)

    step = compiled.tfgrpo_result.steps[0]
    assert step.rollouts == 4
    assert step.policy_usage.completion_tokens > 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "steps" / "0001" / "rollouts").glob("*.json")]
    assert len(records) == 4
    # The real model sometimes runs into max_tokens and the adapter cannot parse the answer: such a rollout
    # is recorded with its error and a zero reward, never fatal, and everything else still runs.
    failed = [r for r in records if r["error"]]
    assert len(failed) == step.rollout_errors
    assert all(r["score"] == 0.0 for r in failed)
    assert all(r["trace"] for r in records if not r["error"])
    # informative_only=False: both groups reach reflection, so one summary per scored rollout and one
    # extraction per group (+1 update if anything was proposed).
    scored = sum(1 for r in records if not r["error"] and not r["metric_error"])
    assert scored >= 1
    assert step.reflection_usage.calls >= scored + 2
    library = compiled.experience_library
    assert len(library) <= 8
    assert all(len(e.text.split()) <= optimizer.max_words for e in library)
    # The library round-trips into a fresh program that still runs on the real model.
    shipped = with_experiences(make_program(), library)
    with dspy.context(lm=lm):
        prediction = shipped(question=trainset[0].question)
    assert prediction.answer is not None
