"""Greedy evaluation on one repeatable server or on two side by side: the time, and whether any answer changed.

The embedded engine serves greedy calls on repeatable servers that each take one request at a time
(`tfgrpo_dspy.lm.prefix`); since 2026-12-04 it runs two of them side by side (`tfgrpo_dspy.lm.replicas`,
``greedy_replicas=2``). This measures both settings in one run, as the demo evaluates (`evaluate_at_k`, greedy,
4 threads, DSPy's cache off so every call reaches the model):

    no library     held-out tickets with the unoptimized ticket program: every call shares one prefix
    rules @ top-1  the same tickets with the kit's house rules as a library, one retrieved per call: calls
                   alternate between as many prefixes as rules, as a verification or a routed library does

Each workload runs once on one server, then twice on two replicas (the second run measures flips: a repeatable
path changes no answer), and the answers of all three runs are compared. The held-out tickets come from a seed
no study used (4000), since nothing is chosen from them.

    python benchmarks/greedy_replicas.py        # results/greedy_replicas.{json,md}
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.study import RESULTS  # noqa: E402
from provenance import git_revision  # noqa: E402

from tfgrpo_dspy.demo import machine_speed  # noqa: E402
from tfgrpo_dspy.inference.evaluation import EvalReport, evaluate_at_k  # noqa: E402
from tfgrpo_dspy.kits.tickets.generator import generate_tickets  # noqa: E402
from tfgrpo_dspy.kits.tickets.metric import queue_match  # noqa: E402
from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES  # noqa: E402
from tfgrpo_dspy.kits.tickets.task import make_program  # noqa: E402
from tfgrpo_dspy.library.jsonio import write_json_atomic  # noqa: E402
from tfgrpo_dspy.library.library import ExperienceLibrary  # noqa: E402
from tfgrpo_dspy.lm import make_lm  # noqa: E402

logger = logging.getLogger(__name__)

HELD_OUT_SEED = 4000
RUNS = (("one server", 1), ("two replicas", 2), ("two replicas, again", 2))


def answers(report: EvalReport) -> list[str | None]:
    return [example.samples[0].answer for example in report.examples]


def ratio(before: float, after: float) -> float | None:
    return round(before / after, 2) if after else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60, help="held-out tickets (default 60)")
    parser.add_argument("--stem", default="greedy_replicas")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    lms = {replicas: make_lm("local", greedy_replicas=replicas, cache=False) for replicas in (1, 2)}
    speed = machine_speed(lms[1])
    for lm in lms.values():  # load every server before timing anything
        lm("Say OK.")
    tickets = generate_tickets(args.n, HELD_OUT_SEED, split="heldout")
    workloads = {"no library": None,
                 "rules @ top-1": ExperienceLibrary.from_texts([rule.lesson for rule in HOUSE_RULES])}
    setup = {"commit": git_revision(), "date": time.strftime("%Y-%m-%d"), "speed": str(speed) if speed else None,
             "speed_at_start": asdict(speed) if speed else None, "held_out_seed": HELD_OUT_SEED, "n": args.n,
             "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    rows = []
    for workload, library in workloads.items():
        seconds, runs, accuracy = {}, {}, {}
        for name, replicas in RUNS:
            report = evaluate_at_k(make_program(), tickets, queue_match, k=1, temperature=0.0, num_threads=4,
                                   lm=lms[replicas], library=library, top_k=1, answer_field="queue",
                                   progress=False)
            seconds[name], runs[name] = round(report.elapsed_seconds, 1), answers(report)
            accuracy[name] = round(report.mean_at_k, 3)
            logger.info("%s, %s: %.1f s, accuracy %.3f", workload, name, report.elapsed_seconds, report.mean_at_k)
        one, two, again = (runs[name] for name, _ in RUNS)
        rows.append({"workload": workload, "calls": args.n, "seconds": seconds,
                     "speed_up": ratio(seconds["one server"], seconds["two replicas"]),
                     "speed_up_again": ratio(seconds["one server"], seconds["two replicas, again"]),
                     "flips_between_replica_runs": sum(a != b for a, b in zip(two, again, strict=True)),
                     "differing_from_one_server": sum(a != b for a, b in zip(one, two, strict=True)),
                     "accuracy": accuracy})
    setup["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = {"setup": setup, "rows": rows}
    write_json_atomic(RESULTS / f"{args.stem}.json", report)
    lines = ["# Greedy evaluation: one repeatable server against two side by side", "",
             f"Commit {setup['commit']}, {setup['date']}; machine at the start: {setup['speed']}; load average "
             f"{setup['load_average_at_start']} at the start, {setup['load_average_at_end']} at the end; "
             f"{args.n} held-out tickets (seed {HELD_OUT_SEED}), greedy, 4 threads, DSPy's cache off.", "",
             "| workload | calls | one server, s | two replicas, s | again, s | speed-up | flips between the two "
             "replica runs | answers differing from one server | accuracy (one / two / again) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, acc = r["seconds"], r["accuracy"]
        lines.append(f"| {r['workload']} | {r['calls']} | {s['one server']} | {s['two replicas']} | "
                     f"{s['two replicas, again']} | **{r['speed_up']}x**, {r['speed_up_again']}x | "
                     f"{r['flips_between_replica_runs']} | {r['differing_from_one_server']} | "
                     f"{' / '.join(str(acc[name]) for name, _ in RUNS)} |")
    (RESULTS / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
