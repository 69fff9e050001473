"""Loaders for the math data sets, all returning ``dspy.Example(problem=..., answer=..., **metadata)``.

Each loader takes a ``source``: a Hugging Face hub id (the default), a local folder that mirrors the
hub layout (read with ``datasets.load_dataset(folder)``, same configs and splits), or a single local
``.jsonl`` / ``.json`` / ``.parquet`` file with the same columns.
"""

from __future__ import annotations

import logging
import random
import re
from pathlib import Path
from typing import Any

import datasets
import dspy

from tfgrpo_dspy.kits import datasource

logger = logging.getLogger(__name__)

DAPO_MATH_HUB_ID = "BytedTsinghua-SIA/DAPO-Math-17k"
AIME24_HUB_ID = "HuggingFaceH4/aime_2024"
AIME25_HUB_ID = "yentinglin/aime_2025"
AIME25_OPENCOMPASS_HUB_ID = "opencompass/AIME2025"
GSM8K_HUB_ID = "openai/gsm8k"

# DAPO-Math-17k wraps every problem in this fixed instruction (checked against public copies).
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
OPENCOMPASS_AIME25_CONFIGS = ("AIME2025-I", "AIME2025-II")


def load_rows(source: str, *, split: str, config: str | None = None) -> datasets.Dataset:
    """Rows of ``source`` (hub id, hub-layout folder, or one file; a file has a single split). A local source
    is read with no network access (`tfgrpo_dspy.kits.datasource`)."""
    return datasource.load_rows(source, split=split, config=config)


def strip_dapo_wrapper(text: str) -> tuple[str, bool]:
    """Remove DAPO's fixed prefix and suffix as exact strings. Returns (problem, both_found)."""
    has_prefix, has_suffix = text.startswith(DAPO_PREFIX), text.endswith(DAPO_SUFFIX)
    if has_prefix:
        text = text[len(DAPO_PREFIX) :]
    if has_suffix:
        text = text[: -len(DAPO_SUFFIX)]
    return text, has_prefix and has_suffix


def load_dapo_math(
    source: str = DAPO_MATH_HUB_ID, *, n: int | None = None, seed: int = 42, skip: int = 0
) -> list[dspy.Example]:
    """DAPO-Math-17k problems: deduplicated by problem text, shuffled with ``seed``, rows
    ``[skip, skip + n)`` of that order (the paper's reference: dedupe, seed 42, first 100).

    Metadata: ``data_source``, ``index`` (extra_info.index of the first copy).
    """
    _check_count("n", n)
    _check_count("skip", skip)
    rows = load_rows(source, split="train")
    _require_columns(rows, ("prompt", "reward_model"), source)
    seen: set[str] = set()
    examples: list[dspy.Example] = []
    unwrapped = 0
    for batch in rows.iter(batch_size=10_000):
        extra_infos = batch.get("extra_info") or [None] * len(batch["prompt"])
        data_sources = batch.get("data_source") or [None] * len(batch["prompt"])
        for prompt, reward_model, extra_info, data_source in zip(
            batch["prompt"], batch["reward_model"], extra_infos, data_sources, strict=True
        ):
            problem, wrapped = strip_dapo_wrapper(_user_text(prompt))
            problem = problem.strip()
            if problem in seen:
                continue
            seen.add(problem)
            unwrapped += not wrapped
            metadata = {"data_source": data_source, "index": (extra_info or {}).get("index")}
            examples.append(_example(problem, str(reward_model["ground_truth"]).strip(), metadata))
    if unwrapped:
        logger.warning(
            "%d of %d DAPO-Math problems lacked the expected prompt prefix or suffix; kept their text as is",
            unwrapped,
            len(examples),
        )
    random.Random(seed).shuffle(examples)
    end = None if n is None else skip + n
    return examples[skip:end]


def load_aime24(source: str = AIME24_HUB_ID) -> list[dspy.Example]:
    """AIME 2024 (30 problems). Labels: ``answer`` and ``solution`` (for the reflection); metadata ``id``,
    ``year``, ``url`` when present."""
    return _aime_examples(load_rows(source, split="train"), source, dataset="aime24")


