"""Offline tests of the benchmark harnesses (benchmarks/compare.py and the studies beside it) with scripted engines."""

import importlib.util
import json
import re
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import dspy
import provenance
import pytest
from comparison import cli, evaluate, metering, methods, outputs, presets, records
from comparison import data as splits
from comparison import markdown as md
from comparison import run as running
from comparison import store as run_store
from comparison import summary as paired
from scripted import Call, default_reflection, scripted_lm, ticket_router

from tfgrpo_dspy.inference.injection import BLOCK_START, ExperiencePredict
from tfgrpo_dspy.usage import Usage

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


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
    budget = presets.Budget(train_n=3, selection_n=2, test_n=2, group_size=2, epochs=1, simba_bsize=2)
    return splits.wordproblems_split(budget, seed=0), budget


@pytest.fixture
def lm(split):
    data, _ = split
    script = WordProblemScript()
    script.gold = {e.question: e.answer for e in data.train + data.selection + data.test}
    lm = scripted_lm(script)
    with dspy.context(lm=lm):
        yield lm


def test_split_is_disjoint_and_sized(split):
    data, budget = split
    questions = [e.question for e in data.train + data.selection + data.test]
    assert (len(data.train), len(data.selection), len(data.test)) == (3, 2, 2)
    assert len(set(questions)) == len(questions)


def test_gsm8k_split_reads_a_local_jsonl_into_the_shared_program_inputs(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"question": f"Q{i}: what is {i} + 1?", "answer": f"work\n#### {i + 1}"}) + "\n"
                            for i in range(10)))
    budget = presets.Budget(train_n=2, selection_n=1, test_n=3, simba_bsize=2)
    data = splits.gsm8k_split(str(path), budget, seed=1)
    assert (len(data.train), len(data.selection), len(data.test)) == (2, 1, 3)
    example = data.test[0]
    assert set(example.inputs().keys()) == {"question"}
    assert example.answer == str(int(re.search(r"what is (\d+)", example.question).group(1)) + 1)
    assert example.solution == "work"  # the worked solution is a label, never an input
    with pytest.raises(ValueError, match="60 are needed"):
        splits.gsm8k_split(str(path), presets.Budget(train_n=20, selection_n=20, test_n=20), seed=1)


def test_budget_rejects_bad_sizes():
    with pytest.raises(ValueError, match="train_n"):
        presets.Budget(train_n=0, selection_n=1, test_n=1)
    with pytest.raises(ValueError, match="simba_bsize"):
        presets.Budget(train_n=2, selection_n=1, test_n=1, simba_bsize=3)


def test_metered_engine_counts_calls_of_copies_made_in_threads(lm):
    metered, meter = metering.metered_copy(lm, "task")
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
        metering.metered_copy(dspy.LM("openai/gpt-4o-mini"), "task")


def test_static_prompt_grows_with_demos_and_library(lm):
    base = evaluate.static_prompt_chars(splits.make_program())
    with_demo = splits.make_program()
    with_demo.predict.demos = [dspy.Example(question="What is 2 + 2?", reasoning="add", answer="4")]
    assert evaluate.static_prompt_chars(with_demo) > base
    assert evaluate.static_prompt_chars(splits.make_program()) == base


def test_two_method_comparison_meters_roles_and_matches_the_optimizer_own_accounting(split, lm):
    data, budget = split
    seen = []
    results = running.run_comparison(data, lm, budget, ["none", "tfgrpo_paper", "tfgrpo"], progress=False,
                                     on_result=lambda r: seen.append([m.method for m in r]))
    assert [r.method for r in results] == ["none", "tfgrpo_paper", "tfgrpo"]
    assert seen == [["none"], ["none", "tfgrpo_paper"], ["none", "tfgrpo_paper", "tfgrpo"]]
    none, paper, gated = results
    assert none.runs[0].usage["task"] == Usage() and none.runs[0].usage["reflection"] == Usage()
    assert none.runs[0].usage["evaluation"].calls == len(data.test)
    run = paper.runs[0]
    assert run.error is None
    # 3 questions x group of 2, every group mixed: 6 summaries, 3 extractions, 1 update; no selection set.
    assert run.usage["task"].calls == 6 and run.usage["reflection"].calls == 10
    reported = run.details.tfgrpo.self_reported_usage
    assert run.usage["task"] == reported["policy"]
    assert run.usage["reflection"] == reported["reflection"]
    assert reported["selection"] == Usage() and run.details.tfgrpo.selection_size == 0
    assert len(run.details.library) >= 1
    assert run.added_prompt_tokens > 0 and none.runs[0].added_prompt_tokens == 0
    # The gated run (the defaults) also re-runs training examples to verify lessons and scores libraries on the 2
    # selection rows, both with the task model. The script's greedy answers ignore lessons, so none is verified
    # and only the starting library is scored.
    gated_run = gated.runs[0]
    reported = gated_run.details.tfgrpo.self_reported_usage
    assert gated_run.details.tfgrpo.selection_size == len(data.selection) and gated_run.details.tfgrpo.candidates
    assert reported["selection"].calls >= len(data.selection) and reported["verification"].calls >= len(data.train)
    assert gated_run.usage["task"] == reported["policy"] + reported["verification"] + reported["selection"]
    assert gated_run.usage["reflection"] == reported["reflection"]
    # The script answers the first attempt at each test question correctly, the second wrongly.
    assert none.score == 1.0 and paper.score is not None
    assert len(none.runs[0].per_problem) == len(data.test)


def test_a_failing_method_is_reported_not_raised(split, lm, monkeypatch):
    data, budget = split

    def broken(ctx):
        raise RuntimeError("optimizer exploded")

    monkeypatch.setitem(methods.COMPILERS, "gepa", broken)
    results = running.run_comparison(data, lm, budget, ["gepa", "none"], progress=False)
    failed = results[0].to_dict()
    assert failed["status"] == "failed" and "optimizer exploded" in failed["error"]
    assert failed["score_mean_at_k"] is None
    assert results[1].to_dict()["status"] == "ok"


