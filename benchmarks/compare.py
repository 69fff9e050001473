"""Compare prompt optimizers on one program, one LM, one data split: score against tokens spent.

Every method gets the same program (ChainOfThought ``question -> answer``), the same LM, the same
train / validation / held-out split and the same seed:

    none        the unoptimized program
    bootstrap   dspy.BootstrapFewShot
    mipro       dspy.MIPROv2(auto="light")
    simba       dspy.SIMBA
    gepa        dspy.GEPA (feedback metric, reflection LM)
    tfgrpo      tfgrpo_dspy.TrainingFreeGRPO

and the paper's ablations (arXiv 2510.08191, section 4):

    direct_tips the model writes N tips from the training questions (N = the learned library's size),
                no rollouts, no loop; injected with ``with_experiences``
    group1      TrainingFreeGRPO(group_size=1, informative_only=False)
    no_gt       TrainingFreeGRPO(ground_truth=False): majority-vote reward, no labels

For each: held-out Mean@k (``evaluate_at_k``; spread over seeds with ``--seeds``), LM calls and tokens
by role (task model vs optimizer/reflection model), wall time, and the prompt tokens the optimized
program adds to every inference call. Usage is metered in the engine: each role's LM wraps the engine
in a `MeteredEngine`, and every copy an optimizer makes of that LM (rollout ids, temperatures, worker
threads) shares it, so each request that reaches the model is counted once, in its role; cache hits
never reach the engine and are not billed.

    python benchmarks/compare.py --preset smoke                     # minutes: proves the harness works
    python benchmarks/compare.py --preset embedded                  # about an hour on 2 cores
    python benchmarks/compare.py --preset embedded --gsm8k /work/shared/data/gsm8k/train.jsonl
    python benchmarks/compare.py --preset embedded --methods none tfgrpo --ablations

Writes benchmarks/results/compare_<preset>.json, .md and .png.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy
from dspy.lm15 import Request, Response, response_to_events

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, with_experiences
from tfgrpo_dspy.evaluation import EvalReport, evaluate_at_k
from tfgrpo_dspy.kits.wordproblems import generate_problems, make_program, numeric_match
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger("compare")

RESULTS_DIR = Path(__file__).resolve().parent / "results"
METHODS = ("none", "bootstrap", "mipro", "simba", "gepa", "tfgrpo")
ABLATIONS = ("direct_tips", "group1", "no_gt")
CHARS_PER_TOKEN = 4  # the same rule as ExperienceLibrary.approx_tokens


# -- settings ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    """Data sizes, evaluation settings and each optimizer's budget: one preset."""

    train_n: int
    val_n: int
    test_n: int
    k: int = 1
    eval_temperature: float = 0.3
    seeds: int = 1
    num_threads: int = 4
    # BootstrapFewShot (MIPROv2 uses the same demo caps)
    max_bootstrapped_demos: int = 2
    max_labeled_demos: int = 2
    # SIMBA
    simba_bsize: int = 4
    simba_candidates: int = 2
    simba_steps: int = 2
    # GEPA
    gepa_max_metric_calls: int = 40
    gepa_minibatch: int = 3
    # TrainingFreeGRPO and its ablations
    group_size: int = 4
    epochs: int = 1
    batch_size: int | None = None
    rollout_temperature: float = 0.7
    direct_tips_default: int = 4  # tips to ask for when no learned library gives the count

    def __post_init__(self) -> None:
        for name in ("train_n", "val_n", "test_n", "k", "seeds", "num_threads", "simba_bsize", "simba_candidates",
                     "simba_steps", "gepa_max_metric_calls", "gepa_minibatch", "group_size", "epochs",
                     "direct_tips_default"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.simba_bsize > self.train_n:
            raise ValueError(f"simba_bsize ({self.simba_bsize}) must not exceed train_n ({self.train_n})")


PRESETS: dict[str, Budget] = {
    # Minutes on the embedded model: every method runs, on almost no data. Proves the wiring, not quality.
    "smoke": Budget(train_n=3, val_n=2, test_n=3, max_bootstrapped_demos=1, max_labeled_demos=1,
                    simba_bsize=2, simba_candidates=2, simba_steps=1, gepa_max_metric_calls=8, gepa_minibatch=2,
                    group_size=2, epochs=1),
    # About an hour for wordproblems on 2 cores with the embedded 1.5B model (see README.md for the estimate).
    "embedded": Budget(train_n=6, val_n=3, test_n=8, max_bootstrapped_demos=2, max_labeled_demos=2,
                       simba_bsize=3, simba_candidates=2, simba_steps=1, gepa_max_metric_calls=18,
                       gepa_minibatch=3, group_size=3, epochs=1, batch_size=3),
    # For a served model with real throughput: paper-like sizes.
    "server": Budget(train_n=30, val_n=20, test_n=100, k=4, seeds=3, num_threads=16, max_bootstrapped_demos=4,
                     max_labeled_demos=4, simba_bsize=8, simba_candidates=4, simba_steps=4,
                     gepa_max_metric_calls=300, gepa_minibatch=3, group_size=5, epochs=3),
}


@dataclass(frozen=True)
class Split:
    """One task's data: the same for every method."""

    task: str
    train: list[dspy.Example]
    val: list[dspy.Example]
    test: list[dspy.Example]
    source: str


def wordproblems_split(budget: Budget, seed: int) -> Split:
    """Generated problems: train and validation from the training half of question space, test from the other."""
    pool = generate_problems(budget.train_n + budget.val_n, seed, split="train")
    test = generate_problems(budget.test_n, seed, split="heldout")
    return Split("wordproblems", pool[: budget.train_n], pool[budget.train_n :], test, "generated")


def gsm8k_split(path: str, budget: Budget, seed: int) -> Split:
    """A seeded sample of a GSM8K jsonl file, cut into train / validation / held-out parts."""
    from tfgrpo_dspy.kits.math.data import load_gsm8k

    n = budget.train_n + budget.val_n + budget.test_n
    problems = load_gsm8k(path, split="train", n=n, seed=seed)
    if len(problems) < n:
        raise ValueError(f"--gsm8k {path} has {len(problems)} problems; the preset needs {n}")
    # The math kit names the input "problem"; every method here runs the same question -> answer program.
    rows = [dspy.Example(question=e.problem, answer=e.answer).with_inputs("question") for e in problems]
    train, val = rows[: budget.train_n], rows[budget.train_n : budget.train_n + budget.val_n]
    return Split("gsm8k", train, val, rows[budget.train_n + budget.val_n :], path)


def score_only(example: dspy.Example, prediction: Any, trace: Any = None) -> float:
    """numeric_match as a float, for optimizers that test a metric's truth value (a Prediction is always truthy)."""
    return float(numeric_match(example, prediction).score)


# -- usage metering ---------------------------------------------------------------------------------
class MeteredEngine:
    """An engine wrapper that counts every request reaching the model, whichever LM copy or thread sent it.

    ``lm.copy()`` and program deep copies share the engine object, so the count includes the copies an
    optimizer makes internally (rollout ids, temperatures) that a history read on the original LM misses.
    """

    def __init__(self, inner: Any, role: str):
        if not callable(getattr(inner, "complete", None)):
            raise TypeError(f"inner must be an engine with complete(Request), got {type(inner).__name__}")
        self.inner = inner
        self.role = role
        self._lock = threading.Lock()
        self._usage = Usage()
        self.failures = 0

    def complete(self, request: Request) -> Response:
        try:
            response = self.inner.complete(request)
        except Exception:
            with self._lock:
                self.failures += 1
            raise
        usage = response.usage
        with self._lock:
            self._usage = self._usage + Usage(
                calls=1,
                prompt_tokens=int(getattr(usage, "input_tokens", None) or 0),
                completion_tokens=int(getattr(usage, "output_tokens", None) or 0),
            )
        return response

    def stream(self, request: Request) -> Any:
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """The inner engine is shared by every role; closing one role must not close it."""

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    def __deepcopy__(self, memo: dict) -> MeteredEngine:
        return self


def metered_copy(lm: dspy.LM, role: str) -> tuple[dspy.LM, MeteredEngine]:
    """A copy of ``lm`` whose requests are counted under ``role``."""
    inner = getattr(lm, "engine", None)
    if inner is None or isinstance(inner, str):
        raise ValueError(
            "lm must be engine-backed (the embedded model, or dspy.LM(..., engine=...)) so that usage can be "
            f"metered per role; got engine={inner!r}"
        )
    meter = MeteredEngine(inner, role)
    return lm.copy(engine=meter), meter


@dataclass
class Roles:
    """One method run's LMs: the task model, the optimizer's own model, and the held-out evaluation."""

    task: dspy.LM
    reflection: dspy.LM
    evaluation: dspy.LM
    meters: dict[str, MeteredEngine]

    @classmethod
    def of(cls, lm: dspy.LM) -> Roles:
        task, task_meter = metered_copy(lm, "task")
        reflection, reflection_meter = metered_copy(lm, "reflection")
        evaluation, eval_meter = metered_copy(lm, "evaluation")
        return cls(task, reflection, evaluation,
                   {"task": task_meter, "reflection": reflection_meter, "evaluation": eval_meter})


# -- methods ----------------------------------------------------------------------------------------
@dataclass
class MethodContext:
    """What a method needs to compile: data, LMs, budget, seed, and results of methods run before it."""

    split: Split
    roles: Roles
    budget: Budget
    seed: int
    learned_library_size: int | None = None


@dataclass
class Compiled:
    program: dspy.Module
    details: dict[str, Any] = field(default_factory=dict)


def _program() -> dspy.Module:
    return make_program()


def compile_none(ctx: MethodContext) -> Compiled:
    return Compiled(_program(), {"budget": "no optimization"})


def compile_bootstrap(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.BootstrapFewShot(metric=score_only, max_bootstrapped_demos=b.max_bootstrapped_demos,
                                      max_labeled_demos=b.max_labeled_demos, max_rounds=1)
    program = optimizer.compile(_program(), trainset=ctx.split.train)
    return Compiled(program, {"budget": {"max_bootstrapped_demos": b.max_bootstrapped_demos,
                                         "max_labeled_demos": b.max_labeled_demos, "max_rounds": 1}})


def compile_mipro(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.MIPROv2(metric=score_only, prompt_model=ctx.roles.reflection, task_model=ctx.roles.task,
                             auto="light", max_bootstrapped_demos=b.max_bootstrapped_demos,
                             max_labeled_demos=b.max_labeled_demos, num_threads=b.num_threads, seed=ctx.seed,
                             verbose=False)
    program = optimizer.compile(_program(), trainset=ctx.split.train, valset=ctx.split.val)
    return Compiled(program, {"budget": {"auto": "light", "max_bootstrapped_demos": b.max_bootstrapped_demos,
                                         "max_labeled_demos": b.max_labeled_demos}})


def compile_simba(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.SIMBA(metric=numeric_match, bsize=b.simba_bsize, num_candidates=b.simba_candidates,
                           max_steps=b.simba_steps, max_demos=b.max_bootstrapped_demos,
                           prompt_model=ctx.roles.reflection, num_threads=b.num_threads)
    program = optimizer.compile(_program(), trainset=ctx.split.train, seed=ctx.seed)
    return Compiled(program, {"budget": {"bsize": b.simba_bsize, "num_candidates": b.simba_candidates,
                                         "max_steps": b.simba_steps, "max_demos": b.max_bootstrapped_demos}})


def compile_gepa(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.GEPA(metric=numeric_match, max_metric_calls=b.gepa_max_metric_calls,
                          reflection_minibatch_size=b.gepa_minibatch, reflection_lm=ctx.roles.reflection,
                          num_threads=b.num_threads, seed=ctx.seed)
    program = optimizer.compile(_program(), trainset=ctx.split.train, valset=ctx.split.val)
    return Compiled(program, {"budget": {"max_metric_calls": b.gepa_max_metric_calls,
                                         "reflection_minibatch_size": b.gepa_minibatch}})


def tfgrpo_optimizer(ctx: MethodContext, **overrides: Any) -> TrainingFreeGRPO:
    """The method's TrainingFreeGRPO; the ablations change only ``overrides``."""
    b = ctx.budget
    settings: dict[str, Any] = dict(metric=numeric_match, group_size=b.group_size, epochs=b.epochs,
                                    batch_size=b.batch_size, temperature=b.rollout_temperature,
                                    reflection_lm=ctx.roles.reflection, num_threads=b.num_threads, seed=ctx.seed,
                                    progress=False)
    settings.update(overrides)
    return TrainingFreeGRPO(**settings)


def _compile_tfgrpo_with(ctx: MethodContext, **overrides: Any) -> Compiled:
    optimizer = tfgrpo_optimizer(ctx, **overrides)
    program = optimizer.compile(_program(), trainset=ctx.split.train)
    result = program.tfgrpo_result
    return Compiled(program, {
        "budget": {key: getattr(optimizer, key) for key in ("group_size", "epochs", "batch_size", "temperature",
                                                             "ground_truth", "informative_only")},
        "library_size": len(result.library),
        "library": [e.text for e in result.library],
        "steps": len(result.steps),
        "informative_groups": sum(s.informative_groups for s in result.steps),
        # The optimizer's own accounting, to cross-check the engine meters.
        "self_reported_policy_usage": result.policy_usage.to_dict(),
        "self_reported_reflection_usage": result.reflection_usage.to_dict(),
    })


def compile_tfgrpo(ctx: MethodContext) -> Compiled:
    return _compile_tfgrpo_with(ctx)


def compile_group1(ctx: MethodContext) -> Compiled:
    return _compile_tfgrpo_with(ctx, group_size=1, informative_only=False)


def compile_no_gt(ctx: MethodContext) -> Compiled:
    return _compile_tfgrpo_with(ctx, metric=None, ground_truth=False)


class GenerateTips(dspy.Signature):
    """Read a task and some of its training questions. Write short, general tips that would help a model
    answer new questions of this task correctly. Each tip is one sentence."""

    task_instructions: str = dspy.InputField()
    example_questions: list[str] = dspy.InputField()
    num_tips: int = dspy.InputField()
    tips: list[str] = dspy.OutputField(desc="exactly num_tips tips")


def compile_direct_tips(ctx: MethodContext, *, max_words: int = 32) -> Compiled:
    """The "directly generated experiences" ablation: one call, no rollouts, no comparison, no loop."""
    count = ctx.learned_library_size or ctx.budget.direct_tips_default
    program = _program()
    instructions = next(iter(program.named_predictors()))[1].signature.instructions
    with dspy.context(lm=ctx.roles.reflection):
        tips = dspy.Predict(GenerateTips)(task_instructions=instructions,
                                          example_questions=[e.question for e in ctx.split.train],
                                          num_tips=count).tips
    texts = [" ".join(str(t).split()[:max_words]) for t in tips if str(t).strip()][:count]
    library = ExperienceLibrary.from_texts(texts)
    return Compiled(with_experiences(program, library), {
        "budget": {"tips_requested": count}, "library_size": len(library), "library": texts,
    })


COMPILERS: dict[str, Callable[[MethodContext], Compiled]] = {
    "none": compile_none,
    "bootstrap": compile_bootstrap,
    "mipro": compile_mipro,
    "simba": compile_simba,
    "gepa": compile_gepa,
    "tfgrpo": compile_tfgrpo,
    "direct_tips": compile_direct_tips,
    "group1": compile_group1,
    "no_gt": compile_no_gt,
}


# -- measuring --------------------------------------------------------------------------------------
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


def detach_lms(program: dspy.Module) -> dspy.Module:
    """A copy whose predictors use the LM of the context: evaluation must not run on an optimizer's LM copy."""
    program = program.deepcopy()
    for _, predictor in program.named_predictors():
        predictor.lm = None
    return program


@dataclass(frozen=True)
class SeedRun:
    """One method, one seed."""

    seed: int
    score: float | None
    pass_at_k: float | None
    score_stderr: float | None  # standard error of the mean over held-out examples
    compile_seconds: float
    eval_seconds: float | None
    usage: dict[str, Usage]  # role -> usage ("task", "reflection", "evaluation")
    engine_failures: int
    added_prompt_tokens: int | None  # approx, rendered static prompt vs the base program
    eval_prompt_tokens_per_call: float | None  # measured by the model's tokenizer on the held-out set
    program_errors: int | None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["usage"] = {role: usage.to_dict() for role, usage in self.usage.items()}
        return data


@dataclass(frozen=True)
class MethodResult:
    """A method over all seeds."""

    method: str
    kind: str  # "method" or "ablation"
    runs: tuple[SeedRun, ...]

    @property
    def ok_runs(self) -> list[SeedRun]:
        return [r for r in self.runs if r.error is None]

    @property
    def error(self) -> str | None:
        errors = [r.error for r in self.runs if r.error]
        return errors[0] if errors else None

    def mean(self, value: Callable[[SeedRun], float | None]) -> float | None:
        values = [v for v in (value(r) for r in self.ok_runs) if v is not None]
        return statistics.fmean(values) if values else None

    @property
    def score(self) -> float | None:
        return self.mean(lambda r: r.score)

    @property
    def score_seed_std(self) -> float | None:
        scores = [r.score for r in self.ok_runs if r.score is not None]
        return statistics.stdev(scores) if len(scores) > 1 else None

    def role_usage(self, role: str) -> Usage:
        """Mean usage of one role per seed (integer division keeps it a Usage)."""
        runs = self.ok_runs
        if not runs:
            return Usage()
        total = Usage.total(r.usage.get(role, Usage()) for r in runs)
        n = len(runs)
        return Usage(calls=round(total.calls / n), prompt_tokens=round(total.prompt_tokens / n),
                     completion_tokens=round(total.completion_tokens / n), cost=total.cost / n)

    @property
    def optimization_tokens(self) -> int:
        return self.role_usage("task").total_tokens + self.role_usage("reflection").total_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "kind": self.kind,
            "status": "ok" if self.ok_runs else "failed",
            "error": self.error,
            "score_mean_at_k": self.score,
            "score_seed_std": self.score_seed_std,
            "score_stderr_examples": self.mean(lambda r: r.score_stderr),
            "pass_at_k": self.mean(lambda r: r.pass_at_k),
            "compile_seconds": self.mean(lambda r: r.compile_seconds),
            "eval_seconds": self.mean(lambda r: r.eval_seconds),
            "usage_per_seed": {role: self.role_usage(role).to_dict() for role in ("task", "reflection", "evaluation")},
            "optimization_tokens": self.optimization_tokens,
            "added_prompt_tokens": self.mean(lambda r: r.added_prompt_tokens),
            "eval_prompt_tokens_per_call": self.mean(lambda r: r.eval_prompt_tokens_per_call),
            "runs": [r.to_dict() for r in self.runs],
        }


def run_method(method: str, split: Split, lm: dspy.LM, budget: Budget, seed: int, *,
               learned_library_size: int | None = None, progress: bool = True) -> SeedRun:
    """Compile and evaluate one method; any failure is recorded on the result, never raised."""
    if method not in COMPILERS:
        raise ValueError(f"method must be one of {sorted(COMPILERS)}, got {method!r}")
    # A fresh memory-only cache per method: a method may reuse its own calls, never another method's or an
    # earlier run's (this replaces DSPy's global cache for the rest of the process).
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    roles = Roles.of(lm)
    ctx = MethodContext(split, roles, budget, seed, learned_library_size)
    base_chars = static_prompt_chars(_program())
    started = time.perf_counter()
    compiled, error, report = None, None, None
    try:
        with dspy.context(lm=roles.task):
            compiled = COMPILERS[method](ctx)
    except Exception as exc:  # a failing optimizer is a result, not the end of the comparison
        error = f"compile: {type(exc).__name__}: {exc}"
        logger.warning("%s failed:\n%s", method, traceback.format_exc())
    compile_seconds = time.perf_counter() - started
    added, eval_seconds = None, None
    if compiled is not None:
        program = detach_lms(compiled.program)
        added = approx_tokens(static_prompt_chars(program)) - approx_tokens(base_chars)
        started = time.perf_counter()
        try:
            report = evaluate_at_k(program, split.test, numeric_match, k=budget.k,
                                   temperature=budget.eval_temperature, num_threads=budget.num_threads,
                                   lm=roles.evaluation, rollout_id_offset=seed * 10**6, progress=progress)
        except Exception as exc:
            error = f"evaluate: {type(exc).__name__}: {exc}"
            logger.warning("%s evaluation failed:\n%s", method, traceback.format_exc())
        eval_seconds = time.perf_counter() - started
    usage = {role: meter.usage for role, meter in roles.meters.items()}
    eval_usage = usage["evaluation"]
    return SeedRun(
        seed=seed,
        score=report.mean_at_k if report else None,
        pass_at_k=report.pass_at_k if report else None,
        score_stderr=_stderr(report) if report else None,
        compile_seconds=round(compile_seconds, 2),
        eval_seconds=round(eval_seconds, 2) if eval_seconds is not None else None,
        usage=usage,
        engine_failures=sum(m.failures for m in roles.meters.values()),
        added_prompt_tokens=added,
        eval_prompt_tokens_per_call=(round(eval_usage.prompt_tokens / eval_usage.calls, 1)
                                     if eval_usage.calls else None),
        program_errors=report.program_errors if report else None,
        error=error,
        details=compiled.details if compiled else {},
    )


def _stderr(report: EvalReport) -> float | None:
    scores = [e.mean_score for e in report.examples]
    return statistics.stdev(scores) / math.sqrt(len(scores)) if len(scores) > 1 else None


def run_comparison(split: Split, lm: dspy.LM, budget: Budget, methods: Sequence[str], *,
                   progress: bool = True,
                   on_result: Callable[[list[MethodResult]], None] | None = None) -> list[MethodResult]:
    """Run ``methods`` in order (tfgrpo before direct_tips, which copies its library size) over all seeds.

    ``on_result`` receives the results so far after every method run (to save partial results).
    """
    unknown = [m for m in methods if m not in COMPILERS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(COMPILERS)}")
    methods = list(methods)
    if "direct_tips" in methods and "tfgrpo" in methods:
        methods = [m for m in methods if m != "direct_tips"]
        methods.insert(methods.index("tfgrpo") + 1, "direct_tips")
    results: dict[str, list[SeedRun]] = {m: [] for m in methods}
    for seed in range(budget.seeds):
        library_size = None
        for method in methods:
            logger.info("[%s] seed %d: %s ...", split.task, seed, method)
            run = run_method(method, split, lm, budget, seed, learned_library_size=library_size,
                             progress=progress)
            if method == "tfgrpo" and run.error is None:
                library_size = run.details.get("library_size") or None
            results[method].append(run)
            logger.info("[%s] seed %d: %s -> %s (compile %.0f s, eval %s s, task %d calls, reflection %d calls)",
                        split.task, seed, method,
                        f"Mean@{budget.k} {run.score:.3f}" if run.score is not None else f"FAILED {run.error}",
                        run.compile_seconds, run.eval_seconds, run.usage["task"].calls,
                        run.usage["reflection"].calls)
            if on_result is not None:
                on_result(_collect(results))
    return _collect(results)


def _collect(results: dict[str, list[SeedRun]]) -> list[MethodResult]:
    return [MethodResult(m, "ablation" if m in ABLATIONS else "method", tuple(runs))
            for m, runs in results.items() if runs]


# -- writing ----------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(results: Sequence[MethodResult], k: int) -> str:
    """One row per method: score, cost by role, time, and the prompt tokens added to every call."""
    lines = [
        f"| method | held-out Mean@{k} | ± seed std | ± SE (examples) | task LM calls / tokens "
        "| optimizer LM calls / tokens | compile s | eval s | added prompt tokens/call (rendered) "
        "| eval prompt tokens/call (measured) | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        data = result.to_dict()
        task, reflection = result.role_usage("task"), result.role_usage("reflection")
        name = result.method + (" (ablation)" if result.kind == "ablation" else "")
        status = "ok" if data["status"] == "ok" else f"FAILED: {(data['error'] or '')[:120]}"
        lines.append(
            f"| {name} | {_fmt(data['score_mean_at_k'])} | {_fmt(data['score_seed_std'])} "
            f"| {_fmt(data['score_stderr_examples'])} | {task.calls} / {task.total_tokens:,} "
            f"| {reflection.calls} / {reflection.total_tokens:,} | {_fmt(data['compile_seconds'], 0)} "
            f"| {_fmt(data['eval_seconds'], 0)} | {_fmt(data['added_prompt_tokens'], 0)} "
            f"| {_fmt(data['eval_prompt_tokens_per_call'], 0)} | {status.replace('|', '/')} |"
        )
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return path


def write_markdown(report: dict[str, Any], tables: dict[str, str], path: Path) -> Path:
    budget = report["budget"]
    lines = [
        f"# Optimizer comparison: preset `{report['preset']}`",
        "",
        f"Command: `{report['command']}` (code at `{report.get('code') or 'unknown'}`)",
        "",
        *([] if report.get("complete", True) else ["**Partial results: the run was still going or was interrupted.**",
                                                    ""]),
        f"LM `{report['lm']}`; {budget['num_threads']} threads; held-out Mean@{budget['k']} at temperature "
        f"{budget['eval_temperature']}; {budget['seeds']} seed(s); started {report['started']}, "
        f"total wall time {report['wall_seconds']:.0f} s; load average at start {report['load_average'][0]}, "
        f"at end {report['load_average'][1]}.",
        "",
        "Token columns count every request that reached the model, by role, per seed (optimization only; "
        "held-out evaluation is metered apart). 'Added prompt tokens' is the rendered prompt of the optimized "
        f"program minus the base program's, at {CHARS_PER_TOKEN} characters a token; the measured column is the "
        "model tokenizer's prompt tokens per held-out call, question included.",
        "",
    ]
    for task, table in tables.items():
        split = report["tasks"][task]["split"]
        lines += [f"## {task}", "",
                  f"train {split['train']} / val {split['val']} / test {split['test']} examples ({split['source']}).",
                  "", table, ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Held-out score against optimization tokens, one panel per task, drawn from the saved report.

    Bars: the spread over seeds, or with one seed the standard error over held-out examples.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, tasks = report["budget"]["k"], report["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.8), squeeze=False)
    for axis, (task, data) in zip(axes[0], tasks.items(), strict=True):
        placed: list[tuple[float, float]] = []
        for result in data["results"]:
            score, tokens = result["score_mean_at_k"], result["optimization_tokens"]
            if score is None:
                continue
            spread = result["score_seed_std"] if result["score_seed_std"] is not None else result[
                "score_stderr_examples"]
            marker = "s" if result["kind"] == "ablation" else "o"
            axis.errorbar(tokens, score, yerr=spread or 0.0, fmt=marker, capsize=3, alpha=0.8)
            # Methods often tie on a small test set: stack the labels of nearby points instead of overprinting.
            near = sum(1 for t, s in placed if s == score and abs(math.log10(t + 1) - math.log10(tokens + 1)) < 0.3)
            placed.append((tokens, score))
            axis.annotate(result["method"], (tokens, score), textcoords="offset points",
                          xytext=(5, 4 + 10 * near), fontsize=8)
        axis.set_xscale("symlog", linthresh=1000)
        axis.set_xlabel("optimization tokens (task + optimizer LM)")
        axis.set_ylabel(f"held-out Mean@{k}")
        axis.set_title(f"{task}: bars = seed std, or SE over {data['split']['test']} examples with one seed",
                       fontsize=9)
        axis.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_report(*, preset: str, budget: Budget, lm_name: str, command: str, code: str | None, started: str,
                 wall_seconds: float, load_average: tuple[Any, Any], splits: dict[str, Split],
                 per_task: dict[str, Sequence[MethodResult]]) -> dict[str, Any]:
    return {
        "format": "tfgrpo-compare",
        "version": 1,
        "preset": preset,
        "command": command,
        "lm": lm_name,
        "budget": asdict(budget),
        "started": started,
        "wall_seconds": round(wall_seconds, 1),
        "load_average": list(load_average),
        "code": code,
        "environment": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                        "dspy": _version("dspy"), "gepa": _version("gepa"), "optuna": _version("optuna")},
        "tasks": {
            task: {
                "split": {"train": len(s.train), "val": len(s.val), "test": len(s.test), "source": s.source},
                "results": [r.to_dict() for r in per_task[task]],
            }
            for task, s in splits.items()
        },
    }


def _git_revision() -> str | None:
    """The commit the harness ran from, with ``+dirty`` when the working tree had changes (None outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_outputs(report: dict[str, Any], per_task: dict[str, Sequence[MethodResult]], k: int, out_dir: Path,
                  stem: str) -> list[Path]:
    tables = {task: markdown_table(results, k) for task, results in per_task.items()}
    return [
        write_json(report, out_dir / f"{stem}.json"),
        write_markdown(report, tables, out_dir / f"{stem}.md"),
        write_plot(report, out_dir / f"{stem}.png"),
    ]


# -- command line -----------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--lm", default="local", help="'local', 'local:0.5b' (engine-backed LMs only)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    ablations = parser.add_mutually_exclusive_group()
    ablations.add_argument("--ablations", dest="ablations", action="store_true", default=True,
                           help="also run direct_tips, group1 and no_gt (default)")
    ablations.add_argument("--no-ablations", dest="ablations", action="store_false")
    parser.add_argument("--no-wordproblems", dest="wordproblems", action="store_false",
                        help="skip the generated word problems")
    parser.add_argument("--gsm8k", metavar="PATH", help="also compare on a seeded sample of this GSM8K jsonl file")
    parser.add_argument("--seeds", type=int, help="override the preset's number of seeds")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the data split (same for every method)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--stem", help="output file stem (default compare_<preset>)")
    parser.add_argument("--replot", type=Path, metavar="JSON",
                        help="redraw the PNG of a saved comparison (next to the JSON) and exit; runs nothing")
    args = parser.parse_args(argv)
    if not args.wordproblems and not args.gsm8k:
        parser.error("nothing to run: --no-wordproblems needs --gsm8k PATH")
    if args.gsm8k and not Path(args.gsm8k).exists():
        parser.error(f"--gsm8k {args.gsm8k}: no such file")
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replot:
        print(f"wrote {write_plot(json.loads(args.replot.read_text()), args.replot.with_suffix('.png'))}")
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(logging.INFO)
    from tfgrpo_dspy.lm import make_lm

    budget = PRESETS[args.preset]
    if args.seeds is not None:
        budget = replace(budget, seeds=args.seeds)
    command = shlex.join(["python", *(sys.argv if argv is None else ["benchmarks/compare.py", *argv])])
    lm = make_lm(args.lm)
    dspy.configure(lm=lm)
    methods = list(args.methods) + (list(ABLATIONS) if args.ablations else [])
    splits: dict[str, Split] = {}
    if args.wordproblems:
        splits["wordproblems"] = wordproblems_split(budget, args.data_seed)
    if args.gsm8k:
        splits["gsm8k"] = gsm8k_split(args.gsm8k, budget, args.data_seed)
    started, clock, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter(), os.getloadavg()
    code = _git_revision()  # at the start: later edits to the tree do not change what this run measured
    per_task: dict[str, list[MethodResult]] = {}
    stem = args.stem or f"compare_{args.preset}"

    def save(complete: bool) -> list[Path]:
        report = build_report(preset=args.preset, budget=budget, lm_name=args.lm, command=command, code=code,
                              started=started,
                              wall_seconds=time.perf_counter() - clock,
                              load_average=(round(load_start[0], 2), round(os.getloadavg()[0], 2)),
                              splits={t: splits[t] for t in per_task}, per_task=per_task)
        report["complete"] = complete
        return write_outputs(report, per_task, budget.k, args.out_dir, stem)

    for task, split in splits.items():
        logger.info("%s: %d train / %d val / %d test; methods %s", task, len(split.train), len(split.val),
                    len(split.test), methods)

        def partial(results: list[MethodResult], task: str = task) -> None:
            per_task[task] = results
            save(complete=False)  # an interrupted run keeps every method finished so far

        per_task[task] = run_comparison(split, lm, budget, methods, on_result=partial)
    paths = save(complete=True)
    for task, results in per_task.items():
        print(f"\n## {task}\n\n{markdown_table(results, budget.k)}")
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
