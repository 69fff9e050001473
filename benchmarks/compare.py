"""Compare prompt optimizers on one program, one LM, one data split: paired held-out gains against tokens spent.

Every method gets the same program, the same LM, the same train / selection / held-out split, the same
seed and the same held-out decoding:

    none                the unoptimized program
    bootstrap           dspy.BootstrapFewShot
    mipro               dspy.MIPROv2(auto="light")
    simba               dspy.SIMBA
    gepa                dspy.GEPA (feedback metric, reflection LM)
    tfgrpo_paper        TrainingFreeGRPO with the paper's recipe: no selection set, no gate, one batch,
                        every lesson in the prompt (top_k=None)
    tfgrpo              TrainingFreeGRPO with its defaults: gated on the selection rows
    tfgrpo_on_bootstrap TrainingFreeGRPO on the BootstrapFewShot program of the same run (demos kept)

and the paper's ablations (arXiv 2510.08191, section 4), each the paper's recipe with one change:

    direct_tips the model writes N tips from the training questions (N = tfgrpo_paper's library size),
                no rollouts, no loop; injected with ``with_experiences``
    group1      group_size=1, informative_only=False
    no_gt       ground_truth=False: majority-vote reward, no labels

For each: held-out Mean@k and the per-problem results (score and answer of every held-out problem);
the gain over ``none`` on the same problems with a paired bootstrap 95% interval and the exact sign test
(exact McNemar for 0/1 scores); LM calls and tokens by role (task model vs optimizer/reflection model,
and TrainingFreeGRPO's own policy / reflection / selection accounting); compile and evaluation wall time;
and the prompt tokens the optimized program adds to every inference call. For the gated ``tfgrpo``, the
libraries its selection gate decided on can also be scored on the held-out rows (``gate_checks``, 3 in the
gsm8k preset; ``--gate-checks N``), to see whether each decision held there. Usage is metered in the engine:
each role's LM wraps the engine in a `MeteredEngine`, and every copy an optimizer makes of that LM
(rollout ids, temperatures, worker threads) shares it, so each request that reaches the model is counted
once, in its role; cache hits never reach the engine and are not billed.

Finished work is kept in a run directory (``--runs``, default ``<out-dir>/<stem>.runs``): a rerun of the
same command skips every finished compile and evaluation and resumes an interrupted TrainingFreeGRPO
compile from its own log.

    python benchmarks/compare.py --preset smoke                     # minutes: proves the harness works
    python benchmarks/compare.py --preset gsm8k --source /work/shared/data/gsm8k/train.jsonl
    python benchmarks/compare.py --preset embedded                  # generated word problems, 2 cores
    python benchmarks/compare.py --preset embedded --methods none tfgrpo --ablations

Writes benchmarks/results/compare_<preset>.json, .md and .png.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import dspy
from dspy.lm15 import Request, Response, response_to_events

from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, compare_paired, library_of, with_experiences
from tfgrpo_dspy.evaluation import EvalReport, evaluate_at_k
from tfgrpo_dspy.injection import placement_of
from tfgrpo_dspy.kits.math.data import GSM8K_HUB_ID, gsm8k_splits
from tfgrpo_dspy.kits.wordproblems import generate_problems, make_program, numeric_match
from tfgrpo_dspy.library import read_json, write_json_atomic
from tfgrpo_dspy.results import TrainingFreeGRPOResult
from tfgrpo_dspy.stats import flip_rate
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger("compare")

RESULTS_DIR = Path(__file__).resolve().parent / "results"
METHODS = ("none", "bootstrap", "mipro", "simba", "gepa", "tfgrpo_paper", "tfgrpo", "tfgrpo_on_bootstrap")
ABLATIONS = ("direct_tips", "group1", "no_gt")
TASKS = ("wordproblems", "gsm8k")
# A method runs after the one it reads from: its student program, or the size of the library it imitates.
READS_FROM = {"tfgrpo_on_bootstrap": "bootstrap", "direct_tips": "tfgrpo_paper"}
# The paper's recipe: every step's edits kept, no selection set, the whole trainset as one batch, every
# lesson in the prompt.
PAPER_RECIPE: dict[str, Any] = {"val_fraction": 0, "gate": False, "batch_size": None, "top_k": None}
CHARS_PER_TOKEN = 4  # the same rule as ExperienceLibrary.approx_tokens
RECORD_FORMAT = "tfgrpo-compare-method"
RUNS_FORMAT = "tfgrpo-compare-runs"


# -- settings ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    """Data sizes, evaluation settings, the methods run by default and each optimizer's budget: one preset."""

    train_n: int
    val_n: int  # the validation / selection rows
    test_n: int  # the held-out rows
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
    tfgrpo_summarize: bool = True  # False: one reflection call per group instead of G+1 (reads trajectories)
    direct_tips_default: int = 4  # tips to ask for when no learned library gives the count
    # What runs: the data, the methods when --methods is not given, and the repeatability check.
    task: str = "wordproblems"  # "wordproblems" (generated) or "gsm8k" (read from --source)
    methods: tuple[str, ...] = ("none", "bootstrap", "mipro", "simba", "gepa", "tfgrpo_paper", "tfgrpo",
                                *ABLATIONS)
    repeat_none: bool = False  # evaluate `none` a second time with DSPy's cache off and report the flip rate
    # Score on the held-out rows the libraries the gated tfgrpo run decided on (at most this many besides the
    # initial and the shipped one, whose held-out scores are none's and tfgrpo's own): did the gate's verdict hold?
    gate_checks: int = 0
    # Options of the embedded model's server (tfgrpo_dspy.lm.make_lm("local", **lm_options)).
    lm_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("train_n", "val_n", "test_n", "k", "seeds", "num_threads", "simba_bsize", "simba_candidates",
                     "simba_steps", "gepa_max_metric_calls", "gepa_minibatch", "group_size", "epochs",
                     "direct_tips_default"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if isinstance(self.gate_checks, bool) or not isinstance(self.gate_checks, int) or self.gate_checks < 0:
            raise ValueError(f"gate_checks must be an int >= 0, got {self.gate_checks!r}")
        if self.simba_bsize > self.train_n:
            raise ValueError(f"simba_bsize ({self.simba_bsize}) must not exceed train_n ({self.train_n})")
        if self.eval_temperature < 0:
            raise ValueError(f"eval_temperature must be >= 0, got {self.eval_temperature!r}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        unknown = [m for m in self.methods if m not in METHODS + ABLATIONS]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS + ABLATIONS)}")
        if not isinstance(self.lm_options, dict) or not all(isinstance(key, str) for key in self.lm_options):
            raise ValueError(f"lm_options must be a dict of option names to values, got {self.lm_options!r}")


PRESETS: dict[str, Budget] = {
    # Minutes on the embedded model: every method runs, on almost no data. Proves the wiring, not quality.
    "smoke": Budget(train_n=3, val_n=2, test_n=3, max_bootstrapped_demos=1, max_labeled_demos=1,
                    simba_bsize=2, simba_candidates=2, simba_steps=1, gepa_max_metric_calls=8, gepa_minibatch=2,
                    group_size=2, epochs=1),
    # Generated word problems on the embedded 1.5B model, 2 cores (see README.md for the estimate).
    "embedded": Budget(train_n=6, val_n=3, test_n=8, max_bootstrapped_demos=2, max_labeled_demos=2,
                       simba_bsize=3, simba_candidates=2, simba_steps=1, gepa_max_metric_calls=18,
                       gepa_minibatch=3, group_size=3, epochs=1, batch_size=3),
    # Real GSM8K problems, greedy paired evaluation on 100 held-out problems. Meant to fit 150 minutes on 2
    # cores; on this machine it takes many hours (see benchmarks/README.md, "Runtime of the gsm8k preset").
    # MIPROv2, SIMBA and GEPA are selectable (--methods) but do not fit the time budget.
    # Greedy calls use the batched server with its prompt cache (repeatable_greedy=False): on this 2-core
    # machine the repeatable one-slot server costs about 2.4x the time; the preset measures the flip rate instead.
    # Reflection reads trajectories (one call per group) to keep the compiles within hours.
    "gsm8k": Budget(train_n=16, val_n=20, test_n=100, k=1, eval_temperature=0.0, num_threads=4,
                    max_bootstrapped_demos=4, max_labeled_demos=4, simba_bsize=8, simba_candidates=4, simba_steps=2,
                    gepa_max_metric_calls=150, gepa_minibatch=3, group_size=4, epochs=1, batch_size=None,
                    tfgrpo_summarize=False, task="gsm8k",
                    methods=("none", "bootstrap", "tfgrpo_paper", "tfgrpo", "tfgrpo_on_bootstrap"),
                    repeat_none=True, gate_checks=3, lm_options={"n_parallel": 4, "repeatable_greedy": False}),
    # For a served model with real throughput: paper-like sizes.
    "server": Budget(train_n=30, val_n=20, test_n=100, k=4, seeds=3, num_threads=16, max_bootstrapped_demos=4,
                     max_labeled_demos=4, simba_bsize=8, simba_candidates=4, simba_steps=4,
                     gepa_max_metric_calls=300, gepa_minibatch=3, group_size=5, epochs=3),
}


# -- data -------------------------------------------------------------------------------------------
def gsm8k_program() -> dspy.Module:
    """The GSM8K preset's program: plain chain of thought, no task instructions, so optimizers start equal."""
    return dspy.ChainOfThought("question -> answer")


@dataclass(frozen=True)
class Split:
    """One task's data and program: the same for every method."""

    task: str
    train: list[dspy.Example]
    val: list[dspy.Example]
    test: list[dspy.Example]
    source: str
    make_program: Callable[[], dspy.Module] = make_program
    reference_fields: tuple[str, ...] | None = None  # labels the gated TF-GRPO reflection reads (None = default)


def wordproblems_split(budget: Budget, seed: int) -> Split:
    """Generated problems: train and validation from the training half of question space, test from the other."""
    pool = generate_problems(budget.train_n + budget.val_n, seed, split="train")
    test = generate_problems(budget.test_n, seed, split="heldout")
    return Split("wordproblems", pool[: budget.train_n], pool[budget.train_n :], test, "generated")


def as_question(example: dspy.Example) -> dspy.Example:
    """A math-kit example (input ``problem``) as the shared program's input ``question``; labels kept."""
    labels = {key: value for key, value in example.items() if key != "problem"}
    return dspy.Example(question=example.problem, **labels).with_inputs("question")


def gsm8k_split(source: str, budget: Budget, seed: int) -> Split:
    """Seeded, disjoint train / selection / held-out rows of GSM8K (hub id, hub-layout folder or jsonl file).

    Labels: ``answer`` (the number after ``####``) and ``solution`` (the worked solution, which the gated
    TrainingFreeGRPO reflection reads as a reference; it is never a program input).
    """
    parts = gsm8k_splits(source, seed=seed, sizes={"train": budget.train_n, "val": budget.val_n,
                                                   "test": budget.test_n})
    train, val, test = ([as_question(e) for e in parts[name]] for name in ("train", "val", "test"))
    return Split("gsm8k", train, val, test, source, make_program=gsm8k_program,
                 reference_fields=("answer", "solution"))


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
    programs: dict[str, dspy.Module] = field(default_factory=dict)  # this seed's compiled programs, by method
    log_dir: Path | None = None  # TrainingFreeGRPO's run log: an interrupted compile resumes from it


@dataclass
class Compiled:
    program: dspy.Module
    details: dict[str, Any] = field(default_factory=dict)


def compile_none(ctx: MethodContext) -> Compiled:
    return Compiled(ctx.split.make_program(), {"budget": "no optimization"})


def compile_bootstrap(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.BootstrapFewShot(metric=score_only, max_bootstrapped_demos=b.max_bootstrapped_demos,
                                      max_labeled_demos=b.max_labeled_demos, max_rounds=1)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train)
    return Compiled(program, {"budget": {"max_bootstrapped_demos": b.max_bootstrapped_demos,
                                         "max_labeled_demos": b.max_labeled_demos, "max_rounds": 1},
                              "demos": sum(len(p.demos or []) for _, p in program.named_predictors())})


def compile_mipro(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.MIPROv2(metric=score_only, prompt_model=ctx.roles.reflection, task_model=ctx.roles.task,
                             auto="light", max_bootstrapped_demos=b.max_bootstrapped_demos,
                             max_labeled_demos=b.max_labeled_demos, num_threads=b.num_threads, seed=ctx.seed,
                             verbose=False)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train, valset=ctx.split.val)
    return Compiled(program, {"budget": {"auto": "light", "max_bootstrapped_demos": b.max_bootstrapped_demos,
                                         "max_labeled_demos": b.max_labeled_demos}})


def compile_simba(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.SIMBA(metric=numeric_match, bsize=b.simba_bsize, num_candidates=b.simba_candidates,
                           max_steps=b.simba_steps, max_demos=b.max_bootstrapped_demos,
                           prompt_model=ctx.roles.reflection, num_threads=b.num_threads)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train, seed=ctx.seed)
    return Compiled(program, {"budget": {"bsize": b.simba_bsize, "num_candidates": b.simba_candidates,
                                         "max_steps": b.simba_steps, "max_demos": b.max_bootstrapped_demos}})


def compile_gepa(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.GEPA(metric=numeric_match, max_metric_calls=b.gepa_max_metric_calls,
                          reflection_minibatch_size=b.gepa_minibatch, reflection_lm=ctx.roles.reflection,
                          num_threads=b.num_threads, seed=ctx.seed)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train, valset=ctx.split.val)
    return Compiled(program, {"budget": {"max_metric_calls": b.gepa_max_metric_calls,
                                         "reflection_minibatch_size": b.gepa_minibatch}})


def tfgrpo_optimizer(ctx: MethodContext, **overrides: Any) -> TrainingFreeGRPO:
    """The method's TrainingFreeGRPO on the preset's rollout budget; the variants change only ``overrides``."""
    b = ctx.budget
    settings: dict[str, Any] = dict(metric=numeric_match, group_size=b.group_size, epochs=b.epochs,
                                    batch_size=b.batch_size, temperature=b.rollout_temperature,
                                    summarize=b.tfgrpo_summarize,
                                    reflection_lm=ctx.roles.reflection, num_threads=b.num_threads, seed=ctx.seed,
                                    progress=False, log_dir=str(ctx.log_dir) if ctx.log_dir else None)
    settings.update(overrides)
    return TrainingFreeGRPO(**settings)


def tfgrpo_details(optimizer: TrainingFreeGRPO, result: TrainingFreeGRPOResult) -> dict[str, Any]:
    """What a TrainingFreeGRPO compile decided and cost, by its own accounting (cross-checks the meters)."""
    return {
        "budget": optimizer.settings.to_dict(),
        "library_size": len(result.library),
        "library": [e.text for e in result.library],
        "best_step": result.best_step,
        "selection_size": result.selection_size,
        "candidates": [c.to_dict() for c in result.candidates],
        "steps": len(result.steps),
        "informative_groups": sum(s.informative_groups for s in result.steps),
        "stopped_reason": result.stopped_reason,
        "self_reported_usage": {"policy": result.policy_usage.to_dict(),
                                "reflection": result.reflection_usage.to_dict(),
                                "selection": result.selection_usage.to_dict()},
    }


def _compile_tfgrpo_with(ctx: MethodContext, *, student: dspy.Module | None = None,
                         valset: list[dspy.Example] | None = None, **overrides: Any) -> Compiled:
    optimizer = tfgrpo_optimizer(ctx, **overrides)
    program = optimizer.compile(student if student is not None else ctx.split.make_program(),
                                trainset=ctx.split.train, valset=valset)
    return Compiled(program, tfgrpo_details(optimizer, program.tfgrpo_result))


def compile_tfgrpo_paper(ctx: MethodContext) -> Compiled:
    """The paper's recipe: every step's edits are kept and the last library ships; nothing is held out."""
    return _compile_tfgrpo_with(ctx, **PAPER_RECIPE)


def compile_tfgrpo(ctx: MethodContext) -> Compiled:
    """The library's defaults: edits kept only if they win on the selection rows by the gate margin."""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.val, reference_fields=ctx.split.reference_fields)


