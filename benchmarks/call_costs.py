"""Where the embedded model's time goes, call by call, and what repeatable prefix reuse saves: one run, side by side.

Two settings of the embedded engine, each with its own servers, measured in the same run:

    whole prompt   greedy calls on a one-slot server that evaluates every prompt whole, stopping at the ChatAdapter's
                   whole end marker (the settings until 2026-12-02: ``greedy_prefix_reuse=False``)
    prefix reuse   greedy calls that reuse their fixed prefix repeatably (`tfgrpo_dspy.lm.prefix`), answers that start
                   with the first output field's header already written (``prefill_output_header``: evaluated with
                   the prompt, not decoded) and stop at the marker's first words (`CHAT_ADAPTER_STOP`): the
                   defaults now

Sampled rollouts go to the 4-slot batched server, which reuses cached prefixes in both settings.

1. The machine's rates at the start: llama.cpp's own prompt-eval and decode timings for one fixed request.
2. Each call kind (a greedy tickets call, a sampled tickets rollout in a group of 4, a GSM8K ChainOfThought call,
   a greedy Banking77 call with its 77-intent answer type,
   an extraction on a tickets group, an induction over 4 failed tickets): prompt tokens, tokens reused from the
   cache, tokens evaluated, tokens decoded, llama.cpp's prompt-eval and decode milliseconds, the wall time, the
   ideal time from the rates of step 1 (evaluated tokens / prompt rate + decoded tokens / decode rate) and
   measured / ideal.
3. Held-out evaluation as the demo runs it (4 threads, greedy): tickets, GSM8K problems and Banking77 queries once
   with the whole prompt and twice with prefix reuse, chunk by chunk in rotating order (drift hits all runs alike);
   the answers that changed between the two prefix-reuse runs (flips) and the speed-up.

    python benchmarks/call_costs.py --gsm8k /work/shared/data/gsm8k/train.jsonl       # results/call_costs.*
    python benchmarks/call_costs.py --banking77 /work/shared/data/banking77/train.csv --tickets 0 \
        --stem call_costs_banking77                                                   # a greedy Banking77 call

Finished chunks are kept in ``results/call_costs.runs/`` and a rerun of the same command continues after them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy

# Run as a script, this folder is on sys.path already; loaded by path (the tests), it may not be.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison.chunked import rotating_chunks  # noqa: E402
from comparison.server_timings import ServerCall, Setting, calibrate, kind_row, timed_calls  # noqa: E402
from comparison.study import RESULTS, load_average, write_study  # noqa: E402
from provenance import git_revision  # noqa: E402

from tfgrpo_dspy.inference.evaluation import evaluate_at_k
from tfgrpo_dspy.inference.rollouts import GroupOutcome, run_rollout
from tfgrpo_dspy.kits.banking77 import banking77_splits, intent_match
from tfgrpo_dspy.kits.banking77 import make_program as banking77_program
from tfgrpo_dspy.kits.math.data import gsm8k_splits
from tfgrpo_dspy.kits.tickets.generator import generate_tickets
from tfgrpo_dspy.kits.tickets.metric import queue_match
from tfgrpo_dspy.kits.tickets.task import make_program
from tfgrpo_dspy.kits.wordproblems import numeric_match
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.lm.factory import CHAT_ADAPTER_END_MARKER, CHAT_ADAPTER_STOP
from tfgrpo_dspy.reflection.induction import Failure, InductionSet, format_failures
from tfgrpo_dspy.reflection.reflection import Reflector

logger = logging.getLogger(__name__)

# The engine options and the stop string of each setting.
SETTINGS = {"whole prompt": ({"greedy_prefix_reuse": False, "prefill_output_header": False}, CHAT_ADAPTER_END_MARKER),
            "prefix reuse": ({"greedy_prefix_reuse": True, "prefill_output_header": True}, CHAT_ADAPTER_STOP)}
SEED = 7  # tickets, GSM8K and Banking77 rows for timing only: no figure here chooses a default or reports accuracy


# -- the call kinds ------------------------------------------------------------------------------------
def tickets(n: int) -> list[dspy.Example]:
    return generate_tickets(n, SEED, split="heldout")


def banking77_queries(path: str, n: int) -> list[dspy.Example]:
    return banking77_splits(path, seed=SEED, sizes={"test": n})["test"]


def gsm8k_problems(path: str, n: int) -> list[dspy.Example]:
    rows = gsm8k_splits(path, seed=SEED, sizes={"test": n})["test"]
    return [dspy.Example(question=r.problem, answer=r.answer).with_inputs("question") for r in rows]


def greedy_call(program: dspy.Module, metric: Callable) -> Callable[[dspy.Example], Any]:
    return lambda example: run_rollout(program, example, example_index=0, sample_index=0, rollout_id=0,
                                       temperature=0.0, metric=metric)


def reflection_call(setting: Setting, examples: list[dspy.Example]) -> Callable[[GroupOutcome], Any]:
    reflector = Reflector(setting.lm, max_retries=0, max_tokens=768, max_trajectory_chars=8000)

    def extract(group: GroupOutcome) -> Any:
        example = examples[group.example_index]
        return reflector.extract(example.ticket, f"queue: {example.queue}", group, {}, ExperienceLibrary(),
                                 max_lessons=1, max_words=32)

    return extract


def induction_calls(setting: Setting, kind: str, examples: list[dspy.Example], draws: int = 3) -> list[float]:
    """Induction draws (sampled, so on the batched server in both settings) over sets of 4 tickets sharing their
    queue, the draws of a set one after another as the optimizer's threads send them."""
    setting.label(kind)
    by_queue: dict[str, list[int]] = {}
    for index, example in enumerate(examples):
        by_queue.setdefault(example.queue, []).append(index)
    sets = [InductionSet(tuple(Failure(i, f"queue: {q}", "") for i in members[:4]), True)
            for q, members in sorted(by_queue.items()) if len(members) >= 4]
    reflector = Reflector(setting.lm, max_retries=0, max_tokens=768)
    walls = []
    for induction_set in sets[:2]:
        text = format_failures(induction_set, lambda i: examples[i].inputs().toDict())
        for draw in range(draws):
            started = time.perf_counter()
            reflector.induce(text, draw, 0.9)
            walls.append(time.perf_counter() - started)
    return walls


