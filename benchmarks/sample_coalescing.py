"""Sampled calls that share a prompt, sent together: one evaluation of the prompt against one per call.

The embedded engine sends sampled requests equal but for their seed that arrive together as one llama.cpp
request with n completions (`tfgrpo_dspy.lm.coalesce`, ``coalesce_samples=True``, the default since
2026-12-03). Two workloads of the tickets demo, each run with the engine as it was (``coalesce_samples=False``:
every request on its own, in its own slot, in the order the optimizer sent them then) and as it is (coalesced, in
the order the optimizer sends them now), side by side in one run, with the machine's rates at the start:

    rollouts          the demo's 24 training tickets (train split, seed 0), 4 rollouts each at temperature 0.7
                      through the ticket program, from 4 threads. As it was: rounds of 4 tickets, each round
                      sampling every ticket once before the next sample (a ticket's next rollout found its prompt
                      in its slot); as it is: a group's 4 rollouts sent together
    induction draws   sets of 3 training tickets that share their queue, shown as the induction shows them
                      (`format_failures`), 3 draws each of the induction Signature at temperature 0.9, from 4
                      threads. As it was: a set's draws next to each other (sent together, so coalesced when the
                      engine coalesces); as it is: draw by draw across the sets (every set's first draw, then
                      every second...), which the engine does not coalesce

DSPy's cache is off, so every call reaches the model. Rounds alternate the two settings (as it was, then as it is)
so that drift in the machine's speed falls on both; each has its own server, loaded before the first round.

    python benchmarks/sample_coalescing.py            # results/sample_coalescing.{json,md}
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.study import RESULTS  # noqa: E402
from provenance import git_revision  # noqa: E402

from tfgrpo_dspy.demo import machine_speed
from tfgrpo_dspy.kits.tickets.generator import generate_tickets
from tfgrpo_dspy.kits.tickets.task import TICKETS
from tfgrpo_dspy.library.jsonio import write_json_atomic
from tfgrpo_dspy.lm import make_lm
from tfgrpo_dspy.reflection.induction import Failure, InductionSet, format_failures
from tfgrpo_dspy.reflection.reflection import Reflector

logger = logging.getLogger(__name__)

GROUP_SIZE, DRAWS, THREADS = 4, 3, 4
SETTINGS = {"as it was (each request alone)": False, "as it is (coalesced)": True}


def induction_texts(trainset: list, size: int = 3, most: int = 7) -> list[str]:
    """Up to ``most`` sets of ``size`` training tickets sharing their queue (each queue's in chunks), as the
    induction shows them."""
    by_queue: dict[str, list[int]] = defaultdict(list)
    for i, example in enumerate(trainset):
        by_queue[example.queue].append(i)
    chunks = [members[c : c + size] for members in by_queue.values() for c in range(0, len(members) - size + 1, size)]
    sets = [InductionSet(tuple(Failure(i, trainset[i].queue, "") for i in chunk), shared=True) for chunk in chunks]
    return [format_failures(s, lambda i: trainset[i].inputs().toDict()) for s in sets[:most]]


def rollouts(lm: dspy.LM, trainset: list, round_: int, coalesced: bool) -> int:
    program = TICKETS.make_program()
    if coalesced:
        jobs = [(i, k) for i in range(len(trainset)) for k in range(GROUP_SIZE)]
    else:
        blocks = [range(b, min(b + THREADS, len(trainset))) for b in range(0, len(trainset), THREADS)]
        jobs = [(i, k) for block in blocks for k in range(GROUP_SIZE) for i in block]

    def one(job: tuple[int, int]) -> None:
        i, k = job
        seed = 10_000 * round_ + GROUP_SIZE * i + k
        with dspy.context(lm=lm.copy(rollout_id=seed, temperature=0.7, seed=seed)):
            program(**trainset[i].inputs().toDict())

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, jobs))
    return len(jobs)


def induction_draws(lm: dspy.LM, texts: list[str], round_: int, coalesced: bool) -> int:
    reflector = Reflector(lm, max_tokens=768)
    if coalesced:
        jobs = [(n, k) for k in range(DRAWS) for n in range(len(texts))]
    else:
        jobs = [(n, k) for n in range(len(texts)) for k in range(DRAWS)]

    def one(job: tuple[int, int]) -> None:
        n, k = job
        raw, error, _ = reflector.induce(texts[n], 1000 * round_ + k, 0.9)
        if raw is None:
            logger.info("an induction draw gave no lesson: %s", error)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, jobs))
    return len(jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of both settings (default 1)")
    parser.add_argument("--stem", default="sample_coalescing")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    lms = {name: make_lm("local", coalesce_samples=coalesce, cache=False, max_tokens=512)
           for name, coalesce in SETTINGS.items()}
    speed = machine_speed(next(iter(lms.values())))
    trainset = generate_tickets(40, 0, split="train")[:24]
    texts = induction_texts(trainset)
    for lm in lms.values():  # load both sampled servers before timing anything
        lm("Say OK.", temperature=0.7)
    setup = {"commit": git_revision(), "date": time.strftime("%Y-%m-%d"), "speed": str(speed) if speed else None,
             "speed_at_start": asdict(speed) if speed else None,
             "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    workloads = {"rollouts": lambda lm, r, coalesced: rollouts(lm, trainset, r, coalesced),
                 "induction draws": lambda lm, r, coalesced: induction_draws(lm, texts, r, coalesced)}
    seconds: dict[str, dict[str, list[float]]] = {w: {s: [] for s in SETTINGS} for w in workloads}
    calls: dict[str, int] = {}
    for round_ in range(args.rounds):
        for workload, run in workloads.items():
            for name, lm in lms.items():
                started = time.perf_counter()
                calls[workload] = run(lm, round_, SETTINGS[name])
                seconds[workload][name].append(round(time.perf_counter() - started, 3))
                logger.info("%s, %s, round %d: %.1f s", workload, name, round_ + 1, seconds[workload][name][-1])
    setup["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    before, after = SETTINGS
    rows = [{"workload": w, "calls": calls[w], **{name: s for name, s in seconds[w].items()},
             "ratio": round(sum(seconds[w][before]) / sum(seconds[w][after]), 2) if sum(seconds[w][after]) else None}
            for w in workloads]
    report = {"setup": setup, "induction_sets": len(texts), "rows": rows}
    write_json_atomic(RESULTS / f"{args.stem}.json", report)
    lines = ["# Sampled calls sharing a prompt: coalesced into one n-completion request or sent alone", "",
             f"Commit {setup['commit']}, {setup['date']}; machine at the start: {setup['speed']}; load average "
             f"{setup['load_average_at_start']} at the start, {setup['load_average_at_end']} at the end; "
             f"{args.rounds} round(s), the settings alternating.", "",
             f"| workload | calls | {before}, s | {after}, s | speed-up |", "|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['calls']} | {', '.join(f'{x:.1f}' for x in r[before])} | "
              f"{', '.join(f'{x:.1f}' for x in r[after])} | **{r['ratio']}x** |" for r in rows]
    (RESULTS / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
