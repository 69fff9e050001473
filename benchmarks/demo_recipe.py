"""Can the demo's compile spend less without learning less? (issue 27, Must 5: the demo in 15 minutes)

The demo's compile (`tfgrpo_dspy.demo.demo_optimizer`, tickets train split seed 0: 24 train, 16 selection) spent
19 minutes on this machine, 6.4 of them on the induction's draws and 8.2 on verifying each candidate. Three
settings set most of that cost: ``num_candidates`` (draws per induction), ``verify_batch`` (other training tickets a
candidate is tried on once it fixed one of its own) and ``route_by``: with ``"example"`` a candidate is shown
only to the training tickets routed to it, so most verification calls repeat a prompt already answered (a cache
hit), and so do most held-out calls after training. This benchmark compiles with each recipe below, once per
optimizer seed, and scores every compiled program greedily on development tickets:

    larger    3 draws, verify batch 12, routed by lesson text: the demo's recipe until 2026-12-03 (its compiles
              are verified_lessons.py's and routed_lessons.py's: copied, not recomputed)
    routed    the same, routed by example (compile seed 0 is routed_lessons.py's)
    smaller   2 draws, verify batch 6, routed by example

    development   200 tickets of the held-out split, seed 2000: the recipe is chosen on these, never on held-out
    held-out      the 300 tickets of seed 1000, with ``--held-out``: each recipe's compile seed 0 against no
                  lesson, reported and never used to choose

A cheaper recipe may replace the larger one only if, pooled over the compile seeds (ticket by ticket, paired), it is
not measurably worse on the development tickets; of those, the demo takes the first in order of preference (routed,
then smaller: the fewest settings changed) whose demo fits in 15 minutes, which the demo's own timing decides.
Each comparison: the difference with its paired 95% interval, won / lost and the exact sign test; "better" or
"worse" needs both. Every compile keeps its run log and every evaluation each answer
(``results/demo_recipe.runs/``): rerunning the command resumes. The compiles' minutes are their own run logs' (a
call answered by DSPy's cache costs nothing, and the recipes share rollouts by seed): the demo's own time, from a
fresh cache, is what README reports.

    python benchmarks/demo_recipe.py --compile-seeds 2 --held-out     # results/demo_recipe.{json,md,runs}
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import Any

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.data import DEVELOPMENT_SEED, HELD_OUT_SEED, demo_tickets, held_out_tickets  # noqa: E402
from comparison.evaluate import evaluate_greedy  # noqa: E402
from comparison.paired import accuracy_table, paired_summary, problem_records, verdict_table  # noqa: E402
from comparison.study import NOT_MEASURED, RESULTS, load_average, setup_sentence, study_setup, write_study  # noqa: E402
from comparison.verified_compiles import TICKETS_RECIPE, compile_lines, compile_record  # noqa: E402

from tfgrpo_dspy.demo import demo_optimizer, machine_speed
from tfgrpo_dspy.kits.tickets.task import TICKETS
from tfgrpo_dspy.lm import make_lm
from tfgrpo_dspy.stats import compare_paired

logger = logging.getLogger(__name__)

DEV_SEED, DEV_N = DEVELOPMENT_SEED, 200
HELDOUT_SEED, HELDOUT_N = HELD_OUT_SEED, 300
LARGER = "larger (3 draws, batch 12, by lesson)"
ROUTED = "routed (3 draws, batch 12, by example)"
SMALLER = "smaller (2 draws, batch 6, by example)"
RECIPES = {LARGER: TICKETS_RECIPE, ROUTED: {**TICKETS_RECIPE, "route_by": "example"},
           SMALLER: {"num_candidates": 2, "verify_batch": 6, "route_by": "example"}}
CHEAPER = (ROUTED, SMALLER)  # in order of preference: the fewest settings changed first
EARLIER = RESULTS / "verified_lessons.runs" / "tickets"  # the larger recipe's compiles and their held-out answers
ROUTED_RUNS = RESULTS / "routed_lessons.runs"  # compile seed 0 of the larger and routed recipes, and their answers


def program_name(recipe: str, seed: int) -> str:
    return f"{recipe} (compile seed {seed})"


def reuse_earlier(store: Path, seeds: int) -> None:
    """Copy the compiles verified_lessons.py and routed_lessons.py ran with the same recipe and data, and the
    answers already scored with them, once; a copy that is missing is simply recomputed."""
    development = ROUTED_RUNS / "development"
    copies = {development / "none": store / "development" / "none",
              development / "learned (route_by=lesson)": store / "development" / program_name(LARGER, 0),
              development / "learned (route_by=example)": store / "development" / program_name(ROUTED, 0),
              EARLIER / "eval" / "none": store / "held-out" / "none",
              EARLIER / "eval" / "learned (compile seed 0)": store / "held-out" / program_name(LARGER, 0),
              ROUTED_RUNS / "held-out" / "learned (route_by=example)": store / "held-out" / program_name(ROUTED, 0),
              ROUTED_RUNS / "example" / "log": store / "compiles" / ROUTED / "seed0" / "log"}
    for seed in range(seeds):
        copies[EARLIER / f"seed{seed}" / "log"] = store / "compiles" / LARGER / f"seed{seed}" / "log"
    for source, target in copies.items():
        if not target.exists() and source.exists():
            shutil.copytree(source, target)


def compile_recipe(recipe: str, seed: int, store: Path, trainset: list, selection: list) -> dspy.Module:
    log_dir = store / "compiles" / recipe / f"seed{seed}" / "log"
    optimizer = demo_optimizer(TICKETS, TICKETS.make_metric(None), seed, log_dir, **RECIPES[recipe])
    return optimizer.compile(TICKETS.make_program(), trainset=trainset, valset=selection)


def spending(record: dict[str, Any]) -> dict[str, Any]:
    """Seconds and calls of one compile by phase, from its own run log (its steps, as they ran)."""
    seconds: dict[str, float] = {}
    for step in record["steps"]:
        for phase, value in (step.get("phase_seconds") or {}).items():
            seconds[phase] = seconds.get(phase, 0.0) + value
    calls = {phase: record["usage"][role]["calls"] for phase, role in
             (("rollouts", "policy"), ("reflection", "reflection"), ("verification", "verification"),
              ("selection", "selection"))}
    return {"seconds": {phase: round(value) for phase, value in seconds.items()},
            "minutes": round(sum(seconds.values()) / 60, 1), "calls": calls}


def pooled(records: dict[str, list[dict[str, Any]]], base: str, other: str, seeds: int) -> dict[str, Any]:
    """``other`` against ``base`` over every compile seed at once: each (seed, ticket) is one pair."""
    a = [row["score"] for seed in range(seeds) for row in records[program_name(base, seed)]]
    b = [row["score"] for seed in range(seeds) for row in records[program_name(other, seed)]]
    paired = compare_paired(a, b)
    return {"base": base, "other": other, "seeds": seeds, **paired.to_dict(), "verdict": paired.verdict()}


def score_development(programs: dict[str, dspy.Module], seeds: int, store: Path, lm: dspy.LM) -> dict[str, Any]:
    metric = TICKETS.make_metric(None)
    examples = held_out_tickets(DEV_N, DEV_SEED)
    records = problem_records({name: evaluate_greedy(name, program, examples, metric, store / "development", lm,
                                                     "queue") for name, program in programs.items()})
    pairs = [("none", program_name(recipe, seed)) for seed in range(seeds) for recipe in RECIPES]
    pairs += [(program_name(LARGER, seed), program_name(recipe, seed)) for seed in range(seeds) for recipe in CHEAPER]
    summary = paired_summary(records, pairs)
    return {"set": "development", "description": f"{DEV_N} tickets of the held-out split, seed {DEV_SEED} (chooses "
            "the recipe)", **summary, "pooled": [pooled(records, LARGER, recipe, seeds) for recipe in CHEAPER]}


def not_worse(development: dict[str, Any]) -> list[str]:
    """The cheaper recipes, in order of preference, that are not measurably worse than the larger one on the
    development tickets, pooled over the compile seeds."""
    worse = {c["other"] for c in development["pooled"] if c["significant"] and c["delta"] < 0}
    return [recipe for recipe in CHEAPER if recipe not in worse]


def score_held_out(programs: dict[str, dspy.Module], store: Path, lm: dspy.LM) -> dict[str, Any]:
    """Each recipe's compile seed 0 and no lesson on the held-out tickets: reported, never used to choose."""
    metric = TICKETS.make_metric(None)
    examples = held_out_tickets(HELDOUT_N, HELDOUT_SEED)
    names = [program_name(recipe, 0) for recipe in RECIPES]
    reports = {"none": evaluate_greedy("none", TICKETS.make_program(), examples, metric, store / "held-out", lm,
                                       "queue")}
    reports.update({name: evaluate_greedy(name, programs[name], examples, metric, store / "held-out", lm, "queue")
                    for name in names})
    pairs = [("none", name) for name in names] + [(names[0], name) for name in names[1:]]
    return {"set": "held-out", "description": f"{HELDOUT_N} tickets of the held-out split, seed {HELDOUT_SEED} "
            "(reported, never used to choose)", **paired_summary(problem_records(reports), pairs)}


