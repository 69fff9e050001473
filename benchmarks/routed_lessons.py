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
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lesson_routing import shift_constant  # noqa: E402
from provenance import git_revision  # noqa: E402
from verified_lessons import (  # noqa: E402
    RESULTS,
    TICKETS_RECIPE,
    _records,
    _summary,
    compile_lines,
    compile_record,
    evaluate,
    tickets_data,
    write_report,
)

from tfgrpo_dspy import library_of
from tfgrpo_dspy.demo import demo_optimizer, machine_speed
from tfgrpo_dspy.inference.injection import route_text, shown_lessons
from tfgrpo_dspy.inference.majority import constant_scores
from tfgrpo_dspy.kits.tickets.generator import generate_tickets
from tfgrpo_dspy.kits.tickets.task import TICKETS
from tfgrpo_dspy.lm import make_lm

logger = logging.getLogger(__name__)

DEV_SEED, DEV_N = 2000, 200
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
    records = _records({program_name: evaluate(program_name, program, examples, metric, store / name, lm, "queue")
                        for program_name, program in programs.items()})
    constants = {learned: shift_constant(record, trainset, "queue") for learned, record in compiles.items()}
    for answer in dict.fromkeys(a for a in constants.values() if a):
        records[f"always {answer}"] = [{"index": i, "score": score, "answer": answer} for i, score in
                                       enumerate(constant_scores(examples, metric, "queue", answer))]
    pairs = [("none", LESSON), ("none", EXAMPLE), (LESSON, EXAMPLE)]
    pairs += [(f"always {constants[learned]}", learned) for learned in compiles if constants[learned]]
    summary = _summary(records, [(a, b) for a, b in pairs if a in records and b in records])
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
             f"Commit {setup['commit']}, {setup['date']}; machine at the start: {setup['speed']}; load average "
             f"{setup['load_average_at_start']} at the start, {setup.get('load_average_at_end')} at the end. "
             f"Training: tickets train split seed 0 (24 train, 16 selection), optimizer seed 0.", ""]
    for part in report["sets"]:
        lines += [f"## {part['set']}: {part['description']}", "", "| program | accuracy |", "|---|---|"]
        lines += [f"| {name} | {100 * value:.1f}% |" for name, value in part["accuracy"].items()]
        lines += ["", "| comparison | Δ [95% CI], won / lost, exact sign test |", "|---|---|"]
        lines += [f"| {c['other']} vs {c['base']} | {c['verdict']} |" for c in part["comparisons"]]
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
    speed = machine_speed(lm)
    setup = {"commit": git_revision(), "date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:],
             "speed": str(speed) if speed else "not measured (not the embedded model)",
             "speed_at_start": asdict(speed) if speed else None,
             "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    trainset, selection, _ = tickets_data(1)
    compiled = {LESSON: compile_tickets("lesson", store / "lesson" / "log", trainset, selection),
                EXAMPLE: compile_tickets("example", store / "example" / "log", trainset, selection)}
    compiles = {name: compile_record(program) for name, program in compiled.items()}
    for name, program in compiled.items():
        routes = library_of(program).routes
        compiles[name]["routes"] = dict(Counter(",".join(f"E{i}" for i in r.lessons) or "no lesson" for r in routes))
    programs = {"none": TICKETS.make_program(), **compiled}
    sets = {"development": (f"{DEV_N} tickets of the held-out split, seed {DEV_SEED} (chooses the default)",
                            generate_tickets(DEV_N, DEV_SEED, split="heldout")),
            "held-out": (f"{HELDOUT_N} tickets of the held-out split, seed 1000 (reported, never used to choose)",
                         generate_tickets(HELDOUT_N, 1000, split="heldout"))}
    parts = []
    for name in args.sets:
        description, examples = sets[name]
        parts.append({**score_set(name, examples, programs, compiles, trainset, store, lm),
                      "description": description})
    setup["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return write_report(RESULTS / f"{args.stem}.json", {"setup": setup, "compiles": compiles, "sets": parts},
                        markdown)


if __name__ == "__main__":
    sys.exit(main())
