"""The top of the report: what the run learned and why, in sentences drawn from its records.

The pipeline, in order: groups with mixed rewards (and, with labels, groups that all failed) reach the
reflection, and sets of failed examples reach the induction; they propose lessons; the guard drops the
ones that copy the prompt or restate their example; the rest are verified by re-running training
examples (or, without verification, the update turns them into edits); the selection gate accepts or
rejects the edits; one library ships. The headline names the
first stage where the lessons ran out; the list below it gives each stage's numbers, and the held-out
result when the run has one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tfgrpo_dspy.report.run import Run
from tfgrpo_dspy.stats import PairedComparison


@dataclass(frozen=True)
class Funnel:
    """The run's counts at each stage, summed over its steps."""

    steps: int
    groups: int
    informative: int
    reflection_calls: int
    proposed: int
    dropped: int
    applied: int
    refused: int
    failed: int  # groups whose rollouts all failed
    reflected: int  # groups that reached the per-group reflection
    induced: int  # induction draws that gave a lesson the guard passed
    inductions: int
    checked: int  # candidates verified on training examples
    verified: int  # ... and kept
    decisions: tuple[dict[str, Any], ...]  # the candidates the gate decided on (not the "after step N" rows)

    @classmethod
    def of(cls, run: Run) -> Funnel:
        def total(key: str) -> int:
            return sum(int(s.get(key) or 0) for s in run.steps)

        return cls(len(run.steps), total("groups"), total("informative_groups"),
                   sum(int((s.get("reflection_usage") or {}).get("calls") or 0) for s in run.steps),
                   total("lessons_proposed"), total("lessons_dropped"), total("ops_applied"), total("ops_refused"),
                   total("failed_groups"), total("reflected_groups"), total("induced_lessons"), total("inductions"),
                   total("lessons_checked"), total("lessons_verified"),
                   tuple(c for c in run.candidates if not str(c.get("label", "")).startswith("after step")))


def headline(run: Run) -> str:
    """One sentence: how many lessons shipped, or the stage where they ran out."""
    f = Funnel.of(run)
    if not f.steps:
        return "No step has completed yet: nothing was learned so far."
    lessons = len(run.library) if run.library is not None else 0
    unfinished = "" if run.shipped is not None else "So far (the run has not finished): "
    if lessons and run.shipped is None:
        return f"{unfinished}{plural(lessons, 'lesson')} in the last completed step's library."
    if lessons and not run.shipped.startswith("the initial"):
        return f"{plural(lessons, 'lesson')} shipped: {run.shipped}."
    if f.informative == 0 and f.inductions == 0 and f.reflected == 0:
        why = "no group of rollouts had both better and worse answers, so the reflection had nothing to compare"
    elif f.checked and not f.verified:
        why = (f"verification kept none of the {plural(f.checked, 'candidate lesson')} (each re-run on training "
               "examples fixed too few or broke as many)")
    elif f.proposed == 0 and f.induced == 0:
        why = (f"the reflection proposed none ({plural(f.reflection_calls, 'reflection call')} on "
               f"{plural(f.informative, 'informative group')})")
    elif f.dropped >= f.proposed and f.induced == 0:
        which = "the one proposed lesson" if f.proposed == 1 else f"all {f.proposed} proposed lessons"
        why = f"the guard dropped {which}" + (f" ({_reasons(run)})" if run.dropped_because else "")
    elif f.applied == 0:
        why = "the update turned the proposals into no edit"
    elif f.decisions and not any(c.get("accepted") for c in f.decisions):
        why = "the selection gate rejected every edit"
    else:
        return f"{unfinished}The starting library shipped ({run.shipped}): no edited library scored better."
    return f"{unfinished}No lesson was learned: {why}."


def stages(run: Run) -> list[str]:
    """One line per stage of the pipeline, with its numbers (plain text; the page escapes it)."""
    f = Funnel.of(run)
    extraction = (run.manifest.get("settings") or {}).get("extraction", True)
    reached = (f"{f.reflected} reached the per-group reflection" if extraction else
               "the per-group reflection is off (extraction=False): lessons come from the induction")
    lines = [f"Groups: {f.informative} of {f.groups} had mixed rewards and {f.failed} all failed over "
             f"{plural(f.steps, 'step')}; {reached}."]
    if extraction:
        lines.append(f"Proposed: {plural(f.proposed, 'lesson')}; the guard dropped {f.dropped}"
                     + (f" ({_reasons(run)})." if run.dropped_because else "."))
    if f.inductions:
        lines.append(f"Induced: {f.induced} of {plural(f.inductions, 'draw')} over sets of failed examples gave a "
                     "lesson the guard passed.")
    if f.checked:
        lines.append(f"Verified: {f.verified} of {plural(f.checked, 'distinct candidate')} fixed more training "
                     "examples than they broke, by the margin (see Verification).")
    lines.append(f"Edits: {f.applied} applied to a candidate library, {f.refused} refused.")
    if not run.manifest.get("selection_size"):
        lines.append("Gate: none (no selection set): every step's edits were kept.")
    elif not f.decisions:
        lines.append("Gate: nothing to decide: no step changed the library.")
    for c in f.decisions:
        lines.append(f"Gate, {c.get('label')}: {'accepted' if c.get('accepted') else 'rejected'}, "
                     f"{c.get('reason') or 'no reason recorded'}.")
    if run.library is not None:
        lines.append(f"Shipped: {run.shipped or 'not yet (the run has not finished)'}, "
                     f"{plural(len(run.library), 'lesson')}.")
    held_out = held_out_line(run)
    if held_out:
        lines.append(held_out)
    return lines


def held_out_line(run: Run) -> str | None:
    """The demo's before / after verdict on its held-out examples, when the run directory has one."""
    record = run.held_out
    if record is None:
        return None
    comparison = _saved_comparison(record["comparison"])
    if comparison is None:
        return None  # a record without the comparison's fields: nothing to say
    line = (f"Held-out ({record.get('task', 'demo')}, {comparison.n} examples, greedy, paired, from demo.json): "
            f"{100 * comparison.base_mean:.1f}% without the library, {100 * comparison.other_mean:.1f}% with it: "
            f"{comparison.verdict()}.")
    majority = record.get("majority") or {}
    against = _saved_comparison(majority.get("comparison") or {})
    if against is not None:
        line += (f" Answering {majority['answer']!r} to every example (the most frequent training answer, no "
                 f"model): {100 * against.base_mean:.1f}%; with the library against it: {against.verdict()}.")
    return line


def _saved_comparison(saved: dict) -> PairedComparison | None:
    try:
        return PairedComparison(**{f.name: saved[f.name] for f in fields(PairedComparison) if f.name in saved})
    except TypeError:
        return None


def _reasons(run: Run) -> str:
    return ", ".join(f"{reason} ×{count}" for reason, count in run.dropped_because.most_common())


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an s unless the count is one: "1 lesson", "2 lessons"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
