"""Which Signature each reflection step runs: the defaults of ``tfgrpo_dspy.signatures``, or a user's own.

A user's Signature replaces a step's prompt but must keep its field names (the calls fill them by name), except
the fields of `OPTIONAL_FIELDS`, added after users could have written their own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import dspy

from tfgrpo_dspy.signatures import (
    ExtractLesson,
    GeneralizeLesson,
    InduceLesson,
    ShortenLesson,
    SummarizeRollout,
    UpdateLibrary,
)

# Fields a user's own Signature may leave out: the induction's contrast, added later, is then read with its
# failures (`Reflector.induce`).
OPTIONAL_FIELDS = {"induce": {"contrast"}}


@dataclass(frozen=True)
class ReflectionSignatures:
    """The Signature of each reflection step; pass your own with the same field names to change a prompt."""

    summarize: type[dspy.Signature] = SummarizeRollout
    extract: type[dspy.Signature] = ExtractLesson
    induce: type[dspy.Signature] = InduceLesson
    update: type[dspy.Signature] = UpdateLibrary
    generalize: type[dspy.Signature] = GeneralizeLesson
    shorten: type[dspy.Signature] = ShortenLesson

    @classmethod
    def with_overrides(cls, overrides: dict[str, type[dspy.Signature]] | None) -> ReflectionSignatures:
        """The defaults with ``overrides`` applied; a wrong step name or missing field is a clear error."""
        overrides = dict(overrides or {})
        defaults = cls()
        for step, signature in overrides.items():
            if step not in {f.name for f in fields(cls)}:
                raise ValueError(f"signatures: unknown step {step!r}; the steps are {[f.name for f in fields(cls)]}")
            if not (isinstance(signature, type) and issubclass(signature, dspy.Signature)):
                raise TypeError(f"signatures[{step!r}] must be a dspy.Signature class, got {signature!r}")
            expected = getattr(defaults, step)
            missing = sorted(set(expected.fields) - set(signature.fields) - OPTIONAL_FIELDS.get(step, set()))
            if missing:
                raise ValueError(f"signatures[{step!r}] lacks the fields {missing} that {expected.__name__} has")
        return cls(**overrides)

