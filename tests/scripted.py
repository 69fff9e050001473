"""A scripted LM for tests: a real DSPy engine whose answers come from a Python function.

The function receives the parsed call (which signature is asked, its input fields, the
temperature, a call counter) and returns the output fields; the engine formats them the way
DSPy's ChatAdapter expects, so every adapter, parser and cache path runs for real.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage, response_to_events

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\Z)", re.DOTALL)


@dataclass
class Call:
    kind: str  # "summary", "extract", "induce", "update", "shorten", "generalize", "react", "extract_answer", "policy"
    inputs: dict[str, str]
    system: str
    temperature: float | None
    number: int
    seed: int | None = None


def classify(system: str) -> str:
    if "[[ ## first_divergence ## ]]" in system:
        return "summary"
    if "[[ ## lessons ## ]]" in system and "[[ ## attempts ## ]]" in system:
        return "extract"
    if "[[ ## failures ## ]]" in system and "[[ ## condition ## ]]" in system:
        return "induce"
    if "[[ ## operations ## ]]" in system:
        return "update"
    if "[[ ## short_lesson ## ]]" in system:
        return "shorten"
    if "[[ ## general_lesson ## ]]" in system:
        return "generalize"
    if "[[ ## next_tool_name ## ]]" in system:
        return "react"
    if "[[ ## trajectory ## ]]" in system:
        return "extract_answer"
    return "policy"


class ScriptedEngine:
    def __init__(self, respond: Callable[[Call], dict[str, Any] | Exception]):
        self.respond = respond
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    def complete(self, request):
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or ())
        user = request.messages[-1].text or ""
        with self.lock:
            call = Call(classify(system), {k: v.strip() for k, v in _FIELD.findall(user)}, system,
                        request.config.temperature, len(self.calls), request.config.seed)
            self.calls.append(call)
        fields = self.respond(call)
        if isinstance(fields, Exception):
            raise fields
        if isinstance(fields, str):
            text = fields
        else:
            text = "".join(
                f"[[ ## {k} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}\n\n" for k, v in fields.items()
            ) + "[[ ## completed ## ]]"
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=len(system + user) // 4, output_tokens=len(text) // 4,
                                    total_tokens=(len(system + user) + len(text)) // 4))

    def stream(self, request):
        return response_to_events(self.complete(request))

    def close(self):
        pass

    def __deepcopy__(self, memo):
        return self  # engines are shared by every copy of the LM, as DSPy borrows them

    def kinds(self) -> list[str]:
        return [c.kind for c in self.calls]


# The per-group reflection and the update step alone, as before lessons were induced and verified: the
# settings for tests that pin down that pipeline (the update, the gate, resume) with policies that do not read
# the lessons they are shown.
UPDATE_PIPELINE = {"verify": False, "induction": False, "failed_groups": False}


def scripted_lm(respond: Callable[[Call], dict[str, Any] | Exception], *, cache: bool = False) -> dspy.LM:
    return dspy.LM("scripted/model", engine=ScriptedEngine(respond), cache=cache, num_retries=0)


def default_reflection(call: Call) -> dict[str, Any] | None:
    """Reflection answers that depend only on the inputs (deterministic under threads)."""
    if call.kind == "summary":
        return {"summary": "1. read the question 2. answered", "experiences_used": [],
                "first_divergence": "none"}
    if call.kind == "extract":
        return {"difference": "the winners checked units",
                "lessons": [{"condition": "a question mixes units", "action": "convert them to one unit first",
                             "replaces": None}],
                "misleading": [], "useful": []}
    if call.kind == "induce":
        return {"condition": "a question mixes units", "action": "convert them to one unit before adding"}
    if call.kind == "generalize":
        return {"general_lesson": "When a problem mixes units, convert them to one unit before computing."}
    if call.kind == "shorten":
        return {"short_lesson": " ".join(call.inputs["lesson"].split()[: int(call.inputs["max_words"].split()[0])])}
    if call.kind == "update":
        ops = []
        for line in call.inputs.get("proposals", "").splitlines():
            match = re.match(r"- lesson supported by \d+ example\(s\): (.*)$", line)
            if match:
                ops.append({"op": "add", "text": match.group(1), "reason": "from proposal"})
        return {"operations": ops or [{"op": "keep"}]}
    return None


def ticket_router(call: Call) -> dict[str, Any]:
    """The tickets demo on a scripted LM: reflection from `default_reflection`; sampled rollouts (seeded) spread
    over the queues, so groups are mixed; greedy calls say "general"."""
    from tfgrpo_dspy.kits.tickets.rules import QUEUES

    reply = default_reflection(call)
    if reply is not None:
        return reply
    return {"queue": QUEUES[call.seed % len(QUEUES)] if call.seed is not None else "general"}
