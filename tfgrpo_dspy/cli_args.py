"""The ``tfgrpo`` command's arguments: the tasks it knows by name, and the parser of its command line.

Every flag is declared here, with a type that rejects a bad value before anything runs; the commands that read
them are in `tfgrpo_dspy.cli`.
"""

from __future__ import annotations

import argparse
from typing import Any

from tfgrpo_dspy.kits.banking77.task import BANKING77_TASKS
from tfgrpo_dspy.kits.math.task import MATH_TASKS
from tfgrpo_dspy.kits.tickets.task import TICKET_TASKS
from tfgrpo_dspy.kits.web.task import WEB_TASKS
from tfgrpo_dspy.kits.wordproblems.task import WORDPROBLEM_TASKS
from tfgrpo_dspy.settings import DEFAULT_TOP_K
from tfgrpo_dspy.tasks import Task

TASKS: dict[str, Task] = {**WORDPROBLEM_TASKS, **TICKET_TASKS, **BANKING77_TASKS, **MATH_TASKS, **WEB_TASKS}


# -- argument groups ----------------------------------------------------------------------------
def _at_least(minimum: int) -> Any:
    """An argparse type: a whole number >= ``minimum``, so a bad count blames its flag before anything runs."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value

    return count


def _top_k(text: str) -> int:
    """``--top-k``: a count of lessons per call; 0 means every lesson (None in the API)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0 (0 = every lesson), got {text!r}")
    return value


def _add_lm_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lm", default="local", help="policy LM: 'local' (embedded, default), 'local:0.5b', "
                        "or any DSPy model string such as openai/gpt-4o-mini or deepseek/deepseek-chat")
    parser.add_argument("--api-base", help="URL of an OpenAI-compatible server (vLLM, SGLang, Ollama) for --lm")
    parser.add_argument("--api-key", help="API key for --lm (default: the provider's environment variable)")
    parser.add_argument("--reflection-lm", help="LM for the reflection steps and judges (default: --lm)")
    parser.add_argument("--reflection-api-base", help="URL of an OpenAI-compatible server for --reflection-lm")
    parser.add_argument("--max-tokens", type=_at_least(1), help="cap on tokens per LM completion (default: the LM's)")


def _add_data_args(parser: argparse.ArgumentParser, split: str) -> None:
    parser.add_argument("--task", required=True, choices=sorted(TASKS), help="the task to run")
    parser.add_argument("--source", help=f"hub id or local file/folder for the {split} data (default: the task's)")
    parser.add_argument("--n", type=_at_least(1), help=f"number of {split} examples (default: the task's)")
    parser.add_argument("--seed", type=_at_least(0), help="data sampling and run seed (default: the task's data seed, "
                        "42 for dapo-math as in the paper, 0 otherwise; run seed 0)")


def _add_program_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-iters", type=_at_least(1),
                        help="agent steps per question (agent tasks; default: the task's)")
    parser.add_argument("--allow-address", action="append", metavar="IP", dest="allow_addresses",
                        help="let the browsing agent reach this non-public IP, e.g. 127.0.0.1 for a local "
                        "mirror of a site (repeatable; browsing tasks only)")


