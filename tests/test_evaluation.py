"""evaluate_at_k: distinct samples, Mean@k / Pass@k, recorded errors, tool calls, library, JSON report."""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections import Counter
from pathlib import Path

import dspy
import pytest
from scripted import Call, scripted_lm

from tfgrpo_dspy.inference.checkpoint import checkpointed_seconds
from tfgrpo_dspy.inference.evaluation import EvalReport, evaluate_at_k, pass_at_k
from tfgrpo_dspy.library.library import ExperienceLibrary


def _program() -> dspy.Module:
    return dspy.Predict("problem -> answer")


def _examples(*problems: str) -> list[dspy.Example]:
    return [dspy.Example(problem=p, answer="7").with_inputs("problem") for p in problems]


def _problem(call: Call) -> str:
    return call.inputs["problem"].split("\n")[0]  # the last input field carries DSPy's closing request


def exact(example, pred, trace=None) -> float:
    return float(str(pred.answer).strip() == example.answer)


class CountingResponder:
    """q-right always answers 7, q-wrong never, q-half on every second call: exact counts under threads."""

    def __init__(self) -> None:
        self.per_problem: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.temperatures: list[float | None] = []

    def __call__(self, call: Call) -> dict[str, str]:
        problem = _problem(call)
        with self.lock:
            self.per_problem[problem] += 1
            nth = self.per_problem[problem]
            self.temperatures.append(call.temperature)
        right = problem == "q-right" or (problem == "q-half" and nth % 2 == 0)
        return {"answer": "7" if right else f"{100 + nth}"}


def test_pass_at_k_matches_brute_force() -> None:
    for n, c, k in itertools.product(range(1, 7), range(0, 7), range(1, 7)):
        if c > n or k > n:
            continue
        outcomes = [True] * c + [False] * (n - c)
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_mean_and_pass_at_k_over_distinct_parallel_samples() -> None:
    responder = CountingResponder()
    lm = scripted_lm(responder, cache=True)
    report = evaluate_at_k(
        _program(), _examples("q-right", "q-wrong", "q-half"), exact, k=4, temperature=0.3, num_threads=4, lm=lm,
        progress=False,
    )
    # Every sample reached the engine although caching is on: rollout ids keep the samples distinct.
    assert responder.per_problem == {"q-right": 4, "q-wrong": 4, "q-half": 4}
    assert set(responder.temperatures) == {0.3}
    assert [r.num_correct for r in report.examples] == [4, 0, 2]
    assert report.mean_at_k == pytest.approx((1 + 0 + 0.5) / 3)
    assert report.pass_at_k == pytest.approx(2 / 3)
    assert report.pass_at[1] == pytest.approx(report.mean_at_k)
    assert report.pass_at[2] == pytest.approx((1 + 0 + (1 - 1 / math.comb(4, 2))) / 3)
    assert report.program_errors == report.metric_errors == 0
    assert report.mean_tool_calls is None  # no agent trajectory
    assert report.usage.calls == 12
    wrong_answers = {s.answer for s in report.examples[1].samples}
    assert len(wrong_answers) == 4


def test_same_run_hits_the_cache_and_an_offset_draws_fresh_samples() -> None:
    responder = CountingResponder()
    lm = scripted_lm(responder, cache=True)
    kwargs = dict(k=3, temperature=0.3, lm=lm, progress=False)
    first = evaluate_at_k(_program(), _examples("q-wrong"), exact, **kwargs)
    again = evaluate_at_k(_program(), _examples("q-wrong"), exact, **kwargs)
    assert responder.per_problem["q-wrong"] == 3
    assert [s.answer for s in again.examples[0].samples] == [s.answer for s in first.examples[0].samples]
    evaluate_at_k(_program(), _examples("q-wrong"), exact, rollout_id_offset=1000, **kwargs)
    assert responder.per_problem["q-wrong"] == 6


