"""benchmarks/comparison: the committed results load, and the defects of issue 26 stay fixed (scripted LMs only)."""

import inspect
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import dspy
import pytest
from comparison import cli, gate_checks, metering, methods, outputs, presets, summary
from comparison import data as splits
from comparison import markdown as md
from comparison import run as running
from comparison.compile_details import CompileDetails, HeldOutCheck, TfgrpoRun
from comparison.evaluate import evaluate_stage
from comparison.prompts import held_out_prompts, prompts_fingerprint
from comparison.records import MethodResult, ProblemResult, SeedRun
from comparison.store import RunStore, runs_manifest
from scripted import default_reflection, scripted_lm, ticket_router
from test_benchmarks import GsmScript

from tfgrpo_dspy import ExperienceLibrary
from tfgrpo_dspy.inference.injection import with_experiences
from tfgrpo_dspy.run.results import Candidate
from tfgrpo_dspy.usage import Usage

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


# -- the committed results ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(RESULTS.glob("compare_*.json")), ids=lambda p: p.name)
def test_each_committed_comparison_still_replots(path, tmp_path):
    report = json.loads(path.read_text())
    assert report["format"] == "tfgrpo-compare" and report["tasks"]
    copy = tmp_path / path.name
    copy.write_text(path.read_text())
    assert cli.main(["--replot", str(copy)]) == 0
    assert copy.with_suffix(".png").read_bytes().startswith(b"\x89PNG")


def test_the_committed_run_directory_loads_into_the_typed_records_and_gives_the_committed_verdict():
    root = RESULTS / "compare_gsm8k.runs"
    store = RunStore(root)
    runs = {method: store.load_run("gsm8k", method, 0) for method in ("none", "tfgrpo")}
    assert all(isinstance(run, SeedRun) and run.evaluated for run in runs.values())
    for method, run in runs.items():  # the typed records write the same file back, key for key
        saved = json.loads((root / "gsm8k" / f"{method}-seed0.json").read_text())["run"]
        assert run.to_dict() == saved
    tfgrpo = runs["tfgrpo"].details.tfgrpo
    assert tfgrpo.candidates[0].label == "initial" and tfgrpo.self_reported_usage["selection"].calls > 0
    split = splits.Split("gsm8k", [], [], [], "committed", make_program=splits.gsm8k_program)
    program = store.load_program(split, "tfgrpo", 0)
    assert isinstance(program, dspy.ChainOfThought)
    # The statistics from the records are the committed report's.
    rows = summary.result_rows([MethodResult("none", "method", (runs["none"],)),
                                MethodResult("tfgrpo", "method", (runs["tfgrpo"],))])
    committed = {r["method"]: r for r in json.loads((RESULTS / "compare_gsm8k.json").read_text())["tasks"]["gsm8k"][
        "results"]}
    for key in ("delta", "wins", "losses", "ci_low", "ci_high", "p_value"):
        assert rows[1]["vs_none"][key] == pytest.approx(committed["tfgrpo"]["vs_none"][key])
    assert rows[0]["problem_scores"] == committed["none"]["problem_scores"]


