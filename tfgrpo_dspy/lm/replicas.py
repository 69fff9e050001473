"""Greedy requests served by several identical servers at once, each still one request at a time.

A repeatable greedy server serves one request at a time (`tfgrpo_dspy.lm.prefix`), and one request leaves the
machine's two cores partly idle: a single sequence's decode waits on memory more than on arithmetic. Two
servers with the same settings, each serving one request at a time, run two requests side by side. Every
replica computes a request exactly as the others do (the same weights, settings and batch shapes), so the
replica a request lands in does not change its answer, as the slot it lands in does not. Measured on 60 held-out
tickets, once with no library and once with a lesson retrieved per call (`benchmarks/greedy_replicas.py`): two
replicas changed no answer between two runs nor against one server, and were 1.08x-1.42x faster. Prompt
evaluation already keeps both cores busy, so the gain is the decode's idle time, not 2x; the cost is another
server's memory (its KV cache and its copy of the weights) and its load time.

A request goes to an idle replica, preferring one that already holds its prefix, then one that holds its
base (the system message before the lesson block, `RepeatablePrefixServer`'s ``base_marker``). The pool starts with one
replica and starts another (up to its limit) only when a request finds every replica busy, so a program that
calls the model from one thread never pays for a second server; when the limit is reached, a request waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol


class Replica(Protocol):
    """A server that serves one request at a time and can say whether it holds a request's prefix or base."""

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def holds_prefix(self, request: dict[str, Any]) -> bool: ...

    def holds_base(self, request: dict[str, Any]) -> bool: ...


class ReplicaPool:
    """Sends each request to one idle replica, starting up to ``max_replicas`` of them as requests overlap."""

    def __init__(self, start_replica: Callable[[], Replica], max_replicas: int):
        if isinstance(max_replicas, bool) or not isinstance(max_replicas, int) or max_replicas < 1:
            raise ValueError(f"max_replicas must be a positive int, got {max_replicas!r}")
        self._start_replica = start_replica
        self.max_replicas = max_replicas
        self.replicas: list[Replica] = [start_replica()]
        self._idle = list(self.replicas)
        self._starting = 0
        self._changed = threading.Condition()

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        replica = self._acquire(request)
        try:
            return replica.handle_chat_completions(request)
        finally:
            with self._changed:
                self._idle.append(replica)
                self._changed.notify()

    def _acquire(self, request: dict[str, Any]) -> Replica:
        with self._changed:
            if self._idle or len(self.replicas) + self._starting >= self.max_replicas:
                self._changed.wait_for(lambda: bool(self._idle))
                # A replica holding the prefix answers without evaluating it again; one holding the base
                # evaluates only the lesson.
                chosen = next((r for r in self._idle if r.holds_prefix(request)),
                              next((r for r in self._idle if r.holds_base(request)), self._idle[0]))
                self._idle.remove(chosen)
                return chosen
            self._starting += 1
        try:  # outside the lock: loading takes seconds, and the other replicas keep serving meanwhile
            replica = self._start_replica()
        finally:
            with self._changed:
                self._starting -= 1
        with self._changed:
            self.replicas.append(replica)  # busy with this request; idle when it is done
        return replica
