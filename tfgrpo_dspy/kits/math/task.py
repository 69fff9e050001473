"""CLI tasks of the math kit: train on DAPO-Math, evaluate on AIME 2024/2025 and GSM8K.

Every task uses the same program (`make_math_agent`: ReAct with a Python tool) and the same metric,
so a library learned on one task applies unchanged to the others.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.kits.math.data import (
    AIME24_HUB_ID,
    AIME25_HUB_ID,
    DAPO_MATH_HUB_ID,
    GSM8K_HUB_ID,
    load_aime24,
    load_aime25,
    load_dapo_math,
    load_gsm8k,
)
from tfgrpo_dspy.kits.math.programs import make_math_agent
from tfgrpo_dspy.kits.math.reward import MathAnswerMetric
from tfgrpo_dspy.tasks import Task, TaskData

logger = logging.getLogger(__name__)

DAPO_TRAIN_N = 100  # the paper's training set size
DAPO_EVAL_N = 100
DAPO_SEED = 42  # the paper's reference shuffles the deduplicated set with seed 42
GSM8K_TRAIN_N = DAPO_TRAIN_N
# Paper recipe: groups of 5 at temperature 0.7, 3 epochs; evaluation Mean@32 at temperature 0.3.
TRAIN_DEFAULTS: dict[str, Any] = {"group_size": 5, "epochs": 3, "temperature": 0.7, "num_threads": 4,
                                  "reference_fields": ("answer",)}
# GSM8K and AIME 2024 keep the source's worked solution: the reflection compares a wrong attempt with it.
WITH_SOLUTION_DEFAULTS: dict[str, Any] = {**TRAIN_DEFAULTS, "reference_fields": ("answer", "solution")}
AIME_EVAL_DEFAULTS: dict[str, Any] = {"k": 32, "temperature": 0.3}


def make_metric(judge_lm: Any = None) -> MathAnswerMetric:
    """Math-verify answer check; needs no judge LM."""
    return MathAnswerMetric()


def _load_dapo_train(data: TaskData) -> list[dspy.Example]:
    n = DAPO_TRAIN_N if data.n is None else data.n
    return load_dapo_math(data.source or DAPO_MATH_HUB_ID, n=n, seed=data.seed_or(DAPO_SEED))


def _load_dapo_heldout(data: TaskData) -> list[dspy.Example]:
    """Problems after the first DAPO_TRAIN_N of the same shuffled order: disjoint from the default trainset."""
    n = DAPO_EVAL_N if data.n is None else data.n
    return load_dapo_math(data.source or DAPO_MATH_HUB_ID, n=n, seed=data.seed_or(DAPO_SEED), skip=DAPO_TRAIN_N)


def _eval_only(name: str) -> Any:
    def load(data: TaskData) -> list[dspy.Example]:
        raise ValueError(f"{name} is an evaluation benchmark; train on 'dapo-math' and evaluate on {name}")

    return load


def _take(examples: list[dspy.Example], n: int | None) -> list[dspy.Example]:
    return examples if n is None else examples[:n]


def _load_aime24(data: TaskData) -> list[dspy.Example]:
    return _take(load_aime24(data.source or AIME24_HUB_ID), data.n)


def _load_aime25(data: TaskData) -> list[dspy.Example]:
    return _take(load_aime25(data.source or AIME25_HUB_ID), data.n)


def _is_single_file(source: str | None) -> bool:
    return source is not None and Path(source).expanduser().is_file()


def _load_gsm8k_train(data: TaskData) -> list[dspy.Example]:
    n = GSM8K_TRAIN_N if data.n is None else data.n
    if _is_single_file(data.source) and n > GSM8K_TRAIN_N:
        logger.warning("%s is one file, so evaluation reads the same rows after the first %d of the shuffled "
                       "order: training on %d of them overlaps the evaluation set", data.source, GSM8K_TRAIN_N, n)
    return load_gsm8k(data.source or GSM8K_HUB_ID, split="train", n=n, seed=data.seed_or(0))


def _load_gsm8k_test(data: TaskData) -> list[dspy.Example]:
    if _is_single_file(data.source):
        # One file is one split: evaluate on rows after the training range of the same shuffled
        # order, so `train` and `eval` with the same --source and --seed never share a problem.
        return load_gsm8k(data.source, n=data.n, seed=data.seed_or(0), skip=GSM8K_TRAIN_N)
    return load_gsm8k(data.source or GSM8K_HUB_ID, split="test", n=data.n, seed=data.seed_or(0))


DAPO_MATH = Task(
    name="dapo-math",
    description="DAPO-Math-17k: train on 100 problems (ReAct + Python); eval on held-out DAPO problems.",
    load_trainset=_load_dapo_train,
    load_evalset=_load_dapo_heldout,
    make_program=make_math_agent,
    program_options=frozenset({"max_iters"}),
    make_metric=make_metric,
    train_defaults=TRAIN_DEFAULTS,
    eval_defaults={"k": 4, "temperature": 0.3},
    default_train_n=DAPO_TRAIN_N,
    default_eval_n=DAPO_EVAL_N,
)

AIME24 = Task(
    name="aime24",
    description="AIME 2024 (30 problems), Mean@32 at temperature 0.3 (evaluation only).",
    load_trainset=_eval_only("aime24"),
    load_evalset=_load_aime24,
    make_program=make_math_agent,
    program_options=frozenset({"max_iters"}),
    make_metric=make_metric,
    train_defaults=WITH_SOLUTION_DEFAULTS,
    eval_defaults=AIME_EVAL_DEFAULTS,
)

AIME25 = Task(
    name="aime25",
    description="AIME 2025 (30 problems), Mean@32 at temperature 0.3 (evaluation only).",
    load_trainset=_eval_only("aime25"),
    load_evalset=_load_aime25,
    make_program=make_math_agent,
    program_options=frozenset({"max_iters"}),
    make_metric=make_metric,
    train_defaults=TRAIN_DEFAULTS,
    eval_defaults=AIME_EVAL_DEFAULTS,
)

GSM8K = Task(
    name="gsm8k",
    description="GSM8K grade-school math: train split for training, test split for evaluation "
    "(one local file: disjoint seeded ranges of it).",
    load_trainset=_load_gsm8k_train,
    load_evalset=_load_gsm8k_test,
    make_program=make_math_agent,
    program_options=frozenset({"max_iters"}),
    make_metric=make_metric,
    train_defaults=WITH_SOLUTION_DEFAULTS,
    eval_defaults={"k": 1, "temperature": 0.3},
    default_train_n=DAPO_TRAIN_N,
)

MATH_TASKS: dict[str, Task] = {task.name: task for task in (DAPO_MATH, AIME24, AIME25, GSM8K)}
