"""The log directory of a run: every paid-for result on disk, so a run can resume anywhere.

Layout (plain JSON a person can read; every file written atomically):

    manifest.json                         settings and data fingerprint; a resume must match it
    state.json                            completed steps, why the run stopped
    library.json                          the library after the last completed step
    steps/0003/rollouts/ex0012_s4.json    one rollout: inputs, outputs, trace, score, usage
    steps/0003/summaries/ex0012_s4.json   one rollout summary
    steps/0003/proposals/ex0012.json      one group's proposed edits
    steps/0003/update.json                the step's final edit decision
    steps/0003/step.json                  the step's statistics and audit entries
    steps/0003/library.json               the library after the step
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tfgrpo_dspy.library import ExperienceLibrary, write_json_atomic

logger = logging.getLogger(__name__)


def _settings_added_since(previous: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """Settings in ``manifest`` that the manifest of an earlier version, ``previous``, did not have."""
    old, new = previous.get("settings"), manifest.get("settings")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {}
    return {key: value for key, value in new.items() if key not in old}


class RunLog:
    """Reads and writes one run's records; with ``root=None`` nothing is persisted."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root is not None else None

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def open(self, manifest: dict[str, Any]) -> bool:
        """Claim the directory for a run with this manifest. Returns True when resuming.

        Raises ValueError when the directory holds a run with different settings or data.
        """
        if self.root is None:
            return False
        path = self.root / "manifest.json"
        if path.exists():
            previous = json.loads(path.read_text(encoding="utf-8"))
            added = _settings_added_since(previous, manifest)
            if added:
                # A run begun before these settings existed resumes under their current values; the
                # manifest records them so later resumes compare against the full set.
                logger.info("resuming a run that predates the settings %s; they apply from now on", added)
                previous = {**previous, "settings": {**previous["settings"], **added}}
                write_json_atomic(path, previous)
            changed = sorted(k for k in set(previous) | set(manifest) if previous.get(k) != manifest.get(k))
            if changed:
                details = "; ".join(f"{k}: {previous.get(k)!r} -> {manifest.get(k)!r}" for k in changed[:6])
                raise ValueError(
                    f"log_dir {self.root} holds a run with different settings or data ({details}). "
                    "Use a new log_dir, or restore the original settings to resume it."
                )
            return True
        write_json_atomic(path, manifest)
        return False

    def _path(self, step: int, kind: str, key: str) -> Path:
        assert self.root is not None
        return self.root / "steps" / f"{step:04d}" / kind / f"{key}.json"

    def load(self, step: int, kind: str, key: str) -> dict[str, Any] | None:
        if self.root is None:
            return None
        path = self._path(step, kind, key)
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # cannot happen with atomic writes, unless edited by hand
            logger.warning("ignoring unreadable record %s; it will be redone", path)
            return None

    def save(self, step: int, kind: str, key: str, payload: dict[str, Any]) -> None:
        if self.root is not None:
            write_json_atomic(self._path(step, kind, key), payload)

    def load_step_file(self, step: int, name: str) -> dict[str, Any] | None:
        if self.root is None:
            return None
        path = self.root / "steps" / f"{step:04d}" / f"{name}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def save_step_file(self, step: int, name: str, payload: dict[str, Any]) -> None:
        if self.root is not None:
            write_json_atomic(self.root / "steps" / f"{step:04d}" / f"{name}.json", payload)

    def completed_steps(self) -> int:
        state = self.state()
        return int(state.get("completed_steps", 0))

    def state(self) -> dict[str, Any]:
        if self.root is None or not (self.root / "state.json").exists():
            return {}
        return json.loads((self.root / "state.json").read_text(encoding="utf-8"))

    def finish_step(self, step: int, stats: dict[str, Any], library: ExperienceLibrary) -> None:
        """Commit a step: its stats and library first, then the pointer that says it is done."""
        if self.root is None:
            return
        self.save_step_file(step, "step", stats)
        library.save(self.root / "steps" / f"{step:04d}" / "library.json")
        library.save(self.root / "library.json")
        write_json_atomic(self.root / "state.json", {**self.state(), "completed_steps": step, "stopped": None})

    def mark_stopped(self, reason: str) -> None:
        if self.root is not None:
            write_json_atomic(self.root / "state.json", {**self.state(), "stopped": reason})

    def library_after(self, step: int) -> ExperienceLibrary | None:
        if self.root is None or step == 0:
            return None
        return ExperienceLibrary.load(self.root / "steps" / f"{step:04d}" / "library.json")

    def step_stats(self, step: int) -> dict[str, Any] | None:
        return self.load_step_file(step, "step")
