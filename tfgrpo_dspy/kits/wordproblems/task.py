"""The "wordproblems" task: generated word problems, a ChainOfThought program, numeric match."""

from __future__ import annotations

from functools import partial

import dspy

from tfgrpo_dspy.kits.wordproblems.generator import Split, generate_problems
from tfgrpo_dspy.kits.wordproblems.metric import numeric_match
from tfgrpo_dspy.tasks import Task, TaskData

INSTRUCTIONS = "Solve the word problem step by step. Give the final answer as a single number."
# The families where the embedded 1.5B model is mixed at temperature 0.7 (measured 8/17 right;
# the other three measured 7/8). Train and held-out share them, so lessons can transfer.
DEMO_FAMILIES = ("distractor", "dozens", "each_of", "minutes_hours", "percent_off_on", "rates")
# Sized for ``tfgrpo demo`` in about 15 minutes on 2 CPU cores with the embedded 1.5B model:
# about 75 LM calls of ~12 s each at 4 parallel sequences (see CALIBRATION.md).
DEMO_TRAIN_N = 6  # one per demo family
DEMO_HELDOUT_N = 9
# Groups of 4 fill the 4 parallel sequences; one epoch over the whole set = one library update.
TRAIN_DEFAULTS = {"group_size": 4, "epochs": 1, "temperature": 0.7, "num_threads": 4,
                  "reference_fields": ("answer",)}
EVAL_DEFAULTS = {"k": 1, "temperature": 0.3}


def make_program() -> dspy.Module:
    """A fresh ChainOfThought program: question -> reasoning, answer (a number as text)."""
    signature = dspy.Signature("question -> answer: str", INSTRUCTIONS)
    return dspy.ChainOfThought(signature)


def load_split(split: Split, default_n: int, data: TaskData) -> list[dspy.Example]:
    """Generated problems of one split; ``data.n`` (default ``default_n``) and ``data.seed`` apply."""
    if data.source is not None:
        raise ValueError(f"wordproblems generates its problems; source must be None, got {data.source!r}")
    return generate_problems(default_n if data.n is None else data.n, data.seed_or(0), DEMO_FAMILIES, split=split)


WORDPROBLEMS = Task(
    name="wordproblems",
    description="Generated multi-step word problems with traps (the offline demo's data).",
    load_trainset=partial(load_split, "train", DEMO_TRAIN_N),
    load_evalset=partial(load_split, "heldout", DEMO_HELDOUT_N),
    make_program=make_program,
    make_metric=lambda judge_lm=None: numeric_match,
    answer_field="answer",
    train_defaults=TRAIN_DEFAULTS,
    eval_defaults=EVAL_DEFAULTS,
    default_train_n=DEMO_TRAIN_N,
    default_eval_n=DEMO_HELDOUT_N,
)

WORDPROBLEM_TASKS: dict[str, Task] = {WORDPROBLEMS.name: WORDPROBLEMS}
