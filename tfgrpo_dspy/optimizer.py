"""TrainingFreeGRPO: the DSPy teleprompter that learns an experience library instead of weights.

One step = sample G rollouts per example of a batch with the current library -> keep the groups
with mixed rewards -> summarize their rollouts -> extract lessons per group (the semantic
advantage) -> one update call turns all proposals into library edits -> apply them, audited.
Every result is written to ``log_dir`` as soon as it exists, so an interrupted run resumes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

import dspy
import tqdm
from dspy.teleprompt.teleprompt import Teleprompter

from tfgrpo_dspy.injection import select_predictors, with_experiences
from tfgrpo_dspy.library import ExperienceLibrary, write_json_atomic
from tfgrpo_dspy.parallel import map_in_threads
from tfgrpo_dspy.reflection import Proposal, Reflector, RolloutSummary, UpdateDecision
from tfgrpo_dspy.rollouts import GroupOutcome, Rollout, apply_majority_vote, metric_call_arity, run_rollout
from tfgrpo_dspy.runlog import RunLog
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class TrainingAborted(RuntimeError):
    """The run failed systematically (more than ``max_errors`` failures); its log_dir stays resumable."""


@dataclass(frozen=True)
class StepStats:
    """What one library update step did and cost."""

    step: int
    epoch: int
    examples: int
    rollouts: int
    mean_reward: float
    groups: int
    informative_groups: int
    rollout_errors: int
    metric_errors: int
    reflection_errors: int
    ops_applied: int
    ops_refused: int
    library_size: int
    library_tokens: int
    tool_calls: int
    policy_usage: Usage
    reflection_usage: Usage
    wall_time_s: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["policy_usage"] = self.policy_usage.to_dict()
        data["reflection_usage"] = self.reflection_usage.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepStats:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "policy_usage": Usage.from_dict(data["policy_usage"]),
                      "reflection_usage": Usage.from_dict(data["reflection_usage"])})


@dataclass(frozen=True)
class TrainingFreeGRPOResult:
    """The outcome of a compile: the learned library and per-step statistics."""

    library: ExperienceLibrary
    steps: tuple[StepStats, ...]
    stopped_reason: str | None = None
    log_dir: str | None = None
    valset_scores: dict[str, float] | None = None

    @property
    def policy_usage(self) -> Usage:
        return Usage.total(s.policy_usage for s in self.steps)

    @property
    def reflection_usage(self) -> Usage:
        return Usage.total(s.reflection_usage for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "library": self.library.to_dict(include_audit=False),
            "steps": [s.to_dict() for s in self.steps],
            "stopped_reason": self.stopped_reason,
            "log_dir": self.log_dir,
            "valset_scores": self.valset_scores,
            "policy_usage": self.policy_usage.to_dict(),
            "reflection_usage": self.reflection_usage.to_dict(),
        }


@dataclass(frozen=True)
class RunEstimate:
    """Upper bounds on the work of a run, computed before spending anything."""

    steps: int
    rollouts: int
    policy_calls_min: int
    max_summary_calls: int
    max_extraction_calls: int
    update_calls: int

    @property
    def max_reflection_calls(self) -> int:
        return self.max_summary_calls + self.max_extraction_calls + self.update_calls

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "max_reflection_calls": self.max_reflection_calls}

    def __str__(self) -> str:
        return (
            f"{self.steps} steps, {self.rollouts} rollouts (>= {self.policy_calls_min} policy LM calls; "
            "more for multi-step programs such as ReAct), at most "
            f"{self.max_reflection_calls} reflection calls ({self.max_summary_calls} summaries, "
            f"{self.max_extraction_calls} extractions, {self.update_calls} updates); retries not counted"
        )


class TrainingFreeGRPO(Teleprompter):
    """Training-Free GRPO (arXiv 2510.08191): optimize a program's context, not its weights.

    For each training example, G rollouts are sampled with the current experience library and
    scored by ``metric``. Groups whose rewards differ are summarized and compared by the
    reflection LM, which proposes lessons; one update call per batch turns the proposals into
    Add / Modify / Merge / Delete / Keep edits. The returned program carries the library in its
    predictors' instructions (``compiled.experience_library``) and the run's statistics
    (``compiled.tfgrpo_result``).

    Args:
        metric: a DSPy metric ``(example, prediction, trace=None)`` returning a float, a bool or
            ``dspy.Prediction(score=..., feedback=...)``. May be None when ``ground_truth=False``.
        group_size: rollouts per example (G).
        epochs: passes over the trainset.
        batch_size: examples per library update; None = the whole trainset (the paper's math recipe).
        temperature: rollout sampling temperature.
        reflection_lm: LM for the summary, extraction and update calls; None = ``dspy.settings.lm``.
        max_experiences: hard cap on the library size, enforced in code.
        max_words: hard cap on the words of one lesson, enforced in code.
        max_proposals: most edits proposed per informative group.
        num_threads: parallel rollouts and reflection calls.
        seed: controls the example order and the rollout ids (so reruns are reproducible).
        ground_truth: False = no labels: a rollout's reward is its agreement with the group's
            majority ``answer_field`` (self-consistency); the reflection never sees labels.
        answer_field: the output field voted on when ``ground_truth=False``.
        informative_only: only groups with mixed rewards (std > 0) reach extraction.
        summarize: summarize every rollout of an informative group before extraction (the paper's
            recipe). False shows the extraction each attempt's trajectory instead: one reflection
            call per group instead of G+1, useful with small reflection models that only echo.
        generalize_lessons: a proposed lesson that restates its training input (two of its numbers,
            or a copied clause) gets one rewrite into the general strategy, and is dropped if the
            rewrite still restates it. Small reflection models need this; strong ones rarely trip it.
        max_trajectory_chars: the most characters of rollout trajectories one reflection call reads
            (shared by a group's attempts when ``summarize=False``); longer ones lose their middle.
            The default, about 2,000 tokens, fits a 4k-token context such as the embedded model's;
            raise it (or pass None) for a reflection LM with a long context.
        predictors: names of the predictors that carry the library; None = all of them.
        failure_score: the reward of a rollout that crashed or whose metric failed.
        seed_rollouts: send each rollout a sampling seed derived from its id, so it can be
            regenerated exactly (supported by OpenAI, vLLM, SGLang, llama.cpp; off by default
            because some providers reject the parameter).
        log_dir: where every result is written as it is produced; rerunning with the same
            log_dir resumes the run.
        max_lm_calls / max_tokens_budget / max_cost: stop cleanly once the run has spent this
            much (billed calls, tokens, or USD where the LM reports cost), keeping the library of
            the last completed step.
        max_errors: abort with `TrainingAborted` after this many failed rollouts or reflection
            calls in one session (a bad key or a dead server), leaving log_dir resumable.
        call_timeout: wall-clock seconds a rollout or a reflection call may take; one that hangs is
            abandoned and recorded as a failure (None: no limit beyond the LM's own timeouts).
        reflection_retries: extra attempts for a reflection call whose output is malformed.
        progress: show tqdm progress bars.
    """

    def __init__(
        self,
        metric: Callable | None = None,
        *,
        group_size: int = 5,
        epochs: int = 3,
        batch_size: int | None = None,
        temperature: float = 0.7,
        reflection_lm: dspy.BaseLM | None = None,
        max_experiences: int = 40,
        max_words: int = 32,
        max_proposals: int = 2,
        num_threads: int = 4,
        seed: int = 0,
        ground_truth: bool = True,
        answer_field: str = "answer",
        informative_only: bool = True,
        summarize: bool = True,
        generalize_lessons: bool = True,
        max_trajectory_chars: int | None = 8000,
        predictors: Sequence[str] | None = None,
        failure_score: float = 0.0,
        seed_rollouts: bool = False,
        log_dir: str | None = None,
        max_lm_calls: int | None = None,
        max_tokens_budget: int | None = None,
        max_cost: float | None = None,
        max_errors: int | None = 10,
        call_timeout: float | None = None,
        reflection_retries: int = 2,
        progress: bool = True,
    ):
        super().__init__()
        if ground_truth:
            if metric is None:
                raise ValueError("metric is required unless ground_truth=False (majority-vote reward)")
            metric_call_arity(metric)
        elif metric is not None and not callable(metric):
            raise TypeError(f"metric must be callable, got {metric!r}")
        _require_int("group_size", group_size, minimum=1)
        _require_int("epochs", epochs, minimum=1)
        if batch_size is not None:
            _require_int("batch_size", batch_size, minimum=1)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise ValueError(f"temperature must be a number in [0, 2], got {temperature!r}")
        if reflection_lm is not None and not isinstance(reflection_lm, dspy.BaseLM):
            raise TypeError(f"reflection_lm must be a dspy.LM (a dspy.BaseLM), got {type(reflection_lm).__name__}")
        _require_int("max_experiences", max_experiences, minimum=1)
        _require_int("max_words", max_words, minimum=1)
        _require_int("max_proposals", max_proposals, minimum=1)
        _require_int("num_threads", num_threads, minimum=1)
        _require_int("seed", seed, minimum=0)
        _require_int("reflection_retries", reflection_retries, minimum=0)
        if not isinstance(answer_field, str) or not answer_field:
            raise ValueError("answer_field must be a non-empty field name")
        for name, value in (("max_lm_calls", max_lm_calls), ("max_tokens_budget", max_tokens_budget),
                            ("max_errors", max_errors), ("max_trajectory_chars", max_trajectory_chars)):
            if value is not None:
                _require_int(name, value, minimum=1)
        if max_cost is not None and (not isinstance(max_cost, (int, float)) or max_cost <= 0):
            raise ValueError(f"max_cost must be a positive number of USD, got {max_cost!r}")
        if call_timeout is not None and (not isinstance(call_timeout, (int, float)) or call_timeout <= 0):
            raise ValueError(f"call_timeout must be a positive number of seconds, got {call_timeout!r}")
        if group_size == 1 and informative_only:
            logger.warning("group_size=1 never yields mixed-reward groups; pass informative_only=False "
                           "to learn from single rollouts against the ground truth")

        self.metric = metric
        self.group_size = group_size
        self.epochs = epochs
        self.batch_size = batch_size
        self.temperature = float(temperature)
        self.reflection_lm = reflection_lm
        self.max_experiences = max_experiences
        self.max_words = max_words
        self.max_proposals = max_proposals
        self.num_threads = num_threads
        self.seed = seed
        self.ground_truth = ground_truth
        self.answer_field = answer_field
        self.informative_only = informative_only
        self.summarize = bool(summarize)
        self.generalize_lessons = bool(generalize_lessons)
        self.max_trajectory_chars = max_trajectory_chars
        self.predictors = list(predictors) if predictors is not None else None
        self.failure_score = float(failure_score)
        self.seed_rollouts = bool(seed_rollouts)
        self.log_dir = str(log_dir) if log_dir is not None else None
        self.max_lm_calls = max_lm_calls
        self.max_tokens_budget = max_tokens_budget
        self.max_cost = max_cost
        self.max_errors = max_errors
        self.call_timeout = call_timeout
        self.reflection_retries = reflection_retries
        self.progress = progress

    def compile(self, student: dspy.Module, *, trainset: list, teacher: Any = None, valset: list | None = None):
        """Learn an experience library on ``trainset``; return a copy of ``student`` that carries it.

        Args:
            student: any DSPy program; it is not modified.
            trainset: ``dspy.Example`` objects with ``.with_inputs(...)``.
            teacher: unused (Training-Free GRPO has no teacher); accepted for the Teleprompter API.
            valset: optional examples scored with the initial and the learned library (one
                deterministic pass each); both scores are logged and kept in the result's log.
        """
        examples = self._validate(student, trainset, "trainset")
        val_examples = self._validate(student, valset, "valset") if valset else None
        program = student.deepcopy()
        run = _Run(self, program, examples)
        result = run.execute()
        compiled = with_experiences(program, result.library, self.predictors)
        compiled.__dict__["experience_library"] = result.library
        if val_examples:
            result = replace(result, valset_scores=run.score_valset(student, compiled, val_examples))
        compiled.tfgrpo_result = result
        compiled._compiled = True
        return compiled

    def estimate(self, student: dspy.Module, trainset: list) -> RunEstimate:
        """Upper bounds on the calls a compile with these settings would make; spends nothing."""
        examples = self._validate(student, trainset, "trainset")
        n = len(examples)
        steps = self.epochs * math.ceil(n / (self.batch_size or n))
        rollouts = self.epochs * n * self.group_size
        return RunEstimate(
            steps=steps,
            rollouts=rollouts,
            policy_calls_min=rollouts * len(select_predictors(student, self.predictors)),
            max_summary_calls=rollouts if self.summarize else 0,
            max_extraction_calls=self.epochs * n,
            update_calls=steps,
        )

    def _validate(self, student: Any, examples: Any, argument: str) -> list[dspy.Example]:
        if not isinstance(student, dspy.Module):
            raise TypeError(f"student must be a dspy.Module, got {type(student).__name__}")
        select_predictors(student, self.predictors)
        if not self.ground_truth:
            outputs = {name for _, p in student.named_predictors() for name in p.signature.output_fields}
            if self.answer_field not in outputs:
                raise ValueError(
                    f"answer_field={self.answer_field!r} is not an output field of the program "
                    f"(it has {sorted(outputs)}); majority voting needs it"
                )
        if examples is None or not isinstance(examples, Sequence) or isinstance(examples, (str, bytes)):
            raise TypeError(f"{argument} must be a list of dspy.Example")
        if not examples:
            raise ValueError(f"{argument} is empty")
        for position, example in enumerate(examples):
            if not isinstance(example, dspy.Example):
                raise TypeError(f"{argument}[{position}] is a {type(example).__name__}, not a dspy.Example")
            if not example._input_keys:
                raise ValueError(
                    f"{argument}[{position}] has no input fields; build examples with "
                    "dspy.Example(...).with_inputs('question')"
                )
        return list(examples)


def _require_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


class _StopRun(Exception):
    """Internal: a budget was reached; the run ends cleanly at the last completed step."""


class _Run:
    """The state of one compile: kept off the optimizer so its get_params() stays the settings."""

    def __init__(self, optimizer: TrainingFreeGRPO, program: dspy.Module, trainset: list[dspy.Example]):
        self.opt = optimizer
        self.program = program
        self.trainset = trainset
        self.log = RunLog(optimizer.log_dir)
        self.reflector = Reflector(optimizer.reflection_lm, max_retries=optimizer.reflection_retries,
                                   timeout=optimizer.call_timeout, generalize=optimizer.generalize_lessons,
                                   max_trajectory_chars=optimizer.max_trajectory_chars)
        self.library = ExperienceLibrary(max_experiences=optimizer.max_experiences, max_words=optimizer.max_words)
        self.steps: list[StepStats] = []
        self.spent = Usage()
        self.errors: Counter[str] = Counter()
        self.stop_reason: str | None = None
        self.lock = threading.Lock()

    # -- the loop -------------------------------------------------------------------------------
    def execute(self) -> TrainingFreeGRPOResult:
        resuming = self.log.open(self._manifest())
        done = self.log.completed_steps()
        if resuming:
            logger.info("resuming %s after %d completed step(s)", self.log.root, done)
            self.library = self.log.library_after(done) or self.library
            self.steps = [StepStats.from_dict(self.log.step_stats(s)) for s in range(1, done + 1)]
            self.spent = Usage.total(s.policy_usage + s.reflection_usage for s in self.steps)
        schedule = self._schedule()
        try:
            for step, (epoch, indices) in enumerate(schedule, start=1):
                if step <= done:
                    continue
                self._check_budget()
                self._run_step(step, epoch, indices, total_steps=len(schedule))
        except _StopRun as stop:
            self.stop_reason = str(stop)
            logger.warning("stopping early: %s; returning the library of the last completed step", stop)
            self.log.mark_stopped(self.stop_reason)
        return TrainingFreeGRPOResult(
            library=self.library,
            steps=tuple(self.steps),
            stopped_reason=self.stop_reason,
            log_dir=str(self.log.root) if self.log.enabled else None,
        )

    def _schedule(self) -> list[tuple[int, list[int]]]:
        n = len(self.trainset)
        size = self.opt.batch_size or n
        schedule = []
        for epoch in range(1, self.opt.epochs + 1):
            order = list(range(n))
            random.Random(self.opt.seed * 1000 + epoch).shuffle(order)
            schedule += [(epoch, order[i : i + size]) for i in range(0, n, size)]
        return schedule

    def _run_step(self, step: int, epoch: int, indices: list[int], *, total_steps: int) -> None:
        started = time.perf_counter()
        candidate = with_experiences(self.program, self.library, self.opt.predictors)
        groups = self._sample_groups(step, candidate, indices)
        informative = [g for g in groups if g.informative or not self.opt.informative_only]
        summaries = self._summarize(step, informative) if self.opt.summarize else {}
        proposals = self._extract(step, informative, summaries)
        decision = self._decide(step, proposals)
        report = self.library.apply(decision.ops, step=step) if decision.ops else None

        rollouts = [r for g in groups for r in g.rollouts]
        reflection_records = [*summaries.values(), *proposals, decision]
        stats = StepStats(
            step=step,
            epoch=epoch,
            examples=len(indices),
            rollouts=len(rollouts),
            mean_reward=sum(r.score for r in rollouts) / len(rollouts),
            groups=len(groups),
            informative_groups=sum(1 for g in groups if g.informative),
            rollout_errors=sum(1 for r in rollouts if r.failed),
            metric_errors=sum(1 for r in rollouts if r.metric_error),
            reflection_errors=sum(1 for rec in reflection_records if rec.error),
            ops_applied=len(report.applied) if report else 0,
            ops_refused=len(report.refused) if report else 0,
            library_size=len(self.library),
            library_tokens=self.library.approx_tokens(),
            tool_calls=sum(r.tool_calls for r in rollouts),
            policy_usage=Usage.total(r.usage for r in rollouts),
            reflection_usage=Usage.total(rec.usage for rec in reflection_records),
            wall_time_s=round(time.perf_counter() - started, 3),
        )
        self.steps.append(stats)
        audit = [e.to_dict() for e in report.entries] if report else []
        self.log.finish_step(step, {**stats.to_dict(), "audit": audit}, self.library)
        logger.info(
            "step %d/%d (epoch %d): mean reward %.3f, %d/%d groups informative, %d ops applied, %d refused, "
            "library %d lessons (~%d tokens)", step, total_steps, epoch, stats.mean_reward,
            stats.informative_groups, stats.groups, stats.ops_applied, stats.ops_refused, stats.library_size,
            stats.library_tokens,
        )

    # -- phases ---------------------------------------------------------------------------------
    def _sample_groups(self, step: int, candidate: dspy.Module, indices: list[int]) -> list[GroupOutcome]:
        g = self.opt.group_size
        jobs = [(i, k) for i in indices for k in range(g)]

        def rollout(job: tuple[int, int]) -> Rollout:
            i, k = job
            return run_rollout(
                candidate,
                self.trainset[i],
                example_index=i,
                sample_index=k,
                rollout_id=self._rollout_id(step, i, k),
                temperature=self.opt.temperature,
                metric=self.opt.metric if self.opt.ground_truth else None,
                failure_score=self.opt.failure_score,
                sampling_seed=self._rollout_id(step, i, k) % 2**31 if self.opt.seed_rollouts else None,
                timeout=self.opt.call_timeout,
            )

        results = self._cached_map(step, "rollouts", jobs, lambda job: f"ex{job[0]:04d}_s{job[1]}",
                                   rollout, Rollout, failed=lambda r: r.failed, desc=f"step {step} rollouts")
        groups = []
        for i in indices:
            members = [results[(i, k)] for k in range(g)]
            if not self.opt.ground_truth:
                members = apply_majority_vote(members, self.opt.answer_field)
            groups.append(GroupOutcome(example_index=i, rollouts=tuple(members)))
        return groups

    def _summarize(self, step: int, groups: list[GroupOutcome]) -> dict[tuple[int, int], RolloutSummary]:
        by_key = {(r.example_index, r.sample_index): r for g in groups for r in g.rollouts}
        return self._cached_map(
            step, "summaries", list(by_key), lambda key: f"ex{key[0]:04d}_s{key[1]}",
            lambda key: self.reflector.summarize(by_key[key], self.library), RolloutSummary,
            failed=lambda s: s.error is not None, desc=f"step {step} summaries",
        )

    def _extract(self, step: int, groups: list[GroupOutcome], summaries: dict[tuple[int, int], RolloutSummary]
                 ) -> list[Proposal]:
        by_index = {g.example_index: g for g in groups}

        def extract(i: int) -> Proposal:
            group = by_index[i]
            own = {k: s for (e, k), s in summaries.items() if e == i}
            return self.reflector.extract(self.trainset[i], group, own, self.library,
                                          use_ground_truth=self.opt.ground_truth,
                                          max_proposals=self.opt.max_proposals)

        results = self._cached_map(step, "proposals", list(by_index), lambda i: f"ex{i:04d}", extract, Proposal,
                                   failed=lambda p: p.error is not None, desc=f"step {step} lessons")
        return [results[i] for i in by_index]

    def _decide(self, step: int, proposals: list[Proposal]) -> UpdateDecision:
        if not any(p.ops for p in proposals):
            return UpdateDecision()
        recorded = self.log.load_step_file(step, "update")
        if recorded is not None and not recorded.get("error"):
            decision = UpdateDecision.from_dict(recorded)
        else:
            self._check_budget()
            decision = self.reflector.decide([p for p in proposals if p.ops], self.library)
            self.log.save_step_file(step, "update", decision.to_dict())
        self._account(decision.usage, decision.error, "update")
        if decision.error:
            logger.warning("step %d: the update call failed (%s); the library is left unchanged", step,
                           decision.error)
        return decision

    # -- machinery ------------------------------------------------------------------------------
    def _cached_map(
        self,
        step: int,
        kind: str,
        keys: list[T],
        name: Callable[[T], str],
        work: Callable[[T], R],
        record_type: Any,
        *,
        failed: Callable[[R], bool],
        desc: str,
    ) -> dict[T, R]:
        """Run ``work`` for every key in parallel, reusing records from the log; failed records are redone."""
        results: dict[T, R] = {}
        todo = []
        for key in keys:
            recorded = self.log.load(step, kind, name(key))
            if recorded is not None:
                record = record_type.from_dict(recorded)
                if not failed(record):
                    results[key] = record
                    self.spent = self.spent + record.usage  # paid for in an earlier session: counts toward budgets
                    continue
            todo.append(key)
        if len(todo) < len(keys):
            logger.info("%s: reusing %d logged result(s)", desc, len(keys) - len(todo))

        stop = threading.Event()

        def guarded(key: T) -> R | None:
            if stop.is_set():
                return None
            return work(key)

        with tqdm.tqdm(total=len(keys), initial=len(keys) - len(todo), desc=desc, disable=not self.opt.progress,
                       leave=False) as bar:
            for key, record in map_in_threads(guarded, todo, self.opt.num_threads):
                bar.update(1)
                if record is None:
                    continue
                self.log.save(step, kind, name(key), record.to_dict())
                results[key] = record
                try:
                    self._account(record.usage, getattr(record, "error", None), kind)
                    self._check_budget()
                except BaseException:
                    stop.set()  # queued work returns at once; results already logged stay logged
                    raise
        return results

    def _account(self, usage: Usage, error: str | None, kind: str) -> None:
        with self.lock:
            self.spent = self.spent + usage
            if error:
                self.errors[f"{kind}: {error[:200]}"] += 1
                total = sum(self.errors.values())
                if self.opt.max_errors is not None and total >= self.opt.max_errors:
                    cause, count = self.errors.most_common(1)[0]
                    message = (f"{total} failures in this run, most often ({count}x) {cause}. "
                               f"Fix the cause and rerun with the same log_dir to resume.")
                    self.log.mark_stopped(f"aborted: {message}")
                    raise TrainingAborted(message)

    def _check_budget(self) -> None:
        spent, opt = self.spent, self.opt
        if opt.max_lm_calls is not None and spent.billed_calls >= opt.max_lm_calls:
            raise _StopRun(f"max_lm_calls={opt.max_lm_calls} reached ({spent.billed_calls} billed calls)")
        if opt.max_tokens_budget is not None and spent.total_tokens >= opt.max_tokens_budget:
            raise _StopRun(f"max_tokens_budget={opt.max_tokens_budget} reached ({spent.total_tokens} tokens)")
        if opt.max_cost is not None and spent.cost >= opt.max_cost:
            raise _StopRun(f"max_cost={opt.max_cost} reached (${spent.cost:.4f})")

    def _rollout_id(self, step: int, example_index: int, sample_index: int) -> int:
        """Unique for the whole run and the same on resume, so redone work may come from DSPy's cache."""
        per_step = len(self.trainset) * self.opt.group_size
        return self.opt.seed * 10**12 + (step - 1) * per_step + example_index * self.opt.group_size + sample_index + 1

    def _manifest(self) -> dict[str, Any]:
        opt = self.opt
        data_hash = hashlib.sha256(
            json.dumps([sorted(e.toDict().items()) for e in self.trainset], default=str).encode()
        ).hexdigest()
        program_hash = hashlib.sha256(
            json.dumps([(n, p.signature.instructions, list(p.signature.fields))
                        for n, p in self.program.named_predictors()]).encode()
        ).hexdigest()
        return {
            "format": "tfgrpo-run",
            "version": 1,
            "program": type(self.program).__name__,
            "program_sha256": program_hash,
            "trainset_size": len(self.trainset),
            "trainset_sha256": data_hash,
            "settings": {
                "group_size": opt.group_size, "epochs": opt.epochs, "batch_size": opt.batch_size,
                "temperature": opt.temperature, "max_experiences": opt.max_experiences,
                "max_words": opt.max_words, "max_proposals": opt.max_proposals, "seed": opt.seed,
                "ground_truth": opt.ground_truth, "answer_field": opt.answer_field,
                "informative_only": opt.informative_only, "summarize": opt.summarize,
                "generalize_lessons": opt.generalize_lessons, "max_trajectory_chars": opt.max_trajectory_chars,
                "predictors": opt.predictors,
                "failure_score": opt.failure_score, "seed_rollouts": opt.seed_rollouts,
            },
        }

    def score_valset(self, student: dspy.Module, compiled: dspy.Module, valset: list[dspy.Example]
                     ) -> dict[str, float] | None:
        """Score the program without and with the learned library, one deterministic pass each."""
        if self.opt.metric is None:
            return None
        evaluate = dspy.Evaluate(devset=valset, metric=self.opt.metric, num_threads=self.opt.num_threads,
                                 display_progress=self.opt.progress)
        scores = {"without_library": evaluate(student).score, "with_library": evaluate(compiled).score}
        logger.info("valset: %.1f%% without the library, %.1f%% with it", scores["without_library"],
                    scores["with_library"])
        if self.log.root is not None:
            write_json_atomic(self.log.root / "valset.json", scores)
        return scores
