"""An evaluation's finished samples on disk, so an interrupted evaluation resumes where it stopped.

A folder holds the settings it was written for (``settings.json``: k, temperature, rollout ids, the LM and the
program's `fingerprint`) and one file per finished sample; a rerun with other settings, or a sample saved for
another example, is refused rather than mixed in. ``seconds.json`` adds up the wall time of every run that wrote
samples there (updated as each sample is saved), so what an evaluation cost survives its interruptions.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.inference.outputs import jsonable
from tfgrpo_dspy.inference.rollouts import Rollout
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic


def fingerprint(program: dspy.Module) -> str:
    """A short hash of a program's saved state (instructions, demos, library): equal programs, equal hash."""
    state = json.dumps(program.dump_state(), sort_keys=True, default=str)
    return hashlib.sha256(state.encode("utf-8")).hexdigest()[:16]


SECONDS_FILE = "seconds.json"


def checkpointed_seconds(folder: Path) -> float | None:
    """The wall time every run spent evaluating into ``folder``, up to its last saved sample; None if not recorded
    (no run yet, or only runs from before the record: those folders count from their next run on)."""
    path = folder / SECONDS_FILE
    return float(read_json(path)["seconds"]) if path.exists() else None


class EvalCheckpoint:
    """One evaluation's finished samples on disk: ``settings.json``, one ``exNNNNN_sJ.json`` per sample, and
    ``seconds.json``, the wall time of every run so far."""

    def __init__(self, folder: Path, settings: dict[str, Any]):
        self.folder = folder
        self.settings = settings
        self._lock = threading.Lock()
        self.seconds_before = checkpointed_seconds(folder) or 0.0  # what earlier runs spent
        path = folder / "settings.json"
        if path.exists():
            saved = read_json(path)
            if saved != settings:
                changed = sorted(key for key in {*saved, *settings} if saved.get(key) != settings.get(key))
                raise ValueError(f"checkpoint_dir {folder} holds an evaluation with other {', '.join(changed)}; "
                                 "use a new folder")
        else:
            write_json_atomic(path, settings)

    def path(self, index: int, sample: int) -> Path:
        return self.folder / f"ex{index:05d}_s{sample}.json"

    def save(self, rollout: Rollout, seconds_this_run: float) -> None:
        """Save a finished sample, and the wall time so far: earlier runs' and ``seconds_this_run``."""
        write_json_atomic(self.path(rollout.example_index, rollout.sample_index), rollout.to_dict())
        with self._lock:  # threads save at once; the larger figure is the later one
            total = round(self.seconds_before + seconds_this_run, 3)
            if total > (checkpointed_seconds(self.folder) or 0.0):
                write_json_atomic(self.folder / SECONDS_FILE, {"seconds": total})

    def load(self, examples: Sequence[dspy.Example], jobs: Sequence[tuple[int, int]], k: int, offset: int
             ) -> dict[tuple[int, int], Rollout]:
        """The saved samples of ``jobs``; a sample saved for another example is refused, naming its file."""
        done = {}
        for index, sample in jobs:
            path = self.path(index, sample)
            if not path.exists():
                continue
            rollout = Rollout.from_dict(read_json(path))
            if rollout.inputs != jsonable(examples[index].inputs().toDict()) or \
                    rollout.rollout_id != offset + index * k + sample:
                raise ValueError(f"checkpoint_dir: {path} was saved for another example; use a new folder")
            done[(index, sample)] = rollout
        return done
