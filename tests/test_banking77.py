"""The Banking77 kit: loading a CSV or a hub-layout folder, seeded disjoint splits, the typed program, the metric,
and the CLI's train and eval on a scripted LM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dspy
import pytest
from scripted import default_reflection, scripted_lm

from tfgrpo_dspy import ExperienceLibrary, cli
from tfgrpo_dspy.kits.banking77 import (
    BANKING77,
    INTENTS,
    banking77_splits,
    intent_match,
    intent_signature,
    load_banking77,
    make_program,
    parse_intent,
    seeded_order,
)
from tfgrpo_dspy.tasks import TaskData

FIXTURE = Path(__file__).parent / "fixtures" / "banking77"


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "text,category") -> Path:
    lines = [header] + [f'"{text}",{intent}' for text, intent in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def many_rows(n: int) -> list[tuple[str, str]]:
    """``n`` distinct queries over six intents (the CLI's single-file evaluation reads rows after the first 120)."""
    intents = ("card_arrival", "card_linking", "exchange_rate", "lost_or_stolen_card", "card_not_working",
               "automatic_top_up")
    return [(f"question number {i} about my account", intents[i % len(intents)]) for i in range(n)]


# -- the data -----------------------------------------------------------------------------------------------------
def test_intents_are_the_77_names_with_their_odd_spellings():
    assert len(INTENTS) == len(set(INTENTS)) == 77
    assert "Refund_not_showing_up" in INTENTS and "reverted_card_payment?" in INTENTS
    assert set(json.loads((FIXTURE / "categories.json").read_text())) == set(INTENTS)  # as shipped with the data


def test_csv_loads_every_distinct_query_stripped_with_its_intent_and_row_index():
    examples = load_banking77(str(FIXTURE / "train.csv"))
    lines = (FIXTURE / "train.csv").read_text().count("\n")
    assert 40 <= len(examples) < lines  # the twice-held query is read once
    queries = [e.query for e in examples]
    assert len(set(queries)) == len(queries) and all(q == q.strip() for q in queries)
    first = examples[0]
    assert first.query == "A card has been sent to me, how do I track it?" and first.intent == "card_arrival"
    assert first.index == 0 and set(first.inputs().keys()) == {"query"}
    assert any("," in q and '"' in q for q in queries)  # the quoted row with commas survived the CSV reader
    assert {e.intent for e in examples} <= set(INTENTS)


def test_the_hub_layout_folder_maps_its_class_labels_to_the_same_rows(tmp_path):
    hub = load_banking77(str(FIXTURE / "hub"), split="train")
    csv_rows = load_banking77(str(FIXTURE / "train.csv"))
    assert [(e.query, e.intent) for e in hub] == [(e.query, e.intent) for e in csv_rows]
    test = load_banking77(str(FIXTURE / "hub"), split="test")
    assert test and not {e.query for e in test} & {e.query for e in hub}
    one_file = load_banking77(str(FIXTURE / "hub" / "data" / "test-00000-of-00001.jsonl"))
    assert [e.query for e in one_file] == [e.query for e in test]
    # A file of string labels is read as the intents themselves.
    strings = tmp_path / "strings.jsonl"
    strings.write_text(json.dumps({"text": "where is my card", "category": "card_arrival"}) + "\n")
    assert [(e.query, e.intent) for e in load_banking77(str(strings))] == [("where is my card", "card_arrival")]


@pytest.mark.parametrize(("content", "error"), [
    ("", "is empty: expected the header line text,category"),
    ("query,label\nhello,card_arrival\n", "lacks the columns 'text', 'category'"),
    ("text,category\n", "has the header line but no rows"),
    ("text,category\nwhere is my card,card_arival\n",
     r"line 2: unknown intent 'card_arival'.*did you mean 'card_arrival'"),
    ("text,category\nfine,card_arrival\n  ,card_arrival\n", "line 3: the text is empty"),
    ("text,category\nwhere is my card,\n", "line 2: no intent"),
])
def test_a_bad_csv_is_one_error_naming_the_file_and_line(tmp_path, content, error):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=error):
        load_banking77(str(path))


def test_bad_sources_and_categories_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_banking77(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="Banking77 source must be"):
        load_banking77("")
    (tmp_path / "latin1.csv").write_bytes("text,category\ncaf\xe9,card_arrival\n".encode("latin-1"))
    with pytest.raises(ValueError, match="is not UTF-8"):
        load_banking77(str(tmp_path / "latin1.csv"))
    data = write_csv(tmp_path / "rows.csv", [("where is my card", "card_arrival"), ("rate?", "exchange_rate")])
    (tmp_path / "categories.json").write_text(json.dumps(["card_arrival"]))
    with pytest.raises(ValueError, match=r"line 3: unknown intent 'exchange_rate', not one of .*categories.json"):
        load_banking77(str(data))
    (tmp_path / "categories.json").write_text(json.dumps(["card_arrival", "card_arival"]))
    with pytest.raises(ValueError, match="card_arival.*is not a Banking77 intent.*did you mean 'card_arrival'"):
        load_banking77(str(data))
    (tmp_path / "categories.json").write_text(json.dumps(["card_arrival", "card_arrival"]))
    with pytest.raises(ValueError, match="more than once"):
        load_banking77(str(data))
    (tmp_path / "categories.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON list"):
        load_banking77(str(data))
    (tmp_path / "categories.json").write_text(json.dumps(["card_arrival", "exchange_rate"]))
    assert [e.intent for e in load_banking77(str(data))] == ["card_arrival", "exchange_rate"]


