"""How a candidate lesson is judged from its paired greedy trials: every answer it changed, and its shift.

Counting only fixes (wrong -> right) and breaks (right -> wrong) cannot see an answer shift: at a low base
accuracy almost nothing is right, so almost nothing can break, and a lesson that moves every answer it
reaches to one common answer fixes the examples of that answer and "breaks" nothing, while the answers it
moves from one wrong answer to another wrong one are not counted at all. So every changed answer counts
here, where the lesson was shown:

    fixes     wrong -> right
    breaks    right -> wrong
    changes   wrong -> another wrong answer (a right answer reworded is not a change)
    precision fixes / (fixes + breaks + changes)

and the lesson is compared, on the examples it was shown to, with its *shift*: answering its target (the
answer it changed most answers to) for every one of them, scored by the metric from the labels, with no
model. A rule tells inputs apart; a shift does not, and a lesson that does no better than its shift has not
shown that it teaches a rule. "Better" is right on more of them, or as many while moving none to a wrong
answer (at a low base accuracy the shift and a precise lesson are often right on the same ones; what tells
them apart is what else they move). Where the shift is right on every shown example there is nothing to
tell apart, and precision decides (precision-checked hypotheses as in HypoGeniC and D5; a per-rule helpful /
harmful record as in ExpeL and ACE).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import dspy

from tfgrpo_dspy.inference.outputs import answer_text
from tfgrpo_dspy.inference.scoring import score_prediction
from tfgrpo_dspy.reflection.formatting import SUCCESS
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings


@dataclass(frozen=True)
class Trial:
    """One greedy run of one training example with one library: its score, the lessons its calls showed and
    its final outputs (no reasoning; None in run logs written before outputs were kept)."""

    score: float
    shown: tuple[int, ...] = ()
    outputs: dict[str, Any] | None = None

    @property
    def right(self) -> bool:
        return self.score >= SUCCESS

    @property
    def answer(self) -> str | None:
        return None if self.outputs is None else answer_text(self.outputs)


@dataclass(frozen=True)
class LessonCheck:
    """One candidate's verification: where it was tried, what it changed there, its shift, and the verdict."""

    text: str
    origin: str  # "induction" or "extraction"
    sources: tuple[int, ...]
    tried: tuple[int, ...] = ()  # training examples run with the candidate
    shown: tuple[int, ...] = ()  # ... of which its lesson reached at least one call
    fixes: tuple[int, ...] = ()  # shown, wrong with the current library, right with the candidate
    breaks: tuple[int, ...] = ()  # shown, right with the current library, wrong with the candidate
    changes: tuple[int, ...] = ()  # shown, wrong with both, but another wrong answer with the candidate
    target: str | None = None  # the answer it changed most answers to
    lesson_right: int = 0  # shown examples right with the candidate
    shift_right: int | None = None  # ... right when answering the target to each of them (None: no target)
    shift_misses: int | None = None  # ... that the shift moves to a wrong answer (not already the target)
    kept: bool = False
    reason: str = ""

    @property
    def net(self) -> int:
        return len(self.fixes) - len(self.breaks)

    @property
    def changed(self) -> int:
        return len(self.fixes) + len(self.breaks) + len(self.changes)

    @property
    def precision(self) -> float:
        return len(self.fixes) / self.changed if self.changed else 0.0

    @property
    def beats_shift(self) -> bool | None:
        """Right on more shown examples than its shift, or as many while moving none to a wrong answer (which
        the shift does); None when there is no shift to compare with or it is right on every shown example."""
        if self.shift_right is None or self.shift_misses is None or self.shift_right >= len(self.shown):
            return None
        if self.lesson_right != self.shift_right:
            return self.lesson_right > self.shift_right
        # As many right: only a lesson that moved nothing to a wrong answer has told inputs apart. Moving fewer
        # wrong than the shift is not enough: a lesson the model follows on some inputs at random does that,
        # and on a dev run (tickets seed 11) two such lessons shipped a program answering one queue to 87 of
        # 100 held-out tickets.
        return not self.breaks and not self.changes and self.shift_misses > 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "net": self.net, "precision": round(self.precision, 3)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LessonCheck:
        def indices(key: str) -> tuple[int, ...]:
            return tuple(data.get(key) or ())

        def count(key: str) -> int | None:
            return None if data.get(key) is None else int(data[key])

        return cls(text=data["text"], origin=data.get("origin", "induction"), sources=indices("sources"),
                   tried=indices("tried"), shown=indices("shown"), fixes=indices("fixes"), breaks=indices("breaks"),
                   changes=indices("changes"), target=data.get("target"), lesson_right=int(data.get("lesson_right", 0)),
                   shift_right=count("shift_right"), shift_misses=count("shift_misses"), kept=bool(data.get("kept")),
                   reason=str(data.get("reason", "")))


