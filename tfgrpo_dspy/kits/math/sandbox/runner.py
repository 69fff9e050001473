"""Run untrusted Python (written by the agent) in a separate, contained process.

The containment comes from util-linux (``unshare``, ``mount``, ``pivot_root``, ``setpriv``); a trial run
(`probe_isolation`) checks once that it works here. Each run gets:

- Namespaces: mount, PID, network and IPC namespaces, plus a user namespace when the host user is not root
  (an unprivileged user may create those on most kernels). The sandbox's PID 1 is a small shell; when the run
  ends or is killed, the kernel kills every process left in the namespace, so nothing outlives the call. The
  network namespace has no interface at all (abstract unix sockets are per network namespace too), and
  System V shared memory and message queues die with the IPC namespace.
- A private root filesystem: a tmpfs capped at ``scratch_bytes``. The host's system directories (``/usr`` and
  the library directories), a few files of ``/etc`` and the interpreter's prefixes are bound into it
  read-only, so sympy imports from the host's installation. The working directory ``/sandbox``, ``/tmp`` and
  ``/dev/shm`` live on that tmpfs: their total size is capped, and all of it vanishes with the run. Nothing
  else of the host exists in there: no home directories, no ``/run`` or ``/var`` (no host unix sockets), no
  other projects. A fresh ``/proc`` shows only the sandbox's own processes.
- Last, the code runs in a user namespace of its own that may create no further user namespaces, with every
  capability dropped and no_new_privs set. When the host user is root, the code first becomes ``nobody``:
  the kernel does not count root's processes against RLIMIT_NPROC, and root would own (and so read) the
  root-only files inside the exposed directories.
- One memory cap for the whole sandbox, ``memory_bytes``, for root and unprivileged users alike, without
  cgroups (an unprivileged user has none to manage on most machines): the scratch tmpfs gets
  ``scratch_bytes`` of it, a fixed reserve covers the stage's own small processes and the kernel's
  bookkeeping, and the rest is split evenly between at most ``max_processes`` processes (RLIMIT_NPROC, which
  counts processes and threads per sandbox, as each run has a user namespace of its own), each capped at its
  share by RLIMIT_AS less a reserve for the kernel buffers its descriptors may hold (RLIMIT_NOFILE of them,
  each pipe or socket at the kernel's default buffer size). So all processes together never exceed the cap.
  The ways to hold memory outside those limits are closed by a seccomp filter (libseccomp): memfd files,
  System V shared memory and message queues, io_uring rings, and growing a pipe's or a socket's buffer.
  Where the kernel does not count the code's processes (root that cannot drop to ``nobody``: the kernel
  exempts root from RLIMIT_NPROC), nothing caps the sandbox as a whole, and `PythonSandbox.run` refuses,
  like the unisolated case below.
- No keyring access: the same filter refuses every keyring call (keyctl, add_key, request_key), so the code
  can neither read the caller's session keyring, which a child inherits, nor add keys the host would see.
- Other resource limits set in the child before user code runs: CPU seconds, file size (RLIMIT_FSIZE, which
  also caps captured output), no core dumps. A wall-clock timeout kills the whole namespace; PID 1 enforces
  it too (``timeout``), so the sandbox ends even if the host process dies during the call.
- An audit hook refuses non-Unix sockets from Python code, only to give a clear message; the network
  namespace is the barrier.
- Output is truncated to ``max_output_chars`` per stream.

Where the kernel allows no namespaces, or no cap on the whole sandbox, `PythonSandbox.run` refuses to run code
(`SandboxUnavailable`), unless the user opts in to running it uncontained: ``PythonSandbox(allow_unsafe=True)``
or the environment variable ``TFGRPO_SANDBOX_ALLOW_UNSAFE=1``. It never falls back silently. Unisolated, only
the per-process limits apply (no seccomp filter, no whole-sandbox cap).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from shutil import which
from typing import BinaryIO

logger = logging.getLogger(__name__)

NOBODY_UID = 65534
NOBODY_GID = 65534
UNSAFE_ENV_VAR = "TFGRPO_SANDBOX_ALLOW_UNSAFE"

# Runs inside the child before the user's code: limits first, then the seccomp filter (contained runs), then the
# socket hook, then main.py. The filter answers EPERM to every call listed in the JSON; a rule with arguments
# refuses the call only when its arguments equal them (fcntl F_SETPIPE_SZ, setsockopt SOL_SOCKET SO_SNDBUF, ...).
_BOOTSTRAP = r"""
import json, resource, signal, socket, sys
config = json.loads(sys.argv[1])
for name, value in config["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-size writes raise OSError instead of killing

if config["refuse"] is not None:
    import ctypes, errno
    try:
        seccomp = ctypes.CDLL("libseccomp.so.2")
    except OSError as err:
        sys.exit(f"sandbox: cannot load libseccomp ({err}); install libseccomp2")
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    seccomp.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.c_void_p]
    seccomp.seccomp_load.argtypes = [ctypes.c_void_p]

    class Compare(ctypes.Structure):  # struct scmp_arg_cmp
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    filter_ = seccomp.seccomp_init(0x7FFF0000)  # SCMP_ACT_ALLOW; other architectures' calls are killed
    refuse = 0x00050000 | errno.EPERM  # SCMP_ACT_ERRNO(EPERM)
    for name, equal in config["refuse"]:
        number = seccomp.seccomp_syscall_resolve_name(name.encode())
        if number < 0:
            continue  # no such call on this architecture
        compares = (Compare * max(1, len(equal)))(*[Compare(arg, 4, value, 0) for arg, value in equal])  # EQ
        if seccomp.seccomp_rule_add_array(filter_, refuse, number, len(equal), compares) != 0:
            sys.exit(f"sandbox: cannot add the seccomp rule for {name}")
    if filter_ is None or seccomp.seccomp_load(filter_) != 0:
        sys.exit("sandbox: cannot load the seccomp filter")
    del ctypes, errno, seccomp, Compare, filter_, refuse, name, equal, number, compares

