"""One compile, start to finish: the engine `TrainingFreeGRPO.compile` calls, as DSPy's GEPA calls its own.

`run_compile` checks the inputs, splits off the selection set, builds the run's parts (`RunContext`, the
`Selector`, the tracker), claims the log directory and runs the step loop (`StepLoop`); it returns the run's
`TrainingFreeGRPOResult`. `compiled_program` ships it: a copy of the student that carries the shipped library
(the best scored on the selection set; without one, the last step's) and the run's record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import dspy

from tfgrpo_dspy.inference.injection import library_of, with_experiences
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.reflection.reflection import Reflector
from tfgrpo_dspy.reflection.steps import ReflectionSignatures
from tfgrpo_dspy.run.accounting import Ledger
from tfgrpo_dspy.run.context import RunContext
from tfgrpo_dspy.run.inputs import check_inputs, selection_split
from tfgrpo_dspy.run.loop import StepLoop
from tfgrpo_dspy.run.manifest import run_manifest
from tfgrpo_dspy.run.results import TrainingFreeGRPOResult
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.run.selection import Selector
from tfgrpo_dspy.run.tracking import make_tracker
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings

logger = logging.getLogger(__name__)


def run_compile(
    student: dspy.Module,
    trainset: list,
    valset: list | None,
    *,
    settings: TrainingFreeGRPOSettings,
    metric: Callable | None,
    reflection_lm: dspy.BaseLM | None,
    initial_library: ExperienceLibrary | str | Path | None,
    signatures: ReflectionSignatures,
) -> TrainingFreeGRPOResult:
    """Learn an experience library for ``student`` on ``trainset`` (see `TrainingFreeGRPO.compile`); the student
    is not modified. Resumes from ``settings.log_dir`` when it holds the same run."""
    program, trainset, valset = check_inputs(student, trainset, valset, settings, metric)
    trainset, selection = selection_split(trainset, valset, settings, metric)
    initial = initial_library_of(program, initial_library, settings)
    program = with_experiences(program, ExperienceLibrary(), settings.predictors)  # strip a carried one
    ctx = run_context(program, trainset, settings, metric, reflection_lm, signatures)
    resuming = ctx.log.open(run_manifest(student, program, trainset, selection, settings, reflection_lm))
    selector = Selector(program, selection, metric, settings, ctx.log, ctx.ledger) if selection else None
    tracker = make_tracker(settings.track, settings.to_dict())
    try:
        result = StepLoop(ctx, selector, initial, tracker).execute(resuming)
    except BaseException as error:
        tracker.finish(None, error)
        raise
    tracker.finish(result)
    return result


def compiled_program(student: dspy.Module, result: TrainingFreeGRPOResult,
                     settings: TrainingFreeGRPOSettings) -> dspy.Module:
    """A copy of ``student`` whose predictors show the run's shipped library, with the run's record as
    ``compiled.tfgrpo_result``."""
    compiled = with_experiences(student.deepcopy(), result.library, settings.predictors,
                                placement=settings.placement, top_k=settings.top_k)
    compiled.tfgrpo_result = result
    return compiled


def initial_library_of(program: dspy.Module, initial: ExperienceLibrary | str | Path | None,
                       settings: TrainingFreeGRPOSettings) -> ExperienceLibrary:
    """The library the run starts from: ``initial`` (a library or a path), else the one the program carries,
    else an empty one; under the run's caps."""
    if isinstance(initial, ExperienceLibrary):
        library = initial.copy()
    elif initial is not None:
        library = ExperienceLibrary.load(initial)
    else:
        library = library_of(program) or ExperienceLibrary()
    # The run's caps apply; lessons over them stay (they earned their place elsewhere) but new edits obey.
    return ExperienceLibrary(list(library), max_experiences=settings.max_experiences, max_words=settings.max_words,
                             audit_log=list(library.audit_log), next_id=library.next_id)


def run_context(program: dspy.Module, trainset: list, settings: TrainingFreeGRPOSettings, metric: Callable | None,
                reflection_lm: dspy.BaseLM | None, signatures: ReflectionSignatures) -> RunContext:
    """The run's log, ledger and reflector, and the `RunContext` every phase reads."""
    s = settings
    log = RunLog(s.log_dir)
    ledger = Ledger(max_lm_calls=s.max_lm_calls, max_tokens=s.max_tokens_budget, max_cost=s.max_cost,
                    max_error_rate=s.max_error_rate, min_errors=s.min_errors,
                    on_abort=lambda message: log.mark_stopped(f"aborted: {message}"))
    reflector = Reflector(reflection_lm, signatures=signatures, max_retries=s.reflection_retries,
                          timeout=s.call_timeout, max_tokens=s.reflection_max_tokens,
                          max_trajectory_chars=s.max_trajectory_chars)
    return RunContext.build(s, metric, program, trainset, reference_fields(settings, program, trainset),
                            reflector, log, ledger)


def reference_fields(settings: TrainingFreeGRPOSettings, program: dspy.Module, trainset: list
                     ) -> tuple[str, ...] | None:
    """The label fields the reflection sees: the setting, else the labels that are program outputs."""
    if not settings.ground_truth:
        return None
    labels = {k for e in trainset for k in e.labels().keys()}
    if settings.reference_fields is not None:
        missing = [f for f in settings.reference_fields if f not in labels]
        if missing:
            raise ValueError(f"reference_fields {missing} are not labels of the trainset; its labels are "
                             f"{sorted(labels)}")
        return settings.reference_fields
    outputs = [f for _, p in program.named_predictors() for f in p.signature.output_fields]
    chosen = tuple(dict.fromkeys(f for f in outputs if f in labels))
    if not chosen:
        logger.warning("no label of the trainset is an output field of the program; the reflection sees no "
                       "reference (set reference_fields=[...] to choose one)")
    return chosen
