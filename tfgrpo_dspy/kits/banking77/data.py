"""Banking77 rows as ``dspy.Example(query=..., intent=..., index=...)``, from a local CSV or through ``datasets``.

A source is one of:

- a ``.csv`` file with the columns ``text,category`` (the layout of PolyAI's ``banking_data/`` and of the shared
  file), read with the standard library: no network, and an error can name the line. A ``categories.json`` beside
  it, when present, lists the intents its rows may use;
- the hub id ``PolyAI/banking77`` (the default), a local folder in its layout, or one ``.jsonl`` / ``.json`` /
  ``.parquet`` file of it, read with ``datasets`` (a local one with no network access,
  `tfgrpo_dspy.kits.datasource`). There ``label`` is an integer ``ClassLabel`` whose names are the intents (plain
  integers, in a file without the hub's features, are read in the hub's order); a string ``label`` or ``category``
  column is read as the intent itself.

Queries are stripped of surrounding whitespace and deduplicated, the first row kept: the shared training file
holds four queries twice (one copy with stray newlines), and a query on both sides of a split would make the
held-out rows overlap the training rows.
"""

from __future__ import annotations

import csv
import difflib
import json
import logging
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.kits import datasource
from tfgrpo_dspy.kits.banking77.intents import INTENTS

logger = logging.getLogger(__name__)

BANKING77_HUB_ID = "PolyAI/banking77"
CSV_COLUMNS = ("text", "category")
CATEGORIES_FILE = "categories.json"  # beside a CSV: the intent names its rows may use
_FILE_SUFFIXES = (".csv", *datasource.FILE_BUILDERS)


def load_banking77(source: str = BANKING77_HUB_ID, *, split: str = "train") -> list[dspy.Example]:
    """Every distinct query of ``source`` in the source's order; ``index`` is its row's position (0 = the first row
    after the header). ``split`` applies to a hub id or a folder; a file is a single split."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"Banking77 source must be a .csv file, a hub id or a hub-layout folder, got {source!r}")
    path = Path(source).expanduser()
    if path.suffix.lower() in _FILE_SUFFIXES and not path.exists():
        raise ValueError(f"Banking77 source {source}: no such file")
    rows = _csv_rows(path) if path.suffix.lower() == ".csv" else _dataset_rows(source, split)
    return _examples(rows, source)


def seeded_order(examples: Iterable[dspy.Example], seed: int) -> list[dspy.Example]:
    """``examples`` shuffled with ``seed``: the order every part of a split is a range of."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    return order


def banking77_splits(source: str, *, seed: int, sizes: Mapping[str, int],
                     split: str = "train") -> dict[str, list[dspy.Example]]:
    """Disjoint parts of one split of ``source``: ``sizes`` maps part names to row counts, taken in that order from
    the ``seed`` order (so two parts never share a query)."""
    examples = seeded_order(load_banking77(source, split=split), seed)
    total = sum(sizes.values())
    if len(examples) < total:
        raise ValueError(f"Banking77 source {source} has {len(examples)} distinct queries; {total} are needed "
                         f"({', '.join(f'{name} {size}' for name, size in sizes.items())})")
    parts, start = {}, 0
    for name, size in sizes.items():
        parts[name] = examples[start : start + size]
        start += size
    return parts


def intents_beside(csv_path: Path) -> tuple[tuple[str, ...], str]:
    """The intents a CSV's rows may use, and where that list comes from: ``categories.json`` beside the file when
    there is one (it may list fewer than 77), else the 77 Banking77 intents."""
    file = csv_path.with_name(CATEGORIES_FILE)
    if not file.is_file():
        return INTENTS, "the 77 Banking77 intents"
    try:
        names = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: not a JSON list of intent names ({exc})") from None
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{file}: expected a JSON list of intent names, got {type(names).__name__} {str(names)[:80]}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{file} lists {repeated} more than once")
    # The program's answer type is the 77 intents (it is built before any data is read): a name outside them
    # could never be answered.
    unknown = [name for name in names if name not in INTENTS]
    if unknown:
        raise ValueError(f"{file} lists {unknown[:5]}{' ...' if len(unknown) > 5 else ''}, which "
                         f"{'is not a Banking77 intent' if len(unknown) == 1 else 'are not Banking77 intents'}"
                         f"{_did_you_mean(unknown[0], INTENTS)}")
    return tuple(names), str(file)


