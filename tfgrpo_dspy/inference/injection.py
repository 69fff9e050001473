"""Put a library into a program's predictors, and read it back out.

The carrying predictors become `ExperiencePredict`, a `dspy.Predict` that holds the library and
shows it on every call in one of three placements:

    "instructions"  a marked block after the predictor's own instructions (the system message)
    "input"         an ``experiences`` input field placed before the task inputs (the user message)
    "both"          both of the above

With ``top_k`` (default 1, `DEFAULT_TOP_K`), each call shows only the k lessons most relevant to its
inputs (BM25 over the lesson texts, query = the input values); ``top_k=None`` shows every lesson. A library
with routes (``route_by="example"``) shows each call the lessons of the training input nearest to its inputs
(BM25 over the routes' inputs), at most ``top_k`` of them, and nothing when that input has none; a rollout of
a training example is routed by the nearest OTHER training input (`leaving_out`), as a new input would be.
Training and deployment use the same class, so the model sees the lessons in exactly the same place.
The library is saved with the program (``program.save``) as part of each predictor's state. Loading it
the DSPy way, ``Program().load(path)`` into a plain program of the same shape, gives back carriers that
show the lessons exactly as in training (placement and top_k retrieval included) in any process that has
imported ``tfgrpo_dspy``: see `SavedLibrarySlot`. `load_program` is the same load as one explicit call that
fails loudly when a predictor could not become a carrier. ``dspy.load`` of a whole-program save
(``save_program=True``) unpickles the carriers themselves. With the instructions placement and every
lesson shown (``top_k=None``, or no more than k lessons) the block is also in the saved instructions, so
even a process without ``tfgrpo_dspy`` shows it; with retrieval it cannot.
`library_of` reads a program's library back from any of these.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.primitives.module import set_attribute_by_name

from tfgrpo_dspy.inference.block import (
    BLOCK_END,
    BLOCK_PREAMBLE,
    BLOCK_START,
    inject_instructions,
    parse_block,
    render_block,
    strip_block,
)
from tfgrpo_dspy.inference.retrieval import (
    RETRIEVAL,
    ROUTING,
    LuceneBM25,
    collect_shown_lessons,
    leaving_out,
    note_shown,
    relevant_lessons,
    retrieval_words,
    route_text,
    routed_lessons,
    shown_lessons,
)
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.settings import DEFAULT_TOP_K, PLACEMENTS

# The block (`tfgrpo_dspy.inference.block`) and the choice of lessons (`tfgrpo_dspy.inference.retrieval`) live in
# modules of their own; their names are re-exported here, where callers have always imported them.
__all__ = [
    "BLOCK_END", "BLOCK_PREAMBLE", "BLOCK_START", "EXPERIENCES_DESC", "EXPERIENCES_FIELD", "RETRIEVAL", "ROUTING",
    "ExperiencePredict", "LuceneBM25", "SavedLibrarySlot", "collect_shown_lessons", "inject_instructions",
    "leaving_out", "library_of", "load_program", "parse_block", "placement_of", "relevant_lessons",
    "render_block", "retrieval_words", "route_text", "routed_lessons", "select_predictors", "shown_lessons",
    "strip_block", "with_experiences",
]

EXPERIENCES_FIELD = "experiences"
EXPERIENCES_DESC = "lessons learned from earlier attempts at this task; apply those whose condition fits this input"
_STATE_KEY = "tfgrpo_experiences"


class ExperiencePredict(dspy.Predict):
    """A `dspy.Predict` that shows an experience library on every call (see the module docstring)."""

    experience_library: ExperienceLibrary
    placement: str
    top_k: int | None

    @classmethod
    def carrying(cls, predictor: dspy.Predict, library: ExperienceLibrary, placement: str, top_k: int | None
                 ) -> ExperiencePredict:
        """A copy of ``predictor`` (its signature, demos, LM and config) that carries ``library``."""
        new = cls.__new__(cls)
        new.__dict__.update(predictor.__dict__)
        new.experience_library = library.copy()
        new.placement = placement
        new.top_k = top_k
        base = strip_block(new.signature.instructions)
        if EXPERIENCES_FIELD in new.signature.input_fields:
            new.signature = new.signature.delete(EXPERIENCES_FIELD)
        # The stored signature is what plain DSPy saves: the static block when there is one.
        static = placement == "instructions" and not library.routes and (top_k is None or len(library) <= top_k)
        new.signature = new.signature.with_instructions(
            inject_instructions(base, library) if static else base)
        return new

    def call_signature(self, inputs: dict[str, Any]) -> tuple[type[dspy.Signature], dict[str, Any]]:
        """The signature and inputs of one call: the lessons (all, or the top k for these inputs) in place."""
        shown = shown_lessons(self.experience_library, route_text(inputs), self.top_k)
        note_shown(shown.ids)
        signature = self.signature.with_instructions(strip_block(self.signature.instructions))
        if not len(shown):
            return signature, inputs
        if self.placement in ("instructions", "both"):
            signature = signature.with_instructions(inject_instructions(signature.instructions, shown))
        if self.placement in ("input", "both"):
            signature = signature.prepend(EXPERIENCES_FIELD, dspy.InputField(desc=EXPERIENCES_DESC), type_=str)
            inputs = {EXPERIENCES_FIELD: shown.render(), **inputs}
        return signature, inputs

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        if "signature" in kwargs:  # an explicit per-call signature wins, as in DSPy
            return super().forward(**kwargs)
        signature, inputs = self.call_signature(kwargs)
        return super().forward(signature=signature, **inputs)

    async def aforward(self, **kwargs: Any) -> dspy.Prediction:
        if "signature" in kwargs:
            return await super().aforward(**kwargs)
        signature, inputs = self.call_signature(kwargs)
        return await super().aforward(signature=signature, **inputs)

    def dump_state(self, json_mode: bool = True) -> dict[str, Any]:
        state = super().dump_state(json_mode=json_mode)
        # "retrieval" names how top_k lessons are chosen: a saved evaluation of a program made under another
        # retrieval has another fingerprint (`checkpoint.fingerprint`), so its answers are not reused.
        state[_STATE_KEY] = {"library": self.experience_library.to_dict(include_audit=False),
                             "placement": self.placement, "top_k": self.top_k,
                             "retrieval": ROUTING if self.experience_library.routes else RETRIEVAL}
        return state

    def load_state(self, state: dict[str, Any], **kwargs: Any) -> ExperiencePredict:
        saved = state.get(_STATE_KEY)
        super().load_state({k: v for k, v in state.items() if k != _STATE_KEY}, **kwargs)
        if saved is not None:
            self.experience_library = ExperienceLibrary.from_dict(saved["library"], origin="saved program")
            self.placement, self.top_k = saved["placement"], saved["top_k"]
        return self


class SavedLibrarySlot:
    """The ``tfgrpo_experiences`` attribute of every `dspy.Predict`: where a saved library lands on load.

    DSPy's ``Predict.load_state`` sets each key of a predictor's saved state that it does not know as an
    attribute, and has no other hook. A saved `ExperiencePredict` keeps its library under this key, so this
    data descriptor, installed on ``dspy.Predict`` when this module is imported, sees the assignment: a plain
    ``dspy.Predict`` that loads one becomes an `ExperiencePredict` in place (same object, same dict) and shows
    the lessons on every call as in training. Without it the lessons sat unused in the predictor's state
    while `library_of` still found them. A subclass of Predict is left as it is, with a warning: turning it
    into a carrier would drop its own behaviour.
    """

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        try:
            return instance.__dict__[_STATE_KEY]
        except KeyError:
            raise AttributeError(_STATE_KEY) from None

    def __set__(self, instance: dspy.Predict, saved: Any) -> None:
        if type(instance) is dspy.Predict and _is_saved_library(saved):
            _become_carrier(instance, saved)
            return
        instance.__dict__[_STATE_KEY] = saved
        if _is_saved_library(saved) and not isinstance(instance, ExperiencePredict):
            warnings.warn(f"a {type(instance).__name__} loaded a saved experience library but is not a plain "
                          "dspy.Predict, so it does not show the lessons on its calls; carry them with "
                          "tfgrpo_dspy.with_experiences(program, tfgrpo_dspy.library_of(program), ...)", stacklevel=2)

    def __delete__(self, instance: dspy.Predict) -> None:
        instance.__dict__.pop(_STATE_KEY, None)


def _is_saved_library(saved: Any) -> bool:
    return isinstance(saved, dict) and {"library", "placement", "top_k"} <= set(saved)


def _become_carrier(predictor: dspy.Predict, saved: dict[str, Any]) -> None:
    """Turn a loaded plain Predict into the carrier that was saved (its signature and demos load as usual)."""
    predictor.__class__ = ExperiencePredict
    predictor.experience_library = ExperienceLibrary.from_dict(saved["library"], origin="saved program")
    predictor.placement, predictor.top_k = saved["placement"], saved["top_k"]


setattr(dspy.Predict, _STATE_KEY, SavedLibrarySlot())


def load_program(program: dspy.Module, path: str | Path) -> dspy.Module:
    """``program.load(path)`` for a saved compiled program; returns ``program``, its lessons shown on every call.

    Plain DSPy loading does the same once ``tfgrpo_dspy`` is imported (`SavedLibrarySlot`); this call makes the
    dependency explicit and raises, naming the predictor, where a saved library would not be shown.
    """
    if not isinstance(program, dspy.Module):
        raise TypeError(f"program must be a dspy.Module, got {type(program).__name__}")
    program.load(str(path))
    unshown = [name for name, predictor in program.named_predictors()
               if not isinstance(predictor, ExperiencePredict) and _is_saved_library(vars(predictor).get(_STATE_KEY))]
    if unshown:
        raise ValueError(f"{path}: predictor(s) {unshown} loaded a library but are not plain dspy.Predict, so they "
                         "would not show it; wrap the program with tfgrpo_dspy.with_experiences instead")
    return program


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


def with_experiences(
    program: dspy.Module,
    library: ExperienceLibrary,
    predictors: Sequence[str] | None = None,
    *,
    placement: str = "instructions",
    top_k: int | None = DEFAULT_TOP_K,
) -> dspy.Module:
    """A deep copy of ``program`` whose predictors show ``library`` on every call.

    Args:
        program: any DSPy module (Predict, ChainOfThought, ReAct, a multi-module program).
        library: the lessons; an empty library removes a previous one.
        predictors: names from ``program.named_predictors()``; None means every predictor.
        placement: "instructions", "input" or "both" (see the module docstring).
        top_k: show each call only its k most relevant lessons (default 1, see `DEFAULT_TOP_K`); None shows
            all.
    """
    if not isinstance(program, dspy.Module):
        raise TypeError(f"program must be a dspy.Module, got {type(program).__name__}")
    if not isinstance(library, ExperienceLibrary):
        raise TypeError(f"library must be an ExperienceLibrary, got {type(library).__name__}")
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
    copy = program.deepcopy()
    for name, predictor in select_predictors(copy, predictors):
        carrier = ExperiencePredict.carrying(predictor, library, placement, top_k)
        if predictor is copy:  # the program is a bare Predict (named "self"): it is the carrier
            copy = carrier
        else:
            set_attribute_by_name(copy, name, carrier)
    copy.experience_library = library.copy()  # a plain attribute of this copy, for convenience
    return copy


def library_of(program: dspy.Module) -> ExperienceLibrary | None:
    """The library a program carries: from its `ExperiencePredict` predictors, from a predictor state loaded
    into a plain predictor, or parsed from an instruction block; None when it carries none."""
    for _, predictor in program.named_predictors():
        if isinstance(predictor, ExperiencePredict):
            return predictor.experience_library.copy()
        saved = getattr(predictor, _STATE_KEY, None)  # a plain Predict that loaded a saved ExperiencePredict
        if isinstance(saved, dict):
            return ExperienceLibrary.from_dict(saved["library"], origin="saved program")
        parsed = parse_block(predictor.signature.instructions)
        if parsed is not None:
            return parsed
    return None


def placement_of(program: dspy.Module) -> tuple[str, int | None] | None:
    """The (placement, top_k) of a program's library, or None when it carries none."""
    for _, predictor in program.named_predictors():
        if isinstance(predictor, ExperiencePredict):
            return predictor.placement, predictor.top_k
        saved = getattr(predictor, _STATE_KEY, None)
        if isinstance(saved, dict):
            return saved["placement"], saved["top_k"]
    return None
