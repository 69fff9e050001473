"""Contrast phrases: what a set of failures says that the training examples with other answers do not.

Asked for the condition that tells failures sharing a reference X apart from their contrast, the 1.5B model
mostly writes one that holds for nothing in particular ("When the common input field is `ticket:`"): of the 53
candidates of the tickets compile of 2026-12-07 (seed 1000, compile seed 0) 2 were kept. The training labels can
find such a condition without a model, as D5 and HypoGeniC judge a hypothesis: by its precision over the
labelled examples. `contrast_phrase` looks for a phrase of one to three words, or two such phrases together,
that at least half of the failures contain and that, across the training set, appears mostly in inputs whose
reference is X; the rule it makes, "When the input contains "chargeback", answer with X", is a candidate like
any other, verified by re-running it. It needs label answers shared by several failures and inputs with words;
where no phrase is precise enough (open answers, numeric thresholds) it proposes nothing.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfgrpo_dspy.reflection.lessons import STOPWORDS

MAX_WORDS = 3  # longer phrases are near-copies of one input, not a condition
MIN_PRECISION = 0.75  # of the training inputs that contain the phrase, at least this share have the reference
MIN_SUPPORT = 3  # training inputs with the reference that contain it: fewer is one ticket's wording
PAIR_POOL = 24  # the most frequent phrases among the failures that are combined in pairs
LIFT = 1.5  # a phrase in a pair: its inputs have the reference at least this many times as often as all do


@dataclass(frozen=True)
class ContrastPhrase:
    """A condition as one or two phrases, and how it did on the training set: ``support`` of the ``matches``
    inputs that contain all of them have the reference; ``covered`` failures contain them."""

    phrases: tuple[str, ...]
    support: int
    matches: int
    covered: int

    @property
    def precision(self) -> float:
        return self.support / self.matches

    @property
    def condition(self) -> str:
        return "the input contains " + " and ".join(f'"{p}"' for p in self.phrases)


def contrast_phrase(failures: Sequence[int], reference: str, texts: Sequence[str],
                    references: Callable[[int], str]) -> ContrastPhrase | None:
    """The most precise condition (then the one covering most failures, then the shortest) that at least half of
    ``failures`` (indices into ``texts``, all with ``reference``) satisfy, or None when none reaches
    `MIN_PRECISION` on `MIN_SUPPORT` or more training inputs."""
    grams = [_grams(text) for text in texts]
    own = {i for i in range(len(texts)) if references(i) == reference}
    base_rate = len(own) / len(texts)
    needed = max(2, -(-len(failures) // 2))
    in_failures = _document_counts([grams[i] for i in failures])

    def count_matches(condition: tuple[tuple[str, ...], ...]) -> tuple[int, int]:
        matches = [i for i in range(len(texts)) if all(g in grams[i] for g in condition)]
        return sum(1 for i in matches if i in own), len(matches)

    frequent = sorted((g for g, c in in_failures.items() if c >= needed), key=lambda g: (-in_failures[g], len(g), g))
    # A phrase joins a pair only if it points to the reference by itself ("have" does not): a pair of a real
    # phrase and a word that happens to be in the same few inputs is a copy of those inputs.
    lifted = [g for g in frequent if _rate(*count_matches((g,))) >= LIFT * base_rate]
    conditions = [(g,) for g in frequent]
    conditions += [pair for pair in itertools.combinations(lifted[:PAIR_POOL], 2) if not _overlap(*pair)]
    best, best_key = None, None
    for condition in conditions:
        covered = sum(all(g in grams[i] for g in condition) for i in failures)
        if covered < needed:
            continue
        support, matches = count_matches(condition)
        if support < MIN_SUPPORT or support / matches < MIN_PRECISION:
            continue
        # Ranked by the lower end of the precision's interval: 3 of 3 ranks below 8 of 8, so a name in three
        # inputs does not beat a real condition.
        key = (wilson_lower(support, matches), covered, -sum(map(len, condition)))
        if best_key is None or key > best_key:
            best, best_key = (condition, support, matches, covered), key
    if best is None:
        return None
    condition, support, matches, covered = best
    example = next(texts[i] for i in failures if all(g in grams[i] for g in condition))
    return ContrastPhrase(tuple(_surface(g, example) for g in condition), support, matches, covered)


def _grams(text: str) -> set[tuple[str, ...]]:
    """The input's phrases of one to `MAX_WORDS` words within a line, none of function words only."""
    grams = set()
    for line in text.lower().splitlines():
        words = re.findall(r"[a-z0-9]+", line)
        grams |= {tuple(words[i:i + n]) for n in range(1, MAX_WORDS + 1) for i in range(len(words) - n + 1)}
    return {g for g in grams if not STOPWORDS.issuperset(g)}


def wilson_lower(successes: int, trials: int, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval of ``successes`` in ``trials`` (95% by default)."""
    p = successes / trials
    centre = p + z * z / (2 * trials)
    spread = z * ((p * (1 - p) + z * z / (4 * trials)) / trials) ** 0.5
    return (centre - spread) / (1 + z * z / trials)


def _rate(support: int, matches: int) -> float:
    return support / matches if matches else 0.0


def _document_counts(grams: Sequence[set[tuple[str, ...]]]) -> dict[tuple[str, ...], int]:
    counts: dict[tuple[str, ...], int] = {}
    for document in grams:
        for gram in document:
            counts[gram] = counts.get(gram, 0) + 1
    return counts


def _overlap(first: tuple[str, ...], second: tuple[str, ...]) -> bool:
    """Whether one phrase's words are part of the other's: together they say no more than the longer one."""
    short, long = sorted((first, second), key=len)
    return any(long[i:i + len(short)] == short for i in range(len(long) - len(short) + 1))


def _surface(gram: tuple[str, ...], text: str) -> str:
    """The phrase as ``text`` writes it ("Plan: Free" for plan, free), so the rule reads like the input."""
    match = re.search(r"\b" + r"[^a-z0-9\n]+".join(map(re.escape, gram)) + r"\b", text, re.IGNORECASE)
    return match.group(0) if match else " ".join(gram)
