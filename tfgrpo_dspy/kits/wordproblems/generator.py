"""Seeded, procedurally generated multi-step word problems with exact integer answers.

Each *family* (`.families`) is one template with one trap a small model tends to fall for (a distractor
number, a unit conversion, "how many more", a discount followed by a markup, ...). Names,
items and numbers are sampled, so training and held-out problems share the trap families
but never the same problem. Every answer is computed from the sampled integers; numbers are
drawn so that every division is exact.

Train and held-out problems come from different random streams and, in addition, from
disjoint halves of question space (a question's SHA-256 decides which split may hold it),
so the two splits can never share a question whatever their sizes or seeds.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Literal

import dspy

# The families live in .families; FAMILIES and Problem are still importable from here.
from tfgrpo_dspy.kits.wordproblems.families import FAMILIES, Problem

__all__ = ["FAMILIES", "HELDOUT_BUCKETS", "Problem", "Split", "generate_problems", "split_of", "train_heldout_split"]

Split = Literal["train", "heldout"]

# One in HELDOUT_BUCKETS question texts may be held out; the rest may be trained on.
HELDOUT_BUCKETS = 4
_MAX_ATTEMPTS_PER_PROBLEM = 200


def split_of(question: str) -> Split:
    """The only split a question may appear in (fixed by its text, not by any seed)."""
    bucket = int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % HELDOUT_BUCKETS
    return "heldout" if bucket == 0 else "train"


def _check_families(families: Sequence[str] | None) -> list[str]:
    if families is None:
        return list(FAMILIES)
    if isinstance(families, str) or not isinstance(families, Sequence):
        raise TypeError(f"families must be a sequence of family names, got {type(families).__name__}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise ValueError(f"families must be non-empty names from {sorted(FAMILIES)}; unknown: {unknown}")
    return list(dict.fromkeys(families))


def generate_problems(
    n: int, seed: int = 0, families: Sequence[str] | None = None, *, split: Split | None = None
) -> list[dspy.Example]:
    """``n`` distinct problems, the families taken in turn (as even a mix as ``n`` allows).

    Args:
        n: how many problems.
        seed: the random seed; the same arguments always give the same problems.
        families: family names to draw from (default: all of `FAMILIES`).
        split: restrict to questions that belong to this split (see `split_of`); None = any.

    Returns:
        Examples with ``question``, ``answer`` (canonical integer string) and ``family``,
        inputs set to ``question``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if split not in (None, "train", "heldout"):
        raise ValueError(f"split must be 'train', 'heldout' or None, got {split!r}")
    names = _check_families(families)
    # A string seed keeps the streams of different splits apart (random hashes it with SHA-512).
    rng = random.Random(f"wordproblems:{split or 'any'}:{seed}")
    order = rng.sample(names, len(names))
    seen: set[str] = set()
    problems: list[dspy.Example] = []
    for i in range(n):
        family = order[i % len(order)]
        for _ in range(_MAX_ATTEMPTS_PER_PROBLEM):
            question, answer = FAMILIES[family](rng)
            if question not in seen and (split is None or split_of(question) == split):
                break
        else:
            raise ValueError(f"could not draw {n} distinct problems from family {family!r}; ask for fewer")
        seen.add(question)
        problems.append(dspy.Example(question=question, answer=str(answer), family=family).with_inputs("question"))
    return problems


def train_heldout_split(
    n_train: int, n_heldout: int, seed: int = 0, families: Sequence[str] | None = None
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """Training and held-out problems: disjoint random streams and disjoint question sets."""
    train = generate_problems(n_train, seed, families, split="train")
    heldout = generate_problems(n_heldout, seed, families, split="heldout")
    return train, heldout
