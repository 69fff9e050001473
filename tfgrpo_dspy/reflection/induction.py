"""Induction: several failed training examples at once -> candidate rules that would fix them all.

A rule such as "a refund over $500 goes to the payments desk" shows only across several inputs that
share their right answer, never in one. So the step's failures (examples where the rollouts missed the
reference) are put in sets of a few (`induction_sets`): first examples with the same reference, then,
for what is left (open answers, rare labels), each failure with its nearest neighbours by input text.
Each set is shown to the reflection LM as plain text (`format_failures`) beside the examples it must be told
apart from (`contrast_of`, `format_contrast`): training examples with another reference that the program
confuses with the set's (it answered them the set's answer, or answered the set what is right for them),
then the nearest inputs with another reference. Shown only the failures, a small model writes a condition
that describes the set ("the inputs all relate to closing a business") and matches its neighbours too; shown
both sets, it is asked for what holds for the first and not the second (contrasting two sets, as D5 and
HypoGeniC do). Each set is sampled ``num_candidates`` times; a lesson keeps the first sentence of each part
(`first_sentence`: the model's rationale after it is not a lesson). What comes back is only a candidate:
`tfgrpo_dspy.run.verification` decides by re-running it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfgrpo_dspy.inference.rollouts import GroupOutcome
from tfgrpo_dspy.reflection.formatting import SUCCESS, as_text
from tfgrpo_dspy.usage import Usage, UsageRecord

MIN_SET = 3  # fewer failures than this share too little to reveal a rule


@dataclass(frozen=True)
class Failure:
    """A training example the rollouts got wrong: its reference and the wrong answer given most often."""

    example_index: int
    reference: str
    answer: str


@dataclass(frozen=True)
class InductionSet:
    """Failures shown together to one induction; ``shared`` when they all have the same reference; ``contrast``
    the training examples they are shown beside, to be told apart from."""

    failures: tuple[Failure, ...]
    shared: bool
    contrast: tuple[int, ...] = ()

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(f.example_index for f in self.failures)


@dataclass(frozen=True)
class Induction(UsageRecord):
    """One draw of one induction: the candidate lesson it wrote (after the guard) or why there is none."""

    sources: list[int]
    sample: int
    contrast: list[int] = field(default_factory=list)
    lesson: str | None = None
    raw: str = ""
    dropped_because: str | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Induction:
        return cls(sources=list(data.get("sources", [])), sample=int(data.get("sample", 0)),
                   contrast=list(data.get("contrast", [])), lesson=data.get("lesson"), raw=str(data.get("raw", "")),
                   dropped_because=data.get("dropped_because"), error=data.get("error"),
                   usage=Usage.from_dict(data.get("usage")))


def failures_of(groups: Sequence[GroupOutcome], reference: Callable[[int], str],
                answer: Callable[[dict[str, Any] | None], str]) -> list[Failure]:
    """The examples whose scored rollouts include a failure and average below success, with the wrong
    answer their failed rollouts gave most often (``answer``: outputs as a reference is written)."""
    failures = []
    for group in groups:
        scored = [r for r in group.rollouts if r.scored]
        wrong = [r for r in scored if r.score < SUCCESS]
        if not wrong or group.mean >= SUCCESS:
            continue
        answers = Counter(answer(r.outputs) for r in wrong)
        failures.append(Failure(group.example_index, reference(group.example_index), answers.most_common(1)[0][0]))
    return failures


def answers_of(groups: Sequence[GroupOutcome], answer: Callable[[dict[str, Any] | None], str]
               ) -> dict[int, set[str]]:
    """Every answer the program gave each example of the step (its scored rollouts), as a reference is written."""
    return {g.example_index: {answer(r.outputs) for r in g.rollouts if r.scored} for g in groups}


def contrast_of(induction_set: InductionSet, answers: Mapping[int, set[str]], reference: Callable[[int], str],
                task_text: Callable[[int], str], pool: Sequence[int], size: int) -> tuple[int, ...]:
    """At most ``size`` training examples (of ``pool``) the set's failures must be told apart from, all with a
    reference none of the failures has: first those the program confuses with them (it answered them a
    failure's reference, or answered a failure theirs), then the rest, each group nearest the failures'
    inputs first (BM25)."""
    own = {f.reference for f in induction_set.failures}
    wrong = {f.answer for f in induction_set.failures}
    others = [i for i in pool if reference(i) not in own]
    if size == 0 or not others:
        return ()
    from rank_bm25 import BM25Okapi

    query = [w for f in induction_set.failures for w in _words(task_text(f.example_index))]
    scores = BM25Okapi([_words(task_text(i)) for i in others]).get_scores(query)
    nearest = [others[n] for n in sorted(range(len(others)), key=lambda n: (-scores[n], others[n]))]
    confused = [i for i in nearest if reference(i) in wrong or own & answers.get(i, set())]
    return tuple(dict.fromkeys([*confused, *nearest]))[:size]


def induction_sets(failures: Sequence[Failure], task_text: Callable[[int], str], size: int, *,
                   neighbours: bool = True) -> list[InductionSet]:
    """Sets of at most ``size`` (and at least `MIN_SET`) failures: same reference first, then (``neighbours``)
    the rest gathered by their input words."""
    by_reference: dict[str, list[Failure]] = defaultdict(list)
    for failure in failures:
        by_reference[failure.reference].append(failure)
    sets, rest = [], []
    for members in by_reference.values():
        chunks, leftover = _chunks(members, size)
        sets += [InductionSet(tuple(c), True) for c in chunks]
        rest += leftover
    return (sets + _neighbour_sets(rest, task_text, size)) if neighbours else sets


def _chunks(members: list[Failure], size: int) -> tuple[list[list[Failure]], list[Failure]]:
    """As few sets as ``size`` allows, of even sizes, none under `MIN_SET`; what cannot fill one is left over."""
    if len(members) < MIN_SET:
        return [], list(members)
    count = -(-len(members) // size)
    if len(members) // count >= MIN_SET:
        return [members[i::count] for i in range(count)], []
    count = len(members) // size  # even sets would be too small: full ones, the rest left over
    return [members[i * size:(i + 1) * size] for i in range(count)], members[count * size:]


def _neighbour_sets(failures: Sequence[Failure], task_text: Callable[[int], str], size: int) -> list[InductionSet]:
    """Each unused failure with its ``size - 1`` nearest unused failures by input words (BM25), counting only
    failures that share a word with it; one with too few such neighbours is left out."""
    if len(failures) < MIN_SET:
        return []
    from rank_bm25 import BM25Okapi

    documents = [_words(task_text(f.example_index)) for f in failures]
    bm25 = BM25Okapi(documents)
    unused = list(range(len(failures)))
    sets = []
    while len(unused) >= MIN_SET:
        seed, unused = unused[0], unused[1:]
        scores = bm25.get_scores(documents[seed])
        nearest = sorted((i for i in unused if scores[i] > 0), key=lambda i: (-scores[i], i))[: size - 1]
        if len(nearest) + 1 < MIN_SET:
            continue
        sets.append(InductionSet(tuple(failures[i] for i in [seed, *nearest]), False))
        unused = [i for i in unused if i not in nearest]
    return sets


def format_contrast(induction_set: InductionSet, inputs: Callable[[int], dict[str, Any]],
                    reference: Callable[[int], str]) -> str:
    """The contrast examples as plain text, each input's fields and its correct answer; "" without."""
    blocks = []
    for number, index in enumerate(induction_set.contrast, start=1):
        fields = "\n".join(f"{name}: {as_text(value)}" for name, value in inputs(index).items())
        blocks.append(f"### Other input {number}\n{fields}\nCorrect answer: {reference(index)}")
    return "\n\n".join(blocks)


def format_failures(induction_set: InductionSet, inputs: Callable[[int], dict[str, Any]]) -> str:
    """The set as plain text: each input's fields and its correct answer (one line at the end when they share
    it). The program's wrong answers are left out: shown, they drew the 1.5B model's rules to the program
    (see `tfgrpo_dspy.signatures.induce`)."""
    blocks = []
    for number, failure in enumerate(induction_set.failures, start=1):
        fields = "\n".join(f"{name}: {as_text(value)}" for name, value in inputs(failure.example_index).items())
        answer = "" if induction_set.shared else f"\nCorrect answer: {failure.reference}"
        blocks.append(f"### Input {number}\n{fields}{answer}")
    if induction_set.shared:
        blocks.append(f"Correct answer for each of these inputs: {induction_set.failures[0].reference}")
    return "\n\n".join(blocks)


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (a period, ! or ? then a space or the end; not in "e.g.")."""
    for match in re.finditer(r"(?<=[A-Za-z0-9)\]\"'])[.!?](?=\s|$)", text):
        if not re.search(r"\b(?:e\.g|i\.e|etc|vs)$", text[: match.start()], re.IGNORECASE):
            return text[: match.start()]
    return text


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())
