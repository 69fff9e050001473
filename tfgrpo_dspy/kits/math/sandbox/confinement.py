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

This module builds the command lines and the scripts that set up the namespaces and the private root
(`contained_launch`, `unsafe_launch`) and ends a contained run (`kill_namespace`); `.bootstrap` builds the
interpreter's own part (limits, seccomp filter, socket hook: `python_command`); `.runner` runs them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

# Built in .bootstrap since the interpreter's limits and filter moved there; still importable from here.
from .bootstrap import BOOTSTRAP, MAX_OPEN_FILES, MEMORY_REPORT, process_reserve, python_command  # noqa: F401

logger = logging.getLogger(__name__)

NOBODY_UID = 65534
NOBODY_GID = 65534

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
# Kept from memory_bytes before it is split between processes: the stage's own processes (PID 1 shell,
# timeout), the scratch tmpfs's inodes and descriptors in flight in unix sockets (RLIMIT_NOFILE per user).
STAGE_RESERVE = 16 << 20

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

