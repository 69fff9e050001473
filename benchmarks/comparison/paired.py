"""Programs scored on the same rows, compared pair by pair: per-row records, accuracies and paired verdicts.

A study keeps one record per row and program (``{"index", "score", "answer"}``) and computes every figure from
those records, so a saved result can be analysed again without a model. A comparison is the paired difference
with its bootstrap 95% interval, won / lost and the exact sign test (`tfgrpo_dspy.stats.compare_paired`):
"better" or "worse" needs both, anything else is "no measurable change".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dspy

from tfgrpo_dspy.inference.evaluation import EvalReport
from tfgrpo_dspy.inference.majority import constant_scores
from tfgrpo_dspy.stats import compare_paired

Records = dict[str, list[dict[str, Any]]]  # program name -> one record per row, in row order


def problem_records(reports: Mapping[str, EvalReport]) -> Records:
    """Each program's greedy evaluation as per-row records (the first sample's answer)."""
    return {name: [{"index": e.index, "score": e.mean_score, "answer": e.samples[0].answer} for e in r.examples]
            for name, r in reports.items()}


def constant_records(examples: Sequence[dspy.Example], metric: Callable, answer_field: str, answer: str
                     ) -> list[dict[str, Any]]:
    """The records of "always ``answer``": no model, every row given that answer (scored by ``metric``)."""
    return [{"index": i, "score": score, "answer": answer}
            for i, score in enumerate(constant_scores(examples, metric, answer_field, answer))]


def paired_summary(records: Records, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Accuracy of each program and the comparison of each (base, other) pair, with the records themselves."""
    scores = {name: [row["score"] for row in rows] for name, rows in records.items()}
    comparisons = []
    for a, b in pairs:
        paired = compare_paired(scores[a], scores[b])
        comparisons.append({"base": a, "other": b, **paired.to_dict(), "verdict": paired.verdict()})
    return {"accuracy": {name: round(sum(s) / len(s), 4) for name, s in scores.items()},
            "comparisons": comparisons, "per_problem": records}


def present(pairs: Sequence[tuple[str, str]], records: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The pairs whose two programs both have records (a stopped run, or a reference that did not apply)."""
    return [(a, b) for a, b in pairs if a in records and b in records]


def accuracy_table(accuracy: Mapping[str, float]) -> list[str]:
    """The markdown table of each program's accuracy."""
    return ["| program | accuracy |", "|---|---|", *[f"| {name} | {100 * value:.1f}% |"
                                                      for name, value in accuracy.items()]]


def verdict_table(comparisons: Sequence[Mapping[str, Any]]) -> list[str]:
    """The markdown table of the paired comparisons, one verdict a row ("other vs base")."""
    return ["| comparison | Δ [95% CI], won / lost, exact sign test |", "|---|---|",
            *[f"| {c['other']} vs {c['base']} | {c['verdict']} |" for c in comparisons]]


def paired_cell(comparison: Mapping[str, Any] | None) -> str:
    """One comparison in one cell: "+x [low, high] won/lost p=... (n.s.)", or "-" when there is none."""
    if comparison is None:
        return "-"
    mark = "" if comparison["significant"] else " (n.s.)"
    return (f"{100 * comparison['delta']:+.1f} [{100 * comparison['ci_low']:+.1f}, {100 * comparison['ci_high']:+.1f}]"
            f" {comparison['wins']}/{comparison['losses']} p={comparison['p_value']:.3f}{mark}")