def test_ablation_wiring(split, lm):
    data, budget = split
    ctx = methods.MethodContext(data, metering.Roles.of(lm), budget, seed=3)
    group1 = methods.tfgrpo_optimizer(ctx, group_size=1, informative_only=False)
    no_gt = methods.tfgrpo_optimizer(ctx, metric=None, ground_truth=False)
    assert (group1.group_size, group1.informative_only, group1.seed) == (1, False, 3)
    assert (no_gt.ground_truth, no_gt.metric, no_gt.group_size) == (False, None, budget.group_size)
    assert group1.reflection_lm is ctx.roles.reflection
    paper = methods.tfgrpo_optimizer(ctx, **presets.PAPER_RECIPE)
    assert (paper.gate, paper.val_fraction, paper.batch_size, paper.top_k) == (False, 0, None, None)

    ctx = replace(ctx, learned_library_size=3)
    compiled = methods.compile_direct_tips(ctx)
    assert len(compiled.details.library) == 3  # the script offers 5 tips; the learned library's count is kept
    assert BLOCK_START in compiled.program.predict.signature.instructions
    assert ctx.roles.meters["reflection"].usage.calls == 1 and ctx.roles.meters["task"].usage.calls == 0


def test_direct_tips_runs_after_tfgrpo_paper_and_copies_its_library_size(split, lm):
    data, budget = split
    results = running.run_comparison(data, lm, budget, ["direct_tips", "tfgrpo_paper"], progress=False)
    assert [r.method for r in results] == ["tfgrpo_paper", "direct_tips"]
    assert results[1].kind == "ablation"
    assert results[1].runs[0].details.settings["tips_requested"] == len(results[0].runs[0].details.library)


def test_methods_run_after_what_they_read_from():
    assert methods.ordered_methods(["tfgrpo_on_bootstrap", "none"]) == ["bootstrap", "tfgrpo_on_bootstrap", "none"]
    assert methods.ordered_methods(["direct_tips", "none", "tfgrpo_paper", "none"]) == [
        "none", "tfgrpo_paper", "direct_tips"]
    with pytest.raises(ValueError, match="unknown method"):
        methods.ordered_methods(["none", "magic"])


def _result(method, score, kind="method", error=None, tokens=100, problems=()):
    usage = {"task": Usage(calls=2, prompt_tokens=tokens, completion_tokens=10), "reflection": Usage(),
             "evaluation": Usage(calls=1, prompt_tokens=50, completion_tokens=5)}
    per_problem = tuple(records.ProblemResult(i, float(s), (str(s),)) for i, s in enumerate(problems))
    return records.MethodResult(method, kind, (records.SeedRun(
        seed=0, score=score, pass_at_k=score, score_stderr=0.1, compile_seconds=1.0, eval_seconds=2.0, usage=usage,
        engine_failures=0, added_prompt_tokens=12, eval_prompt_tokens_per_call=50.0, program_errors=0,
        error=error, per_problem=per_problem),))


