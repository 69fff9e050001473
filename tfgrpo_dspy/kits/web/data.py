"""WebWalkerQA (``callanwu/WebWalkerQA``): loading rows as `dspy.Example` and drawing stratified subsets.

The hub repository has two splits, ``main`` (680 human-checked questions) and ``silver``
(~14k unverified ones, meant as training data), stored as ``data/<split>-*.jsonl``.
Keys are lowercase: question, answer, root_url and info = {type, difficulty_level,
domain, lang, source_website, golden_path}.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.kits import datasource

logger = logging.getLogger(__name__)

HUB_ID = "callanwu/WebWalkerQA"
SPLITS = ("main", "silver")
DIFFICULTIES = ("easy", "medium", "hard")
# The reference draws subsets easy:medium:hard = 4:7:6, the proportions of the main split.
DIFFICULTY_RATIO: Mapping[str, int] = {"easy": 4, "medium": 7, "hard": 6}
REQUIRED_KEYS = ("question", "answer", "root_url")


def load_webwalkerqa(source: str | None = None, split: str = "main") -> list[dspy.Example]:
    """Load WebWalkerQA rows as examples with inputs ``question`` and ``root_url``.

    Args:
        source: a hub id (default ``callanwu/WebWalkerQA``), a local folder mirroring the
            hub layout, or a local ``.jsonl`` / ``.json`` / ``.parquet`` file (``split`` is
            then ignored: the file is one split).
        split: ``"main"`` or ``"silver"`` for a hub id or folder.

    Returns:
        ``dspy.Example(question, answer, root_url, difficulty, type, domain, lang)``, in file order.
    """
    rows = _read_rows(source or HUB_ID, split)
    examples, skipped = [], 0
    for index, row in enumerate(rows):
        example = row_to_example(row, index)
        if example is None:
            skipped += 1
        else:
            examples.append(example)
    if skipped:
        logger.warning("skipped %d WebWalkerQA rows without a question, answer or root_url", skipped)
    logger.info("loaded %d WebWalkerQA examples from %s (split %s)", len(examples), source or HUB_ID, split)
    return examples


def _read_rows(source: str, split: str) -> Iterable[Mapping[str, Any]]:
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source must be a hub id or a local path, got {source!r}")
    path = Path(source).expanduser()
    if not path.is_file():
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if not path.is_dir() and (source.count("/") != 1 or source.startswith((".", "/", "~"))):
            raise ValueError(f"source {source!r} is neither an existing file or folder nor a hub id (owner/name)")
    return datasource.load_rows(source, split=split)  # a local file or folder: no network access


def row_to_example(row: Mapping[str, Any], index: int = 0) -> dspy.Example | None:
    """One WebWalkerQA row -> example; None when a required value is empty.

    Raises:
        ValueError: the row lacks a required key (wrong file), naming the keys it has.
    """
    missing = [key for key in REQUIRED_KEYS if key not in row]
    if missing:
        raise ValueError(
            f"WebWalkerQA row {index} lacks {missing}; it has {sorted(row)} "
            "(expected lowercase keys question, answer, root_url, info)"
        )
    values = {key: str(row[key] or "").strip() for key in REQUIRED_KEYS}
    if not all(values.values()):
        return None
    info = row.get("info") or {}
    return dspy.Example(
        **values,
        difficulty=str(info.get("difficulty_level") or "").strip().lower(),
        type=str(info.get("type") or ""),
        domain=str(info.get("domain") or ""),
        lang=str(info.get("lang") or ""),
    ).with_inputs("question", "root_url")


def stratified_subset(
    examples: Sequence[dspy.Example],
    n: int,
    seed: int = 0,
    ratio: Mapping[str, int] = DIFFICULTY_RATIO,
) -> list[dspy.Example]:
    """``n`` examples drawn per difficulty in proportion to ``ratio`` (default easy:medium:hard = 4:7:6).

    Quotas are rounded by largest remainder; a difficulty with too few examples gives its
    shortfall to the others (drawn at random from what is left). The result is shuffled,
    and the same ``seed`` always gives the same subset.

    Raises:
        ValueError: ``n`` is not in 1..len(examples), or ``ratio`` has no positive weight.
    """
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= len(examples):
        raise ValueError(f"n must be an integer in 1..{len(examples)} (the number of examples), got {n!r}")
    if not ratio or any(w < 0 for w in ratio.values()) or sum(ratio.values()) <= 0:
        raise ValueError(f"ratio must map difficulties to non-negative weights, summing > 0; got {ratio!r}")
    rng = random.Random(seed)
    pools: dict[str, list[dspy.Example]] = {level: [] for level in ratio}
    for example in examples:
        pools.setdefault(example.get("difficulty", ""), []).append(example)
    for pool in pools.values():
        rng.shuffle(pool)

    chosen: list[dspy.Example] = []
    for level, quota in _quotas(n, ratio).items():
        taken = pools[level][:quota]
        pools[level] = pools[level][quota:]
        if len(taken) < quota:
            logger.warning("only %d %r examples for a quota of %d", len(taken), level, quota)
        chosen.extend(taken)
    if len(chosen) < n:
        leftover = [example for pool in pools.values() for example in pool]
        chosen.extend(rng.sample(leftover, n - len(chosen)))
    rng.shuffle(chosen)
    return chosen


def _quotas(n: int, ratio: Mapping[str, int]) -> dict[str, int]:
    total = sum(ratio.values())
    exact = {level: n * weight / total for level, weight in ratio.items()}
    quotas = {level: int(share) for level, share in exact.items()}
    by_remainder = sorted(ratio, key=lambda level: exact[level] - quotas[level], reverse=True)
    for level in by_remainder[: n - sum(quotas.values())]:
        quotas[level] += 1
    return quotas


def load_webwalkerqa_subset(
    n: int | None, seed: int = 0, source: str | None = None, split: str = "main"
) -> list[dspy.Example]:
    """Load a split and draw a stratified subset of ``n`` (all rows, shuffled by ``seed``, when n is None)."""
    examples = load_webwalkerqa(source, split)
    if not examples:
        raise ValueError(f"no WebWalkerQA examples in {source or HUB_ID} (split {split})")
    if n is None:
        examples = list(examples)
        random.Random(seed).shuffle(examples)
        return examples
    return stratified_subset(examples, n, seed)
