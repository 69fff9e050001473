"""The "wordproblems" task: generated word problems, a ChainOfThought program, numeric match."""

from __future__ import annotations

from functools import partial

import dspy

from tfgrpo_dspy.kits.wordproblems.generator import Split, generate_problems
from tfgrpo_dspy.kits.wordproblems.metric import numeric_match
from tfgrpo_dspy.tasks import Task, TaskData

INSTRUCTIONS = "Solve the word problem step by step. Give the final answer as a single number."
# Demo sizes for 2 CPU cores and the embedded 1.5B model (see CALIBRATION.md).
DEMO_TRAIN_N = 18
DEMO_HELDOUT_N = 27


def make_program() -> dspy.Module:
    """A fresh ChainOfThought program: question -> reasoning, answer (a number as text)."""
    signature = dspy.Signature("question -> answer: str", INSTRUCTIONS)
    return dspy.ChainOfThought(signature)


def load_split(split: Split, default_n: int, data: TaskData) -> list[dspy.Example]:
    """Generated problems of one split; ``data.n`` (default ``default_n``) and ``data.seed`` apply."""
    if data.source is not None:
        raise ValueError(f"wordproblems generates its problems; source must be None, got {data.source!r}")
    return generate_problems(default_n if data.n is None else data.n, data.seed, split=split)


WORDPROBLEMS = Task(
    name="wordproblems",
    description="Generated multi-step word problems with traps (offline demo data).",
    load_trainset=partial(load_split, "train", DEMO_TRAIN_N),
    load_evalset=partial(load_split, "heldout", DEMO_HELDOUT_N),
    make_program=make_program,
    make_metric=lambda judge_lm=None: numeric_match,
    answer_field="answer",
    train_defaults={"group_size": 4, "epochs": 2, "temperature": 0.7, "num_threads": 4},
    eval_defaults={"k": 1, "temperature": 0.7},
    default_train_n=DEMO_TRAIN_N,
    default_eval_n=DEMO_HELDOUT_N,
)

WORDPROBLEM_TASKS: dict[str, Task] = {WORDPROBLEMS.name: WORDPROBLEMS}