def test_table_json_and_plot_writers(tmp_path):
    results = [_result("none", 0.5), _result("group1", 0.75, kind="ablation"),
               _result("gepa", None, error="compile: ImportError: no | gepa")]
    table = md.markdown_table(results, k=1)
    rows = table.splitlines()
    assert len(rows) == 2 + 3
    assert rows[0].startswith("| method | held-out accuracy | Δ vs none, points [95% CI] | won/lost | p |")
    assert rows[2].startswith("| none | 0.500 | - |") and "| task 110 / reflection 0 |" in rows[2]
    assert rows[3].startswith("| group1 (ablation) | 0.750 |")
    assert rows[2].endswith("| +12 | 50 |")  # rendered prompt added, and prompt tokens each call really sent
    assert "| FAILED: compile: ImportError: no / gepa |" in rows[4]  # a pipe in an error cannot break the table

    split = splits.Split("wordproblems", [], [], [], "generated")
    facts = outputs.RunFacts(preset="smoke", budget=presets.PRESETS["smoke"], lm_name="scripted",
                             command="python benchmarks/compare.py --preset smoke", code="abc123+dirty",
                             started="now", load_at_start=1.0, throughput_at_start={"skipped": "scripted LM"})
    report = outputs.build_report(facts, wall_seconds=3.0, load_at_end=2.0, splits={"wordproblems": split},
                                  per_task={"wordproblems": results})
    paths = outputs.write_outputs(report, tmp_path, "compare_test")
    data = json.loads(paths[0].read_text())
    assert data["command"] == "python benchmarks/compare.py --preset smoke" and data["code"] == "abc123+dirty"
    assert data["load_average"] == [1.0, 2.0] and data["budget"]["train_n"] == 3
    assert "(code at `abc123+dirty`)" in paths[1].read_text()
    # A resumed run's own seconds are not the table's cost: the records' compile and evaluation time is said too.
    assert ("wall time of this run 3 s; compile plus evaluation time of every record in the tables, from this run "
            "and the earlier ones it resumed, 9 s") in paths[1].read_text()
    assert provenance.git_revision().split("+")[0] == subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCHMARKS, capture_output=True, text=True).stdout.strip()
    rows = data["tasks"]["wordproblems"]["results"]
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]
    assert rows[0]["usage_per_seed"]["task"]["total_tokens"] == 110
    assert "| none | 0.500 |" in paths[1].read_text()
    assert paths[2].read_bytes().startswith(b"\x89PNG")
    paths[2].unlink()
    assert cli.main(["--replot", str(paths[0])]) == 0  # redrawn from the saved JSON alone
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_recorded_commit_is_dirty_for_changed_code_not_for_changed_results(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "compare.py").write_text("code\n")
    (tmp_path / "benchmarks" / "results" / "compare_x.md").write_text("table\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert provenance.git_revision(tmp_path) == head
    (tmp_path / "benchmarks" / "results" / "compare_x.md").write_text("a newer table\n")
    assert provenance.git_revision(tmp_path) == head  # a run rewriting its own records is not modified code
    (tmp_path / "benchmarks" / "compare.py").write_text("changed code\n")
    assert provenance.git_revision(tmp_path) == head + "+dirty"


def test_every_benchmark_records_its_commit_through_the_one_helper_that_marks_changed_code():
    # A script with its own `git rev-parse` recorded a modified tree as the clean commit.
    own_helpers = [path.name for path in BENCHMARKS.rglob("*.py")
                   if path.name != "provenance.py" and "rev-parse" in path.read_text()]
    assert own_helpers == []


def test_paired_gain_over_none_with_interval_sign_test_and_no_measurable_change():
    base = [0] * 10 + [1] * 10
    results = [_result("none", 0.5, problems=base),
               _result("better", 1.0, problems=[1] * 20),
               _result("same", 0.5, problems=[1] + [0] * 9 + [0] + [1] * 9)]  # one won, one lost
    rows = paired.result_rows(results)
    assert rows[0]["vs_none"] is None and rows[0]["problem_scores"] == base
    better, same = rows[1]["vs_none"], rows[2]["vs_none"]
    assert (better["wins"], better["losses"], better["delta"]) == (10, 0, 0.5)
    assert 0 < better["ci_low"] < 0.5 < better["ci_high"] <= 1 and better["significant"]
    assert better["p_value"] == pytest.approx(2 * 0.5**10)  # exact two-sided sign test (exact McNemar)
    assert (same["wins"], same["losses"], same["delta"], same["p_value"]) == (1, 1, 0.0, 1.0)
    assert not same["significant"] and same["verdict"].startswith("no measurable change")
    table = md.render_table(rows, k=1).splitlines()
    assert "| better: +50.0 [" in table[3] and "no measurable change" not in table[3]
    assert "| 10 / 0 | 0.002 |" in table[3]
    rows[1]["vs_none"] = {**better, "delta": -0.5, "ci_low": -1.0, "ci_high": -0.2, "p_value": 0.0004}
    worse = md.render_table(rows, k=1).splitlines()[3]
    assert "| worse: -50.0 [" in worse and "| < 0.001 |" in worse
    assert "| +0.0 [" in table[4] and "no measurable change |" in table[4] and "| 1 / 1 | 1.000 |" in table[4]


def test_seed_spread_and_mean_usage():
    first, second = _result("tfgrpo", 0.5, tokens=100), _result("tfgrpo", 1.0, tokens=300)
    result = records.MethodResult("tfgrpo", "method", first.runs + second.runs)
    assert result.score == 0.75
    assert result.score_seed_std == pytest.approx(0.35355, abs=1e-4)
    assert result.role_usage("task").prompt_tokens == 200


# -- the gsm8k preset --------------------------------------------------------------------------------------------
class GsmScript:
    """Reflection from the script. The policy adds one, right every time, except on the "flaky" questions
    (even numbers), where it is wrong on every other attempt: their groups are mixed, and a second
    evaluation pass flips them."""

    def __init__(self):
        self.attempts = Counter()
        self.lock = threading.Lock()

    @staticmethod
    def flaky(number):
        return number % 2 == 0

    def __call__(self, call: Call):
        reply = default_reflection(call)
        if reply is not None:
            return reply
        question = call.inputs["question"].split("\n\nRespond with")[0]
        number = int(re.search(r"what is (\d+) plus 1", question).group(1))
        with self.lock:
            attempt = self.attempts[question]
            self.attempts[question] += 1
        wrong = self.flaky(number) and attempt % 2 == 1
        return {"reasoning": "add one", "answer": "-1" if wrong else str(number + 1)}


def _number(example):
    return int(re.search(r"what is (\d+) plus 1", example.question).group(1))


@pytest.fixture
def gsm_budget():
    """The gsm8k preset on the fixture's 40 rows, with the methods its first run had (the rest have tests of their
    own); 5 rows passed over before the held-out ones, as the preset passes over rows held out before."""
    return replace(presets.PRESETS["gsm8k"], train_n=4, selection_n=3, test_n=6, held_out_skip=5, group_size=2,
                   simba_bsize=2, methods=("none", "bootstrap", "tfgrpo_paper", "tfgrpo", "tfgrpo_on_bootstrap"))


@pytest.fixture
def gsm_lm():
    return scripted_lm(GsmScript())


def test_gsm8k_preset_is_greedy_paired_and_sized_as_the_issue_asks():
    preset = presets.PRESETS["gsm8k"]
    assert preset.train_n <= 32 and preset.selection_n >= 20 and preset.test_n >= 100
    assert (preset.train_n, preset.selection_n, preset.test_n, preset.held_out_skip) == (16, 20, 100, 120)
    assert (preset.k, preset.eval_temperature, preset.repeat_none, preset.task) == (1, 0.0, True, "gsm8k")
    assert preset.methods == presets.HEAD_TO_HEAD
    assert (preset.max_bootstrapped_demos, preset.max_labeled_demos, preset.group_size, preset.epochs) == (4, 4, 4, 1)
    assert preset.batch_size is None and preset.lm_options == {}  # the repeatable greedy path


def test_gsm8k_preset_split_is_disjoint_seeded_and_keeps_the_worked_solution(gsm_source, gsm_budget):
    data = splits.gsm8k_split(gsm_source, gsm_budget, seed=3)
    parts = [data.train, data.selection, data.test]
    assert [len(p) for p in parts] == [4, 3, 6]
    questions = [e.question for p in parts for e in p]
    assert len(set(questions)) == len(questions)  # disjoint
    again = splits.gsm8k_split(gsm_source, gsm_budget, seed=3)
    assert [e.question for p in (again.train, again.selection, again.test) for e in p] == questions  # seeded
    other = splits.gsm8k_split(gsm_source, gsm_budget, seed=4)
    assert [e.question for e in other.test] != [e.question for e in data.test]
    example = data.test[0]
    assert set(example.inputs().keys()) == {"question"}
    assert example.answer == str(_number(example) + 1)
    assert example.solution == f"Add one: {_number(example)}+1 = {_number(example) + 1}."  # no <<...>>, no ####
    assert data.reference_fields == ("answer", "solution")
    program = data.make_program()
    assert isinstance(program, dspy.ChainOfThought) and list(program.predict.signature.input_fields) == ["question"]


def test_the_repeated_none_pass_really_requeries_and_reports_the_flip_rate(gsm_source, gsm_budget):
    lm = scripted_lm(GsmScript(), cache=True)  # a cached LM: a second pass would be served from the cache
    data = splits.gsm8k_split(gsm_source, gsm_budget, seed=0)
    engine = lm.engine
    cache = dspy.cache
    run, program = running.run_method(running.MethodRun("none", data, lm, gsm_budget, 0, progress=False))
    assert len(engine.calls) == 2 * len(data.test)  # the first pass and the repeat both reached the model
    assert dspy.cache is not cache and dspy.cache.enable_memory_cache  # the method's cache is back after
    flaky = sum(GsmScript.flaky(_number(e)) for e in data.test)
    assert flaky and run.repeat.flips == flaky and run.repeat.flip_rate == pytest.approx(flaky / len(data.test))
    assert run.score == 1.0 and run.repeat.score == pytest.approx(1 - flaky / len(data.test))
    # The control: the same evaluation with the cache on never reaches the model.
    metered, _ = metering.metered_copy(lm, "evaluation")
    evaluate.evaluate_held_out(program, data, gsm_budget, metered, 0, progress=False)
    assert len(engine.calls) == 2 * len(data.test)
    summary = paired.repeatability([records.MethodResult("none", "method", (run,))])
    assert summary["flips"] == flaky and summary["second_vs_first"]["losses"] == flaky
    assert f"({flaky} of {len(data.test)} answers changed)" in paired.flip_line(summary)


def test_tfgrpo_on_bootstrap_keeps_the_bootstrap_demos_and_adds_lessons(gsm_source, gsm_budget, gsm_lm):
    data = splits.gsm8k_split(gsm_source, gsm_budget, seed=0)
    bootstrap = data.make_program()
    bootstrap.predict.demos = [dspy.Example(question=e.question, reasoning="add one", answer=e.answer)
                               for e in data.train[:2]]
    ctx = methods.MethodContext(data, metering.Roles.of(gsm_lm), gsm_budget, seed=0,
                                programs={"bootstrap": bootstrap})
    with dspy.context(lm=ctx.roles.task):
        compiled = methods.compile_tfgrpo_on_bootstrap(ctx)
    predictor = compiled.program.predict
    assert isinstance(predictor, ExperiencePredict)
    assert [d.question for d in predictor.demos] == [e.question for e in data.train[:2]]
    assert compiled.details.demos == 2 and compiled.details.tfgrpo.selection_size == len(data.selection)
    assert compiled.details.settings["gate"] and compiled.details.settings["reference_fields"] == [
        "answer", "solution"]
    with pytest.raises(RuntimeError, match="bootstrap"):
        methods.compile_tfgrpo_on_bootstrap(replace(ctx, programs={}))


def test_an_interrupted_evaluation_resumes_from_the_saved_compile(gsm_source, gsm_budget, gsm_lm, tmp_path,
                                                                  monkeypatch):
    budget = replace(gsm_budget, repeat_none=False)
    data = splits.gsm8k_split(gsm_source, budget, seed=0)
    store = run_store.RunStore(tmp_path / "runs")
    held_out = evaluate.evaluate_held_out

    def interrupted(program, *args, **kwargs):
        if isinstance(program.predict, ExperiencePredict):  # tfgrpo_paper's program: its compile is saved
            raise KeyboardInterrupt
        return held_out(program, *args, **kwargs)

    monkeypatch.setattr(evaluate, "evaluate_held_out", interrupted)
    with pytest.raises(KeyboardInterrupt):
        running.run_comparison(data, gsm_lm, budget, ["none", "tfgrpo_paper"], store=store, progress=False)
    assert store.load_run("gsm8k", "tfgrpo_paper", 0) is not None
    assert not store.load_run("gsm8k", "tfgrpo_paper", 0).evaluated
    assert (tmp_path / "runs" / "gsm8k" / "tfgrpo_paper-seed0.log").is_dir()  # TF-GRPO's own resumable log
    monkeypatch.setattr(evaluate, "evaluate_held_out", held_out)

    before = len(gsm_lm.engine.calls)
    results = running.run_comparison(data, gsm_lm, budget, ["none", "tfgrpo_paper"], store=store, progress=False)
    new_calls = gsm_lm.engine.calls[before:]
    assert len(new_calls) == len(data.test) and {c.kind for c in new_calls} == {"policy"}  # the evaluation only
    paper = results[1].runs[0]
    assert paper.evaluated and paper.details.library and paper.usage["reflection"].calls > 0
    assert BLOCK_START in new_calls[0].system  # the reloaded program shows the learned lessons
    before = len(gsm_lm.engine.calls)
    again = running.run_comparison(data, gsm_lm, budget, ["none", "tfgrpo_paper"], store=store, progress=False)
    assert len(gsm_lm.engine.calls) == before  # everything finished: nothing reaches the model
    assert [r.runs[0].per_problem for r in again] == [r.runs[0].per_problem for r in results]

    # Killed in the middle of the held-out evaluation: the problems it finished are saved one by one.
    checkpoint = store.eval_dir("gsm8k", "tfgrpo_paper", 0, "held_out")
    assert len(list(checkpoint.glob("ex*.json"))) == len(data.test)
    for path in sorted(checkpoint.glob("ex*.json"))[-2:]:
        path.unlink()
    store.save_run("gsm8k", "tfgrpo_paper", 0, replace(paper, score=None, per_problem=()))
    before = len(gsm_lm.engine.calls)
    resumed = running.run_comparison(data, gsm_lm, budget, ["none", "tfgrpo_paper"], store=store, progress=False)
    assert len(gsm_lm.engine.calls) - before == 2  # only the two unfinished problems run again
    # The script answers some problems differently when asked again: compare the reused ones.
    assert resumed[1].runs[0].per_problem[:-2] == paper.per_problem[:-2]
    assert len(resumed[1].runs[0].per_problem) == len(data.test)
    # A new compile is another program: its evaluation starts afresh instead of reusing the old answers.
    (tmp_path / "runs" / "gsm8k" / "tfgrpo_paper-seed0.json").unlink()
    running.run_method(running.MethodRun("tfgrpo_paper", data, gsm_lm, budget, 0, store, progress=False))
    assert len(list(checkpoint.glob("ex*.json"))) == len(data.test)


def test_a_run_directory_refuses_another_comparison(tmp_path, gsm_source, gsm_budget):
    store = run_store.RunStore(tmp_path / "runs")
    split = splits.gsm8k_split(gsm_source, gsm_budget, seed=0)
    assert store.open(run_store.runs_manifest("gsm8k", gsm_budget, "local", {"gsm8k": split})) == 0
    assert store.open(run_store.runs_manifest("gsm8k", replace(gsm_budget, seeds=3), "local", {"gsm8k": split})) == 0
    with pytest.raises(ValueError, match="budget differ"):
        store.open(run_store.runs_manifest("gsm8k", replace(gsm_budget, lm_options={"n_parallel": 1}), "local",
                                         {"gsm8k": split}))


def test_a_run_directory_refuses_runs_of_an_engine_that_answers_differently(tmp_path, gsm_source, gsm_budget):
    """Records made before the engine prefilled the answer's header must not be paired with records made after."""
    from tfgrpo_dspy.lm import local_lm

    split = splits.gsm8k_split(gsm_source, gsm_budget, seed=0)
    store = run_store.RunStore(tmp_path / "runs")
    with_prefill = run_store.engine_state(local_lm())
    assert with_prefill["prefill_output_header"] is True
    assert store.open(run_store.runs_manifest("gsm8k", gsm_budget, "local", {"gsm8k": split}, with_prefill)) == 0
    without = run_store.engine_state(local_lm(prefill_output_header=False))
    with pytest.raises(ValueError, match="engine differ"):
        store.open(run_store.runs_manifest("gsm8k", gsm_budget, "local", {"gsm8k": split}, without))
    assert run_store.engine_state(dspy.LM("openai/gpt-4o-mini")) is None


def test_lm_options_parse_from_the_command_line():
    assert cli.parse_lm_option("n_parallel=2") == ("n_parallel", 2)
    assert cli.parse_lm_option("temperature=0.5") == ("temperature", 0.5)
    assert cli.parse_lm_option("model=qwen") == ("model", "qwen")
    assert cli.parse_lm_option("repeatable_greedy=False") == ("repeatable_greedy", False)
    with pytest.raises(Exception, match="KEY=VALUE"):
        cli.parse_lm_option("n_parallel")


def _calls_of(record):
    checks = (record["run"]["details"].get("held_out_candidates") or {}).values()
    return sum(record["run"]["usage"][role]["calls"] for role in ("task", "reflection", "evaluation")) + (
        record["run"]["repeat"]["usage"]["calls"] if record["run"]["repeat"] else 0) + sum(
        check["usage"]["calls"] for check in checks if "usage" in check)


def test_gsm8k_preset_end_to_end_resumes_after_an_interruption(gsm_source, gsm_budget, gsm_lm, tmp_path,
                                                               monkeypatch, capsys):
    monkeypatch.setitem(presets.PRESETS, "gsm8k", gsm_budget)
    options = []
    monkeypatch.setattr(cli, "build_lm", lambda spec, opts: options.append(opts) or gsm_lm)
    runs = tmp_path / "runs"
    argv = ["--preset", "gsm8k", "--source", gsm_source, "--out-dir", str(tmp_path), "--runs", str(runs),
            "--lm-option", "n_ctx=8192"]

    def interrupt(ctx):
        raise KeyboardInterrupt  # Ctrl-C in the middle of the method list

    with monkeypatch.context() as patch:
        patch.setitem(methods.COMPILERS, "tfgrpo", interrupt)
        with pytest.raises(KeyboardInterrupt):
            cli.main(argv)
    # the preset's server options, then the override
    assert options == [{"n_ctx": 8192}]
    partial = json.loads((tmp_path / "compare_gsm8k.json").read_text())
    assert partial["complete"] is False
    assert [r["method"] for r in partial["tasks"]["gsm8k"]["results"]] == ["none", "bootstrap", "tfgrpo_paper"]
    finished = {m: (runs / "gsm8k" / f"{m}-seed0.json").read_text() for m in ("none", "bootstrap", "tfgrpo_paper")}

    before = len(gsm_lm.engine.calls)
    assert cli.main(argv) == 0
    # The rerun made exactly the calls of the two methods it had left, and left the finished records alone.
    records = {m: json.loads((runs / "gsm8k" / f"{m}-seed0.json").read_text())
               for m in ("tfgrpo", "tfgrpo_on_bootstrap")}
    assert len(gsm_lm.engine.calls) - before == sum(_calls_of(r) for r in records.values()) > 0
    assert all((runs / "gsm8k" / f"{m}-seed0.json").read_text() == text for m, text in finished.items())

    report = json.loads((tmp_path / "compare_gsm8k.json").read_text())
    assert report["complete"] is True
    assert report["lm_options"] == {"n_ctx": 8192}
    assert report["budget"]["test_n"] == 6 and report["runs_dir"] == str(runs)
    assert len(report["load_average"]) == 2 and report["code"]
    assert "not the embedded model" in report["throughput_at_start"]["skipped"]  # the scripted LM: no call made
    task = report["tasks"]["gsm8k"]
    assert len(task["held_out"]) == 6
    rows = {r["method"]: r for r in task["results"]}
    assert list(rows) == ["none", "bootstrap", "tfgrpo_paper", "tfgrpo", "tfgrpo_on_bootstrap"]
    for method, row in rows.items():
        assert row["status"] == "ok", row["error"]
        problems = row["runs"][0]["per_problem"]
        assert [p["index"] for p in problems] == list(range(6)) and all(len(p["answers"]) == 1 for p in problems)
        if method != "none":
            assert set(row["vs_none"]) >= {"delta", "ci_low", "ci_high", "wins", "losses", "p_value"}
    for method in ("tfgrpo", "tfgrpo_on_bootstrap"):
        details = rows[method]["runs"][0]["details"]
        candidate = details["candidates"][0]
        assert {"label", "score", "accepted", "size", "reason"} <= set(candidate)
        assert "library" in details and details["self_reported_usage"]["selection"]["calls"] > 0
    flaky = sum(GsmScript.flaky(int(re.search(r"what is (\d+)", p["question"]).group(1))) for p in task["held_out"])
    assert task["repeatability"]["flips"] == flaky and task["repeatability"]["flip_rate"] == pytest.approx(flaky / 6)

    markdown = (tmp_path / "compare_gsm8k.md").read_text()
    line = f"flip rate {100 * flaky / 6:.1f}% ({flaky} of 6 answers changed)"
    assert line in markdown and line in capsys.readouterr().out
    assert "### tfgrpo: libraries scored on the selection set (3 problems)" in markdown
    assert "### tfgrpo_on_bootstrap: libraries scored on the selection set" in markdown
    # The gated run's rejected candidate was scored on the held-out rows against the library the gate compared it
    # with, the initial one (none's scores), which got all right: the scripted lesson cannot do better, so the
    # paired test there can only confirm the rejection or find no measurable change.
    (check,) = rows["tfgrpo"]["runs"][0]["gate_check"]
    assert (check["label"], check["accepted"], check["compared_with_initial"]) == ("step 1", False, True)
    assert rows["none"]["score_mean_at_k"] == 1.0
    vs = check["vs_compared"]
    assert vs["delta"] == pytest.approx(check["held_out"] - 1.0) and check["held_out"] <= 1.0
    assert check["held"] is (True if vs["significant"] else None)
    assert "### tfgrpo: the gate's decisions checked on the held-out rows" in markdown
    confirmed = 1 if check["held"] else 0
    assert (f"Of 1 decision(s) scored on the held-out rows, {confirmed} confirmed, 0 contradicted, "
            f"{1 - confirmed} without a measurable change.") in markdown
    assert markdown.count("the gate's decisions checked") == 1  # tfgrpo_on_bootstrap's student has demos
    assert "| method | held-out accuracy | Δ vs none, points [95% CI] |" in markdown
    assert (tmp_path / "compare_gsm8k.png").read_bytes().startswith(b"\x89PNG")

    # The saved programs reload as compiled: the lessons on top of bootstrap's demos.
    store, split = run_store.RunStore(runs), splits.gsm8k_split(gsm_source, gsm_budget, 0)
    bootstrap = store.load_program(split, "bootstrap", 0)
    on_bootstrap = store.load_program(split, "tfgrpo_on_bootstrap", 0)
    assert bootstrap.predict.demos and isinstance(on_bootstrap.predict, ExperiencePredict)
    assert on_bootstrap.predict.demos == bootstrap.predict.demos
    before = len(gsm_lm.engine.calls)
    assert cli.main(argv) == 0  # a third run has nothing left to do
    assert len(gsm_lm.engine.calls) == before


def test_the_repeat_and_the_gate_checks_can_be_turned_off_without_invalidating_a_run_directory(gsm_source):
    args = cli.parse_args(["--preset", "gsm8k", "--source", gsm_source, "--no-repeat", "--gate-checks", "0"])
    budget = cli.preset_budget(args)
    assert (budget.repeat_none, budget.gate_checks) == (False, 0)
    preset = cli.preset_budget(cli.parse_args(["--preset", "gsm8k", "--source", gsm_source]))
    assert (preset.repeat_none, preset.gate_checks) == (True, 3)
    split = splits.gsm8k_split(gsm_source, replace(preset, train_n=4, selection_n=3, test_n=6, held_out_skip=5,
                                                   simba_bsize=2), seed=0)
    assert run_store.runs_manifest("gsm8k", budget, "local", {"gsm8k": split}) == run_store.runs_manifest(
        "gsm8k", preset, "local", {"gsm8k": split})
    with pytest.raises(SystemExit):
        cli.parse_args(["--preset", "gsm8k", "--source", gsm_source, "--gate-checks", "-1"])


def test_verified_lessons_scores_every_compile_seed_against_the_same_references(monkeypatch, tmp_path):
    bench = load_script("verified_lessons")
    lm = scripted_lm(ticket_router)
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "make_lm", lambda spec, **kwargs: lm)
    assert bench.main(["--tickets", "6", "--compile-seeds", "2", "--stem", "vl"]) == 0
    (task,) = json.loads((tmp_path / "vl.json").read_text())["tasks"]
    learned = ["learned (compile seed 0)", "learned (compile seed 1)"]
    assert list(task["accuracy"]) == ["none", learned[0], "control", "rules@top1", "placebo@top1", learned[1],
                                      "rules@oracle", "rules@nearest-train", "learned (compile seed 0) @nearest-train"]
    assert [c["seed"] for c in task["compiles"]] == [0, 1]
    pairs = {(c["base"], c["other"]) for c in task["comparisons"]}
    assert {("none", learned[1]), ("control", learned[1]), (learned[0], "rules@top1"), ("rules@top1", "rules@oracle"),
            ("rules@top1", "rules@nearest-train")} <= pairs
    # The oracle shows each ticket the rule that decides it: the system prompt of its call names that rule's lesson.
    from tfgrpo_dspy.kits.tickets.rules import RULES_BY_NAME

    _, _, heldout = splits.demo_tickets(6)
    oracle_calls = [c for c in lm.engine.calls if heldout[0].ticket in str(c.inputs.get("ticket", ""))
                    and RULES_BY_NAME[heldout[0].rule].lesson in c.system]
    assert oracle_calls
    assert all(len(rows) == 6 for rows in task["per_problem"].values())
    text = (tmp_path / "vl.md").read_text()
    assert "### Compile seed 1" in text and "Compile to compile: learned vs none over 2 compile seeds" in text
    # The compiles keep their own run logs: a rerun loads them and the saved answers, and calls nothing.
    calls = len(lm.engine.calls)
    assert bench.main(["--tickets", "6", "--compile-seeds", "2", "--stem", "vl"]) == 0
    assert len(lm.engine.calls) == calls
    # ... and keeps the setup of the run that made them.
    setup = json.loads((tmp_path / "vl.json").read_text())["setup"]
    assert len(setup["earlier_runs"]) == 1
    assert "Answers saved by earlier runs are reused" in (tmp_path / "vl.md").read_text()