def _add_train_command(sub: Any) -> None:
    train = sub.add_parser("train", help="learn an experience library for a task")
    _add_data_args(train, "training")
    _add_program_args(train)
    _add_lm_args(train)
    train.add_argument("--out", required=True, help="output folder: library.json, program.json, stats.json, log/")
    train.add_argument("--group-size", type=_at_least(1), help="rollouts per example; 1 needs --all-groups")
    train.add_argument("--all-groups", action="store_true", help="every group reaches the reflection, not only "
                       "groups with mixed rewards: learns from single rollouts against the ground truth")
    train.add_argument("--epochs", type=_at_least(1))
    train.add_argument("--batch-size", type=_at_least(1))
    train.add_argument("--temperature", type=float)
    train.add_argument("--max-experiences", type=_at_least(1))
    train.add_argument("--max-words", type=_at_least(1))
    train.add_argument("--num-threads", type=_at_least(1))
    train.add_argument("--no-ground-truth", action="store_true", help="reward = agreement with the majority answer")
    train.add_argument("--no-summaries", action="store_true",
                       help="extraction reads trajectories instead of per-rollout summaries (fewer calls)")
    train.add_argument("--no-generalize", action="store_true",
                       help="keep proposed lessons that restate their training input instead of rewriting them")
    train.add_argument("--library", help="warm start: begin from this library JSON (its ids are kept)")
    # --selection-n, as in `tfgrpo demo`; --val-n, its earlier name, still works.
    train.add_argument("--selection-n", "--val-n", dest="selection_n", type=_at_least(1),
                       help="hold out this many more examples of the source as the selection set (default: the "
                       "task's own count where it has one, banking77 40; else the optimizer's val_fraction of the "
                       "training examples)")
    train.add_argument("--val-fraction", type=float, help="share of the training examples held out for selection "
                       "(0 = no selection: every step's edits are kept, the paper's recipe)")
    train.add_argument("--no-gate", action="store_true", help="keep every step's edits; ship the best scored library")
    train.add_argument("--track", choices=["mlflow"], help="also log each step to MLflow (its MLFLOW_TRACKING_URI; "
                       "the mlflow extra)")
    train.add_argument("--placement", choices=["instructions", "input", "both"], help="where the lessons go")
    train.add_argument("--route-by", choices=["lesson", "example", "answer"], help="which lessons a call sees: "
                       "those most like its input (lesson, the default), those verified on the training input nearest "
                       "to it (example), or those whose target is that input's answer (answer)")
    train.add_argument("--top-k", type=_top_k, help="show each call only its k most relevant lessons "
                       f"(default {DEFAULT_TOP_K}; 0 = every lesson, the paper's recipe)")
    train.add_argument("--max-lm-calls", type=_at_least(1), help="stop cleanly after this many billed LM calls")
    train.add_argument("--max-tokens-budget", type=_at_least(1), help="stop cleanly after this many tokens")
    train.add_argument("--max-cost", type=float, help="stop cleanly after this many USD (where the LM reports cost)")
    train.add_argument("--estimate", action="store_true",
                       help="print the number of calls the run would make; spend nothing")


def _add_eval_command(sub: Any) -> None:
    evaluate = sub.add_parser("eval", help="Mean@k and Pass@k with and without a library")
    _add_data_args(evaluate, "evaluation")
    _add_program_args(evaluate)
    _add_lm_args(evaluate)
    evaluate.add_argument("--library", help="an experience library JSON to evaluate against no library")
    evaluate.add_argument("--k", type=_at_least(1), help="samples per example (default: the task's)")
    evaluate.add_argument("--temperature", type=float, help="sampling temperature (default: the task's)")
    evaluate.add_argument("--placement", choices=["instructions", "input", "both"], default="instructions",
                          help="where the library's lessons go (as in training)")
    evaluate.add_argument("--top-k", type=_top_k, default=DEFAULT_TOP_K,
                          help="show each call only its k most relevant lessons (as in training; "
                          f"default {DEFAULT_TOP_K}, 0 = every lesson)")
    evaluate.add_argument("--num-threads", type=_at_least(1), default=4)
    evaluate.add_argument("--out", help="write the reports as JSON here")


def _add_demo_command(sub: Any) -> None:
    demo = sub.add_parser("demo", help="the main job on the embedded model, offline: before, train, after")
    demo.add_argument("--lm", default="local", help="LM to use (default: the embedded model)")
    demo.add_argument("--out", default="tfgrpo-demo", help="output folder (resumable log in OUT/log)")
    demo.add_argument("--task", default="tickets", choices=sorted(TASKS), help="the task (default: tickets, "
                      "house rules that only feedback reveals)")
    demo.add_argument("--train-n", type=_at_least(1), help="training examples")
    demo.add_argument("--selection-n", type=_at_least(1), help="selection examples (libraries must win on them)")
    demo.add_argument("--heldout-n", type=_at_least(1), help="held-out examples")
    demo.add_argument("--seed", type=_at_least(0), default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfgrpo", description="Training-Free GRPO for DSPy programs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_train_command(sub)
    _add_eval_command(sub)

    report = sub.add_parser("report", help="an HTML page (and a PNG of its charts) of a training run")
    report.add_argument("run_dir", help="a run's log directory (OUT/log of tfgrpo train)")
    report.add_argument("--out", help="where to write the HTML (default RUN_DIR/report.html)")

    show = sub.add_parser("show", help="print a library")
    show.add_argument("library")
    show.add_argument("--audit", action="store_true", help="also print the audit log")

    diff = sub.add_parser("diff", help="what changed between two libraries")
    diff.add_argument("old")
    diff.add_argument("new")

    _add_demo_command(sub)

    sub.add_parser("tasks", help="list the tasks")
    return parser
