"""Offline tests of the benchmark harnesses (benchmarks/compare.py, benchmarks/systems.py) with scripted engines."""

import importlib.util
import json
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import dspy
import pytest
from scripted import Call, default_reflection, scripted_lm

from tfgrpo_dspy.injection import BLOCK_START
from tfgrpo_dspy.usage import Usage

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


compare = load_script("compare")
systems = load_script("systems")

_OUTPUT_FIELDS = re.compile(r"Your output fields are:\n(.*?)\n\n", re.DOTALL)


class WordProblemScript:
    """Reflection from the script; the policy gives the right answer on every other attempt at a question."""

    def __init__(self):
        self.attempts = Counter()
        self.lock = threading.Lock()

    def __call__(self, call: Call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        outputs = _OUTPUT_FIELDS.search(call.system)
        names = re.findall(r"\d+\. `(\w+)`", outputs.group(1)) if outputs else []
        if "tips" in names:
            count = int(re.match(r"\d+", call.inputs["num_tips"]).group())
            return {"tips": [f"Tip {i}: reread the question." for i in range(count + 2)]}
        question = call.inputs["question"].split("\n\nRespond with")[0]  # the last field carries the adapter's tail
        with self.lock:
            attempt = self.attempts[question]
            self.attempts[question] += 1
        gold = self.gold.get(question, "2")
        return {"reasoning": "compute", "answer": gold if attempt % 2 == 0 else "-1"}


@pytest.fixture
def split():
    budget = compare.Budget(train_n=3, val_n=2, test_n=2, group_size=2, epochs=1, simba_bsize=2)
    return compare.wordproblems_split(budget, seed=0), budget


@pytest.fixture
def lm(split):
    data, _ = split
    script = WordProblemScript()
    script.gold = {e.question: e.answer for e in data.train + data.val + data.test}
    lm = scripted_lm(script)
    with dspy.context(lm=lm):
        yield lm


def test_split_is_disjoint_and_sized(split):
    data, budget = split
    questions = [e.question for e in data.train + data.val + data.test]
    assert (len(data.train), len(data.val), len(data.test)) == (3, 2, 2)
    assert len(set(questions)) == len(questions)


def test_gsm8k_split_reads_a_local_jsonl_into_the_shared_program_inputs(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"question": f"Q{i}: what is {i} + 1?", "answer": f"work\n#### {i + 1}"}) + "\n"
                            for i in range(10)))
    budget = compare.Budget(train_n=2, val_n=1, test_n=3, simba_bsize=2)
    data = compare.gsm8k_split(str(path), budget, seed=1)
    assert (len(data.train), len(data.val), len(data.test)) == (2, 1, 3)
    example = data.test[0]
    assert set(example.inputs().keys()) == {"question"}
    assert example.answer == str(int(re.search(r"what is (\d+)", example.question).group(1)) + 1)
    with pytest.raises(ValueError, match="needs 60"):
        compare.gsm8k_split(str(path), compare.Budget(train_n=20, val_n=20, test_n=20), seed=1)


def test_budget_rejects_bad_sizes():
    with pytest.raises(ValueError, match="train_n"):
        compare.Budget(train_n=0, val_n=1, test_n=1)
    with pytest.raises(ValueError, match="simba_bsize"):
        compare.Budget(train_n=2, val_n=1, test_n=1, simba_bsize=3)


