"""The main job, offline: held-out accuracy before, a training run with its selection, held-out accuracy after.

It runs by default on routing synthetic support tickets by house rules the model cannot guess: the kind
of task where lessons should help most, since feedback reveals knowledge the model lacks. On the embedded
1.5B model all ten true rules in the instructions did not measurably change accuracy; the one most
relevant per ticket raised it most (+25 points, benchmarks/results/lessons_study.md), which is why each
call sees at most one lesson (top_k=1, the default): with the tickets kit, a lesson whose target is the queue of
the training ticket nearest to it (route_by="answer"), or none. Whether a library learned here reaches that
effect is what the demo measures; it promises no gain. Before and after are scored greedily on the same held-out
tickets, so the difference is paired; the verdict prints its interval and exact sign test and says "no
measurable change" unless both exclude no change. The held-out examples come from a seed no default was chosen
on. When the answers are labels, the shipped program is also compared with the most frequent training answer
given to every held-out example (no model): a library no better than that has only moved answers toward a common
label.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.inference.evaluation import EvalReport, evaluate_at_k
from tfgrpo_dspy.inference.majority import MajorityBaseline, majority_baseline
from tfgrpo_dspy.library.jsonio import write_json_atomic
from tfgrpo_dspy.lm.engine import LlamaCppEngine, MachineSpeed
from tfgrpo_dspy.optimizer import TrainingFreeGRPO
from tfgrpo_dspy.report.run import load_run
from tfgrpo_dspy.report.story import headline, held_out_line, plural, stages
from tfgrpo_dspy.run.results import TrainingFreeGRPOResult
from tfgrpo_dspy.stats import PairedComparison, compare_paired
from tfgrpo_dspy.tasks import Task, TaskData

logger = logging.getLogger(__name__)


# Held-out examples come from seed + 1000: the seed-0 held-out tickets chose the default top_k, so they are not
# fit to report with; no default was chosen on these.
HELDOUT_SEED_OFFSET = 1000


@dataclass(frozen=True)
class DemoSizes:
    train: int = 24
    selection: int = 16
    heldout: int = 60


def scores(report: EvalReport) -> list[float]:
    return [e.mean_score for e in report.examples]


def machine_speed(lm: dspy.LM) -> MachineSpeed | None:
    """The embedded model's rates now; None for any other LM (a remote API's speed is not this machine's)."""
    engine = getattr(lm, "engine", None)
    if not isinstance(engine, LlamaCppEngine):
        return None
    try:
        return engine.measure_speed()
    except Exception as exc:  # a speed reading is a courtesy; the demo must not fail on it
        logger.info("could not measure the machine's speed: %s", exc)
        return None


def spending(before: EvalReport, after: EvalReport, result: TrainingFreeGRPOResult) -> str:
    """LM calls and wall time by part: the two held-out evaluations and each phase of training."""
    seconds: dict[str, float] = {}
    for stats in result.steps:
        for phase, value in stats.phase_seconds.items():
            seconds[phase] = seconds.get(phase, 0.0) + value
    parts = [f"held-out {before.usage.calls + after.usage.calls} calls in "
             f"{(before.elapsed_seconds + after.elapsed_seconds) / 60:.1f} min"]
    usage = {"rollouts": result.policy_usage, "reflection": result.reflection_usage,
             "verification": result.verification_usage, "selection": result.selection_usage}
    for phase, spent in usage.items():
        parts.append(f"{phase} {spent.calls} calls in {seconds.get(phase, 0.0) / 60:.1f} min")
    return "; ".join(parts) + " (selection includes scoring the starting library, outside the step's time)"


def inconclusive_advice(comparison: PairedComparison) -> str:
    """What to do when the verdict is "no measurable change": with a gain whose interval is wide, measure on more
    held-out examples; without one, look to a stronger model."""
    if comparison.ci_high > 0 and comparison.delta > 0:
        return (f"The interval [{100 * comparison.ci_low:+.1f}, {100 * comparison.ci_high:+.1f}] points still "
                f"includes no change: {comparison.n} held-out examples detect only large changes. More of them "
                "(--heldout-n) measure the library more precisely.")
    return ("The library did not measurably change held-out accuracy. A stronger policy (--lm) and reflection "
            "model (--reflection-lm) find and follow lessons the embedded 1.5B model does not.")


def majority_lines(majority: MajorityBaseline, against: PairedComparison) -> list[str]:
    """The shipped program against answering the most frequent training answer to every held-out example."""
    lines = [f"always {majority.answer!r} (the most frequent of {majority.training_count} training answers, "
             f"no model): {100 * majority.mean:.1f}%",
             f"the shipped program against it: {against.verdict()}"]
    if not (against.significant and against.delta > 0):
        lines.append("A program no better than one answer for everything has not shown that it learned rules; "
                     "a gain over no library may only have moved its answers toward a common label.")
    return lines


