"""The Python sandbox contains hostile code, and the host process survives every case.

Every probe runs twice when the suite runs as root: once as root, and once more as the unprivileged user
``nobody`` (`test_whole_file_passes_as_an_unprivileged_user` re-runs this file under ``setpriv``), because the
two take different paths into the namespaces.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tfgrpo_dspy.kits.math.sandbox.runner as sandbox_module
from tfgrpo_dspy.kits.math.sandbox import Isolation, PythonSandbox, SandboxUnavailable, probe_isolation

ISOLATION = probe_isolation()
needs_namespaces = pytest.mark.skipif(not ISOLATION.namespaces, reason=f"no namespaces here: {ISOLATION.reason}")
# The tool's plain behaviour is tested on every machine; where it cannot isolate, it has to be opted in.
UNSAFE_IF_NEEDED = not ISOLATION.namespaces
NOBODY = 65534
# Set by the unprivileged re-run: HOME is then a throwaway directory with a planted ~/.bashrc the probes may attack.
PLANTED_HOME_ENV = "TFGRPO_TEST_PLANTED_HOME"
REPO = Path(__file__).resolve().parents[1]
# The folder that holds the sandbox package: with it on sys.path, "import sandbox" loads the sandbox alone.
SANDBOX_HOME = Path(sandbox_module.__file__).parents[1]


@pytest.fixture(scope="module")
def sandbox() -> PythonSandbox:
    # 20 s, not 5: importing sympy alone took over 5 s while a model job loaded both cores.
    return PythonSandbox(
        timeout_seconds=20, memory_bytes=512 << 20, max_output_chars=2000, allow_unsafe=UNSAFE_IF_NEEDED
    )


@pytest.fixture
def marker() -> str:
    """A unique word to find the probe's own processes and files on the host (other sandboxes may be running)."""
    return f"tfgrpo-probe-{uuid.uuid4().hex}"


# ---------------------------------------------------------------- it still works as a tool


@needs_namespaces
def test_namespaces_are_used_for_every_user() -> None:
    assert ISOLATION.namespaces and ISOLATION.pid_namespace and ISOLATION.network_namespace
    assert ISOLATION.memory_capped, ISOLATION.reason
    assert ISOLATION.dropped_uid == (NOBODY if os.geteuid() == 0 else None)


def test_runs_code_and_reports_output(sandbox: PythonSandbox) -> None:
    result = sandbox.run("import sympy\nprint(sympy.factorint(360))\nraise SystemExit(3)")
    assert result.stdout.strip() == "{2: 3, 3: 2, 5: 1}"
    assert result.exit_code == 3 and not result.timed_out
    assert "[exit code 3]" in result.for_agent()


def test_errors_come_back_as_text(sandbox: PythonSandbox) -> None:
    observation = sandbox("print(1/0)")
    assert "ZeroDivisionError" in observation


@needs_namespaces
def test_code_may_use_its_working_directory_and_tmp(sandbox: PythonSandbox) -> None:
    code = (
        "import os, tempfile\n"
        "open('scratch.txt', 'w').write('a')\n"
        "with tempfile.NamedTemporaryFile('w') as f:\n"
        "    f.write('b')\n"
        "print(open('scratch.txt').read(), os.getcwd())\n"
    )
    assert sandbox.run(code).stdout.split() == ["a", "/sandbox"]


def test_infinite_loop_is_killed_on_time() -> None:
    started = time.monotonic()
    result = PythonSandbox(timeout_seconds=1, allow_unsafe=UNSAFE_IF_NEEDED).run("while True:\n    pass")
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 5
    assert "time limit" in result.for_agent()


def _memory_limit(sandbox: PythonSandbox) -> str:
    """How `SandboxResult.out_of_memory` names the limit of ``sandbox`` here."""
    share = f"{sandbox.process_memory_bytes >> 20} MiB"
    if ISOLATION.namespaces and ISOLATION.memory_capped:
        return (f"{sandbox.memory_bytes >> 20} MiB for the whole sandbox, {share} for each of at most "
                f"{sandbox.max_processes} processes")
    return f"{share} for each process"


