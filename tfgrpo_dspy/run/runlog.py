"""The log directory of a run: every paid-for result on disk, so a run can resume anywhere.

Layout (plain JSON a person can read; every file written atomically):

    manifest.json                         settings, LMs and data fingerprints; a resume must match it
    state.json                            completed steps, why the run stopped
    library.json                          the library after the last completed step
    shipped.json                          the library compile returned (the best scored) and its step
    selection/<fingerprint>.json          one library's per-example scores on the selection set
    verification/<fingerprint>.json       one library's greedy runs of training examples: score, lessons shown
    steps/0003/rollouts/ex0012_s4.json    one rollout: inputs, outputs, trace, score, usage
    steps/0003/summaries/ex0012_s4.json   one rollout summary
    steps/0003/proposals/ex0012.json      one group's proposed lessons (and what the guard dropped)
    steps/0003/inductions/set02_d1.json   one draw of one induction over several failures (after the guard)
    steps/0003/checks/lessons.json        each candidate lesson's verification: fixes, breaks, kept or why not
    steps/0003/updates/chunk01.json       one update call's decided edits
    steps/0003/step.json                  the step's statistics, gate decision and audit entries
    steps/0003/library.json               the library after the step

A record that cannot be read (a file truncated or edited by hand) is reported by name and redone;
the files that say which steps are complete (state, step, library) are never guessed: a damaged one
is an error that names it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic
from tfgrpo_dspy.library.library import ExperienceLibrary

logger = logging.getLogger(__name__)


class RunLogError(ValueError):
    """A file of the run log that the run cannot do without is damaged; the message names it."""


def _settings_added_since(previous: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """Settings in ``manifest`` that the manifest of an earlier version, ``previous``, did not have."""
    old, new = previous.get("settings"), manifest.get("settings")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {}
    return {key: value for key, value in new.items() if key not in old}


def _predict_recorded_as_its_carrier(previous: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """Whether ``previous`` was written by a version that recorded a bare ``dspy.Predict`` student as the
    ``ExperiencePredict`` carrying its library (the same program, under the carrier's name)."""
    return previous.get("program") == "ExperiencePredict" and manifest.get("program") == "Predict"


class RunLog:
    """Reads and writes one run's records; with ``root=None`` nothing is persisted."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root is not None else None

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def _read_required(self, path: Path, what: str) -> Any:
        try:
            return read_json(path)
        except ValueError as exc:
            raise RunLogError(f"{what} {exc}; restore or delete the file (deleting {path.name} loses what it "
                              "recorded)") from None

    def open(self, manifest: dict[str, Any]) -> bool:
        """Claim the directory for a run with this manifest. Returns True when resuming.

        Raises ValueError when the directory holds a run with different settings, LMs or data.
        """
        if self.root is None:
            return False
        path = self.root / "manifest.json"
        if not path.exists():
            write_json_atomic(path, manifest)
            return False
        previous = self._read_required(path, "the run manifest")
        if not isinstance(previous, dict):
            raise RunLogError(f"the run manifest {path} is not a JSON object; it is damaged. Nothing was run or "
                              "redone: restore the file to resume this run, or use a new log_dir (--out) to start "
                              "afresh")
        added = _settings_added_since(previous, manifest)
        if added:
            # A run begun before these settings existed resumes under their current values; the
            # manifest records them so later resumes compare against the full set.
            logger.info("resuming a run that predates the settings %s; they apply from now on", added)
            previous = {**previous, "settings": {**previous["settings"], **added}}
            write_json_atomic(path, previous)
        if _predict_recorded_as_its_carrier(previous, manifest):
            logger.info("resuming a run whose manifest named its Predict student 'ExperiencePredict'")
            previous = {**previous, "program": manifest["program"]}
            write_json_atomic(path, previous)
        old, new = _flatten(previous), _flatten(manifest)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if changed:
            details = "; ".join(f"{k}: {_short(old.get(k))} -> {_short(new.get(k))}" for k in changed[:6])
            raise ValueError(
                f"log_dir {self.root} holds a run with different settings, LMs or data ({details}). "
                "Use a new log_dir, or restore the original settings to resume it."
            )
        return True

    def _step_dir(self, step: int) -> Path:
        return self._root() / "steps" / f"{step:04d}"

    def load(self, step: int, kind: str, key: str) -> dict[str, Any] | None:
        """One record, or None when it is missing or unreadable (then it is redone)."""
        if self.root is None:
            return None
        return self.load_file(self._step_dir(step) / kind / f"{key}.json")

    def load_file(self, path: Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            data = read_json(path)
        except ValueError as exc:
            logger.warning("%s; it will be redone", exc)
            return None
        if not isinstance(data, dict):
            logger.warning("%s is not a JSON object; it will be redone", path)
            return None
        return data

    def save(self, step: int, kind: str, key: str, payload: dict[str, Any]) -> None:
        if self.root is not None:
            write_json_atomic(self._step_dir(step) / kind / f"{key}.json", payload)

    def load_library_record(self, folder: str, fingerprint: str) -> dict[str, Any] | None:
        """One library's runs on a set of examples: ``folder`` "selection" (the selection set) or "verification"
        (training examples), by library fingerprint."""
        if self.root is None:
            return None
        return self.load_file(self.root / folder / f"{fingerprint}.json")

    def save_library_record(self, folder: str, fingerprint: str, payload: dict[str, Any]) -> None:
        if self.root is not None:
            write_json_atomic(self.root / folder / f"{fingerprint}.json", payload)

    def state(self) -> dict[str, Any]:
        if self.root is None or not (self.root / "state.json").exists():
            return {}
        state = self._read_required(self.root / "state.json", "the run state")
        done = state.get("completed_steps", 0) if isinstance(state, dict) else None
        if not isinstance(done, int) or isinstance(done, bool) or done < 0:
            raise RunLogError(f"the run state {self.root / 'state.json'} is damaged (completed_steps is {done!r}, "
                              "not a step number). Nothing was run or redone: set completed_steps to the last step "
                              "whose steps/NNNN/ holds step.json and library.json (later steps are redone), or use a "
                              "new log_dir (--out) to start afresh")
        return state

    def completed_steps(self) -> int:
        return int(self.state().get("completed_steps", 0))

    def finish_step(self, step: int, stats: dict[str, Any], library: ExperienceLibrary) -> None:
        """Commit a step: its stats and library first, then the pointer that says it is done."""
        if self.root is None:
            return
        write_json_atomic(self._step_dir(step) / "step.json", stats)
        library.save(self._step_dir(step) / "library.json")
        library.save(self.root / "library.json")
        write_json_atomic(self.root / "state.json", {**self.state(), "completed_steps": step, "stopped": None})

    def save_run_record(self, name: str, payload: dict[str, Any]) -> None:
        """A file about the whole run (e.g. the shipped library's record), next to the manifest."""
        if self.root is not None:
            write_json_atomic(self.run_record_path(name), payload)

    # -- where each record lives, for readers of a finished log (the run report) ------------------------------
    def _root(self) -> Path:
        if self.root is None:
            raise RunLogError("this run keeps no log (log_dir=None): there are no files to read")
        return self.root

    def run_record_path(self, name: str) -> Path:
        """``manifest``, ``state``, ``library`` (the last step's), ``shipped`` (what compile returned)."""
        return self._root() / f"{name}.json"

    def step_record_path(self, step: int) -> Path:
        return self._step_dir(step) / "step.json"

    def record_paths(self, kind: str) -> list[Path]:
        """Every step's records of one kind ("rollouts", "summaries", "proposals", "inductions", "checks",
        "updates"), in step order."""
        return sorted(self._root().glob(f"steps/*/{kind}/*.json"))

    def selection_paths(self) -> list[Path]:
        """One record per library scored on the selection set (the starting library's included)."""
        return sorted((self._root() / "selection").glob("*.json"))

    def mark_stopped(self, reason: str) -> None:
        if self.root is not None:
            write_json_atomic(self.root / "state.json", {**self.state(), "stopped": reason})

    def library_after(self, step: int) -> ExperienceLibrary:
        """The library a completed step left (step 0 has none: the caller keeps its initial library)."""
        assert self.root is not None and step >= 1
        path = self._step_dir(step) / "library.json"
        if not path.exists():
            raise RunLogError(f"{path} is missing, yet state.json says step {step} is complete; restore it, or set "
                              f"completed_steps to {step - 1} in state.json to redo the step")
        try:
            return ExperienceLibrary.load(path)
        except ValueError as exc:
            raise RunLogError(f"{exc}; restore it, or set completed_steps to {step - 1} in state.json to redo "
                              "the step") from None

    def step_stats(self, step: int) -> dict[str, Any]:
        assert self.root is not None
        path = self._step_dir(step) / "step.json"
        if not path.exists():
            raise RunLogError(f"{path} is missing, yet state.json says step {step} is complete; restore it, or set "
                              f"completed_steps to {step - 1} in state.json to redo the step")
        stats = self._read_required(path, "the step record")
        if not isinstance(stats, dict):
            raise RunLogError(f"{path} is not a JSON object; it is damaged")
        return stats


def _flatten(manifest: dict[str, Any]) -> dict[str, Any]:
    """``{"settings": {"seed": 0}}`` -> ``{"settings.seed": 0}``: a refused resume names the setting."""
    flat = {}
    for key, value in manifest.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = value
    return flat


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
