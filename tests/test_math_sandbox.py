"""The Python sandbox contains hostile code, and the host process survives every case."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tfgrpo_dspy.kits.math.sandbox import PythonSandbox, probe_isolation

ISOLATION = probe_isolation()
needs_dropped_user = pytest.mark.skipif(ISOLATION.dropped_uid is None, reason="runs only as root with setpriv")
needs_namespaces = pytest.mark.skipif(not ISOLATION.pid_namespace, reason="unshare is not permitted here")


@pytest.fixture(scope="module")
def sandbox() -> PythonSandbox:
    return PythonSandbox(timeout_seconds=5, memory_bytes=512 << 20, max_output_chars=2000)


def test_runs_code_and_reports_output(sandbox: PythonSandbox) -> None:
    result = sandbox.run("import sympy\nprint(sympy.factorint(360))\nraise SystemExit(3)")
    assert result.stdout.strip() == "{2: 3, 3: 2, 5: 1}"
    assert result.exit_code == 3 and not result.timed_out
    assert "[exit code 3]" in result.for_agent()


def test_errors_come_back_as_text(sandbox: PythonSandbox) -> None:
    observation = sandbox("print(1/0)")
    assert "ZeroDivisionError" in observation


def test_infinite_loop_is_killed_on_time(sandbox: PythonSandbox) -> None:
    started = time.monotonic()
    result = PythonSandbox(timeout_seconds=1).run("while True:\n    pass")
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    assert "time limit" in result.for_agent()


def test_unbounded_allocation_fails_inside_the_child(sandbox: PythonSandbox) -> None:
    result = sandbox.run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))")
    assert result.exit_code != 0 and "MemoryError" in result.stderr


def test_environment_secrets_are_not_visible(sandbox: PythonSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFGRPO_TEST_SECRET", "hunter2-secret")
    code = (
        "import os\n"
        "print(sorted(os.environ))\n"
        "try:\n"
        "    print(open(f'/proc/{os.getppid()}/environ', 'rb').read())\n"
        "except OSError as err:\n"
        "    print('denied', type(err).__name__)\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0
    assert "hunter2-secret" not in result.stdout + result.stderr
    assert "TFGRPO_TEST_SECRET" not in result.stdout


def test_socket_creation_is_refused(sandbox: PythonSandbox) -> None:
    result = sandbox.run("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=2)")
    assert result.exit_code != 0
    assert "network access is disabled" in result.stderr


@needs_namespaces
def test_raw_sockets_made_past_the_hook_have_no_network(sandbox: PythonSandbox) -> None:
    code = (
        "import ctypes, socket\n"
        "fd = ctypes.CDLL(None).socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
        "s = socket.socket(fileno=fd)\n"
        "s.settimeout(2)\n"
        "s.connect(('1.1.1.1', 80))\n"
    )
    result = sandbox.run(code)
    assert result.exit_code != 0 and "Network is unreachable" in result.stderr


@needs_dropped_user
def test_writes_outside_its_directory_are_refused(sandbox: PythonSandbox, tmp_path: Path) -> None:
    target_dir = tmp_path / "host"
    target_dir.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(target_dir, 0o755)  # readable by everyone: only ownership protects it
    existing = target_dir / "keep.txt"
    existing.write_text("original")
    code = (
        f"open({str(target_dir / 'new.txt')!r}, 'w').write('x')\n"
    )
    result = sandbox.run(code)
    assert "PermissionError" in result.stderr
    overwrite = sandbox.run(f"open({str(existing)!r}, 'w').write('changed')")
    assert "PermissionError" in overwrite.stderr
    assert not (target_dir / "new.txt").exists()
    assert existing.read_text() == "original"


def test_working_directory_is_private_and_removed(sandbox: PythonSandbox) -> None:
    result = sandbox.run("import os\nopen('scratch.txt', 'w').write('ok')\nprint(os.getcwd())")
    workdir = Path(result.stdout.strip())
    assert workdir.name == "work"
    assert not workdir.exists() and not workdir.parent.exists()


@needs_dropped_user
def test_fork_bomb_is_contained_and_leaves_no_process(sandbox: PythonSandbox) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = PythonSandbox(timeout_seconds=2, max_processes=32).run(code)
    assert result.timed_out
    time.sleep(0.5)
    assert _sandbox_processes() == []


@needs_namespaces
def test_escaped_background_child_does_not_outlive_the_run(sandbox: PythonSandbox) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(60)\n"
        "print(os.getpid())\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0
    time.sleep(0.5)
    assert _sandbox_processes() == []


def test_output_is_truncated(sandbox: PythonSandbox) -> None:
    result = sandbox.run("print('x' * 100_000)")
    assert result.truncated
    assert len(result.stdout) < 2200 and "output truncated" in result.stdout


def test_host_survives_and_sandbox_still_works(sandbox: PythonSandbox) -> None:
    assert sandbox.run("print(6 * 7)").stdout.strip() == "42"


def test_bad_configuration_is_rejected() -> None:
    with pytest.raises(ValueError, match="timeout_seconds"):
        PythonSandbox(timeout_seconds=0)
    with pytest.raises(ValueError, match="memory_bytes"):
        PythonSandbox(memory_bytes=-1)
    with pytest.raises(TypeError, match="code"):
        PythonSandbox().run(b"print(1)")  # type: ignore[arg-type]


def _sandbox_processes() -> list[str]:
    """Live processes started from the sandbox bootstrap (its source is on their command line)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"_refuse_network" in cmdline:
            found.append(pid)
    return found