def test_verified_lessons_compares_each_learned_library_with_the_answer_its_fixes_moved_to(monkeypatch, tmp_path):
    from tfgrpo_dspy.inference.majority import constant_scores

    bench = load_script("verified_lessons")
    trainset, _, heldout = splits.demo_tickets(12)
    fixed = [i for i, e in enumerate(trainset) if e.queue == "self-service"][:2]
    other = next(i for i, e in enumerate(trainset) if e.queue != "self-service")
    check = {"origin": "induction", "breaks": [], "reason": "r"}
    compile_ = {"seed": 0, "lessons": ["shipped", "shipped too"], "shipped": "the library after step 1",
                "step_seconds": 1, "candidates_proposed": 3, "candidates_checked": 3, "candidates_verified": 2,
                "gate": [], "checks": [
                    {**check, "text": "shipped", "kept": True, "fixes": fixed},
                    {**check, "text": "shipped too", "kept": True, "fixes": [other]},
                    {**check, "text": "dropped", "kept": False, "fixes": [other, other + 1, other + 2]}]}
    assert bench.shift_constant(compile_, trainset, "queue") == "self-service"
    nearest = bench.NearestTraining(trainset)
    assert all(nearest(e.ticket) == e.rule for e in trainset)  # a training ticket is its own nearest
    keys = bench.fixed_by(compile_, len(trainset))  # the kept, shipped lessons' fixes; the dropped one's are not
    assert [i for i, k in enumerate(keys) if k == "shipped"] == fixed and keys[other] == "shipped too"
    assert keys.count(None) == len(trainset) - len(fixed) - 1
    assert bench.shift_constant({**compile_, "lessons": []}, trainset, "queue") is None
    metric = bench.TICKETS.make_metric(None)
    assert constant_scores(heldout, metric, "queue", "self-service") == [
        1.0 if e.queue == "self-service" else 0.0 for e in heldout]
    # --reanalyze adds the constant's row and its comparisons to a saved result, from its records, with no LM.
    rows = lambda scores: [{"index": i, "score": s, "answer": "x"} for i, s in enumerate(scores)]  # noqa: E731
    records = {name: rows([0.0] * 12) for name in ("none", "control", "rules@top1", "placebo@top1")}
    records["learned (compile seed 0)"] = rows(constant_scores(heldout, metric, "queue", "self-service"))
    saved = {"setup": {"commit": "abc", "date": "d", "speed": "s", "load_average_at_start": [0]},
             "tasks": [{"task": "tickets", "train": "t", "heldout": "h", "compiles": [compile_],
                        "per_problem": records}]}
    (tmp_path / "vl.json").write_text(json.dumps(saved))
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "make_lm", lambda *a, **k: pytest.fail("--reanalyze must not start an LM"))
    assert bench.main(["--stem", "vl", "--reanalyze"]) == 0
    (task,) = json.loads((tmp_path / "vl.json").read_text())["tasks"]
    verdicts = {(c["base"], c["other"]): c for c in task["comparisons"]}
    same = verdicts[("always self-service", "learned (compile seed 0)")]
    assert (same["wins"], same["losses"], same["significant"]) == (0, 0, False)
    assert ("none", "always self-service") in verdicts and "always self-service: no model" in (
        tmp_path / "vl.md").read_text()


