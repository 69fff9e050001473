"""What ``tfgrpo train`` makes of its arguments: the optimizer's settings, the warm-start library, the examples.

All of it is checked before the run spends a call, so a bad value fails in seconds rather than after rollouts.
"""

from __future__ import annotations

import argparse
from typing import Any

import dspy

from tfgrpo_dspy.cli.inputs import _check_folder, load_examples
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings
from tfgrpo_dspy.tasks import Task, TaskData


def _train_settings(task: Task, args: argparse.Namespace) -> dict[str, Any]:
    settings = dict(task.train_defaults)
    overrides = {
        "group_size": args.group_size, "epochs": args.epochs, "batch_size": args.batch_size,
        "temperature": args.temperature, "max_experiences": args.max_experiences, "max_words": args.max_words,
        "num_threads": args.num_threads, "max_lm_calls": args.max_lm_calls,
        "max_tokens_budget": args.max_tokens_budget, "max_cost": args.max_cost,
        "val_fraction": args.val_fraction, "placement": args.placement, "top_k": args.top_k, "route_by": args.route_by,
        "track": args.track,
    }
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if settings.get("top_k") == 0:
        settings["top_k"] = None  # every lesson
    if args.no_ground_truth:
        settings.update(ground_truth=False, answer_field=task.answer_field)
    if args.no_summaries:
        settings.update(summarize=False)
    if args.no_generalize:
        settings.update(generalize_lessons=False)
    if args.no_gate:
        settings.update(gate=False)
    if args.all_groups:
        settings.update(informative_only=False)
    return settings


def _check_train_args(args: argparse.Namespace, settings: dict[str, Any]) -> ExperienceLibrary | None:
    """Everything about a training run that can be wrong before it spends a call; returns the warm-start library."""
    _check_folder(args.out, "--out")
    checked = TrainingFreeGRPOSettings.from_options(settings)  # a bad value fails here, not after rollouts
    if checked.group_size == 1 and checked.informative_only:
        raise ValueError("--group-size 1: a group of one rollout never has mixed rewards, so nothing would be "
                         "learned; use --group-size 2 or more, or add --all-groups to learn from single rollouts "
                         "against the ground truth")
    if checked.group_size == 1 and not checked.ground_truth:
        raise ValueError("--group-size 1 with --no-ground-truth: a majority of one always agrees with itself, so "
                         "every reward is the same; use --group-size 2 or more")
    if args.library is None:
        return None
    library = ExperienceLibrary.load(args.library)
    if len(library) > checked.max_experiences:
        raise ValueError(f"--library {args.library} holds {len(library)} lessons, more than the run's "
                         f"max_experiences={checked.max_experiences}: raise --max-experiences or trim the library")
    return library


def _train_data(task: Task, args: argparse.Namespace) -> tuple[list[dspy.Example], list[dspy.Example] | None]:
    """The training examples and, with --selection-n (or the task's default_selection_n), the selection examples
    that follow them in the source."""
    n = args.n if args.n is not None else task.default_train_n
    selection_n = args.selection_n
    if selection_n is None and args.val_fraction is None:  # a fraction asked for replaces the task's own rows
        selection_n = task.default_selection_n
    if selection_n is None:
        return load_examples(task.load_trainset, TaskData(source=args.source, n=args.n, seed=args.seed),
                             "training"), None
    if n is None:
        raise ValueError("--selection-n needs --n (how many of the source's examples to train on)")
    examples = load_examples(task.load_trainset, TaskData(source=args.source, n=n + selection_n, seed=args.seed),
                             "training")
    if len(examples) <= selection_n:
        raise ValueError(f"the source has {len(examples)} examples: too few for --n {n} and --selection-n "
                         f"{selection_n}")
    return examples[:-selection_n], examples[-selection_n:]
