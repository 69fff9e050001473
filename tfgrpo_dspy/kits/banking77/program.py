"""The Banking77 program: one Predict call, query -> intent, the answer typed as one of the intents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import dspy

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


def make_program() -> dspy.Module:
    """A fresh Predict program: query -> intent.

    Predict, not ChainOfThought, as in the tickets kit: the intent is a label to recognize, and an answer of a few
    tokens keeps every rollout cheap on the embedded model.
    """
    return dspy.Predict(ClassifyIntent)