def test_the_documented_entry_point_still_runs():
    done = subprocess.run([sys.executable, "benchmarks/compare.py", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "--preset" in done.stdout and "tickets" in done.stdout


# -- the gate's decisions on the held-out rows (issue 26, item 4) --------------------------------------------------
def _candidate(step, label, fingerprint, accepted, compared_with=None):
    return Candidate(step=step, label=label, score=0.5, accepted=accepted, size=step, tokens=0,
                     fingerprint=fingerprint, net_wins=None, reason="", compared_with=compared_with)


def _gated_run(checks, shipped=("lesson a",)):
    """Step 1 accepted library a over the initial one; step 2's candidate b and an edit tried alone, c, were
    compared with a (the current library then) and rejected; "after step N" rows are accepted by construction."""
    candidates = (_candidate(0, "initial", "i", True), _candidate(1, "step 1", "a", True, "i"),
                  _candidate(1, "after step 1", "a", True), _candidate(2, "step 2", "b", False, "a"),
                  _candidate(2, "step 2, edit 1 alone", "c", False, "a"), _candidate(2, "after step 2", "a", True))
    tfgrpo = TfgrpoRun(2, 20, candidates, 2, 4, None, {})
    details = CompileDetails({"placement": "instructions", "top_k": None}, library=shipped, tfgrpo=tfgrpo,
                             held_out_checks=checks)
    return SeedRun(seed=0, score=None, pass_at_k=None, score_stderr=None, compile_seconds=1.0, eval_seconds=1.0,
                   usage={}, engine_failures=0, added_prompt_tokens=0, eval_prompt_tokens_per_call=None,
                   program_errors=0, details=details)


def _right(*indices, n=20):
    return tuple(1.0 if i in indices else 0.0 for i in range(n))


INITIAL = _right(*range(4))  # 4 of 20 right
LIBRARY_A = _right(*range(16))  # 12 more: measurably better than the initial library
CANDIDATE_B = _right(*range(10))  # 6 fewer than a, 6 more than the initial library
EDIT_C = _right(*range(15))  # one fewer than a


def test_a_rejected_candidate_is_judged_against_the_library_the_gate_compared_it_with():
    checks = {"a": HeldOutCheck("step 1", shipped=True), "b": HeldOutCheck("step 2", scores=CANDIDATE_B),
              "c": HeldOutCheck("step 2, edit 1 alone", scores=EDIT_C)}
    run = replace(_gated_run(checks), per_problem=tuple(ProblemResult(i, s, ("x",)) for i, s in enumerate(LIBRARY_A)))
    rows = {row["label"]: row for row in gate_checks.gate_check_rows(run, list(INITIAL))}
    assert list(rows) == ["step 1", "step 2", "step 2, edit 1 alone"]  # no "after step N" row: no decision
    accepted, rejected, alone = rows["step 1"], rows["step 2"], rows["step 2, edit 1 alone"]
    assert accepted["compared_with_initial"] and accepted["vs_compared"]["delta"] == pytest.approx(0.6)
    assert accepted["held"] is True  # measurably better than the initial library: confirmed
    # Against the initial library b is 6 won / 0 lost, a gain a sign-only rule reads as a wrong rejection; the gate
    # compared it with a, and there it is 0 won / 6 lost (p = 0.031): the rejection is confirmed.
    assert rejected["compared_with"] == "a" and rejected["vs_compared"]["delta"] == pytest.approx(-0.3)
    assert (rejected["vs_compared"]["wins"], rejected["vs_compared"]["losses"]) == (0, 6) and rejected["held"] is True
    # One problem worse is below what the paired test can see: it cannot tell, whatever the sign says.
    assert alone["vs_compared"]["delta"] == pytest.approx(-0.05) and alone["held"] is None
    markdown = "\n".join(md.gate_check_sections([{"method": "tfgrpo", "runs": [{"seed": 0, "gate_check": list(
        rows.values())}]}]))
    assert "Of 3 decision(s) scored on the held-out rows, 2 confirmed, 0 contradicted, 1 without a measurable" in (
        markdown)


def test_a_decision_whose_comparison_is_not_recorded_is_not_judged_against_the_initial_library():
    run = _gated_run({"b": HeldOutCheck("step 2", scores=CANDIDATE_B)})
    old = replace(run, details=replace(run.details, tfgrpo=replace(run.details.tfgrpo, candidates=tuple(
        replace(c, compared_with=None) for c in run.details.tfgrpo.candidates))))
    rows = {row["label"]: row for row in gate_checks.gate_check_rows(old, list(INITIAL))}
    assert rows["step 2"]["vs_compared"] is None and "not recorded" in rows["step 2"]["skipped"]


def test_the_held_out_check_scores_the_compared_library_too(tmp_path):
    """gate_check_stage scores a (what b and c were compared with) and b; c is over the budget; the initial library
    (none's scores) and the shipped one (the method's own) are not scored again."""
    libraries = {"i": [], "a": ["When a sum is asked, add."], "b": ["When a sum is asked, add.", "Subtract."],
                 "c": ["When a sum is asked, add twice."], "shipped": ["lesson a"]}
    selection = tmp_path / "log" / "selection"
    selection.mkdir(parents=True)
    for fingerprint, texts in libraries.items():
        (selection / f"{fingerprint}.json").write_text(json.dumps(
            {"library_file": ExperienceLibrary.from_texts(texts).to_dict(include_audit=False)}))
    budget = presets.Budget(train_n=2, selection_n=1, test_n=3, simba_bsize=2, gate_checks=2, eval_temperature=0.0)
    split = splits.wordproblems_split(budget, seed=0)
    gold = {e.question: e.answer for e in split.test}

    def respond(call):
        return default_reflection(call) or {"reasoning": "r", "answer": gold.get(call.inputs["question"].split(
            "\n\nRespond with")[0], "0")}

    lm = scripted_lm(respond)
    saved = list(gate_checks.gate_check_stage(_gated_run({}), split, budget, lm, tmp_path / "log", progress=False))
    checks = saved[-1].details.held_out_checks
    assert list(checks) == ["a", "b", "c"] and checks["a"].label == "step 1"
    assert checks["a"].scores == (1.0, 1.0, 1.0) and checks["b"].scores is not None
    assert checks["c"].skipped == "gate_checks=2 reached" and "i" not in checks
    assert sum(1 for c in lm.engine.calls if c.kind == "policy") == 2 * len(split.test)


# -- pairing, isolation, presets, methods, conditions ----------------------------------------------------------------
def _seed_run(seed, scores, error=None):
    return SeedRun(seed=seed, score=None if error else sum(scores) / len(scores), pass_at_k=None, score_stderr=None,
                   compile_seconds=1.0, eval_seconds=1.0, usage={"task": Usage(), "reflection": Usage()},
                   engine_failures=0, added_prompt_tokens=0, eval_prompt_tokens_per_call=None, program_errors=0,
                   error=error, per_problem=() if error else tuple(ProblemResult(i, s, ("x",))
                                                                   for i, s in enumerate(scores)))


def test_a_method_is_paired_with_none_on_the_compile_seeds_both_evaluated():
    none = MethodResult("none", "method", (_seed_run(0, [1.0] * 10), _seed_run(1, [0.0] * 10)))
    method = MethodResult("tfgrpo", "method", (_seed_run(0, [], error="compile: boom"), _seed_run(1, [1.0] * 10)))
    vs = summary.paired_vs(none, method)
    assert vs["seeds"] == [1] and vs["base_mean"] == 0.0 and vs["delta"] == 1.0  # none's seed 1, not its mean 0.5
    rows = summary.result_rows([none, method])
    assert rows[1]["vs_none"]["seeds"] == [1] and rows[0]["problem_scores"] == [0.5] * 10


@pytest.fixture
def gsm_split(gsm_source):
    return splits.gsm8k_split(gsm_source, presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2), seed=0)


def test_tfgrpo_and_the_papers_recipe_differ_only_in_the_gate(gsm_split):
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, group_size=2, simba_bsize=2)
    ctx = methods.MethodContext(gsm_split, metering.Roles.of(scripted_lm(GsmScript())), budget, seed=0)
    with dspy.context(lm=ctx.roles.task):
        gated, paper = methods.compile_tfgrpo(ctx).details.settings, methods.compile_tfgrpo_paper(ctx).details.settings
    assert gated["reference_fields"] == paper["reference_fields"] == ["answer", "solution"]
    differing = {key for key in gated if gated[key] != paper[key]}
    assert differing <= set(presets.PAPER_RECIPE) and {"gate", "top_k"} <= differing


