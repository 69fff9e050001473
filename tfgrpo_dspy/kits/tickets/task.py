"""The "tickets" task: synthetic support tickets, a Predict program routing them, queue match."""

from __future__ import annotations

from functools import partial

import dspy

from tfgrpo_dspy.kits.tickets.generator import Split, generate_tickets
from tfgrpo_dspy.kits.tickets.metric import queue_match
from tfgrpo_dspy.kits.tickets.rules import QUEUES
from tfgrpo_dspy.tasks import Task, TaskData

# 80 training and 40 selection tickets: every house rule about eight and four times (10 rules taken in turn), so
# a rule can be induced from several failures and verified on more. At 24 + 16 compiles kept 1-3 lessons.
DEFAULT_TRAIN_N = 80
DEFAULT_SELECTION_N = 40
DEFAULT_EVAL_N = 100  # every house rule ten times
# Groups of 4 fill the 4 parallel sequences of the embedded model; one epoch = one library update. The
# reference is the queue only: the rule that decided it is the answer key, not something feedback reveals.
# Lessons come from the induction only (extraction=False): on training runs the per-group comparison never
# proposed a ticket lesson (dev seed 11: 19 all-failed groups, 8 of 21 minutes, none; the two compiles of
# training seed 0 on 2026-12-02: 9 and 7 mixed groups, none), while the induction over failures that share
# their queue found every lesson that was kept. At 32 words, 12 of 18 induced rules were dropped as too long
# even after a shortening call (dev seed 11), so a ticket rule may have 48.
# Lessons are routed by answer (a call sees the lessons whose target is the queue of its nearest training ticket)
# and an induced rule's action is the queue its failures share, written in code: on development seed 11 (80 + 40
# tickets, 100 held-out; benchmarks/results/compare_tickets_dev.md) routed by the verified examples no candidate
# verified, routed by answer with the model's own actions 20.0% (one lesson), with the shared queue as action 28.0%
# against none's 12.0% (+16.0 [+9.0, +24.0], 16 won / 0 lost). Routed by answer the shift check is off (see
# TrainingFreeGRPOSettings.verify_shift); the gate still compares each step with the selection set's best constant.
# That action reads "route it to <queue>": on the same development seed, "answer with queue: <queue>" kept 2
# lessons and scored 28.0%, "route it to <queue>" kept 4 and scored 45.0% (+17.0 [+9.0, +25.0], 19 won / 2 lost,
# p < 0.001; benchmarks/lesson_wording.py found the model follows the second wording better).
TRAIN_DEFAULTS = {"group_size": 4, "epochs": 1, "temperature": 0.7, "num_threads": 4,
                  "reference_fields": ("queue",), "extraction": False, "max_words": 48, "route_by": "answer",
                  "induction_action": "reference", "reference_action": "route it to {answer}"}
# Greedy evaluation: routing has one right answer, and greedy makes with/without-library runs comparable.
EVAL_DEFAULTS = {"k": 1, "temperature": 0.0}


class RouteTicket(dspy.Signature):
    __doc__ = (
        "Route the customer support ticket to exactly one of these queues: "
        + ", ".join(QUEUES)
        + ". The first line of the ticket gives the customer's plan and region. "
        "Answer with the queue name only, spelled exactly as listed."
    )

    ticket: str = dspy.InputField(desc="the support ticket: a 'Plan: ... | Region: ...' line, the message, a sign-off")
    queue: str = dspy.OutputField(desc="one queue name from the list, nothing else")


def make_program() -> dspy.Module:
    """A fresh Predict program: ticket -> queue.

    Predict, not ChainOfThought: the queue is a lookup of house rules the model cannot derive
    by reasoning; what it lacks is the rules, which the library supplies. An answer of a few
    tokens instead of ~200 tokens of reasoning makes each rollout many times cheaper for the
    1.5B model on CPU, and keeps the with/without-library comparison about the lessons.
    """
    return dspy.Predict(RouteTicket)


def load_split(split: Split, default_n: int, data: TaskData) -> list[dspy.Example]:
    """Generated tickets of one split; ``data.n`` (default ``default_n``) and ``data.seed`` apply."""
    if data.source is not None:
        raise ValueError(f"tickets generates its tickets; source must be None, got {data.source!r}")
    return generate_tickets(default_n if data.n is None else data.n, data.seed_or(0), split=split)


TICKETS = Task(
    name="tickets",
    description="Synthetic support tickets routed to queues by a made-up company's house rules.",
    load_trainset=partial(load_split, "train", DEFAULT_TRAIN_N),
    load_evalset=partial(load_split, "heldout", DEFAULT_EVAL_N),
    make_program=make_program,
    make_metric=lambda judge_lm=None: queue_match,
    answer_field="queue",
    train_defaults=TRAIN_DEFAULTS,
    eval_defaults=EVAL_DEFAULTS,
    default_train_n=DEFAULT_TRAIN_N,
    default_selection_n=DEFAULT_SELECTION_N,
    default_eval_n=DEFAULT_EVAL_N,
)

TICKET_TASKS: dict[str, Task] = {TICKETS.name: TICKETS}
