"""A task: data, program and metric bundled under a name, for the CLI and the benchmarks.

Domain kits (``tfgrpo_dspy.kits.*``) each build `Task` objects; the CLI and the
benchmarks look them up by name. The core optimizer never imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dspy


@dataclass(frozen=True)
class TaskData:
    """Where a task reads its examples from and how many it takes."""

    source: str | None = None  # a hub id or a local file/folder; None = the task's default
    n: int | None = None  # None = all
    seed: int | None = None  # None = the task's default (the paper's seed where it names one)

    def seed_or(self, default: int) -> int:
        """The seed to sample with: the user's, else ``default``."""
        return default if self.seed is None else self.seed


@dataclass(frozen=True)
class Task:
    """Everything `tfgrpo train` / `tfgrpo eval` need to run one domain.

    Attributes:
        name: CLI name, e.g. ``"dapo-math"``.
        description: One line for ``tfgrpo --help``.
        load_trainset: ``(TaskData) -> list[dspy.Example]`` with inputs set.
        load_evalset: ``(TaskData) -> list[dspy.Example]`` with inputs set.
        make_program: ``(**program_options) -> dspy.Module``, a fresh, unoptimized program.
        make_metric: ``(judge_lm: dspy.LM | None) -> metric``; most tasks ignore the LM.
        answer_field: the prediction field holding the final answer (majority-vote reward).
        train_defaults: keyword defaults for `TrainingFreeGRPO` (group_size, epochs, temperature, ...).
        eval_defaults: ``{"k": ..., "temperature": ...}`` for ``tfgrpo eval``.
        default_train_n / default_eval_n: example counts when the user gives none (``TaskData.n`` is
            None); the loaders apply them, a source with fewer examples may give fewer.
        default_selection_n: selection examples ``tfgrpo train`` takes from the source after the training
            examples when the user gives neither ``--selection-n`` nor ``--val-fraction``; None = the
            optimizer's own hold-out (``val_fraction`` of the training examples).
        program_options: keyword options ``make_program`` accepts from the command line
            (``max_iters`` for agents, ``allowed_addresses`` for browsing agents).
    """

    name: str
    description: str
    load_trainset: Callable[[TaskData], list[dspy.Example]]
    load_evalset: Callable[[TaskData], list[dspy.Example]]
    make_program: Callable[[], dspy.Module]
    make_metric: Callable[[Any], Callable]
    answer_field: str = "answer"
    train_defaults: dict[str, Any] = field(default_factory=dict)
    eval_defaults: dict[str, Any] = field(default_factory=dict)
    default_train_n: int | None = None
    default_eval_n: int | None = None
    default_selection_n: int | None = None
    program_options: frozenset[str] = frozenset()