def test_tfgrpo_on_tickets_compiles_with_the_tickets_kits_own_settings():
    budget = presets.Budget(train_n=4, selection_n=2, test_n=2, group_size=2, simba_bsize=2, task="tickets")
    split = splits.tickets_split(budget, 1000)
    ctx = methods.MethodContext(split, metering.Roles.of(scripted_lm(ticket_router)), budget, seed=0)
    with dspy.context(lm=ctx.roles.task):
        gated, paper = methods.compile_tfgrpo(ctx).details.settings, methods.compile_tfgrpo_paper(ctx).details.settings
    assert (gated["extraction"], gated["max_words"], gated["reference_fields"]) == (False, 48, ["queue"])
    assert (paper["extraction"], paper["max_words"]) == (True, 48)  # the paper's per-group reflection, same guard
    assert presets.PRESETS["tickets"].lm_options == {}  # greedy calls on the repeatable path


def test_nearest_label_answers_the_nearest_training_inputs_answer_without_a_model():
    budget = presets.Budget(train_n=4, selection_n=2, test_n=2, group_size=2, simba_bsize=2, task="tickets")
    split = splits.tickets_split(budget, 1000)
    train = [dspy.Example(ticket=t, queue=q).with_inputs("ticket") for t, q in [
        ("refund of a duplicate charge on my invoice", "payments"), ("the kiosk screen in Oslo is broken", "field-ops"),
        ("please export my data under GDPR", "trust-safety")]]
    split = replace(split, train=train)
    ctx = methods.MethodContext(split, metering.Roles.of(scripted_lm(ticket_router)), budget, seed=0)
    program = methods.compile_nearest_label(ctx).program
    with dspy.context(lm=None):
        assert program(ticket="my kiosk screen is broken again").queue == "field-ops"
        assert program(ticket="a refund for a duplicate charge").queue == "payments"
    assert held_out_prompts(program, split.test) == [[], []]  # no call reaches a model


