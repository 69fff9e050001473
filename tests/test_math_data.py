"""Math loaders, read through `datasets` from tmp folders that mirror each hub repository's layout."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfgrpo_dspy.kits.math.data import (
    DAPO_PREFIX,
    DAPO_SUFFIX,
    gsm8k_final_answer,
    load_aime24,
    load_aime25,
    load_dapo_math,
    load_gsm8k,
    strip_dapo_wrapper,
)

DAPO_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("index", pa.string())])),
    ]
)


def _dapo_row(problem: str, answer: str, index: str, wrap: bool = True) -> dict:
    content = f"{DAPO_PREFIX}{problem}{DAPO_SUFFIX}" if wrap else problem
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": content, "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lm"},
        "extra_info": {"index": index},
    }


def _write_parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


@pytest.fixture
def dapo_repo(tmp_path: Path) -> Path:
    """BytedTsinghua-SIA/DAPO-Math-17k: data/dapo-math-17k.parquet, every problem repeated."""
    # Problem texts start/end with characters of the wrapper: str.strip(charset) would eat them.
    problems = [(f"Solve {i} + x = {2 * i}. Find x.", str(i)) for i in range(12)]
    problems.append(("Remember: n! ends in how many zeros for n=25?", "6"))
    rows = [_dapo_row(p, a, f"id-{i}") for _ in range(3) for i, (p, a) in enumerate(problems)]
    _write_parquet(tmp_path / "DAPO-Math-17k" / "data" / "dapo-math-17k.parquet", rows, DAPO_SCHEMA)
    return tmp_path / "DAPO-Math-17k"


def test_dapo_dedupes_strips_wrapper_exactly_and_keeps_metadata(dapo_repo: Path) -> None:
    examples = load_dapo_math(str(dapo_repo))
    assert len(examples) == 13  # 39 rows, 13 distinct problems
    by_problem = {e.problem: e for e in examples}
    assert "Remember: n! ends in how many zeros for n=25?" in by_problem
    example = by_problem["Solve 3 + x = 6. Find x."]
    assert example.answer == "3"
    assert example.index == "id-3" and example.data_source == "math_dapo"
    assert example.inputs().keys() == ["problem"]


def test_dapo_sampling_is_seeded_and_skip_gives_disjoint_sets(dapo_repo: Path) -> None:
    first = [e.problem for e in load_dapo_math(str(dapo_repo), n=5, seed=42)]
    again = [e.problem for e in load_dapo_math(str(dapo_repo), n=5, seed=42)]
    other_seed = [e.problem for e in load_dapo_math(str(dapo_repo), n=5, seed=7)]
    held_out = [e.problem for e in load_dapo_math(str(dapo_repo), n=5, seed=42, skip=5)]
    assert first == again
    assert first != other_seed
    assert not set(first) & set(held_out)
    assert len(held_out) == 5


def test_dapo_without_wrapper_keeps_text_and_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [_dapo_row("What is 2+2?", "4", "a", wrap=False), _dapo_row("What is 3+3?", "6", "b")]
    path = tmp_path / "dapo.parquet"
    _write_parquet(path, rows, DAPO_SCHEMA)
    with caplog.at_level(logging.WARNING):
        examples = load_dapo_math(str(path))
    assert sorted(e.problem for e in examples) == ["What is 2+2?", "What is 3+3?"]
    assert "1 of 2 DAPO-Math problems lacked" in caplog.text


def test_strip_dapo_wrapper_only_removes_exact_strings() -> None:
    assert strip_dapo_wrapper(f"{DAPO_PREFIX}Solve x.\n\nRemember{DAPO_SUFFIX}") == ("Solve x.\n\nRemember", True)
    assert strip_dapo_wrapper("Solve the following: 1+1") == ("Solve the following: 1+1", False)


def test_aime24_folder_layout(tmp_path: Path) -> None:
    repo = tmp_path / "aime_2024"
    rows = [
        {"id": 60 + i, "problem": f"P{i}", "solution": "s", "answer": str(100 + i), "url": "u", "year": "2024"}
        for i in range(3)
    ]
    _write_parquet(repo / "data" / "train-00000-of-00001.parquet", rows)
    examples = load_aime24(str(repo))
    assert [(e.problem, e.answer, e.id) for e in examples] == [("P0", "100", 60), ("P1", "101", 61), ("P2", "102", 62)]
    # The worked solution is a reflection-only label: kept, and never an input of the policy.
    assert examples[0].solution == "s" and "solution" not in examples[0].inputs()


def test_aime25_yentinglin_layout_uses_default_config(tmp_path: Path) -> None:
    repo = tmp_path / "aime_2025"
    _write_parquet(repo / "data" / "train-00000-of-00001.parquet", [{"problem": "Q", "answer": "70", "id": "0"}])
    _write_parquet(repo / "part1" / "train-00000-of-00001.parquet", [{"question": "other", "answer": "1"}])
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n"
        "- config_name: part1\n  data_files:\n  - split: train\n    path: part1/train-*\n---\n# AIME 2025\n"
    )
    assert [(e.problem, e.answer) for e in load_aime25(str(repo))] == [("Q", "70")]


def test_aime25_opencompass_layout_joins_both_configs(tmp_path: Path) -> None:
    repo = tmp_path / "AIME2025"
    repo.mkdir()
    for part, offset in (("I", 0), ("II", 10)):
        lines = [json.dumps({"question": f"{part}-{i}", "answer": str(offset + i)}) for i in range(2)]
        (repo / f"aime2025-{part}.jsonl").write_text("\n".join(lines) + "\n")
    (repo / "README.md").write_text(
        "---\nlicense: mit\nconfigs:\n  - config_name: AIME2025-I\n    data_files:\n      - split: test\n"
        "        path: aime2025-I.jsonl\n  - config_name: AIME2025-II\n    data_files:\n      - split: test\n"
        "        path: aime2025-II.jsonl\n---\n\n# AIME 2025 Dataset\n"
    )
    examples = load_aime25(str(repo))
    assert [(e.problem, e.answer, e.exam) for e in examples] == [
        ("I-0", "0", "AIME2025-I"),
        ("I-1", "1", "AIME2025-I"),
        ("II-0", "10", "AIME2025-II"),
        ("II-1", "11", "AIME2025-II"),
    ]


@pytest.fixture
def gsm8k_repo(tmp_path: Path) -> Path:
    """openai/gsm8k: main/ and socratic/ configs, each with train and test parquet shards."""
    repo = tmp_path / "gsm8k"
    for config in ("main", "socratic"):
        for split, count in (("train", 4), ("test", 3)):
            rows = [
                {"question": f"{config} {split} q{i}?", "answer": f"Work <<1+1=2>>.\n#### {1000 * (i + 1):,}"}
                for i in range(count)
            ]
            _write_parquet(repo / config / f"{split}-00000-of-00001.parquet", rows)
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n- config_name: socratic\n  data_files:\n  - split: train\n"
        "    path: socratic/train-*\n  - split: test\n    path: socratic/test-*\n---\n"
    )
    return repo


def test_gsm8k_folder_reads_main_config_and_numeric_answers(gsm8k_repo: Path) -> None:
    test = load_gsm8k(str(gsm8k_repo), split="test")
    assert [(e.problem, e.answer) for e in test] == [
        ("main test q0?", "1000"),
        ("main test q1?", "2000"),
        ("main test q2?", "3000"),
    ]
    train = load_gsm8k(str(gsm8k_repo), split="train", n=2, seed=3)
    assert len(train) == 2 and all(e.problem.startswith("main train") for e in train)
    assert [e.problem for e in train] == [e.problem for e in load_gsm8k(str(gsm8k_repo), split="train", n=2, seed=3)]


def test_gsm8k_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"question": "How many?", "answer": "2 + 2 = 4\n#### 4"}) + "\n")
    [example] = load_gsm8k(str(path))
    assert (example.problem, example.answer, example.index) == ("How many?", "4", 0)


def test_gsm8k_final_answer_rejects_missing_marker() -> None:
    assert gsm8k_final_answer("so\n#### -1,234") == "-1234"
    with pytest.raises(ValueError, match="####"):
        gsm8k_final_answer("no marker here")


@pytest.mark.parametrize("bad", ["", None, 3])
def test_bad_source_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="source"):
        load_gsm8k(bad)  # type: ignore[arg-type]


def test_bad_file_type_and_n_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("question,answer\n")
    with pytest.raises(ValueError, match=".jsonl, .json or .parquet"):
        load_gsm8k(str(path))
    with pytest.raises(ValueError, match="n must be"):
        load_dapo_math(str(path), n=-1)


def test_gsm8k_keeps_the_worked_solution_as_a_label_and_splits_disjointly(tmp_path):
    from tfgrpo_dspy.kits.math.data import gsm8k_splits

    path = tmp_path / "gsm8k.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Q{i}?", "answer": f"Half of {2 * i} is <<{2 * i}/2={i}>>{i}."
                                          f"\n#### {i}"}) for i in range(20)))
    parts = gsm8k_splits(str(path), seed=3, sizes={"train": 5, "selection": 5, "test": 8})
    assert [len(p) for p in parts.values()] == [5, 5, 8]
    problems = [e.problem for p in parts.values() for e in p]
    assert len(set(problems)) == 18  # disjoint
    example = parts["train"][0]
    assert example.solution == f"Half of {2 * int(example.answer)} is {example.answer}."
    assert set(example.inputs().keys()) == {"problem"}
    assert gsm8k_splits(str(path), seed=3, sizes={"train": 5, "selection": 5, "test": 8})["test"] == parts["test"]
    with pytest.raises(ValueError, match="20 GSM8K problems; 30 are needed"):
        gsm8k_splits(str(path), seed=3, sizes={"train": 30})
