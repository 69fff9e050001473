"""Progress a DSPy user can follow in MLflow, as GEPA and MIPROv2 log their trials there.

``TrainingFreeGRPO(track="mlflow")`` logs into the active MLflow run when there is one (``mlflow.start_run()``
around ``compile``, or ``mlflow.dspy.autolog()``'s), else into a run of its own that it ends. Per step: the
rollouts' mean reward, groups, lessons proposed / verified, edits, library size, tokens by role and the selection
scores of the step's candidates, as metrics at that step; the gate's decision as a tag; the step's full record and
its library as artifacts. At the end: the shipped library (``library.json``), the step it came from, the tokens
of the whole compile. MLflow is an optional extra (``pip install 'tfgrpo-dspy[mlflow]'``).

Every call goes through an ``MlflowClient`` with the run's id, so the optimizer's threads never depend on
MLflow's thread-local active run.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.run.results import StepStats, TrainingFreeGRPOResult
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger(__name__)

ROLES = ("policy", "reflection", "verification", "selection")


class Tracker(Protocol):
    """Where a compile reports its progress, besides its own log directory."""

    def step(self, stats: StepStats, library: ExperienceLibrary) -> None: ...

    def finish(self, result: TrainingFreeGRPOResult | None, error: BaseException | None = None) -> None: ...


class NoTracker:
    """The default: the run log and Python logging only."""

    def step(self, stats: StepStats, library: ExperienceLibrary) -> None:
        pass

    def finish(self, result: TrainingFreeGRPOResult | None, error: BaseException | None = None) -> None:
        pass


def make_tracker(track: str | None, settings: dict[str, Any]) -> Tracker:
    """The tracker ``track`` names (None: none), with the compile's ``settings`` logged as its parameters."""
    if track is None:
        return NoTracker()
    if track == "mlflow":
        return MlflowTracker(settings)
    raise ValueError(f"track must be 'mlflow' or None, got {track!r}")


class MlflowTracker:
    """Logs a compile into the active MLflow run, or into a new one it ends when the compile ends."""

    def __init__(self, settings: dict[str, Any]):
        try:
            import mlflow
        except ImportError:
            raise ImportError("track='mlflow' needs MLflow: pip install 'tfgrpo-dspy[mlflow]' (or mlflow)") from None
        self.mlflow = mlflow
        self.client = mlflow.MlflowClient()
        active = mlflow.active_run()
        self.owned = active is None
        # A run of its own starts in the compiling thread, in the experiment the user set (mlflow.set_experiment).
        run = active or mlflow.start_run(run_name="TrainingFreeGRPO")
        self.run_id = run.info.run_id
        self.client.set_tag(self.run_id, "tfgrpo.optimizer", "TrainingFreeGRPO")
        params = {f"tfgrpo.{name}": _param(value) for name, value in settings.items()}
        existing = self.client.get_run(self.run_id).data.params
        # A resumed compile in the same run logs the same settings again: MLflow refuses a changed parameter.
        new = {k: v for k, v in params.items() if k not in existing}
        if new:
            from mlflow.entities import Param

            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in new.items()])
        logger.info("tracking this compile in MLflow run %s (%s)", self.run_id, mlflow.get_tracking_uri())

    def step(self, stats: StepStats, library: ExperienceLibrary) -> None:
        from mlflow.entities import Metric

        values = {"mean_reward": stats.mean_reward, "informative_groups": stats.informative_groups,
                  "failed_groups": stats.failed_groups, "lessons_proposed": stats.lessons_proposed,
                  "lessons_induced": stats.induced_lessons, "lessons_checked": stats.lessons_checked,
                  "lessons_verified": stats.lessons_verified, "edits": stats.ops_applied,
                  "library_size": stats.library_size, "library_tokens": stats.library_tokens,
                  "wall_time_s": stats.wall_time_s}
        for role in ROLES:
            values[f"tokens.{role}"] = _tokens(getattr(stats, f"{role}_usage"))
        scored = [c for c in stats.candidates if c.score is not None]
        if scored:
            values["selection.best_candidate_score"] = max(c.score for c in scored)
            accepted = [c.score for c in scored if c.accepted]
            if accepted:
                values["selection.kept_score"] = accepted[-1]
        timestamp = _now_ms()
        self.client.log_batch(self.run_id, metrics=[Metric(f"tfgrpo.{name}", float(value), timestamp, stats.step)
                                                    for name, value in values.items()])
        self.client.set_tag(self.run_id, f"tfgrpo.gate.step_{stats.step:04d}", stats.gate)
        self.client.log_dict(self.run_id, stats.to_dict(), f"tfgrpo/steps/{stats.step:04d}.json")
        self.client.log_dict(self.run_id, library.to_dict(), f"tfgrpo/steps/{stats.step:04d}_library.json")

    def finish(self, result: TrainingFreeGRPOResult | None, error: BaseException | None = None) -> None:
        if result is not None:
            from mlflow.entities import Metric

            self.client.log_dict(self.run_id, result.library.to_dict(), "tfgrpo/library.json")
            totals = {role: Usage() for role in ROLES}
            for stats in result.steps:
                for role in ROLES:
                    totals[role] = totals[role] + getattr(stats, f"{role}_usage")
            metrics = {f"tfgrpo.total_tokens.{role}": _tokens(usage) for role, usage in totals.items()}
            metrics["tfgrpo.shipped_size"] = len(result.library)
            if result.best_step is not None:
                metrics["tfgrpo.shipped_step"] = result.best_step
            timestamp = _now_ms()
            self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), timestamp, 0) for k, v in metrics.items()])
            self.client.set_tag(self.run_id, "tfgrpo.shipped", result.shipped)
            if result.stopped_reason:
                self.client.set_tag(self.run_id, "tfgrpo.stopped", result.stopped_reason)
        if self.owned:
            self.mlflow.end_run("FAILED" if error is not None else "FINISHED")


def _tokens(usage: Usage) -> int:
    return usage.prompt_tokens + usage.completion_tokens


def _param(value: Any) -> str:
    # MLflow keeps a parameter as a string of at most 6000 characters.
    return str(value)[:6000]


def _now_ms() -> int:
    return int(time.time() * 1000)
