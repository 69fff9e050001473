"""Build a ``dspy.LM`` from a short spec: the embedded local model or any DSPy/LiteLLM model string."""

from __future__ import annotations

import os
from typing import Any

import dspy

from tfgrpo_dspy.lm.engine import GREEDY_REPLICAS, PROVIDER, LlamaCppEngine
from tfgrpo_dspy.lm.weights import DEFAULT_MODEL, MODELS

# Small models sometimes write the ChatAdapter's end marker on the line of the last field, where the
# adapter does not recognise it and leaves it in the value; stopping there removes it and saves tokens.
# Stopping at the marker's first words gives the same text (a stop string is never part of the answer)
# two decoded tokens sooner.
CHAT_ADAPTER_END_MARKER = "[[ ## completed ## ]]"
CHAT_ADAPTER_STOP = "[[ ## completed"
# "local:<alias>" -> registry name.
LOCAL_ALIASES = {"1.5b": "qwen2.5-coder-1.5b", "0.5b": "qwen2.5-coder-0.5b", **{name: name for name in MODELS}}
# Providers LiteLLM routes to a self-hosted server given api_base; any other name is served as "openai/<name>".
_SELF_HOSTED_PROVIDERS = {"openai", "hosted_vllm", "ollama", "ollama_chat", "lm_studio", "text-completion-openai"}


def local_lm(
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
    temperature: float = 0.0,
    max_tokens: int = 1024,
    **lm_kwargs: Any,
) -> dspy.LM:
    """The embedded CPU model (no API key, no network) as a ``dspy.LM``.

    The model loads on the first call (joining its weights into the cache the very first time).
    ``n_ctx`` is the context per sequence; ``n_parallel`` sampled sequences decode together. With
    ``repeatable_greedy`` greedy calls repeat exactly: each is served alone, reusing its prefix repeatably
    (``greedy_prefix_reuse``), on ``greedy_replicas`` servers side by side (see `LlamaCppEngine`). With
    ``coalesce_samples`` sampled calls with the same prompt sent together
    share one evaluation of it. With ``prefill_output_header`` the answer to a ChatAdapter prompt starts
    with its first output field's header already written, evaluated with the prompt instead of decoded.
    Generation stops at DSPy's ChatAdapter end marker unless ``stop=`` says otherwise.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {sorted(MODELS)}, got {model!r}")
    lm_kwargs.setdefault("stop", [CHAT_ADAPTER_STOP])
    engine = LlamaCppEngine(model, n_parallel=n_parallel, n_ctx=n_ctx, n_threads=n_threads,
                            repeatable_greedy=repeatable_greedy, greedy_prefix_reuse=greedy_prefix_reuse,
                            coalesce_samples=coalesce_samples, greedy_replicas=greedy_replicas,
                            prefill_output_header=prefill_output_header)
    return dspy.LM(f"{PROVIDER}/{model}", engine=engine, temperature=temperature, max_tokens=max_tokens, **lm_kwargs)


def make_lm(spec: str, *, api_base: str | None = None, api_key: str | None = None, **lm_kwargs: Any) -> dspy.LM:
    """``"local"``, ``"local:1.5b"``, ``"local:0.5b"`` or a DSPy model string such as ``"openai/gpt-4o-mini"``.

    With ``api_base`` the spec names a model on an OpenAI-compatible server (vLLM, SGLang, Ollama...):
    a bare name such as ``"Qwen/Qwen2.5-7B-Instruct"`` is served as ``"openai/Qwen/Qwen2.5-7B-Instruct"``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"spec must be a non-empty model string such as 'local' or 'openai/gpt-4o-mini', got {spec!r}")
    spec = spec.strip()
    if any(ch.isspace() for ch in spec):
        raise ValueError(f"spec must not contain whitespace, got {spec!r}")
    if spec == "local" or spec.startswith("local:"):
        if api_base is not None or api_key is not None:
            raise ValueError("api_base and api_key do not apply to the embedded local model (spec 'local...')")
        alias = spec.partition(":")[2] or "1.5b"
        if alias not in LOCAL_ALIASES:
            raise ValueError(f"spec {spec!r}: the local model must be one of {sorted(LOCAL_ALIASES)}")
        return local_lm(LOCAL_ALIASES[alias], **lm_kwargs)
    provider, slash, name = spec.partition("/")
    if slash and (not provider or not name):
        raise ValueError(f"spec {spec!r} must look like 'provider/model', e.g. 'openai/gpt-4o-mini'")
    if api_base is None:
        if api_key is not None:
            lm_kwargs["api_key"] = api_key
        return dspy.LM(spec, **lm_kwargs)
    if not isinstance(api_base, str) or not api_base.startswith(("http://", "https://")):
        raise ValueError(f"api_base must be an http(s) URL such as 'http://localhost:8000/v1', got {api_base!r}")
    # An offline machine must not try to download LiteLLM's model cost map for an unknown model.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    model = spec if slash and provider in _SELF_HOSTED_PROVIDERS else f"openai/{spec}"
    # Self-hosted servers usually ignore the key but the OpenAI client demands one; never forward
    # OPENAI_API_KEY to a server that is not OpenAI.
    return dspy.LM(model, api_base=api_base, api_key=api_key or "EMPTY", **lm_kwargs)