def _refuse_network(event, args, _unix=socket.AF_UNIX):
    # family -1 (unspecified) becomes AF_INET inside _socket, so only an explicit AF_UNIX passes
    if event == "socket.__new__" and len(args) > 1 and args[1] != _unix:
        raise PermissionError("network access is disabled in this sandbox")

sys.addaudithook(_refuse_network)
del json, resource, signal, socket, config, _refuse_network
sys.argv = ["main.py"]
import runpy
runpy.run_path("main.py", run_name="__main__")
"""

# PID 1 of the sandbox: builds the private root filesystem, enters it, then runs the rest of its arguments.
# Arguments: new-root mount point, tmpfs mount options, the script to run, a last-resort time limit in seconds,
# the host paths to expose, "--", the command.
_STAGE = r"""
set -eu
umask 022
root=$1 tmpfs_options=$2 script=$3 limit=$4
shift 4

expose() {  # show host path $1 at the same place in the new root, read-only; a symlink is copied as a link
    if [ -L "$1" ]; then
        cp -P "$1" "$root$1"
        return
    fi
    if [ -d "$1" ]; then mkdir -p "$root$1"; else : > "$root$1"; fi
    mount --bind -o ro,nosuid,nodev "$1" "$root$1"
}

mount -t tmpfs -o "$tmpfs_options" sandbox "$root"
mkdir "$root/etc" "$root/dev"
while [ "$1" != -- ]; do expose "$1"; shift; done
shift
for node in null zero full random urandom; do
    : > "$root/dev/$node"
    mount --bind "/dev/$node" "$root/dev/$node"
