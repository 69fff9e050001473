"""The ReAct browsing agent driven by scripted LMs over the local site, and the CLI tasks."""

from __future__ import annotations

import copy
import shutil
import threading
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from tfgrpo_dspy.kits.web.agent import WebWalkerAgent
from tfgrpo_dspy.kits.web.fetch import FetchPolicy
from tfgrpo_dspy.kits.web.judge import WebAnswerJudge, overlap_metric
from tfgrpo_dspy.kits.web.task import WEB_TASKS
from tfgrpo_dspy.tasks import Task, TaskData

FIXTURES = Path(__file__).parent / "fixtures" / "web"
LOCAL = FetchPolicy(allowed_addresses={"127.0.0.1"}, timeout_s=5.0)





@pytest.fixture
def webwalkerqa_dir(site, tmp_path):
    """The WebWalkerQA-format fixture with root_url pointing at the running site."""
    target = tmp_path / "webwalkerqa"
    shutil.copytree(FIXTURES / "webwalkerqa", target)
    for data_file in (target / "data").glob("*.jsonl"):
        data_file.write_text(data_file.read_text().replace("http://SITE_ROOT/", site.url("/")))
    return target


def _script(first_link: str, second_link: str, answer: str) -> list[dict]:
    return [
        {"next_thought": "The about page should lead to the team.", "next_tool_name": "visit",
         "next_tool_args": {"link": first_link}},
        {"next_thought": "The team page names the director.", "next_tool_name": "visit",
         "next_tool_args": {"link": second_link}},
        {"next_thought": "I have the answer.", "next_tool_name": "finish", "next_tool_args": {}},
        {"reasoning": "The team page says who the director is.", "answer": answer},
    ]


def test_agent_browses_two_pages_to_the_answer(site):
    lm = DummyLM(_script("About us", "our team", "Ada Lovelace"))
    program = WebWalkerAgent(policy=LOCAL)
    with dspy.context(lm=lm):
        prediction = program(question="Who is the director of the Riverside Institute?", root_url=site.url("/"))
    assert prediction.answer == "Ada Lovelace"
    assert prediction.visited == [site.url("/"), site.url("/about.html"), site.url("/team.html")]
    # "our team" is a link of the about page only: the second step ran on the page the first opened.
    assert "founded in 1987" in prediction.trajectory["observation_0"]
    assert "director of the Riverside Institute is **Ada Lovelace**" in prediction.trajectory["observation_1"]
    first_prompt = lm.history[0]["messages"][-1]["content"]
    assert "Welcome to the Riverside Institute" in first_prompt  # the start page is an input
    assert "(1) visit" in lm.history[0]["messages"][0]["content"]


def test_agent_reports_refused_pages_to_the_model(site):
    lm = DummyLM([
        {"next_thought": "Try the partner site.", "next_tool_name": "visit",
         "next_tool_args": {"link": "https://partner.example.com/"}},
        {"next_thought": "Not allowed.", "next_tool_name": "finish", "next_tool_args": {}},
        {"reasoning": "No information.", "answer": "unknown"},
    ])
    with dspy.context(lm=lm):
        prediction = WebWalkerAgent(policy=LOCAL)(question="q", root_url=site.url("/"))
    assert "outside the site" in prediction.trajectory["observation_0"]
    assert prediction.visited == [site.url("/")]


def test_instruction_edits_on_the_program_reach_every_call(site):
    program = WebWalkerAgent(policy=LOCAL)
    react = program.agent.react
    react.signature = react.signature.with_instructions(
        "EXPERIENCE: open the About page first.\n" + react.signature.instructions
    )
    lm = DummyLM(_script("About us", "our team", "Ada Lovelace"))
    with dspy.context(lm=lm):
        program(question="Who is the director?", root_url=site.url("/"))
    assert "EXPERIENCE: open the About page first." in lm.history[0]["messages"][0]["content"]
    assert set(program.agent.tools) == {"visit", "back", "finish"}


