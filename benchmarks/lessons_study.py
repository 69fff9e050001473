"""Where do lessons help a small policy? Placement, dose and kind of a FIXED library, measured paired.

No optimizer runs here: a fixed, hand-written library is put into the same program in different ways,
and every condition is scored on the same held-out rows with the same greedy decoding, so each
difference is paired and carries a bootstrap interval and an exact sign-test p-value:

    none                        the program without lessons
    <lib>@instructions          the lessons in the system instructions (a marked block)
    <lib>@input                 the lessons as an ``experiences`` input field before the task input
    <lib>@both                  both
    <lib>@<placement>+top<k>    only the k lessons most relevant to each input (BM25)
    placebo@<placement>         as many neutral sentences of the same length, no strategy: the effect
                                of changing the prompt at all, apart from what the lessons say

Two kinds of lessons on two tasks:
    gsm8k    reasoning tips (six general GSM8K strategies) on real GSM8K problems (ChainOfThought)
    tickets  domain rules (the house rules of a synthetic support desk) that the model cannot guess
             (Predict; see tfgrpo_dspy/kits/tickets, a seeded synthetic task)

    python benchmarks/lessons_study.py --gsm8k /work/shared/data/gsm8k/train.jsonl       # the default grid
    python benchmarks/lessons_study.py --tasks tickets --conditions none rules@input      # a part of it

Every finished condition is saved under ``--runs`` at once (per-problem answers and scores), and an
unfinished one every 10 problems; a rerun skips what is finished and resumes an interrupted condition.
Each record says what it was made with (problems, seed, LM, max_tokens, decoding); a record made with
anything else is refused, naming what differs, since it would pair other problems or another decoding.
Writes benchmarks/results/lessons_study.{json,md,png} with a table for each task asked: ask for both tasks
(`--tasks gsm8k tickets`) to keep both tables; finished conditions are reused, not run again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

# Run as a script, this folder is on sys.path already; loaded by path (the tests), it may not be.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.chunked import MadeWith, evaluate_in_chunks, finished_names  # noqa: E402
from comparison.paired import paired_cell  # noqa: E402
from comparison.plot import write_conditions_plot  # noqa: E402
from provenance import git_revision  # noqa: E402

from tfgrpo_dspy import ExperienceLibrary, with_experiences
from tfgrpo_dspy.stats import compare_paired

logger = logging.getLogger("lessons_study")
RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Six general GSM8K strategies of the quality a strong reflector would write; the first two are the
# ones quoted in the issue that asked for this study.
GSM8K_TIPS = (
    "When a price or rate is given per unit, multiply it by the number of units before combining it with other "
    "amounts.",
    "When the question asks what is left, subtract everything used from the starting total.",
    "When a quantity is a fraction or percentage of another, compute it from the quantity it refers to, not from "
    "the total.",
    "When a problem has several steps, compute and name each intermediate quantity before combining them.",
    "When amounts are given in different units such as hours and minutes, convert them to one unit first.",
    "When the question asks how many more or how much less, compute both quantities and then subtract.",
)
# Neutral sentences of about the same length that carry no strategy.
GSM8K_PLACEBO = (
    "When autumn arrives in the northern hemisphere, many trees change the colour of their leaves before winter.",
    "When a train leaves the station in the morning, passengers often read newspapers or look out of the window.",
    "When it rains for several days, the rivers rise and the fields turn a darker shade of green than before.",
    "When people visit a museum, they usually walk slowly from one room to the next room.",
    "When the sun sets over the sea, the sky often turns orange, pink and purple for a while.",
    "When a cat sleeps in a sunny spot, it may stretch its paws and purr quietly.",
)


@dataclass(frozen=True)
class StudyTask:
    """One task of the study: its examples, program, metric and its two fixed libraries."""

    name: str
    kind: str  # "reasoning tips" or "domain rules"
    examples: list[dspy.Example]
    make_program: Callable[[], dspy.Module]
    metric: Callable
    answer_field: str
    lessons: tuple[str, ...]
    lessons_name: str  # "tips" or "rules"
    placebo: tuple[str, ...]
    source: str


def gsm8k_task(path: str, n: int, seed: int) -> StudyTask:
    """Held-out GSM8K rows: the last ``n`` of a seeded split that leaves 32 train and 24 selection rows unused
    before them. With seed 0 and n = 100 these are rows 56-155 of the seeded order, 80 of which were also the
    held-out rows of compare.py's first gsm8k run (rows 36-135); its gsm8k preset now holds out rows 156-255."""
    from tfgrpo_dspy.kits.math.data import gsm8k_splits
    from tfgrpo_dspy.kits.wordproblems import numeric_match

    parts = gsm8k_splits(path, seed=seed, sizes={"train": 32, "selection": 24, "test": n})
    rows = [dspy.Example(question=e.problem, answer=e.answer).with_inputs("question") for e in parts["test"]]
    return StudyTask("gsm8k", "reasoning tips", rows, lambda: dspy.ChainOfThought("question -> answer"),
                     numeric_match, "answer", GSM8K_TIPS, "tips", GSM8K_PLACEBO, f"{path} (seed {seed})")


