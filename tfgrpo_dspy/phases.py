"""The phases of one step, each parallel and logged: rollouts, summaries, lessons, the update.

    sample     G rollouts per example with the current library -> groups (failed rollouts not counted)
    summarize  one summary per scored rollout of an informative group, checked against the reference
    extract    one call per informative group -> at most max_proposals lessons, through the guard
    update     near-duplicate lessons clustered across groups, then update calls in context-sized
               chunks -> edits, through the guard and the delete rules -> a candidate library
               (`tfgrpo_dspy.update`)

Every result is written to the run log as soon as it exists and reused on resume; a failed record
is redone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import dspy
import tqdm

from tfgrpo_dspy.accounting import Ledger
from tfgrpo_dspy.guard import LessonGuard
from tfgrpo_dspy.injection import with_experiences
from tfgrpo_dspy.lessons import ExampleMaterial, LessonCluster, render_lesson
from tfgrpo_dspy.library import ApplyReport, ExperienceLibrary
from tfgrpo_dspy.parallel import map_in_threads
from tfgrpo_dspy.reflection import (
    Lesson,
    Proposal,
    Reflector,
    RolloutSummary,
    UpdateDecision,
    as_text,
    format_reference,
)
from tfgrpo_dspy.rollouts import GroupOutcome, Rollout, apply_majority_vote, run_rollout
from tfgrpo_dspy.runlog import RunLog
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings
from tfgrpo_dspy.update import UpdatePhase

logger = logging.getLogger(__name__)

K = TypeVar("K")
R = TypeVar("R")


@dataclass
class RunContext:
    """What every phase of a run needs; built once per compile."""

    settings: TrainingFreeGRPOSettings
    metric: Callable | None
    program: dspy.Module
    trainset: list[dspy.Example]
    reference_fields: tuple[str, ...] | None  # None = no ground truth
    reflector: Reflector
    guard: LessonGuard
    log: RunLog
    ledger: Ledger

    def task_text(self, index: int) -> str:
        return as_text(self.trainset[index].inputs().toDict())

    def reference(self, index: int) -> str:
        return format_reference(self.trainset[index], self.reference_fields)

    def material(self, index: int, group: GroupOutcome | None = None) -> ExampleMaterial:
        """The example's text, reference answers and worked text (reference solution, attempts' outputs)."""
        example = self.trainset[index]
        answers: tuple[str, ...] = ()
        worked = []
        if self.reference_fields is not None:
            labels = example.labels()
            values = [as_text(labels[name]) for name in self.reference_fields if name in labels]
            answers, worked = (values[0],), values[1:]
        if group is not None:
            worked += [as_text(r.outputs) for r in group.rollouts if r.outputs]
        return ExampleMaterial(self.task_text(index), answers, " ".join(worked))


class Phases:
    """Runs the phases of a step on a `RunContext`."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    # -- sample -------------------------------------------------------------------------------------
    def sample(self, step: int, library: ExperienceLibrary, indices: Sequence[int]) -> list[GroupOutcome]:
        s = self.ctx.settings
        candidate = with_experiences(self.ctx.program, library, s.predictors, placement=s.placement, top_k=s.top_k)
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
        lessons, dropped = [], []
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
                        useful=extraction.useful, dropped=dropped, raw_count=len(extraction.lessons), usage=usage)

    # -- update -------------------------------------------------------------------------------------
    def update(self, step: int, proposals: Sequence[Proposal], library: ExperienceLibrary
               ) -> tuple[ExperienceLibrary, list[ApplyReport], list[UpdateDecision], list[LessonCluster]]:
        """Decide and apply the step's edits on a copy of ``library`` (`tfgrpo_dspy.update`)."""
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
