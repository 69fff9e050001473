"""TrainingFreeGRPO: the DSPy teleprompter that learns an experience library instead of weights.

A thin Teleprompter: it validates its inputs, splits off a selection set, builds the run's parts
(`tfgrpo_dspy.run.context.RunContext`), runs the step loop (`tfgrpo_dspy.run.loop`) and returns a copy of the
student that carries the shipped library (the best scored on the selection set; without one, the last
step's). Every setting lives in `TrainingFreeGRPOSettings`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from tfgrpo_dspy.inference.injection import library_of, with_experiences
from tfgrpo_dspy.inference.rollouts import metric_call_arity
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.reflection.induction import MIN_SET
from tfgrpo_dspy.reflection.reflection import ReflectionSignatures, Reflector
from tfgrpo_dspy.run.accounting import Ledger, TrainingAborted
from tfgrpo_dspy.run.context import RunContext
from tfgrpo_dspy.run.loop import StepLoop
from tfgrpo_dspy.run.results import RunEstimate
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.run.selection import Selector
from tfgrpo_dspy.run.tracking import make_tracker
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings, settings_doc

logger = logging.getLogger(__name__)

MIN_TRAINSET_FOR_SPLIT = 8  # below this, holding out a selection set leaves too little to learn from

__all__ = ["TrainingAborted", "TrainingFreeGRPO"]


class TrainingFreeGRPO(Teleprompter):
    """Training-Free GRPO (arXiv 2510.08191): optimize a program's context, not its weights.

    For each training example, G rollouts are sampled with the current experience library and
    scored by ``metric``. Groups whose rewards differ are summarized and compared by the reflection
    LM, which proposes at most a few general lessons (or none); near-duplicates are clustered and
    one update step turns them into Add / Modify / Merge / Delete edits. The edits are kept only
    if the library they make wins on a held-out selection set, and the compiled program carries the
    best library seen on it (``compiled.experience_library``; without a selection set, the last step's, as in
    the paper) and the run's record (``compiled.tfgrpo_result``).

    Args:
        metric: a DSPy metric ``(example, prediction, trace=None)`` returning a float, a bool or
            ``dspy.Prediction(score=..., feedback=...)``. May be None when ``ground_truth=False``.
        reflection_lm: LM for the reflection calls; None = ``dspy.settings.lm``.
        initial_library: start from this library (an ExperienceLibrary or a path to its JSON);
            otherwise from the library the student carries, if any (ids kept), else empty.
        signatures: your own Signature for a reflection step, by step name ("summarize", "extract",
            "update", "generalize", "shorten"); it must have the default's field names.
        **settings: any field of `TrainingFreeGRPOSettings`:

