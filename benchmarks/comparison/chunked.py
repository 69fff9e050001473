"""Evaluations saved chunk by chunk, so that a rerun resumes after the last saved chunk.

`evaluate_in_chunks`: one program greedy on a study's rows, refused when made otherwise. The record
(lessons_study's layout, ``<name>.json``): scores and answers in row order, program and metric errors, prompt and
completion tokens, seconds, the load average at the end, and ``made_with``: the settings its scores depend on
besides the program. While unfinished it is ``<name>.partial.json``, rewritten after every
chunk, so an evaluation of more than an hour on a slow machine can be run in pieces.

`rotating_chunks`: several runs (engine settings, repeats) on the same rows, the runs' order rotating from chunk to
chunk so that drift in the machine's speed falls on all of them alike; one file maps ``"<run>/<chunk number>"``
to what that run measured on that chunk (call_costs' layout).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.inference.evaluation import EvalReport, evaluate_at_k
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MadeWith:
    """What a condition's scores depend on besides the condition: a saved record is reused only if they match."""

    n: int
    seed: int
    lm: str
    max_tokens: int
    decoding: str  # greedy on the one-slot repeatable server, or on the batched server with its prompt cache

    def check(self, record: dict[str, Any], path: Path) -> dict[str, Any]:
        """``record`` when it was made with these settings; otherwise an error that names what differs."""
        saved = record.get("made_with")
        if not isinstance(saved, dict):
            raise ValueError(f"{path} does not say what it was made with (it predates records that name their n, "
                             "seed, LM, max_tokens and decoding), so it cannot be paired safely: pass another "
                             f"--runs, or add \"made_with\": {json.dumps(asdict(self))} to it if it was made so")
        differing = [f"{key} {saved.get(key)!r} (now {value!r})" for key, value in asdict(self).items()
                     if saved.get(key) != value]
        if differing:
            raise ValueError(f"{path} was made with another {', '.join(differing)}: its problems or decoding differ "
                             "from this run's; pass another --runs, or the settings it was made with")
        return record


def evaluate_in_chunks(path: Path, name: str, make_program: Callable[[], dspy.Module], examples: list[dspy.Example],
                       metric: Callable, answer_field: str, lm: dspy.LM, threads: int, made_with: MadeWith, *,
                       chunk: int = 10) -> dict[str, Any]:
    """The record at ``path`` of ``make_program()`` scored greedily on ``examples``, or the saved one.

    Rows are scored ``chunk`` at a time and each finished chunk is appended to the partial record, so an
    interrupted evaluation resumes where it stopped instead of starting over. A saved record or partial record is
    reused only if it was made with ``made_with``. ``name`` labels the record and the log lines.
    """
    if path.exists():
        return made_with.check(json.loads(path.read_text()), path)
    partial_path = path.with_suffix(".partial.json")
    record = made_with.check(json.loads(partial_path.read_text()), partial_path) if partial_path.exists() else {
        "condition": name, "made_with": asdict(made_with), "scores": [], "answers": [], "errors": 0,
        "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}
    done, total = len(record["scores"]), len(examples)
    logger.info("%s on %d problems%s ...", name, total, f" (resuming after {done})" if done else "")
    program = make_program()
    path.parent.mkdir(parents=True, exist_ok=True)
    for start in range(done, total, chunk):
        started = time.perf_counter()
        report: EvalReport = evaluate_at_k(program, examples[start : start + chunk], metric, k=1, temperature=0.0,
                                           num_threads=threads, lm=lm, answer_field=answer_field, progress=False,
                                           rollout_id_offset=start)
        record["scores"] += [e.samples[0].score for e in report.examples]
        record["answers"] += [e.samples[0].answer for e in report.examples]
        record["errors"] += report.program_errors + report.metric_errors
        record["prompt_tokens"] += report.usage.prompt_tokens
        record["completion_tokens"] += report.usage.completion_tokens
        record["seconds"] = round(record["seconds"] + time.perf_counter() - started, 1)
        write_json_atomic(partial_path, record)
        logger.info("%s %d/%d problems, %.3f so far, %.0f s", name, len(record["scores"]), total,
                    sum(record["scores"]) / len(record["scores"]), record["seconds"])
    record["load_average"] = os.getloadavg()[0]
    write_json_atomic(path, record)
    partial_path.unlink(missing_ok=True)
    logger.info("%s -> %.3f in %.0f s", name, sum(record["scores"]) / total, record["seconds"])
    return record


def finished_names(folder: Path) -> list[str]:
    """The names of the finished records in ``folder`` (not the partial ones), in no particular order."""
    return [path.stem for path in folder.glob("*.json") if not path.name.endswith(".partial.json")]


def rotating_chunks(path: Path, name: str, runs: Sequence[str], examples: list[dspy.Example], chunk: int,
                    evaluate: Callable[[str, list[dspy.Example]], dict[str, Any]]) -> dict[str, Any]:
    """``evaluate(run, rows)`` for every run on every ``chunk`` rows of ``examples``, rotating the runs' order; what
    each returns is saved at ``path`` under ``"<run>/<number>"`` at once, and a key already there is skipped."""
    done = read_json(path) if path.exists() else {}
    chunks = [examples[i : i + chunk] for i in range(0, len(examples), chunk)]
    for number, rows in enumerate(chunks):
        for shift in range(len(runs)):
            run = runs[(number + shift) % len(runs)]
            key = f"{run}/{number}"
            if key in done:
                continue
            done[key] = evaluate(run, rows)
            write_json_atomic(path, done)
            logger.info("%s %s chunk %d/%d: %.1f s", name, run, number + 1, len(chunks), done[key]["seconds"])
    return done
