"""`tfgrpo demo` with some of the task's training settings changed: how long a cheaper recipe takes, and what it
learns, before the demo's own recipe changes.

It runs `tfgrpo_dspy.demo.run_demo` exactly as the command does (the same sizes, seeds, held-out verdicts and
``demo.json``), with ``--set`` overriding the task kit's training defaults. Try recipes on a development seed (the
demo's held-out rows are seed + 1000: seed 11 gives 1011, which no reported figure uses), and set ``DSPY_CACHEDIR``
to an empty folder so the wall time is the demo's from a fresh cache:

    DSPY_CACHEDIR=$(mktemp -d) python benchmarks/demo_trial.py --seed 11 --train-n 80 --selection-n 40 \\
        --set num_candidates=1 --set verify_batch=6 --out /tmp/demo-trial
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import dspy

from tfgrpo_dspy.cli import TASKS
from tfgrpo_dspy.demo import DemoSizes, run_demo
from tfgrpo_dspy.lm import make_lm


def setting(text: str) -> tuple[str, object]:
    """``name=value``, the value read as JSON (``1``, ``0.5``, ``true``, ``"answer"``) or else as a string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--set wants name=value, got {text!r}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="tickets", choices=sorted(TASKS))
    parser.add_argument("--lm", default="local")
    parser.add_argument("--seed", type=int, default=11, help="training seed; held-out rows are seed + 1000")
    parser.add_argument("--train-n", type=int, default=DemoSizes.train)
    parser.add_argument("--selection-n", type=int, default=DemoSizes.selection)
    parser.add_argument("--heldout-n", type=int, default=DemoSizes.heldout)
    parser.add_argument("--set", type=setting, action="append", default=[], metavar="NAME=VALUE",
                        help="a TrainingFreeGRPO setting that replaces the task kit's default (repeatable)")
    parser.add_argument("--out", required=True, help="output folder (resumable, as the demo's)")
    args = parser.parse_args()
    base = TASKS[args.task]
    task = replace(base, train_defaults={**base.train_defaults, **dict(args.set)})
    lm = make_lm(args.lm, max_tokens=512)  # as `tfgrpo demo`
    dspy.configure(lm=lm)
    started = time.monotonic()
    run_demo(task, lm, Path(args.out), sizes=DemoSizes(args.train_n, args.selection_n, args.heldout_n),
             seed=args.seed)
    print(f"{time.monotonic() - started:.0f} s with {dict(args.set)}")


if __name__ == "__main__":
    main()
