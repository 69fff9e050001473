"""Greedy prefix reuse: the answer to a request must not depend on what the server served before it."""

from __future__ import annotations

import logging
import threading

import dspy
import pytest
from fake_slot_server import LcpSlotServer, answer, chat

from tfgrpo_dspy.inference.injection import BLOCK_START
from tfgrpo_dspy.lm import LlamaCppEngine
from tfgrpo_dspy.lm.engine import GREEDY_PREFIX_SLOTS
from tfgrpo_dspy.lm.prefix import RepeatablePrefixServer
from tfgrpo_dspy.lm.server import ServerRegistry, ServerSettings

TASK = "Route the ticket to one queue."
HISTORIES = {
    "fresh": [],
    "same predictor": [chat(TASK, "Plan: Pro | Region: EU\nmy card reader is broken")],
    "another predictor": [chat(TASK + " Explain briefly.", "Plan: Pro | Region: EU\nrefund please")],
    "a longer shared start": [chat(TASK, "Plan: Pro | Region: EU\nrefund of $900 please"),
                              chat("Route", "Plan")],
    "a prompt without a system message": [{"messages": [{"role": "user", "content": "hi"}], "temperature": 0.0}],
}
REQUEST = chat(TASK, "Plan: Pro | Region: EU\nrefund of $90 please")


def test_the_fake_server_is_history_sensitive_without_the_protocol():
    """The control: plain prompt caching makes the same request's answer depend on the previous one."""
    answers = set()
    for history in HISTORIES.values():
        server = LcpSlotServer()
        for earlier in history:
            answer(server, {**earlier, "cache_prompt": True})
        answers.add(answer(server, {**REQUEST, "cache_prompt": True}))
    assert len(answers) > 1


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_an_answer_does_not_depend_on_what_was_served_before(slots):
    answers = {}
    for name, history in HISTORIES.items():
        server = RepeatablePrefixServer(LcpSlotServer(slots=slots), slots=slots)
        for earlier in history:
            answer(server, earlier)
        answers[name] = answer(server, REQUEST)
        assert answer(server, REQUEST) == answers[name]  # and again, right after itself
    assert len(set(answers.values())) == 1, answers


def test_alternating_prefixes_keep_their_slots_and_stay_warm():
    """Calls whose instructions carry the lesson retrieved for them alternate between prefixes."""
    inner = LcpSlotServer(slots=2)
    server = RepeatablePrefixServer(inner, slots=2)
    lessons = [TASK + " [E1] When a refund is large, route it to payments.", TASK + " [E2] When a card fails, ..."]
    answers = [answer(server, chat(lessons[i % 2], f"ticket {i}")) for i in range(6)]
    resets = [p for p in inner.payloads if p.get("max_tokens") == 0]
    assert [r["cache_prompt"] for r in resets] == [False, False, True, True, True, True]
    assert [r["id_slot"] for r in resets] == [0, 1, 0, 1, 0, 1]
    fresh = [answer(RepeatablePrefixServer(LcpSlotServer()), chat(lessons[i % 2], f"ticket {i}")) for i in range(6)]
    assert answers == fresh  # a one-slot server that evaluates each prefix anew gives the same answers
    third = answer(server, chat(TASK + " [E3] other", "ticket"))  # evicts the least recently used prefix
    assert inner.payloads[-2]["id_slot"] == 0 and inner.payloads[-2]["cache_prompt"] is False
    assert third == answer(RepeatablePrefixServer(LcpSlotServer()), chat(TASK + " [E3] other", "ticket"))


def test_the_prefix_is_reused_and_the_reset_evaluates_only_the_last_turn():
    inner = LcpSlotServer()
    server = RepeatablePrefixServer(inner)
    first = server.handle_chat_completions(REQUEST)
    second = server.handle_chat_completions(chat(TASK, "Plan: Free | Region: NA\nhow do I log in"))
    system_turn = len("".join(LcpSlotServer.render(REQUEST["messages"][:1]))) - len("assistant\n")
    assert first["timings"]["cache_n"] == second["timings"]["cache_n"] == system_turn
    resets = [p for p in inner.payloads if p.get("max_tokens") == 0]
    assert [r["cache_prompt"] for r in resets] == [False, True]  # from scratch once, then reused
    assert all(p["cache_prompt"] is True for p in inner.payloads if p.get("max_tokens") != 0)


def prefilled(request: dict, header: str = "[[ ## answer ## ]]") -> dict:
    return {**request, "messages": [*request["messages"], {"role": "assistant", "content": header}]}


