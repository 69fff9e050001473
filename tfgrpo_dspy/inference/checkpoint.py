"""An evaluation's finished samples on disk, so an interrupted evaluation resumes where it stopped.

A folder holds the settings it was written for (``settings.json``: k, temperature, rollout ids, the LM and the
program's `fingerprint`) and one file per finished sample; a rerun with other settings, or a sample saved for
another example, is refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
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


class EvalCheckpoint:
    """One evaluation's finished samples on disk: ``settings.json`` and one ``exNNNNN_sJ.json`` per sample."""

    def __init__(self, folder: Path, settings: dict[str, Any]):
        self.folder = folder
        self.settings = settings
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

    def save(self, rollout: Rollout) -> None:
        write_json_atomic(self.path(rollout.example_index, rollout.sample_index), rollout.to_dict())

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
