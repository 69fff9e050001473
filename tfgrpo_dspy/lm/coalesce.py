"""Sampled requests that differ only in their seed share one evaluation of their prompt.

A group's rollouts, and an induction's draws, send the same prompt several times at once from several
threads. Served one by one, the batched server evaluates that prompt again in each slot (a 470-token
induction prompt three times over, at ~40-60 tokens/s on two cores). llama.cpp can instead evaluate it once
and sample several continuations from it: one request with ``n`` completions. `SampleCoalescer` holds each
sampled request for a short window; the requests whose payloads are equal but for ``seed`` that arrive in
it go to the server as one request with ``n`` = their number (at most ``max_n``, the server's slots), and
each caller gets one of the choices. A request that finds no partner is sent as it came, ``window_s`` later.

The batched server is not bit-for-bit repeatable in any case (`tfgrpo_dspy.lm.engine`); with coalescing, a
request's answer also depends on which requests it was sent with: its own seed then seeds no draw by itself.
Greedy requests never come here (they go to the repeatable one-at-a-time server).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Batch:
    """Requests waiting to be sent together; the first one's thread sends them."""

    requests: list[dict[str, Any]]
    full: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    answers: list[dict[str, Any]] = field(default_factory=list)
    error: BaseException | None = None


class SampleCoalescer:
    """Serves chat requests on ``server``, sending requests equal but for their seed as one ``n``-request."""

    def __init__(self, server: Any, max_n: int, window_s: float = 0.05):
        if isinstance(max_n, bool) or not isinstance(max_n, int) or max_n < 1:
            raise ValueError(f"max_n must be a positive int, got {max_n!r}")
        if not isinstance(window_s, (int, float)) or isinstance(window_s, bool) or window_s < 0:
            raise ValueError(f"window_s must be a number >= 0, got {window_s!r}")
        self.server = server  # a `tfgrpo_dspy.lm.server.ChatServer`
        self.max_n = max_n
        self.window_s = float(window_s)
        self._lock = threading.Lock()
        self._open: dict[str, _Batch] = {}  # payload without seed -> the batch still taking requests

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.max_n == 1 or request.get("n", 1) != 1 or request.get("stream"):
            return self.server.handle_chat_completions(request)
        key = json.dumps({k: v for k, v in request.items() if k != "seed"}, sort_keys=True, default=str)
        with self._lock:
            batch = self._open.get(key)
            if batch is None:
                batch = self._open[key] = _Batch([request])
                index = 0
            else:
                index = len(batch.requests)
                batch.requests.append(request)
                if len(batch.requests) == self.max_n:
                    del self._open[key]
                    batch.full.set()
        if index == 0:
            self._send(key, batch)
        else:
            batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.answers[index]

    def _send(self, key: str, batch: _Batch) -> None:
        """Wait for partners (at most the window), close the batch, send it and hand each request its answer."""
        batch.full.wait(self.window_s)
        with self._lock:
            if self._open.get(key) is batch:
                del self._open[key]
        try:
            n = len(batch.requests)
            first = batch.requests[0]
            raw = self.server.handle_chat_completions(first if n == 1 else {**first, "n": n})
            batch.answers = split_choices(raw, n)
        except BaseException as exc:  # every waiting caller gets the failure, not a hang
            batch.error = exc
        finally:
            batch.done.set()


def split_choices(raw: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """One answer per request from an ``n``-choice answer: choice i for request i, each as a one-choice answer.

    The prompt was evaluated once, for the first request: the others report it all as cached, and only the
    first keeps llama.cpp's timings. An error, or fewer choices than requests, goes to every request."""
    if n == 1:
        return [raw]
    choices = raw.get("choices") if isinstance(raw, dict) else None
    if "error" in raw or not isinstance(choices, list) or len(choices) < n:
        error = raw.get("error") if isinstance(raw, dict) and "error" in raw else {
            "message": f"asked llama.cpp for {n} completions, got {len(choices) if isinstance(choices, list) else 0}",
            "type": "server_error"}
        return [{"error": error} for _ in range(n)]
    answers = []
    for i in range(n):
        answer = {**raw, "choices": [{**choices[i], "index": 0}]}
        if i > 0:
            answer.pop("timings", None)
            usage = dict(raw.get("usage") or {})
            if usage.get("prompt_tokens") is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": usage["prompt_tokens"]}
            answer["usage"] = usage
        answers.append(answer)
    return answers
