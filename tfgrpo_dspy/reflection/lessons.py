"""Lesson texts, judged in code: render a structured lesson, tell a general one from a restated example,
and group near-duplicate proposals.

A small reflection model often "learns" a restatement of the problem it just saw ("When the guitar is
sold at a 50% discount, the price is reduced to $124.") instead of the strategy behind it. These
checks need no model: a lesson is tied to its example when it repeats that example's details that
are rare in the rest of the training set (numbers, names, values from its reference solution or its
attempts, a copied clause, its answer). Words common across the training set are domain vocabulary,
not details: a routing rule may name a queue that is also the example's answer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[a-z0-9']+")
_CAPITALIZED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_ANY_CAPITALIZED = re.compile(r"\b[A-Z][a-z]{2,}\b")
# Numbers that general advice uses on its own (units, percent, small counts); they are never details.
GENERAL_NUMBERS = frozenset({str(n) for n in range(13)} | {"24", "60", "100", "1000", "365", "52", "30", "7"})
MIN_COPIED_WORDS = 6  # a copied clause, longer than the stock phrases lessons and tasks share
MIN_COMMON, COMMON_FRACTION = 3, 0.1  # a number or name this frequent in the training set is vocabulary
STOPWORDS = frozenset(
    "a an the of to in on at by for with and or but if when then than that this these those it its is are was "
    "were be been being do does did so as from into each every any all not no i we you they me us them my our your "
    "their have has had can could would will".split()
)


def render_lesson(condition: str, action: str) -> str:
    """``When <condition>, <action>.`` from the two parts, whatever punctuation the model added."""
    condition = " ".join(condition.split()).strip(" .,;:")
    action = " ".join(action.split()).strip(" .,;:")
    condition = re.sub(r"^(when|if|whenever)\s+", "", condition, flags=re.IGNORECASE)
    if not condition or not action:
        return ""
    # "When The inputs ..." would read "The" as a name, and the guard would drop the lesson for naming "the".
    first, _, rest = condition.partition(" ")
    if first.casefold() in STOPWORDS:
        condition = " ".join(filter(None, (first.casefold(), rest)))
    action = action[0].lower() + action[1:] if action[:2] != action[:2].upper() else action
    return f"When {condition}, {action}."


def numbers_in(text: str) -> set[str]:
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


def names_in(text: str, *, sentence_starts: bool = False) -> set[str]:
    """Capitalized words (names of people, places, products); with ``sentence_starts``, also the first word
    of each sentence (a problem often starts with a name; a lesson always starts with "When")."""
    pattern = _ANY_CAPITALIZED if sentence_starts else _CAPITALIZED
    return {m.group(0).casefold() for m in pattern.finditer(text)}


@dataclass(frozen=True)
class ExampleMaterial:
    """Everything the reflection saw about one training example: where its details come from."""

    task_text: str
    answers: tuple[str, ...] = ()  # the reference answer field values
    worked_text: str = ""  # reference solution and the attempts' texts (intermediate values live here)


@dataclass
class Vocabulary:
    """How many training examples each number, name and answer appears in: frequent ones are the task's
    vocabulary (a queue name that labels many tickets, a plan named in every ticket), not details."""

    counts: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    examples: int = 0

    @classmethod
    def of(cls, materials: Iterable[ExampleMaterial]) -> Vocabulary:
        vocabulary = cls()
        for material in materials:
            text = " ".join((material.task_text, *material.answers))
            vocabulary.counts.update(numbers_in(text) | names_in(text, sentence_starts=True))
            vocabulary.answers.update({a.casefold() for a in material.answers})
            vocabulary.examples += 1
        return vocabulary

    def is_common(self, token: str) -> bool:
        """A number or name in at least MIN_COMMON examples and COMMON_FRACTION of them."""
        count = self.counts.get(token, 0)
        return count >= MIN_COMMON and count >= COMMON_FRACTION * self.examples

    def is_label(self, answer: str) -> bool:
        """An answer shared by several examples is a class label (a queue, a category), not one example's answer."""
        return self.answers.get(answer, 0) >= 2