def test_unbounded_allocation_stops_the_run_with_one_line_not_a_traceback() -> None:
    capped = PythonSandbox(timeout_seconds=15, memory_bytes=256 << 20, allow_unsafe=UNSAFE_IF_NEEDED)
    result = capped.run("print('before')\nchunks = []\nwhile True:\n    chunks.append(bytearray(50 << 20))")
    line = f"[stopped: out of memory at main.py line 4 (MemoryError); the limit is {_memory_limit(capped)}]"
    assert (result.stdout, result.stderr, result.exit_code, result.out_of_memory) == ("before\n", "", 1, line)
    assert result.for_agent() == f"stdout:\nbefore\n\n{line}" and not result.ok


def test_an_mmap_over_the_limit_is_out_of_memory_too(sandbox: PythonSandbox) -> None:
    result = sandbox.run("import mmap\nmmap.mmap(-1, 1 << 30)")  # OSError ENOMEM, not MemoryError
    assert result.stderr == "" and result.for_agent() == (
        f"[stopped: out of memory at main.py line 2 (OSError); the limit is {_memory_limit(sandbox)}]")


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
    with pytest.raises(ValueError, match="scratch_bytes"):
        PythonSandbox(memory_bytes=64 << 20, scratch_bytes=128 << 20)
    with pytest.raises(TypeError, match="code"):
        PythonSandbox().run(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"for each of max_processes=64, under the 64 MiB.*lower max_processes"):
        PythonSandbox(max_processes=64)  # 64 x 1 GiB was the old default: now they share one GiB
    with pytest.raises(ValueError, match="max_processes must be a positive int"):
        PythonSandbox(max_processes=0)


def test_memory_bytes_is_split_between_processes() -> None:
    whole = PythonSandbox(memory_bytes=1 << 30)
    assert whole.max_processes == 4 and whole.scratch_bytes == 64 << 20
    assert whole.max_processes * whole.process_memory_bytes + whole.scratch_bytes < whole.memory_bytes
    small = PythonSandbox(memory_bytes=256 << 20)
    assert small.max_processes == 2 and small.process_memory_bytes >= 64 << 20  # fewer processes, not too little


# ---------------------------------------------------------------- no namespaces: refuse unless opted in


def test_without_namespaces_it_refuses_unless_unsafe_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    unavailable = Isolation(namespaces=False, reason="unshare: unshare failed: Operation not permitted")
    monkeypatch.setattr(sandbox_module, "probe_isolation", lambda: unavailable)
    monkeypatch.delenv(sandbox_module.UNSAFE_ENV_VAR, raising=False)
    with pytest.raises(SandboxUnavailable, match="Operation not permitted.*allow_unsafe=True") as refused:
        PythonSandbox().run("print(1)")
    assert "\n" not in str(refused.value)
    assert PythonSandbox(allow_unsafe=True).run("print(6 * 7)").stdout.strip() == "42"
    monkeypatch.setenv(sandbox_module.UNSAFE_ENV_VAR, "1")
    assert PythonSandbox().run("print(7)").stdout.strip() == "7"


_REFUSAL_SCRIPT = """
import sys
sys.path.insert(0, {directory!r})
import sandbox  # light: the sandbox alone, not tfgrpo_dspy
print(sandbox.probe_isolation().namespaces)
try:
    sandbox.PythonSandbox(allow_unsafe=False).run("print('ran')")
except sandbox.SandboxUnavailable as err:
    print("refused:", err)
print(sandbox.PythonSandbox(allow_unsafe=True).run("print('ran unisolated')").stdout.strip())
"""