def compile_tfgrpo_on_bootstrap(ctx: MethodContext) -> Compiled:
    """Lessons on top of demos: the student is this run's BootstrapFewShot program, whose demos stay.

    Its cost is the TrainingFreeGRPO part only; the demos' cost is in the bootstrap row.
    """
    student = ctx.programs.get("bootstrap")
    if student is None:
        raise RuntimeError("tfgrpo_on_bootstrap needs the bootstrap program of the same run, and bootstrap failed")
    compiled = _compile_tfgrpo_with(ctx, student=student, valset=ctx.split.val,
                                    reference_fields=ctx.split.reference_fields)
    compiled.details["student"] = "bootstrap (its demos kept; their cost is in the bootstrap row)"
    compiled.details["demos"] = sum(len(p.demos or []) for _, p in compiled.program.named_predictors())
    return compiled


def compile_group1(ctx: MethodContext) -> Compiled:
    return _compile_tfgrpo_with(ctx, **PAPER_RECIPE, group_size=1, informative_only=False)


def compile_no_gt(ctx: MethodContext) -> Compiled:
    return _compile_tfgrpo_with(ctx, **PAPER_RECIPE, metric=None, ground_truth=False)


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
    program = ctx.split.make_program()
    instructions = next(iter(program.named_predictors()))[1].signature.instructions
    with dspy.context(lm=ctx.roles.reflection):
        tips = dspy.Predict(GenerateTips)(task_instructions=instructions,
                                          example_questions=[e.question for e in ctx.split.train],
                                          num_tips=count).tips
    texts = [" ".join(str(t).split()[:max_words]) for t in tips if str(t).strip()][:count]
    library = ExperienceLibrary.from_texts(texts)
    return Compiled(with_experiences(program, library, top_k=None), {  # every tip, as in the paper's ablation
        "budget": {"tips_requested": count}, "library_size": len(library), "library": texts,
    })


