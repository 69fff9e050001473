"""Put a library into a program's instructions, and read it back out.

The library is rendered between fixed markers after each selected predictor's own
instructions. Injecting again REPLACES the block, so training (a new library every step)
and deployment see exactly the same placement. The block is the single source of truth
for a program's library: a program saved with ``program.save`` and loaded into a fresh
instance carries it in its instructions, and ``program.experience_library`` parses it back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import dspy

from tfgrpo_dspy.library import Experience, ExperienceLibrary

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


def select_predictors(program: dspy.Module, names: Sequence[str] | None) -> list[tuple[str, dspy.Predict]]:
    """The named predictors to carry the library; all of them when ``names`` is None."""
    found = program.named_predictors()
    if not found:
        raise ValueError(f"the program {type(program).__name__} has no predictors to carry a library")
    if names is None:
        return found
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError("predictors must be a list of predictor names, e.g. ['react', 'extract.predict']")
    known = dict(found)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown predictor name(s) {unknown}; this program has {sorted(known)}")
    return [(n, known[n]) for n in names]


def inject_in_place(program: dspy.Module, library: ExperienceLibrary, predictors: Sequence[str] | None = None) -> None:
    """Rewrite the selected predictors' signatures of ``program`` itself (callers pass a copy)."""
    for _, predictor in select_predictors(program, predictors):
        # with_instructions makes a new Signature class; assigning .instructions would leak into the original.
        predictor.signature = predictor.signature.with_instructions(
            inject_instructions(predictor.signature.instructions, library)
        )
    program.__dict__["experience_library"] = library.copy()


def with_experiences(
    program: dspy.Module, library: ExperienceLibrary, predictors: Sequence[str] | None = None
) -> dspy.Module:
    """A deep copy of ``program`` whose predictors carry ``library`` in their instructions.

    Args:
        program: any DSPy module (Predict, ChainOfThought, ReAct, a multi-module program).
        library: the lessons to inject; an empty library removes a previous block.
        predictors: names from ``program.named_predictors()``; None means every predictor.
    """
    if not isinstance(program, dspy.Module):
        raise TypeError(f"program must be a dspy.Module, got {type(program).__name__}")
    if not isinstance(library, ExperienceLibrary):
        raise TypeError(f"library must be an ExperienceLibrary, got {type(library).__name__}")
    copy = program.deepcopy()
    inject_in_place(copy, library, predictors)
    return copy


def library_of(program: dspy.Module) -> ExperienceLibrary | None:
    """The library a program carries: the one set by injection, else the one parsed from its instructions."""
    stored = program.__dict__.get("experience_library")
    if stored is not None:
        return stored
    for _, predictor in program.named_predictors():
        parsed = parse_block(predictor.signature.instructions)
        if parsed is not None:
            return parsed
    return None


def _get_experience_library(self: dspy.Module) -> ExperienceLibrary | None:
    return library_of(self)


def _set_experience_library(self: dspy.Module, value: ExperienceLibrary | None) -> None:
    self.__dict__["experience_library"] = value


# `program.experience_library` on every DSPy module, so that a fresh instance loaded from a
# saved program exposes the library its instructions carry (DSPy's load only restores state).
if not hasattr(dspy.Module, "experience_library"):
    dspy.Module.experience_library = property(
        _get_experience_library,
        _set_experience_library,
        doc="The tfgrpo-dspy ExperienceLibrary this program carries in its instructions, or None.",
    )
