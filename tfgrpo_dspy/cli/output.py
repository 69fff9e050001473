"""What the ``tfgrpo`` commands print: the step table, the selection's candidates, token usage, eval lines.

Lesson texts come from an LM or a file, so everything shown of them goes through `printable` first.
"""

from __future__ import annotations

import re

from tfgrpo_dspy.inference.evaluation import EvalReport
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.run.results import TrainingFreeGRPOResult

# Control characters (terminal escapes) and the invisible marks that reorder or split the text around them (bidi
# overrides and isolates, line separators); newlines are kept: they separate lines.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """Lesson texts come from an LM or a file: show control characters and bidi marks as visible escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                        else f"\\u{ord(m.group(0)):04x}", str(text))


def _print_library(library: ExperienceLibrary) -> None:
    print(printable(library.render()) or "(empty library)")


def _format_usage(result: TrainingFreeGRPOResult) -> str:
    lines = []
    for role, usage in (("policy", result.policy_usage), ("reflection", result.reflection_usage),
                        ("selection", result.selection_usage)):
        cost = f", ${usage.cost:.4f}" if usage.cost else ""
        lines.append(f"  {role:<10} {usage.calls} calls ({usage.cache_hits} cached), "
                     f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens{cost}")
    return "\n".join(lines)


def format_steps(result: TrainingFreeGRPOResult) -> str:
    header = ("step epoch  reward  informative  lessons dropped  edits  gate             library  ~tokens  "
              "policy_tok  reflect_tok  select_tok  time_s")
    rows = [header]
    for s in result.steps:
        rows.append(
            f"{s.step:>4} {s.epoch:>5}  {s.mean_reward:>6.3f}  {s.informative_groups:>5}/{s.groups:<5}  "
            f"{s.lessons_proposed:>7} {s.lessons_dropped:>7}  {s.ops_applied:>5}  {s.gate:<15}  {s.library_size:>7}  "
            f"{s.library_tokens:>7}  {s.policy_usage.total_tokens:>10}  {s.reflection_usage.total_tokens:>11}  "
            f"{s.selection_usage.total_tokens:>10}  {s.wall_time_s:>6.0f}"
        )
    return "\n".join(rows)


def format_candidates(result: TrainingFreeGRPOResult) -> str:
    """The libraries scored on the selection set, with each decision; empty without a selection set."""
    if not result.candidates:
        return ""
    rows = [f"selection set: {result.selection_size} examples; shipped: {result.shipped}"]
    for c in result.candidates:
        decision = "accepted" if c.accepted else "rejected"
        rows.append(f"  {c.label:<26} score {c.score:.3f}  {decision:<8}  {c.size:>3} lessons  {c.reason}")
    return "\n".join(rows)


def _eval_line(name: str, report: EvalReport) -> str:
    return (f"  {name:<16} Mean@{report.k} {100 * report.mean_at_k:5.1f}%   Pass@{report.k} "
            f"{100 * report.pass_at_k:5.1f}%   errors {report.program_errors + report.metric_errors}")