def demo_optimizer(task: Task, metric: Callable, seed: int, log_dir: Path, **overrides: Any) -> TrainingFreeGRPO:
    """The demo's recipe: the task's training defaults, seeded rollouts, no per-rollout summaries (one reflection
    call per group); ``overrides`` change settings of it. `benchmarks/verified_lessons.py` measures exactly this
    compile on more held-out data."""
    settings = {**task.train_defaults, **overrides}
    return TrainingFreeGRPO(metric=metric, seed=seed, log_dir=str(log_dir), seed_rollouts=True, summarize=False,
                            **settings)


def run_demo(task: Task, lm: dspy.LM, out: Path, *, sizes: DemoSizes, seed: int = 0, say=print) -> dict:
    """Before / train / after on ``task``; every figure printed is also written to ``out/demo.json``."""
    started = time.monotonic()
    pool = task.load_trainset(TaskData(n=sizes.train + sizes.selection, seed=seed))
    trainset, selection = pool[: sizes.train], pool[sizes.train :]
    heldout = task.load_evalset(TaskData(n=sizes.heldout, seed=seed + HELDOUT_SEED_OFFSET))
    say(f"tfgrpo demo: task {task.name} ({task.description})\n  {len(trainset)} training, {len(selection)} "
        f"selection (seed {seed}) and {len(heldout)} held-out examples (seed {seed + HELDOUT_SEED_OFFSET}), "
        f"LM {lm.model}")
    speed = machine_speed(lm)
    if speed is not None:
        say(f"  this machine now: {speed}")
    metric = task.make_metric(None)
    program = task.make_program()
    # Greedy decoding, one answer per example, the same examples before and after: a paired comparison.
    evals = dict(k=1, temperature=0.0, num_threads=task.train_defaults.get("num_threads", 4), lm=lm,
                 answer_field=task.answer_field)

    say("\n[1/3] held-out accuracy without a library")
    # Each answer is saved as it comes: a rerun with the same --out resumes instead of paying again.
    before = evaluate_at_k(program, heldout, metric, checkpoint_dir=out / "eval" / "before", **evals)
    say(f"  before: {100 * before.mean_at_k:.1f}%")

    say("\n[2/3] training (Training-Free GRPO; a library is kept only if it wins on the selection set)")
    optimizer = demo_optimizer(task, metric, seed, out / "log")
    say(f"  plan: {optimizer.estimate(program, trainset, selection)}")
    compiled = optimizer.compile(program, trainset=trainset, valset=selection)
    result: TrainingFreeGRPOResult = compiled.tfgrpo_result
    result.library.save(out / "library.json")
    for candidate in result.candidates:
        decision = "accepted" if candidate.accepted else "rejected"
        size = plural(candidate.size, "lesson")
        say(f"  {candidate.label:<24} selection score {candidate.score:.3f}  {decision:<8} ({size}) {candidate.reason}")
    say(f"  shipped: {result.shipped}, {plural(len(result.library), 'lesson')}")
    for experience in result.library:
        say(f"    [{experience.label}] {experience.text}")

    say("\n[3/3] held-out accuracy with the shipped library")
    after = evaluate_at_k(compiled, heldout, metric, checkpoint_dir=out / "eval" / "after", **evals)
    comparison = compare_paired(scores(before), scores(after))
    say(f"  after:  {100 * after.mean_at_k:.1f}%")
    say(f"\n== verdict on {len(heldout)} held-out examples (greedy, paired) ==\n  {comparison.verdict()}")
    majority = majority_baseline(pool, heldout, metric, task.answer_field)
    against = None
    if majority is not None:
        against = compare_paired(list(majority.scores), scores(after))
        say("\n== against one answer for everything ==")
        for line in majority_lines(majority, against):
            say(f"  {line}")
    run = load_run(out / "log")
    say(f"\n== what the run learned ==\n  {headline(run)}")
    for line in stages(run):
        if line != held_out_line(run):  # the verdict above is this run's; a demo.json here may be an earlier one's
            say(f"  - {line}")
    if not comparison.significant:
        say("  " + inconclusive_advice(comparison))
    minutes = (time.monotonic() - started) / 60
    say(f"\nspent: {spending(before, after, result)}")
    say(f"finished in {minutes:.1f} min" + (f" ({speed})" if speed is not None else "")
        + f"; library, statistics and logs in {out}/ (tfgrpo report {out / 'log'})")
    record = {"task": task.name, "seed": seed, "heldout_seed": seed + HELDOUT_SEED_OFFSET, "sizes": asdict(sizes),
              "before": before.to_dict(), "after": after.to_dict(), "train": result.to_dict(),
              "comparison": comparison.to_dict(), "minutes": round(minutes, 1),
              "majority": {**majority.to_dict(), "comparison": against.to_dict()}
              if majority is not None and against is not None else None,
              "speed_at_start": asdict(speed) if speed is not None else None}
    write_json_atomic(out / "demo.json", record)
    return record
