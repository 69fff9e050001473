"""benchmarks/web_local_site.py: its questions load through the webwalkerqa task and are answerable on the site."""

import importlib.util
import socket
import sys
from pathlib import Path

from tfgrpo_dspy.kits.web.browser import Browser
from tfgrpo_dspy.kits.web.fetch import FetchPolicy
from tfgrpo_dspy.kits.web.task import WEB_TASKS
from tfgrpo_dspy.tasks import TaskData

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "web_local_site.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_web_local_site", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_questions_split_disjointly_and_each_answer_is_on_its_page(tmp_path):
    script = _load_script()
    with script.serve_site(script.SITE_DIR, _free_port()) as root_url:
        script.write_questions(tmp_path, root_url)
        task = WEB_TASKS["webwalkerqa"]
        train = task.load_trainset(TaskData(source=str(tmp_path)))
        evalset = task.load_evalset(TaskData(source=str(tmp_path)))
        # No --n: the task's default sizes (51 / 68) shrink to what this small source has.
        assert len(train) == len(script.TRAIN_QUESTIONS) and len(evalset) == len(script.EVAL_QUESTIONS)
        assert not {e.question for e in train} & {e.question for e in evalset}
        assert {e.root_url for e in train + evalset} == {root_url}
        policy = FetchPolicy(allowed_addresses={"127.0.0.1"}, timeout_s=5.0)
        for question, answer, _, page in script.TRAIN_QUESTIONS + script.EVAL_QUESTIONS:
            with Browser(root_url, policy, page_chars=4000, max_links=20) as browser:
                text = browser.open_root() if not page else browser.visit(root_url + page)
            key = answer.split(",")[0].lower().removeprefix("the ").replace(" river", "")
            assert key in text.lower(), (question, page)
