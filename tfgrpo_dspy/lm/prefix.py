"""Greedy chat requests that reuse their fixed prefix and still repeat bit for bit.

llama.cpp's CPU kernels sum in a different order for a different batch shape, so the KV cache a token
leaves depends on how many tokens were evaluated with it. A prompt cache that reuses whatever the slot
held before therefore makes an answer depend on the previous request: measured here, 15 of 100 greedy
ticket answers changed between two identical runs. This module keeps the reuse and removes the history:

    reset    the request's prefix (every message but the last) is sent alone with no tokens to decode.
             The first time a prefix is seen it is evaluated from an empty cache (``cache_prompt=False``);
             afterwards the server keeps the tokens it shares with the cache (up to the role token where
             the last request's own turn began) and evaluates the rest of the prefix turn again.
    request  the real request then reuses exactly those shared tokens and evaluates the rest.

So the reused tokens were always computed once, by the same from-scratch evaluation of the prefix, and
the rest of every prompt is always evaluated the same way on top of them: the answer is a function of
the request alone. The server's RAM prompt cache must be off (it would swap in the state of another
request); `ServerSettings.cache_ram_mib` = 0 does that. Every reuse is checked against llama.cpp's own
``cache_n``: a prefix whose reuse is not the expected one is served without reuse from then on.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)


class RepeatablePrefixServer:
    """Serves greedy chat requests on a one-slot server, reusing each request's prefix repeatably.

    One instance per server: it must see every request the server gets, since it tracks which prefix the
    slot holds. Requests are served one at a time (the server has one slot anyway).
    """

    def __init__(self, server: Any):
        self.server = server  # a `tfgrpo_dspy.lm.server.ChatServer`
        self._lock = threading.RLock()
        self._slot_prefix: str | None = None  # the prefix whose from-scratch evaluation the slot holds
        self._reused: dict[str, int] = {}  # prefix -> tokens every request with it reuses (llama.cpp cache_n)
        self._unreusable: set[str] = set()

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages") or []
        if len(messages) < 2 or messages[-1].get("role") != "user":
            # No prefix of whole turns to reuse: evaluate from scratch, which repeats.
            return self._from_scratch(request)
        prefix = json.dumps(messages[:-1], sort_keys=True, ensure_ascii=False)
        with self._lock:
            if prefix in self._unreusable:
                return self._from_scratch(request)
            reset = self.server.handle_chat_completions({
                "messages": messages[:-1], "max_tokens": 0, "temperature": 0.0,
                "cache_prompt": self._slot_prefix == prefix})
            if "error" in reset:
                self._slot_prefix = None
                return self._from_scratch(request)
            self._slot_prefix = prefix
            answer = self.server.handle_chat_completions({**request, "cache_prompt": True})
            if "error" in answer:
                self._slot_prefix = None  # the slot's state after a failed request is unknown
                return answer
            reused = _cached_tokens(answer)
            expected = self._reused.setdefault(prefix, reused if reused is not None else -1)
            if reused is None or reused != expected or reused > _prompt_tokens(reset):
                logger.warning("prefix reuse reused %s tokens where %s were expected; serving this prefix without "
                               "reuse from now on", reused, expected)
                self._unreusable.add(prefix)
                self._slot_prefix = None
                return self._from_scratch(request)
            return answer

    def _from_scratch(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._slot_prefix = None  # the slot now holds this request, not a reset prefix
            return self.server.handle_chat_completions({**request, "cache_prompt": False})


def _cached_tokens(answer: dict[str, Any]) -> int | None:
    timings = answer.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        return timings["cache_n"]
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return cached if isinstance(cached, int) else None


def _prompt_tokens(answer: dict[str, Any]) -> int:
    usage = answer.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0)
