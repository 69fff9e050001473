"""A fake llama.cpp server for tests: its answers depend on how the KV was computed, as real kernels do."""

from __future__ import annotations

import hashlib


class Slot:
    def __init__(self):
        self.tokens: list[str] = []
        self.batches: list[tuple[int, int]] = []


class LcpSlotServer:
    """A server with llama.cpp's prompt-cache rules, whose answers depend on how the KV was computed.

    The prompt is rendered with a ChatML template, one character per token; a final assistant message is
    continued (a prefill), and the answer starts with it, as llama.cpp returns it. A request goes to the slot
    ``id_slot`` names (else slot 0). With ``cache_prompt`` the slot keeps the longest common prefix of its
    tokens and the new prompt (at least one token is always evaluated), else it starts empty. Every token's
    KV records the batch that computed it, and the answer is a hash of the prompt and those batches: like
    llama.cpp's kernels, a token computed in another batch shape changes the answer.
    """

    def __init__(self, ram_cache: bool = False, slots: int = 1):
        self.slots = [Slot() for _ in range(slots)]
        # Like llama.cpp's RAM prompt cache: a request may get the saved state of an earlier request.
        self.ram_cache = ram_cache
        self.saved: tuple[list[str], list[tuple[int, int]]] | None = None
        self.payloads: list[dict] = []
        self.replies: list[dict] = []

    @staticmethod
    def render(messages: list[dict]) -> list[str]:
        prefill = messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else None
        turns = messages[:-1] if prefill is not None else messages
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in turns)
        return list(text + "<|im_start|>assistant\n" + (prefill or ""))

    def handle_chat_completions(self, payload: dict) -> dict:
        self.payloads.append(payload)
        slot = self.slots[payload.get("id_slot", 0)]
        prompt = self.render(payload["messages"])
        reused = 0
        if payload.get("cache_prompt", True):
            reused = self._common(prompt, slot.tokens)
            if self.ram_cache and self.saved is not None and self._common(prompt, self.saved[0]) > reused:
                slot.tokens, slot.batches = self.saved
                reused = self._common(prompt, slot.tokens)
            reused = min(reused, len(prompt) - 1)
        slot.tokens = prompt[:]
        slot.batches = slot.batches[:reused] + [(reused, len(prompt))] * (len(prompt) - reused)
        digest = hashlib.sha256(repr((prompt, slot.batches)).encode()).hexdigest()[:8]
        last = payload["messages"][-1]
        prefill = last["content"] if last["role"] == "assistant" else None
        if payload.get("max_tokens") == 0:
            text = ""
        elif prefill is not None:
            text = f" {digest}\n\n[[ ## completed ## ]]"
        else:
            text = f"[[ ## answer ## ]]\n{digest}\n\n[[ ## completed ## ]]"
        slot.tokens += list(text)
        slot.batches += [(len(prompt) + i, len(prompt) + i + 1) for i in range(len(text))]
        if text:
            self.saved = (slot.tokens[:], slot.batches[:])
        cache_n = reused
        self.replies.append({"choices": [{"finish_reason": "stop", "message": {"content": (prefill or "") + text}}],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(text),
                          "prompt_tokens_details": {"cached_tokens": cache_n}},
                "timings": {"cache_n": cache_n, "prompt_n": len(prompt) - reused}})
        return self.replies[-1]

    @staticmethod
    def _common(a: list[str], b: list[str]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n


def chat(system: str, user: str) -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0.0}


def answer(server, request: dict) -> str:
    return server.handle_chat_completions(request)["choices"][0]["message"]["content"]
