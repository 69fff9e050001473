"""Each method against ``none`` on the same held-out problems and compiles, and the repeatability of ``none``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comparison.gate_checks import GATE_CHECKED_METHODS, gate_check_rows
from comparison.records import MethodResult
from tfgrpo_dspy import compare_paired


def paired_vs(none: MethodResult | None, result: MethodResult) -> dict[str, Any] | None:
    """``result`` against ``none`` on the same held-out problems, or None when they cannot be paired.

    Only the seeds both evaluated are paired: a method that failed on a seed where ``none`` succeeded (or
    the reverse) must not be compared with ``none``'s average over other seeds."""
    if none is None:
        return None
    seeds = sorted(set(none.evaluated_seeds) & set(result.evaluated_seeds))
    base, scores = none.problem_scores(seeds), result.problem_scores(seeds)
    if not seeds or base is None or scores is None or len(scores) != len(base):
        return None
    comparison = compare_paired(base, scores)
    return {**comparison.to_dict(), "verdict": comparison.verdict(), "seeds": seeds}


def result_rows(results: Sequence[MethodResult]) -> list[dict[str, Any]]:
    """Each method's report entry, with its paired gain over ``none`` (``vs_none``)."""
    none = next((r for r in results if r.method == "none"), None)
    rows = []
    for result in results:
        row = result.to_dict()
        row["vs_none"] = None if result.method == "none" else paired_vs(none, result)
        if result.method in GATE_CHECKED_METHODS and none is not None:
            none_runs = {r.seed: [p.score for p in r.per_problem] for r in none.ok_runs if r.evaluated}
            for run, entry in zip(result.runs, row["runs"], strict=True):
                entry["gate_check"] = gate_check_rows(run, none_runs.get(run.seed))
        rows.append(row)
    return rows


def repeatability(results: Sequence[MethodResult]) -> dict[str, Any] | None:
    """The repeated evaluation of ``none``: its flip rate and the accuracy of both passes, or None."""
    none = next((r for r in results if r.method == "none"), None)
    run = next((r for r in none.ok_runs if r.repeat is not None), None) if none else None
    if run is None:
        return None
    repeat = run.repeat
    summary: dict[str, Any] = {"seed": run.seed, "problems": len(run.per_problem), "flip_rate": repeat.flip_rate,
                               "flips": repeat.flips, "first_score": run.score, "second_score": repeat.score,
                               "eval_seconds": repeat.eval_seconds, "usage": repeat.usage.to_dict(),
                               "error": repeat.error, "second_vs_first": None}
    if repeat.per_problem and len(repeat.per_problem) == len(run.per_problem):
        summary["second_vs_first"] = compare_paired([p.score for p in run.per_problem],
                                                    [p.score for p in repeat.per_problem]).to_dict()
    return summary


def flip_line(summary: dict[str, Any] | None) -> str:
    """The repeatability sentence of the markdown and the printed output."""
    if summary is None:
        return "Repeatability: not measured (`none` has no second evaluation yet)."
    if summary["flip_rate"] is None:
        return f"Repeatability: the second evaluation of `none` failed ({summary['error']})."
    return (f"Repeatability: `none` evaluated twice, the second time with DSPy's cache off: flip rate "
            f"{100 * summary['flip_rate']:.1f}% ({summary['flips']} of {summary['problems']} answers changed); "
            f"accuracy {summary['first_score']:.3f} then {summary['second_score']:.3f}.")