def tickets_task(n: int, seed: int) -> StudyTask:
    from tfgrpo_dspy.kits.tickets.generator import generate_tickets
    from tfgrpo_dspy.kits.tickets.metric import queue_match
    from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES, PLACEBO_LESSONS
    from tfgrpo_dspy.kits.tickets.task import make_program

    return StudyTask("tickets", "domain rules", generate_tickets(n, seed, split="heldout"), make_program,
                     queue_match, "queue", tuple(rule.lesson for rule in HOUSE_RULES), "rules",
                     tuple(PLACEBO_LESSONS), f"generated held-out tickets (seed {seed})")


DEFAULT_GRID = {
    "gsm8k": ["none", "tips@instructions", "placebo@instructions", "tips@input", "placebo@input",
              "tips@instructions+top1", "placebo@instructions+top1", "tips@instructions+top2",
              "placebo@instructions+top2"],
    "tickets": ["none", "rules@instructions", "placebo@instructions", "rules@input", "placebo@input", "rules@both",
                "placebo@both", "rules@instructions+top1", "placebo@instructions+top1", "rules@instructions+top2",
                "placebo@instructions+top2", "rules@instructions+top4", "none#2"],
}
_CONDITION = re.compile(r"^(?P<lib>[a-z]+)@(?P<placement>instructions|input|both)(?:\+top(?P<k>\d+))?$")


@dataclass(frozen=True)
class Condition:
    name: str
    library: str | None  # "tips"/"rules", "placebo" or None
    placement: str | None
    top_k: int | None

    @classmethod
    def parse(cls, name: str) -> Condition:
        if name.split("#")[0] == "none":  # "none#2" is a repeat of none: the flip rate of greedy evaluation
            return cls(name, None, None, None)
        match = _CONDITION.match(name)
        if not match:
            raise ValueError(f"condition {name!r} must look like none, tips@input or rules@instructions+top2")
        k = match.group("k")
        return cls(name, match.group("lib"), match.group("placement"), int(k) if k else None)

    def applies_to(self, task: StudyTask) -> bool:
        """Whether ``task`` has this condition's library ("tips" is GSM8K's, "rules" the tickets')."""
        return self.library in (None, "placebo", task.lessons_name)

    def program(self, task: StudyTask) -> dspy.Module:
        base = task.make_program()
        if self.library is None:
            return base
        if self.library not in (task.lessons_name, "placebo"):
            raise ValueError(f"task {task.name} has libraries {task.lessons_name!r} and 'placebo', not "
                             f"{self.library!r}")
        texts = task.lessons if self.library == task.lessons_name else task.placebo
        return with_experiences(base, ExperienceLibrary.from_texts(list(texts)), placement=self.placement,
                                top_k=self.top_k)