def test_metered_engine_counts_calls_of_copies_made_in_threads(lm):
    metered, meter = compare.metered_copy(lm, "task")
    program = dspy.Predict("question -> answer")
    copies = [metered.copy(rollout_id=i, temperature=0.7) for i in range(4)]

    def run(copy):
        with dspy.context(lm=copy):
            program(question="What is 1 + 1?")

    threads = [threading.Thread(target=run, args=(c,)) for c in copies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert meter.usage.calls == 4
    assert meter.usage.prompt_tokens > 0 and meter.usage.completion_tokens > 0
    assert len(metered.history) == 0  # what a history read on the original LM would have missed


def test_metered_copy_refuses_an_lm_without_engine_object():
    with pytest.raises(ValueError, match="engine-backed"):
        compare.metered_copy(dspy.LM("openai/gpt-4o-mini"), "task")


def test_static_prompt_grows_with_demos_and_library(lm):
    base = compare.static_prompt_chars(compare._program())
    with_demo = compare._program()
    with_demo.predict.demos = [dspy.Example(question="What is 2 + 2?", reasoning="add", answer="4")]
    assert compare.static_prompt_chars(with_demo) > base
    assert compare.static_prompt_chars(compare._program()) == base


def test_two_method_comparison_meters_roles_and_matches_the_optimizer_own_accounting(split, lm):
    data, budget = split
    seen = []
    results = compare.run_comparison(data, lm, budget, ["none", "tfgrpo"], progress=False,
                                     on_result=lambda r: seen.append([m.method for m in r]))
    assert [r.method for r in results] == ["none", "tfgrpo"]
    assert seen == [["none"], ["none", "tfgrpo"]]
    none, tfgrpo = results
    assert none.runs[0].usage["task"] == Usage() and none.runs[0].usage["reflection"] == Usage()
    assert none.runs[0].usage["evaluation"].calls == len(data.test)
    run = tfgrpo.runs[0]
    assert run.error is None
    # 3 questions x group of 2, every group mixed: 6 summaries, 3 extractions, 1 update.
    assert run.usage["task"].calls == 6 and run.usage["reflection"].calls == 10
    assert run.usage["task"] == Usage.from_dict(run.details["self_reported_policy_usage"])
    assert run.usage["reflection"] == Usage.from_dict(run.details["self_reported_reflection_usage"])
    assert run.details["library_size"] >= 1
    assert run.added_prompt_tokens > 0 and none.runs[0].added_prompt_tokens == 0
    # The script answers the first attempt at each test question correctly, the second wrongly.
    assert none.score == 1.0 and tfgrpo.score is not None


def test_a_failing_method_is_reported_not_raised(split, lm, monkeypatch):
    data, budget = split

    def broken(ctx):
        raise RuntimeError("optimizer exploded")

    monkeypatch.setitem(compare.COMPILERS, "gepa", broken)
    results = compare.run_comparison(data, lm, budget, ["gepa", "none"], progress=False)
    failed = results[0].to_dict()
    assert failed["status"] == "failed" and "optimizer exploded" in failed["error"]
    assert failed["score_mean_at_k"] is None
    assert results[1].to_dict()["status"] == "ok"


def test_ablation_wiring(split, lm):
    data, budget = split
    ctx = compare.MethodContext(data, compare.Roles.of(lm), budget, seed=3)
    group1 = compare.tfgrpo_optimizer(ctx, group_size=1, informative_only=False)
    no_gt = compare.tfgrpo_optimizer(ctx, metric=None, ground_truth=False)
    assert (group1.group_size, group1.informative_only, group1.seed) == (1, False, 3)
    assert (no_gt.ground_truth, no_gt.metric, no_gt.group_size) == (False, None, budget.group_size)
    assert group1.reflection_lm is ctx.roles.reflection

    ctx.learned_library_size = 3
    compiled = compare.compile_direct_tips(ctx)
    assert compiled.details["library_size"] == 3  # the script offers 5 tips; the learned library's count is kept
    assert BLOCK_START in compiled.program.predict.signature.instructions
    assert ctx.roles.meters["reflection"].usage.calls == 1 and ctx.roles.meters["task"].usage.calls == 0


def test_direct_tips_runs_after_tfgrpo_and_copies_its_library_size(split, lm):
    data, budget = split
    results = compare.run_comparison(data, lm, budget, ["direct_tips", "tfgrpo"], progress=False)
    assert [r.method for r in results] == ["tfgrpo", "direct_tips"]
    assert results[1].kind == "ablation"
    assert results[1].runs[0].details["budget"]["tips_requested"] == results[0].runs[0].details["library_size"]


def _result(method, score, kind="method", error=None, tokens=100):
    usage = {"task": Usage(calls=2, prompt_tokens=tokens, completion_tokens=10), "reflection": Usage(),
             "evaluation": Usage(calls=1, prompt_tokens=50, completion_tokens=5)}
    return compare.MethodResult(method, kind, (compare.SeedRun(
        seed=0, score=score, pass_at_k=score, score_stderr=0.1, compile_seconds=1.0, eval_seconds=2.0, usage=usage,
        engine_failures=0, added_prompt_tokens=12, eval_prompt_tokens_per_call=50.0, program_errors=0,
        error=error),))


def test_table_json_and_plot_writers(tmp_path):
    results = [_result("none", 0.5), _result("group1", 0.75, kind="ablation"),
               _result("gepa", None, error="compile: ImportError: no | gepa")]
    table = compare.markdown_table(results, k=1)
    rows = table.splitlines()
    assert len(rows) == 2 + 3
    assert rows[2].startswith("| none | 0.500 |") and "| 2 / 110 |" in rows[2]
    assert rows[3].startswith("| group1 (ablation) | 0.750 |")
    assert "FAILED: compile: ImportError: no / gepa |" in rows[4]  # a pipe in an error cannot break the table

    split = compare.Split("wordproblems", [], [], [], "generated")
    report = compare.build_report(preset="smoke", budget=compare.PRESETS["smoke"], lm_name="scripted",
                                  command="python benchmarks/compare.py --preset smoke", code="abc123+dirty",
                                  started="now",
                                  wall_seconds=3.0, load_average=(1.0, 2.0), splits={"wordproblems": split},
                                  per_task={"wordproblems": results})
    paths = compare.write_outputs(report, {"wordproblems": results}, 1, tmp_path, "compare_test")
    data = json.loads(paths[0].read_text())
    assert data["command"] == "python benchmarks/compare.py --preset smoke" and data["code"] == "abc123+dirty"
    assert "(code at `abc123+dirty`)" in paths[1].read_text()
    assert compare._git_revision().split("+")[0] == subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCHMARKS, capture_output=True, text=True).stdout.strip()
    rows = data["tasks"]["wordproblems"]["results"]
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]
    assert rows[0]["usage_per_seed"]["task"]["total_tokens"] == 110
    assert "| none | 0.500 |" in paths[1].read_text()
    assert paths[2].read_bytes().startswith(b"\x89PNG")
    paths[2].unlink()
    assert compare.main(["--replot", str(paths[0])]) == 0  # redrawn from the saved JSON alone
    assert paths[2].read_bytes().startswith(b"\x89PNG")
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_seed_spread_and_mean_usage():
    first, second = _result("tfgrpo", 0.5, tokens=100), _result("tfgrpo", 1.0, tokens=300)
    result = compare.MethodResult("tfgrpo", "method", first.runs + second.runs)
    assert result.score == 0.75
    assert result.score_seed_std == pytest.approx(0.35355, abs=1e-4)
    assert result.role_usage("task").prompt_tokens == 200


def test_systems_critical_path_and_thread_bound_ideal():
    steps = [systems.StepPhases(rollouts=8, summaries=8, extractions=2, updates=1),
             systems.StepPhases(rollouts=8, summaries=0, extractions=0, updates=0)]
    assert systems.ideal_seconds(steps, 0.5, None) == pytest.approx(0.5 * (4 + 1))
    assert systems.ideal_seconds(steps, 0.5, 4) == pytest.approx(0.5 * (2 + 2 + 1 + 1 + 2))


def test_systems_fake_engine_run_accounts_for_every_call():
    run = systems.measure_parallel(4, latency=0.001, train_n=3, group_size=2, epochs=1, batch_size=None)
    # 6 rollouts, every group mixed: 6 summaries, 3 extractions, 1 update.
    assert run.calls_by_kind == {"policy": 6, "summary": 6, "extract": 3, "update": 1}
    assert run.rollouts == 6 and run.steps == 1
    assert run.critical_path_seconds == pytest.approx(0.004)
    assert run.thread_bound_ideal_seconds == pytest.approx(0.001 * (2 + 2 + 1 + 1))
    assert run.wall_seconds >= run.thread_bound_ideal_seconds
