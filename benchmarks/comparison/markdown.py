"""The comparison as markdown: the table of methods, the libraries TrainingFreeGRPO shipped, the gate's checks.

Everything is drawn from the saved report (`comparison.report.build_report`), so a report can be rewritten
without running anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from comparison.presets import CHARS_PER_TOKEN
from comparison.records import MethodResult
from comparison.summary import flip_line, result_rows


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta_cell(vs: dict[str, Any] | None) -> str:
    if vs is None:
        return "-"
    cell = f"{100 * vs['delta']:+.1f} [{100 * vs['ci_low']:+.1f}, {100 * vs['ci_high']:+.1f}]"
    if not vs["significant"]:
        return f"{cell} no measurable change"
    return f"{'better' if vs['delta'] > 0 else 'worse'}: {cell}"


def _p_cell(p_value: float) -> str:
    return "< 0.001" if p_value < 0.001 else f"{p_value:.3f}"


def _tokens_cell(row: dict[str, Any]) -> str:
    usage = row["usage_per_seed"]
    cell = f"task {usage['task']['total_tokens']:,} / reflection {usage['reflection']['total_tokens']:,}"
    reported = row.get("self_reported_usage_per_seed")
    if reported:  # the task role is TrainingFreeGRPO's rollouts plus its selection-set scoring
        cell += (f" (rollouts {reported['policy']['total_tokens']:,}, "
                 f"selection {reported['selection']['total_tokens']:,})")
    return cell


def _accuracy_cell(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"FAILED: {(row['error'] or '')[:120]}"
    cell = _fmt(row["score_mean_at_k"])
    return cell if row["score_seed_std"] is None else f"{cell} ± {row['score_seed_std']:.3f}"


def render_table(rows: Sequence[dict[str, Any]], k: int) -> str:
    """One row per method: accuracy, paired gain over none, cost by role, time, prompt tokens per call.

    Two prompt columns: the tokens the optimized program's rendered prompt adds, and the prompt tokens each
    held-out request actually sent. Only the second sees demos chosen per call (KNNFewShot). It is per request,
    not per program call: a call whose answer fails to parse sends a second request (DSPy's JSON fallback)."""
    score = "held-out accuracy" if k == 1 else f"held-out Mean@{k}"
    lines = [f"| method | {score} | Δ vs none, points [95% CI] | won/lost | p | optimization tokens by role "
             "| compile s | eval s | added prompt tokens/call | prompt tokens/request sent |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        vs = row.get("vs_none")
        name = row["method"] + (" (ablation)" if row["kind"] == "ablation" else "")
        added = row["added_prompt_tokens"]
        cells = [name, _accuracy_cell(row), _delta_cell(vs), f"{vs['wins']} / {vs['losses']}" if vs else "-",
                 _p_cell(vs["p_value"]) if vs else "-", _tokens_cell(row), _fmt(row["compile_seconds"], 0),
                 _fmt(row["eval_seconds"], 0), "-" if added is None else f"{added:+.0f}",
                 _fmt(row.get("eval_prompt_tokens_per_call"), 0)]
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines)


def markdown_table(results: Sequence[MethodResult], k: int) -> str:
    return render_table(result_rows(results), k)


def reused_evaluation_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The runs whose program sends the same held-out prompts as one evaluated before (`comparison.prompts`)."""
    reused = [f"{row['method']} seed {run['seed']} = {run['evaluation_of']}" for row in rows for run in row["runs"]
              if run.get("evaluation_of")]
    if not reused:
        return []
    return [f"Evaluations reused: {'; '.join(reused)}. Each of these programs sends the model the same prompts "
            "on every held-out problem as the one named after it, so under greedy decoding it gets the same "
            "answers; its held-out records are that evaluation's and its eval time is not counted.", ""]


def library_sections(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For each TrainingFreeGRPO run: the libraries scored on the selection set and the shipped lessons."""
    lines: list[str] = []
    for row in rows:
        for run in row["runs"]:
            details = run.get("details") or {}
            if run.get("error") or "library" not in details:
                continue
            seed = f", seed {run['seed']}" if len(row["runs"]) > 1 else ""
            candidates = [c for c in details.get("candidates", []) if c.get("score") is not None]
            if candidates:
                lines += [f"### {row['method']}{seed}: libraries scored on the selection set "
                          f"({details.get('selection_size')} problems)", "",
                          "| label | selection score | accepted | size | reason |", "|---|---|---|---|---|"]
                lines += [f"| {c['label']} | {_fmt(c['score'])} | {'yes' if c['accepted'] else 'no'} | {c['size']} "
                          f"| {(c.get('reason') or '').replace('|', '/')} |" for c in candidates]
                lines.append("")
            shipped = (f"best step {details['best_step']}, " if details.get("best_step") is not None else "")
            count = len(details["library"])
            lines += [f"{row['method']}{seed} shipped library ({shipped}{count} lesson{'' if count == 1 else 's'}):",
                      ""]
            lines += [f"{i}. {text}" for i, text in enumerate(details["library"], 1)] or ["(empty)"]
            lines.append("")
    return lines


def gate_check_sections(rows: Sequence[dict[str, Any]]) -> list[str]:
    """For each gated run checked on the held-out rows: each decision beside what those rows say."""
    lines: list[str] = []
    for row in rows:
        for run in row["runs"]:
            checks = run.get("gate_check") or []
            if not checks:
                continue
            seed = f", seed {run['seed']}" if len(row["runs"]) > 1 else ""
            lines += [f"### {row['method']}{seed}: the gate's decisions checked on the held-out rows", "",
                      "Each library the gate decided on, scored on the held-out rows against the library the gate "
                      "compared it with (the current library, or for an edit tried alone the library kept so far; "
                      "the initial library's scores are `none`'s). The paired test confirms a decision when it "
                      "finds a measurable change the same way (accepted: better, rejected: worse), contradicts it "
                      "when it finds one the other way, and cannot tell otherwise.", "",
                      "| candidate | selection score (net wins) | gate | compared with | held-out accuracy "
                      "| Δ vs compared [95% CI] | held-out rows |", "|---|---|---|---|---|---|---|"]
            for check in checks:
                net = "" if check["net_wins"] is None else f" ({check['net_wins']:+d})"
                held = {True: "confirm", False: "contradict", None: "cannot tell"}[check["held"]]
                held_out = (f"not scored: {check['skipped']}" if check["skipped"] else _fmt(check["held_out"]))
                base = "initial library" if check["compared_with_initial"] else f"`{check['compared_with']}`"
                lines.append(f"| {check['label']} | {_fmt(check['selection_score'])}{net} | "
                             f"{'accepted' if check['accepted'] else 'rejected'} | {base} | {held_out} | "
                             f"{_delta_cell(check['vs_compared'])} | {held} |")
            scored = [c for c in checks if c["vs_compared"] is not None]
            confirmed = sum(c["held"] is True for c in scored)
            contradicted = sum(c["held"] is False for c in scored)
            lines += ["", f"Of {len(scored)} decision(s) scored on the held-out rows, {confirmed} confirmed, "
                      f"{contradicted} contradicted, {len(scored) - confirmed - contradicted} without a measurable "
                      "change.", ""]
    return lines


def _seeds_phrase(budget: dict[str, Any]) -> str:
    more = budget.get("more_seeds_for")
    if budget["seeds"] == 1 or not more:
        return f"{budget['seeds']} compile seed(s)"
    return (f"{budget['seeds']} compile seeds for {', '.join(more)} (and none, to pair with), one (seed 0) for "
            "the other methods")


def _header_lines(report: dict[str, Any]) -> list[str]:
    budget = report["budget"]
    decoding = ("greedy (temperature 0, k = 1)" if budget["eval_temperature"] == 0 and budget["k"] == 1 else
                f"Mean@{budget['k']} at temperature {budget['eval_temperature']}")
    lines = [
        f"# Optimizer comparison: preset `{report['preset']}`",
        "",
        f"Command: `{report['command']}` (code at `{report.get('code') or 'unknown'}`)",
        "",
        *([] if report.get("complete", True) else ["**Partial results: the run was still going or was interrupted.**",
                                                    ""]),
        f"LM `{report['lm']}` with options `{json.dumps(report.get('lm_options') or {})}`; "
        f"{budget['num_threads']} threads; held-out evaluation {decoding}, the same for every method; "
        f"{_seeds_phrase(budget)}; {_wall_time_phrase(report)}; "
        f"load average at start {report['load_average'][0]}, at end {report['load_average'][1]}; "
        f"{throughput_sentence(report.get('throughput_at_start'))}",
        "",
    ]
    if report.get("runs_dir"):
        lines += [f"Run directory `{report['runs_dir']}`: rerunning the command skips every finished compile and "
                  "evaluation.", ""]
    return lines + [
        "Δ vs none is the method's held-out accuracy minus the unoptimized program's, on the same problems, in "
        "percentage points, with a paired bootstrap 95% interval; won/lost counts the problems the method gets "
        "right and none wrong, and the reverse; p is the exact two-sided sign test on them (exact McNemar). "
        "A row is a change only when both agree (the interval excludes zero and p < 0.05); otherwise it reads "
        "\"no measurable change\". Only the compile seeds that both the method and none evaluated are paired.",
        "",
        "Token columns count every request that reached the model during optimization, by role, per seed "
        "(held-out evaluation is metered apart). For TrainingFreeGRPO the task role is its rollouts plus its "
        "selection-set scoring, by its own accounting. 'Added prompt tokens' is the rendered prompt of the "
        f"optimized program minus the base program's, at {CHARS_PER_TOKEN} characters a token.",
        "",
    ]


def _wall_time_phrase(report: dict[str, Any]) -> str:
    """This run's wall time, and the compile and evaluation time of every record in the tables.

    A resumed run reuses records from earlier runs, so its own wall time alone can be seconds for a table that
    took days."""
    recorded = sum((run.get("compile_seconds") or 0) + (run.get("eval_seconds") or 0)
                   for data in report["tasks"].values() for row in data["results"] for run in row["runs"])
    return (f"started {report['started']}, wall time of this run {report['wall_seconds']:.0f} s; compile plus "
            f"evaluation time of every record in the tables, from this run and the earlier ones it resumed, "
            f"{recorded:,.0f} s")


def throughput_sentence(throughput: dict[str, Any] | None) -> str:
    """The model's speed when the run started: the machine's state, which this machine's speed varies with."""
    if not throughput:
        return "tokens/s at start not recorded."
    if throughput.get("skipped"):
        return f"tokens/s at start not measured ({throughput['skipped']})."
    return (f"at start the model generated {throughput['completion_tokens_per_second']:.1f} tokens/s and read "
            f"{throughput['prompt_tokens_per_second']:.1f} prompt tokens/s (one short greedy calibration call).")


def _older_code_lines(report: dict[str, Any]) -> list[str]:
    """Records resumed from a run at another commit: say so, since their code may differ."""
    older = sorted({f"{row['method']} (`{run['code']}`)" for data in report["tasks"].values()
                    for row in data["results"] for run in row["runs"]
                    if run.get("code") and run["code"] != report.get("code")})
    return [f"Compiled by an earlier run at another commit: {', '.join(older)}.", ""] if older else []


def write_markdown(report: dict[str, Any], path: Path) -> Path:
    budget = report["budget"]
    lines = _header_lines(report) + _older_code_lines(report)
    for task, data in report["tasks"].items():
        split = data["split"]
        lines += [f"## {task}", "",
                  f"train {split['train']} / selection {split['selection']} / held-out {split['test']} examples "
                  f"({split['source']}), disjoint, the same for every method.", ""]
        if budget.get("repeat_none"):
            lines += [flip_line(data.get("repeatability")), ""]
        lines += [render_table(data["results"], budget["k"]), "", *reused_evaluation_lines(data["results"]),
                  *library_sections(data["results"]),
                  *gate_check_sections(data["results"])]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
