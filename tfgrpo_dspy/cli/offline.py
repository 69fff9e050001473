"""The ``tfgrpo`` commands that call no model: show, diff, report and tasks.

They read library files, a run folder or the task table; the commands that call a model are in
`tfgrpo_dspy.cli` itself.
"""

from __future__ import annotations

import argparse

from tfgrpo_dspy.cli.output import printable
from tfgrpo_dspy.cli_args import TASKS
from tfgrpo_dspy.library.library import ExperienceLibrary


def cmd_show(args: argparse.Namespace) -> int:
    library = ExperienceLibrary.load(args.library)
    caps = f"max {library.max_experiences} lessons, {library.max_words} words each"
    print(f"{args.library}: {len(library)} lessons (~{library.approx_tokens()} tokens; {caps})")
    if library.routes:
        print(f"routed by {len(library.routes)} training inputs: a call sees the lessons of the nearest one "
              f"({sum(not r.lessons for r in library.routes)} of them route to no lesson)")
    for exp in library:
        where = f"added step {exp.added_step}, updated step {exp.updated_step}" if exp.added_step else ""
        sources = f"from examples {', '.join(map(str, exp.sources))}" if exp.sources else ""
        routed = sum(exp.id in r.lessons for r in library.routes)
        routes = f"routed from {routed} training inputs" if library.routes else ""
        details = "; ".join(part for part in (where, sources, routes, exp.record) if part)
        print(f"[{exp.label}] {printable(exp.text)}  ({details})")
    if args.audit:
        print("\naudit log:")
        for entry in library.audit_log:
            print(f"  step {entry.step}: {printable(entry.op):<6} {entry.status:<7} {printable(entry.detail)}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    print(printable(str(ExperienceLibrary.load(args.old).diff(ExperienceLibrary.load(args.new)))))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from tfgrpo_dspy.report import write_report

    html_path, png_path = write_report(args.run_dir, args.out)
    print(f"wrote {html_path} and {png_path}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    for name, task in sorted(TASKS.items()):
        print(f"{name:<14} {task.description}")
    return 0
