"""The ``tfgrpo`` command: train, eval, show, diff, report, demo, tasks.

This module is the dispatcher (`main`) and the commands that call a model: train, eval and demo. They make
their LMs with this module's `make_lm`, the name the tests replace with a scripted LM
(``monkeypatch.setattr(cli, "make_lm", ...)``), so a command that calls a model belongs here, not in a
submodule with its own reference to `make_lm`. The rest of the command line lives beside it:

    tfgrpo_dspy.cli_args          the arguments: every flag and the tasks by name (TASKS)
    tfgrpo_dspy.cli.inputs        the program, the examples and the output paths, checked before a call
    tfgrpo_dspy.cli.train_setup   train's optimizer settings, warm-start library and selection split
    tfgrpo_dspy.cli.output        what the commands print (step table, candidates, usage, eval lines)
    tfgrpo_dspy.cli.offline       the commands that call no model: show, diff, report, tasks
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.cli.inputs import _check_file, _make_program, load_examples
from tfgrpo_dspy.cli.offline import cmd_diff, cmd_report, cmd_show, cmd_tasks
from tfgrpo_dspy.cli.output import _eval_line, _format_usage, _print_library, format_candidates, format_steps, printable
from tfgrpo_dspy.cli.train_setup import _check_train_args, _train_data, _train_settings
from tfgrpo_dspy.cli_args import TASKS, build_parser
from tfgrpo_dspy.demo import scores
from tfgrpo_dspy.inference.evaluation import evaluate_at_k
from tfgrpo_dspy.library.jsonio import write_json_atomic
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.lm import make_lm
from tfgrpo_dspy.optimizer import TrainingAborted, TrainingFreeGRPO
from tfgrpo_dspy.report.story import plural
from tfgrpo_dspy.stats import compare_paired
from tfgrpo_dspy.tasks import TaskData

# The names other code reads from tfgrpo_dspy.cli, whichever module of the package defines them.
__all__ = [
    "COMMANDS", "TASKS", "build_parser", "cmd_demo", "cmd_diff", "cmd_eval", "cmd_report", "cmd_show", "cmd_tasks",
    "cmd_train", "format_candidates", "format_steps", "load_examples", "main", "make_lm", "printable",
]

logger = logging.getLogger("tfgrpo_dspy")


# -- the models --------------------------------------------------------------------------------
def _lms(args: argparse.Namespace) -> tuple[dspy.LM, dspy.LM]:
    """The policy LM and the reflection LM (the policy itself unless --reflection-lm names another)."""
    limits = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    policy = make_lm(args.lm, api_base=args.api_base, api_key=args.api_key, **limits)
    if getattr(args, "reflection_lm", None):
        reflection = make_lm(args.reflection_lm, api_base=args.reflection_api_base, **limits)
    else:
        reflection = policy
    return policy, reflection


# -- the commands that call a model -----------------------------------------------------------
def cmd_train(args: argparse.Namespace) -> int:
    task = TASKS[args.task]
    settings = _train_settings(task, args)
    warm_start = _check_train_args(args, settings)
    program = _make_program(task, args)  # before loading data: a bad option fails fast
    trainset, valset = _train_data(task, args)
    out = Path(args.out)
    library = {"initial_library": warm_start} if warm_start is not None else {}
    if args.estimate:
        optimizer = TrainingFreeGRPO(metric=task.make_metric(None), seed=args.seed or 0, **library, **settings)
        print(f"{task.name}: {len(trainset)} training examples; {optimizer.estimate(program, trainset, valset)}")
        return 0
    policy, reflection = _lms(args)
    dspy.configure(lm=policy)
    optimizer = TrainingFreeGRPO(metric=task.make_metric(reflection), reflection_lm=reflection, seed=args.seed or 0,
                                 log_dir=str(out / "log"), seed_rollouts=args.lm.startswith("local"), **library,
                                 **settings)
    print(f"{task.name}: {len(trainset)} training examples; {optimizer.estimate(program, trainset, valset)}")
    compiled = optimizer.compile(program, trainset=trainset, valset=valset)
    result = compiled.tfgrpo_result
    result.library.save(out / "library.json")
    compiled.save(str(out / "program.json"))
    write_json_atomic(out / "stats.json", result.to_dict())
    print(format_steps(result))
    if result.candidates:
        print(format_candidates(result))
    print(_format_usage(result))
    if result.stopped_reason:
        print(f"stopped early: {result.stopped_reason} (rerun the same command to resume)")
    print(f"\nlearned library ({plural(len(result.library), 'lesson')}) -> {out / 'library.json'}")
    _print_library(result.library)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    task = TASKS[args.task]
    # Every argument and file is checked before the first evaluation spends a call.
    out = _check_file(args.out, "--out") if args.out else None
    library = ExperienceLibrary.load(args.library) if args.library else None
    k = args.k if args.k is not None else task.eval_defaults.get("k", 1)
    temperature = args.temperature if args.temperature is not None else task.eval_defaults.get("temperature", 0.0)
    if not 0 <= temperature <= 2:
        raise ValueError(f"--temperature must be in [0, 2], got {temperature}")
    program = _make_program(task, args)  # before loading data: a bad option fails fast
    examples = load_examples(task.load_evalset, TaskData(source=args.source, n=args.n, seed=args.seed), "evaluation")
    policy, reflection = _lms(args)
    dspy.configure(lm=policy)
    metric = task.make_metric(reflection)
    reports = {"no library": evaluate_at_k(program, examples, metric, k=k, temperature=temperature,
                                           num_threads=args.num_threads, lm=policy,
                                           answer_field=task.answer_field)}
    if library is not None:
        reports["with library"] = evaluate_at_k(program, examples, metric, k=k, temperature=temperature,
                                                num_threads=args.num_threads, lm=policy, library=library,
                                                placement=args.placement, top_k=args.top_k or None,
                                                answer_field=task.answer_field)
    print(f"{task.name}: {len(examples)} examples, k={k}, temperature={temperature}")
    for name, report in reports.items():
        print(_eval_line(name, report))
    record: dict[str, Any] = {name: r.to_dict() for name, r in reports.items()}
    if library is not None:
        # The same examples with and without the library: a paired difference, as the demo reports it.
        comparison = compare_paired(scores(reports["no library"]), scores(reports["with library"]))
        print(f"  paired, with library vs without on the same {comparison.n} examples (Mean@{k}): "
              f"{comparison.verdict()}")
        record["comparison"] = comparison.to_dict()
    if out is not None:
        write_json_atomic(out, record)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Held-out accuracy before, train with selection, held-out accuracy after, on the embedded model."""
    from tfgrpo_dspy.demo import DemoSizes, run_demo

    defaults = DemoSizes()
    sizes = DemoSizes(train=args.train_n or defaults.train, selection=args.selection_n or defaults.selection,
                      heldout=args.heldout_n or defaults.heldout)
    lm = make_lm(args.lm, max_tokens=512)  # bounds a runaway generation
    dspy.configure(lm=lm)
    run_demo(TASKS[args.task], lm, Path(args.out), sizes=sizes, seed=args.seed)
    return 0


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "show": cmd_show, "diff": cmd_diff, "report": cmd_report,
            "demo": cmd_demo, "tasks": cmd_tasks}


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status: 0 done, 2 a bad argument or file, 3 training aborted."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("LiteLLM", "httpx", "dspy"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # A bad --source is reported once, in our own words (load_examples), not by the datasets library too.
    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    import datasets

    datasets.disable_progress_bars()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        return COMMANDS[args.command](args)
    except (ValueError, TypeError, OSError) as exc:  # OSError: a file or folder the system refused
        print(f"tfgrpo {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except TrainingAborted as exc:
        print(f"tfgrpo {args.command}: aborted: {exc}", file=sys.stderr)
        return 3
