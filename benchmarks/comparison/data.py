"""The data and program of each task: one train / selection / held-out split, the same for every method."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy

from comparison.presets import Budget
from tfgrpo_dspy.kits.math.data import gsm8k_splits
from tfgrpo_dspy.kits.wordproblems import generate_problems, make_program, numeric_match


@dataclass(frozen=True)
class Split:
    """One task's data, program and metric: the same for every method."""

    task: str
    train: list[dspy.Example]
    selection: list[dspy.Example]  # what optimizers select on (their valset); never scored as a result
    test: list[dspy.Example]  # the held-out rows every method is scored on
    source: str
    make_program: Callable[[], dspy.Module] = make_program
    reference_fields: tuple[str, ...] | None = None  # labels the TF-GRPO reflection reads (None = its default)
    metric: Callable[..., Any] = numeric_match
    input_field: str = "question"
    answer_field: str = "answer"
    # The task kit's own TrainingFreeGRPO settings (what `tfgrpo train --task` uses) beyond the preset's budget.
    tfgrpo_settings: Mapping[str, Any] = field(default_factory=dict)

    def held_out_rows(self) -> list[dict[str, Any]]:
        """The held-out problems once per task; per-method results refer to them by index."""
        return [{"index": i, "id": e.get("index"), "question": e[self.input_field], "answer": e[self.answer_field]}
                for i, e in enumerate(self.test)]


class ScoreOnly:
    """A metric's score as a float, for optimizers that test a metric's truth value (a Prediction is truthy)."""

    def __init__(self, metric: Callable[..., Any]):
        self.metric = metric

    def __call__(self, example: dspy.Example, prediction: Any, trace: Any = None) -> float:
        result = self.metric(example, prediction)
        return float(getattr(result, "score", result))


def wordproblems_split(budget: Budget, seed: int) -> Split:
    """Generated problems: train and selection from the training half of question space, test from the other."""
    pool = generate_problems(budget.train_n + budget.selection_n, seed, split="train")
    test = generate_problems(budget.test_n, seed, split="heldout")
    return Split("wordproblems", pool[: budget.train_n], pool[budget.train_n :], test, "generated")


def gsm8k_program() -> dspy.Module:
    """The GSM8K preset's program: plain chain of thought, no task instructions, so optimizers start equal."""
    return dspy.ChainOfThought("question -> answer")


def as_question(example: dspy.Example) -> dspy.Example:
    """A math-kit example (input ``problem``) as the shared program's input ``question``; labels kept."""
    labels = {key: value for key, value in example.items() if key != "problem"}
    return dspy.Example(question=example.problem, **labels).with_inputs("question")


def gsm8k_split(source: str, budget: Budget, seed: int) -> Split:
    """Seeded, disjoint train / selection / held-out rows of GSM8K (hub id, hub-layout folder or jsonl file).

    The held-out rows follow ``budget.held_out_skip`` rows of the seeded order that are passed over. Labels:
    ``answer`` (the number after ``####``) and ``solution`` (the worked solution, which the TrainingFreeGRPO
    reflection reads as a reference; it is never a program input).
    """
    sizes = {"train": budget.train_n, "selection": budget.selection_n}
    if budget.held_out_skip:
        sizes["passed_over"] = budget.held_out_skip
    parts = gsm8k_splits(source, seed=seed, sizes={**sizes, "test": budget.test_n})
    train, selection, test = ([as_question(e) for e in parts[name]] for name in ("train", "selection", "test"))
    return Split("gsm8k", train, selection, test, source, make_program=gsm8k_program,
                 reference_fields=("answer", "solution"))


def tickets_split(budget: Budget, seed: int) -> Split:
    """Generated support tickets: train and selection from the training names, held-out from the others."""
    from tfgrpo_dspy.kits.tickets.generator import generate_tickets
    from tfgrpo_dspy.kits.tickets.metric import queue_match
    from tfgrpo_dspy.kits.tickets.task import TRAIN_DEFAULTS
    from tfgrpo_dspy.kits.tickets.task import make_program as ticket_program

    pool = generate_tickets(budget.train_n + budget.selection_n, seed, split="train")
    test = generate_tickets(budget.test_n, seed, split="heldout")
    budgeted = ("group_size", "epochs", "temperature", "num_threads", "reference_fields")
    return Split("tickets", pool[: budget.train_n], pool[budget.train_n :], test, f"generated (seed {seed})",
                 make_program=ticket_program, reference_fields=TRAIN_DEFAULTS["reference_fields"], metric=queue_match,
                 input_field="ticket", answer_field="queue",
                 tfgrpo_settings={k: v for k, v in TRAIN_DEFAULTS.items() if k not in budgeted})


def banking77_split(source: str, budget: Budget, seed: int) -> Split:
    """Seeded, disjoint train / selection / held-out queries of one Banking77 file (a CSV of text,category rows,
    the hub id or a hub-layout folder, whose train split is read), after ``budget.held_out_skip`` rows of the seeded
    order passed over before the held-out ones. Each query appears once: the kit drops repeated queries."""
    from tfgrpo_dspy.kits.banking77 import TRAIN_DEFAULTS, banking77_splits, intent_match
    from tfgrpo_dspy.kits.banking77 import make_program as banking77_program

    sizes = {"train": budget.train_n, "selection": budget.selection_n}
    if budget.held_out_skip:
        sizes["passed_over"] = budget.held_out_skip
    parts = banking77_splits(source, seed=seed, sizes={**sizes, "test": budget.test_n})
    budgeted = ("group_size", "epochs", "temperature", "num_threads", "reference_fields")
    return Split("banking77", parts["train"], parts["selection"], parts["test"], source,
                 make_program=banking77_program, reference_fields=TRAIN_DEFAULTS["reference_fields"],
                 metric=intent_match, input_field="query", answer_field="intent",
                 tfgrpo_settings={k: v for k, v in TRAIN_DEFAULTS.items() if k not in budgeted})


# The tickets studies' rows: the demo's training data (train split, seed 0), development tickets on which a default
# is chosen, and held-out tickets on which nothing was chosen (every study before issue 27 held out seed 0's).
DEMO_TRAIN_SEED, HELD_OUT_SEED, DEVELOPMENT_SEED = 0, 1000, 2000


def demo_tickets(held_out_n: int) -> tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]:
    """The demo's 24 training and 16 selection tickets and ``held_out_n`` held-out tickets of `HELD_OUT_SEED`."""
    from tfgrpo_dspy.kits.tickets.generator import generate_tickets

    pool = generate_tickets(40, DEMO_TRAIN_SEED, split="train")
    return pool[:24], pool[24:], generate_tickets(held_out_n, HELD_OUT_SEED, split="heldout")


def held_out_tickets(n: int, seed: int) -> list[dspy.Example]:
    """``n`` tickets of the held-out split (names no training ticket has), seed ``seed``."""
    from tfgrpo_dspy.kits.tickets.generator import generate_tickets

    return generate_tickets(n, seed, split="heldout")
