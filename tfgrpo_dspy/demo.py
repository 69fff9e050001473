"""The main job, offline: held-out accuracy before, a training run with its selection, held-out accuracy after.

It runs by default on routing synthetic support tickets by house rules the model cannot guess: the kind
of task where lessons should help most, since feedback reveals knowledge the model lacks. On the embedded
1.5B model all ten true rules in the instructions did not measurably change accuracy; the one most
relevant per ticket raised it most (+25 points, benchmarks/results/lessons_study.md), which is why each
call sees its most relevant lesson (top_k=1, the default). Whether a library learned here reaches that effect is what
the demo measures; it promises no gain. Before and after are scored greedily
on the same held-out tickets, so the
difference is paired; the verdict prints its interval and says "no measurable change" when the interval
includes zero.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import dspy

from tfgrpo_dspy.evaluation import EvalReport, evaluate_at_k
from tfgrpo_dspy.library import write_json_atomic
from tfgrpo_dspy.optimizer import TrainingFreeGRPO
from tfgrpo_dspy.results import TrainingFreeGRPOResult
from tfgrpo_dspy.stats import compare_paired
from tfgrpo_dspy.tasks import Task, TaskData

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSizes:
    train: int = 24
    selection: int = 16
    heldout: int = 60


def scores(report: EvalReport) -> list[float]:
    return [e.mean_score for e in report.examples]


def run_demo(task: Task, lm: dspy.LM, out: Path, *, sizes: DemoSizes, seed: int = 0, say=print) -> dict:
    """Before / train / after on ``task``; every figure printed is also written to ``out/demo.json``."""
    started = time.monotonic()
    pool = task.load_trainset(TaskData(n=sizes.train + sizes.selection, seed=seed))
    trainset, selection = pool[: sizes.train], pool[sizes.train :]
    heldout = task.load_evalset(TaskData(n=sizes.heldout, seed=seed))
    say(f"tfgrpo demo: task {task.name} ({task.description})\n  {len(trainset)} training, {len(selection)} "
        f"selection and {len(heldout)} held-out examples, LM {lm.model}")
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
    optimizer = TrainingFreeGRPO(metric=metric, seed=seed, log_dir=str(out / "log"), seed_rollouts=True,
                                 summarize=False, **task.train_defaults)
    say(f"  plan: {optimizer.estimate(program, trainset, selection)}")
    compiled = optimizer.compile(program, trainset=trainset, valset=selection)
    result: TrainingFreeGRPOResult = compiled.tfgrpo_result
    result.library.save(out / "library.json")
    for candidate in result.candidates:
        decision = "accepted" if candidate.accepted else "rejected"
        say(f"  {candidate.label:<24} selection score {candidate.score:.3f}  {decision:<8} ({candidate.size} lessons) "
            f"{candidate.reason}")
    say(f"  shipped: {result.shipped}, {len(result.library)} lessons")
    for experience in result.library:
        say(f"    [{experience.label}] {experience.text}")

    say("\n[3/3] held-out accuracy with the shipped library")
    after = evaluate_at_k(compiled, heldout, metric, checkpoint_dir=out / "eval" / "after", **evals)
    comparison = compare_paired(scores(before), scores(after))
    say(f"  after:  {100 * after.mean_at_k:.1f}%")
    say(f"\n== verdict on {len(heldout)} held-out examples (greedy, paired) ==\n  {comparison.verdict()}")
    if not comparison.significant:
        say("  The library did not measurably change held-out accuracy. On the embedded 1.5B model even the "
            "true house rules, all in the instructions, do not (benchmarks/results/lessons_study.md); the one "
            "most relevant per ticket (top_k=1, the default) did, when they were the true rules. Use a stronger "
            "policy (--lm) and reflection model (--reflection-lm) for better lessons.")
    minutes = (time.monotonic() - started) / 60
    say(f"\nfinished in {minutes:.1f} min; library, statistics and logs in {out}/ (tfgrpo report {out / 'log'})")
    record = {"task": task.name, "seed": seed, "sizes": asdict(sizes),
              "before": before.to_dict(), "after": after.to_dict(), "train": result.to_dict(),
              "comparison": comparison.to_dict(), "minutes": round(minutes, 1)}
    write_json_atomic(out / "demo.json", record)
    return record