@pytest.mark.parametrize("slots", [1, 2])
def test_a_prefilled_answer_reuses_its_prefix_and_does_not_depend_on_history(slots):
    """A request whose answer starts written (the engine's header prefill) ends with an assistant message:
    its prefix is still every message before its user turn, reset and reused the same way."""
    answers = {}
    for name, history in HISTORIES.items():
        inner = LcpSlotServer(slots=slots)
        server = RepeatablePrefixServer(inner, slots=slots)
        for earlier in history:
            answer(server, prefilled(earlier))
        reply = server.handle_chat_completions(prefilled(REQUEST))
        answers[name] = reply["choices"][0]["message"]["content"]
        assert answers[name].startswith("[[ ## answer ## ]] ")
        system_turn = len("".join(LcpSlotServer.render(REQUEST["messages"][:1]))) - len("assistant\n")
        assert reply["timings"]["cache_n"] == system_turn
        assert inner.payloads[-2]["max_tokens"] == 0 and inner.payloads[-2]["messages"] == REQUEST["messages"][:1]
    assert len(set(answers.values())) == 1, answers
    assert answers["fresh"] != answer(RepeatablePrefixServer(LcpSlotServer()), REQUEST)  # the prefill is sent


def test_an_unexpected_reuse_is_served_from_scratch_with_a_warning(caplog):
    """A server that swaps in another request's state (a RAM prompt cache) is caught by llama.cpp's cache_n."""
    inner = LcpSlotServer(ram_cache=True)
    server = RepeatablePrefixServer(inner)
    server.handle_chat_completions(REQUEST)
    with caplog.at_level(logging.WARNING, logger="tfgrpo_dspy.lm.prefix"):
        server.handle_chat_completions(chat(TASK, "Plan: Free | Region: NA\nhow do I log in"))
        served = answer(server, chat(TASK, "Plan: Free | Region: NA\nhow do I log out"))
    assert "without reuse" in caplog.text
    assert inner.payloads[-1]["cache_prompt"] is False
    assert served == answer(LcpSlotServer(), {**chat(TASK, "Plan: Free | Region: NA\nhow do I log out"),
                                              "cache_prompt": False})


def test_errors_leave_the_slot_unknown_so_the_next_prefix_starts_from_scratch():
    class FailingOnce(LcpSlotServer):
        failed = False

        def handle_chat_completions(self, payload):
            if payload.get("max_tokens") != 0 and not self.failed:
                self.failed = True
                return {"error": {"message": "boom", "type": "server_error"}}
            return super().handle_chat_completions(payload)

    inner = FailingOnce()
    server = RepeatablePrefixServer(inner)
    assert "error" in server.handle_chat_completions(REQUEST)
    assert answer(server, REQUEST) == answer(RepeatablePrefixServer(LcpSlotServer()), REQUEST)
    resets = [p["cache_prompt"] for p in inner.payloads if p.get("max_tokens") == 0]
    assert resets[:2] == [False, False]