COMPILERS: dict[str, Callable[[MethodContext], Compiled]] = {
    "none": compile_none,
    "bootstrap": compile_bootstrap,
    "mipro": compile_mipro,
    "simba": compile_simba,
    "gepa": compile_gepa,
    "tfgrpo_paper": compile_tfgrpo_paper,
    "tfgrpo": compile_tfgrpo,
    "tfgrpo_on_bootstrap": compile_tfgrpo_on_bootstrap,
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
class ProblemResult:
    """One held-out problem under one method: what the paired statistics and the flip rate are computed from."""

    index: int  # position in the held-out list (the same for every method)
    score: float  # mean over the k samples
    answers: tuple[str | None, ...]  # one per sample
    error: str | None = None  # the first program error among the samples

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "score": self.score, "answers": list(self.answers), "error": self.error}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemResult:
        return cls(data["index"], data["score"], tuple(data["answers"]), data.get("error"))


def problem_results(report: EvalReport) -> tuple[ProblemResult, ...]:
    return tuple(ProblemResult(index=e.index, score=e.mean_score, answers=tuple(s.answer for s in e.samples),
                               error=next((s.error for s in e.samples if s.error), None))
                 for e in report.examples)


@dataclass(frozen=True)
class RepeatEval:
    """A second evaluation of the same program with DSPy's cache off: how much greedy decoding itself moves.

    ``flip_rate`` is the share of problems whose answers differ from the first pass; a method's gain over
    ``none`` means little unless it is well above what this pass changes by chance.
    """

    score: float | None
    flip_rate: float | None
    flips: int | None
    eval_seconds: float
    usage: Usage
    per_problem: tuple[ProblemResult, ...] = ()
    error: str | None = None

    @classmethod
    def of(cls, first: Sequence[ProblemResult], second: Sequence[ProblemResult], seconds: float,
           usage: Usage) -> RepeatEval:
        before, after = [p.answers for p in first], [p.answers for p in second]
        return cls(score=statistics.fmean(p.score for p in second), flip_rate=flip_rate(before, after),
                   flips=sum(a != b for a, b in zip(before, after, strict=True)), eval_seconds=round(seconds, 2),
                   usage=usage, per_problem=tuple(second))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = self.usage.to_dict()
        data["per_problem"] = [p.to_dict() for p in self.per_problem]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepeatEval:
        values = {f.name: data.get(f.name) for f in fields(cls)}
        values["usage"] = Usage.from_dict(data.get("usage"))
        values["per_problem"] = tuple(ProblemResult.from_dict(p) for p in data.get("per_problem") or [])
        return cls(**values)


@dataclass(frozen=True)
class SeedRun:
    """One method, one seed: the record a run directory keeps (after the compile, then after the evaluation)."""

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
    per_problem: tuple[ProblemResult, ...] = ()
    repeat: RepeatEval | None = None
    code: str | None = None  # the commit the compile ran from (a resumed record may predate this run)

    @property
    def evaluated(self) -> bool:
        return bool(self.per_problem)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["usage"] = {role: usage.to_dict() for role, usage in self.usage.items()}
        data["per_problem"] = [p.to_dict() for p in self.per_problem]
        data["repeat"] = self.repeat.to_dict() if self.repeat else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeedRun:
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["usage"] = {role: Usage.from_dict(usage) for role, usage in data.get("usage", {}).items()}
        values["per_problem"] = tuple(ProblemResult.from_dict(p) for p in data.get("per_problem") or [])
        values["repeat"] = RepeatEval.from_dict(data["repeat"]) if data.get("repeat") else None
        return cls(**values)


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

    def problem_scores(self) -> list[float] | None:
        """Each held-out problem's score, averaged over the evaluated seeds: what the paired statistics compare."""
        runs = [r for r in self.ok_runs if r.evaluated]
        if not runs or len({len(r.per_problem) for r in runs}) != 1:
            return None
        return [statistics.fmean(r.per_problem[i].score for r in runs) for i in range(len(runs[0].per_problem))]

    def role_usage(self, role: str) -> Usage:
        """Mean usage of one role per seed (integer division keeps it a Usage)."""
        return _mean_usage([r.usage.get(role, Usage()) for r in self.ok_runs])

    def self_reported_usage(self) -> dict[str, Usage] | None:
        """TrainingFreeGRPO's own accounting per seed (policy = rollouts, reflection, selection), if it ran."""
        reported = [r.details["self_reported_usage"] for r in self.ok_runs if "self_reported_usage" in r.details]
        if not reported:
            return None
        return {role: _mean_usage([Usage.from_dict(entry.get(role)) for entry in reported])
                for role in ("policy", "reflection", "selection")}

    @property
    def optimization_tokens(self) -> int:
        return self.role_usage("task").total_tokens + self.role_usage("reflection").total_tokens

    def to_dict(self) -> dict[str, Any]:
        reported = self.self_reported_usage()
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
            "self_reported_usage_per_seed": ({role: u.to_dict() for role, u in reported.items()}
                                             if reported else None),
            "optimization_tokens": self.optimization_tokens,
            "added_prompt_tokens": self.mean(lambda r: r.added_prompt_tokens),
            "eval_prompt_tokens_per_call": self.mean(lambda r: r.eval_prompt_tokens_per_call),
            "problem_scores": self.problem_scores(),
            "runs": [r.to_dict() for r in self.runs],
        }


def _mean_usage(usages: Sequence[Usage]) -> Usage:
    if not usages:
        return Usage()
    total, n = Usage.total(usages), len(usages)
    return Usage(calls=round(total.calls / n), prompt_tokens=round(total.prompt_tokens / n),
                 completion_tokens=round(total.completion_tokens / n), cost=total.cost / n)


