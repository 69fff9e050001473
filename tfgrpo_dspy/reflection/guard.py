"""The lesson guard: every text headed for the library passes the same checks, wherever it came from.

A proposed lesson and an update's add / modify / merge text are checked in code (`lessons.restated_details`):
one that restates its example gets one `GeneralizeLesson` rewrite and is dropped if the rewrite
still restates it; one that copies a clause of the extraction prompt itself (its worked example, its
wording) is dropped at once, since a small model that echoes its prompt has no lesson to rewrite; so is one
whose condition names only the program's fields ("When queue, ..."), which holds for every input; one over
the word limit gets one `ShortenLesson` rewrite and is dropped if still
too long. Dropped texts are returned with the reason, for the run log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tfgrpo_dspy.library.file import normalize_text, word_count
from tfgrpo_dspy.reflection.lessons import ExampleMaterial, Vocabulary, copied_clause, restated_details, vague_condition
from tfgrpo_dspy.reflection.reflection import Reflector
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger(__name__)


@dataclass
class Verdict:
    """The guard's answer for one text: the text to use (None = dropped) and why it changed or was dropped."""

    text: str | None
    reason: str | None = None
    usage: Usage = field(default_factory=Usage)


class LessonGuard:
    """Checks lesson texts against the examples they came from; rewrites once, then drops.

    Args:
        reflector: runs the rewrite calls.
        vocabulary: numbers, names and answers common across the training set (not details).
        max_words: the word limit of a lesson.
        generalize: False skips the restatement check (the paper's recipe has none).
        field_names: the program's input and output field names: a condition made only of them is vague.
    """

    def __init__(self, reflector: Reflector, vocabulary: Vocabulary, *, max_words: int, generalize: bool = True,
                 field_names: Iterable[str] = ()):
        self.reflector = reflector
        self.field_names = tuple(field_names)
        self.vocabulary = vocabulary
        self.max_words = max_words
        self.generalize = generalize
        # The reflection prompts a lesson must not copy: a small model that echoes its prompt has no lesson.
        self.prompt_text = "\n".join((reflector.signatures.extract.instructions,
                                      reflector.signatures.induce.instructions))

    def problem(self, text: str, materials: Sequence[ExampleMaterial]) -> str | None:
        """Why ``text`` restates one of ``materials``, or None."""
        if not self.generalize:
            return None
        for material in materials:
            problem = restated_details(text, material, self.vocabulary)
            if problem is not None:
                return problem
        return None

    def check(self, text: str, materials: Sequence[ExampleMaterial]) -> Verdict:
        text = normalize_text(text)
        usage = Usage()
        echoed = copied_clause(text, self.prompt_text)
        if echoed is not None:
            logger.info("dropped a lesson that copies the extraction prompt (%r): %s", echoed, text)
            return Verdict(None, f"copies the reflection prompt: {echoed!r}", usage)
        vague = vague_condition(text, self.field_names)
        if vague is not None:
            logger.info("dropped a lesson whose condition holds for any input: %s", text)
            return Verdict(None, vague, usage)
        problem = self.problem(text, materials)
        if problem is not None:
            task_text = "\n\n".join(m.task_text for m in materials)
            rewritten, spent = self.reflector.generalize(text, task_text, problem, self.max_words)
            usage = usage + spent
            rewritten = normalize_text(rewritten)
            if not rewritten or self.problem(rewritten, materials) is not None:
                logger.info("dropped a lesson that restates its example (%s): %s", problem, text)
                return Verdict(None, f"restates its example: {problem}", usage)
            text = rewritten
        if word_count(text) > self.max_words:
            shortened, spent = self.reflector.shorten(text, self.max_words)
            usage = usage + spent
            shortened = normalize_text(shortened)
            if not shortened or word_count(shortened) > self.max_words or self.problem(shortened, materials):
                logger.info("dropped a lesson over %d words: %s", self.max_words, text)
                return Verdict(None, f"over {self.max_words} words even after shortening", usage)
            text = shortened
        return Verdict(text, problem, usage)