done
ln -s /proc/self/fd "$root/dev/fd"
mkdir -p "$root/proc" "$root/tmp" "$root/dev/shm" "$root/sandbox"
chmod 1777 "$root/tmp" "$root/dev/shm" "$root/sandbox"
cp "$script" "$root/sandbox/main.py"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
cd "$root"
pivot_root . .  # the new root becomes /, the host's root is stacked on it ...
umount -l .     # ... and detached: from here on, no path leads to the host's files
cd /sandbox
set +e
timeout --signal=KILL "$limit" "$@"
exit $?  # not exec: this shell stays PID 1, and the namespace ends when it does
"""

# The last step, in a user namespace of its own: forbid nested user namespaces, drop every capability, run.
_CONFINE = r"""
set -eu
echo 0 > /proc/sys/user/max_user_namespaces
exec setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"
"""

# Root's sandbox runs as nobody: RLIMIT_NPROC binds, and root-only files in the exposed directories stay closed.
_BECOME_NOBODY = ("setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "--")
_TOOLS = ("unshare", "setpriv", "mount", "umount", "pivot_root", "sh", "timeout")
# Host paths shown read-only in the sandbox, besides the interpreter's prefixes. Nothing here holds secrets.
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_PATHS = (
    "/etc/alternatives",
    "/etc/group",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
)
_DEFAULT_SCRATCH_BYTES = 64 << 20
_MAX_INODES = 8192  # files in the scratch tmpfs; a tiny inode costs kernel memory the size cap does not count
_DEFAULT_MAX_PROCESSES = 4
_MIN_PROCESS_BYTES = 64 << 20  # RLIMIT_AS the interpreter needs to import sympy (its peak is ~55 MiB)
_MAX_OPEN_FILES = 64
# Kept from memory_bytes before it is split between processes: the stage's own processes (PID 1 shell,
# timeout), the scratch tmpfs's inodes and descriptors in flight in unix sockets (RLIMIT_NOFILE per user).
_STAGE_RESERVE = 16 << 20
# Calls the seccomp filter refuses (EPERM), with the (argument index, value) pairs that must all match.
_REFUSED_CALLS: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = (
    # Keyrings are not namespaced: the child would inherit the caller's session keyring.
    ("keyctl", ()), ("add_key", ()), ("request_key", ()),
    # Memory no RLIMIT_AS counts: RAM files outside the scratch tmpfs, System V segments and queues that
    # outlive their processes, io_uring rings.
    ("memfd_create", ()), ("memfd_secret", ()), ("shmget", ()), ("msgget", ()), ("io_uring_setup", ()),
    # Kernel buffers stay at their default size, which `_kernel_bytes_per_file` reserves per descriptor.
    ("fcntl", ((1, fcntl.F_SETPIPE_SZ),)),
    *(("setsockopt", ((1, socket.SOL_SOCKET), (2, option))) for option in (
        socket.SO_SNDBUF, socket.SO_RCVBUF, getattr(socket, "SO_SNDBUFFORCE", 32),
        getattr(socket, "SO_RCVBUFFORCE", 33))),
)  # fmt: skip

_SAFE_ENV_TEMPLATE = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    # Keep numeric libraries single-threaded: threads count against RLIMIT_NPROC.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


class SandboxUnavailable(RuntimeError):
    """Code cannot be isolated on this machine and the user did not opt in to running it unisolated."""


@dataclass(frozen=True)
class Isolation:
    """What contains the code on this machine (see the module docstring).

    Attributes:
        namespaces: the namespaced sandbox works here (private root, PID, network, IPC namespaces).
        dropped_uid: the host uid the code runs as when root makes the namespaces (``nobody``); None when it
            runs as the host user, who is root of its user namespace there, without any capability.
        memory_capped: the kernel counts the code's processes against RLIMIT_NPROC, so ``memory_bytes`` caps
            the sandbox as a whole (not so for root that cannot drop to nobody).
        reason: why the namespaced sandbox does not work, or why nothing caps it as a whole (empty when all is well).
    """

    namespaces: bool
    dropped_uid: int | None = None
    reason: str = ""
    socket_audit_hook: bool = True
    memory_capped: bool = True

    @property
    def pid_namespace(self) -> bool:
        return self.namespaces

    @property
    def network_namespace(self) -> bool:
        return self.namespaces

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


def _unsafe_from_env() -> bool:
    return os.environ.get(UNSAFE_ENV_VAR, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class PythonSandbox:
    """Configuration of the sandbox; each `run` starts a fresh, contained child process.

    Attributes:
        timeout_seconds: wall-clock limit of one run.
        memory_bytes: memory of the whole sandbox, every process and the scratch filesystem together (see the
            module docstring for how it is split).
        max_processes: RLIMIT_NPROC of the child: processes and threads of one run together, each capped at an
            equal share of ``memory_bytes`` (default: 4, fewer when ``memory_bytes`` cannot give each 64 MiB).
        max_file_bytes: RLIMIT_FSIZE: largest file the child may write, captured output included.
        max_output_chars: characters kept of stdout and of stderr each.
        scratch_bytes: size of the RAM-backed filesystem that holds ``/sandbox``, ``/tmp`` and ``/dev/shm``
            together, taken from ``memory_bytes`` (default: 64 MiB, or a quarter of ``memory_bytes`` if less).
        allow_unsafe: where namespaces are not available, run code anyway, without isolation (default: refuse;
            also set by ``TFGRPO_SANDBOX_ALLOW_UNSAFE=1``). Where they are available, they are always used.
    """

    timeout_seconds: float = 10.0
    memory_bytes: int = 1 << 30
    max_processes: int | None = None
    max_file_bytes: int = 16 << 20
    max_output_chars: int = 4000
    scratch_bytes: int | None = None
    allow_unsafe: bool = field(default_factory=_unsafe_from_env)

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0, got {self.timeout_seconds!r}")
        if self.scratch_bytes is None and isinstance(self.memory_bytes, int):
            object.__setattr__(self, "scratch_bytes", min(_DEFAULT_SCRATCH_BYTES, self.memory_bytes // 4))
        budget = self.memory_bytes - self.scratch_bytes - _STAGE_RESERVE if _positive(self.memory_bytes) else 0
        process_need = _MIN_PROCESS_BYTES + _process_reserve()
        if self.max_processes is None:
            object.__setattr__(self, "max_processes", max(1, min(_DEFAULT_MAX_PROCESSES, budget // process_need)))
        for name in ("memory_bytes", "max_processes", "max_file_bytes", "max_output_chars", "scratch_bytes"):
            value = getattr(self, name)
            if not _positive(value):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.scratch_bytes > self.memory_bytes:
            raise ValueError(f"scratch_bytes ({self.scratch_bytes}) must not exceed memory_bytes ({self.memory_bytes})")
        if self.process_memory_bytes < _MIN_PROCESS_BYTES:
            raise ValueError(
                f"memory_bytes ({self.memory_bytes >> 20} MiB for the whole sandbox) less scratch_bytes "
                f"({self.scratch_bytes >> 20} MiB) and reserves leaves {max(0, self.process_memory_bytes) >> 20} MiB "
                f"for each of max_processes={self.max_processes}, under the {_MIN_PROCESS_BYTES >> 20} MiB the "
                "interpreter needs: raise memory_bytes or lower max_processes or scratch_bytes"
            )

    @property
    def process_memory_bytes(self) -> int:
        """RLIMIT_AS of each process: its share of the whole cap, less what its descriptors may hold in the kernel."""
        budget = self.memory_bytes - self.scratch_bytes - _STAGE_RESERVE
        return budget // self.max_processes - _process_reserve()

    @property
    def isolation(self) -> Isolation:
        return probe_isolation()

    def run(self, code: str) -> SandboxResult:
        """Run ``code`` as a script and return its (truncated) output. Never raises for user errors.

        Raises:
            SandboxUnavailable: the code cannot be isolated here and ``allow_unsafe`` is off.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        isolation = self.isolation
        if not isolation.namespaces:
            if not self.allow_unsafe:
                raise SandboxUnavailable(
                    f"cannot isolate Python code on this machine ({isolation.reason}); allow user namespaces, "
                    f"or opt in to running it unisolated: PythonSandbox(allow_unsafe=True) or {UNSAFE_ENV_VAR}=1"
                )
            logger.warning("Running agent code WITHOUT isolation (allow_unsafe): %s", isolation.reason)
        elif not isolation.memory_capped:
            if not self.allow_unsafe:
                raise SandboxUnavailable(
                    f"cannot cap the sandbox's memory as a whole on this machine ({isolation.reason}); run as a "
                    "user other than root, or as a root that has the uid nobody, or opt in to running it with "
                    f"per-process limits only: PythonSandbox(allow_unsafe=True) or {UNSAFE_ENV_VAR}=1"
                )
            logger.warning("Running agent code WITHOUT a whole-sandbox memory cap (allow_unsafe): %s", isolation.reason)
        return self._run(code, isolation)

    def __call__(self, code: str) -> str:
        return self.run(code).for_agent()

    def _run(self, code: str, isolation: Isolation) -> SandboxResult:
        with tempfile.TemporaryDirectory(prefix="tfgrpo-sandbox-") as private:
            # private/ (host user only) holds the script and the output files, which the child writes through
            # inherited descriptors; nothing in it is visible from inside the sandbox.
            workspace = Path(private)
            (workspace / "main.py").write_text(code, encoding="utf-8")
            contained = isolation.namespaces
            if contained:
                command, cwd, env = self._contained_launch(workspace, as_nobody=isolation.dropped_uid is not None)
            else:
                command, cwd, env = self._unsafe_launch(workspace)
            stdout_path, stderr_path = workspace / "stdout", workspace / "stderr"
            with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
                exit_code, timed_out, duration = self._execute(command, cwd, env, stdout, stderr, contained)
            out, out_cut = _read_truncated(stdout_path, self.max_output_chars)
            err, err_cut = _read_truncated(stderr_path, self.max_output_chars)
        return SandboxResult(out, err, exit_code, timed_out, duration, truncated=out_cut or err_cut)

    def _contained_launch(self, workspace: Path, as_nobody: bool) -> tuple[list[str], Path, dict[str, str]]:
        """unshare -> PID 1 stage (private root) -> [become nobody] -> own user namespace, no capabilities -> python.

        ``as_nobody`` (root only): make the namespaces with root's own privileges, run the code as nobody.
        Otherwise, a user namespace in which the host user is root makes the others.
        """
        (workspace / "root").mkdir()  # mount point of the sandbox's root, inside its mount namespace only
        namespaces = ["--net", "--pid", "--ipc", "--mount", "--fork", "--kill-child"]
        if not as_nobody:
            namespaces = ["--user", "--map-root-user", *namespaces]
        tmpfs_options = f"size={self.scratch_bytes},nr_inodes={_MAX_INODES},mode=755,nosuid,nodev"
        last_resort = str(int(self.timeout_seconds) + 5)  # the host kills it first, unless the host has died
        stage_args = [str(workspace / "root"), tmpfs_options, str(workspace / "main.py"), last_resort]
        confine = ["unshare", "--user", "--map-root-user", "--", "sh", "-c", _CONFINE, "confine"]
        command = [
            "unshare", *namespaces, "--",
            "sh", "-c", _STAGE, "stage", *stage_args, *_exposed_paths(), "--",
            *(_BECOME_NOBODY if as_nobody else ()), *confine, *self._python_command(contained=True),
        ]  # fmt: skip
        return command, workspace, {**_SAFE_ENV_TEMPLATE, "HOME": "/sandbox", "TMPDIR": "/tmp"}

    def _unsafe_launch(self, workspace: Path) -> tuple[list[str], Path, dict[str, str]]:
        """No isolation at all: only the resource limits, the time limit and a scratch working directory."""
        workdir = workspace / "work"
        workdir.mkdir()
        (workspace / "main.py").rename(workdir / "main.py")
        env = {**_SAFE_ENV_TEMPLATE, "HOME": str(workdir), "TMPDIR": str(workdir)}
        return self._python_command(contained=False), workdir, env

    def _python_command(self, contained: bool) -> list[str]:
        limits = {
            "RLIMIT_AS": self.process_memory_bytes,
            "RLIMIT_NPROC": self.max_processes,
            "RLIMIT_CPU": int(self.timeout_seconds) + 1,
            "RLIMIT_FSIZE": self.max_file_bytes,
            "RLIMIT_NOFILE": _MAX_OPEN_FILES,
            "RLIMIT_CORE": 0,
            "RLIMIT_MEMLOCK": 0,  # locked memory (a pinned io_uring or secret memory) is memory no one else can count
            "RLIMIT_MSGQUEUE": 0,  # POSIX message queues live in the kernel, outside every other limit
        }
        config = {"limits": limits, "refuse": _REFUSED_CALLS if contained else None}
        return [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(config)]

    def _execute(
        self, command: list[str], cwd: Path, env: dict[str, str], stdout: BinaryIO, stderr: BinaryIO, contained: bool
    ) -> tuple[int | None, bool, float]:
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # its own process group, so one killpg reaches its children (unsafe mode)
        )
        try:
            exit_code: int | None = process.wait(timeout=self.timeout_seconds)
            timed_out = False
        except subprocess.TimeoutExpired:
            exit_code, timed_out = None, True
            if contained:
                _kill_namespace(process)
        finally:
            # Unsafe mode: background children must not outlive the run (contained ones died with the namespace).
            _kill_group(process.pid)
            process.wait()
        return exit_code, timed_out, time.monotonic() - started


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@lru_cache(maxsize=1)
def _kernel_bytes_per_file() -> int:
    """What one descriptor may hold in kernel buffers at their default size (growing them is refused).

    A socket's queued data is charged to its sender's buffer (net.core.wmem_default), plus one packet of
    overshoot; a pipe holds 16 pages. The default buffer sizes are per network namespace, copied from the host's.
    """
    sizes = []
    for name in ("wmem_default", "rmem_default"):
        try:
            sizes.append(int(Path(f"/proc/sys/net/core/{name}").read_text()))
        except (OSError, ValueError):
            sizes.append(212_992)  # the kernel's own default
    return max(*sizes, 16 * os.sysconf("SC_PAGE_SIZE")) + (64 << 10)


