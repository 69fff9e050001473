"""A run interrupted anywhere resumes from its log_dir, redoes nothing finished, and ends where an
uninterrupted run with the same seed ends."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dspy
import pytest
from scripted import UPDATE_PIPELINE, default_reflection, scripted_lm

from tfgrpo_dspy import TrainingFreeGRPO

# seed_rollouts: each rollout gets its own sampling seed, so a redone rollout regenerates the same answer,
# as a seeded provider would.
SETTINGS = dict(group_size=4, epochs=2, batch_size=2, num_threads=2, progress=False, seed=7, seed_rollouts=True,
                **UPDATE_PIPELINE)


class PerQuestion:
    """Right when the rollout's sampling seed is even (mixed groups); raises after ``fail_after`` policy calls."""

    def __init__(self, fail_after=None, exception=KeyboardInterrupt, delay=0.0):
        self.lock = threading.Lock()
        self.fail_after = fail_after
        self.exception = exception
        self.delay = delay
        self.policy_calls = 0

    def __call__(self, call):
        time.sleep(self.delay)
        reply = default_reflection(call)
        if reply is not None:
            return reply
        question = call.inputs["question"].split("\n")[0]
        with self.lock:
            self.policy_calls += 1
            if self.fail_after is not None and self.policy_calls > self.fail_after:
                raise self.exception()
        gold = question.split()[-1]
        return {"answer": gold if call.seed % 2 == 0 else "wrong"}


def metric(example, prediction, trace=None):
    return float(prediction.answer == example.answer)


def data():
    return [dspy.Example(question=f"Say the word w{i}", answer=f"w{i}").with_inputs("question") for i in range(4)]


def run(responder, log_dir):
    with dspy.context(lm=scripted_lm(responder)):
        return TrainingFreeGRPO(metric=metric, log_dir=log_dir, **SETTINGS).compile(
            dspy.Predict("question -> answer"), trainset=data()
        )


def comparable(compiled):
    stats = [s.to_dict() for s in compiled.tfgrpo_result.steps]
    for s in stats:
        s.pop("wall_time_s")
        s.pop("phase_seconds")  # clock times, like wall_time_s
    return compiled.experience_library.to_dict(), stats


def test_interrupted_run_resumes_to_the_same_library(tmp_path):
    reference = run(PerQuestion(), tmp_path / "reference")

    # 4 steps of 8 rollouts; interrupt in the middle of step 2's rollouts.
    with pytest.raises(KeyboardInterrupt):
        run(PerQuestion(fail_after=12), tmp_path / "resumed")
    state = json.loads((tmp_path / "resumed" / "state.json").read_text())
    assert state["completed_steps"] == 1
    done_in_step_2 = len(list((tmp_path / "resumed" / "steps" / "0002" / "rollouts").glob("*.json")))
    assert done_in_step_2 >= 2

    responder = PerQuestion()
    resumed = run(responder, tmp_path / "resumed")
    assert responder.policy_calls == 4 * 8 - 8 - done_in_step_2  # nothing finished is redone
    assert comparable(resumed) == comparable(reference)


def test_resuming_a_finished_run_makes_no_calls(tmp_path):
    first = run(PerQuestion(), tmp_path)
    again = PerQuestion()
    second = run(again, tmp_path)
    assert again.policy_calls == 0
    assert comparable(second) == comparable(first)


def test_budget_stop_then_resume_with_a_larger_budget(tmp_path):
    reference = run(PerQuestion(), tmp_path / "reference")
    with dspy.context(lm=scripted_lm(PerQuestion())):
        stopped = TrainingFreeGRPO(metric=metric, log_dir=tmp_path / "run", max_lm_calls=30, **SETTINGS).compile(
            dspy.Predict("question -> answer"), trainset=data()
        )
    assert stopped.tfgrpo_result.stopped_reason
    resumed = run(PerQuestion(), tmp_path / "run")
    assert resumed.tfgrpo_result.stopped_reason is None
    assert comparable(resumed) == comparable(reference)


CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import dspy
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    from test_resume import PerQuestion, run
    run(PerQuestion(delay=0.05), {log_dir!r})
    """
)


def test_sigkill_mid_step_then_resume(tmp_path):
    reference = run(PerQuestion(), tmp_path / "reference")
    log_dir = tmp_path / "killed"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent), log_dir=str(log_dir)))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rollouts = log_dir / "steps" / "0002" / "rollouts"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(rollouts.glob("*.json"))) < 3 and child.poll() is None:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, child.stderr.read().decode()[-2000:]
    finished = len(list(rollouts.glob("*.json")))
    assert finished >= 3

    responder = PerQuestion()
    resumed = run(responder, log_dir)
    assert responder.policy_calls <= 4 * 8 - 8 - finished
    assert comparable(resumed) == comparable(reference)
