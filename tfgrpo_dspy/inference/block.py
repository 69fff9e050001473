"""The marked block of lessons in a predictor's instructions: rendered, replaced, removed and read back.

The block sits after a predictor's own instructions between `BLOCK_START` and `BLOCK_END`, one ``[E<id>] text``
line a lesson. The embedded LM's prefix reuse (`tfgrpo_dspy.lm.prefix`) finds it by `BLOCK_START`, and
`parse_block` reads a library back from instructions saved by a process without ``tfgrpo_dspy``.
"""

from __future__ import annotations

import re

from tfgrpo_dspy.library.file import Experience
from tfgrpo_dspy.library.library import ExperienceLibrary

BLOCK_START = "--- BEGIN EXPERIENCE LIBRARY (tfgrpo-dspy) ---"
BLOCK_END = "--- END EXPERIENCE LIBRARY ---"
BLOCK_PREAMBLE = (
    "Lessons learned from earlier attempts at this task. "
    "Apply the ones whose condition fits the current input; ignore the rest."
)
_BLOCK_RE = re.compile(r"\n*" + re.escape(BLOCK_START) + r".*?" + re.escape(BLOCK_END) + r"\n*", re.DOTALL)
_LINE_RE = re.compile(r"^\[E(\d+)\] (.+)$")


def render_block(library: ExperienceLibrary) -> str:
    """The marked block for a library; empty for an empty library."""
    if not len(library):
        return ""
    return f"{BLOCK_START}\n{BLOCK_PREAMBLE}\n{library.render()}\n{BLOCK_END}"


def strip_block(instructions: str) -> str:
    """The instructions with any experience block removed."""
    return _BLOCK_RE.sub("\n\n", instructions or "").strip()


def inject_instructions(instructions: str, library: ExperienceLibrary) -> str:
    """Replace (or add, or remove) the experience block of one instruction text."""
    own = strip_block(instructions)
    block = render_block(library)
    if not block:
        return own
    return f"{own}\n\n{block}" if own else block


def parse_block(instructions: str) -> ExperienceLibrary | None:
    """The library rendered in an instruction text, or None when it has no block."""
    match = _BLOCK_RE.search(instructions or "")
    if not match:
        return None
    experiences = []
    for line in match.group(0).splitlines():
        parsed = _LINE_RE.match(line.strip())
        if parsed:
            experiences.append(Experience(id=int(parsed.group(1)), text=parsed.group(2)))
    return ExperienceLibrary(experiences)
