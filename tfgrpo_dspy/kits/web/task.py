"""CLI tasks for web browsing: WebWalkerQA with the paper's web settings.

Training draws from the ``silver`` split and evaluation from ``main`` (the 680
human-checked questions), so the two never overlap. A local single file has no
splits and serves both. Defaults follow the paper's web recipe: groups of 3,
3 epochs, rollout temperature 0.7; evaluation at temperature 0.3.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import dspy

from tfgrpo_dspy.kits.web.agent import WebWalkerAgent
from tfgrpo_dspy.kits.web.data import HUB_ID, load_webwalkerqa, load_webwalkerqa_subset, stratified_subset
from tfgrpo_dspy.kits.web.fetch import FetchPolicy
from tfgrpo_dspy.kits.web.judge import WebAnswerJudge, overlap_metric
from tfgrpo_dspy.tasks import Task, TaskData

TRAIN_DEFAULTS = {"group_size": 3, "epochs": 3, "temperature": 0.7, "reference_fields": ("answer",)}
EVAL_DEFAULTS = {"k": 1, "temperature": 0.3}
DEFAULT_TRAIN_N = 51
DEFAULT_EVAL_N = 68


def _split_for(data: TaskData, split: str) -> str:
    # A single local file is one split already; the split name is ignored for it.
    return "main" if data.source and Path(data.source).expanduser().is_file() else split


def _load(data: TaskData, split: str, default_n: int) -> list[dspy.Example]:
    split = _split_for(data, split)
    if data.n is not None:
        return load_webwalkerqa_subset(data.n, data.seed_or(0), data.source, split)
    # No --n: the paper's subset size, or every question of a smaller source (a local site's own set).
    examples = load_webwalkerqa(data.source, split)
    if not examples:
        raise ValueError(f"no WebWalkerQA examples in {data.source or HUB_ID} (split {split})")
    return stratified_subset(examples, min(default_n, len(examples)), data.seed_or(0))


def load_trainset(data: TaskData) -> list[dspy.Example]:
    """Stratified (4:7:6) training questions from the silver split (default 51, as in the paper)."""
    return _load(data, "silver", DEFAULT_TRAIN_N)


def load_evalset(data: TaskData) -> list[dspy.Example]:
    """Stratified (4:7:6) evaluation questions from the main split (default 68)."""
    return _load(data, "main", DEFAULT_EVAL_N)


def make_web_agent(*, max_iters: int = 8, allowed_addresses: Collection[str] = ()) -> WebWalkerAgent:
    """The browsing agent; ``allowed_addresses`` opens non-public IPs (a local mirror at 127.0.0.1)."""
    return WebWalkerAgent(policy=FetchPolicy(allowed_addresses=frozenset(allowed_addresses)), max_iters=max_iters)


def make_judge_metric(judge_lm: dspy.LM | None) -> WebAnswerJudge:
    """An LLM judge on ``judge_lm`` (None: the LM configured when the metric runs)."""
    return WebAnswerJudge(judge_lm)


def make_overlap_metric(judge_lm: dspy.LM | None) -> Callable[..., dspy.Prediction]:
    """The token-F1 metric; ``judge_lm`` is not used."""
    return overlap_metric


WEBWALKERQA = Task(
    name="webwalkerqa",
    description="WebWalkerQA: answer by browsing a website from its root URL; LLM-judge reward",
    load_trainset=load_trainset,
    load_evalset=load_evalset,
    make_program=make_web_agent,
    program_options=frozenset({"max_iters", "allowed_addresses"}),
    make_metric=make_judge_metric,
    answer_field="answer",
    train_defaults=dict(TRAIN_DEFAULTS),
    eval_defaults=dict(EVAL_DEFAULTS),
    default_train_n=DEFAULT_TRAIN_N,
    default_eval_n=DEFAULT_EVAL_N,
)

WEBWALKERQA_F1 = Task(
    name="webwalkerqa-f1",
    description="WebWalkerQA with a token-F1 reward instead of a judge (cheap, stricter on phrasing)",
    load_trainset=load_trainset,
    load_evalset=load_evalset,
    make_program=make_web_agent,
    program_options=frozenset({"max_iters", "allowed_addresses"}),
    make_metric=make_overlap_metric,
    answer_field="answer",
    train_defaults=dict(TRAIN_DEFAULTS),
    eval_defaults=dict(EVAL_DEFAULTS),
    default_train_n=DEFAULT_TRAIN_N,
    default_eval_n=DEFAULT_EVAL_N,
)

WEB_TASKS: dict[str, Task] = {task.name: task for task in (WEBWALKERQA, WEBWALKERQA_F1)}