def ticket_rows(*rows: tuple[str, str]) -> list[dspy.Example]:
    return [dspy.Example(ticket=t, queue=q).with_inputs("ticket") for t, q in rows]


def test_knn_few_shot_shows_each_call_its_nearest_training_tickets_as_demos():
    budget = presets.Budget(train_n=4, selection_n=2, test_n=2, group_size=2, simba_bsize=2, task="tickets",
                            labeled_k=2, max_bootstrapped_demos=1)
    split = replace(splits.tickets_split(budget, 1000), train=ticket_rows(
        ("refund of a duplicate charge on my invoice", "payments"), ("the kiosk screen in Oslo is broken", "field-ops"),
        ("my kiosk printer in Bergen is broken", "field-ops"), ("please export my data under GDPR", "trust-safety")))
    ctx = methods.MethodContext(split, metering.Roles.of(scripted_lm(ticket_router)), budget, seed=0)
    program = methods.compile_knn(ctx).program
    (calls,) = held_out_prompts(program, ticket_rows(("the kiosk screen is broken again", "field-ops")))
    assert len(calls) == 1  # the neighbours are labeled demos: no teacher call bootstraps them
    final = json.dumps(calls[-1]["messages"])
    assert "kiosk screen in Oslo" in final and "kiosk printer in Bergen" in final
    assert "GDPR" not in final and "duplicate charge" not in final


def test_a_resumed_run_rebuilds_the_programs_dspy_cannot_save(tmp_path):
    budget = presets.Budget(train_n=4, selection_n=2, test_n=3, group_size=2, simba_bsize=2, task="tickets",
                            eval_temperature=0.0, repeat_none=False)
    split = splits.tickets_split(budget, 1000)
    store = RunStore(tmp_path / "runs")
    job = running.MethodRun("nearest_label", split, scripted_lm(ticket_router), budget, 0, store=store, progress=False)
    first = running.run_comparison(split, job.lm, budget, ["nearest_label"], store=store, progress=False)
    run, program = running._compiled(job, running.Earlier())
    assert isinstance(program, methods.NearestLabel) and run.score == first[0].runs[0].score
    assert set(methods.REBUILT_ON_LOAD) <= set(methods.COMPILERS)


