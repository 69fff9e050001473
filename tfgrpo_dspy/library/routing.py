"""A library's routes kept in step with its lessons: which training inputs are shown which lessons.

A route is one training input and the lessons an input nearest to it is shown (`Route`). Routing a lesson adds
it to the routes of the inputs it helped; deleting a lesson removes it from every route, and merging lessons
sends their routes to the lesson they became. These are pure functions of the routes: `ExperienceLibrary`
assigns what they return.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tfgrpo_dspy.library.file import Route


def routes_with(routes: Sequence[Route], lesson_id: int, inputs: Iterable[str], everyone: Iterable[str] = ()
                ) -> list[Route]:
    """``routes`` with lesson ``lesson_id`` shown to the inputs nearest to ``inputs``, and a route (to no lesson,
    unless it has one) for every input of ``everyone``."""
    routed = {r.input: r.lessons for r in routes}
    for text in everyone:
        routed.setdefault(text, ())
    for text in inputs:
        lessons = routed.get(text, ())
        routed[text] = lessons if lesson_id in lessons else (*lessons, lesson_id)
    return [Route(text, lessons) for text, lessons in routed.items()]


def rerouted(routes: Sequence[Route], removed: Sequence[int], into: int | None = None) -> list[Route]:
    """Routes to deleted lessons go nowhere; routes to merged lessons go to the lesson they became."""
    def rewrite(lessons: tuple[int, ...]) -> tuple[int, ...]:
        kept = [into if i in removed else i for i in lessons]
        return tuple(dict.fromkeys(i for i in kept if i is not None))

    return [Route(r.input, rewrite(r.lessons)) for r in routes]
