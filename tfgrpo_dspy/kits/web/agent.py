"""The browsing agent: a `dspy.ReAct` over a fresh `Browser` for every question.

`WebWalkerAgent` owns one ReAct module whose predictors (``agent.react`` and
``agent.extract``) carry the instructions the optimizer edits. Each call opens the
root page, then runs a shallow copy of that ReAct whose tool table points at a new
browser: the predictors are shared, the browsing state is not, so parallel rollouts
on one program are safe.
"""

from __future__ import annotations

import copy

import dspy

from tfgrpo_dspy.kits.web.browser import Browser
from tfgrpo_dspy.kits.web.fetch import FetchPolicy


class WebQA(dspy.Signature):
    """Answer the question by browsing the website that starts at root_url.
    You are shown the start page; open further pages of the same website with the visit tool
    (by link number, link text or URL) until you have found the facts the question asks for.
    Answer briefly and only with information found on the website."""

    question: str = dspy.InputField()
    root_url: str = dspy.InputField(desc="the website's start page")
    start_page: str = dspy.InputField(desc="the start page as text, followed by its numbered links")
    answer: str = dspy.OutputField(desc="a short, direct answer to the question")


class WebWalkerAgent(dspy.Module):
    """Answers ``question`` by browsing the site at ``root_url``.

    Args:
        policy: network limits for every browser (default: public addresses only).
        max_iters: tool calls per question.
        page_chars: page text shown per page view.
        max_links: links listed per page view.
    """

    def __init__(
        self,
        policy: FetchPolicy | None = None,
        max_iters: int = 8,
        page_chars: int = 4000,
        max_links: int = 40,
    ):
        super().__init__()
        if max_iters < 1:
            raise ValueError(f"max_iters must be >= 1, got {max_iters}")
        self.policy = policy or FetchPolicy()
        self.page_chars = page_chars
        self.max_links = max_links
        # The tools given here only shape the prompt (names, descriptions, arguments); every call
        # swaps in the same tools bound to its own browser.
        template = Browser("http://tool-template.invalid/", self.policy, page_chars, max_links)
        self.agent = dspy.ReAct(WebQA, tools=template.tools(), max_iters=max_iters)
        template.close()

    def forward(self, question: str, root_url: str) -> dspy.Prediction:
        with Browser(root_url, self.policy, self.page_chars, self.max_links) as browser:
            start_page = browser.open_root()
            run = copy.copy(self.agent)
            run.tools = {
                **{tool.name: tool for tool in map(dspy.Tool, browser.tools())},
                "finish": self.agent.tools["finish"],
            }
            prediction = run(question=question, root_url=root_url, start_page=start_page)
            prediction.visited = list(browser.visited)
        return prediction
