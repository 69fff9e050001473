"""No input crashes: damaged library files and run logs, odd LM text, empty sources are one clear line each."""

import json
from pathlib import Path

import dspy
import pytest
from scripted import default_reflection, scripted_lm

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, cli
from tfgrpo_dspy.library.file import LibraryFileError
from tfgrpo_dspy.library.jsonio import write_json_atomic
from tfgrpo_dspy.run.runlog import RunLogError

GOOD = {"format": "tfgrpo-experience-library", "version": 2, "max_experiences": 5, "max_words": 8, "next_id": 3,
        "experiences": [{"id": 1, "text": "When a, do b."}, {"id": 2, "text": "When c, do d."}]}


def broken(**changes):
    data = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        target, *keys = path.split("__")
        node = data
        if target == "exp":
            node = data["experiences"][int(keys.pop(0))]
        node[keys[0] if keys else target] = value
    return data


LIBRARY_CASES = [
    (broken(exp__0__id=None), "experiences[0].id: must be a positive integer, got None"),
    (broken(exp__1__id=1.9), "experiences[1].id: must be a positive integer, got 1.9"),
    (broken(exp__1__id=1), "duplicate id(s) [1]"),
    (broken(exp__0__text=None), "experiences[0].text: must be a non-empty string, got None"),
    (broken(exp__0__text="one two three four five six seven eight nine"), "over max_words=8"),
    (broken(version=4), "format version 4 is not one this release reads (reads 1, 2, 3); if a newer tfgrpo-dspy "
                        "wrote it, upgrade to read it"),
    (broken(next_id=2), "next_id: 2 is not above the largest id 2"),
    (broken(next_id="x"), "next_id: must be a positive integer"),
    (broken(max_words=0), "max_words: must be a positive integer or null"),
    (broken(exp__0__uses=-1), "experiences[0].uses: must be a non-negative integer"),
    ({"hello": 1}, "not an experience library"),
    (broken(max_experiences=1), "experiences: 2 lessons, more than the file's max_experiences=1; delete lessons or "
                                "raise max_experiences"),
    (broken(max_words=None, exp__0__text="word " * 500), "experiences[0].text: has 2499 characters, over the "
                                                         "2000-character limit of a lesson"),
    (broken(exp__1__text="When \ud800, do d."), "experiences[1].text: holds a lone surrogate (\\ud800) at "
                                                 "character 5, which is not text; remove it"),
    (broken(audit_log=[{"step": "\x1b[2J", "op": "add", "status": "applied", "detail": "x"}]),
     "audit_log[0].step: must be a step number or null, got '\\x1b[2J'"),
    (broken(audit_log=[{"step": 1, "op": ["add"], "status": "applied", "detail": "x"}]),
     "audit_log[0].op: must be a string, got ['add']"),
    (broken(audit_log=[{"step": 1, "op": "add", "status": "\x1b[31mok", "detail": "x"}]),
     "audit_log[0].status: must be 'applied' or 'refused'"),
    (broken(audit_log=[{"step": 1, "op": "add", "status": "applied", "detail": "bad \udfff"}]),
     "audit_log[0].detail: holds a lone surrogate"),
    (broken(audit_log=[{"step": 1, "op": "merge", "status": "applied", "detail": "x", "ids": "12"}]),
     "audit_log[0].ids: must be a list of experience ids or null"),
]


@pytest.mark.parametrize(("data", "message"), LIBRARY_CASES)
def test_a_bad_library_file_is_one_line_naming_the_file_and_field(tmp_path, data, message):
    path = tmp_path / "lib.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LibraryFileError) as caught:
        ExperienceLibrary.load(path)
    assert message in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_id_infinity_and_deep_nesting_are_clear_errors(tmp_path):
    path = tmp_path / "lib.json"
    path.write_text(json.dumps(GOOD).replace('{"id": 1, ', "{"))
    with pytest.raises(LibraryFileError, match=r"experiences\[0\]: has no 'id'"):
        ExperienceLibrary.load(path)
    path.write_text(json.dumps(GOOD).replace('"next_id": 3', '"next_id": Infinity'))
    with pytest.raises(ValueError, match=f"{path} is not valid JSON: Infinity"):
        ExperienceLibrary.load(path)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        ExperienceLibrary.load(path)


def test_version_1_files_still_load():
    old = {"format": "tfgrpo-experience-library", "version": 1, "max_experiences": 40, "max_words": 32,
           "next_id": 4, "experiences": [{"id": 1, "text": "When a, do b.", "added_step": 1, "updated_step": 1}],
           "audit_log": [{"step": 2, "op": "delete", "status": "applied", "detail": "deleted E2", "id": 2}]}
    library = ExperienceLibrary.from_dict(old)
    assert library[1].uses == 0 and library.next_id == 4 and library.audit_log[0].detail == "deleted E2"


