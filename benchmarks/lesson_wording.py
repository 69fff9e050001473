"""Does the way a rule states its answer decide whether the 1.5B model follows it? (issue 40)

Routed by answer, a learned ticket lesson reads "When <condition>, answer with queue: X." (the kit's
``induction_action="reference"``), and the model seldom follows one, even a condition that holds ("When the input
contains "password", ...": none of 8 password tickets fixed, development seed 11). Shown the house rule that
decides a ticket in the kit's own words ("..., route it to X, not self-service."), it routes 81% right. This
study shows every ticket the one house rule that decides it, worded three ways, and scores them paired:

    house        the rule as the kit writes it (condition, "route it to X" and its qualifiers)
    route-to     the rule's condition, then "route it to X." (no qualifier)
    answer-with  the rule's condition, then "answer with queue: X." (what induced lessons say)

Rows: the 120 training and selection tickets of development seed 11 (`tickets_dev`), which no reported figure
uses; greedy; each finished row is saved under ``results/lesson_wording.runs`` and a rerun resumes.

    python benchmarks/lesson_wording.py
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.data import tickets_split  # noqa: E402
from comparison.evaluate import evaluate_greedy  # noqa: E402
from comparison.presets import PRESETS  # noqa: E402
from comparison.routing import RoutedRules  # noqa: E402
from comparison.study import RESULTS, load_average, setup_sentence, study_setup, write_study  # noqa: E402

from tfgrpo_dspy.demo import machine_speed
from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES, Rule
from tfgrpo_dspy.kits.tickets.task import TICKETS
from tfgrpo_dspy.lm import make_lm
from tfgrpo_dspy.stats import compare_paired

STEM = "lesson_wording"
DEV_SEED = 11  # tickets_dev's training seed: where the kit's defaults are chosen


def condition(rule: Rule) -> str:
    """The rule's "When ..." part, up to its first ", route" (every house rule says "route it/the ticket to")."""
    head, sep, _ = rule.lesson.partition(", route")
    if not sep:
        raise ValueError(f"house rule {rule.name!r} has no ', route' clause: {rule.lesson!r}")
    return head


WORDINGS = {
    "house": lambda rule: rule.lesson,
    "route-to": lambda rule: f"{condition(rule)}, route it to {rule.queue}.",
    "answer-with": lambda rule: f"{condition(rule)}, answer with queue: {rule.queue}.",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordings", nargs="+", choices=list(WORDINGS), default=list(WORDINGS))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    split = tickets_split(PRESETS["tickets_dev"], DEV_SEED)
    rows = split.train + split.selection
    lm = make_lm("local")
    setup = study_setup(machine_speed(lm), rows=f"tickets_dev seed {DEV_SEED}: {len(rows)} training and selection "
                                                 "tickets", decoding="greedy")
    decides = {e.ticket: e.rule for e in rows}
    metric = TICKETS.make_metric(None)
    store = RESULTS / f"{STEM}.runs"
    scores = {}
    for name in args.wordings:
        report = evaluate_greedy(name, RoutedRules(decides.__getitem__, WORDINGS[name]), rows, metric, store, lm,
                                 "queue")
        scores[name] = [e.mean_score for e in report.examples]
    setup["load_average_at_end"] = load_average()
    lines = [f"# {__doc__.splitlines()[0]}", "", setup_sentence(setup) + ".", "",
             f"Rows: {setup['rows']}; each ticket shown the house rule that decides it.", "",
             "| wording | accuracy | against house [95% CI], won / lost, p |", "|---|---|---|"]
    for name, row in scores.items():
        versus = (compare_paired(scores["house"], row).verdict() if name != "house" and "house" in scores else "-")
        lines.append(f"| {name} | {sum(row) / len(row):.1%} | {versus} |")
    if {"route-to", "answer-with"} <= scores.keys():
        lines += ["", "answer-with against route-to: "
                  + compare_paired(scores["route-to"], scores["answer-with"]).verdict()]
    report = {"setup": setup, "wordings": {n: [WORDINGS[n](r) for r in HOUSE_RULES] for n in scores},
              "scores": scores}
    return write_study(RESULTS / f"{STEM}.json", report, "\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