def test_splits_are_seeded_disjoint_ranges_of_one_order():
    source = str(FIXTURE / "train.csv")
    parts = banking77_splits(source, seed=3, sizes={"train": 20, "selection": 10, "test": 12})
    assert [len(parts[name]) for name in ("train", "selection", "test")] == [20, 10, 12]
    seen = [e.query for part in parts.values() for e in part]
    assert len(seen) == len(set(seen))
    again = banking77_splits(source, seed=3, sizes={"train": 20, "selection": 10, "test": 12})
    assert [e.query for e in again["test"]] == [e.query for e in parts["test"]]
    other = banking77_splits(source, seed=4, sizes={"train": 20, "selection": 10, "test": 12})
    assert [e.query for e in other["train"]] != [e.query for e in parts["train"]]
    assert [e.query for e in parts["train"]] == [e.query for e in seeded_order(load_banking77(source), 3)[:20]]
    with pytest.raises(ValueError, match=r"distinct queries; 500 are needed \(train 400, test 100\)"):
        banking77_splits(source, seed=3, sizes={"train": 400, "test": 100})


def test_task_reads_training_then_held_out_rows_of_one_file_without_overlap(tmp_path):
    source = str(write_csv(tmp_path / "many.csv", many_rows(150)))
    train = BANKING77.load_trainset(TaskData(source=source, seed=5))
    held_out = BANKING77.load_evalset(TaskData(source=source, seed=5))
    assert len(train) == BANKING77.default_train_n == 80 and len(held_out) == 150 - 120
    assert not {e.query for e in train} & {e.query for e in held_out}
    assert len(BANKING77.load_evalset(TaskData(source=source, seed=5, n=7))) == 7
    with pytest.raises(ValueError, match="evaluation reads those after the first 120"):
        BANKING77.load_evalset(TaskData(source=str(FIXTURE / "train.csv")))
    # A hub-layout folder: training reads its train split, evaluation its test split whole.
    hub = str(FIXTURE / "hub")
    assert {e.query for e in BANKING77.load_evalset(TaskData(source=hub))} == \
        {e.query for e in load_banking77(hub, split="test")}


# -- the program and the metric -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("answer", "intent"), [
    ("card_arrival", "card_arrival"),
    ("Card arrival", "card_arrival"),
    ("  'CARD-ARRIVAL'. ", "card_arrival"),
    ("Intent: exchange_rate", "exchange_rate"),
    ("reverted_card_payment?", "reverted_card_payment?"),
    ("reverted card payment", "reverted_card_payment?"),
    ("refund_not_showing_up", "Refund_not_showing_up"),
    ("**lost_or_stolen_card**", "lost_or_stolen_card"),
])
def test_parse_intent_forgives_case_separators_labels_and_marks(answer, intent):
    assert parse_intent(answer) == intent


@pytest.mark.parametrize("answer", [None, "", "card", "card_arrival or card_linking", "I do not know"])
def test_parse_intent_names_nothing_for_a_non_intent(answer):
    assert parse_intent(answer) is None


def test_metric_scores_and_its_feedback_names_the_expected_intent():
    gold = dspy.Example(query="where is my card", intent="card_arrival").with_inputs("query")
    right = intent_match(gold, dspy.Prediction(intent="card_arrival"))
    assert right.score == 1.0 and "expected intent card_arrival" in right.feedback
    wrong = intent_match(gold, dspy.Prediction(intent="card_delivery_estimate"))
    assert wrong.score == 0.0 and wrong.feedback == (
        "wrong intent: expected intent card_arrival, got card_delivery_estimate")
    unparsed = intent_match(gold, dspy.Prediction(intent="my card"))
    assert unparsed.score == 0.0 and "'my card', which is not one of the 77 Banking77 intents" in unparsed.feedback
    with pytest.raises(ValueError, match="not one of the 77"):
        intent_match(dspy.Example(query="q", intent="no_such_intent"), dspy.Prediction(intent="card_arrival"))


