"""The translation between lm15's canonical requests and responses and llama.cpp's OpenAI-style chat payloads.

`build_chat_payload` writes one canonical request as the body of ``/v1/chat/completions``, refusing what the
local server cannot honour rather than dropping it; `add_output_header_prefill` starts the answer of a DSPy
ChatAdapter prompt with its first output field's header; `parse_chat_response` reads the server's answer (or
its error) back as a canonical response. Nothing here talks to a server: that is `tfgrpo_dspy.lm.engine`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from dspy.lm15 import (
    ContextLengthError,
    InvalidRequestError,
    Message,
    ProviderError,
    Request,
    Response,
    ServerError,
    TextPart,
    ThinkingPart,
    UnsupportedFeatureError,
    Usage,
)

logger = logging.getLogger(__name__)

PROVIDER = "local"  # the provider of "local/<model>" LMs, named in every error raised here
_FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_call", "content_filter": "content_filter"}
# Config fields forwarded under the same name in the llama.cpp chat payload.
_SAMPLING_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty")
# Config fields this engine cannot honour; lm15's contract is to refuse them, not drop them.
_REFUSED_FIELDS = ("tool_choice", "reasoning", "logprobs", "service_tier", "user_id", "store")
# DSPy's ChatAdapter ends every user turn by naming the field the answer starts with. Writing that header
# into the answer (a prefill: llama.cpp continues a final assistant message) evaluates its ~5 tokens with
# the prompt instead of decoding them one at a time. The header has no trailing newline: this model often
# writes the value on the header's line, and a forced newline changed its answer where none did not.
_CHAT_ADAPTER_FIRST_FIELD = re.compile(r"starting with the field `(\[\[ ## [^`\n]+? ## \]\])`")


def build_chat_payload(request: Request) -> dict[str, Any]:
    """The llama.cpp ``/v1/chat/completions`` body for one canonical request."""
    if request.tools:
        raise UnsupportedFeatureError("The local llama.cpp engine does not support tools", provider=PROVIDER)
    config = request.config
    refused = [name for name in _REFUSED_FIELDS if getattr(config, name) is not None]
    if config.probabilities == "required":
        refused.append("probabilities")
    if refused:
        raise UnsupportedFeatureError(
            f"The local llama.cpp engine does not support {', '.join(refused)}", provider=PROVIDER
        )
    messages = []
    if request.system is not None:
        messages.append({"role": "system", "content": _system_text(request.system)})
    messages.extend(_chat_message(message) for message in request.messages)
    payload: dict[str, Any] = {"messages": messages}
    for name in _SAMPLING_FIELDS:
        value = getattr(config, name)
        if value is not None:
            payload[name] = value
    if config.stop:
        payload["stop"] = list(config.stop)
    if config.response_format is not None:
        payload["response_format"] = dict(config.response_format)
    # Extensions carry llama.cpp-specific knobs (min_p, repeat_penalty, grammar, ...) verbatim.
    payload.update(config.extensions or {})
    return payload


def add_output_header_prefill(payload: dict[str, Any]) -> str | None:
    """Append the header of the first output field a DSPy ChatAdapter prompt asks for as the start of the
    answer (a final assistant message the server continues); the header, or None for any other prompt."""
    messages = payload["messages"]
    if not messages or messages[-1]["role"] != "user":
        return None
    asked = _CHAT_ADAPTER_FIRST_FIELD.findall(messages[-1]["content"])
    if not asked:
        return None
    messages.append({"role": "assistant", "content": asked[-1]})
    return asked[-1]


def _system_text(system: str | tuple) -> str:
    if isinstance(system, str):
        return system
    return "".join(_text_of(part, where="system prompt") for part in system)


def _chat_message(message: Message) -> dict[str, str]:
    if message.role == "tool":
        raise UnsupportedFeatureError("The local llama.cpp engine does not support tool messages", provider=PROVIDER)
    # Earlier reasoning is not sent back to the model, as with hosted chat APIs.
    parts = [p for p in message.parts if not (message.role == "assistant" and isinstance(p, ThinkingPart))]
    text = "".join(_text_of(part, where=f"{message.role} message") for part in parts)
    if message.role == "developer":
        # The chat template has no developer role; lm15 maps it to a marked user turn elsewhere too.
        return {"role": "user", "content": f"[developer] {text}"}
    return {"role": message.role, "content": text}


def _text_of(part: Any, *, where: str) -> str:
    if not isinstance(part, TextPart):
        raise UnsupportedFeatureError(
            f"The local llama.cpp engine accepts only text; got a {getattr(part, 'type', type(part).__name__)} "
            f"part in the {where}",
            provider=PROVIDER,
        )
    return part.text


def parse_chat_response(raw: dict[str, Any], *, model: str, prefill: str | None = None) -> Response:
    """A canonical response (text, finish reason, token usage) from the server's answer; ``prefill`` is the start
    of the answer the request wrote itself, which llama.cpp returns as part of the text."""
    if not isinstance(raw, dict):
        raise ServerError(f"llama.cpp server returned {type(raw).__name__}, expected a dict", provider=PROVIDER)
    if "error" in raw:
        raise _error_from(raw["error"])
    try:
        choice = raw["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ServerError(f"llama.cpp server returned no choice: {str(raw)[:200]}", provider=PROVIDER) from exc
    parts: list[Any] = []
    if message.get("reasoning_content"):
        parts.append(ThinkingPart(message["reasoning_content"]))
    text = message.get("content") or ""
    if prefill and not text.startswith(prefill):
        text = prefill + text  # a server that returns only the continuation
    parts.append(TextPart(text))
    finish_reason = choice.get("finish_reason")
    if finish_reason not in _FINISH_REASONS:
        logger.debug("Unknown llama.cpp finish_reason %r read as 'stop'", finish_reason)
    usage = raw.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Response(
        id=raw.get("id") or None,
        model=model,
        message=Message.assistant(parts),
        finish_reason=_FINISH_REASONS.get(finish_reason, "stop"),
        usage=Usage(
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"),
            cache_read_tokens=cached,
        ),
        provider_data={"timings": raw["timings"]} if isinstance(raw.get("timings"), dict) else None,
    )


def _error_from(error: Any) -> ProviderError:
    if not isinstance(error, dict):
        return ServerError(f"llama.cpp server error: {error}", provider=PROVIDER)
    message = str(error.get("message") or error)
    status = error.get("code") if isinstance(error.get("code"), int) else None
    kind = error.get("type")
    if kind == "exceed_context_size_error":
        return ContextLengthError(message, provider=PROVIDER, status=status, provider_code=kind)
    if kind == "invalid_request_error" or (status is not None and 400 <= status < 500):
        return InvalidRequestError(message, provider=PROVIDER, status=status, provider_code=kind)
    return ServerError(message, provider=PROVIDER, status=status, provider_code=kind)
