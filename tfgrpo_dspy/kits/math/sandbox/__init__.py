"""Run untrusted Python (written by the agent) in a separate, contained process.

    runner.py        `PythonSandbox`: its configuration and one run (launch, wait, kill, collect the output);
                     `probe_isolation`: how the sandbox works on this machine, found once by trial runs
    confinement.py   what contains a run: namespaces and a private root, and the command lines and scripts that
                     set them up
    bootstrap.py     what runs in the child's interpreter before the code: resource limits, the seccomp filter,
                     the socket hook, the out-of-memory report
    process.py       the child process's life: start, wait up to the time limit, kill what is left
    result.py        `SandboxResult`: what a run returns, and its output truncated for an agent

Self-contained: it imports only the standard library and, relatively, itself, so that it also loads alone as a
top-level ``sandbox`` package, without ``tfgrpo_dspy`` (tests/test_math_sandbox.py does, in light processes).
"""

from .runner import (
    UNSAFE_ENV_VAR,
    Isolation,
    PythonSandbox,
    SandboxResult,
    SandboxUnavailable,
    probe_isolation,
    trial_run,
)

__all__ = [
    "UNSAFE_ENV_VAR",
    "Isolation",
    "PythonSandbox",
    "SandboxResult",
    "SandboxUnavailable",
    "probe_isolation",
    "trial_run",
]
