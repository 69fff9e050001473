"""The report's charts as one PNG, titled with the run's name and date; a chart with nothing to show becomes a
sentence on the page instead of an empty box.

Matplotlib's object API (no pyplot) keeps no global state and needs no display; it is imported inside
`draw_charts` so that importing this module stays cheap.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfgrpo_dspy.report.run import Run

ROLES = ("policy", "reflection", "verification", "selection")


@dataclass(frozen=True)
class Charts:
    png: bytes  # the charts that have data, under the title (only the title before any step)
    drawn: int  # how many charts the PNG holds
    notes: tuple[str, ...]  # why each chart left out is not drawn
    title: str  # the run's name and when it last wrote its state: a PNG shared alone still says whose it is


def tokens(step: dict[str, Any], role: str) -> int:
    return int((step.get(f"{role}_usage") or {}).get("total_tokens", 0))


def draw_charts(run: Run) -> Charts:
    """The charts that have data, one PNG; a note for each of the others."""
    from matplotlib.figure import Figure

    xs = list(range(1, len(run.steps) + 1))  # steps/NNNN is the NNNN-th record
    title = f"Training-Free GRPO run {run.name} · last written {run.written}"
    if not xs:
        figure = Figure(figsize=(8, 1.2), dpi=100)
        figure.suptitle(title, fontsize=12)
        figure.text(0.5, 0.35, "No completed steps yet: there is nothing to chart.", ha="center")
        return Charts(_png(figure), 0, ("No completed steps yet: there is nothing to chart.",), title)
    scored = [c for c in run.candidates if isinstance(c.get("score"), (int, float))]
    drawn: list[tuple[str, Callable[[Any], None]]] = [
        ("Mean reward per step", lambda axis: _plot_rewards(axis, xs, run.steps))]
    notes = []
    if not run.manifest.get("selection_size"):
        notes.append("No selection-score chart: the run had no selection set.")
    elif not scored:
        notes.append("No selection-score chart: no library besides the starting one was scored, since no step "
                     "changed the library.")
    else:
        drawn.append(("Selection score per candidate", lambda axis: _plot_candidates(axis, run, scored)))
    if any(s.get("library_size") for s in run.steps):
        drawn.append(("Library size and tokens per step", lambda axis: _plot_library(axis, xs, run.steps)))
    else:
        notes.append("No library chart: the library had no lesson after any step.")
    drawn.append(("Tokens by role per step", lambda axis: _plot_roles(axis, xs, run.steps)))

    columns = min(len(drawn), 2)
    rows = math.ceil(len(drawn) / columns)
    figure = Figure(figsize=(6 * columns, 3.8 * rows + 0.6), dpi=100)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    figure.suptitle(title, fontsize=12)
    figure.subplots_adjust(left=0.08, right=0.92, bottom=0.1, top=1 - 0.6 / figure.get_figheight(), wspace=0.35,
                           hspace=0.45)
    for axis, (chart_title, plot) in zip(axes, drawn, strict=False):
        axis.set(title=chart_title, xlabel="step", xticks=xs)
        plot(axis)
    for axis in axes[len(drawn):]:
        axis.set_visible(False)
    return Charts(_png(figure), len(drawn), tuple(notes), title)


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _plot_rewards(axis: Any, xs: list[int], steps: list[dict[str, Any]]) -> None:
    rewards = [s.get("mean_reward", 0) for s in steps]
    axis.plot(xs, rewards, marker="o")
    axis.set(ylim=_score_limits(rewards), ylabel="mean reward")


def _plot_candidates(axis: Any, run: Run, scored: list[dict[str, Any]]) -> None:
    """A step's candidates side by side around their step, green when accepted; the initial score as a line.
    Only the kinds of point that occur get a legend entry."""
    points = []
    for step_number, step in enumerate(run.steps, start=1):
        these = [c for c in step.get("candidates") or [] if c in scored]
        points += [(step_number + 0.12 * (i - (len(these) - 1) / 2), c["score"], bool(c.get("accepted")))
                   for i, c in enumerate(these)]
    for accepted, color, label in ((True, "tab:green", "accepted"), (False, "tab:red", "rejected")):
        chosen = [(x, y) for x, y, a in points if a == accepted]
        if chosen:
            axis.scatter([x for x, _ in chosen], [y for _, y in chosen], color=color, label=label)
    baseline = [] if run.initial is None else [run.initial.score]
    for score in baseline:
        axis.axhline(score, color="gray", linestyle="--", label="starting library")
    axis.set(ylim=_score_limits([y for _, y, _ in points] + baseline), ylabel="mean selection score")
    axis.legend(loc="best")


def _score_limits(values: list[float]) -> tuple[float, float]:
    """Scores usually lie in [0, 1]: show that whole range, so a flat line does not look like a swing."""
    return min([0.0, *values]) - 0.05, max([1.0, *values]) + 0.05


def _plot_library(axis: Any, xs: list[int], steps: list[dict[str, Any]]) -> None:
    """Lessons as bars (left axis), their tokens as a line (right axis), with headroom so the two do not overlap."""
    from matplotlib.ticker import MaxNLocator

    sizes, library_tokens = [s.get("library_size", 0) for s in steps], [s.get("library_tokens", 0) for s in steps]
    axis.bar(xs, sizes, color="tab:blue", alpha=0.6)
    axis.set(ylim=(0, max(sizes) * 1.4 + 1), ylabel="lessons (bars)")
    axis.yaxis.set_major_locator(MaxNLocator(integer=True))
    right = axis.twinx()
    right.plot(xs, library_tokens, color="tab:orange", marker="o")
    right.set(ylim=(0, max(library_tokens) * 1.15 + 1), ylabel="library tokens, approx. (line)")


def _plot_roles(axis: Any, xs: list[int], steps: list[dict[str, Any]]) -> None:
    """Stacked per step; the headroom above the tallest bar keeps the legend off the bars. Roles that spent
    nothing get no legend entry."""
    bottom = [0] * len(steps)
    for role in ROLES:
        values = [tokens(s, role) for s in steps]
        if any(values):
            axis.bar(xs, values, bottom=bottom, label=role)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axis.set(ylabel="tokens", ylim=(0, max(bottom) * 1.35 + 1))
    if any(bottom):
        axis.legend(loc="best")
