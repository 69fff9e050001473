"""Run untrusted Python (written by the agent) in a separate, limited process.

What is enforced, and how (each layer is probed once; `PythonSandbox.isolation` says which are active):

- Separate process: the same interpreter in isolated mode (``python -I``), fresh temporary working
  directory (removed afterwards), scrubbed environment (no variables of the host are passed on).
- Wall-clock timeout: the child runs in its own session; on timeout the whole process group is killed.
- PID namespace (``unshare --pid --fork --kill-child``, needs root or user namespaces): when the
  sandboxed interpreter exits or is killed, the kernel kills every process left in the namespace, so
  forked children cannot outlive the run even if they call ``setsid``. Without it, only the process
  group is killed and a child that calls ``setsid`` escapes the kill.
- Network namespace (``unshare --net``): the child sees no network interface. Always in addition, an
  audit hook refuses creation of non-Unix sockets from Python code (defence in depth; native code
  such as ctypes can get past a hook, not past the namespace).
- Dropped user (``setpriv``, only when the host runs as root): the child runs as ``nobody``, so it
  cannot write to files or directories owned by root, read root-only files, or signal host
  processes. It can still write where everyone may (``/tmp``, ``/var/tmp``, ``/dev/shm``).
- Resource limits set in the child before user code runs: address space (RLIMIT_AS), processes
  (RLIMIT_NPROC; Linux ignores it for root, so it bites only with the dropped user, and it counts
  all processes of that user, shared by sandboxes running at the same time), CPU seconds, file
  size (RLIMIT_FSIZE, which also caps captured output), open files, no core dumps.
- Output is truncated to ``max_output_chars`` per stream.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

NOBODY_UID = 65534
NOBODY_GID = 65534

# Runs inside the child before the user's code: limits first, then the socket hook, then main.py.
_BOOTSTRAP = r"""
import json, resource, signal, socket, sys
limits = json.loads(sys.argv[1])
for name, value in limits.items():
    resource.setrlimit(getattr(resource, name), (value, value))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-size writes raise OSError instead of killing

def _refuse_network(event, args, _unix=socket.AF_UNIX):
    if event == "socket.__new__" and len(args) > 1 and args[1] not in (-1, _unix):
        raise PermissionError("network access is disabled in this sandbox")

