"""Queue match for the ticket-routing task, with feedback for reflective optimizers.

The feedback names the expected queue, never the house rule behind it: the rule (the
example's ``rule`` label) is shown to the reflection only as a reference, so what the
library learns about the rules it must infer from which queues were right.
"""

from __future__ import annotations

import re
from typing import Any

import dspy

from tfgrpo_dspy.kits.labels import label_feedback
from tfgrpo_dspy.kits.tickets.rules import QUEUES

# Characters stripped from both ends of an answer: space, quotes, markdown marks, punctuation.
_EDGES = " \t\r\n\"'`*_.,;:!?()[]{}<>"
# A label before the answer: "Queue: x", "queue name - x", "The queue is x", "Answer: x".
_PREFIX = re.compile(r"^(?:the\s+)?(?:queue(?:\s+name)?|answer|route(?:\s+to)?)(?:\s+is)?\s*[:=\-]*\s*")
# Each queue as a whole token; its hyphen may also be written as a space or an underscore.
_MENTIONS = {
    queue: re.compile(r"(?<![\w-])" + r"[-_\s]".join(map(re.escape, queue.split("-"))) + r"(?![\w-])")
    for queue in QUEUES
}


def parse_queue(text: Any) -> str | None:
    """The queue an answer names, or None when it names none or several.

    Case, surrounding whitespace, quotes, markdown and punctuation, a "Queue:" label, and
    spaces or underscores for hyphens ("Tier2 Payments") are ignored. An answer that is not a
    bare queue name counts when it names exactly one queue ("Route it to trust-safety.").
    """
    if text is None:
        return None
    answer = str(text).casefold().strip(_EDGES)
    answer = _PREFIX.sub("", answer).strip(_EDGES)
    bare = re.sub(r"[\s_]+", "-", answer)
    if bare in QUEUES:
        return bare
    named = [queue for queue, pattern in _MENTIONS.items() if pattern.search(answer)]
    return named[0] if len(named) == 1 else None


def queue_match(
    gold: dspy.Example,
    pred: dspy.Prediction,
    trace: Any = None,
    pred_name: Any = None,
    pred_trace: Any = None,
) -> dspy.Prediction:
    """Score 1.0 when ``pred.queue`` names ``gold.queue``, else 0.0; the feedback names the expected queue.

    The extra arguments follow DSPy's feedback-metric convention and are unused.
    """
    expected = gold.queue
    if expected not in QUEUES:
        raise ValueError(f"gold queue {expected!r} is not one of {QUEUES}")
    raw = getattr(pred, "queue", None)
    return label_feedback("queue", expected, raw, parse_queue(raw), f"exactly one of the queues ({', '.join(QUEUES)})")