def tally(check: LessonCheck, lesson_id: int, baseline: Mapping[int, Trial], trials: Mapping[int, Trial],
          shift_score: Callable[[int, dict[str, Any]], float] | None) -> LessonCheck:
    """``check`` with what the candidate (``lesson_id``) changed where it was shown, paired with ``baseline``;
    ``shift_score(i, outputs)`` scores example i answered ``outputs`` (from its labels), None: no shift."""
    shown = sorted(i for i, t in trials.items() if lesson_id in t.shown)
    fixes = [i for i in shown if not baseline[i].right and trials[i].right]
    breaks = [i for i in shown if baseline[i].right and not trials[i].right]
    changes = [i for i in shown if not baseline[i].right and not trials[i].right
               and trials[i].answer is not None and trials[i].answer != baseline[i].answer]
    moved = [trials[i] for i in [*fixes, *breaks, *changes] if trials[i].outputs is not None]
    target = Counter(t.answer for t in moved).most_common(1)[0][0] if moved else None
    shift_right = shift_misses = None
    if target is not None and shift_score is not None:
        outputs = next(t.outputs for t in moved if t.answer == target)
        shift_wrong = [i for i in shown if shift_score(i, outputs) < SUCCESS]
        shift_right = len(shown) - len(shift_wrong)
        shift_misses = sum(baseline[i].answer != target for i in shift_wrong)
    return replace(check, tried=tuple(sorted(trials)), shown=tuple(shown), fixes=tuple(fixes), breaks=tuple(breaks),
                   changes=tuple(changes), target=target, lesson_right=sum(trials[i].right for i in shown),
                   shift_right=shift_right, shift_misses=shift_misses)


def judge(check: LessonCheck, settings: TrainingFreeGRPOSettings) -> LessonCheck:
    """The verdict on a tallied candidate: kept when its fixes minus breaks reach ``verify_margin``, it breaks
    fewer than it fixes, its precision reaches ``verify_precision`` and (``verify_shift``) it does better than
    its shift where it was shown (`LessonCheck.beats_shift`)."""
    summary = (f"{len(check.fixes)} fixed / {len(check.breaks)} broken / {len(check.changes)} other changes where "
               f"shown ({len(check.shown)} of {len(check.tried)} training examples tried), precision "
               f"{check.precision:.2f}")
    if check.shift_right is not None:
        summary += (f"; right on {check.lesson_right}, its shift to {check.target!r} on {check.shift_right} "
                    f"moving {check.shift_misses} to a wrong answer")
    margin, precision = settings.verify_margin, settings.verify_precision
    if check.net < margin or len(check.breaks) >= len(check.fixes):
        return replace(check, kept=False, reason=f"{summary}: net {check.net:+d}, needs {margin:+d} and fewer "
                                                 "breaks than fixes")
    if check.precision < precision:
        return replace(check, kept=False, reason=f"{summary}: precision below {precision:.2f}")
    if settings.verify_shift and check.beats_shift is False:
        return replace(check, kept=False, reason=f"{summary}: no better than its shift")
    return replace(check, kept=True, reason=f"{summary}: net {check.net:+d} reaches {margin:+d}")


def shift_scorer(metric: Callable, trainset: Sequence[dspy.Example], failure_score: float
                 ) -> Callable[[int, dict[str, Any]], float]:
    """Scores training example i answered with the given outputs: the metric on the labels, no model."""
    def score(index: int, outputs: dict[str, Any]) -> float:
        return score_prediction(metric, trainset[index], dspy.Prediction(**outputs), failure_score).value
    return score