def sampled_groups(setting: Setting, kind: str, examples: list[dspy.Example], group_size: int = 4
                   ) -> tuple[list[float], list[GroupOutcome]]:
    """Groups of sampled rollouts at temperature 0.7, one thread per rollout as the optimizer sends them; the wall
    time per rollout is the group's over its size."""
    setting.label(kind)
    walls, groups = [], []

    def one(job: tuple[int, int]) -> Any:
        index, k = job
        with dspy.context(lm=setting.lm):
            return run_rollout(make_program(), examples[index], example_index=index, sample_index=k,
                               rollout_id=1000 * index + k, temperature=0.7, metric=queue_match)

    with ThreadPoolExecutor(group_size) as pool:
        for index in range(len(examples)):
            started = time.perf_counter()
            rollouts = tuple(pool.map(one, [(index, k) for k in range(group_size)]))
            walls += [(time.perf_counter() - started) / group_size] * group_size
            groups.append(GroupOutcome(index, rollouts))
    return walls, groups


# -- held-out evaluation -------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalTask:
    name: str
    examples: list[dspy.Example]
    program: Callable[[], dspy.Module]
    metric: Callable
    answer_field: str
    chunk: int


RUNS = ("whole prompt", "prefix reuse", "prefix reuse#2")


def evaluate_chunks(task: EvalTask, settings: dict[str, Setting], store: Path) -> dict[str, Any]:
    """Every run on every chunk, the runs' order rotating from chunk to chunk; finished chunks are reused."""

    def evaluate(run: str, chunk: list[dspy.Example]) -> dict[str, Any]:
        setting = settings[run.split("#")[0]]
        setting.label(f"eval {task.name}")
        started = time.perf_counter()
        report = evaluate_at_k(task.program(), chunk, task.metric, k=1, temperature=0.0, num_threads=4,
                               lm=setting.lm, answer_field=task.answer_field, progress=False)
        return {"seconds": time.perf_counter() - started,
                "answers": [s.answer for e in report.examples for s in e.samples],
                "scores": [e.mean_score for e in report.examples]}

    done = rotating_chunks(store / f"{task.name}.json", task.name, RUNS, task.examples, task.chunk, evaluate)
    return summarize_eval(task, done, -(-len(task.examples) // task.chunk))


def summarize_eval(task: EvalTask, done: dict[str, Any], chunks: int) -> dict[str, Any]:
    def joined(run: str, field: str) -> list:
        return [x for number in range(chunks) for x in done[f"{run}/{number}"][field]]

    seconds = {run: round(sum(done[f"{run}/{n}"]["seconds"] for n in range(chunks)), 1) for run in RUNS}
    first, second, whole = joined("prefix reuse", "answers"), joined("prefix reuse#2", "answers"), joined(
        "whole prompt", "answers")
    return {"task": task.name, "examples": len(first), "seconds": seconds,
            "speedup": round(seconds["whole prompt"] / ((seconds["prefix reuse"] + seconds["prefix reuse#2"]) / 2), 2),
            "flips_between_prefix_reuse_runs": sum(a != b for a, b in zip(first, second, strict=True)),
            "answers_differing_from_whole_prompt": sum(a != b for a, b in zip(first, whole, strict=True)),
            "accuracy": {run: round(sum(joined(run, "scores")) / len(first), 3) for run in RUNS}}


# -- the report ----------------------------------------------------------------------------------------
def measure_kinds(settings: dict[str, Setting], calls: list[ServerCall], rates: dict[str, float], n: int,
                  gsm8k: list[dspy.Example] | None, banking77: list[dspy.Example] | None) -> list[dict[str, Any]]:
    """Each call kind in each setting, the settings' order alternating from kind to kind."""
    rows = []
    ticket_rows = tickets(n + 1)
    sampled = "tickets, sampled rollout (group of 4)"
    sampler = settings["prefix reuse"]  # sampled rollouts go to the same kind of batched server in both settings
    walls, groups = sampled_groups(sampler, sampled, ticket_rows[:3])
    rows.append(kind_row(sampled, sampler.name, walls, calls, rates))
    induced = "reflection: induce a rule from 4 failed tickets (sampled)"
    walls = induction_calls(sampler, induced, tickets(40))
    rows.append(kind_row(induced, sampler.name, walls, calls, rates))
    reflection_groups = [groups[0], *groups]  # the first call warms the prefix
    kinds = [("tickets, greedy Predict", ticket_rows, lambda st: greedy_call(make_program(), queue_match)),
             ("reflection: extract a lesson from a tickets group", reflection_groups,
              lambda st: reflection_call(st, ticket_rows))]
    if gsm8k:
        kinds.insert(1, ("GSM8K, greedy ChainOfThought", gsm8k,
                         lambda st: greedy_call(dspy.ChainOfThought("question -> answer"), numeric_match)))
    if banking77:
        kinds.append(("Banking77, greedy Predict (77-intent Literal)", banking77,
                      lambda st: greedy_call(banking77_program(), intent_match)))
    for number, (kind, items, make_call) in enumerate(kinds):
        for name in list(settings)[:: 1 if number % 2 == 0 else -1]:
            walls = timed_calls(settings[name], kind, items, make_call(settings[name]))
            rows.append(kind_row(kind, name, walls, calls, rates))
            logger.info("%s, %s: %.2f s per call", kind, name, sum(walls) / len(walls))
    return rows


def markdown(report: dict[str, Any]) -> str:
    rates, setup = report["rates_at_start"], report["setup"]
    lines = ["# Where the embedded model's time goes: whole prompt vs repeatable prefix reuse", "",
             f"One run on {setup['date']} at commit {setup['commit']}, {setup['cpu_count']} CPUs, load average at "
             f"start {setup['load_average_at_start']}, at end {setup['load_average_at_end']}. Machine rates at the "
             f"start (llama.cpp's timings, one request from scratch): prompt evaluation {rates['prompt_tokens_per_s']} "
             f"tokens/s, decode {rates['decode_tokens_per_s']} tokens/s.", "",
             "## Per call", "",
             "Per program call (a prefix-reuse call includes its prefix reset); ideal = evaluated tokens / prompt rate "
             "+ decoded tokens / decode rate; the first call of each kind (which evaluates the prefix from scratch) "
             "is left out. A sampled rollout's wall time is its group's over 4 (the 4 decode as one batch).", "",
             "| call | setting | calls | prompt tok | cached tok | evaluated tok | decoded tok | llama.cpp prompt s "
             "| llama.cpp decode s | wall s | ideal s | measured / ideal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["kinds"]:
        lines.append(f"| {r['kind']} | {r['setting']} | {r['calls']} | {r['prompt_tokens']} | {r['cached_tokens']} "
                     f"| {r['evaluated_tokens']} | {r['decoded_tokens']} | {r['llama_prompt_s']} | "
                     f"{r['llama_decode_s']} | {r['wall_s']} | {r['ideal_s']} | {r['measured_over_ideal']} |")
    lines += ["", "## Held-out evaluation (greedy, 4 threads, as the demo runs it)", "",
              "| task | examples | whole prompt s | prefix reuse s | prefix reuse, again s | speed-up | flips between "
              "the two prefix-reuse runs | answers differing from whole prompt | accuracy (whole / reuse / again) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for e in report["evaluations"]:
        s, a = e["seconds"], e["accuracy"]
        lines.append(f"| {e['task']} | {e['examples']} | {s['whole prompt']} | {s['prefix reuse']} | "
                     f"{s['prefix reuse#2']} | {e['speedup']}x | {e['flips_between_prefix_reuse_runs']} | "
                     f"{e['answers_differing_from_whole_prompt']} | {a['whole prompt']} / {a['prefix reuse']} / "
                     f"{a['prefix reuse#2']} |")
    lines += ["", "Answers that differ from the whole-prompt setting are not flips: the reused prefix is computed in "
              "another batch shape than a whole prompt, so the two settings are two (each repeatable) computations."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", metavar="PATH", help="GSM8K jsonl, hub folder or id (without it: tickets only)")
    parser.add_argument("--banking77", metavar="PATH", help="Banking77 CSV (text,category), hub folder or id")
    parser.add_argument("--banking77-n", type=int, default=100, help="Banking77 queries evaluated (default 100)")
    parser.add_argument("--tickets", type=int, default=100, help="held-out tickets evaluated (default 100; 0: none)")
    parser.add_argument("--gsm8k-n", type=int, default=50, help="held-out GSM8K problems evaluated (default 50)")
    parser.add_argument("--calls", type=int, default=6, help="calls per kind in the per-call table (default 6)")
    parser.add_argument("--stem", default="call_costs", help="results/<stem>.{json,md}, results/<stem>.runs/")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    store = RESULTS / f"{args.stem}.runs"
    store.mkdir(parents=True, exist_ok=True)
    setup = {"date": time.strftime("%Y-%m-%d"), "commit": git_revision(), "cpu_count": os.cpu_count(),
             "load_average_at_start": load_average(), "argv": sys.argv[1:],
             "seed": SEED, "settings": {name: {**options, "stop": stop} for name, (options, stop) in SETTINGS.items()}}
    calls: list[ServerCall] = []
    settings = {name: Setting(name, options, stop, calls, max_tokens=384) for name, (options, stop) in SETTINGS.items()}
    rates = calibrate(settings["whole prompt"])
    logger.info("machine rates now: %s", rates)
    gsm8k = gsm8k_problems(args.gsm8k, args.gsm8k_n) if args.gsm8k else None
    banking77 = banking77_queries(args.banking77, args.banking77_n) if args.banking77 else None
    kinds_path = store / "kinds.json"
    if kinds_path.exists():
        kinds = read_json(kinds_path)
    else:
        kinds = {"rates": rates, "rows": measure_kinds(settings, calls, rates, args.calls,
                                                       gsm8k[: max(args.calls // 2, 2) + 1] if gsm8k else None,
                                                       banking77[: args.calls + 1] if banking77 else None),
                 "calls": [asdict(c) for c in calls]}
        write_json_atomic(kinds_path, kinds)
    tasks = [EvalTask("tickets", tickets(args.tickets), make_program, queue_match, "queue", 10)] if args.tickets else []
    if gsm8k:
        tasks.append(EvalTask("gsm8k", gsm8k, lambda: dspy.ChainOfThought("question -> answer"), numeric_match,
                              "answer", 5))
    if banking77:
        tasks.append(EvalTask("banking77", banking77, banking77_program, intent_match, "intent", 10))
    evaluations = [evaluate_chunks(task, settings, store) for task in tasks]
    setup["load_average_at_end"] = load_average()
    report = {"setup": setup, "rates_at_start": kinds["rates"], "rates_now": rates, "kinds": kinds["rows"],
              "evaluations": evaluations}
    return write_study(RESULTS / f"{args.stem}.json", report, markdown(report))



if __name__ == "__main__":
    sys.exit(main())
