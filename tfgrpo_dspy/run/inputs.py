"""What a compile is given, checked before anything is spent: the student, the training and selection examples.

`check_inputs` refuses a student without predictors, examples without inputs and a valset that shares inputs
with the trainset; `selection_split` decides the selection set (the valset, else a seeded share of the trainset,
else none). Both read only the settings and the metric, so `TrainingFreeGRPO.compile` and `.estimate` agree.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from typing import Any

import dspy

from tfgrpo_dspy.settings import TrainingFreeGRPOSettings

logger = logging.getLogger(__name__)

MIN_TRAINSET_FOR_SPLIT = 8  # below this, holding out a selection set leaves too little to learn from


def check_inputs(student: Any, trainset: Any, valset: Any, settings: TrainingFreeGRPOSettings,
                 metric: Callable | None) -> tuple[dspy.Module, list, list | None]:
    """A private copy of ``student`` and the examples as lists; a clear error for anything a run cannot use."""
    if not isinstance(student, dspy.Module):
        raise TypeError(f"student must be a dspy.Module, got {type(student).__name__}")
    if not student.named_predictors():
        raise ValueError(f"student {type(student).__name__} has no predictors to carry a library")
    trainset = check_examples("trainset", trainset)
    valset = check_examples("valset", valset) if valset is not None else None
    if not settings.ground_truth:
        fields = {f for _, p in student.named_predictors() for f in p.signature.output_fields}
        if settings.answer_field not in fields:
            raise ValueError(f"answer_field {settings.answer_field!r} is not an output field of the "
                             f"student; its output fields are {sorted(fields)}")
    if metric is None and valset:
        raise ValueError("a valset needs a metric to score it")
    if valset:
        check_disjoint(trainset, valset)
    return student.deepcopy(), trainset, valset


def check_examples(name: str, examples: Any) -> list:
    """``examples`` as a list, each a ``dspy.Example`` with inputs; the error names ``name`` and the index."""
    if not isinstance(examples, (list, tuple)) or not examples:
        raise ValueError(f"{name} must be a non-empty list of dspy.Example")
    for i, example in enumerate(examples):
        if not isinstance(example, dspy.Example):
            raise TypeError(f"{name}[{i}] must be a dspy.Example, got {type(example).__name__}")
        if not example._input_keys:
            raise ValueError(f"{name}[{i}] has no inputs: call .with_inputs('question', ...) on your examples")
    return list(examples)


def check_disjoint(trainset: list, valset: list) -> None:
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


def selection_split(trainset: list, valset: list | None, settings: TrainingFreeGRPOSettings,
                    metric: Callable | None) -> tuple[list, list]:
    """The training and selection examples: the valset if given, else a seeded share of the trainset."""
    s = settings
    if valset:
        return trainset, valset
    if metric is None or s.val_fraction == 0 or len(trainset) < MIN_TRAINSET_FOR_SPLIT:
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
