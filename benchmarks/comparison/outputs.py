"""The comparison's report: one JSON with everything measured and the conditions it was measured under, its
markdown and its plot. The conditions: the command, the commit, the load average, the model's speed at the
start (tokens/s from a short calibration call), the preset's settings and the package versions.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy
from dspy.lm15 import Config, Message, Request

from comparison.data import Split
from comparison.markdown import write_markdown
from comparison.plot import write_plot
from comparison.presets import Budget
from comparison.records import MethodResult
from comparison.summary import repeatability, result_rows
from tfgrpo_dspy.library.jsonio import write_json_atomic

REPORT_FORMAT, REPORT_VERSION = "tfgrpo-compare", 3  # 3: "selection" (was "val"), throughput_at_start
CALIBRATION_PROMPT = "Count from one to twenty in words, separated by commas."


@dataclass(frozen=True)
class RunFacts:
    """One invocation's fixed facts, written at the top of every report it saves."""

    preset: str
    budget: Budget
    lm_name: str
    command: str
    code: str | None  # the commit at the start: later edits to the tree do not change what this run measured
    started: str  # wall-clock start, for the reader
    load_at_start: float  # 1-minute load average: the machine's other work
    throughput_at_start: dict[str, Any]
    runs_dir: Path | None = None


def build_report(facts: RunFacts, *, wall_seconds: float, load_at_end: float, splits: dict[str, Split],
                 per_task: dict[str, Sequence[MethodResult]]) -> dict[str, Any]:
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "preset": facts.preset,
        "command": facts.command,
        "lm": facts.lm_name,
        "lm_options": facts.budget.lm_options,
        "budget": asdict(facts.budget),
        "started": facts.started,
        "wall_seconds": round(wall_seconds, 1),
        "load_average": [facts.load_at_start, load_at_end],
        "throughput_at_start": facts.throughput_at_start,
        "code": facts.code,
        "runs_dir": str(facts.runs_dir) if facts.runs_dir else None,
        "environment": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                        "dspy": _version("dspy"), "gepa": _version("gepa"), "optuna": _version("optuna")},
        "tasks": {
            task: {
                "split": {"train": len(s.train), "selection": len(s.selection), "test": len(s.test),
                          "source": s.source},
                "held_out": s.held_out_rows(),
                "repeatability": repeatability(per_task[task]),
                "results": result_rows(per_task[task]),
            }
            for task, s in splits.items()
        },
    }


def write_outputs(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    json_path = out_dir / f"{stem}.json"
    write_json_atomic(json_path, report)
    return [json_path, write_markdown(report, out_dir / f"{stem}.md"), write_plot(report, out_dir / f"{stem}.png")]


def throughput_at_start(lm: dspy.LM) -> dict[str, Any]:
    """The embedded model's speed now, from llama.cpp's own timings of one short greedy call; a note otherwise.

    Only the embedded engine is asked: a served or scripted LM has no llama.cpp timings, and a call to it
    would be billed (or would count as one of the run's calls).
    """
    try:
        from tfgrpo_dspy.lm import LlamaCppEngine
    except ImportError:  # the embedded runtime is not installed: then the LM cannot be the embedded model
        return {"skipped": "the embedded model's runtime is not installed"}
    engine = getattr(lm, "engine", None)
    if not isinstance(engine, LlamaCppEngine):
        return {"skipped": f"the LM is not the embedded model ({type(engine).__name__})"}
    return calibrate(engine, lm.model)


def calibrate(engine: Any, model: str, max_tokens: int = 48) -> dict[str, Any]:
    """One greedy call with the prompt cache off; llama.cpp's timings say how fast it read and generated."""
    config = Config(max_tokens=max_tokens, temperature=0.0, extensions={"cache_prompt": False})
    started = time.perf_counter()
    response = engine.complete(Request(model=model, messages=(Message.user(CALIBRATION_PROMPT),), config=config))
    seconds = time.perf_counter() - started
    timings = (getattr(response, "provider_data", None) or {}).get("timings")
    if not isinstance(timings, dict) or not timings.get("predicted_per_second"):
        return {"skipped": "the engine reported no llama.cpp timings", "wall_seconds": round(seconds, 2)}
    return {"completion_tokens_per_second": round(float(timings["predicted_per_second"]), 2),
            "prompt_tokens_per_second": round(float(timings.get("prompt_per_second") or 0.0), 2),
            "completion_tokens": timings.get("predicted_n"), "prompt_tokens": timings.get("prompt_n"),
            "wall_seconds": round(seconds, 2)}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
