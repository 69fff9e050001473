"""Does a default compile on the embedded model learn lessons that help, on fresh held-out data? (issue 27)

Tickets: the demo's compile (`tfgrpo_dspy.demo.demo_optimizer`: 24 training and 16 selection tickets of the
train split, seed 0), once per compile seed (``--compile-seeds``, default 3: optimizer seeds 0, 1, 2 on the
same data, since one compile is one sample of the method), and these programs scored greedily on the same
held-out tickets (the held-out split, seed 1000, which no default was chosen on; 300 by default):

    none                          the program without lessons
    learned (compile seed k)      the compiled program: the library that compile shipped, top 1 per ticket
    control                       one lesson naming the training set's most frequent right answer ("When
                                  unsure, answer X."): what shifting answers toward a common label alone does
    rules@top1                    the ten true house rules, the most relevant one per ticket (the ceiling)
    placebo@top1                  ten neutral sentences, one per ticket
    rules@oracle                  the ten true rules, each ticket shown the one that decides it (a diagnostic: how
                                  well the model follows the right rule, whatever retrieval would have shown)
    rules@nearest-train           the ten true rules, each ticket shown the rule of its nearest training ticket
                                  (BM25 over the 40 training and selection tickets): routing by examples
    learned (compile seed 0) @nearest-train
                                  the first compile's lessons, each ticket shown the lesson whose verification
                                  fixed its nearest training ticket, or none
    always X                      no model: every ticket answered X, the answer the shipped lessons' verified
                                  fixes moved to most (from the compile's training records, not the held-out
                                  data): what a lesson that only shifts answers toward X amounts to at best

GSM8K (with ``--gsm8k PATH``): a compile (the defaults, trimmed for time: see `run_gsm8k`) on 32 training
and 20 selection rows of the file, and the
program with and without the shipped library on 100 held-out rows after them (seeded, disjoint, rows no
default was chosen on). Each pair is compared problem by problem: the difference with its paired 95%
interval, won / lost and the exact sign test; "better" needs both.

    python benchmarks/verified_lessons.py                                   # tickets, results/verified_lessons.*
    python benchmarks/verified_lessons.py --gsm8k /work/shared/data/gsm8k/train.jsonl --tasks gsm8k

``--reanalyze`` recomputes the tables of a saved result from its per-problem records (new reference rows or
comparisons), without the LM. Everything is resumable: the compiles keep their run logs and every evaluation
saves each answer (``results/verified_lessons.runs/``); rerunning the command continues where it stopped.
The first run of this benchmark (one compile, before lessons were verified on top of each other) is
``results/verified_lessons_v1.*``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import dspy

# Run as a script, this folder is on sys.path already; loaded by path (the tests), it may not be.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.data import HELD_OUT_SEED, demo_tickets  # noqa: E402
from comparison.evaluate import evaluate_greedy  # noqa: E402
from comparison.paired import (  # noqa: E402
    Records,
    accuracy_table,
    constant_records,
    paired_summary,
    present,
    problem_records,
    verdict_table,
)
from comparison.routing import NearestTraining, RoutedLessons, RoutedRules, fixed_by, shift_constant  # noqa: E402
from comparison.study import NOT_MEASURED, RESULTS, load_average, setup_sentence, study_setup, write_study  # noqa: E402
from comparison.verified_compiles import TICKETS_RECIPE, compile_lines, compile_record  # noqa: E402

from tfgrpo_dspy import ExperienceLibrary
from tfgrpo_dspy.demo import demo_optimizer, machine_speed
from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES, PLACEBO_LESSONS
from tfgrpo_dspy.kits.tickets.task import TICKETS
from tfgrpo_dspy.library.jsonio import read_json
from tfgrpo_dspy.lm import make_lm

logger = logging.getLogger(__name__)

GSM8K_SIZES = {"train": 32, "selection": 20, "test": 100}
GSM8K_SEED = 2026  # a split of its own: the lessons study and compare.py used seed 0
ROUTED = "learned (compile seed 0) @nearest-train"


def control_lesson(trainset: list, answer_field: str) -> str:
    """"When unsure, answer X." for the training set's most frequent right answer."""
    answer, _ = Counter(str(e[answer_field]) for e in trainset).most_common(1)[0]
    return f"When unsure, answer {answer}."