@pytest.mark.parametrize("dev, reported", [("tickets_dev", "tickets"), ("banking77_dev", "banking77")])
def test_a_development_preset_draws_another_seed_than_the_reported_one(dev, reported):
    dev, reported = presets.PRESETS[dev], presets.PRESETS[reported]
    assert dev.task == reported.task and dev.data_seed != reported.data_seed
    assert (dev.train_n, dev.selection_n) == (80, 40) and dev.test_n >= 100
    assert {"nearest_label", "labeled", "tfgrpo_by_answer"} <= set(dev.methods)


def test_a_tfgrpo_option_reaches_every_tfgrpo_method_and_only_its_own_run_directory():
    args = cli.parse_args(["--preset", "smoke", "--tfgrpo-option", "verify_precision=0.4"])
    budget = cli.preset_budget(args)
    assert budget.tfgrpo_options == {"verify_precision": 0.4}
    split = splits.tickets_split(replace(budget, task="tickets"), 1000)
    ctx = methods.MethodContext(split, metering.Roles.of(scripted_lm(ticket_router)), budget, seed=0)
    assert methods.tfgrpo_optimizer(ctx, route_by="answer").settings.verify_precision == 0.4
    plain = runs_manifest("smoke", presets.PRESETS["smoke"], "local", {"tickets": split})
    assert "tfgrpo_options" not in plain["budget"]  # run directories from before the option still resume
    assert runs_manifest("smoke", budget, "local", {"tickets": split})["budget"]["tfgrpo_options"] == \
        {"verify_precision": 0.4}


def test_the_tickets_preset_holds_out_300_fresh_tickets():
    preset = presets.PRESETS["tickets"]
    assert preset.test_n >= 300 and preset.data_seed >= 1000 and preset.k == 1 and preset.eval_temperature == 0
    assert preset.methods == presets.LABEL_HEAD_TO_HEAD and "knn" in preset.methods
    split = splits.tickets_split(preset, preset.data_seed)
    assert (len(split.train), len(split.selection), len(split.test)) == (80, 40, 300)
    from tfgrpo_dspy.kits.tickets.generator import generate_tickets

    used_before = {e.ticket for e in generate_tickets(300, 0, split="heldout")}  # studies and the demo: seed 0
    held_out = [e.ticket for e in split.test]
    assert len(set(held_out)) == 300 and not set(held_out) & used_before
    assert not set(held_out) & {e.ticket for e in split.train + split.selection}
    assert split.held_out_rows()[0]["question"] == held_out[0] and split.answer_field == "queue"
    assert split.reference_fields == ("queue",)


def test_the_banking77_preset_draws_disjoint_rows_of_one_file_and_compiles_with_the_kits_settings(tmp_path):
    from tfgrpo_dspy.kits.banking77 import INTENTS

    path = tmp_path / "train.csv"
    path.write_text("text,category\n" + "".join(f"query {i},{INTENTS[i % 77]}\n" for i in range(450)))
    preset = presets.PRESETS["banking77"]
    assert preset.test_n >= 300 and preset.methods == presets.LABEL_HEAD_TO_HEAD and preset.k == 1
    split = splits.banking77_split(str(path), preset, preset.data_seed)
    assert (len(split.train), len(split.selection), len(split.test)) == (80, 40, 300)
    rows = [e.query for e in split.train + split.selection + split.test]
    assert len(set(rows)) == len(rows)
    assert (split.input_field, split.answer_field, split.reference_fields) == ("query", "intent", ("intent",))
    with pytest.raises(ValueError, match=r"450 distinct queries; 540 are needed \(train 80, selection 40, test 420\)"):
        splits.banking77_split(str(path), replace(preset, test_n=420), preset.data_seed)
    args = cli.parse_args(["--preset", "banking77", "--source", str(path)])
    assert set(cli.build_splits(args, preset)) == {"banking77"}