sys.addaudithook(_refuse_network)
del json, resource, signal, socket, limits, _refuse_network
sys.argv = ["main.py"]
import runpy
runpy.run_path("main.py", run_name="__main__")
"""

_SAFE_ENV_TEMPLATE = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    # Keep numeric libraries single-threaded: threads count against RLIMIT_NPROC.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass(frozen=True)
class Isolation:
    """Which isolation layers are active on this machine (see the module docstring)."""

    pid_namespace: bool
    network_namespace: bool
    dropped_uid: int | None
    socket_audit_hook: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one run. ``exit_code`` is None when the run was killed on timeout."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration_seconds: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def to_dict(self) -> dict:
        return asdict(self)

    def for_agent(self) -> str:
        """A compact observation for an LLM agent."""
        parts = []
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr}")
        if self.timed_out:
            parts.append(f"[killed: time limit exceeded after {self.duration_seconds:.1f}s]")
        elif self.exit_code != 0:
            parts.append(f"[exit code {self.exit_code}]")
        if not parts:
            parts.append("[no output; use print() to show results]")
        return "\n".join(parts)


def _runs(command: list[str]) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=30, env=dict(_SAFE_ENV_TEMPLATE))
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@lru_cache(maxsize=1)
def probe_isolation() -> Isolation:
    """Find out once which layers work here (e.g. unshare needs privileges that containers may lack)."""
    probe = [sys.executable, "-I", "-c", "pass"]
    unshare = shutil.which("unshare")
    namespaces = bool(unshare) and _runs([unshare, "--net", "--pid", "--fork", "--kill-child", "--", *probe])
    dropped_uid = None
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv and _runs([*_drop_user_prefix(setpriv), *probe]):
        dropped_uid = NOBODY_UID
    isolation = Isolation(pid_namespace=namespaces, network_namespace=namespaces, dropped_uid=dropped_uid)
    if not namespaces or dropped_uid is None:
        logger.warning("Python sandbox runs with reduced isolation: %s", isolation)
    return isolation


def _drop_user_prefix(setpriv: str) -> list[str]:
    return [
        setpriv,
        f"--reuid={NOBODY_UID}",
        f"--regid={NOBODY_GID}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


@dataclass(frozen=True)
class PythonSandbox:
    """Configuration of the sandbox; each `run` starts a fresh child process.

    Attributes:
        timeout_seconds: wall-clock limit of one run.
        memory_bytes: RLIMIT_AS of the child (virtual memory; the interpreter alone needs ~100 MiB).
        max_processes: RLIMIT_NPROC of the child (effective only when the user is dropped).
        max_file_bytes: RLIMIT_FSIZE: largest file the child may write, captured output included.
        max_output_chars: characters kept of stdout and of stderr each.
    """

    timeout_seconds: float = 10.0
    memory_bytes: int = 1 << 30
    max_processes: int = 64
    max_file_bytes: int = 16 << 20
    max_output_chars: int = 4000

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0, got {self.timeout_seconds!r}")
        for name in ("memory_bytes", "max_processes", "max_file_bytes", "max_output_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")

    @property
    def isolation(self) -> Isolation:
        return probe_isolation()

    def run(self, code: str) -> SandboxResult:
        """Run ``code`` as a script and return its (truncated) output. Never raises for user errors."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        isolation = self.isolation
        with tempfile.TemporaryDirectory(prefix="tfgrpo-sandbox-") as private:
            # private/ (root only) holds the output files; private/work/ is the child's directory.
            workdir = Path(private) / "work"
            workdir.mkdir()
            (workdir / "main.py").write_text(code, encoding="utf-8")
            if isolation.dropped_uid is not None:
                os.chmod(private, 0o711)  # nobody may pass through, not list or write
                for path in (workdir, workdir / "main.py"):
                    os.chown(path, isolation.dropped_uid, NOBODY_GID)
            stdout_path, stderr_path = Path(private) / "stdout", Path(private) / "stderr"
            with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
                exit_code, timed_out, duration = self._execute(isolation, workdir, stdout, stderr)
            out, out_cut = _read_truncated(stdout_path, self.max_output_chars)
            err, err_cut = _read_truncated(stderr_path, self.max_output_chars)
        return SandboxResult(out, err, exit_code, timed_out, duration, truncated=out_cut or err_cut)

    def __call__(self, code: str) -> str:
        return self.run(code).for_agent()

    def _command(self, isolation: Isolation) -> list[str]:
        limits = {
            "RLIMIT_AS": self.memory_bytes,
            "RLIMIT_NPROC": self.max_processes,
            "RLIMIT_CPU": int(self.timeout_seconds) + 1,
            "RLIMIT_FSIZE": self.max_file_bytes,
            "RLIMIT_NOFILE": 256,
            "RLIMIT_CORE": 0,
        }
        command = [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(limits)]
        if isolation.dropped_uid is not None:
            command = [*_drop_user_prefix(shutil.which("setpriv") or "setpriv"), *command]
        if isolation.pid_namespace:
            unshare = shutil.which("unshare") or "unshare"
            command = [unshare, "--net", "--pid", "--fork", "--kill-child", "--", *command]
        return command

    def _execute(self, isolation: Isolation, workdir: Path, stdout, stderr) -> tuple[int | None, bool, float]:
        env = {**_SAFE_ENV_TEMPLATE, "HOME": str(workdir), "TMPDIR": str(workdir)}
        started = time.monotonic()
        process = subprocess.Popen(
            self._command(isolation),
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # its own process group, so one killpg reaches its children
        )
        try:
            exit_code: int | None = process.wait(timeout=self.timeout_seconds)
            timed_out = False
        except subprocess.TimeoutExpired:
            exit_code, timed_out = None, True
        finally:
            # Also after a normal exit: background children must not outlive the run.
            _kill_group(process.pid)
            process.wait()
        return exit_code, timed_out, time.monotonic() - started


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_truncated(path: Path, max_chars: int) -> tuple[str, bool]:
    with path.open("rb") as handle:
        head = handle.read(max_chars * 4 + 4)  # utf-8 needs at most 4 bytes per character
        size = path.stat().st_size
    text = head.decode("utf-8", errors="replace")
    if len(text) <= max_chars and len(head) == size:
        return text, False
    kept = text[:max_chars]
    return f"{kept}\n[... output truncated: {size} bytes in total]", True
