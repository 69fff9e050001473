"""The lessons study: conditions, paired rows against none and against the placebo, resume, flip count."""

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from scripted import scripted_lm

from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_study():
    spec = importlib.util.spec_from_file_location("bench_lessons_study", BENCHMARKS / "lessons_study.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


study = load_study()


class RuleFollower:
    """Routes right only when the house rules are in the prompt (instructions or input field)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, call):
        self.calls += 1
        text = call.system + " ".join(call.inputs.values())
        return {"queue": "general" if HOUSE_RULES[0].lesson in text else "nowhere"}


def test_conditions_parse_and_refuse_nonsense():
    assert study.Condition.parse("none#2").library is None
    parsed = study.Condition.parse("rules@input+top2")
    assert (parsed.library, parsed.placement, parsed.top_k) == ("rules", "input", 2)
    with pytest.raises(ValueError, match="must look like"):
        study.Condition.parse("rules@system")


def test_each_task_runs_only_the_conditions_of_its_own_library(capsys):
    tickets = study.tickets_task(4, 0)
    gsm8k_like = dataclasses.replace(tickets, name="gsm8k", lessons_name="tips")
    assert study.Condition.parse("rules@input").applies_to(tickets)
    assert not study.Condition.parse("rules@input").applies_to(gsm8k_like)
    assert study.Condition.parse("tips@instructions+top2").applies_to(gsm8k_like)
    assert all(study.Condition.parse(c).applies_to(t) for c in ("none", "none#2", "placebo@both")
               for t in (tickets, gsm8k_like))
    with pytest.raises(SystemExit):
        study.main(["--tasks", "tickets", "--conditions", "none", "tipz@input"])
    assert "'tipz@input' names library 'tipz'" in capsys.readouterr().err


def test_study_rows_are_paired_against_none_and_the_placebo_and_resume(monkeypatch, tmp_path):
    policy = RuleFollower()
    lm = scripted_lm(policy)
    monkeypatch.setattr("tfgrpo_dspy.lm.make_lm", lambda spec, **kwargs: lm)
    argv = ["--tasks", "tickets", "--n", "10", "--conditions", "none", "rules@instructions", "placebo@instructions",
            "rules@input", "none#2", "--runs", str(tmp_path / "runs"), "--out-dir", str(tmp_path), "--threads", "2"]
    assert study.main(argv) == 0
    report = json.loads((tmp_path / "lessons_study.json").read_text())
    rows = {row["condition"]: row for row in report["tasks"][0]["rows"]}
    general = sum(e.queue == "general" for e in study.tickets_task(10, 0).examples)
    assert rows["none"]["accuracy"] == 0.0 and rows["rules@instructions"]["accuracy"] == general / 10
    assert rows["rules@input"]["vs_none"]["wins"] == general
    assert rows["rules@instructions"]["vs_placebo"]["delta"] == general / 10
    assert rows["none#2"]["flips_vs_none"] == 0
    markdown = (tmp_path / "lessons_study.md").read_text()
    assert "rules@input" in markdown and "(0 answers differ from the first run)" in markdown
    assert (tmp_path / "lessons_study.png").exists()
    calls = policy.calls
    assert study.main(argv) == 0  # every condition is read back from --runs
    assert policy.calls == calls
    # A later run of one condition keeps the finished ones in the table, in the grid's order.
    later = ["--tasks", "tickets", "--n", "10", "--conditions", "rules@both", "--runs", str(tmp_path / "runs"),
             "--out-dir", str(tmp_path), "--threads", "2"]
    assert study.main(later) == 0
    names = [row["condition"] for row in json.loads((tmp_path / "lessons_study.json").read_text())["tasks"][0]["rows"]]
    assert names == ["none", "rules@instructions", "placebo@instructions", "rules@input", "rules@both", "none#2"]
    assert policy.calls == calls + 10


def test_a_condition_is_compared_with_the_placebo_of_the_same_placement_and_dose():
    records = {"none": {}, "placebo@instructions": {}, "placebo@instructions+top2": {}}
    assert study._matching_placebo(study.Condition.parse("tips@instructions+top2"), records) == \
        "placebo@instructions+top2"
    assert study._matching_placebo(study.Condition.parse("tips@instructions"), records) == "placebo@instructions"
    # No placebo at that dose: fall back to the same placement with every sentence.
    assert study._matching_placebo(study.Condition.parse("tips@instructions+top4"), records) == "placebo@instructions"
    assert study._matching_placebo(study.Condition.parse("tips@input"), records) is None


def test_an_interrupted_condition_resumes_after_its_last_saved_chunk(monkeypatch, tmp_path):
    policy = RuleFollower()
    monkeypatch.setattr("tfgrpo_dspy.lm.make_lm", lambda spec, **kwargs: scripted_lm(policy))
    from comparison import chunked  # where the study's conditions are evaluated, chunk by chunk

    real_evaluate, chunks = chunked.evaluate_at_k, []

    def evaluate_then_die(*args, **kwargs):
        if len(chunks) == 2:
            raise KeyboardInterrupt  # the machine stops in the third chunk
        chunks.append(kwargs["rollout_id_offset"])
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(chunked, "evaluate_at_k", evaluate_then_die)
    argv = ["--tasks", "tickets", "--n", "25", "--conditions", "rules@instructions", "--runs", str(tmp_path / "runs"),
            "--out-dir", str(tmp_path), "--threads", "2"]
    with pytest.raises(KeyboardInterrupt):
        study.main(argv)
    partial = json.loads((tmp_path / "runs" / "tickets" / "none.partial.json").read_text())
    assert len(partial["scores"]) == 20 and policy.calls == 20 and chunks == [0, 10]

    monkeypatch.setattr(chunked, "evaluate_at_k", real_evaluate)
    assert study.main(argv) == 0  # the rest of none, then the whole of rules@instructions
    assert policy.calls == 25 + 25
    assert not list((tmp_path / "runs" / "tickets").glob("*.partial.json"))
    report = json.loads((tmp_path / "lessons_study.json").read_text())
    rows = {row["condition"]: row for row in report["tasks"][0]["rows"]}
    assert rows["none"]["n"] == 25 and rows["rules@instructions"]["n"] == 25


def test_the_guard_keeps_every_hand_written_lesson_of_the_study():
    """The vague-condition check must not drop a real lesson: every tip and house rule names its situation."""
    from tfgrpo_dspy.reflection.lessons import vague_condition

    gsm8k_fields = ("question", "reasoning", "answer")
    assert all(vague_condition(tip, gsm8k_fields) is None for tip in study.GSM8K_TIPS)
    assert all(vague_condition(rule.lesson, ("ticket", "queue")) is None for rule in HOUSE_RULES)


def test_saved_records_are_reused_only_if_made_with_the_same_problems_lm_and_decoding(monkeypatch, tmp_path):
    """Another --seed or --n pairs other problems, another --max-tokens or decoding other answers: refused by name."""
    policy = RuleFollower()
    monkeypatch.setattr("tfgrpo_dspy.lm.make_lm", lambda spec, **kwargs: scripted_lm(policy))
    runs = tmp_path / "runs"
    argv = ["--tasks", "tickets", "--n", "10", "--conditions", "none", "--runs", str(runs), "--out-dir", str(tmp_path),
            "--threads", "2"]
    assert study.main(argv) == 0
    record = json.loads((runs / "tickets" / "none.json").read_text())
    assert record["made_with"] == {"n": 10, "seed": 0, "lm": "local", "max_tokens": 384,
                                   "decoding": "one slot, no prompt reuse (repeatable)"}
    calls = policy.calls
    for change, named in ((["--seed", "3"], "seed 0 (now 3)"), (["--max-tokens", "200"], "max_tokens 384 (now 200)"),
                          (["--fast-greedy"], "decoding"), (["--lm", "local:0.5b"], "lm 'local' (now 'local:0.5b')")):
        with pytest.raises(ValueError, match=re.escape(named)):
            study.main([*argv, *change])
    assert policy.calls == calls  # nothing was scored, nothing paired
    with pytest.raises(ValueError, match=r"n 10 \(now 12\)"):
        study.main([*argv[:3], "12", *argv[4:]])
    del record["made_with"]  # a record from before the check cannot be paired safely either
    (runs / "tickets" / "none.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="does not say what it was made with"):
        study.main(argv)
