"""The methods: one small compile function per optimizer, each returning its program and what it decided.

Every method compiles the split's fresh program on the task LM (the optimizer's own calls on the
reflection LM), with the preset's budget; `COMPILERS` maps the method names to them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dspy

from comparison.compile_details import CompileDetails, TfgrpoRun
from comparison.data import ScoreOnly, Split
from comparison.metering import Roles
from comparison.presets import ABLATIONS, METHODS, PAPER_RECIPE, READS_FROM, Budget
from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, with_experiences
from tfgrpo_dspy.inference.injection import LuceneBM25, retrieval_words

logger = logging.getLogger("compare")


@dataclass(frozen=True)
class MethodContext:
    """What a method needs to compile: data, LMs, budget, seed, and results of methods run before it."""

    split: Split
    roles: Roles
    budget: Budget
    seed: int
    learned_library_size: int | None = None
    programs: Mapping[str, dspy.Module] = field(default_factory=dict)  # this seed's compiled programs, by method
    log_dir: Path | None = None  # TrainingFreeGRPO's run log: an interrupted compile resumes from it


@dataclass(frozen=True)
class Compiled:
    program: dspy.Module
    details: CompileDetails


def demo_count(program: dspy.Module) -> int:
    return sum(len(p.demos or []) for _, p in program.named_predictors())


def compile_none(ctx: MethodContext) -> Compiled:
    return Compiled(ctx.split.make_program(), CompileDetails("no optimization"))


def compile_labeled(ctx: MethodContext) -> Compiled:
    """LabeledFewShot: k training examples as demos, with DSPy's default k (16; at most the trainset)."""
    program = dspy.LabeledFewShot(k=ctx.budget.labeled_k).compile(ctx.split.make_program(), trainset=ctx.split.train)
    return Compiled(program, CompileDetails({"k": ctx.budget.labeled_k}, demos=demo_count(program)))


def compile_bootstrap(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.BootstrapFewShot(metric=ScoreOnly(ctx.split.metric),
                                      max_bootstrapped_demos=b.max_bootstrapped_demos,
                                      max_labeled_demos=b.max_labeled_demos, max_rounds=1)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train)
    return Compiled(program, CompileDetails({"max_bootstrapped_demos": b.max_bootstrapped_demos,
                                             "max_labeled_demos": b.max_labeled_demos, "max_rounds": 1},
                                            demos=demo_count(program)))


def compile_mipro(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.MIPROv2(metric=ScoreOnly(ctx.split.metric), prompt_model=ctx.roles.reflection,
                             task_model=ctx.roles.task, auto="light", max_bootstrapped_demos=b.max_bootstrapped_demos,
                             max_labeled_demos=b.max_labeled_demos, num_threads=b.num_threads, seed=ctx.seed,
                             verbose=False)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train, valset=ctx.split.selection)
    return Compiled(program, CompileDetails({"auto": "light", "max_bootstrapped_demos": b.max_bootstrapped_demos,
                                             "max_labeled_demos": b.max_labeled_demos}))


def compile_simba(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.SIMBA(metric=ctx.split.metric, bsize=b.simba_bsize, num_candidates=b.simba_candidates,
                           max_steps=b.simba_steps, max_demos=b.max_bootstrapped_demos,
                           prompt_model=ctx.roles.reflection, num_threads=b.num_threads)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train, seed=ctx.seed)
    return Compiled(program, CompileDetails({"bsize": b.simba_bsize, "num_candidates": b.simba_candidates,
                                             "max_steps": b.simba_steps, "max_demos": b.max_bootstrapped_demos}))


def compile_gepa(ctx: MethodContext) -> Compiled:
    b = ctx.budget
    optimizer = dspy.GEPA(metric=ctx.split.metric, max_metric_calls=b.gepa_max_metric_calls,
                          reflection_minibatch_size=b.gepa_minibatch, reflection_lm=ctx.roles.reflection,
                          num_threads=b.num_threads, seed=ctx.seed)
    program = optimizer.compile(ctx.split.make_program(), trainset=ctx.split.train, valset=ctx.split.selection)
    return Compiled(program, CompileDetails({"max_metric_calls": b.gepa_max_metric_calls,
                                             "reflection_minibatch_size": b.gepa_minibatch}))


