"""Greedy chat requests that reuse their fixed prefix and still repeat bit for bit.

llama.cpp's CPU kernels sum in a different order for a different batch shape, so the KV cache a token
leaves depends on how many tokens were evaluated with it. A prompt cache that reuses whatever the slot
held before therefore makes an answer depend on the previous request: measured here, 15 of 100 greedy
ticket answers changed between two identical runs. This module keeps the reuse and removes the history:

    reset    the request's prefix (every message before its last user turn) is sent alone, with no tokens to decode,
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

A second level, with ``base_marker``: prefixes whose system message differs only after the marker (the
lesson block, when each call is shown the lesson retrieved for it, or each candidate lesson is tried) share
their base, the system message before the marker. A new prefix is then not evaluated from scratch: its
base is, alone (``{"role": "system", "content": base}``), in a slot that holds no evaluation of that base yet,
and the prefix is evaluated on top of the tokens it shares with that evaluation. A slot that already holds a
prefix on the same base is first cut back to those tokens by resending the base (llama.cpp keeps the common
tokens and evaluates the base's last few again), since the tokens it holds after them were computed with
another lesson. So every prefix on a base reuses exactly the base's from-scratch evaluation, whatever the
slot held before, and pays only for its own lesson and turns.
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

    def __init__(self, server: Any, slots: int = 1, base_marker: str | None = None):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be a positive int, got {slots!r}")
        if base_marker is not None and (not isinstance(base_marker, str) or not base_marker):
            raise ValueError(f"base_marker must be None or a non-empty str, got {base_marker!r}")
        self.server = server  # a `tfgrpo_dspy.lm.server.ChatServer`
        self.slots = slots
        self.base_marker = base_marker
        self._lock = threading.Lock()
        self._held: OrderedDict[str, int] = OrderedDict()  # prefix -> slot holding its evaluation, oldest first
        self._reused: dict[str, int] = {}  # prefix -> tokens every request with it reuses (llama.cpp cache_n)
        self._unreusable: set[str] = set()
        self._slot_base: dict[int, str] = {}  # slot -> the base whose from-scratch evaluation it starts with
        self._base_reused: dict[str, int] = {}  # base -> tokens every prefix on it reuses (llama.cpp cache_n)
        self._unreusable_bases: set[str] = set()

    def holds_prefix(self, request: dict[str, Any]) -> bool:
        """Whether a slot holds the evaluation of ``request``'s prefix (it would not be evaluated again)."""
        prefix = _prefix_key(request)
        with self._lock:
            return prefix is not None and prefix in self._held

    def holds_base(self, request: dict[str, Any]) -> bool:
        """Whether a slot holds the evaluation of ``request``'s base (only its lesson would be evaluated)."""
        base = self._base_of(request.get("messages") or [])
        with self._lock:
            return base is not None and base in self._slot_base.values()

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages") or []
        prefix = _prefix_key(request)
        with self._lock:
            if prefix is None:
                # No prefix of whole turns to reuse: evaluate from scratch, which repeats.
                return self._from_scratch(request)
            if prefix in self._unreusable:
                return self._from_scratch(request)
            base = self._base_of(messages)
            turns = messages[:_last_turn_start(messages)]
            if prefix in self._held:
                slot = self._held.pop(prefix)
                reset = self._reset(turns, slot, cache=True)
            elif base is not None and base not in self._unreusable_bases:
                slot, reset = self._evaluate_on_base(base, turns)
            else:
                slot = self._free_slot()
                reset = self._reset(turns, slot, cache=False)
            if "error" in reset:
                return self._from_scratch(request, slot)
            answer = self.server.handle_chat_completions({**request, "cache_prompt": True, "id_slot": slot})
            if "error" in answer:
                self._slot_base.pop(slot, None)
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

    def _reset(self, messages: list[dict[str, Any]], slot: int, cache: bool) -> dict[str, Any]:
        """Evaluate ``messages`` in ``slot`` with nothing to decode; ``cache`` reuses what the slot shares."""
        if not cache:
            self._slot_base.pop(slot, None)
        return self.server.handle_chat_completions({
            "messages": messages, "max_tokens": 0, "temperature": 0.0, "cache_prompt": cache, "id_slot": slot})

    def _evaluate_on_base(self, base: str, prefix: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        """Evaluate a new prefix on top of its base's from-scratch evaluation: the slot, and the reset's reply."""
        slot = self._slot_with_base(base)
        warm = slot is not None
        if slot is None:
            slot = self._free_slot()
        base_reset = self._reset([{"role": "system", "content": base}], slot, cache=warm)
        if "error" in base_reset:
            self._slot_base.pop(slot, None)
            return slot, base_reset
        self._slot_base[slot] = base
        reset = self._reset(prefix, slot, cache=True)
        if "error" in reset:
            return slot, reset
        reused = _cached_tokens(reset)
        expected = self._base_reused.setdefault(base, reused if reused is not None else -1)
        if reused is None or reused != expected or reused > _prompt_tokens(base_reset):
            logger.warning("a prefix reused %s tokens of its base where %s were expected; evaluating prefixes "
                           "on this base from scratch from now on", reused, expected)
            self._unreusable_bases.add(base)
            reset = self._reset(prefix, slot, cache=False)
        return slot, reset

    def _slot_with_base(self, base: str) -> int | None:
        """A slot that starts with ``base``'s evaluation: a free one, else the one whose prefix is oldest."""
        holding = {slot for slot, held in self._slot_base.items() if held == base}
        if not holding:
            return None
        free = sorted(holding - set(self._held.values()))
        if free:
            return free[0]
        prefix = next(prefix for prefix, slot in self._held.items() if slot in holding)
        return self._held.pop(prefix)

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
        self._slot_base.pop(slot, None)
        return self.server.handle_chat_completions({**request, "cache_prompt": False, "id_slot": slot})

    def _base_of(self, messages: list[dict[str, Any]]) -> str | None:
        """The system message's text before ``base_marker``; None without a marker or a system message."""
        if not self.base_marker or not messages or messages[0].get("role") != "system":
            return None
        content = messages[0].get("content")
        if not isinstance(content, str) or self.base_marker not in content:
            return None
        base = content[:content.index(self.base_marker)]
        return base if base.strip() else None


def _prefix_key(request: dict[str, Any]) -> str | None:
    """Every message before the last user turn, as a key; None when there is no such turn or nothing before it."""
    start = _last_turn_start(request.get("messages") or [])
    if not start:
        return None
    return json.dumps(request["messages"][:start], sort_keys=True, ensure_ascii=False)


def _last_turn_start(messages: list[dict[str, Any]]) -> int | None:
    """Where the request's own turn starts: its last message if the user's, or the user message before an
    assistant message the answer continues (a prefill, `tfgrpo_dspy.lm.engine.add_output_header_prefill`)."""
    roles = [message.get("role") for message in messages[-2:]]
    if roles[-1:] == ["user"]:
        return len(messages) - 1
    if roles == ["user", "assistant"]:
        return len(messages) - 2
    return None


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
