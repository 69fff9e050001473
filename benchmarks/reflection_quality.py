"""What the reflection produces on real data: proposals per informative group, restatements dropped, lessons kept.

Runs one TrainingFreeGRPO step (no selection set: every lesson that survives the guard and the update
reaches the library, so this measures the reflection alone) on seeded GSM8K training rows with the
embedded model and ChainOfThought, then counts from the run log:

    proposals per informative group      lessons the extraction proposed, before any filter
    dropped as restatements               share of proposals the guard dropped (restated the example)
    reaching the library                  share of proposals that became a lesson in the library

It reads both the current run-log format and the one before the reflection rework (proposals with
"ops"), so the same command run from an older checkout gives the "before" numbers:

    PYTHONPATH=/path/to/old/checkout python benchmarks/reflection_quality.py --gsm8k PATH --out runs/before
    python benchmarks/reflection_quality.py --gsm8k PATH --out runs/after

Rollouts are the same in both (same rows, seeds and rollout ids; DSPy's cache serves the second run).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

import dspy


def count(log_dir: Path) -> dict[str, Any]:
    """Proposal counts of a run log, in either format."""
    step = log_dir / "steps" / "0001"
    records = [json.loads(p.read_text()) for p in sorted((step / "proposals").glob("*.json"))]
    stats = json.loads((step / "step.json").read_text())
    library = json.loads((log_dir / "library.json").read_text())
    proposed = dropped = 0
    reasons: dict[str, int] = {}  # why the guard dropped them: restated the example, copied the prompt, too long
    examples = []
    for record in records:
        if "raw_count" in record:  # current format: lessons after the guard, dropped with reasons
            proposed += record["raw_count"]
            kept = [lesson["text"] for lesson in record.get("lessons", [])]
        else:  # before the rework: "ops" kept, "dropped" restatements
            kept = [op.get("text") for op in record.get("ops", []) if op.get("text")]
            proposed += len(kept) + len(record.get("dropped", []))
        dropped += len(record.get("dropped", []))
        for entry in record.get("dropped", []):
            reason = str(entry.get("dropped_because") or entry.get("reason") or "restates its example")
            kind = reason.split(":")[0].strip()
            reasons[kind] = reasons.get(kind, 0) + 1
        examples.append({"example": record["example_index"], "kept": kept,
                         "dropped": [d.get("text") for d in record.get("dropped", [])],
                         "error": record.get("error")})
    groups = stats["informative_groups"]
    lessons = [e["text"] for e in library["experiences"]]
    return {
        "informative_groups": groups,
        "proposals": proposed,
        "proposals_per_informative_group": round(proposed / groups, 3) if groups else None,
        "dropped": dropped,
        "dropped_by_reason": reasons,
        "dropped_as_restatements": reasons.get("restates its example", 0),
        "share_dropped": round(dropped / proposed, 3) if proposed else None,
        "library_lessons": len(lessons),
        "share_reaching_library": round(len(lessons) / proposed, 3) if proposed else None,
        "library": lessons,
        "per_group": examples,
        "reflection_usage": stats.get("reflection_usage"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gsm8k", help="GSM8K jsonl (or hub id / folder)")
    parser.add_argument("--from-log", type=Path, metavar="LOG_DIR",
                        help="count the first step of an existing TrainingFreeGRPO run log instead of running one "
                             "(e.g. compare.py's tfgrpo run), and write the counts to --out")
    parser.add_argument("--n", type=int, default=16, help="training rows (one step over all of them)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-summaries", action="store_true")
    parser.add_argument("--out", type=Path, required=True, help="run directory (resumable)")
    args = parser.parse_args(argv)
    if args.from_log is not None:
        result = {"command": " ".join(["python", *sys.argv]), "log": str(args.from_log), **count(args.from_log)}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "reflection_quality.json").write_text(json.dumps(result, indent=2))
        print(json.dumps({k: v for k, v in result.items() if k != "per_group"}, indent=2))
        return 0
    if not args.gsm8k:
        parser.error("--gsm8k PATH is needed to run a step (or --from-log LOG_DIR to count one)")

    from tfgrpo_dspy import TrainingFreeGRPO
    from tfgrpo_dspy.kits.math.data import load_gsm8k
    from tfgrpo_dspy.kits.wordproblems import numeric_match
    from tfgrpo_dspy.lm import make_lm

    lm = make_lm("local", max_tokens=512)
    dspy.configure(lm=lm)
    rows = load_gsm8k(args.gsm8k, split="train", n=args.n, seed=args.seed)
    labels = {"answer": None, "solution": None}
    trainset = [dspy.Example(question=e.problem, **{k: e.get(k) for k in labels if e.get(k) is not None})
                .with_inputs("question") for e in rows]
    settings: dict[str, Any] = dict(metric=numeric_match, group_size=args.group_size, epochs=1, temperature=0.7,
                                    num_threads=4, seed=args.seed, seed_rollouts=True, summarize=not args.no_summaries,
                                    log_dir=str(args.out / "log"))
    accepted = inspect.signature(TrainingFreeGRPO).parameters
    if "val_fraction" in accepted or "settings" in accepted or any(p.kind == p.VAR_KEYWORD
                                                                   for p in accepted.values()):
        settings.update(val_fraction=0.0, reference_fields=["answer", "solution"])
    started = time.perf_counter()
    TrainingFreeGRPO(**settings).compile(dspy.ChainOfThought("question -> answer"), trainset=trainset)
    result = {"command": " ".join(["python", *sys.argv]), "seconds": round(time.perf_counter() - started),
              **count(args.out / "log")}
    (args.out / "reflection_quality.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "per_group"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
