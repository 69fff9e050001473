"""What contains one run of the sandbox: namespaces, a private root, resource limits, a seccomp filter.

The containment comes from util-linux (``unshare``, ``mount``, ``pivot_root``, ``setpriv``); a trial run
(`probe_isolation`, in `.runner`) checks once that it works here. Each run gets:

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
  like the unisolated case (see `.runner`).
- No keyring access: the same filter refuses every keyring call (keyctl, add_key, request_key), so the code
  can neither read the caller's session keyring, which a child inherits, nor add keys the host would see.
- Other resource limits set in the child before user code runs: CPU seconds, file size (RLIMIT_FSIZE, which
  also caps captured output), no core dumps. A wall-clock timeout kills the whole namespace; PID 1 enforces
  it too (``timeout``), so the sandbox ends even if the host process dies during the call.
- An audit hook refuses non-Unix sockets from Python code, only to give a clear message; the network
  namespace is the barrier.

This module builds the command lines and the scripts that set all of that up (`contained_launch`,
`unsafe_launch`, `python_command`) and ends a contained run (`kill_namespace`); `.runner` runs them.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger(__name__)

NOBODY_UID = 65534
NOBODY_GID = 65534

# Runs inside the child before the user's code: limits first, then the seccomp filter (contained runs), then the
# socket hook, then main.py. The filter answers EPERM to every call listed in the JSON; a rule with arguments
# refuses the call only when its arguments equal them (fcntl F_SETPIPE_SZ, setsockopt SOL_SOCKET SO_SNDBUF, ...).
# A process of the code (main.py, or one it forked) that runs out of memory ends with one report line to the host
# (`MEMORY_REPORT`), not a traceback, which would also need memory (and says nothing the agent can act on).
BOOTSTRAP = r"""
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
import errno as _errno, os as _os
_report = config["report_fd"]
_report_file = _os.fstat(_report)[1:3]  # (inode, device): the code may close the number and open something else
_os.set_inheritable(_report, False)  # forked processes keep it, programs the code executes do not get it

def _out_of_memory(error):
    try:
        line, frame = 0, error.__traceback__
        while frame is not None:
            if frame.tb_frame.f_code.co_filename == "main.py":
                line = frame.tb_lineno  # the innermost line of the code itself
            frame = frame.tb_next
        error.__traceback__ = frame = None  # frees the code's frames and the memory they hold
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()  # what the code printed before stays in its output
            except Exception:
                pass
        kind = type(error).__name__.encode()
        try:
            ours = _os.fstat(_report)[1:3] == _report_file
        except OSError:
            ours = False
        if ours:
            _os.write(_report, b"%s %d\n" % (kind, line))
        else:  # the code closed the report file: the line goes to its stderr instead
            _os.write(2, b"[stopped: out of memory at main.py line %d (%s)]\n" % (line, kind))
    except BaseException:
        pass
    finally:
        _os._exit(1)  # not sys.exit: no atexit handler or finalizer runs short of memory

del json, resource, signal, socket, config, _refuse_network
sys.argv = ["main.py"]
import runpy
try:
    runpy.run_path("main.py", run_name="__main__")
except MemoryError as error:
    _out_of_memory(error)
except OSError as error:  # ENOMEM: an mmap or a thread stack over RLIMIT_AS
    if error.errno != _errno.ENOMEM:
        raise
    _out_of_memory(error)
"""

# PID 1 of the sandbox: builds the private root filesystem, enters it, then runs the rest of its arguments.
# Arguments: new-root mount point, tmpfs mount options, the script to run, a last-resort time limit in seconds,
# the host paths to expose, "--", the command.
STAGE = r"""
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
CONFINE = r"""
set -eu
echo 0 > /proc/sys/user/max_user_namespaces
exec setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- "$@"
"""