def run_condition(task: StudyTask, condition: Condition, lm: dspy.LM, runs: Path, threads: int, made_with: MadeWith
                  ) -> dict[str, Any]:
    """Score one condition (or read it back from ``runs / task / condition.json``): per-problem scores and answers,
    saved every 10 problems (`comparison.chunked`)."""
    return evaluate_in_chunks(runs / task.name / f"{condition.name}.json", f"{task.name}: {condition.name}",
                              lambda: condition.program(task), task.examples, task.metric, task.answer_field, lm,
                              threads, made_with)


def summarize(task: StudyTask, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per condition: accuracy, the paired change against none and against the same placement's placebo."""
    base = records.get("none")
    rows = []
    for name, record in records.items():
        condition = Condition.parse(name)
        row: dict[str, Any] = {"task": task.name, "condition": name, "accuracy": sum(record["scores"]) / len(
            record["scores"]), "n": len(record["scores"]), "seconds": record["seconds"],
            "tokens_per_call": round((record["prompt_tokens"] + record["completion_tokens"]) / len(record["scores"]))}
        if base is not None and name != "none":
            row["vs_none"] = compare_paired(base["scores"], record["scores"]).to_dict()
            if name.startswith("none#"):
                row["flips_vs_none"] = sum(a != b for a, b in zip(base["answers"], record["answers"], strict=True))
        placebo_name = _matching_placebo(condition, records) if condition.library == task.lessons_name else None
        if placebo_name is not None:
            row["vs_placebo"] = compare_paired(records[placebo_name]["scores"], record["scores"]).to_dict()
            row["placebo"] = placebo_name
        rows.append(row)
    return rows


def _matching_placebo(condition: Condition, records: dict[str, dict[str, Any]]) -> str | None:
    """The placebo run that differs from ``condition`` only in the text: same placement and dose if it ran,
    else the same placement with every sentence."""
    dose = f"+top{condition.top_k}" if condition.top_k else ""
    for name in (f"placebo@{condition.placement}{dose}", f"placebo@{condition.placement}"):
        if name in records:
            return name
    return None


def _placebo_cell(row: dict[str, Any]) -> str:
    if "vs_placebo" not in row:
        return "-"
    return f"{paired_cell(row['vs_placebo'])} ({row['placebo']})"


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Where lessons help the embedded 1.5B model: placement, dose and kind", "",
             f"Command: `{report['command']}`; code at `{report['code']}`; LM `{report['lm']}`; greedy decoding "
             f"(server: {report['greedy_server']}), one answer per problem, the same problems in every row; load "
             f"average {report['load_average_start']:.2f} at start, {report['load_average_end']:.2f} at end.", "",
             "Δ = accuracy change in points with its paired 95% bootstrap interval, then problems won / lost and "
             "the exact sign-test p-value; (n.s.) = the interval includes zero or p >= 0.05: no measurable change. "
             "s = wall seconds of the condition; conditions may have run on different days, and this machine's speed "
             "has varied up to 5x between days (benchmarks/results/throughput*.md), so compare accuracy, not s.", ""]
    for task in report["tasks"]:
        lines += [f"## {task['name']}: {task['kind']} ({task['n']} held-out problems; {task['source']})", "",
                  "| condition | accuracy | Δ vs none | Δ vs placebo (which one) | s | tokens/call |",
                  "|---|---|---|---|---|---|"]
        for row in task["rows"]:
            extra = f" ({row['flips_vs_none']} answers differ from the first run)" if "flips_vs_none" in row else ""
            lines.append(f"| {row['condition']}{extra} | {100 * row['accuracy']:.1f}% | "
                         f"{paired_cell(row.get('vs_none'))} | {_placebo_cell(row)} | {row['seconds']:.0f} | "
                         f"{row['tokens_per_call']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gsm8k", metavar="PATH", help="GSM8K jsonl (or hub id / folder) for the gsm8k task")
    parser.add_argument("--tasks", nargs="+", choices=["gsm8k", "tickets"], default=["gsm8k", "tickets"])
    parser.add_argument("--conditions", nargs="+", help="conditions to run (default: the task's grid); a task "
                        "skips those of the other task's library (tips: gsm8k, rules: tickets); the table also "
                        "shows every condition already finished in --runs")
    parser.add_argument("--n", type=int, default=100, help="held-out problems per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lm", default="local")
    parser.add_argument("--max-tokens", type=int, default=384, help="cap per completion (a GSM8K answer needs ~200)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--fast-greedy", action="store_true",
                        help="serve greedy calls from the batched server with its prompt cache: several times faster "
                        "for long shared prompts on a slow CPU, not bit-for-bit repeatable (run none#2 to measure "
                        "how often answers flip)")
    parser.add_argument("--runs", type=Path, default=RESULTS_DIR / "lessons_study.runs",
                        help="per-condition records (a rerun skips finished conditions; use another folder when "
                        "changing --fast-greedy or --max-tokens)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if "gsm8k" in args.tasks and not args.gsm8k:
        parser.error("the gsm8k task needs --gsm8k PATH (or --tasks tickets)")
    for name in args.conditions or []:
        try:
            library = Condition.parse(name).library
        except ValueError as error:
            parser.error(f"--conditions: {error}")
        if library not in (None, "placebo", "tips", "rules"):
            parser.error(f"--conditions: {name!r} names library {library!r}; use tips (gsm8k), rules (tickets) "
                         "or placebo")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for name in (logger.name, "comparison.chunked"):  # this study's progress, and its conditions' chunks
        logging.getLogger(name).setLevel(logging.INFO)
    from tfgrpo_dspy.lm import make_lm

    # Every condition is computed, never read from DSPy's cache (it would hide the flip rate of a repeat).
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    options = {"repeatable_greedy": False} if args.fast_greedy and args.lm.startswith("local") else {}
    lm = make_lm(args.lm, max_tokens=args.max_tokens, **options)
    dspy.configure(lm=lm)
    report: dict[str, Any] = {"format": "tfgrpo-lessons-study", "command": " ".join(["python", *sys.argv]),
                              "code": git_revision(), "lm": args.lm, "max_tokens": args.max_tokens,
                              "greedy_server": "batched, prompt cache (fast)" if args.fast_greedy else
                              "one slot, no prompt reuse (repeatable)",
                              "load_average_start": os.getloadavg()[0], "tasks": []}
    for name in args.tasks:
        task = gsm8k_task(args.gsm8k, args.n, args.seed) if name == "gsm8k" else tickets_task(args.n, args.seed)
        # One --conditions list serves every task: each runs the conditions of its own library.
        names = [c for c in args.conditions or DEFAULT_GRID[name] if Condition.parse(c).applies_to(task)]
        if "none" not in names:
            names = ["none", *names]
        # The table keeps every condition already finished for this task, and lists them all in the grid's
        # order (file times are no guide: a checkout gives every record the same one), then the rest by name.
        grid = DEFAULT_GRID[task.name]
        finished = finished_names(args.runs / task.name)
        # Conditions run in the order asked (the first ones matter most when time is short).
        made_with = MadeWith(n=len(task.examples), seed=args.seed, lm=args.lm, max_tokens=args.max_tokens,
                             decoding=report["greedy_server"])
        ran = {c: run_condition(task, Condition.parse(c), lm, args.runs, args.threads, made_with)
               for c in [*names, *finished]}
        records = {c: ran[c] for c in sorted(ran, key=lambda c: (grid.index(c) if c in grid else len(grid), c))}
        report["tasks"].append({"name": task.name, "kind": task.kind, "n": len(task.examples), "source": task.source,
                                "lessons": list(task.lessons), "placebo": list(task.placebo),
                                "rows": summarize(task, records)})
    report["load_average_end"] = os.getloadavg()[0]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "lessons_study.json").write_text(json.dumps(report, indent=2))
    (args.out_dir / "lessons_study.md").write_text(markdown(report))
    write_conditions_plot(report, args.out_dir / "lessons_study.png")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
