"""Greedy replicas: identical repeatable servers side by side give the answers one server gives."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest
from fake_slot_server import LcpSlotServer, answer, chat

from tfgrpo_dspy.lm import LlamaCppEngine
from tfgrpo_dspy.lm.prefix import RepeatablePrefixServer
from tfgrpo_dspy.lm.replicas import ReplicaPool
from tfgrpo_dspy.lm.server import ServerRegistry, ServerSettings

LESSONS = [f"Route tickets.\n[E{i}] lesson {i}" for i in range(3)]


def pool_of(n: int, slots: int = 2) -> tuple[ReplicaPool, list[LcpSlotServer]]:
    inner: list[LcpSlotServer] = []

    def start() -> RepeatablePrefixServer:
        inner.append(LcpSlotServer(slots=slots))
        return RepeatablePrefixServer(inner[-1], slots=slots)

    pool = ReplicaPool(start, n)
    for _ in range(n - 1):  # start them all: two requests at once make the pool start the second
        pool.replicas.append(start())
        pool._idle.append(pool.replicas[-1])
    return pool, inner


def test_replicas_side_by_side_answer_as_one_server_does():
    requests = [chat(LESSONS[i % 3], f"ticket {i}") for i in range(24)]
    one = RepeatablePrefixServer(LcpSlotServer(slots=2), slots=2)
    serial = [answer(one, r) for r in requests]
    pool, inner = pool_of(2)
    with ThreadPoolExecutor(4) as ex:
        side_by_side = list(ex.map(lambda r: answer(pool, r), requests))
    assert side_by_side == serial
    assert all(s.payloads for s in inner)  # both replicas served


def test_two_replicas_serve_two_requests_at_once():
    both_in = threading.Barrier(2, timeout=5)

    class Waiting(LcpSlotServer):
        def handle_chat_completions(self, payload: dict) -> dict:
            if payload.get("max_tokens") != 0:
                both_in.wait()  # breaks (and the test fails) unless the other replica is serving too
            return super().handle_chat_completions(payload)

    pool = ReplicaPool(lambda: RepeatablePrefixServer(Waiting()), 2)
    with ThreadPoolExecutor(2) as ex:
        answers = list(ex.map(lambda u: answer(pool, chat(LESSONS[0], u)), ["a", "b"]))
    assert all(answers) and not both_in.broken
    assert len(pool.replicas) == 2  # the second started when the first was busy


def test_a_second_replica_starts_only_when_requests_overlap():
    started = []

    def start() -> RepeatablePrefixServer:
        started.append(LcpSlotServer())
        return RepeatablePrefixServer(started[-1])

    pool = ReplicaPool(start, 2)
    for user in ("a", "b", "c"):
        answer(pool, chat(LESSONS[0], user))
    assert len(started) == 1


def test_a_request_goes_to_the_replica_holding_its_prefix():
    pool, inner = pool_of(2, slots=1)
    for lesson in LESSONS[:2]:  # taking the first idle replica would alternate a prefix between the two
        for user in ("1", "2", "3", "4"):
            answer(pool, chat(lesson, user))
    from_scratch = [[p for p in s.payloads if p.get("cache_prompt") is False] for s in inner]
    # Each prefix was evaluated from scratch once, in its own replica, and found there afterwards.
    assert [len(f) for f in from_scratch] == [1, 1]
    assert {f[0]["messages"][0]["content"] for f in from_scratch} == set(LESSONS[:2])


def test_a_failing_replica_is_released():
    class Failing:
        def handle_chat_completions(self, request: dict) -> dict:
            raise RuntimeError("boom")

        def holds_prefix(self, request: dict) -> bool:
            return False

        holds_base = holds_prefix

    pool = ReplicaPool(Failing, 1)
    for _ in range(2):  # the second call would wait forever if the first had not given the replica back
        with pytest.raises(RuntimeError, match="boom"):
            pool.handle_chat_completions(chat(LESSONS[0], "x"))


def test_registry_starts_up_to_greedy_replicas_servers():
    made: list[LcpSlotServer] = []
    both_in = threading.Barrier(2, timeout=5)

    class Waiting(LcpSlotServer):
        def handle_chat_completions(self, payload: dict) -> dict:
            if payload.get("max_tokens") != 0:
                both_in.wait()
            return super().handle_chat_completions(payload)

    def factory(settings: ServerSettings) -> LcpSlotServer:
        made.append(Waiting(slots=settings.n_parallel))
        return made[-1]

    engine = LlamaCppEngine(registry=ServerRegistry(factory=factory))
    assert engine.greedy_settings.replicas == 2 and engine.dump_state()["greedy_replicas"] == 2
    lm = dspy.LM("local/qwen2.5-coder-1.5b", engine=engine, temperature=0.0, cache=False)

    def ask(question: str) -> None:
        with dspy.context(lm=lm):
            dspy.Predict("question -> answer")(question=question)

    with ThreadPoolExecutor(2) as ex:
        list(ex.map(ask, ["one", "two", "three", "four"]))
    assert len(made) == 2 and not both_in.broken
    assert LlamaCppEngine(greedy_prefix_reuse=False).greedy_settings.replicas == 1


def test_bad_replica_settings_are_named():
    with pytest.raises(ValueError, match="greedy_replicas must be a positive int"):
        LlamaCppEngine(greedy_replicas=0)
    with pytest.raises(ValueError, match="replicas must be a positive int"):
        ServerSettings(model="qwen2.5-coder-1.5b", replicas=True)
    with pytest.raises(ValueError, match="replicas > 1 needs repeatable_prefix"):
        ServerSettings(model="qwen2.5-coder-1.5b", replicas=2)
    with pytest.raises(ValueError, match="max_replicas must be a positive int"):
        ReplicaPool(LcpSlotServer, 0)


def test_a_new_lesson_goes_to_the_replica_holding_its_base():
    marker = "--- LESSONS ---"
    inner: list[LcpSlotServer] = []

    def start() -> RepeatablePrefixServer:
        inner.append(LcpSlotServer(slots=4))
        return RepeatablePrefixServer(inner[-1], slots=4, base_marker=marker)

    pool = ReplicaPool(start, 2)
    pool.replicas.append(start())
    pool._idle.append(pool.replicas[-1])
    for i in range(4):  # the first idle replica alternates; the base is in the replica that served lesson 0
        answer(pool, chat(f"Route tickets.\n{marker}\n[E1] lesson {i}", "ticket"))
    from_scratch = [p for s in inner for p in s.payloads if p.get("cache_prompt") is False]
    assert len(from_scratch) == 1 and from_scratch[0]["messages"] == [{"role": "system", "content": "Route tickets.\n"}]
