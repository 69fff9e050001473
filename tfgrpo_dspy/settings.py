"""Every setting of `TrainingFreeGRPO`, in one frozen, validated dataclass.

The constructor, the run manifest (what a resume must match), `estimate()`, the docstring and the
CLI all derive from the fields below, so a new setting is added here and nowhere else. Each field's
``doc`` says what it does; ``role`` says whether it changes what a run learns ("run": recorded in the
manifest, a resume must match it) or only how it is executed ("runtime": threads, budgets, logs).
"""

from __future__ import annotations

import difflib
import math
import os
import string
from dataclasses import dataclass, field, fields
from typing import Any, Literal

PLACEMENTS = ("instructions", "input", "both")
INDUCTION_ACTIONS = ("model", "reference")
ROUTE_BY = ("lesson", "example", "answer")
REFERENCE_ACTION_FIELDS = ("reference", "answer")  # what a reference_action template may name
TRACKERS = (None, "mlflow")  # where a compile reports progress besides its log directory (tfgrpo_dspy.run.tracking)
# Each call sees its one most relevant lesson: the best dose for the embedded model on 100 held-out tickets
# (benchmarks/results/lessons_study.md: the house rules at top 1 +25 points [+14, +36] against none and +14
# [+3, +25] against top 2; top 2 +11, top 4 +8 n.s., all ten at once -5 n.s.). None shows every lesson,
# the paper's recipe.
DEFAULT_TOP_K = 1


def setting(default: Any, doc: str, *, role: Literal["run", "runtime"] = "run", minimum: float | None = None,
            exclusive: bool = False) -> Any:
    """A settings field: its default, its documentation, its role, and the least value it may take
    (``exclusive``: and not that value itself)."""
    return field(default=default, metadata={"doc": doc, "role": role, "minimum": minimum, "exclusive": exclusive})


