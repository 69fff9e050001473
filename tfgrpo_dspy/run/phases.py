"""The phases of one step, each parallel and logged: rollouts, summaries, lessons, inductions, checks, the update.

    sample     G rollouts per example with the current library -> groups (failed rollouts not counted)
    summarize  one summary per scored rollout of a group that reaches the reflection
    extract    one call per such group -> at most max_proposals lessons, through the guard
    induce     several failed examples at once -> num_candidates candidate lessons per set, through the
               guard (`tfgrpo_dspy.reflection.induction`)
    verify     each candidate re-run greedily on training examples, kept only if it fixes more than it
               breaks (`tfgrpo_dspy.run.verification`)
    update     near-duplicate lessons clustered across groups, then update calls in context-sized
               chunks -> edits, through the guard and the delete rules -> a candidate library
               (`tfgrpo_dspy.run.update`); used when lessons are not verified

Every result is written to the run log as soon as it exists and reused on resume; a failed record
is redone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import tqdm

from tfgrpo_dspy.inference.injection import with_experiences
from tfgrpo_dspy.inference.retrieval import route_text
from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout, apply_majority_vote, run_rollout
from tfgrpo_dspy.library.edits import ApplyReport
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.parallel import map_in_threads
from tfgrpo_dspy.reflection.formatting import as_text
from tfgrpo_dspy.reflection.induction import (
    Induction,
    InductionSet,
    answers_of,
    contrast_of,
    failures_of,
    first_sentence,
    format_contrast,
    format_failures,
    induction_sets,
)
from tfgrpo_dspy.reflection.lessons import LessonCluster, cluster_lessons, render_lesson
from tfgrpo_dspy.reflection.phrases import contrast_phrase
from tfgrpo_dspy.reflection.records import Lesson, Proposal, RolloutSummary, UpdateDecision
from tfgrpo_dspy.run.context import RunContext
from tfgrpo_dspy.run.judgement import LessonCheck
from tfgrpo_dspy.run.update import UpdatePhase
from tfgrpo_dspy.run.verification import CandidateLesson

logger = logging.getLogger(__name__)

PHRASE = -1  # the draw number of an induction that code wrote (`contrast_phrase`), not the LM
K = TypeVar("K")
R = TypeVar("R")


class Phases:
    """Runs the phases of a step on a `RunContext`."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    # -- sample -------------------------------------------------------------------------------------
    def sample(self, step: int, library: ExperienceLibrary, indices: Sequence[int]) -> list[GroupOutcome]:
        s = self.ctx.settings
        candidate = with_experiences(self.ctx.program, library, s.predictors, placement=s.placement, top_k=s.top_k)
        # A group's rollouts next to each other: sent together, the embedded server evaluates their prompt once
        # and samples them from it (`tfgrpo_dspy.lm.coalesce`).
        jobs = [(i, k) for i in indices for k in range(s.group_size)]

        def rollout(job: tuple[int, int]) -> Rollout:
            i, k = job
            rollout_id = self.rollout_id(step, i, k)
            return run_rollout(candidate, self.ctx.trainset[i], example_index=i, sample_index=k,
                               rollout_id=rollout_id, temperature=s.temperature,
                               metric=self.ctx.metric if s.ground_truth else None, failure_score=s.failure_score,
                               sampling_seed=rollout_id % 2**31 if s.seed_rollouts else None, timeout=s.call_timeout)

        results = self.cached_map(step, "rollouts", jobs, lambda job: f"ex{job[0]:04d}_s{job[1]}", rollout, Rollout,
                                  role="policy", failed=lambda r: r.failed, desc=f"step {step} rollouts")
        groups = []
        for i in indices:
            members = [results[(i, k)] for k in range(s.group_size)]
            if not s.ground_truth:
                members = apply_majority_vote(members, s.answer_field)
            groups.append(GroupOutcome(example_index=i, rollouts=tuple(members)))
        return groups

    def rollout_id(self, step: int, example_index: int, sample_index: int) -> int:
        """Unique for the whole run and the same on resume, so redone work may come from DSPy's cache."""
        g = self.ctx.settings.group_size
        per_step = len(self.ctx.trainset) * g
        return self.ctx.settings.seed * 10**12 + (step - 1) * per_step + example_index * g + sample_index + 1

    # -- summarize ----------------------------------------------------------------------------------
    def summarize(self, step: int, groups: Sequence[GroupOutcome], library: ExperienceLibrary
                  ) -> dict[tuple[int, int], RolloutSummary]:
        by_key = {(r.example_index, r.sample_index): r for g in groups for r in g.rollouts if r.scored}
        return self.cached_map(
            step, "summaries", list(by_key), lambda key: f"ex{key[0]:04d}_s{key[1]}",
            lambda key: self.ctx.reflector.summarize(by_key[key], self.ctx.reference(key[0]), library),
            RolloutSummary, role="reflection", failed=lambda s: s.error is not None, desc=f"step {step} summaries",
        )

    # -- extract ------------------------------------------------------------------------------------
    def extract(self, step: int, groups: Sequence[GroupOutcome], summaries: dict[tuple[int, int], RolloutSummary],
                library: ExperienceLibrary) -> list[Proposal]:
        by_index = {g.example_index: g for g in groups}
        results = self.cached_map(
            step, "proposals", list(by_index), lambda i: f"ex{i:04d}",
            lambda i: self._extract_one(by_index[i], {k: s for (e, k), s in summaries.items() if e == i}, library),
            Proposal, role="reflection", failed=lambda p: p.error is not None, desc=f"step {step} lessons",
        )
        return [results[i] for i in by_index]

    def _extract_one(self, group: GroupOutcome, summaries: dict[int, RolloutSummary], library: ExperienceLibrary
                     ) -> Proposal:
        s, i = self.ctx.settings, group.example_index
        extraction, error, usage = self.ctx.reflector.extract(
            self.ctx.task_text(i), self.ctx.reference(i), group, summaries, library,
            max_lessons=s.max_proposals, max_words=s.max_words)
        if extraction is None:
            return Proposal(i, error=error, usage=usage)
        material = self.ctx.material(i, group)
        lessons = []
        dropped = [{"line": line, "dropped_because": "not 'When <condition>, <action>.'"}
                   for line in extraction.unparsed]
        for raw in extraction.lessons:
            text = render_lesson(raw.condition, raw.action)
            if not text:
                dropped.append({"condition": raw.condition, "action": raw.action, "dropped_because": "empty part"})
                continue
            verdict = self.ctx.guard.check(text, [material])
            usage = usage + verdict.usage
            if verdict.text is None:
                dropped.append({"text": text, "dropped_because": verdict.reason})
            else:
                lessons.append(Lesson(verdict.text, i, raw.replaces))
        return Proposal(i, difference=extraction.difference, lessons=lessons, misleading=extraction.misleading,
                        useful=extraction.useful, dropped=dropped,
                        raw_count=len(extraction.lessons) + len(extraction.unparsed), usage=usage)

    # -- induce -------------------------------------------------------------------------------------
    def induce(self, step: int, groups: Sequence[GroupOutcome]) -> list[Induction]:
        """Sets of failed examples, each sampled num_candidates times (a new draw per step and candidate)."""
        ctx, s = self.ctx, self.ctx.settings
        sets = induction_sets(failures_of(groups, ctx.reference, ctx.answer), ctx.task_text, s.induction_examples,
                              neighbours=s.induction_neighbours)
        answers = answers_of(groups, ctx.answer)
        everyone = range(len(ctx.trainset))
        sets = [replace(x, contrast=contrast_of(x, answers, ctx.reference, ctx.task_text, everyone,
                                                s.induction_contrast)) for x in sets]
        # Draw by draw across the sets (every set's first draw, then every set's second...): calls sent together
        # then have different prompts, so the embedded server does not coalesce them. Coalesced, a set's draws
        # were slower (0.76x over two rounds, benchmarks/results/sample_coalescing_sets.md): unlike a rollout,
        # a draw decodes long, and one n-request decodes fewer sequences at a time than four separate calls.
        jobs = [(n, k) for k in range(s.num_candidates) for n in range(len(sets))]
        # A set's contrast phrase is draw PHRASE: code, not the LM, so one per set.
        jobs += [(n, PHRASE) for n, x in enumerate(sets) if s.induction_phrases and x.shared]
        results = self.cached_map(
            step, "inductions", jobs,
            lambda job: f"set{job[0] + 1:02d}_" + ("phrase" if job[1] == PHRASE else f"d{job[1]}"),
            lambda job: (self._phrase_one(sets[job[0]]) if job[1] == PHRASE
                         else self._induce_one(sets[job[0]], (step - 1) * s.num_candidates + job[1])), Induction,
            role="reflection", failed=lambda r: r.error is not None, desc=f"step {step} inductions")
        return [results[job] for job in jobs]

    def _phrase_one(self, induction_set: InductionSet) -> Induction:
        """The set's contrast phrase as a rule whose action is the reference the set shares, through the guard."""
        ctx, sources, contrast = self.ctx, list(induction_set.sources), list(induction_set.contrast)
        reference = induction_set.failures[0].reference
        # The input values as written (task_text is JSON of the inputs: its "\n" would join a ticket's lines).
        texts = [route_text(example.inputs().toDict()) for example in ctx.trainset]
        found = contrast_phrase(sources, reference, texts, ctx.reference)
        if found is None:
            return Induction(sources, PHRASE, contrast, dropped_because="no precise phrase")
        written = f"phrases: {list(found.phrases)}, {found.support} of {found.matches} training inputs"
        lesson = render_lesson(found.condition, self._reference_action(induction_set))
        verdict = ctx.guard.check(lesson, [ctx.material(i) for i in sources])
        return Induction(sources, PHRASE, contrast, lesson=verdict.text, raw=written,
                         dropped_because=verdict.reason if verdict.text is None else None, usage=verdict.usage)

    def _induce_one(self, induction_set: InductionSet, sample: int) -> Induction:
        ctx, sources, contrast = self.ctx, list(induction_set.sources), list(induction_set.contrast)

        def inputs(index: int) -> dict[str, Any]:
            return ctx.trainset[index].inputs().toDict()

        raw, error, usage = ctx.reflector.induce(format_failures(induction_set, inputs), sample,
                                                 ctx.settings.induction_temperature,
                                                 format_contrast(induction_set, inputs, ctx.reference))
        if raw is None:
            return Induction(sources, sample, contrast, error=error, usage=usage)
        lesson = render_lesson(first_sentence(raw.condition), self._action(induction_set, raw.action))
        written = f"condition: {raw.condition} | action: {raw.action}"
        if not lesson:
            return Induction(sources, sample, contrast, raw=written, dropped_because="empty part", usage=usage)
        verdict = ctx.guard.check(lesson, [ctx.material(i) for i in sources])
        return Induction(sources, sample, contrast, lesson=verdict.text, raw=written,
                         dropped_because=verdict.reason if verdict.text is None else None, usage=usage + verdict.usage)

    def _action(self, induction_set: InductionSet, written: str) -> str:
        """The rule's action: the LM's first sentence, or, with ``induction_action="reference"`` and failures that
        share one reference, that answer (the 1.5B model named it in few actions: on development seed 11, 24 of 28
        candidates changed no answer to it, and the one that said "the queue: retention" fixed 5 of 6)."""
        if self.ctx.settings.induction_action == "reference" and induction_set.shared:
            return self._reference_action(induction_set)
        return first_sentence(written)

    def _reference_action(self, induction_set: InductionSet) -> str:
        """The reference the set's failures share, in the ``reference_action`` wording (on development seed 11,
        shown its deciding house rule, the embedded model routed 85.0% of tickets told "route it to X" and 70.8%
        told "answer with queue: X"; benchmarks/results/lesson_wording.md)."""
        failure = induction_set.failures[0]
        labels = self.ctx.trainset[failure.example_index].labels()
        answer = ", ".join(as_text(labels[name]) for name in self.ctx.reference_fields or () if name in labels)
        return self.ctx.settings.reference_action.format(reference=failure.reference,
                                                         answer=answer or failure.reference)

    # -- verify -------------------------------------------------------------------------------------
    def verify(self, step: int, proposals: Sequence[Proposal], inductions: Sequence[Induction],
               library: ExperienceLibrary) -> list[LessonCheck]:
        """Every distinct candidate of the step (near-duplicates clustered, most supported first), verified."""
        from_induction = {i.lesson for i in inductions if i.lesson}
        pairs = [(lesson.text, lesson.source) for p in proposals for lesson in p.lessons]
        pairs += [(i.lesson, source) for i in inductions if i.lesson for source in i.sources]
        clusters = sorted(cluster_lessons(pairs), key=lambda c: -c.support)
        contrast: dict[str, list[int]] = {}
        for induction in inductions:
            if induction.lesson:
                contrast.setdefault(induction.lesson, []).extend(induction.contrast)
        candidates = [CandidateLesson(c.text, "induction" if from_induction & set(c.members) else "extraction",
                                      tuple(c.sources),
                                      tuple(dict.fromkeys(i for m in c.members for i in contrast.get(m, ()))))
                      for c in clusters]
        checks = self.ctx.verifier.check(candidates, library)
        self.ctx.log.save(step, "checks", "lessons", {"checks": [c.to_dict() for c in checks]})
        for check in checks:
            logger.info("verification: %s %s (%s)", "kept" if check.kept else "dropped", check.text, check.reason)
        return checks

    # -- update -------------------------------------------------------------------------------------
    def update(self, step: int, proposals: Sequence[Proposal], library: ExperienceLibrary
               ) -> tuple[ExperienceLibrary, list[ApplyReport], list[UpdateDecision], list[LessonCluster]]:
        """Decide and apply the step's edits on a copy of ``library`` (`tfgrpo_dspy.run.update`)."""
        return UpdatePhase(self.ctx).run(step, proposals, library)

    # -- machinery ----------------------------------------------------------------------------------
    def cached_map(self, step: int, kind: str, keys: list[K], name: Callable[[K], str], work: Callable[[K], R],
                   record_type: Any, *, role: str, failed: Callable[[R], bool], desc: str) -> dict[K, R]:
        """Run ``work`` for every key in parallel, reusing records from the log; failed records are redone."""
        ctx = self.ctx
        results: dict[K, R] = {}
        todo = []
        for key in keys:
            recorded = ctx.log.load(step, kind, name(key))
            if recorded is not None:
                record = record_type.from_dict(recorded)
                if not failed(record):
                    results[key] = record
                    ctx.ledger.add(role, record.usage)  # paid for in an earlier session: counts toward budgets
                    continue
            todo.append(key)
        if len(todo) < len(keys):
            logger.info("%s: reusing %d logged result(s)", desc, len(keys) - len(todo))
        stop = threading.Event()

        def guarded(key: K) -> R | None:
            return None if stop.is_set() else work(key)

        with tqdm.tqdm(total=len(keys), initial=len(keys) - len(todo), desc=desc, disable=not ctx.settings.progress,
                       leave=False) as bar:
            for key, record in map_in_threads(guarded, todo, ctx.settings.num_threads):
                bar.update(1)
                if record is None:
                    continue
                ctx.log.save(step, kind, name(key), record.to_dict())
                results[key] = record
                try:
                    ctx.ledger.record(role, record.usage, getattr(record, "error", None) or _rollout_error(record),
                                      kind)
                    ctx.ledger.check_budget()
                except BaseException:
                    stop.set()  # queued work returns at once; results already logged stay logged
                    raise
        ctx.ledger.check_all_failed()  # a run too small for min_errors must not end a success when nothing worked
        return results


def _rollout_error(record: Any) -> str | None:
    return getattr(record, "metric_error", None) if isinstance(record, Rollout) else None