def test_routed_lessons_compares_both_routings_on_the_development_and_held_out_tickets(monkeypatch, tmp_path):
    bench = load_script("routed_lessons")
    lm = scripted_lm(ticket_router)
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "EARLIER", tmp_path / "no earlier run")
    monkeypatch.setattr(bench, "DEV_N", 4)
    monkeypatch.setattr(bench, "HELDOUT_N", 5)
    monkeypatch.setattr(bench, "make_lm", lambda spec, **kwargs: lm)
    assert bench.main(["--stem", "rl"]) == 0
    report = json.loads((tmp_path / "rl.json").read_text())
    assert [part["set"] for part in report["sets"]] == ["development", "held-out"]
    for part, n in zip(report["sets"], (4, 5), strict=True):
        assert {"none", bench.LESSON, bench.EXAMPLE} <= set(part["accuracy"])
        assert all(len(rows) == n for rows in part["per_problem"].values())
        assert {("none", bench.EXAMPLE), (bench.LESSON, bench.EXAMPLE)} <= {
            (c["base"], c["other"]) for c in part["comparisons"]}
        assert all(sum(counts.values()) == n for counts in part["reached"].values())
    manifest = json.loads((tmp_path / "rl.runs" / "example" / "log" / "manifest.json").read_text())
    assert manifest["settings"]["route_by"] == "example"
    assert "## held-out: 5 tickets" in (tmp_path / "rl.md").read_text()
    calls = len(lm.engine.calls)  # a rerun loads both compiles and every saved answer: no call
    assert bench.main(["--stem", "rl"]) == 0 and len(lm.engine.calls) == calls