def load_aime25(source: str = AIME25_HUB_ID) -> list[dspy.Example]:
    """AIME 2025 (30 problems), from ``yentinglin/aime_2025`` (split train) or from
    ``opencompass/AIME2025`` (configs AIME2025-I and AIME2025-II, split test, joined in that order)."""
    if not Path(source).is_file() and set(OPENCOMPASS_AIME25_CONFIGS) <= set(datasource.config_names(source)):
        examples = []
        for config in OPENCOMPASS_AIME25_CONFIGS:
            part = _aime_examples(load_rows(source, split="test", config=config), source, dataset="aime25")
            examples.extend(example.copy(exam=config) for example in part)
        return examples
    return _aime_examples(load_rows(source, split="train"), source, dataset="aime25")


def load_gsm8k(
    source: str = GSM8K_HUB_ID, *, split: str = "test", n: int | None = None, seed: int = 0, skip: int = 0
) -> list[dspy.Example]:
    """GSM8K (config ``main``): the answer is the number after ``####``, commas removed.

    With ``n`` or ``skip``, rows ``[skip, skip + n)`` of the order shuffled with ``seed`` (so two
    calls with the same seed and non-overlapping ranges never share a problem); with neither, all
    rows in file order. Labels: ``answer`` and ``solution`` (the worked solution, for the reflection
    only: it is never an input). Metadata: ``index`` (the row's position in the split).
    """
    _check_count("n", n)
    _check_count("skip", skip)
    rows = load_rows(source, split=split, config="main")
    _require_columns(rows, ("question", "answer"), source)
    examples = [
        _example(row["question"].strip(), gsm8k_final_answer(row["answer"]),
                 {"solution": gsm8k_worked_solution(row["answer"]), "index": index})
        for index, row in enumerate(rows)
    ]
    if n is not None or skip:
        random.Random(seed).shuffle(examples)
        examples = examples[skip : None if n is None else skip + n]
    return examples


def gsm8k_final_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K solution, commas removed."""
    match = re.search(r"####\s*(.+?)\s*$", solution)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {solution[-80:]!r}")
    return match.group(1).replace(",", "").strip()


def gsm8k_worked_solution(solution: str) -> str:
    """The reasoning of a GSM8K solution: the calculator annotations ``<<48/2=24>>`` and the ``####`` line removed."""
    text = re.sub(r"<<[^<>]*>>", "", solution)
    return re.sub(r"\n?####.*$", "", text, flags=re.DOTALL).strip()


def gsm8k_splits(source: str, *, seed: int, sizes: dict[str, int]) -> dict[str, list[dspy.Example]]:
    """Disjoint, seeded parts of one GSM8K split (``sizes``: part name -> rows, taken in that order)."""
    total = sum(sizes.values())
    examples = load_gsm8k(source, split="train", n=total, seed=seed)
    if len(examples) < total:
        raise ValueError(f"source {source!r} has {len(examples)} GSM8K problems; {total} are needed")
    parts, start = {}, 0
    for name, size in sizes.items():
        parts[name] = examples[start : start + size]
        start += size
    return parts


def _aime_examples(rows: datasets.Dataset, source: str, *, dataset: str) -> list[dspy.Example]:
    problem_column = "problem" if "problem" in rows.column_names else "question"
    _require_columns(rows, (problem_column, "answer"), source)
    examples = []
    for index, row in enumerate(rows):
        metadata: dict[str, Any] = {key: row[key] for key in ("id", "year", "url") if key in row}
        metadata.setdefault("id", index)
        if row.get("solution"):  # AIME 2024 has worked solutions: a reflection-only label, never an input
            metadata["solution"] = str(row["solution"]).strip()
        examples.append(_example(row[problem_column].strip(), str(row["answer"]).strip(), metadata))
    logger.info("Loaded %d %s problems from %s", len(examples), dataset, source)
    return examples


def _user_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    messages = [message for message in prompt if message.get("role") == "user"] or list(prompt)
    if not messages:
        raise ValueError("DAPO-Math row has an empty prompt")
    return str(messages[0]["content"])


def _example(problem: str, answer: str, metadata: dict[str, Any]) -> dspy.Example:
    return dspy.Example(problem=problem, answer=answer, **metadata).with_inputs("problem")


def _require_columns(rows: datasets.Dataset, columns: tuple[str, ...], source: str) -> None:
    missing = [column for column in columns if column not in rows.column_names]
    if missing:
        raise ValueError(f"source {source!r} lacks columns {missing}; it has {rows.column_names}")


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError(f"{name} must be a non-negative int or None, got {value!r}")