def test_program_lists_the_intents_and_refuses_an_answer_outside_them():
    program = make_program()
    with dspy.context(lm=dspy.utils.DummyLM([{"intent": "card_linking"}])):
        assert program(query="how do I link my card").intent == "card_linking"
    with dspy.context(lm=dspy.utils.DummyLM([{"intent": "link_card"}])), pytest.raises(Exception, match="intent"):
        make_program()(query="how do I link my card")
    adapter_prompt = dspy.ChatAdapter().format_field_structure(intent_signature())
    assert "reverted_card_payment?" in adapter_prompt and "Refund_not_showing_up" in adapter_prompt
    assert intent_signature(["card_arrival", "card_linking"]).output_fields["intent"].annotation.__args__ == (
        "card_arrival", "card_linking")
    with pytest.raises(ValueError, match="distinct non-empty names"):
        intent_signature(["card_arrival", "card_arrival"])


# -- the command line ---------------------------------------------------------------------------------------------
def classifier(call):
    """Sampled rollouts spread over six intents (so groups are mixed); greedy calls say card_arrival."""
    reply = default_reflection(call)
    if reply is not None:
        return reply
    choices = ("card_arrival", "card_linking", "exchange_rate", "lost_or_stolen_card", "card_not_working",
               "automatic_top_up")
    return {"intent": choices[call.seed % len(choices)] if call.seed is not None else "card_arrival"}


@pytest.fixture
def scripted(monkeypatch):
    lm = scripted_lm(classifier)
    monkeypatch.setattr(cli, "make_lm", lambda spec, **kwargs: lm)
    return lm


def test_cli_trains_with_the_tasks_selection_rows_then_evaluates_the_library(scripted, tmp_path, capsys):
    source = str(write_csv(tmp_path / "many.csv", many_rows(150)))
    out = tmp_path / "run"
    assert cli.main(["train", "--task", "banking77", "--source", source, "--n", "8", "--group-size", "2",
                     "--num-threads", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "8 training examples" in printed and "selection set: 40 examples" in printed
    assert (out / "library.json").is_file()
    policy = [c for c in scripted._engine_spec.calls if c.kind == "policy"]
    assert policy and all("query" in c.inputs for c in policy)

    library = ExperienceLibrary.from_texts(["When a query asks where a card is, answer card_arrival."])
    library.save(tmp_path / "lib.json")
    assert cli.main(["eval", "--task", "banking77", "--source", source, "--n", "6", "--seed", "0",
                     "--library", str(tmp_path / "lib.json"), "--out", str(tmp_path / "eval.json")]) == 0
    reports = json.loads((tmp_path / "eval.json").read_text())
    assert reports["with library"]["library_size"] == 1 and reports["no library"]["num_examples"] == 6


def test_cli_on_a_csv_too_small_to_evaluate_says_why(scripted, tmp_path, capsys):
    assert cli.main(["eval", "--task", "banking77", "--source", str(FIXTURE / "train.csv")]) == 2
    assert "evaluation reads those after the first 120" in capsys.readouterr().err


def test_cli_evaluates_a_hub_layout_folder_test_split_whole(scripted, tmp_path, capsys):
    hub = tmp_path / "hub"
    shutil.copytree(FIXTURE / "hub", hub)
    assert cli.main(["eval", "--task", "banking77", "--source", str(hub), "--out", str(tmp_path / "e.json")]) == 0
    report = json.loads((tmp_path / "e.json").read_text())["no library"]
    assert report["num_examples"] == len(load_banking77(str(hub), split="test"))


def test_the_prompt_lists_the_intents_once_before_the_query_so_calls_share_them():
    from tfgrpo_dspy.kits.banking77.program import IntentPredict, ListedOnceChatAdapter

    program = make_program()
    assert isinstance(program, IntentPredict)
    lm = scripted_lm(lambda call: {"intent": "card_arrival"})
    with dspy.context(lm=lm):
        assert program(query="where is my card").intent == "card_arrival"
        program(query="what is the exchange rate")
    first, second = (entry["messages"] for entry in lm.history[-2:])
    assert first[:-1] == second[:-1] and "reverted_card_payment?" in first[0]["content"]  # the shared prefix
    assert "where is my card" in first[-1]["content"] and "exchange rate" in second[-1]["content"]
    assert not any(intent in turn[-1]["content"] for turn in (first, second) for intent in INTENTS)
    stock = dspy.ChatAdapter().user_message_output_requirements(intent_signature())
    listed_once = ListedOnceChatAdapter().user_message_output_requirements(intent_signature())
    assert "card_arrival" in stock and "card_arrival" not in listed_once
    assert listed_once.startswith("Respond with the corresponding output fields") and "[[ ## completed ## ]]" in \
        listed_once
    # Another adapter is left as configured; a configured ChatAdapter keeps its options.
    with dspy.context(lm=scripted_lm(lambda call: '{"intent": "card_linking"}'), adapter=dspy.JSONAdapter()):
        assert make_program()(query="link my card").intent == "card_linking"
