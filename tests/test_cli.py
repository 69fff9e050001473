"""The tfgrpo command line, offline: a scripted LM stands in for the embedded model."""

import json

import pytest
from scripted import default_reflection, scripted_lm

from tfgrpo_dspy import ExperienceLibrary, cli


def solver(call):
    reply = default_reflection(call)
    if reply is not None:
        return reply
    return {"reasoning": "count", "answer": "75" if call.seed is not None and call.seed % 2 else "1"}


@pytest.fixture
def scripted(monkeypatch):
    lm = scripted_lm(solver)
    monkeypatch.setattr(cli, "make_lm", lambda spec, **kwargs: lm)
    return lm


def run(*argv):
    return cli.main(list(argv))


def test_train_writes_library_program_and_stats_then_resumes_for_free(scripted, tmp_path, capsys):
    argv = ["train", "--task", "wordproblems", "--n", "2", "--group-size", "2", "--epochs", "1",
            "--num-threads", "2", "--out", str(tmp_path)]
    assert run(*argv) == 0
    out = capsys.readouterr().out
    assert "2 training examples" in out and "learned library" in out
    library = ExperienceLibrary.load(tmp_path / "library.json")
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["steps"][0]["rollouts"] == 4 and stats["steps"][0]["library_size"] == len(library)
    assert "experience_library" not in json.loads((tmp_path / "program.json").read_text())  # state only
    calls = len(scripted._engine_spec.calls)
    assert run(*argv) == 0  # same --out: resumes a finished run, spending nothing
    assert len(scripted._engine_spec.calls) == calls


def test_train_settings_map_flags_to_optimizer_options():
    from tfgrpo_dspy.kits.wordproblems.task import WORDPROBLEM_TASKS

    task = WORDPROBLEM_TASKS["wordproblems"]
    args = cli.build_parser().parse_args(["train", "--task", "wordproblems", "--out", "x", "--no-generalize",
                                          "--no-summaries", "--group-size", "3"])
    settings = cli._train_settings(task, args)
    assert settings["generalize_lessons"] is False and settings["summarize"] is False
    assert settings["group_size"] == 3
    defaults = cli._train_settings(task, cli.build_parser().parse_args(["train", "--task", "wordproblems",
                                                                        "--out", "x"]))
    assert "generalize_lessons" not in defaults and "summarize" not in defaults  # the optimizer's defaults apply


def test_train_estimate_spends_nothing(scripted, capsys):
    assert run("train", "--task", "wordproblems", "--n", "5", "--out", "unused", "--estimate") == 0
    assert "5 training examples" in capsys.readouterr().out
    assert not scripted._engine_spec.calls


def test_eval_with_and_without_library(scripted, tmp_path, capsys):
    library = ExperienceLibrary.from_texts(["When lengths mix meters and centimeters, convert first."])
    library.save(tmp_path / "lib.json")
    assert run("eval", "--task", "wordproblems", "--n", "2", "--k", "2", "--library", str(tmp_path / "lib.json"),
               "--out", str(tmp_path / "eval.json")) == 0
    out = capsys.readouterr().out
    assert "no library" in out and "with library" in out and "Mean@2" in out
    reports = json.loads((tmp_path / "eval.json").read_text())
    assert reports["with library"]["library_size"] == 1 and reports["no library"]["k"] == 2
    prompts = [c.system for c in scripted._engine_spec.calls]
    assert sum("convert first" in p for p in prompts) == 4  # 2 examples x k=2 with the library


def test_show_and_diff(tmp_path, capsys):
    old = ExperienceLibrary.from_texts(["When a, do b.", "When c, do d."])
    new = old.copy()
    new.apply([{"op": "delete", "id": 1}, {"op": "add", "text": "When e, do f."}], step=1)
    old.save(tmp_path / "old.json")
    new.save(tmp_path / "new.json")
    assert run("show", str(tmp_path / "new.json"), "--audit") == 0
    shown = capsys.readouterr().out
    assert "[E3] When e, do f." in shown and "deleted E1" in shown
    assert run("diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")) == 0
    diff = capsys.readouterr().out
    assert "- [E1] When a, do b." in diff and "+ [E3] When e, do f." in diff


