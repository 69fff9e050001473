"""The life of one run's child process: start it, wait for it up to the time limit, and leave nothing behind.

A contained run ends with its namespace (`.confinement.kill_namespace`); an unisolated one (``allow_unsafe``) has
its own process group, killed as a whole, so background children of the code do not outlive the run either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from .confinement import kill_namespace


def execute(command: list[str], cwd: Path, env: dict[str, str], stdout: BinaryIO, stderr: BinaryIO, report: int,
            contained: bool, timeout_seconds: float) -> tuple[int | None, bool, float]:
    """Run ``command`` to its end or the time limit: (exit code, None on time-out; timed out; seconds taken)."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        pass_fds=(report,),  # the number python_command named; the stage passes it down to the code
        start_new_session=True,  # its own process group, so one killpg reaches its children (unsafe mode)
    )
    try:
        exit_code: int | None = process.wait(timeout=timeout_seconds)
        timed_out = False
    except subprocess.TimeoutExpired:
        exit_code, timed_out = None, True
        if contained:
            kill_namespace(process)
    finally:
        # Unsafe mode: background children must not outlive the run (contained ones died with the namespace).
        _kill_group(process.pid)
        process.wait()
    return exit_code, timed_out, time.monotonic() - started


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