def run_tickets(lm: dspy.LM, n: int, store: Path, compile_seeds: int = 1) -> dict[str, Any]:
    """The demo's compile with optimizer seeds 0 .. compile_seeds-1 (same data: one compile is one sample of the
    method), each learned library and the reference programs on the same held-out tickets. Evaluations run in
    the order that answers the main question first (none, the first learned library), so a stopped run has it."""
    metric = TICKETS.make_metric(None)
    trainset, selection, heldout = demo_tickets(n)
    evals = store / "tickets" / "eval"
    libraries = {"control": ExperienceLibrary.from_texts([control_lesson(trainset, "queue")]),
                 "rules@top1": ExperienceLibrary.from_texts([r.lesson for r in HOUSE_RULES]),
                 "placebo@top1": ExperienceLibrary.from_texts(list(PLACEBO_LESSONS))}
    reports = {"none": evaluate_greedy("none", TICKETS.make_program(), heldout, metric, evals, lm, "queue")}
    compiles = []
    for seed in range(compile_seeds):
        compiled = demo_optimizer(TICKETS, metric, seed, store / "tickets" / f"seed{seed}" / "log",
                                  **TICKETS_RECIPE).compile(
            TICKETS.make_program(), trainset=trainset, valset=selection)
        compiles.append({"seed": seed, **compile_record(compiled)})
        name = learned_name(seed)
        reports[name] = evaluate_greedy(name, compiled, heldout, metric, evals, lm, "queue")
        if seed == 0:
            for reference, library in libraries.items():
                reports[reference] = evaluate_greedy(reference, TICKETS.make_program(), heldout, metric, evals, lm,
                                                     "queue", library)
    # Diagnostics of the ceiling, run last: the right rule shown (oracle), or the rule of the nearest training ticket.
    routes = {"rules@oracle": {e.ticket: e.rule for e in heldout}.__getitem__,
              "rules@nearest-train": NearestTraining(trainset + selection)}
    for name, route in routes.items():
        reports[name] = evaluate_greedy(name, RoutedRules(route), heldout, metric, evals, lm, "queue")
    # The first compile's lessons routed by the training tickets their verification fixed (others: no lesson).
    first = compiles[0]
    routed = RoutedLessons(first["lessons"], NearestTraining(trainset, fixed_by(first, len(trainset))))
    reports[ROUTED] = evaluate_greedy(ROUTED, routed, heldout, metric, evals, lm, "queue")
    records = problem_records(reports)
    return {"task": "tickets", "train": "train split seed 0 (24 train, 16 selection)",
            "heldout": f"held-out split seed {HELD_OUT_SEED}, {n} tickets", "compiles": compiles,
            "control_lesson": libraries["control"].texts[0], **tickets_summary(records, compiles, n)}


def tickets_summary(records: Records, compiles: list[dict[str, Any]], n: int
                    ) -> dict[str, Any]:
    """Accuracies and paired comparisons from per-problem records, with the constant-answer references of the
    learned libraries added (computed from the labels)."""
    trainset, _, heldout = demo_tickets(n)
    records = {name: rows for name, rows in records.items() if not name.startswith("always ")}
    learned = [learned_name(c["seed"]) for c in compiles if learned_name(c["seed"]) in records]
    constants = {c["seed"]: shift_constant(c, trainset, "queue") for c in compiles}
    for answer in dict.fromkeys(a for a in constants.values() if a):
        records[f"always {answer}"] = constant_records(heldout, TICKETS.make_metric(None), "queue", answer)
    pairs = [("none", name) for name in learned]
    pairs += [("none", "control"), *[("control", name) for name in learned], ("none", "rules@top1"),
              ("none", "placebo@top1"), *[(name, "rules@top1") for name in learned]]
    pairs += [(f"always {constants[c['seed']]}", learned_name(c["seed"])) for c in compiles
              if constants[c["seed"]] and learned_name(c["seed"]) in records]
    for answer in dict.fromkeys(a for a in constants.values() if a):
        pairs += [("none", f"always {answer}"), (f"always {answer}", "rules@top1")]
    pairs += [("rules@top1", "rules@oracle"), ("rules@top1", "rules@nearest-train"), ("none", ROUTED),
              (learned_name(0), ROUTED), *[(f"always {a}", ROUTED) for a in dict.fromkeys(constants.values()) if a]]
    return paired_summary(records, present(pairs, records))



def learned_name(seed: int) -> str:
    return f"learned (compile seed {seed})"


def run_gsm8k(lm: dspy.LM, path: str, store: Path) -> dict[str, Any]:
    from tfgrpo_dspy.kits.math.data import gsm8k_splits
    from tfgrpo_dspy.kits.wordproblems import numeric_match

    parts = gsm8k_splits(path, seed=GSM8K_SEED, sizes=GSM8K_SIZES)
    rows = {name: [dspy.Example(question=e.problem, answer=e.answer, solution=e.solution).with_inputs("question")
                   for e in examples] for name, examples in parts.items()}
    program = dspy.ChainOfThought("question -> answer")
    from tfgrpo_dspy import TrainingFreeGRPO

    # The defaults but for time: on two cores a GSM8K call takes ~13 s, so failed groups go to the induction only,
    # and fewer draws and a smaller batch bound the verification (about an hour of compile).
    compiled = TrainingFreeGRPO(metric=numeric_match, group_size=4, epochs=1, seed=0, seed_rollouts=True,
                                summarize=False, reference_fields=("answer", "solution"), failed_groups=False,
                                num_candidates=2, verify_batch=8, log_dir=str(store / "gsm8k" / "log")).compile(
        program, trainset=rows["train"], valset=rows["selection"])
    evals = store / "gsm8k" / "eval"
    learned = learned_name(0)
    reports = {"none": evaluate_greedy("none", program, rows["test"], numeric_match, evals, lm, "answer"),
               learned: evaluate_greedy("learned", compiled, rows["test"], numeric_match, evals, lm, "answer")}
    return {"task": "gsm8k", "train": f"{path}, seed {GSM8K_SEED}: 32 train and 20 selection rows",
            "heldout": "the next 100 rows of the same seeded order",
            "compiles": [{"seed": 0, **compile_record(compiled)}],
            **paired_summary(problem_records(reports), [("none", learned)])}


