"""Mean@k / Pass@k evaluation of any DSPy program, optionally with an experience library applied.

Every (example, sample) pair is one rollout (`tfgrpo_dspy.inference.rollouts.run_rollout`): a private copy
of the program on a private LM copy with its own ``rollout_id`` and the evaluation temperature, so
the k samples of an example are distinct draws rather than k cache hits. Program and metric errors
are recorded on the sample (score 0) and counted; they never stop the run. With ``checkpoint_dir`` every
finished sample is saved as it completes, and an interrupted evaluation resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.parallelizer import ParallelExecutor

from tfgrpo_dspy.inference.rollouts import Rollout, jsonable, run_rollout
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic
from tfgrpo_dspy.settings import DEFAULT_TOP_K
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger(__name__)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class SampleResult:
    """One sample of one example."""

    score: float
    correct: bool
    feedback: str | None = None
    error: str | None = None  # the program failed (LM, tool, parsing)
    metric_error: str | None = None  # the metric raised or returned no number
    tool_calls: int = 0
    answer: str | None = None


@dataclass(frozen=True)
class ExampleResult:
    """The k samples of one example."""

    index: int
    inputs: dict[str, Any]
    samples: tuple[SampleResult, ...]

    @property
    def num_correct(self) -> int:
        return sum(sample.correct for sample in self.samples)

    @property
    def mean_score(self) -> float:
        return sum(sample.score for sample in self.samples) / len(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "inputs": self.inputs,
            "num_correct": self.num_correct,
            "mean_score": self.mean_score,
            "samples": [asdict(sample) for sample in self.samples],
        }


@dataclass(frozen=True)
class EvalReport:
    """Result of `evaluate_at_k`.

    Attributes:
        mean_at_k: mean over examples of the mean score of their k samples (Mean@k).
        pass_at: unbiased pass@j for j in 1, 2, 4, ... and k (a sample is correct when its score
            reaches ``success_threshold``).
        mean_tool_calls: tool calls per sample, None when no sample ran a tool-using agent.
    """

    k: int
    temperature: float
    num_examples: int
    mean_at_k: float
    pass_at: dict[int, float]
    program_errors: int
    metric_errors: int
    mean_tool_calls: float | None
    usage: Usage
    elapsed_seconds: float
    library_size: int | None
    examples: tuple[ExampleResult, ...]

    @property
    def pass_at_k(self) -> float:
        return self.pass_at[self.k]

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "temperature": self.temperature,
            "num_examples": self.num_examples,
            "mean_at_k": self.mean_at_k,
            "pass_at_k": self.pass_at_k,
            "pass_at": {str(j): value for j, value in self.pass_at.items()},
            "program_errors": self.program_errors,
            "metric_errors": self.metric_errors,
            "mean_tool_calls": self.mean_tool_calls,
            "usage": self.usage.to_dict(),
            "elapsed_seconds": self.elapsed_seconds,
            "library_size": self.library_size,
            "examples": [example.to_dict() for example in self.examples],
        }

    def summary(self) -> str:
        parts = [f"Mean@{self.k} {self.mean_at_k:.3f}", f"Pass@{self.k} {self.pass_at_k:.3f}"]
        parts.append(f"errors program={self.program_errors} metric={self.metric_errors}")
        if self.mean_tool_calls is not None:
            parts.append(f"tool calls/sample {self.mean_tool_calls:.2f}")
        return f"{self.num_examples} examples x {self.k} samples: " + ", ".join(parts)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
        return path


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
            checkpoint.save(rollout)
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
    return _report(examples, jobs, rollouts, k, temperature, answer_field, success_threshold, library, elapsed)


def fingerprint(program: dspy.Module) -> str:
    """A short hash of a program's saved state (instructions, demos, library): equal programs, equal hash."""
    state = json.dumps(program.dump_state(), sort_keys=True, default=str)
    return hashlib.sha256(state.encode("utf-8")).hexdigest()[:16]


