"""Verification: a candidate lesson enters a step's edits only if re-running the policy proves it helps.

A small reflector writes a useful lesson now and then and spurious ones the rest of the time, and any
change of a small model's prompt moves answers both ways; so a candidate is judged by measurement, not
by the model. Each candidate is added to the current library and the program is run greedily (the
repeatable path, where an answer changes only because the prompt did) on TRAINING examples, paired with
the current library's own greedy runs of the same examples:

    1. the examples it was induced from: a candidate shown to some of them that fixes none is dropped at once;
    2. a batch of other training examples (``verify_batch``): first those its induction was told to tell
       its sources apart from, then half that the current library gets right (where a lesson can break
       something) and half that it gets wrong, each half taking the references in turn so that the batch
       reflects the task's mix of answers; with routes, only examples the lesson would be shown to.

Every answer it changes counts, and only where the candidate was shown (`tfgrpo_dspy.run.judgement`): with
retrieval (``top_k``) the lesson reaches only the calls it is retrieved for, and elsewhere the prompt,
and so the answer, is the current library's. With ``route_by="example"`` a candidate is routed to the
inputs of the examples it came from (``route_by="answer"``: and of every example that has their shared answer),
and each training example is shown the lessons of its nearest OTHER training input (leave-one-out,
`leaving_out`), so a lesson is credited only where a new input like that example would see it; a kept lesson is
routed to its sources and its fixes (and, by answer, to the examples of its target). A candidate is kept when its
fixes minus its breaks reach ``verify_margin``, it breaks fewer than it fixes, its precision reaches
``verify_precision`` and it does better than its shift. Every run is kept in the run log by library
fingerprint, so a resumed run or a candidate tried twice is never paid for again.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dspy
import tqdm

from tfgrpo_dspy.inference.injection import with_experiences
from tfgrpo_dspy.inference.outputs import final_outputs, jsonable
from tfgrpo_dspy.inference.retrieval import collect_shown_lessons, leaving_out, route_text, shown_lessons
from tfgrpo_dspy.inference.rollouts import run_rollout
from tfgrpo_dspy.library.edits import ApplyReport, EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.parallel import map_in_threads
from tfgrpo_dspy.run.accounting import Ledger
from tfgrpo_dspy.run.judgement import LessonCheck, Trial, judge, shift_scorer, tally
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.run.selection import library_fingerprint
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings

logger = logging.getLogger(__name__)

ROLE = "verification"


@dataclass(frozen=True)
class CandidateLesson:
    """A lesson proposed this step, with the training examples it came from and those its induction was told
    to tell them apart from (tried first: where a lesson that only shifts answers shows it)."""

    text: str
    origin: str
    sources: tuple[int, ...]
    contrast: tuple[int, ...] = ()


@dataclass
class TrialCache:
    """Greedy trials of training examples by library fingerprint, in memory and in the run log."""

    log: RunLog
    trials: dict[str, dict[int, Trial]] = field(default_factory=dict)

    def get(self, fingerprint: str) -> dict[int, Trial]:
        if fingerprint not in self.trials:
            recorded = self.log.load_library_record("verification", fingerprint) or {}
            self.trials[fingerprint] = {int(i): Trial(t["score"], tuple(t.get("shown", ())), t.get("outputs"))
                                        for i, t in (recorded.get("trials") or {}).items()}
        return self.trials[fingerprint]

    def save(self, fingerprint: str, library: ExperienceLibrary) -> None:
        self.log.save_library_record("verification", fingerprint, {"library": library.texts, "trials": {
            str(i): {"score": t.score, "shown": list(t.shown), "outputs": t.outputs}
            for i, t in sorted(self.trials[fingerprint].items())}})


class Verifier:
    """Runs libraries greedily on training examples and judges candidate lessons by their paired effect."""

    def __init__(self, program: dspy.Module, trainset: Sequence[dspy.Example], metric: Callable,
                 settings: TrainingFreeGRPOSettings, log: RunLog, ledger: Ledger,
                 reference: Callable[[int], str]):
        self.program = program
        self.trainset = list(trainset)
        self.metric = metric
        self.settings = settings
        self.ledger = ledger
        self.reference = reference
        self.cache = TrialCache(log)
        self.shift_score = (shift_scorer(metric, self.trainset, settings.failure_score) if settings.verify_shift
                            else None)
        # The training inputs lessons are routed by (route_by="example"), by example index; None: no routes.
        self.route_inputs = ([route_text(e.inputs().toDict()) for e in self.trainset]
                             if settings.route_by != "lesson" else None)

    # -- trials -------------------------------------------------------------------------------------------
    def run(self, library: ExperienceLibrary, indices: Sequence[int]) -> dict[int, Trial]:
        """The library's greedy trials of ``indices``, running only those not already known."""
        s = self.settings
        fingerprint = library_fingerprint(library, s, 0.0)
        known = self.cache.get(fingerprint)
        todo = [i for i in dict.fromkeys(indices) if i not in known]
        if todo:
            self.ledger.check_budget()
            program = with_experiences(self.program, library, s.predictors, placement=s.placement, top_k=s.top_k)

            def trial(index: int) -> tuple[Trial, Any]:
                with collect_shown_lessons() as shown:
                    rollout = run_rollout(program, self.trainset[index], example_index=index, sample_index=0,
                                          rollout_id=0, temperature=0.0, metric=self.metric,
                                          failure_score=s.failure_score, timeout=s.call_timeout)
                score = rollout.score if rollout.scored else s.failure_score
                return Trial(score, tuple(sorted(shown)), jsonable(final_outputs(rollout.outputs))), rollout

            with tqdm.tqdm(total=len(todo), desc=f"verification ({len(library)} lessons)", leave=False,
                           disable=not s.progress) as bar:
                for index, (result, rollout) in map_in_threads(trial, todo, s.num_threads):
                    bar.update(1)
                    known[index] = result
                    self.ledger.record(ROLE, rollout.usage, rollout.error or rollout.metric_error, "verification")
            self.cache.save(fingerprint, library)
        return {i: known[i] for i in indices}

    # -- candidates ---------------------------------------------------------------------------------------
    def check(self, candidates: Sequence[CandidateLesson], library: ExperienceLibrary) -> list[LessonCheck]:
        """Each candidate in the order given, tried on top of ``library`` and the candidates kept before it.

        A lesson is judged against the library it would join: with retrieval (``top_k``) a new lesson changes
        which lesson other inputs are shown, so lessons that each helped the same library alone need not help
        together (seen on the tickets demo: seven lessons verified one by one, rejected together by the gate).
        Kept lessons are added in this order, so the step's library is the last one verified here."""
        everyone = range(len(self.trainset))
        current = library.copy()
        checks = []
        for candidate in candidates:
            # Inputs the last kept lesson is not shown to send the same prompts as before: DSPy's cache answers
            # them, so only the changed prompts cost a call.
            check = self.check_one(candidate, current, self.run(current, everyone))
            self.add_kept(current, [check], step=None)
            checks.append(check)
        return checks

    def add_kept(self, library: ExperienceLibrary, checks: Sequence[LessonCheck], step: int | None) -> ApplyReport:
        """Add the kept lessons to ``library`` in the order they were verified (each on top of the ones before
        it, so the result is the library the last of them was verified in), each with the examples it came from
        and, with routes, routed to them and to the examples it fixed; the reason of each add is its
        verification record."""
        entries = []
        for check in (c for c in checks if c.kept):
            op = EditOp(op="add", text=check.text, reason=f"verified: {check.reason}")
            entries += self._add(library, op, check.sources, self.routed_to(check.sources, check.fixes), step).entries
        return ApplyReport(tuple(entries))

    def routed_to(self, sources: Sequence[int], fixes: Sequence[int] = ()) -> list[int]:
        """The training examples a lesson is routed to: its sources and fixes (``route_by="example"``), and with
        ``route_by="answer"`` also every example whose reference is the answer its sources share (its target), so
        that a call is shown it wherever its nearest training input has that answer. Sources that do not share
        one answer (open answers) have no target: the lesson stays with its sources and fixes."""
        routed = [*sources, *fixes]
        targets = {self.reference(i) for i in sources}
        if self.settings.route_by == "answer" and len(targets) == 1:
            routed += [i for i in range(len(self.trainset)) if self.reference(i) in targets]
        return routed

    def _add(self, library: ExperienceLibrary, op: EditOp, sources: Sequence[int], routed: Sequence[int],
             step: int | None) -> ApplyReport:
        report = library.apply([op], step=step, sources=sources)
        entry = report.entries[0]
        if self.route_inputs is not None and entry.status == "applied" and entry.result_id is not None:
            library.route(entry.result_id, [self.route_inputs[i] for i in sorted(set(routed))],
                          everyone=self.route_inputs)
        return report

    def check_one(self, candidate: CandidateLesson, library: ExperienceLibrary, baseline: dict[int, Trial]
                  ) -> LessonCheck:
        with_candidate = library.copy()
        report = self._add(with_candidate, EditOp(op="add", text=candidate.text), (), self.routed_to(candidate.sources),
                           None)
        entry = report.entries[0] if report.entries else None
        if entry is None or entry.status != "applied" or entry.result_id is None:
            detail = entry.detail if entry is not None else "not applied"
            return LessonCheck(candidate.text, candidate.origin, candidate.sources, reason=f"not added: {detail}")
        lesson_id = entry.result_id
        check = LessonCheck(candidate.text, candidate.origin, candidate.sources)
        sources = [i for i in candidate.sources if i in baseline]
        first = self.run(with_candidate, sources)
        check = tally(check, lesson_id, baseline, first, self.shift_score)
        # Routed, a source sees the lesson only when its nearest other training input is another source (often
        # none is: 21 of 30 candidates of a dev run reached 0 or 1 of their 4 sources); the batch of examples it
        # does reach is then the evidence. Otherwise, fixing none of its sources, it is dropped at once.
        if not check.fixes and (check.shown or self.route_inputs is None):
            return replace(check, reason=f"fixed none of the {len(sources)} example(s) it came from"
                                         f" ({len(check.shown)} shown)")
        second = self.run(with_candidate, self.batch(candidate, baseline, with_candidate, lesson_id))
        return judge(tally(check, lesson_id, baseline, {**first, **second}, self.shift_score), self.settings)

    def batch(self, candidate: CandidateLesson, baseline: dict[int, Trial], with_candidate: ExperienceLibrary,
              lesson_id: int) -> list[int]:
        """Other training examples: first those its induction contrasted its sources with, then half the current
        library gets right and half it gets wrong, references in turn (seeded by the candidate, so a resumed run
        draws the same batch). With routes, only examples the lesson would be shown to: elsewhere the prompt is
        the current library's and the trial tells nothing."""
        size = self.settings.verify_batch
        rng = random.Random(f"{self.settings.seed}:{candidate.text}")
        pool = [i for i in baseline if i not in candidate.sources]
        if self.route_inputs is not None:
            pool = [i for i in pool if self._reaches(with_candidate, lesson_id, self.route_inputs[i])]
        chosen = [i for i in candidate.contrast if i in pool][:size]
        rest = [i for i in pool if i not in chosen]
        right = [i for i in rest if baseline[i].right]
        wrong = [i for i in rest if not baseline[i].right]
        chosen += self._by_reference(right, min(len(right), (size - len(chosen)) // 2), rng)
        chosen += self._by_reference(wrong, min(len(wrong), size - len(chosen)), rng)
        if len(chosen) < size:  # too few wrong ones: fill with right ones
            chosen += self._by_reference([i for i in right if i not in chosen], size - len(chosen), rng)
        return chosen

    def _reaches(self, library: ExperienceLibrary, lesson_id: int, query: str) -> bool:
        """Whether a training example routed by ``query`` would be shown the lesson (its own route left out, as
        in its trials)."""
        with leaving_out(query):
            return any(e.id == lesson_id for e in shown_lessons(library, query, self.settings.top_k))

    def _by_reference(self, indices: list[int], count: int, rng: random.Random) -> list[int]:
        by_reference: dict[str, list[int]] = defaultdict(list)
        for i in indices:
            by_reference[self.reference(i)].append(i)
        queues = [rng.sample(members, len(members)) for _, members in sorted(by_reference.items())]
        rng.shuffle(queues)
        chosen: list[int] = []
        while len(chosen) < count and any(queues):
            for queue in queues:
                if queue and len(chosen) < count:
                    chosen.append(queue.pop())
        return chosen