@dataclass(frozen=True)
class TrainingFreeGRPOSettings:
    # -- rollouts ------------------------------------------------------------------------------
    group_size: int = setting(5, "rollouts per training example (G); the paper uses 5 for math", minimum=1)
    epochs: int = setting(3, "passes over the training examples", minimum=1)
    batch_size: int | None = setting(None, "examples per library update; None = all of them (the paper's recipe)",
                                     minimum=1)
    temperature: float = setting(0.7, "sampling temperature of the rollouts", minimum=0)
    seed: int = setting(0, "example order, validation split and rollout ids: reruns are reproducible", minimum=0)
    seed_rollouts: bool = setting(False, "send each rollout a sampling seed derived from its id (OpenAI, vLLM, "
                                  "SGLang, llama.cpp honour it; some providers reject the parameter)")
    ground_truth: bool = setting(True, "False = no labels: reward is agreement with the group's majority "
                                 "answer_field, and the reflection never sees a reference")
    answer_field: str = setting("answer", "the output field voted on when ground_truth=False")
    reference_fields: tuple[str, ...] | None = setting(
        None, "label fields the reflection sees as the reference (e.g. ('answer', 'solution')); None = the labels "
        "that are also output fields of the program. Other labels (metadata) never reach the reflection")
    informative_only: bool = setting(True, "only groups with mixed rewards (std > 0) reach the per-group reflection "
                                     "(and, with failed_groups, those whose rollouts all failed); False = every group")
    failed_groups: bool = setting(True, "with ground truth, a group whose rollouts all failed reaches the per-group "
                                  "reflection too, compared with its reference (False = the paper's filter)")
    failure_score: float = setting(0.0, "reward recorded for a rollout that crashed or whose metric failed; "
                                   "such rollouts never count in a group's statistics")
    # -- the library -------------------------------------------------------------------------------
    max_experiences: int = setting(40, "hard cap on the number of lessons, enforced in code", minimum=1)
    max_words: int = setting(32, "hard cap on the words of one lesson, enforced in code", minimum=1)
    placement: str = setting("instructions", "where the lessons go: 'instructions' (after the predictor's own "
                             "instructions), 'input' (an 'experiences' input field before the task input), or 'both'")
    top_k: int | None = setting(DEFAULT_TOP_K, "give each call only the k lessons most relevant to its input "
                                "(BM25); None = all lessons (the paper's recipe)", minimum=1)
    route_by: str = setting("lesson", "how a call's lessons are chosen: 'lesson' = the top_k lessons whose text is "
                            "most like its input (BM25); 'example' = the lessons verified on the training input "
                            "nearest to its input, none when no lesson fixed that one; 'answer' = the lessons whose "
                            "target is the reference answer of the training input nearest to its input (a lesson's "
                            "target: the answer its sources share); both need verify and ground truth")
    predictors: tuple[str, ...] | None = setting(None, "names of the predictors that carry the library; None = all")
    # -- reflection ----------------------------------------------------------------------------------
    extraction: bool = setting(True, "the per-group comparison (the paper's semantic advantage): one reflection call "
                               "per group that reaches it proposes lessons; False = lessons come from the induction "
                               "only (needs induction and ground truth)")
    summarize: bool = setting(True, "summarize each rollout of an informative group before extraction (the paper); "
                              "False = extraction reads the trajectories (one call per group instead of G+1)")
    max_proposals: int = setting(1, "most lessons one group may propose; none is a valid answer", minimum=1)
    min_support: int = setting(1, "a proposed lesson must come from this many different examples to reach the "
                               "update (near-duplicates are clustered first)", minimum=1)
    max_deletes: int = setting(2, "most lessons one update may delete; a delete must name a lesson a proposal "
                               "called misleading or one with a harmful record", minimum=0)
    generalize_lessons: bool = setting(True, "a lesson that restates its example (rare numbers, names, a copied "
                                       "clause, its answer) gets one rewrite into the general strategy, or is dropped")
    induction: bool = setting(True, "reflection calls that see several failed training examples at once (same "
                              "reference, else nearest inputs) and propose a rule that would fix them all")
    induction_examples: int = setting(4, "most failed examples one induction call sees (at least 3)", minimum=3)
    induction_contrast: int = setting(4, "most examples an induction call is shown to tell its failures apart from: "
                                      "training examples with another reference that the program confuses with "
                                      "theirs, then their nearest inputs; 0 = failures only", minimum=0)
    induction_neighbours: bool | None = setting(
        None, "also induce on sets of failures that do not share a reference, gathered by their input words (their "
        "lessons have no target); None = True unless route_by='answer' (see __post_init__)")
    num_candidates: int = setting(3, "candidate lessons sampled per induction, each a new draw; 0 = no model "
                                  "draws, contrast phrases only (needs induction_phrases=True)", minimum=0)
    induction_temperature: float = setting(0.9, "sampling temperature of the induction draws", minimum=0)
    induction_action: str = setting("model", "who writes an induced rule's action: 'model' = the reflection LM; "
                                    "'reference' = when the failures share one reference answer, code writes "
                                    "'answer with <it>' and the LM's condition is kept (otherwise the LM's action)")
    reference_action: str = setting("answer with {reference}", "how code writes a rule's action when its failures "
                                    "share one reference (induction_action='reference', contrast phrases): "
                                    "{reference} = the reference as 'field: value', {answer} = its value alone; "
                                    "e.g. 'route it to {answer}'")
    induction_phrases: bool = setting(False, "also propose, for each set of failures sharing a reference, the "
                                      "phrase (or two) most of them contain that training inputs with other "
                                      "references mostly lack, as 'When the input contains ..., answer with <it>' "
                                      "(no LM call; see tfgrpo_dspy.reflection.phrases)")
    verify: bool = setting(True, "keep a proposed lesson only if re-running the policy greedily on training examples "
                           "with it fixes more than it breaks (see verify_margin); False = the update step decides")
    verify_margin: int = setting(2, "fixes minus breaks (training examples where the lesson was shown) a lesson needs",
                                 minimum=1)
    verify_precision: float = setting(0.6, "share of the answers a lesson changed where shown that it fixed "
                                      "(fixes / (fixes + breaks + other changes)) it needs to be kept", minimum=0)
    verify_shift: bool | None = setting(None, "drop a lesson that is right on no more of the examples it was shown "
                                        "to than its shift: answering the answer it moved most answers to, to every "
                                        "one of them; None = True unless route_by='answer' (see __post_init__)")
    verify_batch: int = setting(12, "other training examples a lesson is tried on once it fixed one it came from",
                                minimum=0)
    max_trajectory_chars: int | None = setting(8000, "most characters of trajectory one reflection call reads "
                                               "(about 2k tokens, for a 4k context); None = no limit", minimum=1)
    update_chunk_chars: int = setting(6000, "most characters of proposals one update call reads; more proposals "
                                      "are decided in several calls, so the update fits the reflection context",
                                      minimum=1)
    reflection_max_tokens: int | None = setting(768, "cap on the tokens of one reflection answer (a lesson is short); "
                                                "None = the reflection LM's own cap", minimum=1)
    reflection_retries: int = setting(2, "extra attempts for a reflection call whose output is malformed",
                                      role="runtime", minimum=0)
    # -- selection (validation gate) ----------------------------------------------------------------------
    val_fraction: float = setting(0.25, "without a valset, hold out this share of a trainset of >= 8 examples "
                                  "(seeded) to select libraries; 0 = no selection (the paper's recipe)")
    gate: bool = setting(True, "keep a step's edits only if the library they make beats the current one on the "
                         "selection set by gate_margin net wins; False = keep every edit, ship the best scored")
    gate_shift: bool = setting(True, "the step's library must also beat its shift on the selection set by gate_margin "
                               "net wins: answering its most common answer to every selection example (labels, no "
                               "model)")
    gate_margin: int = setting(2, "net wins (examples the candidate gets right that the current library gets wrong, "
                               "minus the reverse) a candidate needs; prompt changes alone move answers both ways",
                               minimum=0)
    gate_budget: int = setting(3, "when a step with several edits fails the gate, most single edits tried alone",
                               minimum=0)
    selection_temperature: float = setting(0.0, "decoding temperature of selection-set scoring (greedy = paired)",
                                           minimum=0)
    prune_margin: int = setting(2, "delete a lesson whose harmful count exceeds its helpful count by this much...",
                                minimum=1)
    min_uses: int = setting(4, "...after at least this many uses", minimum=1)
    # -- runtime ----------------------------------------------------------------------------------------
    num_threads: int = setting(4, "parallel rollouts and reflection calls", role="runtime", minimum=1)
    log_dir: str | None = setting(None, "write every result as it is produced; rerun with the same log_dir to "
                                  "resume", role="runtime")
    max_lm_calls: int | None = setting(None, "stop cleanly after this many billed LM calls", role="runtime", minimum=1)
    max_tokens_budget: int | None = setting(None, "stop cleanly after this many tokens", role="runtime", minimum=1)
    max_cost: float | None = setting(None, "stop cleanly after this many USD (where the LM reports cost)",
                                     role="runtime", minimum=0, exclusive=True)
    max_error_rate: float = setting(0.25, "abort (resumably) once this share of LM calls failed...", role="runtime")
    min_errors: int = setting(10, "...and at least this many did (a bad key or a dead server, not a rare slip)",
                              role="runtime", minimum=1)
    call_timeout: float | None = setting(None, "wall-clock seconds one rollout or reflection call may take",
                                         role="runtime", minimum=0, exclusive=True)
    progress: bool = setting(True, "show tqdm progress bars", role="runtime")
    track: str | None = setting(None, "'mlflow' = also log each step's rewards, selection scores, gate decision, "
                                "tokens by role and library to MLflow (the active run, or a new one; the mlflow "
                                "extra)", role="runtime")

    def __post_init__(self) -> None:
        for spec in fields(self):
            _validate(spec, getattr(self, spec.name))
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.track not in TRACKERS:
            raise ValueError(f"track must be one of {TRACKERS[1:]} or None, got {self.track!r}")
        if self.induction_action not in INDUCTION_ACTIONS:
            raise ValueError(f"induction_action must be one of {INDUCTION_ACTIONS}, got {self.induction_action!r}")
        _validate_reference_action(self.reference_action)
        if self.route_by not in ROUTE_BY:
            raise ValueError(f"route_by must be one of {ROUTE_BY}, got {self.route_by!r}")
        if self.route_by != "lesson" and not (self.verify and self.ground_truth):
            raise ValueError(f"route_by={self.route_by!r} routes each lesson to training examples by their labels and "
                             "its verification: it needs verify=True and ground_truth=True; otherwise use "
                             "route_by='lesson'")
        if self.verify_shift is None:
            # Routed by answer, a lesson is shown where the nearest training input has its target, so one the policy
            # follows to the letter is right exactly where its shift is: the check would drop every followed rule.
            object.__setattr__(self, "verify_shift", self.route_by != "answer")
        if self.induction_neighbours is None:
            # Routed by answer, a lesson shown by its target is the point; a neighbour set's lesson has none. On
            # development seed 11 (six compiles routed by answer) none of 95 such candidates was kept, and they
            # took about a third of the induction draws.
            object.__setattr__(self, "induction_neighbours", self.route_by != "answer")
        if not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature!r}")
        if not 0 <= self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction!r}")
        if self.induction and self.num_candidates == 0 and not self.induction_phrases:
            raise ValueError("num_candidates=0 leaves induction nothing to propose: set induction_phrases=True "
                             "(contrast phrases, no LM call) or num_candidates >= 1")
        if not self.extraction and not (self.induction and self.ground_truth):
            raise ValueError("extraction=False leaves no source of lessons: it needs induction=True and "
                             "ground_truth=True")
        if not 0 <= self.verify_precision <= 1:
            raise ValueError(f"verify_precision must be in [0, 1], got {self.verify_precision!r}")
        if not 0 < self.max_error_rate <= 1:
            raise ValueError(f"max_error_rate must be in (0, 1], got {self.max_error_rate!r}")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> TrainingFreeGRPOSettings:
        """Build from keyword options; an unknown one is a TypeError that suggests the closest name."""
        known = {spec.name for spec in fields(cls)}
        for name in options:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"TrainingFreeGRPO got an unknown setting {name!r}{hint}")
        return cls(**{name: _normalize(value) for name, value in options.items()})

    def manifest(self) -> dict[str, Any]:
        """The settings that decide what a run learns: a resume must match them."""
        return {spec.name: _jsonable(getattr(self, spec.name)) for spec in fields(self)
                if spec.metadata["role"] == "run"}

    def to_dict(self) -> dict[str, Any]:
        return {spec.name: _jsonable(getattr(self, spec.name)) for spec in fields(self)}


