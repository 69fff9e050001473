"""Lessons routed by the training examples they were verified on, against lessons retrieved by their text (issue 27).

``route_by="lesson"`` (the default so far): each call is shown the learned lesson whose text is most like its
input (BM25, top 1). On 300 held-out tickets that compile beat no lesson but not a program that answers
self-service to everything (verified_lessons.md): a lesson retrieved by its words reaches tickets it does not
fit and moves them toward the answer it names. ``route_by="example"``: a lesson is shown only to inputs whose
nearest training ticket routes to it (verified leave-one-out: each training ticket routed by its nearest
other one); inputs nearest to a ticket no lesson fixed see no lesson.

Both compiles: the demo's recipe (`demo_optimizer`) on the same training data (tickets train split seed 0: 24
train, 16 selection), optimizer seed 0. The ``route_by="lesson"`` one is verified_lessons.py's compile seed 0:
its run log and saved answers are copied into this benchmark's runs folder and reused, nothing is recomputed.

    development   200 tickets of the held-out split, seed 2000: the default of route_by is chosen on these
    held-out      the 300 tickets of seed 1000 (verified_lessons.py's): reported, never used to choose

Each pair is compared ticket by ticket (paired 95% interval, won / lost, exact sign test; "better" needs both);
"always X" is each compile's constant-answer reference (no model; X from its verified fixes on training tickets).

    python benchmarks/routed_lessons.py            # results/routed_lessons.{json,md,runs}; rerun to resume
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.data import DEVELOPMENT_SEED, HELD_OUT_SEED, demo_tickets, held_out_tickets  # noqa: E402
from comparison.evaluate import evaluate_greedy  # noqa: E402
from comparison.paired import (  # noqa: E402
    accuracy_table,
    constant_records,
    paired_summary,
    present,
    problem_records,
    verdict_table,
)
from comparison.routing import shift_constant  # noqa: E402
from comparison.study import NOT_MEASURED, RESULTS, load_average, setup_sentence, study_setup, write_study  # noqa: E402
from comparison.verified_compiles import TICKETS_RECIPE, compile_lines, compile_record  # noqa: E402

from tfgrpo_dspy import library_of
from tfgrpo_dspy.demo import demo_optimizer, machine_speed
from tfgrpo_dspy.inference.injection import route_text, shown_lessons
from tfgrpo_dspy.kits.tickets.task import TICKETS
from tfgrpo_dspy.lm import make_lm

logger = logging.getLogger(__name__)

DEV_SEED, DEV_N = DEVELOPMENT_SEED, 200
HELDOUT_N = 300
EARLIER = RESULTS / "verified_lessons.runs" / "tickets"  # verified_lessons.py's compile seed 0 and its answers
LESSON, EXAMPLE = "learned (route_by=lesson)", "learned (route_by=example)"


def reuse_earlier(store: Path) -> None:
    """Copy verified_lessons.py's compile seed 0 and its held-out answers (none, learned) into ``store`` once."""
    copies = {EARLIER / "seed0" / "log": store / "lesson" / "log",
              EARLIER / "eval" / "none": store / "held-out" / "none",
              EARLIER / "eval" / "learned (compile seed 0)": store / "held-out" / LESSON}
    for source, target in copies.items():
        if not target.exists() and source.exists():
            shutil.copytree(source, target)


def compile_tickets(route_by: str, log_dir: Path, trainset: list, selection: list) -> dspy.Module:
    settings = {**TICKETS_RECIPE, "route_by": route_by}
    optimizer = demo_optimizer(TICKETS, TICKETS.make_metric(None), 0, log_dir, **settings)
    return optimizer.compile(TICKETS.make_program(), trainset=trainset, valset=selection)


