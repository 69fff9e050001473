"""What one run of the sandbox returns: `SandboxResult`, and how it reads to an agent.

The captured output comes back truncated to ``max_output_chars`` per stream (`read_truncated`), with a line that
says so, so a runaway print cannot flood the agent's context.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one run. ``exit_code`` is None when the run was killed on timeout.

    ``out_of_memory`` is the one line that says which of the run's processes the memory limit stopped, and where
    (empty when it stopped none); such a process ends without a traceback.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration_seconds: float
    truncated: bool = False
    out_of_memory: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.out_of_memory

    def to_dict(self) -> dict:
        return asdict(self)

    def for_agent(self) -> str:
        """A compact observation for an LLM agent."""
        parts = []
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr}")
        if self.out_of_memory:
            parts.append(self.out_of_memory)
        if self.timed_out:
            parts.append(f"[killed: time limit exceeded after {self.duration_seconds:.1f}s]")
        elif self.exit_code != 0 and not self.out_of_memory:  # exit code 1 is how a stopped main.py ends
            parts.append(f"[exit code {self.exit_code}]")
        if not parts:
            parts.append("[no output; use print() to show results]")
        return "\n".join(parts)


def read_truncated(path: Path, max_chars: int) -> tuple[str, bool]:
    """The first ``max_chars`` characters of a captured stream, and whether anything was cut."""
    with path.open("rb") as handle:
        head = handle.read(max_chars * 4 + 4)  # utf-8 needs at most 4 bytes per character
        size = path.stat().st_size
    text = head.decode("utf-8", errors="replace")
    if len(text) <= max_chars and len(head) == size:
        return text, False
    kept = text[:max_chars]
    return f"{kept}\n[... output truncated: {size} bytes in total]", True
