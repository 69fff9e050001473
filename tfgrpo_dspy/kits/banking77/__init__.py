"""Banking77 kit: real online-banking queries, one of 77 intents each, a Predict program typed by them, intent match."""

from tfgrpo_dspy.kits.banking77.data import BANKING77_HUB_ID, banking77_splits, load_banking77, seeded_order
from tfgrpo_dspy.kits.banking77.intents import INTENTS
from tfgrpo_dspy.kits.banking77.metric import intent_match, parse_intent
from tfgrpo_dspy.kits.banking77.program import ClassifyIntent, intent_signature, make_program
from tfgrpo_dspy.kits.banking77.task import BANKING77, BANKING77_TASKS, TRAIN_DEFAULTS

__all__ = [
    "BANKING77",
    "BANKING77_HUB_ID",
    "BANKING77_TASKS",
    "INTENTS",
    "TRAIN_DEFAULTS",
    "ClassifyIntent",
    "banking77_splits",
    "intent_match",
    "intent_signature",
    "load_banking77",
    "make_program",
    "parse_intent",
    "seeded_order",
]
