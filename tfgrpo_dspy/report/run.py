"""What the report shows, read once from a run's log directory; where each file lives is `tfgrpo_dspy.run.runlog`'s.

The files that say what the run did (manifest, state, step records, library) are required; rollout,
proposal and selection records, and the demo's held-out result beside the log, only enrich the page, so
their damage is skipped.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo_dspy.library.jsonio import read_json
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.run.results import Candidate, shipped_library
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.usage import Usage

HELD_OUT_RECORD = "demo.json"  # `tfgrpo demo` writes it beside log/: held-out accuracy before and after


class RunReportError(ValueError):
    """The directory is not a run, or a file the report needs is damaged; the message names the file."""


@dataclass(frozen=True)
class InitialScoring:
    """The starting library scored on the selection set before step 1: outside every step's record."""

    score: float
    usage: Usage


@dataclass(frozen=True)
class Run:
    """What the report shows, read once from the run directory."""

    root: Path
    name: str  # the CLI's OUT/log is named by OUT
    written: str  # when the run last wrote its state (UTC; the files' time: the records carry no clock)
    manifest: dict[str, Any]
    state: dict[str, Any]
    steps: list[dict[str, Any]]
    library: ExperienceLibrary | None
    library_origin: str  # which library the report shows: the one compile returned, or the last step's
    shipped: str | None  # in the result's words (`shipped_library`); None while the run has not finished
    inputs: dict[int, dict[str, Any]]  # training example index -> its inputs, from the rollout records
    proposed_by: dict[str, set[int]]  # lesson text -> the examples whose groups proposed it
    dropped_because: Counter[str]  # why the guard dropped proposed lessons, by kind of reason
    initial: InitialScoring | None  # the starting library's selection scoring, when one was recorded
    held_out: dict[str, Any] | None  # the demo's record beside the log: before / after and their comparison
    checks: list[dict[str, Any]]  # every candidate lesson's verification record (step added), in step order

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return [c for s in self.steps for c in s.get("candidates") or [] if isinstance(c, dict)]


def _read_object(path: Path) -> dict[str, Any]:
    """A required JSON object; any damage is one RunReportError line naming the file."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise RunReportError(str(exc) if isinstance(exc, ValueError) else f"{path} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise RunReportError(f"{path} is not a JSON object; it is damaged")
    return data


def _optional_records(paths: Iterable[Path]) -> Iterable[dict[str, Any]]:
    """The readable JSON objects among ``paths``: these records only enrich the page, so damage is skipped."""
    for path in sorted(paths):
        try:
            data = read_json(path)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield data


def load_run(run_dir: str | Path) -> Run:
    """Read everything the report shows; a missing manifest means the directory is not a run."""
    root = Path(run_dir)
    log = RunLog(root)
    manifest_path, state_path = log.run_record_path("manifest"), log.run_record_path("state")
    if not manifest_path.is_file():
        raise RunReportError(f"{root} is not a training run: {manifest_path} is missing")
    manifest = _read_object(manifest_path)
    state = _read_object(state_path) if state_path.exists() else {}
    steps = []
    for step in range(1, state["completed_steps"] + 1 if isinstance(state.get("completed_steps"), int) else 1):
        path = log.step_record_path(step)
        if not path.exists():
            raise RunReportError(f"{path} is missing, yet state.json says step {step} is complete")
        steps.append(_read_object(path))
    library, origin, shipped = _final_library(log, steps)
    proposals = list(_optional_records(log.record_paths("proposals")))
    resolved = root.resolve()
    written = state_path if state_path.exists() else manifest_path
    return Run(root, f"{resolved.parent.name}/{resolved.name}" if resolved.name == "log" else resolved.name,
               time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(written.stat().st_mtime)), manifest, state, steps,
               library, origin, shipped, _example_inputs(log), _proposal_sources(proposals), _drop_reasons(proposals),
               _initial_scoring(log), _held_out(resolved), _checks(log))


def _final_library(log: RunLog, steps: list[dict[str, Any]]) -> tuple[ExperienceLibrary | None, str, str | None]:
    """The library compile returned (shipped.json) when the run finished, else the last step's library.json."""
    shipped_path, last = log.run_record_path("shipped"), log.run_record_path("library")
    try:
        if shipped_path.exists():
            record = _read_object(shipped_path)
            candidates = [Candidate.from_dict(c) for s in steps for c in s.get("candidates") or []
                          if isinstance(c, dict)]
            shipped = shipped_library(record.get("best_step"), candidates)
            origin = f"shipped.json, the library compile returned: {shipped}"
            return ExperienceLibrary.from_dict(record.get("library"), origin=str(shipped_path)), origin, shipped
        if last.exists():
            origin = "library.json, the library after the last completed step (the run has not finished)"
            return ExperienceLibrary.from_dict(_read_object(last), origin=str(last)), origin, None
    except ValueError as exc:
        raise RunReportError(str(exc)) from None
    return None, "", None


def _example_inputs(log: RunLog) -> dict[int, dict[str, Any]]:
    """One rollout per training example is enough to know its inputs."""
    first: dict[str, Path] = {}
    for path in log.record_paths("rollouts"):
        first.setdefault(path.name.split("_")[0], path)
    return {r["example_index"]: r.get("inputs") or {} for r in _optional_records(first.values())
            if isinstance(r.get("example_index"), int)}


def _proposal_sources(proposals: list[dict[str, Any]]) -> dict[str, set[int]]:
    """Which examples proposed each lesson text: the provenance of a lesson whose own ``sources`` are empty."""
    sources: dict[str, set[int]] = defaultdict(set)
    for record in proposals:
        for lesson in record.get("lessons") or []:
            if isinstance(lesson, dict) and isinstance(lesson.get("source"), int):
                sources[str(lesson.get("text"))].add(lesson["source"])
    return sources


def _drop_reasons(proposals: list[dict[str, Any]]) -> Counter[str]:
    """The guard's reasons, by kind: "copies the reflection prompt: 'turn every'" counts as its part before ':'."""
    return Counter(str(d.get("dropped_because") or "no reason recorded").split(":")[0].strip()
                   for record in proposals for d in record.get("dropped") or [] if isinstance(d, dict))


def _checks(log: RunLog) -> list[dict[str, Any]]:
    checks = []
    for path in log.record_paths("checks"):
        for record in _optional_records([path]):
            step = int(path.parent.parent.name)
            checks += [{**c, "step": step} for c in record.get("checks") or [] if isinstance(c, dict)]
    return checks


def _initial_scoring(log: RunLog) -> InitialScoring | None:
    """The starting library is scored before step 1, so its score and cost live only in the selection records."""
    for record in _optional_records(log.selection_paths()):
        scores = record.get("scores")
        if record.get("label") == "initial" and isinstance(scores, list) and scores:
            return InitialScoring(sum(scores) / len(scores), Usage.from_dict(record.get("usage")))
    return None


def _held_out(root: Path) -> dict[str, Any] | None:
    """The demo's held-out result, when the log is a demo's OUT/log (its record is OUT/demo.json)."""
    if root.name != "log":
        return None
    records = list(_optional_records([root.parent / HELD_OUT_RECORD]))
    return records[0] if records and isinstance(records[0].get("comparison"), dict) else None
