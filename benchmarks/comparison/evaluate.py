"""The held-out evaluation every method gets, its repeat with the cache off, and what a program adds per call;
and the resumable greedy evaluation every study beside compare.py scores its programs with."""

from __future__ import annotations

import logging
import math
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import dspy

from comparison.data import Split
from comparison.metering import metered_copy
from comparison.presets import CHARS_PER_TOKEN, Budget
from comparison.records import RepeatEval, SeedRun, problem_results
from tfgrpo_dspy import ExperienceLibrary
from tfgrpo_dspy.inference.checkpoint import checkpointed_seconds
from tfgrpo_dspy.inference.evaluation import EvalReport, evaluate_at_k

logger = logging.getLogger("compare")


def evaluate_held_out(program: dspy.Module, split: Split, budget: Budget, lm: dspy.LM, seed: int,
                      progress: bool, checkpoint_dir: Path | None = None) -> EvalReport:
    """The one held-out evaluation every method gets: same problems, metric, decoding, k and threads.

    With ``checkpoint_dir`` each finished problem is saved, and an interrupted evaluation resumes there (the
    folder also adds up the seconds of every run that evaluated into it)."""
    return evaluate_at_k(program, split.test, split.metric, k=budget.k, temperature=budget.eval_temperature,
                         num_threads=budget.num_threads, lm=lm, rollout_id_offset=seed * 10**6, progress=progress,
                         answer_field=split.answer_field, checkpoint_dir=checkpoint_dir)


def evaluate_stage(run: SeedRun, program: dspy.Module, split: Split, budget: Budget, lm: dspy.LM,
                   progress: bool, checkpoint_dir: Path | None = None) -> SeedRun:
    """The held-out evaluation of a compiled program, metered apart from its compile."""
    evaluation, meter = metered_copy(lm, "evaluation")
    started = time.perf_counter()
    try:
        report = evaluate_held_out(program, split, budget, evaluation, run.seed, progress, checkpoint_dir)
    except Exception as exc:
        logger.warning("evaluation failed:\n%s", traceback.format_exc())
        return replace(run, error=f"evaluate: {type(exc).__name__}: {exc}",
                       eval_seconds=round(time.perf_counter() - started, 2),
                       engine_failures=run.engine_failures + meter.failures)
    usage = report.usage
    return replace(
        run, score=report.mean_at_k, pass_at_k=report.pass_at_k, score_stderr=_stderr(report),
        eval_seconds=_seconds(started, checkpoint_dir), usage={**run.usage, "evaluation": usage},
        engine_failures=run.engine_failures + meter.failures, program_errors=report.program_errors,
        eval_prompt_tokens_per_call=round(usage.prompt_tokens / usage.calls, 1) if usage.calls else None,
        per_problem=problem_results(report))


@contextmanager
def dspy_cache_disabled() -> Iterator[None]:
    """DSPy's cache off (memory and disk) for the block, so every request reaches the model; then restored."""
    previous = dspy.cache
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    try:
        yield
    finally:
        dspy.cache = previous


def repeat_stage(run: SeedRun, program: dspy.Module, split: Split, budget: Budget, lm: dspy.LM,
                 progress: bool, checkpoint_dir: Path | None = None) -> SeedRun:
    """Evaluate the same program again with the cache off, so every problem really goes back to the model."""
    evaluation, meter = metered_copy(lm, "evaluation")
    started = time.perf_counter()
    try:
        with dspy_cache_disabled():
            report = evaluate_held_out(program, split, budget, evaluation, run.seed, progress, checkpoint_dir)
    except Exception as exc:
        logger.warning("repeated evaluation failed:\n%s", traceback.format_exc())
        return replace(run, repeat=RepeatEval(None, None, None, round(time.perf_counter() - started, 2),
                                              meter.usage, error=f"{type(exc).__name__}: {exc}"))
    repeat = RepeatEval.of(run.per_problem, problem_results(report), _seconds(started, checkpoint_dir), report.usage)
    return replace(run, repeat=repeat)


def _seconds(started: float, checkpoint_dir: Path | None) -> float:
    """What the evaluation took: with a checkpoint, every run that evaluated into it (an interrupted evaluation's
    earlier parts too); else this run's time since ``started``. Its usage is the report's for the same reason:
    every sample's, the reused ones included."""
    recorded = checkpointed_seconds(checkpoint_dir) if checkpoint_dir is not None else None
    return round(recorded if recorded is not None else time.perf_counter() - started, 2)


def static_prompt_chars(program: dspy.Module, adapter: dspy.Adapter | None = None) -> int:
    """Characters of every predictor's prompt with empty inputs: instructions, field layout and demos.

    The question's own text is the same for every method, so leaving it out measures exactly what an
    optimizer adds to (or removes from) each inference call.
    """
    adapter = adapter or dspy.settings.adapter or dspy.ChatAdapter()
    total = 0
    for _, predictor in program.named_predictors():
        inputs = {name: "" for name in predictor.signature.input_fields}
        messages = adapter.format(predictor.signature, list(predictor.demos or []), inputs)
        total += sum(len(str(m.get("content") or "")) for m in messages)
    return total


def approx_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def added_prompt_tokens(program: dspy.Module, split: Split) -> int:
    """Prompt tokens (approx) the optimized program adds to every call, against the split's base program."""
    return approx_tokens(static_prompt_chars(program)) - approx_tokens(static_prompt_chars(split.make_program()))


def detach_lms(program: dspy.Module) -> dspy.Module:
    """A copy whose predictors use the LM of the context: evaluation must not run on an optimizer's LM copy."""
    program = program.deepcopy()
    for _, predictor in program.named_predictors():
        predictor.lm = None
    return program


def evaluate_greedy(name: str, program: dspy.Module, examples: list[dspy.Example], metric: Callable, store: Path,
                    lm: dspy.LM, answer_field: str, library: ExperienceLibrary | None = None) -> EvalReport:
    """A study's evaluation of one program: greedy, one answer per row, 4 threads, the lessons at top 1, each
    finished row saved under ``store / name`` so that a rerun reads it back instead of asking the model again.

    ``library`` is injected into ``program`` for the evaluation (a fixed library: rules, a placebo, a control)."""
    started = time.perf_counter()
    report = evaluate_at_k(program, examples, metric, k=1, temperature=0.0, num_threads=4, lm=lm, library=library,
                           top_k=1, answer_field=answer_field, checkpoint_dir=store / name)
    logger.info("%s: %.1f%% (%.0f s)", name, 100 * report.mean_at_k, time.perf_counter() - started)
    return report


def _stderr(report: EvalReport) -> float | None:
    scores = [e.mean_score for e in report.examples]
    return statistics.stdev(scores) / math.sqrt(len(scores)) if len(scores) > 1 else None