def test_metric_and_program_errors_are_recorded_not_fatal() -> None:
    def respond(call: Call) -> dict[str, str] | Exception:
        if _problem(call) == "q-lm-fails":
            return RuntimeError("model server went away")
        return {"answer": "7"}

    def picky_metric(example, pred, trace=None):
        if example.problem == "q-metric-fails":
            raise KeyError("broken metric")
        return 1.0

    report = evaluate_at_k(
        _program(), _examples("q-ok", "q-metric-fails", "q-lm-fails"), picky_metric, k=2, temperature=0.3,
        num_threads=2, lm=scripted_lm(respond), progress=False,
    )
    ok, metric_failed, lm_failed = report.examples
    assert [s.score for s in ok.samples] == [1.0, 1.0]
    assert all(s.metric_error and "broken metric" in s.metric_error for s in metric_failed.samples)
    assert all(s.error and "model server went away" in s.error for s in lm_failed.samples)
    assert (report.metric_errors, report.program_errors) == (2, 2)
    assert report.mean_at_k == pytest.approx(1 / 3)


def test_library_is_applied_to_the_program(tmp_path: Path) -> None:
    systems: list[str] = []

    def respond(call: Call) -> dict[str, str]:
        systems.append(call.system)
        return {"answer": "7"}

    library = ExperienceLibrary.from_texts(["Check the units before answering."])
    path = library.save(tmp_path / "library.json")
    report = evaluate_at_k(
        _program(), _examples("q"), exact, k=1, temperature=0.3, lm=scripted_lm(respond), library=str(path),
        progress=False,
    )
    assert report.library_size == 1
    assert "Check the units before answering." in systems[0]
    with pytest.raises(TypeError, match="library"):
        evaluate_at_k(_program(), _examples("q"), exact, k=1, temperature=0.3, lm=scripted_lm(respond), library=3)


def test_feedback_metric_and_json_report(tmp_path: Path) -> None:
    def feedback_metric(example, pred, trace=None):
        return dspy.Prediction(score=0.5, feedback="half credit")

    report = evaluate_at_k(
        _program(), _examples("q"), feedback_metric, k=2, temperature=0.3,
        lm=scripted_lm(lambda call: {"answer": "7"}), progress=False,
    )
    assert report.mean_at_k == 0.5 and report.pass_at_k == 0.0  # 0.5 < success_threshold 1.0
    saved = json.loads(report.save(tmp_path / "out" / "report.json").read_text())
    assert saved["mean_at_k"] == 0.5 and saved["k"] == 2
    assert saved["examples"][0]["samples"][0]["feedback"] == "half credit"
    assert saved["examples"][0]["inputs"] == {"problem": "q"}
    assert isinstance(report, EvalReport) and "Mean@2 0.500" in report.summary()


def test_bad_arguments_are_rejected() -> None:
    lm = scripted_lm(lambda call: {"answer": "7"})
    with pytest.raises(ValueError, match="k must"):
        evaluate_at_k(_program(), _examples("q"), exact, k=0, temperature=0.3, lm=lm)
    with pytest.raises(ValueError, match="examples"):
        evaluate_at_k(_program(), [], exact, k=1, temperature=0.3, lm=lm)
    with pytest.raises(ValueError, match="temperature"):
        evaluate_at_k(_program(), _examples("q"), exact, k=1, temperature=-1, lm=lm)
    with pytest.raises(TypeError, match="program"):
        evaluate_at_k(lambda problem: None, _examples("q"), exact, k=1, temperature=0.3, lm=lm)
    with dspy.context(lm=None):
        with pytest.raises(ValueError, match="lm"):
            evaluate_at_k(_program(), _examples("q"), exact, k=1, temperature=0.3)


