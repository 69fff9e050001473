"""Which compiled programs send the model the same prompts on the held-out problems.

Under greedy decoding a program's held-out answers are a function of the prompts it sends: two compiles that
send the same prompts for every held-out problem (a TrainingFreeGRPO run that shipped no lesson and the plain
program, a compile on top of BootstrapFewShot that kept its demos unchanged, ``none`` on another seed) get the
same answers. Evaluating such a program again costs as much as the first evaluation and measures only the
engine's run-to-run flips (the repeat of ``none`` measures those), so the comparison reuses the first
evaluation and says so.

The prompts are recorded without a model: a stand-in adapter formats each call exactly as the configured
adapter would, records the messages and the call's LM settings, and answers every output field with an empty
string. For a program that makes several calls, later prompts are recorded after those stand-in answers, the
same for both programs, so a program whose later steps differ still differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import dspy


class _PromptRecorder(dspy.Adapter):
    """Formats each call with ``inner`` and records it; never calls the LM."""

    def __init__(self, inner: dspy.Adapter):
        super().__init__()
        self.inner = inner
        self.calls: list[dict[str, Any]] = []

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                 demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        messages = self.inner.format(signature, demos, inputs)
        self.calls.append({"messages": messages, "lm_kwargs": lm_kwargs})
        return [{name: "" for name in signature.output_fields}]

    async def acall(self, lm: Any, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                    demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        return self(lm, lm_kwargs, signature, demos, inputs)


class _NeverCalled(dspy.BaseLM):
    """The LM a recorded call names (DSPy requires one); the recorder never sends it anything."""

    def __init__(self) -> None:
        super().__init__(model="prompt-recorder")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the prompt recorder must not call a model")


def held_out_prompts(program: dspy.Module, examples: Sequence[dspy.Example]) -> list[list[dict[str, Any]]]:
    """For each example, the calls ``program`` makes: each call's messages and LM settings.

    A program that raises on the stand-in answers records the error's type as its last call, so two programs
    compare equal only if they fail the same way.
    """
    recorded = []
    for example in examples:
        recorder = _PromptRecorder(dspy.settings.adapter or dspy.ChatAdapter())
        with dspy.context(adapter=recorder, lm=_NeverCalled(), trace=None):
            try:
                program(**example.inputs())
            except Exception as exc:  # the failure is part of what the program does with these inputs
                recorder.calls.append({"error": type(exc).__name__})
        recorded.append(recorder.calls)
    return recorded


def prompts_fingerprint(program: dspy.Module, examples: Sequence[dspy.Example]) -> str:
    """A digest of every prompt ``program`` sends on ``examples`` (see `held_out_prompts`)."""
    text = json.dumps(held_out_prompts(program, examples), sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
