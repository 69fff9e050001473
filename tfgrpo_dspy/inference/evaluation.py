"""Mean@k / Pass@k evaluation of any DSPy program, optionally with an experience library applied.

Every (example, sample) pair is one rollout (`tfgrpo_dspy.inference.rollouts.run_rollout`): a private copy
of the program on a private LM copy with its own ``rollout_id`` and the evaluation temperature, so
the k samples of an example are distinct draws rather than k cache hits. Program and metric errors
are recorded on the sample (score 0) and counted; they never stop the run. With ``checkpoint_dir`` every
finished sample is saved as it completes, and an interrupted evaluation resumes where it stopped
(`tfgrpo_dspy.inference.checkpoint`). What it returns is `tfgrpo_dspy.inference.eval_report`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.parallelizer import ParallelExecutor

from tfgrpo_dspy.inference.checkpoint import EvalCheckpoint, fingerprint
from tfgrpo_dspy.inference.eval_report import EvalReport, ExampleResult, SampleResult, build_report, pass_at_k
from tfgrpo_dspy.inference.rollouts import Rollout, run_rollout
from tfgrpo_dspy.settings import DEFAULT_TOP_K

logger = logging.getLogger(__name__)

# The report (`tfgrpo_dspy.inference.eval_report`) and the checkpoint (`tfgrpo_dspy.inference.checkpoint`) live
# in modules of their own; their names are re-exported here, where callers have always imported them.
__all__ = ["EvalCheckpoint", "EvalReport", "ExampleResult", "SampleResult", "evaluate_at_k", "fingerprint",
           "pass_at_k"]


def evaluate_at_k(
    program: dspy.Module,
    examples: Sequence[dspy.Example],
    metric: Callable,
    *,
    k: int,
    temperature: float,
    num_threads: int = 1,
    lm: dspy.BaseLM | None = None,
    library: Any = None,
    predictors: Sequence[str] | None = None,
    placement: str = "instructions",
    top_k: int | None = DEFAULT_TOP_K,
    answer_field: str = "answer",
    success_threshold: float = 1.0,
    rollout_id_offset: int = 0,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
) -> EvalReport:
    """Run ``program`` k times on every example and report Mean@k, Pass@k, errors and tool calls.

    Args:
        program: any DSPy module; it is never modified.
        examples: examples with inputs set.
        metric: a DSPy metric (float, bool, or a Prediction/dict with ``score`` and ``feedback``).
        k: samples per example.
        temperature: sampling temperature of every sample (paper: 0.3 for evaluation).
        num_threads: samples run in parallel.
        lm: the LM to sample from; default ``dspy.settings.lm``. A predictor's own LM wins, as in DSPy.
        library: an ``ExperienceLibrary`` (or a path to its JSON) applied with ``with_experiences``.
        predictors: the predictors that carry ``library`` (names from ``program.named_predictors()``); None
            means every predictor. Pass the ``predictors=`` the library was trained with: a lesson shown to a
            predictor that never had it in training measures another program.
        placement / top_k: where the library goes (see `tfgrpo_dspy.with_experiences`).
        answer_field: prediction field recorded as each sample's answer.
        success_threshold: a sample counts as correct for Pass@k when its score reaches this.
        rollout_id_offset: added to every rollout id (sample j of example i gets ``offset + i*k + j``);
            change it to draw fresh samples for an identical run that would otherwise hit the cache.
        checkpoint_dir: a folder where each finished sample is saved; a rerun with the same folder reuses
            them and runs only the rest (the report's usage includes the reused samples' usage, its
            elapsed time only this run's). A folder written for another program, LM or settings is refused.
    """
    examples = _check_arguments(program, examples, metric, k, temperature, num_threads)
    lm = lm or dspy.settings.lm
    if lm is None and any(predictor.lm is None for _, predictor in program.named_predictors()):
        raise ValueError("lm: no LM given, dspy.settings.lm is not configured, and the program has none")
    library = _as_library(library)
    if library is not None:
        from tfgrpo_dspy.inference.injection import with_experiences

        program = with_experiences(program, library, predictors, placement=placement, top_k=top_k)

    def run_one(job: tuple[int, int]) -> Rollout:
        index, sample = job
        with dspy.context(lm=lm):
            return run_rollout(
                program,
                examples[index],
                example_index=index,
                sample_index=sample,
                rollout_id=rollout_id_offset + index * k + sample,
                temperature=temperature,
                metric=metric,
            )

    jobs = [(index, sample) for index in range(len(examples)) for sample in range(k)]
    checkpoint = None
    if checkpoint_dir is not None:
        settings = {"k": k, "temperature": float(temperature), "rollout_id_offset": rollout_id_offset,
                    "lm": str(getattr(lm, "model", None) or type(lm).__name__), "program": fingerprint(program)}
        checkpoint = EvalCheckpoint(Path(checkpoint_dir), settings)
    done = checkpoint.load(examples, jobs, k, rollout_id_offset) if checkpoint else {}

    def run_and_save(job: tuple[int, int]) -> Rollout:
        rollout = run_one(job)
        if checkpoint is not None and isinstance(rollout, Rollout):
            checkpoint.save(rollout, time.monotonic() - started)
        return rollout

    todo = [job for job in jobs if job not in done]
    if done:
        logger.info("evaluation: %d of %d samples reused from %s", len(done), len(jobs), checkpoint_dir)
    started = time.monotonic()
    # timeout=0: no straggler re-submission (it would re-run and double-count slow samples).
    executor = ParallelExecutor(
        num_threads=num_threads, max_errors=len(jobs) + 1, disable_progress_bar=not progress, timeout=0
    )
    ran = dict(zip(todo, executor.execute(run_and_save, todo), strict=True)) if todo else {}
    rollouts = [done[job] if job in done else ran[job] for job in jobs]
    elapsed = time.monotonic() - started
    report = build_report(examples, jobs, rollouts, k, temperature, answer_field, success_threshold, library, elapsed)
    logger.info("%s", report.summary())
    return report


def _check_arguments(program: Any, examples: Sequence[dspy.Example], metric: Any, k: Any, temperature: Any,
                     num_threads: Any) -> list[dspy.Example]:
    if not isinstance(program, dspy.Module):
        raise TypeError(f"program must be a dspy.Module, got {type(program).__name__}")
    if not callable(metric):
        raise TypeError(f"metric must be callable, got {metric!r}")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
    examples = list(examples)
    if not examples:
        raise ValueError("examples must not be empty")
    return examples


def _as_library(library: Any) -> Any:
    if library is None:
        return None
    from tfgrpo_dspy.library.library import ExperienceLibrary

    if isinstance(library, (str, Path)):
        return ExperienceLibrary.load(library)
    if not isinstance(library, ExperienceLibrary):
        raise TypeError(f"library must be an ExperienceLibrary or a path, got {type(library).__name__}")
    return library
