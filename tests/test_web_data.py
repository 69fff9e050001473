"""WebWalkerQA loading (local folder mirroring the hub, single files) and stratified subsets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import dspy
import pytest

from tfgrpo_dspy.kits.web.data import (
    load_webwalkerqa,
    load_webwalkerqa_subset,
    row_to_example,
    stratified_subset,
)

FIXTURE = Path(__file__).parent / "fixtures" / "web" / "webwalkerqa"


def test_loads_both_splits_of_a_hub_layout_folder():
    main = load_webwalkerqa(str(FIXTURE), split="main")
    silver = load_webwalkerqa(str(FIXTURE), split="silver")
    assert len(main) == 34 and len(silver) == 24
    assert Counter(e.difficulty for e in main) == {"easy": 8, "medium": 14, "hard": 12}
    director = next(e for e in main if e.question.startswith("Who is the director"))
    assert director.answer == "Ada Lovelace"
    assert director.root_url == "http://SITE_ROOT/"
    assert (director.type, director.domain, director.lang) == ("single_source", "organization", "en")
    assert set(director.inputs().keys()) == {"question", "root_url"}
    assert set(director.labels().keys()) == {"answer", "difficulty", "type", "domain", "lang"}


def test_loads_a_single_jsonl_or_parquet_file(tmp_path):
    rows = [json.loads(line) for line in (FIXTURE / "data" / "main-00000-of-00001.jsonl").open()]
    rows[0]["answer"] = ""  # an empty gold answer cannot be graded: skipped
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in rows))
    assert len(load_webwalkerqa(str(jsonl))) == 33

    import pandas as pd

    parquet = tmp_path / "mine.parquet"
    pd.DataFrame(rows[1:]).to_parquet(parquet)
    loaded = load_webwalkerqa(str(parquet))
    assert [e.question for e in loaded] == [row["question"] for row in rows[1:]]


def test_rejects_bad_sources_and_splits(tmp_path):
    with pytest.raises(ValueError, match="split"):
        load_webwalkerqa(str(FIXTURE), split="train")
    with pytest.raises(ValueError, match="neither an existing file or folder nor a hub id"):
        load_webwalkerqa(str(tmp_path / "missing" / "data.jsonl"))
    csv = tmp_path / "x.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(ValueError, match=r"\.jsonl, \.json or \.parquet"):
        load_webwalkerqa(str(csv))


def test_row_with_wrong_keys_names_what_it_has():
    with pytest.raises(ValueError, match=r"lacks \['question', 'answer', 'root_url'\].*'Question'"):
        row_to_example({"Question": "q", "Answer": "a", "Root_Url": "http://x/"}, 3)


def _pool(easy: int, medium: int, hard: int) -> list[dspy.Example]:
    counts = {"easy": easy, "medium": medium, "hard": hard}
    return [
        dspy.Example(question=f"{level}-{i}", answer="a", root_url="http://x/", difficulty=level)
        for level, count in counts.items()
        for i in range(count)
    ]


@pytest.mark.parametrize("n, expected", [(17, (4, 7, 6)), (34, (8, 14, 12)), (10, (2, 4, 4)), (1, (0, 1, 0))])
def test_stratified_subset_follows_4_7_6(n, expected):
    subset = stratified_subset(_pool(40, 40, 40), n, seed=3)
    counts = Counter(e.difficulty for e in subset)
    assert (counts["easy"], counts["medium"], counts["hard"]) == expected
    assert len({e.question for e in subset}) == n


def test_stratified_subset_is_seeded_and_fills_short_levels():
    pool = _pool(40, 40, 40)
    assert stratified_subset(pool, 17, seed=1) == stratified_subset(pool, 17, seed=1)
    assert stratified_subset(pool, 17, seed=1) != stratified_subset(pool, 17, seed=2)
    short = stratified_subset(_pool(1, 40, 40), 17, seed=0)  # easy wants 4, has 1
    assert len(short) == 17 and Counter(e.difficulty for e in short)["easy"] == 1


def test_stratified_subset_rejects_bad_n():
    with pytest.raises(ValueError, match="n must be"):
        stratified_subset(_pool(1, 1, 1), 4)
    with pytest.raises(ValueError, match="n must be"):
        stratified_subset(_pool(1, 1, 1), 0)


def test_subset_from_the_fixture_main_split():
    subset = load_webwalkerqa_subset(17, seed=0, source=str(FIXTURE), split="main")
    assert Counter(e.difficulty for e in subset) == {"easy": 4, "medium": 7, "hard": 6}
    everything = load_webwalkerqa_subset(None, seed=0, source=str(FIXTURE), split="silver")
    assert len(everything) == 24