READS = "(reads 1, 2, 3)"
NEWER = "; if a newer tfgrpo-dspy wrote it, upgrade to read it"
VERSION_CASES = [
    ({"version": 4}, f"format version 4 is not one this release reads {READS}{NEWER}"),
    ({"version": 0}, f"format version 0 is not one this release reads {READS}"),
    ({"version": "2"}, f'format version "2" is not one this release reads {READS}'),
    ({"version": 2.0}, f"format version 2.0 is not one this release reads {READS}"),
    ({"version": True}, f"format version true is not one this release reads {READS}"),
    # A newer version may have changed any other field: the version is checked before them.
    ({"version": 4, "experiences": {"1": "When a, do b."}}, f"format version 4 is not one this release reads "
                                                             f"{READS}{NEWER}"),
    ({"version": None}, f"format version null is not one this release reads {READS}"),
    ({"version": "missing"}, "has no format version, which every tfgrpo-dspy release writes (this release reads 1, "
                             '2, 3); if you wrote the file by hand, add "version": 3'),
]


def _with_version(changes: dict) -> bytes:
    data = {**GOOD, **changes}
    if data["version"] == "missing":
        del data["version"]
    return json.dumps(data, indent=2).encode()


@pytest.mark.parametrize(("changes", "message"), VERSION_CASES)
def test_a_library_of_a_version_this_release_does_not_read_is_refused_and_left_untouched(tmp_path, changes,
                                                                                          message):
    path = tmp_path / "library.json"
    path.write_bytes(_with_version(changes))
    before = path.read_bytes()
    with pytest.raises(LibraryFileError) as caught:
        ExperienceLibrary.load(path)
    assert str(caught.value) == f"{path}: {message}"
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["library.json"]


@pytest.mark.parametrize("command", ["show", "diff", "eval", "train"])
def test_every_command_refuses_a_newer_library_in_one_line_and_leaves_it_untouched(tmp_path, monkeypatch,
                                                                                   capsys, command):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was made for a library that cannot be read")

    monkeypatch.setattr(cli, "make_lm", no_model)
    path = tmp_path / "library.json"
    path.write_bytes(_with_version({"version": 4}))
    before = path.read_bytes()
    argv = {"show": ["show", str(path)], "diff": ["diff", str(path), str(path)],
            "eval": ["eval", "--task", "wordproblems", "--n", "2", "--library", str(path)],
            "train": ["train", "--task", "wordproblems", "--n", "2", "--library", str(path), "--out",
                      str(tmp_path / "run")]}[command]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"tfgrpo {command}: error: {path}: format version 4 is not one this release reads "
                            f"{READS}{NEWER}\n")
    assert captured.out == "" and path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["library.json"]  # nor anything written beside it


def test_show_reads_a_version_1_file_and_logs_that_it_was_migrated_without_writing_it(tmp_path, capsys, caplog):
    fixture = Path(__file__).parent / "fixtures" / "library" / "version1.json"  # written by the first release
    path = tmp_path / "library.json"
    path.write_bytes(fixture.read_bytes())
    with caplog.at_level("INFO", logger="tfgrpo_dspy.library.file"):
        assert cli.main(["show", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{path}: 2 lessons (~31 tokens; max 40 lessons, 32 words each)"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"{path}: format version 1 migrated to version 2 as it was read: its lessons start with no sources "
                 "and zero uses, helpful and harmful counts (the file is unchanged)")]
    assert path.read_bytes() == fixture.read_bytes()