# -- the run directory ------------------------------------------------------------------------------
class RunStore:
    """A comparison's finished work on disk, so that a rerun of the same command skips it.

    Per task, method and seed, under ``<root>/<task>/``: ``<method>-seed<N>.json`` (the `SeedRun` record,
    rewritten atomically after the compile and again after each evaluation), ``<method>-seed<N>.program.json``
    (``program.save``) and, for TrainingFreeGRPO, its own run log ``<method>-seed<N>.log/`` from which an
    interrupted compile resumes. ``manifest.json`` holds what the records depend on (preset budget, LM, data):
    a rerun with other ones is refused, since it would pair methods measured under different conditions.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    def open(self, manifest: dict[str, Any]) -> int:
        """Check (or write) the manifest; returns how many method records are already there."""
        path = self.root / "manifest.json"
        if path.exists():
            saved = read_json(path)
            differing = sorted(key for key in set(saved) | set(manifest) if saved.get(key) != manifest.get(key))
            if differing:
                raise ValueError(f"{self.root} holds runs of a different comparison ({', '.join(differing)} "
                                 "differ); delete it or pass --runs NEW_DIR")
        else:
            write_json_atomic(path, manifest)
        return sum(1 for _ in self.root.glob("*/*-seed*[0-9].json"))

    def _base(self, task: str, method: str, seed: int) -> Path:
        return self.root / task / f"{method}-seed{seed}"

    def log_dir(self, task: str, method: str, seed: int) -> Path:
        return self._base(task, method, seed).with_suffix(".log")

    def eval_dir(self, task: str, method: str, seed: int, name: str) -> Path:
        """Where one held-out evaluation of a method saves its finished problems (``name``: what it scores)."""
        return self._base(task, method, seed).with_suffix(".eval") / name

    def clear_evals(self, task: str, method: str, seed: int) -> None:
        """Forget the saved problems of an earlier compile's evaluations: a new compile is another program."""
        shutil.rmtree(self._base(task, method, seed).with_suffix(".eval"), ignore_errors=True)

    def load_run(self, task: str, method: str, seed: int) -> SeedRun | None:
        """The saved record, or None when there is none or its program file is missing (then it recompiles)."""
        path = self._base(task, method, seed).with_suffix(".json")
        if not path.exists():
            return None
        if not self._base(task, method, seed).with_suffix(".program.json").exists():
            logger.warning("%s has no saved program next to it: %s compiles again", path, method)
            return None
        data = read_json(path)
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"{path} is not a compare.py method record (format {data.get('format')!r})")
        return SeedRun.from_dict(data["run"])

    def save_run(self, task: str, method: str, seed: int, run: SeedRun) -> None:
        record = {"format": RECORD_FORMAT, "version": 1, "task": task, "method": method, "run": run.to_dict()}
        write_json_atomic(self._base(task, method, seed).with_suffix(".json"), record)

    def save_program(self, task: str, method: str, seed: int, program: dspy.Module) -> None:
        """``program.save`` to a temporary name, then a rename: a half-written program is never loaded."""
        path = self._base(task, method, seed).with_suffix(".program.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp.json")
        program.save(str(temporary))
        os.replace(temporary, path)

    def load_program(self, split: Split, method: str, seed: int) -> dspy.Module:
        """The saved program in a fresh copy of the split's program; a saved library is carried again."""
        program = split.make_program()
        program.load(str(self._base(split.task, method, seed).with_suffix(".program.json")))
        return rewrap_library(program)


def rewrap_library(program: dspy.Module) -> dspy.Module:
    """A loaded program whose predictors saved a library shows it again, at its placement and top_k.

    ``program.load`` restores a plain Predict (the library is only in its state), so the lessons would be
    missing from calls with a per-call placement; ``with_experiences`` puts them back exactly as compiled.
    """
    library, placement = library_of(program), placement_of(program)
    if library is None or placement is None:
        return program
    carriers = [name for name, p in program.named_predictors() if hasattr(p, "tfgrpo_experiences")]
    return with_experiences(program, library, carriers or None, placement=placement[0], top_k=placement[1])


def runs_manifest(preset: str, budget: Budget, lm_spec: str, splits: dict[str, Split]) -> dict[str, Any]:
    """What every record of a run directory depends on (seeds and the method list may grow between runs)."""
    # Seeds and methods may grow between runs; the repeat and the gate checks add records, never change one.
    settings = {key: value for key, value in asdict(budget).items()
                if key not in ("seeds", "methods", "repeat_none", "gate_checks")}
    data = {task: {"source": s.source, "sha256": _sha([[e.toDict() for e in part] for part in (s.train, s.val,
                                                                                                 s.test)])}
            for task, s in splits.items()}
    return {"format": RUNS_FORMAT, "version": 1, "preset": preset, "lm": lm_spec, "budget": settings, "data": data}


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


# -- running ----------------------------------------------------------------------------------------
@functools.cache
def _code_at_start() -> str | None:
    """The commit this process runs, read once: records say which code compiled them."""
    return _git_revision()


@contextmanager
def dspy_cache_disabled() -> Iterator[None]:
    """DSPy's cache off (memory and disk) for the block, so every request reaches the model; then restored."""
    previous = dspy.cache
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    try:
        yield
    finally:
        dspy.cache = previous


def evaluate_held_out(program: dspy.Module, split: Split, budget: Budget, lm: dspy.LM, seed: int,
                      progress: bool, checkpoint_dir: Path | None = None) -> EvalReport:
    """The one held-out evaluation every method gets: same problems, metric, decoding, k and threads.

    With ``checkpoint_dir`` each finished problem is saved, and an interrupted evaluation resumes there
    (its eval seconds then count only the resumed part)."""
    return evaluate_at_k(program, split.test, numeric_match, k=budget.k, temperature=budget.eval_temperature,
                         num_threads=budget.num_threads, lm=lm, rollout_id_offset=seed * 10**6, progress=progress,
                         checkpoint_dir=checkpoint_dir)


def compile_stage(method: str, ctx: MethodContext) -> tuple[SeedRun, dspy.Module | None]:
    """Compile one method on the task LM; a failure is recorded on the run, never raised."""
    started = time.perf_counter()
    compiled, error = None, None
    try:
        with dspy.context(lm=ctx.roles.task):
            compiled = COMPILERS[method](ctx)
    except Exception as exc:  # a failing optimizer is a result, not the end of the comparison
        error = f"compile: {type(exc).__name__}: {exc}"
        logger.warning("%s failed:\n%s", method, traceback.format_exc())
    seconds = time.perf_counter() - started
    program = detach_lms(compiled.program) if compiled else None
    added = None
    if program is not None:
        added = approx_tokens(static_prompt_chars(program)) - approx_tokens(
            static_prompt_chars(ctx.split.make_program()))
    usage = {role: ctx.roles.meters[role].usage for role in ("task", "reflection")}
    run = SeedRun(seed=ctx.seed, score=None, pass_at_k=None, score_stderr=None,
                  compile_seconds=round(seconds, 2), eval_seconds=None, usage={**usage, "evaluation": Usage()},
                  engine_failures=sum(m.failures for m in ctx.roles.meters.values()), added_prompt_tokens=added,
                  eval_prompt_tokens_per_call=None, program_errors=None, error=error,
                  details=compiled.details if compiled else {}, code=_code_at_start())
    return run, program


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
    usage = meter.usage
    return replace(
        run, score=report.mean_at_k, pass_at_k=report.pass_at_k, score_stderr=_stderr(report),
        eval_seconds=round(time.perf_counter() - started, 2), usage={**run.usage, "evaluation": usage},
        engine_failures=run.engine_failures + meter.failures, program_errors=report.program_errors,
        eval_prompt_tokens_per_call=round(usage.prompt_tokens / usage.calls, 1) if usage.calls else None,
        per_problem=problem_results(report))


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
    repeat = RepeatEval.of(run.per_problem, problem_results(report), time.perf_counter() - started, meter.usage)
    return replace(run, repeat=repeat)


GATE_CHECKED_METHODS = ("tfgrpo",)  # its student has no library, so `none` is its initial library


def selection_libraries(log_dir: Path) -> dict[str, ExperienceLibrary]:
    """Every library a TrainingFreeGRPO run scored on its selection set, by fingerprint, from its run log."""
    libraries = {}
    for path in sorted((log_dir / "selection").glob("*.json")):
        record = read_json(path)
        if isinstance(record, dict) and "library_file" in record:
            libraries[path.stem] = ExperienceLibrary.from_dict(record["library_file"], origin=str(path))
    return libraries