def test_demo_recipe_compiles_every_recipe_and_judges_them_on_development_tickets_only(monkeypatch, tmp_path):
    bench = load_script("demo_recipe")
    lm = scripted_lm(ticket_router)
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "EARLIER", tmp_path / "no earlier run")
    monkeypatch.setattr(bench, "ROUTED_RUNS", tmp_path / "no earlier run")
    monkeypatch.setattr(bench, "DEV_N", 4)
    monkeypatch.setattr(bench, "HELDOUT_N", 5)
    monkeypatch.setattr(bench, "make_lm", lambda spec, **kwargs: lm)
    assert bench.main(["--stem", "dr", "--compile-seeds", "2", "--held-out"]) == 0
    report = json.loads((tmp_path / "dr.json").read_text())
    assert set(report["compiles"]) == {bench.program_name(r, s) for r in bench.RECIPES for s in (0, 1)}
    for record in report["compiles"].values():
        manifest = json.loads((tmp_path / "dr.runs" / "compiles" / record["recipe"] / f"seed{record['seed']}" / "log"
                               / "manifest.json").read_text())
        assert {k: manifest["settings"][k] for k in bench.RECIPES[record["recipe"]]} == bench.RECIPES[record["recipe"]]
        assert set(record["spending"]["calls"]) == {"rollouts", "reflection", "verification", "selection"}
    development, held_out = report["sets"]
    assert [(p["other"], p["n"]) for p in development["pooled"]] == [(r, 8) for r in bench.CHEAPER]  # 2 seeds x 4
    assert report["not_worse"] == bench.not_worse(development)
    # The held-out tickets score each recipe's first compile against no lesson, for the record only.
    assert set(held_out["accuracy"]) == {"none", *(bench.program_name(r, 0) for r in bench.RECIPES)}
    assert all(len(rows) == 5 for rows in held_out["per_problem"].values())
    routed_worse = {"pooled": [{"other": bench.ROUTED, "significant": True, "delta": -0.1},
                               {"other": bench.SMALLER, "significant": False, "delta": -0.1}]}
    assert bench.not_worse(routed_worse) == [bench.SMALLER]
    assert "Not measurably worse than the larger recipe" in (tmp_path / "dr.md").read_text()
    calls = len(lm.engine.calls)  # a rerun loads every compile and every saved answer: no call
    assert bench.main(["--stem", "dr", "--compile-seeds", "2", "--held-out"]) == 0 and len(lm.engine.calls) == calls


