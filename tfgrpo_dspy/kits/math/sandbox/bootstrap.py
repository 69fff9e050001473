"""What runs in the sandbox's interpreter before the code: resource limits, the seccomp filter, the socket hook.

`python_command` is the child's command line: ``python -I -c BOOTSTRAP CONFIG``. The bootstrap sets the
per-process limits, loads the seccomp filter (contained runs only), installs the audit hook that refuses
non-Unix sockets, then runs ``main.py``; a process of the code that runs out of memory ends with one
`MEMORY_REPORT` line to the host instead of a traceback. `process_reserve` is the part of each process's memory
share kept back for the kernel buffers its descriptors may hold. Why each of these is needed:
`.confinement`'s docstring.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
from functools import lru_cache
from pathlib import Path

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

# RLIMIT_NOFILE of each process; what its descriptors may hold in the kernel is kept from its memory share.
MAX_OPEN_FILES = 64

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
    """Bytes of each process's memory share kept for the kernel buffers of its ``MAX_OPEN_FILES`` descriptors."""
    return MAX_OPEN_FILES * _kernel_bytes_per_file()
