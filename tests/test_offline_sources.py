"""Offline means offline: with a local --source, no loader of any kit touches the network.

`datasets.load_dataset` sent a download-count request (a DNS lookup first) even for a local file; the test
blocks every socket connect and name lookup, records each attempt, and runs every task's loaders on small
local files and folders in the hub layout.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from test_math_data import DAPO_SCHEMA, _dapo_row, _write_parquet

from tfgrpo_dspy.cli import TASKS
from tfgrpo_dspy.tasks import TaskData

WEB_FIXTURE = Path(__file__).parent / "fixtures" / "web" / "webwalkerqa"
BANKING77_FIXTURE = Path(__file__).parent / "fixtures" / "banking77" / "hub"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every attempt to reach the network, refused and recorded (a library may swallow the error)."""
    attempts: list[str] = []

    def refuse(what: str):
        def blocked(*args, **kwargs):
            attempts.append(f"{what}{args[:2]!r}")
            raise OSError(f"network access blocked by the test: {what}")

        return blocked

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect_ex"))
    return attempts


def _sources(root: Path) -> dict[str, list[str]]:
    """task name -> local sources (folders in the hub layout and single files) for it."""
    dapo = root / "DAPO-Math-17k"
    rows = [_dapo_row(f"Solve {i} + x = {2 * i}.", str(i), f"id-{i}") for i in range(4)]
    _write_parquet(dapo / "data" / "dapo-math-17k.parquet", rows, DAPO_SCHEMA)
    _write_parquet(root / "dapo.parquet", rows, DAPO_SCHEMA)

    gsm8k = root / "gsm8k"
    for split in ("train", "test"):
        lines = [{"question": f"{split} q{i}?", "answer": f"#### {i}"} for i in range(3)]
        _write_parquet(gsm8k / "main" / f"{split}-00000-of-00001.parquet", lines)
    (gsm8k / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
        "  - split: test\n    path: main/test-*\n---\n")
    (root / "gsm8k.jsonl").write_text("".join(json.dumps({"question": f"q{i}?", "answer": f"#### {i}"}) + "\n"
                                              for i in range(3)))

    aime24 = root / "aime_2024"
    _write_parquet(aime24 / "data" / "train-00000-of-00001.parquet",
                   [{"id": i, "problem": f"P{i}", "solution": "s", "answer": str(i)} for i in range(2)])
    aime25 = root / "AIME2025"
    aime25.mkdir()
    for part in ("I", "II"):
        (aime25 / f"aime2025-{part}.jsonl").write_text(json.dumps({"question": f"{part}?", "answer": "1"}) + "\n")
    (aime25 / "README.md").write_text(
        "---\nconfigs:\n  - config_name: AIME2025-I\n    data_files:\n      - split: test\n"
        "        path: aime2025-I.jsonl\n  - config_name: AIME2025-II\n    data_files:\n      - split: test\n"
        "        path: aime2025-II.jsonl\n---\n")
    (root / "aime.jsonl").write_text(json.dumps({"problem": "P?", "answer": "7"}) + "\n")

    web = root / "webwalkerqa"
    shutil.copytree(WEB_FIXTURE, web)
    shutil.copy(web / "data" / "main-00000-of-00001.jsonl", root / "web.jsonl")
    banking77 = root / "banking77"
    shutil.copytree(BANKING77_FIXTURE, banking77)
    # One file is one split: evaluation reads its rows after the first 120 of the seeded order, so it needs more.
    (root / "banking77.csv").write_text("text,category\n" + "".join(f"query {i}?,card_arrival\n" for i in range(130)))
    return {
        "banking77": [str(banking77), str(root / "banking77.csv")],
        "dapo-math": [str(dapo), str(root / "dapo.parquet")],
        "gsm8k": [str(gsm8k), str(root / "gsm8k.jsonl")],
        "aime24": [str(aime24), str(root / "aime.jsonl")],
        "aime25": [str(aime25), str(root / "aime.jsonl")],
        "webwalkerqa": [str(web), str(root / "web.jsonl")],
        "webwalkerqa-f1": [str(web), str(root / "web.jsonl")],
    }


def test_every_loader_reads_local_sources_without_the_network(tmp_path: Path, no_network: list[str]) -> None:
    sources = _sources(tmp_path)
    assert set(sources) | {"tickets", "wordproblems"} == set(TASKS)  # every task with data to load is covered
    loaded = {}
    for name, paths in sources.items():
        for source in paths:
            for load in (TASKS[name].load_trainset, TASKS[name].load_evalset):
                try:
                    loaded[(name, source, load.__name__)] = len(load(TaskData(source=source, n=2)))
                except ValueError as refused:  # benchmarks refuse to be trained on, before reading anything
                    assert "is an evaluation benchmark" in str(refused)
    for name in ("tickets", "wordproblems"):  # generated, never downloaded
        loaded[(name, "", "")] = len(TASKS[name].load_trainset(TaskData(n=2)))
    assert no_network == []
    assert sum(1 for count in loaded.values() if count) >= 18  # the loaders really read the files


def test_the_hub_is_online_again_after_a_local_load(tmp_path: Path, no_network: list[str]) -> None:
    import datasets.config
    import huggingface_hub.constants

    before = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    TASKS["gsm8k"].load_evalset(TaskData(source=_sources(tmp_path)["gsm8k"][1], n=1))
    assert (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE) == before


def test_a_folder_is_read_afresh_not_from_the_cache_of_another_folder_of_its_name(tmp_path: Path) -> None:
    from tfgrpo_dspy.kits import datasource

    readme = ("---\nconfigs:\n  - config_name: default\n    data_files:\n      - split: test\n"
              "        path: rows.jsonl\n---\n")
    for name, value in (("first", "one"), ("second", "two")):
        folder = tmp_path / name / "same_name"
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(readme)
        (folder / "rows.jsonl").write_text(json.dumps({"question": value}) + "\n")
    assert datasource.load_rows(str(tmp_path / "first" / "same_name"), split="test")["question"] == ["one"]
    assert datasource.load_rows(str(tmp_path / "second" / "same_name"), split="test")["question"] == ["two"]
    (tmp_path / "first" / "same_name" / "rows.jsonl").write_text(json.dumps({"question": "three"}) + "\n")
    assert datasource.load_rows(str(tmp_path / "first" / "same_name"), split="test")["question"] == ["three"]
