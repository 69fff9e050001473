"""Running a comparison: each method's stages (compile, held-out evaluation, repeat, gate checks), resumably.

A method run is a `MethodRun` (what to run, on what, where it is kept) plus the `Earlier` results of the
same seed it may read from; each finished stage is saved in the `RunStore`, so a rerun skips it.
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import dspy
from provenance import git_revision

from comparison.compile_details import CompileDetails
from comparison.data import Split
from comparison.evaluate import added_prompt_tokens, detach_lms, evaluate_stage, repeat_stage
from comparison.gate_checks import GATE_CHECKED_METHODS, gate_check_stage
from comparison.metering import Roles
from comparison.methods import COMPILERS, REBUILT_ON_LOAD, Compiled, MethodContext, ordered_methods
from comparison.presets import ABLATIONS, Budget
from comparison.prompts import prompts_fingerprint
from comparison.records import MethodResult, SeedRun
from comparison.store import RunStore
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger("compare")


@dataclass(frozen=True)
class MethodRun:
    """One method on one seed: what runs, on which data, LM and budget, and where its finished stages are kept."""

    method: str
    split: Split
    lm: dspy.LM
    budget: Budget
    seed: int
    store: RunStore | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.method not in COMPILERS:
            raise ValueError(f"method must be one of {sorted(COMPILERS)}, got {self.method!r}")

    def eval_dir(self, name: str) -> Path | None:
        return self.store.eval_dir(self.split.task, self.method, self.seed, name) if self.store else None


@dataclass(frozen=True)
class Earlier:
    """What the methods run before this one on the same seed left: their programs, the learned library's size."""

    programs: Mapping[str, dspy.Module] = field(default_factory=dict)
    learned_library_size: int | None = None


@functools.cache
def code_at_start() -> str | None:
    """The commit this process runs, read once: records say which code compiled them."""
    return git_revision()


def compile_stage(method: str, ctx: MethodContext) -> tuple[SeedRun, dspy.Module | None]:
    """Compile one method on the task LM; a failure is recorded on the run, never raised."""
    started = time.perf_counter()
    compiled: Compiled | None = None
    error = None
    try:
        with dspy.context(lm=ctx.roles.task):
            compiled = COMPILERS[method](ctx)
    except Exception as exc:  # a failing optimizer is a result, not the end of the comparison
        error = f"compile: {type(exc).__name__}: {exc}"
        logger.warning("%s failed:\n%s", method, traceback.format_exc())
    seconds = time.perf_counter() - started
    program = detach_lms(compiled.program) if compiled else None
    usage = {role: ctx.roles.meters[role].usage for role in ("task", "reflection")}
    run = SeedRun(seed=ctx.seed, score=None, pass_at_k=None, score_stderr=None,
                  compile_seconds=round(seconds, 2), eval_seconds=None, usage={**usage, "evaluation": Usage()},
                  engine_failures=sum(m.failures for m in ctx.roles.meters.values()),
                  added_prompt_tokens=added_prompt_tokens(program, ctx.split) if program is not None else None,
                  eval_prompt_tokens_per_call=None, program_errors=None, error=error,
                  details=compiled.details if compiled else CompileDetails({}), code=code_at_start())
    return run, program


def _wants_repeat(job: MethodRun, run: SeedRun) -> bool:
    return (job.method == "none" and job.budget.repeat_none and run.seed == 0 and run.evaluated
            and (run.repeat is None or run.repeat.error is not None))


def _compiled(job: MethodRun, earlier: Earlier) -> tuple[SeedRun, dspy.Module | None]:
    """The method's saved compile, or a new one (saved at once)."""
    store, task = job.store, job.split.task
    run = store.load_run(task, job.method, job.seed) if store else None
    log_dir = store.log_dir(task, job.method, job.seed) if store else None
    ctx = MethodContext(job.split, Roles.of(job.lm), job.budget, job.seed, earlier.learned_library_size,
                        dict(earlier.programs), log_dir)
    if run is not None and store is not None:
        logger.info("[%s] seed %d: %s compile loaded from %s", task, job.seed, job.method, store.root)
        if job.method in REBUILT_ON_LOAD:  # its program.json cannot hold it; rebuilding costs no model call
            with dspy.context(lm=ctx.roles.task):
                return run, detach_lms(COMPILERS[job.method](ctx).program)
        return run, store.load_program(job.split, job.method, job.seed)
    run, program = compile_stage(job.method, ctx)
    if program is not None and store is not None:
        store.clear_evals(task, job.method, job.seed)
        store.save_program(task, job.method, job.seed, program)
        store.save_run(task, job.method, job.seed, run)
    return run, program


# Held-out evaluations by the digest of the prompts their program sends: "method seed N" and its run.
Evaluations = dict[str, tuple[str, SeedRun]]


