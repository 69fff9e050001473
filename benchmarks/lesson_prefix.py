"""New lessons on a repeatable greedy server: the whole prefix evaluated anew, or only the lesson on its base.

A verification tries each candidate lesson on a batch of tickets, and a library with retrieval shows each call
the lesson chosen for it: every new lesson block makes a new prefix. The repeatable greedy server
(`tfgrpo_dspy.lm.prefix`) evaluated a new prefix from scratch, the task's whole system message with it; with
``prefix_base_marker`` (the default since 2026-12-04) it evaluates the system message before the lesson block
once and each new block on top of it. This measures both in one run, as the demo evaluates (`evaluate_at_k`,
greedy, 4 threads, two replicas, DSPy's cache off so every call reaches the model):

    candidates     each of the kit's house rules alone as a one-lesson library on the same tickets, one rule
                   after the other, as a verification tries its candidates
    rules @ top-1  every house rule in one library, one retrieved per call: calls alternate between prefixes

Each workload runs once with whole prefixes and twice on bases, each run on servers of its own, the second
base run in reverse order so other lessons come first: a repeatable path changes no answer between the two.
The tickets are training tickets of seeds no study used (6000, 6001): nothing here is held-out accuracy, and
the accuracy columns only show that the answers stay the same kind.

    python benchmarks/lesson_prefix.py        # results/lesson_prefix.{json,md}
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.study import RESULTS  # noqa: E402
from provenance import git_revision  # noqa: E402

from tfgrpo_dspy.demo import machine_speed  # noqa: E402
from tfgrpo_dspy.inference.evaluation import evaluate_at_k  # noqa: E402
from tfgrpo_dspy.kits.tickets.generator import generate_tickets  # noqa: E402
from tfgrpo_dspy.kits.tickets.metric import queue_match  # noqa: E402
from tfgrpo_dspy.kits.tickets.rules import HOUSE_RULES  # noqa: E402
from tfgrpo_dspy.kits.tickets.task import make_program  # noqa: E402
from tfgrpo_dspy.library.jsonio import write_json_atomic  # noqa: E402
from tfgrpo_dspy.library.library import ExperienceLibrary  # noqa: E402
from tfgrpo_dspy.lm import LlamaCppEngine, make_lm  # noqa: E402
from tfgrpo_dspy.lm.server import ServerRegistry  # noqa: E402

logger = logging.getLogger(__name__)

TICKET_SEED = 6000
RUNS = ("whole prefix", "on bases", "on bases, reversed")


def lm_of_its_own(bases: bool) -> dspy.LM:
    """The embedded LM on servers of its own (fresh slots), evaluating new prefixes on bases or whole."""
    engine = LlamaCppEngine(registry=ServerRegistry())
    if not bases:  # the engine before bases
        engine.greedy_settings = replace(engine.greedy_settings, prefix_base_marker=None)
    default = make_lm("local", cache=False)
    return dspy.LM(default.model, engine=engine, cache=False, **default.kwargs)


def ratio(before: float, after: float) -> float | None:
    return round(before / after, 2) if after else None


def run_workload(lm, tickets, libraries: list[ExperienceLibrary]) -> tuple[float, list[str | None], float]:
    """Evaluate every library on the tickets in turn: seconds, answers in library-then-ticket order, accuracy."""
    seconds, answers, scores = 0.0, [], []
    for library in libraries:
        report = evaluate_at_k(make_program(), tickets, queue_match, k=1, temperature=0.0, num_threads=4,
                               lm=lm, library=library, top_k=1, answer_field="queue", progress=False)
        seconds += report.elapsed_seconds
        answers += [example.samples[0].answer for example in report.examples]
        scores += [example.samples[0].score for example in report.examples]
    return round(seconds, 1), answers, round(sum(scores) / len(scores), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6, help="tickets per candidate lesson (default 6)")
    parser.add_argument("--stem", default="lesson_prefix")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # Each run on servers of its own, so the reversed run finds slots holding nothing it is asked.
    lms = {"whole prefix": lm_of_its_own(bases=False), "on bases": lm_of_its_own(bases=True),
           "on bases, reversed": lm_of_its_own(bases=True)}
    speed = machine_speed(lms["on bases"])
    for lm in lms.values():  # load every server, both greedy replicas (two calls at once), before timing anything
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lm, ["Say OK.", "Say yes."]))
    tickets = generate_tickets(args.n, TICKET_SEED, split="train")
    rules = [rule.lesson for rule in HOUSE_RULES]
    workloads = {"candidates": ([ExperienceLibrary.from_texts([rule]) for rule in rules], tickets),
                 "rules @ top-1": ([ExperienceLibrary.from_texts(rules)],
                                   generate_tickets(4 * args.n, TICKET_SEED + 1, split="train"))}
    setup = {"commit": git_revision(), "date": time.strftime("%Y-%m-%d"), "speed": str(speed) if speed else None,
             "speed_at_start": asdict(speed) if speed else None, "ticket_seeds": [TICKET_SEED, TICKET_SEED + 1],
             "n": args.n, "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    rows = []
    for workload, (libraries, examples) in workloads.items():
        seconds, answers, accuracy = {}, {}, {}
        for name in RUNS:
            lm = lms[name]
            reverse = name.endswith("reversed")
            ordered = (libraries[::-1], examples[::-1]) if reverse else (libraries, examples)
            seconds[name], got, accuracy[name] = run_workload(lm, ordered[1], ordered[0])
            if reverse:  # back to the first run's order, to compare answer by answer
                per = len(examples)
                got = [a for block in [got[i:i + per] for i in range(0, len(got), per)][::-1] for a in block[::-1]]
            answers[name] = got
            logger.info("%s, %s: %.1f s, accuracy %.3f", workload, name, seconds[name], accuracy[name])
        whole, bases, again = (answers[name] for name in RUNS)
        rows.append({"workload": workload, "calls": len(whole), "seconds": seconds,
                     "speed_up": ratio(seconds["whole prefix"], seconds["on bases"]),
                     "flips_between_base_runs": sum(a != b for a, b in zip(bases, again, strict=True)),
                     "differing_from_whole_prefix": sum(a != b for a, b in zip(whole, bases, strict=True)),
                     "accuracy": accuracy})
    setup["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json_atomic(RESULTS / f"{args.stem}.json", {"setup": setup, "rows": rows})
    lines = ["# New lessons on the repeatable greedy server: whole prefix against lesson on its base", "",
             f"Commit {setup['commit']}, {setup['date']}; machine at the start: {setup['speed']}; load average "
             f"{setup['load_average_at_start']} at the start, {setup['load_average_at_end']} at the end; "
             f"training tickets (seeds {TICKET_SEED}, {TICKET_SEED + 1}), greedy, 4 threads, two replicas, "
             "DSPy's cache off.", "",
             "| workload | calls | whole prefix, s | on bases, s | reversed, s | speed-up | flips between the two "
             "base runs | answers differing from whole prefix | accuracy (whole / bases / reversed) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, acc = r["seconds"], r["accuracy"]
        lines.append(f"| {r['workload']} | {r['calls']} | {s['whole prefix']} | {s['on bases']} | "
                     f"{s['on bases, reversed']} | **{r['speed_up']}x** | {r['flips_between_base_runs']} | "
                     f"{r['differing_from_whole_prefix']} | {' / '.join(str(acc[name]) for name in RUNS)} |")
    (RESULTS / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