def gate_check_stage(run: SeedRun, split: Split, budget: Budget, lm: dspy.LM, log_dir: Path,
                     progress: bool, checkpoint_root: Path | None = None) -> Iterator[SeedRun]:
    """Score on the held-out rows the libraries the gate decided on; yields the run after each one (to save it).

    The initial library's held-out scores are ``none``'s and the shipped library's are the method's own, so
    neither is scored again; at most ``budget.gate_checks`` others are. Each checked candidate is recorded
    in ``details["held_out_candidates"]`` by fingerprint: its per-problem scores, or why it was not scored.
    """
    settings = run.details.get("budget") or {}
    libraries = selection_libraries(log_dir)
    checked = dict(run.details.get("held_out_candidates") or {})
    scored = sum("scores" in entry for entry in checked.values())
    for candidate in run.details.get("candidates", []):
        fingerprint = candidate["fingerprint"]
        if candidate["step"] == 0 or fingerprint in checked:
            continue
        library = libraries.get(fingerprint)
        if library is None:
            entry = {"label": candidate["label"], "skipped": "its library is not in the run log"}
        elif library.texts == list(run.details.get("library") or []):
            entry = {"label": candidate["label"], "shipped": True}
        elif scored >= budget.gate_checks:
            entry = {"label": candidate["label"], "skipped": f"gate_checks={budget.gate_checks} reached"}
        else:
            logger.info("[%s] seed %d: held-out check of %r (%d lessons) ...", split.task, run.seed,
                        candidate["label"], len(library))
            program = with_experiences(split.make_program(), library, settings.get("predictors"),
                                       placement=settings.get("placement", "instructions"),
                                       top_k=settings.get("top_k"))
            evaluation, meter = metered_copy(lm, "evaluation")
            started = time.perf_counter()
            report = evaluate_held_out(program, split, budget, evaluation, run.seed, progress,
                                       checkpoint_root / fingerprint if checkpoint_root else None)
            entry = {"label": candidate["label"], "scores": [e.mean_score for e in report.examples],
                     "eval_seconds": round(time.perf_counter() - started, 1), "usage": meter.usage.to_dict()}
            scored += 1
        checked[fingerprint] = entry
        run = replace(run, details={**run.details, "held_out_candidates": checked})
        yield run


def gate_check_rows(run: dict[str, Any], base: Sequence[float] | None) -> list[dict[str, Any]]:
    """Each gated candidate of one tfgrpo run beside its held-out result against the initial library (none).

    A decision "held" when the held-out rows point the same way: an accepted library scores above the
    initial one there, a rejected one does not.
    """
    checked = (run.get("details") or {}).get("held_out_candidates")
    if not checked or base is None:
        return []
    own = [p["score"] for p in run.get("per_problem") or []]
    rows = []
    for candidate in run["details"].get("candidates", []):
        entry = checked.get(candidate["fingerprint"])
        if candidate["step"] == 0 or entry is None:
            continue
        scores = own if entry.get("shipped") else entry.get("scores")
        row = {"label": candidate["label"], "selection_score": candidate["score"], "accepted": candidate["accepted"],
               "net_wins": candidate.get("net_wins"), "size": candidate["size"], "skipped": entry.get("skipped"),
               "held_out": None, "vs_initial": None, "held": None}
        if scores and len(scores) == len(base):
            comparison = compare_paired(base, scores)
            row.update(held_out=statistics.fmean(scores), vs_initial=comparison.to_dict(),
                       held=(comparison.delta > 0) == candidate["accepted"])
        rows.append(row)
    return rows


def _wants_repeat(method: str, budget: Budget, run: SeedRun) -> bool:
    return (method == "none" and budget.repeat_none and run.seed == 0 and run.evaluated
            and (run.repeat is None or run.repeat.error is not None))


def run_method(method: str, split: Split, lm: dspy.LM, budget: Budget, seed: int, *,
               store: RunStore | None = None, programs: dict[str, dspy.Module] | None = None,
               learned_library_size: int | None = None,
               progress: bool = True) -> tuple[SeedRun, dspy.Module | None]:
    """Compile, evaluate and (for ``none``, if the preset asks) re-evaluate one method.

    With a ``store``, each finished stage is saved and a rerun skips it: a saved compile is loaded instead
    of recompiled, a saved evaluation is not run again. Failures are recorded on the run, never raised,
    and never saved (a rerun tries again). Returns the run and its compiled program (None if it failed).
    """
    if method not in COMPILERS:
        raise ValueError(f"method must be one of {sorted(COMPILERS)}, got {method!r}")
    # A fresh memory-only cache per method: a method may reuse its own calls, never another method's or an
    # earlier run's (this replaces DSPy's global cache for the rest of the process).
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    run = store.load_run(split.task, method, seed) if store else None
    if run is not None and store is not None:
        program = store.load_program(split, method, seed)
        logger.info("[%s] seed %d: %s compile loaded from %s", split.task, seed, method, store.root)
    else:
        log_dir = store.log_dir(split.task, method, seed) if store else None
        ctx = MethodContext(split, Roles.of(lm), budget, seed, learned_library_size, dict(programs or {}), log_dir)
        run, program = compile_stage(method, ctx)
        if program is None:
            return run, None
        if store:
            store.clear_evals(split.task, method, seed)
            store.save_program(split.task, method, seed, program)
            store.save_run(split.task, method, seed, run)
    def eval_dir(name: str) -> Path | None:
        return store.eval_dir(split.task, method, seed, name) if store else None

    if not run.evaluated:
        run = evaluate_stage(run, program, split, budget, lm, progress, eval_dir("held_out"))
        if run.error is not None:
            return run, program
        if store:
            store.save_run(split.task, method, seed, run)
    if _wants_repeat(method, budget, run):
        run = repeat_stage(run, program, split, budget, lm, progress, eval_dir("repeat"))
        if store:
            store.save_run(split.task, method, seed, run)
    if method in GATE_CHECKED_METHODS and budget.gate_checks and store is not None:
        try:
            log_dir = store.log_dir(split.task, method, seed)
            for checked in gate_check_stage(run, split, budget, lm, log_dir, progress, eval_dir("gate_checks")):
                store.save_run(split.task, method, seed, checked)
                run = checked
        except Exception:  # the method's own result stands; a rerun tries the check again
            logger.warning("held-out check of the gate failed:\n%s", traceback.format_exc())
    return run, program


def ordered_methods(methods: Sequence[str]) -> list[str]:
    """``methods`` without repeats, each after the one it reads from (`READS_FROM`).

    tfgrpo_on_bootstrap cannot run without bootstrap, so bootstrap is added when missing; direct_tips
    without tfgrpo_paper falls back to the preset's tip count.
    """
    methods = list(dict.fromkeys(methods))
    unknown = [m for m in methods if m not in COMPILERS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(COMPILERS)}")
    if "tfgrpo_on_bootstrap" in methods and "bootstrap" not in methods:
        logger.info("tfgrpo_on_bootstrap needs bootstrap's program: running bootstrap too")
        methods.insert(methods.index("tfgrpo_on_bootstrap"), "bootstrap")
    for method, source in READS_FROM.items():
        if method in methods and source in methods and methods.index(method) < methods.index(source):
            methods.remove(method)
            methods.insert(methods.index(source) + 1, method)
    return methods


def run_comparison(split: Split, lm: dspy.LM, budget: Budget, methods: Sequence[str], *,
                   store: RunStore | None = None, progress: bool = True,
                   on_result: Callable[[list[MethodResult]], None] | None = None) -> list[MethodResult]:
    """Run ``methods`` (see `ordered_methods`) over all seeds, skipping what ``store`` already holds.

    ``on_result`` receives the results so far after every method run (to save partial results).
    """
    methods = ordered_methods(methods)
    results: dict[str, list[SeedRun]] = {m: [] for m in methods}
    for seed in range(budget.seeds):
        programs: dict[str, dspy.Module] = {}
        library_size = None
        for method in methods:
            logger.info("[%s] seed %d: %s ...", split.task, seed, method)
            run, program = run_method(method, split, lm, budget, seed, store=store, programs=programs,
                                      learned_library_size=library_size, progress=progress)
            if program is not None:
                programs[method] = program
            if method == "tfgrpo_paper" and run.error is None:
                library_size = run.details.get("library_size") or None
            results[method].append(run)
            _log_run(split.task, method, run, budget.k)
            if on_result is not None:
                on_result(_collect(results))
    return _collect(results)


