"""TrainingFreeGRPO: the DSPy teleprompter that learns an experience library instead of weights.

A thin Teleprompter, as DSPy's GEPA is over its engine: it holds and validates the settings, and ``compile``
delegates the run to `tfgrpo_dspy.run.compile` (check the inputs, split off a selection set, build the run's
parts, run the step loop) and returns a copy of the student that carries the shipped library (the best scored
on the selection set; without one, the last step's). Every setting lives in `TrainingFreeGRPOSettings`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from tfgrpo_dspy.inference.scoring import metric_call_arity
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.reflection.steps import ReflectionSignatures
from tfgrpo_dspy.run.accounting import TrainingAborted
from tfgrpo_dspy.run.compile import compiled_program, reference_fields, run_compile
from tfgrpo_dspy.run.estimate import estimate_run
from tfgrpo_dspy.run.inputs import check_inputs, selection_split
from tfgrpo_dspy.run.results import RunEstimate
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings, settings_doc

logger = logging.getLogger(__name__)

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
        result = run_compile(student, trainset, valset, settings=self.settings, metric=self.metric,
                             reflection_lm=self.reflection_lm, initial_library=self.initial_library,
                             signatures=self.signatures)
        return compiled_program(student, result, self.settings)

    def estimate(self, student: dspy.Module, trainset: list, valset: list | None = None) -> RunEstimate:
        """Upper bounds on the calls a compile would make; spends nothing."""
        _, trainset, valset = check_inputs(student, trainset, valset, self.settings, self.metric)
        trainset, selection = selection_split(trainset, valset, self.settings, self.metric)
        return estimate_run(self.settings, trainset, selection)

    def _reference_fields(self, program: dspy.Module, trainset: list) -> tuple[str, ...] | None:
        """The label fields the reflection of a compile on ``trainset`` would see (`run.compile.reference_fields`)."""
        return reference_fields(self.settings, program, trainset)


TrainingFreeGRPO.__doc__ = (TrainingFreeGRPO.__doc__ or "").replace("{settings}", settings_doc())