def _same_prompts(job: MethodRun, run: SeedRun, program: dspy.Module, evaluations: Evaluations) -> SeedRun:
    """``run`` with its prompts' digest and, when an earlier evaluation sent the same prompts, that evaluation.

    Only under greedy decoding: sampled answers differ from one evaluation to the next even for one program.
    """
    if job.budget.eval_temperature != 0:
        return run
    if run.prompts_digest is None:
        run = replace(run, prompts_digest=prompts_fingerprint(program, job.split.test))
    source = evaluations.get(run.prompts_digest)
    if run.evaluated or source is None:
        return run
    label, earlier = source
    logger.info("[%s] seed %d: %s sends the same held-out prompts as %s: its evaluation is reused",
                job.split.task, job.seed, job.method, label)
    return replace(run, score=earlier.score, pass_at_k=earlier.pass_at_k, score_stderr=earlier.score_stderr,
                   eval_seconds=None, usage={**run.usage, "evaluation": Usage()},
                   program_errors=earlier.program_errors,
                   eval_prompt_tokens_per_call=earlier.eval_prompt_tokens_per_call,
                   per_problem=earlier.per_problem, evaluation_of=label)


def run_method(job: MethodRun, earlier: Earlier | None = None,
               evaluations: Evaluations | None = None) -> tuple[SeedRun, dspy.Module | None]:
    """Compile, evaluate and (for ``none``, if the preset asks) re-evaluate one method.

    With a store, each finished stage is saved and a rerun skips it: a saved compile is loaded instead of
    recompiled, a saved evaluation is not run again. Failures are recorded on the run, never raised, and never
    saved (a rerun tries again). With ``evaluations`` (updated here), a program that sends the same held-out
    prompts as one evaluated before gets that evaluation (`_same_prompts`). Returns the run and its compiled
    program (None if it failed).
    """
    # A fresh memory-only cache per method: a method may reuse its own calls, never another method's or an
    # earlier run's (this replaces DSPy's global cache for the rest of the process).
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    run, program = _compiled(job, earlier or Earlier())
    if program is None:
        return run, None
    store, task = job.store, job.split.task

    def save(updated: SeedRun) -> SeedRun:
        if store is not None:
            store.save_run(task, job.method, job.seed, updated)
        return updated

    if evaluations is not None:
        checked = _same_prompts(job, run, program, evaluations)
        run = save(checked) if checked != run else run
    if not run.evaluated:
        run = evaluate_stage(run, program, job.split, job.budget, job.lm, job.progress, job.eval_dir("held_out"))
        if run.error is not None:
            return run, program
        save(run)
    if evaluations is not None and run.prompts_digest is not None:
        evaluations.setdefault(run.prompts_digest, (run.evaluation_of or f"{job.method} seed {job.seed}", run))
    if _wants_repeat(job, run):
        run = save(repeat_stage(run, program, job.split, job.budget, job.lm, job.progress, job.eval_dir("repeat")))
    if job.method in GATE_CHECKED_METHODS and job.budget.gate_checks and store is not None:
        try:
            log_dir = store.log_dir(task, job.method, job.seed)
            for checked in gate_check_stage(run, job.split, job.budget, job.lm, log_dir, job.progress,
                                            job.eval_dir("gate_checks")):
                run = save(checked)
        except Exception:  # the method's own result stands; a rerun tries the check again
            logger.warning("held-out check of the gate failed:\n%s", traceback.format_exc())
    return run, program


def run_comparison(split: Split, lm: dspy.LM, budget: Budget, methods: Sequence[str], *,
                   store: RunStore | None = None, progress: bool = True,
                   on_result: Callable[[list[MethodResult]], None] | None = None) -> list[MethodResult]:
    """Run ``methods`` (see `ordered_methods`) over the seeds, skipping what ``store`` already holds; on the
    seeds after 0 only those of ``budget.more_seeds_for`` when it is set (`Budget.methods_on_seed`).

    ``on_result`` receives the results so far after every method run (to save partial results).
    """
    methods = ordered_methods(methods)
    results: dict[str, list[SeedRun]] = {m: [] for m in methods}
    evaluations: Evaluations = {}
    for seed in range(budget.seeds):
        earlier = Earlier()
        for method in budget.methods_on_seed(methods, seed):
            logger.info("[%s] seed %d: %s ...", split.task, seed, method)
            job = MethodRun(method, split, lm, budget, seed, store, progress)
            run, program = run_method(job, earlier, evaluations)
            programs = {**earlier.programs, method: program} if program is not None else earlier.programs
            size = earlier.learned_library_size
            if method == "tfgrpo_paper" and run.error is None:
                size = len(run.details.library or ()) or None
            earlier = Earlier(programs, size)
            results[method].append(run)
            _log_run(split.task, method, run, budget.k)
            if on_result is not None:
                on_result(collect(results))
    return collect(results)


def _log_run(task: str, method: str, run: SeedRun, k: int) -> None:
    outcome = f"Mean@{k} {run.score:.3f}" if run.score is not None else f"FAILED {run.error}"
    if run.repeat is not None and run.repeat.flip_rate is not None:
        outcome += f", flip rate {run.repeat.flip_rate:.3f} on a second pass"
    logger.info("[%s] seed %d: %s -> %s (compile %.0f s, eval %s s, task %d calls, reflection %d calls)", task,
                run.seed, method, outcome, run.compile_seconds, run.eval_seconds, run.usage["task"].calls,
                run.usage["reflection"].calls)


def collect(results: dict[str, list[SeedRun]]) -> list[MethodResult]:
    return [MethodResult(m, "ablation" if m in ABLATIONS else "method", tuple(runs))
            for m, runs in results.items() if runs]
