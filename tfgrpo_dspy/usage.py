"""LM call and token accounting that is right under threads.

DSPy's ``track_usage`` in an outer thread misses calls made in worker threads, so every
rollout and reflection call runs on its own LM copy and we read that copy's history:
exactly the calls of that unit of work, whatever thread made them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import dspy


@dataclass(frozen=True)
class Usage:
    """LM calls and tokens. Cache hits are counted apart and carry no billed tokens."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0

    @property
    def billed_calls(self) -> int:
        return self.calls - self.cache_hits

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            cache_hits=self.cache_hits + other.cache_hits,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=self.cost + other.cost,
        )

    def __sub__(self, other: Usage) -> Usage:
        """What was spent between two readings of a running total."""
        return Usage(
            calls=self.calls - other.calls,
            cache_hits=self.cache_hits - other.cache_hits,
            prompt_tokens=self.prompt_tokens - other.prompt_tokens,
            completion_tokens=self.completion_tokens - other.completion_tokens,
            cost=self.cost - other.cost,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "billed_calls": self.billed_calls, "total_tokens": self.total_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(**{key: data.get(key, 0) for key in ("calls", "cache_hits", "prompt_tokens",
                                                         "completion_tokens", "cost")})

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        result = cls()
        for usage in usages:
            result = result + usage
        return result


class UsageRecord:
    """JSON round trip for the frozen dataclass records (rollouts, summaries, ...) that carry a `Usage`."""

    usage: Usage

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usage": self.usage.to_dict()}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return cls(**{**data, "usage": Usage.from_dict(data.get("usage"))})


def usage_from_history(entries: Iterable[dict[str, Any]]) -> Usage:
    """Sum DSPy LM history entries. A cached answer comes back with no usage: it is a cache hit."""
    total = Usage()
    for entry in entries:
        usage = entry.get("usage") or {}
        cache_hit = bool(getattr(entry.get("response"), "cache_hit", False)) or not usage
        total = total + Usage(
            calls=1,
            cache_hits=int(cache_hit),
            prompt_tokens=0 if cache_hit else int(usage.get("prompt_tokens") or 0),
            completion_tokens=0 if cache_hit else int(usage.get("completion_tokens") or 0),
            cost=0.0 if cache_hit else float(entry.get("cost") or 0.0),
        )
    return total


def usage_of(lms: Iterable[dspy.BaseLM]) -> Usage:
    """The usage recorded in the histories of private LM copies."""
    return Usage.total(usage_from_history(lm.history) for lm in lms)
