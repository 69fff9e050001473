"""The command line of benchmarks/compare.py: a preset, its overrides, the data, the run, the outputs."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy
from provenance import git_revision

from comparison.data import Split, banking77_split, gsm8k_split, tickets_split, wordproblems_split
from comparison.markdown import markdown_table
from comparison.methods import COMPILERS, ordered_methods
from comparison.outputs import RunFacts, build_report, throughput_at_start, write_outputs
from comparison.plot import write_plot
from comparison.presets import ABLATIONS, PRESETS, Budget
from comparison.records import MethodResult
from comparison.run import run_comparison
from comparison.store import RunStore, engine_state, runs_manifest
from comparison.summary import flip_line, repeatability
from tfgrpo_dspy.kits.banking77 import BANKING77_HUB_ID
from tfgrpo_dspy.kits.math.data import GSM8K_HUB_ID

logger = logging.getLogger("compare")
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def parse_lm_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with the value as a bool, an int or a float when it reads as one (``n_parallel=4``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--lm-option wants KEY=VALUE, got {text!r}")
    if value.strip().lower() in ("true", "false"):
        return key.strip(), value.strip().lower() == "true"
    for kind in (int, float):
        try:
            return key.strip(), kind(value)
        except ValueError:
            pass
    return key.strip(), value


def parse_args(argv: Sequence[str] | None, doc: str = __doc__ or "") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compare.py", description=doc.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--lm", default="local", help="'local', 'local:0.5b' (engine-backed LMs only)")
    parser.add_argument("--lm-option", action="append", type=parse_lm_option, default=[], metavar="KEY=VALUE",
                        help="override one of the preset's LM options (e.g. n_parallel=2); repeatable")
    parser.add_argument("--tfgrpo-option", action="append", type=parse_lm_option, default=[], metavar="KEY=VALUE",
                        help="a TrainingFreeGRPO setting every tfgrpo method takes last (e.g. verify_precision=0.4; "
                             "use its own --stem); repeatable")
    parser.add_argument("--methods", nargs="+", choices=list(COMPILERS),
                        help="the methods to run (default: the preset's)")
    ablations = parser.add_mutually_exclusive_group()
    ablations.add_argument("--ablations", dest="ablations", action="store_true", default=None,
                           help="also run direct_tips, group1 and no_gt")
    ablations.add_argument("--no-ablations", dest="ablations", action="store_false")
    parser.add_argument("--source", help="the gsm8k or banking77 preset's data: a hub id, a hub-layout folder, or a "
                        f".jsonl (gsm8k) or .csv (banking77) file (default {GSM8K_HUB_ID}, {BANKING77_HUB_ID})")
    parser.add_argument("--no-wordproblems", dest="wordproblems", action="store_false",
                        help="skip the generated word problems (presets of the wordproblems task)")
    parser.add_argument("--gsm8k", metavar="PATH",
                        help="also compare on GSM8K problems from this file (presets of the wordproblems task)")
    parser.add_argument("--no-repeat", action="store_true",
                        help="skip the preset's second evaluation of `none` (the flip rate)")
    parser.add_argument("--gate-checks", type=int, metavar="N",
                        help="score on the held-out rows at most N libraries the gated tfgrpo run decided on "
                             "(default: the preset's; 0 = none)")
    parser.add_argument("--seeds", type=int, help="override the preset's number of seeds")
    parser.add_argument("--more-seeds-for", nargs="+", choices=list(COMPILERS), metavar="METHOD",
                        help="with --seeds N > 1: compile only these methods on seeds 1..N-1 (with none, to pair "
                             "with, and what they read from); the rest keep one compile, seed 0")
    parser.add_argument("--data-seed", type=int, help="seed of the data split, the same for every method "
                                                      "(default: the preset's)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--stem", help="output file stem (default compare_<preset>)")
    parser.add_argument("--runs", type=Path, metavar="DIR",
                        help="where finished compiles and evaluations are kept (default <out-dir>/<stem>.runs)")
    parser.add_argument("--replot", type=Path, metavar="JSON",
                        help="redraw the PNG of a saved comparison (next to the JSON) and exit; runs nothing")
    args = parser.parse_args(argv)
    if args.replot:
        return args
    if PRESETS[args.preset].task != "wordproblems":
        if args.gsm8k or not args.wordproblems:
            parser.error(f"the {args.preset} preset has its own data; --gsm8k and --no-wordproblems are for the "
                         "presets of generated word problems")
    elif not args.wordproblems and not args.gsm8k:
        parser.error("nothing to run: --no-wordproblems needs --gsm8k PATH")
    if args.gsm8k and not Path(args.gsm8k).exists():
        parser.error(f"--gsm8k {args.gsm8k}: no such file")
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be >= 1")
    if args.gate_checks is not None and args.gate_checks < 0:
        parser.error("--gate-checks must be >= 0")
    if args.data_seed is not None and args.data_seed < 0:
        parser.error("--data-seed must be >= 0")
    if args.more_seeds_for:
        seeds = args.seeds if args.seeds is not None else PRESETS[args.preset].seeds
        if seeds < 2:
            parser.error("--more-seeds-for needs --seeds N with N > 1")
        methods = args.methods or PRESETS[args.preset].methods
        missing = [m for m in args.more_seeds_for if m not in methods]
        if missing:
            parser.error(f"--more-seeds-for {' '.join(missing)}: not among the methods run ({' '.join(methods)})")
    return args


def preset_budget(args: argparse.Namespace) -> Budget:
    """The preset with the command line's overrides: seeds, data seed, the checks, and LM options over the preset's.

    The preset's ``lm_options`` are the embedded model's server options, so they apply to ``--lm local...``
    only; ``--lm-option`` always applies.
    """
    budget = PRESETS[args.preset]
    options = dict(budget.lm_options) if args.lm.startswith("local") else {}
    options.update(dict(args.lm_option))
    budget = replace(budget, lm_options=options, tfgrpo_options=dict(args.tfgrpo_option))
    if getattr(args, "no_repeat", False):
        budget = replace(budget, repeat_none=False)
    if getattr(args, "gate_checks", None) is not None:
        budget = replace(budget, gate_checks=args.gate_checks)
    if getattr(args, "data_seed", None) is not None:
        budget = replace(budget, data_seed=args.data_seed)
    if getattr(args, "more_seeds_for", None):
        budget = replace(budget, more_seeds_for=tuple(args.more_seeds_for))
    return replace(budget, seeds=args.seeds) if args.seeds is not None else budget


def chosen_methods(args: argparse.Namespace, budget: Budget) -> list[str]:
    methods = list(args.methods or budget.methods)
    if args.ablations is True:
        methods += [m for m in ABLATIONS if m not in methods]
    elif args.ablations is False:
        methods = [m for m in methods if m not in ABLATIONS]
    return ordered_methods(methods)


def build_splits(args: argparse.Namespace, budget: Budget) -> dict[str, Split]:
    if budget.task == "gsm8k":
        return {"gsm8k": gsm8k_split(args.source or GSM8K_HUB_ID, budget, budget.data_seed)}
    if budget.task == "banking77":
        return {"banking77": banking77_split(args.source or BANKING77_HUB_ID, budget, budget.data_seed)}
    if budget.task == "tickets":
        return {"tickets": tickets_split(budget, budget.data_seed)}
    splits: dict[str, Split] = {}
    if args.wordproblems:
        splits["wordproblems"] = wordproblems_split(budget, budget.data_seed)
    if args.gsm8k:
        splits["gsm8k"] = gsm8k_split(args.gsm8k, budget, budget.data_seed)
    return splits


def build_lm(spec: str, options: dict[str, Any]) -> dspy.LM:
    """The LM every role copies (a separate function so tests can hand in a scripted one)."""
    from tfgrpo_dspy.lm import make_lm

    return make_lm(spec, **options)


def main(argv: Sequence[str] | None = None, doc: str = __doc__ or "") -> int:
    args = parse_args(argv, doc)
    if args.replot:
        print(f"wrote {write_plot(json.loads(args.replot.read_text()), args.replot.with_suffix('.png'))}")
        return 0
    started, clock, load_start = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter(), os.getloadavg()[0]
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logger.setLevel(logging.INFO)
    budget = preset_budget(args)
    methods = chosen_methods(args, budget)
    splits = build_splits(args, budget)
    stem = args.stem or f"compare_{args.preset}"
    store = RunStore(args.runs or args.out_dir / f"{stem}.runs")
    lm = build_lm(args.lm, budget.lm_options)
    finished = store.open(runs_manifest(args.preset, budget, args.lm, splits, engine_state(lm)))
    if finished:
        logger.info("resuming: %d method record(s) in %s are reused", finished, store.root)
    command = shlex.join(["python", *(sys.argv if argv is None else ["benchmarks/compare.py", *argv])])
    facts = RunFacts(args.preset, budget, args.lm, command, git_revision(), started, round(load_start, 2),
                     throughput_at_start(lm), store.root)
    # Each pass of a run over several sessions rewrites the report; the log keeps every pass's machine speed.
    logger.info("at the start: load average %.2f, calibration %s", load_start, facts.throughput_at_start)
    dspy.configure(lm=lm)
    per_task: dict[str, list[MethodResult]] = {}

    def save(complete: bool) -> list[Path]:
        report = build_report(facts, wall_seconds=time.perf_counter() - clock,
                              load_at_end=round(os.getloadavg()[0], 2),
                              splits={t: splits[t] for t in per_task}, per_task=per_task)
        report["complete"] = complete
        return write_outputs(report, args.out_dir, stem)

    for task, split in splits.items():
        logger.info("%s: %d train / %d selection / %d held-out; methods %s", task, len(split.train),
                    len(split.selection), len(split.test), methods)

        def partial(results: list[MethodResult], task: str = task) -> None:
            per_task[task] = results
            save(complete=False)  # an interrupted run keeps every method finished so far

        per_task[task] = run_comparison(split, lm, budget, methods, store=store, on_result=partial)
    paths = save(complete=True)
    for task, results in per_task.items():
        print(f"\n## {task}\n")
        if budget.repeat_none:
            print(flip_line(repeatability(results)) + "\n")
        print(markdown_table(results, budget.k))
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0
