"""The PNGs, drawn from a saved report alone: the comparison's paired gains with their intervals and score vs
tokens (`write_plot`), and lessons_study's conditions against none (`write_conditions_plot`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _plot_gains(axis: Any, task: str, data: dict[str, Any]) -> None:
    """Each method's paired gain over none with its 95% interval: horizontal bars around a zero line."""
    rows = [r for r in data["results"] if r.get("vs_none")]
    for y, row in enumerate(rows):
        vs = row["vs_none"]
        delta, low, high = 100 * vs["delta"], 100 * vs["ci_low"], 100 * vs["ci_high"]
        axis.errorbar(delta, y, xerr=[[delta - low], [high - delta]], fmt="s" if row["kind"] == "ablation" else "o",
                      capsize=4, color="tab:blue" if vs["significant"] else "tab:gray")
    axis.axvline(0, color="black", linewidth=1)
    axis.set_yticks(range(len(rows)), [r["method"] for r in rows])
    axis.set_ylim(-0.7, max(len(rows), 1) - 0.3)
    axis.invert_yaxis()
    axis.set_xlabel("held-out accuracy gain over none (points), paired bootstrap 95% CI; blue: a change by "
                   "both the interval and the sign test")
    axis.set_title(f"{task}: gain over none on the same {data['split']['test']} problems", fontsize=9)
    if not rows:
        axis.text(0.5, 0.5, "no paired results", transform=axis.transAxes, ha="center")
    axis.grid(True, axis="x", alpha=0.3)


def _plot_score_vs_tokens(axis: Any, task: str, data: dict[str, Any], k: int) -> None:
    """Held-out score against optimization tokens; bars: seed spread, or with one seed the SE over examples."""
    placed: list[tuple[float, float]] = []
    for result in data["results"]:
        score, tokens = result["score_mean_at_k"], result["optimization_tokens"]
        if score is None:
            continue
        spread = result["score_seed_std"] if result["score_seed_std"] is not None else result[
            "score_stderr_examples"]
        marker = "s" if result["kind"] == "ablation" else "o"
        axis.errorbar(tokens, score, yerr=spread or 0.0, fmt=marker, capsize=3, alpha=0.8)
        # Methods often tie on a small test set: stack the labels of nearby points instead of overprinting.
        near = sum(1 for t, s in placed if s == score and abs(math.log10(t + 1) - math.log10(tokens + 1)) < 0.3)
        placed.append((tokens, score))
        axis.annotate(result["method"], (tokens, score), textcoords="offset points", xytext=(5, 4 + 10 * near),
                      fontsize=8)
    axis.set_xscale("symlog", linthresh=1000)
    axis.set_xlabel("optimization tokens (task + optimizer LM)")
    axis.set_ylabel(f"held-out Mean@{k}")
    axis.set_title(f"{task}: bars = seed std, or SE over {data['split']['test']} examples with one seed",
                   fontsize=9)
    axis.grid(True, alpha=0.3)


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Per task, drawn from the saved report alone: paired gains over none (left), score vs tokens (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, tasks = report["budget"]["k"], report["tasks"]
    fig, axes = plt.subplots(max(len(tasks), 1), 2, figsize=(13, 4.8 * max(len(tasks), 1)), squeeze=False)
    for (gains, costs), (task, data) in zip(axes, tasks.items(), strict=False):
        _plot_gains(gains, task, data)
        _plot_score_vs_tokens(costs, task, data, k)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_conditions_plot(report: dict[str, Any], path: Path) -> None:
    """Per task, each condition's paired accuracy change against none with its 95% interval (gray: placebos and
    repeats of none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(7 * len(tasks), 4.8), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        rows = [r for r in task["rows"] if "vs_none" in r]
        for y, row in enumerate(rows):
            c = row["vs_none"]
            color = "tab:gray" if row["condition"].startswith(("placebo", "none")) else "tab:blue"
            axis.errorbar(100 * c["delta"], y, xerr=[[100 * (c["delta"] - c["ci_low"])],
                                                     [100 * (c["ci_high"] - c["delta"])]],
                          fmt="o", color=color, capsize=3)
        axis.axvline(0, color="black", linewidth=0.8)
        axis.set_yticks(range(len(rows)), [r["condition"] for r in rows], fontsize=8)
        axis.set_xlabel("accuracy change vs none (points, paired 95% CI)")
        axis.set_title(f"{task['name']} ({task['kind']}, {task['n']} problems)", fontsize=10)
        axis.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
