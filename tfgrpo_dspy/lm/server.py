"""One in-process llama.cpp server per (model, settings), shared by every engine that asks for it.

Loading a GGUF model takes seconds and hundreds of MB, so every LM copy (``lm.copy(rollout_id=k)``)
and every engine with the same settings uses one ``xllamacpp.Server``. The server holds
``n_parallel`` slots and batches the sequences decoding at the same time, so the G rollouts of a
group sent from G threads decode together. Servers start lazily on first use and are released at
interpreter exit (xllamacpp stops its worker loop when the object is freed).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tfgrpo_dspy.lm.coalesce import SampleCoalescer
from tfgrpo_dspy.lm.prefix import RepeatablePrefixServer
from tfgrpo_dspy.lm.replicas import ReplicaPool
from tfgrpo_dspy.lm.weights import ensure_weights, get_weights_spec

logger = logging.getLogger(__name__)


class ChatServer(Protocol):
    """The part of ``xllamacpp.Server`` the engine uses (fakes implement it in tests)."""

    def handle_chat_completions(self, request: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ServerSettings:
    """Everything that decides which server process state a request needs."""

    model: str  # a key of tfgrpo_dspy.lm.weights.MODELS
    n_parallel: int = 4  # sequences decoded together (slots)
    n_ctx: int = 4096  # context tokens per sequence
    n_threads: int = 2
    cache_ram_mib: int | None = None  # llama.cpp's RAM prompt cache; None = its default, 0 = off
    # Serve requests one at a time, reusing their prefixes repeatably in the n_parallel slots
    # (`tfgrpo_dspy.lm.prefix`); needs the RAM prompt cache off.
    repeatable_prefix: bool = False
    # Hold sampled requests this long for partners equal but for their seed, sent as one request with n
    # completions (`tfgrpo_dspy.lm.coalesce`); 0 = every request on its own.
    coalesce_window_s: float = 0.0
    # Up to this many identical servers serving requests side by side, started as requests overlap
    # (`tfgrpo_dspy.lm.replicas`); more than one needs repeatable_prefix (each serves one request at a time).
    replicas: int = 1
    # With repeatable_prefix: prefixes whose system message differs only from this marker on (the lesson
    # block) are evaluated on top of one evaluation of what precedes it (`tfgrpo_dspy.lm.prefix`).
    prefix_base_marker: str | None = None

    def __post_init__(self) -> None:
        get_weights_spec(self.model)
        for name in ("n_parallel", "n_ctx", "n_threads", "replicas"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.cache_ram_mib is not None and (isinstance(self.cache_ram_mib, bool)
                                               or not isinstance(self.cache_ram_mib, int) or self.cache_ram_mib < 0):
            raise ValueError(f"cache_ram_mib must be None or an int >= 0, got {self.cache_ram_mib!r}")
        if (isinstance(self.coalesce_window_s, bool) or not isinstance(self.coalesce_window_s, (int, float))
                or self.coalesce_window_s < 0):
            raise ValueError(f"coalesce_window_s must be a number >= 0, got {self.coalesce_window_s!r}")
        if self.repeatable_prefix and self.coalesce_window_s:
            raise ValueError("repeatable_prefix serves requests one at a time: it cannot coalesce them")
        if self.replicas > 1 and not self.repeatable_prefix:
            raise ValueError("replicas > 1 needs repeatable_prefix (each replica serves one request at a time)")
        if self.prefix_base_marker is not None and (not isinstance(self.prefix_base_marker, str)
                                                    or not self.prefix_base_marker or not self.repeatable_prefix):
            raise ValueError(f"prefix_base_marker must be None, or a non-empty str with repeatable_prefix, got "
                             f"{self.prefix_base_marker!r}")
        if self.repeatable_prefix and self.cache_ram_mib != 0:
            raise ValueError("repeatable_prefix needs cache_ram_mib=0 (no RAM prompt cache)")


def start_llama_server(settings: ServerSettings) -> ChatServer:
    """Join the weights if needed and load them into an ``xllamacpp.Server``."""
    try:
        import xllamacpp
    except ImportError as exc:
        raise ImportError(
            "The embedded local LM needs xllamacpp. Install it with: "
            f"{get_weights_spec(settings.model).install_command}"
        ) from exc
    model_path = ensure_weights(settings.model)
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.n_parallel = settings.n_parallel
    # llama.cpp splits n_ctx evenly over the slots; ask for the per-sequence size times the slots.
    params.n_ctx = settings.n_ctx * settings.n_parallel
    params.cpuparams.n_threads = settings.n_threads
    params.cpuparams_batch.n_threads = settings.n_threads
    if settings.cache_ram_mib is not None:
        params.cache_ram_mib = settings.cache_ram_mib
    # Its per-token request logging would flood stderr; errors still come back in the responses.
    params.verbosity = -1
    started = time.perf_counter()
    server = xllamacpp.Server(params)
    logger.info("Loaded %s with %s in %.1f s", model_path.name, settings, time.perf_counter() - started)
    return server


class ServerRegistry:
    """Thread-safe map from settings to a lazily started server."""

    def __init__(self, factory: Callable[[ServerSettings], ChatServer] = start_llama_server) -> None:
        self._factory = factory
        self._servers: dict[ServerSettings, ChatServer] = {}
        self._start_locks: dict[ServerSettings, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, settings: ServerSettings) -> ChatServer:
        server = self._servers.get(settings)
        if server is not None:
            return server
        with self._lock:
            start_lock = self._start_locks.setdefault(settings, threading.Lock())
        # A per-settings lock: loading one model does not block calls to another.
        with start_lock:
            server = self._servers.get(settings)
            if server is None:
                if settings.repeatable_prefix:  # one wrapper per server: it tracks what the slots hold
                    def replica(settings: ServerSettings = settings) -> RepeatablePrefixServer:
                        return RepeatablePrefixServer(self._factory(settings), slots=settings.n_parallel,
                                                      base_marker=settings.prefix_base_marker)

                    server = replica() if settings.replicas == 1 else ReplicaPool(replica, settings.replicas)
                else:
                    server = self._factory(settings)
                if settings.coalesce_window_s:
                    server = SampleCoalescer(server, max_n=settings.n_parallel, window_s=settings.coalesce_window_s)
                with self._lock:
                    self._servers[settings] = server
        return server

    def release(self, settings: ServerSettings) -> None:
        """Drop the server; calls already running keep their reference and finish."""
        with self._lock:
            self._servers.pop(settings, None)

    def close(self) -> None:
        with self._lock:
            self._servers.clear()

    def __len__(self) -> int:
        return len(self._servers)


_default_registry = ServerRegistry()
atexit.register(_default_registry.close)


def default_registry() -> ServerRegistry:
    return _default_registry