def test_parallel_calls_on_one_program_keep_separate_browsers(site):
    program = WebWalkerAgent(policy=LOCAL)
    runs = {
        "main": (site.url("/"), _script("About us", "our team", "Ada Lovelace")),
        "branch": (site.url("/b/"), _script("About us", "our team", "Grace Hopper")),
    }
    results, errors = {}, []
    barrier = threading.Barrier(len(runs))

    def run(name: str) -> None:
        root_url, script = runs[name]
        try:
            barrier.wait(timeout=10)
            with dspy.context(lm=DummyLM(script)):
                results[name] = program(question="Who is the director?", root_url=root_url)
        except Exception as err:  # surfaced below; a thread cannot fail the test directly
            errors.append(err)

    threads = [threading.Thread(target=run, args=(name,)) for name in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert results["main"].visited == [site.url("/"), site.url("/about.html"), site.url("/team.html")]
    assert results["branch"].visited == [site.url("/b/"), site.url("/b/about.html"), site.url("/b/team.html")]
    assert "Grace Hopper" in results["branch"].trajectory["observation_1"]
    assert "Ada Lovelace" in results["main"].trajectory["observation_1"]


def test_agent_copies_cleanly(site):
    program = WebWalkerAgent(policy=LOCAL)
    for duplicate in (copy.deepcopy(program), program.deepcopy()):
        assert duplicate.agent.react is not program.agent.react
        with dspy.context(lm=DummyLM(_script("About us", "our team", "Ada Lovelace"))):
            assert duplicate(question="Who?", root_url=site.url("/")).answer == "Ada Lovelace"


def test_agent_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_iters"):
        WebWalkerAgent(max_iters=0)


def test_webwalkerqa_task_uses_the_papers_web_settings(webwalkerqa_dir):
    task = WEB_TASKS["webwalkerqa"]
    assert isinstance(task, Task) and task.name == "webwalkerqa"
    assert task.train_defaults == {"group_size": 3, "epochs": 3, "temperature": 0.7, "reference_fields": ("answer",)}
    assert task.answer_field == "answer"
    trainset = task.load_trainset(TaskData(source=str(webwalkerqa_dir), n=17, seed=0))
    evalset = task.load_evalset(TaskData(source=str(webwalkerqa_dir), n=17, seed=0))
    assert all(e.question.startswith("Silver") for e in trainset)  # train from silver, eval from main
    assert not any(e.question.startswith("Silver") for e in evalset)
    # Without n: the paper's 51 / 68, or all of a smaller source; an explicit n too large is an error.
    assert len(task.load_trainset(TaskData(source=str(webwalkerqa_dir)))) == 24 < task.default_train_n
    assert len(task.load_evalset(TaskData(source=str(webwalkerqa_dir)))) == 34 < task.default_eval_n
    with pytest.raises(ValueError, match=r"n must be an integer in 1\.\.24"):
        task.load_trainset(TaskData(source=str(webwalkerqa_dir), n=51))
    assert {e.root_url for e in evalset} == {str(evalset[0].root_url)} and "127.0.0.1" in evalset[0].root_url
    judge_lm = DummyLM([{"explanation": "same person", "grade": "CORRECT"}])
    metric = task.make_metric(judge_lm)
    assert isinstance(metric, WebAnswerJudge) and metric.judge_lm is judge_lm
    assert isinstance(task.make_program(), WebWalkerAgent)
    assert WEB_TASKS["webwalkerqa-f1"].make_metric(None) is overlap_metric


def test_task_end_to_end_with_scripted_lms(site, webwalkerqa_dir):
    """Load a fixture question, browse with a scripted policy LM, grade with a scripted judge."""
    task = WEB_TASKS["webwalkerqa"]
    example = next(
        e for e in task.load_evalset(TaskData(source=str(webwalkerqa_dir)))
        if e.question.startswith("Who is the director")
    )
    program = WebWalkerAgent(policy=LOCAL)
    with dspy.context(lm=DummyLM(_script("About us", "our team", "The director is Ada Lovelace."))):
        prediction = program(**example.inputs())
    judge_lm = DummyLM([{"explanation": "Names the same director.", "grade": "CORRECT"}])
    graded = task.make_metric(judge_lm)(example, prediction)
    assert graded.score == 1.0
    judge_prompt = judge_lm.history[0]["messages"][-1]["content"]
    assert "The director is Ada Lovelace." in judge_prompt and "Ada Lovelace" in judge_prompt