def test_show_says_how_a_routed_library_routes(tmp_path, capsys):
    library = ExperienceLibrary.from_texts(["When a refund is asked for, answer payments.", "When c, do d."])
    library.route(1, ["refund for order 1", "refund for order 2"], everyone=["opening hours", "lost parcel"])
    assert run("show", str(library.save(tmp_path / "routed.json"))) == 0
    shown = capsys.readouterr().out
    assert "routed by 4 training inputs: a call sees the lessons of the nearest one (2 of them route to no lesson)" \
        in shown
    assert "answer payments.  (routed from 2 training inputs" in shown and "do d.  (routed from 0" in shown


def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    assert run("show", str(tmp_path / "missing.json")) == 2
    assert "no experience library" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run("train", "--task", "no-such-task", "--out", str(tmp_path))


def test_program_options_reach_the_task_program_or_are_refused(monkeypatch, tmp_path, capsys):
    from tfgrpo_dspy.kits.web.agent import WebWalkerAgent

    args = cli.build_parser().parse_args(["eval", "--task", "webwalkerqa", "--max-iters", "2",
                                          "--allow-address", "127.0.0.1", "--allow-address", "::1"])
    agent = cli._make_program(cli.TASKS["webwalkerqa"], args)
    assert isinstance(agent, WebWalkerAgent) and agent.agent.max_iters == 2
    assert agent.policy.allowed_addresses == {"127.0.0.1", "::1"}
    default_args = cli.build_parser().parse_args(["eval", "--task", "webwalkerqa"])
    default = cli._make_program(cli.TASKS["webwalkerqa"], default_args)
    assert default.policy.allowed_addresses == frozenset()  # private addresses stay closed unless asked
    math_args = cli.build_parser().parse_args(["eval", "--task", "gsm8k", "--max-iters", "3"])
    assert cli._make_program(cli.TASKS["gsm8k"], math_args).max_iters == 3

    assert run("eval", "--task", "wordproblems", "--max-iters", "2") == 2
    assert "--max-iters does not apply to task 'wordproblems'" in capsys.readouterr().err
    assert run("eval", "--task", "gsm8k", "--allow-address", "127.0.0.1") == 2
    assert "--allow-address does not apply to task 'gsm8k'" in capsys.readouterr().err
    assert run("eval", "--task", "webwalkerqa", "--allow-address", "localhost") == 2
    assert "not an IP address" in capsys.readouterr().err


