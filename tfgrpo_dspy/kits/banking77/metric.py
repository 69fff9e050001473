"""Intent match for Banking77, with feedback for reflective optimizers (GEPA, TrainingFreeGRPO)."""

from __future__ import annotations

import re
from typing import Any

import dspy

from tfgrpo_dspy.kits.banking77.intents import INTENTS
from tfgrpo_dspy.kits.labels import label_feedback

# Characters stripped from both ends of an answer when it is not an intent as written: space, quotes, markdown
# marks and punctuation. Not before the exact match: one intent ends in "?" ("reverted_card_payment?").
_EDGES = " \t\r\n\"'`*_.,;:!?()[]{}<>"
# Case and the separator ignored: "Card arrival", "card-arrival" and "CARD_ARRIVAL" all name card_arrival.
_BY_KEY = {re.sub(r"[\s\-_]+", "_", intent.casefold().strip(_EDGES)): intent for intent in INTENTS}


def parse_intent(answer: Any) -> str | None:
    """The intent ``answer`` names, or None. The Banking77 program's typed output is an intent already; a program
    with a free-text answer may add case, spaces for underscores, quotes or an "Intent:" label."""
    if answer is None:
        return None
    text = str(answer).strip()
    if text in INTENTS:
        return text
    text = re.sub(r"^intent\s*[:=\-]\s*", "", text.casefold()).strip(_EDGES)
    return _BY_KEY.get(re.sub(r"[\s\-_]+", "_", text))


def intent_match(
    gold: dspy.Example,
    pred: dspy.Prediction,
    trace: Any = None,
    pred_name: Any = None,
    pred_trace: Any = None,
) -> dspy.Prediction:
    """Score 1.0 when ``pred.intent`` names ``gold.intent``, else 0.0; the feedback names the expected intent, and
    the given one when it is wrong.

    The extra arguments follow DSPy's feedback-metric convention and are unused.
    """
    expected = gold.intent
    if expected not in INTENTS:
        raise ValueError(f"gold intent {expected!r} is not one of the 77 Banking77 intents")
    raw = getattr(pred, "intent", None)
    return label_feedback("intent", expected, raw, parse_intent(raw), "one of the 77 Banking77 intents")