def test_the_gsm8k_preset_holds_out_rows_no_earlier_study_held_out(tmp_path):
    from lessons_study import gsm8k_task

    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps({"question": f"Q{i}?", "answer": f"w\n#### {i}"}) + "\n" for i in range(400)))
    preset = presets.PRESETS["gsm8k"]
    split = splits.gsm8k_split(str(path), preset, seed=preset.data_seed)
    earlier = splits.gsm8k_split(str(path), replace(preset, held_out_skip=0), seed=0)  # the preset's first run
    study = {e.question for e in gsm8k_task(str(path), 100, 0).examples}
    held_out = {e.question for e in split.test}
    assert len(held_out) == 100 and not held_out & ({e.question for e in earlier.test} | study)
    assert [e.question for e in split.train + split.selection] == [e.question for e in earlier.train +
                                                                   earlier.selection]


def test_labeled_few_shot_uses_dspys_default_k(gsm_split):
    assert inspect.signature(dspy.LabeledFewShot.__init__).parameters["k"].default == presets.LABELED_K
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2)
    ctx = methods.MethodContext(gsm_split, metering.Roles.of(scripted_lm(GsmScript())), budget, seed=0)
    compiled = methods.compile_labeled(ctx)
    assert compiled.details.demos == 4 and compiled.details.settings == {"k": 16}  # every training row, k capped


class TimedEngine:
    def __init__(self, timings):
        self.timings = timings

    def complete(self, request):
        from dspy.lm15 import Message, Response, TextPart
        from dspy.lm15 import Usage as ResponseUsage

        return Response(id=None, model="m", message=Message.assistant([TextPart("one, two")]), finish_reason="stop",
                        usage=ResponseUsage(input_tokens=30, output_tokens=48, total_tokens=78),
                        provider_data={"timings": self.timings} if self.timings else None)


def test_the_speed_at_start_is_llama_cpps_own_timing_or_a_note():
    timed = outputs.calibrate(TimedEngine({"predicted_per_second": 4.5, "prompt_per_second": 51.0,
                                           "predicted_n": 48, "prompt_n": 30}), "local/model")
    assert (timed["completion_tokens_per_second"], timed["prompt_tokens_per_second"]) == (4.5, 51.0)
    assert "no llama.cpp timings" in outputs.calibrate(TimedEngine(None), "local/model")["skipped"]
    lm = scripted_lm(GsmScript())
    assert "not the embedded model" in outputs.throughput_at_start(lm)["skipped"] and not lm.engine.calls
    assert "generated 4.5 tokens/s and read 51.0 prompt tokens/s" in md.throughput_sentence(timed)
    assert "not measured" in md.throughput_sentence({"skipped": "x"})


def test_the_committed_tfgrpo_on_bootstrap_program_keeps_bootstraps_demos():
    # The method adds lessons to the BootstrapFewShot program; with none verified it must ship the demos unchanged.
    store = RunStore(RESULTS / "compare_gsm8k.runs")
    split = splits.Split("gsm8k", [], [], [], "committed", make_program=splits.gsm8k_program)
    on_bootstrap, bootstrap = (store.load_program(split, method, 0) for method in ("tfgrpo_on_bootstrap", "bootstrap"))
    def demos(program):
        # A loaded program may hold its demos as dicts or as dspy.Example.
        return [[dict(demo) if isinstance(demo, dict) else demo.toDict() for demo in predictor.demos]
                for _, predictor in program.named_predictors()]

    assert demos(bootstrap)[0] and demos(on_bootstrap) == demos(bootstrap)