# -- reading ------------------------------------------------------------------------------------------------------
_Row = tuple[str, str]  # (query, intent)


def _csv_rows(path: Path) -> list[_Row]:
    allowed, allowed_from = intents_beside(path)
    rows: list[_Row] = []
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: a spreadsheet's byte-order mark
            reader = csv.DictReader(handle)
            if reader.fieldnames is None:
                raise ValueError(f"{path} is empty: expected the header line {','.join(CSV_COLUMNS)} and one row "
                                 "per query")
            reader.fieldnames = [name.strip() for name in reader.fieldnames]
            missing = [column for column in CSV_COLUMNS if column not in reader.fieldnames]
            if missing:
                raise ValueError(f"{path} lacks the column{'s' if len(missing) > 1 else ''} "
                                 f"{', '.join(map(repr, missing))}; its header is {reader.fieldnames}")
            for row in reader:
                where = f"line {reader.line_num}"
                rows.append(_checked(path, where, row.get("text"), row.get("category"), allowed, allowed_from))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise ValueError(f"{path} is not a readable CSV file ({exc})") from None
    if not rows:
        raise ValueError(f"{path} has the header line but no rows")
    return rows


def _dataset_rows(source: str, split: str) -> list[_Row]:
    import datasets  # heavy import, only when reading through it

    table = datasource.load_rows(source, split=split)
    label = next((column for column in ("label", "category") if column in table.column_names), None)
    missing = [column for column, found in (("text", "text" in table.column_names), ("label", label)) if not found]
    if missing:
        raise ValueError(f"Banking77 source {source} lacks the column{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(repr, missing))}; it has {table.column_names}")
    feature = table.features[label]
    # The hub stores the intent as an integer ClassLabel: its names turn the integers into intents. A file of the
    # hub's rows read alone (one .jsonl) has plain integers: they are the hub's label order, which INTENTS keeps.
    names = feature.names if isinstance(feature, datasets.ClassLabel) else INTENTS
    rows: list[_Row] = []
    for position, (text, value) in enumerate(zip(table["text"], table[label], strict=True)):
        intent = names[value] if isinstance(value, int) and 0 <= value < len(names) else value
        rows.append(_checked(source, f"row {position + 1}", text, intent, INTENTS, "the 77 Banking77 intents"))
    if not rows:
        raise ValueError(f"Banking77 source {source} has no rows in split {split!r}")
    return rows


def _checked(source: Any, where: str, text: Any, intent: Any, allowed: tuple[str, ...], allowed_from: str) -> _Row:
    """One row's query and intent, or one line naming the file, the row and what is wrong with it."""
    query = text.strip() if isinstance(text, str) else ""
    if not query:
        raise ValueError(f"{source} {where}: the text is empty")
    if not isinstance(intent, str) or not intent.strip():
        raise ValueError(f"{source} {where}: no intent (category) for {query[:60]!r}")
    intent = intent.strip()
    if intent not in allowed:
        raise ValueError(f"{source} {where}: unknown intent {intent!r}, not one of {allowed_from}"
                         f"{_did_you_mean(intent, allowed)}")
    return query, intent


def _did_you_mean(name: str, names: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _examples(rows: list[_Row], source: str) -> list[dspy.Example]:
    seen: set[str] = set()
    examples = []
    for index, (query, intent) in enumerate(rows):
        if query in seen:
            continue
        seen.add(query)
        examples.append(dspy.Example(query=query, intent=intent, index=index).with_inputs("query"))
    if len(examples) < len(rows):
        logger.info("%s: %d repeated queries dropped (the first row of each kept)", source, len(rows) - len(examples))
    return examples