def tfgrpo_optimizer(ctx: MethodContext, **overrides: Any) -> TrainingFreeGRPO:
    """The method's TrainingFreeGRPO on the preset's rollout budget; the variants change only ``overrides``.

    Every variant reads the same labels (the split's ``reference_fields``) and starts from the task kit's own
    settings (``tfgrpo_settings``), so comparing two of them isolates what their overrides change.
    """
    b = ctx.budget
    settings: dict[str, Any] = dict(metric=ctx.split.metric, group_size=b.group_size, epochs=b.epochs,
                                    batch_size=b.batch_size, temperature=b.rollout_temperature,
                                    summarize=b.tfgrpo_summarize, reference_fields=ctx.split.reference_fields,
                                    reflection_lm=ctx.roles.reflection, num_threads=b.num_threads, seed=ctx.seed,
                                    progress=False, log_dir=str(ctx.log_dir) if ctx.log_dir else None)
    settings.update(ctx.split.tfgrpo_settings)
    settings.update(overrides)
    settings.update(b.tfgrpo_options)
    return TrainingFreeGRPO(**settings)


def _compile_tfgrpo_with(ctx: MethodContext, *, student: dspy.Module | None = None,
                         valset: list[dspy.Example] | None = None, **overrides: Any) -> Compiled:
    optimizer = tfgrpo_optimizer(ctx, **overrides)
    program = optimizer.compile(student if student is not None else ctx.split.make_program(),
                                trainset=ctx.split.train, valset=valset)
    result = program.tfgrpo_result
    return Compiled(program, CompileDetails(optimizer.settings.to_dict(), library=tuple(e.text for e in result.library),
                                            tfgrpo=TfgrpoRun.of(result)))


def compile_tfgrpo_paper(ctx: MethodContext) -> Compiled:
    """The paper's recipe: every step's edits are kept and the last library ships; nothing is held out."""
    return _compile_tfgrpo_with(ctx, **PAPER_RECIPE)


def compile_tfgrpo(ctx: MethodContext) -> Compiled:
    """The library's defaults: edits kept only if they win on the selection rows by the gate margin."""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.selection)


def compile_tfgrpo_by_answer(ctx: MethodContext) -> Compiled:
    """TrainingFreeGRPO gated as ``tfgrpo``, each lesson routed to the training inputs that have its target answer
    (``route_by="answer"``): a call is shown the lessons of its nearest training input's answer. Without the
    shift check: routed so, a lesson is shown where the nearest training input has its target, and one the policy
    follows to the letter is right exactly where its shift is (the gate still compares the library with the
    selection set's best constant answer)."""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.selection, route_by="answer", verify_shift=False)


def compile_tfgrpo_by_answer_stated(ctx: MethodContext) -> Compiled:
    """``tfgrpo_by_answer``, and an induced rule's action is the answer its failures share, written in code
    (``induction_action="reference"``), worded "answer with <field: value>": the 1.5B model's own actions seldom
    named it. (The tickets kit's defaults until 2026-12-07, when they changed to ``tfgrpo_route_to``'s wording.)"""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.selection, route_by="answer", verify_shift=False,
                                induction_action="reference", reference_action="answer with {reference}")


def compile_tfgrpo_phrases(ctx: MethodContext) -> Compiled:
    """``tfgrpo`` (the kit's defaults) with a contrast phrase proposed for each set of failures that share their
    answer (``induction_phrases=True``, `tfgrpo_dspy.reflection.phrases`) beside the model's own candidates."""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.selection, induction_phrases=True)


def compile_tfgrpo_route_to(ctx: MethodContext) -> Compiled:
    """``tfgrpo`` with a code-written action in the house rules' wording, "route it to X" (``reference_action``), not
    "answer with queue: X": a routing task's wording. The tickets kit's default since 2026-12-07."""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.selection, reference_action="route it to {answer}")


def compile_tfgrpo_phrases_only(ctx: MethodContext) -> Compiled:
    """``tfgrpo`` (the kit's defaults) with contrast phrases as the only candidates: one per set of failures sharing
    an answer, found in the training labels, and no model draws (``num_candidates=0``), so induction makes no LM
    call."""
    return _compile_tfgrpo_with(ctx, valset=ctx.split.selection, induction_phrases=True, num_candidates=0)


class NearestLabel(dspy.Module):
    """No model: the reference answer of the training input nearest to the call's input, by the BM25 the routed
    libraries use (what routing by example can reach when every lesson is followed to the letter)."""

    def __init__(self, train: Sequence[dspy.Example], input_field: str, answer_field: str):
        super().__init__()
        self.answer_field = answer_field
        self.answers = [e[answer_field] for e in train]
        self.index = LuceneBM25([retrieval_words(e[input_field]) for e in train])

    def forward(self, **inputs: Any) -> dspy.Prediction:
        scores = self.index.get_scores(retrieval_words(" ".join(str(v) for v in inputs.values())))
        best = max(range(len(self.answers)), key=lambda i: (scores[i], -i))
        return dspy.Prediction(**{self.answer_field: self.answers[best]})


