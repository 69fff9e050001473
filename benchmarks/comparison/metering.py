"""Usage metering per role: every request that reaches the model, whichever LM copy or thread sent it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.lm15 import Request, Response, response_to_events

from tfgrpo_dspy.usage import Usage


class MeteredEngine:
    """An engine wrapper that counts every request reaching the model, whichever LM copy or thread sent it.

    ``lm.copy()`` and program deep copies share the engine object, so the count includes the copies an
    optimizer makes internally (rollout ids, temperatures) that a history read on the original LM misses.
    """

    def __init__(self, inner: Any, role: str):
        if not callable(getattr(inner, "complete", None)):
            raise TypeError(f"inner must be an engine with complete(Request), got {type(inner).__name__}")
        self.inner = inner
        self.role = role
        self._lock = threading.Lock()
        self._usage = Usage()
        self.failures = 0

    def complete(self, request: Request) -> Response:
        try:
            response = self.inner.complete(request)
        except Exception:
            with self._lock:
                self.failures += 1
            raise
        usage = response.usage
        with self._lock:
            self._usage = self._usage + Usage(
                calls=1,
                prompt_tokens=int(getattr(usage, "input_tokens", None) or 0),
                completion_tokens=int(getattr(usage, "output_tokens", None) or 0),
            )
        return response

    def stream(self, request: Request) -> Any:
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """The inner engine is shared by every role; closing one role must not close it."""

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    def __deepcopy__(self, memo: dict) -> MeteredEngine:
        return self


def metered_copy(lm: dspy.LM, role: str) -> tuple[dspy.LM, MeteredEngine]:
    """A copy of ``lm`` whose requests are counted under ``role``."""
    inner = getattr(lm, "engine", None)
    if inner is None or isinstance(inner, str):
        raise ValueError(
            "lm must be engine-backed (the embedded model, or dspy.LM(..., engine=...)) so that usage can be "
            f"metered per role; got engine={inner!r}"
        )
    meter = MeteredEngine(inner, role)
    return lm.copy(engine=meter), meter


@dataclass(frozen=True)
class Roles:
    """One method run's LMs: the task model, the optimizer's own model, and the held-out evaluation."""

    task: dspy.LM
    reflection: dspy.LM
    evaluation: dspy.LM
    meters: dict[str, MeteredEngine]

    @classmethod
    def of(cls, lm: dspy.LM) -> Roles:
        task, task_meter = metered_copy(lm, "task")
        reflection, reflection_meter = metered_copy(lm, "reflection")
        evaluation, eval_meter = metered_copy(lm, "evaluation")
        return cls(task, reflection, evaluation,
                   {"task": task_meter, "reflection": reflection_meter, "evaluation": eval_meter})
