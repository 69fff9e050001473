"""Aggregate decode throughput of the embedded LM: one group of G sequences batched vs one at a time.

Training-Free GRPO samples G rollouts per question. The engine sends them from G threads to one
llama.cpp server with G slots, which decodes them as one batch. This script measures, side by side
in one run and with the same prompts, G requests in parallel against the same G requests in series.

Every request decodes exactly ``--max-tokens`` tokens (``ignore_eos``) with the prompt cache off,
so both modes do the same work. Rounds alternate serial and batched runs so that drift in the
machine's load hits both modes alike.

    python benchmarks/throughput.py                       # 1.5B and 0.5B, writes benchmarks/results/
    python benchmarks/throughput.py --models qwen2.5-coder-1.5b --rounds 1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from dspy.lm15 import Config, Message, Request, Response

from tfgrpo_dspy.lm import LlamaCppEngine

logger = logging.getLogger(__name__)

PROMPTS = (
    "A baker sells 24 muffins in the morning and twice as many in the afternoon. How many in total? Explain.",
    "Tom has 3 boxes with 12 pencils each and gives away 10 pencils. How many are left? Explain step by step.",
    "A train travels 60 km/h for 2.5 hours, then 80 km/h for 1 hour. How far does it go? Show your work.",
    "Write a Python function that returns the n-th Fibonacci number iteratively, and explain it.",
    "A rectangle is 7 cm wide and 3 times as long. What are its area and perimeter? Explain.",
    "Sara reads 15 pages a day. How many days to finish a 240-page book? Explain your reasoning.",
    "Explain how binary search works and give its time complexity.",
    "If 5 pens cost $3.75, how much do 12 pens cost? Show each step.",
)


@dataclass(frozen=True)
class RunResult:
    mode: str  # "serial" or "batched"
    round: int
    sequences: int
    wall_seconds: float
    prompt_tokens: int
    completion_tokens: int

    @property
    def completion_tokens_per_second(self) -> float:
        return self.completion_tokens / self.wall_seconds

    def to_dict(self) -> dict:
        return {**asdict(self), "completion_tokens_per_second": round(self.completion_tokens_per_second, 2)}


def _requests(model: str, group_size: int, max_tokens: int) -> list[Request]:
    config = Config(
        max_tokens=max_tokens,
        temperature=0.0,
        # Same work in both modes: no early end of sequence, no prompt reuse across runs.
        extensions={"ignore_eos": True, "cache_prompt": False},
    )
    return [
        Request(model=f"local/{model}", messages=(Message.user(PROMPTS[k % len(PROMPTS)]),), config=config)
        for k in range(group_size)
    ]


def _summarise(mode: str, round_index: int, responses: list[Response], seconds: float) -> RunResult:
    return RunResult(
        mode=mode,
        round=round_index,
        sequences=len(responses),
        wall_seconds=round(seconds, 3),
        prompt_tokens=sum(r.usage.input_tokens or 0 for r in responses),
        completion_tokens=sum(r.usage.output_tokens or 0 for r in responses),
    )


def run_serial(engine: LlamaCppEngine, requests: list[Request], round_index: int) -> RunResult:
    started = time.perf_counter()
    responses = [engine.complete(request) for request in requests]
    return _summarise("serial", round_index, responses, time.perf_counter() - started)


def run_batched(engine: LlamaCppEngine, requests: list[Request], round_index: int) -> RunResult:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        responses = list(pool.map(engine.complete, requests))
    return _summarise("batched", round_index, responses, time.perf_counter() - started)


def benchmark_model(model: str, *, group_size: int, max_tokens: int, rounds: int, n_threads: int) -> dict:
    engine = LlamaCppEngine(model, n_parallel=group_size, n_threads=n_threads)
    requests = _requests(model, group_size, max_tokens)
    started = time.perf_counter()
    engine.complete(_requests(model, 1, 4)[0])  # load (and join, the first time) before timing
    load_seconds = time.perf_counter() - started
    runs: list[RunResult] = []
    for round_index in range(rounds):
        for run in (run_serial, run_batched) if round_index % 2 == 0 else (run_batched, run_serial):
            result = run(engine, requests, round_index)
            logger.info(
                "%s %s round %d: %.1f tok/s", model, result.mode, round_index, result.completion_tokens_per_second
            )
            runs.append(result)
    engine.close()
    serial = statistics.median(r.completion_tokens_per_second for r in runs if r.mode == "serial")
    batched = statistics.median(r.completion_tokens_per_second for r in runs if r.mode == "batched")
    return {
        "model": model,
        "load_seconds_incl_first_call": round(load_seconds, 2),
        "serial_tokens_per_second": round(serial, 2),
        "batched_tokens_per_second": round(batched, 2),
        "batched_over_serial": round(batched / serial, 2),
        "runs": [r.to_dict() for r in runs],
    }


def write_markdown(report: dict, path: Path) -> None:
    setup = report["setup"]
    lines = [
        "# Embedded LM throughput: batched group vs one sequence at a time",
        "",
        f"{setup['group_size']} sequences of {setup['max_tokens']} new tokens each (ignore_eos, prompt cache off), "
        f"{setup['n_threads']} threads, xllamacpp {setup['xllamacpp']}, {setup['cpu_count']} CPUs, "
        f"load average at start {setup['load_average_at_start']}, at end {setup['load_average_at_end']}. "
        f"Median over {setup['rounds']} rounds; "
        "aggregate tokens/s = all completion tokens of the group / wall time of the group (prompt eval included).",
        "",
    ]
    busiest = max(setup["load_average_at_start"][0], setup["load_average_at_end"][0])
    if busiest > setup["cpu_count"]:
        lines += [
            f"**Warning: load average {busiest} on {setup['cpu_count']} CPUs: other processes shared the CPUs, "
            "so these figures measure contention more than the engine. Re-run on an idle machine.**",
            "",
        ]
    lines += [
        "| model | serial tok/s | batched tok/s | batched / serial | load + first call (s) |",
        "|---|---|---|---|---|",
    ]
    for result in report["results"]:
        lines.append(
            f"| {result['model']} | {result['serial_tokens_per_second']} | {result['batched_tokens_per_second']} "
            f"| {result['batched_over_serial']}x | {result['load_seconds_incl_first_call']} |"
        )
    lines += [
        "",
        "Runs:",
        "",
        "| model | round | mode | wall s | prompt tok | completion tok | tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in report["results"]:
        for run in result["runs"]:
            lines.append(
                f"| {result['model']} | {run['round']} | {run['mode']} | {run['wall_seconds']} "
                f"| {run['prompt_tokens']} | {run['completion_tokens']} | {run['completion_tokens_per_second']} |"
            )
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n-threads", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    import xllamacpp

    report = {
        "setup": {
            "group_size": args.group_size,
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "n_threads": args.n_threads,
            "cpu_count": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "xllamacpp": xllamacpp.__version__,
            "python": platform.python_version(),
        },
        "results": [
            benchmark_model(
                model,
                group_size=args.group_size,
                max_tokens=args.max_tokens,
                rounds=args.rounds,
                n_threads=args.n_threads,
            )
            for model in args.models
        ],
    }
    # Other work on the machine slows both modes; the load average says how much the figures can be trusted.
    report["setup"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, args.out_dir / "throughput.md")
    print((args.out_dir / "throughput.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
