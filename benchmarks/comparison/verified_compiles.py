"""A verified TrainingFreeGRPO compile as the tickets studies record it, and its markdown.

The record (`compile_record`) is what the compile proposed, verified, kept, accepted and shipped, read from the
compiled program and its run log; every study that compiles with verification (verified_lessons, routed_lessons,
demo_recipe) saves it in its report and writes it with `compile_lines`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.library.jsonio import read_json

# The demo's compile settings the tickets studies were measured with (its defaults until 2026-12-03): pinned, so a
# rerun resumes the same compiles whatever the tickets defaults are now.
TICKETS_RECIPE = {"num_candidates": 3, "verify_batch": 12, "route_by": "lesson"}


def compile_record(compiled: dspy.Module) -> dict[str, Any]:
    """What the compile proposed, verified, accepted and shipped, with each candidate's verification record."""
    result = compiled.tfgrpo_result
    checks = []
    if result.log_dir:
        for path in sorted(Path(result.log_dir).glob("steps/*/checks/lessons.json")):
            checks += read_json(path).get("checks", [])
    steps = [s.to_dict() for s in result.steps]
    # The run's own clock (a resumed compile's steps were timed when they ran): its steps and the starting
    # library's selection score (outside the steps) are not all of it, but the calls are.
    return {"shipped": result.shipped, "lessons": compiled.experience_library.texts,
            "step_seconds": round(sum(s["wall_time_s"] for s in steps)),
            "candidates_proposed": sum(s["lessons_proposed"] + s["induced_lessons"] for s in steps),
            "candidates_checked": sum(s["lessons_checked"] for s in steps),
            "candidates_verified": sum(s["lessons_verified"] for s in steps),
            "gate": [{"label": c.label, "score": c.score, "accepted": c.accepted, "reason": c.reason}
                     for c in result.candidates],
            "checks": checks, "steps": steps, "usage": {role: result.to_dict()[f"{role}_usage"] for role in
                                                         ("policy", "reflection", "verification", "selection")}}


def compile_lines(compile_: dict[str, Any]) -> list[str]:
    """One compile: what it proposed, verified and shipped, every candidate's verification and the gate."""
    lines = ["", f"### Compile seed {compile_['seed']}", "",
             f"{compile_['step_seconds']} s of steps: {compile_['candidates_proposed']} candidate lessons proposed, "
             f"{compile_['candidates_checked']} distinct ones verified on training examples, "
             f"{compile_['candidates_verified']} kept; shipped: {compile_['shipped']}.", "",
             "Shipped lessons and their verification on training examples:", ""]
    kept = {c["text"]: c for c in compile_["checks"] if c.get("kept")}
    for text in compile_["lessons"] or ["(none)"]:
        check = kept.get(text)
        lines.append(f"- {text}" + (f" ({check['reason']}; fixed {check['fixes']}, broke {check['breaks']})"
                                    if check else ""))
    lines += ["", "Every candidate's verification, in order (each on top of the ones kept before it):", "",
              "| candidate | from | fixed | broke | kept | why |", "|---|---|---|---|---|---|"]
    lines += [f"| {c['text']} | {c['origin']} | {len(c['fixes'])} | {len(c['breaks'])} | "
              f"{'yes' if c['kept'] else 'no'} | {c['reason']} |" for c in compile_["checks"]]
    lines += ["", "Gate on the selection set:", ""]
    lines += [f"- {g['label']}: {g['score']:.3f}, {'accepted' if g['accepted'] else 'rejected'} ({g['reason']})"
              for g in compile_["gate"]]
    return lines
