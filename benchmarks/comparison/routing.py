"""Which lesson a ticket is shown: the routing diagnostics of `verified_lessons.py` (tickets only).

A learned library helps only where the right lesson reaches the right input. These programs and helpers
separate following a lesson from being shown it: each true house rule shown to the tickets it decides
(`RoutedRules` with the oracle), or to the tickets nearest to the training tickets it decides
(`NearestTraining`), and a learned library routed by the training tickets its verification fixed
(`RoutedLessons`, `fixed_by`). `shift_constant` names the answer a library's fixes moved to: what a lesson
that only shifts answers amounts to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import dspy

from tfgrpo_dspy import ExperienceLibrary
from tfgrpo_dspy.inference.injection import LuceneBM25, retrieval_words, with_experiences
from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES
from tfgrpo_dspy.kits.tickets.task import TICKETS


def shift_constant(compile_: dict[str, Any], trainset: list, answer_field: str) -> str | None:
    """The answer the shipped lessons' verified fixes moved to most often, from the compile's records of
    training examples: the constant a lesson that merely shifts answers amounts to (None if nothing shipped)."""
    shipped = set(compile_["lessons"])
    fixes = [i for c in compile_["checks"] if c.get("kept") and c["text"] in shipped for i in c["fixes"]]
    if not fixes:
        return None
    return Counter(str(trainset[i][answer_field]) for i in fixes).most_common(1)[0][0]


class RoutedRules(dspy.Module):
    """The ticket program shown one true house rule per ticket, the one ``route`` names for its text: how well the
    model follows a rule, apart from which rule a lesson retrieval would have shown."""

    def __init__(self, route: Callable[[str], str], wording: Callable[[Any], str] | None = None):
        super().__init__()
        self.route = route
        words = wording or (lambda rule: rule.lesson)  # each rule's lesson as written in the kit by default
        self.by_rule = {rule.name: with_experiences(TICKETS.make_program(), ExperienceLibrary.from_texts([words(rule)]),
                                                    top_k=None) for rule in HOUSE_RULES}

    def forward(self, ticket: str) -> dspy.Prediction:
        return self.by_rule[self.route(ticket)](ticket=ticket)


class NearestTraining:
    """The label of the training ticket nearest to a ticket (BM25 over the training tickets' words): by default
    its house rule."""

    def __init__(self, training: list[dspy.Example], labels: list[str | None] | None = None):
        self.labels = labels if labels is not None else [e.rule for e in training]
        self.index = LuceneBM25([retrieval_words(e.ticket) for e in training])

    def __call__(self, ticket: str) -> str | None:
        scores = self.index.get_scores(retrieval_words(ticket))
        return self.labels[max(range(len(scores)), key=lambda i: (scores[i], -i))]


class RoutedLessons(dspy.Module):
    """The ticket program shown, per ticket, the learned lesson ``route`` names (None: no lesson): a learned library
    routed by training examples instead of by its lessons' words."""

    def __init__(self, lessons: list[str], route: Callable[[str], str | None]):
        super().__init__()
        self.route = route
        self.plain = TICKETS.make_program()
        self.by_lesson = {text: with_experiences(TICKETS.make_program(), ExperienceLibrary.from_texts([text]),
                                                 top_k=None) for text in lessons}

    def forward(self, ticket: str) -> dspy.Prediction:
        lesson = self.route(ticket)
        return (self.plain if lesson is None else self.by_lesson[lesson])(ticket=ticket)


def fixed_by(compile_: dict[str, Any], count: int) -> list[str | None]:
    """For each of ``count`` training examples, the shipped lesson whose verification fixed it (the first kept one),
    else None: the keys that route a learned library by examples."""
    shipped = set(compile_["lessons"])
    labels: list[str | None] = [None] * count
    for check in compile_["checks"]:
        if check.get("kept") and check["text"] in shipped:
            for index in check["fixes"]:
                labels[index] = labels[index] or check["text"]
    return labels