def _log_run(task: str, method: str, run: SeedRun, k: int) -> None:
    outcome = f"Mean@{k} {run.score:.3f}" if run.score is not None else f"FAILED {run.error}"
    if run.repeat is not None and run.repeat.flip_rate is not None:
        outcome += f", flip rate {run.repeat.flip_rate:.3f} on a second pass"
    logger.info("[%s] seed %d: %s -> %s (compile %.0f s, eval %s s, task %d calls, reflection %d calls)", task,
                run.seed, method, outcome, run.compile_seconds, run.eval_seconds, run.usage["task"].calls,
                run.usage["reflection"].calls)


def _stderr(report: EvalReport) -> float | None:
    scores = [e.mean_score for e in report.examples]
    return statistics.stdev(scores) / math.sqrt(len(scores)) if len(scores) > 1 else None


def _collect(results: dict[str, list[SeedRun]]) -> list[MethodResult]:
    return [MethodResult(m, "ablation" if m in ABLATIONS else "method", tuple(runs))
            for m, runs in results.items() if runs]


# -- statistics -------------------------------------------------------------------------------------
def paired_vs(base: Sequence[float] | None, result: MethodResult) -> dict[str, Any] | None:
    """``result`` against ``none`` on the same held-out problems, or None when they cannot be paired."""
    scores = result.problem_scores()
    if base is None or scores is None or len(scores) != len(base):
        return None
    comparison = compare_paired(base, scores)
    return {**comparison.to_dict(), "verdict": comparison.verdict()}


def result_rows(results: Sequence[MethodResult]) -> list[dict[str, Any]]:
    """Each method's report entry, with its paired gain over ``none`` (``vs_none``)."""
    none = next((r for r in results if r.method == "none"), None)
    base = none.problem_scores() if none else None
    rows = []
    for result in results:
        row = result.to_dict()
        row["vs_none"] = None if result.method == "none" else paired_vs(base, result)
        if result.method in GATE_CHECKED_METHODS and none is not None:
            none_runs = {r.seed: [p.score for p in r.per_problem] for r in none.ok_runs if r.evaluated}
            for run in row["runs"]:
                run["gate_check"] = gate_check_rows(run, none_runs.get(run["seed"]))
        rows.append(row)
    return rows


def repeatability(results: Sequence[MethodResult]) -> dict[str, Any] | None:
    """The repeated evaluation of ``none``: its flip rate and the accuracy of both passes, or None."""
    none = next((r for r in results if r.method == "none"), None)
    run = next((r for r in none.ok_runs if r.repeat is not None), None) if none else None
    if run is None:
        return None
    repeat = run.repeat
    summary: dict[str, Any] = {"seed": run.seed, "problems": len(run.per_problem), "flip_rate": repeat.flip_rate,
                               "flips": repeat.flips, "first_score": run.score, "second_score": repeat.score,
                               "eval_seconds": repeat.eval_seconds, "usage": repeat.usage.to_dict(),
                               "error": repeat.error, "second_vs_first": None}
    if repeat.per_problem and len(repeat.per_problem) == len(run.per_problem):
        summary["second_vs_first"] = compare_paired([p.score for p in run.per_problem],
                                                    [p.score for p in repeat.per_problem]).to_dict()
    return summary


def flip_line(summary: dict[str, Any] | None) -> str:
    """The repeatability sentence of the markdown and the printed output."""
    if summary is None:
        return "Repeatability: not measured (`none` has no second evaluation yet)."
    if summary["flip_rate"] is None:
        return f"Repeatability: the second evaluation of `none` failed ({summary['error']})."
    return (f"Repeatability: `none` evaluated twice, the second time with DSPy's cache off: flip rate "
            f"{100 * summary['flip_rate']:.1f}% ({summary['flips']} of {summary['problems']} answers changed); "
            f"accuracy {summary['first_score']:.3f} then {summary['second_score']:.3f}.")


# -- writing ----------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta_cell(vs: dict[str, Any] | None) -> str:
    if vs is None:
        return "-"
    cell = f"{100 * vs['delta']:+.1f} [{100 * vs['ci_low']:+.1f}, {100 * vs['ci_high']:+.1f}]"
    return cell if vs["significant"] else f"{cell} no measurable change"


def _tokens_cell(row: dict[str, Any]) -> str:
    usage = row["usage_per_seed"]
    cell = f"task {usage['task']['total_tokens']:,} / reflection {usage['reflection']['total_tokens']:,}"
    reported = row.get("self_reported_usage_per_seed")
    if reported:  # the task role is TrainingFreeGRPO's rollouts plus its selection-set scoring
        cell += (f" (rollouts {reported['policy']['total_tokens']:,}, "
                 f"selection {reported['selection']['total_tokens']:,})")
    return cell


