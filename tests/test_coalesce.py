"""Sampled requests equal but for their seed are sent as one request with n completions (tfgrpo_dspy.lm.coalesce)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from tfgrpo_dspy import TrainingFreeGRPO
from tfgrpo_dspy.lm.coalesce import SampleCoalescer, split_choices
from tfgrpo_dspy.lm.engine import LlamaCppEngine
from tfgrpo_dspy.lm.server import ServerRegistry, ServerSettings

USAGE = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}


class NServer:
    """Answers a request with n choices ("<prompt> #<i>"), recording each request; optionally fails."""

    def __init__(self, fail: bool = False, answer=None):
        self.requests: list[dict] = []
        self.fail = fail
        self.answer = answer
        self._lock = threading.Lock()

    def handle_chat_completions(self, request: dict) -> dict:
        with self._lock:
            self.requests.append(request)
        if self.fail:
            raise RuntimeError("server down")
        if self.answer is not None:
            return self.answer(request)
        prompt = request["messages"][-1]["content"]
        choices = [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": f"{prompt} #{i}"}}
                   for i in range(request.get("n", 1))]
        return {"choices": choices, "usage": dict(USAGE), "timings": {"prompt_n": 30}}


def ask(coalescer: SampleCoalescer, prompt: str, seed: int) -> dict:
    return coalescer.handle_chat_completions({"messages": [{"role": "user", "content": prompt}], "temperature": 0.7,
                                              "seed": seed})


def send_together(coalescer: SampleCoalescer, requests: list[tuple[str, int]]) -> list[dict]:
    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda r: ask(coalescer, *r), requests))


def test_requests_equal_but_for_the_seed_share_one_request_and_each_gets_its_own_choice():
    server = NServer()
    coalescer = SampleCoalescer(server, max_n=4, window_s=2.0)  # a full batch leaves at once, not after 2 s
    answers = send_together(coalescer, [("route this", seed) for seed in range(4)])
    assert len(server.requests) == 1 and server.requests[0]["n"] == 4
    contents = sorted(a["choices"][0]["message"]["content"] for a in answers)
    assert contents == [f"route this #{i}" for i in range(4)]  # four distinct draws, one per caller
    assert all(len(a["choices"]) == 1 and a["choices"][0]["index"] == 0 for a in answers)
    # The prompt was evaluated once: the first caller keeps the server's timings, the others read it as cached.
    assert sum("timings" in a for a in answers) == 1
    assert sorted(a["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for a in answers) == [0, 30, 30,
                                                                                                            30]


def test_different_prompts_are_not_merged_and_a_lone_request_is_sent_as_it_came():
    server = NServer()
    coalescer = SampleCoalescer(server, max_n=4, window_s=0.2)
    answers = send_together(coalescer, [("first", 1), ("second", 2)])
    assert sorted(r["messages"][-1]["content"] for r in server.requests) == ["first", "second"]
    assert all("n" not in r for r in server.requests)
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["first #0", "second #0"]
    assert [r["seed"] for r in sorted(server.requests, key=lambda r: r["seed"])] == [1, 2]  # a lone seed is kept


def test_at_most_max_n_requests_go_together():
    server = NServer()
    coalescer = SampleCoalescer(server, max_n=2, window_s=0.5)
    answers = send_together(coalescer, [("same", seed) for seed in range(4)])
    assert sorted(r.get("n", 1) for r in server.requests) == [2, 2]
    assert len(answers) == 4


def test_a_failure_reaches_every_caller_of_the_batch_and_nobody_hangs():
    coalescer = SampleCoalescer(NServer(fail=True), max_n=3, window_s=0.5)
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(ask, coalescer, "same", seed) for seed in range(3)]
        for future in futures:
            with pytest.raises(RuntimeError, match="server down"):
                future.result(timeout=10)


def test_too_few_choices_or_an_error_answer_becomes_an_error_for_every_request():
    short = SampleCoalescer(NServer(answer=lambda r: {"choices": [{"message": {"content": "x"}}]}), max_n=2,
                            window_s=0.5)
    answers = send_together(short, [("same", 1), ("same", 2)])
    assert all("asked llama.cpp for 2 completions, got 1" in a["error"]["message"] for a in answers)
    assert split_choices({"error": {"message": "bad"}}, 2) == [{"error": {"message": "bad"}}] * 2


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="max_n"):
        SampleCoalescer(NServer(), max_n=0)
    with pytest.raises(ValueError, match="window_s"):
        SampleCoalescer(NServer(), max_n=2, window_s=-1)
    with pytest.raises(ValueError, match="coalesce_window_s"):
        ServerSettings(model="qwen2.5-coder-1.5b", coalesce_window_s=-0.1)
    with pytest.raises(ValueError, match="cannot coalesce"):
        ServerSettings(model="qwen2.5-coder-1.5b", coalesce_window_s=0.05, repeatable_prefix=True, cache_ram_mib=0)


class ChatAdapterServer(NServer):
    """Answers every choice with one queue in ChatAdapter format."""

    def __init__(self):
        super().__init__(answer=lambda request: {
            "choices": [{"index": i, "finish_reason": "stop",
                         "message": {"content": "[[ ## queue ## ]]\nbilling\n\n[[ ## completed ## ]]"}}
                        for i in range(request.get("n", 1))], "usage": dict(USAGE)})


def test_a_compile_sends_each_group_as_one_request_on_the_embedded_engine(tmp_path):
    """Through DSPy and the optimizer: the group's rollouts (distinct rollout ids and seeds) reach the sampled server
    as one request with n = group size."""
    servers: dict[ServerSettings, ChatAdapterServer] = {}
    engine = LlamaCppEngine(registry=ServerRegistry(factory=lambda s: servers.setdefault(s, ChatAdapterServer())))
    lm = dspy.LM("local/qwen2.5-coder-1.5b", engine=engine, temperature=0.0, cache=False)
    trainset = [dspy.Example(ticket=f"ticket {i}", queue="billing").with_inputs("ticket") for i in range(3)]
    optimizer = TrainingFreeGRPO(metric=lambda e, p, trace=None: float(p.queue == e.queue), group_size=4,
                                 num_threads=4, epochs=1, seed_rollouts=True, log_dir=str(tmp_path / "log"),
                                 progress=False)
    with dspy.context(lm=lm):
        optimizer.compile(dspy.Predict("ticket -> queue"), trainset=trainset)
    sampled = servers[engine.settings].requests
    assert engine.settings.coalesce_window_s > 0 and not engine.greedy_settings.coalesce_window_s
    assert sorted(r.get("n", 1) for r in sampled) == [4, 4, 4]  # one request per group of four
    apart = LlamaCppEngine(coalesce_samples=False, registry=ServerRegistry(factory=lambda s: ChatAdapterServer()))
    assert apart.settings.coalesce_window_s == 0 and LlamaCppEngine.load_state(apart.dump_state()).coalesce_samples \
        is False