@needs_namespaces
def test_a_kernel_without_namespaces_gets_a_refusal_not_a_silent_fallback() -> None:
    # A user namespace that may create no further ones stands in for such a kernel (or a locked-down container).
    script = _REFUSAL_SCRIPT.format(directory=str(SANDBOX_HOME))
    no_namespaces = ["sh", "-c", 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "-"]
    command = ["unshare", "--user", "--map-root-user", "--", *no_namespaces, sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
    lines = done.stdout.splitlines()
    assert lines[0] == "False", done.stdout + done.stderr
    assert lines[1].startswith("refused: cannot isolate Python code on this machine (")
    assert "allow_unsafe=True" in lines[1]
    assert lines[2] == "ran unisolated"


# ---------------------------------------------------------------- probes: files of the host


def _host_home() -> Path:
    """The home the probes attack: the real one only when it is a planted throwaway (the unprivileged re-run)."""
    if os.environ.get(PLANTED_HOME_ENV) == "1":
        return Path.home()
    home = Path(tempfile.mkdtemp(prefix="tfgrpo-home-"))
    (home / ".bashrc").write_text("# planted by the test\n")
    return home


@needs_namespaces
def test_host_home_cannot_be_read_or_written(sandbox: PythonSandbox) -> None:
    home = _host_home()
    bashrc = home / ".bashrc"
    before = bashrc.read_text()
    code = (
        f"path = {str(bashrc)!r}\n"
        "for mode in ('r', 'a'):\n"
        "    try:\n"
        "        with open(path, mode) as handle:\n"
        "            handle.read() if mode == 'r' else handle.write('echo pwned\\n')\n"
        "        print(mode, 'ESCAPED')\n"
        "    except OSError as err:\n"
        "        print(mode, 'blocked', type(err).__name__)\n"
        "import os\n"
        f"print('planted home visible:', os.path.exists({str(home)!r}))\n"
        f"print('real ~/.bashrc visible:', os.path.exists({str(Path.home() / '.bashrc')!r}))\n"
    )
    try:
        result = sandbox.run(code)
    finally:
        after = bashrc.read_text()
        if os.environ.get(PLANTED_HOME_ENV) != "1":
            shutil.rmtree(home)
    assert "ESCAPED" not in result.stdout and result.stdout.count("blocked") == 2, result
    assert "planted home visible: False" in result.stdout and "real ~/.bashrc visible: False" in result.stdout
    assert after == before


@needs_namespaces
def test_host_filesystem_is_read_only_and_cannot_be_remounted(sandbox: PythonSandbox) -> None:
    target = Path(sys.prefix) / f"probe-{uuid.uuid4().hex}"
    code = (
        "import subprocess\n"
        "try:\n"
        f"    open({str(target)!r}, 'w').write('x')\n"
        "    print('ESCAPED')\n"
        "except OSError as err:\n"
        "    print('write blocked', err.strerror)\n"
        f"done = subprocess.run(['mount', '-o', 'remount,rw', {sys.prefix!r}], capture_output=True, text=True)\n"
        "print('remount exit', done.returncode)\n"
    )
    result = sandbox.run(code)
    assert "write blocked Read-only file system" in result.stdout, result
    assert "remount exit 0" not in result.stdout and "remount exit" in result.stdout
    assert not target.exists()


@needs_namespaces
def test_files_in_tmp_dev_shm_and_workdir_are_gone_after_the_call(sandbox: PythonSandbox, marker: str) -> None:
    places = [f"/tmp/{marker}", f"/dev/shm/{marker}", f"/sandbox/{marker}", f"/var/tmp/{marker}"]
    write = "".join(
        f"try:\n    open({place!r}, 'w').write('x')\nexcept OSError as err:\n    print('refused', {place!r})\n"
        for place in places
    )
    sandbox.run(write)
    assert not [place for place in places if os.path.exists(place)]  # nothing reached the host
    again = sandbox.run(f"import os\nprint([p for p in {places!r} if os.path.exists(p)])")
    assert again.stdout.strip() == "[]"  # nor the next run


@needs_namespaces
def test_dev_shm_cannot_hold_more_than_the_scratch_cap() -> None:
    capped = PythonSandbox(timeout_seconds=20, memory_bytes=256 << 20, scratch_bytes=32 << 20)
    code = (
        "written = 0\n"
        "try:\n"
        "    for i in range(40):\n"  # 40 x 8 MiB = 320 MiB, more than memory_bytes
        "        with open(f'/dev/shm/fill{i}', 'wb') as handle:\n"
        "            handle.write(bytes(8 << 20))\n"
        "        written += 8 << 20\n"
        "except OSError as err:\n"
        "    print('stopped:', err.strerror)\n"
        "print('written MiB', written >> 20)\n"
    )
    result = capped.run(code)
    assert "stopped: No space left on device" in result.stdout, result
    written = int(result.stdout.split("written MiB")[1])
    assert written <= 32


# ---------------------------------------------------------------- probes: network


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1; yields its port and what every accepted connection sent."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                received.append(conn.recv(100) or b"(connected)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join(timeout=2)
    server.close()


_NETWORK_PROBE = """
import ctypes, socket, _socket, struct, subprocess, sys
port = {port}

def attempt(name, connect):
    try:
        connect()
        print(name, 'CONNECTED')
    except Exception as err:
        print(name, 'blocked:', type(err).__name__, ' '.join(str(err).split())[-160:])

def raw_libc():  # a socket made in C, past the audit hook
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    address = struct.pack('!HH4s8x', 0, port, socket.inet_aton('127.0.0.1'))
    address = struct.pack('=H', socket.AF_INET) + address[2:]
    if libc.connect(fd, address, len(address)) != 0:
        raise OSError(ctypes.get_errno(), 'libc connect failed')

def run(*command):
    done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise OSError(done.stderr)

attempt('socket', lambda: socket.create_connection(('127.0.0.1', port), timeout=2))
attempt('_socket(-1)', lambda: _socket.socket(-1).connect(('127.0.0.1', port)))
attempt('libc', raw_libc)
connect = f'import socket; socket.create_connection(("127.0.0.1", {{port}}), 2)'
attempt('python-subprocess', lambda: run(sys.executable, '-c', connect))
attempt('curl', lambda: run('curl', '-sS', '-m', '2', f'http://127.0.0.1:{{port}}/'))
"""


@needs_namespaces
def test_loopback_server_is_unreachable_by_every_route(
    sandbox: PythonSandbox, loopback_server: tuple[int, list[bytes]]
) -> None:
    port, received = loopback_server
    with socket.create_connection(("127.0.0.1", port), timeout=2) as control:  # the server does answer the host
        control.sendall(b"host")
    result = sandbox.run(_NETWORK_PROBE.format(port=port))
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert set(lines) == {"socket", "_socket(-1)", "libc", "python-subprocess", "curl"}, result
    assert all(outcome.startswith("blocked") for outcome in lines.values()), result
    assert "network access is disabled" in lines["socket"] and "network access is disabled" in lines["_socket(-1)"]
    assert "unreachable" in lines["python-subprocess"]  # no network at all, not just a hook
    time.sleep(0.2)
    assert received == [b"host"]


@needs_namespaces
def test_host_unix_sockets_cannot_be_reached(sandbox: PythonSandbox, tmp_path: Path) -> None:
    socket_dir = Path(tempfile.mkdtemp(prefix="tfgrpo-sock-"))
    path = socket_dir / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    os.chmod(socket_dir, 0o755)
    os.chmod(path, 0o777)
    code = (
        "import os, socket\n"
        "client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "try:\n"
        f"    client.connect({str(path)!r})\n"
        "    print('CONNECTED')\n"
        "except OSError as err:\n"
        "    print('blocked', type(err).__name__)\n"
        "print('run dirs:', [d for d in ('/run', '/var/run', '/var') if os.path.exists(d)])\n"
    )
    try:
        result = sandbox.run(code)
    finally:
        server.close()
        shutil.rmtree(socket_dir)
    assert "blocked FileNotFoundError" in result.stdout, result
    assert "run dirs: []" in result.stdout


# ---------------------------------------------------------------- probes: processes and privileges


def _processes_with(word: str) -> list[int]:
    """Live host processes whose command line contains ``word``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if word.encode() in cmdline and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def _spawn_marked(marker: str, body: str) -> str:
    """Code that forks a detached child (new session) which runs ``body`` with ``marker`` on its command line."""
    return (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', {body!r}, {marker!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
    )


def _become_marked(marker: str, body: str) -> str:
    """Code that replaces the sandboxed interpreter by one running ``body`` with ``marker`` on its command line."""
    return f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {body!r}, {marker!r}])\n"


@needs_namespaces
def test_no_process_outlives_the_call(sandbox: PythonSandbox, marker: str) -> None:
    result = sandbox.run(_spawn_marked(marker, "import time; time.sleep(60)") + "print('parent done')")
    assert result.stdout.strip() == "parent done", result
    assert _processes_with(marker) == []  # right away: the call returns once the namespace is gone


@needs_namespaces
def test_no_process_outlives_a_timeout(marker: str) -> None:
    code = _spawn_marked(marker, "import time; time.sleep(60)") + "while True:\n    pass\n"
    result = PythonSandbox(timeout_seconds=2).run(code)
    assert result.timed_out
    assert _processes_with(marker) == []


@needs_namespaces
def test_sandbox_ends_even_when_its_host_process_dies(marker: str, tmp_path: Path) -> None:
    sleeper = _become_marked(marker, "import time; time.sleep(60)")
    host_code = (
        f"import sys\nsys.path.insert(0, {str(SANDBOX_HOME)!r})\n"  # light: no package import
        f"import sandbox\nsandbox.PythonSandbox(timeout_seconds=1).run({sleeper!r})\n"
    )
    host = subprocess.Popen([sys.executable, "-c", host_code], env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert _wait_until(lambda: _processes_with(marker), seconds=30)
    finally:
        host.kill()  # the caller dies mid-call; nobody is left to kill the sandbox
        host.wait()
    assert _wait_until(lambda: not _processes_with(marker), seconds=15)  # its own last-resort limit: 1 s + 5 s


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@needs_namespaces
def test_fork_bomb_is_contained_and_leaves_no_process(marker: str) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = PythonSandbox(timeout_seconds=2, max_processes=8).run(_become_marked(marker, bomb))
    assert result.timed_out
    assert _processes_with(marker) == []


@needs_namespaces
def test_host_command_lines_are_invisible(sandbox: PythonSandbox, marker: str) -> None:
    secret = f"--api-key=sk-{marker}"
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", secret])
    code = (
        "import os\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "lines = []\n"
        "for pid in pids:\n"
        "    try:\n"
        "        lines.append(open(f'/proc/{pid}/cmdline', 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n"
        "        pass\n"
        "print(len(pids), 'processes')\n"
        "print('\\n'.join(lines))\n"
    )
    try:
        result = sandbox.run(code)
    finally:
        host.kill()
        host.wait()
    assert "sk-tfgrpo-probe" not in result.stdout, result
    assert int(result.stdout.split()[0]) <= 3  # its own shell, python, and nothing of the host


@needs_namespaces
def test_environment_secrets_are_not_visible(sandbox: PythonSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFGRPO_TEST_SECRET", "hunter2-secret")
    code = (
        "import os\n"
        "print(sorted(os.environ))\n"
        "for pid in (os.getppid(), 1):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as err:\n"
        "        print('denied', type(err).__name__)\n"
    )
    result = sandbox.run(code)
    assert result.exit_code == 0
    assert "hunter2-secret" not in result.stdout + result.stderr
    assert "TFGRPO_TEST_SECRET" not in result.stdout


@needs_namespaces
def test_no_privileges_and_no_nested_user_namespace(sandbox: PythonSandbox) -> None:
    code = (
        "import ctypes, subprocess\n"
        "status = dict(line.split(':\\t') for line in open('/proc/self/status').read().splitlines())\n"
        "print('NoNewPrivs', status['NoNewPrivs'].strip(), 'CapEff', status['CapEff'].strip())\n"
        "for command in (['unshare', '--user', 'true'], ['unshare', '--map-root-user', 'true']):\n"
        "    done = subprocess.run(command, capture_output=True, text=True)\n"
        "    print('exit', done.returncode, done.stderr.strip())\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare(CLONE_NEWUSER)', libc.unshare(0x10000000), ctypes.get_errno())\n"
    )
    result = sandbox.run(code)
    assert "NoNewPrivs 1 CapEff 0000000000000000" in result.stdout, result
    assert result.stdout.count("exit 1 ") == 2
    assert "unshare(CLONE_NEWUSER) -1" in result.stdout


@needs_namespaces
def test_system_v_shared_memory_is_refused_and_never_reaches_the_host(sandbox: PythonSandbox) -> None:
    key = int(uuid.uuid4().hex[:7], 16)
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"print('shmget', libc.shmget({key}, 1 << 20, 0o1000 | 0o600), ctypes.get_errno())\n"  # IPC_CREAT
        f"print('msgget', libc.msgget({key}, 0o1000 | 0o600), ctypes.get_errno())\n"
    )
    result = sandbox.run(code)
    # Segments and queues outlive the processes that made them: memory no RLIMIT_AS counts.
    assert "shmget -1 1" in result.stdout and "msgget -1 1" in result.stdout, result  # EPERM
    host_segments = subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout
    assert f"0x{key:08x}" not in host_segments


# ---------------------------------------------------------------- probes: one memory cap, no keyring


_HOLD_MEMORY = """
import os, sys
processes = {processes}

def fill():  # touch 1 MiB chunks until the limit: what this process really holds
    held = []
    try:
        while True:
            held.append(b"x" * (1 << 20))
    except MemoryError:
        pass
    return held

release_read, release_write = os.pipe()
report_read, report_write = os.pipe()
for _ in range(processes - 1):
    if os.fork() == 0:
        held = fill()
        os.write(report_write, b"%d " % len(held))
        os.read(release_read, 1)  # hold it until the parent has counted everyone
        os._exit(0)
reports = b""
while reports.count(b" ") < processes - 1:
    reports += os.read(report_read, 64)
counts = [int(count) for count in reports.split()]
counts.append(len(fill()))
print("held MiB", *counts, "total", sum(counts))
"""


@needs_namespaces
def test_all_processes_together_stay_under_memory_bytes() -> None:
    # The probe: 3 processes held 209 MiB each (627 MiB) under memory_bytes=384 MiB.
    capped = PythonSandbox(timeout_seconds=30, memory_bytes=384 << 20, max_processes=3)
    result = capped.run(_HOLD_MEMORY.format(processes=3))
    words = result.stdout.split()
    assert words[:2] == ["held", "MiB"] and len(words) == 7, result
    assert all(int(count) > 0 for count in words[2:5])  # each process did hold memory at once
    assert int(words[-1]) < 384, result
    assert result.out_of_memory == "" and result.ok  # the code caught its MemoryErrors: nothing was stopped


_TOUCH_200_MIB = """
import os

def touch():
    held = [b"x" * (1 << 20) for _ in range(200)]  # 200 MiB, really touched
    print("held", len(held), "MiB")

children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        touch()
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
touch()
"""


@needs_namespaces
def test_three_processes_stopped_by_the_whole_sandbox_cap_say_so_in_one_line() -> None:
    # The probe: 3 processes touching 200 MiB each under memory_bytes=384 MiB (as root, and as nobody in
    # test_whole_file_passes_as_an_unprivileged_user).
    capped = PythonSandbox(timeout_seconds=30, memory_bytes=384 << 20, max_processes=3)
    result = capped.run(_TOUCH_200_MIB)
    line = ("[stopped: out of memory in 3 processes, the first at main.py line 5 (MemoryError); the limit is "
            f"384 MiB for the whole sandbox, {capped.process_memory_bytes >> 20} MiB for each of at most 3 processes]")
    assert (result.stdout, result.stderr, result.exit_code, result.timed_out) == ("", "", 1, False), result
    assert result.out_of_memory == line and result.for_agent() == line


def test_a_forked_process_stopped_by_the_limit_is_reported_though_main_ends_well(sandbox: PythonSandbox) -> None:
    code = ("import os\npid = os.fork()\nif pid == 0:\n    bytearray(1 << 30)\n"
            "os.waitpid(pid, 0)\nprint('main done')\n")
    result = sandbox.run(code)
    line = f"[stopped: out of memory at main.py line 4 (MemoryError); the limit is {_memory_limit(sandbox)}]"
    assert (result.stdout, result.stderr, result.exit_code) == ("main done\n", "", 0), result
    assert result.for_agent() == f"stdout:\nmain done\n\n{line}"


def test_code_that_closes_the_report_descriptor_gets_the_line_in_its_stderr_and_no_file_is_written(
    sandbox: PythonSandbox,
) -> None:
    # Every descriptor number the code may open is taken by a file of its own: the report must not land in one.
    code = (
        "import os\n"
        "os.closerange(3, 1 << 16)\n"
        "names = []\n"
        "try:\n"
        "    while True:\n"
        "        os.open(f'file{len(names)}', os.O_CREAT | os.O_WRONLY)\n"
        "        names.append(f'file{len(names)}')\n"
        "except OSError:\n"
        "    pass\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    bytearray(1 << 30)\n"
        "os.waitpid(pid, 0)\n"
        "print(len(names), 'files', sum(os.path.getsize(name) for name in names), 'bytes')\n"
    )
    result = sandbox.run(code)
    assert result.stdout == "61 files 0 bytes\n", result  # RLIMIT_NOFILE 64, less stdin, stdout and stderr
    assert result.stderr == "[stopped: out of memory at main.py line 12 (MemoryError)]\n"
    assert result.out_of_memory == "" and result.exit_code == 0


@needs_namespaces
def test_memory_outside_the_limits_is_refused(sandbox: PythonSandbox) -> None:
    code = (
        "import fcntl, os, socket\n"
        "def attempt(name, call):\n"
        "    try:\n"
        "        call()\n"
        "        print(name, 'ALLOWED')\n"
        "    except OSError as err:\n"
        "        print(name, 'refused', err.errno)\n"
        "attempt('memfd', lambda: os.memfd_create('ram'))\n"
        "read_end, _ = os.pipe()\n"
        "attempt('pipe-size', lambda: fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, 1 << 20))\n"
        "left, _ = socket.socketpair()\n"
        "for option in ('SO_SNDBUF', 'SO_RCVBUF'):\n"
        "    attempt(option, lambda: left.setsockopt(socket.SOL_SOCKET, getattr(socket, option), 1 << 22))\n"
        "left.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"  # other options still work
        "print('other options work')\n"
    )
    result = sandbox.run(code)
    lines = result.stdout.splitlines()
    assert lines[:4] == [f"{name} refused 1" for name in ("memfd", "pipe-size", "SO_SNDBUF", "SO_RCVBUF")], result
    assert lines[4] == "other options work"


def _keyctl() -> tuple[object, dict[str, int]]:
    """libc and the keyring call numbers of this architecture (libseccomp knows them; libc has no wrapper)."""
    seccomp = ctypes.CDLL("libseccomp.so.2")
    numbers = {name: seccomp.seccomp_syscall_resolve_name(name.encode()) for name in ("keyctl", "add_key")}
    return ctypes.CDLL(None, use_errno=True), numbers


_KEYRING_PROBE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
keyctl, add_key = {keyctl}, {add_key}
buffer = ctypes.create_string_buffer(256)
calls = {{
    "session-id": (keyctl, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID @s
    "read-secret": (keyctl, 11, {secret}, buffer, 256),  # KEYCTL_READ, by the serial itself
    "search": (keyctl, 10, -3, b"user", b"{marker}", 0),  # KEYCTL_SEARCH @s
    "add-session": (add_key, b"user", b"{marker}-planted", b"sandbox", 7, -3),
    "add-user": (add_key, b"user", b"{marker}-planted", b"sandbox", 7, -4),
}}
for name, arguments in calls.items():
    print(name, libc.syscall(*arguments), ctypes.get_errno())
print("buffer", buffer.value)
"""


@needs_namespaces
def test_the_callers_keyring_is_out_of_reach(sandbox: PythonSandbox, marker: str) -> None:
    libc, numbers = _keyctl()
    # A session keyring of this test process's own, so the probe plants nothing in anyone else's.
    assert libc.syscall(numbers["keyctl"], 1, marker.encode()) > 0  # KEYCTL_JOIN_SESSION_KEYRING
    secret = libc.syscall(numbers["add_key"], b"user", marker.encode(), b"hunter2", 7, -3)
    assert secret > 0
    before = ctypes.create_string_buffer(4096)
    listed = libc.syscall(numbers["keyctl"], 11, -3, before, 4096)  # KEYCTL_READ @s: the serials it holds
    result = sandbox.run(_KEYRING_PROBE.format(secret=secret, marker=marker, **numbers))
    after = ctypes.create_string_buffer(4096)
    assert libc.syscall(numbers["keyctl"], 11, -3, after, 4096) == listed and after.raw == before.raw
    assert "hunter2" not in result.stdout, result
    outcomes = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert outcomes.pop("buffer") == "b''", result
    calls = ["session-id", "read-secret", "search", "add-session", "add-user"]
    assert outcomes == dict.fromkeys(calls, "-1 1")  # EPERM, every one


def test_where_processes_are_not_counted_it_refuses_unless_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    uncapped = Isolation(namespaces=True, dropped_uid=None, memory_capped=False,
                         reason="the kernel does not count root's processes against RLIMIT_NPROC")
    monkeypatch.setattr(sandbox_module, "probe_isolation", lambda: uncapped)
    monkeypatch.delenv(sandbox_module.UNSAFE_ENV_VAR, raising=False)
    with pytest.raises(SandboxUnavailable, match="cannot cap the sandbox's memory as a whole.*allow_unsafe=True"):
        PythonSandbox().run("print(1)")
    if ISOLATION.namespaces:  # opted in, it still runs isolated, with per-process limits only
        assert PythonSandbox(allow_unsafe=True).run("print(6 * 7)").stdout.strip() == "42"


@needs_namespaces
def test_the_trial_measures_whether_processes_are_counted() -> None:
    # Root without dropping to nobody is the case the kernel exempts; an unprivileged user is counted.
    unprivileged_way = sandbox_module.trial_run(Isolation(namespaces=True, dropped_uid=None))
    assert isinstance(unprivileged_way, Isolation), unprivileged_way
    assert unprivileged_way.memory_capped == (os.geteuid() != 0)
    if os.geteuid() == 0:
        assert "RLIMIT_NPROC" in unprivileged_way.reason


# ---------------------------------------------------------------- the same probes as an unprivileged user


def _first_closed_directory(path: str) -> Path | None:
    """The first directory on the way to ``path`` that others may not enter (None: all of it is open)."""
    for directory in [*reversed(Path(path).parents), Path(path)]:
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            return directory
    return None


def _as_nobody(command: list[str]) -> list[str]:
    """``command`` as nobody, who must be able to run this interpreter.

    This machine keeps the interpreter under /root (pyenv, mode 700), which nobody may not enter, while a real
    unprivileged user runs an interpreter they can read. So when needed, in a private mount namespace of this
    command only, a tmpfs laid over the closed directory shows nobody the interpreter's prefixes and nothing else.
    """
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *command]
    prefixes = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    closed = {_first_closed_directory(prefix) for prefix in prefixes} - {None}
    if not closed:
        return drop
    if len(closed) > 1:
        pytest.skip(f"the interpreter sits under several closed directories: {closed}")
    (directory,) = closed
    inside = [prefix for prefix in prefixes if Path(prefix).is_relative_to(directory)]
    script = ["set -eu", "stash=$(mktemp -d)"]
    script += [f"mkdir $stash/{i}; mount --bind {shlex.quote(p)} $stash/{i}" for i, p in enumerate(inside)]
    script += [f"mount -t tmpfs -o mode=755 interpreter {shlex.quote(str(directory))}"]
    script += [f"mkdir -p {shlex.quote(p)}; mount --move $stash/{i} {shlex.quote(p)}" for i, p in enumerate(inside)]
    script += ["rm -r $stash", 'exec "$@"']
    return ["unshare", "--mount", "--", "sh", "-c", "\n".join(script), "show-interpreter", *drop]


@pytest.mark.skipif(os.geteuid() != 0, reason="run as root, this re-runs the file as nobody")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_whole_file_passes_as_an_unprivileged_user() -> None:
    home = Path(tempfile.mkdtemp(prefix="tfgrpo-nobody-home-"))
    bashrc = home / ".bashrc"
    bashrc.write_text("# nobody's own shell setup\n")
    for path in (home, bashrc):
        os.chown(path, NOBODY, NOBODY)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        PLANTED_HOME_ENV: "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(__file__))]
    try:
        done = subprocess.run(
            _as_nobody(pytest_command), cwd=REPO, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
        summary = done.stdout.strip().splitlines()[-1]
        assert " passed" in summary and "1 skipped" in summary, summary  # only this test skips itself
        assert bashrc.read_text() == "# nobody's own shell setup\n"
    finally:
        shutil.rmtree(home)