def compile_nearest_label(ctx: MethodContext) -> Compiled:
    """The baseline without a model that routing by the nearest training input has to beat."""
    split = ctx.split
    return Compiled(NearestLabel(split.train, split.input_field, split.answer_field),
                    CompileDetails("nearest training input's answer (BM25), no model"))


def tfidf_vectorizer(texts: Sequence[str]) -> dspy.Embedder:
    """A lexical embedder for KNNFewShot, fit on the training inputs (no embedding model runs offline here):
    L2-normalised TF-IDF vectors, so KNNFewShot's dot product is their cosine similarity."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    tfidf = TfidfVectorizer(sublinear_tf=True).fit(texts)
    return dspy.Embedder(lambda batch: tfidf.transform(batch).toarray(), caching=False)


def compile_knn(ctx: MethodContext) -> Compiled:
    """KNNFewShot: each call is shown its 16 nearest training examples (TF-IDF) as labeled demos.

    No bootstrapped demos: KNNFewShot runs a BootstrapFewShot per call, whose teacher tries the neighbours one by
    one (each prompt with the 16 demos) until the metric passes enough of them. At the label tasks' 10-40% base
    accuracy that is most of the 16 for every call: on 2026-12-07 the tickets preset's first held-out calls took
    about a minute per teacher call on this machine, some 20 hours for 300 tickets."""
    b, split = ctx.budget, ctx.split
    # KNN embeds an example as "field: value" of its inputs, and a call the same way.
    keyed = [" | ".join(f"{k}: {v}" for k, v in e.inputs().items()) for e in split.train]
    optimizer = dspy.KNNFewShot(k=b.labeled_k, trainset=split.train, vectorizer=tfidf_vectorizer(keyed),
                                metric=split.metric, max_bootstrapped_demos=0, max_labeled_demos=b.labeled_k)
    return Compiled(optimizer.compile(split.make_program()),
                    CompileDetails({"k": b.labeled_k, "vectorizer": "tfidf", "max_bootstrapped_demos": 0,
                                    "max_labeled_demos": b.labeled_k}))


def compile_tfgrpo_on_bootstrap(ctx: MethodContext) -> Compiled:
    """Lessons on top of demos: the student is this run's BootstrapFewShot program, whose demos stay.

    Its cost is the TrainingFreeGRPO part only; the demos' cost is in the bootstrap row.
    """
    student = ctx.programs.get("bootstrap")
    if student is None:
        raise RuntimeError("tfgrpo_on_bootstrap needs the bootstrap program of the same run, and bootstrap failed")
    compiled = _compile_tfgrpo_with(ctx, student=student, valset=ctx.split.selection)
    return replace(compiled, details=replace(
        compiled.details, student="bootstrap (its demos kept; their cost is in the bootstrap row)",
        demos=demo_count(compiled.program)))


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
                                          example_questions=[e[ctx.split.input_field] for e in ctx.split.train],
                                          num_tips=count).tips
    texts = [" ".join(str(t).split()[:max_words]) for t in tips if str(t).strip()][:count]
    library = ExperienceLibrary.from_texts(texts)
    # every tip, as in the paper's ablation
    return Compiled(with_experiences(program, library, top_k=None),
                    CompileDetails({"tips_requested": count}, library=tuple(texts)))


# Programs DSPy's save cannot hold (a forward that retrieves per call): a resumed run compiles them again, which
# costs no model call, instead of loading a program.json that would be the plain program.
REBUILT_ON_LOAD = frozenset({"nearest_label", "knn"})

COMPILERS: dict[str, Callable[[MethodContext], Compiled]] = {
    "none": compile_none,
    "labeled": compile_labeled,
    "bootstrap": compile_bootstrap,
    "mipro": compile_mipro,
    "simba": compile_simba,
    "gepa": compile_gepa,
    "tfgrpo_paper": compile_tfgrpo_paper,
    "tfgrpo": compile_tfgrpo,
    "tfgrpo_on_bootstrap": compile_tfgrpo_on_bootstrap,
    "tfgrpo_by_answer": compile_tfgrpo_by_answer,
    "tfgrpo_by_answer_stated": compile_tfgrpo_by_answer_stated,
    "tfgrpo_phrases": compile_tfgrpo_phrases,
    "tfgrpo_route_to": compile_tfgrpo_route_to,
    "tfgrpo_phrases_only": compile_tfgrpo_phrases_only,
    "nearest_label": compile_nearest_label,
    "knn": compile_knn,
    "direct_tips": compile_direct_tips,
    "group1": compile_group1,
    "no_gt": compile_no_gt,
}
assert set(COMPILERS) == set(METHODS + ABLATIONS)  # a method without a compiler is a bug of this module


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
