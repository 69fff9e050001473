"""Numeric answer match for the word problems, with feedback for reflective optimizers."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import dspy

# A number with optional thousands commas and decimals. A minus glued to the digits counts as a
# sign unless it follows a word or a closing bracket ("5-3" is a subtraction, "= -7" is negative).
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)")


def parse_number(text: Any) -> Decimal | None:
    """The last number in ``text`` ("$1,234.50 total" -> 1234.50), or None if there is none."""
    if text is None:
        return None
    text = str(text)
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    return Decimal(matches[-1].group().replace(",", ""))


def numeric_match(
    gold: dspy.Example,
    pred: dspy.Prediction,
    trace: Any = None,
    pred_name: Any = None,
    pred_trace: Any = None,
) -> dspy.Prediction:
    """Score 1.0 when the last number of ``pred.answer`` equals ``gold.answer``, else 0.0.

    The extra arguments follow DSPy's feedback-metric convention and are unused.
    """
    expected = parse_number(gold.answer)
    if expected is None:
        raise ValueError(f"gold answer has no number: {gold.answer!r}")
    raw = getattr(pred, "answer", None)
    got = parse_number(raw)
    if got is None:
        return dspy.Prediction(score=0.0, feedback=f"expected {_show(expected)}, got no number in {raw!r}")
    score = 1.0 if got == expected else 0.0
    return dspy.Prediction(score=score, feedback=f"expected {_show(expected)}, got {_show(got)}")


def _show(number: Decimal) -> str:
    """12.0 -> "12", 1.50 -> "1.5"."""
    return format(number.normalize(), "f") if number == number.to_integral_value() else format(number, "f")
