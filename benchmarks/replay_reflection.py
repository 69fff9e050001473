"""Replay a demo run's reflection with another extraction prompt, on the same rollouts, and score the result.

A prompt change is measured on the rollouts it would have read: the demo's run log is copied, the step's
reflection, update and selection gate are redone with the chosen extraction Signature (the rollouts and
the initial library's selection scores are reused from the log), and the compiled program is scored on
the demo's held-out examples, paired with the demo's own "before":

    tfgrpo demo --out runs/demo                                              # once
    python benchmarks/replay_reflection.py --demo runs/demo --variant rule --out runs/replay_rule

Variants:
    default   the library's ExtractLesson (signatures/extract.py): a lesson, or none when the mistake
              was a one-off slip
    rule      ExtractRule below: always one rule that would have led to the reference's answer, as a
              feature of the input and the decision it calls for; the guard and the selection gate
              still decide whether it stays

Writes OUT/replay.json: the counts of `reflection_quality.count` (proposals per informative group, drops
by reason, lessons kept), the candidate table, the shipped library, the held-out comparison, and each
library the gate rejected scored on the same held-out examples (did the rejection hold?).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import dspy
from tfgrpo_dspy.signatures import ExtractLesson

BENCHMARKS = Path(__file__).resolve().parent


# The library's ExtractLesson with other instructions: the same fields, so the pipeline reads it unchanged.
ExtractRule = ExtractLesson.with_instructions(
    """Several attempts of the same AI program at the same input were scored against the reference.
    Find the first step where a worse attempt went wrong, and write the one rule that would have led to
    the reference's answer on this input and on other inputs like it.

    - condition: a feature of the input that other inputs can share (a kind of request, a keyword, a
      kind of quantity), with no names or numbers of this input.
    - action: the decision or step the reference took when that feature is present.
    Write exactly one lesson. If an existing lesson misled the worse attempts, list its id as
    misleading; if the better attempts followed a lesson, list its id as useful."""
).with_updated_fields("lessons", desc="exactly one rule").with_updated_fields(
    "difference", desc="the first step where a worse attempt went wrong and what the reference did there")


VARIANTS: dict[str, type[dspy.Signature]] = {"default": ExtractLesson, "rule": ExtractRule}


# The pipeline of demos run before these settings existed (2026-12-01): per-group extraction on mixed groups,
# then the batch update. A newer demo's manifest says its own values.
EARLIER_PIPELINE = {"failed_groups": False, "induction": False, "verify": False}


def replayed_pipeline(log: Path) -> dict:
    """The demo's own pipeline settings, read from its manifest (the replay must run the same steps), with the
    per-group reflection on whatever the demo did: replaying its prompt is the point."""
    settings = json.loads((log / "manifest.json").read_text(encoding="utf-8")).get("settings", {})
    return {**{name: settings.get(name, value) for name, value in EARLIER_PIPELINE.items()}, "extraction": True}


def load_reflection_quality() -> Any:
    spec = importlib.util.spec_from_file_location("bench_reflection_quality", BENCHMARKS / "reflection_quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_rollouts_only(source: Path, target: Path) -> None:
    """The demo's log without what the reflection decided: rollouts, the manifest and selection scores stay.
    The manifest says the per-group reflection is on: the replay runs it whatever the demo did."""
    if target.exists():
        raise FileExistsError(f"--out: {target} exists; choose a new folder (a replay starts from the demo's log)")
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    manifest.setdefault("settings", {})["extraction"] = True
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    for name in ("state.json", "library.json", "shipped.json"):
        (target / name).unlink(missing_ok=True)
    for step in (target / "steps").iterdir():
        for name in ("proposals", "summaries", "updates"):
            shutil.rmtree(step / name, ignore_errors=True)
        for name in ("step.json", "library.json"):
            (step / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, required=True, help="a finished `tfgrpo demo --out` folder")
    parser.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the replay")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--check-rejected", type=int, default=2, metavar="N",
                        help="also score on the held-out examples the first N libraries the gate rejected")
    args = parser.parse_args(argv)
    record_path = args.demo / "demo.json"
    if not record_path.is_file():
        parser.error(f"--demo {args.demo}: no demo.json (run `tfgrpo demo --out {args.demo}` first)")
    demo = json.loads(record_path.read_text())

    from tfgrpo_dspy import ExperienceLibrary, TrainingFreeGRPO, with_experiences
    from tfgrpo_dspy.cli import TASKS
    from tfgrpo_dspy.inference.evaluation import evaluate_at_k
    from tfgrpo_dspy.lm import make_lm
    from tfgrpo_dspy.stats import compare_paired
    from tfgrpo_dspy.tasks import TaskData

    task, seed = TASKS[demo["task"]], demo.get("seed", 0)
    sizes = demo.get("sizes") or {"train": demo["train"]["steps"][0]["examples"],
                                  "selection": demo["train"]["selection_size"],
                                  "heldout": demo["before"]["num_examples"]}
    pool = task.load_trainset(TaskData(n=sizes["train"] + sizes["selection"], seed=seed))
    trainset, selection = pool[: sizes["train"]], pool[sizes["train"]:]
    heldout = task.load_evalset(TaskData(n=sizes["heldout"], seed=seed))
    copy_rollouts_only(args.demo / "log", args.out / "log")

    lm = make_lm(args.lm, max_tokens=512)  # the demo's LM settings: the manifest must match
    dspy.configure(lm=lm)
    started = time.perf_counter()
    optimizer = TrainingFreeGRPO(metric=task.make_metric(None), seed=seed, log_dir=str(args.out / "log"),
                                 seed_rollouts=True, summarize=False, signatures={"extract": VARIANTS[args.variant]},
                                 **{**task.train_defaults, **replayed_pipeline(args.demo / "log")})
    compiled = optimizer.compile(task.make_program(), trainset=trainset, valset=selection)
    result = compiled.tfgrpo_result
    after = evaluate_at_k(compiled, heldout, task.make_metric(None), k=1, temperature=0.0,
                          num_threads=task.train_defaults.get("num_threads", 4), lm=lm,
                          answer_field=task.answer_field)
    before_scores = [e["mean_score"] for e in demo["before"]["examples"]]
    comparison = compare_paired(before_scores, [e.mean_score for e in after.examples])
    # Did the gate's decisions hold? Each library it rejected, scored on the same held-out examples.
    checks = []
    for candidate in [c for c in result.candidates if c.step and not c.accepted][: args.check_rejected]:
        selection_record = json.loads((args.out / "log" / "selection" / f"{candidate.fingerprint}.json").read_text())
        rejected = ExperienceLibrary.from_dict(selection_record["library_file"])
        program = with_experiences(task.make_program(), rejected, placement=optimizer.settings.placement,
                                   top_k=optimizer.settings.top_k)
        scored = evaluate_at_k(program, heldout, task.make_metric(None), k=1, temperature=0.0,
                               num_threads=task.train_defaults.get("num_threads", 4), lm=lm,
                               answer_field=task.answer_field)
        check = compare_paired(before_scores, [e.mean_score for e in scored.examples])
        checks.append({"label": candidate.label, "lessons": rejected.texts, "held_out": scored.mean_at_k,
                       "vs_before": check.to_dict(), "rejection_held": check.delta <= 0})
    report = {
        "command": " ".join(["python", *sys.argv]), "variant": args.variant, "demo": str(args.demo),
        "seconds": round(time.perf_counter() - started), **load_reflection_quality().count(args.out / "log"),
        "candidates": [c.to_dict() for c in result.candidates], "best_step": result.best_step,
        "shipped": [e.text for e in result.library], "before": demo["before"]["mean_at_k"],
        "after": after.mean_at_k, "comparison": comparison.to_dict(), "verdict": comparison.verdict(),
        "rejected_on_held_out": checks,
    }
    (args.out / "replay.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "per_group"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