def markdown(report: dict[str, Any]) -> str:
    setup = report["setup"]
    lines = ["# Verified lessons on the embedded model: fresh held-out data", "",
             setup_sentence(setup) + ".", ""]
    if setup.get("earlier_runs"):
        lines += ["Answers saved by earlier runs are reused: " + "; ".join(
            f"commit {run['commit']}, {run['date']}, {run['speed']}" for run in setup["earlier_runs"]) + ".", ""]
    for task in report["tasks"]:
        lines += [f"## {task['task']}", "", f"Training: {task['train']}. Held-out: {task['heldout']}.", "",
                  *accuracy_table(task["accuracy"]), "", *verdict_table(task["comparisons"])]
        seeds = {learned_name(c["seed"]) for c in task["compiles"]}
        spread = [c["delta"] for c in task["comparisons"] if c["base"] == "none" and c["other"] in seeds]
        if len(spread) > 1:
            lines += ["", f"Compile to compile: learned vs none over {len(spread)} compile seeds, mean "
                      f"{100 * sum(spread) / len(spread):+.1f} points, from {100 * min(spread):+.1f} to "
                      f"{100 * max(spread):+.1f}."]
        if task.get("control_lesson"):
            lines += ["", f"Control lesson: {task['control_lesson']}"]
        constants = [name for name in task["accuracy"] if name.startswith("always ")]
        if constants:
            lines += ["", f"{', '.join(constants)}: no model, every held-out example given that answer, the one the "
                      "shipped lessons' verified fixes on training examples moved to most; a learned library that "
                      "is not better than it has only shifted the model's answers toward it."]
        for compile_ in task["compiles"]:
            lines += compile_lines(compile_)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=["tickets", "gsm8k"], default=["tickets"])
    parser.add_argument("--tickets", type=int, default=300, help="held-out tickets (default 300)")
    parser.add_argument("--compile-seeds", type=int, default=3, metavar="N",
                        help="tickets: compiles with optimizer seeds 0..N-1, each scored on the held-out tickets")
    parser.add_argument("--gsm8k", metavar="PATH", help="GSM8K jsonl, hub folder or id (needed for --tasks gsm8k)")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--stem", default="verified_lessons")
    parser.add_argument("--reanalyze", action="store_true",
                        help="recompute the saved result's tables from its per-problem records; runs no LM")
    args = parser.parse_args(argv)
    if "gsm8k" in args.tasks and not args.gsm8k:
        parser.error("--tasks gsm8k needs --gsm8k PATH")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.reanalyze:
        return reanalyze(RESULTS / f"{args.stem}.json")
    store = RESULTS / f"{args.stem}.runs"
    lm = make_lm(args.lm, max_tokens=512)
    dspy.configure(lm=lm)
    setup = study_setup(machine_speed(lm), unmeasured=NOT_MEASURED)
    path = RESULTS / f"{args.stem}.json"
    saved = read_json(path) if path.exists() else {}
    # Another task's finished result in this stem's file is kept (a run of one task does not erase the other), and
    # so are the setups of the runs whose saved answers this one reuses (their machine speed, their commit).
    earlier = {t["task"]: t for t in saved.get("tasks", []) if "compiles" in t}
    if saved.get("setup"):
        previous = saved["setup"]
        setup["earlier_runs"] = [*previous.pop("earlier_runs", []), previous]
    for name in args.tasks:
        earlier[name] = (run_tickets(lm, args.tickets, store, args.compile_seeds) if name == "tickets"
                         else run_gsm8k(lm, args.gsm8k, store))
    setup["load_average_at_end"] = load_average()
    report = {"setup": setup, "tasks": [earlier[t] for t in ("tickets", "gsm8k") if t in earlier]}
    return write_study(path, report, markdown(report))


def reanalyze(path: Path) -> int:
    """The saved result with its tables recomputed from its per-problem records (its setup kept as it ran)."""
    if not path.exists():
        raise SystemExit(f"--reanalyze: no saved result at {path}")
    report = read_json(path)
    for task in report["tasks"]:
        if task["task"] == "tickets":
            n = len(task["per_problem"]["none"])
            task.update(tickets_summary(task["per_problem"], task["compiles"], n))
    return write_study(path, report, markdown(report))


if __name__ == "__main__":
    sys.exit(main())