def test_train_with_a_selection_set_prints_the_candidates_and_reports(scripted, tmp_path, capsys):
    out = tmp_path / "run"
    assert run("train", "--task", "wordproblems", "--n", "2", "--val-n", "2", "--group-size", "2", "--epochs", "1",
               "--num-threads", "2", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "selection set: 2 examples" in printed and "initial" in printed
    stats = json.loads((out / "stats.json").read_text())
    assert stats["selection_size"] == 2 and stats["candidates"][0]["label"] == "initial"
    assert run("report", str(out / "log")) == 0
    assert (out / "log" / "report.html").exists() and "report.html" in capsys.readouterr().out


def test_train_flags_no_gate_placement_and_warm_start(scripted, tmp_path):
    start = ExperienceLibrary.from_texts(["When lengths mix meters and centimeters, convert first."])
    start.save(tmp_path / "start.json")
    args = cli.build_parser().parse_args(["train", "--task", "wordproblems", "--out", "x", "--no-gate",
                                          "--placement", "input", "--top-k", "2", "--val-fraction", "0"])
    settings = cli._train_settings(cli.TASKS["wordproblems"], args)
    assert settings["gate"] is False and settings["placement"] == "input" and settings["top_k"] == 2
    assert settings["val_fraction"] == 0
    every = cli.build_parser().parse_args(["train", "--task", "wordproblems", "--out", "x", "--top-k", "0"])
    assert cli._train_settings(cli.TASKS["wordproblems"], every)["top_k"] is None  # 0 = every lesson
    unset = cli.build_parser().parse_args(["train", "--task", "wordproblems", "--out", "x"])
    assert "top_k" not in cli._train_settings(cli.TASKS["wordproblems"], unset)  # the optimizer's default, 1
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--task", "wordproblems", "--out", "x", "--top-k", "-1"])
    assert run("train", "--task", "wordproblems", "--n", "2", "--group-size", "2", "--epochs", "1", "--library",
               str(tmp_path / "start.json"), "--out", str(tmp_path / "warm")) == 0
    first_policy = next(c for c in scripted._engine_spec.calls if c.kind == "policy")
    assert "convert first" in first_policy.system
    with pytest.raises(SystemExit):  # argparse: "argument --selection-n/--val-n: must be a whole number >= 1"
        run("train", "--task", "wordproblems", "--n", "2", "--selection-n", "0", "--out", str(tmp_path / "y"))


def test_a_report_of_a_directory_that_is_no_run_is_one_line(tmp_path, capsys):
    assert run("report", str(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfgrpo report: error:") and "manifest.json" in err and "\n" not in err


def router(call):
    reply = default_reflection(call)
    if reply is not None:
        return reply
    return {"queue": "general"}


def test_demo_shows_the_selection_and_an_honest_paired_verdict(monkeypatch, tmp_path, capsys):
    lm = scripted_lm(router)
    monkeypatch.setattr(cli, "make_lm", lambda spec, **kwargs: lm)
    assert run("demo", "--train-n", "4", "--selection-n", "3", "--heldout-n", "6", "--out", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "[1/3]" in out and "[3/3]" in out and "initial" in out and "shipped:" in out
    assert "accepted (0 lessons) the starting library" in out
    assert "no measurable change (+0.0 points, 95% CI [+0.0, +0.0]" in out  # the same answers before and after
    story = out.split("== what the run learned ==", 1)[1]  # the report's headline and stages, after the verdict
    assert "No lesson was learned" in story and "- Groups:" in story and "- Shipped:" in story
    record = json.loads((tmp_path / "demo.json").read_text())
    assert record["task"] == "tickets" and record["comparison"]["n"] == 6
    assert record["sizes"] == {"train": 4, "selection": 3, "heldout": 6} and record["seed"] == 0
    # The same --out again: the training resumes from its log and both evaluations from their saved answers.
    calls = len(lm.engine.calls)
    assert run("demo", "--train-n", "4", "--selection-n", "3", "--heldout-n", "6", "--out", str(tmp_path)) == 0
    assert len(lm.engine.calls) == calls
    assert json.loads((tmp_path / "demo.json").read_text())["comparison"] == record["comparison"]


def test_demo_scores_the_most_frequent_training_answer_beside_the_shipped_program(monkeypatch, tmp_path, capsys):
    lm = scripted_lm(router)  # answers "general" to every ticket
    monkeypatch.setattr(cli, "make_lm", lambda spec, **kwargs: lm)
    assert run("demo", "--train-n", "12", "--selection-n", "4", "--heldout-n", "6", "--out", str(tmp_path)) == 0
    out = capsys.readouterr().out
    # 16 training tickets, trust-safety 4 times; of the 6 held-out tickets one is trust-safety and one general.
    section = out.split("== against one answer for everything ==", 1)[1].split("==", 1)[0]
    assert "always 'trust-safety' (the most frequent of 16 training answers, no model): 16.7%" in section
    assert "the shipped program against it: no measurable change (+0.0 points" in section
    assert "1 won / 1 lost" in section and "has not shown that it learned rules" in section
    majority = json.loads((tmp_path / "demo.json").read_text())["majority"]
    assert (majority["answer"], majority["frequency"], majority["scores"]) == ("trust-safety", 4, [0, 0, 1, 0, 0, 0])


# -- every argument and file is checked before the first LM call ------------------------------------------
def _no_calls(scripted):
    return not scripted._engine_spec.calls


def test_group_size_one_is_an_error_unless_every_group_may_reach_the_reflection(scripted, tmp_path, capsys):
    argv = ["train", "--task", "wordproblems", "--n", "2", "--epochs", "1", "--num-threads", "1", "--group-size", "1"]
    assert run(*argv, "--out", str(tmp_path / "a")) == 2
    error = capsys.readouterr().err
    assert error.startswith("tfgrpo train: error: --group-size 1: a group of one rollout never has mixed rewards")
    assert "--all-groups" in error and error.count("\n") == 1 and _no_calls(scripted)
    assert run(*argv, "--all-groups", "--out", str(tmp_path / "b")) == 0  # asked for: learns from single rollouts
    stats = json.loads((tmp_path / "b" / "stats.json").read_text())
    assert stats["steps"][0]["rollouts"] == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["eval", "--task", "wordproblems", "--k", "0"], "argument --k: must be a whole number >= 1, got '0'"),
    (["eval", "--task", "wordproblems", "--n", "0"], "argument --n: must be a whole number >= 1, got '0'"),
    (["train", "--task", "wordproblems", "--out", "x", "--epochs", "0"], "argument --epochs: must be a whole number"),
    (["train", "--task", "wordproblems", "--out", "x", "--group-size", "0"], "argument --group-size: must be a"),
])
def test_a_bad_count_blames_its_argument(scripted, argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        run(*argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err and _no_calls(scripted)


def test_eval_checks_its_library_and_out_before_evaluating(scripted, tmp_path, capsys):
    assert run("eval", "--task", "wordproblems", "--n", "2", "--library", str(tmp_path / "missing.json")) == 2
    assert f"no experience library at {tmp_path / 'missing.json'}" in capsys.readouterr().err
    assert run("eval", "--task", "wordproblems", "--n", "2", "--out", str(tmp_path)) == 2
    assert f"--out {tmp_path} is a folder: give the name of the JSON file to write" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert run("eval", "--task", "wordproblems", "--n", "2", "--out", str(tmp_path / "file" / "eval.json")) == 2
    assert f"{tmp_path / 'file'} is a file, so nothing can be written under it" in capsys.readouterr().err
    assert _no_calls(scripted)


def test_train_out_pointing_at_a_file_is_one_line_before_any_call(scripted, tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    assert run("train", "--task", "wordproblems", "--n", "2", "--out", str(tmp_path / "taken")) == 2
    error = capsys.readouterr().err
    assert error == f"tfgrpo train: error: --out {tmp_path / 'taken'} is a file, not a folder: give a folder " \
                    "(it is made if missing)\n"
    assert _no_calls(scripted)


def test_a_warm_start_over_the_runs_cap_is_refused_before_any_call(scripted, tmp_path, capsys):
    ExperienceLibrary.from_texts(["When a, do b.", "When c, do d.", "When e, do f."]).save(tmp_path / "start.json")
    assert run("train", "--task", "wordproblems", "--n", "2", "--max-experiences", "2", "--library",
               str(tmp_path / "start.json"), "--out", str(tmp_path / "run")) == 2
    assert "holds 3 lessons, more than the run's max_experiences=2" in capsys.readouterr().err
    assert _no_calls(scripted)


def test_a_run_whose_every_call_fails_aborts_with_the_first_error(monkeypatch, tmp_path, capsys):
    from dspy.lm15 import UnknownModelError

    lm = scripted_lm(lambda call: UnknownModelError("unknown model 'nonsense/model': no provider serves it"))
    monkeypatch.setattr(cli, "make_lm", lambda spec, **kwargs: lm)
    assert run("train", "--task", "wordproblems", "--lm", "nonsense/model", "--n", "1", "--group-size", "2",
               "--epochs", "1", "--num-threads", "1", "--out", str(tmp_path)) == 3
    error = capsys.readouterr().err.split("\r")[-1]  # after the progress bar's last redraw
    assert error.startswith("tfgrpo train: aborted: all 2 calls in this session failed; the first: rollouts: ")
    assert "unknown model 'nonsense/model': no provider serves it" in error and error.count("\n") == 1
    assert len(lm._engine_spec.calls) == 2  # the rollouts of the only example, nothing after them
    assert not (tmp_path / "library.json").exists()


def test_eval_with_a_library_prints_the_paired_verdict(scripted, tmp_path, capsys):
    ExperienceLibrary.from_texts(["When lengths mix units, convert first."]).save(tmp_path / "lib.json")
    assert run("eval", "--task", "wordproblems", "--n", "3", "--k", "2", "--library", str(tmp_path / "lib.json"),
               "--out", str(tmp_path / "eval.json")) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "paired" in line)
    assert line.startswith("  paired, with library vs without on the same 3 examples (Mean@2): ")
    assert "95% CI [" in line and " won / " in line and " lost, sign test p=" in line
    comparison = json.loads((tmp_path / "eval.json").read_text())["comparison"]
    assert comparison["n"] == 3 and {"delta", "ci_low", "ci_high", "wins", "losses", "p_value"} <= set(comparison)


def test_an_inconclusive_demo_says_whether_to_measure_more_or_to_use_a_stronger_model():
    from tfgrpo_dspy.demo import inconclusive_advice
    from tfgrpo_dspy.stats import compare_paired

    gain = compare_paired([0.0] * 56 + [1.0] * 4, [1.0] * 10 + [0.0] * 50)  # 10 won / 4 lost: +10 points, n.s.
    assert not gain.significant and gain.delta > 0
    assert "--heldout-n" in inconclusive_advice(gain) and "60 held-out examples" in inconclusive_advice(gain)
    loss = compare_paired([1.0] * 3 + [0.0] * 57, [0.0] * 60)
    assert "--lm" in inconclusive_advice(loss) and "--heldout-n" not in inconclusive_advice(loss)
