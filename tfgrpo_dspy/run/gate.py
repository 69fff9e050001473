"""The selection gate of one step: a step's edits stay only if the edited library earns its place.

The candidate library (the current one plus the step's edits) is scored on the selection set against
the current one, paired (`tfgrpo_dspy.run.selection`). When a step with several edits fails, each edit is
tried alone (at most ``gate_budget``), so one bad lesson does not sink good ones. Rejected edits stay in
the kept library's audit log with the reason that rejected them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tfgrpo_dspy.library.edits import AuditEntry, EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.run.results import Candidate
from tfgrpo_dspy.run.selection import GateDecision, LibraryScore, Selector
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings
from tfgrpo_dspy.stats import one_sided_sign_test


@dataclass(frozen=True)
class Edit:
    """One applied edit of a step, the training examples its lesson came from and, in a library with routes, the
    training inputs its lesson is routed to (``routes``) among all of them (``everyone``)."""

    op: EditOp
    sources: tuple[int, ...] = ()
    routes: tuple[str, ...] = ()
    everyone: tuple[str, ...] = ()

    @classmethod
    def of(cls, entry: AuditEntry, library: ExperienceLibrary) -> Edit:
        """The edit an applied audit entry made to ``library`` (its lesson's sources and routes read from it)."""
        op = EditOp(op=entry.op, id=entry.id, ids=list(entry.ids) if entry.ids else None, text=entry.text,
                    reason=entry.reason)
        if entry.result_id not in library:
            return cls(op)
        routes = tuple(r.input for r in library.routes if entry.result_id in r.lessons)
        return cls(op, library[entry.result_id].sources, routes,
                   tuple(r.input for r in library.routes) if routes else ())

    def apply_to(self, library: ExperienceLibrary, step: int) -> None:
        """Make this edit on ``library``, its routes included."""
        entry = library.apply([self.op], step=step, sources=self.sources).entries[-1]
        if self.routes and entry.status == "applied" and entry.result_id in library:
            library.route(entry.result_id, self.routes, everyone=self.everyone)


@dataclass
class GateOutcome:
    """The library kept after a step, the gate's label for the step, and every candidate scored on the way."""

    library: ExperienceLibrary
    label: str
    candidates: list[Candidate] = field(default_factory=list)


def candidate_record(step: int, label: str, library: ExperienceLibrary, score: LibraryScore, accepted: bool,
                     reason: str, decision: GateDecision | None = None, base: LibraryScore | None = None
                     ) -> Candidate:
    """A scored library as the result lists it; ``base`` is the library's score it was compared with."""
    comparison = decision.comparison if decision is not None else None
    return Candidate(step=step, label=label, score=score.mean, accepted=accepted, size=len(library),
                     tokens=library.approx_tokens(), fingerprint=score.fingerprint,
                     net_wins=comparison.net_wins if comparison else None,
                     wins=comparison.wins if comparison else None, losses=comparison.losses if comparison else None,
                     p_one_sided=one_sided_sign_test(comparison.wins, comparison.losses) if comparison else None,
                     reason=reason, compared_with=base.fingerprint if base is not None else None)


@dataclass(frozen=True)
class EditTrial:
    """What happened to one edit of a rejected step: kept or not, and the trial that decided it, in words."""

    kept: bool
    detail: str


class StepGate:
    """Decides which of a step's edits the library keeps."""

    def __init__(self, settings: TrainingFreeGRPOSettings, selector: Selector | None):
        self.settings = settings
        self.selector = selector

    def decide(self, step: int, current: ExperienceLibrary, candidate: ExperienceLibrary, edits: list[Edit]
               ) -> GateOutcome:
        """The library to keep after this step's edits, and every candidate scored on the way."""
        if candidate.same_lessons(current):
            return GateOutcome(current, "no change")
        if self.selector is None:
            return GateOutcome(candidate, "not gated")
        gate = self.settings.gate
        current_score = self.selector.score(current, f"before step {step}")
        scored = self.selector.score(candidate, f"step {step}")
        decision = self.selector.gate(current_score, scored)
        accepted = decision.passed or not gate
        reason = decision.reason if gate else f"not gated (gate=False): {decision.reason}"
        outcome = GateOutcome(candidate if accepted else current, "accepted" if accepted else "rejected",
                              [candidate_record(step, f"step {step}", candidate, scored, accepted, reason, decision,
                                                current_score)])
        if accepted:
            return outcome
        trials = self._try_single_edits(step, edits, outcome) if len(edits) > 1 and self.settings.gate_budget else {}
        _audit_refused(step, edits, outcome, trials, decision.reason)
        return outcome

    def _try_single_edits(self, step: int, edits: list[Edit], outcome: GateOutcome) -> dict[int, EditTrial]:
        """Try the step's edits one at a time against the library kept so far (at most gate_budget).

        Returns each tried edit's own result, by its position in ``edits``, so that the audit log quotes the
        trial that decided it."""
        tried: dict[int, EditTrial] = {}
        for number, edit in enumerate(edits, start=1):
            if len(tried) >= self.settings.gate_budget:
                break
            single = outcome.library.copy()
            edit.apply_to(single, step)
            if single.same_lessons(outcome.library):
                tried[number - 1] = EditTrial(False, "not tried alone: it changes nothing on the library kept so far")
                continue
            label = f"step {step}, edit {number} alone"
            base_score = self.selector.score(outcome.library, f"before {label}")
            scored = self.selector.score(single, label)
            decision = self.selector.gate(base_score, scored)
            outcome.candidates.append(candidate_record(step, label, single, scored, decision.passed, decision.reason,
                                                       decision, base_score))
            tried[number - 1] = EditTrial(decision.passed, f"rejected by the selection gate alone ({label}): "
                                                           f"{decision.reason}")
            if decision.passed:
                outcome.library = single
                outcome.label = "partly accepted"
        return tried


def _audit_refused(step: int, edits: list[Edit], outcome: GateOutcome, trials: dict[int, EditTrial],
                   combined_reason: str) -> None:
    """Each edit the kept library does not have goes into its audit log as refused, with the trial that refused
    it: its own when it was tried alone, else the step's combined candidate. An edit kept alone is not refused
    (its "applied" entry is already in the log)."""
    untried = ("rejected by the selection gate: " if len(edits) == 1 else
               "rejected by the selection gate with the step's other edits (not tried alone): ")
    for number, edit in enumerate(e.op for e in edits):
        trial = trials.get(number)
        if trial is not None and trial.kept:
            continue
        detail = trial.detail if trial is not None else untried + combined_reason
        outcome.library.audit_log.append(AuditEntry(
            step, edit.op, "refused", detail, id=edit.id, ids=tuple(edit.ids) if edit.ids else None, text=edit.text,
            reason=edit.reason))
