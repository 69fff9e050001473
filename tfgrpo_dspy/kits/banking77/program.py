"""The Banking77 program: one Predict call, query -> intent, the answer typed as one of the intents."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal, get_origin

import dspy
from dspy.adapters.utils import get_annotation_name

from tfgrpo_dspy.kits.banking77.intents import INTENTS

INSTRUCTIONS = ("Classify the online-banking customer's query by its intent. Answer with exactly one of the listed "
                "intents, spelled exactly as listed.")


def intent_signature(intents: Sequence[str] = INTENTS) -> type[dspy.Signature]:
    """``query -> intent`` with ``intent`` typed ``Literal[*intents]``.

    The names are data, so the signature is built, not written as a class. The Literal type puts every name in the
    prompt (the adapter lists the allowed values), and the adapter refuses an answer that is not one of them, so a
    misspelled intent is a failed call, never a wrong label that happens to score.
    """
    names = tuple(intents)
    if not names or len(set(names)) != len(names) or not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"intents must be distinct non-empty names, got {names[:5]}...")
    fields = {
        "query": (str, dspy.InputField(desc="what an online-banking customer wrote")),
        "intent": (Literal[names], dspy.OutputField(desc="the one intent the query expresses")),
    }
    return dspy.make_signature(fields, INSTRUCTIONS, signature_name="ClassifyIntent")


ClassifyIntent = intent_signature(INTENTS)


class ListedOnceChatAdapter(dspy.ChatAdapter):
    """DSPy's ChatAdapter, except that the reminder closing the user turn names a Literal answer's values only as
    "one of the values listed above" (the system message lists them, with the field).

    The stock reminder repeats the whole ``Literal[...]`` after the input: for 77 intents about 600 tokens that
    differ in no call but come after the query, so no call can reuse them from the cache (measured in
    ``benchmarks/results/call_costs_banking77``: 1,144 of 1,762 prompt tokens reused, 14.3 s per greedy call).
    """

    def user_message_output_requirements(self, signature: type[dspy.Signature]) -> str:
        message = super().user_message_output_requirements(signature)
        for field in signature.output_fields.values():
            if get_origin(field.annotation) is Literal:
                listed = f" (must be formatted as a valid Python {get_annotation_name(field.annotation)})"
                message = message.replace(listed, " (exactly one of the values listed for it above)")
        return message


class IntentPredict(dspy.Predict):
    """``dspy.Predict`` that formats its prompt with `ListedOnceChatAdapter` where the default ChatAdapter would
    (no adapter configured, or a plain ChatAdapter); an adapter of another kind is left as configured."""

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        with dspy.context(adapter=_adapter()):
            return super().forward(**kwargs)

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        with dspy.context(adapter=_adapter()):
            return await super().aforward(**kwargs)


def _adapter() -> Any:
    configured = dspy.settings.adapter
    if configured is None:
        return ListedOnceChatAdapter()
    if type(configured) is dspy.ChatAdapter:
        # The configured one's options (callbacks, JSON fallback, ...): the attributes named as its constructor's
        # arguments.
        accepted = inspect.signature(dspy.ChatAdapter.__init__).parameters
        return ListedOnceChatAdapter(**{k: v for k, v in vars(configured).items() if k in accepted})
    return configured


def make_program() -> dspy.Module:
    """A fresh Predict program: query -> intent.

    Predict, not ChainOfThought, as in the tickets kit: the intent is a label to recognize, and an answer of a few
    tokens keeps every rollout cheap on the embedded model.
    """
    return IntentPredict(ClassifyIntent)
