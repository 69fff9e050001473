"""Systems cost of TrainingFreeGRPO itself: parallel efficiency and the optimizer's own CPU time.

(a) A fake LM engine answers every request after a fixed latency (default 50 ms of sleep), with unlimited
    concurrency and scripted answers that make every group mixed (half right, half wrong). A compile's
    wall time is divided by its ideal critical path, the time a perfectly parallel run would take: per
    step, the sequential chain rollout -> summary -> extraction -> update, one latency each. It is also
    divided by the ideal at the run's thread count (each phase in ceil(calls / num_threads) waves), which
    isolates the optimizer's overhead from the thread limit. Measured for num_threads = 1, 4 and 16.
(b) The process CPU time of each compile per rollout and per LM call: sleeping costs no CPU, so this is
    what DSPy and the optimizer spend (formatting, parsing, copying programs, bookkeeping), not the LM.
(c) The embedded model's own throughput comes from benchmarks/throughput.py's results, when present.

Every figure is a ratio or a comparison measured in the same run.

    python benchmarks/systems.py                      # writes benchmarks/results/systems.json and .md
    python benchmarks/systems.py --latency 0.02 --threads 1 4
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import re
import shlex
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy
from dspy.lm15 import Message, Request, Response, TextPart, Usage, response_to_events

from tfgrpo_dspy import TrainingFreeGRPO

RESULTS_DIR = Path(__file__).resolve().parent / "results"
_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\Z)", re.DOTALL)
PHASES = ("policy", "summary", "extract", "update")


def call_kind(system: str) -> str:
    """Which call of the loop a request is, from the output fields its ChatAdapter prompt asks for."""
    if "[[ ## first_divergence ## ]]" in system:
        return "summary"
    if "[[ ## operations ## ]]" in system:
        return "update"
    if "[[ ## lessons ## ]]" in system:
        return "extract"
    return "policy"


_WORDS = ("apples", "trains", "coins", "ladders", "buckets", "kites", "rivers", "lamps", "boxes", "clocks",
          "tickets", "gardens", "bridges", "candles", "wagons", "shelves", "pencils", "fences", "barrels", "maps")


class FixedLatencyEngine:
    """A DSPy engine that sleeps ``latency`` seconds per request and answers from a script.

    The policy is right on every other attempt at each question, so every group of even size is mixed;
    the reflection calls return one lesson per group and apply all proposed adds.
    """

    def __init__(self, latency: float):
        if latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {latency!r}")
        self.latency = latency
        self.kinds: Counter[str] = Counter()
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def complete(self, request: Request) -> Response:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or ())
        user = request.messages[-1].text or ""
        inputs = {key: value.strip() for key, value in _FIELD.findall(user)}
        kind = call_kind(system)
        with self._lock:
            self.kinds[kind] += 1
            attempt = self._attempts[inputs.get("question", "")] if kind == "policy" else 0
            if kind == "policy":
                self._attempts[inputs.get("question", "")] += 1
        time.sleep(self.latency)
        text = _format(self._answer(kind, inputs, attempt))
        return Response(id=None, model="fixed-latency", message=Message.assistant([TextPart(text)]),
                        finish_reason="stop",
                        usage=Usage(input_tokens=len(system + user) // 4, output_tokens=len(text) // 4,
                                    total_tokens=(len(system + user) + len(text)) // 4))

    @staticmethod
    def _answer(kind: str, inputs: dict[str, str], attempt: int) -> dict[str, Any]:
        if kind == "summary":
            return {"summary": "1. read the question 2. computed", "experiences_used": [],
                    "first_divergence": "none"}
        if kind == "extract":
            # One distinct, general lesson per question (distinct words, so no two are clustered together).
            rule = zlib.crc32(inputs.get("task_inputs", "").encode())
            topic = " and ".join(_WORDS[(rule >> (5 * k)) % len(_WORDS)] for k in range(3))
            return {"difference": "the winners checked each quantity", "misleading": [], "useful": [],
                    "lessons": [{"condition": f"a question counts {topic}", "action": "check each count"}]}
        if kind == "update":
            lessons = re.findall(r"- lesson supported by \d+ example\(s\): (.*)$", inputs.get("proposals", ""),
                                 re.MULTILINE)
            return {"operations": [{"op": "add", "text": text, "reason": "proposal"} for text in lessons]
                    or [{"op": "keep"}]}
        number = re.search(r"(\d+)", inputs.get("question", "0")).group(1)
        return {"reasoning": "add two", "answer": str(int(number) + 2) if attempt % 2 == 0 else "wrong"}

    def stream(self, request: Request) -> Any:
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass

    def __deepcopy__(self, memo: dict) -> FixedLatencyEngine:
        return self


def _format(fields: dict[str, Any]) -> str:
    body = "".join(f"[[ ## {k} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}\n\n" for k, v in fields.items())
    return body + "[[ ## completed ## ]]"


def exact_match(example: dspy.Example, prediction: Any, trace: Any = None) -> float:
    return float(str(prediction.answer).strip() == example.answer)


def make_trainset(n: int) -> list[dspy.Example]:
    return [dspy.Example(question=f"What is {i} + 2?", answer=str(i + 2)).with_inputs("question") for i in range(n)]


@dataclass(frozen=True)
class StepPhases:
    """The LM calls of each phase of one step (phases with no call add nothing to the critical path)."""

    rollouts: int
    summaries: int
    extractions: int
    updates: int

    def as_list(self) -> list[int]:
        return [self.rollouts, self.summaries, self.extractions, self.updates]


def step_phases(step: Any, group_size: int) -> StepPhases:
    """Calls per phase from one StepStats (well-formed scripted answers: no reflection retries)."""
    summaries = step.informative_groups * group_size
    extractions = step.informative_groups
    return StepPhases(step.rollouts, summaries, extractions, step.reflection_usage.calls - summaries - extractions)


def ideal_seconds(phases: Sequence[StepPhases], latency: float, num_threads: int | None) -> float:
    """Time of a run with zero overhead: unlimited threads when ``num_threads`` is None."""
    waves = 0
    for step in phases:
        for calls in step.as_list():
            if calls:
                waves += 1 if num_threads is None else math.ceil(calls / num_threads)
    return waves * latency


@dataclass(frozen=True)
class ParallelRun:
    num_threads: int
    wall_seconds: float
    cpu_seconds: float
    steps: int
    rollouts: int
    lm_calls: int
    calls_by_kind: dict[str, int]
    critical_path_seconds: float
    thread_bound_ideal_seconds: float

    @property
    def wall_over_critical_path(self) -> float:
        return self.wall_seconds / self.critical_path_seconds

    @property
    def wall_over_thread_bound_ideal(self) -> float:
        return self.wall_seconds / self.thread_bound_ideal_seconds

    @property
    def cpu_ms_per_rollout(self) -> float:
        return 1000 * self.cpu_seconds / self.rollouts

    @property
    def cpu_ms_per_lm_call(self) -> float:
        return 1000 * self.cpu_seconds / self.lm_calls

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "wall_over_critical_path": round(self.wall_over_critical_path, 3),
                "wall_over_thread_bound_ideal": round(self.wall_over_thread_bound_ideal, 3),
                "cpu_ms_per_rollout": round(self.cpu_ms_per_rollout, 2),
                "cpu_ms_per_lm_call": round(self.cpu_ms_per_lm_call, 2)}


def measure_parallel(num_threads: int, *, latency: float, train_n: int, group_size: int, epochs: int,
                     batch_size: int | None) -> ParallelRun:
    """One compile on the fixed-latency engine; wall and process CPU time around ``compile`` only."""
    engine = FixedLatencyEngine(latency)
    lm = dspy.LM("fake/fixed-latency", engine=engine, cache=False, num_retries=0)
    # The per-group reflection and the batch update: the phases this accounting counts (no induction, no
    # verification, which the fake engine's scripted answers cannot exercise).
    optimizer = TrainingFreeGRPO(metric=exact_match, group_size=group_size, epochs=epochs, batch_size=batch_size,
                                 num_threads=num_threads, reflection_lm=lm, progress=False, reflection_retries=0,
                                 failed_groups=False, induction=False, verify=False)
    program, trainset = dspy.ChainOfThought("question -> answer"), make_trainset(train_n)
    with dspy.context(lm=lm):
        cpu, wall = time.process_time(), time.perf_counter()
        compiled = optimizer.compile(program, trainset=trainset)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    steps = compiled.tfgrpo_result.steps
    phases = [step_phases(s, group_size) for s in steps]
    total_calls = sum(engine.kinds.values())
    if sum(sum(p.as_list()) for p in phases) != total_calls:
        raise RuntimeError(f"phase accounting {phases} does not match the engine's {dict(engine.kinds)} calls")
    return ParallelRun(
        num_threads=num_threads,
        wall_seconds=round(wall, 3),
        cpu_seconds=round(cpu, 3),
        steps=len(steps),
        rollouts=sum(s.rollouts for s in steps),
        lm_calls=total_calls,
        calls_by_kind=dict(engine.kinds),
        critical_path_seconds=round(ideal_seconds(phases, latency, None), 3),
        thread_bound_ideal_seconds=round(ideal_seconds(phases, latency, num_threads), 3),
    )


def embedded_throughput(results_dir: Path) -> dict[str, Any] | None:
    """The embedded model's batched-vs-serial figures from benchmarks/throughput.py, if it has been run."""
    path = results_dir / "throughput.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return {
        "source": str(path.relative_to(results_dir.parent.parent)) if results_dir.parent.parent in path.parents
        else str(path),
        "setup": report.get("setup"),
        "models": [{key: r.get(key) for key in ("model", "serial_tokens_per_second", "batched_tokens_per_second",
                                               "batched_over_serial")} for r in report.get("results", [])],
    }