# Root's sandbox runs as nobody: RLIMIT_NPROC binds, and root-only files in the exposed directories stay closed.
BECOME_NOBODY = ("setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "--")
TOOLS = ("unshare", "setpriv", "mount", "umount", "pivot_root", "sh", "timeout")
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
_MAX_INODES = 8192  # files in the scratch tmpfs; a tiny inode costs kernel memory the size cap does not count
MAX_OPEN_FILES = 64
# Kept from memory_bytes before it is split between processes: the stage's own processes (PID 1 shell,
# timeout), the scratch tmpfs's inodes and descriptors in flight in unix sockets (RLIMIT_NOFILE per user).
STAGE_RESERVE = 16 << 20
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

SAFE_ENV_TEMPLATE = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    # Keep numeric libraries single-threaded: threads count against RLIMIT_NPROC.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


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


def contained_launch(workspace: Path, python: list[str], scratch_bytes: int, timeout_seconds: float,
                     as_nobody: bool) -> tuple[list[str], Path, dict[str, str]]:
    """unshare -> PID 1 stage (private root) -> [become nobody] -> own user namespace, no capabilities -> python.

    ``as_nobody`` (root only): make the namespaces with root's own privileges, run the code as nobody.
    Otherwise, a user namespace in which the host user is root makes the others.
    """
    (workspace / "root").mkdir()  # mount point of the sandbox's root, inside its mount namespace only
    namespaces = ["--net", "--pid", "--ipc", "--mount", "--fork", "--kill-child"]
    if not as_nobody:
        namespaces = ["--user", "--map-root-user", *namespaces]
    tmpfs_options = f"size={scratch_bytes},nr_inodes={_MAX_INODES},mode=755,nosuid,nodev"
    last_resort = str(int(timeout_seconds) + 5)  # the host kills it first, unless the host has died
    stage_args = [str(workspace / "root"), tmpfs_options, str(workspace / "main.py"), last_resort]
    confine = ["unshare", "--user", "--map-root-user", "--", "sh", "-c", CONFINE, "confine"]
    command = [
        "unshare", *namespaces, "--",
        "sh", "-c", STAGE, "stage", *stage_args, *_exposed_paths(), "--",
        *(BECOME_NOBODY if as_nobody else ()), *confine, *python,
    ]  # fmt: skip
    return command, workspace, {**SAFE_ENV_TEMPLATE, "HOME": "/sandbox", "TMPDIR": "/tmp"}


def unsafe_launch(workspace: Path, python: list[str]) -> tuple[list[str], Path, dict[str, str]]:
    """No isolation at all: only the resource limits, the time limit and a scratch working directory."""
    workdir = workspace / "work"
    workdir.mkdir()
    (workspace / "main.py").rename(workdir / "main.py")
    env = {**SAFE_ENV_TEMPLATE, "HOME": str(workdir), "TMPDIR": str(workdir)}
    return python, workdir, env


def python_command(process_memory_bytes: int, max_processes: int, timeout_seconds: float, max_file_bytes: int,
                   contained: bool, report_fd: int) -> list[str]:
    """The interpreter's command line: it sets the limits, then (contained) the seccomp filter, then runs main.py.

    ``report_fd`` is a descriptor the child inherits, where each of its processes that runs out of memory writes
    one `MEMORY_REPORT` line."""
    limits = {
        "RLIMIT_AS": process_memory_bytes,
        "RLIMIT_NPROC": max_processes,
        "RLIMIT_CPU": int(timeout_seconds) + 1,
        "RLIMIT_FSIZE": max_file_bytes,
        "RLIMIT_NOFILE": MAX_OPEN_FILES,
        "RLIMIT_CORE": 0,
        "RLIMIT_MEMLOCK": 0,  # locked memory (a pinned io_uring or secret memory) is memory no one else can count
        "RLIMIT_MSGQUEUE": 0,  # POSIX message queues live in the kernel, outside every other limit
    }
    config = {"limits": limits, "refuse": _REFUSED_CALLS if contained else None, "report_fd": report_fd}
    return [sys.executable, "-I", "-c", BOOTSTRAP, json.dumps(config)]


# One line a process of the code writes to the report descriptor when it runs out of memory: the exception's type
# and the innermost line of main.py it was raised from (0: none), e.g. "MemoryError 6".
MEMORY_REPORT = re.compile(rb"(MemoryError|OSError) (\d+)\n")


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


def process_reserve() -> int:
    return MAX_OPEN_FILES * _kernel_bytes_per_file()


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


def kill_namespace(unshare: subprocess.Popen) -> None:
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

