"""The step loop: sample -> reflect -> update -> gate, step after step, resumable at every step.

One step (a batch of training examples) runs the phases (`tfgrpo_dspy.run.phases`), credits the lessons
the rollouts applied (ACE-style helpful / harmful counters) and prunes those with a harmful record,
turns the update's edits into a candidate library, and keeps it only if it earns its place on the
selection set (`tfgrpo_dspy.run.gate`). The loop returns the best library it saw, the initial one included.
"""

from __future__ import annotations

import logging
import random
import time

from tfgrpo_dspy.inference.rollouts import GroupOutcome
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.reflection.formatting import SUCCESS
from tfgrpo_dspy.reflection.records import Proposal, RolloutSummary
from tfgrpo_dspy.run.accounting import StopRun
from tfgrpo_dspy.run.context import RunContext
from tfgrpo_dspy.run.gate import Edit, StepGate, candidate_record
from tfgrpo_dspy.run.judgement import LessonCheck
from tfgrpo_dspy.run.phases import Phases
from tfgrpo_dspy.run.results import Candidate, StepStats, TrainingFreeGRPOResult
from tfgrpo_dspy.run.selection import Selector
from tfgrpo_dspy.run.tracking import NoTracker, Tracker
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger(__name__)


class StepLoop:
    """Runs the steps of one compile and picks the library to ship."""

    def __init__(self, ctx: RunContext, selector: Selector | None, initial: ExperienceLibrary,
                 tracker: Tracker | None = None):
        self.ctx = ctx
        self.tracker = tracker or NoTracker()
        self.phases = Phases(ctx)
        self.selector = selector
        self.gate = StepGate(ctx.settings, selector)
        self.initial = initial
        self.library = initial.copy()
        self.steps: list[StepStats] = []
        self.candidates: list[Candidate] = []
        self.end_libraries: dict[int, ExperienceLibrary] = {0: initial.copy()}

    def schedule(self) -> list[tuple[int, list[int]]]:
        """(epoch, example indices) per step: a seeded shuffle per epoch, cut into batches."""
        s, n = self.ctx.settings, len(self.ctx.trainset)
        size = s.batch_size or n
        steps = []
        for epoch in range(1, s.epochs + 1):
            order = list(range(n))
            random.Random(s.seed * 1000 + epoch).shuffle(order)
            steps += [(epoch, order[i : i + size]) for i in range(0, n, size)]
        return steps

    def execute(self, resuming: bool) -> TrainingFreeGRPOResult:
        log = self.ctx.log
        done = log.completed_steps() if resuming else 0
        if done:
            logger.info("resuming %s after %d completed step(s)", log.root, done)
            self.library = log.library_after(done)
            self.steps = [StepStats.from_dict(log.step_stats(s)) for s in range(1, done + 1)]
            for stats in self.steps:
                self.ctx.ledger.add("policy", stats.policy_usage)
                self.ctx.ledger.add("reflection", stats.reflection_usage)
                self.ctx.ledger.add("verification", stats.verification_usage)
                self.ctx.ledger.add("selection", stats.selection_usage)
                self.candidates += stats.candidates
                self.end_libraries[stats.step] = log.library_after(stats.step)
                self.tracker.step(stats, self.end_libraries[stats.step])
        stop_reason = None
        schedule = self.schedule()
        initial_usage = self._score_initial()
        try:
            for step, (epoch, indices) in enumerate(schedule, start=1):
                if step > done:
                    self.ctx.ledger.check_budget()
                    self.run_step(step, epoch, indices, total=len(schedule))
        except StopRun as stop:
            stop_reason = str(stop)
            logger.warning("stopping early: %s; returning the best library of the completed steps", stop)
            log.mark_stopped(stop_reason)
        best_step = self.best_step()
        shipped = self.end_libraries[best_step].copy() if best_step is not None else self.library.copy()
        # library.json is the last step's library; the report shows the one compile returns.
        log.save_run_record("shipped", {"best_step": best_step, "library": shipped.to_dict()})
        return TrainingFreeGRPOResult(
            library=shipped,
            steps=tuple(self.steps), candidates=tuple(self.candidates), best_step=best_step,
            selection_size=len(self.selector.examples) if self.selector else 0, stopped_reason=stop_reason,
            log_dir=str(log.root) if log.enabled else None, initial_usage=initial_usage)

    def _score_initial(self) -> Usage:
        if self.selector is None or any(c.step == 0 for c in self.candidates):
            return Usage()
        score = self.selector.score(self.initial, "initial")
        self.candidates.insert(0, candidate_record(0, "initial", self.initial, score, True, "the starting library"))
        return score.usage

    def best_step(self) -> int | None:
        """The end-of-step library with the best selection score (ties: the smaller library, then the later step,
        whose audit log and counters are the most complete); None without a selection set, where the last
        library is shipped (the paper's recipe)."""
        if self.selector is None:
            return None
        scored = [(self.selector.score(lib, f"after step {step}").mean, -len(lib), step)
                  for step, lib in self.end_libraries.items()]
        return max(scored)[2]

    # -- one step -------------------------------------------------------------------------------------
    def run_step(self, step: int, epoch: int, indices: list[int], *, total: int) -> None:
        started = time.perf_counter()
        ledger_before = dict(self.ctx.ledger.by_role)
        s, phases = self.ctx.settings, self.phases
        clock = PhaseClock()
        groups = phases.sample(step, self.library, indices)
        clock.lap("rollouts")
        reflected = [g for g in groups if self.reflects_on(g)] if s.extraction else []
        summaries = phases.summarize(step, reflected, self.library) if s.summarize else {}
        proposals = phases.extract(step, reflected, summaries, self.library)
        inductions = phases.induce(step, groups) if s.induction and self.ctx.reference_fields is not None else []
        reflections = [*proposals, *inductions]
        if reflections and all(r.error for r in reflections):
            what = "lesson extraction and induction" if inductions else "lesson extraction"
            raise StopRun(f"step {step}: every {what} failed ({reflections[0].error}); rerun to redo the step's "
                          "reflection")
        clock.lap("reflection")
        self.library.credit(credit_outcomes(reflected, summaries, proposals))
        pruned = self.library.prune(margin=s.prune_margin, min_uses=s.min_uses, step=step)
        checks: list[LessonCheck] = []
        if self.ctx.verifier is not None:
            checks = phases.verify(step, proposals, inductions, self.library)
            candidate = self.library.copy()
            reports = [self.ctx.verifier.add_kept(candidate, checks, step)]
            decisions, clusters = [], []
            clock.lap("verification")
        else:
            candidate, reports, decisions, clusters = phases.update(step, proposals, self.library)
            clock.lap("reflection")
        edits = [Edit.of(e, candidate) for report in reports for e in report.applied if e.op != "keep"]
        outcome = self.gate.decide(step, self.library, candidate, edits)
        self.library = outcome.library
        self.end_libraries[step] = self.library.copy()
        if self.selector is not None:
            seen = {c.fingerprint for c in [*self.candidates, *outcome.candidates]}
            if self.selector.fingerprint(self.library) not in seen:  # pruning changed it, or nothing was scored
                outcome.candidates.append(self._end_candidate(step))
        self.candidates += outcome.candidates
        clock.lap("selection")

        spent = {role: self.ctx.ledger.by_role[role] - ledger_before[role] for role in ledger_before}
        rollouts = [r for g in groups for r in g.rollouts]
        stats = StepStats(
            step=step, epoch=epoch, examples=len(indices), rollouts=len(rollouts),
            mean_reward=sum(r.score for r in rollouts if r.scored) / max(sum(r.scored for r in rollouts), 1),
            groups=len(groups), informative_groups=sum(g.informative for g in groups),
            failed_groups=sum(self.all_failed(g) for g in groups), reflected_groups=len(reflected),
            rollout_errors=sum(r.failed for r in rollouts), metric_errors=sum(r.metric_error is not None
                                                                              for r in rollouts),
            reflection_errors=sum(bool(x.error) for x in [*summaries.values(), *proposals, *decisions]),
            lessons_proposed=sum(p.raw_count for p in proposals), lessons_dropped=sum(len(p.dropped)
                                                                                      for p in proposals),
            proposal_clusters=len(clusters), inductions=len(inductions),
            induced_lessons=sum(i.lesson is not None for i in inductions),
            induced_dropped=sum(i.dropped_because is not None for i in inductions),
            lessons_checked=len(checks), lessons_verified=sum(c.kept for c in checks), ops_applied=len(edits),
            ops_refused=sum(len(r.refused) for r in reports) + sum(len(d.refused) for d in decisions),
            gate=outcome.label, pruned=len(pruned.entries), library_size=len(self.library),
            library_tokens=self.library.approx_tokens(), tool_calls=sum(r.tool_calls for r in rollouts),
            policy_usage=spent["policy"], reflection_usage=spent["reflection"],
            verification_usage=spent["verification"], selection_usage=spent["selection"],
            wall_time_s=round(time.perf_counter() - started, 3), candidates=tuple(outcome.candidates),
            phase_seconds=clock.seconds)
        self.steps.append(stats)
        audit = [e.to_dict() for r in reports for e in r.entries] + [e.to_dict() for e in pruned.entries]
        self.ctx.log.finish_step(step, {**stats.to_dict(), "audit": audit}, self.library)
        self.tracker.step(stats, self.library)
        logger.info("step %d/%d (epoch %d): reward %.3f, %d/%d groups informative (%d all failed), %d lessons proposed "
                    "(%d dropped), %d induced, %d of %d verified, %d edits, gate: %s; library %d lessons (~%d tokens)",
                    step, total, epoch, stats.mean_reward, stats.informative_groups, stats.groups,
                    stats.failed_groups, stats.lessons_proposed, stats.lessons_dropped, stats.induced_lessons,
                    stats.lessons_verified, stats.lessons_checked, stats.ops_applied, stats.gate,
                    stats.library_size, stats.library_tokens)

    def all_failed(self, group: GroupOutcome) -> bool:
        """Every scored rollout missed the reference: with labels, the group that most needs a lesson."""
        return self.ctx.reference_fields is not None and bool(group.rewards) and max(group.rewards) < SUCCESS

    def reflects_on(self, group: GroupOutcome) -> bool:
        """Whether the group goes to the per-group reflection (summaries and extraction)."""
        s = self.ctx.settings
        return group.informative or not s.informative_only or (s.failed_groups and self.all_failed(group))

    def _end_candidate(self, step: int) -> Candidate:
        score = self.selector.score(self.library, f"after step {step}")
        return candidate_record(step, f"after step {step}", self.library, score, True,
                                "the library kept after the step")


class PhaseClock:
    """Wall seconds spent in each phase of a step (a phase timed twice adds up)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + now - self._mark, 3)
        self._mark = now


def credit_outcomes(groups: list[GroupOutcome], summaries: dict[tuple[int, int], RolloutSummary],
                    proposals: list[Proposal]) -> list[tuple[int, float]]:
    """(lesson id, advantage) for every scored rollout that applied a lesson.

    From the summaries' ``experiences_used`` when there are summaries; without them, from the
    extraction: lessons the better attempts followed count as one helpful use, lessons that misled
    the worse attempts as one harmful use.
    """
    outcomes = []
    for group in groups:
        for rollout, advantage in zip(group.rollouts, group.advantages, strict=True):
            summary = summaries.get((rollout.example_index, rollout.sample_index))
            if advantage is None or summary is None or summary.error:
                continue
            outcomes += [(lesson_id, advantage) for lesson_id in summary.experiences_used]
    if not summaries:
        for proposal in proposals:
            outcomes += [(lesson_id, 1.0) for lesson_id in proposal.useful]
            outcomes += [(lesson_id, -1.0) for lesson_id in proposal.misleading]
    return outcomes