class EvalCheckpoint:
    """One evaluation's finished samples on disk: ``settings.json`` and one ``exNNNNN_sJ.json`` per sample."""

    def __init__(self, folder: Path, settings: dict[str, Any]):
        self.folder = folder
        self.settings = settings
        path = folder / "settings.json"
        if path.exists():
            saved = read_json(path)
            if saved != settings:
                changed = sorted(key for key in {*saved, *settings} if saved.get(key) != settings.get(key))
                raise ValueError(f"checkpoint_dir {folder} holds an evaluation with other {', '.join(changed)}; "
                                 "use a new folder")
        else:
            write_json_atomic(path, settings)

    def path(self, index: int, sample: int) -> Path:
        return self.folder / f"ex{index:05d}_s{sample}.json"

    def save(self, rollout: Rollout) -> None:
        write_json_atomic(self.path(rollout.example_index, rollout.sample_index), rollout.to_dict())

    def load(self, examples: Sequence[dspy.Example], jobs: Sequence[tuple[int, int]], k: int, offset: int
             ) -> dict[tuple[int, int], Rollout]:
        """The saved samples of ``jobs``; a sample saved for another example is refused, naming its file."""
        done = {}
        for index, sample in jobs:
            path = self.path(index, sample)
            if not path.exists():
                continue
            rollout = Rollout.from_dict(read_json(path))
            if rollout.inputs != jsonable(examples[index].inputs().toDict()) or \
                    rollout.rollout_id != offset + index * k + sample:
                raise ValueError(f"checkpoint_dir: {path} was saved for another example; use a new folder")
            done[(index, sample)] = rollout
        return done


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


def _report(
    examples: list[dspy.Example],
    jobs: list[tuple[int, int]],
    rollouts: list[Any],
    k: int,
    temperature: float,
    answer_field: str,
    success_threshold: float,
    library: Any,
    elapsed: float,
) -> EvalReport:
    samples: dict[int, list[SampleResult]] = {index: [] for index in range(len(examples))}
    used_tools = False
    usages = []
    for (index, _), rollout in zip(jobs, rollouts, strict=True):
        if not isinstance(rollout, Rollout):  # run_rollout itself failed: count as a program error
            samples[index].append(SampleResult(0.0, False, error=f"rollout failed: {rollout!r}"))
            continue
        used_tools = used_tools or "trajectory" in (rollout.outputs or {})
        usages.append(rollout.usage)
        samples[index].append(
            SampleResult(
                score=rollout.score,
                correct=rollout.error is None and rollout.score >= success_threshold,
                feedback=rollout.feedback,
                error=rollout.error,
                metric_error=rollout.metric_error,
                tool_calls=rollout.tool_calls,
                answer=rollout.answer(answer_field),
            )
        )
    results = tuple(
        ExampleResult(index, dict(examples[index].inputs().toDict()), tuple(samples[index]))
        for index in range(len(examples))
    )
    all_samples = [sample for result in results for sample in result.samples]
    ks = sorted({j for j in (2**p for p in range(k.bit_length())) if j <= k} | {k})
    pass_at = {j: sum(pass_at_k(k, r.num_correct, j) for r in results) / len(results) for j in ks}
    report = EvalReport(
        k=k,
        temperature=float(temperature),
        num_examples=len(results),
        mean_at_k=sum(r.mean_score for r in results) / len(results),
        pass_at=pass_at,
        program_errors=sum(s.error is not None for s in all_samples),
        metric_errors=sum(s.metric_error is not None for s in all_samples),
        mean_tool_calls=sum(s.tool_calls for s in all_samples) / len(all_samples) if used_tools else None,
        usage=Usage.total(usages),
        elapsed_seconds=elapsed,
        library_size=None if library is None else len(library),
        examples=results,
    )
    logger.info("%s", report.summary())
    return report
