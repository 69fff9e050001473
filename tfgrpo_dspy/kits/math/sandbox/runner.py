"""One run of untrusted Python in the sandbox: launch it contained (`.confinement`), wait and kill it
(`.process`), collect its output (`.result`).

Each run starts a fresh child process, and nothing it started outlives it. Output is truncated to
``max_output_chars`` per stream. A process of the code that the memory limit stops ends without a traceback, and
the result says so in one line (`SandboxResult.out_of_memory`), as it does for a time-out. A trial run
(`probe_isolation`) finds out once how the sandbox works here.

Where the kernel allows no namespaces, or no cap on the whole sandbox, `PythonSandbox.run` refuses to run code
(`SandboxUnavailable`), unless the user opts in to running it uncontained: ``PythonSandbox(allow_unsafe=True)``
or the environment variable ``TFGRPO_SANDBOX_ALLOW_UNSAFE=1``. It never falls back silently. Unisolated, only
the per-process limits apply (no seccomp filter, no whole-sandbox cap).
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from shutil import which

from .bootstrap import MEMORY_REPORT, process_reserve, python_command
from .confinement import NOBODY_UID, SAFE_ENV_TEMPLATE, STAGE_RESERVE, TOOLS, Isolation, contained_launch, unsafe_launch
from .process import execute
from .result import SandboxResult, read_truncated

logger = logging.getLogger(__name__)

UNSAFE_ENV_VAR = "TFGRPO_SANDBOX_ALLOW_UNSAFE"
_DEFAULT_SCRATCH_BYTES = 64 << 20
_DEFAULT_MAX_PROCESSES = 4
_MIN_PROCESS_BYTES = 64 << 20  # RLIMIT_AS the interpreter needs to import sympy (its peak is ~55 MiB)


class SandboxUnavailable(RuntimeError):
    """Code cannot be isolated on this machine and the user did not opt in to running it unisolated."""


def _unsafe_from_env() -> bool:
    return os.environ.get(UNSAFE_ENV_VAR, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class PythonSandbox:
    """Configuration of the sandbox; each `run` starts a fresh, contained child process.

    Attributes:
        timeout_seconds: wall-clock limit of one run.
        memory_bytes: memory of the whole sandbox, every process and the scratch filesystem together (see
            `.confinement` for how it is split).
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
        budget = self.memory_bytes - self.scratch_bytes - STAGE_RESERVE if _positive(self.memory_bytes) else 0
        process_need = _MIN_PROCESS_BYTES + process_reserve()
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
        budget = self.memory_bytes - self.scratch_bytes - STAGE_RESERVE
        return budget // self.max_processes - process_reserve()

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
            stdout_path, stderr_path, report_path = workspace / "stdout", workspace / "stderr", workspace / "report"
            with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr, report_path.open("wb") as report:
                python = python_command(self.process_memory_bytes, self.max_processes, self.timeout_seconds,
                                        self.max_file_bytes, contained, report.fileno())
                if contained:
                    command, cwd, env = contained_launch(workspace, python, self.scratch_bytes,
                                                         self.timeout_seconds,
                                                         as_nobody=isolation.dropped_uid is not None)
                else:
                    command, cwd, env = unsafe_launch(workspace, python)
                exit_code, timed_out, duration = execute(command, cwd, env, stdout, stderr, report.fileno(),
                                                         contained, self.timeout_seconds)
            out, out_cut = read_truncated(stdout_path, self.max_output_chars)
            err, err_cut = read_truncated(stderr_path, self.max_output_chars)
            out_of_memory = self._memory_line(report_path, isolation)
        return SandboxResult(out, err, exit_code, timed_out, duration, truncated=out_cut or err_cut,
                             out_of_memory=out_of_memory)

    def _memory_line(self, report_path: Path, isolation: Isolation) -> str:
        """The one line for the processes the memory limit stopped (from their reports), or "" for none."""
        with report_path.open("rb") as handle:
            reports = MEMORY_REPORT.findall(handle.read(64 << 10))  # the code may write there too: read a bounded part
        if not reports:
            return ""
        kind, line = reports[0][0].decode(), int(reports[0][1])
        where = f"at main.py line {line} ({kind})" if line else f"({kind})"
        who = f"in {len(reports)} processes, the first {where}" if len(reports) > 1 else where
        share = f"{self.process_memory_bytes >> 20} MiB"
        if isolation.namespaces and isolation.memory_capped:
            limit = f"{self.memory_bytes >> 20} MiB for the whole sandbox, {share} for each of at most " \
                    f"{self.max_processes} processes"
        else:  # allow_unsafe where nothing caps the sandbox as a whole
            limit = f"{share} for each process"
        return f"[stopped: out of memory {who}; the limit is {limit}]"

def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@lru_cache(maxsize=1)
def probe_isolation() -> Isolation:
    """Find out once how the namespaced sandbox works here, by trial runs (kernels and containers differ).

    Root tries running the code as nobody first; a "root" that is itself inside a user namespace may lack
    that uid, and then tries the unprivileged way, where the kernel does not count its processes: that way
    isolates, but nothing caps the sandbox as a whole (`Isolation.memory_capped` is False).
    """
    missing = [tool for tool in TOOLS if which(tool, path=SAFE_ENV_TEMPLATE["PATH"]) is None]
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
