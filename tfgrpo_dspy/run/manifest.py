"""What identifies a run: the manifest its log directory is claimed with (`RunLog.open`).

A resume continues a run only when everything that decides its results is the same: the program, the data,
the LMs and the settings. Data and programs are fingerprinted (SHA-256 of their JSON), LMs described by their
model name and decoding settings, never by their keys.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import dspy

from tfgrpo_dspy.settings import TrainingFreeGRPOSettings


def run_manifest(student: dspy.Module, program: dspy.Module, trainset: list, selection: list,
                 settings: TrainingFreeGRPOSettings, reflection_lm: dspy.BaseLM | None) -> dict[str, Any]:
    """The manifest of a run of ``program`` (the student's copy without a library) on these examples."""
    return {
        "format": "tfgrpo-run",
        "version": 2,
        "program": type(student).__name__,  # the user's class, not the carrier a bare Predict becomes
        "program_sha256": _sha([(n, p.signature.instructions, list(p.signature.fields))
                                for n, p in program.named_predictors()]),
        "trainset_size": len(trainset),
        "trainset_sha256": _sha([sorted(e.toDict().items()) for e in trainset]),
        "selection_size": len(selection),
        "selection_sha256": _sha([sorted(e.toDict().items()) for e in selection]),
        "policy_lm": describe_lm(dspy.settings.lm),
        "reflection_lm": describe_lm(reflection_lm or dspy.settings.lm),
        "settings": settings.manifest(),
    }


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, default=str).encode()).hexdigest()


def describe_lm(lm: Any) -> dict[str, Any] | None:
    """What identifies an LM for a resume: its model name and decoding settings (never keys)."""
    if lm is None:
        return None
    kwargs = getattr(lm, "kwargs", {}) or {}
    return {"model": getattr(lm, "model", type(lm).__name__),
            **{k: kwargs[k] for k in ("temperature", "max_tokens", "top_p") if k in kwargs}}
