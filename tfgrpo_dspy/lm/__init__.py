"""Language models for tfgrpo-dspy: the embedded offline CPU model and a spec-string factory."""

from tfgrpo_dspy.lm.engine import LlamaCppEngine
from tfgrpo_dspy.lm.factory import local_lm, make_lm
from tfgrpo_dspy.lm.weights import (
    DEFAULT_MODEL,
    MODELS,
    ModelWeightsCorruptError,
    ModelWeightsNotInstalledError,
    ensure_weights,
)

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "LlamaCppEngine",
    "ModelWeightsCorruptError",
    "ModelWeightsNotInstalledError",
    "ensure_weights",
    "local_lm",
    "make_lm",
]
