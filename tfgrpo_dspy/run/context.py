"""What every phase of a run needs, built complete in one place (`RunContext.build`).

The phases (`tfgrpo_dspy.run.phases`), the update (`tfgrpo_dspy.run.update`) and the verification read it; none
of them builds parts of it, so the imports run one way: context <- phases, update, loop <- compile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy

from tfgrpo_dspy.inference.rollouts import GroupOutcome
from tfgrpo_dspy.reflection.formatting import as_text, format_answer, format_reference
from tfgrpo_dspy.reflection.guard import LessonGuard
from tfgrpo_dspy.reflection.lessons import ExampleMaterial, Vocabulary
from tfgrpo_dspy.reflection.reflection import Reflector
from tfgrpo_dspy.run.accounting import Ledger
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.run.verification import Verifier
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings


def example_material(example: dspy.Example, reference_fields: tuple[str, ...] | None,
                     group: GroupOutcome | None = None) -> ExampleMaterial:
    """The example's text, reference answers and worked text (reference solution, attempts' outputs)."""
    answers: tuple[str, ...] = ()
    worked = []
    if reference_fields is not None:
        labels = example.labels()
        values = [as_text(labels[name]) for name in reference_fields if name in labels]
        answers, worked = tuple(values[:1]), values[1:]
    if group is not None:
        worked += [as_text(r.outputs) for r in group.rollouts if r.outputs]
    return ExampleMaterial(as_text(example.inputs().toDict()), answers, " ".join(worked))


@dataclass(frozen=True)
class RunContext:
    """The settings, data, LM-backed parts and books of one compile."""

    settings: TrainingFreeGRPOSettings
    metric: Callable | None
    program: dspy.Module
    trainset: list[dspy.Example]
    reference_fields: tuple[str, ...] | None  # None = no ground truth
    reflector: Reflector
    guard: LessonGuard
    verifier: Verifier | None  # None without ground truth or with verify=False
    log: RunLog
    ledger: Ledger

    @classmethod
    def build(cls, settings: TrainingFreeGRPOSettings, metric: Callable | None, program: dspy.Module,
              trainset: list[dspy.Example], reference_fields: tuple[str, ...] | None, reflector: Reflector,
              log: RunLog, ledger: Ledger) -> RunContext:
        """The context with its guard (vocabulary and field names read off the trainset and the program) and,
        when lessons are verified, its verifier."""
        vocabulary = Vocabulary.of(example_material(e, reference_fields) for e in trainset)
        field_names = {f for _, p in program.named_predictors() for f in (*p.signature.input_fields,
                                                                         *p.signature.output_fields)}
        guard = LessonGuard(reflector, vocabulary, max_words=settings.max_words,
                            generalize=settings.generalize_lessons, field_names=sorted(field_names))
        verifier = None
        if settings.verify and reference_fields is not None and metric is not None:
            verifier = Verifier(program, trainset, metric, settings, log, ledger,
                                reference=lambda i: format_reference(trainset[i], reference_fields))
        return cls(settings, metric, program, trainset, reference_fields, reflector, guard, verifier, log, ledger)

    def task_text(self, index: int) -> str:
        return as_text(self.trainset[index].inputs().toDict())

    def reference(self, index: int) -> str:
        return format_reference(self.trainset[index], self.reference_fields)

    def answer(self, outputs: dict[str, Any] | None) -> str:
        """The program's outputs written as a reference is, to compare with one."""
        return format_answer(outputs, self.reference_fields)

    def material(self, index: int, group: GroupOutcome | None = None) -> ExampleMaterial:
        return example_material(self.trainset[index], self.reference_fields, group)