def _process_reserve() -> int:
    return _MAX_OPEN_FILES * _kernel_bytes_per_file()


def _exposed_paths() -> list[str]:
    """Host paths bound read-only into the sandbox: system directories, a few /etc files, the interpreter."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {os.path.realpath(prefix) for prefix in prefixes}
    exposed: list[str] = []
    for path in [*_SYSTEM_PATHS, *_ETC_PATHS, *sorted(prefixes)]:
        inside_exposed = any(path.startswith(parent.rstrip("/") + "/") for parent in exposed)
        if os.path.lexists(path) and path not in exposed and not inside_exposed:
            exposed.append(path)
    return exposed


def _kill_namespace(unshare: subprocess.Popen) -> None:
    """Kill the run, the child of the sandbox's PID 1 (the stage shell).

    The shell then exits, and as PID 1 it takes every process left in the namespace with it; unshare exits once
    all of them are gone, so nothing outlives the call. (Killing PID 1 itself would work too, but makes unshare
    2.38 print a spurious "sigprocmask unblock failed" into the agent's stderr.)
    """
    init = _children(unshare.pid)
    for pid in [child for parent in init for child in _children(parent)] or init:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        unshare.wait(timeout=5)
    except subprocess.TimeoutExpired:
        logger.warning("sandbox namespace did not end within 5 s of its kill")


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@lru_cache(maxsize=1)
def probe_isolation() -> Isolation:
    """Find out once how the namespaced sandbox works here, by trial runs (kernels and containers differ).

    Root tries running the code as nobody first; a "root" that is itself inside a user namespace may lack
    that uid, and then tries the unprivileged way, where the kernel does not count its processes: that way
    isolates, but nothing caps the sandbox as a whole (`Isolation.memory_capped` is False).
    """
    missing = [tool for tool in _TOOLS if which(tool, path=_SAFE_ENV_TEMPLATE["PATH"]) is None]
    if missing:
        return _unavailable(f"missing tools: {', '.join(missing)} (util-linux, coreutils)")
    candidates = [Isolation(namespaces=True, dropped_uid=None)]
    if os.geteuid() == 0:
        candidates.insert(0, Isolation(namespaces=True, dropped_uid=NOBODY_UID))
    failures = []
    for candidate in candidates:
        outcome = trial_run(candidate)
        if isinstance(outcome, Isolation):
            if not outcome.memory_capped:
                logger.warning("Python sandbox cannot cap its memory as a whole here: %s", outcome.reason)
            return outcome
        failures.append(outcome)
    return _unavailable("; ".join(dict.fromkeys(failures)))


# The trial: it must run, and with max_processes=2 its second child must be refused.
_TRIAL = """
import os, signal
children = []
try:
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            signal.pause()  # killed below
        children.append(pid)
except OSError:
    pass
for pid in children:
    os.kill(pid, signal.SIGKILL)
print("contained", len(children))
"""


def trial_run(isolation: Isolation) -> Isolation | str:
    """Run a trial under ``isolation``: the isolation as it works here (`Isolation.memory_capped` measured),
    or why it fails."""
    try:
        trial = PythonSandbox(timeout_seconds=30, max_processes=2)._run(_TRIAL, isolation)
    except OSError as err:
        return f"cannot start unshare: {err}"
    words = trial.stdout.split()
    if len(words) == 2 and words[0] == "contained":
        if words[1] == "1":
            return isolation
        return replace(isolation, memory_capped=False, reason="the kernel does not count root's processes against "
                       "RLIMIT_NPROC, so nothing bounds how many processes, each with its share of memory_bytes, "
                       "the code may start")
    lines = trial.stderr.strip().splitlines()
    return lines[-1] if lines else f"trial run failed with exit code {trial.exit_code}"


def _unavailable(reason: str) -> Isolation:
    logger.warning("Python sandbox cannot isolate code here: %s", reason)
    return Isolation(namespaces=False, reason=reason)


def _read_truncated(path: Path, max_chars: int) -> tuple[str, bool]:
    with path.open("rb") as handle:
        head = handle.read(max_chars * 4 + 4)  # utf-8 needs at most 4 bytes per character
        size = path.stat().st_size
    text = head.decode("utf-8", errors="replace")
    if len(text) <= max_chars and len(head) == size:
        return text, False
    kept = text[:max_chars]
    return f"{kept}\n[... output truncated: {size} bytes in total]", True
