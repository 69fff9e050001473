"""What the ``tfgrpo`` commands read from their arguments: the task's program, its examples, the output paths.

Each is checked here, before a command spends its first model call, and a problem is one clear ``ValueError``
naming the flag (`tfgrpo_dspy.cli.main` prints it as ``tfgrpo COMMAND: error: ...``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import dspy

from tfgrpo_dspy.tasks import Task, TaskData


def _make_program(task: Task, args: argparse.Namespace) -> dspy.Module:
    """The task's program with the command line's program options; an option the task lacks is an error."""
    options = {"max_iters": args.max_iters, "allowed_addresses": args.allow_addresses}
    options = {name: value for name, value in options.items() if value is not None}
    unsupported = sorted(set(options) - task.program_options)
    if unsupported:
        flags = ", ".join({"max_iters": "--max-iters", "allowed_addresses": "--allow-address"}[n] for n in unsupported)
        raise ValueError(f"{flags} does not apply to task {task.name!r}")
    return task.make_program(**options)


def load_examples(load: Any, data: TaskData, what: str) -> list[dspy.Example]:
    """A task's examples, or one clear line when the source is empty or unreadable."""
    try:
        examples = load(data)
    except (ValueError, TypeError, FileNotFoundError):
        raise
    except Exception as exc:  # the datasets library reports bad files with many exception types
        where = f"--source {data.source}" if data.source else "the task's default source"
        raise ValueError(f"{where}: cannot read the {what} examples ({type(exc).__name__}: {exc})") from None
    if not examples:
        where = f"--source {data.source}" if data.source else "the task's default source"
        raise ValueError(f"{where} holds no {what} examples")
    return examples


def _check_folder(path: str, flag: str) -> Path:
    """An output folder that exists or can be made: not a file, nor under one."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a folder: give a folder (it is made if missing)")
    _check_parents(folder, flag)
    return folder


def _check_file(path: str, flag: str) -> Path:
    """An output file that can be written: not a folder, nor under a file."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path} is a folder: give the name of the JSON file to write")
    _check_parents(target, flag)
    return target


def _check_parents(path: Path, flag: str) -> None:
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag} {path}: {parent} is a file, so nothing can be written under it")
            return