def test_a_checkpointed_evaluation_resumes_and_refuses_another_run(tmp_path: Path) -> None:
    responder = CountingResponder()
    lm = scripted_lm(responder)  # no cache: every sample that runs reaches the engine
    kwargs = dict(k=2, temperature=0.3, lm=lm, progress=False, checkpoint_dir=tmp_path / "eval")
    first = evaluate_at_k(_program(), _examples("q-right", "q-half"), exact, **kwargs)
    assert sum(responder.per_problem.values()) == 4 and len(list((tmp_path / "eval").glob("ex*.json"))) == 4
    # As if the run had stopped after three samples: only the lost one runs again, the report is the same.
    (tmp_path / "eval" / "ex00001_s1.json").unlink()
    resumed = evaluate_at_k(_program(), _examples("q-right", "q-half"), exact, **kwargs)
    assert responder.per_problem == {"q-right": 2, "q-half": 3}
    assert [s.score for r in resumed.examples for s in r.samples][:3] == [
        s.score for r in first.examples for s in r.samples][:3]
    assert resumed.usage.calls == 4  # the reused samples' calls are still counted: they were paid for
    # More examples in the same folder: the finished ones are reused.
    evaluate_at_k(_program(), _examples("q-right", "q-half", "q-wrong"), exact, **kwargs)
    assert responder.per_problem["q-wrong"] == 2 and responder.per_problem["q-right"] == 2
    with pytest.raises(ValueError, match="saved for another example"):
        evaluate_at_k(_program(), _examples("q-wrong", "q-half"), exact, **kwargs)
    with pytest.raises(ValueError, match="other temperature"):
        evaluate_at_k(_program(), _examples("q-right"), exact, **{**kwargs, "temperature": 0.7})
    library = ExperienceLibrary.from_texts(["When a sum is asked, add."])
    with pytest.raises(ValueError, match="other program"):
        evaluate_at_k(_program(), _examples("q-right"), exact, library=library, **kwargs)


class DraftThenAnswer(dspy.Module):
    """Two predictors: a library trained with predictors=["answer"] must reach only the second."""

    def __init__(self) -> None:
        super().__init__()
        self.draft = dspy.Predict("problem -> draft")
        self.answer = dspy.Predict("problem, draft -> answer")

    def forward(self, problem: str) -> dspy.Prediction:
        return self.answer(problem=problem, draft=self.draft(problem=problem).draft)


def test_the_library_reaches_only_the_predictors_it_was_trained_for() -> None:
    lesson = "When a sum is asked, add the numbers first."

    def respond(call: Call) -> dict[str, str]:
        return {"draft": "think"} if "draft" not in call.inputs else {"answer": "7"}

    lm = scripted_lm(respond)
    report = evaluate_at_k(DraftThenAnswer(), _examples("q"), exact, k=1, temperature=0.0, lm=lm, progress=False,
                           library=ExperienceLibrary.from_texts([lesson]), predictors=["answer"])
    assert report.mean_at_k == 1.0
    draft_call, answer_call = lm.engine.calls
    assert "draft" not in draft_call.inputs and lesson not in draft_call.system
    assert "draft" in answer_call.inputs and lesson in answer_call.system
    with pytest.raises(ValueError, match="unknown predictor name"):
        evaluate_at_k(DraftThenAnswer(), _examples("q"), exact, k=1, temperature=0.0, lm=lm, progress=False,
                      library=ExperienceLibrary.from_texts([lesson]), predictors=["nope"])


def test_a_checkpoint_adds_up_the_seconds_of_every_run_that_evaluated_into_it(tmp_path: Path) -> None:
    folder = tmp_path / "eval"
    kwargs = dict(k=1, temperature=0.0, lm=scripted_lm(CountingResponder()), progress=False, checkpoint_dir=folder)
    assert checkpointed_seconds(folder) is None  # nothing evaluated there yet
    evaluate_at_k(_program(), _examples("q-right", "q-half"), exact, **kwargs)
    first = checkpointed_seconds(folder)
    assert first is not None and first > 0
    # As if an earlier, interrupted run had spent 100 s on the samples kept: a resumed run adds its own time.
    (folder / "seconds.json").write_text('{"seconds": 100.0}')
    (folder / "ex00001_s0.json").unlink()
    evaluate_at_k(_program(), _examples("q-right", "q-half"), exact, **kwargs)
    assert 100.0 < checkpointed_seconds(folder) < 100.0 + 60
    # A rerun with nothing left to evaluate spends nothing and leaves the figure alone.
    before = checkpointed_seconds(folder)
    evaluate_at_k(_program(), _examples("q-right", "q-half"), exact, **kwargs)
    assert checkpointed_seconds(folder) == before