def score_set(name: str, examples: list, programs: dict[str, dspy.Module], compiles: dict[str, dict[str, Any]],
              trainset: list, store: Path, lm: dspy.LM) -> dict[str, Any]:
    """Every program on ``examples``, the constant-answer references, the paired comparisons, and how many
    examples each compile's lessons reached."""
    metric = TICKETS.make_metric(None)
    records = problem_records({program_name: evaluate_greedy(program_name, program, examples, metric, store / name, lm,
                                                             "queue") for program_name, program in programs.items()})
    constants = {learned: shift_constant(record, trainset, "queue") for learned, record in compiles.items()}
    for answer in dict.fromkeys(a for a in constants.values() if a):
        records[f"always {answer}"] = constant_records(examples, metric, "queue", answer)
    pairs = [("none", LESSON), ("none", EXAMPLE), (LESSON, EXAMPLE)]
    pairs += [(f"always {constants[learned]}", learned) for learned in compiles if constants[learned]]
    summary = paired_summary(records, present(pairs, records))
    summary["reached"] = {learned: reach(programs[learned], examples) for learned in compiles}
    return {"set": name, **summary}


def reach(program: dspy.Module, examples: list) -> dict[str, int]:
    """How many of ``examples`` each lesson of ``program`` is shown to (and "no lesson")."""
    predictor = program.named_predictors()[0][1]
    library, top_k = library_of(program), getattr(predictor, "top_k", 1)
    counts: Counter[str] = Counter()
    for example in examples:
        shown = shown_lessons(library, route_text(example.inputs().toDict()), top_k)
        counts.update([f"E{i}" for i in shown.ids] or ["no lesson"])
    return dict(sorted(counts.items()))


def markdown(report: dict[str, Any]) -> str:
    setup = report["setup"]
    lines = ["# Lessons routed by example vs retrieved by their text (tickets, embedded model)", "",
             setup_sentence(setup) + ". Training: tickets train split seed 0 (24 train, 16 selection), optimizer "
             "seed 0.", ""]
    for part in report["sets"]:
        lines += [f"## {part['set']}: {part['description']}", "", *accuracy_table(part["accuracy"]), "",
                  *verdict_table(part["comparisons"])]
        lines += ["", "Lessons shown: " + "; ".join(f"{name}: {counts}" for name, counts in part["reached"].items()),
                  ""]
    for name, record in report["compiles"].items():
        lines += [f"## Compile {name}"] + compile_lines({**record, "seed": 0})[1:]
        if record.get("routes"):
            lines += ["", "Routes (training tickets -> lessons): " + ", ".join(
                f"{label}: {count}" for label, count in record["routes"].items())]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="local")
    parser.add_argument("--stem", default="routed_lessons")
    parser.add_argument("--sets", nargs="+", choices=["development", "held-out"], default=["development", "held-out"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    store = RESULTS / f"{args.stem}.runs"
    reuse_earlier(store)
    lm = make_lm(args.lm, max_tokens=512)
    dspy.configure(lm=lm)
    setup = study_setup(machine_speed(lm), unmeasured=NOT_MEASURED)
    trainset, selection, _ = demo_tickets(1)
    compiled = {LESSON: compile_tickets("lesson", store / "lesson" / "log", trainset, selection),
                EXAMPLE: compile_tickets("example", store / "example" / "log", trainset, selection)}
    compiles = {name: compile_record(program) for name, program in compiled.items()}
    for name, program in compiled.items():
        routes = library_of(program).routes
        compiles[name]["routes"] = dict(Counter(",".join(f"E{i}" for i in r.lessons) or "no lesson" for r in routes))
    programs = {"none": TICKETS.make_program(), **compiled}
    sets = {"development": (f"{DEV_N} tickets of the held-out split, seed {DEV_SEED} (chooses the default)",
                            held_out_tickets(DEV_N, DEV_SEED)),
            "held-out": (f"{HELDOUT_N} tickets of the held-out split, seed {HELD_OUT_SEED} (reported, never used to "
                         "choose)", held_out_tickets(HELDOUT_N, HELD_OUT_SEED))}
    parts = []
    for name in args.sets:
        description, examples = sets[name]
        parts.append({**score_set(name, examples, programs, compiles, trainset, store, lm),
                      "description": description})
    setup["load_average_at_end"] = load_average()
    report = {"setup": setup, "compiles": compiles, "sets": parts}
    return write_study(RESULTS / f"{args.stem}.json", report, markdown(report))


if __name__ == "__main__":
    sys.exit(main())