def restated_details(lesson: str, material: ExampleMaterial, vocabulary: Vocabulary | None = None) -> str | None:
    """Why ``lesson`` looks tied to its one example, or None when it reads as a general strategy."""
    vocabulary = vocabulary or Vocabulary()
    folded = lesson.casefold()
    for answer in material.answers:
        answer = " ".join(answer.split())
        distinctive = len(answer) >= 4 or (len(answer) >= 2 and answer.replace(".", "").isdigit())
        if (distinctive and not vocabulary.is_label(answer.casefold())
                and re.search(rf"(?<![\w.]){re.escape(answer.casefold())}(?![\w])", folded)):
            return f"it states the example's answer {answer!r}"
    seen = " ".join((material.task_text, material.worked_text, *material.answers))
    numbers = sorted((numbers_in(lesson) & numbers_in(seen)) - GENERAL_NUMBERS, key=lambda n: (len(n), n))
    numbers = [n for n in numbers if not vocabulary.is_common(n)]
    if numbers:
        return f"it repeats the example's numbers {', '.join(numbers)}"
    names = sorted(n for n in names_in(lesson) & names_in(material.task_text, sentence_starts=True)
                   if not vocabulary.is_common(n))
    if names:
        return f"it names {', '.join(names)} from the example"
    copied = copied_clause(lesson, material.task_text)
    if copied:
        return f"it copies {copied!r} from the example"
    return None


def copied_clause(lesson: str, source: str, length: int = MIN_COPIED_WORDS) -> str | None:
    """A run of ``length`` words of ``lesson`` that also appears in ``source``, if any."""
    lesson_words, source_words = _WORD.findall(lesson.lower()), _WORD.findall(source.lower())
    runs = {tuple(source_words[i : i + length]) for i in range(len(source_words) - length + 1)}
    for i in range(len(lesson_words) - length + 1):
        if tuple(lesson_words[i : i + length]) in runs:
            return " ".join(lesson_words[i : i + length])
    return None


_CONDITION = re.compile(r"^\s*(?:when|if|whenever)\s+(?P<condition>[^,]*),", re.IGNORECASE)


def vague_condition(lesson: str, field_names: Iterable[str] = ()) -> str | None:
    """Why the condition of a "When <condition>, <action>." lesson names nothing to recognise in an input, or None.

    A condition made only of the program's field names ("When queue, ...", "When the ticket, ...") holds
    for every input: the lesson cannot be applied selectively, so it is no lesson. Texts not in that
    form are not judged here.
    """
    match = _CONDITION.match(lesson)
    if match is None:
        return None
    names = {part for name in field_names for part in re.split(r"[_\W]+", name.casefold()) if part}
    if content_words(match.group("condition")) - names:
        return None
    return f"vague condition: {match.group('condition').strip()!r} names nothing to recognise in an input"


# -- clustering near-duplicates ------------------------------------------------------------------
def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOPWORDS)


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of content words: 1.0 for the same words, 0.0 for none in common."""
    left, right = content_words(a), content_words(b)
    return len(left & right) / len(left | right) if left | right else 1.0


@dataclass(frozen=True)
class LessonCluster:
    """Near-duplicate proposed lessons from different groups, shown to the update step once."""

    text: str  # the representative: the first-proposed member
    members: tuple[str, ...]
    sources: tuple[int, ...]  # example indices that proposed a member

    @property
    def support(self) -> int:
        return len(set(self.sources))


def cluster_lessons(proposals: Sequence[tuple[str, int]], threshold: float = 0.6) -> list[LessonCluster]:
    """Group (text, example index) proposals whose content words overlap by ``threshold`` or more,
    greedily in order; each cluster keeps its first text as the representative."""
    clusters: list[tuple[str, list[str], list[int]]] = []
    for text, source in proposals:
        for representative, members, sources in clusters:
            if similarity(text, representative) >= threshold:
                members.append(text)
                sources.append(source)
                break
        else:
            clusters.append((text, [text], [source]))
    return [LessonCluster(rep, tuple(members), tuple(sources)) for rep, members, sources in clusters]