def test_sample_coalescing_times_both_workloads_in_both_settings(monkeypatch, tmp_path):
    bench = load_script("sample_coalescing")
    made = {}

    def fake_make_lm(spec, *, coalesce_samples, **kwargs):
        made[coalesce_samples] = scripted_lm(ticket_router)
        return made[coalesce_samples]

    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "make_lm", fake_make_lm)
    monkeypatch.setattr(bench, "machine_speed", lambda lm: None)
    assert bench.main(["--stem", "sc", "--rounds", "2"]) == 0
    report = json.loads((tmp_path / "sc.json").read_text())
    before, after = bench.SETTINGS
    assert [r["workload"] for r in report["rows"]] == ["rollouts", "induction draws"]
    assert report["rows"][0]["calls"] == 24 * bench.GROUP_SIZE
    assert report["rows"][1]["calls"] == report["induction_sets"] * bench.DRAWS
    assert all(len(r[before]) == len(r[after]) == 2 for r in report["rows"])
    # Every call reached each LM (DSPy's cache is off): the load call, then two rounds of both workloads.
    for lm in made.values():
        kinds = [c.kind for c in lm.engine.calls]
        assert kinds.count("induce") == 2 * report["rows"][1]["calls"]
        assert sum(k == "policy" for k in kinds) == 1 + 2 * report["rows"][0]["calls"]
    assert "speed-up" in (tmp_path / "sc.md").read_text()


