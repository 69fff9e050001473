"""Web kit: WebWalkerQA data, a safe browser for a DSPy ReAct agent, judge rewards and CLI tasks."""

from tfgrpo_dspy.kits.web.agent import WebQA, WebWalkerAgent
from tfgrpo_dspy.kits.web.browser import Browser
from tfgrpo_dspy.kits.web.data import load_webwalkerqa, load_webwalkerqa_subset, stratified_subset
from tfgrpo_dspy.kits.web.fetch import FetchError, FetchPolicy, FetchRefused, SafeFetcher
from tfgrpo_dspy.kits.web.judge import WebAnswerJudge, make_judge_metric, overlap_metric, token_f1
from tfgrpo_dspy.kits.web.task import WEB_TASKS

__all__ = [
    "WEB_TASKS",
    "Browser",
    "FetchError",
    "FetchPolicy",
    "FetchRefused",
    "SafeFetcher",
    "WebAnswerJudge",
    "WebQA",
    "WebWalkerAgent",
    "load_webwalkerqa",
    "load_webwalkerqa_subset",
    "make_judge_metric",
    "overlap_metric",
    "stratified_subset",
    "token_f1",
]
