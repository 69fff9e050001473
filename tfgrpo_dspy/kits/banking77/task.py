"""The "banking77" task: real online-banking queries, a Predict program naming one of 77 intents, intent match.

Where the rows come from:

- ``--source FILE.csv`` (or one .jsonl / .parquet file) is a single split. Its distinct queries are shuffled with
  the seed; ``tfgrpo train`` takes the first rows of that order (training, then selection), ``tfgrpo eval`` the
  rows after the first ``HELD_OUT_START``, so training and evaluation on the same file with the same ``--seed``
  never share a query. On a file of other rows (a test split) evaluation also leaves out its first
  ``HELD_OUT_START`` rows of that order.
- no ``--source``: ``PolyAI/banking77`` on the hub; a hub-layout folder works the same way offline. Training reads
  its train split, evaluation its test split (every row in file order, or ``--n`` rows of the seed's order).
"""

from __future__ import annotations

import logging
from pathlib import Path

import dspy

from tfgrpo_dspy.kits.banking77.data import BANKING77_HUB_ID, load_banking77, seeded_order
from tfgrpo_dspy.kits.banking77.metric import intent_match
from tfgrpo_dspy.kits.banking77.program import make_program
from tfgrpo_dspy.tasks import Task, TaskData

logger = logging.getLogger(__name__)

# 80 training queries, about one per intent (the 77 intents are near-balanced in the shared file: 35 to 187 rows
# each), and 40 selection queries: enough for a candidate library's gain to show on the selection rows while a
# compile of groups of 4 stays at 320 rollouts per epoch. Chosen by this reasoning, not measured yet.
DEFAULT_TRAIN_N = 80
DEFAULT_SELECTION_N = 40
# Held-out rows of a single file start after the default training and selection rows of the seed's order.
HELD_OUT_START = DEFAULT_TRAIN_N + DEFAULT_SELECTION_N
# Carried over from the tickets kit, the other label task (see its TRAIN_DEFAULTS for the measurements there;
# none were made on Banking77): groups of 4 fill the embedded model's 4 parallel sequences, one epoch, the label as
# the reflection's reference, lessons from the induction over failures that share their label, at most 48 words,
# routed by the training queries they were verified on.
TRAIN_DEFAULTS = {"group_size": 4, "epochs": 1, "temperature": 0.7, "num_threads": 4,
                  "reference_fields": ("intent",), "extraction": False, "max_words": 48, "route_by": "example"}
# Greedy evaluation: one right intent per query, and greedy makes with/without-library runs comparable.
EVAL_DEFAULTS = {"k": 1, "temperature": 0.0}


def _is_single_file(source: str | None) -> bool:
    return source is not None and Path(source).expanduser().is_file()


def load_trainset(data: TaskData) -> list[dspy.Example]:
    """The first ``data.n`` (default DEFAULT_TRAIN_N) queries of the seed's order of the source's training rows;
    the CLI asks for training + selection rows at once and takes the selection rows from the end."""
    n = DEFAULT_TRAIN_N if data.n is None else data.n
    source = data.source or BANKING77_HUB_ID
    if _is_single_file(source) and n > HELD_OUT_START:
        logger.warning("%s is one file and evaluation reads its rows after the first %d of the shuffled order: "
                       "training on %d of them overlaps the evaluation rows", source, HELD_OUT_START, n)
    return seeded_order(load_banking77(source, split="train"), data.seed_or(0))[:n]


def load_evalset(data: TaskData) -> list[dspy.Example]:
    """Held-out queries: of a single file, the rows after the first HELD_OUT_START of the seed's order (every one
    of them, or the first ``data.n``); of the hub or a hub-layout folder, the test split."""
    source = data.source or BANKING77_HUB_ID
    seed = data.seed_or(0)
    end = None if data.n is None else HELD_OUT_START + data.n
    if _is_single_file(source):
        examples = seeded_order(load_banking77(source), seed)
        if len(examples) <= HELD_OUT_START:
            raise ValueError(f"{source} has {len(examples)} distinct queries; evaluation reads those after the first "
                             f"{HELD_OUT_START} of the seed-{seed} order (the training and selection rows of "
                             f"'tfgrpo train' on the same file), so there are none: give a file of more rows, or a "
                             "hub-layout folder whose test split is read whole")
        logger.info("%s is one file: evaluating on its rows after the first %d of the seed-%d order (training and "
                    "selection on the same file with the same --seed read those)", source, HELD_OUT_START, seed)
        return examples[HELD_OUT_START:end]
    examples = load_banking77(source, split="test")
    return examples if data.n is None else seeded_order(examples, seed)[: data.n]


BANKING77 = Task(
    name="banking77",
    description="Banking77: real online-banking queries labeled with one of 77 intents (a CSV of text,category "
    "rows, or PolyAI/banking77).",
    load_trainset=load_trainset,
    load_evalset=load_evalset,
    make_program=make_program,
    make_metric=lambda judge_lm=None: intent_match,
    answer_field="intent",
    train_defaults=TRAIN_DEFAULTS,
    eval_defaults=EVAL_DEFAULTS,
    default_train_n=DEFAULT_TRAIN_N,
    default_selection_n=DEFAULT_SELECTION_N,
)

BANKING77_TASKS: dict[str, Task] = {BANKING77.name: BANKING77}
