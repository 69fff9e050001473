"""Where an embedded model's call spends its time, as llama.cpp itself reports it, per engine setting.

Each engine setting gets servers of its own whose every request is recorded (`ServerCall`: prompt, cached,
evaluated and decoded tokens, llama.cpp's prompt-eval and decode milliseconds, wall time) under the call kind
being measured; `kind_row` turns a kind's records into one table row, with the ideal time from the machine's
rates (evaluated tokens / prompt rate + decoded tokens / decode rate) and measured / ideal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import dspy

from tfgrpo_dspy.lm import LlamaCppEngine
from tfgrpo_dspy.lm.server import ServerRegistry, start_llama_server


@dataclass(frozen=True)
class ServerCall:
    """One request as llama.cpp served it."""

    setting: str
    kind: str
    reset: bool  # a prefix reset of the prefix-reuse protocol, not a call of the program
    prompt_tokens: int
    cached_tokens: int
    evaluated_tokens: int
    decoded_tokens: int
    prompt_ms: float
    decode_ms: float
    wall_s: float


class RecordingServer:
    """Passes requests to a llama.cpp server and records llama.cpp's timings of each, under the current kind."""

    def __init__(self, server: Any, owner: Setting, calls: list[ServerCall]):
        self.server, self.owner, self.calls = server, owner, calls
        self._lock = threading.Lock()

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        answer = self.server.handle_chat_completions(request)
        timings, usage = answer.get("timings") or {}, answer.get("usage") or {}
        call = ServerCall(self.owner.name, self.owner.kind, request.get("max_tokens") == 0,
                          usage.get("prompt_tokens", 0), timings.get("cache_n", 0), timings.get("prompt_n", 0),
                          timings.get("predicted_n", 0), timings.get("prompt_ms", 0.0),
                          timings.get("predicted_ms", 0.0), time.perf_counter() - started)
        with self._lock:
            self.calls.append(call)
        return answer


class Setting:
    """One engine setting (``options`` of `LlamaCppEngine`, the ``stop`` string): its LM, on servers of its own whose
    requests are recorded in ``calls``."""

    def __init__(self, name: str, options: dict[str, Any], stop: str, calls: list[ServerCall], max_tokens: int):
        self.name = name
        self.kind = "calibration"  # what the calls now being made are, for the records
        self.registry = ServerRegistry(factory=lambda s: RecordingServer(start_llama_server(s), self, calls))
        self.engine = LlamaCppEngine(registry=self.registry, **options)
        self.lm = dspy.LM(f"local/{self.engine.settings.model}", engine=self.engine, temperature=0.0,
                          max_tokens=max_tokens, stop=[stop], cache=False)

    def label(self, kind: str) -> None:
        self.kind = kind


def calibrate(setting: Setting) -> dict[str, float]:
    """The machine's prompt-eval and decode rates now (`LlamaCppEngine.measure_speed`)."""
    return asdict(setting.engine.measure_speed())


def timed_calls(setting: Setting, kind: str, items: list, call: Callable[[Any], Any]) -> list[float]:
    """``call`` on each item, one at a time (each call's own cost, no waiting for the slot); the first call warms
    the prefix (evaluated from scratch once) and is recorded apart."""
    walls = []
    for number, item in enumerate(items):
        setting.label(kind if number else f"{kind} (warm-up)")
        started = time.perf_counter()
        with dspy.context(lm=setting.lm):
            call(item)
        if number:
            walls.append(time.perf_counter() - started)
    return walls


def kind_row(kind: str, setting: str, walls: list[float], calls: list[ServerCall], rates: dict[str, float],
             per: int = 1) -> dict[str, Any]:
    """One table row: a call kind in one setting, per program call (``per`` server requests make one call)."""
    mine = [c for c in calls if c.kind == kind and c.setting == setting]
    real = [c for c in mine if not c.reset]
    n = max(len(walls), 1)
    evaluated, decoded = sum(c.evaluated_tokens for c in mine), sum(c.decoded_tokens for c in mine)
    ideal = (evaluated / rates["prompt_tokens_per_s"] + decoded / rates["decode_tokens_per_s"]) / n
    wall = sum(walls) / n
    return {"kind": kind, "setting": setting, "calls": len(walls),
            "prompt_tokens": round(sum(c.prompt_tokens for c in real) / n, 1),
            "cached_tokens": round(sum(c.cached_tokens for c in real) / n, 1),
            "evaluated_tokens": round(evaluated / n, 1), "decoded_tokens": round(decoded / n, 1),
            "llama_prompt_s": round(sum(c.prompt_ms for c in mine) / 1000 / n, 3),
            "llama_decode_s": round(sum(c.decode_ms for c in mine) / 1000 / n, 3),
            "wall_s": round(wall, 3), "ideal_s": round(ideal, 3), "measured_over_ideal": round(wall / ideal, 2)}