# -- the same prompts, the same greedy evaluation -----------------------------------------------------------------
def test_programs_share_a_prompts_digest_exactly_when_they_send_the_same_prompts(gsm_split):
    plain = gsm_split.make_program()
    digest = prompts_fingerprint(plain, gsm_split.test)
    calls = held_out_prompts(plain, gsm_split.test)
    assert len(calls) == len(gsm_split.test) and all(len(c) == 1 for c in calls)
    assert gsm_split.test[0].question in calls[0][0]["messages"][-1]["content"]
    for placement in ("instructions", "input"):  # a library with no lesson shows nothing
        assert prompts_fingerprint(with_experiences(plain, ExperienceLibrary(), placement=placement),
                                   gsm_split.test) == digest
    lesson = with_experiences(plain, ExperienceLibrary.from_texts(["When adding one, count on from the number."]))
    with_demo = gsm_split.make_program()
    with_demo.predict.demos = [dspy.Example(question="what is 1 plus 1", reasoning="add one", answer="2")]
    configured = gsm_split.make_program()
    configured.predict.config = {"max_tokens": 64}
    others = {prompts_fingerprint(p, gsm_split.test) for p in (lesson, with_demo, configured)}
    assert len(others) == 3 and digest not in others
    assert prompts_fingerprint(plain, gsm_split.test[:-1]) != digest  # other problems, other prompts


def test_a_compile_that_sends_the_same_prompts_reuses_the_greedy_evaluation_and_says_so(gsm_source, tmp_path):
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2, seeds=2, repeat_none=False,
                            eval_temperature=0.0, k=1)
    split = splits.gsm8k_split(gsm_source, budget, seed=0)
    lm = scripted_lm(GsmScript())
    store = RunStore(tmp_path / "runs")
    results = running.run_comparison(split, lm, budget, ["none", "labeled"], store=store, progress=False)
    none, labeled = ({r.seed: r for r in result.runs} for result in results)
    # none on seed 1 is the same program: seed 0's answers, no second evaluation.
    assert none[1].evaluation_of == "none seed 0" and none[1].per_problem == none[0].per_problem
    assert none[1].eval_seconds is None and none[1].usage["evaluation"].calls == 0
    assert none[0].evaluation_of is None and none[0].usage["evaluation"].calls == len(split.test)
    assert labeled[0].evaluation_of is None and labeled[0].prompts_digest != none[0].prompts_digest
    assert labeled[1].evaluation_of == "labeled seed 0"  # DSPy's LabeledFewShot takes the same demos every seed
    assert len(lm.engine.calls) == 2 * len(split.test)  # one evaluation per distinct program
    saved = store.load_run("gsm8k", "none", 1)
    assert saved.evaluation_of == "none seed 0" and saved.prompts_digest == none[0].prompts_digest
    lines = md.reused_evaluation_lines(summary.result_rows(results))
    assert "none seed 1 = none seed 0" in lines[0] and "labeled seed 1 = labeled seed 0" in lines[0]
    # Sampled decoding: each seed's answers are its own sample, never reused.
    sampled = replace(budget, eval_temperature=0.3)
    results = running.run_comparison(split, scripted_lm(GsmScript()), sampled, ["none"], progress=False)
    assert [r.evaluation_of for r in results[0].runs] == [None, None]
    assert md.reused_evaluation_lines(summary.result_rows(results)) == []


def test_a_resumed_held_out_evaluation_reports_what_every_part_of_it_cost(gsm_split, tmp_path):
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2, eval_temperature=0.0, k=1)
    folder = tmp_path / "none-seed0.eval" / "held_out"
    first = evaluate_stage(_seed_run(0, [0.0]), gsm_split.make_program(), gsm_split, budget, scripted_lm(GsmScript()),
                           progress=False, checkpoint_dir=folder)
    # As if the first run had been interrupted after two problems that took 500 s: the resumed run evaluates the
    # other two, and the record counts the 500 s and the calls of all four.
    for lost in sorted(folder.glob("ex*.json"))[2:]:
        lost.unlink()
    (folder / "seconds.json").write_text('{"seconds": 500.0}')
    lm = scripted_lm(GsmScript())
    resumed = evaluate_stage(_seed_run(0, [0.0]), gsm_split.make_program(), gsm_split, budget, lm, progress=False,
                             checkpoint_dir=folder)
    assert len(lm.engine.calls) == 2 and resumed.per_problem == first.per_problem
    assert resumed.eval_seconds >= 500.0
    assert resumed.usage["evaluation"].calls == first.usage["evaluation"].calls == len(gsm_split.test)


