"""The run directory: a comparison's finished work on disk, so that a rerun of the same command skips it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dspy

from comparison.data import Split
from comparison.presets import Budget
from comparison.records import SeedRun
from tfgrpo_dspy import load_program
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic

logger = logging.getLogger("compare")

RECORD_FORMAT = "tfgrpo-compare-method"
RUNS_FORMAT = "tfgrpo-compare-runs"


class RunStore:
    """A comparison's finished work on disk, so that a rerun of the same command skips it.

    Per task, method and seed, under ``<root>/<task>/``: ``<method>-seed<N>.json`` (the `SeedRun` record,
    rewritten atomically after the compile and again after each evaluation), ``<method>-seed<N>.program.json``
    (``program.save``) and, for TrainingFreeGRPO, its own run log ``<method>-seed<N>.log/`` from which an
    interrupted compile resumes. ``manifest.json`` holds what the records depend on (preset budget, LM, data):
    a rerun with other ones is refused, since it would pair methods measured under different conditions.
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    def open(self, manifest: dict[str, Any]) -> int:
        """Check (or write) the manifest; returns how many method records are already there."""
        path = self.root / "manifest.json"
        if path.exists():
            saved = read_json(path)
            differing = sorted(key for key in set(saved) | set(manifest) if saved.get(key) != manifest.get(key))
            if differing:
                raise ValueError(f"{self.root} holds runs of a different comparison ({', '.join(differing)} "
                                 "differ); delete it or pass --runs NEW_DIR")
        else:
            write_json_atomic(path, manifest)
        return sum(1 for _ in self.root.glob("*/*-seed*[0-9].json"))

    def _base(self, task: str, method: str, seed: int) -> Path:
        return self.root / task / f"{method}-seed{seed}"

    def log_dir(self, task: str, method: str, seed: int) -> Path:
        return self._base(task, method, seed).with_suffix(".log")

    def eval_dir(self, task: str, method: str, seed: int, name: str) -> Path:
        """Where one held-out evaluation of a method saves its finished problems (``name``: what it scores)."""
        return self._base(task, method, seed).with_suffix(".eval") / name

    def clear_evals(self, task: str, method: str, seed: int) -> None:
        """Forget the saved problems of an earlier compile's evaluations: a new compile is another program."""
        shutil.rmtree(self._base(task, method, seed).with_suffix(".eval"), ignore_errors=True)

    def load_run(self, task: str, method: str, seed: int) -> SeedRun | None:
        """The saved record, or None when there is none or its program file is missing (then it recompiles)."""
        path = self._base(task, method, seed).with_suffix(".json")
        if not path.exists():
            return None
        if not self._base(task, method, seed).with_suffix(".program.json").exists():
            logger.warning("%s has no saved program next to it: %s compiles again", path, method)
            return None
        data = read_json(path)
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"{path} is not a compare.py method record (format {data.get('format')!r})")
        return SeedRun.from_dict(data["run"])

    def save_run(self, task: str, method: str, seed: int, run: SeedRun) -> None:
        record = {"format": RECORD_FORMAT, "version": 1, "task": task, "method": method, "run": run.to_dict()}
        write_json_atomic(self._base(task, method, seed).with_suffix(".json"), record)

    def save_program(self, task: str, method: str, seed: int, program: dspy.Module) -> None:
        """``program.save`` to a temporary name, then a rename: a half-written program is never loaded."""
        path = self._base(task, method, seed).with_suffix(".program.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp.json")
        program.save(str(temporary))
        os.replace(temporary, path)

    def load_program(self, split: Split, method: str, seed: int) -> dspy.Module:
        """The saved program in a fresh copy of the split's program, a saved library shown as compiled."""
        return load_program(split.make_program(), self._base(split.task, method, seed).with_suffix(".program.json"))


def runs_manifest(preset: str, budget: Budget, lm_spec: str, splits: dict[str, Split],
                  engine: dict[str, Any] | None = None) -> dict[str, Any]:
    """What every record of a run directory depends on (seeds and the method list may grow between runs).

    ``engine`` is the embedded model engine's state (`LlamaCppEngine.dump_state`), None for any other LM: the
    same ``--lm local`` answers differently when the engine serves it differently (a prefill, no prefix reuse).
    """
    # Seeds and methods may grow between runs; the repeat and the gate checks add records, never change one.
    settings = {key: value for key, value in asdict(budget).items()
                if key not in ("seeds", "methods", "more_seeds_for", "repeat_none", "gate_checks")}
    if not settings["tfgrpo_options"]:  # run directories made before the option existed stay resumable
        del settings["tfgrpo_options"]
    data = {task: {"source": s.source, "sha256": _sha([[e.toDict() for e in part]
                                                      for part in (s.train, s.selection, s.test)])}
            for task, s in splits.items()}
    return {"format": RUNS_FORMAT, "version": 1, "preset": preset, "lm": lm_spec, "engine": engine,
            "budget": settings, "data": data}


def engine_state(lm: Any) -> dict[str, Any] | None:
    """The state of ``lm``'s engine when it has one that can say it (the embedded model's), else None."""
    dump_state = getattr(getattr(lm, "engine", None), "dump_state", None)
    return dump_state() if callable(dump_state) else None


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