def _normalize(value: Any) -> Any:
    """Paths as strings, lists of names as tuples: the forms the frozen settings hold."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _validate_reference_action(template: str) -> None:
    """``reference_action`` must name the reference (``{reference}`` or ``{answer}``) and nothing else."""
    try:
        named = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as error:
        raise ValueError(f"reference_action is not a format template ({error}): {template!r}") from None
    unknown = named - set(REFERENCE_ACTION_FIELDS)
    if unknown or not named:
        raise ValueError("reference_action must name {reference} or {answer} and no other field, got "
                         f"{template!r}")


def _validate(spec: Any, value: Any) -> None:
    """Type and range checks read off the field's annotation and ``minimum``."""
    name, annotation = spec.name, str(spec.type)
    if value is None:
        if "None" in annotation:
            return
        raise ValueError(f"{name} must not be None")
    kind = annotation.split("|")[0].strip()
    minimum = spec.metadata.get("minimum")
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    elif kind in ("int", "float"):
        numeric = (int,) if kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric) or (kind == "float" and math.isnan(value)):
            raise ValueError(f"{name} must be {'an int' if kind == 'int' else 'a number'}, got {value!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
        if minimum == 0 and spec.metadata.get("exclusive") and value == 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
    elif kind.startswith("tuple"):
        if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
            raise TypeError(f"{name} must be a list of names, e.g. ['answer'], got {value!r}")
    elif kind == "str" and (not isinstance(value, str) or not value):
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


def settings_doc() -> str:
    """The settings as a docstring section: one line per field, generated from the dataclass."""
    lines = []
    for spec in fields(TrainingFreeGRPOSettings):
        lines.append(f"    {spec.name} (default {spec.default!r}): {spec.metadata['doc']}")
    return "\n".join(lines)
