"""Did the gate's decisions hold on the held-out rows? Each decision against the library it was compared with.

The gated tfgrpo run compared each candidate with the library it had then (the current library for a
step's candidate, the library kept so far for an edit tried alone). Here both are scored on the held-out
rows and compared the same way, paired: a decision is confirmed when the paired test agrees with it
(an accepted library measurably better there, a rejected one measurably worse), contradicted when the
test says the opposite, and undecided when it finds no measurable change. The "after step N" libraries
and the initial one are no decisions (accepted by construction) and are not counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import dspy

from comparison.compile_details import HeldOutCheck
from comparison.data import Split
from comparison.evaluate import evaluate_held_out
from comparison.metering import metered_copy
from comparison.presets import Budget
from comparison.records import SeedRun
from tfgrpo_dspy import ExperienceLibrary, compare_paired, with_experiences
from tfgrpo_dspy.library.jsonio import read_json
from tfgrpo_dspy.run.results import Candidate

logger = logging.getLogger("compare")

GATE_CHECKED_METHODS = ("tfgrpo",)  # its student has no library, so `none` is its initial library


def gate_decisions(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The candidates the gate decided on: neither the initial library nor an "after step N" library."""
    return [c for c in candidates if c.step > 0 and not c.label.startswith("after step")]


def selection_libraries(log_dir: Path) -> dict[str, ExperienceLibrary]:
    """Every library a TrainingFreeGRPO run scored on its selection set, by fingerprint, from its run log."""
    libraries = {}
    for path in sorted((log_dir / "selection").glob("*.json")):
        record = read_json(path)
        if isinstance(record, dict) and "library_file" in record:
            libraries[path.stem] = ExperienceLibrary.from_dict(record["library_file"], origin=str(path))
    return libraries


def gate_check_stage(run: SeedRun, split: Split, budget: Budget, lm: dspy.LM, log_dir: Path,
                     progress: bool, checkpoint_root: Path | None = None) -> Iterator[SeedRun]:
    """Score on the held-out rows each decision's library and the one it was compared with; yields the run after
    each one (to save it).

    The initial library's held-out scores are ``none``'s and the shipped library's are the method's own, so
    neither is scored again; at most ``budget.gate_checks`` others are. Each is recorded in
    ``details.held_out_checks`` by fingerprint: its per-problem scores, or why it was not scored.
    """
    tfgrpo = run.details.tfgrpo
    if tfgrpo is None:
        return
    settings = run.details.settings if isinstance(run.details.settings, dict) else {}
    libraries = selection_libraries(log_dir)
    initial = next((c.fingerprint for c in tfgrpo.candidates if c.step == 0), None)
    scored = sum(check.scores is not None for check in run.details.held_out_checks.values())
    for candidate in gate_decisions(tfgrpo.candidates):
        for fingerprint, label in ((candidate.compared_with, f"before {candidate.label}"),
                                   (candidate.fingerprint, candidate.label)):
            if fingerprint is None or fingerprint == initial or fingerprint in run.details.held_out_checks:
                continue
            library = libraries.get(fingerprint)
            if library is None:
                check = HeldOutCheck(label, skipped="its library is not in the run log")
            elif list(library.texts) == list(run.details.library or ()):
                check = HeldOutCheck(label, shipped=True)
            elif scored >= budget.gate_checks:
                check = HeldOutCheck(label, skipped=f"gate_checks={budget.gate_checks} reached")
            else:
                logger.info("[%s] seed %d: held-out check of %r (%d lessons) ...", split.task, run.seed, label,
                            len(library))
                program = with_experiences(split.make_program(), library, settings.get("predictors"),
                                           placement=settings.get("placement", "instructions"),
                                           top_k=settings.get("top_k"))
                evaluation, meter = metered_copy(lm, "evaluation")
                started = time.perf_counter()
                report = evaluate_held_out(program, split, budget, evaluation, run.seed, progress,
                                           checkpoint_root / fingerprint if checkpoint_root else None)
                check = HeldOutCheck(label, scores=tuple(e.mean_score for e in report.examples),
                                     eval_seconds=round(time.perf_counter() - started, 1), usage=meter.usage)
                scored += 1
            run = replace(run, details=run.details.with_check(fingerprint, check))
            yield run


def gate_check_rows(run: SeedRun, initial_scores: Sequence[float] | None) -> list[dict[str, Any]]:
    """Each decision of one tfgrpo run beside its held-out result against the library it was compared with.

    ``initial_scores`` are the held-out scores of the run's initial library (``none``'s of the same seed).
    """
    tfgrpo, checks = run.details.tfgrpo, run.details.held_out_checks
    if tfgrpo is None or not checks:
        return []
    initial = next((c.fingerprint for c in tfgrpo.candidates if c.step == 0), None)
    own = [p.score for p in run.per_problem]

    def held_out(fingerprint: str | None) -> tuple[list[float] | None, str | None]:
        """A library's held-out scores, or why there are none."""
        if fingerprint is None:
            return None, "the library it was compared with is not recorded (a run before Candidate.compared_with)"
        if fingerprint == initial:
            return (list(initial_scores) if initial_scores is not None else None), None
        check = checks.get(fingerprint)
        if check is None:
            return None, "not scored"
        if check.shipped:
            return own, None
        return (list(check.scores) if check.scores is not None else None), check.skipped

    rows = []
    for candidate in gate_decisions(tfgrpo.candidates):
        scores, skipped = held_out(candidate.fingerprint)
        base, base_skipped = held_out(candidate.compared_with)
        row: dict[str, Any] = {
            "label": candidate.label, "selection_score": candidate.score, "accepted": candidate.accepted,
            "net_wins": candidate.net_wins, "size": candidate.size, "compared_with": candidate.compared_with,
            "compared_with_initial": candidate.compared_with == initial, "skipped": skipped or base_skipped,
            "held_out": None, "vs_compared": None, "held": None}
        if scores and base and len(scores) == len(base):
            comparison = compare_paired(base, scores)
            # Confirmed (True) or contradicted (False) only by a measurable change; None: the rows cannot tell.
            held = ((comparison.delta > 0) == candidate.accepted) if comparison.significant else None
            row.update(held_out=sum(scores) / len(scores), skipped=None,
                       vs_compared={**comparison.to_dict(), "verdict": comparison.verdict()}, held=held)
        rows.append(row)
    return rows
