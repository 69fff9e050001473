"""The ``tfgrpo`` command: train, eval, show, diff, report, demo, tasks (its arguments: `tfgrpo_dspy.cli_args`)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.cli_args import TASKS, build_parser
from tfgrpo_dspy.demo import scores
from tfgrpo_dspy.inference.evaluation import EvalReport, evaluate_at_k
from tfgrpo_dspy.library.jsonio import write_json_atomic
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.lm import make_lm
from tfgrpo_dspy.optimizer import TrainingAborted, TrainingFreeGRPO
from tfgrpo_dspy.report.story import plural
from tfgrpo_dspy.run.results import TrainingFreeGRPOResult
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings
from tfgrpo_dspy.stats import compare_paired
from tfgrpo_dspy.tasks import Task, TaskData

logger = logging.getLogger("tfgrpo_dspy")

# Control characters (terminal escapes) and the invisible marks that reorder or split the text around them (bidi
# overrides and isolates, line separators); newlines are kept: they separate lines.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


# -- helpers -----------------------------------------------------------------------------------
def _lms(args: argparse.Namespace) -> tuple[dspy.LM, dspy.LM]:
    limits = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    policy = make_lm(args.lm, api_base=args.api_base, api_key=args.api_key, **limits)
    if getattr(args, "reflection_lm", None):
        reflection = make_lm(args.reflection_lm, api_base=args.reflection_api_base, **limits)
    else:
        reflection = policy
    return policy, reflection


def _make_program(task: Task, args: argparse.Namespace) -> dspy.Module:
    """The task's program with the command line's program options; an option the task lacks is an error."""
    options = {"max_iters": args.max_iters, "allowed_addresses": args.allow_addresses}
    options = {name: value for name, value in options.items() if value is not None}
    unsupported = sorted(set(options) - task.program_options)
    if unsupported:
        flags = ", ".join({"max_iters": "--max-iters", "allowed_addresses": "--allow-address"}[n] for n in unsupported)
        raise ValueError(f"{flags} does not apply to task {task.name!r}")
    return task.make_program(**options)


def _format_usage(result: TrainingFreeGRPOResult) -> str:
    lines = []
    for role, usage in (("policy", result.policy_usage), ("reflection", result.reflection_usage),
                        ("selection", result.selection_usage)):
        cost = f", ${usage.cost:.4f}" if usage.cost else ""
        lines.append(f"  {role:<10} {usage.calls} calls ({usage.cache_hits} cached), "
                     f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens{cost}")
    return "\n".join(lines)


def format_steps(result: TrainingFreeGRPOResult) -> str:
    header = ("step epoch  reward  informative  lessons dropped  edits  gate             library  ~tokens  "
              "policy_tok  reflect_tok  select_tok  time_s")
    rows = [header]
    for s in result.steps:
        rows.append(
            f"{s.step:>4} {s.epoch:>5}  {s.mean_reward:>6.3f}  {s.informative_groups:>5}/{s.groups:<5}  "
            f"{s.lessons_proposed:>7} {s.lessons_dropped:>7}  {s.ops_applied:>5}  {s.gate:<15}  {s.library_size:>7}  "
            f"{s.library_tokens:>7}  {s.policy_usage.total_tokens:>10}  {s.reflection_usage.total_tokens:>11}  "
            f"{s.selection_usage.total_tokens:>10}  {s.wall_time_s:>6.0f}"
        )
    return "\n".join(rows)


def format_candidates(result: TrainingFreeGRPOResult) -> str:
    """The libraries scored on the selection set, with each decision; empty without a selection set."""
    if not result.candidates:
        return ""
    rows = [f"selection set: {result.selection_size} examples; shipped: {result.shipped}"]
    for c in result.candidates:
        decision = "accepted" if c.accepted else "rejected"
        rows.append(f"  {c.label:<26} score {c.score:.3f}  {decision:<8}  {c.size:>3} lessons  {c.reason}")
    return "\n".join(rows)


def printable(text: object) -> str:
    """Lesson texts come from an LM or a file: show control characters and bidi marks as visible escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                        else f"\\u{ord(m.group(0)):04x}", str(text))


def _print_library(library: ExperienceLibrary) -> None:
    print(printable(library.render()) or "(empty library)")


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


def _check_folder(path: str, flag: str) -> Path:
    """An output folder that exists or can be made: not a file, nor under one."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a folder: give a folder (it is made if missing)")
    _check_parents(folder, flag)
    return folder


def _check_file(path: str, flag: str) -> Path:
    """An output file that can be written: not a folder, nor under a file."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path} is a folder: give the name of the JSON file to write")
    _check_parents(target, flag)
    return target


def _check_parents(path: Path, flag: str) -> None:
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag} {path}: {parent} is a file, so nothing can be written under it")
            return


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


# -- commands ----------------------------------------------------------------------------------
def load_examples(load: Any, data: TaskData, what: str) -> list[dspy.Example]:
    """A task's examples, or one clear line when the source is empty or unreadable."""
    try:
        examples = load(data)
    except (ValueError, TypeError, FileNotFoundError):
        raise
    except Exception as exc:  # the datasets library reports bad files with many exception types
        where = f"--source {data.source}" if data.source else "the task's default source"
        raise ValueError(f"{where}: cannot read the {what} examples ({type(exc).__name__}: {exc})") from None
    if not examples:
        where = f"--source {data.source}" if data.source else "the task's default source"
        raise ValueError(f"{where} holds no {what} examples")
    return examples


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


def _eval_line(name: str, report: EvalReport) -> str:
    return (f"  {name:<16} Mean@{report.k} {100 * report.mean_at_k:5.1f}%   Pass@{report.k} "
            f"{100 * report.pass_at_k:5.1f}%   errors {report.program_errors + report.metric_errors}")


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


def cmd_show(args: argparse.Namespace) -> int:
    library = ExperienceLibrary.load(args.library)
    caps = f"max {library.max_experiences} lessons, {library.max_words} words each"
    print(f"{args.library}: {len(library)} lessons (~{library.approx_tokens()} tokens; {caps})")
    if library.routes:
        print(f"routed by {len(library.routes)} training inputs: a call sees the lessons of the nearest one "
              f"({sum(not r.lessons for r in library.routes)} of them route to no lesson)")
    for exp in library:
        where = f"added step {exp.added_step}, updated step {exp.updated_step}" if exp.added_step else ""
        sources = f"from examples {', '.join(map(str, exp.sources))}" if exp.sources else ""
        routed = sum(exp.id in r.lessons for r in library.routes)
        routes = f"routed from {routed} training inputs" if library.routes else ""
        details = "; ".join(part for part in (where, sources, routes, exp.record) if part)
        print(f"[{exp.label}] {printable(exp.text)}  ({details})")
    if args.audit:
        print("\naudit log:")
        for entry in library.audit_log:
            print(f"  step {entry.step}: {printable(entry.op):<6} {entry.status:<7} {printable(entry.detail)}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    print(printable(str(ExperienceLibrary.load(args.old).diff(ExperienceLibrary.load(args.new)))))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tfgrpo_dspy.report import write_report

    html_path, png_path = write_report(args.run_dir, args.out)
    print(f"wrote {html_path} and {png_path}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    for name, task in sorted(TASKS.items()):
        print(f"{name:<14} {task.description}")
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


if __name__ == "__main__":
    sys.exit(main())
