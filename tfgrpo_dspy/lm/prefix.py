"""Greedy chat requests that reuse their fixed prefix and still repeat bit for bit.

llama.cpp's CPU kernels sum in a different order for a different batch shape, so the KV cache a token
leaves depends on how many tokens were evaluated with it. A prompt cache that reuses whatever the slot
held before therefore makes an answer depend on the previous request: measured here, 15 of 100 greedy
ticket answers changed between two identical runs. This module keeps the reuse and removes the history:

    reset    the request's prefix (every message but the last) is sent alone, with no tokens to decode,
             to the slot that holds that prefix. A prefix no slot holds is evaluated from an empty cache
             (``cache_prompt=False``) in the least recently used slot; in its own slot, the server keeps
             the tokens the prefix shares with the slot (up to the role token where the last request's own
             turn began) and evaluates the rest of the prefix turn again.
    request  the real request then reuses exactly those shared tokens, in that slot, and evaluates the rest.

So the reused tokens were always computed once, by the same from-scratch evaluation of the prefix, and
the rest of every prompt is always evaluated the same way on top of them: the answer is a function of
the request alone. Requests are served one at a time, so no batch mixes two of them; the slot a prefix
lands in does not change an answer (measured: 12 of 12 answers' log-probabilities identical across slots
and orders). Several slots matter when calls alternate between prefixes, as they do when each call's
instructions carry the lesson retrieved for it. The server's RAM prompt cache must be off (it would swap
in the state of another request): `ServerSettings.cache_ram_mib` = 0. Every reuse is checked against
llama.cpp's own ``cache_n``; a prefix whose reuse is not the expected one is served without reuse from
then on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from typing import Any

logger = logging.getLogger(__name__)


class RepeatablePrefixServer:
    """Serves greedy chat requests on a server of ``slots`` slots, reusing each request's prefix repeatably.

    One instance per server: it must see every request the server gets, since it tracks which prefix each
    slot holds. Requests are served one at a time.
    """

    def __init__(self, server: Any, slots: int = 1):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive int, got {slots!r}")
        self.server = server  # a `tfgrpo_dspy.lm.server.ChatServer`
        self.slots = slots
        self._lock = threading.Lock()
        self._held: OrderedDict[str, int] = OrderedDict()  # prefix -> slot holding its evaluation, oldest first
        self._reused: dict[str, int] = {}  # prefix -> tokens every request with it reuses (llama.cpp cache_n)
        self._unreusable: set[str] = set()

    def holds_prefix(self, request: dict[str, Any]) -> bool:
        """Whether a slot holds the evaluation of ``request``'s prefix (it would not be evaluated again)."""
        prefix = _prefix_key(request)
        with self._lock:
            return prefix is not None and prefix in self._held

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages") or []
        prefix = _prefix_key(request)
        with self._lock:
            if prefix is None:
                # No prefix of whole turns to reuse: evaluate from scratch, which repeats.
                return self._from_scratch(request)
            if prefix in self._unreusable:
                return self._from_scratch(request)
            warm = prefix in self._held
            slot = self._held.pop(prefix) if warm else self._free_slot()
            reset = self.server.handle_chat_completions({
                "messages": messages[:-1], "max_tokens": 0, "temperature": 0.0, "cache_prompt": warm,
                "id_slot": slot})
            if "error" in reset:
                return self._from_scratch(request, slot)
            answer = self.server.handle_chat_completions({**request, "cache_prompt": True, "id_slot": slot})
            if "error" in answer:
                return answer  # the slot's state after a failed request is unknown: it is not marked as held
            reused = _cached_tokens(answer)
            expected = self._reused.setdefault(prefix, reused if reused is not None else -1)
            if reused is None or reused != expected or reused > _prompt_tokens(reset):
                logger.warning("prefix reuse reused %s tokens where %s were expected; serving this prefix without "
                               "reuse from now on", reused, expected)
                self._unreusable.add(prefix)
                return self._from_scratch(request, slot)
            self._held[prefix] = slot
            return answer

    def _free_slot(self) -> int:
        """A slot for a new prefix: an unused one, else the one whose prefix was used longest ago."""
        used = set(self._held.values())
        for slot in range(self.slots):
            if slot not in used:
                return slot
        _, slot = self._held.popitem(last=False)
        return slot

    def _from_scratch(self, request: dict[str, Any], slot: int | None = None) -> dict[str, Any]:
        slot = self._free_slot() if slot is None else slot  # the slot now holds this request, no reset prefix
        return self.server.handle_chat_completions({**request, "cache_prompt": False, "id_slot": slot})


def _prefix_key(request: dict[str, Any]) -> str | None:
    """Every message but the last, as a key; None when the last message is not the user's."""
    messages = request.get("messages") or []
    if len(messages) < 2 or messages[-1].get("role") != "user":
        return None
    return json.dumps(messages[:-1], sort_keys=True, ensure_ascii=False)


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