def write_markdown(report: dict[str, Any], path: Path) -> Path:
    setup = report["setup"]
    lines = [
        "# TrainingFreeGRPO systems cost",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Fake LM: {setup['latency_seconds'] * 1000:.0f} ms per request, unlimited concurrency, scripted answers "
        f"(every group mixed). {setup['train_n']} training examples, group size {setup['group_size']}, "
        f"{setup['epochs']} epoch(s), batch size {setup['batch_size'] or 'all'}. {setup['cpu_count']} CPUs; "
        f"load average {setup['load_average'][0]} at start, {setup['load_average'][1]} at end (other work on "
        "the machine slows the CPU-bound part and inflates the ratios).",
        "",
        "Critical path = per step, rollout -> summary -> extraction -> update, one latency each (a perfectly "
        "parallel run). Thread-bound ideal = each phase in ceil(calls / threads) waves of one latency.",
        "",
        "| threads | wall s | critical path s | wall / critical path | thread-bound ideal s "
        "| wall / thread-bound ideal | LM calls | CPU ms / rollout | CPU ms / LM call |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report["parallel"]:
        lines.append(
            f"| {run['num_threads']} | {run['wall_seconds']:.2f} | {run['critical_path_seconds']:.2f} "
            f"| {run['wall_over_critical_path']:.2f} | {run['thread_bound_ideal_seconds']:.2f} "
            f"| {run['wall_over_thread_bound_ideal']:.2f} | {run['lm_calls']} | {run['cpu_ms_per_rollout']:.1f} "
            f"| {run['cpu_ms_per_lm_call']:.1f} |"
        )
    lines += ["", "## Embedded model throughput", ""]
    throughput = report["embedded_throughput"]
    if throughput is None:
        lines.append("Not measured here: run `python benchmarks/throughput.py` (writes results/throughput.json), "
                     "then rerun this script.")
    else:
        setup = throughput.get("setup") or {}
        lines += [f"From `{throughput['source']}` (benchmarks/throughput.py), measured at load average "
                  f"{setup.get('load_average_at_start')} -> {setup.get('load_average_at_end')} on "
                  f"{setup.get('cpu_count')} CPUs (a loaded machine lowers both columns).", "",
                  "| model | serial tok/s | batched tok/s | batched / serial |", "|---|---|---|---|"]
        for model in throughput["models"]:
            lines.append(f"| {model['model']} | {model['serial_tokens_per_second']} "
                         f"| {model['batched_tokens_per_second']} | {model['batched_over_serial']} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per fake LM request")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--train-n", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.latency <= 0:
        parser.error("--latency must be > 0 (the ratios divide by it)")
    if any(t < 1 for t in args.threads):
        parser.error("--threads must be positive")
    logging.basicConfig(level=logging.WARNING)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    load_start = os.getloadavg()[0]
    runs = []
    for threads in args.threads:
        run = measure_parallel(threads, latency=args.latency, train_n=args.train_n, group_size=args.group_size,
                               epochs=args.epochs, batch_size=args.batch_size)
        print(f"threads {threads:2d}: wall {run.wall_seconds:.2f} s = {run.wall_over_critical_path:.2f} x critical "
              f"path, {run.wall_over_thread_bound_ideal:.2f} x thread-bound ideal; CPU "
              f"{run.cpu_ms_per_rollout:.1f} ms/rollout", flush=True)
        runs.append(run)
    report = {
        "format": "tfgrpo-systems",
        "version": 1,
        "command": shlex.join(["python", *(sys.argv if argv is None else ["benchmarks/systems.py", *argv])]),
        "setup": {"latency_seconds": args.latency, "train_n": args.train_n, "group_size": args.group_size,
                  "epochs": args.epochs, "batch_size": args.batch_size, "cpu_count": os.cpu_count(),
                  "python": platform.python_version(), "dspy": dspy.__version__,
                  "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)]},
        "parallel": [run.to_dict() for run in runs],
        "embedded_throughput": embedded_throughput(args.out_dir),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "systems.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    path = write_markdown(report, args.out_dir / "systems.md")
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