def test_threads_get_the_answers_of_a_serial_run():
    requests = [chat(TASK, f"ticket {i}") for i in range(12)]
    serial = [answer(RepeatablePrefixServer(LcpSlotServer()), r) for r in requests]
    server = RepeatablePrefixServer(LcpSlotServer())
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = answer(server, requests[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in reversed(range(12))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[i] for i in range(12)] == serial


def test_engine_sends_greedy_calls_to_a_repeatable_prefix_server():
    made: dict[ServerSettings, LcpSlotServer] = {}
    engine = LlamaCppEngine(greedy_replicas=1, registry=ServerRegistry(factory=lambda s: made.setdefault(
        s, LcpSlotServer(slots=s.n_parallel))))
    assert engine.greedy_settings.repeatable_prefix and engine.greedy_settings.cache_ram_mib == 0
    assert engine.greedy_settings.n_parallel == GREEDY_PREFIX_SLOTS
    lm = dspy.LM("local/qwen2.5-coder-1.5b", engine=engine, temperature=0.0, cache=False)
    with dspy.context(lm=lm):
        dspy.Predict("question -> answer")(question="one")
        dspy.Predict("question -> answer")(question="two")
    greedy = made[engine.greedy_settings]
    assert [p.get("max_tokens") == 0 for p in greedy.payloads] == [True, False, True, False]
    assert greedy.payloads[2]["cache_prompt"] is True


def test_repeatable_prefix_needs_no_ram_cache():
    with pytest.raises(ValueError, match="repeatable_prefix needs cache_ram_mib=0"):
        ServerSettings(model="qwen2.5-coder-1.5b", n_parallel=4, repeatable_prefix=True)
    with pytest.raises(ValueError, match="cache_ram_mib"):
        ServerSettings(model="qwen2.5-coder-1.5b", cache_ram_mib=-1)


MARKER = "--- LESSONS ---"
BASE = TASK + " Answer with the queue name.\n\n"


def with_lesson(lesson: str, user: str) -> dict:
    return chat(f"{BASE}{MARKER}\n[E1] {lesson}\n--- END ---", user)


# Histories that leave a slot holding the same base under other lessons (their block's first tokens equal the
# request's, computed with another lesson), another base, or no base at all.
BASE_HISTORIES = {
    "fresh": [],
    "another lesson": [with_lesson("When a refund is large, route it to payments.", "refund of $900")],
    "two other lessons": [with_lesson("When a card fails, route it to payments.", "card declined"),
                          with_lesson("When a refund is large, send it on.", "refund")],
    "the same lesson, another ticket": [with_lesson("When a refund is small, route it to billing.", "hi")],
    "another base": [chat(f"Route.{MARKER}\n[E1] When a refund is small, route it to billing.", "refund")],
    "no base": [chat(TASK, "refund of $90 please")],
}
BASE_REQUEST = with_lesson("When a refund is small, route it to billing.", "Plan: Pro | Region: EU\nrefund of $90")


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_with_a_base_an_answer_does_not_depend_on_what_was_served_before(slots):
    answers = {}
    for name, history in BASE_HISTORIES.items():
        server = RepeatablePrefixServer(LcpSlotServer(slots=slots), slots=slots, base_marker=MARKER)
        for earlier in history:
            answer(server, earlier)
        answers[name] = answer(server, BASE_REQUEST)
        assert answer(server, BASE_REQUEST) == answers[name]
    assert len(set(answers.values())) == 1, answers


def test_a_new_lesson_is_evaluated_on_top_of_its_base():
    inner = LcpSlotServer()
    server = RepeatablePrefixServer(inner, base_marker=MARKER)
    answer(server, with_lesson("When a card fails, route it to payments.", "card declined"))
    inner.payloads.clear()
    inner.replies.clear()
    reply = server.handle_chat_completions(BASE_REQUEST)
    base_reset, prefix_reset, request = inner.payloads
    assert base_reset["messages"] == [{"role": "system", "content": BASE}] and base_reset["cache_prompt"] is True
    assert prefix_reset["messages"] == BASE_REQUEST["messages"][:1] and prefix_reset["cache_prompt"] is True
    base_tokens = len("<|im_start|>system\n" + BASE)
    # The base reset evaluates only the base turn's end; the prefix reset only the lesson and its turn's end.
    assert inner.replies[0]["timings"]["cache_n"] == base_tokens
    assert inner.replies[1]["timings"]["cache_n"] == base_tokens
    prefix_tokens = len(LcpSlotServer.render(BASE_REQUEST["messages"][:1]))
    assert inner.replies[1]["timings"]["prompt_n"] == prefix_tokens - base_tokens
    assert reply == inner.replies[2]


def test_a_base_reused_unexpectedly_is_evaluated_from_scratch_with_a_warning(caplog):
    class MisreportingServer(LcpSlotServer):
        prefix_resets = 0

        def handle_chat_completions(self, payload):
            reply = super().handle_chat_completions(payload)
            if payload.get("max_tokens") == 0 and MARKER in payload["messages"][0]["content"]:
                self.prefix_resets += 1
                if self.prefix_resets == 2:
                    reply["timings"]["cache_n"] += 1
            return reply

    inner = MisreportingServer()
    server = RepeatablePrefixServer(inner, base_marker=MARKER)
    answer(server, with_lesson("When a card fails, route it to payments.", "card declined"))
    with caplog.at_level(logging.WARNING, logger="tfgrpo_dspy.lm.prefix"):
        answer(server, BASE_REQUEST)
    assert "from scratch from now on" in caplog.text
    resets = [p for p in inner.payloads if p.get("max_tokens") == 0]
    assert resets[-1]["cache_prompt"] is False and MARKER in resets[-1]["messages"][0]["content"]
    inner.payloads.clear()
    answer(server, with_lesson("A third lesson.", "x"))  # the base is no longer used
    assert [p["cache_prompt"] for p in inner.payloads] == [False, True]


def test_the_engine_evaluates_lesson_blocks_on_their_base():
    engine = LlamaCppEngine(greedy_replicas=1, registry=ServerRegistry(factory=lambda s: LcpSlotServer()))
    assert engine.greedy_settings.prefix_base_marker == BLOCK_START
    assert LlamaCppEngine(greedy_prefix_reuse=False).greedy_settings.prefix_base_marker is None
    with pytest.raises(ValueError, match="prefix_base_marker"):
        ServerSettings(model="qwen2.5-coder-1.5b", prefix_base_marker="x")