def test_greedy_replicas_times_both_settings_and_counts_changed_answers(monkeypatch, tmp_path):
    bench = load_script("greedy_replicas")
    made, calls_on_two = {}, []

    def two_replicas_flip_once(call):  # the second replica run answers its first call differently
        calls_on_two.append(call)
        return {"queue": "billing"} if len(calls_on_two) == 1 + 3 + 1 else ticket_router(call)

    def fake_make_lm(spec, *, greedy_replicas, **kwargs):
        made[greedy_replicas] = scripted_lm(ticket_router if greedy_replicas == 1 else two_replicas_flip_once)
        return made[greedy_replicas]

    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "make_lm", fake_make_lm)
    monkeypatch.setattr(bench, "machine_speed", lambda lm: None)
    assert bench.main(["--stem", "gr", "--n", "3"]) == 0
    report = json.loads((tmp_path / "gr.json").read_text())
    assert [r["workload"] for r in report["rows"]] == ["no library", "rules @ top-1"]
    first, second = report["rows"]
    assert first["flips_between_replica_runs"] == 1 and first["differing_from_one_server"] == 0
    assert second["flips_between_replica_runs"] == 0
    assert set(first["seconds"]) == {name for name, _ in bench.RUNS}
    # Every call reached the model (DSPy's cache off): the load call, then one run (one server) or two per workload.
    assert len(made[1].engine.calls) == 1 + 2 * 3 and len(made[2].engine.calls) == 1 + 4 * 3
    assert "flips between the two replica runs" in (tmp_path / "gr.md").read_text()


def test_lesson_prefix_compares_whole_prefixes_with_bases_answer_by_answer(monkeypatch, tmp_path):
    bench = load_script("lesson_prefix")
    made, reversed_calls = [], []

    def reversed_flips_its_last_call(call):  # the reversed run's last call is the first run's first one
        reversed_calls.append(call)
        return {"queue": "billing"} if len(reversed_calls) == 2 + len(bench.HOUSE_RULES) * 2 else ticket_router(call)

    def fake_lm(bases):
        made.append(scripted_lm(reversed_flips_its_last_call if len(made) == 2 else ticket_router))
        return made[-1]

    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "lm_of_its_own", fake_lm)
    monkeypatch.setattr(bench, "machine_speed", lambda lm: None)
    assert bench.main(["--stem", "lp", "--n", "2"]) == 0
    report = json.loads((tmp_path / "lp.json").read_text())
    candidates, top_1 = report["rows"]
    assert candidates["calls"] == 2 * len(bench.HOUSE_RULES) and top_1["calls"] == 8
    assert candidates["flips_between_base_runs"] == 1 and candidates["differing_from_whole_prefix"] == 0
    assert top_1["flips_between_base_runs"] == 0
    # Every call reached the model (DSPy's cache off): the two load calls, then both workloads once.
    assert [len(lm.engine.calls) for lm in made] == [2 + candidates["calls"] + top_1["calls"]] * 3
    assert "flips between the two base runs" in (tmp_path / "lp.md").read_text()


def test_lesson_wording_states_every_house_rule_three_ways_with_its_own_condition_and_queue():
    bench = load_script("lesson_wording")
    from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES

    for rule in HOUSE_RULES:
        house, route_to, answer_with = (bench.WORDINGS[n](rule) for n in ("house", "route-to", "answer-with"))
        assert house == rule.lesson and house.startswith(bench.condition(rule))
        assert route_to == f"{bench.condition(rule)}, route it to {rule.queue}."
        assert answer_with == f"{bench.condition(rule)}, answer with queue: {rule.queue}."


def test_demo_trial_runs_the_demo_with_the_kits_settings_replaced(monkeypatch, tmp_path):
    trial = load_script("demo_trial")
    seen = {}

    def fake_run_demo(task, lm, out, *, sizes, seed):
        seen.update(task=task, out=out, sizes=sizes, seed=seed)

    monkeypatch.setattr(trial, "run_demo", fake_run_demo)
    monkeypatch.setattr(trial, "make_lm", lambda name, **kw: dspy.LM("openai/scripted"))
    monkeypatch.setattr(sys, "argv", ["demo_trial.py", "--seed", "11", "--train-n", "80", "--selection-n", "40",
                                      "--set", "num_candidates=1", "--set", "route_by=example", "--out",
                                      str(tmp_path)])
    trial.main()
    defaults = seen["task"].train_defaults
    assert defaults["num_candidates"] == 1 and defaults["route_by"] == "example"
    assert defaults["reference_action"] == "route it to {answer}"  # the kit's other defaults stay
    assert (seen["sizes"].train, seen["sizes"].selection, seen["sizes"].heldout, seen["seed"]) == (80, 40, 60, 11)
    with pytest.raises(Exception, match="name=value"):
        trial.setting("num_candidates")
