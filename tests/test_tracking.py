"""track="mlflow": a short compile on a scripted LM logged into a real local MLflow store, read back.

The store is an SQLite file (no server): MLflow 3 refuses the old ./mlruns folder store unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import mlflow
import pytest
from scripted import UPDATE_PIPELINE, scripted_lm
from test_optimizer import Alternating, exact, selection_set, trainset

from tfgrpo_dspy import TrainingFreeGRPO


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A store of its own (an SQLite file, no server); the tracking URI is put back afterwards."""
    monkeypatch.chdir(tmp_path)  # the store's default artifact folder, ./mlruns, is made in the working folder
    before = mlflow.get_tracking_uri()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    yield mlflow.MlflowClient(uri)
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(before)


def compile_tracked(**kwargs):
    optimizer = TrainingFreeGRPO(metric=exact, group_size=4, epochs=2, num_threads=4, progress=False, track="mlflow",
                                 **UPDATE_PIPELINE, **kwargs)
    with dspy.context(lm=scripted_lm(Alternating())):
        return optimizer.compile(dspy.ChainOfThought("question -> answer"), trainset=trainset(),
                                 valset=selection_set())


def only_run(client):
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1
    return runs[0]


def test_a_compile_logs_each_step_the_gate_and_the_shipped_library_into_a_run_it_ends(store):
    compiled = compile_tracked()
    result = compiled.tfgrpo_result
    run = only_run(store)
    assert run.info.status == "FINISHED" and run.data.tags["tfgrpo.optimizer"] == "TrainingFreeGRPO"
    assert run.data.params["tfgrpo.group_size"] == "4" and run.data.params["tfgrpo.track"] == "mlflow"
    rewards = store.get_metric_history(run.info.run_id, "tfgrpo.mean_reward")
    assert [(m.step, m.value) for m in rewards] == [(s.step, s.mean_reward) for s in result.steps]
    policy = store.get_metric_history(run.info.run_id, "tfgrpo.tokens.policy")
    assert [m.value for m in policy] == [s.policy_usage.prompt_tokens + s.policy_usage.completion_tokens
                                        for s in result.steps]
    scores = store.get_metric_history(run.info.run_id, "tfgrpo.selection.best_candidate_score")
    assert len(scores) == len(result.steps) and all(0 <= m.value <= 1 for m in scores)
    assert run.data.tags["tfgrpo.gate.step_0001"] == result.steps[0].gate
    assert run.data.tags["tfgrpo.shipped"] == result.shipped
    assert run.data.metrics["tfgrpo.shipped_size"] == len(result.library)
    local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="tfgrpo",
                                                tracking_uri=mlflow.get_tracking_uri())
    shipped = json.loads((Path(local) / "library.json").read_text())
    assert shipped == result.library.to_dict()
    step_record = json.loads((Path(local) / "steps" / "0002.json").read_text())
    assert step_record["step"] == 2 and step_record["gate"] == result.steps[1].gate


def test_a_compile_inside_an_active_run_logs_there_and_leaves_it_open(store):
    with mlflow.start_run(run_name="my experiment") as mine:
        compile_tracked()
        assert mlflow.active_run().info.run_id == mine.info.run_id
    run = only_run(store)
    assert run.info.run_id == mine.info.run_id and run.info.run_name == "my experiment"
    assert len(store.get_metric_history(run.info.run_id, "tfgrpo.mean_reward")) == 2


def test_a_failed_compile_ends_its_own_run_as_failed(store):
    def broken(call):
        raise RuntimeError("server gone")

    optimizer = TrainingFreeGRPO(metric=exact, group_size=2, epochs=1, progress=False, track="mlflow",
                                 max_error_rate=0.1, min_errors=1, **UPDATE_PIPELINE)
    with dspy.context(lm=scripted_lm(broken)), pytest.raises(Exception):  # noqa: B017 - any abort will do
        optimizer.compile(dspy.Predict("question -> answer"), trainset=trainset(4))
    assert only_run(store).info.status == "FAILED"
    assert mlflow.active_run() is None


def test_an_unknown_tracker_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"track must be one of \('mlflow',\) or None, got 'wandb'"):
        TrainingFreeGRPO(metric=exact, track="wandb")


def test_tfgrpo_train_track_mlflow_logs_the_run(store, monkeypatch, tmp_path):
    from test_cli import solver

    from tfgrpo_dspy import cli

    monkeypatch.setattr(cli, "make_lm", lambda spec, **kwargs: scripted_lm(solver))
    assert cli.main(["train", "--task", "wordproblems", "--n", "2", "--group-size", "2", "--epochs", "1",
                     "--out", str(tmp_path / "run"), "--track", "mlflow"]) == 0
    run = only_run(store)
    assert run.info.status == "FINISHED" and "tfgrpo.mean_reward" in run.data.metrics