def markdown(report: dict[str, Any]) -> str:
    setup = report["setup"]
    lines = ["# The demo's compile recipe: fewer draws, a smaller verification batch, routed by example (tickets, "
             "embedded model)", "",
             setup_sentence(setup) + ". "
             "Training: tickets train split seed 0 (24 train, 16 selection), the demo's compile with each recipe.", "",
             "## What each compile spent (its own run log; the larger recipe's ran on earlier days)", "",
             "| compile | minutes of steps | rollouts | reflection | verification | selection |",
             "|---|---|---|---|---|---|"]
    for name, record in report["compiles"].items():
        spent = record["spending"]
        cells = [f"{spent['seconds'].get(p, 0) / 60:.1f} min, {spent['calls'][p]} calls"
                 for p in ("rollouts", "reflection", "verification", "selection")]
        lines.append(f"| {name} | {spent['minutes']} | " + " | ".join(cells) + " |")
    for part in report["sets"]:
        lines += ["", f"## {part['set']}: {part['description']}", "", *accuracy_table(part["accuracy"]), "",
                  *verdict_table(part["comparisons"])]
        for p in part.get("pooled", []):
            lines.append(f"| {p['other']} vs {p['base']}, pooled over {p['seeds']} compile seeds | {p['verdict']} |")
        if part.get("pooled"):
            lines += ["", "Not measurably worse than the larger recipe, in order of preference (fewest settings "
                      "changed first): " + (", ".join(f"**{r}**" for r in report["not_worse"]) or "none") + "."]
    for name, record in report["compiles"].items():
        lines += ["", f"## Compile {name}"] + compile_lines(record)[1:]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="local")
    parser.add_argument("--stem", default="demo_recipe")
    parser.add_argument("--compile-seeds", type=int, default=1, metavar="N", help="optimizer seeds 0..N-1 per recipe")
    parser.add_argument("--held-out", action="store_true",
                        help="also score each recipe's compile seed 0 on the held-out tickets (reported only)")
    args = parser.parse_args(argv)
    if args.compile_seeds < 1:
        parser.error("--compile-seeds must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    store = RESULTS / f"{args.stem}.runs"
    reuse_earlier(store, args.compile_seeds)
    lm = make_lm(args.lm, max_tokens=512)
    dspy.configure(lm=lm)
    setup = study_setup(machine_speed(lm), unmeasured=NOT_MEASURED)
    trainset, selection, _ = demo_tickets(1)
    programs: dict[str, dspy.Module] = {"none": TICKETS.make_program()}
    compiles: dict[str, dict[str, Any]] = {}
    # Seed by seed, the smaller recipe first: a stopped run has the first pair to compare.
    for seed in range(args.compile_seeds):
        for recipe in (SMALLER, ROUTED, LARGER):
            name = program_name(recipe, seed)
            programs[name] = compile_recipe(recipe, seed, store, trainset, selection)
            record = compile_record(programs[name])
            compiles[name] = {"seed": seed, "recipe": recipe, **record, "spending": spending(record)}
    development = score_development(programs, args.compile_seeds, store, lm)
    sets = [development]
    if args.held_out:
        sets.append(score_held_out(programs, store, lm))
    setup["load_average_at_end"] = load_average()
    report = {"setup": setup, "recipes": RECIPES, "not_worse": not_worse(development), "compiles": compiles,
              "sets": sets}
    return write_study(RESULTS / f"{args.stem}.json", report, markdown(report))


if __name__ == "__main__":
    sys.exit(main())
