"""The extraction's lessons as a JSON list or as lines: parse failures, proposals and tokens on the same groups.

The extraction Signature (`ExtractLesson`) asks for ``list[ProposedLesson]``: DSPy's ChatAdapter then puts that
type's JSON schema in the prompt and the model answers with a JSON list of objects. `ExtractLessonLines` asks for
the same lessons one per line ("When <condition>, <action>."). Both are run, greedy, on every group a finished run
sent to extraction (its run log's ``steps/NNNN/proposals``), with the library that step started from, and compared:

    failed      extractions that gave no answer after the Reflector's retries
    extra calls LM calls beyond one per extraction (DSPy's JSONAdapter fallback after a parse failure, retries)
    unparsed    lesson lines not in the 'When <condition>, <action>.' form (line format only)
    proposed    lessons read, and how many have both a condition and an action
    tokens      prompt, cached and decoded tokens per extraction; wall seconds

    python benchmarks/extract_format.py --log benchmarks/results/compare_gsm8k.runs/gsm8k/tfgrpo-seed0.log \
        --gsm8k /work/shared/data/gsm8k/train.jsonl

The references come from the GSM8K rows whose questions the rollouts answered (no example of the run is chosen
here: every group the run sent to extraction is used). Writes results/extract_format.{json,md}; finished
extractions are kept in results/extract_format.runs/ and a rerun continues after them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import dspy
from dspy.clients.base_lm import GLOBAL_HISTORY
from provenance import git_revision
from tfgrpo_dspy.signatures import ExtractLesson, ExtractLessonLines

from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.kits.math.data import load_gsm8k
from tfgrpo_dspy.library.jsonio import read_json, write_json_atomic
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.lm import make_lm
from tfgrpo_dspy.reflection.reflection import ReflectionSignatures, Reflector, as_text, format_reference

logger = logging.getLogger(__name__)
RESULTS = Path(__file__).parent / "results"
FORMATS: dict[str, type[dspy.Signature]] = {"json list": ExtractLesson, "lines": ExtractLessonLines}


def load_groups(log: Path) -> list[tuple[int, GroupOutcome, ExperienceLibrary]]:
    """(step, group, the library the step started from) for every group the run sent to extraction."""
    groups = []
    for step_dir in sorted((log / "steps").iterdir()):
        step = int(step_dir.name)
        previous = log / "steps" / f"{step - 1:04d}" / "library.json"
        library = ExperienceLibrary.load(previous) if previous.exists() else ExperienceLibrary()
        for proposal in sorted((step_dir / "proposals").glob("ex*.json")):
            index = int(proposal.stem[2:])
            rollouts = [Rollout.from_dict(read_json(path))
                        for path in sorted((step_dir / "rollouts").glob(f"ex{index:04d}_s*.json"))]
            groups.append((step, GroupOutcome(index, tuple(rollouts)), library))
    return groups


def example_of(group: GroupOutcome, rows: dict[str, dspy.Example]) -> dspy.Example | None:
    """The training example as the run's program saw it (the rollouts' input field, whatever its name), with the
    labels of the GSM8K row whose problem it is; None when no row matches."""
    inputs = group.rollouts[0].inputs
    row = next((rows[value] for value in inputs.values() if isinstance(value, str) and value in rows), None)
    if row is None:
        return None
    return dspy.Example(**inputs, answer=row.answer, solution=row.solution).with_inputs(*inputs)


def extract_once(reflector: Reflector, group: GroupOutcome, example: dspy.Example, library: ExperienceLibrary,
                 settings: dict[str, Any]) -> dict[str, Any]:
    """One extraction, as the run's phase calls it, and what it cost."""
    calls_before = len(GLOBAL_HISTORY)  # the Reflector calls copies of its LM; every call lands here
    started = time.perf_counter()
    extraction, error, usage = reflector.extract(
        as_text(example.inputs().toDict()), format_reference(example, settings["reference_fields"]), group, {},
        library, max_lessons=settings["max_proposals"], max_words=settings["max_words"])
    seconds = time.perf_counter() - started
    calls = GLOBAL_HISTORY[calls_before:]
    answers = [entry["outputs"][0] if entry.get("outputs") else "" for entry in calls]
    cached = sum(((entry.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                 for entry in calls)
    lessons = extraction.lessons if extraction else []
    return {"error": error, "calls": usage.calls, "seconds": round(seconds, 2),
            "prompt_tokens": usage.prompt_tokens, "cached_tokens": cached, "completion_tokens": usage.completion_tokens,
            "lessons": [{"condition": r.condition, "action": r.action, "replaces": r.replaces} for r in lessons],
            "unparsed": extraction.unparsed if extraction else [], "answers": answers}


def summarize(records: dict[str, dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in FORMATS:
        done = [records[f"{name}/{key}"] for key in keys]
        n = len(done)
        rows.append({
            "format": name, "extractions": n,
            "failed": sum(r["error"] is not None for r in done),
            "extra_calls": sum(r["calls"] - 1 for r in done),
            "unparsed_lines": sum(len(r["unparsed"]) for r in done),
            "groups_with_a_lesson": sum(bool(r["lessons"]) for r in done),
            "lessons": sum(len(r["lessons"]) for r in done),
            "complete_lessons": sum(bool(x["condition"].strip() and x["action"].strip())
                                    for r in done for x in r["lessons"]),
            "prompt_tokens": round(sum(r["prompt_tokens"] for r in done) / n, 1),
            "cached_tokens": round(sum(r["cached_tokens"] for r in done) / n, 1),
            "completion_tokens": round(sum(r["completion_tokens"] for r in done) / n, 1),
            "seconds": round(sum(r["seconds"] for r in done) / n, 1),
        })
    return rows


def markdown(report: dict[str, Any]) -> str:
    setup = report["setup"]
    lines = ["# The extraction's lessons as a JSON list or as lines, on the same groups", "",
             f"One run on {setup['date']} at commit {setup['commit']}; load average at start "
             f"{setup['load_average_at_start']}; the machine's rates at the start: {setup['speed']}. "
             f"{report['groups']} groups from `{setup['log']}` (every group that run sent to extraction), greedy, "
             "each format on each group, the formats' order alternating from group to group. Per extraction "
             "(mean): prompt, cached and decoded tokens, wall seconds.", "",
             "| format | extractions | failed | extra LM calls | unparsed lines | groups with a lesson | lessons "
             "| with condition and action | prompt tok | cached tok | decoded tok | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['format']} | {r['extractions']} | {r['failed']} | {r['extra_calls']} | "
                     f"{r['unparsed_lines']} | {r['groups_with_a_lesson']} | {r['lessons']} | "
                     f"{r['complete_lessons']} | {r['prompt_tokens']} | {r['cached_tokens']} | "
                     f"{r['completion_tokens']} | {r['seconds']} |")
    lines += ["", "## Lessons, group by group", "", "| group | json list | lines |", "|---|---|---|"]
    for key in report["keys"]:
        cells = []
        for name in FORMATS:
            record = report["records"][f"{name}/{key}"]
            texts = [f"When {x['condition']}, {x['action']}." for x in record["lessons"]]
            texts += [f"(unparsed) {line}" for line in record["unparsed"]]
            if record["error"]:
                texts.append(f"(failed) {record['error'][:80]}")
            cells.append("<br>".join(t.replace("|", "/") for t in texts) or "none")
        lines.append(f"| {key} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True, help="a finished GSM8K run's log directory")
    parser.add_argument("--gsm8k", required=True, help="GSM8K jsonl, hub folder or id (the rows' references)")
    parser.add_argument("--split", default="train", help="the GSM8K split the run trained on (default train)")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--stem", default="extract_format", help="results/<stem>.{json,md}, results/<stem>.runs/")
    args = parser.parse_args(argv)
    if not (args.log / "manifest.json").is_file() or not (args.log / "steps").is_dir():
        parser.error(f"--log {args.log}: not a run log (no manifest.json and steps/)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    manifest = read_json(args.log / "manifest.json")
    settings = manifest["settings"]
    if not settings.get("ground_truth", True) or not settings.get("reference_fields"):
        parser.error(f"--log {args.log}: the run had no reference fields to show the extraction")
    rows = {e.problem: e for e in load_gsm8k(args.gsm8k, split=args.split)}
    groups = load_groups(args.log)
    examples = {g.example_index: example_of(g, rows) for _, g, _ in groups}
    missing = [index for index, example in examples.items() if example is None]
    if missing:
        parser.error(f"--gsm8k {args.gsm8k}: no row for the problems of groups {missing}")
    store = RESULTS / f"{args.stem}.runs"
    store.mkdir(parents=True, exist_ok=True)
    records_path = store / "records.json"
    records = read_json(records_path) if records_path.exists() else {}
    lm = make_lm(args.lm, max_tokens=(manifest.get("reflection_lm") or {}).get("max_tokens") or 1024, cache=False)
    speed = str(lm.engine.measure_speed()) if hasattr(getattr(lm, "engine", None), "measure_speed") else None
    setup = {"date": time.strftime("%Y-%m-%d"), "commit": git_revision(), "log": str(args.log), "lm": args.lm,
             "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "speed": speed,
             "argv": sys.argv[1:]}
    keys = []
    for number, (step, group, library) in enumerate(groups):
        key = f"step{step}/ex{group.example_index:04d}"
        keys.append(key)
        example = examples[group.example_index]
        for name in list(FORMATS)[:: 1 if number % 2 == 0 else -1]:
            if f"{name}/{key}" in records:
                continue
            reflector = Reflector(lm, signatures=ReflectionSignatures(extract=FORMATS[name]),
                                  max_retries=settings.get("reflection_retries", 2),
                                  max_tokens=settings.get("reflection_max_tokens"),
                                  timeout=settings.get("call_timeout"),
                                  max_trajectory_chars=settings.get("max_trajectory_chars"))
            records[f"{name}/{key}"] = extract_once(reflector, group, example, library, settings)
            write_json_atomic(records_path, records)
            logger.info("%s %s: %d lesson(s), %s", key, name, len(records[f"{name}/{key}"]["lessons"]),
                        records[f"{name}/{key}"]["error"] or "ok")
    setup["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = {"setup": setup, "groups": len(keys), "keys": keys, "rows": summarize(records, keys), "records": records}
    write_json_atomic(RESULTS / f"{args.stem}.json", report)
    (RESULTS / f"{args.stem}.md").write_text(markdown(report))
    print((RESULTS / f"{args.stem}.md").read_text())
    return 0



if __name__ == "__main__":
    sys.exit(main())
