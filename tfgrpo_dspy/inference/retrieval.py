"""Which lessons one call is shown: the k most relevant to its inputs, or those of the nearest training input.

Without routes, a call is shown the ``top_k`` lessons nearest its inputs (BM25 over the lesson texts, query = the
input values, `relevant_lessons`); with routes (``route_by="example"`` or ``"answer"``), the ``top_k`` most
relevant of the lessons of the training input nearest its inputs (`routed_lessons`). A rollout of a training
example is routed by the nearest OTHER training input (`leaving_out`), as a new input would be. The lessons shown
inside `collect_shown_lessons` are collected for the verification to credit. `RETRIEVAL` and `ROUTING` name the
choice: saved with a program, they change whenever the choice of lessons does.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from rank_bm25 import BM25Okapi

from tfgrpo_dspy.library.library import ExperienceLibrary

RETRIEVAL = "bm25-lucene-idf"  # see LuceneBM25; the name changes whenever the choice of lessons does
ROUTING = "nearest-route-then-bm25-lucene-idf"  # the nearest route's lessons, then the same within them


def relevant_lessons(library: ExperienceLibrary, query: str, k: int | None) -> ExperienceLibrary:
    """The ``k`` lessons of ``library`` most relevant to ``query`` (BM25), in library order."""
    if k is None or len(library) <= k:
        return library
    scores = LuceneBM25([retrieval_words(e.text) for e in library]).get_scores(retrieval_words(query))
    ranked = sorted(range(len(library)), key=lambda i: (-scores[i], i))[:k]
    chosen = {library.experiences[i].id for i in ranked}
    return ExperienceLibrary([e for e in library if e.id in chosen], max_experiences=library.max_experiences,
                             max_words=library.max_words, next_id=library.next_id)


def route_text(inputs: dict[str, Any]) -> str:
    """What an input is routed by, and the query of a call: its values, in order, as one text."""
    return " ".join(str(v) for v in inputs.values())


# The route input of the training example being run (its own route is not used: see `leaving_out`).
_LEFT_OUT: contextvars.ContextVar[str | None] = contextvars.ContextVar("tfgrpo_left_out_route", default=None)


@contextlib.contextmanager
def leaving_out(route_input: str) -> Iterator[None]:
    """Calls inside this block (in this thread) are not routed by the route of ``route_input``: a training
    example is shown what its nearest other training input is, so a lesson is judged where it would be shown
    to a new input, not on the example it was routed from."""
    token = _LEFT_OUT.set(route_input)
    try:
        yield
    finally:
        _LEFT_OUT.reset(token)


def routed_lessons(library: ExperienceLibrary, query: str, k: int | None) -> ExperienceLibrary:
    """The lessons of the route whose input is nearest to ``query`` (BM25), other than the one left out, and of
    those the ``k`` most relevant to ``query`` (`relevant_lessons`); none when no route shares a word with the
    query or the nearest route has no lesson. Routed by answer, a route holds every lesson with its answer (a
    chargeback rule and a data-request rule for one queue): the query picks the one it is about, and a new
    candidate is not hidden behind the lesson kept before it."""
    left_out = _LEFT_OUT.get()
    routes = [r for r in library.routes if r.input != left_out]
    words = retrieval_words(query)
    if not routes or not words:
        return ExperienceLibrary([], next_id=library.next_id)
    scores = LuceneBM25([retrieval_words(r.input) for r in routes]).get_scores(words)
    best = max(range(len(routes)), key=lambda i: (scores[i], -i))
    chosen = set(routes[best].lessons) if scores[best] > 0 else set()
    nearest = ExperienceLibrary([e for e in library if e.id in chosen], max_experiences=library.max_experiences,
                                max_words=library.max_words, next_id=library.next_id)
    return relevant_lessons(nearest, query, k)


def shown_lessons(library: ExperienceLibrary, query: str, k: int | None) -> ExperienceLibrary:
    """The lessons one call with this query is shown: by its route when the library has routes, else the k
    most relevant."""
    if library.routes:
        return routed_lessons(library, query, k)
    return relevant_lessons(library, query, k)


# The ids of the lessons shown by the calls of the current rollout, when someone is collecting them.
_SHOWN: contextvars.ContextVar[set[int] | None] = contextvars.ContextVar("tfgrpo_shown_lessons", default=None)


@contextlib.contextmanager
def collect_shown_lessons() -> Iterator[set[int]]:
    """The ids of every lesson an `ExperiencePredict` shows inside this block (in this thread): what a
    verification credits a fix to."""
    shown: set[int] = set()
    token = _SHOWN.set(shown)
    try:
        yield shown
    finally:
        _SHOWN.reset(token)


def note_shown(ids: Iterable[int]) -> None:
    """Record lessons a call showed, for the `collect_shown_lessons` block around it (if any)."""
    collector = _SHOWN.get()
    if collector is not None:
        collector.update(ids)


def retrieval_words(text: str) -> list[str]:
    """The words retrieval matches on: lowercase runs of letters and digits."""
    return re.findall(r"[a-z0-9]+", text.lower())


class LuceneBM25(BM25Okapi):
    """BM25 with Lucene's idf, log(1 + (N - n + 0.5) / (n + 0.5)), which is positive for every word. Okapi's idf
    (rank_bm25's BM25Okapi) is zero for a word in one of two lessons and negative for one in both, so a library
    of two lessons showed its first lesson to every input."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))
