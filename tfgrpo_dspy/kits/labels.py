"""The score and feedback of a one-label answer, shared by the kits whose answer is one of a fixed set of labels."""

from __future__ import annotations

from typing import Any

import dspy


def label_feedback(kind: str, expected: str, raw: Any, got: str | None, valid: str) -> dspy.Prediction:
    """Score 1.0 when ``got`` is ``expected``, else 0.0, with feedback that names the expected label.

    ``kind`` names the label ("queue", "intent"), ``raw`` is the answer as given, ``got`` the label parsed from it
    (None when it names none) and ``valid`` says what a valid answer is, for the feedback on an unparsed one.
    """
    if got is None:
        return dspy.Prediction(score=0.0, feedback=f"expected {kind} {expected}, got {raw!r}, which is not {valid}")
    if got == expected:
        return dspy.Prediction(score=1.0, feedback=f"correct: expected {kind} {expected}, got {got}")
    return dspy.Prediction(score=0.0, feedback=f"wrong {kind}: expected {kind} {expected}, got {got}")