def _accuracy_cell(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"FAILED: {(row['error'] or '')[:120]}"
    cell = _fmt(row["score_mean_at_k"])
    return cell if row["score_seed_std"] is None else f"{cell} ± {row['score_seed_std']:.3f}"


def render_table(rows: Sequence[dict[str, Any]], k: int) -> str:
    """One row per method: accuracy, paired gain over none, cost by role, time, prompt tokens added per call."""
    score = "held-out accuracy" if k == 1 else f"held-out Mean@{k}"
    lines = [f"| method | {score} | Δ vs none, points [95% CI] | won/lost | p | optimization tokens by role "
             "| compile s | eval s | added prompt tokens/call |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        vs = row.get("vs_none")
        name = row["method"] + (" (ablation)" if row["kind"] == "ablation" else "")
        added = row["added_prompt_tokens"]
        cells = [name, _accuracy_cell(row), _delta_cell(vs), f"{vs['wins']} / {vs['losses']}" if vs else "-",
                 _fmt(vs["p_value"]) if vs else "-", _tokens_cell(row), _fmt(row["compile_seconds"], 0),
                 _fmt(row["eval_seconds"], 0), "-" if added is None else f"{added:+.0f}"]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines)


def markdown_table(results: Sequence[MethodResult], k: int) -> str:
    return render_table(result_rows(results), k)


def library_sections(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For each TrainingFreeGRPO run: the libraries scored on the selection set and the shipped lessons."""
    lines: list[str] = []
    for row in rows:
        for run in row["runs"]:
            details = run.get("details") or {}
            if run.get("error") or "library" not in details:
                continue
            seed = f", seed {run['seed']}" if len(row["runs"]) > 1 else ""
            candidates = [c for c in details.get("candidates", []) if c.get("score") is not None]
            if candidates:
                lines += [f"### {row['method']}{seed}: libraries scored on the selection set "
                          f"({details.get('selection_size')} problems)", "",
                          "| label | selection score | accepted | size | reason |", "|---|---|---|---|---|"]
                lines += [f"| {c['label']} | {_fmt(c['score'])} | {'yes' if c['accepted'] else 'no'} | {c['size']} "
                          f"| {(c.get('reason') or '').replace('|', '/')} |" for c in candidates]
                lines.append("")
            shipped = (f"best step {details['best_step']}, " if details.get("best_step") is not None else "")
            count = len(details["library"])
            lines += [f"{row['method']}{seed} shipped library ({shipped}{count} lesson{'' if count == 1 else 's'}):",
                      ""]
            lines += [f"{i}. {text}" for i, text in enumerate(details["library"], 1)] or ["(empty)"]
            lines.append("")
    return lines


def gate_check_sections(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For each gated run checked on the held-out rows: each decision beside what those rows say."""
    lines: list[str] = []
    for row in rows:
        for run in row["runs"]:
            checks = run.get("gate_check") or []
            if not checks:
                continue
            seed = f", seed {run['seed']}" if len(row["runs"]) > 1 else ""
            lines += [f"### {row['method']}{seed}: the gate's decisions checked on the held-out rows", "",
                      "Each library the gate decided on, scored on the held-out rows against the initial library "
                      "(`none`). A decision held when those rows point the same way: an accepted library above "
                      "the initial one, a rejected one not above it.", "",
                      "| candidate | selection score (net wins) | gate | held-out accuracy | Δ vs initial [95% CI] "
                      "| decision held |", "|---|---|---|---|---|---|"]
            for check in checks:
                net = "" if check["net_wins"] is None else f" ({check['net_wins']:+d})"
                held = ("-" if check["held"] is None else "yes" if check["held"] else "no")
                held_out = (f"not scored: {check['skipped']}" if check["skipped"] else _fmt(check["held_out"]))
                lines.append(f"| {check['label']} | {_fmt(check['selection_score'])}{net} | "
                             f"{'accepted' if check['accepted'] else 'rejected'} | {held_out} | "
                             f"{_delta_cell(check['vs_initial'])} | {held} |")
            decided = [c for c in checks if c["held"] is not None]
            lines += ["", f"The decision held for {sum(c['held'] for c in decided)} of {len(decided)} "
                      "candidate(s) scored on the held-out rows.", ""]
    return lines


def write_json(report: dict[str, Any], path: Path) -> Path:
    write_json_atomic(path, report)
    return path


def _header_lines(report: dict[str, Any]) -> list[str]:
    budget = report["budget"]
    decoding = ("greedy (temperature 0, k = 1)" if budget["eval_temperature"] == 0 and budget["k"] == 1 else
                f"Mean@{budget['k']} at temperature {budget['eval_temperature']}")
    lines = [
        f"# Optimizer comparison: preset `{report['preset']}`",
        "",
        f"Command: `{report['command']}` (code at `{report.get('code') or 'unknown'}`)",
        "",
        *([] if report.get("complete", True) else ["**Partial results: the run was still going or was interrupted.**",
                                                    ""]),
        f"LM `{report['lm']}` with options `{json.dumps(report.get('lm_options') or {})}`; "
        f"{budget['num_threads']} threads; held-out evaluation {decoding}, the same for every method; "
        f"{budget['seeds']} seed(s); started {report['started']}, total wall time {report['wall_seconds']:.0f} s; "
        f"load average at start {report['load_average'][0]}, at end {report['load_average'][1]}.",
        "",
    ]
    if report.get("runs_dir"):
        lines += [f"Run directory `{report['runs_dir']}`: rerunning the command skips every finished compile and "
                  "evaluation.", ""]
    return lines + [
        "Δ vs none is the method's held-out accuracy minus the unoptimized program's, on the same problems, in "
        "percentage points, with a paired bootstrap 95% interval; won/lost counts the problems the method gets "
        "right and none wrong, and the reverse; p is the exact two-sided sign test on them (exact McNemar). "
        "\"no measurable change\" marks an interval that includes zero.",
        "",
        "Token columns count every request that reached the model during optimization, by role, per seed "
        "(held-out evaluation is metered apart). For TrainingFreeGRPO the task role is its rollouts plus its "
        "selection-set scoring, by its own accounting. 'Added prompt tokens' is the rendered prompt of the "
        f"optimized program minus the base program's, at {CHARS_PER_TOKEN} characters a token.",
        "",
    ]


def _older_code_lines(report: dict[str, Any]) -> list[str]:
    """Records resumed from a run at another commit: say so, since their code may differ."""
    older = sorted({f"{row['method']} (`{run['code']}`)" for data in report["tasks"].values()
                    for row in data["results"] for run in row["runs"]
                    if run.get("code") and run["code"] != report.get("code")})
    return [f"Compiled by an earlier run at another commit: {', '.join(older)}.", ""] if older else []


def write_markdown(report: dict[str, Any], path: Path) -> Path:
    budget = report["budget"]
    lines = _header_lines(report) + _older_code_lines(report)
    for task, data in report["tasks"].items():
        split = data["split"]
        lines += [f"## {task}", "",
                  f"train {split['train']} / selection {split['val']} / held-out {split['test']} examples "
                  f"({split['source']}), disjoint, the same for every method.", ""]
        if budget.get("repeat_none"):
            lines += [flip_line(data.get("repeatability")), ""]
        lines += [render_table(data["results"], budget["k"]), "", *library_sections(data["results"]),
                  *gate_check_sections(data["results"])]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _plot_gains(axis: Any, task: str, data: dict[str, Any]) -> None:
    """Each method's paired gain over none with its 95% interval: horizontal bars around a zero line."""
    rows = [r for r in data["results"] if r.get("vs_none")]
    for y, row in enumerate(rows):
        vs = row["vs_none"]
        delta, low, high = 100 * vs["delta"], 100 * vs["ci_low"], 100 * vs["ci_high"]
        axis.errorbar(delta, y, xerr=[[delta - low], [high - delta]], fmt="s" if row["kind"] == "ablation" else "o",
                      capsize=4, color="tab:blue" if vs["significant"] else "tab:gray")
    axis.axvline(0, color="black", linewidth=1)
    axis.set_yticks(range(len(rows)), [r["method"] for r in rows])
    axis.set_ylim(-0.7, max(len(rows), 1) - 0.3)
    axis.invert_yaxis()
    axis.set_xlabel("held-out accuracy gain over none (points), paired bootstrap 95% CI")
    axis.set_title(f"{task}: gain over none on the same {data['split']['test']} problems", fontsize=9)
    if not rows:
        axis.text(0.5, 0.5, "no paired results", transform=axis.transAxes, ha="center")
    axis.grid(True, axis="x", alpha=0.3)


def _plot_score_vs_tokens(axis: Any, task: str, data: dict[str, Any], k: int) -> None:
    """Held-out score against optimization tokens; bars: seed spread, or with one seed the SE over examples."""
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
        axis.annotate(result["method"], (tokens, score), textcoords="offset points", xytext=(5, 4 + 10 * near),
                      fontsize=8)
    axis.set_xscale("symlog", linthresh=1000)
    axis.set_xlabel("optimization tokens (task + optimizer LM)")
    axis.set_ylabel(f"held-out Mean@{k}")
    axis.set_title(f"{task}: bars = seed std, or SE over {data['split']['test']} examples with one seed",
                   fontsize=9)
    axis.grid(True, alpha=0.3)


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Per task, drawn from the saved report alone: paired gains over none (left), score vs tokens (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, tasks = report["budget"]["k"], report["tasks"]
    fig, axes = plt.subplots(max(len(tasks), 1), 2, figsize=(13, 4.8 * max(len(tasks), 1)), squeeze=False)
    for (gains, costs), (task, data) in zip(axes, tasks.items(), strict=False):
        _plot_gains(gains, task, data)
        _plot_score_vs_tokens(costs, task, data, k)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def held_out_rows(split: Split) -> list[dict[str, Any]]:
    """The held-out problems once per task; per-method results refer to them by index."""
    return [{"index": i, "id": e.get("index"), "question": e.question, "answer": e.answer}
            for i, e in enumerate(split.test)]


def build_report(*, preset: str, budget: Budget, lm_name: str, command: str, code: str | None, started: str,
                 wall_seconds: float, load_average: tuple[Any, Any], splits: dict[str, Split],
                 per_task: dict[str, Sequence[MethodResult]], runs_dir: Path | None = None) -> dict[str, Any]:
    return {
        "format": "tfgrpo-compare",
        "version": 2,
        "preset": preset,
        "command": command,
        "lm": lm_name,
        "lm_options": budget.lm_options,
        "budget": asdict(budget),
        "started": started,
        "wall_seconds": round(wall_seconds, 1),
        "load_average": list(load_average),
        "code": code,
        "runs_dir": str(runs_dir) if runs_dir else None,
        "environment": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                        "dspy": _version("dspy"), "gepa": _version("gepa"), "optuna": _version("optuna")},
        "tasks": {
            task: {
                "split": {"train": len(s.train), "val": len(s.val), "test": len(s.test), "source": s.source},
                "held_out": held_out_rows(s),
                "repeatability": repeatability(per_task[task]),
                "results": result_rows(per_task[task]),
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


def write_outputs(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    return [
        write_json(report, out_dir / f"{stem}.json"),
        write_markdown(report, out_dir / f"{stem}.md"),
        write_plot(report, out_dir / f"{stem}.png"),
    ]


# -- command line -----------------------------------------------------------------------------------
def parse_lm_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with the value as a bool, an int or a float when it reads as one (``n_parallel=4``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--lm-option wants KEY=VALUE, got {text!r}")
    if value.strip().lower() in ("true", "false"):
        return key.strip(), value.strip().lower() == "true"
    for kind in (int, float):
        try:
            return key.strip(), kind(value)
        except ValueError:
            pass
    return key.strip(), value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--lm", default="local", help="'local', 'local:0.5b' (engine-backed LMs only)")
    parser.add_argument("--lm-option", action="append", type=parse_lm_option, default=[], metavar="KEY=VALUE",
                        help="override one of the preset's LM options (e.g. n_parallel=2); repeatable")
    parser.add_argument("--methods", nargs="+", choices=list(COMPILERS),
                        help="the methods to run (default: the preset's)")
    ablations = parser.add_mutually_exclusive_group()
    ablations.add_argument("--ablations", dest="ablations", action="store_true", default=None,
                           help="also run direct_tips, group1 and no_gt")
    ablations.add_argument("--no-ablations", dest="ablations", action="store_false")
    parser.add_argument("--source", default=GSM8K_HUB_ID,
                        help="the gsm8k preset's data: a hub id, a hub-layout folder or a .jsonl file")
    parser.add_argument("--no-wordproblems", dest="wordproblems", action="store_false",
                        help="skip the generated word problems (presets other than gsm8k)")
    parser.add_argument("--gsm8k", metavar="PATH",
                        help="also compare on GSM8K problems from this file (presets other than gsm8k)")
    parser.add_argument("--no-repeat", action="store_true",
                        help="skip the preset's second evaluation of `none` (the flip rate)")
    parser.add_argument("--gate-checks", type=int, metavar="N",
                        help="score on the held-out rows at most N libraries the gated tfgrpo run decided on "
                             "(default: the preset's; 0 = none)")
    parser.add_argument("--seeds", type=int, help="override the preset's number of seeds")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the data split (same for every method)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--stem", help="output file stem (default compare_<preset>)")
    parser.add_argument("--runs", type=Path, metavar="DIR",
                        help="where finished compiles and evaluations are kept (default <out-dir>/<stem>.runs)")
    parser.add_argument("--replot", type=Path, metavar="JSON",
                        help="redraw the PNG of a saved comparison (next to the JSON) and exit; runs nothing")
    args = parser.parse_args(argv)
    if args.replot:
        return args
    if PRESETS[args.preset].task == "gsm8k":
        if args.gsm8k or not args.wordproblems:
            parser.error("the gsm8k preset reads --source; --gsm8k and --no-wordproblems are for the other presets")
    elif not args.wordproblems and not args.gsm8k:
        parser.error("nothing to run: --no-wordproblems needs --gsm8k PATH")
    if args.gsm8k and not Path(args.gsm8k).exists():
        parser.error(f"--gsm8k {args.gsm8k}: no such file")
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if args.gate_checks is not None and args.gate_checks < 0:
        parser.error("--gate-checks must be >= 0")
    return args


def preset_budget(args: argparse.Namespace) -> Budget:
    """The preset with the command line's overrides: seeds, and LM options over the preset's.

    The preset's ``lm_options`` are the embedded model's server options, so they apply to ``--lm local...``
    only; ``--lm-option`` always applies.
    """
    budget = PRESETS[args.preset]
    options = dict(budget.lm_options) if args.lm.startswith("local") else {}
    options.update(dict(args.lm_option))
    budget = replace(budget, lm_options=options)
    if getattr(args, "no_repeat", False):
        budget = replace(budget, repeat_none=False)
    if getattr(args, "gate_checks", None) is not None:
        budget = replace(budget, gate_checks=args.gate_checks)
    return replace(budget, seeds=args.seeds) if args.seeds is not None else budget


def chosen_methods(args: argparse.Namespace, budget: Budget) -> list[str]:
    methods = list(args.methods or budget.methods)
    if args.ablations is True:
        methods += [m for m in ABLATIONS if m not in methods]
    elif args.ablations is False:
        methods = [m for m in methods if m not in ABLATIONS]
    return ordered_methods(methods)


def build_splits(args: argparse.Namespace, budget: Budget) -> dict[str, Split]:
    if budget.task == "gsm8k":
        return {"gsm8k": gsm8k_split(args.source, budget, args.data_seed)}
    splits: dict[str, Split] = {}
    if args.wordproblems:
        splits["wordproblems"] = wordproblems_split(budget, args.data_seed)
    if args.gsm8k:
        splits["gsm8k"] = gsm8k_split(args.gsm8k, budget, args.data_seed)
    return splits


def build_lm(spec: str, options: dict[str, Any]) -> dspy.LM:
    """The LM every role copies (a separate function so tests can hand in a scripted one)."""
    from tfgrpo_dspy.lm import make_lm

    return make_lm(spec, **options)


@dataclass
class Session:
    """One invocation's fixed facts, so the report can be rewritten after every method."""

    args: argparse.Namespace
    budget: Budget
    splits: dict[str, Split]
    store: RunStore
    command: str
    code: str | None
    started: str  # wall-clock start, for the reader
    clock: float  # perf_counter at the start, for the wall time
    load_start: float  # 1-minute load average at the start: the machine's other work, for the reader

    @property
    def stem(self) -> str:
        return self.args.stem or f"compare_{self.args.preset}"

    def save(self, per_task: dict[str, list[MethodResult]], complete: bool) -> list[Path]:
        report = build_report(preset=self.args.preset, budget=self.budget, lm_name=self.args.lm,
                              command=self.command, code=self.code, started=self.started,
                              wall_seconds=time.perf_counter() - self.clock,
                              load_average=(self.load_start, round(os.getloadavg()[0], 2)),
                              splits={t: self.splits[t] for t in per_task}, per_task=per_task,
                              runs_dir=self.store.root)
        report["complete"] = complete
        return write_outputs(report, self.args.out_dir, self.stem)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replot:
        print(f"wrote {write_plot(json.loads(args.replot.read_text()), args.replot.with_suffix('.png'))}")
        return 0
    started, clock, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter(), os.getloadavg()[0]
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(logging.INFO)
    budget = preset_budget(args)
    methods = chosen_methods(args, budget)
    splits = build_splits(args, budget)
    stem = args.stem or f"compare_{args.preset}"
    store = RunStore(args.runs or args.out_dir / f"{stem}.runs")
    finished = store.open(runs_manifest(args.preset, budget, args.lm, splits))
    if finished:
        logger.info("resuming: %d method record(s) in %s are reused", finished, store.root)
    command = shlex.join(["python", *(sys.argv if argv is None else ["benchmarks/compare.py", *argv])])
    # The commit at the start: later edits to the tree do not change what this run measured.
    session = Session(args, budget, splits, store, command, _git_revision(), started, clock, round(load_start, 2))
    lm = build_lm(args.lm, budget.lm_options)
    dspy.configure(lm=lm)
    per_task: dict[str, list[MethodResult]] = {}
    for task, split in splits.items():
        logger.info("%s: %d train / %d selection / %d held-out; methods %s", task, len(split.train),
                    len(split.val), len(split.test), methods)

        def partial(results: list[MethodResult], task: str = task) -> None:
            per_task[task] = results
            session.save(per_task, complete=False)  # an interrupted run keeps every method finished so far

        per_task[task] = run_comparison(split, lm, budget, methods, store=store, on_result=partial)
    paths = session.save(per_task, complete=True)
    for task, results in per_task.items():
        print(f"\n## {task}\n")
        if budget.repeat_none:
            print(flip_line(repeatability(results)) + "\n")
        print(markdown_table(results, budget.k))
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
