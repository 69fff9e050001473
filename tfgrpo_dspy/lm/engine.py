"""A DSPy engine (``complete(Request) -> Response``) backed by the in-process llama.cpp server.

``dspy.LM("local/<model>", engine=LlamaCppEngine(...))`` keeps DSPy's cache, rollout_id, retries,
history and usage tracking; this module only sends one canonical request to the server that serves it
(greedy requests to the repeatable one), translated into the server's OpenAI-style chat payload and its answer
back into a canonical response by `tfgrpo_dspy.lm.chat`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from dspy.clients.engines.base import validate_request
from dspy.lm15 import Request, Response, ServerError, response_to_events

from tfgrpo_dspy.inference.block import BLOCK_START
from tfgrpo_dspy.lm.chat import PROVIDER, add_output_header_prefill, build_chat_payload, parse_chat_response
from tfgrpo_dspy.lm.server import ServerRegistry, ServerSettings, default_registry
from tfgrpo_dspy.lm.weights import DEFAULT_MODEL

# The payload translation (`tfgrpo_dspy.lm.chat`) lives in a module of its own; its names are re-exported here.
__all__ = ["COALESCE_WINDOW_S", "GREEDY_PREFIX_SLOTS", "GREEDY_REPLICAS", "PROVIDER", "SPEED_PROMPT",
           "LlamaCppEngine", "MachineSpeed", "add_output_header_prefill", "build_chat_payload",
           "parse_chat_response"]

# Prefixes a greedy server keeps evaluated: calls whose instructions carry the lesson retrieved for them
# alternate between as many prefixes as lessons. Each slot holds n_ctx tokens of KV cache (the 1.5B model:
# ~115 MB at 4096).
GREEDY_PREFIX_SLOTS = 12
# Repeatable greedy servers serving side by side: one request at a time leaves the 2 cores partly idle
# (`tfgrpo_dspy.lm.replicas`). Each holds its own KV cache (GREEDY_PREFIX_SLOTS x n_ctx tokens, ~1.4 GB).
GREEDY_REPLICAS = 2
# How long a sampled request waits for partners with the same prompt (`tfgrpo_dspy.lm.coalesce`): the G
# rollouts of a group are sent from G threads within microseconds of each other; a call takes seconds.
COALESCE_WINDOW_S = 0.05


class LlamaCppEngine:
    """Serves DSPy requests from a local GGUF model; copies of one LM share one loaded server.

    Sampled requests share a server that decodes ``n_parallel`` sequences as one batch and reuses cached
    prompt prefixes. Neither is bit-for-bit repeatable: llama.cpp's kernels sum in a different order for
    a different batch shape, so an answer depends on what else was decoding and on what the slot held
    before (measured here: 15 of 100 greedy ticket answers changed between two identical runs). With
    ``repeatable_greedy`` (the default), greedy requests (temperature 0) go to a second server that serves
    them one at a time, where the same request always gets the same answer: paired comparisons of greedy
    evaluations then measure the programs, not the server. There, ``greedy_prefix_reuse`` (the default)
    reuses the KV cache of each request's fixed prefix (the system message: instructions, field formats,
    the lesson shown) in a way that stays repeatable, keeping the last `GREEDY_PREFIX_SLOTS` prefixes
    (`tfgrpo_dspy.lm.prefix`); a prefix whose lesson block is new is evaluated on top of the one evaluation
    of the system message before the block. Without it every greedy prompt is evaluated whole on a one-slot
    server.
    With prefix reuse, up to ``greedy_replicas`` such servers (started as requests overlap) serve greedy
    requests side by side, each one at a time, with the same answers (`tfgrpo_dspy.lm.replicas`).
    With ``coalesce_samples`` (the default), sampled requests equal but for their seed that arrive together
    (a group's rollouts) are sent as one request with n completions, so their prompt is evaluated once
    (`tfgrpo_dspy.lm.coalesce`). With ``prefill_output_header`` (the default), the answer to a DSPy
    ChatAdapter prompt starts with the header of its first output field already written (`add_output_header_prefill`).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        n_parallel: int = 4,
        n_ctx: int = 4096,
        n_threads: int = 2,
        repeatable_greedy: bool = True,
        greedy_prefix_reuse: bool = True,
        coalesce_samples: bool = True,
        greedy_replicas: int = GREEDY_REPLICAS,
        prefill_output_header: bool = True,
        registry: ServerRegistry | None = None,
    ) -> None:
        if isinstance(greedy_replicas, bool) or not isinstance(greedy_replicas, int) or greedy_replicas < 1:
            raise ValueError(f"greedy_replicas must be a positive int, got {greedy_replicas!r}")
        self.settings = ServerSettings(model=model, n_parallel=n_parallel, n_ctx=n_ctx, n_threads=n_threads,
                                       coalesce_window_s=COALESCE_WINDOW_S if coalesce_samples else 0.0)
        self.coalesce_samples = coalesce_samples
        self.repeatable_greedy = repeatable_greedy
        self.greedy_prefix_reuse = greedy_prefix_reuse
        self.greedy_replicas = greedy_replicas
        self.prefill_output_header = prefill_output_header
        # No RAM prompt cache on the greedy server: it would swap in a slot state computed by another request.
        # Replicas need the repeatable prefix server, which serves each one request at a time.
        self.greedy_settings = replace(self.settings, n_parallel=GREEDY_PREFIX_SLOTS if greedy_prefix_reuse else 1,
                                       cache_ram_mib=0, repeatable_prefix=greedy_prefix_reuse, coalesce_window_s=0.0,
                                       replicas=greedy_replicas if greedy_prefix_reuse else 1,
                                       prefix_base_marker=BLOCK_START if greedy_prefix_reuse else None)
        self._registry = registry if registry is not None else default_registry()

    def complete(self, request: Request) -> Response:
        validate_request(request)
        payload = build_chat_payload(request)
        header = add_output_header_prefill(payload) if self.prefill_output_header else None
        settings = self.settings
        if self.repeatable_greedy and not payload.get("temperature"):
            settings = self.greedy_settings
            if not self.greedy_prefix_reuse:
                payload["cache_prompt"] = False  # a prefix the slot kept was computed in another batch shape
        server = self._registry.get(settings)
        try:
            raw = server.handle_chat_completions(payload)
        except Exception as exc:  # the native server reports failures as RuntimeError
            raise ServerError(f"llama.cpp server failed: {exc}", provider=PROVIDER) from exc
        return parse_chat_response(raw, model=self.settings.model, prefill=header)

    def stream(self, request: Request) -> Iterator[Any]:
        return response_to_events(self.complete(request))

    def measure_speed(self) -> MachineSpeed:
        """The machine's prompt-evaluation and decode rates now, from llama.cpp's own timings of one fixed request
        evaluated from scratch on the greedy server (64 tokens decoded; the second of two runs, the first pages
        the weights in). Costs a few seconds; the result says how fast every figure measured after it ran."""
        server = self._registry.get(self.greedy_settings)
        request = {"messages": [{"role": "user", "content": SPEED_PROMPT}], "max_tokens": 64, "ignore_eos": True,
                   "temperature": 0.0, "cache_prompt": False}
        for _ in range(2):
            raw = server.handle_chat_completions(request)
        timings = raw.get("timings") or {}
        if not timings.get("prompt_ms") or not timings.get("predicted_ms"):
            raise ServerError("llama.cpp returned no timings to measure the speed with", provider=PROVIDER)
        return MachineSpeed(prompt_tokens_per_s=round(1000 * timings["prompt_n"] / timings["prompt_ms"], 2),
                            decode_tokens_per_s=round(1000 * timings["predicted_n"] / timings["predicted_ms"], 2))

    def close(self) -> None:
        """Release the shared servers; the next call on any engine with these settings reloads them."""
        self._registry.release(self.settings)
        self._registry.release(self.greedy_settings)

    def dump_state(self) -> dict[str, Any]:
        return {
            "model": self.settings.model,
            "n_parallel": self.settings.n_parallel,
            "n_ctx": self.settings.n_ctx,
            "n_threads": self.settings.n_threads,
            "repeatable_greedy": self.repeatable_greedy,
            "greedy_prefix_reuse": self.greedy_prefix_reuse,
            "coalesce_samples": self.coalesce_samples,
            "greedy_replicas": self.greedy_replicas,
            "prefill_output_header": self.prefill_output_header,
        }

    @classmethod
    def load_state(cls, state: dict[str, Any]) -> LlamaCppEngine:
        return cls(**state)

    def __deepcopy__(self, memo: dict) -> LlamaCppEngine:
        # Immutable settings plus a shared registry: deep copies of programs keep sharing the model.
        return self

    def __reduce__(self):
        return (type(self).load_state, (self.dump_state(),))

    def __repr__(self) -> str:
        return f"LlamaCppEngine({self.settings})"


@dataclass(frozen=True)
class MachineSpeed:
    """How fast the embedded model runs on this machine now (llama.cpp's timings of one request)."""

    prompt_tokens_per_s: float
    decode_tokens_per_s: float

    def __str__(self) -> str:
        return (f"prompt evaluation {self.prompt_tokens_per_s:.1f} tokens/s, "
                f"decode {self.decode_tokens_per_s:.1f} tokens/s")


# A fixed request of about 550 prompt tokens for `LlamaCppEngine.measure_speed`.
SPEED_PROMPT = " ".join(f"Item {i}: a crate of {i + 3} apples weighs {2 * i + 5} kg." for i in range(30))