def test_show_and_diff_escape_terminal_control_characters(tmp_path, capsys):
    library = ExperienceLibrary.from_texts(["When \x1b[31mred\x1b[0m appears, stop."])
    library.save(tmp_path / "a.json")
    ExperienceLibrary().save(tmp_path / "b.json")
    assert cli.main(["show", str(tmp_path / "a.json")]) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\\x1b[31mred" in shown
    assert cli.main(["diff", str(tmp_path / "b.json"), str(tmp_path / "a.json")]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_show_audit_and_diff_escape_escape_codes_and_bidi_overrides(tmp_path, capsys):
    evil = "When \u202eeurt si siht\u202c, do \x1b]0;title\x07 it."
    data = broken(exp__0__text=evil, audit_log=[
        {"step": 1, "op": "add\x1b[2J", "status": "applied", "detail": "added \u2066E1\u2069 \x1b[31m", "id": 1}])
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "b.json").write_text(json.dumps(GOOD))
    assert cli.main(["show", "--audit", str(tmp_path / "a.json")]) == 0
    shown = capsys.readouterr().out
    assert "\\u202eeurt si siht\\u202c" in shown and "add\\x1b[2J" in shown and "\\u2066E1\\u2069" in shown
    assert cli.main(["diff", str(tmp_path / "b.json"), str(tmp_path / "a.json")]) == 0
    diffed = capsys.readouterr().out
    assert "\\u202e" in diffed
    for out in (shown, diffed):
        assert not any(mark in out for mark in ("\x1b", "\x07", "\u202e", "\u202c", "\u2066", "\u2069")), out


def test_a_lone_surrogate_in_a_file_is_one_line_naming_the_file_for_show_and_diff(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(broken(exp__0__text="When \udc80 appears, stop.")))
    for argv in (["show", str(tmp_path / "a.json")], ["diff", str(tmp_path / "a.json"), str(tmp_path / "a.json")]):
        assert cli.main(argv) == 2
        error = capsys.readouterr().err
        assert f"{tmp_path / 'a.json'}: experiences[0].text: holds a lone surrogate" in error
        assert error.count("\n") == 1


def test_a_lone_surrogate_from_the_lm_is_cleaned_not_fatal(tmp_path):
    write_json_atomic(tmp_path / "x.json", {"text": "bad \ud800 text"})
    assert json.loads((tmp_path / "x.json").read_text())["text"] == "bad ? text"

    def surrogate_lessons(call):
        if call.kind == "extract":
            return {"difference": "d\ud800", "lessons": [{"condition": "a unit \ud800 appears",
                                                          "action": "convert it"}], "misleading": [], "useful": []}
        reply = default_reflection(call)
        return reply if reply is not None else {"answer": "2" if call.number % 2 else "x"}

    trainset = [dspy.Example(question="q", answer="2").with_inputs("question")]
    with dspy.context(lm=scripted_lm(surrogate_lessons)):
        compiled = TrainingFreeGRPO(lambda e, p, t=None: float(p.answer == e.answer), group_size=2, epochs=1,
                                    num_threads=1, progress=False, log_dir=tmp_path / "run").compile(
            dspy.Predict("question -> answer"), trainset=trainset)
    assert compiled.tfgrpo_result.steps  # the run finished and its log was written


def _finished_run(tmp_path):
    lm = scripted_lm(lambda call: default_reflection(call) or {"answer": "2" if call.number % 2 else "x"})
    settings = dict(group_size=2, epochs=2, num_threads=1, progress=False, log_dir=tmp_path)
    trainset = [dspy.Example(question="q", answer="2").with_inputs("question")]

    def run():
        with dspy.context(lm=lm):
            return TrainingFreeGRPO(lambda e, p, t=None: float(p.answer == e.answer), **settings).compile(
                dspy.Predict("question -> answer"), trainset=trainset)

    run()
    return run


@pytest.mark.parametrize(("name", "content", "message"), [
    ("manifest.json", '{"format": "tfgrpo-run", "vers', "the run manifest"),
    ("state.json", '{"completed_st', "the run state"),
    ("steps/0001/step.json", '{"step": 1,', "the step record"),
    ("steps/0001/library.json", "{", "steps/0001/library.json is not valid JSON"),
    # A damaged manifest or state also says that nothing was redone, and what to do.
    ("manifest.json", "[]", "is not a JSON object; it is damaged. Nothing was run or redone: restore the file to "
                            "resume this run, or use a new log_dir (--out) to start afresh"),
    ("state.json", '{"completed_steps": "2"}', "(completed_steps is '2', not a step number). Nothing was run or "
                                               "redone: set completed_steps to the last step whose steps/NNNN/"),
    ("state.json", "[]", "(completed_steps is None, not a step number)"),
    ("state.json", '{"completed_steps": 1.5}', "later steps are redone), or use a new log_dir (--out)"),
])
def test_a_damaged_run_log_names_the_file(tmp_path, name, content, message):
    rerun = _finished_run(tmp_path)
    (tmp_path / name).write_text(content)
    with pytest.raises(RunLogError) as caught:
        rerun()
    assert message in str(caught.value) and name.split("/")[-1] in str(caught.value) and "\n" not in str(caught.value)


def test_a_deleted_step_record_says_how_to_redo_the_step(tmp_path):
    rerun = _finished_run(tmp_path)
    (tmp_path / "steps" / "0002" / "step.json").unlink()
    with pytest.raises(RunLogError, match="set completed_steps to 1 in state.json to redo the step"):
        rerun()


def test_an_unreadable_record_is_redone_with_a_warning(tmp_path, caplog):
    rerun = _finished_run(tmp_path)
    state = json.loads((tmp_path / "state.json").read_text())
    write_json_atomic(tmp_path / "state.json", {**state, "completed_steps": 1})
    rollout = next((tmp_path / "steps" / "0002" / "rollouts").glob("*.json"))
    rollout.write_text('{"broken')
    with caplog.at_level("WARNING"):
        rerun()
    assert any(str(rollout) in r.message and "it will be redone" in r.message for r in caplog.records)


@pytest.mark.parametrize("task", ["gsm8k", "dapo-math", "webwalkerqa", "aime24"])
def test_an_empty_or_unreadable_source_is_one_line(tmp_path, capsys, task):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    command = "eval" if task == "aime24" else "train"
    assert cli.main([command, "--task", task, "--source", str(empty), "--out", str(tmp_path / "o")]
                    if command == "train" else [command, "--task", task, "--source", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tfgrpo {command}: error: --source {empty}") and "\n" not in err
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("{not json\n")
    assert cli.main(["eval", "--task", task, "--source", str(garbage)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tfgrpo eval: error: --source {garbage}") and "\n" not in err