def test_committed_programs_with_the_same_prompts_got_the_same_greedy_answers(gsm_split):
    # The evidence for reusing an evaluation: these pairs were evaluated separately, before reuse existed.
    store = RunStore(RESULTS / "compare_gsm8k.runs")
    split = replace(gsm_split, make_program=splits.gsm8k_program)
    methods = ("none", "bootstrap", "tfgrpo", "tfgrpo_paper", "tfgrpo_on_bootstrap")
    digest = {m: prompts_fingerprint(store.load_program(split, m, 0), split.test) for m in methods}
    answers = {m: store.load_run("gsm8k", m, 0).per_problem for m in methods}
    for program, same_as in (("tfgrpo", "none"), ("tfgrpo_paper", "none"), ("tfgrpo_on_bootstrap", "bootstrap")):
        assert digest[program] == digest[same_as] and answers[program] == answers[same_as]
    assert digest["bootstrap"] != digest["none"] and answers["bootstrap"] != answers["none"]


# -- more compile seeds for the methods whose spread is asked for -------------------------------------------------
def test_later_seeds_compile_only_the_methods_asked_for_with_none_and_what_they_read_from():
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2, seeds=3,
                            more_seeds_for=("tfgrpo_on_bootstrap",))
    order = ["none", "labeled", "bootstrap", "tfgrpo", "tfgrpo_on_bootstrap"]
    assert budget.methods_on_seed(order, 0) == order
    assert budget.methods_on_seed(order, 2) == ["none", "bootstrap", "tfgrpo_on_bootstrap"]
    assert replace(budget, more_seeds_for=None).methods_on_seed(order, 1) == order
    with pytest.raises(ValueError, match="unknown method"):
        presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2, more_seeds_for=("tfgrpo_typo",))


def test_a_comparison_with_more_seeds_for_one_method_keeps_one_compile_of_the_rest(gsm_source, tmp_path):
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2, seeds=2, eval_temperature=0.0,
                            more_seeds_for=("labeled",))
    split = splits.gsm8k_split(gsm_source, budget, seed=0)
    results = running.run_comparison(split, scripted_lm(GsmScript()), budget, ["none", "labeled", "bootstrap"],
                                     progress=False)
    assert {r.method: [run.seed for run in r.runs] for r in results} == {
        "none": [0, 1], "labeled": [0, 1], "bootstrap": [0]}
    rows = summary.result_rows(results)
    assert [row["vs_none"]["seeds"] for row in rows[1:]] == [[0, 1], [0]]
    header = md._seeds_phrase({"seeds": 2, "more_seeds_for": ["labeled"]})
    assert header == "2 compile seeds for labeled (and none, to pair with), one (seed 0) for the other methods"


@pytest.mark.parametrize("argv, message", [
    (["--more-seeds-for", "tfgrpo"], "needs --seeds N with N > 1"),
    (["--seeds", "3", "--methods", "none", "bootstrap", "--more-seeds-for", "tfgrpo"], "not among the methods run"),
])
def test_more_seeds_for_is_checked_on_the_command_line(argv, message, capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["--preset", "gsm8k", *argv])
    assert message in capsys.readouterr().err


def test_more_seeds_for_leaves_a_run_directory_usable(gsm_source, tmp_path):
    budget = presets.Budget(train_n=4, selection_n=3, test_n=4, simba_bsize=2, task="gsm8k")
    split = splits.gsm8k_split(gsm_source, budget, seed=0)
    store = RunStore(tmp_path / "runs")
    store.open(runs_manifest("gsm8k", budget, "local", {"gsm8k": split}))
    more = replace(budget, seeds=3, more_seeds_for=("tfgrpo",))
    assert store.open(runs_manifest("gsm8k", more, "local", {"gsm8k": split})) == 0  # not refused
