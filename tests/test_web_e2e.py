"""Training-Free GRPO on the browsing agent with the real embedded model (slow: ``pytest -m e2e``).

Tiny on purpose: 2 one-click questions about the local fixture site, groups of 2, 1 epoch,
one agent step (a visit) then the answer, short pages: 8 policy calls, 4 judge calls, a few reflections.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dspy
import pytest

from tfgrpo_dspy.kits.web.agent import WebWalkerAgent
from tfgrpo_dspy.kits.web.fetch import FetchPolicy
from tfgrpo_dspy.kits.web.judge import WebAnswerJudge
from tfgrpo_dspy.kits.web.task import WEB_TASKS
from tfgrpo_dspy.tasks import TaskData

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parent / "fixtures" / "web"

try:
    from tfgrpo_dspy import TrainingFreeGRPO
    from tfgrpo_dspy.lm import local_lm
except ImportError as err:  # the optimizer or the embedded-LM module is not there yet
    pytest.skip(f"web e2e needs tfgrpo_dspy.TrainingFreeGRPO and tfgrpo_dspy.lm.local_lm: {err}",
                allow_module_level=True)





@pytest.fixture(scope="module")
def lm() -> dspy.LM:
    pytest.importorskip("xllamacpp", reason="the embedded model runtime (xllamacpp) is not installed")
    return local_lm(max_tokens=192, n_ctx=4096)


def test_training_free_grpo_compiles_the_browsing_agent(site, lm, tmp_path):
    folder = tmp_path / "webwalkerqa"
    shutil.copytree(FIXTURES / "webwalkerqa", folder)
    for data_file in (folder / "data").glob("*.jsonl"):
        data_file.write_text(data_file.read_text().replace("http://SITE_ROOT/", site.url("/")))
    questions = WEB_TASKS["webwalkerqa"].load_evalset(TaskData(source=str(folder)))
    one_click = ("In which year was the Riverside", "What is the street")  # answers one link from the root
    trainset = [e for e in questions if e.question.startswith(one_click)]
    assert len(trainset) == 2

    policy = FetchPolicy(allowed_addresses={"127.0.0.1"}, timeout_s=10.0)
    program = WebWalkerAgent(policy=policy, max_iters=1, page_chars=400, max_links=8)
    optimizer = TrainingFreeGRPO(
        metric=WebAnswerJudge(lm), group_size=2, epochs=1, num_threads=2, progress=False, min_errors=4
    )
    with dspy.context(lm=lm):
        compiled = optimizer.compile(program, trainset=trainset)

    (step,) = compiled.tfgrpo_result.steps
    assert (step.examples, step.rollouts) == (2, 4)
    assert step.rollout_errors + step.metric_errors < step.rollouts  # a small model may fumble some, not all
    assert 0.0 <= step.mean_reward <= 1.0
    assert step.policy_usage.calls >= 4 * 2  # one agent step and one extraction per rollout
    # Every rollout browsed the live site with its own browser, starting at the root page.
    assert sum(1 for path, _host in site.requests if path == "/") >= 4
    library = compiled.experience_library
    assert len(library) == step.library_size
    if len(library):  # the agent's predictors carry it (shown top_k=1 per call, the default)
        from tfgrpo_dspy.inference.injection import library_of

        assert library_of(compiled).texts == library.texts
