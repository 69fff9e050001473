"""What a rollout records of a program's outputs: size-bounded JSON, the final answer as text, the tool calls.

Values are copied JSON-safe and cut at `MAX_FIELD_CHARS` (`jsonable`), which keeps logs and reflection prompts
bounded; the reasoning is left out of what answers are compared on (`final_outputs`).
"""

from __future__ import annotations

import json
from typing import Any

MAX_FIELD_CHARS = 4000  # per value in a stored trace; keeps logs and reflection prompts bounded


def final_outputs(outputs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The outputs without the reasoning: what a metric reads, and what two runs are compared on (a chain of
    thought is reworded by any change of the prompt)."""
    if outputs is None:
        return None
    return {name: value for name, value in outputs.items() if name != "reasoning"}


def answer_text(outputs: dict[str, Any] | None) -> str:
    """The final outputs as one text, e.g. 'queue: general'; '(no answer)' without outputs."""
    final = final_outputs(outputs)
    if not final:
        return "(no answer)"
    return "; ".join(f"{name}: {value if isinstance(value, str) else _to_text(value)}"
                     for name, value in final.items())


def jsonable(value: Any, limit: int = MAX_FIELD_CHARS) -> Any:
    """A JSON-safe, size-bounded copy of a value for logs and prompts."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return {str(k): jsonable(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, limit) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else _to_text(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def _to_text(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def count_tool_calls(outputs: dict[str, Any] | None) -> int:
    """Tool calls in a ReAct-style trajectory (``tool_name_<i>`` entries other than 'finish')."""
    trajectory = (outputs or {}).get("trajectory")
    if not isinstance(trajectory, dict):
        return 0
    return sum(1 for key, value in trajectory.items() if key.startswith("tool_name_") and value != "finish")