{settings}
    """

    def __init__(
        self,
        metric: Callable | None = None,
        *,
        reflection_lm: dspy.BaseLM | None = None,
        initial_library: ExperienceLibrary | str | Path | None = None,
        signatures: dict[str, type[dspy.Signature]] | None = None,
        **settings: Any,
    ):
        super().__init__()
        self.settings = TrainingFreeGRPOSettings.from_options(settings)
        if self.settings.ground_truth:
            if metric is None:
                raise ValueError("metric is required unless ground_truth=False (majority-vote reward)")
            metric_call_arity(metric)
        elif metric is not None and not callable(metric):
            raise TypeError(f"metric must be callable, got {metric!r}")
        if reflection_lm is not None and not isinstance(reflection_lm, dspy.BaseLM):
            raise TypeError(f"reflection_lm must be a dspy.LM (a dspy.BaseLM), got {type(reflection_lm).__name__}")
        if initial_library is not None and not isinstance(initial_library, (ExperienceLibrary, str, Path)):
            raise TypeError(f"initial_library must be an ExperienceLibrary or a path, got {initial_library!r}")
        if self.settings.group_size == 1 and self.settings.informative_only:
            logger.warning("group_size=1 never yields mixed-reward groups; pass informative_only=False "
                           "to learn from single rollouts against the ground truth")
        self.metric = metric
        self.reflection_lm = reflection_lm
        self.initial_library = initial_library
        self.signatures = ReflectionSignatures.with_overrides(signatures)

    def __getattr__(self, name: str) -> Any:
        # optimizer.group_size etc. read the settings (only called for names not found normally).
        settings = self.__dict__.get("settings")
        if settings is not None and name in settings.__dataclass_fields__:
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- the Teleprompter API ---------------------------------------------------------------------
    def compile(self, student: dspy.Module, *, trainset: list, teacher: Any = None, valset: list | None = None):
        """Learn an experience library on ``trainset``; return a copy of ``student`` that carries the shipped one
        (the best scored on the selection set; without a selection set, the last step's).

        Args:
            student: any DSPy program; it is not modified.
            trainset: ``dspy.Example`` objects with ``.with_inputs(...)``.
            teacher: unused (Training-Free GRPO has no teacher); accepted for the Teleprompter API.
            valset: the selection set: libraries are scored on it and kept only if they win. Without
                it, ``val_fraction`` of a trainset of at least 8 examples is held out (seeded).
        """
        if teacher is not None:
            logger.info("TrainingFreeGRPO ignores teacher: it learns from the student's own rollouts")
        program, trainset, valset = self._validate(student, trainset, valset)
        trainset, selection = self._selection_split(trainset, valset)
        initial = self._initial_library(program)
        program = with_experiences(program, ExperienceLibrary(), self.settings.predictors)  # strip a carried one
        ctx = self._context(program, trainset)
        resuming = ctx.log.open(self._manifest(student, program, trainset, selection))
        selector = Selector(program, selection, self.metric, self.settings, ctx.log, ctx.ledger) if selection else None
        tracker = make_tracker(self.settings.track, self.settings.to_dict())
        try:
            result = StepLoop(ctx, selector, initial, tracker).execute(resuming)
        except BaseException as error:
            tracker.finish(None, error)
            raise
        tracker.finish(result)
        compiled = with_experiences(student.deepcopy(), result.library, self.settings.predictors,
                                    placement=self.settings.placement, top_k=self.settings.top_k)
        compiled.tfgrpo_result = result
        return compiled

    def estimate(self, student: dspy.Module, trainset: list, valset: list | None = None) -> RunEstimate:
        """Upper bounds on the calls a compile would make; spends nothing."""
        _, trainset, valset = self._validate(student, trainset, valset)
        trainset, selection = self._selection_split(trainset, valset)
        s = self.settings
        batch = min(s.batch_size or len(trainset), len(trainset))
        steps = s.epochs * math.ceil(len(trainset) / batch)
        rollouts = s.epochs * len(trainset) * s.group_size
        groups = s.epochs * len(trainset) if s.extraction else 0  # groups that may reach the per-group reflection
        proposals = groups * s.max_proposals
        # Every failed example is in at most one induction set of at least induction.MIN_SET.
        inductions = s.epochs * (len(trainset) // MIN_SET) * s.num_candidates if s.induction else 0
        # A proposal line holds one lesson of at most max_words words; a group may also name a misleading lesson.
        line_chars = 80 + 15 * s.max_words
        verified = s.verify and s.ground_truth
        update_calls = 0 if verified else steps * math.ceil(batch * (s.max_proposals + 1) * line_chars /
                                                            s.update_chunk_chars)
        # Each proposal and each update text may need one generalize and one shorten rewrite.
        rewrites = 2 * (proposals + inductions) + 2 * s.max_experiences * update_calls
        # Per step: the current library on every training example, then each candidate on its sources and a batch.
        candidates = proposals + inductions
        verification = (steps * len(trainset) + candidates * (s.induction_examples + s.verify_batch)
                        if verified else 0)
        # Per step: the candidate, single edits with the library they are tried on, the library kept.
        selection_runs = len(selection) * (1 + steps * (2 + 2 * s.gate_budget)) if selection else 0
        return RunEstimate(
            steps=steps, rollouts=rollouts, policy_calls_min=rollouts,
            max_summary_calls=groups * s.group_size if s.summarize else 0, max_extraction_calls=groups,
            max_update_calls=update_calls, max_rewrite_calls=rewrites, max_selection_calls=selection_runs,
            max_induction_calls=inductions, max_verification_calls=verification)

    # -- building a run -----------------------------------------------------------------------------
    def _validate(self, student: Any, trainset: Any, valset: Any) -> tuple[dspy.Module, list, list | None]:
        if not isinstance(student, dspy.Module):
            raise TypeError(f"student must be a dspy.Module, got {type(student).__name__}")
        if not student.named_predictors():
            raise ValueError(f"student {type(student).__name__} has no predictors to carry a library")
        trainset = _check_examples("trainset", trainset)
        valset = _check_examples("valset", valset) if valset is not None else None
        if not self.settings.ground_truth:
            fields = {f for _, p in student.named_predictors() for f in p.signature.output_fields}
            if self.settings.answer_field not in fields:
                raise ValueError(f"answer_field {self.settings.answer_field!r} is not an output field of the "
                                 f"student; its output fields are {sorted(fields)}")
        if self.metric is None and valset:
            raise ValueError("a valset needs a metric to score it")
        if valset:
            _check_disjoint(trainset, valset)
        return student.deepcopy(), trainset, valset

    def _selection_split(self, trainset: list, valset: list | None) -> tuple[list, list]:
        """The training and selection examples: the valset if given, else a seeded share of the trainset."""
        s = self.settings
        if valset:
            return trainset, valset
        if self.metric is None or s.val_fraction == 0 or len(trainset) < MIN_TRAINSET_FOR_SPLIT:
            logger.info("no selection set (%s): every step's edits are kept and the last library is shipped, "
                        "as in the paper", "val_fraction=0" if s.val_fraction == 0 else
                        f"trainset of {len(trainset)} < {MIN_TRAINSET_FOR_SPLIT} examples and no valset")
            return trainset, []
        order = list(range(len(trainset)))
        random.Random(s.seed).shuffle(order)
        held = max(1, round(s.val_fraction * len(trainset)))
        logger.info("holding out %d of %d training examples (val_fraction=%s) to select libraries", held,
                    len(trainset), s.val_fraction)
        chosen = set(order[:held])
        return [e for i, e in enumerate(trainset) if i not in chosen], [trainset[i] for i in sorted(chosen)]

    def _initial_library(self, program: dspy.Module) -> ExperienceLibrary:
        s = self.settings
        if isinstance(self.initial_library, ExperienceLibrary):
            library = self.initial_library.copy()
        elif self.initial_library is not None:
            library = ExperienceLibrary.load(self.initial_library)
        else:
            library = library_of(program) or ExperienceLibrary()
        # The run's caps apply; lessons over them stay (they earned their place elsewhere) but new edits obey.
        return ExperienceLibrary(list(library), max_experiences=s.max_experiences, max_words=s.max_words,
                                 audit_log=list(library.audit_log), next_id=library.next_id)

    def _context(self, program: dspy.Module, trainset: list) -> RunContext:
        s = self.settings
        log = RunLog(s.log_dir)
        ledger = Ledger(max_lm_calls=s.max_lm_calls, max_tokens=s.max_tokens_budget, max_cost=s.max_cost,
                        max_error_rate=s.max_error_rate, min_errors=s.min_errors,
                        on_abort=lambda message: log.mark_stopped(f"aborted: {message}"))
        reflector = Reflector(self.reflection_lm, signatures=self.signatures, max_retries=s.reflection_retries,
                              timeout=s.call_timeout, max_tokens=s.reflection_max_tokens,
                              max_trajectory_chars=s.max_trajectory_chars)
        return RunContext.build(s, self.metric, program, trainset, self._reference_fields(program, trainset),
                                reflector, log, ledger)

    def _reference_fields(self, program: dspy.Module, trainset: list) -> tuple[str, ...] | None:
        """The label fields the reflection sees: the setting, else the labels that are program outputs."""
        if not self.settings.ground_truth:
            return None
        labels = {k for e in trainset for k in e.labels().keys()}
        if self.settings.reference_fields is not None:
            missing = [f for f in self.settings.reference_fields if f not in labels]
            if missing:
                raise ValueError(f"reference_fields {missing} are not labels of the trainset; its labels are "
                                 f"{sorted(labels)}")
            return self.settings.reference_fields
        outputs = [f for _, p in program.named_predictors() for f in p.signature.output_fields]
        chosen = tuple(dict.fromkeys(f for f in outputs if f in labels))
        if not chosen:
            logger.warning("no label of the trainset is an output field of the program; the reflection sees no "
                           "reference (set reference_fields=[...] to choose one)")
        return chosen

    def _manifest(self, student: dspy.Module, program: dspy.Module, trainset: list, selection: list
                  ) -> dict[str, Any]:
        return {
            "format": "tfgrpo-run",
            "version": 2,
            "program": type(student).__name__,  # the user's class, not the carrier a bare Predict becomes
            "program_sha256": _sha([(n, p.signature.instructions, list(p.signature.fields))
                                    for n, p in program.named_predictors()]),
            "trainset_size": len(trainset),
            "trainset_sha256": _sha([sorted(e.toDict().items()) for e in trainset]),
            "selection_size": len(selection),
            "selection_sha256": _sha([sorted(e.toDict().items()) for e in selection]),
            "policy_lm": _describe_lm(dspy.settings.lm),
            "reflection_lm": _describe_lm(self.reflection_lm or dspy.settings.lm),
            "settings": self.settings.manifest(),
        }


TrainingFreeGRPO.__doc__ = (TrainingFreeGRPO.__doc__ or "").replace("{settings}", settings_doc())


def _check_examples(name: str, examples: Any) -> list:
    if not isinstance(examples, (list, tuple)) or not examples:
        raise ValueError(f"{name} must be a non-empty list of dspy.Example")
    for i, example in enumerate(examples):
        if not isinstance(example, dspy.Example):
            raise TypeError(f"{name}[{i}] must be a dspy.Example, got {type(example).__name__}")
        if not example._input_keys:
            raise ValueError(f"{name}[{i}] has no inputs: call .with_inputs('question', ...) on your examples")
    return list(examples)


def _check_disjoint(trainset: list, valset: list) -> None:
    """A selection example that is also a training example would let the gate keep lessons that only recite
    the training answers: the valset must not share inputs with the trainset."""
    seen = {_input_key(e): i for i, e in enumerate(trainset)}
    shared = [(i, seen[_input_key(e)]) for i, e in enumerate(valset) if _input_key(e) in seen]
    if shared:
        v, t = shared[0]
        raise ValueError(f"valset shares {len(shared)} of its {len(valset)} examples' inputs with the trainset "
                         f"(valset[{v}] is trainset[{t}]); the selection set must be disjoint from the "
                         f"training examples")


def _input_key(example: dspy.Example) -> str:
    return json.dumps({k: example[k] for k in sorted(example._input_keys)}, default=str, sort_keys=True)


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, default=str).encode()).hexdigest()


def _describe_lm(lm: Any) -> dict[str, Any] | None:
    """What identifies an LM for a resume: its model name and decoding settings (never keys)."""
    if lm is None:
        return None
    kwargs = getattr(lm, "kwargs", {}) or {}
    return {"model": getattr(lm, "model", type(lm).__name__),
            **{k: kwargs[k] for k in ("temperature", "max_tokens", "top_p") if k in kwargs}}
